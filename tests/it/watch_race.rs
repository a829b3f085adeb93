//! A watch repair that races a person's `systemctl stop` (issue 32, item 11): the person's stop
//! job cancels the repair's start job ("Job for X canceled"), the watch run fails, and nothing
//! the repair wrote is left for inotify to see. The failed repair is tried again within
//! seconds, not left to the ten-minute drift timer these services run with.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::service::Service;
use crate::support::{sandbox, systemctl_user, wait_until};

/// Removes the unit file however the test ends.
struct Cleanup(std::path::PathBuf, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("systemctl")
            .args(["--user", "disable", "--now", &self.1])
            .status();
        if std::fs::remove_file(&self.0).is_ok() {
            let _ = Command::new("systemctl")
                .args(["--user", "daemon-reload"])
                .status();
        }
    }
}

fn watch_runs(node: &Service) -> Vec<Value> {
    let runs = node.runs().into_iter();
    runs.filter(|r| r["trigger"] == "watch").collect()
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_repair_whose_job_a_person_stop_cancels_is_retried_within_seconds() {
    raced("race-stop", &["stop"]);
}

/// As seen under PID 1 after `systemctl disable --now`: the unit is enabled and started again.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_repair_whose_job_a_person_disable_now_cancels_is_retried_within_seconds() {
    raced("race-disable", &["disable", "--now"]);
}

/// A declared unit (enabled, active, slow to start) stopped and touched by a person, whose
/// `person` command (`systemctl --user ...`) then comes while the watcher's repair starts it.
fn raced(label: &str, person: &[&str]) {
    let sb = sandbox();
    let unit = format!("mesh-it-{}-{label}.service", std::process::id());
    // A slow start: the repair's start job is still running when the person's stop comes.
    let content = "[Service]\nExecStartPre=/bin/sleep 3\nExecStart=/bin/sleep infinity\n\
                   [Install]\nWantedBy=default.target\n";
    let path = sb.unit_dir.join(&unit);
    let _cleanup = Cleanup(path.clone(), unit.clone());
    let declaration = serde_json::json!({"schema": 1, "units": {&unit: {"content": content,
        "enabled": true, "active": true}}});
    let host = sb.host(label, r#""interval_secs": 600"#);
    let file = host.declaration("d.json", &declaration.to_string());
    host.apply(&file, 0);
    assert_eq!(systemctl_user(&["is-active", &unit]), "active");
    let node = Service::start(host);
    let wait = Duration::from_secs(20);
    let watching = || {
        node.status()["service"]["watch"]["directories"]
            .as_u64()
            .is_some_and(|n| n >= 2)
    };
    assert!(wait_until(wait, watching), "{}", node.log());

    // The person stops the unit and touches its file (a hint, the content as declared): the
    // watcher finds it stopped and starts it; while that start runs, the person stops it again,
    // which cancels the repair's job. The repair writes nothing, so no event follows it.
    systemctl_user(&["stop", &unit]);
    let touched = Command::new("touch").arg(&path).status().expect("touch");
    assert!(touched.success());
    let activating = || systemctl_user(&["is-active", &unit]) == "activating";
    assert!(
        wait_until(wait, activating),
        "the repair's start never began: {}",
        node.log()
    );
    let stop = Command::new("systemctl")
        .arg("--user")
        .args(person)
        .arg(&unit)
        .status()
        .expect("systemctl");
    let failed_then_repaired = || {
        let runs = watch_runs(&node);
        let failed = runs.iter().position(|r| r["outcome"] == "failed");
        failed.is_some_and(|at| runs[at + 1..].iter().any(|r| r["outcome"] == "converged"))
    };
    assert!(
        wait_until(wait, || failed_then_repaired()
            && systemctl_user(&["is-active", &unit]) == "active"
            && systemctl_user(&["is-enabled", &unit]) == "enabled"),
        "person's {person:?}: {stop}; is-active {}, is-enabled {}; watch runs {:#?}\n{}",
        systemctl_user(&["is-active", &unit]),
        systemctl_user(&["is-enabled", &unit]),
        watch_runs(&node),
        node.log()
    );
    assert_eq!(std::fs::read_to_string(Path::new(&path)).unwrap(), content);
}

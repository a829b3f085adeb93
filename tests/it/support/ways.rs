//! One scenario, both ways a declaration reaches a host: `mesh-host apply` on the command line,
//! and the service (`mesh-host run`, what every node runs) receiving it from the reference
//! control plane. Either way a run comes back as its run record (`status --json`'s `runs`), so a
//! test asserts the same things of both; `Way::BOTH` runs it twice.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::control_plane::{ControlPlane, CpConfig};
use super::pki::Pki;
use super::service::Service;
use super::{wait_until, Output, Scratch};

/// How the declaration reaches the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `mesh-host apply FILE`.
    Apply,
    /// `mesh-host run`, the declaration pushed by the reference control plane.
    Service,
}

impl Way {
    pub const BOTH: [Way; 2] = [Way::Apply, Way::Service];

    /// For labels and messages: `apply` or `run`.
    pub fn name(self) -> &'static str {
        match self {
            Way::Apply => "apply",
            Way::Service => "run",
        }
    }
}

/// What one run came to.
#[derive(Debug)]
pub struct Ran {
    /// Its run record, as `status --json` lists it (the same shape both ways: `failures`,
    /// `changes`, `outcome`, `retries`...; `support::failure` reads it as it reads a report);
    /// `Value::Null` when `apply` ended before it recorded one.
    pub record: Value,
    /// `apply`'s output (exit code, `--json` report); `None` for the service.
    pub output: Option<Output>,
}

/// How a host is started: environment variables and umask for mesh-host (`apply` or `run`).
#[derive(Debug, Clone, Default)]
pub struct Launch {
    pub env: Vec<(String, PathBuf)>,
    pub umask: Option<u32>,
}

impl Launch {
    /// The environment as `Service` takes it.
    fn env(&self) -> Vec<(&str, &std::path::Path)> {
        let env = self.env.iter();
        env.map(|(k, v)| (k.as_str(), v.as_path())).collect()
    }
}

/// A scratch host driven one way. For the service: its config gains a link to a new reference
/// control plane (and, unless it sets them, a drift timer of 600 s and no watcher, so the only
/// runs are the ones the test causes), and the service runs until the driver is dropped.
pub struct Driver {
    pub way: Way,
    launch: Launch,
    /// The apply way's host; the service's is in `service`.
    host: Option<Scratch>,
    service: Option<Service>,
    cp: Option<ControlPlane>,
    revision: u64,
}

/// How long a run may take before the driver gives up on it.
pub const RUN_WAIT: Duration = Duration::from_secs(60);

impl Driver {
    pub fn start(way: Way, host: Scratch) -> Driver {
        Driver::start_with(way, host, Launch::default())
    }

    pub fn start_with(way: Way, host: Scratch, launch: Launch) -> Driver {
        let mut driver = Driver {
            way,
            launch,
            host: None,
            service: None,
            cp: None,
            revision: 0,
        };
        match way {
            Way::Apply => driver.host = Some(host),
            Way::Service => {
                let pki = Pki::new();
                let cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
                link(&host, &pki, &cp);
                let env = driver.launch.env();
                let service = Service::start_with_umask(host, &env, driver.launch.umask);
                assert!(
                    cp.wait_for_connections(1, RUN_WAIT),
                    "the service never connected\n{}",
                    service.log()
                );
                driver.cp = Some(cp);
                driver.service = Some(service);
            }
        }
        driver
    }

    pub fn host(&self) -> &Scratch {
        match (&self.host, &self.service) {
            (Some(host), _) => host,
            (None, Some(service)) => &service.host,
            (None, None) => unreachable!("a driver has a host or a service"),
        }
    }

    /// The control plane the service is linked to, when driven that way.
    pub fn control_plane(&self) -> Option<&ControlPlane> {
        self.cp.as_ref()
    }

    /// The service, when driven that way.
    pub fn service(&mut self) -> Option<&mut Service> {
        self.service.as_mut()
    }

    /// Converges to `json` (a declaration) and waits for its run; what it came to.
    pub fn converge(&mut self, json: &str) -> Ran {
        match self.way {
            Way::Apply => {
                let before = self.last_run();
                let child = self.begin(json).expect("apply started");
                let output = Output::from(child.wait_with_output().expect("apply"));
                // None when the apply ended before it recorded its run (killed, stopped).
                let record = Some(self.last_run())
                    .filter(|last| *last != before)
                    .unwrap_or_default();
                Ran {
                    record,
                    output: Some(output),
                }
            }
            Way::Service => {
                let _ = self.begin(json);
                let record = self.wait_for_run(RUN_WAIT);
                Ran {
                    record,
                    output: None,
                }
            }
        }
    }

    /// Starts converging `json` and returns at once, for a test that stops or kills the host
    /// mid-run: the `apply` process, or `None` for the service (the control plane pushed it;
    /// `wait_for_run` waits for its record, `service()` signals it).
    pub fn begin(&mut self, json: &str) -> Option<Child> {
        self.revision += 1;
        match self.way {
            Way::Apply => {
                let host = self.host();
                let file = host.declaration(&format!("declaration-{}.json", self.revision), json);
                let mut command = host.command(&["--json", "apply", file.to_str().expect("utf-8")]);
                for (key, value) in &self.launch.env {
                    command.env(key, value);
                }
                if let Some(mask) = self.launch.umask {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: the closure runs in the child between fork and exec and calls umask
                    // alone, which is async-signal-safe and allocates nothing.
                    unsafe {
                        command.pre_exec(move || {
                            libc::umask(mask as libc::mode_t);
                            Ok(())
                        });
                    }
                }
                let child = command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn mesh-host apply");
                Some(child)
            }
            Way::Service => {
                let cp = self.cp.as_ref().expect("a control plane");
                cp.declare(self.revision, json);
                None
            }
        }
    }

    /// The revision the last `converge` or `begin` gave its declaration (the service's way).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Waits for the record of the run of the last declaration: the last run whose revision is
    /// the driver's (the service's way; `apply`'s is recorded when it exits).
    pub fn wait_for_run(&self, wait: Duration) -> Value {
        let revision = self.revision;
        let mut found = None;
        let seen = wait_until(wait, || {
            found = self
                .runs()
                .into_iter()
                .rev()
                .find(|r| r["revision"] == revision);
            found.is_some()
        });
        let log = self.service.as_ref().map(Service::log).unwrap_or_default();
        assert!(seen, "no run of revision {revision} recorded\n{log}");
        // The run records itself, then counts itself in the statistics, still under the
        // store's lock: the run is over once the lock is free.
        let free = wait_until(wait, || store_lock_free(&self.host().state()));
        assert!(
            free,
            "the run of revision {revision} never let go of the store's lock\n{log}"
        );
        found.unwrap_or_default()
    }

    /// The next run of the declaration in force, after a stop or a crash: `reconcile` on the
    /// command line; the service started again (its start run, or the control plane's declaration
    /// again if the last one never came into force). Its record, once it converged the last
    /// declaration, or the last one seen (with the service's log) after `RUN_WAIT`.
    pub fn rerun(&mut self) -> Value {
        if self.way == Way::Apply {
            let out = self.host().run(&["reconcile"]);
            eprintln!("reconcile: exit {}", out.code);
            return self.last_run();
        }
        let before = self.last_run();
        let revision = self.revision;
        let env = self.launch.env();
        if let Some(service) = self.service.as_mut() {
            service.restart(&env);
        }
        let mut last = Value::Null;
        let converged = wait_until(RUN_WAIT, || {
            let runs = self.runs();
            last = runs.last().cloned().unwrap_or_default();
            // The runs after the last one before the restart (the history keeps the latest 50).
            let new = runs.iter().rposition(|r| *r == before).map_or(0, |i| i + 1);
            let found = runs
                .into_iter()
                .skip(new)
                .find(|r| r["revision"] == revision && r["outcome"] == "converged");
            if let Some(run) = found {
                last = run;
                return true;
            }
            false
        });
        if !converged {
            let log = self.service.as_ref().map(Service::log).unwrap_or_default();
            eprintln!("revision {revision} never converged again: {last:#}\n{log}");
        }
        // Recorded, then counted in the statistics under the same lock: over once it is free.
        wait_until(RUN_WAIT, || store_lock_free(&self.host().state()));
        last
    }

    /// Under the service, a run the host's SIGTERM stopped: recorded `interrupted`, deferring
    /// exactly `keys` (in order) as not applied because the host was stopping; the service then
    /// exits 0.
    pub fn assert_stopped_mid_run<K>(&mut self, record: &Value, keys: &[K])
    where
        K: std::fmt::Debug,
        for<'a> &'a str: PartialEq<K>,
    {
        assert_eq!(record["outcome"], "interrupted", "{record:#}");
        let stopped: Vec<&str> = record["deferred"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["detail"] == "not applied: the host was stopping")
            .filter_map(|d| d["key"].as_str())
            .collect();
        assert_eq!(stopped, keys, "{record:#}");
        let service = self.service().expect("the service");
        assert_eq!(service.stop(), Some(0), "{}", service.log());
    }

    /// Every run record `status --json` lists, oldest first (none while `status` fails: the
    /// waits ask again, and say what they saw when they give up).
    pub fn runs(&self) -> Vec<Value> {
        let out = self.host().run(&["status", "--json"]);
        let status: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            eprintln!("status --json: {e}: {out:?}");
            Value::Null
        });
        status["runs"].as_array().cloned().unwrap_or_default()
    }

    /// The last run record (`Value::Null` when none).
    pub fn last_run(&self) -> Value {
        self.runs().pop().unwrap_or_default()
    }
}

/// Gives `host`'s config a link to `cp` as node `n1` (its CA and secret written beside it),
/// keeping the rest.
pub fn link_only(host: &Scratch, pki: &Pki, cp: &ControlPlane) {
    pki.write(&host.dir).expect("pki");
    std::fs::write(host.dir.join("secret"), "s3cret\n").expect("secret");
    host.edit_config(|config| {
        config["control_plane"] = serde_json::json!({
            "address": cp.addr().to_string(),
            "server_name": "localhost",
            "ca_file": host.dir.join("ca.pem"),
            "node": "n1",
            "secret_file": host.dir.join("secret"),
        });
    });
}

/// `link_only`, and a drift timer of 600 s and no watcher unless the config sets them.
fn link(host: &Scratch, pki: &Pki, cp: &ControlPlane) {
    link_only(host, pki, cp);
    host.edit_config(|config| {
        for (key, value) in [
            ("interval_secs", Value::from(600)),
            ("heartbeat_secs", Value::from(1)),
            ("watch", Value::from(false)),
        ] {
            if config.get(key).is_none() {
                config[key] = value;
            }
        }
    });
}

/// Whether nobody holds the store's lock (`flock`, as the host takes it): taken and let go.
fn store_lock_free(state: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(state.join("lock")) else {
        return true;
    };
    // SAFETY: flock on a descriptor this function owns; closing the file lets go of it.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

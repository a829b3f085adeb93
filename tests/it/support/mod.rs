//! Test support: run the real `mesh-host` binary against a scratch directory holding a target
//! root, a store and a config; and, for the driver tests, the sandbox of real tools that
//! `tests/run.sh` sets up (tests/sandbox/setup.sh).
//!
//! A test that needs what a plain `cargo test` lacks (the sandbox, root, node_exporter) is marked
//! `#[ignore = "needs ..."]` saying what, and starts with `sandbox()` or `require_root`, which
//! panic naming the setup: unprepared, it is listed as ignored or fails, never passes unchecked.
//! `tests/run.sh` runs them all with `--include-ignored`. Every mesh-host command line is built by
//! `Scratch::command` (or `mesh_host()`); `--json` reports are read with `apply_json`/`failure`.
//! `ways::Driver` runs one scenario through `apply` and through the service (`Way::BOTH`).

// System calls the test needs (Cargo.toml, [lints]): each block says why it holds.
#![allow(unsafe_code)]

mod pacman_root;
pub use pacman_root::{pacman_conf, sysroot_with_repo, PacmanRoot};

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl From<std::process::Output> for Output {
    fn from(out: std::process::Output) -> Output {
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The `mesh-host` binary under test, with no arguments (`Scratch::command` adds a host's).
pub fn mesh_host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mesh-host"))
}

impl Output {
    /// Asserts that stdout holds `text`; fails showing the whole output.
    #[track_caller]
    pub fn assert_stdout(&self, text: &str) {
        assert!(
            self.stdout.contains(text),
            "stdout lacks {text:?}: {self:?}"
        );
    }

    /// Asserts that stderr holds `text`; fails showing the whole output.
    #[track_caller]
    pub fn assert_stderr(&self, text: &str) {
        assert!(
            self.stderr.contains(text),
            "stderr lacks {text:?}: {self:?}"
        );
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Where scratch directories (and so the tests' stores) live: /var/tmp, not /tmp. Arch and
/// Debian sid ship `tmp.mount`, a tmpfs over /tmp, so the model rightly refuses that unit as
/// mounting over a store under /tmp; the unit-file differential declares every shipped unit.
pub const SCRATCH_BASE: &str = "/var/tmp";

/// A scratch directory: `root/` (the target), `state/` (the store), `config.json`.
pub struct Scratch {
    pub dir: PathBuf,
    /// Pass `--root root/`: files go into the scratch root and runtime operations are deferred.
    pub offline_root: bool,
}

impl Scratch {
    pub fn new(label: &str) -> Scratch {
        Scratch::with_config(label, "{}")
    }

    pub fn with_config(label: &str, config: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(SCRATCH_BASE).join(format!(
            "mesh-host-it-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/etc")).expect("scratch dir");
        std::fs::write(dir.join("config.json"), config).expect("config");
        Scratch {
            dir,
            offline_root: true,
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// A path inside the target root: `target("/etc/x")`.
    pub fn target(&self, path: &str) -> PathBuf {
        self.root().join(path.trim_start_matches('/'))
    }

    /// Sets the command `tool` (`pacman`, `systemctl`, `podman`) runs as in this host's
    /// config.json, keeping the rest, and returns the command it had.
    pub fn set_tool<S: AsRef<str>>(&self, tool: &str, command: &[S]) -> Vec<String> {
        let path = self.dir.join("config.json");
        let text = std::fs::read_to_string(&path).expect("config");
        let mut config: serde_json::Value = serde_json::from_str(&text).expect("config JSON");
        let previous = config[tool]["command"]
            .as_array()
            .map(|words| {
                let words = words.iter().filter_map(|w| w.as_str());
                words.map(str::to_string).collect()
            })
            .unwrap_or_else(|| vec![tool.to_string()]);
        let command: Vec<&str> = command.iter().map(AsRef::as_ref).collect();
        config[tool]["command"] = serde_json::json!(command);
        std::fs::write(&path, config.to_string()).expect("config");
        previous
    }

    /// Changes this host's config.json with `edit`, keeping the rest.
    pub fn edit_config(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.dir.join("config.json");
        let text = std::fs::read_to_string(&path).expect("config");
        let mut config: serde_json::Value = serde_json::from_str(&text).expect("config JSON");
        edit(&mut config);
        std::fs::write(&path, config.to_string()).expect("config");
    }

    /// Writes a declaration file and returns its path.
    pub fn declaration(&self, name: &str, json: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, json).expect("declaration");
        path
    }

    /// Runs `mesh-host` with this scratch's store, config and (if set) root.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_umask(None, args)
    }

    /// `run`, with the process's umask set to `umask` when given.
    pub fn run_with_umask(&self, umask: Option<u32>, args: &[&str]) -> Output {
        let mut command = self.command(args);
        if let Some(mask) = umask {
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
        Output::from(command.output().expect("run mesh-host"))
    }

    /// The command line of `mesh-host ARGS` on this scratch: its store, its config and (if
    /// `offline_root`) its root. Every test starts mesh-host through this or `mesh_host()`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = mesh_host();
        command
            .arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(self.dir.join("config.json"));
        if self.offline_root {
            command.arg("--root").arg(self.root());
        }
        command.args(args);
        command
    }

    /// `apply FILE` and assert the exit code.
    pub fn apply(&self, file: &Path, want: i32) -> Output {
        let out = self.run(&["apply", file.to_str().expect("utf-8 path")]);
        assert_eq!(out.code, want, "{out:?}");
        out
    }

    /// `apply --wait FILE` and assert the exit code: a person applying while the service runs,
    /// who waits for the service's run to end rather than exit 3 on its lock.
    pub fn apply_waiting(&self, file: &Path, want: i32) -> Output {
        let out = self.run(&["apply", "--wait", file.to_str().expect("utf-8 path")]);
        assert_eq!(out.code, want, "{out:?}");
        out
    }

    /// `--json --trace-commands apply` of `json` (written as declaration.json), asserting the
    /// exit code; the report, with the tool commands it ran under `commands`.
    pub fn apply_json(&self, json: &str, want: i32) -> serde_json::Value {
        let file = self.declaration("declaration.json", json);
        let out = self.run(&[
            "--json",
            "--trace-commands",
            "apply",
            file.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(out.code, want, "{out:?}");
        out.json()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One entry of a `--json` report's `failures`.
#[derive(Debug)]
pub struct Failure {
    pub key: String,
    pub action: String,
    pub detail: String,
}

/// Every failure of a `--json` report, in its order.
pub fn failures(report: &serde_json::Value) -> Vec<Failure> {
    let text = |f: &serde_json::Value, k: &str| f[k].as_str().unwrap_or_default().to_string();
    report["failures"]
        .as_array()
        .unwrap_or_else(|| panic!("a report without failures: {report:#}"))
        .iter()
        .map(|f| Failure {
            key: text(f, "key"),
            action: text(f, "action"),
            detail: text(f, "detail"),
        })
        .collect()
}

/// The failure of `key` in a `--json` report; panics, showing the report, when it has none.
pub fn failure(report: &serde_json::Value, key: &str) -> Failure {
    failures(report)
        .into_iter()
        .find(|f| f.key == key)
        .unwrap_or_else(|| panic!("no failure for {key}: {report:#}"))
}

/// Every file under `dir` with its content and mode, for "nothing changed" comparisons.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.is_dir() {
                stack.push(path.clone());
                out.push((path, Vec::new(), meta.permissions().mode()));
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                out.push((path, bytes, meta.permissions().mode()));
            }
        }
    }
    out.sort();
    out
}

/// The sandbox of real tools, from the environment `tests/run.sh` exports.
pub struct Sandbox {
    pub pacman_conf: String,
    pub pacman_root: PathBuf,
    pub pacman_repo: PathBuf,
    pub unit_dir: PathBuf,
    pub offline_root: PathBuf,
    pub image: String,
}

/// How to get what the ignored tests need; their `#[ignore]` reasons say the same.
pub const SETUP: &str = "run ./tests/run.sh as root (it sets up the sandbox, runs every test with \
     --include-ignored and tears the sandbox down), or set one up with \
     `MESH_SANDBOX=DIR tests/sandbox/setup.sh; source DIR/env`";

/// The sandbox, for the tests marked `#[ignore = "needs the sandbox: ..."]`. Panics with the
/// command that sets it up when its environment is missing: a test that did not run must not pass.
pub fn sandbox() -> Sandbox {
    let sandbox = sandbox_env();
    take_turn(false);
    sandbox
}

/// `sandbox()` for a test that needs the sandbox's pacman root to itself (a transaction of its
/// own outside mesh-host, or a count of every package installed) or writes the host's own units
/// where the sandbox's systemd manager reads them (which a units test beside it would see). It waits for the sandbox tests
/// running and holds the others off until it ends. Called first in its test.
pub fn sandbox_alone() -> Sandbox {
    let sandbox = sandbox_env();
    take_turn(true);
    sandbox
}

/// The integration tests are one binary, so the sandbox tests of every module run side by side;
/// a test's turn (shared or alone) lasts as long as its thread, which libtest ends with the test.
static SANDBOX_TURN: RwLock<()> = RwLock::new(());

enum Turn {
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
    },
    Alone {
        _guard: RwLockWriteGuard<'static, ()>,
    },
}

thread_local! {
    static TURN: RefCell<Option<Turn>> = const { RefCell::new(None) };
}

fn take_turn(alone: bool) {
    TURN.with(|turn| {
        let mut turn = turn.borrow_mut();
        match (turn.as_ref(), alone) {
            (Some(Turn::Alone { .. }), _) | (Some(Turn::Shared { .. }), false) => {}
            (Some(Turn::Shared { .. }), true) => {
                panic!("sandbox_alone() after sandbox() in one test: call it first")
            }
            (None, false) => {
                let guard = SANDBOX_TURN.read().unwrap_or_else(PoisonError::into_inner);
                *turn = Some(Turn::Shared { _guard: guard });
            }
            (None, true) => {
                let guard = SANDBOX_TURN.write().unwrap_or_else(PoisonError::into_inner);
                *turn = Some(Turn::Alone { _guard: guard });
            }
        }
    });
}

/// The sandbox's environment, or a panic naming the setup.
fn sandbox_env() -> Sandbox {
    let var = |name: &str| std::env::var(name).ok();
    match (
        var("MESH_SANDBOX"),
        var("MESH_PACMAN_CONF"),
        var("MESH_UNIT_DIR"),
        var("MESH_TEST_IMAGE"),
    ) {
        (Some(_), Some(pacman_conf), Some(unit_dir), Some(image)) => Sandbox {
            pacman_conf,
            pacman_root: PathBuf::from(var("MESH_PACMAN_ROOT").unwrap_or_default()),
            pacman_repo: PathBuf::from(var("MESH_PACMAN_REPO").unwrap_or_default()),
            unit_dir: PathBuf::from(unit_dir),
            offline_root: PathBuf::from(var("MESH_SYSTEMD_OFFLINE_ROOT").unwrap_or_default()),
            image,
        },
        _ => panic!(
            "this test needs the sandbox of real pacman, systemctl --user and podman \
             (MESH_SANDBOX, MESH_PACMAN_CONF, MESH_UNIT_DIR, MESH_TEST_IMAGE are not all set): {SETUP}"
        ),
    }
}

/// For the tests marked `#[ignore = "needs root: ..."]`: panics, naming `why`, unless root.
pub fn require_root(why: &str) {
    // SAFETY: geteuid takes nothing and cannot fail.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        uid, 0,
        "this test needs root ({why}) but runs as uid {uid}: run it as root, as ./tests/run.sh does"
    );
}

impl Sandbox {
    /// Config JSON that drives the sandbox's tools, with `extra` members appended.
    pub fn config(&self, extra: &str) -> String {
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(", {extra}")
        };
        format!(
            r#"{{"pacman": {{"command": ["pacman", "--config", "{}"]}},
                "systemctl": {{"command": ["systemctl", "--user"]}},
                "podman": {{"command": ["podman"]}},
                "unit_dir": "{}"{extra}}}"#,
            self.pacman_conf,
            self.unit_dir.display()
        )
    }

    /// A scratch host driving the sandbox's tools (no `--root`: units and containers are live).
    pub fn host(&self, label: &str, extra_config: &str) -> Scratch {
        let mut scratch = Scratch::with_config(label, &self.config(extra_config));
        scratch.offline_root = false;
        scratch
    }
}

/// `systemctl --user ARGS`'s trimmed stdout, whatever its exit code (`is-active` exits 3).
pub fn systemctl_user(args: &[&str]) -> String {
    let out = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("run systemctl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs a command and returns stdout, panicking with its stderr on failure.
pub fn sh(script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit status of a command (for checks such as `systemctl is-active`).
pub fn status(script: &str) -> i32 {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .expect("sh")
        .code()
        .unwrap_or(-1)
}

pub mod control_plane;
pub mod pki;
pub mod service;
pub mod tmpfs;
pub mod ways;

/// A small seeded PRNG (xorshift64*) for the fault tests: the same seed, the same choices.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The seed for a fault test: `MESH_FAULT_SEED` when set (to replay a failure), else `default`.
pub fn fault_seed(default: u64) -> u64 {
    std::env::var("MESH_FAULT_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// Resident memory of a process in KiB (`VmRSS` in /proc/PID/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

/// Peak resident memory of a process in KiB (`VmHWM` in /proc/PID/status).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:")
}

/// The `FIELD: N kB` line of /proc/PID/status, as N.
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Polls `done` every 20 ms until it holds or `timeout` passes; its last answer.
pub fn wait_until(timeout: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    done()
}

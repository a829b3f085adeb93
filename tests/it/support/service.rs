//! `mesh-host run` on a scratch host, for the tests that need the service: started, signalled,
//! inspected and stopped; killed on drop, with its log printed if the test failed.

use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{wait_until, Scratch};

pub struct Service {
    pub host: Scratch,
    child: Child,
    /// The umask it runs with, when not the test's.
    umask: Option<u32>,
}

impl Service {
    pub fn start(host: Scratch) -> Service {
        Service::start_with_env(host, &[])
    }

    /// Starts it with extra environment variables (such as `NOTIFY_SOCKET`).
    pub fn start_with_env(host: Scratch, env: &[(&str, &std::path::Path)]) -> Service {
        Service::start_with_umask(host, env, None)
    }

    /// Starts it with extra environment variables and, when given, this umask.
    pub fn start_with_umask(
        host: Scratch,
        env: &[(&str, &std::path::Path)],
        umask: Option<u32>,
    ) -> Service {
        let child = spawn(&host, env, umask);
        Service { host, child, umask }
    }

    /// SIGKILL, as a crash: nothing of it runs after this returns.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same host after `stop`.
    pub fn restart(&mut self, env: &[(&str, &std::path::Path)]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.host, env, self.umask);
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.host.dir.join("service.log")).unwrap_or_default()
    }

    /// A file in the host's target root, if it exists.
    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.host.target(path)).ok()
    }

    pub fn status(&self) -> Value {
        self.host.run(&["status", "--json"]).json()
    }

    pub fn runs(&self) -> Vec<Value> {
        self.status()["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Writes `config` as the host's config.json and sends SIGHUP to have it read again.
    pub fn reload_config(&self, config: &str) {
        std::fs::write(self.host.dir.join("config.json"), config).expect("config");
        self.signal(libc::SIGHUP);
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) takes no pointer; the child is ours and not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and returns the exit code (`None` if it did not exit within 20 s).
    pub fn stop(&mut self) -> Option<i32> {
        self.signal(libc::SIGTERM);
        let mut code = None;
        wait_until(Duration::from_secs(20), || match self.child.try_wait() {
            Ok(Some(status)) => {
                code = status.code();
                true
            }
            _ => false,
        });
        code
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- service log of {}\n{}",
                self.host.dir.display(),
                self.log()
            );
        }
    }
}

fn spawn(host: &Scratch, env: &[(&str, &std::path::Path)], umask: Option<u32>) -> Child {
    let log = std::fs::File::create(host.dir.join("service.log")).expect("log");
    let mut command = host.command(&["run"]);
    // Info unless the test asks for another level.
    command.env("RUST_LOG", "info");
    for (key, value) in env {
        command.env(key, value);
    }
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
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn mesh-host run")
}

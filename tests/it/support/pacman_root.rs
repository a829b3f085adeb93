//! A pacman root of a test's own beside the sandbox's, for tests whose transactions must not
//! meet another test's lock or packages.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{sh, Sandbox, Scratch};

/// A pacman root and database of a test's own, synced from a repository, so that no other
/// test's transaction meets its lock or its packages. Removed when dropped (kept if the test
/// failed, for a look).
pub struct PacmanRoot {
    pub dir: PathBuf,
    pub conf: PathBuf,
}

impl PacmanRoot {
    /// A fresh, synced root whose repo is `repo`.
    pub fn new(label: &str, repo: &Path) -> PacmanRoot {
        let sandbox_dir = std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX");
        let dir = PathBuf::from(sandbox_dir)
            .join("tmp")
            .join(format!("pacman-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        let conf = dir.join("pacman.conf");
        std::fs::write(&conf, pacman_conf(&root, Some(repo))).expect("pacman.conf");
        let pacman = PacmanRoot { dir, conf };
        pacman.pacman("-Sy --noconfirm");
        pacman
    }

    /// `pacman --config CONF ARGS`, which must succeed.
    pub fn pacman(&self, args: &str) -> String {
        sh(&format!(
            "LC_ALL=C pacman --config {} {args}",
            self.conf.display()
        ))
    }

    /// The installed version of `name`, if it is installed.
    pub fn version(&self, name: &str) -> Option<String> {
        let out = Command::new("pacman")
            .args([
                "--config",
                self.conf.to_str().expect("utf-8"),
                "-Q",
                "--",
                name,
            ])
            .env("LC_ALL", "C")
            .output()
            .expect("pacman -Q");
        let stdout = String::from_utf8_lossy(&out.stdout);
        out.status.success().then(|| {
            stdout
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        })
    }

    /// pacman's install reason for an installed `name`.
    pub fn reason(&self, name: &str) -> String {
        let info = self.pacman(&format!("-Qi -- {name}"));
        info.lines()
            .find_map(|line| line.strip_prefix("Install Reason  : "))
            .expect("Install Reason")
            .to_string()
    }

    pub fn lock_file(&self) -> PathBuf {
        self.dir.join("root/var/lib/pacman/db.lck")
    }

    /// A host whose pacman is this root (the sandbox's systemctl and unit dir for the rest).
    pub fn host(&self, sandbox: &Sandbox, label: &str, extra_config: &str) -> Scratch {
        Sandbox {
            pacman_conf: self.conf.display().to_string(),
            pacman_root: self.dir.join("root"),
            pacman_repo: sandbox.pacman_repo.clone(),
            unit_dir: sandbox.unit_dir.clone(),
            offline_root: sandbox.offline_root.clone(),
            image: sandbox.image.clone(),
        }
        .host(label, extra_config)
    }
}

impl Drop for PacmanRoot {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A pacman.conf that keeps every path of pacman's in `root` (for `pacman --config`), unsigned,
/// with `repo` as the test repository `meshtest` when given. Makes the directories it names:
/// pacman 7.1 refuses a `GPGDir` that does not exist.
pub fn pacman_conf(root: &Path, repo: Option<&Path>) -> String {
    for sub in [
        "var/lib/pacman",
        "var/cache/pacman/pkg",
        "var/log",
        "etc/pacman.d/gnupg",
        "etc/pacman.d/hooks",
    ] {
        std::fs::create_dir_all(root.join(sub)).expect("pacman root");
    }
    let r = root.display();
    let mut conf = format!(
        "[options]\nRootDir = {r}\nDBPath = {r}/var/lib/pacman/\n\
         CacheDir = {r}/var/cache/pacman/pkg/\nLogFile = {r}/var/log/pacman.log\n\
         GPGDir = {r}/etc/pacman.d/gnupg/\nHookDir = {r}/etc/pacman.d/hooks/\n\
         Architecture = x86_64\nSigLevel = Never\n"
    );
    // Arch's options for pacman 7 (DownloadUser, ...), as tests/sandbox/setup.sh chose them.
    if let Ok(options) = std::env::var("MESH_PACMAN_OPTIONS") {
        conf.push_str(&options);
        conf.push('\n');
    }
    if let Some(repo) = repo {
        conf.push_str(&format!(
            "\n[meshtest]\nServer = file://{}\n",
            repo.display()
        ));
    }
    conf
}

/// Makes `root` a root pacman can be pointed at with `--sysroot`, as a rescue image's mounted
/// disk is: its own database, cache, log, a copy of `repo` at /repo and an /etc/pacman.conf that
/// names it (`--sysroot` chroots before reading the conf); synced.
pub fn sysroot_with_repo(root: &Path, repo: &Path) {
    for sub in [
        "var/lib/pacman",
        "var/cache/pacman/pkg",
        "var/log",
        "repo",
        "tmp",
        "etc/pacman.d/gnupg", // pacman 7.1 refuses a GPGDir that does not exist
    ] {
        std::fs::create_dir_all(root.join(sub)).expect("sysroot");
    }
    sh(&format!(
        "cp {}/* {}",
        repo.display(),
        root.join("repo").display()
    ));
    std::fs::write(
        root.join("etc/pacman.conf"),
        "[options]\nArchitecture = x86_64\nSigLevel = Never\n\n[meshtest]\nServer = file:///repo\n",
    )
    .expect("pacman.conf");
    sh(&format!(
        "LC_ALL=C pacman --sysroot {} -Sy --noconfirm",
        root.display()
    ));
}

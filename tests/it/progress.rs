//! Progress where a person waits, against the sandbox's real pacman: `apply` with its stderr on a
//! pseudo-terminal shows each step, each command and pacman's own lines while the transaction
//! runs; nothing of it reaches stdout, nor stderr when it is not a terminal, nor with `--json` or
//! `-q`; `-v` adds each command's exit and what each kind found.

// System calls the test needs (Cargo.toml, [lints]): each block says why it holds.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{sandbox, Output, PacmanRoot, Scratch};

/// A repository of one package, `mesh-slow`, whose install scriptlet says `slow: waiting` and
/// then waits (a minute at most) for `/go` in the root it is installed into, as a long
/// transaction keeps a person waiting; `slow: done` once it is there.
fn slow_repo(label: &str) -> PathBuf {
    let sandbox_dir = PathBuf::from(std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX"));
    let repo = sandbox_dir
        .join("tmp")
        .join(format!("progress-{label}-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(&repo).expect("repo");
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/lib.sh");
    let package = repo.join("package");
    std::fs::create_dir_all(package.join("usr/share/mesh-slow")).expect("package");
    std::fs::write(package.join("usr/share/mesh-slow/marker"), "slow\n").expect("marker");
    std::fs::write(
        package.join(".INSTALL"),
        "post_install() {\n  echo 'slow: waiting'\n  i=0\n  \
         while [ ! -e /go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n  \
         if [ -e /go ]; then echo 'slow: done'; else echo 'slow: gave up'; fi\n}\n",
    )
    .expect(".INSTALL");
    let script = format!(
        "set -e; source {lib}; sb_pkginfo {d} mesh-slow 1.0-1; \
         (cd {d} && bsdtar --uid 0 --gid 0 --uname root --gname root -cf - .PKGINFO .INSTALL usr) \
           | zstd -q -c > {repo}/mesh-slow-1.0-1-any.pkg.tar.zst; rm -rf {d}; \
         repo-add -q {repo}/meshtest.db.tar.gz {repo}/mesh-slow-1.0-1-any.pkg.tar.zst",
        lib = lib.display(),
        d = package.display(),
        repo = repo.display(),
    );
    let status = Command::new("bash").args(["-c", &script]).status();
    assert!(status.is_ok_and(|s| s.success()), "{script}");
    repo
}

/// Gives a pacman root what pacman runs scriptlets with (chrooted into it): a static busybox as
/// /bin/sh and sleep.
fn with_shell(root: &Path) {
    let bin = root.join("usr/bin");
    std::fs::create_dir_all(&bin).expect("usr/bin");
    std::fs::create_dir_all(root.join("tmp")).expect("tmp");
    std::os::unix::fs::symlink("usr/bin", root.join("bin")).expect("bin");
    std::fs::copy("/bin/busybox", bin.join("busybox")).expect("busybox-static");
    for applet in ["sh", "sleep"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet");
    }
}

/// `mesh-host ARGS` for `host` with stderr on a pseudo-terminal and stdout piped; `on_line` sees
/// each line the terminal shows as it shows it. The terminal's text (its `\r\n` as `\n`) comes
/// back as `stderr`.
fn on_terminal(host: &Scratch, args: &[&str], mut on_line: impl FnMut(&str)) -> Output {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: the two ints are where openpty writes the descriptors; the name, termios and
    // window size are not asked (null).
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just made by openpty and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = host
        .command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("mesh-host");
    let mut terminal = File::from(master);
    let (mut text, mut buf, mut seen) = (String::new(), [0u8; 4096], 0);
    // The slave's last holder gone, Linux answers EIO.
    while let Ok(n @ 1..) = terminal.read(&mut buf) {
        text.push_str(&String::from_utf8_lossy(&buf[..n]).replace('\r', ""));
        while let Some(end) = text[seen..].find('\n') {
            on_line(&text[seen..seen + end]);
            seen += end + 1;
        }
    }
    let mut stdout = String::new();
    let mut pipe = child.stdout.take().expect("stdout");
    pipe.read_to_string(&mut stdout).expect("stdout");
    let status = child.wait().expect("wait");
    Output {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr: text,
    }
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_transaction_shows_its_steps_and_pacmans_lines_on_a_terminal_while_it_runs() {
    let sb = sandbox();
    let repo = slow_repo("apply");
    let pacman = PacmanRoot::new("progress", &repo);
    let root = pacman.dir.join("root");
    with_shell(&root);
    let host = pacman.host(&sb, "progress", "");
    let file = host.dir.join("declaration.json");
    std::fs::write(&file, r#"{"schema": 1, "packages": {"mesh-slow": {}}}"#).expect("write");
    let file = file.to_str().expect("utf-8");

    // The scriptlet waits for /go, made only once the terminal has shown its first line: were
    // the lines shown only at the end, it would give up after a minute, and say so.
    let go = root.join("go");
    let mut shown_while_waiting = Vec::new();
    let out = on_terminal(&host, &["apply", file], |line| {
        if line.trim() == "slow: waiting" {
            std::fs::write(&go, "").expect("go");
        }
        if !go.exists() {
            shown_while_waiting.push(line.to_string());
        }
    });
    assert_eq!(out.code, 0, "{out:?}");
    let conf = pacman.conf.display();
    for line in [
        "==> apply: declaration ",
        "==> packages: observing 1: mesh-slow\n",
        "==> packages: changing 1: + mesh-slow\n",
        &format!("  -> pacman --config {conf} -S --needed --noconfirm -- mesh-slow\n"),
        "     installing mesh-slow...\n",
        "     slow: waiting\n",
        "     slow: done\n",
        "==> packages: checking 1 again: mesh-slow\n",
    ] {
        out.assert_stderr(line);
    }
    assert!(
        shown_while_waiting
            .iter()
            .any(|l| l.contains("installing mesh-slow")),
        "{shown_while_waiting:?}"
    );
    // Without -v: no exits, no counts.
    assert!(!out.stderr.contains("exit 0 after"), "{out:?}");
    assert!(
        !out.stdout.contains("==>") && !out.stdout.contains("  -> "),
        "{out:?}"
    );
    out.assert_stdout("+ packages mesh-slow: install\n");

    // The same apply again, from the same state, without a terminal: the same stdout, nothing
    // on stderr.
    pacman.pacman("-R --noconfirm mesh-slow");
    let piped = host.run(&["apply", file]);
    assert_eq!(piped.code, 0, "{piped:?}");
    assert_eq!(piped.stderr, "", "{piped:?}");
    assert_eq!(piped.stdout, out.stdout, "{piped:?}");

    // A terminal, but --json or -q: nothing on it.
    for args in [&["--json", "reconcile"][..], &["-q", "reconcile"]] {
        let out = on_terminal(&host, args, |_| ());
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?}: {out:?}"
        );
    }
    let json = on_terminal(&host, &["reconcile", "--json"], |_| ()).json();
    assert_eq!(json["in_sync"], 1, "{json:#}");

    // -v: each command's exit, and what each kind found.
    let verbose = on_terminal(&host, &["-v", "reconcile"], |_| ());
    assert_eq!(verbose.code, 0, "{verbose:?}");
    for line in [
        "==> reconcile: declaration ",
        "==> packages: observing 1: mesh-slow\n",
        &format!("  -> pacman --config {conf} -Qi -- mesh-slow\n"),
        "     exit 0 after ",
        "==> packages: 1 in sync\n",
    ] {
        verbose.assert_stderr(line);
    }
    std::fs::remove_dir_all(&repo).expect("cleanup");
}

/// While another process holds pacman's lock, the transaction is told once with its complaint,
/// then one `waiting` line names the holder, however many times it is tried again; once the lock
/// is let go, the transaction's own lines follow.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_held_lock_is_one_waiting_line_not_a_retry_every_half_second() {
    let sb = sandbox();
    let pacman = PacmanRoot::new("progress-lock", &sb.pacman_repo);
    let host = pacman.host(&sb, "progress-lock", "");
    let file = host.dir.join("declaration.json");
    std::fs::write(&file, r#"{"schema": 1, "packages": {"mesh-e": {}}}"#).expect("write");
    let lock = pacman.lock_file();
    // A live process holds the lock open, as a running pacman does.
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 3>{}; exec sleep 120", lock.display()))
        .spawn()
        .expect("lock holder");
    while !lock.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let holder_pid = holder.id();
    let mut released = false;
    let args = ["--trace-commands", "apply", file.to_str().expect("utf-8")];
    let out = on_terminal(&host, &args, |line| {
        // Let go once told, and after two more tries (the retries come twice a second).
        if line.contains("-> waiting: ") && !released {
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let _ = holder.kill();
            let _ = holder.wait();
            let _ = std::fs::remove_file(&lock);
            released = true;
        }
    });
    // Whatever the run did, the holder does not outlive the test.
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.code, 0, "{out:?}");
    let count = |text: &str| out.stderr.matches(text).count();
    let install = " -S --needed --noconfirm -- mesh-e\n";
    // Tried again and again (`--trace-commands` lists every try), told once.
    let tries = (out.stderr.lines())
        .filter(|l| l.starts_with("command: ") && l.ends_with(install.trim_end()))
        .count();
    assert!(tries >= 3, "{out:?}");
    assert_eq!(
        count(&format!(
            "  -> pacman --config {}{install}",
            pacman.conf.display()
        )),
        1,
        "{out:?}"
    );
    assert_eq!(count("unable to lock database"), 1, "{out:?}");
    out.assert_stderr(&format!(
        "  -> waiting: pacman's database lock {}, held by pid {holder_pid} (sleep)\n",
        lock.display()
    ));
    assert_eq!(count("-> waiting: "), 1, "{out:?}");
    out.assert_stderr("     installing mesh-e...\n");
    assert_eq!(pacman.version("mesh-e").as_deref(), Some("1.0-1"));
}

/// `-q` leaves errors and the result only: a warning (a store found with a loose mode, set back
/// to 0700) is said without it and not with it; an error is said either way.
#[test]
fn quiet_says_errors_only() {
    let host = Scratch::new("progress-quiet");
    let file = host.dir.join("declaration.json");
    std::fs::write(
        &file,
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "hi\n"}}}"#,
    )
    .expect("write");
    host.apply(&file, 0);
    let loosen = || {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(host.state(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod")
    };
    loosen();
    let said = host.run(&["status"]);
    assert_eq!(said.code, 0, "{said:?}");
    said.assert_stderr("had mode 0755; set to 0700");
    loosen();
    let quiet = host.run(&["-q", "status"]);
    assert_eq!((quiet.code, quiet.stderr.as_str()), (0, ""), "{quiet:?}");
    quiet.assert_stdout("declaration in force: from local file");
    let missing = host.run(&["-q", "apply", "/nonexistent.json"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    missing.assert_stderr("mesh-host: /nonexistent.json: cannot be read");
}

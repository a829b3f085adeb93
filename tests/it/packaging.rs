//! Packaging, end to end: the release tarball `build.sh` makes (its binary runs in an empty
//! chroot), `mesh-host.service` (systemd parses it as meant), and the `nox-mesh-host` package that
//! makepkg builds from the source tarball (the same program as the release tarball's), installed, upgraded and removed by the real pacman in the
//! sandbox. Build directories stay under the sandbox's tmp/ (teardown removes them).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::support;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const UNIT: &str = "mesh-host.service";

/// The manual, completions, schemas and docs, as installed under /usr/share (the package) and
/// carried in the tarball's share/, with the repository's file each is.
fn shared() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = [
        ("man/man8/mesh-host.8", "share/man/mesh-host.8"),
        ("man/man5/mesh-host.json.5", "share/man/mesh-host.json.5"),
        (
            "man/man5/mesh-host-config.5",
            "share/man/mesh-host-config.5",
        ),
        (
            "bash-completion/completions/mesh-host",
            "share/completions/mesh-host.bash",
        ),
        (
            "zsh/site-functions/_mesh-host",
            "share/completions/_mesh-host",
        ),
        (
            "fish/vendor_completions.d/mesh-host.fish",
            "share/completions/mesh-host.fish",
        ),
        (
            "mesh-host/declaration.schema.json",
            "share/schema/declaration.schema.json",
        ),
        (
            "mesh-host/config.schema.json",
            "share/schema/config.schema.json",
        ),
        ("doc/mesh-host/README.md", "README.md"),
        ("doc/mesh-host/INSTALL", "INSTALL"),
        ("doc/mesh-host/CHANGELOG.md", "CHANGELOG.md"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs") {
        let name = entry.expect("docs entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            files.push((format!("doc/mesh-host/{name}"), format!("docs/{name}")));
        }
    }
    files.sort();
    files
}

/// `pacman --noconfirm ARGS` on the sandbox's root (each call asserted to exit 0), once a
/// previous run's package is removed from it.
fn sandbox_pacman(sandbox: &support::Sandbox) -> impl Fn(&[&str]) -> String + '_ {
    let _ = Command::new("pacman")
        .arg("--config")
        .arg(&sandbox.pacman_conf)
        .args(["--noconfirm", "-Rn", "nox-mesh-host"])
        .output(); // a previous run's leftovers
    move |args: &[&str]| {
        run(Command::new("pacman")
            .arg("--config")
            .arg(&sandbox.pacman_conf)
            .arg("--noconfirm")
            .args(args))
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `command`, asserts it exits 0 and returns its stdout (stderr is in the panic message).
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{command:?}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status
    );
    stdout
}

/// A directory for one test under the sandbox (teardown removes it if a test panics first).
fn scratch(label: &str) -> PathBuf {
    let base = std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX");
    let dir = Path::new(&base)
        .join("tmp")
        .join(format!("packaging-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
}

/// The release tarball, unpacked: `dist/` as `build.sh` left it. `build.sh` runs (once) only when
/// the binary or the tarball is missing or the tarball no longer holds the tree's files.
struct Dist {
    tarball: PathBuf,
    /// The tarball's `mesh-host-VERSION-x86_64/`, unpacked.
    unpacked: PathBuf,
}

fn dist() -> &'static Dist {
    static DIST: OnceLock<Dist> = OnceLock::new();
    DIST.get_or_init(|| {
        let name = format!("mesh-host-{VERSION}-x86_64");
        let tarball = repo().join("dist").join(format!("{name}.tar.gz"));
        let binary = repo().join("target/x86_64-unknown-linux-musl/release/mesh-host");
        let into = scratch("dist");
        let unpack = || {
            let _ = std::fs::remove_dir_all(into.join(&name));
            run(Command::new("tar")
                .arg("-xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(&into));
        };
        let current = || {
            ["mesh-host.service", "INSTALL", "LICENSE", "README.md"]
                .iter()
                .all(|f| {
                    std::fs::read(repo().join(f)).ok()
                        == std::fs::read(into.join(&name).join(f)).ok()
                })
                && shared().iter().all(|(installed, source)| {
                    std::fs::read(repo().join(source)).ok()
                        == std::fs::read(into.join(&name).join("share").join(installed)).ok()
                })
                && std::fs::read(&binary).ok()
                    == std::fs::read(into.join(&name).join("mesh-host")).ok()
        };
        let fresh = binary.exists() && tarball.exists() && {
            unpack();
            current()
        };
        if !fresh {
            eprintln!("packaging: dist/ is missing or stale: running ./build.sh");
            run(Command::new("./build.sh").current_dir(repo()));
            unpack();
            assert!(
                current(),
                "build.sh made a tarball that does not hold the tree's files"
            );
        }
        run(Command::new("sha256sum")
            .args(["-c", &format!("{name}.tar.gz.sha256")])
            .current_dir(repo().join("dist")));
        Dist {
            tarball,
            unpacked: into.join(name),
        }
    })
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_tarball_holds_the_binary_the_unit_and_the_install_text() {
    let _sandbox = support::sandbox();
    let dist = dist();
    let listing = run(Command::new("tar").arg("-tzf").arg(&dist.tarball));
    let mut entries: Vec<&str> = listing.lines().collect();
    entries.sort();
    let d = format!("mesh-host-{VERSION}-x86_64/");
    let mut want: Vec<String> = ["", "INSTALL", "LICENSE", "README.md", "mesh-host", UNIT]
        .iter()
        .map(|f| format!("{d}{f}"))
        .collect();
    // share/ as /usr/share: each file, and each directory on the way to it.
    for (installed, _) in shared() {
        let mut at = format!("{d}share/");
        want.push(at.clone());
        let (dirs, file) = installed.rsplit_once('/').expect("a file in a directory");
        for part in dirs.split('/') {
            at.push_str(part);
            at.push('/');
            want.push(at.clone());
        }
        want.push(format!("{at}{file}"));
    }
    want.sort();
    want.dedup();
    assert_eq!(entries, want);
    let kind = run(Command::new("file")
        .arg("-b")
        .arg(dist.unpacked.join("mesh-host")));
    assert!(kind.contains("static"), "not static: {kind}");
    assert!(
        kind.contains("stripped") && !kind.contains("not stripped"),
        "{kind}"
    );
    let install = std::fs::read_to_string(dist.unpacked.join("INSTALL")).expect("INSTALL");
    for step in [
        "| tar -xz",
        "systemctl daemon-reload",
        "systemctl enable --now mesh-host.service",
        "mesh-host join --control-plane https://HOST:PORT --token-file /root/mesh-token --ca-hash sha256:HEX",
        "mesh-host apply --root /mnt FILE",
        "mesh-host reconcile --root /mnt --state-dir /mnt/var/lib/mesh-host",
    ] {
        assert!(install.contains(step), "INSTALL lacks `{step}`");
    }
}

/// The floor: the tarball's binary, alone in a chroot (no /etc, /dev, /proc, libraries), does
/// `--version`, `check`, `plan` and `apply --root` (and a second apply finds it in sync).
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_tarball_binary_works_in_an_empty_chroot() {
    let _sandbox = support::sandbox();
    let root = scratch("chroot");
    std::fs::copy(dist().unpacked.join("mesh-host"), root.join("mesh-host")).expect("copy");
    std::fs::create_dir(root.join("target")).expect("target dir");
    // Numeric owners: the empty target has no /etc/passwd to look names up in.
    std::fs::write(
        root.join("decl.json"),
        r#"{"schema": 1, "revision": 7, "files": {
             "/etc/motd": {"content": "held by the mesh\n", "mode": "0640",
                           "owner": "0", "group": "0"},
             "/etc/mesh-demo/app.conf": {"content": "x = 1\n", "mode": "0600"}}}"#,
    )
    .expect("declaration");
    let host = |args: &[&str]| -> support::Output {
        let out = Command::new("chroot")
            .arg(&root)
            .arg("/mesh-host")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin") // to find chroot; nothing inside
            .output()
            .expect("chroot");
        support::Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let out = host(&["--version"]);
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, &*format!("mesh-host {VERSION}")),
        "{out:?}"
    );
    let out = host(&["check", "/decl.json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = host(&["plan", "--root", "/target", "/decl.json"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("+ files /etc/motd");
    assert!(!root.join("target/etc").exists(), "plan changed the target");
    let out = host(&["apply", "--root", "/target", "/decl.json"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("2 changed");
    let motd = root.join("target/etc/motd");
    assert_eq!(
        std::fs::read_to_string(&motd).unwrap(),
        "held by the mesh\n"
    );
    assert_eq!(mode(&motd) & 0o7777, 0o640);
    assert_eq!(
        mode(&root.join("target/etc/mesh-demo/app.conf")) & 0o7777,
        0o600
    );
    let out = host(&["apply", "--root", "/target", "/decl.json"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout("0 changed, 2 in sync");
    let out = host(&["status"]);
    assert!(
        out.code == 0 && out.stdout.contains("revision 7"),
        "{out:?}"
    );
    // Nothing appeared but the store (the default, /var/lib/mesh-host) and the target.
    let mut top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["decl.json", "mesh-host", "target", "var"]);
    assert_eq!(mode(&root.join("var/lib/mesh-host")) & 0o7777, 0o700);
    std::fs::remove_dir_all(&root).expect("cleanup");
}

/// `systemd-analyze verify` in a root holding the unit, its commands and systemd's targets (it
/// checks that ExecStart's binary exists, so the host's own / will not do): no warning at all.
/// Then the sandbox's manager loads it, to show the values systemd took from it.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_unit_verifies_and_systemd_reads_it_as_meant() {
    let sandbox = support::sandbox();
    let root = scratch("verify");
    let units = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&units).expect("unit dir");
    std::fs::create_dir_all(root.join("usr/bin")).expect("bin dir");
    std::fs::copy(
        dist().unpacked.join("mesh-host"),
        root.join("usr/bin/mesh-host"),
    )
    .unwrap();
    std::fs::copy(dist().unpacked.join(UNIT), units.join(UNIT)).unwrap();
    for entry in std::fs::read_dir("/usr/lib/systemd/system").expect("systemd's units") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "target") && path.is_file() {
            std::fs::copy(&path, units.join(path.file_name().unwrap())).unwrap();
        }
    }
    // verify runs `man` for each man: page of Documentation=: the tarball's pages must be there.
    let out = Command::new("systemd-analyze")
        .arg(format!("--root={}", root.display()))
        .args(["verify", UNIT])
        .env("MANPATH", dist().unpacked.join("share/man"))
        .output()
        .expect("systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.is_empty(),
        "systemd-analyze verify: {said}"
    );

    // Under another name: the sandbox's user manager is shared with the other tests.
    let probe = format!("mesh-host-probe-{}.service", std::process::id());
    std::fs::copy(units.join(UNIT), sandbox.unit_dir.join(&probe)).expect("probe unit");
    run(Command::new("systemctl").args(["--user", "daemon-reload"]));
    let shown = run(Command::new("systemctl").args([
        "--user",
        "show",
        "-p",
        "LoadState,Type,NotifyAccess,Restart,RestartUSec,StartLimitIntervalUSec,KillMode",
        "-p",
        "KillSignal,SendSIGHUP,SendSIGKILL,TimeoutStopUSec,TimeoutStartUSec,StateDirectoryMode,OOMPolicy",
        "-p",
        "ExecStart,ExecReload",
        &probe,
    ]));
    std::fs::remove_file(sandbox.unit_dir.join(&probe)).expect("remove probe");
    run(Command::new("systemctl").args(["--user", "daemon-reload"]));
    for want in [
        "LoadState=loaded",
        "Type=notify",
        "NotifyAccess=main",
        "Restart=always",
        "RestartUSec=15s",
        "StartLimitIntervalUSec=0",
        "KillMode=process",
        "OOMPolicy=continue",
        "KillSignal=15",
        "SendSIGHUP=no",
        "SendSIGKILL=yes",
        "TimeoutStopUSec=30min",
        "TimeoutStartUSec=30min",
        "StateDirectoryMode=0700",
        "ExecStart={ path=/usr/bin/mesh-host ; argv[]=/usr/bin/mesh-host run ;",
        "ExecReload={ path=/usr/bin/mesh-host ; argv[]=/usr/bin/mesh-host reload $MAINPID ;",
    ] {
        assert!(
            shown.lines().any(|l| l.starts_with(want)),
            "no `{want}` in\n{shown}"
        );
    }
    std::fs::remove_dir_all(&root).expect("cleanup");
}

/// nox-mesh-host built from the source tarball as Arch would (tests/makepkg.sh: makepkg as a
/// throwaway user), at pkgrel 1 and, repackaged with the PKGBUILD bumped, pkgrel 2; built once per
/// tree (the PID 1 tier's build is reused). check() is skipped here: the suite runs the library's
/// unit tests itself.
struct Packages {
    rel1: PathBuf,
    rel2: PathBuf,
    /// nox-mesh-host-debug at pkgrel 1: the debug info makepkg split out.
    debug: PathBuf,
}

fn packages() -> &'static Packages {
    static PACKAGES: OnceLock<Packages> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        let pkgbuild = std::fs::read_to_string(repo().join("PKGBUILD")).expect("PKGBUILD");
        assert!(pkgbuild.contains("\npkgrel=1\n"), "PKGBUILD: want pkgrel=1");
        assert!(
            pkgbuild.contains(&format!("\npkgver={VERSION}\n")),
            "PKGBUILD's pkgver is not Cargo.toml's {VERSION}"
        );
        let printed =
            run(Command::new(repo().join("tests/makepkg.sh")).env("MESH_MAKEPKG_NOCHECK", "1"));
        let dir = PathBuf::from(printed.lines().last().expect("makepkg.sh prints its dir"));
        let pkg = |rel: u32| dir.join(format!("nox-mesh-host-{VERSION}-{rel}-x86_64.pkg.tar.zst"));
        let took = std::fs::read_to_string(dir.join("makepkg.log")).unwrap_or_default();
        if let Some(line) = took.lines().find(|l| l.contains("built from source in")) {
            eprintln!("packaging: {line}");
        }
        Packages {
            rel1: pkg(1),
            rel2: pkg(2),
            debug: dir.join(format!(
                "nox-mesh-host-debug-{VERSION}-1-x86_64.pkg.tar.zst"
            )),
        }
    })
}

/// The source release is honest: dist/PKGBUILD's checksum is the source tarball's, and the
/// tarball is the tree (`git archive`), with the PKGBUILD's own version.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_pkgbuilds_checksum_is_the_source_tarballs() {
    let _sandbox = support::sandbox();
    let _ = packages();
    let dist = repo().join("dist");
    let tarball = dist.join(format!("mesh-host-{VERSION}.tar.gz"));
    let sum = run(Command::new("sha256sum").arg(&tarball));
    let sum = sum.split_whitespace().next().expect("a sum");
    let pkgbuild = std::fs::read_to_string(dist.join("PKGBUILD")).expect("dist/PKGBUILD");
    assert!(
        pkgbuild.contains(&format!("\nsha256sums=('{sum}')\n")),
        "dist/PKGBUILD does not carry {sum}"
    );
    // Nothing but the sums differs from the PKGBUILD in the tree.
    let tree = std::fs::read_to_string(repo().join("PKGBUILD")).expect("PKGBUILD");
    let others = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with("sha256sums="))
            .map(String::from)
            .collect()
    };
    assert_eq!(others(&pkgbuild), others(&tree));
    let listing = run(Command::new("tar").arg("-tzf").arg(&tarball));
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "src/main.rs",
        "PKGBUILD",
        UNIT,
        "LICENSE",
    ] {
        let want = format!("mesh-host-{VERSION}/{file}");
        assert!(
            listing.lines().any(|l| l == want),
            "the tarball lacks {want}"
        );
    }
}

/// Both builds are the same program: the package's binary (built by makepkg from the source
/// tarball) and build.sh's give the same `--version` and the same `check` of a declaration.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_packages_binary_behaves_as_build_shs() {
    let _sandbox = support::sandbox();
    let root = scratch("same");
    run(Command::new("tar")
        .arg("--zstd")
        .arg("-xf")
        .arg(&packages().rel1)
        .arg("-C")
        .arg(&root)
        .arg("usr/bin/mesh-host"));
    let packaged = root.join("usr/bin/mesh-host");
    let floor = dist().unpacked.join("mesh-host");
    let declaration = root.join("decl.json");
    std::fs::write(
        &declaration,
        r#"{"schema": 1, "revision": 3, "files": {"/etc/motd": {"content": "hi\n", "mode": "0644"}},
            "packages": {"htop": {}}, "units": {"x.service": {"enabled": true}}}"#,
    )
    .expect("declaration");
    let bad = root.join("bad.json");
    std::fs::write(&bad, r#"{"schema": 1, "files": {"etc/motd": {}}}"#).expect("bad");
    let outcome = |binary: &Path, args: &[&Path]| {
        let out = Command::new(binary).args(args).output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let version = outcome(&packaged, &[Path::new("--version")]);
    assert_eq!(version.1.trim(), format!("mesh-host {VERSION}"));
    for args in [
        vec![Path::new("--version")],
        vec![Path::new("check"), &declaration],
        vec![Path::new("check"), &bad],
    ] {
        assert_eq!(
            outcome(&packaged, &args),
            outcome(&floor, &args),
            "{args:?}"
        );
    }
    let kind = run(Command::new("file").arg("-b").arg(&packaged));
    assert!(kind.contains("static"), "not static: {kind}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn pacman_installs_upgrades_and_removes_the_package_in_the_sandbox() {
    // Alone: pacman refuses a second transaction on its lock, and the package is foreign there.
    let sandbox = support::sandbox_alone();
    let packages = packages();
    let pacman = sandbox_pacman(&sandbox);
    // The sandbox root has no /bin/sh, so pacman skips the scriptlets here, as it does in any root
    // without a shell; the next test runs them.
    let root = &sandbox.pacman_root;
    let at = |p: &str| root.join(p);

    pacman(&["-U", packages.rel1.to_str().unwrap()]);
    assert_eq!(
        pacman(&["-Q", "nox-mesh-host"]).trim(),
        format!("nox-mesh-host {VERSION}-1")
    );
    let bin = at("usr/bin/mesh-host");
    assert_eq!(mode(&bin) & 0o7777, 0o755);
    assert_eq!(
        run(Command::new(&bin).arg("--version")).trim(),
        format!("mesh-host {VERSION}")
    );
    assert_eq!(
        std::fs::read(at("usr/lib/systemd/system/mesh-host.service")).unwrap(),
        std::fs::read(repo().join(UNIT)).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(at("etc/mesh-host/config.json")).unwrap(),
        "{}\n"
    );
    let state = at("var/lib/mesh-host");
    assert!(
        state.is_dir() && mode(&state) & 0o7777 == 0o700,
        "{:o}",
        mode(&state)
    );
    assert!(at("usr/share/licenses/nox-mesh-host/LICENSE").is_file());
    // The manual (makepkg compresses man pages), completions, schemas and docs.
    for (installed, source) in shared() {
        let path = at(&format!("usr/share/{installed}"));
        if installed.starts_with("man/") {
            let gz = PathBuf::from(format!("{}.gz", path.display()));
            let text = run(Command::new("zcat").arg(&gz));
            assert_eq!(
                text.as_bytes(),
                std::fs::read(repo().join(&source)).unwrap()
            );
        } else {
            assert_eq!(
                std::fs::read(&path).unwrap_or_else(|e| panic!("{installed}: {e}")),
                std::fs::read(repo().join(&source)).unwrap(),
                "{installed}"
            );
        }
    }
    let info = pacman(&["-Qii", "nox-mesh-host"]);
    assert!(
        info.contains("/etc/mesh-host/config.json"),
        "config not in backup=:\n{info}"
    );
    // The default config is one the host accepts.
    run(Command::new(&bin)
        .arg("--config")
        .arg(at("etc/mesh-host/config.json"))
        .args(["--state-dir", state.to_str().unwrap(), "status"]));

    // Upgrade to a bumped pkgrel: a config the admin changed is kept as is (backup=).
    let changed = "{\"pacman_lock_wait_secs\": 60}\n";
    std::fs::write(at("etc/mesh-host/config.json"), changed).unwrap();
    pacman(&["-U", packages.rel2.to_str().unwrap()]);
    assert_eq!(
        pacman(&["-Q", "nox-mesh-host"]).trim(),
        format!("nox-mesh-host {VERSION}-2")
    );
    assert_eq!(
        std::fs::read_to_string(at("etc/mesh-host/config.json")).unwrap(),
        changed
    );
    assert!(!at("etc/mesh-host/config.json.pacnew").exists());
    assert!(bin.is_file() && mode(&state) & 0o7777 == 0o700);

    // Remove: the package's files go; a store the host wrote and the changed config stay.
    std::fs::write(state.join("ledger.json"), "{}").unwrap();
    pacman(&["-R", "nox-mesh-host"]);
    assert!(Command::new("pacman")
        .args(["--config", &sandbox.pacman_conf, "-Q", "nox-mesh-host"])
        .output()
        .is_ok_and(|o| o.status.code() == Some(1)));
    for gone in [
        "usr/bin/mesh-host",
        "usr/lib/systemd/system/mesh-host.service",
    ] {
        assert!(!at(gone).exists(), "{gone} left behind");
    }
    assert!(!at("usr/share/doc/mesh-host").exists());
    assert_eq!(
        std::fs::read_to_string(at("etc/mesh-host/config.json.pacsave")).unwrap(),
        changed
    );
    assert!(state.join("ledger.json").is_file(), "the store was removed");
    std::fs::remove_dir_all(at("etc/mesh-host")).unwrap();
    std::fs::remove_dir_all(&state).unwrap();
}

/// makepkg strips the package's binary and puts its debug info in nox-mesh-host-debug (Cargo's
/// strip is off in build()); no builder's path (CARGO_HOME, the build dir) is in the binary.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_debug_info_is_in_the_debug_package_and_no_builders_path_in_the_binary() {
    let _sandbox = support::sandbox();
    let packages = packages();
    let root = scratch("debug");
    run(Command::new("tar")
        .arg("--zstd")
        .arg("-xf")
        .arg(&packages.rel1)
        .arg("-C")
        .arg(&root)
        .arg("usr/bin/mesh-host"));
    let binary = root.join("usr/bin/mesh-host");
    let kind = run(Command::new("file").arg("-b").arg(&binary));
    assert!(kind.contains(", stripped"), "{kind}");
    let listing = run(Command::new("tar")
        .arg("--zstd")
        .arg("-tf")
        .arg(&packages.debug));
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("usr/lib/debug/.build-id/") && l.ends_with(".debug")),
        "no debug file in nox-mesh-host-debug:\n{listing}"
    );
    let strings = run(Command::new("strings").arg(&binary));
    for builder in [
        "cargo-home",
        "/root/.cargo",
        "/mesh-host-makepkg/",
        "/nonexistent",
    ] {
        assert!(!strings.contains(builder), "{builder} is in the binary");
    }
    assert!(
        strings.contains("/cargo/registry/"),
        "the crates' paths, remapped"
    );
    std::fs::remove_dir_all(&root).expect("cleanup");
}

/// `join` writes join.json, no package's file: removing and reinstalling the package puts back its
/// config.json and the node is still joined. A node an older join left with `control_plane` in
/// config.json (the package's, in backup=) keeps it across an upgrade, and a new join moves it.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_reinstall_keeps_the_join() {
    // Alone: pacman refuses a second transaction on its lock, and the package is foreign there.
    let sandbox = support::sandbox_alone();
    let packages = packages();
    let pacman = sandbox_pacman(&sandbox);
    let root = &sandbox.pacman_root;
    let at = |p: &str| root.join(p);
    let _ = std::fs::remove_dir_all(at("etc/mesh-host"));
    let config = at("etc/mesh-host/config.json");
    let state = scratch("rejoin-store");
    let host = |args: &[&str]| -> support::Output {
        let out = Command::new(at("usr/bin/mesh-host"))
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .output()
            .expect("mesh-host");
        support::Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let pki = support::pki::Pki::new();
    let cp = support::control_plane::ControlPlane::start(
        &pki,
        support::control_plane::CpConfig::new("", ""),
    );
    let hour = std::time::Duration::from_secs(3600);
    let join = |token: &str, extra: &[&str]| {
        cp.add_token(token, hour);
        let args = cp.join_command(token, extra);
        host(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // An older join wrote its section into config.json: the upgrade keeps the file as it is.
    pacman(&["-U", packages.rel1.to_str().unwrap()]);
    let older = r#"{"control_plane": {"address": "old.example:1", "ca_file": "/etc/mesh-host/ca.pem",
                    "node": "old", "secret_file": "/etc/mesh-host/secret"}}"#;
    std::fs::write(&config, older).unwrap();
    pacman(&["-U", packages.rel2.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), older);
    assert!(!at("etc/mesh-host/config.json.pacnew").exists());
    let out = join("t1", &[]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("this node already joined");
    // A new join moves the section to join.json, leaving config.json as the package ships it.
    let out = join("t2", &["--force"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "{}\n");
    let joined = std::fs::read(at("etc/mesh-host/join.json")).expect("join.json");

    // Remove and reinstall: config.json is the package's again, join.json was never pacman's.
    pacman(&["-R", "nox-mesh-host"]);
    assert!(!at("etc/mesh-host/config.json.pacsave").exists());
    assert_eq!(
        std::fs::read(at("etc/mesh-host/join.json")).unwrap(),
        joined
    );
    pacman(&["-U", packages.rel1.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "{}\n");
    let owner = pacman(&["-Qo", at("etc/mesh-host/config.json").to_str().unwrap()]);
    assert!(owner.contains("nox-mesh-host"), "{owner}");
    let out = Command::new("pacman")
        .args(["--config", &sandbox.pacman_conf, "-Qo"])
        .arg(at("etc/mesh-host/join.json"))
        .output()
        .expect("pacman -Qo");
    assert!(!out.status.success(), "pacman owns join.json");
    // The node still knows its control plane.
    let out = join("t3", &[]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("join.json has a control_plane section");

    pacman(&["-R", "nox-mesh-host"]);
    std::fs::remove_dir_all(at("etc/mesh-host")).unwrap();
    let _ = std::fs::remove_dir_all(at("var/lib/mesh-host"));
    std::fs::remove_dir_all(&state).unwrap();
}

/// The install scriptlets, run by pacman in a root of its own that has a shell (busybox) and a
/// fake systemctl logging its arguments: nothing without systemd as PID 1 (/run/systemd/system),
/// else `daemon-reload` and `try-restart --no-block` on upgrade and `disable --now` on removal.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_scriptlets_restart_without_blocking_and_only_under_systemd() {
    let _sandbox = support::sandbox();
    let packages = packages();
    let dir = scratch("scriptlets");
    let root = dir.join("root");
    for d in [
        "usr/bin",
        "tmp",
        "var/lib/pacman",
        "var/cache/pacman/pkg",
        "var/log",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("usr/bin/busybox")).expect("busybox-static");
    for applet in ["sh", "cat"] {
        std::os::unix::fs::symlink("busybox", root.join("usr/bin").join(applet)).unwrap();
    }
    std::fs::write(
        root.join("usr/bin/systemctl"),
        "#!/bin/sh\necho \"systemctl $*\" >> /systemctl.log\n",
    )
    .unwrap();
    std::fs::set_permissions(
        root.join("usr/bin/systemctl"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let conf = dir.join("pacman.conf");
    std::fs::write(&conf, support::pacman_conf(&root, None)).unwrap();
    let pacman = |args: &[&str]| {
        run(Command::new("pacman")
            .arg("--config")
            .arg(&conf)
            .arg("--noconfirm")
            .args(args))
    };
    let log = || std::fs::read_to_string(root.join("systemctl.log")).unwrap_or_default();
    let (rel1, rel2) = (
        packages.rel1.to_str().unwrap(),
        packages.rel2.to_str().unwrap(),
    );

    let out = pacman(&["-U", rel1]);
    assert!(
        out.contains("systemctl enable --now mesh-host.service")
            && out.contains("mesh-host join --control-plane"),
        "post_install does not give the two steps:\n{out}"
    );
    pacman(&["-U", rel2]);
    assert_eq!(log(), "", "systemctl ran without systemd as PID 1");

    std::fs::create_dir_all(root.join("run/systemd/system")).unwrap();
    pacman(&["-U", rel1]); // a downgrade runs post_upgrade too
    assert_eq!(
        log(),
        "systemctl daemon-reload\nsystemctl try-restart --no-block mesh-host.service\n"
    );
    let out = pacman(&["-R", "nox-mesh-host"]);
    assert_eq!(
        log(),
        "systemctl daemon-reload\nsystemctl try-restart --no-block mesh-host.service\n\
         systemctl disable --now mesh-host.service\n"
    );
    assert!(
        out.contains("/var/lib/mesh-host"),
        "post_remove says nothing:\n{out}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

//! The manual on the machine: `share/` (man pages, completions, JSON Schemas) is what the
//! program's tables generate now; the man pages render without a warning; the completions
//! complete in real bash, zsh and fish; the JSON Schemas accept every declaration `check`
//! accepts and refuse what `check` refuses for its shape (python3's jsonschema validates).
//! That every command, option, config key and declaration field is in them is checked beside
//! the generator (`src/cli/manual.rs`), against the parsers themselves.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn share(path: &str) -> PathBuf {
    repo().join("share").join(path)
}

fn output(command: &mut Command) -> (i32, String, String) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn share_is_what_the_tables_generate() {
    let mut stale = Vec::new();
    for (path, text) in mesh_host::manual::files() {
        if std::fs::read_to_string(share(path)).ok().as_deref() != Some(text.as_str()) {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "share/ is stale ({stale:?}): run `cargo run --example gen-docs -- share` and commit it"
    );
}

#[test]
fn the_man_pages_render_without_a_warning() {
    for (page, title) in [
        ("mesh-host.8", "MESH-HOST(8)"),
        ("mesh-host.json.5", "MESH-HOST.JSON(5)"),
        ("mesh-host-config.5", "MESH-HOST-CONFIG(5)"),
    ] {
        let (code, text, warnings) = output(
            Command::new("groff")
                .args(["-man", "-ww", "-Tutf8"])
                .arg(share(&format!("man/{page}")))
                .env("LC_ALL", "C.UTF-8"),
        );
        assert_eq!((code, warnings.as_str()), (0, ""), "{page}");
        assert!(text.contains(title), "{page}: {text}");
    }
}

/// What `line` completes to in bash (the words before the cursor, the last one being typed).
fn bash(line: &[&str]) -> String {
    let script = format!(
        "source {}; COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _mesh_host 2>/dev/null; \
         echo \"${{COMPREPLY[*]}}\"",
        share("completions/mesh-host.bash").display()
    );
    let (code, out, err) = output(
        Command::new("bash")
            .args(["-c", &script, "bash"])
            .args(line),
    );
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

/// What fish completes `line` to: the words, without their descriptions.
fn fish(line: &str) -> Vec<String> {
    let script = format!(
        "source {}; complete -C '{line}'",
        share("completions/mesh-host.fish").display()
    );
    let (code, out, err) = output(Command::new("fish").args(["--no-config", "-c", &script]));
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .collect()
}

#[test]
#[ignore = "needs the sandbox's packages (zsh, fish): run ./tests/run.sh as root"]
fn the_completions_complete_commands_options_and_files() {
    assert_eq!(bash(&["mesh-host", "ap"]), "apply");
    assert_eq!(bash(&["mesh-host", "apply", "--c"]), "--confirm --config");
    // An option of another command is not offered.
    assert_eq!(bash(&["mesh-host", "status", "--c"]), "--config");
    assert_eq!(bash(&["mesh-host", "--json", "rel"]), "reload");
    assert_eq!(bash(&["mesh-host", "help", "jo"]), "join");
    assert_eq!(bash(&["mesh-host", "join", "--token-f"]), "--token-file");
    let dir = repo().join("examples");
    let typed = format!("{}/web-", dir.display());
    assert_eq!(
        bash(&["mesh-host", "plan", &typed]),
        format!("{}/web-node.json", dir.display())
    );

    assert_eq!(fish("mesh-host ap"), ["apply"]);
    assert_eq!(fish("mesh-host apply --c"), ["--config", "--confirm"]);
    assert_eq!(fish("mesh-host status --c"), ["--config"]);
    assert_eq!(fish("mesh-host keygen --o"), ["--out"]);
    assert_eq!(
        fish(&format!("mesh-host check {typed}")),
        [format!("{}/web-node.json", dir.display())]
    );

    let (code, _, err) = output(
        Command::new("zsh")
            .arg("-n")
            .arg(share("completions/_mesh-host")),
    );
    assert_eq!((code, err.as_str()), (0, ""), "zsh -n");
}

/// Validates each `(schema, instance)` with python3's jsonschema (draft 2020-12): `None` when
/// valid, else the first error.
fn validate(cases: &[(&str, &Path)]) -> Vec<Option<String>> {
    const SCRIPT: &str = r#"
import json, sys, jsonschema
for line in sys.stdin:
    schema, instance = json.loads(line)
    with open(schema) as f: s = json.load(f)
    jsonschema.Draft202012Validator.check_schema(s)
    with open(instance) as f: i = json.load(f)
    errors = list(jsonschema.Draft202012Validator(s).iter_errors(i))
    print(json.dumps(None if not errors else errors[0].message))
"#;
    let input: String = cases
        .iter()
        .map(|(schema, file)| {
            serde_json::json!([share(&format!("schema/{schema}")), file]).to_string() + "\n"
        })
        .collect();
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "python3 jsonschema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a line of JSON"))
        .collect()
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mesh-manual-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// `mesh-host check FILE` with a default config and a scratch store: its exit code and stderr.
fn check(dir: &Path, file: &Path, config: &Path) -> (i32, String) {
    let (code, _, err) = output(
        Command::new(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(dir.join("store"))
            .arg("check")
            .arg(file),
    );
    (code, err)
}

/// The shapes `check` refuses, which the schema must refuse too.
const WRONG_SHAPES: &[&str] = &[
    r#"{"revision": 1}"#,
    r#"{"schema": 2}"#,
    r#"{"schema": "1"}"#,
    r#"{"schema": 1, "revision": -1}"#,
    r#"{"schema": 1, "colour": "blue"}"#,
    r#"{"schema": 1, "packages_upgrade": "yes"}"#,
    r#"{"schema": 1, "files": []}"#,
    r#"{"schema": 1, "packages": {"htop": {"state": "gone"}}}"#,
    r#"{"schema": 1, "packages": {"htop": {"version": "1"}}}"#,
    r#"{"schema": 1, "files": {"/etc/x": {"mode": "0644"}}}"#,
    r#"{"schema": 1, "files": {"/etc/x": {"content": 1}}}"#,
    r#"{"schema": 1, "files": {"/etc/x": {"content": "x", "secret": "yes"}}}"#,
    r#"{"schema": 1, "units": {"x.service": {"enabeld": true}}}"#,
    r#"{"schema": 1, "units": {"x.service": {"restart_on": "/etc/x"}}}"#,
    r#"{"schema": 1, "containers": {"web": {"command": ["x"]}}}"#,
    r#"{"schema": 1, "containers": {"web": {"image": "i", "env": {"A": 1}}}}"#,
];

/// Declarations `check` accepts that no fixture has: every field of every kind, and `$schema`.
const ACCEPTED: &[&str] = &[
    r#"{"$schema": "/usr/share/mesh-host/declaration.schema.json", "schema": 1}"#,
    r#"{"schema": 1, "revision": 3, "expires": 4000000000, "packages_upgrade": true,
        "packages": {"htop": {}, "telnet": {"state": "absent"}},
        "files": {"/etc/a": {"content": "a", "mode": "0640", "owner": "root", "group": "0",
                             "secret": false},
                  "/etc/b": {"content_base64": "AAE="}, "/etc/c": {"state": "absent"}},
        "units": {"a.service": {"enabled": true, "active": false, "package": "htop",
                                "content": "[Service]\nExecStart=/bin/true\n", "secret": true,
                                "restart_on": ["/etc/a"], "reload_on": ["/etc/b"],
                                "restart_when_stale": true},
                  "b.service": {"state": "absent"}},
        "containers": {"web": {"image": "localhost/web:1", "command": ["serve"],
                               "env": {"A": "1"}, "ports": ["127.0.0.1:8080:80"],
                               "volumes": ["/srv/web:/data:ro"], "network": "host",
                               "init": true, "running": false},
                       "old": {"state": "absent"}}}"#,
];

#[test]
#[ignore = "needs the sandbox's packages (python3-jsonschema): run ./tests/run.sh as root"]
fn the_declaration_schema_accepts_what_check_accepts_and_refuses_wrong_shapes() {
    let dir = scratch("declaration");
    let config = dir.join("config.json");
    std::fs::write(&config, "{}").expect("config");
    let mut files: Vec<PathBuf> = Vec::new();
    for folder in [
        "examples",
        "tests/golden/fixtures",
        "tests/pid1/refused",
        "fuzz/corpus/declaration",
    ] {
        for entry in std::fs::read_dir(repo().join(folder)).expect(folder) {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    for (i, text) in ACCEPTED.iter().enumerate() {
        let path = dir.join(format!("accepted-{i}.json"));
        std::fs::write(&path, text).expect("write");
        files.push(path);
    }
    // Only JSON objects are for the schema (the fixtures hold broken JSON on purpose).
    let valid_json = |path: &Path| {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v.is_object())
    };
    let accepted: Vec<&PathBuf> = files
        .iter()
        .filter(|f| valid_json(f) && check(&dir, f, &config).0 == 0)
        .collect();
    assert!(
        accepted.len() >= 6,
        "too few declarations accepted: {accepted:?}"
    );
    for path in files
        .iter()
        .filter(|f| f.starts_with(repo().join("examples")))
    {
        assert!(accepted.contains(&path), "check refuses {}", path.display());
    }
    let cases: Vec<(&str, &Path)> = accepted
        .iter()
        .map(|f| ("declaration.schema.json", f.as_path()))
        .collect();
    for ((_, file), verdict) in cases.iter().zip(validate(&cases)) {
        assert_eq!(verdict, None, "the schema refuses {}", file.display());
    }

    let mut wrong = Vec::new();
    for (i, text) in WRONG_SHAPES.iter().enumerate() {
        let path = dir.join(format!("wrong-{i}.json"));
        std::fs::write(&path, text).expect("write");
        let (code, err) = check(&dir, &path, &config);
        assert_eq!(code, 2, "check accepts {text}: {err}");
        wrong.push(path);
    }
    let cases: Vec<(&str, &Path)> = wrong
        .iter()
        .map(|f| ("declaration.schema.json", f.as_path()))
        .collect();
    for ((i, text), verdict) in WRONG_SHAPES.iter().enumerate().zip(validate(&cases)) {
        assert!(verdict.is_some(), "the schema accepts {i}: {text}");
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
#[ignore = "needs the sandbox's packages (python3-jsonschema): run ./tests/run.sh as root"]
fn the_config_schema_accepts_what_the_host_accepts_and_refuses_wrong_shapes() {
    let dir = scratch("config");
    let declaration = repo().join("examples/scratch.json");
    let good = [
        "{}",
        r#"{"$schema": "/usr/share/mesh-host/config.schema.json", "interval_secs": 60}"#,
        r#"{"pacman": {"command": ["pacman", "--config", "/x"], "timeout_secs": 5,
            "grace_secs": 0}, "watch": false, "generations": 2, "confirm_secs": 0,
            "control_plane": {"address": "cp.example:7443", "ca_file": "/etc/mesh-host/ca.pem",
                              "node": "n1", "secret_file": "/etc/mesh-host/secret",
                              "server_name": "cp"},
            "metrics_file": "/run/m.prom", "cache_keep": 2, "unit_name": "agent.service"}"#,
    ];
    let bad = [
        r#"{"state_dri": "/x"}"#,
        r#"{"interval_secs": "60"}"#,
        r#"{"interval_secs": 0}"#,
        r#"{"watch": 1}"#,
        r#"{"pacman": {"command": "pacman"}}"#,
        r#"{"pacman": {"timeout": 5}}"#,
        r#"{"generations": 1}"#,
        r#"{"control_plane": {"address": "cp:1", "ca_file": "/c", "secret_file": "/s"}}"#,
    ];
    let mut cases = Vec::new();
    for (i, text) in good.iter().chain(&bad).enumerate() {
        let path = dir.join(format!("config-{i}.json"));
        std::fs::write(&path, text).expect("write");
        let (code, err) = check(&dir, &declaration, &path);
        assert_eq!(code == 0, i < good.len(), "{text}: {err}");
        cases.push(path);
    }
    let pairs: Vec<(&str, &Path)> = cases
        .iter()
        .map(|p| ("config.schema.json", p.as_path()))
        .collect();
    for ((i, text), verdict) in good.iter().chain(&bad).enumerate().zip(validate(&pairs)) {
        assert_eq!(verdict.is_none(), i < good.len(), "{text}: {verdict:?}");
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

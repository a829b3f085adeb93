//! A no-op reconcile costs one batched query per tool, however many resources are declared: the
//! command count of a second apply is the same for a few resources of every kind as for many.
//! And a no-op after a no-op writes nothing durable.

use serde_json::{json, Map, Value};

use crate::support::{sandbox, Sandbox, Scratch};

/// The sandbox repo's packages; the package part of a declaration never exceeds them.
const PACKAGES: [&str; 5] = ["mesh-a", "mesh-b", "mesh-c", "mesh-d", "mesh-e"];

/// `per_kind` resources of each kind (packages capped at the repo's five): files in a directory
/// of the real /etc unique to this test process, units with content, containers.
fn declaration(sb: &Sandbox, per_kind: usize) -> Value {
    let pid = std::process::id();
    let mut packages = Map::new();
    for name in PACKAGES.iter().take(per_kind) {
        packages.insert(name.to_string(), json!({}));
    }
    let (mut files, mut units, mut containers) = (Map::new(), Map::new(), Map::new());
    for i in 0..per_kind {
        files.insert(
            format!("/etc/mesh-it-{pid}/f{i}.conf"),
            json!({"content": format!("setting = {i}\n")}),
        );
        units.insert(
            format!("mesh-it-noop-{pid}-{i}.service"),
            json!({
                "content": format!("[Service]\nExecStart=/bin/sleep infinity\n# {i}\n"),
                "active": true
            }),
        );
        containers.insert(
            format!("mesh-it-noop-{pid}-{i}"),
            json!({"image": sb.image, "command": ["sleep", "1000"], "init": true}),
        );
    }
    json!({
        "schema": 1,
        "packages": packages,
        "files": files,
        "units": units,
        "containers": containers,
    })
}

/// Applies `per_kind` resources of each kind, then returns the second (no-op) apply's commands.
fn no_op_commands(sb: &Sandbox, host: &Scratch, per_kind: usize) -> Vec<String> {
    let declaration = declaration(sb, per_kind);
    host.apply_json(&declaration.to_string(), 0);
    let second = host.apply_json(&declaration.to_string(), 0);
    for list in ["changes", "failures", "deferred", "adopted"] {
        assert_eq!(second[list], json!([]), "{list} of a no-op: {second:#}");
    }
    let resources = ["packages", "files", "units", "containers"]
        .iter()
        .map(|kind| declaration[kind].as_object().map_or(0, Map::len))
        .sum::<usize>();
    assert_eq!(second["in_sync"], json!(resources), "{second:#}");
    let commands: Vec<String> = second["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c.as_str().expect("command line").to_string())
        .collect();
    assert_eq!(second["command_count"], json!(commands.len()));
    println!(
        "{per_kind} per kind ({resources} resources): no-op ran {} commands: {commands:?}",
        commands.len()
    );
    commands
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn no_op_command_count_does_not_grow_with_resources() {
    let sb = sandbox();
    let host = sb.host("noop", "");
    let few = no_op_commands(&sb, &host, 2);
    let many = no_op_commands(&sb, &host, 20);

    // Release everything (packages, /etc files, units, containers) before judging.
    let released = host.apply_json(r#"{"schema": 1}"#, 0);
    let dir = format!("/etc/mesh-it-{}", std::process::id());
    let left = std::path::Path::new(&dir).exists();

    assert_eq!(few.len(), many.len(), "few: {few:?}\nmany: {many:?}");
    for tool in ["pacman", "systemctl", "podman"] {
        let calls = |commands: &[String]| {
            commands
                .iter()
                .filter(|c| c.split_whitespace().next() == Some(tool))
                .count()
        };
        println!("{tool}: {} then {} calls", calls(&few), calls(&many));
        assert!(calls(&many) >= 1, "{tool} observed nothing: {many:?}");
        assert_eq!(calls(&few), calls(&many), "{tool}: {few:?}\n{many:?}");
    }
    assert_eq!(released["failures"], json!([]), "{released:#}");
    assert!(!left, "{dir} is left behind after releasing its files");
}

/// 20,000 packages and 10,000 units whose names exceed what one command line can carry (about 4
/// and 2.5 MB of names against the kernel's 2 MB): each batched query is split, still a handful
/// of commands per kind, and every name is answered.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn tens_of_thousands_of_names_are_split_under_the_argument_limit() {
    let sb = sandbox();
    let host = sb.host("many-names", "");
    let pid = std::process::id();
    let long = "x".repeat(200);
    let packages: Map<String, Value> = (0..20_000)
        .map(|i| {
            (
                format!("mesh-it-{pid}-{long}-{i}"),
                json!({"state": "absent"}),
            )
        })
        .collect();
    let units: Map<String, Value> = (0..10_000)
        .map(|i| {
            let name = format!("mesh-it-{pid}-{long}-{i}.service");
            (name, json!({"state": "absent"}))
        })
        .collect();
    let declaration = json!({"schema": 1, "packages": packages, "units": units});
    let file = host.declaration("many.json", &declaration.to_string());
    let out = host.run(&[
        "plan",
        "--json",
        "--trace-commands",
        file.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let plan = out.json();
    assert_eq!(plan["failures"], json!([]), "{}", out.stderr);
    assert_eq!(plan["in_sync"], json!(30_000), "{}", out.stderr);
    let commands: Vec<&str> = plan["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let calls = |tool: &str| {
        commands
            .iter()
            .filter(|c| c.split_whitespace().next() == Some(tool))
            .count()
    };
    println!(
        "20,000 packages and 10,000 units: {} pacman and {} systemctl commands",
        calls("pacman"),
        calls("systemctl")
    );
    let heads: Vec<&str> = commands.iter().map(|c| &c[..c.len().min(80)]).collect();
    assert!((2..=8).contains(&calls("pacman")), "{heads:#?}");
    assert!((2..=8).contains(&calls("systemctl")), "{heads:#?}");
}

/// Every file under `dir` (recursively) but the lock and quiet.json, with its inode, modification
/// time and size: what a durable write (a temp renamed over it) changes.
fn durable_stamps(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("store dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if meta.is_dir() {
                dirs.push(path.clone());
            }
            if name != "lock" && name != "quiet.json" {
                found.push((
                    path,
                    meta.ino(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.size(),
                ));
            }
        }
    }
    found.sort();
    found
}

/// A no-op after a no-op (500 files under `--root`) writes nothing durable: no store file is
/// replaced or touched (its record goes to quiet.json, written without fsync), and where strace
/// is installed the process makes no fsync at all. `status` still lists the no-ops.
#[test]
fn a_no_op_after_a_no_op_writes_nothing_durable() {
    let host = Scratch::new("noop-durable");
    let files: Map<String, Value> = (0..500)
        .map(|i| {
            let content = format!("setting = {i}\n");
            (
                format!("/etc/mesh-noop/f{i}.conf"),
                json!({"content": content}),
            )
        })
        .collect();
    let file = host.declaration("d.json", &json!({"schema": 1, "files": files}).to_string());
    // Converged, then no-ops: one may complete the files index, a file's stamp being trusted only
    // once it is clearly older than the observation (`fsutil::is_cacheable`); by the second, the
    // whole process of the first lies between.
    for _ in 0..3 {
        host.apply(&file, 0);
    }
    let before = durable_stamps(&host.state());
    host.apply(&file, 0);
    assert_eq!(durable_stamps(&host.state()), before);

    let strace = std::process::Command::new("strace").arg("-V").output();
    if strace.is_ok_and(|o| o.status.success()) {
        let counts = host.dir.join("strace.txt");
        let mut command = std::process::Command::new("strace");
        command.args(["-f", "-c", "-o"]).arg(&counts);
        command.args([
            "-e",
            "trace=fsync,fdatasync,sync,syncfs,rename,renameat,renameat2",
        ]);
        let mesh_host = host.command(&["apply", file.to_str().expect("utf-8 path")]);
        command
            .arg(mesh_host.get_program())
            .args(mesh_host.get_args());
        let out = command.output().expect("strace");
        assert!(out.status.success(), "{out:?}");
        let counts = std::fs::read_to_string(&counts).expect("strace's counts");
        println!("strace -c of a no-op:\n{counts}");
        assert!(!counts.contains("sync"), "{counts}");
        let renames: u64 = counts
            .lines()
            .filter(|l| l.contains("rename"))
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum();
        assert_eq!(renames, 1, "only quiet.json's: {counts}");
    } else {
        println!("strace is not installed: the fsync count is not checked");
    }
    let status = host.run(&["--json", "status"]).json();
    let runs = status["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 5, "{status:#}");
    assert!(
        runs[1..].iter().all(|r| r["changes"] == json!([])),
        "{status:#}"
    );
}

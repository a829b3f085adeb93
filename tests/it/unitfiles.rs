//! The self-refusal model's unit-file reader (`src/model/unitfile.rs`, `src/model/selfref.rs`) against real
//! systemd: every unit file the test machine ships, each with systematic syntax mutations that
//! insert a reference to the host's unit (byte-order marks, line ends, backslashes, quotes,
//! specifiers, continuations, comments, case). The sandbox's `systemd --user` manager loads every
//! mutation under a scratch name at once (one `daemon-reload`, kept loaded by a running holder
//! ordered after them all) and says what it now ties to the host's units (`systemctl show` of
//! their reverse dependencies); `systemctl --root` enables the `[Install]` mutations offline and
//! the links it makes say the same of `[Install]`. One `mesh-host check` of a declaration of all
//! of them (as unit files under /etc/systemd/system and as declared units) says what the model
//! refuses. Whatever systemd ties to a host unit the model must refuse (no bypass); every
//! unmutated file, and everyday cases, it must accept (no false refusal).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::support::{sandbox_alone, snapshot, Scratch};

/// Where the test machine keeps unit files (`/lib` is a link to `/usr/lib` on merged systems).
const CORPUS_DIRS: [&str; 4] = [
    "/usr/lib/systemd/system",
    "/usr/lib/systemd/user",
    "/etc/systemd/system",
    "/etc/systemd/user",
];

/// Every unit type systemd loads files for, the declarable ones first (this test's own list, not
/// `unitfile`'s: it checks that model).
const UNIT_TYPES: [&str; 11] = [
    "service",
    "socket",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "device",
    "scope",
];

/// Types the units kind declares: all but the last two (`device` and `scope` only as files).
const DECLARABLE: &[&str] = UNIT_TYPES.split_at(UNIT_TYPES.len() - 2).0;

/// The protected units: the host's service and its activation siblings (the config's default).
const PROTECTED: [&str; 4] = [
    "mesh-host.service",
    "mesh-host.socket",
    "mesh-host.timer",
    "mesh-host.path",
];

/// What systemd shows on a unit for another unit's tie to it.
const REVERSE: &str = "Names,DropInPaths,Requires,Wants,BindsTo,Upholds,RequiredBy,RequisiteOf,\
     WantedBy,BoundBy,UpheldBy,ConsistsOf,ConflictedBy,Conflicts,After,TriggeredBy,OnFailureOf,\
     OnSuccessOf,ReloadPropagatedFrom,PropagatesReloadTo,StopPropagatedFrom,PropagatesStopTo,\
     JoinsNamespaceOf";

/// Drop-in directories systemd reads for the protected units.
const HOST_DIRS: [&str; 4] = [
    "mesh-host.service.d",
    "mesh-.service.d",
    "service.d",
    "mesh-host.timer.d",
];

/// `[Unit]` keys the mutations take turns with.
const UNIT_KEYS: [&str; 11] = [
    "Wants",
    "Requires",
    "BindsTo",
    "PartOf",
    "Conflicts",
    "Before",
    "OnFailure",
    "Upholds",
    "PropagatesStopTo",
    "Requisite",
    "OnSuccess",
];

/// A line appended to a unit file, `{k}` a `[Unit]` key, `{r}` the host's service.
const UNIT_MUTATIONS: [(&str, &str); 20] = [
    ("plain", "[Unit]\n{k}={r}\n"),
    ("bom-section", "[X-Hidden]\n\u{feff}[Unit]\n{k}={r}\n"),
    ("bom-key", "[Unit]\n\u{feff}{k}={r}\n"),
    ("eol-nr", "[Unit]\n{k}=junk.service \\\n\r{r}\n"),
    ("eol-n0", "[Unit]\n{k}=junk.service \\\n\0{r}\n"),
    ("eol-r0", "[Unit]\n{k}=junk.service \\\r\0{r}\n"),
    ("eol-rn0", "[Unit]\n{k}=junk.service \\\r\n\0{r}\n"),
    ("eol-r", "[Unit]\n{k}=junk.service \\\r{r}\n"),
    ("backslash-blank", "[Unit]\n{k}=junk\\ {r}\n"),
    ("backslash-dash", "[Unit]\n{k}=mesh\\-host.service\n"),
    ("quoted", "[Unit]\n{k}=\"{r}\"\n"),
    ("hex", "[Unit]\n{k}=mesh\\x2dhost.service\n"),
    (
        "comment-in-continuation",
        "[Unit]\n{k}=junk.service \\\n# note\n {r}\n",
    ),
    (
        "comment-ending-in-backslash",
        "[Unit]\n# note \\\n{k}={r}\n",
    ),
    ("continuation", "[Unit]\n{k}=\\\n  {r}\n"),
    ("blanks", "[Unit]\n \t{k} \t= \t{r} \t\n"),
    ("case-section", "[unit]\n{k}={r}\n"),
    ("case-key", "[Unit]\n{lower}={r}\n"),
    ("specifier-j", "[Unit]\n{k}=%j-host.service\n"),
    ("specifier-i", "[Unit]\n{k}=%i.service\n"),
];

/// `[Install]` lines appended, enabled offline.
const INSTALL_MUTATIONS: [(&str, &str); 8] = [
    ("install-wantedby", "[Install]\nWantedBy={r}\n"),
    ("install-alias", "[Install]\nAlias=mesh-host.{type}\n"),
    ("install-also", "[Install]\nAlso=mesh\\-host.service\n"),
    (
        "install-requiredby-blank",
        "[Install]\nRequiredBy=junk\\ {r}\n",
    ),
    (
        "install-bom",
        "[X-Hidden]\n\u{feff}[Install]\nWantedBy={r}\n",
    ),
    ("install-eol", "[Install]\nWantedBy=junk.target \\\n\r{r}\n"),
    ("install-quoted", "[Install]\nWantedBy=\"{r}\"\n"),
    (
        "install-specifier-j",
        "[Install]\nRequiredBy=%j-host.service\n",
    ),
];

#[derive(Clone, Copy, PartialEq)]
enum Step {
    /// Loaded into the manager.
    Load,
    /// Enabled offline with `systemctl --root`.
    Enable,
    /// Only asked of the model, which must accept it (an unmutated file, an everyday case).
    Accept,
}

struct Case {
    class: String,
    /// The path the declaration puts it at, under /etc/systemd/system.
    path: String,
    /// Its path in a unit directory, and the unit to load or enable.
    file: String,
    load: String,
    text: String,
    step: Step,
    /// What systemd needs beside a drop-in: its unit's file, an alias link to it.
    beside: Vec<(String, Beside)>,
}

enum Beside {
    File(String),
    Link(String),
}

/// A unit file the machine ships: its name and text.
struct Shipped {
    name: String,
    text: String,
}

fn unit_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1;
    UNIT_TYPES.iter().copied().find(|t| *t == ext)
}

/// Every regular unit file (not alias links) and drop-in the machine ships.
fn corpus() -> (Vec<Shipped>, Vec<(String, String)>) {
    let mut fragments: BTreeMap<String, String> = BTreeMap::new();
    let mut drop_ins = Vec::new();
    for dir in CORPUS_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_file() && unit_type(&name).is_some() {
                if let Ok(text) = std::fs::read_to_string(entry.path()) {
                    fragments.entry(name).or_insert(text);
                }
            } else if kind.is_dir() && name.ends_with(".d") {
                for conf in std::fs::read_dir(entry.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let file = conf.file_name().to_string_lossy().into_owned();
                    if file.ends_with(".conf") {
                        if let Ok(text) = std::fs::read_to_string(conf.path()) {
                            drop_ins.push((format!("{name}/{file}"), text));
                        }
                    }
                }
            }
        }
    }
    let fragments = fragments
        .into_iter()
        .map(|(name, text)| Shipped { name, text })
        .collect();
    (fragments, drop_ins)
}

/// The mutations of one shipped file, numbered from `*next`.
fn mutations(shipped: &Shipped, next: &mut usize, out: &mut Vec<Case>) {
    let Some(t) = unit_type(&shipped.name) else {
        return;
    };
    let template = shipped.name.contains("@.");
    let base = if shipped.text.ends_with('\n') {
        shipped.text.clone()
    } else {
        format!("{}\n", shipped.text)
    };
    let first = *next;
    let mut add = |class: &str, stem: &str, instance: Option<&str>, text: String, step: Step| {
        let n = *next;
        *next += 1;
        let stem = format!("mdt-{n}{stem}");
        let (file, load) = match instance {
            Some(i) => (format!("{stem}@.{t}"), format!("{stem}@{i}.{t}")),
            None => (format!("{stem}.{t}"), format!("{stem}.{t}")),
        };
        out.push(Case {
            class: class.to_string(),
            path: format!("/etc/systemd/system/{file}"),
            file,
            load,
            text,
            step,
            beside: Vec::new(),
        });
    };
    let instance = template.then_some("i");
    add("unmutated", "", instance, base.clone(), Step::Accept);
    add(
        "unmutated-crlf",
        "",
        instance,
        base.replace('\n', "\r\n"),
        Step::Accept,
    );
    add(
        "after",
        "",
        instance,
        format!("{base}[Unit]\nAfter=mesh-host.service\n"),
        Step::Accept,
    );
    for (i, (class, line)) in UNIT_MUTATIONS.iter().enumerate() {
        let key = UNIT_KEYS[(first + i) % UNIT_KEYS.len()];
        let line = line
            .replace("{k}", key)
            .replace("{lower}", &key.to_lowercase())
            .replace("{r}", "mesh-host.service");
        let (stem, instance) = match *class {
            "specifier-j" => ("-mesh", instance),
            "specifier-i" => ("-t", Some("mesh-host")),
            _ => ("", instance),
        };
        add(class, stem, instance, format!("{base}{line}"), Step::Load);
    }
    add(
        "crlf",
        "",
        instance,
        format!("{base}[Unit]\nWants=mesh-host.service\n").replace('\n', "\r\n"),
        Step::Load,
    );
    let trigger = match t {
        "timer" => Some("[Timer]\nUnit=mesh-host.service\n"),
        "path" => Some("[Path]\nUnit=mesh-host.service\n"),
        "socket" => Some("[Socket]\nService=mesh-host.service\n"),
        "service" => Some("[Service]\nSockets=mesh\\-host.socket\n"),
        _ => None,
    };
    if let Some(line) = trigger {
        add("trigger", "", instance, format!("{base}{line}"), Step::Load);
    }
    for (class, line) in INSTALL_MUTATIONS {
        let line = line
            .replace("{r}", "mesh-host.service")
            .replace("{type}", t);
        let stem = if class == "install-specifier-j" {
            "-mesh"
        } else {
            ""
        };
        add(class, stem, instance, format!("{base}{line}"), Step::Enable);
    }
    if !template {
        drop_ins(t, &base, next, out);
    }
}

/// Drop-ins beside the shipped file, under scratch names: one in an alias's directory (systemd
/// resolves `%j` from the unit's own name, `mdt-N-mesh`), one in a prefix directory, one in the
/// unit's own; and a `.device` unit's, which systemd loads too.
fn drop_ins(t: &str, base: &str, next: &mut usize, out: &mut Vec<Case>) {
    let cases = [
        ("drop-in-alias", "-zalias", "[Unit]\n{k}=%j-host.service\n"),
        (
            "drop-in-prefix",
            "-",
            "[Unit]\n{k}=junk\\ mesh-host.service\n",
        ),
        (
            "drop-in-own",
            "-mesh",
            "[Unit]\n{k}=junk.service \\\n\rmesh-host.service\n",
        ),
        ("drop-in-device", "", "[Unit]\n{k}=mesh-host.service\n"),
    ];
    for (class, dir, text) in cases {
        let n = *next;
        *next += 1;
        let key = UNIT_KEYS[n % UNIT_KEYS.len()];
        let (t, base) = if class == "drop-in-device" {
            ("device", "[Unit]\nDescription=scratch device\n")
        } else {
            (t, base)
        };
        let unit = if class == "drop-in-device" {
            format!("mdt-{n}.{t}")
        } else {
            format!("mdt-{n}-mesh.{t}")
        };
        let mut beside = vec![(unit.clone(), Beside::File(base.to_string()))];
        if class == "drop-in-alias" {
            beside.push((format!("mdt-{n}{dir}.{t}"), Beside::Link(unit.clone())));
        }
        let file = if class == "drop-in-device" {
            format!("{unit}.d/x.conf")
        } else {
            format!("mdt-{n}{dir}.{t}.d/x.conf")
        };
        out.push(Case {
            class: class.to_string(),
            path: format!("/etc/systemd/system/{file}"),
            file,
            load: unit,
            text: text.replace("{k}", key),
            step: Step::Load,
            beside,
        });
    }
}

/// Drop-ins in directories systemd reads for the host's own units: its own, its prefix's, its
/// type's, a sibling's. Harmless text, but systemd lists them in the unit's `DropInPaths=`.
fn host_drop_ins(next: &mut usize, out: &mut Vec<Case>) {
    for dir in HOST_DIRS {
        let load = dir
            .strip_suffix(".d")
            .filter(|d| d.starts_with("mesh-host"));
        let load = load.unwrap_or("mesh-host.service");
        let n = *next;
        *next += 1;
        let file = format!("{dir}/mdt-{n}.conf");
        out.push(Case {
            class: "host-drop-in".into(),
            path: format!("/etc/systemd/system/{file}"),
            file,
            load: load.into(),
            text: "[Unit]\nDescription=a drop-in\n".into(),
            step: Step::Load,
            beside: Vec::new(),
        });
    }
}

/// Everyday files the model must accept, at their usual paths.
fn everyday() -> Vec<Case> {
    [
        (
            "getty@tty1.service.d/autologin.conf",
            "[Service]\nExecStart=\nExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --noclear --autologin root %I $TERM\n",
        ),
        (
            "sshd.service.d/override.conf",
            "[Unit]\nAfter=mesh-host.service\n[Service]\nExecStart=\nExecStart=/usr/bin/sshd -D -o PermitRootLogin=no\n",
        ),
        (
            "app.service",
            "[Unit]\r\nDescription=CRLF\r\nAfter=mesh-host.service network-online.target\r\n[Service]\r\nExecStart=/usr/bin/app \\\r\n  --flag\r\n[Install]\r\nWantedBy=multi-user.target\r\n",
        ),
        (
            "srv.mount",
            "[Mount]\nWhat=/dev/sdb1\nWhere=/srv\nType=ext4\n[Install]\nWantedBy=multi-user.target\n",
        ),
        (
            "monitor.service",
            "[Unit]\nAfter=mesh-host.service\n[Service]\nExecStart=/usr/bin/monitor\n",
        ),
    ]
    .into_iter()
    .map(|(file, text)| Case {
        class: "everyday".into(),
        path: format!("/etc/systemd/system/{file}"),
        file: file.into(),
        load: String::new(),
        text: text.into(),
        step: Step::Accept,
        beside: Vec::new(),
    })
    .collect()
}

/// `systemctl --user ARGS` (or with `--root`), its stdout, whatever its exit code.
fn systemctl(args: &[&str]) -> String {
    let out = Command::new("systemctl")
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("run systemctl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each shown unit's properties, as words.
fn shown(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let mut id = String::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key == "Id" {
            id = value.to_string();
            continue;
        }
        let set: &mut BTreeSet<String> = out.entry(id.clone()).or_default();
        set.extend(value.split_whitespace().map(|w| format!("{key}={w}")));
    }
    out
}

/// The mutation number in a scratch name or path (`.../mdt-17-t@mesh-host.service`).
fn mutation_number(word: &str) -> Option<usize> {
    let at = word.find("mdt-")? + 4;
    let digits: String = word[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Removes the scratch unit files and the holder however the test ends.
struct Scrub(PathBuf);

impl Drop for Scrub {
    fn drop(&mut self) {
        systemctl(&["--user", "stop", "--", "mdt-hold.service"]);
        for dir in HOST_DIRS {
            let dir = self.0.join(dir);
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().starts_with("mdt-") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with("mdt-") || PROTECTED.contains(&name.as_str()) {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir_all(entry.path());
                    } else {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            }
        }
        systemctl(&["--user", "daemon-reload"]);
    }
}

/// The numbers of the cases the sandbox's manager ties to a protected unit.
fn tied_by_the_manager(unit_dir: &Path, cases: &[Case]) -> (BTreeSet<usize>, usize) {
    for (name, text) in [
        ("mesh-host.service", "[Service]\nExecStart=/bin/true\n"),
        ("mesh-host.socket", "[Socket]\nListenFIFO=%t/mdt-fifo\n"),
        ("mesh-host.timer", "[Timer]\nOnCalendar=2000-01-01\n"),
        ("mesh-host.path", "[Path]\nPathExists=/nonexistent-mdt\n"),
    ] {
        std::fs::write(unit_dir.join(name), text).expect("write protected unit");
    }
    systemctl(&["--user", "daemon-reload"]);
    let ask = |extra: &[&str]| {
        let mut args = vec!["--user", "show", "-p", "Id", "-p", REVERSE, "--"];
        args.extend(PROTECTED);
        args.extend(extra);
        shown(&systemctl(&args))
    };
    let before = ask(&[]);
    let loaded: Vec<&Case> = cases.iter().filter(|c| c.step == Step::Load).collect();
    for case in &loaded {
        for (name, what) in &case.beside {
            match what {
                Beside::File(text) => std::fs::write(unit_dir.join(name), text),
                Beside::Link(to) => std::os::unix::fs::symlink(to, unit_dir.join(name)),
            }
            .expect("write beside a drop-in");
        }
        let path = unit_dir.join(&case.file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("drop-in directory");
        }
        std::fs::write(path, &case.text).expect("write mutation");
    }
    // A running holder ordered after every mutation keeps them all loaded (an unreferenced
    // inactive unit is collected before the next call).
    let mut holder = String::from("[Service]\nExecStart=/bin/sleep infinity\n[Unit]\n");
    for chunk in loaded.chunks(200) {
        let names: Vec<&str> = chunk.iter().map(|c| c.load.as_str()).collect();
        holder.push_str(&format!("After={}\n", names.join(" ")));
    }
    std::fs::write(unit_dir.join("mdt-hold.service"), holder).expect("write holder");
    let started = Instant::now();
    systemctl(&["--user", "daemon-reload"]);
    systemctl(&["--user", "start", "--", "mdt-hold.service"]);
    let after = ask(&[]);
    let listed = [
        "--user",
        "list-units",
        "--all",
        "--plain",
        "--no-legend",
        "--full",
    ];
    let names: BTreeSet<&str> = loaded.iter().map(|c| c.load.as_str()).collect();
    let mut not_loaded: BTreeMap<String, usize> = BTreeMap::new();
    for line in systemctl(&[&listed[..], &["--", "mdt-*"]].concat()).lines() {
        let mut words = line.split_whitespace();
        if let (Some(unit), Some(state)) = (words.next(), words.next()) {
            if names.contains(unit) && state != "loaded" {
                let t = unit_type(unit).unwrap_or_default();
                *not_loaded.entry(format!("{t} {state}")).or_default() += 1;
            }
        }
    }
    println!(
        "manager: {} mutations loaded in {:?}; not loaded: {not_loaded:?}",
        loaded.len(),
        started.elapsed()
    );
    let not_loaded = not_loaded.values().sum();
    let mut tied = BTreeSet::new();
    for (unit, words) in &after {
        let old = before.get(unit).cloned().unwrap_or_default();
        for word in words.difference(&old) {
            tied.extend(mutation_number(word));
        }
    }
    (tied, not_loaded)
}

/// The numbers of the `[Install]` cases whose offline `enable` makes a link that names a
/// protected unit, or aliases one: each alone in a root of its own (two may alias one name), a
/// few roots at a time.
fn tied_by_enable(root: &Path, cases: &[Case]) -> BTreeSet<usize> {
    const ROOTS: usize = 4;
    let enabled: Vec<(usize, &Case)> = cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.step == Step::Enable)
        .collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..ROOTS)
            .map(|k| {
                let root = root.join(k.to_string());
                let mine: Vec<(usize, &Case)> =
                    enabled.iter().skip(k).step_by(ROOTS).copied().collect();
                scope.spawn(move || enable_each(&root, &mine))
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("enable worker"))
            .collect()
    })
}

/// `tied_by_enable` in one root.
fn enable_each(root: &Path, cases: &[(usize, &Case)]) -> BTreeSet<usize> {
    let etc = root.join("etc/systemd/system");
    let lib = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&lib).expect("offline root");
    std::fs::write(
        lib.join("mesh-host.service"),
        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
    )
    .expect("protected unit");
    let root_arg = format!("--root={}", root.display());
    let names_host = |s: &str| PROTECTED.iter().any(|p| s.contains(p));
    let mut tied = BTreeSet::new();
    for (n, case) in cases {
        let _ = std::fs::remove_dir_all(&etc);
        std::fs::create_dir_all(&etc).expect("etc");
        std::fs::write(etc.join(&case.file), &case.text).expect("write mutation");
        systemctl(&[&root_arg, "enable", "--", &case.load]);
        let mut dirs = vec![etc.clone()];
        while let Some(dir) = dirs.pop() {
            let dir_name = dir.file_name().unwrap_or_default().to_string_lossy();
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                let target = std::fs::read_link(entry.path()).unwrap_or_default();
                if names_host(&name)
                    || names_host(&dir_name)
                    || names_host(&target.to_string_lossy())
                {
                    tied.insert(*n);
                }
            }
        }
    }
    tied
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn whatever_systemd_ties_to_the_host_the_model_refuses_and_shipped_files_pass() {
    // Alone: it writes the host's own units into the manager's unit directory and reloads it,
    // which a units test's confirmation, run beside it, rightly reads as the host's units changed.
    let sb = sandbox_alone();
    let _scrub = Scrub(sb.unit_dir.clone());
    let (shipped, drop_ins) = corpus();
    assert!(
        shipped.len() > 50,
        "too few unit files found in {CORPUS_DIRS:?}"
    );
    let mut cases = Vec::new();
    let mut next = 0;
    for file in &shipped {
        mutations(file, &mut next, &mut cases);
    }
    host_drop_ins(&mut next, &mut cases);
    // Numbered as the rest: the case's index is its number.
    assert!(cases
        .iter()
        .enumerate()
        .all(|(n, c)| mutation_number(&c.file) == Some(n)));
    let mut controls: Vec<Case> = drop_ins
        .iter()
        .map(|(file, text)| Case {
            class: "unmutated-drop-in".into(),
            path: format!("/etc/systemd/system/{file}"),
            file: file.clone(),
            load: String::new(),
            text: text.clone(),
            step: Step::Accept,
            beside: Vec::new(),
        })
        .collect();
    controls.extend(everyday());

    // What systemd ties to a protected unit.
    let started = Instant::now();
    let (mut tied, not_loaded) = tied_by_the_manager(&sb.unit_dir, &cases);
    let host = sb.host("unitfiles", "");
    tied.extend(tied_by_enable(&host.dir.join("offline-root"), &cases));
    println!("systemd's answers in {:?}", started.elapsed());

    // What the model refuses: one check of all of them, as files and (declarable) as units.
    let mut files = Map::new();
    let mut units = Map::new();
    for case in cases.iter().chain(&controls) {
        files.insert(case.path.clone(), json!({"content": case.text}));
        let declarable = unit_type(&case.file).is_some_and(|t| DECLARABLE.contains(&t));
        if declarable && !case.file.contains('/') {
            units.insert(case.file.clone(), json!({"content": case.text}));
        }
    }
    let declaration =
        json!({"schema": 1, "files": Value::Object(files), "units": Value::Object(units)});
    let path = host.declaration("all.json", &declaration.to_string());
    let started = Instant::now();
    let out = host.run(&["check", path.to_str().expect("utf-8 path")]);
    println!("model: one check in {:?}", started.elapsed());
    let refused_lines: BTreeSet<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(": refused:"))
        .collect();
    let location = |kind: &str, key: &str| format!("{kind}[{}]: refused:", Value::from(key));
    let refused = |case: &Case| {
        let as_file = location("files", &case.path);
        let as_unit = location("units", &case.file);
        let declarable = unit_type(&case.file).is_some_and(|t| DECLARABLE.contains(&t))
            && !case.file.contains('/');
        let file = refused_lines.iter().any(|l| l.starts_with(&as_file));
        let unit = !declarable || refused_lines.iter().any(|l| l.starts_with(&as_unit));
        (
            file,
            unit,
            refused_lines
                .iter()
                .any(|l| l.starts_with(&as_file) || l.starts_with(&as_unit)),
        )
    };

    let mut bypasses = Vec::new();
    let mut false_refusals = Vec::new();
    let mut over_refused: BTreeMap<String, usize> = BTreeMap::new();
    for (n, case) in cases.iter().enumerate() {
        let (file, unit, any) = refused(case);
        match case.step {
            Step::Accept if any => false_refusals.push(format!("{} {}", case.class, case.file)),
            Step::Accept => {}
            _ if tied.contains(&n) && !(file && unit) => {
                bypasses.push(format!("{} {}: {:?}", case.class, case.file, case.text))
            }
            _ if !tied.contains(&n) && any => {
                *over_refused.entry(case.class.clone()).or_default() += 1
            }
            _ => {}
        }
    }
    for case in &controls {
        if refused(case).2 {
            false_refusals.push(format!("{} {}", case.class, case.path));
        }
    }
    let mutated = cases.iter().filter(|c| c.step != Step::Accept).count();
    println!(
        "files: {} unit files, {} drop-ins, {} everyday; mutations: {mutated} ({not_loaded} not \
         loaded by the manager); tied to the host by systemd: {}; bypasses: {}; false refusals: \
         {}; refused though systemd tied nothing: {over_refused:?}",
        shipped.len(),
        drop_ins.len(),
        controls.len() - drop_ins.len(),
        tied.len(),
        bypasses.len(),
        false_refusals.len(),
    );
    assert!(
        tied.len() > shipped.len(),
        "systemd tied too few mutations to the host ({}): the test did not reach it",
        tied.len()
    );
    assert!(bypasses.is_empty(), "bypasses:\n{}", bypasses.join("\n"));
    assert!(
        false_refusals.is_empty(),
        "false refusals:\n{}\n{}",
        false_refusals.join("\n"),
        out.stderr
    );
}

/// Each family refused by `check` and by `apply` (exit 2) with the resource, the construct, its
/// line and the reason; nothing written, the store untouched. Needs no sandbox.
#[test]
fn check_and_apply_refuse_each_family_by_resource_construct_and_line() {
    let host = Scratch::new("unitfiles-refused");
    let cases = [
        (
            "files",
            "/etc/systemd/system/x.service",
            "[Unit]\nDescription=x\n[X-Hidden]\n\u{feff}[Install]\nAlias=mesh-host.service\n",
            "line 4 has a byte-order mark (U+FEFF) after the start of the file",
        ),
        (
            "units",
            "eol.service",
            "[Unit]\nWants=junk.service \\\n\rmesh-host.service\n",
            "line 3 has a carriage return not followed by a line feed",
        ),
        (
            "units",
            "blank.service",
            "[Unit]\nWants=junk\\ mesh-host.service\n",
            "[Unit] Wants=junk\\ mesh-host.service (line 2) names mesh-host.service",
        ),
        (
            "units",
            "also.service",
            "[Service]\nExecStart=/bin/true\n[Install]\nAlso=mesh\\-host.service\n",
            "[Install] Also=mesh\\-host.service (line 4) names mesh-host.service",
        ),
        (
            "files",
            "/etc/systemd/system/zalias.service.d/x.conf",
            "[Unit]\nBindsTo=%p-host.service\n",
            "[Unit] BindsTo=%p-host.service (line 2): %p cannot be resolved safely",
        ),
        (
            "files",
            "/etc/systemd/system/dev-sda.device.d/x.conf",
            "[Unit]\nWants=mesh-host.service\n",
            "[Unit] Wants=mesh-host.service (line 2) names mesh-host.service",
        ),
        (
            "files",
            "/etc/systemd/system/libpod-.scope.d/x.conf",
            "[Unit]\nConflicts=mesh-host.service\n",
            "(line 2) names mesh-host.service",
        ),
        (
            "units",
            "x.timer",
            "[Timer]\nOnCalendar=daily\nUnit=mesh-host.service\n",
            "[Timer] Unit=mesh-host.service (line 3) names mesh-host.service",
        ),
        (
            "units",
            "x.slice",
            "[Unit]\nPartOf=mesh-host.service\n",
            "[Unit] PartOf=mesh-host.service (line 2) names mesh-host.service",
        ),
    ];
    let mut declaration = json!({"schema": 1, "files": {}, "units": {}});
    for (kind, key, content, _) in cases {
        declaration[kind][key] = json!({"content": content});
    }
    let path = host.declaration("refused.json", &declaration.to_string());
    let path = path.to_str().expect("utf-8 path");
    for command in ["check", "apply"] {
        let store_before = snapshot(&host.state());
        let out = host.run(&[command, path]);
        assert_eq!(out.code, 2, "{command}: {out:?}");
        for (kind, key, _, needle) in cases {
            let location = format!("{kind}[{}]: refused:", Value::from(key));
            let line = out
                .stderr
                .lines()
                .find(|l| l.contains(&location))
                .unwrap_or_else(|| panic!("{location} not refused: {out:?}"));
            assert!(line.contains(needle), "{needle:?} not in {line}");
        }
        assert!(!host.target("/etc/systemd").exists(), "nothing written");
        assert_eq!(
            snapshot(&host.state()),
            store_before,
            "the store was touched"
        );
    }
}

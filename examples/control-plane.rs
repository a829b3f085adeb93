//! The reference control plane that the integration tests use, for a person: serves the nodes
//! that join it (and one configured node, if given), pushes a declaration file (again, under the
//! next revision, whenever the file changes) and prints every report as one JSON line on stdout.
//! See `usage()`.

// The integration tests' support, of which this example uses a part.
#[path = "../tests/it/support/control_plane.rs"]
#[allow(dead_code)]
mod control_plane;
#[path = "../tests/it/support/pki.rs"]
#[allow(dead_code)]
mod pki;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use control_plane::{Behaviour, ControlPlane, CpConfig};
use pki::Pki;

fn usage() -> &'static str {
    "usage: cargo run --example control-plane -- --listen ADDR --declaration FILE [--revision N]
       --pki-dir DIR [--join-listen ADDR] [--token-ttl SECS] [--node NODE --secret-file FILE]
       [--quiet] [--push-count N [--push-delay SECS]] [--accept-log FILE]
       [--confirm-secs SECS] [--no-ack]

Creates a CA and a server certificate (for `localhost` and 127.0.0.1) in DIR if it holds none,
serves the link on ADDR and the join exchange on --join-listen ADDR (default: ADDR's address, a
free port), prints a `mesh-host join` command with a fresh one-time token (good for one join
within --token-ttl SECS, default 3600) and the CA's hash, declares FILE under revision N
(default 1) and under N+1, N+2, ... each time FILE changes (checked every second), and prints
each report on stdout. NODE, with the secret in FILE, is served too: a host configured by hand.
FILE may be a signed envelope (`mesh-host sign`): it is relayed unchanged, under the revision
signed inside it (a host with trusted keys accepts it under no other); this control plane holds
no key.

For benchmarks (bench/): --quiet prints no reports nor connections; --push-count N waits
--push-delay seconds (default 0) and for the first revision's report, then declares N more
revisions one after another, each once the previous one is reported (one host only: reports are
told apart by id), with `@PUSH@` in FILE replaced by the push number (0 for the first revision);
--accept-log FILE appends the Unix time in milliseconds of every accepted connection to FILE,
once a second.

Confirmation (docs/protocol.md): --confirm-secs SECS puts `confirm_secs` in every declare (0: the
host needs no confirmation); --no-ack records reports without acking them, so a host reverts
each declaration once its window passes."
}

struct Args {
    listen: SocketAddr,
    declaration: PathBuf,
    revision: u64,
    node: Option<String>,
    secret_file: Option<PathBuf>,
    pki_dir: PathBuf,
    join_listen: Option<SocketAddr>,
    token_ttl: u64,
    quiet: bool,
    push_count: u64,
    push_delay: u64,
    accept_log: Option<PathBuf>,
    confirm_secs: Option<u64>,
    no_ack: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut listen, mut declaration, mut revision, mut node, mut secret_file, mut pki_dir) =
        (None, None, 1, None, None, None);
    let (mut quiet, mut push_count, mut push_delay, mut accept_log) = (false, 0, 0, None);
    let (mut join_listen, mut token_ttl) = (None, 3600);
    let (mut confirm_secs, mut no_ack) = (None, false);
    let number = |flag: &str, value: &str| value.parse().map_err(|e| format!("{flag}: {e}"));
    while let Some(flag) = args.next() {
        if flag == "--quiet" {
            quiet = true;
            continue;
        }
        if flag == "--no-ack" {
            no_ack = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|e| format!("--listen: {e}"))?),
            "--join-listen" => {
                join_listen = Some(value.parse().map_err(|e| format!("--join-listen: {e}"))?)
            }
            "--token-ttl" => token_ttl = number(&flag, &value)?,
            "--declaration" => declaration = Some(value.into()),
            "--revision" => revision = value.parse().map_err(|e| format!("--revision: {e}"))?,
            "--node" => node = Some(value),
            "--secret-file" => secret_file = Some(value.into()),
            "--pki-dir" => pki_dir = Some(value.into()),
            "--push-count" => push_count = number(&flag, &value)?,
            "--push-delay" => push_delay = number(&flag, &value)?,
            "--accept-log" => accept_log = Some(value.into()),
            "--confirm-secs" => confirm_secs = Some(number(&flag, &value)?),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let missing = |name: &str| format!("{name} is required");
    if node.is_some() != secret_file.is_some() {
        return Err("--node and --secret-file go together".into());
    }
    Ok(Args {
        listen: listen.ok_or_else(|| missing("--listen"))?,
        declaration: declaration.ok_or_else(|| missing("--declaration"))?,
        revision,
        node,
        secret_file,
        pki_dir: pki_dir.ok_or_else(|| missing("--pki-dir"))?,
        join_listen,
        token_ttl,
        quiet,
        push_count,
        push_delay,
        accept_log,
        confirm_secs,
        no_ack,
    })
}

fn main() {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("control-plane: {e}\n\n{}", usage());
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("control-plane: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let secret = match &args.secret_file {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| format!("{}: {e}", file.display()))?
            .trim_end()
            .to_string(),
        None => String::new(),
    };
    let pki = match Pki::read(&args.pki_dir) {
        Ok(pki) => pki,
        Err(_) => {
            let pki = Pki::new();
            pki.write(&args.pki_dir)
                .map_err(|e| format!("{}: {e}", args.pki_dir.display()))?;
            eprintln!(
                "created a CA and a server certificate in {}",
                args.pki_dir.display()
            );
            pki
        }
    };
    if let (Some(node), Some(secret_file)) = (&args.node, &args.secret_file) {
        let ca_file =
            std::fs::canonicalize(args.pki_dir.join("ca.pem")).map_err(|e| e.to_string())?;
        let secret_file = std::fs::canonicalize(secret_file).map_err(|e| e.to_string())?;
        let snippet = serde_json::json!({"control_plane": {
            "address": args.listen.to_string(), "server_name": pki::SERVER_NAME,
            "ca_file": ca_file, "node": node, "secret_file": secret_file}});
        eprintln!("for the host's config (node {node}): {snippet}");
    }

    let cp = ControlPlane::start(
        &pki,
        CpConfig {
            bind: Some(args.listen),
            node: args.node.clone().unwrap_or_default(),
            secret,
            behaviour: Behaviour::Normal,
            verbose: !args.quiet,
            join_bind: Some(
                args.join_listen
                    .unwrap_or_else(|| SocketAddr::new(args.listen.ip(), 0)),
            ),
            ..CpConfig::new("", "")
        },
    );
    // One write for the whole line: the scripts that wait for it (tests/pid1) read the log while
    // it is written, and stderr is unbuffered (eprintln! writes piece by piece: a reader once
    // took "127.0.0." for the address).
    let line = format!("listening on {}\n", cp.addr());
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    cp.set_confirm_secs(args.confirm_secs);
    cp.hold_acks(args.no_ack);
    let token = control_plane::random_hex(16);
    cp.add_token(&token, Duration::from_secs(args.token_ttl));
    // The server certificate names `localhost` and 127.0.0.1: join through one of them.
    let join_host = match cp.join_addr().ip() {
        ip if ip.is_unspecified() || ip.is_loopback() => "localhost".to_string(),
        ip => ip.to_string(),
    };
    eprintln!(
        "to join a node (as root; the token is good for one join within {} s):\n  \
         echo {token} | mesh-host join --control-plane https://{join_host}:{} --token - --ca-hash {}",
        args.token_ttl,
        cp.join_addr().port(),
        cp.ca_hash()
    );

    let read = || -> Result<(Option<SystemTime>, String), String> {
        let text = std::fs::read_to_string(&args.declaration)
            .map_err(|e| format!("{}: {e}", args.declaration.display()))?;
        let modified = std::fs::metadata(&args.declaration).and_then(|m| m.modified());
        Ok((modified.ok(), text))
    };
    let (mut modified, mut text) = read()?;
    let mut revision = signed_revision(&text).unwrap_or(args.revision);
    cp.declare(revision, &text.replace("@PUSH@", "0"));
    eprintln!("declared revision {revision}");
    let mut accepted = 0;
    if args.push_count > 0 {
        std::thread::sleep(Duration::from_secs(args.push_delay));
        let started = std::time::Instant::now();
        for push in 0..=args.push_count {
            if push > 0 {
                revision += 1;
                cp.declare(revision, &text.replace("@PUSH@", &push.to_string()));
            }
            let reported = |r: &[serde_json::Value]| r.iter().any(|r| r["revision"] == revision);
            if !cp.wait_for(reported, Duration::from_secs(120)) {
                return Err(format!("no report of revision {revision} in 120 s"));
            }
        }
        let secs = started.elapsed().as_secs_f64();
        eprintln!("pushed {} declarations in {secs:.1} s", args.push_count);
    }
    loop {
        if let Some(log) = &args.accept_log {
            accepted = log_accepts(&cp, log, accepted)?;
        }
        std::thread::sleep(Duration::from_secs(1));
        match read() {
            Ok((now, new)) if now != modified => {
                modified = now;
                if new != text {
                    text = new;
                    revision = signed_revision(&text).unwrap_or(revision + 1);
                    cp.declare(revision, &text);
                    eprintln!("declared revision {revision}");
                }
            }
            Ok(_) => {}
            Err(e) => eprintln!("{e} (keeping revision {revision})"),
        }
    }
}

/// The `revision` inside a signed envelope's declaration, when `text` is one that carries it.
fn signed_revision(text: &str) -> Option<u64> {
    let envelope: serde_json::Value = serde_json::from_str(text).ok()?;
    envelope.get("envelope")?;
    let declaration: serde_json::Value =
        serde_json::from_str(envelope.get("declaration")?.as_str()?).ok()?;
    declaration.get("revision")?.as_u64()
}

/// Appends the Unix time in milliseconds of the connections accepted since the first `done`.
fn log_accepts(cp: &ControlPlane, log: &std::path::Path, done: usize) -> Result<usize, String> {
    use std::io::Write;
    let times = cp.connection_times();
    let (now, wall) = (std::time::Instant::now(), SystemTime::now());
    let mut lines = String::new();
    for t in &times[done.min(times.len())..] {
        let at = wall - now.duration_since(*t);
        let ms = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        lines.push_str(&format!("{ms}\n"));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(times.len())
}

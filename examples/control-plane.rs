//! The reference control plane that the integration tests use, for a person: serves one node,
//! pushes a declaration file (again, under the next revision, whenever the file changes) and
//! prints every report as one JSON line on stdout. See `usage()`.

#[path = "../tests/support/control_plane.rs"]
mod control_plane;
#[path = "../tests/support/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use control_plane::{Behaviour, ControlPlane, CpConfig};
use pki::Pki;

fn usage() -> &'static str {
    "usage: cargo run --example control-plane -- --listen ADDR --declaration FILE [--revision N]
       --node NODE --secret-file FILE --pki-dir DIR

Creates a CA and a server certificate (for `localhost` and 127.0.0.1) in DIR if it holds none,
serves NODE on ADDR, declares FILE under revision N (default 1) and under N+1, N+2, ... each time
FILE changes (checked every second), and prints each report on stdout."
}

struct Args {
    listen: SocketAddr,
    declaration: PathBuf,
    revision: u64,
    node: String,
    secret_file: PathBuf,
    pki_dir: PathBuf,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut listen, mut declaration, mut revision, mut node, mut secret_file, mut pki_dir) =
        (None, None, 1, None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|e| format!("--listen: {e}"))?),
            "--declaration" => declaration = Some(value.into()),
            "--revision" => revision = value.parse().map_err(|e| format!("--revision: {e}"))?,
            "--node" => node = Some(value),
            "--secret-file" => secret_file = Some(value.into()),
            "--pki-dir" => pki_dir = Some(value.into()),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let missing = |name: &str| format!("{name} is required");
    Ok(Args {
        listen: listen.ok_or_else(|| missing("--listen"))?,
        declaration: declaration.ok_or_else(|| missing("--declaration"))?,
        revision,
        node: node.ok_or_else(|| missing("--node"))?,
        secret_file: secret_file.ok_or_else(|| missing("--secret-file"))?,
        pki_dir: pki_dir.ok_or_else(|| missing("--pki-dir"))?,
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
    let secret = std::fs::read_to_string(&args.secret_file)
        .map_err(|e| format!("{}: {e}", args.secret_file.display()))?;
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
    let ca_file = std::fs::canonicalize(args.pki_dir.join("ca.pem")).map_err(|e| e.to_string())?;
    let digest = ring::digest::digest(&ring::digest::SHA256, pki.ca_pem.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    eprintln!("ca.pem sha256: {hex}");
    let secret_file = std::fs::canonicalize(&args.secret_file).map_err(|e| e.to_string())?;
    let snippet = serde_json::json!({"control_plane": {
        "address": args.listen.to_string(), "server_name": pki::SERVER_NAME,
        "ca_file": ca_file, "node": &args.node, "secret_file": secret_file}});
    eprintln!("for the host's config: {snippet}");

    let cp = ControlPlane::start(
        &pki,
        CpConfig {
            bind: Some(args.listen),
            node: args.node,
            secret: secret.trim_end().to_string(),
            behaviour: Behaviour::Normal,
            verbose: true,
        },
    );
    eprintln!("listening on {}", cp.addr());

    let read = || -> Result<(Option<SystemTime>, String), String> {
        let text = std::fs::read_to_string(&args.declaration)
            .map_err(|e| format!("{}: {e}", args.declaration.display()))?;
        let modified = std::fs::metadata(&args.declaration).and_then(|m| m.modified());
        Ok((modified.ok(), text))
    };
    let (mut modified, mut text) = read()?;
    let mut revision = args.revision;
    cp.declare(revision, &text);
    eprintln!("declared revision {revision}");
    loop {
        std::thread::sleep(Duration::from_secs(1));
        match read() {
            Ok((now, new)) if now != modified => {
                modified = now;
                if new != text {
                    text = new;
                    revision += 1;
                    cp.declare(revision, &text);
                    eprintln!("declared revision {revision}");
                }
            }
            Ok(_) => {}
            Err(e) => eprintln!("{e} (keeping revision {revision})"),
        }
    }
}

//! `mesh-host join`: trades a one-time token for the node's identity in one HTTPS exchange with the
//! control plane (docs/protocol.md, "Joining"), trusting the control plane's CA only if its hash is
//! the one the operator gave, then writes the config's `control_plane` section to `join.json`
//! beside the config (a file the package does not own), `ca.pem` and `secret`, and makes a
//! running service pick them up (SIGHUP).

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::cli::args::{self, Args, Join, Token};
use crate::cli::out::{outln, Out};
use crate::cli::render::print_json;
use crate::engine::{Fatal, EXIT_OK};
use crate::model::config::{self, Config, DEFAULT_CONFIG_PATH};
use crate::os::fsutil::Dir;
use crate::store::Store;
use crate::util::codec;

mod client;

/// The most the host reads of any response body.
const MAX_BODY: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(30);

/// `GET /v1/ca`.
#[derive(Deserialize)]
struct RawCa {
    ca_pem: String,
}

/// `POST /v1/join`'s answer.
#[derive(Deserialize)]
struct RawIdentity {
    node: String,
    secret: String,
    address: String,
    server_name: String,
    ca_pem: String,
}

/// `{"error": "..."}`, the body of every refusal.
#[derive(Deserialize)]
struct RawError {
    error: String,
}

pub fn run(out: &Out, args: &Args, join: &Join) -> Result<i32, Fatal> {
    if !crate::os::host::is_root() {
        return Err(Fatal::invalid(
            "join must run as root: it writes the node's secret (mode 0600, owned by root) \
             beside the config and signals the service; run it again with sudo"
                .into(),
        ));
    }
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let token = read_token(&join.token)?;
    let mut target = Target::prepare(&config_path, args.state_dir.as_deref(), join.force)?;
    target.trust(&join.trust_keys)?;
    let url = format!("https://{}", join.authority);

    let ca = fetch_ca(&url, &join.ca_hash)?;
    let identity = exchange(&url, &ca, &token, &crate::os::host::hostname())?;

    let (joined, config_text) = target.texts_with(&identity)?;
    target.write(&identity, &ca, &joined, config_text.as_deref())?;
    let signalled = signal_service(&target.state_dir);
    let (join_file, ca_file, secret_file) =
        (target.join_path(), target.ca_file(), target.secret_file());

    if args.json {
        let joined = json!({"joined": true, "node": identity.node, "address": identity.address,
            "server_name": identity.server_name, "config": config_path,
            "join_file": join_file, "ca_file": ca_file, "secret_file": secret_file,
            "service_pid": signalled});
        print_json(out, &joined);
    } else {
        outln!(
            out,
            "joined the control plane at {} as node {:?}; its link is {} ({})",
            url,
            identity.node,
            identity.address,
            identity.server_name
        );
        outln!(
            out,
            "wrote {} (control_plane), {} and {} (0600)",
            join_file.display(),
            ca_file.display(),
            secret_file.display()
        );
        match signalled {
            Some(pid) => outln!(
                out,
                "the service (pid {pid}) reloads its config and connects"
            ),
            None => {
                outln!(out,
                "the service is not running; start it to connect: systemctl enable --now mesh-host"
            )
            }
        }
    }
    Ok(EXIT_OK)
}

/// Where the join writes, checked before the token is spent.
struct Target {
    /// The config file's directory, absolute.
    dir: PathBuf,
    config_name: std::ffi::OsString,
    /// The config as it is (a JSON object) and its mode, `None` when there is no file yet.
    existing: Option<(Map<String, Value>, u32)>,
    /// join.json as it is (empty when there is none): what the join writes.
    joined: Map<String, Value>,
    /// Whether the config itself must be written again: it held a key join.json now takes (an
    /// older join wrote `control_plane` there).
    config_changed: bool,
    state_dir: PathBuf,
    state_dir_override: Option<PathBuf>,
}

/// A JSON file's object, for a join that rewrites it.
fn object(text: &str, shown: &dyn std::fmt::Display) -> Result<Map<String, Value>, Fatal> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Fatal::invalid(format!(
            "config {shown}: not a JSON object; fix it before joining (nothing was changed)"
        ))),
    }
}

/// A file's text, `None` when it does not exist.
fn read_if_there(path: &Path) -> Result<Option<String>, Fatal> {
    match crate::os::input::read_text(path, config::MAX_CONFIG_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Fatal::error(format!("config {}: {e}", path.display()))),
    }
}

impl Target {
    fn prepare(config_path: &Path, state_dir: Option<&Path>, force: bool) -> Result<Target, Fatal> {
        let shown = config_path.display();
        let name = config_path
            .file_name()
            .ok_or_else(|| Fatal::invalid(format!("--config {shown}: names no file")))?;
        let parent = match config_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // The directory first: a join that cannot write should fail before it spends the token.
        crate::os::fsutil::create_dir_all(parent, 0o755)
            .map_err(|e| Fatal::error(format!("cannot create {}: {e}", parent.display())))?;
        let dir = std::fs::canonicalize(parent)
            .map_err(|e| Fatal::error(format!("{}: {e}", parent.display())))?;
        match crate::os::host::writable(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                return Err(Fatal::invalid(format!("{}: NUL in path", dir.display())))
            }
            Err(e) => {
                return Err(Fatal::error(format!(
                    "{} is not writable ({e}); nothing was changed",
                    dir.display()
                )))
            }
        }
        let join_path = config::join_path(config_path);
        let existing = read_if_there(config_path)?;
        let joined = read_if_there(&join_path)?;
        let config = Config::from_texts(
            config_path,
            existing.as_deref().unwrap_or("{}"),
            joined.as_deref(),
            state_dir,
        )
        .map_err(|e| Fatal::invalid(format!("{e}; fix it before joining (nothing was changed)")))?;
        let existing = match existing {
            None => None,
            Some(text) => {
                let mode = std::fs::metadata(config_path)
                    .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
                    .unwrap_or(0o644);
                Some((object(&text, &shown)?, mode))
            }
        };
        let joined = match joined {
            None => Map::new(),
            Some(text) => object(&text, &join_path.display())?,
        };
        if let Some(cp) = &config.control_plane {
            if !force {
                return Err(Fatal::invalid(format!(
                    "this node already joined: {} has a control_plane section (node {:?} at \
                     {}); to join again, with a new token, add --force (the new identity \
                     replaces the old one)",
                    if joined.contains_key("control_plane") {
                        join_path.display()
                    } else {
                        config_path.display()
                    },
                    cp.node,
                    cp.address
                )));
            }
        }
        Ok(Target {
            dir,
            config_name: name.to_os_string(),
            existing,
            joined,
            config_changed: false,
            state_dir: config.state_dir,
            state_dir_override: state_dir.map(Path::to_path_buf),
        })
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join(&self.config_name)
    }

    fn join_path(&self) -> PathBuf {
        config::join_path(&self.config_path())
    }

    /// Puts `key` in join.json, taking it out of the config if an older join (or a person)
    /// put it there: a key may be in one of the two files only.
    fn set(&mut self, key: &str, value: Value) {
        self.joined.insert(key.into(), value);
        if let Some((map, _)) = &mut self.existing {
            self.config_changed |= map.remove(key).is_some();
        }
    }

    /// The texts of join.json and (when it changed) the config, checked as the service will.
    fn texts(&self) -> Result<(String, Option<String>), String> {
        let pretty = |map: &Map<String, Value>| {
            serde_json::to_string_pretty(&Value::Object(map.clone()))
                .map(|t| t + "\n")
                .map_err(|e| e.to_string())
        };
        let joined = pretty(&self.joined)?;
        let config = match &self.existing {
            Some((map, _)) if self.config_changed => Some(pretty(map)?),
            _ => None,
        };
        let current = match (&config, &self.existing) {
            (Some(text), _) => text.clone(),
            (None, Some((map, _))) => Value::Object(map.clone()).to_string(),
            (None, None) => "{}".into(),
        };
        Config::from_texts(
            &self.config_path(),
            &current,
            Some(&joined),
            self.state_dir_override.as_deref(),
        )?;
        Ok((joined, config))
    }

    /// `--trust-key`: the config's `trusted_keys` become exactly these (keeping its
    /// `signatures_required`), checked before the token is spent.
    fn trust(&mut self, keys: &[String]) -> Result<(), Fatal> {
        if keys.is_empty() {
            return Ok(());
        }
        self.set("trusted_keys", json!(keys));
        self.texts().map(drop).map_err(|e| {
            Fatal::invalid(format!(
                "--trust-key: the config would be invalid ({e}); nothing was changed"
            ))
        })
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn secret_file(&self) -> PathBuf {
        self.dir.join("secret")
    }

    /// join.json's new text (with `control_plane` set) and the config's when it changed,
    /// checked as the service will check them.
    fn texts_with(&mut self, identity: &Identity) -> Result<(String, Option<String>), Fatal> {
        let (ca_file, secret_file) = (self.ca_file(), self.secret_file());
        self.set(
            "control_plane",
            json!({"address": identity.address, "server_name": identity.server_name,
                   "ca_file": ca_file, "node": identity.node, "secret_file": secret_file}),
        );
        self.texts().map_err(|e| {
            Fatal::error(format!(
                "the control plane's answer does not make a valid config ({e}); nothing was \
                 written: tell the control plane's operator"
            ))
        })
    }

    /// The CA, the secret, then join.json that names them (a crash leaves the old one), then
    /// the config if an older join's section moved out of it.
    fn write(
        &self,
        identity: &Identity,
        ca: &Ca,
        joined: &str,
        config: Option<&str>,
    ) -> Result<(), Fatal> {
        let cannot = |path: PathBuf, e: io::Error| {
            Fatal::error(format!(
                "cannot write {}: {e}; the token is spent: ask for a new one, then join again \
                 with --force",
                path.display()
            ))
        };
        let dir = Dir::open(&self.dir).map_err(|e| cannot(self.dir.clone(), e))?;
        let root = Some((0, 0));
        // join.json takes the config's mode: what a person chose for who reads the config.
        let mode = self.existing.as_ref().map_or(0o644, |(_, mode)| *mode);
        dir.write_atomic(OsStr::new("ca.pem"), ca.pem.as_bytes(), 0o644, root)
            .map_err(|e| cannot(self.ca_file(), e))?;
        let secret = format!("{}\n", identity.secret);
        dir.write_atomic(OsStr::new("secret"), secret.as_bytes(), 0o600, root)
            .map_err(|e| cannot(self.secret_file(), e))?;
        dir.write_atomic(OsStr::new(config::JOIN_FILE), joined.as_bytes(), mode, root)
            .map_err(|e| cannot(self.join_path(), e))?;
        if let Some(text) = config {
            dir.write_atomic(&self.config_name, text.as_bytes(), mode, root)
                .map_err(|e| cannot(self.config_path(), e))?;
        }
        Ok(())
    }
}

/// The control plane's CA, as received and checked against the pinned hash.
struct Ca {
    pem: String,
    der: CertificateDer<'static>,
}

/// The one certificate in `pem` (anything else is refused).
fn parse_ca(pem: &str) -> Result<CertificateDer<'static>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not PEM: {e}"))?;
    match <[_; 1]>::try_from(certs) {
        Ok([cert]) => Ok(cert),
        Err(certs) => Err(format!(
            "{} certificates where one was expected",
            certs.len()
        )),
    }
}

/// Step 1: the CA, over TLS that checks nothing; its authenticity is the hash alone.
fn fetch_ca(url: &str, ca_hash: &str) -> Result<Ca, Fatal> {
    let body = send(
        &format!("{url}/v1/ca"),
        None,
        None,
        "fetching the control plane's CA",
    )?;
    let raw: RawCa = serde_json::from_str(&body).map_err(|e| {
        Fatal::error(format!(
            "{url}/v1/ca: not the CA answer ({e}); is {url} a mesh control plane?"
        ))
    })?;
    let der = parse_ca(&raw.ca_pem).map_err(|e| {
        Fatal::error(format!(
            "{url}/v1/ca: the CA is unusable ({e}); tell the control plane's operator"
        ))
    })?;
    let actual = codec::sha256_hex(der.as_ref());
    if actual != ca_hash {
        return Err(Fatal::invalid(format!(
            "the control plane's CA has sha256:{actual}, not the sha256:{ca_hash} you gave: \
             check --ca-hash with the control plane's operator (someone may be impersonating \
             the control plane); nothing was sent and nothing was changed"
        )));
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.clone()).map_err(|e| {
        Fatal::error(format!(
            "{url}/v1/ca: the CA matches the hash but cannot be a root ({e}); tell the control \
             plane's operator"
        ))
    })?;
    Ok(Ca {
        pem: raw.ca_pem,
        der,
    })
}

/// What the host keeps of the control plane's answer.
struct Identity {
    node: String,
    secret: String,
    address: String,
    server_name: String,
}

/// Step 2: the token for the identity, over TLS verified against the pinned CA alone.
fn exchange(url: &str, ca: &Ca, token: &str, hostname: &str) -> Result<Identity, Fatal> {
    let endpoint = format!("{url}/v1/join");
    let request = json!({"token": token, "hostname": hostname}).to_string();
    let body = send(&endpoint, Some(&request), Some(&ca.der), "joining")?;
    let bad = |why: String| {
        Fatal::error(format!(
            "{endpoint}: {why}; nothing was written: tell the control plane's operator (the \
             token may be spent)"
        ))
    };
    let raw: RawIdentity =
        serde_json::from_str(&body).map_err(|e| bad(format!("not a join answer ({e})")))?;
    match parse_ca(&raw.ca_pem) {
        Ok(der) if der == ca.der => {}
        _ => return Err(bad("its answer names another CA than /v1/ca served".into())),
    }
    let line = |what: &str, v: &str| {
        if v.is_empty() || v.chars().any(|c| c.is_control() || c.is_whitespace()) {
            Err(bad(format!("{what} {v:?} is empty or has spaces")))
        } else {
            Ok(())
        }
    };
    line("node", &raw.node)?;
    line("secret", &raw.secret)?;
    line("address", &raw.address)?;
    line("server_name", &raw.server_name)?;
    Ok(Identity {
        node: raw.node,
        secret: raw.secret,
        address: raw.address,
        server_name: raw.server_name,
    })
}

/// One request to `endpoint` (a `POST` of `json_body` when given), trusting `root` alone or
/// (`None`) any certificate; the body of a 200.
fn send(
    endpoint: &str,
    json_body: Option<&str>,
    root: Option<&CertificateDer<'static>>,
    doing: &str,
) -> Result<String, Fatal> {
    let response = client::request(
        endpoint,
        json_body,
        root,
        CONNECT_TIMEOUT,
        TIMEOUT,
        MAX_BODY,
    )
    .map_err(|e| unreachable(endpoint, doing, e))?;
    read_body(response, endpoint)
}

/// The body of a 200; a refusal's `error`, with what to do, otherwise.
fn read_body(response: client::Response, endpoint: &str) -> Result<String, Fatal> {
    let status = response.status;
    let body = String::from_utf8(response.body).map_err(|_| {
        Fatal::error(format!(
            "{endpoint}: reading the answer: HTTP {status} with a body that is not UTF-8 text"
        ))
    })?;
    if status == 200 {
        return Ok(body);
    }
    let why = serde_json::from_str::<RawError>(&body)
        .map(|e| e.error)
        .unwrap_or_else(|_| body.chars().take(200).collect());
    Err(match status {
        401 | 403 => Fatal::invalid(format!(
            "the control plane refused the token (HTTP {status}: {why}): tokens are good for one \
             join and expire; ask the control plane's operator for a new one; nothing was changed"
        )),
        400..=499 => Fatal::invalid(format!(
            "{endpoint}: HTTP {status}: {why}; nothing was changed (is the URL the control \
             plane's join address?)"
        )),
        _ => Fatal::error(format!(
            "{endpoint}: HTTP {status}: {why}; nothing was changed: try again later or tell the \
             control plane's operator"
        )),
    })
}

fn unreachable(endpoint: &str, doing: &str, e: client::Error) -> Fatal {
    match &e {
        client::Error::Url(why) => {
            return Fatal::invalid(format!("{endpoint}: {why}; give https://HOST:PORT"))
        }
        client::Error::Response(why) => {
            return Fatal::error(format!(
                "{endpoint}: reading the answer: {why}; nothing was changed: is this a mesh \
                 control plane? (tell its operator)"
            ))
        }
        _ => {}
    }
    if let client::Error::Tls(_) = e {
        return Fatal::error(format!(
            "TLS with the control plane failed ({doing}, {endpoint}): {e}: the TLS handshake \
             failed; if the CA's hash matched, the server's certificate does not chain to that \
             CA for this host name: use the exact address the control plane's operator gave \
             (someone may be impersonating the control plane); the token was not sent and \
             nothing was changed"
        ));
    }
    let hint = match &e {
        client::Error::HostNotFound(_) => {
            "the name does not resolve: check the host in --control-plane"
        }
        client::Error::Timeout => {
            "no answer in time: check the address, and that a firewall lets this host reach it"
        }
        _ => {
            "check the address and port in --control-plane, that the control plane is up, and \
              that this host can reach it"
        }
    };
    Fatal::error(format!(
        "could not reach the control plane ({doing}, {endpoint}): {e}: {hint}; nothing was changed"
    ))
}

/// The most read of a token file or standard input: a token is a short word.
const MAX_TOKEN: u64 = 4096;

/// The token from where `join` was told to take it, surrounding whitespace (a trailing newline)
/// removed; the file or stream must hold nothing else.
fn read_token(source: &Token) -> Result<String, Fatal> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let (what, read) = match source {
        Token::Given(token) => return Ok(token.clone()),
        Token::Stdin => (
            "--token -: standard input".to_string(),
            io::stdin()
                .lock()
                .take(MAX_TOKEN + 1)
                .read_to_end(&mut bytes),
        ),
        Token::File(path) => (
            format!("--token-file {}", path.display()),
            crate::os::input::open_regular(path)
                .and_then(|f| f.take(MAX_TOKEN + 1).read_to_end(&mut bytes)),
        ),
    };
    read.map_err(|e| Fatal::invalid(format!("{what}: cannot be read: {e}")))?;
    if bytes.len() as u64 > MAX_TOKEN {
        return Err(Fatal::invalid(format!(
            "{what}: more than {MAX_TOKEN} bytes; it must hold only the token"
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Fatal::invalid(format!("{what}: the token is not text")))?;
    let token = text.trim();
    args::check_token(token).map_err(|e| Fatal::invalid(format!("{what}: {e}")))?;
    Ok(token.to_string())
}

/// Sends SIGHUP to the running service, if the store names one that is alive and is mesh-host;
/// returns its pid. A stale pid (reused by another program) is never signalled.
fn signal_service(state_dir: &Path) -> Option<u32> {
    let store = Store::open(state_dir, false).ok().flatten()?;
    let state = store.service_state().ok().flatten()?;
    if state.state != crate::store::ServicePhase::Running
        || state.pid == 0
        || !crate::os::process::is_mesh_host(state.pid)
    {
        return None;
    }
    let pid = state.pid;
    match crate::os::process::signal(pid, crate::os::process::SIGHUP) {
        Ok(()) => Some(pid),
        Err(e) => {
            log::warn!("could not signal the service (pid {pid}): {e}; restart it to connect");
            None
        }
    }
}

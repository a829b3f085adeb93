//! `mesh-host keygen` and `mesh-host sign`: the operator's side of signed declarations, meant
//! for an offline machine. The private key is PKCS#8 in PEM (`openssl genpkey -algorithm
//! ed25519` writes the same form and is read too); the envelope format is `envelope.rs`'s.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde_json::json;

use crate::cli::args::Args;
use crate::cli::out::{errln, out, outln, Out};
use crate::cli::render::print_json;
use crate::engine::{invalid, Fatal, Host, EXIT_OK};
use crate::model::envelope::{self, Envelope, SignatureState};
use crate::util::codec;

/// Writes a new private key to `out` (0600; an existing file is never replaced) and prints its
/// public key, the text `trusted_keys` and `join --trust-key` take.
pub fn keygen(stdout: &Out, args: &Args, out: &Path) -> Result<i32, Fatal> {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).map_err(|_| {
        Fatal::error("cannot generate a key: the system's randomness failed".into())
    })?;
    let key_pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|e| Fatal::error(format!("the generated key is unusable: {e}")))?;
    let public = envelope::public_key(&key_pair);
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in codec::base64_encode(pkcs8.as_ref()).as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    let cannot = |e: std::io::Error| Fatal::error(format!("{}: {e}", out.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Fatal::invalid(format!(
                "{} exists: keygen never overwrites a key (choose another --out, or remove it \
                 yourself if it is no longer needed)",
                out.display()
            )),
            _ => cannot(e),
        })?;
    file.write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(cannot)?;
    if args.json {
        let value = json!({"public_key": public.to_string(), "private_key_file": out});
        print_json(stdout, &value);
    } else {
        outln!(stdout, "{public}");
    }
    Ok(EXIT_OK)
}

/// Prints `file` (a declaration, or an envelope) as an envelope signed by `key` too. The
/// declaration is validated first, with this machine's config (or the defaults): a signature on
/// something no host would apply helps nobody.
pub fn sign(out: &Out, host: &Host, key: &Path, file: &Path) -> Result<i32, Fatal> {
    let key_pair = read_key(key)?;
    let cannot =
        |e: std::io::Error| Fatal::invalid(format!("{}: cannot be read: {e}", file.display()));
    let max = host.config.limits.max_declaration_bytes;
    let bytes = crate::os::input::read_bounded(file, max).map_err(cannot)?;
    let mut envelope = match envelope::open(&bytes).map_err(|p| invalid(file, p))? {
        Some(envelope) => envelope,
        None => Envelope::new(
            String::from_utf8(bytes)
                .map_err(|_| Fatal::invalid(format!("{}: not UTF-8", file.display())))?,
        ),
    };
    let declaration = host
        .validate(envelope.declaration.as_bytes())
        .map_err(|p| invalid(file, p))?;
    let signer = envelope::public_key(&key_pair);
    let verification = envelope.verify(&[]);
    for (i, (key, state)) in verification.signatures.iter().enumerate() {
        if *state == SignatureState::Bad && *key != signer {
            errln!(
                "mesh-host: warning: signatures[{i}] by {key} does not verify (the text changed \
                 after it was signed); hosts will refuse this envelope"
            );
        }
    }
    if declaration.revision.is_none() {
        errln!(
            "mesh-host: warning: the declaration carries no revision; a host with trusted keys \
             accepts a signed declaration from the control plane only with its own revision"
        );
    }
    if !envelope.sign(&key_pair) {
        errln!(
            "mesh-host: {signer} has signed this declaration already; the envelope is unchanged"
        );
    }
    out!(out, "{}", envelope.to_json());
    Ok(EXIT_OK)
}

/// Reads a PKCS#8 PEM ed25519 private key.
fn read_key(path: &Path) -> Result<Ed25519KeyPair, Fatal> {
    let bad = |why: String| Fatal::invalid(format!("--key {}: {why}", path.display()));
    let pem = crate::os::input::read_bounded(path, crate::os::input::MAX_SMALL_INPUT)
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    let der = PrivatePkcs8KeyDer::from_pem_slice(&pem)
        .map_err(|e| bad(format!("not a PEM private key (PRIVATE KEY): {e}")))?;
    Ed25519KeyPair::from_pkcs8_maybe_unchecked(der.secret_pkcs8_der())
        .map_err(|e| bad(format!("not an ed25519 private key: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    fn args(line: &str) -> Args {
        crate::cli::args::parse(line.split_whitespace().map(std::ffi::OsString::from))
            .expect("args")
    }

    #[test]
    fn keygen_writes_a_private_key_once_and_it_signs() {
        let dir = TempDir::new("keygen");
        let out = dir.path().join("key.pem");
        assert_eq!(
            keygen(&Out::sink(), &args("status"), &out).unwrap(),
            EXIT_OK
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&out).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let first = std::fs::read(&out).unwrap();
        let err = keygen(&Out::sink(), &args("status"), &out).unwrap_err();
        assert!(
            err.message().contains("keygen never overwrites a key"),
            "{err:?}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), first);
        let key_pair = read_key(&out).unwrap();
        let mut envelope = Envelope::new(r#"{"schema": 1}"#.into());
        assert!(envelope.sign(&key_pair));
        let trusted = [envelope::public_key(&key_pair)];
        assert_eq!(envelope.verify(&trusted).trusted(), trusted);
    }

    #[test]
    fn an_openssl_key_is_read() {
        // `openssl genpkey -algorithm ed25519` form (PKCS#8 v1, no public key inside), holding
        // RFC 8032's first test key.
        let dir = TempDir::new("opensslkey");
        let path = dir.path().join("k.pem");
        std::fs::write(
            &path,
            "-----BEGIN PRIVATE KEY-----\n\
             MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n\
             -----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let key_pair = read_key(&path).unwrap();
        assert_eq!(
            envelope::public_key(&key_pair).to_string(),
            "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
        );
    }

    #[test]
    fn a_key_that_is_not_one_is_refused_by_name() {
        let dir = TempDir::new("badkey");
        let path = dir.path().join("k");
        std::fs::write(&path, "hello").unwrap();
        let err = read_key(&path).err().map(|e| e.message().to_string());
        assert!(err.unwrap().contains("not a PEM private key"));
    }
}

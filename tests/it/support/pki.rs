//! Test certificates: a CA and a server certificate for `localhost` and 127.0.0.1 signed by it,
//! as PEM text, and the rustls configurations built from them (the control plane's server side,
//! and a client that trusts only this CA, for tests that speak to the control plane directly).

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The name the server certificate holds (the host's `control_plane.server_name`).
pub const SERVER_NAME: &str = "localhost";

pub struct Pki {
    pub ca_pem: String,
    pub server_pem: String,
    pub key_pem: String,
}

impl Pki {
    /// A fresh CA and a server certificate for `localhost` and 127.0.0.1 signed by it.
    pub fn new() -> Pki {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "mesh-host test CA");
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_pem = ca.self_signed(&ca_key).expect("CA certificate").pem();
        let issuer = Issuer::new(ca, ca_key);

        let mut server = CertificateParams::new(vec![SERVER_NAME.to_string(), "127.0.0.1".into()])
            .expect("server params");
        server
            .distinguished_name
            .push(DnType::CommonName, SERVER_NAME);
        let key = KeyPair::generate().expect("server key");
        let server_pem = server.signed_by(&key, &issuer).expect("server cert").pem();
        Pki {
            ca_pem,
            server_pem,
            key_pem: key.serialize_pem(),
        }
    }

    /// Another CA and server pair, for the same names, that the first CA did not sign: a host
    /// pinned to `Pki::new()`'s CA must refuse it.
    pub fn rogue() -> Pki {
        Pki::new()
    }

    /// Writes `ca.pem`, `server.pem` and `server.key` into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("ca.pem"), &self.ca_pem)?;
        std::fs::write(dir.join("server.pem"), &self.server_pem)?;
        std::fs::write(dir.join("server.key"), &self.key_pem)
    }

    /// Reads what `write` wrote.
    #[allow(dead_code)] // examples/control-plane.rs's alone
    pub fn read(dir: &Path) -> std::io::Result<Pki> {
        let read = |name: &str| std::fs::read_to_string(dir.join(name));
        Ok(Pki {
            ca_pem: read("ca.pem")?,
            server_pem: read("server.pem")?,
            key_pem: read("server.key")?,
        })
    }

    /// TLS 1.3 only, ring, this server certificate.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let cert = CertificateDer::from_pem_slice(self.server_pem.as_bytes()).expect("server.pem");
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("server.key");
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server certificate and key");
        Arc::new(config)
    }

    /// A client that trusts this CA and nothing else.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).expect("ca.pem"))
            .expect("CA certificate");
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

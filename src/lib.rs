//! mesh-host as a library: everything the `mesh-host` binary does, behind one entry point,
//! plus the parsers the fuzz targets drive. The modules stay private; the code map is in
//! ARCHITECTURE.md.

// The layers, lowest first: util, os, tools, model, link, store, kinds, engine, service, cli.
// Each imports only from itself and the layers before it (`tests/layers.rs` checks it);
// ARCHITECTURE.md says what each holds.
mod cli;
mod engine;
mod kinds;
mod link;
mod model;
// The one module allowed `unsafe` (Cargo.toml, [lints]): each block in it says why it holds.
#[allow(unsafe_code)]
mod os;
mod service;
mod store;
mod tools;
mod util;

pub use cli::{init_logging, main_with_args};

/// The man pages, shell completions and JSON Schemas, generated from the program's own tables
/// (`cargo run --example gen-docs -- share`; `tests/it/manual.rs` checks `share/` is up to date).
pub mod manual {
    pub use crate::cli::manual::files;
}

/// Entry points for fuzzing: each takes arbitrary bytes and must never panic.
pub mod fuzzing {
    /// Parses and validates a declaration with the default limits and identity.
    pub fn declaration(bytes: &[u8]) {
        if let Ok(config) = crate::model::config::Config::parse("{}", None) {
            let _ = crate::model::declaration::parse(
                bytes,
                &crate::model::declaration::Context {
                    limits: &config.limits,
                    identity: &config.identity,
                },
            );
        }
    }

    /// Takes bytes as the declaration a `declare` brings on a host that trusts one key (RFC
    /// 8032's first test key, which signs the seed corpus): envelope, signatures, declaration,
    /// revision and expiry, as the service decides; then prints the envelope again.
    pub fn envelope(bytes: &[u8]) {
        use crate::model::envelope::{accept, open, Arrival};
        use crate::model::trust::{PublicKey, Trust};
        let (Ok(config), Ok(key)) = (
            crate::model::config::Config::parse("{}", None),
            PublicKey::parse("ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="),
        ) else {
            return;
        };
        if let Ok(Some(envelope)) = open(bytes) {
            let _ = envelope.to_json();
        }
        let trust = Trust {
            keys: vec![key],
            required: 1,
        };
        let arrival = Arrival {
            revision: 7,
            newest: Some(3),
            now: 1_800_000_000,
            trust: Some(&trust),
        };
        let _ = accept(bytes.to_vec(), &arrival, |b| {
            crate::model::declaration::parse(
                b,
                &crate::model::declaration::Context {
                    limits: &config.limits,
                    identity: &config.identity,
                },
            )
        });
    }

    /// Feeds bytes to a link that is up, as a control plane would send them.
    pub fn link_input(bytes: &[u8]) {
        use crate::link::{Link, Message};
        let hello = Message::Ping {};
        let mut link = Link::new(0, hello, 30_000, 1 << 20);
        let mut welcome = Vec::new();
        crate::link::frame::encode(br#"{"type": "welcome"}"#, &mut welcome);
        let _ = link.handle_input(1, &welcome);
        let _ = link.handle_input(2, bytes);
        while link.poll_event().is_some() {}
        // The deadlines (a frame left incomplete, silence) judged on what is left.
        let _ = link.handle_timeout(link.poll_timeout());
    }
}

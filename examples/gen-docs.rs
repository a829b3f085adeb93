//! Writes the man pages, shell completions and JSON Schemas, generated from mesh-host's own
//! tables, under a directory (the repository keeps them in `share/`, which `tests/it/manual.rs`
//! checks is up to date): `cargo run --example gen-docs -- share`.

use std::path::Path;

fn main() {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: cargo run --example gen-docs -- OUTDIR");
        std::process::exit(2);
    };
    for (path, text) in mesh_host::manual::files() {
        let path = Path::new(&out).join(path);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, text));
        if let Err(e) = written {
            eprintln!("gen-docs: {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{}", path.display());
    }
}

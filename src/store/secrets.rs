//! Containers' environment files: a declared `env` reaches podman as `--env-file` from here (0600
//! in a 0700 directory of the store), never on a command line, where `ps` shows it to every user.
//! A file lives only while its `podman create` runs; one a crash left is replaced next time.

use std::ffi::OsStr;
use std::path::PathBuf;

use super::{Store, StoreError};

const DIR: &str = "container-env";

impl Store {
    /// Writes `bytes` as the environment file of container `name`; returns its path.
    pub fn write_env_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let at = |e: std::io::Error| self.error(&format!("{DIR}/{name}"), e);
        self.dir.mkdir_durable(OsStr::new(DIR), 0o700).map_err(at)?;
        let dir = self.dir.child(OsStr::new(DIR)).map_err(at)?;
        dir.write_atomic(OsStr::new(name), bytes, 0o600, None)
            .map_err(at)?;
        Ok(self.path().join(DIR).join(name))
    }

    /// Removes container `name`'s environment file, if there is one.
    pub fn remove_env_file(&self, name: &str) -> Result<(), StoreError> {
        let at = |e: std::io::Error| self.error(&format!("{DIR}/{name}"), e);
        match self.dir.child(OsStr::new(DIR)) {
            Ok(dir) => dir.remove(OsStr::new(name)).map(drop).map_err(at),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(at(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn env_files_are_private_and_removed() {
        let tmp = TempDir::new("store-secrets");
        let store = Store::open(&tmp.path().join("store"), true)
            .unwrap()
            .unwrap();
        let path = store.write_env_file("web", b"TOKEN=s3cret\n").unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(std::fs::read(&path).unwrap(), b"TOKEN=s3cret\n");
        store.remove_env_file("web").unwrap();
        assert!(!path.exists());
        store.remove_env_file("web").unwrap();
    }
}

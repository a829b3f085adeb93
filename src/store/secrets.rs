//! Containers' environment files: a declared `env` reaches podman as `--env-file` from here (0600
//! in a 0700 directory of the store), never on a command line, where `ps` shows it to every user.
//! A file lives only while its `podman create` runs; one a crash left is replaced next time.
//! Also the host's digest key, which keys the only digests of secret content ever shown.

use std::ffi::OsStr;
use std::path::PathBuf;

use super::{Store, StoreError};

const DIR: &str = "container-env";
/// The key of the keyed digests shown of secret content (`codec::hmac_sha256`): 32 random bytes.
pub const DIGEST_KEY: &str = "digest-key";

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

    /// The host's digest key, made (random, 0600) the first time it is needed. Two processes
    /// making it at once each rename theirs in place; both then use the one read back.
    pub fn digest_key(&self) -> Result<[u8; 32], StoreError> {
        let at = |e: &dyn std::fmt::Display| self.error(DIGEST_KEY, e);
        let read = || match self.dir.read(OsStr::new(DIGEST_KEY), 32) {
            Ok(Some((_, bytes))) => <[u8; 32]>::try_from(bytes.as_slice())
                .map(Some)
                .map_err(|_| at(&"is not 32 bytes")),
            Ok(None) => Ok(None),
            Err(e) => Err(at(&e)),
        };
        if let Some(key) = read()? {
            return Ok(key);
        }
        let mut key = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
            .map_err(|_| at(&"no randomness to make it from"))?;
        (self.dir)
            .write_atomic(OsStr::new(DIGEST_KEY), &key, 0o600, None)
            .map_err(|e| at(&e))?;
        read()?.ok_or_else(|| at(&"vanished once written"))
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
    use crate::util::testutil::TempDir;
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

    #[test]
    fn the_digest_key_is_private_random_and_kept() {
        let tmp = TempDir::new("store-digest-key");
        let open = |name: &str| Store::open(&tmp.path().join(name), true).unwrap().unwrap();
        let store = open("a");
        let key = store.digest_key().unwrap();
        assert_eq!(store.digest_key().unwrap(), key);
        let path = store.path().join(DIGEST_KEY);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_ne!(open("b").digest_key().unwrap(), key);
        std::fs::write(&path, b"short").unwrap();
        assert!(store
            .digest_key()
            .unwrap_err()
            .to_string()
            .contains("32 bytes"));
    }
}

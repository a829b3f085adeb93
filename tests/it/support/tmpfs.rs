//! A small tmpfs mounted for a test (needs root): a store or root whose disk fills on demand.

use std::path::{Path, PathBuf};

use super::{sh, status};

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount`'s `size=`), mode 0700, at `at`, made if missing.
    pub fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        sh(&format!(
            "mount -t tmpfs -o size={size},mode=0700 mesh-host-test {}",
            at.display()
        ));
        Tmpfs(at.to_path_buf())
    }

    /// Fills it with zeros until the file system is full; returns the filler, whose removal
    /// makes room again.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let block = vec![0u8; 1024];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if status(&format!("umount {}", self.0.display())) != 0 {
            let _ = status(&format!("umount -l {}", self.0.display()));
        }
    }
}

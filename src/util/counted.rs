//! A writer that counts the bytes it passes on: what is written is measured as it is written
//! (a large report is neither built whole in memory nor serialised twice to be measured).

/// Counts what it passes on to `inner`.
pub struct Counted<W> {
    inner: W,
    pub bytes: usize,
}

impl<W> Counted<W> {
    pub fn new(inner: W) -> Counted<W> {
        Counted { inner, bytes: 0 }
    }
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.bytes += written;
        Ok(written)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

//! Frames on the link: a 4-byte big-endian length, then that many bytes (a message's JSON, or the
//! declaration after a `declare`). A length over the limit is rejected as soon as its 4 bytes are
//! in, before any of the body is buffered; a body is read into a buffer of exactly its announced
//! length, which the frame's message (or declaration) takes.

use std::fmt;

pub const HEADER: usize = 4;

#[derive(Debug, PartialEq)]
pub enum FrameError {
    TooLarge { length: u64, max: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge { length, max } => {
                write!(
                    f,
                    "frame of {length} bytes announced, more than the limit of {max}"
                )
            }
        }
    }
}

/// The frame now arriving: its header, then its body. The body gets its own buffer, reserved
/// once at the announced length (no growth by doubling, no bytes of the next frame in it), so a
/// complete body is handed on as it is and a declaration's frame becomes its text without a copy.
#[derive(Debug, Default)]
pub struct Reader {
    header: [u8; HEADER],
    /// How many bytes of the header are in.
    header_read: usize,
    body: Vec<u8>,
}

impl Reader {
    /// Takes what it needs of `bytes` for the frame now arriving: how many bytes it used, and the
    /// frame's body once complete. Call again with the rest: one call completes one frame at most.
    pub fn read(
        &mut self,
        bytes: &[u8],
        max: usize,
    ) -> Result<(usize, Option<Vec<u8>>), FrameError> {
        let mut used = 0;
        if self.header_read < HEADER {
            used = (HEADER - self.header_read).min(bytes.len());
            self.header[self.header_read..self.header_read + used].copy_from_slice(&bytes[..used]);
            self.header_read += used;
            let Some(length) = self.announced() else {
                return Ok((used, None));
            };
            if length > max as u64 {
                return Err(FrameError::TooLarge { length, max });
            }
            self.body = Vec::with_capacity(length as usize);
        }
        let length = self.announced().unwrap_or(0) as usize;
        let take = (length - self.body.len()).min(bytes.len() - used);
        self.body.extend_from_slice(&bytes[used..used + take]);
        used += take;
        if self.body.len() < length {
            return Ok((used, None));
        }
        self.header_read = 0;
        Ok((used, Some(std::mem::take(&mut self.body))))
    }

    /// The length the frame now arriving announced, once its header is in.
    pub fn announced(&self) -> Option<u64> {
        (self.header_read == HEADER).then(|| u32::from_be_bytes(self.header) as u64)
    }

    /// Whether no byte of a frame is buffered.
    pub fn is_empty(&self) -> bool {
        self.header_read == 0
    }
}

/// Appends `body` as one frame to `out`.
pub fn encode(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame `bytes` completes, fed in pieces of `piece` bytes.
    fn frames(bytes: &[u8], piece: usize, max: usize) -> Result<Vec<Vec<u8>>, FrameError> {
        let mut reader = Reader::default();
        let mut out = Vec::new();
        for mut chunk in bytes.chunks(piece) {
            while !chunk.is_empty() {
                let (used, frame) = reader.read(chunk, max)?;
                out.extend(frame);
                chunk = &chunk[used..];
            }
        }
        Ok(out)
    }

    #[test]
    fn round_trip_in_any_pieces() {
        let mut buf = Vec::new();
        encode(b"{}", &mut buf);
        encode(b"", &mut buf);
        encode(b"[1]", &mut buf);
        for piece in 1..=buf.len() {
            assert_eq!(
                frames(&buf, piece, 10),
                Ok(vec![b"{}".to_vec(), Vec::new(), b"[1]".to_vec()]),
                "in pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_body_is_buffered_at_its_announced_length_and_incomplete_is_no_error() {
        let mut reader = Reader::default();
        assert!(reader.is_empty());
        assert_eq!(reader.read(&[0, 0], 100), Ok((2, None)));
        assert_eq!(reader.announced(), None);
        assert!(!reader.is_empty());
        assert_eq!(reader.read(&[0, 50, b'{'], 100), Ok((3, None)));
        assert_eq!(reader.announced(), Some(50));
        assert_eq!(reader.body.capacity(), 50);
        let rest = [b' '; 60];
        let (used, body) = reader.read(&rest, 100).unwrap();
        assert_eq!(used, 49, "not a byte of the next frame");
        let body = body.unwrap();
        assert_eq!((body.len(), body.capacity()), (50, 50));
        assert!(reader.is_empty());
    }

    #[test]
    fn oversized_length_is_rejected_before_the_body() {
        let buf = [0x7f, 0xff, 0xff, 0xff];
        assert_eq!(
            Reader::default().read(&buf, 1024),
            Err(FrameError::TooLarge {
                length: 0x7fff_ffff,
                max: 1024
            })
        );
    }
}

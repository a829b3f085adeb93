//! Frames on the link: a 4-byte big-endian length, then that many bytes of JSON. A length over
//! the limit is rejected as soon as its 4 bytes are in, before any of the body is buffered.

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

/// The next complete frame's body in `buf` and how many bytes it took, or `Ok(None)` when the
/// frame is still incomplete (a normal outcome, not an error).
pub fn decode(buf: &[u8], max: usize) -> Result<Option<(usize, &[u8])>, FrameError> {
    let Some(header) = buf.get(..HEADER) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as u64;
    if length > max as u64 {
        return Err(FrameError::TooLarge { length, max });
    }
    let end = HEADER + length as usize;
    Ok(buf.get(HEADER..end).map(|body| (end, body)))
}

/// Appends `body` as one frame to `out`.
pub fn encode(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_incomplete() {
        let mut buf = Vec::new();
        encode(b"{}", &mut buf);
        encode(b"[1]", &mut buf);
        assert_eq!(decode(&buf, 10), Ok(Some((6, b"{}".as_slice()))));
        assert_eq!(decode(&buf[6..], 10), Ok(Some((7, b"[1]".as_slice()))));
        for cut in 0..6 {
            assert_eq!(decode(&buf[..cut], 10), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn oversized_length_is_rejected_before_the_body() {
        let buf = [0x7f, 0xff, 0xff, 0xff];
        assert_eq!(
            decode(&buf, 1024),
            Err(FrameError::TooLarge {
                length: 0x7fff_ffff,
                max: 1024
            })
        );
    }
}

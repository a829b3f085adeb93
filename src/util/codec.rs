//! SHA-256, hex and base64: the encodings the host needs. SHA-256 is ring's (already in the tree
//! for the link's TLS, with the CPU's SHA extensions where it has them); hex and base64 are a few
//! auditable lines here rather than crates.

/// SHA-256 of `data` (FIPS 180-4), for digests of declarations, specs and file contents.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, data).as_ref());
    out
}

/// HMAC-SHA256 (RFC 2104) of `data` under `key`: the keyed digest shown of secret content, which
/// tells "changed" from "same" to whoever sees two of them, but lets no one without the host's
/// key test a guess of the content against it, as a plain SHA-256 would.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = ring::digest::Context::new(&ring::digest::SHA256);
    inner.update(&pad(0x36));
    inner.update(data);
    let mut outer = ring::digest::Context::new(&ring::digest::SHA256);
    outer.update(&pad(0x5c));
    outer.update(inner.finish().as_ref());
    let mut out = [0u8; 32];
    out.copy_from_slice(outer.finish().as_ref());
    out
}

/// SHA-256 of the text `args` formats, hashed as it is formatted: no string is built. The
/// pieces are gathered in a buffer on the stack and hashed a buffer at a time: a hash update per
/// piece (a dozen for a file's digest) costs more than the hashing.
pub fn sha256_of_text(args: std::fmt::Arguments) -> [u8; 32] {
    struct Hashing {
        context: ring::digest::Context,
        buffer: [u8; 256],
        used: usize,
    }
    impl std::fmt::Write for Hashing {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let text = text.as_bytes();
            if self.used + text.len() > self.buffer.len() {
                self.context.update(&self.buffer[..self.used]);
                self.used = 0;
            }
            if text.len() > self.buffer.len() {
                self.context.update(text);
            } else {
                self.buffer[self.used..self.used + text.len()].copy_from_slice(text);
                self.used += text.len();
            }
            Ok(())
        }
    }
    let mut hashing = Hashing {
        context: ring::digest::Context::new(&ring::digest::SHA256),
        buffer: [0; 256],
        used: 0,
    };
    // Hashing never fails; only a `Display` that fails would, and none used here does.
    let _ = std::fmt::write(&mut hashing, args);
    hashing.context.update(&hashing.buffer[..hashing.used]);
    let mut out = [0u8; 32];
    out.copy_from_slice(hashing.context.finish().as_ref());
    out
}

/// Lower-case hex of 32 bytes, formatted from the stack (a digest written or hashed again).
pub struct Hex32<'a>(pub &'a [u8; 32]);

impl std::fmt::Display for Hex32<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        // Hex digits are ASCII.
        f.write_str(std::str::from_utf8(&hex32(self.0)).unwrap_or_default())
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lower-case hex of 32 bytes, as ASCII on the stack.
pub fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut text = [0u8; 64];
    for (pair, b) in text.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX_DIGITS[(b >> 4) as usize];
        pair[1] = HEX_DIGITS[(b & 15) as usize];
    }
    text
}

/// Lower-case hex of SHA-256, the form digests take in the store and in output.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&sha256(data))
}

pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX_DIGITS[(b >> 4) as usize] as char);
        s.push(HEX_DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The 32 bytes that 64 lower-case hex digits spell (the form `hex` writes), if `text` is that.
pub fn hex_decode_32(text: &str) -> Option<[u8; 32]> {
    fn value(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

/// Decodes standard base64 (RFC 4648, with padding; ASCII whitespace is ignored, as in PEM).
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    fn value(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some((c - b'A') as u32),
            b'a'..=b'z' => Some((c - b'a' + 26) as u32),
            b'0'..=b'9' => Some((c - b'0' + 52) as u32),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let symbols: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !symbols.len().is_multiple_of(4) {
        return Err("base64 length is not a multiple of 4".into());
    }
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3);
    let groups = symbols.len() / 4;
    for (index, group) in symbols.chunks_exact(4).enumerate() {
        let padding = group.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && index + 1 != groups) {
            return Err("misplaced base64 padding".into());
        }
        let mut acc = 0u32;
        for (i, &c) in group.iter().enumerate() {
            let v = if i >= 4 - padding {
                0
            } else {
                value(c).ok_or_else(|| format!("invalid base64 character {:?}", c as char))?
            };
            acc = (acc << 6) | v;
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - padding]);
    }
    Ok(out)
}

/// Encodes standard base64 (RFC 4648, with padding), the form keys and signatures take in text.
pub fn base64_encode(bytes: &[u8]) -> String {
    const SYMBOLS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let mut group = [0u8; 3];
        group[..chunk.len()].copy_from_slice(chunk);
        let acc = u32::from_be_bytes([0, group[0], group[1], group[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(SYMBOLS[(acc >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_hashed_as_formatted_is_the_hash_of_the_formatted_text() {
        let long = "y".repeat(300);
        let pieces = ["", "a", &"x".repeat(250), &long];
        for a in pieces {
            for b in pieces {
                let formatted = format!("{a}\n{b}:{}\n", 42);
                assert_eq!(
                    sha256_of_text(format_args!("{a}\n{b}:{}\n", 42)),
                    sha256(formatted.as_bytes()),
                    "{} and {} bytes",
                    a.len(),
                    b.len()
                );
            }
        }
    }

    #[test]
    fn sha256_known_vectors() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(sha256_hex(input), *want);
        }
        let million_a = vec![b'a'; 1_000_000];
        assert_eq!(
            sha256_hex(&million_a),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    /// RFC 4231's test cases 1, 2, 4 and 6 (a key longer than the block).
    #[test]
    fn hmac_sha256_known_vectors() {
        let cases: &[(&[u8], &[u8], &str)] = &[
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                    23, 24, 25,
                ],
                &[0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ];
        for (key, data, want) in cases {
            assert_eq!(hex(&hmac_sha256(key, data)), *want);
        }
    }

    #[test]
    fn base64_round_trips_and_rejects() {
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64_decode("Zm8=").unwrap(), b"fo");
        assert_eq!(base64_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64_decode("Zm9v\nYmFy").unwrap(), b"foobar");
        assert!(base64_decode("Zm9").is_err());
        assert!(base64_decode("Zg==Zm9v").is_err());
        assert!(base64_decode("Zm9*").is_err());
        for input in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\xff\x00\xfe"] {
            assert_eq!(base64_decode(&base64_encode(input)).unwrap(), input);
        }
        assert_eq!(base64_encode(b"fo"), "Zm8=");
    }
}

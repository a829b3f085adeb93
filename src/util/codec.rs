//! SHA-256, a checksum, hex and base64: the encodings the host needs, and the canonical encoding
//! of a spec its digests are made of (`Canonical`). SHA-256 is ring's (already in the tree
//! for the link's TLS, with the CPU's SHA extensions where it has them); hex and base64 are a few
//! auditable lines here rather than crates.

/// SHA-256 of `data` (FIPS 180-4), for digests of declarations, specs and file contents.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, data).as_ref());
    out
}

/// SHA-256 of what `input` reads to its end, a buffer at a time: a stored text checked against
/// its digest without being held whole beside the copy the caller has.
pub fn sha256_of_reader(mut input: impl std::io::Read) -> std::io::Result<[u8; 32]> {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => context.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    Ok(out)
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

/// SHA-256 of the text `args` formats, hashed as it is formatted: no string is built. Only for
/// a digest that never leaves the process (the watcher's sources); a stored one is `Canonical`.
/// The pieces are gathered in a buffer on the stack and hashed a buffer at a time: a hash update
/// per piece costs more than the hashing.
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

/// The canonical encoding of a declared spec, whose SHA-256 is the digest the ledger keeps and a
/// container's label holds. Explicit bytes, never a `Debug` or serde text, which a toolchain or
/// crate update may change: a digest that moved would make every resource look changed.
///
/// ```text
/// encoding = kind name (ASCII) 0x00 version(1 byte) field...   the fields in the kind's order
/// bool     = 0x00 | 0x01
/// u32      = 4 bytes, big-endian
/// str      = length (8 bytes, big-endian) then the UTF-8 bytes
/// sha256   = the 32 bytes of a SHA-256 (of a file's or unit's content)
/// option   = 0x00 (none) | 0x01 then the value
/// list     = count (8 bytes, big-endian) then each item
/// map      = count (8 bytes, big-endian) then each key and value, keys in ascending byte order
/// ```
///
/// Each kind's `digest` lists its fields. Changing a kind's fields or their encoding takes a new
/// version byte.
pub struct Canonical(Vec<u8>);

impl Canonical {
    /// The start of the encoding of a spec of `kind` in encoding `version`.
    pub fn new(kind: &str, version: u8) -> Canonical {
        let mut bytes = Vec::with_capacity(96);
        bytes.extend_from_slice(kind.as_bytes());
        bytes.extend_from_slice(&[0, version]);
        Canonical(bytes)
    }

    pub fn bool(&mut self, value: bool) -> &mut Canonical {
        self.0.push(u8::from(value));
        self
    }

    pub fn u32(&mut self, value: u32) -> &mut Canonical {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn str(&mut self, value: &str) -> &mut Canonical {
        self.count(value.len());
        self.0.extend_from_slice(value.as_bytes());
        self
    }

    pub fn sha256(&mut self, value: &[u8; 32]) -> &mut Canonical {
        self.0.extend_from_slice(value);
        self
    }

    /// `0x00` for none; `0x01`, then what `put` encodes of the value.
    pub fn option<T>(
        &mut self,
        value: Option<T>,
        put: impl FnOnce(&mut Canonical, T) -> &mut Canonical,
    ) -> &mut Canonical {
        match value {
            None => self.0.push(0),
            Some(value) => {
                self.0.push(1);
                put(self, value);
            }
        }
        self
    }

    pub fn strs<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a str>) -> &mut Canonical {
        self.count(items.len());
        for item in items {
            self.str(item);
        }
        self
    }

    /// A map given in its keys' ascending byte order (a `BTreeMap<String, _>`'s).
    pub fn map<'a>(
        &mut self,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> &mut Canonical {
        self.count(entries.len());
        for (key, value) in entries {
            self.str(key).str(value);
        }
        self
    }

    fn count(&mut self, n: usize) {
        self.0.extend_from_slice(&(n as u64).to_be_bytes());
    }

    /// The encoded bytes, for tests to show them.
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The SHA-256 of the encoding: the spec's digest.
    pub fn digest(&self) -> [u8; 32] {
        sha256(&self.0)
    }

    /// The HMAC-SHA256 of the encoding under `key`: the digest of a spec holding secrets, shown.
    pub fn keyed_digest(&self, key: &[u8]) -> [u8; 32] {
        hmac_sha256(key, &self.0)
    }
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
#[inline]
pub fn hex_decode_32(text: &str) -> Option<[u8; 32]> {
    let digits: &[u8; 64] = text.as_bytes().try_into().ok()?;
    let mut out = [0u8; 32];
    // Any byte not a digit makes its value 0x10 or more: checked once, after the loop, which
    // then has no branch (a ledger holds a digest per owned resource, read every run).
    let mut invalid = 0;
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (HEX_VALUES[pair[0] as usize], HEX_VALUES[pair[1] as usize]);
        invalid |= high | low;
        *byte = high << 4 | (low & 15);
    }
    (invalid < 16).then_some(out)
}

/// Each byte's value as a lower-case hex digit, 0x10 for the others.
const HEX_VALUES: [u8; 256] = {
    let mut values = [0x10; 256];
    let mut i = 0;
    while i < 16 {
        values[HEX_DIGITS[i] as usize] = i as u8;
        i += 1;
    }
    values
};

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

/// A 64-bit checksum of bytes fed in pieces of any size, for a store file that is only a cache
/// (the files index): damage (a torn or mixed write, a flipped bit, bytes of another version)
/// changes it but for a chance in 2^64, at a few times the speed of SHA-256 with the CPU's SHA
/// extensions. Not a digest: the store is root's alone, and whoever can write it could as well
/// make any checksum match.
#[derive(Default)]
pub struct Checksum {
    sum: u64,
    /// Bytes fed that do not fill a word yet.
    pending: [u8; 8],
    pending_len: usize,
    len: u64,
}

impl Checksum {
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.pending_len > 0 {
            let take = (8 - self.pending_len).min(bytes.len());
            let (head, rest) = bytes.split_at(take);
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(head);
            self.pending_len += take;
            bytes = rest;
            if self.pending_len < 8 {
                return;
            }
            self.word(u64::from_le_bytes(self.pending));
            self.pending_len = 0;
        }
        let mut words = bytes.chunks_exact(8);
        for word in words.by_ref() {
            self.word(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// Each step is one-to-one in the sum for a given word, so a word that differs makes the
    /// sum differ from there on, until another word that differs happens to cancel it.
    fn word(&mut self, word: u64) {
        self.sum = (self.sum ^ word)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    /// The checksum of all the bytes fed, and of how many they were.
    pub fn finish(mut self) -> [u8; 8] {
        let mut last = [0; 8];
        last[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
        self.word(u64::from_le_bytes(last));
        self.word(self.len);
        self.sum.to_le_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_is_of_the_bytes_whatever_their_pieces_and_any_change_shows() {
        let bytes: Vec<u8> = (0..100u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = |bytes: &[u8]| {
            let mut sum = Checksum::default();
            sum.update(bytes);
            sum.finish()
        };
        let expected = whole(&bytes);
        for first in 0..bytes.len() {
            for second in first..bytes.len() {
                let mut sum = Checksum::default();
                sum.update(&bytes[..first]);
                sum.update(&bytes[first..second]);
                sum.update(&bytes[second..]);
                assert_eq!(sum.finish(), expected, "{first} {second}");
            }
        }
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut changed = bytes.clone();
                changed[at] ^= 1 << bit;
                assert_ne!(whole(&changed), expected, "{at} {bit}");
            }
        }
        // Zeros after, or one byte less: the length is in it.
        assert_ne!(whole(&[bytes.as_slice(), &[0]].concat()), expected);
        assert_ne!(whole(&bytes[..99]), expected);
        assert_ne!(whole(&[0; 8]), whole(&[0; 16]));
    }

    #[test]
    fn hex_decode_32_takes_only_what_hex_writes() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        let text = hex(&bytes);
        assert_eq!(hex_decode_32(&text), Some(bytes));
        assert_eq!(hex_decode_32(&"0f".repeat(32)), Some([15; 32]));
        for other in [
            text.to_uppercase(),
            text[1..].to_string(),
            format!("{text}0"),
            text.replacen('0', "g", 1),
            text.replacen('a', "\u{e9}", 1)[..64].to_string(),
            "/".repeat(64),
            ":".repeat(64),
        ] {
            assert_eq!(hex_decode_32(&other), None, "{other}");
        }
    }

    #[test]
    fn text_hashed_as_read_is_the_hash_of_the_text() {
        for len in [0, 1, 64 << 10, (64 << 10) + 1, 200_000] {
            let text: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let read = sha256_of_reader(text.as_slice()).expect("read");
            assert_eq!(read, sha256(&text), "{len} bytes");
        }
    }

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

    /// Each field's bytes as the encoding's documentation gives them.
    #[test]
    fn the_canonical_encoding_is_the_documented_bytes() {
        let mut e = Canonical::new("kind", 1);
        e.bool(true)
            .bool(false)
            .u32(0o644)
            .str("é")
            .sha256(&[0xab; 32])
            .option(None::<u32>, Canonical::u32)
            .option(Some("x"), Canonical::str)
            .strs(["a", ""].into_iter())
            .map([("K", "v")].into_iter());
        let mut want = b"kind\x00\x01\x01\x00\x00\x00\x01\xa4".to_vec();
        want.extend_from_slice(b"\0\0\0\0\0\0\0\x02\xc3\xa9");
        want.extend_from_slice(&[0xab; 32]);
        want.extend_from_slice(b"\x00\x01\0\0\0\0\0\0\0\x01x");
        want.extend_from_slice(b"\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x01a\0\0\0\0\0\0\0\0");
        want.extend_from_slice(b"\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x01K\0\0\0\0\0\0\0\x01v");
        assert_eq!(e.bytes(), want);
        assert_eq!(e.digest(), sha256(&want));
        assert_eq!(e.keyed_digest(b"key"), hmac_sha256(b"key", &want));
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

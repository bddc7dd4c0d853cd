//! The versioned, checksummed envelope around a standalone binary record.
//!
//! Layout (all integers little-endian), 16 bytes of header then the body:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic, names the record kind (e.g. `CMAP` for a cluster map) |
//! | 4 | 2 | format version of the body |
//! | 6 | 2 | flags, reserved, written as 0 and rejected if non-zero |
//! | 8 | 4 | body length in bytes |
//! | 12 | 4 | crc32c over bytes 0..12 followed by the body |
//! | 16 | n | body, postcard-encoded |
//!
//! The reader checks every field before it trusts the body: a truncated,
//! oversized, corrupted or future-version record is a typed [`EnvelopeError`],
//! never a panic.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Bytes of header before the body.
pub const HEADER_SIZE_BYTES: usize = 16;

/// The largest body any envelope may carry. Bounds the allocation a reader
/// makes on behalf of bytes it has not yet verified.
pub const BODY_SIZE_BYTES_MAX: u32 = 256 * 1024 * 1024;

/// What went wrong reading an envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("record truncated: {got} bytes, need at least {need}")]
    Truncated { got: u64, need: u64 },
    #[error("wrong record kind: magic {found:?}, expected {expected:?}")]
    Magic { found: [u8; 4], expected: [u8; 4] },
    #[error("record format version {found} is not supported (this build reads {supported:?})")]
    Version { found: u16, supported: Vec<u16> },
    #[error("record has unknown flags {0:#06x}")]
    Flags(u16),
    #[error("record body of {0} bytes exceeds the {BODY_SIZE_BYTES_MAX}-byte limit")]
    TooLarge(u32),
    #[error("record has {0} trailing bytes after its body")]
    Trailing(u64),
    #[error("record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("record body does not decode: {0}")]
    Body(String),
    #[error("record body does not encode: {0}")]
    Encode(String),
}

/// A header that passed every check; the body is still raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub body_size_bytes: u32,
}

/// Encodes `body` as an envelope of kind `magic`, format `version`.
///
/// # Errors
/// [`EnvelopeError::Encode`] if serde refuses the value, or
/// [`EnvelopeError::TooLarge`] if the body exceeds [`BODY_SIZE_BYTES_MAX`].
pub fn encode<T: Serialize>(
    magic: [u8; 4],
    version: u16,
    body: &T,
) -> Result<Vec<u8>, EnvelopeError> {
    let body = postcard::to_allocvec(body).map_err(|e| EnvelopeError::Encode(e.to_string()))?;
    let body_size_bytes = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= BODY_SIZE_BYTES_MAX)
        .ok_or(EnvelopeError::TooLarge(u32::MAX))?;
    let mut out = Vec::with_capacity(HEADER_SIZE_BYTES + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&body_size_bytes.to_le_bytes());
    let crc = crate::crc::crc32c_append(crate::crc::crc32c(&out[..12]), &body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&body);
    debug_assert_eq!(
        check(&out, magic, &[version]).map(|(h, _)| h.version),
        Ok(version)
    );
    Ok(out)
}

/// Checks an envelope's header and checksum and returns the header and body.
///
/// # Errors
/// Any [`EnvelopeError`] describing the first check that failed.
pub fn check<'a>(
    bytes: &'a [u8],
    magic: [u8; 4],
    versions_supported: &[u16],
) -> Result<(Header, &'a [u8]), EnvelopeError> {
    let header = bytes
        .get(..HEADER_SIZE_BYTES)
        .ok_or(EnvelopeError::Truncated {
            got: bytes.len() as u64,
            need: HEADER_SIZE_BYTES as u64,
        })?;
    let field = |at: usize| [header[at], header[at + 1]];
    let word = |at: usize| [header[at], header[at + 1], header[at + 2], header[at + 3]];
    let found_magic = word(0);
    if found_magic != magic {
        return Err(EnvelopeError::Magic {
            found: found_magic,
            expected: magic,
        });
    }
    let version = u16::from_le_bytes(field(4));
    if !versions_supported.contains(&version) {
        return Err(EnvelopeError::Version {
            found: version,
            supported: versions_supported.to_vec(),
        });
    }
    let flags = u16::from_le_bytes(field(6));
    if flags != 0 {
        return Err(EnvelopeError::Flags(flags));
    }
    let body_size_bytes = u32::from_le_bytes(word(8));
    if body_size_bytes > BODY_SIZE_BYTES_MAX {
        return Err(EnvelopeError::TooLarge(body_size_bytes));
    }
    let rest = &bytes[HEADER_SIZE_BYTES..];
    let body_len = body_size_bytes as usize;
    if rest.len() < body_len {
        return Err(EnvelopeError::Truncated {
            got: bytes.len() as u64,
            need: (HEADER_SIZE_BYTES + body_len) as u64,
        });
    }
    if rest.len() > body_len {
        return Err(EnvelopeError::Trailing((rest.len() - body_len) as u64));
    }
    let stored = u32::from_le_bytes(word(12));
    let computed = crate::crc::crc32c_append(crate::crc::crc32c(&header[..12]), rest);
    if stored != computed {
        return Err(EnvelopeError::Checksum { stored, computed });
    }
    Ok((
        Header {
            version,
            body_size_bytes,
        },
        rest,
    ))
}

/// Checks an envelope and decodes its body as `T`.
///
/// Only for kinds with a single supported version; kinds with several call
/// [`check`] and pick the body type by [`Header::version`].
///
/// # Errors
/// Any [`EnvelopeError`].
pub fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    magic: [u8; 4],
    version: u16,
) -> Result<T, EnvelopeError> {
    let (_, body) = check(bytes, magic, &[version])?;
    decode_body(body)
}

/// Decodes a checked body; the whole body must be consumed.
///
/// # Errors
/// [`EnvelopeError::Body`] if the bytes are not a `T`, or
/// [`EnvelopeError::Trailing`] if bytes are left over.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, EnvelopeError> {
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|e| EnvelopeError::Body(e.to_string()))?;
    if !rest.is_empty() {
        return Err(EnvelopeError::Trailing(rest.len() as u64));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAGIC: [u8; 4] = *b"TEST";

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        a: u32,
        b: String,
    }

    fn sample_bytes() -> Vec<u8> {
        encode(
            MAGIC,
            1,
            &Sample {
                a: 7,
                b: "hi".into(),
            },
        )
        .expect("encode")
    }

    /// Format version 1 of the envelope, frozen: a change here breaks every
    /// record on disk.
    #[test]
    fn golden_bytes_v1() {
        let bytes = sample_bytes();
        let expected: &[u8] = &[
            b'T', b'E', b'S', b'T', 1, 0, 0, 0, 4, 0, 0, 0, 0xf4, 0x23, 0xf6, 0xcc, 7, 2, b'h',
            b'i',
        ];
        assert_eq!(bytes, expected, "got {bytes:02x?}");
        let back: Sample = decode(&bytes, MAGIC, 1).expect("decode");
        assert_eq!(back.a, 7);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = sample_bytes();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode::<Sample>(&bad, MAGIC, 1).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn wrong_kind_version_and_length_are_named() {
        let bytes = sample_bytes();
        assert!(matches!(
            decode::<Sample>(&bytes, *b"NOPE", 1),
            Err(EnvelopeError::Magic { .. })
        ));
        assert!(matches!(
            decode::<Sample>(&bytes, MAGIC, 2),
            Err(EnvelopeError::Version { found: 1, .. })
        ));
        assert!(matches!(
            decode::<Sample>(&bytes[..bytes.len() - 1], MAGIC, 1),
            Err(EnvelopeError::Truncated { .. })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(
            decode::<Sample>(&long, MAGIC, 1),
            Err(EnvelopeError::Trailing(1))
        ));
    }

    proptest! {
        /// Arbitrary bytes never panic the reader.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode::<Sample>(&bytes, MAGIC, 1);
        }

        /// Arbitrary bytes behind a valid header and checksum never panic
        /// the body decoder either.
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC);
            out.extend_from_slice(&1u16.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            let crc = crate::crc::crc32c_append(crate::crc::crc32c(&out[..12]), &body);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&body);
            let _ = decode::<Sample>(&out, MAGIC, 1);
        }
    }
}

//! Whole-object checksums of multipart uploads, as S3 computes them from
//! the parts' checksums without reading the bytes again:
//! - *composite*: the checksum of the parts' checksums (their bytes, in
//!   order), with `-N` for N parts: any algorithm;
//! - *full object*: the CRC of the whole object, combined from the parts'
//!   CRCs and sizes (CRC32, CRC32C, CRC64NVME).
//!
//! The combination is zlib's `crc32_combine`, for any reflected CRC whose
//! initial value equals its final XOR: `crc(A‖B) = crc(A)·x^(8|B|) ⊕
//! crc(B)` modulo the polynomial.

use crate::gateway::decode_base64;
use s3s::checksum::ChecksumHasher;
use s3s::{S3Result, s3_error};

pub const COMPOSITE: &str = "COMPOSITE";
pub const FULL_OBJECT: &str = "FULL_OBJECT";

/// A reflected CRC: its width in bits and its reflected polynomial.
#[derive(Clone, Copy, Debug)]
struct Crc {
    width: u32,
    poly: u64,
}

const CRC32: Crc = Crc {
    width: 32,
    poly: 0xEDB8_8320,
};
const CRC32C: Crc = Crc {
    width: 32,
    poly: 0x82F6_3B78,
};
const CRC64NVME: Crc = Crc {
    width: 64,
    poly: 0x9A6C_9329_AC4B_C9B5,
};

impl Crc {
    fn of(algorithm: &str) -> Option<Crc> {
        match algorithm {
            "CRC32" => Some(CRC32),
            "CRC32C" => Some(CRC32C),
            "CRC64NVME" => Some(CRC64NVME),
            _ => None,
        }
    }

    /// x^0 in the reflected representation.
    fn one(self) -> u64 {
        1 << (self.width - 1)
    }

    /// `a·b` modulo the polynomial.
    fn multiply(self, a: u64, mut b: u64) -> u64 {
        let mut m = self.one();
        let mut p = 0;
        loop {
            if a & m != 0 {
                p ^= b;
                if a & (m - 1) == 0 {
                    return p;
                }
            }
            m >>= 1;
            b = if b & 1 != 0 {
                (b >> 1) ^ self.poly
            } else {
                b >> 1
            };
        }
    }

    /// x^(8·n) modulo the polynomial.
    fn x8n(self, mut n: u64) -> u64 {
        let mut p = self.one();
        // x^(2^k), from x^8 (k = 3).
        let mut square = self.one() >> 1;
        for _ in 0..3 {
            square = self.multiply(square, square);
        }
        while n != 0 {
            if n & 1 != 0 {
                p = self.multiply(square, p);
            }
            n >>= 1;
            square = self.multiply(square, square);
        }
        p
    }

    /// The CRC of `A‖B` from `crc(A)`, `crc(B)` and `|B|`.
    fn combine(self, crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
        self.multiply(self.x8n(len_b), crc_a) ^ crc_b
    }

    fn bytes(self) -> usize {
        (self.width / 8) as usize
    }
}

/// Whether a multipart upload may have a checksum of `algorithm` and
/// `kind` (S3's rules), with the kind S3 picks when none is given.
///
/// # Errors
/// `InvalidRequest` for a pair S3 refuses.
pub fn upload_kind(algorithm: Option<&str>, kind: Option<&str>) -> S3Result<Option<String>> {
    let Some(algorithm) = algorithm else {
        return match kind {
            None => Ok(None),
            Some(_) => Err(s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )),
        };
    };
    let crc = Crc::of(algorithm).is_some();
    match kind {
        None if algorithm == "CRC64NVME" => Ok(Some(FULL_OBJECT.into())),
        None => Ok(Some(COMPOSITE.into())),
        Some(FULL_OBJECT) if crc => Ok(Some(FULL_OBJECT.into())),
        Some(COMPOSITE) if algorithm != "CRC64NVME" => Ok(Some(COMPOSITE.into())),
        Some(other) => Err(s3_error!(
            InvalidRequest,
            "The {algorithm} algorithm does not support the {other} checksum type"
        )),
    }
}

/// A hasher of `algorithm` alone.
fn hasher(algorithm: &str) -> Option<ChecksumHasher> {
    let mut hasher = ChecksumHasher::default();
    match algorithm {
        "CRC32" => hasher.crc32 = Some(Default::default()),
        "CRC32C" => hasher.crc32c = Some(Default::default()),
        "SHA1" => hasher.sha1 = Some(Default::default()),
        "SHA256" => hasher.sha256 = Some(Default::default()),
        "CRC64NVME" => hasher.crc64nvme = Some(Default::default()),
        _ => return None,
    }
    Some(hasher)
}

/// The base64 checksum `hasher` computed.
fn finish(hasher: ChecksumHasher) -> Option<String> {
    let sums = hasher.finalize();
    sums.checksum_crc32
        .or(sums.checksum_crc32c)
        .or(sums.checksum_sha1)
        .or(sums.checksum_sha256)
        .or(sums.checksum_crc64nvme)
}

/// The whole object's checksum of `algorithm` and `kind` from its parts'
/// (base64) checksums and sizes, as S3 shows it (`…-N` if composite).
///
/// # Errors
/// `InvalidPart` if a part's checksum is not one of `algorithm`.
pub fn whole(algorithm: &str, kind: &str, parts: &[(&str, u64)]) -> S3Result<String> {
    let raw = |value: &str| {
        decode_base64(value)
            .ok_or_else(|| s3_error!(InvalidPart, "a part's {algorithm} checksum is not base64"))
    };
    if kind == FULL_OBJECT {
        let Some(crc) = Crc::of(algorithm) else {
            return Err(s3_error!(
                InvalidRequest,
                "{algorithm} has no full-object checksum"
            ));
        };
        let mut total: Option<u64> = None;
        for (value, size) in parts {
            let bytes = raw(value)?;
            if bytes.len() != crc.bytes() {
                return Err(s3_error!(
                    InvalidPart,
                    "a part's {algorithm} checksum has {} bytes",
                    bytes.len()
                ));
            }
            let part = bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
            total = Some(match total {
                None => part,
                Some(before) => crc.combine(before, part, *size),
            });
        }
        let total = total.unwrap_or(0);
        let bytes = &total.to_be_bytes()[8 - crc.bytes()..];
        return Ok(encode_base64(bytes));
    }
    let mut hasher = hasher(algorithm)
        .ok_or_else(|| s3_error!(InvalidRequest, "unknown checksum algorithm {algorithm}"))?;
    for (value, _) in parts {
        hasher.update(&raw(value)?);
    }
    let value = finish(hasher).unwrap_or_default();
    Ok(format!("{value}-{}", parts.len()))
}

/// Standard base64 with padding.
pub fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
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

    fn sum(algorithm: &str, data: &[u8]) -> String {
        let mut hasher = hasher(algorithm).expect("known");
        hasher.update(data);
        finish(hasher).expect("computed")
    }

    #[test]
    fn full_object_crcs_combine_from_the_parts() {
        let data: Vec<u8> = (0..100_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for algorithm in ["CRC32", "CRC32C", "CRC64NVME"] {
            for cuts in [
                vec![0, 100_000],
                vec![0, 1, 100_000],
                vec![0, 5, 77_777, 99_999, 100_000],
            ] {
                let parts: Vec<(String, u64)> = cuts
                    .windows(2)
                    .map(|w| (sum(algorithm, &data[w[0]..w[1]]), (w[1] - w[0]) as u64))
                    .collect();
                let borrowed: Vec<(&str, u64)> =
                    parts.iter().map(|(v, s)| (v.as_str(), *s)).collect();
                assert_eq!(
                    whole(algorithm, FULL_OBJECT, &borrowed).expect("combines"),
                    sum(algorithm, &data),
                    "{algorithm} over {cuts:?}"
                );
            }
        }
    }

    #[test]
    fn composite_checksums_hash_the_parts_checksums() {
        let parts = [sum("SHA256", b"first"), sum("SHA256", b"second")];
        let mut concatenated = decode_base64(&parts[0]).expect("b64");
        concatenated.extend(decode_base64(&parts[1]).expect("b64"));
        let borrowed: Vec<(&str, u64)> = parts.iter().map(|v| (v.as_str(), 5)).collect();
        assert_eq!(
            whole("SHA256", COMPOSITE, &borrowed).expect("composes"),
            format!("{}-2", sum("SHA256", &concatenated))
        );
    }

    #[test]
    fn s3_rules_for_algorithm_and_kind() {
        assert_eq!(upload_kind(None, None).expect("none"), None);
        assert_eq!(
            upload_kind(Some("CRC32"), None).expect("ok").as_deref(),
            Some(COMPOSITE)
        );
        assert_eq!(
            upload_kind(Some("CRC64NVME"), None).expect("ok").as_deref(),
            Some(FULL_OBJECT)
        );
        assert_eq!(
            upload_kind(Some("CRC32C"), Some(FULL_OBJECT))
                .expect("ok")
                .as_deref(),
            Some(FULL_OBJECT)
        );
        assert!(upload_kind(Some("SHA256"), Some(FULL_OBJECT)).is_err());
        assert!(upload_kind(Some("CRC64NVME"), Some(COMPOSITE)).is_err());
        assert!(upload_kind(None, Some(COMPOSITE)).is_err());
    }

    #[test]
    fn base64_encodes_as_the_standard_says() {
        for (raw, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\xff\xfe\xfd", "//79"),
        ] {
            assert_eq!(encode_base64(raw), text);
            assert_eq!(decode_base64(text).expect("decodes"), raw);
        }
    }
}

//! AWS Signature Version 4 for S3 requests in the `Authorization` header:
//! the canonical request, the string to sign and the signing key, as the
//! S3 API reference ("Signature Calculations for the Authorization Header")
//! specifies. Pure: the caller passes the time, so the published example
//! is a unit test.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// `x-amz-content-sha256` of a request without a body.
pub(crate) const EMPTY_PAYLOAD_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// `x-amz-content-sha256` of a body the signature does not cover (hashing
/// a 1 GiB body before sending it would measure the client's SHA-256).
pub(crate) const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SERVICE: &str = "s3";

/// Who signs, and for which region.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) access_key: String,
    pub(crate) secret_key: String,
    pub(crate) region: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// What a signature covers. Path and query are given as they are, not yet
/// encoded: the signer and the request line encode them the same way.
#[derive(Debug)]
pub(crate) struct SignedRequest<'a> {
    pub(crate) method: &'a str,
    /// `/bucket/key`.
    pub(crate) path: &'a str,
    /// Query parameters in any order.
    pub(crate) query: &'a [(&'a str, &'a str)],
    /// The headers to sign, `host`, `x-amz-date` and
    /// `x-amz-content-sha256` among them; names in any case.
    pub(crate) headers: &'a [(&'a str, &'a str)],
    /// The value of `x-amz-content-sha256`.
    pub(crate) payload_sha256: &'a str,
    /// The value of `x-amz-date`: `YYYYMMDDTHHMMSSZ`.
    pub(crate) amz_date: &'a str,
}

/// URI-encodes as SigV4 asks: every byte but `A-Z a-z 0-9 - _ . ~` as
/// `%XX` (upper-case hex); `/` too unless `keep_slash` (object key paths).
pub(crate) fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        let unreserved = byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~');
        if unreserved || (keep_slash && byte == b'/') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The query string, encoded and sorted by name then value: the canonical
/// form, also sent as is on the request line.
pub(crate) fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(name, value)| (uri_encode(name, false), uri_encode(value, false)))
        .collect();
    pairs.sort();
    let mut out = String::new();
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// Signed header names (lower case, sorted, `;`-joined) and the canonical
/// header block (`name:value\n` each, values trimmed, inner runs of
/// spaces folded to one).
fn canonical_headers(headers: &[(&str, &str)]) -> (String, String) {
    let mut lines: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| {
            let folded = value.split_whitespace().collect::<Vec<_>>().join(" ");
            (name.to_ascii_lowercase(), folded)
        })
        .collect();
    lines.sort();
    let names = lines
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let mut block = String::new();
    for (name, value) in &lines {
        let _ = writeln!(block, "{name}:{value}");
    }
    (names, block)
}

/// The canonical request and the signed header names.
fn canonical_request(request: &SignedRequest<'_>) -> (String, String) {
    let (signed_headers, header_block) = canonical_headers(request.headers);
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        uri_encode(request.path, true),
        canonical_query(request.query),
        header_block,
        signed_headers,
        request.payload_sha256
    );
    (canonical, signed_headers)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The `Authorization` header's value for `request`.
pub(crate) fn authorization(credentials: &Credentials, request: &SignedRequest<'_>) -> String {
    let (canonical, signed_headers) = canonical_request(request);
    let date = request.amz_date.get(..8).unwrap_or(request.amz_date);
    let scope = format!("{date}/{}/{SERVICE}/aws4_request", credentials.region);
    let string_to_sign = format!(
        "{ALGORITHM}\n{}\n{scope}\n{}",
        request.amz_date,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let secret = format!("AWS4{}", credentials.secret_key);
    let date_key = hmac_sha256(secret.as_bytes(), date.as_bytes());
    let region_key = hmac_sha256(&date_key, credentials.region.as_bytes());
    let service_key = hmac_sha256(&region_key, SERVICE.as_bytes());
    let signing_key = hmac_sha256(&service_key, b"aws4_request");
    let signature = hex(&hmac_sha256(&signing_key, string_to_sign.as_bytes()));
    format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key
    )
}

/// `x-amz-date` for a time in seconds since the Unix epoch (UTC).
pub(crate) fn amz_date(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let secs_of_day = unix_secs % 86_400;
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_credentials() -> Credentials {
        Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            region: "us-east-1".into(),
        }
    }

    /// The S3 API reference's "GET Object" example of a signature in the
    /// Authorization header.
    #[test]
    fn signs_the_published_get_object_example() {
        let headers = [
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ];
        let request = SignedRequest {
            method: "GET",
            path: "/test.txt",
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY_PAYLOAD_SHA256,
            amz_date: "20130524T000000Z",
        };
        let (canonical, _) = canonical_request(&request);
        assert_eq!(
            hex(&Sha256::digest(canonical.as_bytes())),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
            "canonical request:\n{canonical}"
        );
        assert_eq!(
            authorization(&example_credentials(), &request),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The same reference's "GET Bucket (List Objects)" example: query
    /// parameters given out of order are sorted.
    #[test]
    fn signs_the_published_list_objects_example_with_sorted_query() {
        let headers = [
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ];
        let request = SignedRequest {
            method: "GET",
            path: "/",
            query: &[("prefix", "J"), ("max-keys", "2")],
            headers: &headers,
            payload_sha256: EMPTY_PAYLOAD_SHA256,
            amz_date: "20130524T000000Z",
        };
        assert!(authorization(&example_credentials(), &request).ends_with(
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        ));
    }

    #[test]
    fn encodes_keys_but_not_their_slashes_and_query_values_wholly() {
        assert_eq!(
            uri_encode("/b/dir/a b+c~_.-é", true),
            "/b/dir/a%20b%2Bc~_.-%C3%A9"
        );
        assert_eq!(
            canonical_query(&[("prefix", "bench/"), ("list-type", "2"), ("a", "")]),
            "a=&list-type=2&prefix=bench%2F"
        );
    }

    #[test]
    fn formats_the_date() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_825_599), "20000229T115959Z");
        assert_eq!(amz_date(4_107_542_400), "21000301T000000Z");
    }
}

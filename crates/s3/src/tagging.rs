//! Object and bucket tags: an object's live in its head's metadata (so a
//! PUT's `x-amz-tagging` lands with the object in one write), a bucket's
//! in its record. Both change under a guard on what was read, so two
//! concurrent changes never lose one silently: the loser reads again.

use crate::gateway::{Gateway, client_error, internal};
use crate::meta::{self, BUCKETS_OBJECT, BucketRecord, HEAD_XATTR, META_POOL, ObjectMeta};
use bytes::Bytes;
use cairn_client::{ClientError, Guard, WriteOp};
use s3s::dto::{Tag, TagSet};
use s3s::{S3Result, s3_error};
use std::collections::BTreeMap;

/// S3's most tags on an object, and on a bucket.
pub const OBJECT_TAGS_MAX: usize = 10;
pub const BUCKET_TAGS_MAX: usize = 50;
/// S3's longest tag key and value, in characters.
pub const TAG_KEY_CHARS_MAX: usize = 128;
pub const TAG_VALUE_CHARS_MAX: usize = 256;
/// Tries of a guarded change before giving up (`SlowDown`).
const TRIES: usize = 8;

/// A set of tags as S3 allows it: at most `max`, keys 1–128 characters
/// and unique, values up to 256, none under the reserved `aws:` prefix.
///
/// # Errors
/// `InvalidTag`, or `BadRequest` for too many tags.
pub fn check_tags(
    pairs: impl IntoIterator<Item = (String, String)>,
    max: usize,
) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for (key, value) in pairs {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > TAG_KEY_CHARS_MAX {
            return Err(s3_error!(
                InvalidTag,
                "The TagKey you have provided is invalid"
            ));
        }
        if value.chars().count() > TAG_VALUE_CHARS_MAX {
            return Err(s3_error!(
                InvalidTag,
                "The TagValue you have provided is invalid"
            ));
        }
        if key.starts_with("aws:") {
            return Err(s3_error!(
                InvalidTag,
                "Your TagKey cannot be prefixed with aws:"
            ));
        }
        if tags.insert(key, value).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key"
            ));
        }
    }
    if tags.len() > max {
        // AWS's code for it, which s3s does not name.
        let mut e = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("BadRequest".into()),
            format!("Object tags cannot be greater than {max}"),
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    Ok(tags)
}

/// The tags of a tag set (as a request gives them).
///
/// # Errors
/// As [`check_tags`].
pub fn from_tag_set(set: TagSet, max: usize) -> S3Result<BTreeMap<String, String>> {
    check_tags(
        set.into_iter()
            .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default())),
        max,
    )
}

#[must_use]
pub fn to_tag_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded).
///
/// # Errors
/// `InvalidArgument` for bad encoding, else as [`check_tags`].
pub fn parse_header(text: &str) -> S3Result<BTreeMap<String, String>> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates."
        )
    };
    let mut pairs = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        pairs.push((
            url_decode(key).ok_or_else(bad)?,
            url_decode(value).ok_or_else(bad)?,
        ));
    }
    check_tags(pairs, OBJECT_TAGS_MAX)
}

/// Form URL decoding: `%XX` escapes, `+` for a space; `None` if it is not
/// UTF-8 or an escape is bad.
fn url_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl Gateway {
    /// Replaces the tags of an object's version (none: the latest) (no
    /// tags: removes them), guarded on the metadata read. Answers the
    /// version id S3 shows.
    pub(crate) async fn set_object_tags(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
        tags: BTreeMap<String, String>,
    ) -> S3Result<Option<String>> {
        for _ in 0..TRIES {
            let name = self.locate(bucket, key, version).await?;
            let Some((object, raw)) = self.head_in(bucket, key, &name, false).await? else {
                return Err(crate::gateway::missing(version));
            };
            crate::gateway::readable(bucket, &object, version)?;
            let shown = crate::versioning::shown_version(bucket, &object);
            let tagged = ObjectMeta {
                tags: tags.clone(),
                ..object
            };
            let op = WriteOp::new()
                .guard(Guard::Xattr {
                    name: Bytes::from_static(HEAD_XATTR),
                    value: Some(raw),
                })
                .set_xattr(HEAD_XATTR, &meta::encode(&tagged));
            match self.client().operate(&bucket.pool, &name, op).await {
                Ok(_) => return Ok(shown),
                Err(ClientError::CompareFailed { .. }) => {}
                Err(ClientError::NotFound) => return Err(s3_error!(NoSuchKey)),
                Err(e) => return Err(client_error(e)),
            }
        }
        Err(s3_error!(SlowDown, "the object changed under every try"))
    }

    /// Makes a bucket public-read or private, guarded on the record read.
    pub(crate) async fn set_public_read(
        &self,
        name: &str,
        user: &str,
        public_read: bool,
    ) -> S3Result<()> {
        self.change_bucket(name, user, |bucket| bucket.public_read = public_read)
            .await
    }

    /// Replaces a bucket's tags (none: removes them), guarded on the
    /// record read.
    pub(crate) async fn set_bucket_tags(
        &self,
        name: &str,
        user: &str,
        tags: BTreeMap<String, String>,
    ) -> S3Result<()> {
        self.change_bucket(name, user, |bucket| bucket.tags.clone_from(&tags))
            .await
    }

    /// Changes the record of a bucket `user` owns with `change`, guarded
    /// on the record read (a concurrent change makes it read again).
    pub(crate) async fn change_bucket(
        &self,
        name: &str,
        user: &str,
        change: impl Fn(&mut BucketRecord),
    ) -> S3Result<()> {
        for _ in 0..TRIES {
            let bucket = self.owned_bucket_now(name, user).await?;
            let raw = meta::encode(&bucket);
            let mut changed = bucket.clone();
            change(&mut changed);
            if changed == bucket {
                return Ok(());
            }
            let op = WriteOp::new()
                .guard(Guard::OmapKey {
                    key: Bytes::copy_from_slice(name.as_bytes()),
                    value: Some(raw),
                })
                .omap_set([(name.as_bytes(), &meta::encode(&changed)[..])]);
            let changed = self.client().operate(META_POOL, BUCKETS_OBJECT, op).await;
            self.bucket_changed(name);
            match changed {
                Ok(_) => return Ok(()),
                Err(ClientError::CompareFailed { .. }) => {}
                Err(e) => return Err(client_error(e)),
            }
        }
        Err(internal("the bucket record changed under every try"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(result: S3Result<BTreeMap<String, String>>) -> String {
        result.expect_err("refused").code().as_str().to_owned()
    }

    #[test]
    fn tags_follow_s3s_rules() {
        let tags =
            parse_header("project=cairn&team=storage%20core&empty=&plus=a+b").expect("valid");
        assert_eq!(tags["team"], "storage core");
        assert_eq!(tags["empty"], "");
        assert_eq!(tags["plus"], "a b");
        assert_eq!(code(parse_header("a=1&a=2")), "InvalidTag");
        assert_eq!(code(parse_header("aws:x=1")), "InvalidTag");
        assert_eq!(code(parse_header("=1")), "InvalidTag");
        assert_eq!(code(parse_header("k=%zz")), "InvalidArgument");
        assert_eq!(code(parse_header("k=%ff")), "InvalidArgument");
        let eleven: String = (0..11).map(|i| format!("k{i}=v&")).collect();
        assert_eq!(code(parse_header(&eleven)), "BadRequest");
        let long_key = format!("{}=v", "k".repeat(129));
        assert_eq!(code(parse_header(&long_key)), "InvalidTag");
        let long_value = (String::from("k"), "v".repeat(257));
        assert_eq!(code(check_tags([long_value], 10)), "InvalidTag");
        let fifty = (0..50).map(|i| (format!("k{i}"), String::new()));
        assert_eq!(check_tags(fifty, BUCKET_TAGS_MAX).expect("50").len(), 50);
        let back = from_tag_set(to_tag_set(&tags), OBJECT_TAGS_MAX).expect("round trip");
        assert_eq!(back, tags);
    }
}

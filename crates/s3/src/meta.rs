//! What the gateway keeps in the cluster: users and their keys, buckets,
//! bucket indexes and object heads. Every record is JSON in an omap value
//! or an xattr, so `cairn object omap-get` shows it.
//!
//! Layout (see `docs/s3.md`):
//! - pool [`META_POOL`] holds object [`USERS_OBJECT`] (omap `user/NAME` →
//!   [`UserRecord`], `key/ACCESS_KEY` → [`KeyRecord`]), object
//!   [`BUCKETS_OBJECT`] (omap `NAME` → [`BucketRecord`]) and each bucket's
//!   index shards `index.ID.N` (omap `KEY` → [`IndexEntry`]);
//! - an object's head is object `ID/KEY` in the bucket's pool: its bytes,
//!   and its metadata in xattr [`HEAD_XATTR`] ([`ObjectMeta`]).

use bytes::Bytes;
use cairn_client::{Client, ClientError, Guard, WriteOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The pool of the gateway's own records.
pub const META_POOL: &str = "s3.meta";
pub const USERS_OBJECT: &[u8] = b"users";
pub const BUCKETS_OBJECT: &[u8] = b"buckets";
/// Index shards per bucket: listing merges them, writes spread over them.
pub const INDEX_SHARDS: u32 = 8;
/// The xattr of an object head holding its [`ObjectMeta`].
pub const HEAD_XATTR: &[u8] = b"s3.meta";

/// A gateway user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    pub created_secs: u64,
    pub access_keys: Vec<String>,
}

/// An access key: whose, and its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub user: String,
    pub secret: String,
}

/// A bucket: its id (unique per creation, so a bucket deleted and made
/// again never sees the old one's objects), owner and pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// The bucket's name (the record's omap key; filled in when read).
    #[serde(skip)]
    pub name: String,
    pub id: String,
    pub owner: String,
    pub pool: String,
    pub created_secs: u64,
    /// The bucket's tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// `Enabled` or `Suspended` once versioning was ever set (a bucket
    /// never goes back to unversioned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<String>,
    /// Anyone may read the bucket's objects and list it (canned ACL
    /// `public-read`), signed or not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public_read: bool,
}

impl BucketRecord {
    /// Whether versioning was ever set on the bucket.
    #[must_use]
    pub fn versioned(&self) -> bool {
        self.versioning.is_some()
    }

    /// Whether new writes make new versions (else the `null` version).
    #[must_use]
    pub fn versioning_enabled(&self) -> bool {
        self.versioning.as_deref() == Some(VERSIONING_ENABLED)
    }
}

pub const VERSIONING_ENABLED: &str = "Enabled";
pub const VERSIONING_SUSPENDED: &str = "Suspended";

/// A bucket index entry: what a listing shows of an object. The entry of
/// a key (its latest version) and of each of its older versions (see
/// [`version_key`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub size: u64,
    pub etag: String,
    pub mtime_ms: u64,
    /// The version's id (`None`: the `null` version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// The version is a delete marker (a listing of keys skips it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
    /// The version's place in the key's history ([`ObjectMeta::seq`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// An older version's archived head object (`None`: the key's head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl IndexEntry {
    /// The version id S3 shows (`null` for the null version).
    #[must_use]
    pub fn shown_version(&self) -> String {
        self.version_id
            .clone()
            .unwrap_or_else(|| NULL_VERSION.into())
    }
}

/// The version id of the version written while versioning was off or
/// suspended.
pub const NULL_VERSION: &str = "null";

/// An object's metadata, kept on its head.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub size: u64,
    /// The hex MD5 of the bytes (S3's ETag of a single PUT), unquoted.
    pub etag: String,
    pub mtime_ms: u64,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// `Expires` as the client sent it (RFC 7231 date), kept verbatim.
    pub expires: Option<String>,
    /// `x-amz-meta-*`, without the prefix.
    pub user: BTreeMap<String, String>,
    /// Checksums the client sent and the gateway verified, by algorithm
    /// (`CRC32`, `CRC32C`, `CRC64NVME`, `SHA1`, `SHA256`), base64 as S3
    /// returns them.
    pub checksums: BTreeMap<String, String>,
    /// The object's tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// `COMPOSITE` if the checksums are of a multipart upload's parts'
    /// checksums (`…-N`); else they are of the whole object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    /// The object's bytes are in tail objects, listed by the head's
    /// bytes (its manifest: [`PartRef`]s as JSON), not in the head.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifest: bool,
    /// The tail objects holding the bytes, in order (read from the
    /// manifest). Empty for an object stored whole in its head.
    #[serde(skip)]
    pub parts: Vec<PartRef>,
    /// The version's id in a versioned bucket (`None`: the `null`
    /// version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// The version's number in the key's history: one more than the
    /// version it replaced on the head (so older versions sort by it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// The version is a delete marker: no bytes, and reads say the key
    /// does not exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
}

/// A run of an object's bytes in tail objects: a multipart object's part,
/// or a large PUT's body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// The one tail object (`piece_bytes` 0), or the prefix of the pieces.
    pub object: String,
    pub size: u64,
    /// The bytes are in pieces `OBJECT/00000`, `OBJECT/00001`, … of this
    /// many bytes each (the last shorter); 0: in the one object `OBJECT`.
    #[serde(default)]
    pub piece_bytes: u64,
}

impl PartRef {
    /// The name of piece `n` of the run with prefix `prefix`.
    #[must_use]
    pub fn piece_name(prefix: &str, n: u64) -> String {
        format!("{prefix}/{n:05}")
    }

    /// Whether the run expands into at most [`RUN_PIECES_MAX`] pieces (a
    /// run read from the cluster is checked before it is expanded).
    #[must_use]
    pub fn bounded(&self) -> bool {
        self.piece_bytes == 0 || self.size.div_ceil(self.piece_bytes) <= RUN_PIECES_MAX
    }

    /// The tail objects holding these bytes, with their sizes, in order.
    #[must_use]
    pub fn pieces(&self) -> Vec<(String, u64)> {
        if self.piece_bytes == 0 {
            return vec![(self.object.clone(), self.size)];
        }
        let count = self.size.div_ceil(self.piece_bytes);
        (0..count)
            .map(|n| {
                let start = n * self.piece_bytes;
                let size = self.piece_bytes.min(self.size - start);
                (Self::piece_name(&self.object, n), size)
            })
            .collect()
    }
}

/// A multipart upload in progress: the object's metadata to be, as
/// `CreateMultipartUpload` gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub key: String,
    pub upload_id: String,
    pub initiated_ms: u64,
    pub meta: ObjectMeta,
    /// The checksum every part carries and the object gets (`CRC32`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<String>,
    /// `COMPOSITE` or `FULL_OBJECT` (with an algorithm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
}

/// An uploaded part: its size, ETag, verified checksums, and where its
/// bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub size: u64,
    pub etag: String,
    pub mtime_ms: u64,
    pub checksums: BTreeMap<String, String>,
    pub data: PartRef,
}

/// The object listing a bucket's uploads in progress (omap
/// `KEY \0 UPLOAD_ID` → [`UploadRecord`]).
#[must_use]
pub fn uploads_object(bucket_id: &str) -> Vec<u8> {
    format!("uploads.{bucket_id}").into_bytes()
}

/// The object listing an upload's parts (omap `NNNNN` → [`PartRecord`]).
#[must_use]
pub fn parts_object(upload_id: &str) -> Vec<u8> {
    format!("parts.{upload_id}").into_bytes()
}

/// The prefix of the pieces of one upload of part `number` (each upload
/// of a part number gets its own, so a part uploaded again never
/// overwrites the bytes a record points at).
#[must_use]
pub fn part_tail(bucket_id: &str, upload_id: &str, number: i32) -> String {
    format!("{bucket_id}.mp/{upload_id}/{number:05}-{}", random_hex(4))
}

/// The prefix of the pieces of a large PUT's (or copy's) body.
#[must_use]
pub fn put_tail(bucket_id: &str) -> String {
    format!("{bucket_id}.t/{}", random_hex(8))
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("record {what} is not valid: {why}")]
    Corrupt { what: String, why: String },
}

pub fn encode<T: Serialize>(record: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(record).unwrap_or_default())
}

/// Decodes record `what`.
///
/// # Errors
/// [`MetaError::Corrupt`] if it is not one.
pub fn decode<T: for<'de> Deserialize<'de>>(what: &str, bytes: &[u8]) -> Result<T, MetaError> {
    serde_json::from_slice(bytes).map_err(|e| MetaError::Corrupt {
        what: what.to_owned(),
        why: e.to_string(),
    })
}

/// The most pieces one run of a manifest may have (a 5 GiB body is
/// 1,280 pieces of 4 MiB): a run claiming more is damage, not data.
pub const RUN_PIECES_MAX: u64 = 1 << 16;

/// The runs of an object's manifest (the head's bytes), checked against
/// the head's size: their sizes add up to it, and no run expands into
/// more than [`RUN_PIECES_MAX`] pieces, so damaged bytes cannot make a
/// read build an endless list.
///
/// # Errors
/// [`MetaError::Corrupt`] if they do not.
pub fn decode_manifest(key: &str, bytes: &[u8], size: u64) -> Result<Vec<PartRef>, MetaError> {
    let what = format!("manifest of {key}");
    let runs: Vec<PartRef> = decode(&what, bytes)?;
    let corrupt = |why: String| MetaError::Corrupt {
        what: what.clone(),
        why,
    };
    let mut total = 0u64;
    for run in &runs {
        if !run.bounded() {
            return Err(corrupt(format!(
                "run {} of {} bytes in pieces of {}",
                run.object, run.size, run.piece_bytes
            )));
        }
        total = total
            .checked_add(run.size)
            .ok_or_else(|| corrupt("run sizes overflow".into()))?;
    }
    if total != size {
        return Err(corrupt(format!(
            "runs of {total} bytes for an object of {size}"
        )));
    }
    Ok(runs)
}

/// The head object of `key` in bucket `id`.
#[must_use]
pub fn head_name(bucket_id: &str, key: &str) -> Vec<u8> {
    format!("{bucket_id}/{key}").into_bytes()
}

/// The first bytes of an older version's index entry: `0xFE v/ KEY 0x00
/// SEQ`, after every key (S3 keys are UTF-8, which has no 0xFE) and
/// before the intents (0xFF), in the key's shard.
pub const VERSION_PREFIX: &[u8] = b"\xfev/";

/// The index key of the older version `seq` of `key`: a key's versions
/// sort together, newest first.
#[must_use]
pub fn version_key(key: &str, seq: u64) -> Bytes {
    let mut out = version_key_prefix(key);
    out.extend_from_slice(format!("{:016x}", u64::MAX - seq).as_bytes());
    Bytes::from(out)
}

/// The bytes every version key of `key` starts with.
#[must_use]
pub fn version_key_prefix(key: &str) -> Vec<u8> {
    let mut out = VERSION_PREFIX.to_vec();
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out
}

/// The key and seq of a version key (`None`: not one).
#[must_use]
pub fn parse_version_key(bytes: &[u8]) -> Option<(String, u64)> {
    let rest = bytes.strip_prefix(VERSION_PREFIX)?;
    let split = rest.len().checked_sub(17)?;
    let (key, tail) = rest.split_at(split);
    let inverted = std::str::from_utf8(tail.strip_prefix(b"\0")?).ok()?;
    let inverted = u64::from_str_radix(inverted, 16).ok()?;
    Some((String::from_utf8(key.to_vec()).ok()?, u64::MAX - inverted))
}

/// A fresh name for an older version's archived head.
#[must_use]
pub fn archive_name(bucket_id: &str) -> String {
    format!("{bucket_id}.v/{}", random_hex(12))
}

/// A fresh version id.
#[must_use]
pub fn new_version_id() -> String {
    random_hex(16)
}

/// The index shard holding `key` of bucket `id`.
#[must_use]
pub fn index_object(bucket_id: &str, key: &str) -> Vec<u8> {
    let shard = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % u64::from(INDEX_SHARDS);
    index_shard(bucket_id, u32::try_from(shard).unwrap_or(0))
}

#[must_use]
pub fn index_shard(bucket_id: &str, shard: u32) -> Vec<u8> {
    format!("index.{bucket_id}.{shard}").into_bytes()
}

/// Reads one omap value of a record object (`None`: absent, or the object
/// does not exist yet).
///
/// # Errors
/// The cluster's error.
pub async fn omap_value(
    client: &Client,
    object: &[u8],
    key: &[u8],
) -> Result<Option<Bytes>, MetaError> {
    match client
        .omap_get(META_POOL, object, &[Bytes::copy_from_slice(key)])
        .await
    {
        Ok(mut found) => Ok(found.remove(key)),
        Err(ClientError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every omap entry of a record object, in key order, read a page at a
/// time (none if the object does not exist yet).
///
/// # Errors
/// The cluster's error.
pub async fn omap_all(client: &Client, object: &[u8]) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
    omap_prefix(client, object, &[]).await
}

/// The omap entries of a record object whose keys start with `prefix`,
/// in key order, read a page at a time from just below the prefix.
///
/// # Errors
/// The cluster's error.
pub async fn omap_prefix(
    client: &Client,
    object: &[u8],
    prefix: &[u8],
) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
    let mut out = Vec::new();
    let mut after: Option<Bytes> =
        (!prefix.is_empty()).then(|| Bytes::from(crate::gateway::below(prefix)));
    loop {
        let page = match client
            .omap_range(META_POOL, object, after.as_deref(), 1000)
            .await
        {
            Ok(page) => page,
            Err(ClientError::NotFound) => return Ok(out),
            Err(e) => return Err(e),
        };
        let Some((last, _)) = page.last() else {
            return Ok(out);
        };
        after = Some(last.clone());
        for (key, value) in page {
            if key.as_ref() < prefix {
                continue;
            }
            if !key.starts_with(prefix) {
                return Ok(out);
            }
            out.push((key, value));
        }
    }
}

/// Sets `key` of a record object to `value` only if it is absent now (the
/// object is made if missing): `false` if another got there first.
///
/// # Errors
/// The cluster's error.
pub async fn omap_create(
    client: &Client,
    object: &[u8],
    key: &[u8],
    value: &[u8],
) -> Result<bool, MetaError> {
    let op = WriteOp::new()
        .create(false)
        .guard(Guard::OmapKey {
            key: Bytes::copy_from_slice(key),
            value: None,
        })
        .omap_set([(key, value)]);
    match client.operate(META_POOL, object, op).await {
        Ok(_) => Ok(true),
        Err(ClientError::CompareFailed { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Unix time now, in milliseconds.
#[must_use]
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh random identifier of `bytes` bytes, in hex (bucket ids,
/// access keys and secrets), from the OS's random source.
#[must_use]
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf));
    if filled.is_err() {
        // No /dev/urandom: time and a counter still make distinct ids.
        let seed = now_ms() ^ u64::from(std::process::id()).rotate_left(32);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (xxhash_rust::xxh3::xxh3_64_with_seed(&(i as u64).to_le_bytes(), seed) & 0xff)
                as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A user and one access key, made: `(access key, secret)`.
///
/// # Errors
/// The user exists, or the cluster's error.
pub async fn create_user(client: &Client, name: &str) -> Result<(String, String), MetaError> {
    let access = random_hex(10).to_uppercase();
    let secret = random_hex(20);
    let user = UserRecord {
        name: name.to_owned(),
        created_secs: now_ms() / 1000,
        access_keys: vec![access.clone()],
    };
    let key = KeyRecord {
        user: name.to_owned(),
        secret: secret.clone(),
    };
    let user_key = format!("user/{name}");
    let access_key = format!("key/{access}");
    let op = WriteOp::new()
        .create(false)
        .guard(Guard::OmapKey {
            key: Bytes::from(user_key.clone()),
            value: None,
        })
        .omap_set([
            (user_key.as_bytes(), &encode(&user)[..]),
            (access_key.as_bytes(), &encode(&key)[..]),
        ]);
    match client.operate(META_POOL, USERS_OBJECT, op).await {
        Ok(_) => Ok((access, secret)),
        Err(ClientError::CompareFailed { .. }) => Err(MetaError::Corrupt {
            what: format!("user {name}"),
            why: "exists already".into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Every user.
///
/// # Errors
/// The cluster's error, or a record that does not decode.
pub async fn list_users(client: &Client) -> Result<Vec<UserRecord>, MetaError> {
    let mut users = Vec::new();
    let mut after: Option<Bytes> = Some(Bytes::from_static(b"user/"));
    loop {
        let page = match client
            .omap_range(META_POOL, USERS_OBJECT, after.as_deref(), 1000)
            .await
        {
            Ok(page) => page,
            Err(ClientError::NotFound) => return Ok(users),
            Err(e) => return Err(e.into()),
        };
        let Some((last, _)) = page.last() else {
            return Ok(users);
        };
        after = Some(last.clone());
        for (k, v) in &page {
            if !k.starts_with(b"user/") {
                return Ok(users);
            }
            users.push(decode(&String::from_utf8_lossy(k), v)?);
        }
    }
}

/// Removes a user and its keys.
///
/// # Errors
/// No such user, or the cluster's error.
pub async fn remove_user(client: &Client, name: &str) -> Result<(), MetaError> {
    let user_key = format!("user/{name}");
    let Some(value) = omap_value(client, USERS_OBJECT, user_key.as_bytes()).await? else {
        return Err(MetaError::Corrupt {
            what: format!("user {name}"),
            why: "no such user".into(),
        });
    };
    let user: UserRecord = decode(&user_key, &value)?;
    let mut keys: Vec<Bytes> = vec![Bytes::from(user_key)];
    keys.extend(
        user.access_keys
            .iter()
            .map(|k| Bytes::from(format!("key/{k}"))),
    );
    client.omap_remove(META_POOL, USERS_OBJECT, &keys).await?;
    Ok(())
}

/// A user's record.
///
/// # Errors
/// The cluster's error, or a record that does not decode.
pub async fn user_info(client: &Client, name: &str) -> Result<Option<UserRecord>, MetaError> {
    let key = format!("user/{name}");
    match omap_value(client, USERS_OBJECT, key.as_bytes()).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

fn no_such_user(name: &str) -> MetaError {
    MetaError::Corrupt {
        what: format!("user {name}"),
        why: "no such user".into(),
    }
}

/// Gives user `name` another access key: `(access key, secret)`.
///
/// # Errors
/// No such user, the user changed meanwhile, or the cluster's error.
pub async fn add_key(client: &Client, name: &str) -> Result<(String, String), MetaError> {
    let user_key = format!("user/{name}");
    let Some(raw) = omap_value(client, USERS_OBJECT, user_key.as_bytes()).await? else {
        return Err(no_such_user(name));
    };
    let mut user: UserRecord = decode(&user_key, &raw)?;
    let access = random_hex(10).to_uppercase();
    let secret = random_hex(20);
    user.access_keys.push(access.clone());
    let record = KeyRecord {
        user: name.to_owned(),
        secret: secret.clone(),
    };
    let access_key = format!("key/{access}");
    let op = WriteOp::new()
        .guard(Guard::OmapKey {
            key: Bytes::from(user_key.clone()),
            value: Some(raw),
        })
        .omap_set([
            (user_key.as_bytes(), &encode(&user)[..]),
            (access_key.as_bytes(), &encode(&record)[..]),
        ]);
    match client.operate(META_POOL, USERS_OBJECT, op).await {
        Ok(_) => Ok((access, secret)),
        Err(ClientError::CompareFailed { .. }) => Err(MetaError::Corrupt {
            what: format!("user {name}"),
            why: "changed meanwhile; try again".into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Removes an access key (its user keeps the others).
///
/// # Errors
/// No such key, the user changed meanwhile, or the cluster's error.
pub async fn remove_key(client: &Client, access: &str) -> Result<String, MetaError> {
    let Some(key) = key_record(client, access).await? else {
        return Err(MetaError::Corrupt {
            what: format!("access key {access}"),
            why: "no such key".into(),
        });
    };
    let user_key = format!("user/{}", key.user);
    let access_key = format!("key/{access}");
    let Some(raw) = omap_value(client, USERS_OBJECT, user_key.as_bytes()).await? else {
        // A key whose user is gone: just the key.
        client
            .omap_remove(META_POOL, USERS_OBJECT, &[Bytes::from(access_key)])
            .await?;
        return Ok(key.user);
    };
    let mut user: UserRecord = decode(&user_key, &raw)?;
    user.access_keys.retain(|k| k != access);
    let op = WriteOp::new()
        .guard(Guard::OmapKey {
            key: Bytes::from(user_key.clone()),
            value: Some(raw),
        })
        .omap_set([(user_key.as_bytes(), &encode(&user)[..])])
        .omap_remove([access_key.as_bytes()]);
    match client.operate(META_POOL, USERS_OBJECT, op).await {
        Ok(_) => Ok(key.user),
        Err(ClientError::CompareFailed { .. }) => Err(MetaError::Corrupt {
            what: format!("user {}", key.user),
            why: "changed meanwhile; try again".into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The secret and user of an access key.
///
/// # Errors
/// The cluster's error.
pub async fn key_record(client: &Client, access: &str) -> Result<Option<KeyRecord>, MetaError> {
    let key = format!("key/{access}");
    match omap_value(client, USERS_OBJECT, key.as_bytes()).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_pieces_names_and_sizes_each() {
        let run = PartRef {
            object: "b.t/ab".into(),
            size: 10,
            piece_bytes: 4,
        };
        assert_eq!(
            run.pieces(),
            vec![
                ("b.t/ab/00000".to_owned(), 4),
                ("b.t/ab/00001".to_owned(), 4),
                ("b.t/ab/00002".to_owned(), 2)
            ]
        );
        let exact = PartRef {
            size: 8,
            ..run.clone()
        };
        assert_eq!(exact.pieces().len(), 2);
        let empty = PartRef {
            size: 0,
            ..run.clone()
        };
        assert!(empty.pieces().is_empty());
        let single = PartRef {
            object: "one".into(),
            size: 3,
            piece_bytes: 0,
        };
        assert_eq!(single.pieces(), vec![("one".to_owned(), 3)]);
        // The head's metadata never carries the parts: the manifest does.
        let meta = ObjectMeta {
            manifest: true,
            parts: vec![single],
            ..ObjectMeta::default()
        };
        let back: ObjectMeta = decode("head", &encode(&meta)).expect("decodes");
        assert!(back.manifest && back.parts.is_empty());
        // A manifest must add up to its head's size and stay bounded.
        let manifest = encode(&vec![run.clone()]);
        assert_eq!(
            decode_manifest("k", &manifest, 10).expect("valid"),
            vec![run.clone()]
        );
        assert!(decode_manifest("k", &manifest, 11).is_err());
        let endless = PartRef {
            piece_bytes: 1,
            size: 1 << 40,
            ..run
        };
        assert!(decode_manifest("k", &encode(&vec![endless]), 1 << 40).is_err());
        let overflow = vec![
            PartRef {
                size: u64::MAX,
                piece_bytes: 0,
                object: "a".into(),
            },
            PartRef {
                size: 2,
                piece_bytes: 0,
                object: "b".into(),
            },
        ];
        assert!(decode_manifest("k", &encode(&overflow), 1).is_err());
        assert!(decode_manifest("k", b"not json", 1).is_err());
    }
}

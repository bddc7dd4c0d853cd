//! The S3 operations over the cluster (the `s3s::S3` trait): buckets,
//! objects kept whole in their head, and listings merged from the bucket's
//! index shards.

use crate::auth::Keys;
use crate::body::{Budget, Given, Received, Stored, Tail};
use crate::index::IndexWriter;
use crate::intent::{Pending, entry_of};
use crate::meta::{
    self, BUCKETS_OBJECT, BucketRecord, HEAD_XATTR, INDEX_SHARDS, IndexEntry, META_POOL, MetaError,
    ObjectMeta,
};
use crate::multipart::HEAD_STREAM_BYTES;
use crate::versioning::{delete_marker_error, shown_version};
use bytes::{Bytes, BytesMut};
use cairn_client::{Client, ClientError, Guard, ReadOp, ReadResult, WriteOp};
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, Bucket, CommonPrefix,
    CompleteMultipartUploadInput, CompleteMultipartUploadOutput, CopyObjectInput, CopyObjectOutput,
    CopyObjectResult, CopyPartResult, CopySource, CreateBucketInput, CreateBucketOutput,
    CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteBucketInput, DeleteBucketOutput,
    DeleteBucketTaggingInput, DeleteBucketTaggingOutput, DeleteObjectInput, DeleteObjectOutput,
    DeleteObjectTaggingInput, DeleteObjectTaggingOutput, DeleteObjectsInput, DeleteObjectsOutput,
    DeletedObject, ETag, ETagCondition, GetBucketLocationInput, GetBucketLocationOutput,
    GetBucketTaggingInput, GetBucketTaggingOutput, GetObjectInput, GetObjectOutput,
    GetObjectTaggingInput, GetObjectTaggingOutput, HeadBucketInput, HeadBucketOutput,
    HeadObjectInput, HeadObjectOutput, ListBucketsInput, ListBucketsOutput,
    ListMultipartUploadsInput, ListMultipartUploadsOutput, ListObjectsInput, ListObjectsOutput,
    ListObjectsV2Input, ListObjectsV2Output, ListPartsInput, ListPartsOutput, MultipartUpload,
    Object, Owner, Part, PutBucketTaggingInput, PutBucketTaggingOutput, PutObjectInput,
    PutObjectOutput, PutObjectTaggingInput, PutObjectTaggingOutput, StreamingBlob, Timestamp,
    UploadPartCopyInput, UploadPartCopyOutput, UploadPartInput, UploadPartOutput,
};
use s3s::dto::{
    BucketCannedACL, ChecksumType, GetBucketAclInput, GetBucketAclOutput, GetObjectAclInput,
    GetObjectAclOutput, Grant, Grantee, ObjectCannedACL, Permission, PutBucketAclInput,
    PutBucketAclOutput,
};
use s3s::dto::{
    BucketVersioningStatus, DeleteMarkerEntry, GetBucketVersioningInput, GetBucketVersioningOutput,
    ListObjectVersionsInput, ListObjectVersionsOutput, ObjectVersion, PutBucketVersioningInput,
    PutBucketVersioningOutput,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

/// The largest body kept whole in an object's head; larger ones go to
/// tail objects in pieces.
pub const INLINE_BYTES_MAX: u64 = crate::body::PIECE_BYTES;
/// The largest body kept whole in a head in a versioned bucket: an
/// overwrite copies the head to an archive, so larger bodies go to tail
/// objects, whose manifest is all the copy carries.
pub const VERSIONED_INLINE_BYTES_MAX: u64 = 64 << 10;

/// The largest body kept whole in `bucket`'s heads.
/// Whether `store` failing with `error` wrote no head for sure: refused by
/// a condition, or beaten by other writers on every try (`SlowDown`, which
/// clients retry). Then the pieces written for it are nobody's and go at
/// once, not only when the operation's intent is recovered. After any
/// other failure the head may stand; the intent's recovery decides.
fn never_stored(error: &S3Error) -> bool {
    matches!(
        error.code(),
        S3ErrorCode::PreconditionFailed | S3ErrorCode::SlowDown
    )
}

fn inline_max(bucket: &BucketRecord) -> u64 {
    if bucket.versioned() {
        VERSIONED_INLINE_BYTES_MAX
    } else {
        INLINE_BYTES_MAX
    }
}
/// The most bucket records a gateway keeps (past it, those too old go).
const BUCKET_CACHE_MAX: usize = 4096;

/// `bucket`, if `user` owns it.
fn owned(bucket: BucketRecord, user: &str) -> S3Result<BucketRecord> {
    if bucket.owner != user {
        return Err(s3_error!(
            AccessDenied,
            "the bucket belongs to another user"
        ));
    }
    Ok(bucket)
}
/// S3's longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;
/// S3's most keys in one DeleteObjects.
pub const DELETE_OBJECTS_MAX: usize = 1000;
/// Index entries read from a shard at a time while listing.
const LIST_PAGE: u32 = 1000;

/// The gateway: stateless, every answer read from the cluster.
#[derive(Debug, Clone)]
pub struct Gateway {
    client: Client,
    keys: Keys,
    default_pool: String,
    budget: Budget,
    index: IndexWriter,
    /// This gateway's id (its intents and heartbeats name it).
    id: String,
    /// Bucket records read, with when: see [`BUCKET_CACHE_TTL`].
    buckets: Arc<Mutex<HashMap<String, (BucketRecord, Instant)>>>,
    /// The share of this gateway's recent unconditional writes that
    /// replaced a key, in 1/[`SHARE_ONE`]s: a moving average over about
    /// [`SHARE_WINDOW`] writes.
    replacing_share: Arc<AtomicU32>,
}

/// [`Gateway::replacing_share`]'s unit, and the writes it averages over.
const SHARE_ONE: u32 = 1 << 16;
const SHARE_WINDOW: u32 = 64;
/// Below this share of writes replacing keys, a write tries a create
/// first. Measured on 3 OSDs, 64 writers of 4 KiB: creates first made new
/// keys 1.15x faster (one read fewer) and replacements 1.6x slower (a
/// failed create more).
const CREATE_FIRST_SHARE_MAX: u32 = SHARE_ONE / 10;

/// How long a bucket's record read from the cluster is used for requests
/// before it is read again. A change made through a gateway (versioning,
/// ACL, tags, deletion) is seen by that gateway at once and by other
/// gateways within this, as AWS too propagates a bucket's configuration
/// after a delay; operations that change a bucket, and a write that finds
/// its object changed, always read it afresh.
pub const BUCKET_CACHE_TTL: Duration = Duration::from_secs(2);

impl Gateway {
    #[must_use]
    pub fn new(client: Client, keys: Keys, default_pool: String) -> Gateway {
        Gateway {
            index: IndexWriter::new(client.clone()),
            client,
            keys,
            default_pool,
            budget: Budget::new(crate::body::BUFFER_BYTES_MAX),
            id: meta::random_hex(8),
            buckets: Arc::default(),
            replacing_share: Arc::default(),
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// This gateway's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn index_writer(&self) -> &IndexWriter {
        &self.index
    }

    /// A key's head with its parts, if it has one.
    pub(crate) async fn head_of(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Option<ObjectMeta>> {
        Ok(self
            .head(bucket, key, true)
            .await?
            .map(|(object, _)| object))
    }

    /// Reads a request body into `tail` (or whole, up to `inline_max`
    /// bytes) and checks it: see [`crate::body::receive`].
    pub(crate) async fn receive(
        &self,
        body: StreamingBlob,
        given: Given,
        trailers: Option<s3s::TrailingHeaders>,
        tail: Tail,
        inline_max: u64,
    ) -> S3Result<Received> {
        crate::body::receive(
            &self.client,
            &self.budget,
            body,
            given,
            trailers,
            (tail, inline_max),
        )
        .await
    }

    /// The user a signed request comes from.
    fn user<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        let Some(credentials) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        };
        self.keys
            .user_of(&credentials.access_key)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))
    }

    /// A bucket's record, as read within [`BUCKET_CACHE_TTL`].
    async fn bucket(&self, name: &str) -> S3Result<BucketRecord> {
        {
            let cache = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((record, at)) = cache.get(name)
                && at.elapsed() < BUCKET_CACHE_TTL
            {
                return Ok(record.clone());
            }
        }
        self.bucket_now(name).await
    }

    /// A bucket's record as it is now in the cluster.
    pub(crate) async fn bucket_now(&self, name: &str) -> S3Result<BucketRecord> {
        let value = meta::omap_value(&self.client, BUCKETS_OBJECT, name.as_bytes())
            .await
            .map_err(internal)?;
        let mut cache = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        match value {
            Some(value) => {
                let mut record: BucketRecord =
                    meta::decode(&format!("bucket {name}"), &value).map_err(internal)?;
                record.name = name.to_owned();
                if cache.len() >= BUCKET_CACHE_MAX {
                    cache.retain(|_, (_, at)| at.elapsed() < BUCKET_CACHE_TTL);
                }
                cache.insert(name.to_owned(), (record.clone(), Instant::now()));
                Ok(record)
            }
            None => {
                cache.remove(name);
                Err(s3_error!(NoSuchBucket))
            }
        }
    }

    /// Whether this gateway's recent writes mostly made new keys.
    fn mostly_creating(&self) -> bool {
        self.replacing_share.load(Ordering::Relaxed) < CREATE_FIRST_SHARE_MAX
    }

    /// Counts a write in [`Gateway::replacing_share`] (updates racing
    /// each other may lose one: it is an estimate).
    fn note_write(&self, replaced: bool) {
        let old = self.replacing_share.load(Ordering::Relaxed);
        let new = old - old / SHARE_WINDOW
            + if replaced {
                SHARE_ONE / SHARE_WINDOW
            } else {
                0
            };
        self.replacing_share.store(new, Ordering::Relaxed);
    }

    /// Forgets what this gateway read of a bucket it has just changed.
    pub(crate) fn bucket_changed(&self, name: &str) {
        let mut cache = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(name);
    }

    /// The bucket, if the request may read it: signed by its owner, or
    /// by anyone (or no one) when it is public-read.
    pub(crate) async fn read_bucket(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
        name: &str,
    ) -> S3Result<BucketRecord> {
        let bucket = self.bucket(name).await?;
        if bucket.public_read {
            return Ok(bucket);
        }
        let Some(credentials) = credentials else {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        };
        let user = self
            .keys
            .user_of(&credentials.access_key)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))?;
        if bucket.owner != user {
            return Err(s3_error!(
                AccessDenied,
                "the bucket belongs to another user"
            ));
        }
        Ok(bucket)
    }

    /// The bucket, if `user` owns it.
    pub(crate) async fn owned_bucket(&self, name: &str, user: &str) -> S3Result<BucketRecord> {
        owned(self.bucket(name).await?, user)
    }

    /// [`Gateway::owned_bucket`] as it is now in the cluster (to change it).
    pub(crate) async fn owned_bucket_now(&self, name: &str, user: &str) -> S3Result<BucketRecord> {
        owned(self.bucket_now(name).await?, user)
    }

    /// An object's metadata (with its parts if `parts`) and the raw
    /// metadata as stored (for guards).
    pub(crate) async fn head(
        &self,
        bucket: &BucketRecord,
        key: &str,
        parts: bool,
    ) -> S3Result<Option<(ObjectMeta, Bytes)>> {
        self.head_in(bucket, key, &meta::head_name(&bucket.id, key), parts)
            .await
    }

    /// [`Gateway::head`] of the version held by object `name` (the key's
    /// head, or an older version's archive).
    pub(crate) async fn head_in(
        &self,
        bucket: &BucketRecord,
        key: &str,
        name: &[u8],
        parts: bool,
    ) -> S3Result<Option<(ObjectMeta, Bytes)>> {
        for _ in 0..8 {
            let op = ReadOp::new().xattr(HEAD_XATTR);
            let (mut object_meta, raw) =
                match self.client.operate_read(&bucket.pool, name, op).await {
                    Ok(results) => match results.into_iter().next() {
                        Some(ReadResult::Value(Some(raw))) => {
                            let object_meta: ObjectMeta =
                                meta::decode(&format!("head of {key}"), &raw).map_err(internal)?;
                            (object_meta, raw)
                        }
                        _ => return Ok(None),
                    },
                    Err(ClientError::NotFound) => return Ok(None),
                    Err(e) => return Err(client_error(e)),
                };
            if !(parts && object_meta.manifest) {
                return Ok(Some((object_meta, raw)));
            }
            // The manifest of this same version (read again if replaced).
            let Some(manifest) = self
                .read_as_of(bucket, name, raw.clone(), (0, None))
                .await?
            else {
                continue;
            };
            object_meta.parts =
                meta::decode_manifest(key, &manifest, object_meta.size).map_err(internal)?;
            return Ok(Some((object_meta, raw)));
        }
        Err(s3_error!(SlowDown, "the object changed under every read"))
    }

    /// An object's metadata (without its parts) and the raw metadata.
    pub(crate) async fn head_raw(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Option<(ObjectMeta, Bytes)>> {
        self.head(bucket, key, false).await
    }

    /// The version object `name` holds (the key's head, or an archive) in
    /// one read: its metadata (with its parts, from the manifest), the raw
    /// metadata (for guards), and its bytes as stored (an object's bytes,
    /// or a large object's manifest) or, with `first`, at most that many of
    /// an object's bytes (a manifest always whole).
    pub(crate) async fn stored_version(
        &self,
        bucket: &BucketRecord,
        key: &str,
        name: &[u8],
        first: Option<u64>,
    ) -> S3Result<Option<(ObjectMeta, Bytes, Bytes)>> {
        for _ in 0..8 {
            let op = ReadOp::new().xattr(HEAD_XATTR).read(0, first);
            let results = match self.client.operate_read(&bucket.pool, name, op).await {
                Ok(results) => results,
                Err(ClientError::NotFound) => return Ok(None),
                Err(e) => return Err(client_error(e)),
            };
            let mut results = results.into_iter();
            let (Some(ReadResult::Value(Some(raw))), Some(ReadResult::Data(mut data))) =
                (results.next(), results.next())
            else {
                return Ok(None);
            };
            let mut object_meta: ObjectMeta =
                meta::decode(&format!("head of {key}"), &raw).map_err(internal)?;
            if object_meta.manifest {
                if first.is_some_and(|first| data.len() as u64 >= first) {
                    // The rest of this same manifest (read again if replaced).
                    let Some(rest) = self
                        .read_as_of(bucket, name, raw.clone(), (data.len() as u64, None))
                        .await?
                    else {
                        continue;
                    };
                    let mut whole = BytesMut::from(&data[..]);
                    whole.extend_from_slice(&rest);
                    data = whole.freeze();
                }
                object_meta.parts =
                    meta::decode_manifest(key, &data, object_meta.size).map_err(internal)?;
            }
            return Ok(Some((object_meta, raw, data)));
        }
        Err(s3_error!(SlowDown, "the object changed under every read"))
    }

    /// Writes an object's bytes and metadata as one compound operation on
    /// its head (guarded by `If-None-Match: *` or `If-Match`), then its
    /// index entry. Answers the metadata stored (in a versioned bucket,
    /// with its version id).
    pub(crate) async fn store(
        &self,
        bucket: &BucketRecord,
        key: &str,
        data: Bytes,
        object_meta: &ObjectMeta,
        (if_none_match, if_match): (Option<&ETagCondition>, Option<&ETagCondition>),
        mut pending: Pending,
    ) -> S3Result<ObjectMeta> {
        if bucket.versioned() {
            return self
                .store_versioned(
                    bucket,
                    key,
                    data,
                    object_meta,
                    (if_none_match, if_match),
                    pending,
                )
                .await;
        }
        let head = meta::head_name(&bucket.id, key);
        let conditional = if_none_match.is_some() || if_match.is_some();
        let (data, stored) = Self::head_contents(data, object_meta);
        // While this gateway's writes mostly make new keys, an
        // unconditional write is first tried as a create, which reads
        // nothing (a key that exists fails it, and is then read and written
        // over). While they mostly replace keys, the head is read first.
        let mut as_create = !conditional && pending.head.is_none() && self.mostly_creating();
        let mut existed = false;
        for _ in 0..8 {
            let mut op = WriteOp::new();
            // The version replaced: its parts (a multipart object's) go once
            // the new one stands. The write is guarded on the version read:
            // conditional writes are atomic on the head (create-only, or
            // only over the version the client named), and no version a
            // versioned write made meanwhile (versioning just enabled) is
            // replaced unseen.
            let current =
                if as_create || if_none_match.is_some_and(|c| matches!(c, ETagCondition::Any)) {
                    op = op.guard(Guard::NotExists);
                    None
                } else {
                    let current = match pending.head.take() {
                        Some(read) => read,
                        None => self.head(bucket, key, true).await?,
                    };
                    // A version made by a versioned write: versioning was
                    // turned on through another gateway since this one
                    // read the bucket. This write makes a version too.
                    if current
                        .as_ref()
                        .is_some_and(|(old, _)| old.version_id.is_some())
                    {
                        let now = self.bucket_now(&bucket.name).await?;
                        if now.id == bucket.id && now.versioned() {
                            let conditions = (if_none_match, if_match);
                            return self
                                .store_versioned(&now, key, data, object_meta, conditions, pending)
                                .await;
                        }
                    }
                    if let Some(condition) = if_match {
                        let Some((old, _)) = &current else {
                            return Err(s3_error!(PreconditionFailed));
                        };
                        if !etag_matches(condition, &old.etag) {
                            return Err(s3_error!(PreconditionFailed));
                        }
                    }
                    op = match &current {
                        Some((_, raw)) => op.guard(Guard::Xattr {
                            name: Bytes::from_static(HEAD_XATTR),
                            value: Some(raw.clone()),
                        }),
                        None => op.guard(Guard::NotExists),
                    };
                    current
                };
            if let Some((old, _)) = &current {
                self.replacing(&mut pending, &old.parts).await?;
            }
            let op = op
                .write_full(data.clone())
                .set_xattr(HEAD_XATTR, &meta::encode(&stored));
            match self.client.operate(&bucket.pool, &head, op).await {
                Ok(_) => {}
                Err(ClientError::CompareFailed { .. }) if conditional => {
                    return Err(s3_error!(PreconditionFailed));
                }
                Err(ClientError::CompareFailed { .. }) if as_create => {
                    // The key exists: read it, and write over what was read.
                    as_create = false;
                    existed = true;
                    continue;
                }
                Err(ClientError::CompareFailed { .. }) => {
                    // Another write came first. If versioning was turned
                    // on meanwhile, this one makes a version too.
                    let now = self.bucket_now(&bucket.name).await?;
                    if now.id == bucket.id && now.versioned() {
                        return self
                            .store_versioned(&now, key, data, object_meta, (None, None), pending)
                            .await;
                    }
                    continue;
                }
                Err(e) => return Err(client_error(e)),
            }
            if !conditional {
                self.note_write(existed || current.is_some());
            }
            if let Some((old, _)) = current {
                self.remove_parts(bucket, &old.parts, &stored).await;
            }
            self.finish(pending, Some(Some(entry_of(&stored)))).await?;
            return Ok(stored);
        }
        Err(s3_error!(SlowDown, "the object changed under every write"))
    }

    /// The bytes of a head (`data`) and its metadata as stored: a large
    /// object's head holds its manifest instead of bytes.
    pub(crate) fn head_contents(data: Bytes, object_meta: &ObjectMeta) -> (Bytes, ObjectMeta) {
        if object_meta.parts.is_empty() {
            (data, object_meta.clone())
        } else {
            let mut with = object_meta.clone();
            with.manifest = true;
            (meta::encode(&object_meta.parts), with)
        }
    }

    /// Removes a replaced or deleted version's part objects (best effort:
    /// what fails is left to the collector), except those the version
    /// now standing uses.
    pub(crate) async fn remove_parts(
        &self,
        bucket: &BucketRecord,
        parts: &[meta::PartRef],
        standing: &ObjectMeta,
    ) {
        for part in parts {
            if standing.parts.iter().any(|p| p.object == part.object) {
                continue;
            }
            for (object, _) in part.pieces() {
                if let Err(error) = self.client.remove(&bucket.pool, object.as_bytes()).await
                    && !matches!(error, ClientError::NotFound)
                {
                    tracing::warn!(%object, %error, "part of a replaced object left behind");
                }
            }
        }
    }

    /// An object's bytes `offset..offset + length` (`None`: to the end) as
    /// of metadata `raw` (`None` if it changed since).
    async fn read_as_of(
        &self,
        bucket: &BucketRecord,
        head: &[u8],
        raw: Bytes,
        (offset, length): (u64, Option<u64>),
    ) -> S3Result<Option<Bytes>> {
        let op = ReadOp::new()
            .guard(Guard::Xattr {
                name: Bytes::from_static(HEAD_XATTR),
                value: Some(raw),
            })
            .read(offset, length);
        match self.client.operate_read(&bucket.pool, head, op).await {
            Ok(results) => match results.into_iter().next() {
                Some(ReadResult::Data(data)) => Ok(Some(data)),
                other => Err(internal(format!("unexpected read result {other:?}"))),
            },
            Err(ClientError::CompareFailed { .. }) => Ok(None),
            Err(ClientError::NotFound) => Err(s3_error!(NoSuchKey)),
            Err(e) => Err(client_error(e)),
        }
    }

    /// A copy's source: its metadata (its conditions checked, as
    /// `PreconditionFailed`) and its bytes as a stream, whole or the
    /// range `bytes=FIRST-LAST` (`range` is `Some` for a part copy, whose
    /// range header is optional).
    async fn open_copy_source(
        &self,
        user: &str,
        copy_source: &CopySource,
        conditions: &CopyConditions<'_>,
        range: Option<Option<&str>>,
    ) -> S3Result<(ObjectMeta, StreamingBlob, Option<String>)> {
        let (source_bucket, source_key, version) = copy_source_names(copy_source)?;
        let source = self.owned_bucket(source_bucket, user).await?;
        for _ in 0..8 {
            let name = self.locate(&source, source_key, version).await?;
            let Some((from, raw)) = self.head_in(&source, source_key, &name, true).await? else {
                return Err(missing(version));
            };
            readable(&source, &from, version)?;
            check_conditions(
                &from,
                conditions.if_match,
                conditions.if_none_match,
                conditions.if_modified_since,
                conditions.if_unmodified_since,
            )
            .map_err(|e| {
                if e.code() == &S3ErrorCode::NotModified {
                    s3_error!(PreconditionFailed)
                } else {
                    e
                }
            })?;
            let (offset, length) = match range.flatten() {
                Some(text) => copy_range(text, from.size)?,
                None => (0, from.size),
            };
            let stream = if from.parts.is_empty() {
                let Some(data) = self
                    .read_as_of(&source, &name, raw, (offset, Some(length)))
                    .await?
                else {
                    continue;
                };
                StreamingBlob::wrap(futures::stream::once(async move {
                    Ok::<Bytes, std::io::Error>(data)
                }))
            } else {
                // Tail objects never change while a version stands.
                crate::multipart::stream_parts(
                    self.client.clone(),
                    self.budget.clone(),
                    source.pool.clone(),
                    &from.parts,
                    offset..offset + length,
                )
            };
            let shown = shown_version(&source, &from);
            return Ok((from, stream, shown));
        }
        Err(s3_error!(
            SlowDown,
            "the source object changed under every read"
        ))
    }

    /// The object holding the version of `key` a request names (none:
    /// the latest, at the key's head).
    pub(crate) async fn locate(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version: Option<&str>,
    ) -> S3Result<Vec<u8>> {
        let Some(version) = version else {
            return Ok(meta::head_name(&bucket.id, key));
        };
        if !bucket.versioned() {
            crate::versioning::parse_version_id(version)?;
            return if version == meta::NULL_VERSION {
                Ok(meta::head_name(&bucket.id, key))
            } else {
                Err(s3_error!(NoSuchVersion))
            };
        }
        Ok(self.find_version(bucket, key, version).await?.object)
    }

    /// A DELETE of `key`: of version `version_id` for good, or (in a
    /// versioned bucket) a new delete marker, or the object.
    async fn delete_key(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version_id: Option<&str>,
        if_match: Option<&ETagCondition>,
    ) -> S3Result<Deleted> {
        check_key(key)?;
        if let Some(version) = version_id
            && (bucket.versioned() || version != meta::NULL_VERSION)
        {
            crate::versioning::parse_version_id(version)?;
            let removed = if bucket.versioned() {
                self.delete_version(bucket, key, version).await?
            } else {
                None
            };
            return Ok(Deleted {
                version_id: Some(version.to_owned()),
                delete_marker: removed.is_some_and(|e| e.delete_marker),
            });
        }
        if bucket.versioned() {
            let marker = ObjectMeta {
                mtime_ms: meta::now_ms(),
                delete_marker: true,
                ..ObjectMeta::default()
            };
            let pending = self.begin(bucket, key, Vec::new(), None).await?;
            let stored = self
                .store_versioned(
                    bucket,
                    key,
                    Bytes::new(),
                    &marker,
                    (None, if_match),
                    pending,
                )
                .await?;
            return Ok(Deleted {
                version_id: crate::versioning::shown_version(bucket, &stored),
                delete_marker: true,
            });
        }
        self.delete_unversioned(bucket, key, if_match).await?;
        Ok(Deleted::default())
    }

    /// Removes an object (guarded by `If-Match`), then its index entry.
    async fn delete_unversioned(
        &self,
        bucket: &BucketRecord,
        key: &str,
        if_match: Option<&ETagCondition>,
    ) -> S3Result<()> {
        let head = meta::head_name(&bucket.id, key);
        let current = self.head(bucket, key, true).await?;
        if let Some(condition) = if_match {
            let Some((old, _)) = &current else {
                return Err(s3_error!(NoSuchKey));
            };
            if !etag_matches(condition, &old.etag) {
                return Err(s3_error!(PreconditionFailed));
            }
        }
        let mut pending = self.begin(bucket, key, Vec::new(), None).await?;
        if let Some((old, raw)) = &current {
            self.replacing(&mut pending, &old.parts).await?;
            // Only the version read: its parts are the ones removed below.
            let op = WriteOp::new()
                .guard(Guard::Xattr {
                    name: Bytes::from_static(HEAD_XATTR),
                    value: Some(raw.clone()),
                })
                .remove();
            match self.client.operate(&bucket.pool, &head, op).await {
                Ok(_) | Err(ClientError::NotFound) => {}
                Err(ClientError::CompareFailed { .. }) => {
                    return Err(if if_match.is_some() {
                        s3_error!(PreconditionFailed)
                    } else {
                        s3_error!(SlowDown, "the object changed while it was deleted")
                    });
                }
                Err(e) => return Err(client_error(e)),
            }
            self.remove_parts(bucket, &old.parts, &ObjectMeta::default())
                .await;
        }
        self.finish(pending, Some(None)).await
    }

    /// The bucket's index entries after `after` and below the lister's
    /// stop in key order, merged from its shards.
    async fn index_after(
        &self,
        bucket: &BucketRecord,
        after: Option<&[u8]>,
        lister: &mut Lister,
    ) -> S3Result<Option<(Bytes, IndexEntry)>> {
        if lister.shards.is_empty() {
            lister.shards = (0..INDEX_SHARDS)
                .map(|_| ShardCursor {
                    buffered: VecDeque::new(),
                    after: after.map(Bytes::copy_from_slice),
                    done: false,
                })
                .collect();
        }
        for (shard, cursor) in lister.shards.iter_mut().enumerate() {
            if cursor.buffered.is_empty() && !cursor.done {
                let object = meta::index_shard(&bucket.id, u32::try_from(shard).unwrap_or(0));
                let page = match self
                    .client
                    .omap_range(META_POOL, &object, cursor.after.as_deref(), LIST_PAGE)
                    .await
                {
                    Ok(page) => page,
                    Err(ClientError::NotFound) => Vec::new(),
                    Err(e) => return Err(client_error(e)),
                };
                cursor.done = page.len() < LIST_PAGE as usize;
                if let Some((last, _)) = page.last() {
                    cursor.after = Some(last.clone());
                }
                // Older versions and intents sort after every key: the
                // shard's keys end there.
                let keys = page
                    .iter()
                    .take_while(|(k, _)| k.as_ref() < lister.stop.as_slice())
                    .count();
                if keys < page.len() {
                    cursor.done = true;
                }
                cursor.buffered.extend(page.into_iter().take(keys));
            }
        }
        let next = lister
            .shards
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.buffered.front().map(|(k, _)| (i, k.clone())))
            .min_by(|a, b| a.1.cmp(&b.1))
            .map(|(i, _)| i);
        let Some(shard) = next else {
            return Ok(None);
        };
        let Some((key, value)) = lister.shards[shard].buffered.pop_front() else {
            return Ok(None);
        };
        let entry = meta::decode(
            &format!("index entry {}", String::from_utf8_lossy(&key)),
            &value,
        )
        .map_err(internal)?;
        Ok(Some((key, entry)))
    }

    /// One page of a listing: objects and common prefixes after `after`
    /// (skipping keys under `skip_prefix`, a common prefix returned on the
    /// page before), at most `max` of them together.
    async fn list_page(
        &self,
        bucket: &BucketRecord,
        query: &ListQuery<'_>,
    ) -> S3Result<ListResult> {
        let prefix = query.prefix;
        // Start at the prefix: the omap range starts after a key just below it.
        let mut start: Option<Vec<u8>> = query.after.map(|a| a.as_bytes().to_vec());
        if !prefix.is_empty() && start.as_deref().is_none_or(|s| s < prefix.as_bytes()) {
            start = Some(below(prefix.as_bytes()));
        }
        let mut lister = Lister::new(KEYS_END);
        let mut result = ListResult::default();
        if query.max == 0 {
            return Ok(result);
        }
        while let Some((key, entry)) = self
            .index_after(bucket, start.as_deref(), &mut lister)
            .await?
        {
            let key = String::from_utf8(key.to_vec()).map_err(|e| internal(e.to_string()))?;
            // A key whose latest version is a delete marker is not listed.
            if entry.delete_marker {
                continue;
            }
            if let Some(skip) = query.skip_prefix
                && key.starts_with(skip)
            {
                continue;
            }
            if query.after.is_some_and(|a| key.as_str() <= a) {
                continue;
            }
            if !key.starts_with(prefix) {
                if key.as_str() > prefix {
                    break;
                }
                continue;
            }
            let rolled = rolled_up(&key, prefix, query.delimiter);
            if rolled.is_some() && result.prefixes.last() == rolled.as_ref() {
                continue;
            }
            if result.count() == query.max {
                result.truncated = true;
                break;
            }
            match rolled {
                Some(common) => {
                    result.last = Some(Marker::Prefix(common.clone()));
                    result.prefixes.push(common);
                }
                None => {
                    result.last = Some(Marker::Key(key.clone()));
                    result.objects.push((key, entry));
                }
            }
        }
        Ok(result)
    }
}

/// The common prefix `key` rolls up into: up to the first `delimiter`
/// after `prefix` (`None`: listed as itself).
fn rolled_up(key: &str, prefix: &str, delimiter: Option<&str>) -> Option<String> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    key[prefix.len()..]
        .find(d)
        .map(|at| key[..prefix.len() + at + d.len()].to_owned())
}

/// The group S3 names everyone by in an ACL.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

/// A canned ACL as public-read or not (`None`: none given). Only
/// `private` and `public-read` are served.
fn canned_public(acl: Option<&str>) -> S3Result<Option<bool>> {
    match acl {
        None => Ok(None),
        Some("private") => Ok(Some(false)),
        Some("public-read") => Ok(Some(true)),
        Some(other) => Err(s3_error!(
            NotImplemented,
            "the canned ACL {other} is not served: buckets are private or public-read"
        )),
    }
}

/// An access control policy as public-read or not: it may grant the
/// owner FULL_CONTROL and everyone READ, nothing else.
fn policy_public(policy: &s3s::dto::AccessControlPolicy, owner: &str) -> S3Result<bool> {
    let mut public = false;
    for grant in policy.grants.iter().flatten() {
        let permission = grant.permission.as_ref().map(Permission::as_str);
        let grantee = grant.grantee.as_ref();
        let to_owner = grantee.is_some_and(|g| g.id.as_deref() == Some(owner));
        let to_all = grantee.is_some_and(|g| g.uri.as_deref() == Some(ALL_USERS));
        match permission {
            Some("FULL_CONTROL") if to_owner => {}
            Some("READ") if to_all => public = true,
            _ => {
                return Err(s3_error!(
                    NotImplemented,
                    "only the owner's FULL_CONTROL and everyone's READ are served in an ACL"
                ));
            }
        }
    }
    Ok(public)
}

/// A bucket's ACL as S3 shows it: the owner's FULL_CONTROL, and
/// everyone's READ if it is public-read.
fn acl_of(bucket: &BucketRecord) -> (Owner, Vec<Grant>) {
    let owner = Owner {
        display_name: Some(bucket.owner.clone()),
        id: Some(bucket.owner.clone()),
    };
    let mut grants = vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name.clone(),
            id: owner.id.clone(),
            type_: s3s::dto::Type::from_static(s3s::dto::Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    if bucket.public_read {
        grants.push(Grant {
            grantee: Some(Grantee {
                display_name: None,
                id: None,
                type_: s3s::dto::Type::from_static(s3s::dto::Type::GROUP),
                email_address: None,
                uri: Some(ALL_USERS.into()),
            }),
            permission: Some(Permission::from_static(Permission::READ)),
        });
    }
    (owner, grants)
}

/// An object's canned ACL on a write: objects have their bucket's, so
/// one that differs is refused rather than ignored.
fn object_acl(bucket: &BucketRecord, acl: Option<&ObjectCannedACL>) -> S3Result<()> {
    let Some(acl) = acl else { return Ok(()) };
    match (acl.as_str(), bucket.public_read) {
        ("private", false) | ("public-read", true) => Ok(()),
        ("private" | "public-read", _) => Err(s3_error!(
            NotImplemented,
            "objects have their bucket's ACL ({}): set the bucket's with PutBucketAcl",
            if bucket.public_read {
                "public-read"
            } else {
                "private"
            }
        )),
        (other, _) => Err(s3_error!(
            NotImplemented,
            "the canned ACL {other} is not served: buckets are private or public-read"
        )),
    }
}

/// The answer when the object a read names is not there.
pub(crate) fn missing(version: Option<&str>) -> S3Error {
    if version.is_some() {
        s3_error!(NoSuchVersion)
    } else {
        s3_error!(NoSuchKey)
    }
}

/// Whether a read may return `object`: not a delete marker (the latest
/// version, or one named by id).
pub(crate) fn readable(
    bucket: &BucketRecord,
    object: &ObjectMeta,
    version: Option<&str>,
) -> S3Result<()> {
    if !object.delete_marker {
        return Ok(());
    }
    let shown = shown_version(bucket, object).unwrap_or_default();
    Err(match version {
        Some(_) => delete_marker_error(S3ErrorCode::MethodNotAllowed, &shown),
        None => delete_marker_error(S3ErrorCode::NoSuchKey, &shown),
    })
}

/// What a DELETE did: the version it removed or the delete marker it
/// made (none in a bucket never versioned).
#[derive(Debug, Default)]
struct Deleted {
    version_id: Option<String>,
    delete_marker: bool,
}

/// A ListObjectVersions request.
struct VersionQuery<'a> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    key_marker: Option<&'a str>,
    version_marker: Option<&'a str>,
    max: usize,
}

/// A page of versions: `(key, entry, latest)`, common prefixes, and where
/// the next page starts (a key and a version id, or a common prefix).
#[derive(Default)]
struct VersionsPage {
    versions: Vec<(String, IndexEntry, bool)>,
    prefixes: Vec<String>,
    truncated: bool,
    next: Option<(String, Option<String>)>,
}

impl Gateway {
    /// One page of ListObjectVersions: the keys' entries (each key's
    /// latest version) merged with the older versions' entries, a key's
    /// latest first, then its older versions newest first.
    async fn list_versions(
        &self,
        bucket: &BucketRecord,
        query: &VersionQuery<'_>,
    ) -> S3Result<VersionsPage> {
        let prefix = query.prefix;
        let key_marker = query.key_marker.filter(|k| !k.is_empty());
        let version_marker = query
            .version_marker
            .filter(|v| !v.is_empty() && key_marker.is_some());
        let mut key_start: Option<Vec<u8>> = None;
        let mut version_start = meta::VERSION_PREFIX[..meta::VERSION_PREFIX.len() - 1].to_vec();
        if let Some(marker) = key_marker {
            if version_marker.is_some() {
                // The marker's key again: its versions after the marker.
                key_start = Some(below(marker.as_bytes()));
                let mut start = meta::VERSION_PREFIX.to_vec();
                start.extend_from_slice(marker.as_bytes());
                version_start = start;
            } else {
                key_start = Some(marker.as_bytes().to_vec());
                let mut start = meta::version_key_prefix(marker);
                start.push(0xff);
                version_start = start;
            }
        }
        if !prefix.is_empty() && key_marker.is_none_or(|m| m < prefix) {
            key_start = Some(below(prefix.as_bytes()));
            let mut start = meta::VERSION_PREFIX.to_vec();
            start.extend_from_slice(&below(prefix.as_bytes()));
            version_start = start;
        }
        let skip_prefix = key_marker.filter(|m| {
            version_marker.is_none()
                && query
                    .delimiter
                    .is_some_and(|d| !d.is_empty() && m.ends_with(d))
        });
        let mut keys = Lister::new(KEYS_END);
        let mut older = Lister::new(VERSIONS_END);
        let mut next_key: Option<(String, IndexEntry)> = None;
        let mut next_older: Option<(String, IndexEntry)> = None;
        let (mut keys_done, mut older_done) = (false, false);
        let mut seeking = version_marker;
        let mut page = VersionsPage::default();
        if query.max == 0 {
            return Ok(page);
        }
        loop {
            if next_key.is_none() && !keys_done {
                match self
                    .index_after(bucket, key_start.as_deref(), &mut keys)
                    .await?
                {
                    Some((key, entry)) => {
                        let key = String::from_utf8(key.to_vec()).map_err(internal)?;
                        next_key = Some((key, entry));
                    }
                    None => keys_done = true,
                }
            }
            while next_older.is_none() && !older_done {
                match self
                    .index_after(bucket, Some(&version_start), &mut older)
                    .await?
                {
                    Some((index_key, entry)) => {
                        if let Some((key, _)) = meta::parse_version_key(&index_key) {
                            next_older = Some((key, entry));
                        }
                    }
                    None => older_done = true,
                }
            }
            let take_key = match (&next_key, &next_older) {
                (Some((k, _)), Some((o, _))) => k <= o,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let picked = if take_key {
                next_key.take().map(|(k, e)| (k, e, true))
            } else {
                next_older.take().map(|(k, e)| (k, e, false))
            };
            let Some((key, entry, latest)) = picked else {
                break;
            };
            if let Some(marker) = key_marker {
                if key.as_str() < marker {
                    continue;
                }
                if key == marker {
                    match seeking {
                        None if version_marker.is_none() => continue,
                        Some(seek) => {
                            if entry.shown_version() == seek {
                                seeking = None;
                            }
                            continue;
                        }
                        None => {}
                    }
                }
            }
            if let Some(skip) = skip_prefix
                && key.starts_with(skip)
            {
                continue;
            }
            if !key.starts_with(prefix) {
                if key.as_str() > prefix {
                    break;
                }
                continue;
            }
            let rolled = rolled_up(&key, prefix, query.delimiter);
            if rolled.is_some() && page.prefixes.last() == rolled.as_ref() {
                continue;
            }
            if page.versions.len() + page.prefixes.len() == query.max {
                page.truncated = true;
                break;
            }
            match rolled {
                Some(common) => {
                    page.next = Some((common.clone(), None));
                    page.prefixes.push(common);
                }
                None => {
                    page.next = Some((key.clone(), Some(entry.shown_version())));
                    page.versions.push((key, entry, latest));
                }
            }
        }
        Ok(page)
    }
}

/// Where a listing resumes: after a key, or after every key under a
/// common prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Marker {
    Key(String),
    Prefix(String),
}

impl Marker {
    /// An opaque continuation token (hex, so any key fits).
    fn token(&self) -> String {
        let (kind, text) = match self {
            Marker::Key(k) => ('k', k),
            Marker::Prefix(p) => ('p', p),
        };
        std::iter::once(kind as u8)
            .chain(text.bytes())
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn parse(token: &str) -> S3Result<Marker> {
        let bad = || {
            s3_error!(
                InvalidArgument,
                "The continuation token provided is incorrect"
            )
        };
        if !token.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes: Vec<u8> = (0..token.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(token.get(i..i + 2).unwrap_or("zz"), 16))
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let (kind, text) = bytes.split_first().ok_or_else(bad)?;
        let text = String::from_utf8(text.to_vec()).map_err(|_| bad())?;
        match kind {
            b'k' => Ok(Marker::Key(text)),
            b'p' => Ok(Marker::Prefix(text)),
            _ => Err(bad()),
        }
    }

    fn text(&self) -> &str {
        match self {
            Marker::Key(t) | Marker::Prefix(t) => t,
        }
    }
}

struct ListQuery<'a> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    after: Option<&'a str>,
    skip_prefix: Option<&'a str>,
    max: usize,
}

#[derive(Default)]
struct ListResult {
    objects: Vec<(String, IndexEntry)>,
    prefixes: Vec<String>,
    truncated: bool,
    last: Option<Marker>,
}

impl ListResult {
    fn count(&self) -> usize {
        self.objects.len() + self.prefixes.len()
    }
}

/// Where the keys of an index shard end (older versions and intents
/// sort after them).
const KEYS_END: &[u8] = b"\xfe";
/// Where the older versions of an index shard end.
const VERSIONS_END: &[u8] = b"\xfev0";

struct Lister {
    shards: Vec<ShardCursor>,
    /// Entries from this key on are not the lister's.
    stop: Vec<u8>,
}

impl Lister {
    fn new(stop: &[u8]) -> Lister {
        Lister {
            shards: Vec::new(),
            stop: stop.to_vec(),
        }
    }
}

struct ShardCursor {
    buffered: VecDeque<(Bytes, Bytes)>,
    after: Option<Bytes>,
    done: bool,
}

/// A key that sorts just below every key starting with `prefix` (and
/// after any key below the prefix that is not much longer).
pub(crate) fn below(prefix: &[u8]) -> Vec<u8> {
    let mut out = prefix.to_vec();
    match out.pop() {
        Some(0) | None => out,
        Some(last) => {
            out.push(last - 1);
            out.extend_from_slice(&[0xff; 16]);
            out
        }
    }
}

/// The resume point of a listing from V2's token or start-after, or
/// V1's marker: `(after, skip_prefix)`.
fn resume(
    token: Option<&str>,
    start_after: Option<&str>,
) -> S3Result<(Option<String>, Option<String>)> {
    if let Some(token) = token {
        let marker = Marker::parse(token)?;
        return Ok(match marker {
            Marker::Key(k) => (Some(k), None),
            Marker::Prefix(p) => (Some(p.clone()), Some(p)),
        });
    }
    Ok((start_after.map(str::to_owned), None))
}

/// S3's URL encoding of a key in a listing (`encoding-type=url`).
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn internal(e: impl std::fmt::Display) -> S3Error {
    let mut error = S3Error::new(S3ErrorCode::InternalError);
    error.set_message(e.to_string());
    error
}

pub(crate) fn client_error(e: ClientError) -> S3Error {
    match e {
        ClientError::Full(why) => {
            let mut error = S3Error::new(S3ErrorCode::ServiceUnavailable);
            error.set_message(format!("the cluster is full: {why}"));
            error
        }
        ClientError::NoPool(pool) => internal(format!("pool {pool} does not exist")),
        other => internal(other),
    }
}

impl From<MetaError> for S3Error {
    fn from(e: MetaError) -> S3Error {
        match e {
            MetaError::Client(e) => client_error(e),
            other => internal(other),
        }
    }
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// S3's bucket name rules (the DNS-compatible ones, as AWS enforces them).
fn valid_bucket_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edges_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
        && bytes.first().copied().is_some_and(edges_ok)
        && bytes.last().copied().is_some_and(edges_ok)
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err()
        && !name.starts_with("xn--")
        && !name.starts_with("sthree-")
        && !name.ends_with("-s3alias")
        && !name.ends_with("--ol-s3")
}

fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() {
        return Err(s3_error!(InvalidArgument, "the object key is empty"));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(s3_error!(KeyTooLongError));
    }
    Ok(())
}

/// Whether an `If-Match`/`If-None-Match` condition matches an ETag.
pub(crate) fn etag_matches(condition: &ETagCondition, etag: &str) -> bool {
    match condition {
        ETagCondition::Any => true,
        ETagCondition::ETag(want) => want.value() == etag,
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let name = input.bucket;
        if !valid_bucket_name(&name) {
            return Err(s3_error!(InvalidBucketName));
        }
        // A location constraint naming a pool puts the bucket there.
        let wanted = input
            .create_bucket_configuration
            .and_then(|c| c.location_constraint)
            .map(|l| l.as_str().to_owned());
        let map = self.client.refresh_map().await.map_err(client_error)?;
        let pool = match wanted {
            Some(pool) if map.pools.iter().any(|p| p.name == pool) && pool != META_POOL => pool,
            _ => self.default_pool.clone(),
        };
        let record = BucketRecord {
            name: name.clone(),
            id: meta::random_hex(8),
            owner: user.clone(),
            pool,
            created_secs: meta::now_ms() / 1000,
            tags: BTreeMap::new(),
            versioning: None,
            public_read: canned_public(input.acl.as_ref().map(BucketCannedACL::as_str))?
                .unwrap_or(false),
        };
        let made = meta::omap_create(
            &self.client,
            BUCKETS_OBJECT,
            name.as_bytes(),
            &meta::encode(&record),
        )
        .await?;
        // A record of a bucket of this name deleted through another
        // gateway may still be kept here.
        self.bucket_changed(&name);
        if !made {
            let existing = self.bucket_now(&name).await?;
            return Err(if existing.owner == user {
                s3_error!(BucketAlreadyOwnedByYou)
            } else {
                s3_error!(BucketAlreadyExists)
            });
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let user = self.user(&req)?;
        let name = req.input.bucket;
        let bucket = self.owned_bucket_now(&name, &user).await?;
        for shard in 0..INDEX_SHARDS {
            let object = meta::index_shard(&bucket.id, shard);
            // Objects only: operations' intents sort last (0xFF).
            match self.client.omap_range(META_POOL, &object, None, 1).await {
                Ok(page) if page.first().is_some_and(|(k, _)| k.first() != Some(&0xff)) => {
                    return Err(s3_error!(BucketNotEmpty));
                }
                Ok(_) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(client_error(e)),
            }
        }
        // Only the record read: a bucket made again meanwhile stays.
        let raw = meta::encode(&bucket);
        let op = WriteOp::new()
            .guard(Guard::OmapKey {
                key: Bytes::from(name.clone()),
                value: Some(raw),
            })
            .omap_remove([name.as_bytes()]);
        let removed = self.client.operate(META_POOL, BUCKETS_OBJECT, op).await;
        self.bucket_changed(&name);
        match removed {
            Ok(_) | Err(ClientError::CompareFailed { .. }) => {}
            Err(e) => return Err(client_error(e)),
        }
        for shard in 0..INDEX_SHARDS {
            let object = meta::index_shard(&bucket.id, shard);
            match self.client.remove(META_POOL, &object).await {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(client_error(e)),
            }
        }
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let user = self.user(&req)?;
        self.owned_bucket(&req.input.bucket, &user).await?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = self.user(&req)?;
        let mut buckets = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let page = match self
                .client
                .omap_range(META_POOL, BUCKETS_OBJECT, after.as_deref(), LIST_PAGE)
                .await
            {
                Ok(page) => page,
                Err(ClientError::NotFound) => Vec::new(),
                Err(e) => return Err(client_error(e)),
            };
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            for (name, value) in &page {
                let name = String::from_utf8_lossy(name).into_owned();
                let record: BucketRecord = meta::decode(&format!("bucket {name}"), value)?;
                if record.owner == user {
                    buckets.push(Bucket {
                        name: Some(name),
                        creation_date: Some(timestamp(record.created_secs * 1000)),
                        ..Default::default()
                    });
                }
            }
        }
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(Owner {
                display_name: Some(user.clone()),
                id: Some(user),
            }),
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let user = self.user(&req)?;
        let trailers = req.trailing_headers.clone();
        let mut input = req.input;
        check_key(&input.key)?;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        object_acl(&bucket, input.acl.as_ref())?;
        let tags = match &input.tagging {
            Some(header) => crate::tagging::parse_header(header)?,
            None => BTreeMap::new(),
        };
        let Some(body) = input.body.take() else {
            return Err(s3_error!(IncompleteBody));
        };
        let given = Given {
            algorithm: input
                .checksum_algorithm
                .as_ref()
                .map(|a| a.as_str().to_owned()),
            crc32: input.checksum_crc32.take(),
            crc32c: input.checksum_crc32c.take(),
            sha1: input.checksum_sha1.take(),
            sha256: input.checksum_sha256.take(),
            crc64nvme: input.checksum_crc64nvme.take(),
            content_md5: input.content_md5.take(),
            content_length: input.content_length,
        };
        let prefix = meta::put_tail(&bucket.id);
        let writing = vec![prefix.clone()];
        let tail = Tail {
            pool: bucket.pool.clone(),
            prefix,
        };
        // An unversioned `If-Match` write is guarded on the head it
        // reads: read while the intent is written. (Other unversioned
        // writes try a create first: see `store`.)
        let create_only = input
            .if_none_match
            .as_ref()
            .is_some_and(|c| matches!(c, ETagCondition::Any));
        let read_head = !bucket.versioned() && !create_only && input.if_match.is_some();
        let begin = async {
            if read_head {
                self.begin_reading_head(&bucket, &input.key, writing).await
            } else {
                self.begin(&bucket, &input.key, writing, None).await
            }
        };
        let inline = inline_max(&bucket);
        let kept_whole = given
            .content_length
            .is_some_and(|n| u64::try_from(n).is_ok_and(|n| n <= inline));
        let receive = self.receive(body, given, trailers, tail, inline);
        let (pending, received) = if kept_whole {
            // A body kept whole writes nothing before the intent lands:
            // the two go at once (dropped unfinished, the pending is
            // recovered).
            let (pending, received) = tokio::join!(begin, receive);
            (pending?, received?)
        } else {
            // Pieces may be written only once the intent names them.
            let pending = begin.await?;
            (pending, receive.await?)
        };
        let (data, parts) = match received.stored {
            Stored::Inline(data) => (data, Vec::new()),
            Stored::Tail(part) => (Bytes::new(), vec![part]),
        };
        let (etag, got) = (received.etag, received.computed);
        let mtime_ms = meta::now_ms();
        let object_meta = ObjectMeta {
            size: received.size,
            etag: etag.clone(),
            mtime_ms,
            content_type: input.content_type.map(|c| c.to_string()),
            content_encoding: input.content_encoding,
            content_disposition: input.content_disposition,
            content_language: input.content_language,
            cache_control: input.cache_control,
            expires: input.expires.as_ref().map(http_date),
            user: input.metadata.unwrap_or_default().into_iter().collect(),
            checksums: received.checksums,
            tags,
            parts,
            ..ObjectMeta::default()
        };
        let conditions = (input.if_none_match.as_ref(), input.if_match.as_ref());
        let stored = match self
            .store(&bucket, &input.key, data, &object_meta, conditions, pending)
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                if never_stored(&e) {
                    self.remove_parts(&bucket, &object_meta.parts, &ObjectMeta::default())
                        .await;
                }
                return Err(e);
            }
        };
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            version_id: shown_version(&bucket, &stored),
            checksum_crc32: got.checksum_crc32,
            checksum_crc32c: got.checksum_crc32c,
            checksum_sha1: got.checksum_sha1,
            checksum_sha256: got.checksum_sha256,
            checksum_crc64nvme: got.checksum_crc64nvme,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let bucket = self
            .read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        let input = req.input;
        let version = input.version_id.as_deref();
        // Metadata first, then the bytes of that same version (guarded by
        // its metadata: a PUT between the two reads is read again).
        for _ in 0..8 {
            let name = self.locate(&bucket, &input.key, version).await?;
            // Without a range, the metadata and the first bytes (or the
            // manifest) come in one read; the rest streams as read.
            let (object_meta, raw, whole) = if input.range.is_none() {
                let Some((object_meta, raw, data)) = self
                    .stored_version(&bucket, &input.key, &name, Some(HEAD_STREAM_BYTES))
                    .await?
                else {
                    return Err(missing(version));
                };
                (object_meta, raw, Some(data))
            } else {
                let Some((object_meta, raw)) =
                    self.head_in(&bucket, &input.key, &name, true).await?
                else {
                    return Err(missing(version));
                };
                (object_meta, raw, None)
            };
            readable(&bucket, &object_meta, version)?;
            check_conditions(
                &object_meta,
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                input.if_modified_since.as_ref(),
                input.if_unmodified_since.as_ref(),
            )?;
            let size = object_meta.size;
            let range = requested_range(&object_meta, input.range.as_ref(), input.part_number)?;
            let (offset, length) = range
                .as_ref()
                .map_or((0, size), |r| (r.start, r.end - r.start));
            let once = |data: Bytes| {
                let length = data.len() as u64;
                let body = StreamingBlob::wrap(futures::stream::once(async move {
                    Ok::<Bytes, std::io::Error>(data)
                }));
                (body, length)
            };
            let (body, length) = match whole {
                _ if !object_meta.parts.is_empty() => {
                    // A multipart object's parts never change: streamed as read.
                    let body = crate::multipart::stream_parts(
                        self.client.clone(),
                        self.budget.clone(),
                        bucket.pool.clone(),
                        &object_meta.parts,
                        offset..offset + length,
                    );
                    (body, length)
                }
                // The rest streamed as read, under the same guard.
                Some(first) if (first.len() as u64) < size => {
                    let body = crate::multipart::stream_head(
                        self.client.clone(),
                        self.budget.clone(),
                        bucket.pool.clone(),
                        (name, raw),
                        first,
                        size,
                    );
                    (body, size)
                }
                Some(data) => once(data),
                None => {
                    let Some(data) = self
                        .read_as_of(&bucket, &name, raw, (offset, Some(length)))
                        .await?
                    else {
                        continue;
                    };
                    once(data)
                }
            };
            // Checksums are of the whole object: not for a part of it.
            let checksums = input
                .checksum_mode
                .as_ref()
                .is_some_and(|m| m.as_str() == "ENABLED")
                && range.is_none();
            let headers =
                object_headers(&object_meta, range.as_ref(), input.part_number, checksums);
            let version_id = shown_version(&bucket, &object_meta);
            return Ok(S3Response::new(GetObjectOutput {
                body: Some(body),
                content_length: Some(to_i64(length)),
                content_range: headers.content_range,
                parts_count: headers.parts_count,
                tag_count: (!object_meta.tags.is_empty())
                    .then(|| i32::try_from(object_meta.tags.len()).unwrap_or(i32::MAX)),
                accept_ranges: headers.accept_ranges,
                e_tag: headers.e_tag,
                last_modified: headers.last_modified,
                content_type: headers.content_type,
                content_encoding: headers.content_encoding,
                content_disposition: headers.content_disposition,
                content_language: headers.content_language,
                cache_control: headers.cache_control,
                expires: headers.expires,
                metadata: headers.metadata,
                checksum_crc32: headers.checksum_crc32,
                checksum_crc32c: headers.checksum_crc32c,
                checksum_sha1: headers.checksum_sha1,
                checksum_sha256: headers.checksum_sha256,
                checksum_crc64nvme: headers.checksum_crc64nvme,
                checksum_type: headers.checksum_type,
                version_id,
                ..Default::default()
            }));
        }
        Err(s3_error!(SlowDown, "the object changed under every read"))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let bucket = self
            .read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        let input = req.input;
        let parts = input.part_number.is_some();
        let version = input.version_id.as_deref();
        let name = self.locate(&bucket, &input.key, version).await?;
        let Some((object_meta, _)) = self.head_in(&bucket, &input.key, &name, parts).await? else {
            return Err(missing(version));
        };
        readable(&bucket, &object_meta, version)?;
        check_conditions(
            &object_meta,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let range = requested_range(&object_meta, input.range.as_ref(), input.part_number)?;
        let checksums = input
            .checksum_mode
            .as_ref()
            .is_some_and(|m| m.as_str() == "ENABLED")
            && range.is_none();
        Ok(S3Response::new(HeadObjectOutput {
            version_id: shown_version(&bucket, &object_meta),
            ..object_headers(&object_meta, range.as_ref(), input.part_number, checksums)
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let deleted = self
            .delete_key(
                &bucket,
                &input.key,
                input.version_id.as_deref(),
                input.if_match.as_ref(),
            )
            .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: deleted.delete_marker.then_some(true),
            version_id: deleted.version_id,
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        if input.delete.objects.len() > DELETE_OBJECTS_MAX {
            return Err(s3_error!(
                MalformedXML,
                "at most {DELETE_OBJECTS_MAX} keys may be deleted at once"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for object in input.delete.objects {
            let condition = object.e_tag.clone().map(ETagCondition::ETag);
            match self
                .delete_key(
                    &bucket,
                    &object.key,
                    object.version_id.as_deref(),
                    condition.as_ref(),
                )
                .await
            {
                Ok(done) => {
                    if !quiet {
                        // A delete marker made, or one deleted by id, is
                        // named in DeleteMarkerVersionId, as AWS does.
                        deleted.push(DeletedObject {
                            key: Some(object.key),
                            delete_marker: done.delete_marker.then_some(true),
                            delete_marker_version_id: done
                                .delete_marker
                                .then(|| done.version_id.clone())
                                .flatten(),
                            version_id: object.version_id.clone(),
                        });
                    }
                }
                Err(e) => errors.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_owned()),
                    key: Some(object.key),
                    message: e.message().map(str::to_owned),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        check_key(&input.key)?;
        let (source_bucket, source_key, source_version) = copy_source_names(&input.copy_source)?;
        let target = self.owned_bucket(&input.bucket, &user).await?;
        object_acl(&target, input.acl.as_ref())?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == "REPLACE");
        // (Copying an older version over its key restores it.)
        if !replace
            && source_version.is_none()
            && source_bucket == input.bucket.as_str()
            && source_key == input.key
        {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let conditions = CopyConditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        };
        let (from, stream, copy_source_version_id) = self
            .open_copy_source(&user, &input.copy_source, &conditions, None)
            .await?;
        // The bytes are the copy's own: kept whole if small, else in new
        // tail objects.
        let prefix = meta::put_tail(&target.id);
        let pending = self
            .begin(&target, &input.key, vec![prefix.clone()], None)
            .await?;
        let tail = Tail {
            pool: target.pool.clone(),
            prefix,
        };
        let received = self
            .receive(stream, Given::default(), None, tail, inline_max(&target))
            .await?;
        let mut to = ObjectMeta {
            version_id: None,
            seq: 0,
            ..from.clone()
        };
        to.mtime_ms = meta::now_ms();
        let data = match received.stored {
            Stored::Inline(data) => {
                to.parts = Vec::new();
                data
            }
            Stored::Tail(part) => {
                to.parts = vec![part];
                Bytes::new()
            }
        };
        if input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == "REPLACE")
        {
            to.tags = match &input.tagging {
                Some(header) => crate::tagging::parse_header(header)?,
                None => BTreeMap::new(),
            };
        }
        if replace {
            to.content_type = input.content_type.as_ref().map(ToString::to_string);
            to.content_encoding.clone_from(&input.content_encoding);
            to.content_disposition
                .clone_from(&input.content_disposition);
            to.content_language.clone_from(&input.content_language);
            to.cache_control.clone_from(&input.cache_control);
            to.expires = input.expires.as_ref().map(http_date);
            to.user = input
                .metadata
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect();
        }
        let stored = match self
            .store(&target, &input.key, data, &to, (None, None), pending)
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                if never_stored(&e) {
                    self.remove_parts(&target, &to.parts, &ObjectMeta::default())
                        .await;
                }
                return Err(e);
            }
        };
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(to.etag.clone())),
                last_modified: Some(timestamp(to.mtime_ms)),
                ..Default::default()
            }),
            copy_source_version_id,
            version_id: shown_version(&target, &stored),
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let upload = self.upload(&bucket, &input.key, &input.upload_id).await?;
        crate::multipart::check_part_number(input.part_number)?;
        let conditions = CopyConditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        };
        let (_, stream, copy_source_version_id) = self
            .open_copy_source(
                &user,
                &input.copy_source,
                &conditions,
                Some(input.copy_source_range.as_deref()),
            )
            .await?;
        let received = self
            .put_part(
                &bucket,
                &upload,
                input.part_number,
                stream,
                Given {
                    algorithm: upload.checksum_algorithm.clone(),
                    ..Given::default()
                },
                None,
            )
            .await?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(received.etag)),
                last_modified: Some(timestamp(meta::now_ms())),
                ..Default::default()
            }),
            copy_source_version_id,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        object_acl(&bucket, input.acl.as_ref())?;
        let template = ObjectMeta {
            content_type: input.content_type.map(|c| c.to_string()),
            content_encoding: input.content_encoding,
            content_disposition: input.content_disposition,
            content_language: input.content_language,
            cache_control: input.cache_control,
            expires: input.expires.as_ref().map(http_date),
            user: input.metadata.unwrap_or_default().into_iter().collect(),
            tags: match &input.tagging {
                Some(header) => crate::tagging::parse_header(header)?,
                None => BTreeMap::new(),
            },
            ..ObjectMeta::default()
        };
        let algorithm = input
            .checksum_algorithm
            .as_ref()
            .map(|a| a.as_str().to_owned());
        let kind = crate::checksum::upload_kind(
            algorithm.as_deref(),
            input.checksum_type.as_ref().map(ChecksumType::as_str),
        )?;
        let upload_id = self
            .start_upload(&bucket, &input.key, template, (algorithm, kind.clone()))
            .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(upload_id),
            checksum_algorithm: input.checksum_algorithm,
            checksum_type: kind.map(ChecksumType::from),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let user = self.user(&req)?;
        let trailers = req.trailing_headers.clone();
        let mut input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let upload = self.upload(&bucket, &input.key, &input.upload_id).await?;
        let Some(body) = input.body.take() else {
            return Err(s3_error!(IncompleteBody));
        };
        // A part of an upload with a checksum algorithm always gets that
        // checksum computed (and checked, if the client sent it).
        let given = Given {
            algorithm: input
                .checksum_algorithm
                .as_ref()
                .map(|a| a.as_str().to_owned())
                .or_else(|| upload.checksum_algorithm.clone()),
            crc32: input.checksum_crc32.take(),
            crc32c: input.checksum_crc32c.take(),
            sha1: input.checksum_sha1.take(),
            sha256: input.checksum_sha256.take(),
            crc64nvme: input.checksum_crc64nvme.take(),
            content_md5: input.content_md5.take(),
            content_length: input.content_length,
        };
        let received = self
            .put_part(&bucket, &upload, input.part_number, body, given, trailers)
            .await?;
        let got = received.computed;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(received.etag)),
            checksum_crc32: got.checksum_crc32,
            checksum_crc32c: got.checksum_crc32c,
            checksum_sha1: got.checksum_sha1,
            checksum_sha256: got.checksum_sha256,
            checksum_crc64nvme: got.checksum_crc64nvme,
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let upload = self.upload(&bucket, &input.key, &input.upload_id).await?;
        let completed = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        let listed: Vec<(i32, Option<String>)> = completed
            .iter()
            .map(|p| {
                (
                    p.part_number.unwrap_or(0),
                    p.e_tag.as_ref().map(|e| e.value().to_owned()),
                )
            })
            .collect();
        let uploaded = self.parts(&upload.upload_id).await?;
        let (parts, etag, size) = crate::multipart::assemble(&listed, &uploaded)?;
        let whole = crate::multipart::whole_checksum(
            &upload,
            &completed,
            &uploaded,
            &Given {
                crc32: input.checksum_crc32.clone(),
                crc32c: input.checksum_crc32c.clone(),
                sha1: input.checksum_sha1.clone(),
                sha256: input.checksum_sha256.clone(),
                crc64nvme: input.checksum_crc64nvme.clone(),
                ..Default::default()
            },
        )?;
        let object_meta = ObjectMeta {
            size,
            etag: etag.clone(),
            mtime_ms: meta::now_ms(),
            parts: parts.clone(),
            checksums: whole
                .iter()
                .map(|(a, v, _)| (a.clone(), v.clone()))
                .collect(),
            checksum_type: whole.as_ref().map(|(_, _, kind)| kind.clone()),
            ..upload.meta.clone()
        };
        let conditions = (input.if_none_match.as_ref(), input.if_match.as_ref());
        let pending = self
            .begin(
                &bucket,
                &input.key,
                Vec::new(),
                Some(upload.upload_id.clone()),
            )
            .await?;
        self.claim_upload(&bucket, &upload).await?;
        let stored = match self
            .store(
                &bucket,
                &input.key,
                Bytes::new(),
                &object_meta,
                conditions,
                pending,
            )
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                // Refused by a condition: the upload stays, as on AWS.
                if e.code() == &S3ErrorCode::PreconditionFailed {
                    self.unclaim_upload(&bucket, &upload).await?;
                }
                return Err(e);
            }
        };
        self.end_upload(&bucket, &upload, &parts).await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(ETag::Strong(etag)),
            version_id: shown_version(&bucket, &stored),
            checksum_crc32: stored.checksums.get("CRC32").cloned(),
            checksum_crc32c: stored.checksums.get("CRC32C").cloned(),
            checksum_sha1: stored.checksums.get("SHA1").cloned(),
            checksum_sha256: stored.checksums.get("SHA256").cloned(),
            checksum_crc64nvme: stored.checksums.get("CRC64NVME").cloned(),
            checksum_type: stored.checksum_type.clone().map(ChecksumType::from),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let upload = self.upload(&bucket, &input.key, &input.upload_id).await?;
        self.abort_upload(&bucket, &upload).await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let tags =
            crate::tagging::from_tag_set(input.tagging.tag_set, crate::tagging::OBJECT_TAGS_MAX)?;
        let version_id = self
            .set_object_tags(&bucket, &input.key, input.version_id.as_deref(), tags)
            .await?;
        Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let version = input.version_id.as_deref();
        let name = self.locate(&bucket, &input.key, version).await?;
        let Some((object, _)) = self.head_in(&bucket, &input.key, &name, false).await? else {
            return Err(missing(version));
        };
        readable(&bucket, &object, version)?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: crate::tagging::to_tag_set(&object.tags),
            version_id: shown_version(&bucket, &object),
        }))
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let version_id = self
            .set_object_tags(
                &bucket,
                &input.key,
                input.version_id.as_deref(),
                BTreeMap::new(),
            )
            .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let tags =
            crate::tagging::from_tag_set(input.tagging.tag_set, crate::tagging::BUCKET_TAGS_MAX)?;
        self.set_bucket_tags(&input.bucket, &user, tags).await?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let user = self.user(&req)?;
        let bucket = self.owned_bucket(&req.input.bucket, &user).await?;
        if bucket.tags.is_empty() {
            return Err(s3_error!(NoSuchTagSet, "The TagSet does not exist"));
        }
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: crate::tagging::to_tag_set(&bucket.tags),
        }))
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let user = self.user(&req)?;
        self.set_bucket_tags(&req.input.bucket, &user, BTreeMap::new())
            .await?;
        Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let max = usize::try_from(input.max_uploads.unwrap_or(1000).clamp(0, 1000)).unwrap_or(1000);
        let prefix = input.prefix.clone().unwrap_or_default();
        let page = self
            .list_uploads(
                &bucket,
                &prefix,
                input.delimiter.as_deref(),
                (
                    input.key_marker.as_deref(),
                    input.upload_id_marker.as_deref(),
                ),
                max,
            )
            .await?;
        let url = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        let enc = |text: &str| {
            if url {
                url_encode(text)
            } else {
                text.to_owned()
            }
        };
        let owner = Owner {
            display_name: Some(user.clone()),
            id: Some(user),
        };
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix.as_deref().map(enc),
            delimiter: input.delimiter.as_deref().map(enc),
            encoding_type: input.encoding_type,
            key_marker: input.key_marker.as_deref().map(enc),
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(page.truncated),
            next_key_marker: page
                .truncated
                .then(|| page.next_key_marker.as_deref().map(enc))
                .flatten(),
            next_upload_id_marker: page
                .truncated
                .then_some(page.next_upload_id_marker)
                .flatten(),
            uploads: Some(
                page.uploads
                    .into_iter()
                    .map(|u| MultipartUpload {
                        key: Some(enc(&u.key)),
                        upload_id: Some(u.upload_id),
                        initiated: Some(timestamp(u.initiated_ms)),
                        owner: Some(owner.clone()),
                        initiator: Some(s3s::dto::Initiator {
                            display_name: owner.display_name.clone(),
                            id: owner.id.clone(),
                        }),
                        storage_class: Some(s3s::dto::StorageClass::from_static(
                            s3s::dto::StorageClass::STANDARD,
                        )),
                        ..Default::default()
                    })
                    .collect(),
            ),
            common_prefixes: (!page.common_prefixes.is_empty()).then(|| {
                page.common_prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc(p)),
                    })
                    .collect()
            }),
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let upload = self.upload(&bucket, &input.key, &input.upload_id).await?;
        let max = usize::try_from(input.max_parts.unwrap_or(1000).clamp(0, 1000)).unwrap_or(1000);
        let marker: i32 = input.part_number_marker.unwrap_or(0);
        let all = self.parts(&upload.upload_id).await?;
        let after: Vec<_> = all.into_iter().filter(|(n, _)| *n > marker).collect();
        let truncated = after.len() > max;
        let page: Vec<_> = after.into_iter().take(max).collect();
        let next = truncated.then(|| page.last().map(|(n, _)| *n)).flatten();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            checksum_algorithm: upload
                .checksum_algorithm
                .clone()
                .map(s3s::dto::ChecksumAlgorithm::from),
            checksum_type: upload.checksum_type.clone().map(ChecksumType::from),
            max_parts: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(truncated),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            parts: Some(
                page.into_iter()
                    .map(|(number, record)| Part {
                        part_number: Some(number),
                        size: Some(to_i64(record.size)),
                        e_tag: Some(ETag::Strong(record.etag)),
                        last_modified: Some(timestamp(record.mtime_ms)),
                        checksum_crc32: record.checksums.get("CRC32").cloned(),
                        checksum_crc32c: record.checksums.get("CRC32C").cloned(),
                        checksum_sha1: record.checksums.get("SHA1").cloned(),
                        checksum_sha256: record.checksums.get("SHA256").cloned(),
                        checksum_crc64nvme: record.checksums.get("CRC64NVME").cloned(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let bucket = self
            .read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        let input = req.input;
        let max = usize::try_from(input.max_keys.unwrap_or(1000).clamp(0, 1000)).unwrap_or(1000);
        let (after, skip) = resume(
            input.continuation_token.as_deref(),
            input.start_after.as_deref(),
        )?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let query = ListQuery {
            prefix: &prefix,
            delimiter: input.delimiter.as_deref(),
            after: after.as_deref(),
            skip_prefix: skip.as_deref(),
            max,
        };
        let result = self.list_page(&bucket, &query).await?;
        let url = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
        let key_count = result.count();
        let next = result
            .truncated
            .then(|| result.last.as_ref().map(Marker::token))
            .flatten();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc(&prefix)),
            delimiter: input.delimiter.as_deref().map(enc),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            key_count: Some(i32::try_from(key_count).unwrap_or(i32::MAX)),
            is_truncated: Some(result.truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: next,
            start_after: input.start_after.as_deref().map(enc),
            encoding_type: input.encoding_type,
            contents: Some(
                result
                    .objects
                    .iter()
                    .map(|(key, entry)| listed(&enc(key), entry))
                    .collect(),
            ),
            common_prefixes: (!result.prefixes.is_empty()).then(|| {
                result
                    .prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc(p)),
                    })
                    .collect()
            }),
            ..Default::default()
        }))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let user = self.user(&req)?;
        let bucket = self.owned_bucket(&req.input.bucket, &user).await?;
        let (owner, grants) = acl_of(&bucket);
        Ok(S3Response::new(GetBucketAclOutput {
            owner: Some(owner),
            grants: Some(grants),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let public = match (&input.acl, &input.access_control_policy) {
            (Some(acl), _) => canned_public(Some(acl.as_str()))?.unwrap_or(false),
            (None, Some(policy)) => policy_public(policy, &user)?,
            (None, None) => {
                return Err(s3_error!(
                    MalformedACLError,
                    "Give a canned ACL (x-amz-acl) or an access control policy"
                ));
            }
        };
        self.set_public_read(&input.bucket, &user, public).await?;
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let bucket = self.owned_bucket(&input.bucket, &user).await?;
        let version = input.version_id.as_deref();
        let name = self.locate(&bucket, &input.key, version).await?;
        let Some((object, _)) = self.head_in(&bucket, &input.key, &name, false).await? else {
            return Err(missing(version));
        };
        readable(&bucket, &object, version)?;
        // An object has its bucket's ACL.
        let (owner, grants) = acl_of(&bucket);
        Ok(S3Response::new(GetObjectAclOutput {
            owner: Some(owner),
            grants: Some(grants),
            ..Default::default()
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let user = self.user(&req)?;
        let bucket = self.owned_bucket(&req.input.bucket, &user).await?;
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: bucket.versioning.map(BucketVersioningStatus::from),
            ..Default::default()
        }))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let user = self.user(&req)?;
        let input = req.input;
        let configuration = input.versioning_configuration;
        if configuration
            .mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == "Enabled")
        {
            return Err(s3_error!(NotImplemented, "MFA delete is not served"));
        }
        let Some(status) = configuration.status else {
            return Err(s3_error!(
                MalformedXML,
                "The versioning configuration has no Status"
            ));
        };
        self.set_versioning(&input.bucket, &user, status.as_str())
            .await?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let bucket = self
            .read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        let input = req.input;
        let max = usize::try_from(input.max_keys.unwrap_or(1000).clamp(0, 1000)).unwrap_or(1000);
        let prefix = input.prefix.clone().unwrap_or_default();
        let query = VersionQuery {
            prefix: &prefix,
            delimiter: input.delimiter.as_deref(),
            key_marker: input.key_marker.as_deref(),
            version_marker: input.version_id_marker.as_deref(),
            max,
        };
        let page = self.list_versions(&bucket, &query).await?;
        let url = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
        let owner = Owner {
            display_name: Some(bucket.owner.clone()),
            id: Some(bucket.owner.clone()),
        };
        let mut versions = Vec::new();
        let mut delete_markers = Vec::new();
        for (key, entry, latest) in &page.versions {
            if entry.delete_marker {
                delete_markers.push(DeleteMarkerEntry {
                    key: Some(enc(key)),
                    version_id: Some(entry.shown_version()),
                    is_latest: Some(*latest),
                    last_modified: Some(timestamp(entry.mtime_ms)),
                    owner: Some(owner.clone()),
                });
            } else {
                versions.push(ObjectVersion {
                    key: Some(enc(key)),
                    version_id: Some(entry.shown_version()),
                    is_latest: Some(*latest),
                    last_modified: Some(timestamp(entry.mtime_ms)),
                    e_tag: Some(ETag::Strong(entry.etag.clone())),
                    size: Some(to_i64(entry.size)),
                    storage_class: Some(s3s::dto::ObjectVersionStorageClass::from_static(
                        s3s::dto::ObjectVersionStorageClass::STANDARD,
                    )),
                    owner: Some(owner.clone()),
                    ..Default::default()
                });
            }
        }
        let (next_key, next_version) = match (page.truncated, page.next) {
            (true, Some((key, version))) => (Some(enc(&key)), version),
            _ => (None, None),
        };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(&prefix)),
            delimiter: input.delimiter.as_deref().map(enc),
            key_marker: Some(input.key_marker.as_deref().map(enc).unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(page.truncated),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            encoding_type: input.encoding_type,
            versions: Some(versions),
            delete_markers: (!delete_markers.is_empty()).then_some(delete_markers),
            common_prefixes: (!page.prefixes.is_empty()).then(|| {
                page.prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc(p)),
                    })
                    .collect()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let bucket = self
            .read_bucket(req.credentials.as_ref(), &req.input.bucket)
            .await?;
        let input = req.input;
        let max = usize::try_from(input.max_keys.unwrap_or(1000).clamp(0, 1000)).unwrap_or(1000);
        let prefix = input.prefix.clone().unwrap_or_default();
        // V1's marker is a key (or a common prefix a page ended with).
        let marker = input.marker.clone().filter(|m| !m.is_empty());
        let skip = marker
            .as_ref()
            .filter(|m| {
                input
                    .delimiter
                    .as_ref()
                    .is_some_and(|d| !d.is_empty() && m.ends_with(d.as_str()))
            })
            .cloned();
        let query = ListQuery {
            prefix: &prefix,
            delimiter: input.delimiter.as_deref(),
            after: marker.as_deref(),
            skip_prefix: skip.as_deref(),
            max,
        };
        let result = self.list_page(&bucket, &query).await?;
        let url = input
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == "url");
        let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
        let next_marker = (result.truncated && input.delimiter.is_some())
            .then(|| result.last.as_ref().map(|m| enc(m.text())))
            .flatten();
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(&prefix)),
            delimiter: input.delimiter.as_deref().map(enc),
            marker: Some(input.marker.as_deref().map(enc).unwrap_or_default()),
            max_keys: Some(i32::try_from(max).unwrap_or(1000)),
            is_truncated: Some(result.truncated),
            next_marker,
            encoding_type: input.encoding_type,
            contents: Some(
                result
                    .objects
                    .iter()
                    .map(|(key, entry)| listed(&enc(key), entry))
                    .collect(),
            ),
            common_prefixes: (!result.prefixes.is_empty()).then(|| {
                result
                    .prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc(p)),
                    })
                    .collect()
            }),
            ..Default::default()
        }))
    }
}

/// The `x-amz-copy-source-if-*` conditions of a copy.
struct CopyConditions<'a> {
    if_match: Option<&'a ETagCondition>,
    if_none_match: Option<&'a ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
}

/// A copy source's bucket, key and version (access points refused).
fn copy_source_names(copy_source: &CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    match copy_source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((bucket, key, version_id.as_deref())),
        CopySource::AccessPoint { .. } | CopySource::Outpost { .. } => {
            Err(s3_error!(NotImplemented, "copies from access points"))
        }
    }
}

/// `x-amz-copy-source-range` (`bytes=FIRST-LAST`, both inclusive, within
/// a source of `size` bytes) as an offset and a length.
fn copy_range(text: &str, size: u64) -> S3Result<(u64, u64)> {
    let bounds = text.strip_prefix("bytes=").and_then(|r| {
        let (first, last) = r.split_once('-')?;
        Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?))
    });
    let Some((first, last)) = bounds else {
        return Err(s3_error!(
            InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"
        ));
    };
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidRange,
            "Range specified is not valid for source object of size: {size}"
        ));
    }
    Ok((first, last - first + 1))
}

/// The bytes a GET or HEAD asks for: a `Range`, a `partNumber`, or all
/// (`None`).
fn requested_range(
    object: &ObjectMeta,
    range: Option<&s3s::dto::Range>,
    part_number: Option<i32>,
) -> S3Result<Option<std::ops::Range<u64>>> {
    match (range, part_number) {
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        )),
        (Some(range), None) => Ok(Some(range.check(object.size)?)),
        (None, Some(number)) => Ok(Some(part_range(object, number)?)),
        (None, None) => Ok(None),
    }
}

/// The headers a GET and a HEAD of `object` answer with (a HEAD's whole
/// answer): length and range, ETag, times, content headers, user
/// metadata, and the stored checksums if `checksums`.
fn object_headers(
    object: &ObjectMeta,
    range: Option<&std::ops::Range<u64>>,
    part_number: Option<i32>,
    checksums: bool,
) -> HeadObjectOutput {
    let size = object.size;
    let pick = |name: &str| {
        checksums
            .then(|| object.checksums.get(name).cloned())
            .flatten()
    };
    HeadObjectOutput {
        content_length: Some(to_i64(range.map_or(size, |r| r.end - r.start))),
        content_range: range
            .map(|r| format!("bytes {}-{}/{size}", r.start, r.end.saturating_sub(1))),
        parts_count: part_number.and(parts_count(object)),
        accept_ranges: Some("bytes".into()),
        e_tag: Some(ETag::Strong(object.etag.clone())),
        last_modified: Some(timestamp(object.mtime_ms)),
        content_type: object.content_type.as_deref().and_then(|c| c.parse().ok()),
        content_encoding: object.content_encoding.clone(),
        content_disposition: object.content_disposition.clone(),
        content_language: object.content_language.clone(),
        cache_control: object.cache_control.clone(),
        expires: object.expires.as_deref().and_then(parse_http_date),
        metadata: (!object.user.is_empty()).then(|| object.user.clone().into_iter().collect()),
        checksum_crc32: pick("CRC32"),
        checksum_crc32c: pick("CRC32C"),
        checksum_sha1: pick("SHA1"),
        checksum_sha256: pick("SHA256"),
        checksum_crc64nvme: pick("CRC64NVME"),
        checksum_type: (checksums && !object.checksums.is_empty()).then(|| {
            ChecksumType::from(
                object
                    .checksum_type
                    .clone()
                    .unwrap_or_else(|| crate::checksum::FULL_OBJECT.into()),
            )
        }),
        ..Default::default()
    }
}

/// The parts of a multipart object (its ETag ends `-N`).
fn parts_count(object: &ObjectMeta) -> Option<i32> {
    let (_, count) = object.etag.rsplit_once('-')?;
    count.parse().ok()
}

/// The bytes of part `number` (with the object's parts read): any part
/// of a multipart object, or part 1 of another, which is all of it.
fn part_range(object: &ObjectMeta, number: i32) -> S3Result<std::ops::Range<u64>> {
    if number < 1 {
        return Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        ));
    }
    let unsatisfiable = || {
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("InvalidPartNumber".into()),
            "The requested partnumber is not satisfiable",
        );
        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
        e
    };
    if parts_count(object).is_none() {
        return if number == 1 {
            Ok(0..object.size)
        } else {
            Err(unsatisfiable())
        };
    }
    let index = usize::try_from(number - 1).map_err(|_| unsatisfiable())?;
    let part = object.parts.get(index).ok_or_else(unsatisfiable)?;
    let start: u64 = object.parts.iter().take(index).map(|p| p.size).sum();
    Ok(start..start + part.size)
}

fn parse_http_date(text: &str) -> Option<Timestamp> {
    Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, text).ok()
}

/// A timestamp as an HTTP date (`Expires`).
fn http_date(at: &Timestamp) -> String {
    let mut out = Vec::new();
    match at.format(s3s::dto::TimestampFormat::HttpDate, &mut out) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

fn listed(key: &str, entry: &IndexEntry) -> Object {
    Object {
        key: Some(key.to_owned()),
        size: Some(to_i64(entry.size)),
        e_tag: Some(ETag::Strong(entry.etag.clone())),
        last_modified: Some(timestamp(entry.mtime_ms)),
        storage_class: Some(s3s::dto::ObjectStorageClass::from_static(
            s3s::dto::ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

/// `If-Match`, `If-None-Match`, `If-Modified-Since` and
/// `If-Unmodified-Since` on a read, as S3 orders them.
fn check_conditions(
    object: &ObjectMeta,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let secs = |t: &Timestamp| -> std::time::SystemTime {
        let t: time::OffsetDateTime = t.clone().into();
        UNIX_EPOCH + Duration::from_secs(u64::try_from(t.unix_timestamp()).unwrap_or(0))
    };
    // Dates in HTTP have whole seconds.
    let mtime_secs = UNIX_EPOCH + Duration::from_secs(object.mtime_ms / 1000);
    if let Some(condition) = if_match {
        if !etag_matches(condition, &object.etag) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(since) = if_unmodified_since
        && mtime_secs > secs(since)
    {
        return Err(s3_error!(PreconditionFailed));
    }
    if let Some(condition) = if_none_match {
        if etag_matches(condition, &object.etag) {
            return Err(S3Error::new(S3ErrorCode::NotModified));
        }
    } else if let Some(since) = if_modified_since
        && mtime_secs <= secs(since)
    {
        return Err(S3Error::new(S3ErrorCode::NotModified));
    }
    Ok(())
}

/// Standard base64 (Content-MD5) to bytes.
pub(crate) fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let text = text.trim().trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_s3s_rules() {
        for good in [
            "abc",
            "my-bucket.1",
            "a23456789012345678901234567890123456789012345678901234567890123",
        ] {
            assert!(valid_bucket_name(good), "{good}");
        }
        for bad in [
            "ab",
            "ABC",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "a.-b",
            "192.168.1.1",
            "xn--abc",
            "a234567890123456789012345678901234567890123456789012345678901234",
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_round_trip_and_junk_is_refused() {
        for marker in [Marker::Key("a/b c".into()), Marker::Prefix("dir/".into())] {
            assert_eq!(Marker::parse(&marker.token()).expect("parses"), marker);
        }
        for junk in ["", "zz", "6", "7861"] {
            assert!(Marker::parse(junk).is_err(), "{junk}");
        }
    }

    #[test]
    fn below_sorts_under_every_key_with_the_prefix() {
        for prefix in [&b"a"[..], b"dir/", b"x\x00", b"\x00"] {
            let low = below(prefix);
            assert!(low.as_slice() < prefix, "{prefix:?}");
            let mut longer = prefix.to_vec();
            longer.push(0);
            assert!(low < longer);
        }
    }

    #[test]
    fn base64_and_url_encoding() {
        assert_eq!(decode_base64("AQID").expect("valid"), vec![1, 2, 3]);
        assert_eq!(decode_base64("AQI=").expect("valid"), vec![1, 2]);
        assert!(decode_base64("A?ID").is_none());
        assert_eq!(url_encode("a b/ç+"), "a%20b/%C3%A7%2B");
    }

    #[test]
    fn copy_ranges_and_part_numbers_follow_s3() {
        assert_eq!(copy_range("bytes=0-9", 10).expect("valid"), (0, 10));
        assert_eq!(copy_range("bytes=5-5", 10).expect("valid"), (5, 1));
        for (text, code) in [
            ("bytes=0-10", "InvalidRange"),
            ("bytes=6-5", "InvalidRange"),
            ("bytes=-5", "InvalidArgument"),
            ("0-5", "InvalidArgument"),
            ("bytes=a-5", "InvalidArgument"),
        ] {
            let e = copy_range(text, 10).expect_err(text);
            assert_eq!(e.code().as_str(), code, "{text}");
        }
        let part = |size| meta::PartRef {
            object: "p".into(),
            size,
            piece_bytes: 0,
        };
        let multipart = ObjectMeta {
            size: 12,
            etag: "00-3".into(),
            parts: vec![part(5), part(5), part(2)],
            ..ObjectMeta::default()
        };
        assert_eq!(parts_count(&multipart), Some(3));
        assert_eq!(part_range(&multipart, 2).expect("part 2"), 5..10);
        assert_eq!(part_range(&multipart, 3).expect("part 3"), 10..12);
        let past = part_range(&multipart, 4).expect_err("part 4");
        assert_eq!(
            past.status_code(),
            Some(http::StatusCode::RANGE_NOT_SATISFIABLE)
        );
        assert_eq!(
            part_range(&multipart, 0)
                .expect_err("part 0")
                .code()
                .as_str(),
            "InvalidArgument"
        );
        let plain = ObjectMeta {
            size: 7,
            etag: "0123".into(),
            ..ObjectMeta::default()
        };
        assert_eq!(parts_count(&plain), None);
        assert_eq!(part_range(&plain, 1).expect("part 1"), 0..7);
        assert!(part_range(&plain, 2).is_err());
    }
}

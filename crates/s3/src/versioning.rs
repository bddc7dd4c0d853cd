//! Versioning: a bucket's keys keep their older versions.
//!
//! The latest version of a key is always its head object (`ID/KEY`), so a
//! read without a version id costs what it costs in an unversioned bucket.
//! A write to a key in a versioned bucket first copies the head, as
//! stored, to an *archive* object (`ID.v/RANDOM`: the head's metadata and
//! its bytes, or a large object's manifest, whose tail objects it keeps),
//! then writes the new head guarded on the one it copied, then sets the
//! key's entry and the archived version's entry in the key's index shard
//! in one write. An older version's entry is `0xFE v/ KEY 0x00 SEQ`
//! ([`meta::version_key`]): after every key, so listings of keys never
//! read them, and newest first within a key.
//!
//! Each version carries `seq`, one more than the version it replaced on
//! the head, so a key's versions order by it whichever gateway wrote them
//! and whatever their clocks say. A delete marker is a head with no bytes
//! and `delete_marker` set. While versioning is suspended a write makes
//! the `null` version, which replaces the key's null version wherever it
//! is. Deleting the latest version by id copies the newest older version
//! back to the head.
//!
//! A gateway that dies anywhere in this leaves an intent naming the
//! archive and the archives it removes; recovery ([`Gateway::repair_versions`])
//! makes the key's entries agree with its head: an archive of the version
//! the head still holds goes, one the head moved past is indexed, an
//! entry of the head's own version goes, and a `null` head leaves no
//! older `null` version.

use crate::gateway::{Gateway, client_error, internal};
use crate::index::Update;
use crate::intent::{Intent, Pending, entry_of};
use crate::meta::{self, BucketRecord, HEAD_XATTR, IndexEntry, META_POOL, NULL_VERSION};
use crate::meta::{ObjectMeta, PartRef};
use bytes::Bytes;
use cairn_client::{ClientError, Guard, WriteOp};
use s3s::dto::ETagCondition;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

/// Tries of a versioned write whose head changed under it.
const TRIES: usize = 8;

/// A version a request names, found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The object holding it: the key's head or an archive.
    pub object: Vec<u8>,
    pub entry: IndexEntry,
    /// Its index entry as stored if it is an older version (`None`: the
    /// key's latest, at its head).
    pub archived: Option<Archived>,
}

/// An older version's index entry: its key in the shard, the entry, and
/// its bytes as stored (so a change can be guarded on them).
#[derive(Clone, Debug)]
pub(crate) struct Archived {
    pub index_key: Bytes,
    pub entry: IndexEntry,
    pub raw: Bytes,
}

/// What a recovery does to a key's older versions: index updates (with
/// the guards they need) made with the intent's removal, then objects
/// and runs removed once that write landed, and the runs to keep.
#[derive(Debug, Default)]
pub(crate) struct Repair {
    pub keep: Vec<PartRef>,
    pub updates: Vec<Update>,
    pub guards: Vec<Guard>,
    pub remove_objects: Vec<String>,
    pub remove_runs: Vec<PartRef>,
}

/// The version id a request names, checked: `null`, or one this gateway
/// makes (32 hex digits). `None` for the null version.
pub(crate) fn parse_version_id(text: &str) -> S3Result<Option<String>> {
    if text == NULL_VERSION {
        return Ok(None);
    }
    if text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Some(text.to_ascii_lowercase()));
    }
    Err(s3_error!(InvalidArgument, "Invalid version id specified"))
}

/// The version id S3 shows for `object` in `bucket`: none in a bucket
/// that was never versioned.
pub(crate) fn shown_version(bucket: &BucketRecord, object: &ObjectMeta) -> Option<String> {
    bucket.versioned().then(|| {
        object
            .version_id
            .clone()
            .unwrap_or_else(|| NULL_VERSION.into())
    })
}

/// The answer to a read of a delete marker: `NoSuchKey` for the latest
/// version of a key, `MethodNotAllowed` for one named by id, each with
/// the marker's headers.
pub(crate) fn delete_marker_error(code: S3ErrorCode, version: &str) -> S3Error {
    let mut error = S3Error::new(code);
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(value) = http::HeaderValue::from_str(version) {
        headers.insert("x-amz-version-id", value);
    }
    error.set_headers(headers);
    error
}

impl Gateway {
    /// The older versions of `key`, newest first.
    ///
    /// # Errors
    /// The cluster's error, or an entry that does not decode.
    pub(crate) async fn archived(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Vec<Archived>> {
        let shard = meta::index_object(&bucket.id, key);
        let entries = meta::omap_prefix(self.client(), &shard, &meta::version_key_prefix(key))
            .await
            .map_err(client_error)?;
        let mut out = Vec::new();
        for (index_key, raw) in entries {
            // A longer key with a NUL after `key` shares the prefix.
            if meta::parse_version_key(&index_key).is_none_or(|(of, _)| of != key) {
                continue;
            }
            let entry: IndexEntry =
                meta::decode(&format!("version entry of {key}"), &raw).map_err(internal)?;
            out.push(Archived {
                index_key,
                entry,
                raw,
            });
        }
        Ok(out)
    }

    /// The intents of operations in flight on `key`.
    ///
    /// # Errors
    /// The cluster's error, or an intent that does not decode.
    pub(crate) async fn key_intents(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Vec<Intent>> {
        let shard = meta::index_object(&bucket.id, key);
        let mut prefix = crate::intent::INTENT_PREFIX.to_vec();
        prefix.extend_from_slice(key.as_bytes());
        prefix.push(0);
        let entries = meta::omap_prefix(self.client(), &shard, &prefix)
            .await
            .map_err(client_error)?;
        let mut out = Vec::new();
        for (_, value) in entries {
            let intent: Intent = meta::decode("intent", &value).map_err(internal)?;
            if intent.key == key {
                out.push(intent);
            }
        }
        Ok(out)
    }

    /// Applies `updates` to `key`'s index shard only if `guards` hold:
    /// `false` if one did not.
    async fn guarded_index_update(
        &self,
        bucket: &BucketRecord,
        key: &str,
        guards: Vec<Guard>,
        updates: &[Update],
    ) -> S3Result<bool> {
        let mut op = WriteOp::new();
        for guard in guards {
            op = op.guard(guard);
        }
        for update in updates {
            op = match update {
                Update::Set(k, v) => op.omap_set([(&k[..], &v[..])]),
                Update::Remove(k) => op.omap_remove([&k[..]]),
            };
        }
        match self
            .client()
            .operate(META_POOL, &meta::index_object(&bucket.id, key), op)
            .await
        {
            Ok(_) => Ok(true),
            Err(ClientError::CompareFailed { .. }) => Ok(false),
            Err(e) => Err(client_error(e)),
        }
    }

    /// The version `version_id` of `key` (see [`parse_version_id`]).
    ///
    /// # Errors
    /// `NoSuchVersion`, `InvalidArgument` for an id that cannot be one,
    /// or the cluster's error.
    pub(crate) async fn find_version(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version_id: &str,
    ) -> S3Result<Found> {
        let want = parse_version_id(version_id)?;
        // Twice: a version can move from the head to an archive between
        // the two reads.
        for _ in 0..2 {
            if let Some((head, _)) = self.head_raw(bucket, key).await?
                && head.version_id == want
            {
                return Ok(Found {
                    object: meta::head_name(&bucket.id, key),
                    entry: entry_of(&head),
                    archived: None,
                });
            }
            for older in self.archived(bucket, key).await? {
                if older.entry.version_id == want
                    && let Some(object) = &older.entry.object
                {
                    return Ok(Found {
                        object: object.clone().into_bytes(),
                        entry: older.entry.clone(),
                        archived: Some(older),
                    });
                }
            }
        }
        Err(s3_error!(NoSuchVersion))
    }

    /// The runs of every version of `key` (the head's and its older
    /// versions'): what must stay while they stand.
    pub(crate) async fn named_parts(
        &self,
        bucket: &BucketRecord,
        key: &str,
    ) -> S3Result<Vec<PartRef>> {
        let mut out = self
            .head_of(bucket, key)
            .await?
            .map(|head| head.parts)
            .unwrap_or_default();
        if bucket.versioned() {
            for older in self.archived(bucket, key).await? {
                out.extend(self.archive_parts(bucket, key, &older.entry).await?);
            }
        }
        Ok(out)
    }

    /// The runs of an archived version (none if its archive is gone).
    async fn archive_parts(
        &self,
        bucket: &BucketRecord,
        key: &str,
        entry: &IndexEntry,
    ) -> S3Result<Vec<PartRef>> {
        let Some(object) = &entry.object else {
            return Ok(Vec::new());
        };
        Ok(self
            .head_in(bucket, key, object.as_bytes(), true)
            .await?
            .map(|(archived, _)| archived.parts)
            .unwrap_or_default())
    }

    async fn remove_object(&self, bucket: &BucketRecord, name: &[u8]) -> S3Result<()> {
        match self.client().remove(&bucket.pool, name).await {
            Ok(()) | Err(ClientError::NotFound) => Ok(()),
            Err(e) => Err(client_error(e)),
        }
    }

    /// Writes `object_meta` (and `data`) as the new latest version of
    /// `key` in a versioned bucket: the current head archived (or, for a
    /// `null` head while versioning is suspended, replaced), any older
    /// `null` version removed while suspended. See the module's comment.
    pub(crate) async fn store_versioned(
        &self,
        bucket: &BucketRecord,
        key: &str,
        data: Bytes,
        object_meta: &ObjectMeta,
        (if_none_match, if_match): (Option<&ETagCondition>, Option<&ETagCondition>),
        mut pending: Pending,
    ) -> S3Result<ObjectMeta> {
        let head = meta::head_name(&bucket.id, key);
        let enabled = bucket.versioning_enabled();
        let conditional = if_none_match.is_some() || if_match.is_some();
        for _ in 0..TRIES {
            let current = self.stored_version(bucket, key, &head, None).await?;
            let live = current.as_ref().filter(|(old, ..)| !old.delete_marker);
            if if_none_match.is_some_and(|c| matches!(c, ETagCondition::Any)) && live.is_some() {
                return Err(s3_error!(PreconditionFailed));
            }
            if let Some(condition) = if_match
                && !live.is_some_and(|(old, ..)| crate::gateway::etag_matches(condition, &old.etag))
            {
                return Err(s3_error!(PreconditionFailed));
            }
            let mut new = object_meta.clone();
            new.seq = current.as_ref().map_or(1, |(old, ..)| old.seq + 1);
            new.version_id = enabled.then(meta::new_version_id);
            // The current version: archived, or (the null version while
            // suspended) replaced.
            let mut replacing = Vec::new();
            let mut archive = None;
            if let Some((old, ..)) = &current {
                if old.version_id.is_some() || enabled {
                    archive = Some(meta::archive_name(&bucket.id));
                } else {
                    replacing.extend(old.parts.iter().cloned());
                }
            }
            // While suspended, the null version wherever it is.
            let mut discard = Vec::new();
            let mut more = Vec::new();
            if !enabled {
                for older in self.archived(bucket, key).await? {
                    if older.entry.version_id.is_none()
                        && let Some(object) = &older.entry.object
                    {
                        replacing.extend(self.archive_parts(bucket, key, &older.entry).await?);
                        discard.push(object.clone());
                        more.push(Update::Remove(older.index_key));
                    }
                }
            }
            self.versions_changing(
                &mut pending,
                archive.clone(),
                discard.clone(),
                replacing.clone(),
            )
            .await?;
            let mut op = WriteOp::new();
            match &current {
                Some((old, raw, bytes)) => {
                    if let Some(name) = &archive {
                        let copy = WriteOp::new()
                            .write_full(bytes.clone())
                            .set_xattr(HEAD_XATTR, raw);
                        self.client()
                            .operate(&bucket.pool, name.as_bytes(), copy)
                            .await
                            .map_err(client_error)?;
                        let mut entry = entry_of(old);
                        entry.object = Some(name.clone());
                        more.push(Update::Set(
                            meta::version_key(key, old.seq),
                            meta::encode(&entry),
                        ));
                    }
                    op = op.guard(Guard::Xattr {
                        name: Bytes::from_static(HEAD_XATTR),
                        value: Some(raw.clone()),
                    });
                }
                None => op = op.guard(Guard::NotExists),
            }
            if archive.is_some() {
                crate::crash_point("versioned-put-archived");
            }
            let (bytes, stored) = Self::head_contents(data.clone(), &new);
            let op = op
                .write_full(bytes)
                .set_xattr(HEAD_XATTR, &meta::encode(&stored));
            match self.client().operate(&bucket.pool, &head, op).await {
                Ok(_) => {}
                Err(ClientError::CompareFailed { .. }) => {
                    // Another write got there first: this archive is a
                    // copy of a version it archived or replaced.
                    if let Some(name) = &archive {
                        self.remove_object(bucket, name.as_bytes()).await?;
                    }
                    if conditional {
                        return Err(s3_error!(PreconditionFailed));
                    }
                    continue;
                }
                Err(e) => return Err(client_error(e)),
            }
            if archive.is_some() {
                crate::crash_point("versioned-put-head-written");
            }
            self.remove_parts(bucket, &replacing, &new).await;
            for name in &discard {
                self.remove_object(bucket, name.as_bytes()).await?;
            }
            self.finish_with(pending, Some(Some(entry_of(&new))), more)
                .await?;
            return Ok(new);
        }
        Err(s3_error!(SlowDown, "the object changed under every write"))
    }

    /// Removes version `version_id` of `key` for good (the latest: the
    /// newest older version becomes the latest). Answers the version
    /// removed (`None`: there was none, which S3 answers as done).
    pub(crate) async fn delete_version(
        &self,
        bucket: &BucketRecord,
        key: &str,
        version_id: &str,
    ) -> S3Result<Option<IndexEntry>> {
        let head = meta::head_name(&bucket.id, key);
        for attempt in 0..TRIES {
            if attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20 << attempt.min(5))).await;
            }
            let found = match self.find_version(bucket, key, version_id).await {
                Ok(found) => found,
                Err(e) if e.code() == &S3ErrorCode::NoSuchVersion => {
                    // It may be on its way from the head to an archive
                    // whose entry is not written yet: look again then.
                    if self
                        .key_intents(bucket, key)
                        .await?
                        .iter()
                        .any(|i| i.archive.is_some())
                    {
                        continue;
                    }
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            if let Some(older) = &found.archived {
                let parts = self.archive_parts(bucket, key, &found.entry).await?;
                let mut pending = self.begin(bucket, key, Vec::new(), None).await?;
                let name = String::from_utf8_lossy(&found.object).into_owned();
                self.versions_changing(&mut pending, None, vec![name], parts.clone())
                    .await?;
                // The entry first, and only as read, so no reader finds it
                // without its archive.
                let guard = Guard::OmapKey {
                    key: older.index_key.clone(),
                    value: Some(older.raw.clone()),
                };
                let removal = [Update::Remove(older.index_key.clone())];
                if !self
                    .guarded_index_update(bucket, key, vec![guard], &removal)
                    .await?
                {
                    self.finish(pending, None).await?;
                    continue;
                }
                self.remove_object(bucket, &found.object).await?;
                // A promotion may have copied this version to the head
                // meanwhile: it then lives on as the latest (deleted as
                // such on the next try), and its runs stay.
                if let Some((now, _)) = self.head_raw(bucket, key).await?
                    && now.seq == found.entry.seq
                    && now.version_id == found.entry.version_id
                {
                    self.finish(pending, None).await?;
                    continue;
                }
                self.remove_parts(bucket, &parts, &ObjectMeta::default())
                    .await;
                self.finish(pending, None).await?;
                return Ok(Some(found.entry));
            }
            let Some((current, raw)) = self.head(bucket, key, true).await? else {
                continue;
            };
            if current.seq != found.entry.seq || current.version_id != found.entry.version_id {
                continue;
            }
            let archived = self.archived(bucket, key).await?;
            // An older version being archived now (its entry not yet
            // written) must not be passed over: wait for it. (An archive
            // of this very version is a write racing this delete; the
            // guarded head write decides which wins.)
            let mut in_transit = false;
            for intent in self.key_intents(bucket, key).await? {
                let Some(name) = intent.archive else { continue };
                if let Some((moving, _)) = self.head_in(bucket, key, name.as_bytes(), false).await?
                    && moving.seq < current.seq
                    && !archived.iter().any(|a| a.entry.seq == moving.seq)
                {
                    in_transit = true;
                }
            }
            if in_transit {
                continue;
            }
            let newest = archived.into_iter().next();
            let mut pending = self.begin(bucket, key, Vec::new(), None).await?;
            let discard: Vec<String> = newest
                .iter()
                .filter_map(|older| older.entry.object.clone())
                .collect();
            self.versions_changing(&mut pending, None, discard.clone(), current.parts.clone())
                .await?;
            let guard = Guard::Xattr {
                name: Bytes::from_static(HEAD_XATTR),
                value: Some(raw),
            };
            // The newest older version, copied back to the head as stored.
            let promoted = match newest.as_ref().and_then(|older| older.entry.object.clone()) {
                Some(name) => {
                    let Some((promoted, promoted_raw, bytes)) = self
                        .stored_version(bucket, key, name.as_bytes(), None)
                        .await?
                    else {
                        // Removed by a concurrent delete of that version.
                        self.finish(pending, None).await?;
                        continue;
                    };
                    let op = WriteOp::new()
                        .guard(guard)
                        .write_full(bytes)
                        .set_xattr(HEAD_XATTR, &promoted_raw);
                    match self.client().operate(&bucket.pool, &head, op).await {
                        Ok(_) => {}
                        Err(ClientError::CompareFailed { .. } | ClientError::NotFound) => {
                            self.finish(pending, None).await?;
                            continue;
                        }
                        Err(e) => return Err(client_error(e)),
                    }
                    Some(promoted)
                }
                None => {
                    let op = WriteOp::new().guard(guard).remove();
                    match self.client().operate(&bucket.pool, &head, op).await {
                        Ok(_) => {}
                        Err(ClientError::CompareFailed { .. } | ClientError::NotFound) => {
                            self.finish(pending, None).await?;
                            continue;
                        }
                        Err(e) => return Err(client_error(e)),
                    }
                    None
                }
            };
            crate::crash_point("version-delete-promoted");
            // The promoted version's entry goes only as read: a write may
            // already have archived the new head again under a new one.
            if let Some(older) = &newest {
                let guard = Guard::OmapKey {
                    key: older.index_key.clone(),
                    value: Some(older.raw.clone()),
                };
                let removal = [Update::Remove(older.index_key.clone())];
                self.guarded_index_update(bucket, key, vec![guard], &removal)
                    .await?;
            }
            let standing = promoted.clone().unwrap_or_default();
            self.remove_parts(bucket, &current.parts, &standing).await;
            for name in &discard {
                self.remove_object(bucket, name.as_bytes()).await?;
            }
            // The key's entry from the promoted version, unless a write
            // replaced it meanwhile (that write sets the entry).
            let still = match self.head_raw(bucket, key).await? {
                Some((now, _)) => promoted
                    .as_ref()
                    .is_some_and(|p| p.seq == now.seq && p.version_id == now.version_id),
                None => promoted.is_none(),
            };
            let entry = still.then(|| promoted.as_ref().map(entry_of));
            self.finish(pending, entry).await?;
            return Ok(Some(found.entry));
        }
        Err(s3_error!(SlowDown, "the object changed under every delete"))
    }

    /// Makes the older versions of an intent's key agree with its head,
    /// from a snapshot (`standing`, the head; `archived`, the older
    /// versions read while the head stayed the same), after the operation
    /// stopped anywhere: archives and entries of the head's own version
    /// go, and older `null` versions under a `null` head, and the
    /// archives the operation removed; the archive it made is indexed if
    /// the head moved past it. Index changes are guarded on the entries
    /// read, and nothing is removed before they land (see [`Repair`]).
    ///
    /// # Errors
    /// The cluster's error.
    pub(crate) async fn repair_versions(
        &self,
        bucket: &BucketRecord,
        intent: &Intent,
        standing: Option<&ObjectMeta>,
        archived: Vec<Archived>,
    ) -> S3Result<Repair> {
        let key = &intent.key;
        let is_head = |seq: u64, version: &Option<String>| {
            standing.is_some_and(|h| h.seq == seq && &h.version_id == version)
        };
        let head_null = standing.is_some_and(|h| h.version_id.is_none());
        let mut repair = Repair::default();
        let mut named: Vec<String> = Vec::new();
        let mut seqs: Vec<u64> = Vec::new();
        for older in archived {
            let object = older.entry.object.clone().unwrap_or_default();
            let copy_of_head = is_head(older.entry.seq, &older.entry.version_id);
            let null_under_null = head_null && older.entry.version_id.is_none();
            if copy_of_head || null_under_null {
                repair.guards.push(Guard::OmapKey {
                    key: older.index_key.clone(),
                    value: Some(older.raw.clone()),
                });
                repair.updates.push(Update::Remove(older.index_key));
                repair.remove_objects.push(object);
                // A copy of the head shares its runs; a replaced null
                // version's are its own.
                if null_under_null && !copy_of_head {
                    repair
                        .remove_runs
                        .extend(self.archive_parts(bucket, key, &older.entry).await?);
                }
                continue;
            }
            repair
                .keep
                .extend(self.archive_parts(bucket, key, &older.entry).await?);
            named.push(object);
            seqs.push(older.entry.seq);
        }
        if let Some(name) = &intent.archive
            && !named.contains(name)
            && let Some((made, _)) = self.head_in(bucket, key, name.as_bytes(), true).await?
        {
            let superseded = is_head(made.seq, &made.version_id)
                || (head_null && made.version_id.is_none())
                || seqs.contains(&made.seq);
            if superseded {
                repair.remove_objects.push(name.clone());
            } else {
                let index_key = meta::version_key(key, made.seq);
                let mut entry = entry_of(&made);
                entry.object = Some(name.clone());
                repair.guards.push(Guard::OmapKey {
                    key: index_key.clone(),
                    value: None,
                });
                repair
                    .updates
                    .push(Update::Set(index_key, meta::encode(&entry)));
                repair.keep.extend(made.parts);
                named.push(name.clone());
            }
        }
        for name in &intent.discard {
            if !named.contains(name) {
                repair.remove_objects.push(name.clone());
            }
        }
        Ok(repair)
    }

    /// Sets a bucket's versioning to `Enabled` or `Suspended`, guarded
    /// on the record read.
    pub(crate) async fn set_versioning(
        &self,
        name: &str,
        user: &str,
        status: &str,
    ) -> S3Result<()> {
        if status != meta::VERSIONING_ENABLED && status != meta::VERSIONING_SUSPENDED {
            return Err(s3_error!(
                MalformedXML,
                "The versioning status must be Enabled or Suspended"
            ));
        }
        // Suspending a bucket never versioned changes nothing.
        self.change_bucket(name, user, |bucket| {
            if bucket.versioning.is_some() || status == meta::VERSIONING_ENABLED {
                bucket.versioning = Some(status.to_owned());
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_are_checked_and_null_is_the_null_version() {
        assert_eq!(parse_version_id("null").expect("null"), None);
        let id = meta::new_version_id();
        assert_eq!(parse_version_id(&id).expect("made here"), Some(id));
        for bad in ["", "nul", "xyz", &"g".repeat(32), &"a".repeat(33)] {
            assert_eq!(
                parse_version_id(bad).expect_err(bad).code(),
                &S3ErrorCode::InvalidArgument
            );
        }
    }

    #[test]
    fn version_keys_sort_newest_first_within_a_key_and_by_key() {
        let a1 = meta::version_key("a", 1);
        let a2 = meta::version_key("a", 2);
        let a_slash = meta::version_key("a/", 1);
        let b = meta::version_key("b", 7);
        assert!(a2 < a1, "the newer version sorts first");
        assert!(a1 < a_slash && a_slash < b, "keys in S3's order");
        assert!(
            a1.as_ref() > b"\xf4\x8f\xbf\xbf".as_slice(),
            "after every key"
        );
        assert!(
            b.as_ref() < crate::intent::INTENT_PREFIX,
            "before every intent"
        );
        assert_eq!(meta::parse_version_key(&a2), Some(("a".into(), 2)));
        assert_eq!(meta::parse_version_key(&a_slash), Some(("a/".into(), 1)));
        let with_nul = meta::version_key("x\0y", u64::MAX - 1);
        assert_eq!(
            meta::parse_version_key(&with_nul),
            Some(("x\0y".into(), u64::MAX - 1))
        );
        assert_eq!(meta::parse_version_key(b"\xfev/short"), None);
    }
}

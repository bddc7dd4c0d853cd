//! Intents: how a gateway that dies mid-operation leaves nothing wrong
//! behind for long.
//!
//! Before an operation writes anything for a key (pieces, a head, a part),
//! it records an intent in the key's index shard, under a key no S3 key
//! can have (`0xFF i/ KEY 0x00 TAG`; listings stop at `0xFF`). The intent
//! names the tail objects the operation writes and those of the version
//! it replaces. The operation's last step sets the key's index entry and
//! removes the intent in one write. An intent left behind (the request's
//! future dropped, an error, the gateway killed) is *recovered*: the
//! key's head is read, and
//! - pieces the operation wrote that the head does not name (and no live
//!   upload's part records name) are removed;
//! - pieces of the replaced version the head no longer names are removed;
//! - the index entry is set from the head, or removed if there is none.
//!
//! Recovery depends only on what the head says, so it is right whether
//! the operation got through or not, and running it twice changes
//! nothing. A gateway recovers its own dropped operations after
//! [`RECOVER_DELAY`]; `cairn s3 gc` (and every gateway in the background)
//! recovers the intents of gateways that stopped heartbeating.

use crate::gateway::{Gateway, client_error, internal};
use crate::index::Update;
use crate::meta::{self, BucketRecord, IndexEntry, META_POOL, ObjectMeta, PartRef};
use bytes::Bytes;
use cairn_client::{ClientError, Guard, WriteOp};
use s3s::{S3Result, s3_error};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The first bytes of every intent key in an index shard.
pub const INTENT_PREFIX: &[u8] = b"\xffi/";
/// How long a gateway waits before recovering an operation whose request
/// ended without finishing it (its last piece write may still land).
pub const RECOVER_DELAY: Duration = Duration::from_secs(30);
/// The object of the gateways' heartbeats: omap `ID` → last beat (ms).
pub const GATEWAYS_OBJECT: &[u8] = b"gateways";
/// How often a gateway beats.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);
/// Replaced runs recorded in one intent at most (a larger list would not
/// fit an omap value); a delete of an object with more risks leaving
/// pieces only if its gateway dies mid-delete.
pub const REPLACING_RUNS_MAX: usize = 4000;

/// An operation in flight on one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub key: String,
    /// The gateway running it.
    pub gateway: String,
    pub since_ms: u64,
    /// Prefixes of the runs of pieces it writes.
    #[serde(default)]
    pub writing: Vec<String>,
    /// The runs of the version it replaces or deletes.
    #[serde(default)]
    pub replacing: Vec<PartRef>,
    /// The multipart upload it belongs to: a part upload, a completion or
    /// an abort. While the upload lives, its recorded parts stay; once it
    /// is gone, its recorded parts no head names go too.
    #[serde(default)]
    pub upload: Option<String>,
    /// The object the replaced version is archived to (a versioned
    /// bucket): kept and indexed if the head moved on, else removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// Archived versions it removes: removed unless an entry still names
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discard: Vec<String>,
}

/// The intent key of operation `tag` on `key`.
#[must_use]
pub fn intent_key(key: &str, tag: &str) -> Bytes {
    let mut out = INTENT_PREFIX.to_vec();
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out.extend_from_slice(tag.as_bytes());
    Bytes::from(out)
}

/// The index entry a head stands for.
#[must_use]
pub fn entry_of(object: &ObjectMeta) -> IndexEntry {
    IndexEntry {
        size: object.size,
        etag: object.etag.clone(),
        mtime_ms: object.mtime_ms,
        version_id: object.version_id.clone(),
        delete_marker: object.delete_marker,
        seq: object.seq,
        object: None,
    }
}

/// A recorded intent. Finish it with [`Gateway::finish`]; dropped
/// unfinished, it is recovered after [`RECOVER_DELAY`].
#[derive(Debug)]
pub struct Pending {
    gateway: Gateway,
    bucket: BucketRecord,
    shard: Vec<u8>,
    intent_key: Bytes,
    intent: Intent,
    done: bool,
    /// The key's head as read while the intent was written
    /// ([`Gateway::begin_reading_head`]), for the first try of the write
    /// (which is guarded on it).
    pub(crate) head: Option<Option<(ObjectMeta, Bytes)>>,
}

impl Pending {
    #[must_use]
    pub fn intent(&self) -> &Intent {
        &self.intent
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let gateway = self.gateway.clone();
        let bucket = self.bucket.clone();
        let intent_key = self.intent_key.clone();
        let intent = self.intent.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(RECOVER_DELAY).await;
                if let Err(error) = gateway.recover(&bucket, &intent_key, &intent).await {
                    tracing::warn!(key = %intent.key, %error, "recovery of an unfinished operation failed; the collector will retry");
                }
            });
        }
    }
}

impl Gateway {
    /// Records an intent on `key` before anything is written for it.
    pub(crate) async fn begin(
        &self,
        bucket: &BucketRecord,
        key: &str,
        writing: Vec<String>,
        upload: Option<String>,
    ) -> S3Result<Pending> {
        let intent = Intent {
            key: key.to_owned(),
            gateway: self.id().to_owned(),
            since_ms: meta::now_ms(),
            writing,
            replacing: Vec::new(),
            upload,
            archive: None,
            discard: Vec::new(),
        };
        let pending = Pending {
            gateway: self.clone(),
            bucket: bucket.clone(),
            shard: meta::index_object(&bucket.id, key),
            intent_key: intent_key(key, &meta::random_hex(8)),
            intent,
            done: false,
            head: None,
        };
        // If this fails the intent may still have landed: dropping the
        // pending recovers it, which is harmless either way.
        self.write_intent(&pending).await?;
        Ok(pending)
    }

    /// [`Gateway::begin`], reading the key's head (with its parts) at the
    /// same time: a write guarded on the head it read may read it before
    /// its intent lands, and so waits for one round trip, not two.
    pub(crate) async fn begin_reading_head(
        &self,
        bucket: &BucketRecord,
        key: &str,
        writing: Vec<String>,
    ) -> S3Result<Pending> {
        let (pending, head) = tokio::join!(
            self.begin(bucket, key, writing, None),
            self.head(bucket, key, true)
        );
        let mut pending = pending?;
        pending.head = Some(head?);
        Ok(pending)
    }

    /// Adds the runs of the version about to be replaced to the intent.
    pub(crate) async fn replacing(&self, pending: &mut Pending, runs: &[PartRef]) -> S3Result<()> {
        if runs.is_empty() || runs.len() > REPLACING_RUNS_MAX {
            return Ok(());
        }
        pending.intent.replacing = runs.to_vec();
        self.write_intent(pending).await
    }

    /// Records what a versioned write does to older versions: the
    /// object it archives the current version to, the archived versions
    /// it removes, and the runs no version will name after it.
    pub(crate) async fn versions_changing(
        &self,
        pending: &mut Pending,
        archive: Option<String>,
        discard: Vec<String>,
        replacing: Vec<PartRef>,
    ) -> S3Result<()> {
        pending.intent.archive = archive;
        pending.intent.discard = discard;
        pending.intent.replacing = if replacing.len() > REPLACING_RUNS_MAX {
            Vec::new()
        } else {
            replacing
        };
        self.write_intent(pending).await
    }

    async fn write_intent(&self, pending: &Pending) -> S3Result<()> {
        let update = Update::Set(pending.intent_key.clone(), meta::encode(&pending.intent));
        self.index_writer()
            .apply(pending.shard.clone(), vec![update])
            .await
            .map_err(client_error)
    }

    /// Ends an operation: the key's index entry (`None`: left as it is)
    /// and the intent's removal, in one write.
    pub(crate) async fn finish(
        &self,
        pending: Pending,
        entry: Option<Option<IndexEntry>>,
    ) -> S3Result<()> {
        self.finish_with(pending, entry, Vec::new()).await
    }

    /// [`Gateway::finish`], with more updates to the key's shard (its
    /// older versions' entries) in the same write.
    pub(crate) async fn finish_with(
        &self,
        mut pending: Pending,
        entry: Option<Option<IndexEntry>>,
        more: Vec<Update>,
    ) -> S3Result<()> {
        let key = Bytes::copy_from_slice(pending.intent.key.as_bytes());
        let mut updates = Vec::with_capacity(2 + more.len());
        match entry {
            Some(Some(entry)) => updates.push(Update::Set(key, meta::encode(&entry))),
            Some(None) => updates.push(Update::Remove(key)),
            None => {}
        }
        updates.extend(more);
        updates.push(Update::Remove(pending.intent_key.clone()));
        self.index_writer()
            .apply(pending.shard.clone(), updates)
            .await
            .map_err(client_error)?;
        pending.done = true;
        Ok(())
    }

    /// Recovers an operation that may have stopped anywhere (see the
    /// module's comment), then removes its intent.
    ///
    /// # Errors
    /// The cluster's error; the intent stays for another try.
    pub async fn recover(
        &self,
        bucket: &BucketRecord,
        intent_key: &Bytes,
        intent: &Intent,
    ) -> S3Result<()> {
        let versions = bucket.versioned() || intent.archive.is_some() || !intent.discard.is_empty();
        // A snapshot: the head, the older versions, and the head again, the
        // same (so no version moved between head and archive meanwhile).
        let mut snapshot = None;
        for _ in 0..8 {
            let first = self.head(bucket, &intent.key, true).await?;
            let archived = if versions {
                self.archived(bucket, &intent.key).await?
            } else {
                Vec::new()
            };
            let again = self.head_raw(bucket, &intent.key).await?;
            if first.as_ref().map(|(_, raw)| raw) == again.as_ref().map(|(_, raw)| raw) {
                snapshot = Some((first.map(|(object, _)| object), archived));
                break;
            }
        }
        let Some((standing, archived)) = snapshot else {
            return Err(s3_error!(
                SlowDown,
                "the key changed under every recovery read"
            ));
        };
        let mut keep = standing
            .as_ref()
            .map(|object| object.parts.clone())
            .unwrap_or_default();
        // Older versions: made to agree with the head, and their runs kept.
        let repair = if versions {
            self.repair_versions(bucket, intent, standing.as_ref(), archived)
                .await?
        } else {
            crate::versioning::Repair::default()
        };
        keep.extend(repair.keep.iter().cloned());
        if let Some(upload_id) = &intent.upload {
            let recorded = self.upload_runs(upload_id).await?;
            if self.upload_exists(bucket, &intent.key, upload_id).await? {
                keep.extend(recorded);
            } else {
                let standing_parts = ObjectMeta {
                    parts: keep.clone(),
                    ..ObjectMeta::default()
                };
                self.remove_parts(bucket, &recorded, &standing_parts).await;
                match self
                    .client()
                    .remove(META_POOL, &meta::parts_object(upload_id))
                    .await
                {
                    Ok(()) | Err(ClientError::NotFound) => {}
                    Err(e) => return Err(client_error(e)),
                }
            }
        }
        for prefix in &intent.writing {
            if !keep.iter().any(|run| &run.object == prefix) {
                self.remove_run(bucket, prefix).await?;
            }
        }
        let kept = ObjectMeta {
            parts: keep,
            ..ObjectMeta::default()
        };
        self.remove_parts(bucket, &intent.replacing, &kept).await;
        // The entry from the head, and the intent's removal, only while the
        // intent is there: not over an operation that finished meanwhile,
        // not into a bucket deleted meanwhile.
        // The older versions' entries change only as read (a live write
        // may have moved a version since the snapshot).
        let key = intent.key.as_bytes();
        let mut op = WriteOp::new().guard(Guard::OmapKey {
            key: intent_key.clone(),
            value: Some(meta::encode(intent)),
        });
        for guard in &repair.guards {
            op = op.guard(guard.clone());
        }
        op = match &standing {
            Some(object) => op.omap_set([(key, &meta::encode(&entry_of(object))[..])]),
            None => op.omap_remove([key]),
        };
        for update in &repair.updates {
            op = match update {
                Update::Set(k, v) => op.omap_set([(&k[..], &v[..])]),
                Update::Remove(k) => op.omap_remove([&k[..]]),
            };
        }
        let shard = meta::index_object(&bucket.id, &intent.key);
        match self
            .client()
            .operate(META_POOL, &shard, op.omap_remove([&intent_key[..]]))
            .await
        {
            Ok(_) => {}
            Err(ClientError::NotFound) => return Ok(()),
            Err(ClientError::CompareFailed { .. }) => {
                // Finished meanwhile (nothing to do), or a version moved
                // (the next pass tries again).
                let still = meta::omap_value(self.client(), &shard, intent_key)
                    .await
                    .map_err(internal)?;
                if still.is_some() {
                    return Err(s3_error!(
                        SlowDown,
                        "a version of {} moved during its recovery",
                        intent.key
                    ));
                }
                return Ok(());
            }
            Err(e) => return Err(client_error(e)),
        }
        // Only now that the entries no longer name them.
        for name in &repair.remove_objects {
            match self.client().remove(&bucket.pool, name.as_bytes()).await {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(client_error(e)),
            }
        }
        self.remove_parts(bucket, &repair.remove_runs, &kept).await;
        tracing::info!(bucket = %bucket.id, key = %intent.key, "recovered an unfinished operation");
        Ok(())
    }

    /// Removes the pieces `PREFIX/00000`, `PREFIX/00001`, … of a run whose
    /// length is unknown: they are written in order, so the first two
    /// missing in a row end it.
    async fn remove_run(&self, bucket: &BucketRecord, prefix: &str) -> S3Result<()> {
        let mut missing = 0;
        let mut n = 0u64;
        while missing < 2 {
            let name = PartRef::piece_name(prefix, n);
            match self.client().remove(&bucket.pool, name.as_bytes()).await {
                Ok(()) => missing = 0,
                Err(ClientError::NotFound) => missing += 1,
                Err(e) => return Err(client_error(e)),
            }
            n += 1;
        }
        Ok(())
    }

    /// Every intent of a bucket, with its key.
    ///
    /// # Errors
    /// The cluster's error, or an intent that does not decode.
    pub async fn intents(&self, bucket: &BucketRecord) -> S3Result<Vec<(Bytes, Intent)>> {
        let mut out = Vec::new();
        for shard in 0..meta::INDEX_SHARDS {
            let object = meta::index_shard(&bucket.id, shard);
            let entries = meta::omap_prefix(self.client(), &object, INTENT_PREFIX)
                .await
                .map_err(client_error)?;
            for (key, value) in entries {
                out.push((key, meta::decode("intent", &value).map_err(internal)?));
            }
        }
        Ok(out)
    }

    /// Records this gateway's heartbeat.
    ///
    /// # Errors
    /// The cluster's error.
    pub async fn heartbeat(&self) -> Result<(), ClientError> {
        let now = meta::now_ms().to_string();
        let op = WriteOp::new()
            .create(false)
            .omap_set([(self.id().as_bytes(), now.as_bytes())]);
        self.client()
            .operate(META_POOL, GATEWAYS_OBJECT, op)
            .await
            .map(|_| ())
    }

    /// The last heartbeat of every gateway, by id (ms).
    ///
    /// # Errors
    /// The cluster's error.
    pub async fn heartbeats(&self) -> Result<Vec<(String, u64)>, ClientError> {
        let entries = meta::omap_all(self.client(), GATEWAYS_OBJECT).await?;
        Ok(entries
            .into_iter()
            .map(|(id, beat)| {
                let beat = std::str::from_utf8(&beat)
                    .ok()
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
                (String::from_utf8_lossy(&id).into_owned(), beat)
            })
            .collect())
    }
}

/// What one pass of the collector did.
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    pub buckets: u64,
    pub intents_seen: u64,
    pub intents_recovered: u64,
    pub uploads_aborted: u64,
    pub errors: u64,
}

/// Settings of the collector.
#[derive(Clone, Copy, Debug)]
pub struct GcSettings {
    /// A gateway silent this long is dead, and its intents (this old at
    /// least) are recovered.
    pub dead_after: Duration,
    /// Uploads begun this long ago are aborted (`None`: never).
    pub abort_uploads_after: Option<Duration>,
}

/// The background collector's settings: gateways silent for a minute are
/// dead; uploads a week old are aborted (S3 keeps them until a lifecycle
/// rule says otherwise; a week is what operators set).
pub const BACKGROUND_GC: GcSettings = GcSettings {
    dead_after: Duration::from_secs(60),
    abort_uploads_after: Some(Duration::from_secs(7 * 24 * 3600)),
};
/// How often each gateway runs the collector.
pub const GC_INTERVAL: Duration = Duration::from_secs(60);

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Gateway {
    /// One pass of the collector over every bucket: recovers the intents
    /// of dead gateways and aborts old uploads.
    ///
    /// # Errors
    /// The cluster's error reading the buckets or heartbeats; errors on
    /// single intents or uploads are counted and left for the next pass.
    pub async fn collect(&self, settings: GcSettings) -> S3Result<GcReport> {
        let now = meta::now_ms();
        let beats: std::collections::HashMap<String, u64> = self
            .heartbeats()
            .await
            .map_err(client_error)?
            .into_iter()
            .collect();
        let dead_after = millis(settings.dead_after);
        let mut report = GcReport::default();
        for bucket in self.all_buckets().await? {
            report.buckets += 1;
            for (intent_key, intent) in self.intents(&bucket).await? {
                report.intents_seen += 1;
                let age = now.saturating_sub(intent.since_ms);
                let silent = beats
                    .get(&intent.gateway)
                    .is_none_or(|beat| now.saturating_sub(*beat) >= dead_after);
                // A live gateway's operations are its own to finish or
                // recover, however long they run (a slow 5 GiB upload).
                if !(silent && age >= dead_after) {
                    continue;
                }
                match self.recover(&bucket, &intent_key, &intent).await {
                    Ok(()) => report.intents_recovered += 1,
                    Err(error) => {
                        report.errors += 1;
                        tracing::warn!(key = %intent.key, %error, "recovery failed; next pass");
                    }
                }
            }
            if let Some(after) = settings.abort_uploads_after {
                let before = now.saturating_sub(millis(after));
                for upload in self.stale_uploads(&bucket, before).await? {
                    match self.abort_upload(&bucket, &upload).await {
                        Ok(()) => report.uploads_aborted += 1,
                        Err(e) if e.code() == &s3s::S3ErrorCode::NoSuchUpload => {}
                        Err(error) => {
                            report.errors += 1;
                            tracing::warn!(upload = %upload.upload_id, %error, "abort failed; next pass");
                        }
                    }
                }
            }
        }
        // Heartbeats of gateways gone a day are forgotten.
        let forget: Vec<Bytes> = beats
            .iter()
            .filter(|(_, beat)| now.saturating_sub(**beat) > 24 * 3600 * 1000)
            .map(|(id, _)| Bytes::from(id.clone()))
            .collect();
        if !forget.is_empty() {
            let _ = self
                .client()
                .omap_remove(META_POOL, GATEWAYS_OBJECT, &forget)
                .await;
        }
        Ok(report)
    }

    /// Every bucket's record.
    pub(crate) async fn all_buckets(&self) -> S3Result<Vec<BucketRecord>> {
        let entries = meta::omap_all(self.client(), meta::BUCKETS_OBJECT)
            .await
            .map_err(client_error)?;
        entries
            .into_iter()
            .map(|(name, value)| {
                let name = String::from_utf8_lossy(&name).into_owned();
                let mut record: BucketRecord =
                    meta::decode(&format!("bucket {name}"), &value).map_err(internal)?;
                record.name = name;
                Ok(record)
            })
            .collect()
    }

    /// The bucket's uploads begun before `before_ms`.
    async fn stale_uploads(
        &self,
        bucket: &BucketRecord,
        before_ms: u64,
    ) -> S3Result<Vec<meta::UploadRecord>> {
        let entries = meta::omap_all(self.client(), &meta::uploads_object(&bucket.id))
            .await
            .map_err(client_error)?;
        let mut out = Vec::new();
        for (_, value) in entries {
            let upload: meta::UploadRecord = meta::decode("upload", &value).map_err(internal)?;
            if upload.initiated_ms < before_ms {
                out.push(upload);
            }
        }
        Ok(out)
    }

    /// Aborts an upload: its intent, its claim, its parts, its records.
    ///
    /// # Errors
    /// `NoSuchUpload` if another took it first, or the cluster's error.
    pub(crate) async fn abort_upload(
        &self,
        bucket: &BucketRecord,
        upload: &meta::UploadRecord,
    ) -> S3Result<()> {
        let pending = self
            .begin(
                bucket,
                &upload.key,
                Vec::new(),
                Some(upload.upload_id.clone()),
            )
            .await?;
        self.claim_upload(bucket, upload).await?;
        self.end_upload(bucket, upload, &[]).await?;
        self.finish(pending, None).await
    }
}

/// Beats for this gateway and runs the collector, forever.
pub async fn background(gateway: Gateway) {
    let mut next_gc = tokio::time::Instant::now() + GC_INTERVAL;
    loop {
        if let Err(error) = gateway.heartbeat().await {
            tracing::warn!(%error, "heartbeat failed");
        }
        if tokio::time::Instant::now() >= next_gc {
            next_gc += GC_INTERVAL;
            match gateway.collect(BACKGROUND_GC).await {
                Ok(report) if report.intents_recovered + report.uploads_aborted > 0 => {
                    tracing::info!(?report, "collector pass");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "collector pass failed"),
            }
        }
        tokio::time::sleep(HEARTBEAT_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intent_keys_sort_after_every_s3_key_and_carry_the_key() {
        let key = intent_key("photos/a.jpg", "0011");
        assert!(key.starts_with(INTENT_PREFIX));
        // Every S3 key is UTF-8, whose bytes are never 0xFF.
        for s3_key in ["", "a", "\u{10FFFF}", "zzzz", "\u{7f}"] {
            assert!(s3_key.as_bytes() < &key[..], "{s3_key:?}");
        }
        assert_eq!(
            &key[INTENT_PREFIX.len()..INTENT_PREFIX.len() + 12],
            b"photos/a.jpg"
        );
        let intent = Intent {
            key: "k".into(),
            gateway: "g".into(),
            since_ms: 5,
            writing: vec!["b.t/0a".into()],
            replacing: Vec::new(),
            upload: None,
            archive: Some("b.v/01".into()),
            discard: vec!["b.v/02".into()],
        };
        let back: Intent = meta::decode("intent", &meta::encode(&intent)).expect("decodes");
        assert_eq!(back, intent);
    }
}

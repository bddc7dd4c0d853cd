//! The orphan scan (`cairn s3 orphans`): tail objects, parts and archives
//! in the buckets' pools that nothing names, as `radosgw-admin orphans
//! find` looks for. Intents cover a gateway that dies mid-operation; this
//! covers what they cannot name (a delete of an object with more than
//! [`crate::intent::REPLACING_RUNS_MAX`] parts cut short, an intent lost
//! with a deleted bucket) and what a bug leaves.
//!
//! Only the gateway's data objects are candidates: `ID.t/…` (a PUT's
//! pieces), `ID.mp/…` (parts), `ID.v/…` (archived versions), for a bucket
//! id of 16 hex digits. Heads (`ID/KEY`) and anything else in a pool (a
//! native object) are never touched.
//!
//! The scan reads in an order that keeps every object a live operation
//! needs: the pools' names first, then the bucket records, then per
//! bucket the intents and uploads in progress (every piece prefix,
//! archive, replaced run and part they name is kept), then every key as a
//! unit: its head, its intents, its older versions and their archives'
//! manifests, and its head again, read again until the two head reads
//! agree (so a version moving between head and archive meanwhile is not
//! missed), then the intents and uploads again. An operation writes its
//! intent before its first piece and removes it in the write that makes
//! its index entries, so a piece listed in the first step is named by one
//! of the later reads unless it really is garbage. A bucket whose keys
//! keep changing, or whose versioning is turned on under the scan, is
//! left alone (`unsure_buckets`).

use crate::gateway::{Gateway, client_error, internal};
use crate::meta::{self, BucketRecord, META_POOL, PartRef};
use bytes::Bytes;
use cairn_client::ClientError;
use s3s::S3Result;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Names shown in a report at most (the count is always whole).
pub const SHOWN_MAX: usize = 100;

/// What a scan found (and removed).
#[derive(Debug, Default, Serialize)]
pub struct OrphanReport {
    pub pools: u64,
    pub objects_scanned: u64,
    pub buckets: u64,
    /// Data objects of live buckets that nothing names.
    pub orphans: u64,
    /// Data objects of buckets that no longer exist.
    pub strays: u64,
    pub removed: u64,
    pub errors: u64,
    /// Buckets left alone: a key kept changing under the scan, or
    /// versioning was turned on; scan again.
    pub unsure_buckets: u64,
    /// Some of the names found, for a look before `--remove`.
    pub examples: Vec<String>,
}

/// What names a bucket's data objects.
#[derive(Default)]
struct Named {
    objects: HashSet<String>,
    /// Prefixes of runs an operation in flight is writing (length unknown).
    prefixes: Vec<String>,
}

impl Named {
    fn runs(&mut self, runs: &[PartRef]) {
        for run in runs {
            for (piece, _) in run.pieces() {
                self.objects.insert(piece);
            }
        }
    }

    /// What an operation in flight writes, archives and removes; the
    /// upload it belongs to goes to `uploads`.
    fn intent(&mut self, intent: crate::intent::Intent, uploads: &mut Vec<String>) {
        self.prefixes.extend(intent.writing);
        self.objects.extend(intent.archive);
        self.objects.extend(intent.discard);
        self.runs(&intent.replacing);
        uploads.extend(intent.upload);
    }

    fn names(&self, object: &str) -> bool {
        self.objects.contains(object)
            || self.prefixes.iter().any(|p| {
                object
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
            })
    }
}

/// The bucket id a data object belongs to, if its name is one.
fn data_object_bucket(name: &str) -> Option<&str> {
    let id = name.get(..16)?;
    if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let rest = &name[16..];
    (rest.starts_with(".t/") || rest.starts_with(".mp/") || rest.starts_with(".v/")).then_some(id)
}

impl Gateway {
    /// Scans every bucket pool for data objects nothing names; removes
    /// them if `remove`.
    ///
    /// # Errors
    /// The cluster's error reading a listing, a bucket or an index.
    pub async fn scan_orphans(&self, remove: bool) -> S3Result<OrphanReport> {
        let mut report = OrphanReport::default();
        // 1. The names, before anything that could name them is read.
        let pools: BTreeSet<String> = self
            .all_buckets()
            .await?
            .into_iter()
            .map(|b| b.pool)
            .collect();
        let mut candidates: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for pool in &pools {
            report.pools += 1;
            let mut cursor = None;
            loop {
                let page = match self.client().list(pool, cursor, 1000).await {
                    Ok(page) => page,
                    Err(ClientError::NoPool(_)) => break,
                    Err(e) => return Err(client_error(e)),
                };
                report.objects_scanned += page.names.len() as u64;
                for name in page.names {
                    let name = String::from_utf8_lossy(&name).into_owned();
                    if let Some(id) = data_object_bucket(&name) {
                        candidates
                            .entry(id.to_owned())
                            .or_default()
                            .push((pool.clone(), name));
                    }
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        // 2. The buckets, after: one made meanwhile is known.
        let buckets: BTreeMap<String, BucketRecord> = self
            .all_buckets()
            .await?
            .into_iter()
            .map(|b| (b.id.clone(), b))
            .collect();
        for (id, objects) in candidates {
            let Some(bucket) = buckets.get(&id) else {
                report.strays += objects.len() as u64;
                self.found(&mut report, objects, remove).await;
                continue;
            };
            report.buckets += 1;
            let Some(named) = self.named(bucket).await? else {
                report.unsure_buckets += 1;
                continue;
            };
            // Versioning turned on under the scan: older versions it did
            // not look for may name pieces.
            if self
                .all_buckets()
                .await?
                .iter()
                .find(|b| b.id == bucket.id)
                .is_some_and(|now| now.versioning != bucket.versioning)
            {
                report.unsure_buckets += 1;
                continue;
            }
            let orphans: Vec<(String, String)> = objects
                .into_iter()
                .filter(|(_, name)| !named.names(name))
                .collect();
            report.orphans += orphans.len() as u64;
            self.found(&mut report, orphans, remove).await;
        }
        Ok(report)
    }

    async fn found(&self, report: &mut OrphanReport, objects: Vec<(String, String)>, remove: bool) {
        for (pool, name) in objects {
            if report.examples.len() < SHOWN_MAX {
                report.examples.push(name.clone());
            }
            if !remove {
                continue;
            }
            match self.client().remove(&pool, name.as_bytes()).await {
                Ok(()) | Err(ClientError::NotFound) => report.removed += 1,
                Err(error) => {
                    report.errors += 1;
                    tracing::warn!(object = %name, %error, "orphan not removed");
                }
            }
        }
    }

    /// What names a bucket's data objects (`None`: the bucket changed too
    /// much under the scan to be sure), read in the order the module's
    /// comment gives.
    async fn named(&self, bucket: &BucketRecord) -> S3Result<Option<Named>> {
        let mut named = Named::default();
        // Operations in flight and uploads in progress, before the keys.
        self.name_in_flight(bucket, &mut named).await?;
        // Every key, each read as a unit: its head, its operations in
        // flight, its older versions, and its head again, the same (a
        // version moving between head and archive meanwhile is read
        // again).
        for shard in 0..meta::INDEX_SHARDS {
            let object = meta::index_shard(&bucket.id, shard);
            let mut after: Option<Bytes> = None;
            'shard: loop {
                let page = match self
                    .client()
                    .omap_range(META_POOL, &object, after.as_deref(), 1000)
                    .await
                {
                    Ok(page) => page,
                    Err(ClientError::NotFound) => break,
                    Err(e) => return Err(client_error(e)),
                };
                let Some((last, _)) = page.last() else {
                    break;
                };
                after = Some(last.clone());
                for (index_key, _) in page {
                    if index_key.first().is_some_and(|b| *b >= 0xfe) {
                        break 'shard;
                    }
                    let key = String::from_utf8_lossy(&index_key).into_owned();
                    if !self.name_key(bucket, &key, &mut named).await? {
                        return Ok(None);
                    }
                }
            }
        }
        // And again after: a completion claims its upload before it
        // writes its head, and a part upload records its part before its
        // intent goes.
        self.name_in_flight(bucket, &mut named).await?;
        Ok(Some(named))
    }

    /// Names what a bucket's intents and uploads in progress name.
    async fn name_in_flight(&self, bucket: &BucketRecord, named: &mut Named) -> S3Result<()> {
        let mut uploads = Vec::new();
        for (_, intent) in self.intents(bucket).await? {
            named.intent(intent, &mut uploads);
        }
        let records = meta::omap_all(self.client(), &meta::uploads_object(&bucket.id))
            .await
            .map_err(client_error)?;
        for (_, value) in records {
            let upload: meta::UploadRecord = meta::decode("upload", &value).map_err(internal)?;
            uploads.push(upload.upload_id);
        }
        for upload_id in uploads {
            named.runs(&self.upload_runs(&upload_id).await?);
        }
        Ok(())
    }

    /// Names every version of `key` from a consistent read (`false`: the
    /// key kept changing).
    async fn name_key(
        &self,
        bucket: &BucketRecord,
        key: &str,
        named: &mut Named,
    ) -> S3Result<bool> {
        for _ in 0..8 {
            let head = self.head(bucket, key, true).await?;
            let mut uploads = Vec::new();
            let mut found = Named::default();
            for intent in self.key_intents(bucket, key).await? {
                found.intent(intent, &mut uploads);
            }
            for upload_id in uploads {
                found.runs(&self.upload_runs(&upload_id).await?);
            }
            for older in self.archived(bucket, key).await? {
                let Some(archive) = older.entry.object.clone() else {
                    continue;
                };
                if let Some((version, _)) =
                    self.head_in(bucket, key, archive.as_bytes(), true).await?
                {
                    found.runs(&version.parts);
                }
                found.objects.insert(archive);
            }
            let again = self.head_raw(bucket, key).await?;
            if head.as_ref().map(|(_, raw)| raw) != again.as_ref().map(|(_, raw)| raw) {
                continue;
            }
            if let Some((version, _)) = head {
                found.runs(&version.parts);
            }
            named.objects.extend(found.objects);
            named.prefixes.extend(found.prefixes);
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_gateways_data_objects_are_candidates() {
        let id = "0123456789abcdef";
        for name in [
            format!("{id}.t/00aa/00000"),
            format!("{id}.mp/u/00001-ab/00000"),
            format!("{id}.v/0011223344556677"),
        ] {
            assert_eq!(data_object_bucket(&name), Some(id), "{name}");
        }
        for name in [
            format!("{id}/photos/a.jpg"),
            "notahexbucketid.t/x".to_owned(),
            "short.t/x".to_owned(),
            "my-native-object".to_owned(),
        ] {
            assert_eq!(data_object_bucket(&name), None, "{name}");
        }
        let mut named = Named::default();
        named.prefixes.push(format!("{id}.t/00aa"));
        assert!(named.names(&format!("{id}.t/00aa/00007")));
        assert!(!named.names(&format!("{id}.t/00aab/00000")));
        named.runs(&[PartRef {
            object: format!("{id}.t/ff"),
            size: 9 << 20,
            piece_bytes: 4 << 20,
        }]);
        assert!(named.names(&format!("{id}.t/ff/00002")));
        assert!(!named.names(&format!("{id}.t/ff/00003")));
    }
}

//! [`DiskStore`]: the real store. Layout of its directory:
//!
//! - `meta/`: a fjall database with keyspaces `super` (the superblock),
//!   `collections`, `objects` (object records), `omap` and `meta`
//!   (collection key spaces). Every value is checksummed (`record.rs`).
//! - `data`: one file of extents, allocated in 4 KiB units, written once.
//! - `wal`: the commit log (`wal.rs`), replayed at open.
//!
//! Writers: [`DiskStore::submit`] validates a transaction, checks space,
//! writes payloads larger than the inline limit to fresh extents (the only
//! write of large payloads), and queues it for the committer thread
//! (`commit.rs`), which applies queued transactions in order and makes a
//! whole batch durable with one commit-log record (after a data
//! `fdatasync` if it wrote large extents). Readers go straight to fjall and
//! the data file.
//!
//! This file is the front: opening, submitting and reading. The rest lives
//! beside it, each part depending only on those listed before it:
//! `shared.rs` (the handles and state every thread shares), `data.rs`
//! (extents in the data file), `space.rs` (the full check, usage, the
//! allocator's rebuild and audit, reclaiming freed extents), `recovery.rs`
//! (creating and opening the directory, replaying the log), `overlay.rs`
//! (a batch's uncommitted changes, with undo) and `commit.rs` (the
//! committer and its checkpoints).

use crate::alloc::{Allocator, Space};
use crate::commit::{Committer, Job};
use crate::data::{read_record, write_extents};
use crate::failpoint::SyncSite;
use crate::overlay::Payload;
use crate::record::{self, Extent, ObjectRecord};
use crate::recovery::{
    check_superblock, create_dirs_durably, create_metadata, open_db, open_keyspace, recover,
};
use crate::shared::{Active, Growth, Shared, StoreConfig};
use crate::space::{
    self, SpaceAudit, keeps_freed_space, punch_free_runs, rebuild_allocator, store_usage,
};
use crate::txn::{Op, Transaction};
use crate::{
    Capacity, CollectionId, CollectionUsage, Commit, ObjectKey, ObjectPage, ObjectStat,
    ObjectStore, ReadOptions, StoreError, limits,
};
use bytes::Bytes;
use fjall::Keyspace;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;

/// The on-disk object store.
pub struct DiskStore {
    shared: Shared,
    queue: Option<SyncSender<Job>>,
    committer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("dir", &self.shared.dir)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens the store in `dir`, creating it if empty.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the directory or database cannot be opened,
    /// [`StoreError::Corrupt`] if the superblock is damaged or names another
    /// format.
    pub fn open(dir: &Path, config: StoreConfig) -> Result<DiskStore, StoreError> {
        if !(0.0 < config.nearfull_ratio
            && config.nearfull_ratio <= config.full_ratio
            && config.full_ratio <= 1.0)
        {
            return Err(StoreError::Invalid(format!(
                "need 0 < nearfull_ratio ({}) <= full_ratio ({}) <= 1",
                config.nearfull_ratio, config.full_ratio
            )));
        }
        create_dirs_durably(dir)?;
        // Names made in `dir` by this open (the metadata, data file and
        // log of a new store) become durable with one fsync of it, below.
        let new_names = ["meta", "data", "wal"]
            .iter()
            .any(|name| !dir.join(name).exists());
        if !dir.join("meta").exists() {
            create_metadata(dir, &config)?;
        }
        let db = open_db(&dir.join("meta"), &config)?;
        let keyspace = |name: &str| open_keyspace(&db, name);
        let superblock = keyspace("super")?;
        check_superblock(&db, &superblock)?;
        let data = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("data"))?;
        let direct = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(rustix::fs::OFlags::DIRECT.bits().cast_signed())
                .open(dir.join("data"))
                .ok()
        };
        let grown = Arc::new(Growth::new(&data, dir));
        let shared = Shared {
            data_direct: Arc::new(std::sync::RwLock::new(direct)),
            collections: keyspace("collections")?,
            objects: keyspace("objects")?,
            omap: keyspace("omap")?,
            meta: keyspace("meta")?,
            db,
            data: Arc::new(data),
            flusher: Arc::default(),
            space: Space::new(Allocator::default()),
            grown,
            usage: Arc::default(),
            active: Arc::default(),
            per_collection: Arc::default(),
            dir: dir.to_path_buf(),
            config,
        };
        let wal = recover(&shared)?;
        if new_names && !crate::failpoint::skip(SyncSite::StoreDir) {
            File::open(dir)?.sync_all()?;
        }
        let (allocator, per_collection) = rebuild_allocator(&shared)?;
        let shared = Shared {
            space: Space::new(allocator),
            per_collection: Arc::new(std::sync::Mutex::new(per_collection)),
            ..shared
        };
        if !keeps_freed_space(&shared) {
            punch_free_runs(&shared);
        }
        let (queue, jobs) = std::sync::mpsc::sync_channel(limits::COMMIT_QUEUE_MAX);
        let committer = Committer::new(shared.clone(), wal)?;
        let handle = std::thread::Builder::new()
            .name("store-commit".into())
            .spawn(move || committer.run(&jobs))?;
        Ok(DiskStore {
            shared,
            queue: Some(queue),
            committer: Some(handle),
        })
    }

    /// Moves every metadata memtable into on-disk tables (the journal still
    /// makes commits durable; this bounds recovery work and lets tests reach
    /// table files).
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn flush_metadata(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        for keyspace in [&s.collections, &s.objects, &s.omap, &s.meta] {
            keyspace.rotate_memtable_and_wait()?;
        }
        Ok(())
    }

    /// Writes the payloads of a transaction to fresh extents. Large ones
    /// (written directly, and not logged) are then flushed here, by the
    /// submitter: the committer's one flush per batch would otherwise wait
    /// in line for every batch's data (measured on a 3-OSD cluster, 4 MiB
    /// writes: `fdatasync` on the committer took 15 ms on average, and
    /// batches queued behind it); here the prepare threads' flushes overlap.
    fn prewrite(&self, txn: &Transaction) -> Result<Vec<Payload>, StoreError> {
        let mut payloads = Vec::with_capacity(txn.ops.len());
        let release = |payloads: Vec<Payload>| {
            let written: Vec<Extent> = payloads
                .into_iter()
                .flat_map(Payload::into_extents)
                .collect();
            self.shared.space.release(&written);
        };
        let mut large = false;
        for op in &txn.ops {
            let data = match op {
                Op::Write { data, .. } | Op::WriteFull { data, .. } | Op::Append { data, .. } => {
                    data
                }
                _ => {
                    payloads.push(Payload::None);
                    continue;
                }
            };
            if data.len() as u64 <= limits::INLINE_SIZE_BYTES_MAX {
                payloads.push(Payload::None);
                continue;
            }
            let direct = data.len() as u64 >= limits::DIRECT_WRITE_BYTES_MIN;
            match write_extents(&self.shared, data, data.blocks(), direct) {
                Ok(extents) => {
                    large |= direct;
                    payloads.push(Payload::Written {
                        extents,
                        durable: false,
                    });
                }
                Err(e) => {
                    release(payloads);
                    return Err(e);
                }
            }
        }
        if large {
            // Skipped, the payloads still count as flushed (as a missing
            // flush would), else the committer's own flush covers them.
            if !crate::failpoint::skip(SyncSite::Prewrite)
                && let Err(e) = self.shared.sync_data()
            {
                release(payloads);
                return Err(e.into());
            }
            for payload in &mut payloads {
                if let Payload::Written { durable, .. } = payload {
                    *durable = true;
                }
            }
        }
        Ok(payloads)
    }

    fn record(&self, c: CollectionId, o: &ObjectKey) -> Result<ObjectRecord, StoreError> {
        let key = record::object_key(c, o);
        match self.shared.objects.get(&key)? {
            Some(value) => ObjectRecord::decode(&key, &value, &|| format!("object {o} in {c}")),
            None => {
                if self
                    .shared
                    .collections
                    .get(record::collection_prefix(c))?
                    .is_none()
                {
                    return Err(StoreError::NoCollection(c));
                }
                Err(StoreError::NotFound {
                    collection: c,
                    object: o.clone(),
                })
            }
        }
    }

    fn require_collection(&self, c: CollectionId) -> Result<(), StoreError> {
        match self.shared.collections.get(record::collection_prefix(c))? {
            Some(_) => Ok(()),
            None => Err(StoreError::NoCollection(c)),
        }
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(handle) = self.committer.take() {
            let _ = handle.join();
        }
    }
}

/// A transaction whose large payloads are already on disk, not yet queued
/// (see [`DiskStore::prepare`]). Dropped unqueued, it gives its extents
/// back.
#[derive(Debug)]
pub struct Prepared {
    space: crate::alloc::Space,
    state: Option<Result<(Transaction, Vec<Payload>), StoreError>>,
    active: Option<Active>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(Ok((_, payloads))) = self.state.take() {
            let extents: Vec<Extent> = payloads
                .into_iter()
                .flat_map(Payload::into_extents)
                .collect();
            self.space.release(&extents);
        }
    }
}

impl DiskStore {
    /// Checks the data file's space against every object record (an
    /// `fsck` of the allocator, for tests and `cairn` tooling): no two
    /// records name overlapping space (an extent handed out twice), no
    /// record names space the allocator counts as free or past the data
    /// file's end. Right after [`DiskStore::open`] (which rebuilds the
    /// allocator from the records) `allocated_bytes` equals
    /// `referenced_bytes`: space no record names is free again, so a crash
    /// leaks nothing; later the difference is what transactions in flight,
    /// frees awaiting a checkpoint and `pending_bytes` hold. Records that
    /// fail their checksum are skipped (reads report them).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first disagreement;
    /// [`StoreError::Io`] if the metadata cannot be read.
    pub fn audit_space(&self) -> Result<SpaceAudit, StoreError> {
        space::audit_space(&self.shared)
    }

    /// The first half of [`ObjectStore::submit`]: validates `txn`, checks
    /// space and writes its large payloads to fresh extents (for a 4 MiB
    /// write, most of its time). It orders and commits nothing, so several
    /// threads may prepare at once and keep the disk busy;
    /// [`DiskStore::submit_prepared`] then queues them in the order they
    /// must apply. A refusal is kept and reported by `submit_prepared`.
    pub fn prepare(&self, txn: Transaction) -> Prepared {
        let state = txn
            .validate()
            .and_then(|()| space::check_space(&self.shared, &txn))
            .and_then(|()| self.prewrite(&txn))
            .map(|payloads| (txn, payloads));
        Prepared {
            space: self.shared.space.clone(),
            state: Some(state),
            active: Some(Active::new(&self.shared.active)),
        }
    }

    /// The second half of [`ObjectStore::submit`]: queues a prepared
    /// transaction after every one queued before it.
    pub fn submit_prepared(&self, mut prepared: Prepared) -> Commit {
        let (txn, payloads) = match prepared.state.take() {
            Some(Ok(ready)) => ready,
            Some(Err(e)) => return Commit::done(Err(e)),
            None => return Commit::done(Err(StoreError::Closed)),
        };
        let (reply, commit) = Commit::channel();
        let Some(queue) = &self.queue else {
            prepared.state = Some(Ok((txn, payloads)));
            return Commit::done(Err(StoreError::Closed));
        };
        if let Err(failed) = queue.send(Job {
            txn,
            payloads,
            reply,
            active: prepared.active.take(),
        }) {
            let Job { txn, payloads, .. } = failed.0;
            // Dropping `prepared` gives the extents back.
            prepared.state = Some(Ok((txn, payloads)));
            return Commit::done(Err(StoreError::Closed));
        }
        commit
    }
}

impl ObjectStore for DiskStore {
    fn submit(&self, txn: Transaction) -> Commit {
        self.submit_prepared(self.prepare(txn))
    }

    fn read(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        options: ReadOptions,
    ) -> Result<Bytes, StoreError> {
        let _guard = self.shared.space.reader();
        let rec = self.record(c, o)?;
        let (start, end) = options.span(rec.size)?;
        let what = || format!("object {o} in {c}, bytes {start}..{end}");
        read_record(
            &self.shared,
            &rec,
            start,
            end,
            options.verify_checksum,
            &what,
        )
    }

    fn stat(&self, c: CollectionId, o: &ObjectKey) -> Result<ObjectStat, StoreError> {
        let rec = self.record(c, o)?;
        Ok(ObjectStat {
            size_bytes: rec.size,
            version: rec.version,
        })
    }

    fn xattrs(&self, c: CollectionId, o: &ObjectKey) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        let rec = self.record(c, o)?;
        Ok(rec
            .xattrs
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
            .collect())
    }

    fn omap_range(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.record(c, o)?;
        let prefix = record::omap_prefix(c, o);
        scan_after(
            &self.shared.omap,
            &prefix,
            after,
            limit.min(limits::PAGE_ITEMS_MAX),
            "omap entry",
        )
    }

    fn omap_get(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        self.record(c, o)?;
        let prefix = record::omap_prefix(c, o);
        let mut found = BTreeMap::new();
        for key in keys {
            let full = [prefix.as_slice(), key].concat();
            if let Some(value) = self.shared.omap.get(&full)? {
                let body = record::open(&full, &value, "omap entry")?;
                found.insert(key.clone(), Bytes::copy_from_slice(body));
            }
        }
        Ok(found)
    }

    fn list(
        &self,
        c: CollectionId,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<ObjectPage, StoreError> {
        self.require_collection(c)?;
        let limit = limit.clamp(1, limits::PAGE_ITEMS_MAX);
        let prefix = record::collection_prefix(c);
        let start = match after {
            Some(a) => {
                let mut k = record::object_key(c, a);
                k.push(0);
                k
            }
            None => prefix.to_vec(),
        };
        let end = record::prefix_end(&prefix).unwrap_or_else(|| vec![0xff; 9]);
        let mut keys = Vec::new();
        for item in self.shared.objects.range(start..end) {
            let key = item.key()?;
            let (_, object) = record::parse_object_key(&key)
                .ok_or_else(|| StoreError::Corrupt(format!("malformed object key {key:02x?}")))?;
            keys.push(object);
            if keys.len() > limit {
                break;
            }
        }
        Ok(ObjectPage::from_overfetched(keys, limit))
    }

    fn collections(&self) -> Result<Vec<CollectionId>, StoreError> {
        let mut out = Vec::new();
        for item in self.shared.collections.iter() {
            let key = item.key()?;
            let bytes: [u8; 8] = key
                .as_ref()
                .try_into()
                .map_err(|_| StoreError::Corrupt(format!("malformed collection key {key:02x?}")))?;
            out.push(CollectionId(u64::from_be_bytes(bytes)));
        }
        Ok(out)
    }

    fn meta_get(&self, c: CollectionId, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.require_collection(c)?;
        let full = record::meta_key(c, key);
        match self.shared.meta.get(&full)? {
            Some(value) => Ok(Some(Bytes::copy_from_slice(record::open(
                &full,
                &value,
                "collection metadata",
            )?))),
            None => Ok(None),
        }
    }

    fn meta_range(
        &self,
        c: CollectionId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.require_collection(c)?;
        let prefix = record::collection_prefix(c);
        scan_after(
            &self.shared.meta,
            &prefix,
            after,
            limit.min(limits::PAGE_ITEMS_MAX),
            "collection metadata",
        )
    }

    fn capacity(&self) -> Result<Capacity, StoreError> {
        let (total, used, available) = store_usage(&self.shared)?;
        Ok(Capacity {
            total_bytes: total,
            used_bytes: used,
            available_bytes: available,
            stored_bytes: self.shared.space.allocator().allocated_bytes(),
            nearfull_ratio: self.shared.config.nearfull_ratio,
            full_ratio: self.shared.config.full_ratio,
        })
    }

    fn collection_usage(&self) -> Result<BTreeMap<CollectionId, CollectionUsage>, StoreError> {
        Ok(self
            .shared
            .per_collection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone())
    }
}

/// Entries under `prefix` with suffix `> after`, suffix and checked value.
fn scan_after(
    keyspace: &Keyspace,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
    what: &str,
) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
    let start = match after {
        Some(a) => [prefix, a, &[0]].concat(),
        None => prefix.to_vec(),
    };
    let Some(end) = record::prefix_end(prefix) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in keyspace.range(start..end).take(limit) {
        let (key, value) = item.into_inner()?;
        let body = record::open(&key, &value, what)?;
        out.push((
            Bytes::copy_from_slice(&key[prefix.len()..]),
            Bytes::copy_from_slice(body),
        ));
    }
    Ok(out)
}

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

use crate::alloc::{Allocator, Space};
use crate::commit::{Committer, Job, Payload, apply_changes, flush_store};
use crate::failpoint::{CrashPoint, SyncSite};
use crate::flush::Flusher;
use crate::record::{self, Data, Extent, ObjectRecord, Superblock};
use crate::txn::{Op, Transaction};
use crate::wal::{self, Wal};
use crate::{
    Capacity, CollectionId, Commit, ObjectKey, ObjectPage, ObjectStat, ObjectStore, ReadOptions,
    StoreError, limits,
};
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Settings of a store; every field has a production default.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    /// Share of the file system in use at which the store warns.
    pub nearfull_ratio: f64,
    /// Share of the file system in use above which writes are refused
    /// (deletes still work: the rest is the reserve for them, metadata and
    /// compaction).
    pub full_ratio: f64,
    /// Block cache of the metadata database.
    pub cache_bytes: u64,
    /// Ring bytes of a new commit log; 0 chooses from the file system's
    /// size (1/128 of it, 8–32 MiB). An existing log keeps its size.
    pub wal_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            nearfull_ratio: 0.85,
            full_ratio: 0.95,
            cache_bytes: 32 * 1024 * 1024,
            wal_bytes: 0,
        }
    }
}

/// Handles shared by readers, submitters and the committer.
#[derive(Clone)]
pub(crate) struct Shared {
    pub db: Database,
    pub collections: Keyspace,
    pub objects: Keyspace,
    pub omap: Keyspace,
    pub meta: Keyspace,
    pub data: Arc<File>,
    /// Flushes of `data`, shared by concurrent callers.
    pub flusher: Arc<Flusher>,
    /// The data file opened with `O_DIRECT`, for large payloads, if the file
    /// system supports it; cleared at the first refusal.
    pub data_direct: Arc<std::sync::RwLock<Option<File>>>,
    pub space: Space,
    /// How far the data file is preallocated.
    pub grown: Arc<Growth>,
    /// The last sample of the file system's usage, for the full check.
    pub usage: Arc<Mutex<Option<UsageSample>>>,
    /// Transactions prepared and not yet answered.
    pub active: Arc<AtomicUsize>,
    pub dir: PathBuf,
    pub config: StoreConfig,
}

impl Shared {
    /// Makes every write to the data file completed so far durable.
    pub(crate) fn sync_data(&self) -> std::io::Result<()> {
        self.flusher.flush(&self.data)
    }

    pub(crate) fn keyspace(&self, space: wal::Space) -> &Keyspace {
        match space {
            wal::Space::Collections => &self.collections,
            wal::Space::Objects => &self.objects,
            wal::Space::Omap => &self.omap,
            wal::Space::Meta => &self.meta,
        }
    }
}

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
            dir: dir.to_path_buf(),
            config,
        };
        let wal = recover(&shared)?;
        if new_names && !crate::failpoint::skip(SyncSite::StoreDir) {
            File::open(dir)?.sync_all()?;
        }
        let shared = Shared {
            space: Space::new(rebuild_allocator(&shared)?),
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

    /// Refuses writes that would take the file system past the full ratio.
    ///
    /// `statfs` on every transaction was 4.8% of the CPU of 16 writers of
    /// 4 KiB objects, so a sample of the file system's usage serves for up
    /// to [`limits::USAGE_SAMPLE_INTERVAL`], with every payload byte
    /// accepted since counted as used (frees are not subtracted). A write
    /// that the sample would refuse is decided on a fresh sample, so the
    /// sample only ever saves a call, never refuses wrongly.
    fn check_space(&self, txn: &Transaction) -> Result<(), StoreError> {
        if txn.only_frees_space() {
            return Ok(());
        }
        let needed = txn.payload_bytes();
        let full_ratio = self.shared.config.full_ratio;
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let limit = |total: u64| (total as f64 * full_ratio) as u64;
        let mut usage = self
            .shared
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(sample) = usage.as_mut()
            && sample.taken.elapsed() < limits::USAGE_SAMPLE_INTERVAL
            && sample.used_bytes.saturating_add(needed) <= limit(sample.total_bytes)
        {
            sample.used_bytes += needed;
            return Ok(());
        }
        let (total_bytes, used_bytes, _) = store_usage(&self.shared)?;
        if used_bytes.saturating_add(needed) > limit(total_bytes) {
            *usage = None;
            return Err(StoreError::Full {
                used_bytes,
                total_bytes,
                full_ratio,
            });
        }
        *usage = Some(UsageSample {
            taken: std::time::Instant::now(),
            total_bytes,
            used_bytes: used_bytes + needed,
        });
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

/// The metadata database's keyspaces.
const KEYSPACES: [&str; 5] = ["super", "collections", "objects", "omap", "meta"];

fn open_db(path: &Path, config: &StoreConfig) -> Result<Database, StoreError> {
    // `max_write_buffer_size` is marked deprecated with the note "todo";
    // it is the documented bound on all memtables, which we need.
    #[allow(deprecated)]
    let db = Database::builder(path)
        .cache_size(config.cache_bytes)
        .manual_journal_persist(true)
        .max_write_buffer_size(Some(limits::META_WRITE_BUFFER_BYTES_MAX))
        .open()?;
    Ok(db)
}

fn open_keyspace(db: &Database, name: &str) -> Result<Keyspace, StoreError> {
    Ok(db.keyspace(name, || {
        KeyspaceCreateOptions::default().max_memtable_size(limits::META_MEMTABLE_BYTES_MAX)
    })?)
}

/// Creates the metadata database of a new store atomically: built whole in
/// `meta.new` (every keyspace and the superblock, flushed, every directory
/// synced), then renamed to `meta`. fjall's own creation is not atomic: a
/// crash inside it followed by a power loss left a journal without the
/// files that describe it, which fjall then refused to open ("File
/// exists"), so an OSD whose first start was cut short could never start.
/// A `meta.new` left by a crash held nothing acknowledged and is removed.
fn create_metadata(dir: &Path, config: &StoreConfig) -> Result<(), StoreError> {
    let staging = dir.join("meta.new");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    {
        let db = open_db(&staging, config)?;
        for name in KEYSPACES {
            open_keyspace(&db, name)?;
        }
        let superblock = open_keyspace(&db, "super")?;
        check_superblock(&db, &superblock)?;
    }
    if !crate::failpoint::skip(SyncSite::MetaCreate) {
        sync_tree(&staging)?;
    }
    // The rename becomes durable with the fsync of `dir` that ends the
    // store's creation in `DiskStore::open`.
    std::fs::rename(&staging, dir.join("meta"))?;
    Ok(())
}

/// `fsync`s every directory under `path` (and `path`), so every name in
/// the tree survives a power loss whatever the file system's rules for new
/// names.
fn sync_tree(path: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    File::open(path)?.sync_all()
}

/// Creates `path` and any missing parents, fsyncing each new directory's
/// parent so the names survive a power loss (fjall does not do this for the
/// directory it is given).
fn create_dirs_durably(path: &Path) -> Result<(), StoreError> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.exists() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    for p in missing.into_iter().rev() {
        std::fs::create_dir(p)?;
        if crate::failpoint::skip(SyncSite::StoreParents) {
            continue;
        }
        if let Some(parent) = p.parent() {
            File::open(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            })?
            .sync_all()?;
        }
    }
    Ok(())
}

/// Checks the superblock, writing it into a new store. A format 1 store
/// (before the commit log) is upgraded in place: it has no log to replay,
/// and once its superblock says 2 an older build refuses it rather than
/// miss records in a log it does not know.
fn check_superblock(db: &Database, keyspace: &Keyspace) -> Result<(), StoreError> {
    let current = Superblock::current();
    if let Some(value) = keyspace.get(record::SUPERBLOCK_KEY)? {
        let body = record::open(record::SUPERBLOCK_KEY, &value, "superblock")?;
        let found: Superblock = postcard::from_bytes(body)
            .map_err(|e| StoreError::Corrupt(format!("superblock: {e}")))?;
        let upgradable = Superblock {
            format_version: 1,
            ..current.clone()
        };
        if found == current {
            return Ok(());
        }
        if found != upgradable {
            return Err(StoreError::Corrupt(format!(
                "superblock {found:?} is not this build's format {current:?}"
            )));
        }
    }
    let body = postcard::to_allocvec(&current).map_err(|e| StoreError::Io(e.to_string()))?;
    let durability = if crate::failpoint::skip(SyncSite::MetaCreate) {
        None
    } else {
        Some(fjall::PersistMode::SyncAll)
    };
    let mut batch = db.batch().durability(durability);
    batch.insert(
        keyspace,
        record::SUPERBLOCK_KEY,
        record::seal(record::SUPERBLOCK_KEY, &body),
    );
    batch.commit()?;
    Ok(())
}

/// Opens the commit log and replays the records its last checkpoint does
/// not cover: their small data back into the data file, their key images
/// into the metadata database; then makes both durable and checkpoints.
fn recover(shared: &Shared) -> Result<Wal, StoreError> {
    let capacity = if shared.config.wal_bytes > 0 {
        shared.config.wal_bytes
    } else {
        statvfs(&shared.dir)
            .map(|(total, _, _)| total / 128)
            .unwrap_or(0)
    }
    .clamp(limits::WAL_BYTES_MIN, limits::WAL_BYTES_MAX);
    let (mut wal, records) = Wal::open(&shared.dir, capacity).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            StoreError::Corrupt(format!("commit log: {e}"))
        } else {
            StoreError::from(e)
        }
    })?;
    if records.is_empty() {
        return Ok(wal);
    }
    for body in &records {
        for write in &body.data {
            shared.data.write_all_at(&write.bytes, write.offset)?;
        }
        apply_changes(shared, &body.changes)?;
    }
    crate::failpoint::crash_point(CrashPoint::ReplayApplied);
    flush_store(shared)?;
    wal.checkpoint()?;
    Ok(wal)
}

/// Every extent any object record names is in use; the rest is free.
/// Records that fail their checksum are reported by reads; their extents
/// cannot be known, so a repair rewrites those objects.
fn rebuild_allocator(shared: &Shared) -> Result<Allocator, StoreError> {
    let mut used = Vec::new();
    for item in shared.objects.iter() {
        let (key, value) = item.into_inner()?;
        if let Ok(ObjectRecord {
            data: Data::Extents { extents, .. },
            ..
        }) = ObjectRecord::decode(&key, &value, &|| "object".into())
        {
            used.extend(extents.iter().map(|e| (e.offset, e.allocated_bytes())));
        }
    }
    Ok(Allocator::rebuild(used))
}

/// Gives free runs (left by deletes or by transactions a crash cut short)
/// back to the file system. Only at open: no writer can be allocating
/// them then.
fn punch_free_runs(shared: &Shared) {
    for (offset, length) in shared.space.allocator().free_runs() {
        let _ = punch(&shared.data, offset, length);
    }
}

/// Whether freed extents stay allocated in the data file instead of being
/// punched back to the file system: while it is below the nearfull ratio.
///
/// A direct write into blocks that were written before is a plain
/// overwrite; into a punched hole or preallocated (unwritten) blocks, its
/// flush must also write the file's extent blocks and inode, synchronously
/// (measured with fio, 4 MiB direct writes each flushed, 12 writers:
/// 1,450 MiB/s into written blocks, 950 into preallocated ones; a 3-OSD
/// cluster writing 4 MiB objects after deleting earlier ones ran 1.4 to
/// 1.6 times faster when the freed space was kept, see
/// `docs/performance.md`). Like a block device a store owns, the file keeps
/// what it once held; [`store_usage`] counts the unused part as available;
/// once the file system is nearfull, what is freed goes back to it.
pub(crate) fn keeps_freed_space(shared: &Shared) -> bool {
    statvfs(&shared.dir)
        .map(|(total, used, _)| {
            #[allow(clippy::cast_precision_loss)]
            let ratio = used as f64 / total.max(1) as f64;
            ratio < shared.config.nearfull_ratio
        })
        .unwrap_or(false)
}

/// The file system's size, usage and available bytes as the store sees
/// them: blocks the data file holds that no extent uses (freed runs kept
/// for reuse, preallocated growth) count as available, not used.
pub(crate) fn store_usage(shared: &Shared) -> Result<(u64, u64, u64), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let (total, used, available) = statvfs(&shared.dir)?;
    let held = shared
        .data
        .metadata()
        .map_or(0, |m| m.blocks().saturating_mul(512));
    let idle = held.saturating_sub(shared.space.allocator().allocated_bytes());
    Ok((
        total,
        used.saturating_sub(idle),
        available.saturating_add(idle).min(total),
    ))
}

pub(crate) fn punch(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    crate::failpoint::crash_point(CrashPoint::Punch);
    fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        length,
    )?;
    Ok(())
}

/// The file system's size and usage when last asked, plus the payload
/// bytes accepted since (see `DiskStore::check_space`).
pub(crate) struct UsageSample {
    taken: std::time::Instant,
    total_bytes: u64,
    used_bytes: u64,
}

/// Preallocates the data file ahead of its allocator's end, in steps.
///
/// A direct write into blocks the file system has not allocated, or past
/// the end of the file, takes ext4's inode lock exclusively for the whole
/// device write, so concurrent large writes to fresh space ran one at a
/// time; a write into preallocated (unwritten) blocks is an overwrite and
/// runs beside the others under the shared lock. It also leaves the file
/// size alone, so the flush after it need not log a new size.
pub(crate) struct Growth {
    /// Bytes of the file covered by allocated blocks, from offset 0 (holes
    /// punched below this since do not count: reused holes allocate anew).
    covered: Mutex<u64>,
    step: u64,
}

impl Growth {
    fn new(data: &File, dir: &Path) -> Growth {
        let total = statvfs(dir).map_or(0, |(total, _, _)| total);
        Growth {
            covered: Mutex::new(data.metadata().map_or(0, |m| m.len())),
            step: (total / limits::DATA_GROWTH_FRACTION)
                .clamp(limits::DATA_GROWTH_BYTES_MIN, limits::DATA_GROWTH_BYTES_MAX),
        }
    }

    /// Makes sure `[0, end)` of the data file is preallocated, growing it by
    /// whole steps. Best effort: a file system that cannot preallocate, or
    /// has no room for a step, leaves the write to allocate as it goes
    /// (a full disk then fails the write itself).
    fn cover(&self, data: &File, end: u64) {
        let mut covered = self.covered.lock().unwrap_or_else(PoisonError::into_inner);
        if end <= *covered {
            return;
        }
        let target = end.div_ceil(self.step) * self.step;
        let grown = rustix::fs::fallocate(
            data,
            rustix::fs::FallocateFlags::empty(),
            *covered,
            target - *covered,
        );
        *covered = match grown {
            Ok(()) => target,
            // Not retried for every write: once the disk has room again,
            // the next step is tried after this end.
            Err(_) => end,
        };
    }
}

/// Allocates and writes `data` as extents of at most the extent limit;
/// `direct` bypasses the page cache where the file system allows. `blocks`
/// are the data's block checksums if the caller has them (verified by the
/// wire against the sender's checksum); the extents keep them instead of
/// checksumming the bytes again.
pub(crate) fn write_extents(
    shared: &Shared,
    data: &[u8],
    blocks: Option<&[u32]>,
    direct: bool,
) -> Result<Vec<Extent>, StoreError> {
    let chunk = usize::try_from(limits::EXTENT_SIZE_BYTES_MAX).unwrap_or(usize::MAX);
    let blocks_per_chunk = chunk / to_usize(limits::CSUM_BLOCK_BYTES);
    let blocks =
        blocks.filter(|b| b.len() == data.len().div_ceil(to_usize(limits::CSUM_BLOCK_BYTES)));
    let mut extents = Vec::new();
    for (i, piece) in data.chunks(chunk).enumerate() {
        let known = blocks.map(|b| {
            let start = i * blocks_per_chunk;
            &b[start..(start + blocks_per_chunk).min(b.len())]
        });
        let length = piece.len() as u64;
        let offset = if direct {
            shared.space.allocator().allocate(length)
        } else {
            shared.space.allocator().allocate_small(length)
        };
        shared.grown.cover(&shared.data, offset + length);
        let written = if direct {
            write_direct(shared, piece, known, offset)
        } else {
            shared
                .data
                .write_all_at(piece, offset)
                .map(|()| csums_of(piece, known))
        };
        match written {
            Ok(csums) => extents.push(Extent {
                offset,
                length,
                csums,
            }),
            Err(e) => {
                extents.push(Extent {
                    offset,
                    length,
                    csums: Vec::new(),
                });
                shared.space.release(&extents);
                return Err(e.into());
            }
        }
    }
    Ok(extents)
}

/// The block checksums of `data`: `known` if given, else computed.
fn csums_of(data: &[u8], known: Option<&[u32]>) -> Vec<u32> {
    known.map_or_else(|| record::block_csums(data), <[u32]>::to_vec)
}

/// Writes through the `O_DIRECT` handle: straight from `data` when it is
/// block-aligned in memory, else from a 4 KiB-aligned copy (padded with
/// zeros to whole blocks, inside the extent's allocation). Large writes so
/// skip the kernel's page-cache copy, which costs more than this one. Falls
/// back to a buffered write, for good, if the file system refuses.
///
/// Returns the block checksums (`known`, or computed).
fn write_direct(
    shared: &Shared,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    let block = to_usize(limits::ALLOC_UNIT_BYTES);
    let result = {
        let guard = shared
            .data_direct
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_ref().map(|file| {
            // Aligned memory (a payload received into an aligned buffer)
            // is written as it is: only a partial last block is staged.
            let whole = data.len() / block * block;
            if whole > 0 && cairn_iobuf::is_aligned(data) {
                let (body, tail) = data.split_at(whole);
                let body_blocks = known.map(|k| &k[..whole / block]);
                let tail_blocks = known.map(|k| &k[whole / block..]);
                let mut csums = write_checksummed(file, body, body_blocks, offset)?;
                if !tail.is_empty() {
                    csums.extend(write_staged(
                        file,
                        tail,
                        tail_blocks,
                        offset + whole as u64,
                    )?);
                }
                return Ok(csums);
            }
            write_staged(file, data, known, offset)
        })
    };
    match result {
        Some(Ok(csums)) => Ok(csums),
        Some(Err(e)) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            *shared
                .data_direct
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            shared
                .data
                .write_all_at(data, offset)
                .map(|()| csums_of(data, known))
        }
        Some(Err(e)) => Err(e),
        None => shared
            .data
            .write_all_at(data, offset)
            .map(|()| csums_of(data, known)),
    }
}

/// Writes aligned `data` at `offset` and returns its block checksums
/// (`known`, or computed). A large payload is checksummed on a second
/// thread while the device takes the write (both only read the memory):
/// the checksums of 4 MiB cost about 0.2 ms of CPU, 8% of the write, which
/// this hides.
fn write_checksummed(
    file: &File,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    if known.is_some() || (data.len() as u64) < limits::PARALLEL_CSUM_BYTES_MIN {
        let csums = csums_of(data, known);
        file.write_all_at(data, offset)?;
        return Ok(csums);
    }
    std::thread::scope(|scope| {
        let summer = scope.spawn(|| record::block_csums(data));
        let written = file.write_all_at(data, offset);
        let csums = summer.join().unwrap_or_else(|_| record::block_csums(data));
        written.map(|()| csums)
    })
}

/// Writes `data` through the `O_DIRECT` handle from a pooled aligned copy,
/// padded with zeros to whole blocks; returns the block checksums, computed
/// on each block right after it is copied, while it is in cache.
fn write_staged(
    file: &File,
    data: &[u8],
    known: Option<&[u32]>,
    offset: u64,
) -> std::io::Result<Vec<u32>> {
    let block = to_usize(limits::ALLOC_UNIT_BYTES);
    let padded = data.len().div_ceil(block) * block;
    let pool = cairn_iobuf::shared();
    let mut buffer = pool.take(padded)?;
    let staged = &mut buffer.as_mut_slice()[..padded];
    let mut csums = Vec::with_capacity(data.len().div_ceil(block));
    for (source, target) in data.chunks(block).zip(staged.chunks_mut(block)) {
        target[..source.len()].copy_from_slice(source);
        if known.is_none() {
            csums.push(cairn_types::crc::crc32c(&target[..source.len()]));
        }
    }
    if let Some(known) = known {
        csums.extend_from_slice(known);
    }
    staged[data.len()..].fill(0);
    let result = file.write_all_at(staged, offset).map(|()| csums);
    pool.give_back(buffer);
    result
}

/// Reads `[start, end)` of an object from its record, verifying checksums
/// block by block. Bytes no piece covers are zeros.
pub(crate) fn read_record(
    shared: &Shared,
    rec: &ObjectRecord,
    start: u64,
    end: u64,
    verify: bool,
    what: &dyn Fn() -> String,
) -> Result<Bytes, StoreError> {
    let (extents, pieces) = match &rec.data {
        Data::Inline(bytes) => {
            return Ok(Bytes::copy_from_slice(
                &bytes[to_usize(start)..to_usize(end)],
            ));
        }
        Data::Extents { extents, pieces } => (extents, pieces),
    };
    let mut covering = pieces.iter().filter(|p| p.logical < end && p.end() > start);
    // One piece covering the whole range (the usual large read): its bytes
    // are the result, without assembling a copy.
    if let (Some(p), None) = (covering.next(), covering.next())
        && p.logical <= start
        && p.end() >= end
    {
        let within = p.offset + (start - p.logical);
        return read_extent(
            shared,
            &extents[p.extent as usize],
            within,
            end - start,
            verify,
            what,
        );
    }
    let mut out = vec![0u8; to_usize(end - start)];
    for p in pieces.iter().filter(|p| p.logical < end && p.end() > start) {
        let from = start.max(p.logical);
        let to = end.min(p.end());
        let extent = &extents[p.extent as usize];
        let within = p.offset + (from - p.logical);
        let bytes = read_extent(shared, extent, within, to - from, verify, what)?;
        out[to_usize(from - start)..to_usize(to - start)].copy_from_slice(&bytes);
    }
    Ok(Bytes::from(out))
}

/// Reads `length` bytes at `within` of an extent, checking every checksum
/// block it touches.
fn read_extent(
    shared: &Shared,
    extent: &Extent,
    within: u64,
    length: u64,
    verify: bool,
    what: &dyn Fn() -> String,
) -> Result<Bytes, StoreError> {
    let block = limits::CSUM_BLOCK_BYTES;
    let first = within / block;
    let span_start = first * block;
    let span_end = (within + length)
        .div_ceil(block)
        .saturating_mul(block)
        .min(extent.length);
    let span = read_span(
        shared,
        extent.offset + span_start,
        to_usize(span_end - span_start),
    )
    .map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            StoreError::Corrupt(format!(
                "{}: data file too short for extent at {}",
                what(),
                extent.offset
            ))
        } else {
            e.into()
        }
    })?;
    if verify {
        for (i, chunk) in span.chunks(to_usize(block)).enumerate() {
            let index = to_usize(first) + i;
            if extent.csums.get(index) != Some(&cairn_types::crc::crc32c(chunk)) {
                let at = span_start + i as u64 * block;
                return Err(StoreError::Corrupt(format!(
                    "{}: checksum mismatch in extent bytes {}..{} (data file offset {})",
                    what(),
                    at,
                    at + chunk.len() as u64,
                    extent.offset + at
                )));
            }
        }
    }
    let skip = to_usize(within - span_start);
    Ok(span.slice(skip..skip + to_usize(length)))
}

/// Reads `length` bytes at `offset` (block-aligned) of the data file.
fn read_span(shared: &Shared, offset: u64, length: usize) -> std::io::Result<Bytes> {
    if length >= limits::DIRECT_READ_BYTES_MIN {
        let guard = shared
            .data_direct
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = guard.as_ref() {
            let block = to_usize(limits::ALLOC_UNIT_BYTES);
            let padded = length.div_ceil(block) * block;
            // A pooled buffer: a fresh multi-megabyte one costs page faults
            // and zeroing, more than the read itself on a fast disk.
            let pool = cairn_iobuf::shared();
            let mut buffer = pool.take(padded)?;
            match file.read_exact_at(&mut buffer.as_mut_slice()[..padded], offset) {
                // The aligned buffer becomes the result without a copy, and
                // returns to the pool when the caller drops it.
                Ok(()) => return Ok(pool.lend(buffer, length)),
                // The padded tail of the file's last extent may lie past the
                // end: fall back to a buffered read.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut span = vec![0u8; length];
    shared.data.read_exact_at(&mut span, offset)?;
    Ok(Bytes::from(span))
}

pub(crate) fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("sizes are bounded by OBJECT_SIZE_BYTES_MAX")
}

/// Statistics of the file system under `dir`.
pub(crate) fn statvfs(dir: &Path) -> Result<(u64, u64, u64), StoreError> {
    let s = rustix::fs::statvfs(dir)
        .map_err(|e| StoreError::Io(format!("statvfs {}: {e}", dir.display())))?;
    let total = s.f_blocks.saturating_mul(s.f_frsize);
    let available = s.f_bavail.saturating_mul(s.f_frsize);
    // Used is what this process cannot write: blocks in use, blocks
    // reserved for root, and any quota or provisioning limit under the
    // file system (on shared hosts `f_bavail` can be far below
    // `f_bfree`). Full ratios then measure what is really left.
    Ok((total, total.saturating_sub(available), available))
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

/// Counts a transaction from its prepare until its commit is answered, so
/// the committer knows how many more are on their way (see
/// [`limits::GROUP_COMMIT_WAIT`]).
#[derive(Debug)]
pub(crate) struct Active(Arc<AtomicUsize>);

impl Active {
    fn new(count: &Arc<AtomicUsize>) -> Active {
        count.fetch_add(1, Ordering::Relaxed);
        Active(Arc::clone(count))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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

/// What [`DiskStore::audit_space`] found: the data file's space agrees
/// with the object records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceAudit {
    /// Extents object records name.
    pub extents: u64,
    /// Their space in the data file.
    pub referenced_bytes: u64,
    /// Space the allocator counts as held (referenced, in flight or
    /// waiting for reuse).
    pub allocated_bytes: u64,
    /// Freed extents waiting for readers before reuse.
    pub pending_bytes: u64,
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
        let mut used: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        for item in self.shared.objects.iter() {
            let (key, value) = item.into_inner()?;
            if let Ok(ObjectRecord {
                data: Data::Extents { extents, .. },
                ..
            }) = ObjectRecord::decode(&key, &value, &|| "object".into())
            {
                used.extend(
                    extents
                        .iter()
                        .map(|e| (e.offset, e.allocated_bytes(), key.to_vec())),
                );
            }
        }
        used.sort_unstable();
        let file_bytes = self.shared.data.metadata()?.len();
        let name = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
        for pair in used.windows(2) {
            let ((a, a_len, a_key), (b, _, b_key)) = ((&pair[0]), (&pair[1]));
            if a + a_len > *b {
                return Err(StoreError::Corrupt(format!(
                    "extent at {a} ({a_len} bytes) of {} overlaps extent at {b} of {}: space handed out twice",
                    name(a_key),
                    name(b_key)
                )));
            }
        }
        let alloc = self.shared.space.allocator();
        let pending_bytes = self.shared.space.pending_bytes();
        let mut referenced_bytes = 0;
        for (offset, length, key) in &used {
            referenced_bytes += length;
            if offset + length > file_bytes.max(alloc.end()) {
                return Err(StoreError::Corrupt(format!(
                    "extent at {offset} ({length} bytes) of {} ends past the data file ({file_bytes} bytes)",
                    name(key)
                )));
            }
            if alloc.any_free(*offset, *length) {
                return Err(StoreError::Corrupt(format!(
                    "extent at {offset} ({length} bytes) of {} is free in the allocator: it would be handed out again",
                    name(key)
                )));
            }
        }
        let allocated_bytes = alloc.allocated_bytes();
        if allocated_bytes < referenced_bytes {
            return Err(StoreError::Corrupt(format!(
                "the allocator holds {allocated_bytes} bytes but records name {referenced_bytes}"
            )));
        }
        Ok(SpaceAudit {
            extents: used.len() as u64,
            referenced_bytes,
            allocated_bytes,
            pending_bytes,
        })
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
            .and_then(|()| self.check_space(&txn))
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

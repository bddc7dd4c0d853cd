//! The state every thread of a [`DiskStore`](crate::DiskStore) shares
//! (readers, submitters, the committer, its checkpoint and reclaim
//! threads): the store's settings, its open handles ([`Shared`]) and the
//! small pieces of state they hold (the data file's preallocation, the last
//! sample of the file system's usage, the count of transactions in
//! flight); and the two things more than one of them does with the
//! metadata database: apply key images and flush.
//!
//! It sits below every other part of `DiskStore` (data-file I/O, space
//! accounting, recovery, the overlay, the committer), so none of them
//! depends on another just to reach the handles. The types `Shared` holds
//! ([`Growth`], [`UsageSample`], [`Active`]) live here for the same reason,
//! though the data-file, space and submission code drive them.

use crate::alloc::Space;
use crate::failpoint::{CrashPoint, SyncSite};
use crate::flush::Flusher;
use crate::wal::{self, Change};
use crate::{CollectionId, CollectionUsage, StoreError, limits};
use fjall::{Database, Keyspace};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Every collection's objects and bytes as committed: counted at open
    /// ([`crate::space::rebuild_allocator`]), then kept by the committer.
    pub per_collection: Arc<Mutex<BTreeMap<CollectionId, CollectionUsage>>>,
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

/// Counts a transaction from its prepare until its commit is answered, so
/// the committer knows how many more are on their way (see
/// [`limits::GROUP_COMMIT_WAIT`]).
#[derive(Debug)]
pub(crate) struct Active(Arc<AtomicUsize>);

impl Active {
    pub(crate) fn new(count: &Arc<AtomicUsize>) -> Active {
        count.fetch_add(1, Ordering::Relaxed);
        Active(Arc::clone(count))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The file system's size and usage when last asked, plus the payload
/// bytes accepted since (see `space::check_space`).
pub(crate) struct UsageSample {
    pub(crate) taken: std::time::Instant,
    pub(crate) total_bytes: u64,
    pub(crate) used_bytes: u64,
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
    pub(crate) fn new(data: &File, dir: &Path) -> Growth {
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
    pub(crate) fn cover(&self, data: &File, end: u64) {
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

/// Applies key images to the metadata database as one atomic batch, not
/// flushed (the log or a checkpoint makes them durable).
pub(crate) fn apply_changes(shared: &Shared, changes: &[Change]) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut batch = shared.db.batch().durability(None);
    for change in changes {
        let keyspace = shared.keyspace(change.space);
        match &change.value {
            Some(value) => batch.insert(keyspace, change.key.as_slice(), value.as_slice()),
            None => batch.remove(keyspace, change.key.as_slice()),
        }
    }
    batch.commit()?;
    Ok(())
}

/// Makes the data file and the metadata database durable: the first half of
/// a checkpoint, after which the log's header may move past everything
/// applied before it.
pub(crate) fn flush_store(shared: &Shared) -> Result<(), StoreError> {
    if !crate::failpoint::skip(SyncSite::CheckpointData) {
        shared.sync_data()?;
    }
    crate::failpoint::crash_point(CrashPoint::CheckpointAfterData);
    // fdatasync suffices on Linux: it persists the metadata needed to read
    // the data back (size, extent state); fsync would also write inode
    // times.
    if !crate::failpoint::skip(SyncSite::CheckpointMeta) {
        shared.db.persist(fjall::PersistMode::SyncData)?;
    }
    crate::failpoint::crash_point(CrashPoint::CheckpointBeforeHeader);
    Ok(())
}

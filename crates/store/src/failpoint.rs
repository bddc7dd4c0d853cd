//! Test-only switches that make the store's crash and power-loss tests
//! prove themselves (feature `failpoints`; without it every switch is off
//! and compiles away).
//!
//! - `CAIRN_STORE_SKIP_SYNC=<site>` skips one flush site of the store
//!   ([`SyncSite`]): the sync-removal self-test
//!   (`tests/sync_removal.rs`) runs the power-loss workload with each site
//!   skipped in turn and must see acknowledged data lost for every one.
//! - `CAIRN_STORE_CRASH_AT=<point>:<n>` kills the process (SIGKILL, as the
//!   crash harness does) the `n`th time it reaches a [`CrashPoint`]: kills
//!   inside a checkpoint, a log wrap or a hole punch, windows a kill at a
//!   random instant rarely lands in.
//!
//! Only the store's own tests enable the feature (a dev-dependency on
//! itself), so `cargo build` of `cairn` leaves every switch out; a
//! workspace test build has them compiled in, inert unless the variable is
//! set.

/// A place where the store makes writes durable. The names are the values
/// `CAIRN_STORE_SKIP_SYNC` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSite {
    /// `fsync` of the parent of each directory made for a new store
    /// (`create_dirs_durably`).
    StoreParents,
    /// A new store's metadata database: the superblock's `SyncAll` commit
    /// and the `fsync` of every directory fjall made, before the rename
    /// that publishes it.
    MetaCreate,
    /// `fsync` of a new store's directory, which makes the names of its
    /// metadata (the rename), data file and log durable.
    StoreDir,
    /// `fsync` of a new commit log (zeros and header).
    WalCreate,
    /// `O_DSYNC` of each commit-log record (or `fdatasync` after a buffered
    /// one).
    WalAppend,
    /// `fdatasync` after the log header moves (a checkpoint's second half).
    WalHeader,
    /// `fdatasync` of the data file by a submitter after its large direct
    /// writes, before it queues the transaction.
    Prewrite,
    /// `fdatasync` of the data file before a batch's log record when the
    /// committer itself wrote large extents (a clone of a large object).
    BatchUnsynced,
    /// `fdatasync` of the data file in a checkpoint.
    CheckpointData,
    /// fjall's journal persist in a checkpoint.
    CheckpointMeta,
}

impl SyncSite {
    /// Every site, in the order the docs list them.
    pub const ALL: [SyncSite; 10] = [
        SyncSite::StoreParents,
        SyncSite::MetaCreate,
        SyncSite::StoreDir,
        SyncSite::WalCreate,
        SyncSite::WalAppend,
        SyncSite::WalHeader,
        SyncSite::Prewrite,
        SyncSite::BatchUnsynced,
        SyncSite::CheckpointData,
        SyncSite::CheckpointMeta,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SyncSite::StoreParents => "store-parents",
            SyncSite::MetaCreate => "meta-create",
            SyncSite::StoreDir => "store-dir",
            SyncSite::WalCreate => "wal-create",
            SyncSite::WalAppend => "wal-append",
            SyncSite::WalHeader => "wal-header",
            SyncSite::Prewrite => "prewrite",
            SyncSite::BatchUnsynced => "batch-unsynced",
            SyncSite::CheckpointData => "checkpoint-data",
            SyncSite::CheckpointMeta => "checkpoint-meta",
        }
    }
}

/// A place where a test may kill the process (`CAIRN_STORE_CRASH_AT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// A checkpoint flushed the data file, before fjall's persist.
    CheckpointAfterData,
    /// A checkpoint made data and metadata durable, before the log header
    /// moved.
    CheckpointBeforeHeader,
    /// A record is about to be written at the start of the ring after
    /// skipping the end (a wrap).
    WalWrap,
    /// Freed extents are about to be punched back to the file system.
    Punch,
    /// Replay after a crash has applied its records, before it flushed them.
    ReplayApplied,
    /// A batch too large for one log record went to fjall, before the
    /// checkpoint that makes it durable.
    LargeBatchApplied,
    /// A checkpoint moved the log header: what it covered is no longer
    /// replayed.
    CheckpointDone,
    /// A batch's log record is durable, before its changes go to fjall
    /// and its transactions are answered.
    LogAppended,
    /// The same, for a batch with large extents (not in the record: the
    /// data file holds them alone).
    LargeDataLogged,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 9] = [
        CrashPoint::CheckpointAfterData,
        CrashPoint::CheckpointBeforeHeader,
        CrashPoint::CheckpointDone,
        CrashPoint::WalWrap,
        CrashPoint::Punch,
        CrashPoint::ReplayApplied,
        CrashPoint::LargeBatchApplied,
        CrashPoint::LogAppended,
        CrashPoint::LargeDataLogged,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::CheckpointAfterData => "checkpoint-after-data",
            CrashPoint::CheckpointBeforeHeader => "checkpoint-before-header",
            CrashPoint::WalWrap => "wal-wrap",
            CrashPoint::Punch => "punch",
            CrashPoint::ReplayApplied => "replay-applied",
            CrashPoint::LargeBatchApplied => "large-batch-applied",
            CrashPoint::CheckpointDone => "checkpoint-done",
            CrashPoint::LogAppended => "log-appended",
            CrashPoint::LargeDataLogged => "large-data-logged",
        }
    }
}

/// Whether the test asked to skip `site`.
#[cfg(feature = "failpoints")]
pub(crate) fn skip(site: SyncSite) -> bool {
    static SKIP: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    SKIP.get_or_init(|| std::env::var("CAIRN_STORE_SKIP_SYNC").ok())
        .as_deref()
        == Some(site.name())
}

#[cfg(not(feature = "failpoints"))]
#[inline]
pub(crate) fn skip(_site: SyncSite) -> bool {
    false
}

/// Whether the test armed `point` (whichever hit it named).
#[cfg(feature = "failpoints")]
pub(crate) fn armed(point: CrashPoint) -> bool {
    std::env::var("CAIRN_STORE_CRASH_AT").is_ok_and(|v| v.split(':').next() == Some(point.name()))
}

#[cfg(not(feature = "failpoints"))]
#[inline]
pub(crate) fn armed(_point: CrashPoint) -> bool {
    false
}

/// Kills the process here if the test asked for it and this is the hit it
/// named.
#[cfg(feature = "failpoints")]
pub(crate) fn crash_point(point: CrashPoint) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static TARGET: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let target = TARGET.get_or_init(|| {
        let value = std::env::var("CAIRN_STORE_CRASH_AT").ok()?;
        let (name, nth) = value.split_once(':').unwrap_or((value.as_str(), "1"));
        Some((name.to_string(), nth.parse().unwrap_or(1)))
    });
    let Some((name, nth)) = target else {
        return;
    };
    if name != point.name() {
        return;
    }
    if HITS.fetch_add(1, Ordering::SeqCst) + 1 == *nth {
        println!("CRASH {}", point.name());
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline]
pub(crate) fn crash_point(_point: CrashPoint) {}

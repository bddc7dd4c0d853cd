//! The MDS's bounds and defaults.

/// Bytes of entries one journal append carries at most (more wait for the
/// next append).
pub const JOURNAL_BATCH_BYTES_MAX: usize = 4 << 20;

/// How long the journal writer gathers entries before an append, unless a
/// client waits for durability (`fsync`). Clients are answered before the
/// journal, so this costs no request latency.
pub const JOURNAL_FLUSH_DELAY_MS: u64 = 5;

/// How long write-back gathers durable batches before a round.
pub const WRITEBACK_DELAY_MS: u64 = 100;

/// A journal segment object is closed past this size.
pub const SEGMENT_BYTES_MAX: usize = 32 << 20;

/// Namespace-object writes (and data purges) in flight during write-back.
pub const WRITEBACK_OPS_IN_FLIGHT: usize = 32;

/// Entries waiting for the journal writer; a full queue holds the MDS back.
pub const JOURNAL_QUEUE_MAX: usize = 65_536;

/// Requests waiting for the namespace actor.
pub const REQUEST_QUEUE_MAX: usize = 4096;

/// Period of the MDS's beacon to the monitor.
pub const BEACON_MS: u64 = 500;

/// Default: after taking over, the MDS takes only replays from clients of
/// its predecessor for this long (Ceph's `mds_reconnect_timeout`, shorter:
/// clients here reconnect within a beacon period).
pub const RECONNECT_WINDOW_MS_DEFAULT: u64 = 1_500;

/// Default: a session silent this long (no request, no poll) is evicted
/// and its opens are released.
pub const SESSION_TIMEOUT_MS_DEFAULT: u64 = 60_000;

/// Loads one request may need before it is refused (a namespace deeper
/// than this many uncached directories on one rename is refused `EIO`
/// rather than stall the MDS).
pub const LOADS_PER_REQUEST_MAX: usize = 4096;

/// Omap entries read per page when a directory is loaded.
pub const DIR_PAGE_ENTRIES: u32 = 1024;

/// Requests remembered as done (for resends of a change whose answer was
/// lost with a connection); a failover's replays are recognised from the
/// journal instead.
pub const COMPLETED_KEPT: usize = 1 << 16;

/// Default: the namespace cache is trimmed to this many bytes (Ceph's
/// `mds_cache_memory_limit` is 4 GiB; this machine is small).
pub const CACHE_BYTES_DEFAULT: usize = 256 << 20;

/// Default: how long a client may cache attributes and entries it was
/// answered (renewed by every answer). Long, since a change recalls what
/// it breaks anyway; it bounds what an evicted mount must wait out.
pub const LEASE_MS_DEFAULT: u64 = 120_000;

/// Default: a lease holder that has not acknowledged a recall this long is
/// evicted (the change waiting on it then goes ahead).
pub const RECALL_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Evicted sessions remembered (listed, and refused until they say
/// `Hello` afresh).
pub const EVICTED_KEPT: usize = 1024;

/// Default: a request in flight this long is slow (logged when answered,
/// listed by `cairn status`, a `cairn health` warning meanwhile), as
/// Ceph's `mds_op_complaint_time`.
pub const COMPLAINT_MS_DEFAULT: u64 = 30_000;

/// Regular files up to this size keep their data in the MDS (inline
/// data): none by default. Kept inline, a small file reads with its open
/// (2.8× faster with one process here), but its bytes live in the MDS
/// cache and are written twice in the metadata pool: with 80,000 files of
/// 3,901 bytes the 256 MiB cache overflowed and stats and unlinks fell
/// three- to fivefold (docs/performance.md). As CephFS, off unless asked
/// (`cairn mds --inline-max 4K`).
pub const INLINE_MAX_DEFAULT: u64 = 0;

/// The most `cairn mds --inline-max` may be: inline data lives in the MDS
/// cache and journal, so it is for small files only.
pub const INLINE_MAX_LIMIT: u64 = 64 << 10;

/// The most keys and values one write-back write carries (a request's
/// body holds at most 1 MiB; inode records with inline data are
/// kilobytes each, 4,096 to an inode object).
pub const WRITEBACK_OP_BYTES_MAX: usize = 512 << 10;

/// Removed files the purger takes from the purge queue at a time.
pub const PURGE_PAGE_FILES: u32 = 256;

/// Data objects the purge queue deletes at once: few, so removed files'
/// data trickles out behind client requests rather than competing with
/// them for the OSDs (CephFS bounds its purge queue the same way,
/// `mds_max_purge_ops`).
pub const PURGE_OPS_IN_FLIGHT: usize = 4;

//! The FUSE client's bounds and defaults.

/// Object operations one file read or write keeps in flight.
pub const DATA_OPS_IN_FLIGHT: usize = 32;

/// Bytes the mount reads ahead of a file's reader once its reads run
/// sequentially (in chunks of [`READAHEAD_CHUNK_BYTES`], fetched in the
/// background): with 4 MiB objects, eight objects on their way.
pub const READAHEAD_BYTES: u64 = 32 << 20;

/// Bytes a mount reads ahead across all its files at most (part of its
/// data cache, beside the write buffer).
pub const READAHEAD_BUDGET_BYTES: u64 = 128 << 20;

/// The unit of the mount's read-ahead: a default layout's object.
pub const READAHEAD_CHUNK_BYTES: u64 = 4 << 20;

/// The kernel's read-ahead on a mount (its backing device's
/// `read_ahead_kb`; the kernel starts FUSE mounts at 128 KiB). The mount
/// reads ahead itself ([`READAHEAD_BYTES`]), so the kernel's only keeps
/// requests coming: a 4 MiB sequential read ran at 1,230–1,350 MiB/s with
/// 1 MiB, 1,150–1,200 with 4 MiB and 870–920 with 16 MiB (more pages
/// taken and charged at once, ahead of the reader).
pub const KERNEL_READAHEAD_BYTES: u64 = 1 << 20;

/// Dirty bytes one file buffers before they are sent to the OSDs.
pub const DIRTY_BYTES_PER_FILE_MAX: u64 = 32 << 20;
/// Full buffers of one file on their way to the OSDs at once while the
/// next fills (write-behind): with 32 MiB buffers, up to 24 whole 4 MiB
/// objects in flight, and a file's buffered data at most 128 MiB.
pub const WRITE_BEHIND_BUFFERS: usize = 3;

/// At unmount, how long the mount tries to send what closed files kept
/// before it lets go (and logs what was not sent).
pub const UNMOUNT_SEND_DEADLINE_MS: u64 = 30_000;

/// An MDS request gives up (`EIO`) after this long without an answer from
/// any MDS (failovers included).
pub const MDS_REQUEST_DEADLINE_MS: u64 = 120_000;

/// One attempt of an MDS request.
pub const MDS_REQUEST_TIMEOUT_MS: u64 = 15_000;

/// Pause before asking the monitor again for the active MDS.
pub const MDS_DISCOVER_PAUSE_MS: u64 = 100;

/// How long a poll waits at the MDS for news.
pub const POLL_WAIT_MS: u32 = 5_000;

/// Entries asked of the MDS per readdir page.
pub const READDIR_PAGE_ENTRIES: u32 = 1024;

/// Largest write the kernel sends at once (FUSE `max_write`).
pub const MAX_WRITE_BYTES: u32 = 4 << 20;

/// A lease is cached this much shorter than the MDS grants it (the
/// kernel's clock starts a little after the MDS's).
pub const LEASE_MARGIN_MS: u64 = 500;

/// A recall is done in the kernel again this long after the first time
/// (for an answer that was on its way to the kernel meanwhile).
pub const REINVALIDATE_MS: u64 = 20;

/// Leases reasserted per request after a failover.
pub const REASSERT_BATCH: usize = 65_536;

/// Data a close kept (under a buffer lease) goes to the OSDs this long
/// after the close at the latest (Ceph's client keeps dirty data up to
/// `client_oc_max_dirty_age`, 5 s).
pub const KEEP_AFTER_CLOSE_MS: u64 = 2_000;

/// Reads of a file fetched without holding it before one holds it (each
/// starts again when written bytes went to the OSDs meanwhile).
pub const READ_UNHELD_ATTEMPTS: u32 = 3;

/// Kept files sent at once (each an object write and a size report):
/// the files a storm of small writes left are sent well inside the
/// recall timeout.
pub const KEPT_SENDS_IN_FLIGHT: usize = 16;

/// A close keeps data only while the buffer lease has this long left.
pub const KEEP_LEASE_MARGIN_MS: u64 = 10_000;

/// A size reported to the MDS is still merged into answers this long (an
/// answer the MDS gave before the report may arrive after it).
pub const REPORTED_KEPT_MS: u64 = 5_000;

/// Inode numbers asked of the MDS at a time for asynchronous creates; the
/// next batch is asked for when half are used.
pub const INOS_PER_TAKE: u32 = 4096;

/// Changes answered by the mount itself (asynchronous creates, unlinks
/// and releases) waiting to be sent: past this, calls wait for the MDS.
pub const OUTBOX_MAX: u64 = 8192;

/// The most changes sent in one `Batch`.
pub const BATCH_OPS_MAX: usize = 1024;

/// The most file data (inline writes) one `Batch` carries: a request's
/// body holds at most 1 MiB (`cairn_wire`'s `BODY_SIZE_BYTES_MAX`).
pub const BATCH_DATA_BYTES_MAX: usize = 512 << 10;

/// A delegation is used only while this much of it is left, so a batch
/// sent now reaches the MDS before it ends.
pub const DELEGATION_MARGIN_MS: u64 = 10_000;

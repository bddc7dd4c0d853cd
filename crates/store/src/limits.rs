//! Every bound of the store, named once. Format-affecting values (checksum
//! block, allocation unit) are also recorded in `docs/store-format.md`.

/// Bytes covered by one crc32c. 4 KiB matches the page and device block, so
/// a small random read verifies (and reads) at most two extra partial
/// blocks, and 4 bytes per 4 KiB costs 0.1% of metadata.
pub const CSUM_BLOCK_BYTES: u64 = cairn_types::crc::BLOCK_BYTES as u64;

/// Unit of data-file allocation. Equal to the checksum block so freed space
/// can be punched back to the file system in whole blocks.
pub const ALLOC_UNIT_BYTES: u64 = 4096;

/// Objects up to this size live inline in their metadata record: one
/// journal write and no data-file allocation or flush. Larger ones live in
/// data-file extents. Inline values are rewritten by every LSM compaction
/// (measured: write amplification 4.6 and a third of the CPU for 4 KiB
/// objects kept inline), while an extent is written once: an inline value
/// of `s` bytes costs about `4.6 s` of writes, a 4 KiB extent 4 KiB, even
/// at about 900 bytes. At 2 KiB (the shards of 4 KiB objects on a 2+1
/// pool) the compactions cost 40% more OSD CPU per write and doubled the
/// 99th percentile latency (`cairn bench object`, 4 KiB writes to an EC
/// 2+1 pool: 4,300 writes/s inline, 5,100 as extents); the space saved is
/// the rest of the 4 KiB block.
pub const INLINE_SIZE_BYTES_MAX: u64 = 1024;

/// Payloads at least this long are written by their submitter with
/// `O_DIRECT`, skipping the page-cache copy (for 4 MiB writes the kernel's
/// copy was 30% of all time). Shorter ones go through the page cache: a
/// 4 KiB direct write waits behind the device's flushes (measured 227 µs,
/// against 4 µs buffered), which kept half the writers out of each batch,
/// while their writeback inside the batch's one `fdatasync` is cheap
/// (4 KiB objects, 16 writers: 17,500 → 25,200 commits/s). The value is
/// [`cairn_iobuf::limits::DIRECT_IO_BYTES_MIN`], which the wire's threshold
/// for receiving data segments into aligned memory is too, so every payload
/// this long arrives ready for `O_DIRECT`.
pub const DIRECT_WRITE_BYTES_MIN: u64 = cairn_iobuf::limits::DIRECT_IO_BYTES_MIN as u64;

/// Spans of the data file at least this long are read with `O_DIRECT` into
/// a buffer of the process-wide pool, like the writes (and the same
/// [`cairn_iobuf::limits::DIRECT_IO_BYTES_MIN`]); shorter ones through the
/// page cache.
pub const DIRECT_READ_BYTES_MIN: usize = cairn_iobuf::limits::DIRECT_IO_BYTES_MIN;

/// Aligned payloads at least this long are checksummed on a second thread
/// while they are written (a thread start costs tens of microseconds, the
/// checksums of 1 MiB about 50).
pub const PARALLEL_CSUM_BYTES_MIN: u64 = 1024 * 1024;

/// Largest single extent; longer writes are split. Bounds the checksum list
/// of one extent (16,384 crcs = 64 KiB).
pub const EXTENT_SIZE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Largest object (Ceph's default `osd_max_object_size` is 128 MiB).
pub const OBJECT_SIZE_BYTES_MAX: u64 = 1 << 32;

/// Most bytes one read returns; larger objects are read in ranges. Bounds
/// the memory a single request can make the store allocate.
pub const READ_BYTES_MAX: u64 = 1 << 30;

/// Longest object name (DESIGN: 2 KiB).
pub const OBJECT_NAME_BYTES_MAX: usize = 2048;

/// Longest xattr name and largest xattr value.
pub const XATTR_NAME_BYTES_MAX: usize = 256;
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;

/// Longest omap key, largest omap value, and most omap keys returned by one
/// range call.
pub const OMAP_KEY_BYTES_MAX: usize = 4096;
pub const OMAP_VALUE_BYTES_MAX: usize = 1024 * 1024;

/// Longest collection-metadata key, largest value.
pub const META_KEY_BYTES_MAX: usize = 4096;
pub const META_VALUE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Most operations in one transaction.
pub const TXN_OPS_MAX: usize = 4096;

/// Transactions queued for the committer before submitters wait
/// (backpressure).
pub const COMMIT_QUEUE_MAX: usize = 1024;

/// Transactions, and payload bytes, merged into one group commit.
pub const BATCH_TXNS_MAX: usize = 256;
pub const BATCH_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Most keys a single list or range call returns.
pub const PAGE_ITEMS_MAX: usize = 65_536;

/// Memory the metadata database may hold in memtables, in all and per
/// keyspace: bounds resident memory while inline objects are overwritten.
pub const META_WRITE_BUFFER_BYTES_MAX: u64 = 64 * 1024 * 1024;
pub const META_MEMTABLE_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// Small extents (payloads written through the page cache) are cut in
/// order from zones of up to this many bytes, so one batch's writeback is a
/// few large requests rather than one per extent.
pub const SMALL_ZONE_BYTES: u64 = 4 * 1024 * 1024;

/// A free run this long or longer may become a zone; shorter holes are left
/// to best fit.
pub const SMALL_ZONE_BYTES_MIN: u64 = 256 * 1024;

/// Zones come from fresh space at the end of the data file only while the
/// free holes below it hold at most this much (or a quarter of the
/// allocated bytes, if more); past that, small extents fill the holes.
pub const SMALL_ZONE_SLACK_BYTES: u64 = 64 * 1024 * 1024;

/// Ring bytes of the commit log (`wal`): 1/128 of the file system, between
/// these bounds (a small test file system keeps most of its room for data).
/// A checkpoint is taken once a quarter of the ring is in use, or when the
/// store is idle.
pub const WAL_BYTES_MIN: u64 = 8 * 1024 * 1024;
pub const WAL_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Largest log record (a quarter of the smallest ring). A batch whose
/// record would be larger (its small data and metadata together) is made
/// durable by a checkpoint instead.
pub const WAL_RECORD_BYTES_MAX: u64 = 2 * 1024 * 1024;

/// Longest the committer waits for transactions still being prepared to
/// join a batch (only while more are in flight than queued). Each joiner
/// saves a whole flush (about 200 µs here) of waiting.
pub const GROUP_COMMIT_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// A checkpoint is also taken once this many bytes of extents wait for
/// one to be freed (a bulk delete): their space then returns in steps.
pub const CHECKPOINT_FREED_BYTES: u64 = 64 * 1024 * 1024;

/// The data file is preallocated ahead of its end in steps of 1/256 of the
/// file system, between these bounds (see `shared::Growth`).
pub const DATA_GROWTH_FRACTION: u64 = 256;
pub const DATA_GROWTH_BYTES_MIN: u64 = 4 * 1024 * 1024;
pub const DATA_GROWTH_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Longest a sample of the file system's usage decides the full check
/// (payload bytes accepted since count as used; a write the sample would
/// refuse is decided on a fresh one). Writers elsewhere on the same file
/// system go unseen for at most this long.
pub const USAGE_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

//! Every bound of the I/O buffers, named once.

/// The alignment every buffer here has: the largest block a Linux device
/// asks of `O_DIRECT` memory, and the page size.
pub const ALIGN_BYTES: usize = 4096;

/// The x86-64 and aarch64 (4 KiB granule) huge page: buffers of at least
/// this size are aligned to it and asked to be backed by huge pages.
pub const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Buffers the process-wide pool keeps idle. An OSD has about one large
/// data segment per write in flight (client writes it leads and sub-writes
/// it takes: 16-24 with a client keeping 16 writes of 4 MiB in flight on
/// three OSDs), and a buffer not kept is unmapped and a new one faulted in.
pub const SHARED_KEPT_MAX: usize = 24;

/// The largest buffer the process-wide pool keeps (a 4 MiB object and
/// then some); larger ones are unmapped when returned. At most
/// `SHARED_KEPT_MAX` × this of idle memory: 200 MiB.
pub const SHARED_BUFFER_BYTES_MAX: usize = 8 * 1024 * 1024 + 64 * 1024;

/// Payloads at least this long travel in buffers of the process-wide pool
/// and reach the disk with `O_DIRECT`: the wire receives data segments this
/// large into their own buffer (`cairn_wire::limits::ALIGNED_DATA_BYTES_MIN`),
/// and the store writes and reads spans this long directly
/// (`cairn_store::limits::DIRECT_WRITE_BYTES_MIN`, `DIRECT_READ_BYTES_MIN`).
/// Those names are defined as this one value, not merely equal to it: a
/// segment the wire aligned below the store's threshold would be staged
/// through the page cache anyway, and one above it that the wire did not
/// align would be copied into an aligned buffer first. The store's
/// measurements choose the value (see `DIRECT_WRITE_BYTES_MIN`).
pub const DIRECT_IO_BYTES_MIN: usize = 64 * 1024;

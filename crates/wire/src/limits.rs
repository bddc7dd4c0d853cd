//! Every bound the wire layer enforces, named in one place.
//!
//! The frame-size limits are part of the protocol: a peer that exceeds them
//! is malformed and its connection is closed. The others bound memory and
//! queueing on one connection and are defaults for [`crate::ConnectOptions`]
//! and [`crate::ServeOptions`].

use std::time::Duration;

/// Bytes of fixed header in front of every frame.
pub const HEADER_SIZE_BYTES: usize = 32;

/// The largest postcard body a frame may carry. Bodies are small control
/// structs; bulk bytes belong in the data segment.
pub const BODY_SIZE_BYTES_MAX: u32 = 1024 * 1024;

/// The largest raw data segment a frame may carry.
pub const DATA_SIZE_BYTES_MAX: u32 = 256 * 1024 * 1024;

/// Requests one client [`crate::Connection`] may have awaiting a response;
/// further calls wait (inside their timeout) for a slot.
pub const IN_FLIGHT_REQUESTS_MAX: usize = 1024;

/// Encoded frames queued for the writer task of one connection; senders
/// wait when it is full, so a slow peer pushes back on its callers.
pub const OUTGOING_FRAMES_MAX: usize = 256;

/// Requests one server connection handles at once; the reader stops reading
/// that connection's socket while all are busy.
pub const HANDLERS_PER_CONNECTION_MAX: usize = 256;

/// Connections one [`crate::serve`] loop keeps open; it stops accepting
/// while at the limit.
pub const CONNECTIONS_MAX: usize = 4096;

/// Unsolicited frames a client connection queues for its owner before its
/// reader waits.
pub const INCOMING_FRAMES_MAX: usize = 256;

/// The most the reader reserves ahead of bytes actually received. A header
/// may announce up to 257 MiB; reserving it all up front would let a peer
/// pin that much memory with 32 bytes. Beyond this, the buffer grows as the
/// bytes arrive.
pub const READ_RESERVE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Data segments at least this large (and at most
/// [`READ_RESERVE_BYTES_MAX`]) are received into their own block-aligned
/// buffer, so the store can write them with `O_DIRECT` as they are. The
/// store's threshold for direct writes is the same constant
/// ([`cairn_iobuf::limits::DIRECT_IO_BYTES_MIN`]), so the two cannot drift.
pub const ALIGNED_DATA_BYTES_MIN: usize = cairn_iobuf::limits::DIRECT_IO_BYTES_MIN;

/// The least the reader asks the socket for in one read.
pub const READ_CHUNK_BYTES_MIN: usize = 64 * 1024;

/// Size of the writer's coalescing buffer: small frames are batched into
/// one `write`; data segments at least this large bypass it (no copy).
pub const WRITE_BUFFER_SIZE_BYTES: usize = 64 * 1024;

/// Frames the writer coalesces before it flushes, so one busy producer
/// cannot delay the flush indefinitely.
pub const WRITE_BATCH_FRAMES_MAX: usize = 64;

/// Default time to establish a TCP connection.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Default time for one call: waiting for an in-flight slot, queueing the
/// request and receiving its response.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Default time a shutting-down server gives in-flight handlers to finish
/// and their responses to be written before it drops the connection.
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Pause after a failed `accept` (e.g. out of file descriptors) before the
/// server tries again, so it does not spin.
pub const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

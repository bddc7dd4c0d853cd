//! The protocol's bounds: both ends hold to them, and a receiver refuses
//! (never truncates silently) what exceeds them.

/// Longest object name a request may carry, in bytes (the store's own
/// bound may be larger, never smaller; the OSD asserts it).
pub const OBJECT_NAME_BYTES_MAX: usize = 2048;

/// Operations one client request may carry.
pub const OPS_PER_REQUEST_MAX: usize = 64;

/// Guards one client request may carry.
pub const GUARDS_PER_OP_MAX: usize = 16;

/// Incrementals sent in one map reply; a map further behind (but within
/// the history) gets them in pages of this many, and asks again (frame
/// bodies are bounded at 1 MiB).
pub const INCREMENTALS_PER_REPLY_MAX: usize = 100;

/// The longest a `Subscribe` request is held waiting for a new epoch; a
/// larger `wait_ms` is clamped to it. Subscribers then ask again, so this
/// also bounds how long a dead subscriber's request lingers.
pub const SUBSCRIBE_WAIT_MS_MAX: u32 = 30_000;

/// How much longer than its `wait_ms` a subscriber waits for the answer
/// before calling the monitor unreachable: room for the reply's trip and a
/// busy monitor actor.
pub const SUBSCRIBE_REPLY_MARGIN_MS: u32 = 5_000;

/// Bytes of authenticator a peer hello may carry.
pub const HELLO_AUTH_BYTES_MAX: usize = 4096;

/// Longest error text a scrub map carries per object.
pub const SCRUB_ERROR_BYTES_MAX: usize = 256;

/// Most entries one copy reports for one scrub chunk (a copy holding far
/// more objects in the chunk's key range than the primary is itself
/// reported as inconsistent).
pub const SCRUB_MAP_ENTRIES_MAX: usize = 1024;

/// Inconsistent objects a copy reports in a `Notify` (and keeps per PG for
/// `pg query` and `health detail`; the count goes on beyond it).
pub const NOTIFY_INCONSISTENT_MAX: usize = 64;

/// Byte ranges one shard read may ask of one shard (a client read of
/// several ranges of an erasure-coded object asks each shard for its part
/// of each).
pub const SHARD_READ_RANGES_MAX: usize = 64;

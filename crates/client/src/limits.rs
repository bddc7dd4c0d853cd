//! The client's bounds: retry backoff, attempts and deadlines.

use std::time::Duration;

/// Overall time one operation may take, across all its retries.
pub const OP_DEADLINE_DEFAULT: Duration = Duration::from_secs(30);
/// Attempts per operation before giving up even within the deadline.
pub const ATTEMPTS_MAX_DEFAULT: u32 = 200;
/// First wait after a retryable failure; doubles up to the maximum.
pub const BACKOFF_INITIAL_DEFAULT: Duration = Duration::from_millis(20);
/// Longest wait between attempts.
pub const BACKOFF_MAX_DEFAULT: Duration = Duration::from_secs(1);
/// Longest wait before retrying an op on a busy object (recovery of one
/// object takes milliseconds; a longer backoff would idle the client).
pub const OBJECT_BUSY_BACKOFF_MAX: Duration = Duration::from_millis(50);
/// A map older than this is refetched before the next operation, so a
/// client notices map changes even when no OSD tells it to retry; while a
/// map subscription is answering, the map counts as fresh regardless.
pub const MAP_REFRESH_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// How long the monitor may hold one map subscription (long poll).
pub const MAP_SUBSCRIBE_WAIT: Duration = Duration::from_secs(25);
/// Pause after a failed subscription before the next one.
pub const MAP_SUBSCRIBE_RETRY: Duration = Duration::from_secs(1);
/// Time to open a TCP connection to a monitor or an OSD.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Largest ranged read sent to an erasure-coded object's shards directly
/// (a larger one goes through the primary; a read to the end of the
/// object goes direct, and the primary takes it if a shard's part is
/// past the reply limit).
pub const DIRECT_READ_BYTES_MAX: u64 = 16 << 20;
/// How long a direct shard read may take before the client asks the
/// primary instead.
pub const DIRECT_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`crate::Client`] retries. Every field has a written-out default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    pub op_deadline: Duration,
    pub attempts_max: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub map_refresh_interval: Duration,
    pub connect_timeout: Duration,
    /// Keep a map subscription open, so new epochs arrive as the monitor
    /// commits them (off: the map is refetched only when older than
    /// `map_refresh_interval` or when an OSD says to retry).
    pub follow_map: bool,
    /// Writes pass a full cluster up to the OSDs' failsafe ratio
    /// ([`cairn_proto::osd::ClientOp::full_try`]): for the MDS only.
    pub full_try: bool,
    /// Reads of an erasure-coded object (whole, or of at most
    /// [`DIRECT_READ_BYTES_MAX`]) go straight to the OSDs holding its data
    /// shards, past the primary, and to the primary only when those
    /// decline ([`cairn_proto::osd::ClientShardRead`]).
    pub direct_reads: bool,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            op_deadline: OP_DEADLINE_DEFAULT,
            attempts_max: ATTEMPTS_MAX_DEFAULT,
            backoff_initial: BACKOFF_INITIAL_DEFAULT,
            backoff_max: BACKOFF_MAX_DEFAULT,
            map_refresh_interval: MAP_REFRESH_INTERVAL_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            follow_map: true,
            full_try: false,
            direct_reads: true,
        }
    }
}

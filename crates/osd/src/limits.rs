//! Every bound of the OSD crate, with its default and the reason for it.

/// PG log entries kept per PG (in memory and in the collection's metadata
/// keys); the oldest are trimmed beyond this. Peering (issue 5) can recover
/// a peer by log replay only while the log reaches back far enough, so this
/// trades memory and metadata space against backfill scans.
pub const LOG_ENTRIES_MAX: usize = 3000;

/// Writes in flight per PG (accepted, not yet acknowledged). Beyond it a
/// client write is answered `Busy`, so one hot PG cannot grow memory without
/// bound while a replica is slow. Also bounds a replica's writes awaiting
/// local commit.
pub const INFLIGHT_MAX: usize = 256;

// An in-flight entry must still be in the log when it completes, so the log
// must hold more entries than can be in flight.
const _: () = assert!(INFLIGHT_MAX < LOG_ENTRIES_MAX);

/// The limits of one PG, defaulting to the constants above (tests shrink
/// them to reach the edges quickly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgLimits {
    pub log_entries_max: usize,
    pub inflight_max: usize,
}

impl Default for PgLimits {
    fn default() -> PgLimits {
        PgLimits {
            log_entries_max: LOG_ENTRIES_MAX,
            inflight_max: INFLIGHT_MAX,
        }
    }
}

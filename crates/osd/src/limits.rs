//! Every bound of the OSD crate, with its default and the reason for it.

/// PG log entries kept per PG (in memory and in the collection's metadata
/// keys); the oldest are trimmed beyond this. Peering (issue 5) can recover
/// a peer by log replay only while the log reaches back far enough, so this
/// trades memory and metadata space against backfill scans.
pub const LOG_ENTRIES_MAX: usize = 3000;

/// Requests remembered per PG after their entries leave the log (Ceph's
/// `osd_pg_log_dups_tracked`): a client retrying a write after more than
/// the log's length of later writes to the PG still gets its first answer
/// instead of the write being applied again. About 40 bytes each.
pub const LOG_DUPS_MAX: usize = 3000;

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
    pub log_dups_max: usize,
    pub inflight_max: usize,
}

impl Default for PgLimits {
    fn default() -> PgLimits {
        PgLimits {
            log_entries_max: LOG_ENTRIES_MAX,
            log_dups_max: LOG_DUPS_MAX,
            inflight_max: INFLIGHT_MAX,
        }
    }
}

/// Environment variable that sets the PG log length of an OSD (like Ceph's
/// `osd_max_pg_log_entries`): longer logs let copies that were away longer
/// catch up by log recovery instead of backfill, at the cost of memory.
pub const PG_LOG_ENTRIES_ENV: &str = "CAIRN_PG_LOG_ENTRIES";

/// Bounds of [`PG_LOG_ENTRIES_ENV`]: above the in-flight bound (a write in
/// flight must still be in the log), and small enough to send in peering.
pub const PG_LOG_ENTRIES_MIN: usize = INFLIGHT_MAX + 1;
pub const PG_LOG_ENTRIES_MAX: usize = 100_000;

impl PgLimits {
    /// The defaults, with the log length from [`PG_LOG_ENTRIES_ENV`] if set.
    ///
    /// # Errors
    /// The variable is not a number within the bounds.
    pub fn from_env() -> Result<PgLimits, String> {
        let mut limits = PgLimits::default();
        if let Ok(value) = std::env::var(PG_LOG_ENTRIES_ENV) {
            let entries: usize = value
                .parse()
                .map_err(|e| format!("{PG_LOG_ENTRIES_ENV}={value}: {e}"))?;
            if !(PG_LOG_ENTRIES_MIN..=PG_LOG_ENTRIES_MAX).contains(&entries) {
                return Err(format!(
                    "{PG_LOG_ENTRIES_ENV}={entries}: must be {PG_LOG_ENTRIES_MIN} to {PG_LOG_ENTRIES_MAX}"
                ));
            }
            limits.log_entries_max = entries;
        }
        Ok(limits)
    }
}

/// How often the daemon tells the monitor it is alive; well under the
/// monitor's default 20 s down grace, so one lost heartbeat is harmless.
pub const HEARTBEAT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How often an OSD with a corrupt store tells the monitor so (well
/// within the 3 s after which `cairn status` takes a report for stale).
pub const STORE_FAILED_REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Pause before a plain map fetch after a failed subscription (monitor
/// down or restarting). A message or request naming a newer epoch triggers
/// a fetch at once anyway.
pub const MAP_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// How long one map subscription (a long poll) may be held by the monitor
/// before it answers "no change" and the OSD asks again.
pub const MAP_SUBSCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(25);

/// Pages of incrementals one map refresh fetches at most (the monitor keeps
/// 500 epochs, 100 a page).
pub const MAP_PAGES_MAX: usize = 8;

/// How often an OSD pings each peer it shares a PG with.
pub const PEER_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Longest wait for one peer's answer to a ping.
pub const PEER_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Silence after which a peer is reported to the monitor as failed (again
/// every ping round while it stays silent). Several missed pings, so one
/// slow moment does not count; the monitor marks the peer down once
/// enough distinct OSDs report it.
pub const PEER_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// Peers one OSD pings at most (it pings the OSDs of its PGs' acting sets;
/// beyond this, the monitor's own heartbeat timeout still catches them).
pub const PEER_HEARTBEAT_PEERS_MAX: usize = 256;

/// Attempts to send one PG message to a peer: on the cached connection,
/// then once more on a new one if that had died. A message still not sent
/// is dropped; the write it belongs to waits for the next interval.
pub const PEER_SEND_ATTEMPTS: usize = 2;

/// How long a read waits for in-flight writes to its object to become
/// durable on the acting set before it is answered `ObjectBusy` (the client
/// then retries); the PG core holds the read meanwhile (`pg/read.rs`).
pub const READ_WAIT_FOR_WRITE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Client reads one PG's core keeps in progress at once (waiting for a
/// write to their object, or reading); beyond it a read is answered
/// `ObjectBusy` at once.
pub const READS_PENDING_MAX: usize = 4096;

/// How long an erasure-coded read waits for one shard's answer before the
/// shard counts as failed and the read decodes around it.
pub const SHARD_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Rounds of shard reads one erasure-coded read makes: the first, and one
/// more around the shards that failed it (then `ObjectBusy`).
pub const EC_READ_ATTEMPTS: usize = 2;

/// How long a shell waits for the core to start or answer a read before it
/// answers `ObjectBusy` itself (the core went away: a purge, a restart):
/// the core's own bound and a margin for its next tick.
pub const READ_WAIT_SHELL_MAX: std::time::Duration = std::time::Duration::from_secs(8);

/// Longest wait for one monitor call (boot, heartbeat, map fetch).
pub const MON_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a starting OSD keeps trying to reach the monitor and boot.
pub const BOOT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Pause between attempts to reach the monitor while booting, until
/// [`BOOT_TIMEOUT`].
pub const BOOT_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Pause before booting again when the monitor still had this OSD up (a
/// restart it had not noticed) and marked it down first.
pub const BOOT_REPEAT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Longest a client write waits for durability on the acting set before the
/// client is told `Timeout` (it may then resend with the same request id).
pub const CLIENT_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sub-writes a replica holds that arrived ahead of their predecessor (the
/// wire server runs handlers concurrently, so one connection's frames may be
/// handled out of order); beyond it they are dropped.
pub const PARKED_SUB_WRITES_MAX: usize = INFLIGHT_MAX;

/// Peer messages a replica keeps while waiting for its activation (the
/// messenger does not order them); beyond it they are dropped.
pub const EARLY_MSGS_MAX: usize = 1024;

/// Omap entries one `OmapGetRange` returns at most, whatever the client asks.
pub const OMAP_RANGE_ENTRIES_MAX: u32 = 4096;

/// Bytes of keys and values one `OmapGetRange` returns at most (one entry
/// past it alone): a reply's body holds at most 1 MiB.
pub const OMAP_RANGE_BYTES_MAX: usize = 512 << 10;

/// Object names one `List` page returns at most: names are up to 2 KiB, so
/// a full page stays under half the wire's 1 MiB body limit.
pub const LIST_NAMES_MAX: u32 = 256;

/// Used fraction of the store's file system at which the OSD refuses client
/// writes (`Full`; removes still pass). Below the store's own hard refusal
/// (0.95), so writes already admitted, replica sub-writes and metadata
/// still fit while the refusal takes effect (Ceph keeps the same margin
/// between `full_ratio` and `failsafe_full_ratio`).
pub const FULL_RATIO: f64 = 0.92;

/// Used fraction up to which a write marked `full_try` (the MDS's
/// metadata) still passes a full OSD: between [`FULL_RATIO`] and the
/// store's hard refusal, so a full file system can still unlink.
pub const FULL_TRY_RATIO: f64 = 0.94;

/// Used fraction at which the OSD reports itself nearly full (a health
/// warning in `cairn status`).
pub const NEARFULL_RATIO: f64 = 0.85;

/// Objects one PG recovers at once (pulls and pushes in flight): recovery
/// is a bounded worker, and client I/O to the rest of the PG goes on.
pub const RECOVERY_OPS_MAX: usize = 4;

/// Objects one PG backfills at once.
pub const BACKFILL_PUSHES_MAX: usize = 8;

/// Object names one backfill scan step lists.
pub const BACKFILL_SCAN_KEYS: usize = 32;

/// Keys read per store call when loading a PG (its metadata keys, or the
/// object names of a corrupt copy being reset) and when planning a split.
pub const META_PAGE_KEYS: usize = 1024;

/// Objects removed per transaction when emptying a collection.
pub const WIPE_BATCH_OBJECTS: usize = 512;

/// Omap entries read per page for a push.
pub const OMAP_PAGE_KEYS: usize = 4096;

/// Operations per transaction a split plans, below the store's bound.
pub const SPLIT_TXN_OPS_MAX: usize = cairn_store::limits::TXN_OPS_MAX - 16;

/// Roll-back records of committed erasure-coded entries dropped with each
/// new entry's transaction (three ops each): more than the writes a PG has
/// in flight, so they never pile up under load.
pub const UNDO_FORWARD_PER_TXN: usize = 256;

/// Operations per transaction when a copy adopts a log at activation (log
/// entries, dups, missing set, PG info): a long log outgrows one
/// transaction, so the change goes in several, each at most half the
/// store's bound; only the last carries the activation.
pub const ADOPT_TXN_OPS_MAX: usize = cairn_store::limits::TXN_OPS_MAX / 2;

/// Keys listed per store call while building a scrub map.
pub const SCRUB_LIST_PAGE_KEYS: usize = 256;

/// Data read per store call by a deep scrub.
pub const SCRUB_READ_BYTES: u64 = 4 << 20;

/// Inconsistent objects each PG lists in its report to the monitor.
pub const PG_STAT_INCONSISTENT_MAX: usize = 8;

/// Ticks (about a second each) after which an unanswered query or
/// activation is sent again.
pub const RESEND_TICKS: u32 = 2;

/// Ticks after which an in-flight write's sub-writes are sent again to
/// the OSDs that have not acknowledged them: their session may have died
/// (the shell drops what it cannot send) or the copy was too busy to take
/// them. Long enough that a write merely queued behind others is not sent
/// twice.
pub const SUBWRITE_RESEND_TICKS: u32 = 5;

/// Ticks between the announcements (`Notify`) a stray copy repeats to the
/// primary while the primary has not taken it: the first may have come
/// while the primary could not take it (peering, waiting for a temporary
/// acting set), or been lost.
pub const STRAY_NOTIFY_TICKS: u32 = RESEND_TICKS * 3;

/// Ticks after which a primary waiting for a temporary acting set asks the
/// monitor for it again (`pg_temp`): the request may have been lost.
pub const PG_TEMP_RESEND_TICKS: u32 = RESEND_TICKS * 3;

/// Ticks after which a recovery or backfill step without an answer is
/// issued again (its messages may have died with a connection).
pub const STALLED_TICKS: u32 = 10;

/// Ticks a deep scrub waits for the shell's parity check of a chunk of an
/// erasure-coded PG before going on without it (writes to the chunk wait
/// meanwhile). The shell stops checking after [`PARITY_CHECK_BUDGET`].
pub const PARITY_CHECK_TICKS_MAX: u32 = 120;

/// How long the shell re-encodes one chunk's objects before reporting
/// what it checked (the rest wait for the next deep scrub).
pub const PARITY_CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// The bytes of all shards together a parity check reads at once (whole
/// stripe rows, at least one).
pub const PARITY_CHECK_WINDOW_BYTES: u64 = 4 << 20;

/// How often the shell ticks every PG.
pub const PG_TICK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Recovery and backfill object reads in flight on one OSD, across all its
/// PGs: the bound that keeps healing from crowding out client I/O (and
/// memory: each holds one object).
pub const RECOVERY_READS_MAX: usize = 4;

/// Threads that prepare large transactions at once: a 4 MiB write's data
/// goes to disk while it is prepared ([`cairn_store::DiskStore::prepare`]),
/// and one at a time kept each OSD's disk queue one request deep. Smaller
/// transactions are prepared by the submitter itself (a page-cache write),
/// without a thread hand-off.
pub const STORE_PREPARE_THREADS: usize = 4;

/// Read-lease length the daemon (and the simulator) uses.
pub const LEASE_MS: u64 = 4_000;

/// The largest difference between two OSDs' clock rates leases tolerate,
/// in parts per million (1%: 40 ms of a 4 s lease).
pub const CLOCK_RATE_DRIFT_PPM_MAX: u64 = 10_000;

/// Lease renewals a primary remembers for their acknowledgements.
pub const LEASE_RENEWALS_KEPT: usize = 16;

/// How often the shell records that its OSD is alive (the alive file that
/// bounds a restarted OSD's old read-lease promises).
pub const ALIVE_INTERVAL_MS: u64 = 1_000;

/// Resolution of the boot clock the shell reads (`/proc/uptime`), added to
/// the restart lease bound.
pub const BOOT_CLOCK_RESOLUTION_MS: u64 = 10;

/// Past intervals kept per PG; older ones are forgotten, and peering then
/// treats history before the oldest kept as unknown: a PG none of whose
/// copies activated since is `incomplete` for good. So the bound must
/// outlast a long flap, not only a restart: 64 did not (simulator seed
/// 203804: 14 quick restarts and a disk error every ~3 s made 64 intervals
/// in 190 epochs with no activation). An interval is about 64 bytes, so
/// 1,024 cost at most 64 KiB per PG, reached only by a PG whose acting set
/// changed that often.
pub const PAST_INTERVALS_MAX: usize = 1024;

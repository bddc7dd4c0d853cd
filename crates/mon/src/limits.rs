//! Every bound and default of the monitor, in one place.

/// Incrementals the monitor keeps at least (in memory and on disk), as
/// Ceph's `mon_min_osdmap_epochs`: clients and OSDs catch up by
/// incrementals. Older ones are kept too while a PG may need them for
/// peering (`MapService::needed_from`); an OSD behind the history gets the
/// oldest map kept, then the incrementals.
pub const INCREMENTALS_KEPT: usize = 500;

/// Incrementals the monitor keeps at most, whatever PGs still need: a
/// bound on its memory and disk when a PG stays inactive for very long
/// (each incremental is a few hundred bytes).
pub const INCREMENTALS_KEPT_MAX: usize = 20_000;

/// A full map is stored every this many epochs, so a restart replays at most
/// this many incrementals. Must stay below [`INCREMENTALS_KEPT`].
pub const FULL_MAP_EVERY_EPOCHS: u64 = 50;

/// Full maps kept on disk (the newest ones).
pub const FULL_MAPS_KEPT: usize = 2;

/// Default: an OSD silent for this long is marked down.
pub const DOWN_GRACE_MS_DEFAULT: u64 = 20_000;

/// Default: a down OSD is marked out after this long (Ceph's
/// `mon_osd_down_out_interval`).
pub const DOWN_OUT_MS_DEFAULT: u64 = 600_000;

/// Default: distinct up reporters needed to mark a peer down.
pub const REPORTERS_MIN_DEFAULT: usize = 2;

/// Period of the daemon's `Tick`.
pub const TICK_MS: u64 = 500;

/// Events queued for the service actor.
pub const EVENT_QUEUE_MAX: usize = 1024;

/// An active MDS silent this long is replaced by a standby. MDS daemons
/// beacon every 500 ms; with the 500 ms tick a dead active is replaced
/// within 3 s.
pub const MDS_BEACON_GRACE_MS: u64 = 2_500;

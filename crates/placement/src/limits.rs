//! Every bound of the placement crate, named once.

/// Most shards (replicas, or `k + m` chunks) one PG may have.
pub const SHARD_COUNT_MAX: u32 = 32;

/// Largest `pg_num` of one pool. Ceph caps PGs per OSD instead; a map is
/// pure data here, so the cap only has to keep arrays of PGs sane.
pub const PG_NUM_MAX: u32 = 1 << 22;

/// Most OSDs in one map.
pub const OSD_COUNT_MAX: usize = 1 << 20;

/// Most pools in one map.
pub const POOL_COUNT_MAX: usize = 4096;

/// Longest pool, host, rack or device-class name, in bytes.
pub const NAME_SIZE_BYTES_MAX: usize = 64;

/// Largest OSD weight (16.16 fixed point holds up to 65535.99).
pub const WEIGHT_MAX: f64 = 65_535.0;

/// A replicated PG ranks this many OSDs beyond its size before picking;
/// when out OSDs and shared failure domains use up the prefix, it ranks
/// four times as many, up to every OSD.
pub const RANK_PREFIX_EXTRA: usize = 4;

/// Rounds of draws an erasure-coded PG makes to fill its shard positions
/// (Ceph's `choose_total_tries` is 50); past this a position stays a hole
/// (undersized) instead of looping.
pub const EC_ROUNDS_MAX: u32 = 100;

/// Upmap items one PG may carry.
pub const UPMAP_ITEMS_PER_PG_MAX: usize = 32;

/// Moves the balancer proposes in one run, so a run is bounded however
/// skewed the map.
pub const BALANCE_MOVES_MAX: usize = 1 << 20;

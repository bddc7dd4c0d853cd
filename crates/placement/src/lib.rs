//! Cluster map, failure-domain hierarchy, straw2 placement, balancer and
//! placement simulator: the pure function `(map, pool, pg) -> [osd; n]` that
//! every Cairn client and daemon computes for itself.
//!
//! This crate decides where data lives; it never moves data, talks to the
//! network, reads a clock or touches a disk. Monitors own the map, OSDs and
//! clients call [`Placement::map_pg`] on it.
//!
//! The one design choice to know: selection is **one flat weighted straw2 race
//! over OSDs**, and the rack/host hierarchy only rejects draws that would
//! reuse a failure domain. Unlike CRUSH's per-level straw2 this moves (close
//! to) the minimum data when an OSD is added, removed or reweighted, not up
//! to three times that; equal-weight OSDs are raced as one group, so the
//! inner loop stays a hash and a compare. See `docs/placement.md`.

pub mod balance;
pub mod hash;
pub mod hierarchy;
pub mod limits;
pub mod map;
pub mod mapping;
pub mod simulate;
pub mod straw2;

pub use hierarchy::Hierarchy;
pub use map::{
    ClusterMap, FailureDomain, MapError, OsdInfo, PG_TEMP_HOLE, Pool, Redundancy, Weight,
};
pub use mapping::{PgMapping, Placement, PlacementError, Shard};

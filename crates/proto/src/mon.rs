//! The monitor's messages: commands, replies, map requests, heartbeats.
//!
//! Message kinds `0x0100..=0x01ff` belong to the monitor; client and OSD
//! crates reuse these types. Every request gets an answer: a [`MonReply`]
//! (commands, heartbeats, failure reports, and any malformed request) or a
//! [`MapReply`] (for [`GetMap`] and [`Subscribe`]). Kinds are frozen once
//! assigned:
//!
//! | kind | message | direction | answered by |
//! |---|---|---|---|
//! | `0x0100` | [`GetMap`] | request | [`MapReply`] |
//! | `0x0101` | [`MapReply`] | reply | – |
//! | `0x0102` | [`CommandRequest`] | request | [`MonReply`] |
//! | `0x0103` | [`MonReply`] | reply | – |
//! | `0x0104` | [`Heartbeat`] | request | [`MonReply`] |
//! | `0x0105` | [`FailureReport`] | request | [`MonReply`] |
//! | `0x0106` | [`Subscribe`] | request, held up to `wait_ms` | [`MapReply`] |
//! | `0x0107` | [`GetStats`] | request | [`StatsReply`] |
//! | `0x0108` | [`StatsReply`] | reply | – |
//!
//! Map distribution is a long poll: a subscriber keeps one [`Subscribe`]
//! outstanding, the monitor holds it until an epoch after `have_epoch` is
//! committed (or `wait_ms` passes) and the subscriber asks again with the
//! epoch it now has. The wire has no server-initiated messages; this needs
//! none, and a lost reply costs at most one `wait_ms`.

pub mod client;
pub mod error;

pub use client::{MonClient, decode_map_response};
pub use error::MonError;

use crate::map::{Incremental, OsdEndpoint};
use cairn_placement::{ClusterMap, FailureDomain, Redundancy, Weight};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::Message;
use serde::{Deserialize, Serialize};

pub const KIND_GET_MAP: u16 = 0x0100;
pub const KIND_MAP_REPLY: u16 = 0x0101;
pub const KIND_COMMAND: u16 = 0x0102;
pub const KIND_MON_REPLY: u16 = 0x0103;
pub const KIND_HEARTBEAT: u16 = 0x0104;
pub const KIND_FAILURE_REPORT: u16 = 0x0105;
pub const KIND_SUBSCRIBE: u16 = 0x0106;
pub const KIND_GET_STATS: u16 = 0x0107;
pub const KIND_STATS_REPLY: u16 = 0x0108;

/// An operator or OSD command that may change the map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonCommand {
    /// An OSD starts. `id: None` allocates the next id. First boot adds the
    /// OSD up and in; a re-boot marks it up and updates its location and
    /// endpoint, keeping its weight and in/out state.
    OsdBoot {
        id: Option<OsdId>,
        addr: String,
        host: String,
        rack: String,
        device_class: String,
        weight: Weight,
        capacity_bytes: u64,
    },
    OsdOut(OsdId),
    OsdIn(OsdId),
    OsdReweight(OsdId, Weight),
    PoolCreate {
        name: String,
        pg_num: u32,
        redundancy: RedundancySpec,
        failure_domain: FailureDomainSpec,
        device_class: Option<String>,
    },
    PoolDelete(String),
    /// Changes a pool's PG counts (they only grow; `pgp_num <= pg_num`) or
    /// its replicated `min_size`.
    PoolSet {
        name: String,
        pg_num: Option<u32>,
        pgp_num: Option<u32>,
        min_size: Option<u32>,
    },
    /// Sets (`Some`) or clears (`None`) a PG's temporary acting set: the
    /// primary of a PG whose new copies are still filling keeps complete
    /// copies serving meanwhile (like Ceph's `pg_temp`).
    PgTemp {
        pg: PgId,
        acting: Option<Vec<OsdId>>,
    },
    /// Sets (`Some`) or removes (`None`: back to the default) a setting of
    /// `cairn_types::options`; it does not change the map.
    ConfigSet {
        name: String,
        value: Option<String>,
    },
    /// The settings set explicitly, answered with [`Reply::Config`].
    ConfigDump,
    /// Creates file system `name` on an existing metadata pool and data
    /// pool (neither used by another file system).
    FsCreate {
        name: String,
        meta_pool: String,
        data_pool: String,
    },
    /// Removes file system `name` (its pools and their objects stay).
    FsRemove(String),
    /// The file systems and their MDS daemons, answered with
    /// [`Reply::FsMap`].
    FsLs,
    /// An MDS daemon's beacon: `name` at `addr` serves or stands by for
    /// file system `fs`; answered with [`Reply::MdsRole`]. The monitor
    /// decides which one is active, as it decides OSD states.
    MdsBeacon {
        fs: String,
        name: String,
        addr: String,
    },
}

/// One MDS daemon as the monitor knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsInfo {
    pub name: String,
    pub addr: String,
    /// Milliseconds since its last beacon.
    pub beacon_age_ms: u64,
}

/// One file system and who serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStatus {
    pub name: String,
    pub meta_pool: String,
    pub data_pool: String,
    /// Increases each time a daemon is made active: the active MDS fences
    /// every earlier one out of the journal with it.
    pub generation: u64,
    pub active: Option<MdsInfo>,
    pub standbys: Vec<MdsInfo>,
}

/// What the monitor tells a beaconing MDS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsRole {
    /// Serve the file system, fencing earlier actives with `generation`.
    Active { generation: u64 },
    /// Wait; another daemon is active.
    Standby,
}

/// [`Redundancy`] on the wire (externally tagged, which postcard can read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedundancySpec {
    Replicated {
        size: u32,
        min_size: u32,
    },
    /// `None`: the default (`min_size` `k + 1`, a 16 KiB stripe unit).
    Erasure {
        k: u32,
        m: u32,
        min_size: Option<u32>,
        stripe_unit: Option<u32>,
    },
}

impl From<RedundancySpec> for Redundancy {
    fn from(r: RedundancySpec) -> Redundancy {
        match r {
            RedundancySpec::Replicated { size, min_size } => {
                Redundancy::Replicated { size, min_size }
            }
            RedundancySpec::Erasure {
                k,
                m,
                min_size,
                stripe_unit,
            } => {
                let default = Redundancy::erasure(k, m);
                Redundancy::Erasure {
                    k,
                    m,
                    min_size: min_size.unwrap_or_else(|| default.min_size()),
                    stripe_unit: stripe_unit
                        .unwrap_or(cairn_placement::map::DEFAULT_STRIPE_UNIT_BYTES),
                }
            }
        }
    }
}

/// [`FailureDomain`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureDomainSpec {
    Osd,
    Host,
    Rack,
}

impl From<FailureDomainSpec> for FailureDomain {
    fn from(d: FailureDomainSpec) -> FailureDomain {
        match d {
            FailureDomainSpec::Osd => FailureDomain::Osd,
            FailureDomainSpec::Host => FailureDomain::Host,
            FailureDomainSpec::Rack => FailureDomain::Rack,
        }
    }
}

/// What a successful command or heartbeat returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Done; the map is at `epoch` (unchanged if the command was a no-op).
    Done { epoch: Epoch },
    /// The OSD booted as `osd` in map `epoch`.
    OsdBooted { osd: OsdId, epoch: Epoch },
    /// A heartbeat was received; `up: false` tells the OSD it was marked
    /// down and must boot again.
    Heartbeat {
        epoch: Epoch,
        up: bool,
        /// Digest of the settings: an OSD whose copy differs fetches them.
        config_digest: u64,
    },
    /// The settings set explicitly, and their digest.
    Config {
        digest: u64,
        entries: Vec<(String, String)>,
    },
    /// The file systems.
    FsMap(Vec<FsStatus>),
    /// An MDS's role and its file system.
    MdsRole { role: MdsRole, fs: FsStatus },
}

/// Request `KIND_COMMAND`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRequest(pub MonCommand);

impl Message for CommandRequest {
    const KIND: u16 = KIND_COMMAND;
}

/// Reply `KIND_MON_REPLY` to commands, heartbeats and failure reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonReply(pub Result<Reply, MonError>);

impl Message for MonReply {
    const KIND: u16 = KIND_MON_REPLY;
}

/// Request `KIND_HEARTBEAT`: an OSD tells the monitor it is alive, with its
/// latest statistics. The monitor stamps it with its own clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub osd: OsdId,
    pub stats: OsdStats,
}

/// What an OSD reports with each heartbeat: its store's space (of the
/// file system it is on) and client I/O counters since the OSD started.
/// Not part of the map: the monitor keeps the latest in memory only, for
/// `cairn status` and `cairn df`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdStats {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    /// Object data the store holds.
    pub stored_bytes: u64,
    /// Past the OSD's full ratio: client writes are refused.
    pub full: bool,
    /// Past the nearfull ratio: a health warning.
    pub nearfull: bool,
    pub client_read_ops: u64,
    pub client_read_bytes: u64,
    pub client_write_ops: u64,
    pub client_write_bytes: u64,
    /// PGs this OSD is primary of, by state (`active+clean`, ...).
    pub pg_states: Vec<(String, u32)>,
    /// The PGs this OSD is primary of, one by one.
    pub pgs: Vec<PgStat>,
    /// Objects and bytes this OSD has pushed or pulled for recovery and
    /// backfill since it started.
    pub recovered_objects: u64,
    pub recovered_bytes: u64,
    /// PG copies this OSD holds (as primary, replica, or stray).
    pub pgs_held: u32,
    /// The map epoch the OSD had applied when it reported.
    pub map_epoch: u64,
    /// Set by an OSD whose store is corrupt and who serves nothing: why,
    /// and how to recreate it. Such a heartbeat is no sign of life.
    pub store_error: Option<String>,
    /// What each PG copy this OSD holds takes in its store, in PG order
    /// (`cairn df` sums them per pool).
    pub pg_usage: Vec<PgUsage>,
}

/// One PG copy's objects and space, as its OSD's store counts them (for
/// an erasure-coded PG: the shard objects of one position).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgUsage {
    pub pg: PgId,
    /// The copy's position in the PG's acting set (the shard it holds, for
    /// erasure coding); `None` for a copy outside it (a stray, or a
    /// backfill target not yet acting).
    pub position: Option<u32>,
    pub objects: u64,
    /// The objects' sizes (shard sizes, for erasure coding), summed.
    pub bytes: u64,
    /// Space they take in the store: allocation units and inline bytes.
    pub allocated_bytes: u64,
}

/// One PG as its primary reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStat {
    pub pg: PgId,
    /// Ceph-style state, e.g. `active+recovering+degraded`.
    pub state: String,
    pub up: Vec<OsdId>,
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// The first epoch of the current interval.
    pub interval_epoch: u64,
    /// Last version written, as `epoch'seq`.
    pub last_update: String,
    pub log_entries: u64,
    /// Objects some copy still lacks.
    pub missing_objects: u64,
    /// Copies being filled by backfill.
    pub backfill_targets: u32,
    /// How far the backfill scan got, in thousandths of the hash space
    /// (objects are spread evenly over it), when backfilling.
    pub backfill_permille: Option<u32>,
    /// Why the PG does not serve, when it does not.
    pub blocked: Option<String>,
    /// `scrub` or `deep-scrub` while one runs.
    pub scrubbing: Option<String>,
    /// When the PG was last scrubbed (seconds since the Unix epoch; 0:
    /// never on this primary).
    pub last_scrub_secs: u64,
    pub last_deep_scrub_secs: u64,
    /// Objects whose copies disagree, not yet repaired.
    pub inconsistent_objects: u64,
    /// The first of them, `name: what differs`.
    pub inconsistent: Vec<String>,
}

/// Request `KIND_GET_STATS`: the latest statistics of every OSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetStats;

impl Message for GetStats {
    const KIND: u16 = KIND_GET_STATS;
}

/// Client I/O rates of one OSD between its last two heartbeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoRates {
    pub read_ops_per_s: f64,
    pub read_bytes_per_s: f64,
    pub write_ops_per_s: f64,
    pub write_bytes_per_s: f64,
    /// Objects and bytes pushed for recovery and backfill.
    pub recovery_objects_per_s: f64,
    pub recovery_bytes_per_s: f64,
}

/// One OSD's latest report as the monitor holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OsdStatsReport {
    pub osd: OsdId,
    pub stats: OsdStats,
    /// Time since the report arrived.
    pub age_ms: u64,
    pub rates: IoRates,
}

/// Reply `KIND_STATS_REPLY`, in OSD order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsReply(pub Result<Vec<OsdStatsReport>, MonError>);

impl Message for StatsReply {
    const KIND: u16 = KIND_STATS_REPLY;
}

impl Message for Heartbeat {
    const KIND: u16 = KIND_HEARTBEAT;
}

/// Request `KIND_FAILURE_REPORT`: `reporter` cannot reach `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    pub reporter: OsdId,
    pub target: OsdId,
}

impl Message for FailureReport {
    const KIND: u16 = KIND_FAILURE_REPORT;
}

/// Request `KIND_GET_MAP`: the map since `have_epoch` (0: none held).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetMap {
    pub have_epoch: Epoch,
}

impl Message for GetMap {
    const KIND: u16 = KIND_GET_MAP;
}

/// Request `KIND_SUBSCRIBE`: the map since `have_epoch`, like [`GetMap`],
/// but held until the monitor's epoch is after `have_epoch`, for at most
/// `wait_ms` (clamped to [`crate::limits::SUBSCRIBE_WAIT_MS_MAX`]). Answered
/// by a [`MapReply`]: incrementals (or a full map) as soon as there is a
/// newer epoch; if none comes in time, an empty
/// [`MapUpdate::Incrementals`] at the current epoch ("no change"). A
/// monitor shutting down answers held requests at once with
/// [`MonError::ShuttingDown`] in a [`MonReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribe {
    pub have_epoch: Epoch,
    pub wait_ms: u32,
}

impl Message for Subscribe {
    const KIND: u16 = KIND_SUBSCRIBE;
}

/// Reply `KIND_MAP_REPLY`. With `Full`, the data segment holds the map in
/// its binary form ([`ClusterMap::encode`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapReply {
    pub fsid: u128,
    pub epoch: Epoch,
    pub update: MapUpdate,
}

impl Message for MapReply {
    const KIND: u16 = KIND_MAP_REPLY;
}

/// The body part of a [`MapReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapUpdate {
    /// The whole map (in the data segment) and every OSD's endpoint.
    Full {
        endpoints: Vec<(OsdId, OsdEndpoint)>,
    },
    /// The incrementals from `have_epoch + 1` to the current epoch.
    Incrementals(Vec<Incremental>),
}

/// A decoded map reply, as [`MonClient::get_map`] and
/// [`MonClient::subscribe`] return it. `Incrementals` with an empty
/// list means nothing is newer than the epoch asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapFetch {
    Full {
        fsid: u128,
        map: ClusterMap,
        endpoints: Vec<(OsdId, OsdEndpoint)>,
    },
    Incrementals {
        fsid: u128,
        incrementals: Vec<Incremental>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use cairn_wire::Frame;

    /// Freezes the `Subscribe` request body: postcard varints, epoch then
    /// `wait_ms`, under kind 0x0106.
    #[test]
    fn subscribe_golden_bytes_v1() {
        let request = Subscribe {
            have_epoch: Epoch(7),
            wait_ms: 30_000,
        };
        let frame = Frame::request(&request, Bytes::new()).expect("encodes");
        assert_eq!(frame.kind, 0x0106);
        assert_eq!(frame.body.as_ref(), [0x07, 0xb0, 0xea, 0x01]);
        assert_eq!(frame.decode_body::<Subscribe>().expect("decodes"), request);
    }
}

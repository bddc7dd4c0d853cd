//! The monitor's messages: commands, replies, map requests, heartbeats.
//!
//! Message kinds `0x0100..=0x01ff` belong to the monitor; client and OSD
//! crates reuse these types. Every request gets an answer: a [`MonReply`]
//! (commands, heartbeats, failure reports, and any malformed request) or a
//! [`MapReply`] (for [`GetMap`]). Kinds are frozen once assigned.

use crate::error::MonError;
use crate::incremental::{Incremental, OsdEndpoint};
use cairn_placement::{ClusterMap, FailureDomain, Redundancy, Weight};
use cairn_types::{Epoch, OsdId};
use cairn_wire::Message;
use serde::{Deserialize, Serialize};

pub const KIND_GET_MAP: u16 = 0x0100;
pub const KIND_MAP_REPLY: u16 = 0x0101;
pub const KIND_COMMAND: u16 = 0x0102;
pub const KIND_MON_REPLY: u16 = 0x0103;
pub const KIND_HEARTBEAT: u16 = 0x0104;
pub const KIND_FAILURE_REPORT: u16 = 0x0105;

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
}

/// [`Redundancy`] on the wire (externally tagged, which postcard can read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedundancySpec {
    Replicated { size: u32, min_size: u32 },
    Erasure { k: u32, m: u32 },
}

impl From<RedundancySpec> for Redundancy {
    fn from(r: RedundancySpec) -> Redundancy {
        match r {
            RedundancySpec::Replicated { size, min_size } => {
                Redundancy::Replicated { size, min_size }
            }
            RedundancySpec::Erasure { k, m } => Redundancy::Erasure { k, m },
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
    Heartbeat { epoch: Epoch, up: bool },
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

/// Request `KIND_HEARTBEAT`: an OSD tells the monitor it is alive. The
/// monitor stamps it with its own clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub osd: OsdId,
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

/// A decoded map reply, as [`crate::MonClient::get_map`] returns it.
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

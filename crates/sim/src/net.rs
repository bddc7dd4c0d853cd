//! The simulated network: who talks to whom, what they say, and what the
//! network does to it (delay, loss, duplication, reordering, partitions).
//!
//! Every message is delivered independently after its own random delay, so
//! messages between two nodes can overtake each other: the real messenger
//! runs handlers concurrently, so the PG cores must already cope with that.
//!
//! Links differ as the real ones do. Requests of clients and of OSDs to the
//! monitor are retried by their senders, so they may simply be lost. PG
//! messages between OSDs travel on long-lived TCP connections: a partition
//! holds them until it heals (TCP retransmits), and they are lost when the
//! receiving process restarts (its connections reset) and, in half the
//! seeds, now and then (`peer_loss_ppm`): a connection that died, whose
//! messages the sending shell dropped. The PG cores resend what matters.

use crate::rng::Rng;
use bytes::Bytes;
use cairn_osd::PgMsg;
use cairn_placement::ClusterMap;
use cairn_proto::map::{Incremental, OsdEndpoint};
use cairn_proto::mon::{FailureReport, Heartbeat, MonCommand, MonError, Reply};
use cairn_proto::osd::{ClientOp, ClientReply, ClientShardRead, DirectPart};
use cairn_proto::peer::{ShardRead, ShardReadError, ShardReadOk};
use cairn_types::checked::CheckedBytes;
use cairn_types::{Epoch, OsdId, PgId};
use std::collections::BTreeSet;

/// A process that sends and receives messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    Mon,
    Osd(OsdId),
    Client(u32),
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Mon => write!(f, "mon"),
            Node::Osd(osd) => write!(f, "{osd}"),
            Node::Client(c) => write!(f, "client.{c}"),
        }
    }
}

/// A map change as the monitor sends it.
#[derive(Clone, Debug)]
pub enum MapUpdate {
    Incrementals(Vec<Incremental>),
    Full {
        map: ClusterMap,
        endpoints: Vec<(OsdId, OsdEndpoint)>,
    },
}

/// Every message of the simulation, as its sender hands it to the
/// network and its receiver gets it back: each crosses the network as the
/// bytes of one real frame ([`crate::wire`]), built and read by the
/// daemons' and the client's own encoders and decoders. The variants are
/// the wire messages, less what the sender's node already says (a ping's
/// and a PG message's sender are checked against it on delivery).
#[derive(Clone, Debug)]
pub enum Msg {
    /// OSD → OSD, `KIND_PEER_MSG`.
    Pg {
        pg: PgId,
        msg: PgMsg,
    },
    /// OSD → OSD, `KIND_PEER_PING` and its `KIND_PEER_PONG`, with the
    /// sender's map epoch.
    Ping {
        epoch: Epoch,
    },
    Pong {
        epoch: Epoch,
    },
    /// OSD → monitor, `KIND_COMMAND`: a boot or a `pg_temp` request.
    Command(MonCommand),
    /// Monitor → OSD, `KIND_MON_REPLY`: the answer to a boot (`OsdBooted`,
    /// or `Done` when the map still had the OSD up: it was marked down
    /// first and boots again) or a heartbeat.
    MonReply(Result<Reply, MonError>),
    /// OSD → monitor, `KIND_HEARTBEAT`, with the statistics of the PGs it
    /// leads (the clean ones tell the monitor which history it may trim).
    Heartbeat(Heartbeat),
    /// OSD → monitor, `KIND_FAILURE_REPORT`.
    FailureReport(FailureReport),
    /// To the monitor, `KIND_GET_MAP`.
    GetMap {
        have: Epoch,
    },
    /// Monitor → OSD or client, `KIND_MAP_REPLY`: an answer to `GetMap`,
    /// or a new epoch pushed (the answer to a held subscription).
    Map(MapUpdate),
    /// Client → OSD, `KIND_CLIENT_OP`; `request_id` is the frame's, which
    /// the reply echoes.
    Op {
        request_id: u64,
        op: ClientOp,
        data: CheckedBytes,
    },
    /// OSD → client, `KIND_CLIENT_REPLY`.
    OpReply {
        request_id: u64,
        reply: ClientReply,
        data: Bytes,
    },
    /// Client → OSD acting in an erasure-coded PG, `KIND_CLIENT_SHARD_READ`:
    /// a direct read of one shard's part; `request_id` is the frame's,
    /// which the reply echoes.
    DirectRead {
        request_id: u64,
        read: ClientShardRead,
    },
    /// The answer, `KIND_CLIENT_SHARD_READ_REPLY`: the part's bytes in
    /// `data`.
    DirectReadReply {
        request_id: u64,
        reply: Result<DirectPart, String>,
        data: Bytes,
    },
    /// Primary → OSD of an erasure-coded PG, `KIND_PEER_SHARD_READ`;
    /// `request_id` is the frame's, which the reply echoes.
    ShardRead {
        request_id: u64,
        read: ShardRead,
    },
    /// The answer, `KIND_PEER_SHARD_READ_REPLY`: the bytes of each range
    /// one after another in `data`.
    ShardReadReply {
        request_id: u64,
        reply: Result<ShardReadOk, ShardReadError>,
        data: Bytes,
    },
}

/// Rates of the network's faults, in parts per million per message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetFaults {
    /// Loss of messages to or from the monitor and clients.
    pub loss_ppm: u32,
    /// Loss of messages between OSDs.
    pub peer_loss_ppm: u32,
    pub duplicate_ppm: u32,
    /// A message is delayed by `delay_ms_min..=delay_ms_max`, or with
    /// `spike_ppm` by up to `spike_ms_max` (so later messages overtake it).
    pub delay_ms_min: u64,
    pub delay_ms_max: u64,
    pub spike_ppm: u32,
    pub spike_ms_max: u64,
}

impl NetFaults {
    /// A healthy network: short delays, nothing lost.
    #[must_use]
    pub fn healthy() -> NetFaults {
        NetFaults {
            loss_ppm: 0,
            peer_loss_ppm: 0,
            duplicate_ppm: 0,
            delay_ms_min: 1,
            delay_ms_max: 3,
            spike_ppm: 0,
            spike_ms_max: 0,
        }
    }
}

/// A partition: nodes of `side` cannot exchange messages with the others;
/// if `one_way`, only what `side` sends to the others is cut (a link or
/// firewall that fails in one direction: the cut-off nodes still hear the
/// rest, which does not hear them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub id: u64,
    pub side: BTreeSet<Node>,
    pub one_way: bool,
}

/// The network's state: fault rates and partitions in force.
#[derive(Debug)]
pub struct Network {
    pub faults: NetFaults,
    pub partitions: Vec<Partition>,
    pub sent_count: u64,
    pub lost_count: u64,
    pub duplicated_count: u64,
}

impl Network {
    #[must_use]
    pub fn new() -> Network {
        Network {
            faults: NetFaults::healthy(),
            partitions: Vec::new(),
            sent_count: 0,
            lost_count: 0,
            duplicated_count: 0,
        }
    }

    /// Whether a partition cuts what `from` sends to `to`.
    #[must_use]
    pub fn separated(&self, from: Node, to: Node) -> bool {
        self.partitions.iter().any(|p| {
            let (inside, to_inside) = (p.side.contains(&from), p.side.contains(&to));
            if p.one_way {
                inside && !to_inside
            } else {
                inside != to_inside
            }
        })
    }

    /// What happens to a message from `from` to `to`.
    pub fn fate(&mut self, rng: &mut Rng, from: Node, to: Node) -> Fate {
        self.sent_count += 1;
        if from == to {
            return Fate::Deliver(vec![0]);
        }
        let peer = matches!((from, to), (Node::Osd(_), Node::Osd(_)));
        if self.separated(from, to) {
            if peer {
                return Fate::Hold;
            }
            self.lost_count += 1;
            return Fate::Lost;
        }
        let loss_ppm = if peer {
            self.faults.peer_loss_ppm
        } else {
            self.faults.loss_ppm
        };
        if rng.chance(loss_ppm) {
            self.lost_count += 1;
            return Fate::Lost;
        }
        let copies = if rng.chance(self.faults.duplicate_ppm) {
            self.duplicated_count += 1;
            2
        } else {
            1
        };
        Fate::Deliver((0..copies).map(|_| self.delay(rng)).collect())
    }

    /// A delay for a message.
    pub fn delay(&self, rng: &mut Rng) -> u64 {
        let f = &self.faults;
        if f.spike_ms_max > 0 && rng.chance(f.spike_ppm) {
            rng.range(f.delay_ms_max, f.spike_ms_max.max(f.delay_ms_max))
        } else {
            rng.range(f.delay_ms_min, f.delay_ms_max.max(f.delay_ms_min))
        }
    }
}

/// What the network does with one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Copies arrive after these delays (two: duplicated).
    Deliver(Vec<u64>),
    Lost,
    /// Held by a partition until it heals.
    Hold,
}

impl Default for Network {
    fn default() -> Network {
        Network::new()
    }
}

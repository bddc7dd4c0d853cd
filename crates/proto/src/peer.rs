//! OSD ↔ OSD messages: PG messages, heartbeats and the hello that opens
//! every peer connection. Kinds are in the table of [`crate::osd`].
//!
//! The bodies here are the wire forms; the OSD turns them into its PG
//! messages (and checks them) in its own codec, since their log entries
//! and store operations are the OSD's.

use crate::osd::{
    KIND_PEER_HELLO, KIND_PEER_HELLO_REPLY, KIND_PEER_MSG, KIND_PEER_PING, KIND_PEER_PONG,
    KIND_PEER_SHARD_READ, KIND_PEER_SHARD_READ_REPLY, VersionWire,
};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::Message;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// Request `KIND_PEER_PING`: a peer heartbeat. It travels on a connection
/// of its own, never queued behind a PG message's megabytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerPing {
    pub from: OsdId,
    pub epoch: Epoch,
}

impl Message for PeerPing {
    const KIND: u16 = KIND_PEER_PING;
}

/// Response `KIND_PEER_PONG`: the pinged OSD is alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerPong {
    pub from: OsdId,
    pub epoch: Epoch,
}

impl Message for PeerPong {
    const KIND: u16 = KIND_PEER_PONG;
}

/// The peer protocol's version, in the hello: a receiver refuses versions
/// it does not know rather than guess at their meaning. 2: `Push` carries
/// the object's omap in its data segment. 3: `Lease` renewals delegate
/// direct shard reads.
pub const HELLO_VERSION: u16 = 4;

/// Request `KIND_PEER_HELLO`: the first message on an OSD → OSD connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHello {
    pub version: u16,
    /// Who the sender says it is.
    pub osd: OsdId,
    /// The address it serves on, as in the map.
    pub addr: String,
    /// Its map epoch: a receiver behind it refreshes before judging.
    pub epoch: Epoch,
    /// Reserved for a signed ticket; empty today.
    pub auth: ByteBuf,
}

impl Message for PeerHello {
    const KIND: u16 = KIND_PEER_HELLO;
}

/// Response `KIND_PEER_HELLO_REPLY`: the receiver's own id, or why the
/// claim was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHelloReply(pub Result<OsdId, String>);

impl Message for PeerHelloReply {
    const KIND: u16 = KIND_PEER_HELLO_REPLY;
}

/// The lease part of a peer's answer to a query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReport {
    /// The primary the answering copy promised to, if the promise still
    /// runs (`Some(None)`: an unknown holder).
    pub holder: Option<Option<OsdId>>,
    pub remaining_ms: u64,
    /// The answering copy serves reads as a primary itself.
    pub serving: bool,
}

/// The stored and sent form of a scrub inconsistency (the object's name
/// is in the key, or beside it in a message). Its postcard bytes are also
/// the OSD's stored `scrubbad/` value after a format byte: field order is
/// frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InconsistencyRecord {
    pub bad: Vec<OsdId>,
    pub auth: Option<OsdId>,
    pub reason: String,
}

/// One store operation of a sub-write, on the entry's object. Payload
/// lengths index the data segment in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpWire {
    WriteFull {
        len: u64,
    },
    Write {
        offset: u64,
        len: u64,
    },
    Append {
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Zero {
        offset: u64,
        length: u64,
    },
    Touch,
    Remove,
    SetVersion {
        version: u64,
    },
    SetXattrs(Vec<(ByteBuf, ByteBuf)>),
    RemoveXattr(ByteBuf),
    OmapSet(Vec<(ByteBuf, ByteBuf)>),
    OmapRemove(Vec<ByteBuf>),
    OmapRemoveRange {
        start: ByteBuf,
        end: ByteBuf,
    },
    OmapClear,
    /// Erasure coding: copies the object's bytes `[offset, offset +
    /// length)` to `to_offset` of the entry's stash object (named by the
    /// object and the request), to roll the write back if it must be.
    StashRange {
        offset: u64,
        length: u64,
        to_offset: u64,
    },
    /// Erasure coding: renames the object to the entry's stash object.
    StashRename,
    /// Erasure coding: the shard's roll-back record of the entry, stored
    /// under the entry's key.
    Undo(ByteBuf),
}

/// What an [`PeerMsg::ObjectSignal`] says of its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectSignalKind {
    PushAck,
    Pull,
    Unreadable,
}

/// Message `KIND_PEER_MSG`: a PG message between OSDs. A sub-write's
/// payloads are the data segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerMsg {
    SubWrite {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        /// The OSD's encoded log entry (`LogEntry::encode`).
        entry: ByteBuf,
        ops: Vec<OpWire>,
        prior: VersionWire,
        committed_to: VersionWire,
        log_only: bool,
    },
    SubWriteAck {
        pg: PgId,
        from: OsdId,
        version: VersionWire,
    },
    /// Peering's question for a copy; also `Activated`, `BackfillDone`,
    /// `BackfillDoneAck` and `Purge`, which carry nothing else.
    Signal {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        signal: SignalKind,
    },
    /// A copy: its log entries, then the names it lacks, are the data
    /// segment (records of a u32 little-endian length and the bytes).
    Notify {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        exists: bool,
        last_update: VersionWire,
        last_epoch_started: Epoch,
        backfilling: bool,
        entries: u32,
        missing: u32,
        lease: LeaseReport,
        /// The copy's kept inconsistencies: object names and records.
        inconsistent: Vec<(ByteBuf, InconsistencyRecord)>,
        /// Erasure coding: the shard the copy holds, if recorded.
        shard: Option<u32>,
    },
    /// The authoritative history; entries then missing names are the data
    /// segment, as in `Notify`.
    Activate {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        keep_through: VersionWire,
        last_update: VersionWire,
        committed_to: VersionWire,
        backfill: bool,
        entries: u32,
        missing: u32,
        /// Dup entries (see `DupEntry`), after the names in the data
        /// segment, each with its length like them.
        dups: u32,
    },
    /// An object's whole state: the data segment holds its `data_bytes`
    /// of data, then its `omap_entries` omap entries, each key and value
    /// as a u32 little-endian length and the bytes (an object's omap may
    /// be far larger than a message body).
    Push {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        object: ByteBuf,
        exists: bool,
        version: u64,
        xattrs: Vec<(ByteBuf, ByteBuf)>,
        data_bytes: u64,
        omap_entries: u32,
        /// The sender's last update when it read the object.
        as_of: VersionWire,
    },
    /// `PushAck`, `Pull` or `Unreadable` of one object.
    ObjectSignal {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        object: ByteBuf,
        kind: ObjectSignalKind,
    },
    /// A read-lease renewal (`ack: false`) or its acknowledgement. A
    /// renewal may delegate direct shard reads: `(acked_seq, serve_ms)`,
    /// the receiver may serve them until `serve_ms` after it took renewal
    /// `acked_seq`, whose acknowledgement the primary had before sending.
    Lease {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        seq: u64,
        ack: bool,
        delegate: Option<(u64, u64)>,
    },
    /// The primary asks for a scrub map of the keys in `(after, through]`.
    ScrubRequest {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        chunk: u64,
        after: Option<KeyWire>,
        through: Option<KeyWire>,
        deep: bool,
    },
    /// A copy's scrub map; the object names are the data segment (records
    /// as in `Notify`), in the order of `entries`.
    ScrubMap {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        chunk: u64,
        entries: Vec<ScrubEntryWire>,
        truncated: bool,
    },
    /// An idle erasure-coded primary's `committed_to`: the copies drop the
    /// roll-back records and stashes of every version up to it.
    RollForward {
        pg: PgId,
        from: OsdId,
        interval_epoch: Epoch,
        committed_to: VersionWire,
    },
}

/// An object key: its hash and name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyWire {
    pub hash: u32,
    pub name: ByteBuf,
}

/// A scrub entry without its name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubEntryWire {
    pub size: u64,
    pub version: u64,
    pub xattrs_digest: u32,
    pub omap_digest: u32,
    pub data_digest: Option<u32>,
    pub error: Option<String>,
    /// The bytes matched the checksum their write recorded (deep scrubs
    /// of erasure-coded shards).
    pub sealed: bool,
}

/// The peering messages that carry only their sender and interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignalKind {
    Query,
    Activated,
    BackfillDone,
    BackfillDoneAck,
    Purge,
}

impl Message for PeerMsg {
    const KIND: u16 = KIND_PEER_MSG;
}

/// Request `KIND_PEER_SHARD_READ`: an erasure-coded PG's primary asks the
/// OSD holding `shard` for byte ranges `(offset, len)` of its shard of
/// `object` (`whole`: the whole shard and its xattrs instead, to rebuild
/// another shard from), as it is at `version` (0: any). Served only by a
/// copy of the primary's interval `interval_epoch` at that position.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRead {
    pub pg: PgId,
    pub from: OsdId,
    pub interval_epoch: Epoch,
    pub object: ByteBuf,
    pub shard: u32,
    pub version: u64,
    pub ranges: Vec<(u64, u64)>,
    pub whole: bool,
}

impl Message for ShardRead {
    const KIND: u16 = KIND_PEER_SHARD_READ;
}

/// Response `KIND_PEER_SHARD_READ_REPLY`: the shard's version and the
/// length of each range's bytes (cut where the shard ends; for a `whole`
/// read, one length, the shard's, and every xattr of the shard), the
/// bytes being the data segment in order; or why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReadReply(pub Result<ShardReadOk, ShardReadError>);

impl Message for ShardReadReply {
    const KIND: u16 = KIND_PEER_SHARD_READ_REPLY;
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReadOk {
    pub version: u64,
    pub lens: Vec<u64>,
    pub xattrs: Vec<(ByteBuf, ByteBuf)>,
}

/// Why a shard read was not served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardReadError {
    /// This OSD does not hold that shard for that interval and primary.
    NotServing(String),
    /// The shard is at another version (a write came between).
    Stale {
        version: u64,
    },
    NotFound,
    /// The store found the shard's bytes corrupt.
    Corrupt(String),
    Store(String),
}

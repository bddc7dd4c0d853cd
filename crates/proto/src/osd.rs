//! Client ↔ OSD operations and operator PG commands.
//!
//! Message kinds `0x0200..=0x02ff` belong to the OSD; they are frozen once
//! assigned. Bulk object data never goes through serde: it travels in the
//! frame's data segment (a write's payload, a read's result, a sub-write's
//! payloads concatenated). Small values (xattrs, omap entries) ride in the
//! postcard body, bounded by the wire's 1 MiB body limit.
//!
//! | kind | message | direction |
//! |---|---|---|
//! | `0x0200` | [`ClientOp`] | client → primary, request |
//! | `0x0201` | [`ClientReply`] | primary → client, response (also to any malformed request) |
//! | `0x0202` | [`crate::peer::PeerMsg`] | OSD → OSD, one-way (request id 0) |
//! | `0x0203` | [`crate::peer::PeerPing`] | OSD → OSD on the heartbeat connection, request |
//! | `0x0204` | [`crate::peer::PeerPong`] | OSD → OSD, response |
//! | `0x0205` | [`PgCommand`] | operator → a PG's primary, request |
//! | `0x0206` | [`PgCommandReply`] | primary → operator, response |
//! | `0x0207` | [`crate::peer::PeerHello`] | OSD → OSD, request, first on every peer connection |
//! | `0x0208` | [`crate::peer::PeerHelloReply`] | OSD → OSD, response |
//! | `0x0209` | [`crate::peer::ShardRead`] | primary → shard OSD of an erasure-coded PG, request |
//! | `0x020a` | [`crate::peer::ShardReadReply`] | shard OSD → primary, response |
//! | `0x020b` | [`ClientShardRead`] | client → an OSD acting in an erasure-coded PG, request |
//! | `0x020c` | [`ClientShardReadReply`] | that OSD → client, response |

use cairn_types::{Epoch, PgId};
use cairn_wire::Message;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

pub const KIND_CLIENT_OP: u16 = 0x0200;
pub const KIND_CLIENT_REPLY: u16 = 0x0201;
pub const KIND_PEER_MSG: u16 = 0x0202;
pub const KIND_PEER_PING: u16 = 0x0203;
pub const KIND_PEER_PONG: u16 = 0x0204;
pub const KIND_PG_COMMAND: u16 = 0x0205;
pub const KIND_PG_COMMAND_REPLY: u16 = 0x0206;
pub const KIND_PEER_HELLO: u16 = 0x0207;
pub const KIND_PEER_HELLO_REPLY: u16 = 0x0208;
pub const KIND_PEER_SHARD_READ: u16 = 0x0209;
pub const KIND_PEER_SHARD_READ_REPLY: u16 = 0x020a;
pub const KIND_CLIENT_SHARD_READ: u16 = 0x020b;
pub const KIND_CLIENT_SHARD_READ_REPLY: u16 = 0x020c;

/// What an operator asks of a PG's primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PgAction {
    /// Light scrub; repairs only if `osd_scrub_auto_repair` is on.
    Scrub,
    /// Deep scrub; repairs only if `osd_scrub_auto_repair` is on.
    DeepScrub,
    /// Deep scrub that repairs what it finds.
    Repair,
}

/// Request `KIND_PG_COMMAND`, to the PG's primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgCommand {
    pub pg: PgId,
    pub action: PgAction,
}

impl Message for PgCommand {
    const KIND: u16 = KIND_PG_COMMAND;
}

/// Response `KIND_PG_COMMAND_REPLY`: what was started, or why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgCommandReply(pub Result<String, String>);

impl Message for PgCommandReply {
    const KIND: u16 = KIND_PG_COMMAND_REPLY;
}

/// A client request's identity on the wire (the OSD's `ReqId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReqIdWire {
    pub client: u64,
    pub tid: u64,
}

/// A PG version on the wire (the OSD's `Version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionWire {
    pub epoch: u64,
    pub seq: u64,
}

/// One operation of a [`ClientOp`]. A request carries writes only (applied
/// atomically, as one PG log entry) or reads only (answered from one state
/// of the object). Write payloads are the frame's data segment: the `len`
/// bytes of each `WriteFull`, `Write` and `Append`, concatenated in op
/// order. Small values (xattrs, omap) ride in the body.
///
/// Ops that need the object (`Remove`, `RemoveXattr`, `OmapRemove`,
/// `OmapClear`) fail the request with [`OpError::NotFound`] when it does
/// not exist at that point; every other write creates it, and
/// `Create { exclusive: true }` fails with [`OpError::Exists`] when it
/// already does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Creates the object empty if missing; `exclusive`: fails if present.
    Create {
        exclusive: bool,
    },
    /// Replaces the object's data with the next `len` payload bytes.
    WriteFull {
        len: u64,
    },
    /// Writes the next `len` payload bytes at `offset` (a gap reads as
    /// zeros).
    Write {
        offset: u64,
        len: u64,
    },
    /// Appends the next `len` payload bytes.
    Append {
        len: u64,
    },
    /// Sets the size, cutting or extending with zeros.
    Truncate {
        size: u64,
    },
    /// Zeros the part of the range within the object (the size does not
    /// change).
    Zero {
        offset: u64,
        length: u64,
    },
    /// Removes the object with its xattrs and omap.
    Remove,
    SetXattr {
        name: ByteBuf,
        value: ByteBuf,
    },
    /// Removes xattr `name` (absent: fine).
    RemoveXattr {
        name: ByteBuf,
    },
    OmapSet {
        entries: Vec<(ByteBuf, ByteBuf)>,
    },
    /// Removes omap keys (absent keys are fine).
    OmapRemove {
        keys: Vec<ByteBuf>,
    },
    /// Removes every omap entry (not the header).
    OmapClear,
    /// Sets the omap header, a value beside the entries.
    OmapSetHeader {
        header: ByteBuf,
    },
    /// Answered by [`OpOutput::Stat`].
    Stat,
    /// `length` bytes (`None`: to the end) from `offset`; answered by
    /// [`OpOutput::Data`].
    Read {
        offset: u64,
        length: Option<u64>,
    },
    /// Every xattr; answered by [`OpOutput::Xattrs`].
    GetXattrs,
    /// One xattr; answered by [`OpOutput::Value`] (`None`: absent).
    GetXattr {
        name: ByteBuf,
    },
    /// Omap entries with keys `> after`, at most `limit`; answered by
    /// [`OpOutput::Omap`].
    OmapGetRange {
        after: Option<ByteBuf>,
        limit: u32,
    },
    /// The values of these omap keys (absent keys are left out); answered
    /// by [`OpOutput::Omap`].
    OmapGet {
        keys: Vec<ByteBuf>,
    },
    /// Answered by [`OpOutput::Value`] (`None`: no header set).
    OmapGetHeader,
    /// Names of the PG's objects in (hash, name) order after `after`, at
    /// most `limit`; the request's object name must be empty, and it is
    /// the request's only op.
    List {
        after: Option<ByteBuf>,
        limit: u32,
    },
}

/// A condition on the object's state before a request. All of a
/// request's guards must hold, else nothing is done and the request fails
/// with [`OpError::CompareFailed`] naming the first that did not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GuardWire {
    /// The object's version is this one (0: it does not exist).
    Version(u64),
    /// Xattr `name` has this value (`None`: it is absent).
    Xattr {
        name: ByteBuf,
        value: Option<ByteBuf>,
    },
    /// The object exists.
    Exists,
    /// The object does not exist.
    NotExists,
    /// Omap `key` has this value (`None`: it is absent).
    OmapKey {
        key: ByteBuf,
        value: Option<ByteBuf>,
    },
}

impl OpKind {
    /// Whether the op changes the object (goes through the PG's write path).
    #[must_use]
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            OpKind::Create { .. }
                | OpKind::WriteFull { .. }
                | OpKind::Write { .. }
                | OpKind::Append { .. }
                | OpKind::Truncate { .. }
                | OpKind::Zero { .. }
                | OpKind::Remove
                | OpKind::SetXattr { .. }
                | OpKind::RemoveXattr { .. }
                | OpKind::OmapSet { .. }
                | OpKind::OmapRemove { .. }
                | OpKind::OmapClear
                | OpKind::OmapSetHeader { .. }
        )
    }

    /// Payload bytes the op takes from the data segment.
    #[must_use]
    pub fn payload_len(&self) -> u64 {
        match self {
            OpKind::WriteFull { len } | OpKind::Write { len, .. } | OpKind::Append { len } => *len,
            _ => 0,
        }
    }
}

/// Request `KIND_CLIENT_OP`: operations on one object of PG `pg`, sent to
/// the PG's primary as the client's map at `epoch` computes it. A retry
/// resends the same `req`; the PG answers it from its log, so a write
/// applies at most once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientOp {
    pub pg: PgId,
    pub epoch: Epoch,
    pub req: ReqIdWire,
    pub object: ByteBuf,
    /// Checked against the object's state before any op; at most
    /// [`crate::limits::GUARDS_PER_OP_MAX`].
    pub guards: Vec<GuardWire>,
    /// In order; 1 to [`crate::limits::OPS_PER_REQUEST_MAX`].
    pub ops: Vec<OpKind>,
    /// A write the cluster must take past its full ratio, up to a higher
    /// failsafe one: the MDS's metadata, so a full file system still
    /// removes files (Ceph's `FULL_TRY`).
    pub full_try: bool,
}

impl Message for ClientOp {
    const KIND: u16 = KIND_CLIENT_OP;
}

impl ClientOp {
    /// Whether the request writes (its first op does; a request mixing
    /// reads and writes is refused).
    #[must_use]
    pub fn is_write(&self) -> bool {
        self.ops.first().is_some_and(OpKind::is_write)
    }
}

/// What one op returned. A write request is answered by one `Written`; a
/// read request by one output per op, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpOutput {
    /// The writes are durable on every acting OSD.
    Written {
        object_version: u64,
    },
    /// `len` bytes of the reply's data segment (the reads' data are
    /// concatenated in op order).
    Data {
        len: u64,
    },
    Stat {
        size_bytes: u64,
        version: u64,
    },
    Xattrs(Vec<(ByteBuf, ByteBuf)>),
    Omap(Vec<(ByteBuf, ByteBuf)>),
    /// A page of object names; `next` continues the listing, `None` at the
    /// PG's end.
    List {
        names: Vec<ByteBuf>,
        next: Option<ByteBuf>,
    },
    /// One xattr or the omap header; `None`: absent.
    Value(Option<ByteBuf>),
}

/// Why an operation failed. `Retry`, `Blocked` and `Busy` say nothing was
/// done: refetch the map (Retry) or wait (Blocked, Busy) and resend with
/// the same request id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum OpError {
    /// Not primary, interval newer than the client's map, interval changed
    /// mid-write, or PG not yet servable; `epoch` is the OSD's map epoch.
    #[error("retry after refetching the map (OSD at epoch {epoch}): {reason}")]
    Retry { epoch: u64, reason: String },
    #[error("PG has {acting_count} acting OSDs, fewer than min_size {min_size}")]
    Blocked { acting_count: u32, min_size: u32 },
    #[error("PG busy ({inflight_max} writes in flight)")]
    Busy { inflight_max: u32 },
    #[error("object not found")]
    NotFound,
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("store error: {0}")]
    Store(String),
    #[error("timed out: {0}")]
    Timeout(String),
    /// Guard number `guard` (from 0, in request order) did not hold;
    /// nothing was changed.
    #[error("compare failed: guard {guard}: {reason}")]
    CompareFailed { guard: u32, reason: String },
    /// A guarded write's object has writes not yet settled; resend.
    #[error("object has writes in flight; retry the guarded write")]
    ObjectBusy,
    /// The OSD's store is too full for writes (removes still work).
    #[error("full: {0}")]
    Full(String),
    /// The object's data failed its checksum and no other copy could
    /// replace it (a read of a copy that can be repaired is answered
    /// `ObjectBusy` while the repair runs).
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// An exclusive create found the object; nothing was changed.
    #[error("object exists")]
    Exists,
}

/// Request `KIND_CLIENT_SHARD_READ`: a direct read, past the primary, of
/// shard `shard`'s part of bytes `offset..offset + length` (`None`: to the
/// end) of an object of an erasure-coded PG, sent to the OSD at position
/// `shard` of the PG's acting set in the client's map at `epoch`. The
/// client sends one to each data position and assembles the parts when
/// they agree; otherwise it asks the primary (docs/erasure-coding.md,
/// "Direct shard reads"). `rows`: the shard's bytes of every stripe the
/// range touches instead (data or parity), for a client that decodes a
/// missing data shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientShardRead {
    pub pg: PgId,
    pub epoch: Epoch,
    pub object: ByteBuf,
    pub shard: u32,
    pub offset: u64,
    pub length: Option<u64>,
    pub rows: bool,
}

impl Message for ClientShardRead {
    const KIND: u16 = KIND_CLIENT_SHARD_READ;
}

/// Response `KIND_CLIENT_SHARD_READ_REPLY`: the shard's part, or why this
/// OSD does not serve it directly now (the client then asks the primary,
/// at once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientShardReadReply(pub Result<DirectPart, String>);

impl Message for ClientShardReadReply {
    const KIND: u16 = KIND_CLIENT_SHARD_READ_REPLY;
}

/// One shard's answer to a direct read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirectPart {
    /// The object does not exist.
    Absent,
    /// The object at `version`, of `size` bytes in chunks of `chunk`; the
    /// data segment holds this shard's bytes from shard offset
    /// `shard_offset` (none if the range touches no byte of this shard).
    Found {
        version: u64,
        size: u64,
        chunk: u64,
        shard_offset: u64,
    },
}

/// Response `KIND_CLIENT_REPLY`. `version` is the PG version of a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientReply {
    pub result: Result<Vec<OpOutput>, OpError>,
    pub version: Option<VersionWire>,
}

impl Message for ClientReply {
    const KIND: u16 = KIND_CLIENT_REPLY;
}

impl ClientReply {
    #[must_use]
    pub fn err(error: OpError) -> ClientReply {
        ClientReply {
            result: Err(error),
            version: None,
        }
    }
}

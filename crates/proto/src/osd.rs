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

/// What a client asks of one object. Writes carry their payload in the
/// frame's data segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Replaces the whole object with the data segment.
    WriteFull,
    /// Writes the data segment at `offset`.
    Write {
        offset: u64,
    },
    /// Appends the data segment.
    Append,
    /// Reads `length` bytes (`None`: to the end) from `offset`.
    Read {
        offset: u64,
        length: Option<u64>,
    },
    Stat,
    Remove,
    /// Sets xattr `name` to the data segment (creating the object).
    SetXattr {
        name: ByteBuf,
    },
    GetXattrs,
    /// Sets omap entries (creating the object).
    OmapSet {
        entries: Vec<(ByteBuf, ByteBuf)>,
    },
    /// Omap entries with keys `> after`, at most `limit`.
    OmapGetRange {
        after: Option<ByteBuf>,
        limit: u32,
    },
    /// Removes xattr `name` (the object must exist).
    RemoveXattr {
        name: ByteBuf,
    },
    /// Removes omap keys (the object must exist; absent keys are fine).
    OmapRemove {
        keys: Vec<ByteBuf>,
    },
    /// The values of these omap keys (absent keys are left out).
    OmapGet {
        keys: Vec<ByteBuf>,
    },
    /// Names of the PG's objects in (hash, name) order after `after`, at
    /// most `limit`; the request's object name must be empty.
    List {
        after: Option<ByteBuf>,
        limit: u32,
    },
}

/// A compare-and-set condition on the object's state before a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GuardWire {
    /// The object's version is this one (0: it does not exist).
    Version(u64),
    /// Xattr `name` has this value (`None`: it is absent).
    Xattr {
        name: ByteBuf,
        value: Option<ByteBuf>,
    },
}

impl OpKind {
    /// Whether the op changes the object (goes through the PG's write path).
    #[must_use]
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            OpKind::WriteFull
                | OpKind::Write { .. }
                | OpKind::Append
                | OpKind::Remove
                | OpKind::SetXattr { .. }
                | OpKind::OmapSet { .. }
                | OpKind::RemoveXattr { .. }
                | OpKind::OmapRemove { .. }
        )
    }
}

/// Request `KIND_CLIENT_OP`: one operation on one object of PG `pg`, sent
/// to the PG's primary as the client's map at `epoch` computes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientOp {
    pub pg: PgId,
    pub epoch: Epoch,
    pub req: ReqIdWire,
    pub object: ByteBuf,
    pub op: OpKind,
    /// Writes only: apply only if this holds, else fail `CompareFailed`.
    pub guard: Option<GuardWire>,
}

impl Message for ClientOp {
    const KIND: u16 = KIND_CLIENT_OP;
}

/// A successful answer. Read data is in the frame's data segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpOutput {
    /// A write is durable on every acting OSD.
    Written {
        object_version: u64,
    },
    /// The data segment holds the bytes read.
    Data,
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
    /// A guard did not hold; nothing was changed.
    #[error("compare failed: {0}")]
    CompareFailed(String),
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
}

/// Response `KIND_CLIENT_REPLY`. `version` is the PG version of a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientReply {
    pub result: Result<OpOutput, OpError>,
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

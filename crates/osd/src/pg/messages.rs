//! What one copy of a PG says to another: [`PgMsg`] and its bodies (the
//! wire codec turns them into `cairn_proto::peer` messages and back).

use crate::log::{DupEntry, LogEntry, Version};
use crate::peering::PeerCopy;
use crate::scrub::{Inconsistency, ScrubMap};
use bytes::Bytes;
use cairn_proto::peer::LeaseReport;
use cairn_store::{ObjectKey, Op};
use cairn_types::{Epoch, OsdId};
use std::collections::BTreeMap;

/// The primary's order to a replica: apply `entry` with `ops`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubWrite {
    pub from: OsdId,
    pub interval_epoch: Epoch,
    pub entry: LogEntry,
    pub ops: Vec<Op>,
    /// The primary's `last_update` before `entry`: the replica takes the
    /// entry only if its own log ends there, so logs never fork silently.
    pub prior: Version,
    /// Every version up to this one is durable on the whole acting set; a
    /// replica that later becomes primary answers retries of them from its
    /// log.
    pub committed_to: Version,
    /// The object is beyond the backfill target's progress: log the entry,
    /// change nothing (the backfill brings the object later).
    pub log_only: bool,
}

/// A peer's answer to [`PgMsg::Query`]: its copy of the PG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notify {
    pub from: OsdId,
    /// The interval of the query it answers.
    pub interval_epoch: Epoch,
    pub copy: PeerCopy,
    /// The read lease this copy promised, if it still runs.
    pub lease: LeaseReport,
    /// Inconsistencies this copy's scrubs found as a primary and kept,
    /// for the new primary to go on reporting (at most
    /// [`cairn_proto::limits::NOTIFY_INCONSISTENT_MAX`]).
    pub inconsistent: Vec<Inconsistency>,
}

/// The primary's order to a peer to adopt the authoritative history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activate {
    pub from: OsdId,
    pub interval_epoch: Epoch,
    /// Keep own log entries up to this version, drop later ones, append
    /// `entries`.
    pub keep_through: Version,
    pub entries: Vec<LogEntry>,
    pub last_update: Version,
    pub committed_to: Version,
    /// Objects the peer lacks, to be recovered.
    pub missing: Vec<Bytes>,
    /// The peer's copy is not usable: empty it and take a backfill.
    pub backfill: bool,
    /// With `backfill`: the primary's dups, so the new copy can answer
    /// retries of requests older than the log too.
    pub dups: Vec<DupEntry>,
}

/// An object's whole state, as recovery and backfill copy it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectState {
    pub data: Bytes,
    pub xattrs: BTreeMap<Bytes, Bytes>,
    pub omap: BTreeMap<Bytes, Bytes>,
    pub version: u64,
}

/// A copy of one object from a complete copy to one that lacks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    pub from: OsdId,
    pub interval_epoch: Epoch,
    pub object: Bytes,
    /// `None`: the object does not exist (remove it).
    pub state: Option<ObjectState>,
    /// The sender's last update when it read `state`: a write to the object
    /// the receiver logged after it makes this push stale (a late or
    /// duplicated copy of a push already applied), and it is ignored.
    pub as_of: Version,
}

/// A replica's report that `version` is durable on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubWriteAck {
    pub from: OsdId,
    pub version: Version,
}

/// A message from one PG instance to the same PG on another OSD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgMsg {
    SubWrite(SubWrite),
    SubWriteAck(SubWriteAck),
    /// The primary asks for a peer's copy.
    Query {
        from: OsdId,
        interval_epoch: Epoch,
    },
    Notify(Notify),
    Activate(Activate),
    /// The peer made the activation durable.
    Activated {
        from: OsdId,
        interval_epoch: Epoch,
    },
    Push(Push),
    PushAck {
        from: OsdId,
        interval_epoch: Epoch,
        object: Bytes,
    },
    /// The primary asks a complete copy to push it an object it lacks.
    Pull {
        from: OsdId,
        interval_epoch: Epoch,
        object: Bytes,
    },
    /// A copy asked for an object cannot read its own (corrupt): the
    /// primary takes it for one that lacks the object and pulls elsewhere.
    Unreadable {
        from: OsdId,
        interval_epoch: Epoch,
        object: Bytes,
    },
    /// Every object has been pushed: the backfill target is complete.
    BackfillDone {
        from: OsdId,
        interval_epoch: Epoch,
    },
    /// Erasure coding, from an idle primary: every version up to
    /// `committed_to` is durable on the whole acting set, so the copies
    /// drop their roll-back records and stashes of them (a write brings
    /// the same news in its sub-write; without writes the last ones' would
    /// stay, taking space).
    RollForward {
        from: OsdId,
        interval_epoch: Epoch,
        committed_to: Version,
    },
    BackfillDoneAck {
        from: OsdId,
        interval_epoch: Epoch,
    },
    /// The PG is clean elsewhere: a stray copy removes itself.
    Purge {
        from: OsdId,
        interval_epoch: Epoch,
    },
    /// The primary asks for a copy's scrub map of the keys in
    /// `(after, through]` (`None`: unbounded).
    ScrubRequest {
        from: OsdId,
        interval_epoch: Epoch,
        chunk: u64,
        after: Option<ObjectKey>,
        through: Option<ObjectKey>,
        deep: bool,
    },
    ScrubMap(ScrubMap),
    /// The primary renews its read lease (`seq` numbers the renewal);
    /// `delegate`: `(acked_seq, serve_ms)`, the receiver may serve direct
    /// shard reads until `serve_ms` after it took renewal `acked_seq`
    /// (see [`crate::lease`]).
    LeaseRenew {
        from: OsdId,
        interval_epoch: Epoch,
        seq: u64,
        delegate: Option<(u64, u64)>,
    },
    LeaseAck {
        from: OsdId,
        interval_epoch: Epoch,
        seq: u64,
    },
}

impl PgMsg {
    /// The sending OSD.
    #[must_use]
    pub fn from(&self) -> OsdId {
        match self {
            PgMsg::SubWrite(w) => w.from,
            PgMsg::SubWriteAck(a) => a.from,
            PgMsg::Notify(n) => n.from,
            PgMsg::Activate(a) => a.from,
            PgMsg::Push(p) => p.from,
            PgMsg::ScrubMap(m) => m.from,
            PgMsg::LeaseRenew { from, .. }
            | PgMsg::LeaseAck { from, .. }
            | PgMsg::ScrubRequest { from, .. }
            | PgMsg::Query { from, .. }
            | PgMsg::Activated { from, .. }
            | PgMsg::PushAck { from, .. }
            | PgMsg::Pull { from, .. }
            | PgMsg::Unreadable { from, .. }
            | PgMsg::BackfillDone { from, .. }
            | PgMsg::BackfillDoneAck { from, .. }
            | PgMsg::RollForward { from, .. }
            | PgMsg::Purge { from, .. } => *from,
        }
    }

    /// The interval it belongs to.
    #[must_use]
    pub fn interval_epoch(&self) -> Epoch {
        match self {
            PgMsg::SubWrite(w) => w.interval_epoch,
            PgMsg::SubWriteAck(_) => Epoch(0),
            PgMsg::Notify(n) => n.interval_epoch,
            PgMsg::Activate(a) => a.interval_epoch,
            PgMsg::Push(p) => p.interval_epoch,
            PgMsg::ScrubMap(m) => m.interval_epoch,
            PgMsg::LeaseRenew { interval_epoch, .. }
            | PgMsg::LeaseAck { interval_epoch, .. }
            | PgMsg::ScrubRequest { interval_epoch, .. }
            | PgMsg::Query { interval_epoch, .. }
            | PgMsg::Activated { interval_epoch, .. }
            | PgMsg::PushAck { interval_epoch, .. }
            | PgMsg::Pull { interval_epoch, .. }
            | PgMsg::Unreadable { interval_epoch, .. }
            | PgMsg::BackfillDone { interval_epoch, .. }
            | PgMsg::BackfillDoneAck { interval_epoch, .. }
            | PgMsg::RollForward { interval_epoch, .. }
            | PgMsg::Purge { interval_epoch, .. } => *interval_epoch,
        }
    }
}

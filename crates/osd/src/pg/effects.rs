//! What the PG asks of its shell after an event: [`Effects`] (store
//! transactions, messages, replies and background work), and the replies
//! and refusals they carry.

use super::events::IntervalError;
use super::messages::PgMsg;
use crate::log::{LogResult, ReqId, Version};
use crate::scrub::ScrubOrder;
use bytes::Bytes;
use cairn_store::{ObjectKey, StoreError, Transaction};
use cairn_types::{Epoch, OsdId};
use std::collections::BTreeSet;

/// What a submitted transaction was, so its commit reaches the right step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreTag {
    /// A log entry (with its write), reported as `LocalCommitted`.
    Entry,
    /// The activation of the interval starting at this epoch.
    Activation(Epoch),
    /// A pushed object, now present.
    Push(Bytes),
    /// The end of this copy's backfill.
    BackfillDone(Epoch),
    /// A part of a larger change whose last transaction carries the tag.
    Part,
}

/// Why a client must refetch the map (or wait) and resend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryReason {
    /// This OSD is not the PG's primary.
    NotPrimary { primary: Option<OsdId> },
    /// The PG's interval began after the client's map.
    IntervalNewer {
        interval_epoch: Epoch,
        client_epoch: Epoch,
    },
    /// The write was in flight when the interval changed.
    IntervalChanged { epoch: Epoch },
    /// The PG is peering (or cannot be sure of its history): not serving.
    NotActive,
    /// The request is logged but not known durable on every acting OSD;
    /// only peering (issue 5) can settle it, so it is neither answered nor
    /// applied again.
    AwaitingPeering { version: Version },
}

/// A client write the PG refuses to log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidWrite {
    #[error("operation {0} does not change the request's object")]
    NotObjectOp(usize),
    #[error("operation {0} changes another object than the request's")]
    OtherObject(usize),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer to a client write.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Durable on every acting OSD (or answered from the log for a retry).
    Done {
        version: Version,
        result: LogResult,
    },
    Retry {
        reason: RetryReason,
    },
    /// Fewer than `min_size` OSDs are acting; nothing was applied.
    Blocked {
        acting_count: u32,
        min_size: u32,
    },
    /// Too many writes in flight on this PG; resend later.
    Busy {
        inflight_max: usize,
    },
    /// A guarded write found writes to its object not yet durable on the
    /// acting set, so the object's state is not settled; resend later.
    ObjectBusy,
    Invalid {
        reason: InvalidWrite,
    },
}

/// An input the PG ignored, and why (for the shell to log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("sub-write on {whoami}, which is not a replica of the interval")]
    NotReplica { whoami: OsdId },
    #[error("sub-write from {from}, not from the primary {primary:?}")]
    NotFromPrimary { from: OsdId, primary: Option<OsdId> },
    #[error("sub-write of interval {got}, current interval started {current}")]
    WrongInterval { got: Epoch, current: Epoch },
    #[error("sub-write {got} after {prior}, log ends at {last_update}")]
    OutOfOrder {
        got: Version,
        prior: Version,
        last_update: Version,
    },
    #[error("malformed sub-write: {0}")]
    Malformed(String),
    #[error("{pending} sub-writes await commit, limit reached")]
    ReplicaBusy { pending: usize },
    #[error("unexpected ack of {version} from {from}")]
    UnexpectedAck { from: OsdId, version: Version },
    #[error("commit of unknown version {version}")]
    UnknownCommit { version: Version },
    #[error("interval starting {got} is not after the current one ({current})")]
    StaleInterval { got: Epoch, current: Epoch },
    #[error("bad interval: {0}")]
    BadInterval(IntervalError),
    #[error("scrub not started: {0}")]
    Scrub(String),
    #[error("{what} from {from} ignored: {why}")]
    Peering {
        what: &'static str,
        from: OsdId,
        why: String,
    },
}

/// A transaction to submit; report [`PgEvent::LocalCommitted`] with
/// `version` once it is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreWrite {
    pub version: Version,
    pub txn: Transaction,
    pub tag: StoreTag,
}

/// What the shell must do after an event.
#[derive(Debug, Default)]
pub struct Effects {
    pub store: Vec<StoreWrite>,
    pub send: Vec<(OsdId, PgMsg)>,
    pub replies: Vec<(ReqId, Reply)>,
    pub log: Vec<Ignored>,
    /// Ask the monitor to set (`Some`) or clear (`None`) the PG's
    /// temporary acting set.
    pub pg_temp: Option<Option<Vec<OsdId>>>,
    /// Read each object from the local store and push it to these OSDs.
    pub pushes: Vec<(Bytes, Vec<OsdId>)>,
    /// Objects among `pushes` a client waits for: they go first.
    pub urgent: BTreeSet<Bytes>,
    /// List local objects after this key (`None`: from the start) and
    /// report them as [`PgEvent::BackfillPage`].
    pub scan: Option<Option<ObjectKey>>,
    /// Remove this copy: it is a stray of a PG clean elsewhere, in the
    /// interval starting at this epoch. The shell removes it only if the
    /// copy is still in that interval when the removal runs (see
    /// [`Pg::purge_stands`]): by then the copy may have joined a new one.
    pub purge: Option<Epoch>,
    /// List local objects after this key for the scrub and report them as
    /// [`PgEvent::ScrubPage`].
    pub scrub_list: Option<Option<ObjectKey>>,
    /// Read these scrub maps and send each to its `to` (this OSD's own as a
    /// [`PgEvent::Peer`] of [`PgMsg::ScrubMap`]).
    pub scrub_maps: Vec<ScrubOrder>,
    /// Something worth telling the operator (state changes).
    pub notes: Vec<String>,
}

impl Effects {
    /// Appends `other`'s effects after this one's.
    pub fn extend(&mut self, other: Effects) {
        self.store.extend(other.store);
        self.send.extend(other.send);
        self.replies.extend(other.replies);
        self.log.extend(other.log);
        if other.pg_temp.is_some() {
            self.pg_temp = other.pg_temp;
        }
        self.pushes.extend(other.pushes);
        self.urgent.extend(other.urgent);
        if other.scan.is_some() {
            self.scan = other.scan;
        }
        self.purge = self.purge.or(other.purge);
        if other.scrub_list.is_some() {
            self.scrub_list = other.scrub_list;
        }
        self.scrub_maps.extend(other.scrub_maps);
        self.notes.extend(other.notes);
    }
}

//! One replicated placement group as a sans-IO state machine: events in,
//! [`Effects`] (store transactions, peer messages, client replies) out.
//!
//! Write path (DESIGN.md "Write (replicated pool)"): the primary admits a
//! client write, assigns the next [`Version`], logs it, applies it locally
//! and sends it to every other acting OSD in parallel; it replies once its
//! own store and every replica have made that version durable, in version
//! order. Replicas take writes only from the primary of their current
//! interval, in log order, and acknowledge after their own commit.
//!
//! Delivery assumption: messages between two OSDs arrive in the order sent
//! (the messenger's sessions are FIFO); a gap makes the replica ignore the
//! write, which then waits, unacknowledged, for the next interval.

use crate::lease::Leases;
use crate::limits::{
    ADOPT_TXN_OPS_MAX, BACKFILL_PUSHES_MAX, EARLY_MSGS_MAX, PG_TEMP_RESEND_TICKS, PgLimits,
    RECOVERY_OPS_MAX, RESEND_TICKS, STALLED_TICKS, STRAY_NOTIFY_TICKS, SUBWRITE_RESEND_TICKS,
};
use crate::log::{DupEntry, LogEntry, LogKind, LogResult, PgLog, ReqId, Version, err_code};
use crate::peering::{
    PastInterval, PeerCopy, PgInfo, blocked_by, choose_auth, log_recoverable, missing_objects,
    want_acting,
};
use crate::scrub::{
    self, Inconsistency, ScrubMap, ScrubOrder, ScrubRun, ScrubStamps, Scrubber, Stage,
};
use bytes::Bytes;
use cairn_proto::peer::LeaseReport;
use cairn_store::{CollectionId, ObjectKey, Op, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Metadata key of the PG's [`PgInfo`].
pub const INFO_KEY: &[u8] = b"pginfo";
/// Prefix of the metadata keys naming objects this copy lacks.
pub const MISSING_KEY_PREFIX: &[u8] = b"missing/";

/// The metadata key recording that this copy lacks `object`.
#[must_use]
pub fn missing_key(object: &[u8]) -> Bytes {
    let mut key = MISSING_KEY_PREFIX.to_vec();
    key.extend_from_slice(object);
    Bytes::from(key)
}

/// A run of maps during which a PG's acting set and primary stay the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The first map epoch of the interval.
    pub epoch_started: Epoch,
    /// Where placement puts the PG (the up OSDs of its choice).
    pub up: Vec<OsdId>,
    /// The OSDs serving the PG, primary included; no duplicates. Differs
    /// from `up` while a temporary acting set (`pg_temp`) keeps complete
    /// copies serving during a backfill.
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// Fewest acting OSDs with which writes are accepted.
    pub min_size: u32,
    /// Copies the pool wants.
    pub size: u32,
}

/// An interval that cannot be a PG's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    #[error("min_size is 0 (a write must reach at least one OSD)")]
    MinSizeZero,
    #[error("{0} appears twice in the acting set")]
    DuplicateOsd(OsdId),
    #[error("primary {0} is not in the acting set")]
    PrimaryNotActing(OsdId),
}

impl Interval {
    /// Checks the interval's own consistency.
    ///
    /// # Errors
    /// The first [`IntervalError`] found.
    pub fn validate(&self) -> Result<(), IntervalError> {
        if self.min_size == 0 {
            return Err(IntervalError::MinSizeZero);
        }
        let mut seen = BTreeSet::new();
        if let Some(dup) = self.acting.iter().find(|osd| !seen.insert(**osd)) {
            return Err(IntervalError::DuplicateOsd(*dup));
        }
        match self.primary {
            Some(primary) if !seen.contains(&primary) => {
                Err(IntervalError::PrimaryNotActing(primary))
            }
            _ => Ok(()),
        }
    }
}

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
    /// The primary renews its read lease (`seq` numbers the renewal).
    LeaseRenew {
        from: OsdId,
        interval_epoch: Epoch,
        seq: u64,
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
            | PgMsg::Purge { interval_epoch, .. } => *interval_epoch,
        }
    }
}

/// A condition on an object's state before a write: the write applies only
/// if it holds; otherwise it is refused (and logged as refused, so a retry
/// gets the same answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The object's version is this one (0: the object does not exist).
    Version(u64),
    /// The xattr `name` has this value (`None`: it is absent).
    Xattr { name: Bytes, value: Option<Bytes> },
    /// The object exists. Implied by ops that need it (removes of the
    /// object, an xattr or omap keys), so removing what is missing is
    /// answered "not found" from the log rather than failing in the store
    /// after logging.
    Exists,
    /// The object does not exist (implied by an exclusive create).
    NotExists,
    /// Omap `key` has this value (`None`: it is absent).
    OmapKey { key: Bytes, value: Option<Bytes> },
}

/// A write's guards with the state of its object as the shell read it from
/// the store, under the same lock as the event, so no write slips between.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardCheck {
    /// The request's own guards, in its order: all must hold.
    pub guards: Vec<Guard>,
    /// What the request's ops need of the object, checked after them.
    pub implied: Option<Guard>,
    /// The object's version, 0 if it does not exist.
    pub version: u64,
    /// The values of the xattrs the guards name, those that are set.
    pub xattrs: BTreeMap<Bytes, Bytes>,
    /// The values of the omap keys the guards name, those that are set.
    pub omap: BTreeMap<Bytes, Bytes>,
}

impl GuardCheck {
    /// Whether nothing needs checking.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.implied.is_none()
    }

    /// The refusal code of the first guard that does not hold: the
    /// request's own carry their index, an implied one none.
    #[must_use]
    pub fn failure(&self) -> Option<u32> {
        let explicit = self.guards.iter().enumerate().find_map(|(index, guard)| {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            self.fails(guard)
                .map(|code| err_code::of_guard(code, Some(index)))
        });
        explicit.or_else(|| self.implied.as_ref().and_then(|guard| self.fails(guard)))
    }

    fn fails(&self, guard: &Guard) -> Option<u32> {
        match guard {
            Guard::Version(expected) => {
                (*expected != self.version).then_some(err_code::VERSION_MISMATCH)
            }
            Guard::Xattr { name, value } => {
                (value.as_ref() != self.xattrs.get(name)).then_some(err_code::XATTR_MISMATCH)
            }
            Guard::Exists => (self.version == 0).then_some(err_code::NOT_FOUND),
            Guard::NotExists => (self.version != 0).then_some(err_code::EXISTS),
            Guard::OmapKey { key, value } => {
                (value.as_ref() != self.omap.get(key)).then_some(err_code::OMAP_MISMATCH)
            }
        }
    }
}

/// What happens to a PG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgEvent {
    /// A client's write of one object (sent to the primary).
    ClientWrite {
        req: ReqId,
        client_epoch: Epoch,
        object: Bytes,
        ops: Vec<Op>,
        guard: Option<GuardCheck>,
    },
    /// A new map changed this PG's up set, acting set or primary.
    IntervalChange(Interval),
    /// What the map says around the PG: up OSDs and past intervals. Sent
    /// before each interval change and whenever OSDs go up or down.
    MapContext(MapContext),
    SubWrite(SubWrite),
    SubWriteAck(SubWriteAck),
    /// The store made this version's transaction durable.
    LocalCommitted {
        version: Version,
    },
    /// The store made a non-log transaction durable.
    Committed(StoreTag),
    /// A peering, recovery or backfill message from a peer.
    Peer(PgMsg),
    /// A page of this copy's objects for the backfill scan (`more`: the
    /// collection holds further objects).
    BackfillPage {
        keys: Vec<ObjectKey>,
        more: bool,
    },
    /// A client waits for `object`, which recovery has not reached yet.
    Prioritize {
        object: Bytes,
    },
    /// About a second passed: resend what may have been lost.
    Tick,
    /// Scrub the PG now (primary, clean PGs only): `deep` reads all data,
    /// `repair` fixes what differs from healthy copies. `now_secs` (since
    /// the Unix epoch) stamps it.
    Scrub {
        deep: bool,
        repair: bool,
        now_secs: u64,
    },
    /// A page of this copy's objects for the scrub (as `BackfillPage`).
    ScrubPage {
        keys: Vec<ObjectKey>,
        more: bool,
    },
    /// This copy's store could not read `object` (a checksum mismatch):
    /// the primary recovers it from another copy.
    ReadError {
        object: Bytes,
        error: String,
    },
}

impl From<PgMsg> for PgEvent {
    fn from(msg: PgMsg) -> PgEvent {
        match msg {
            PgMsg::SubWrite(write) => PgEvent::SubWrite(write),
            PgMsg::SubWriteAck(ack) => PgEvent::SubWriteAck(ack),
            other => PgEvent::Peer(other),
        }
    }
}

/// The map around a PG, from the shell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapContext {
    /// OSDs up in the current map.
    pub up_osds: BTreeSet<OsdId>,
    /// The PG's intervals before the current one, as far back as known.
    pub past: Vec<PastInterval>,
    /// The first epoch of the map history behind `past` (1: complete).
    pub history_from: Epoch,
}

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

/// A client write as the PG receives it.
struct NewWrite {
    req: ReqId,
    object: Bytes,
    ops: Vec<Op>,
}

#[derive(Debug)]
struct InFlight {
    req: ReqId,
    result: LogResult,
    waiting_on: BTreeSet<OsdId>,
    committed_local: bool,
    /// The sub-write as sent, for a resend to OSDs whose ack is overdue.
    sub_write: SubWrite,
    /// The backfill targets that got it as a log entry only.
    log_only: BTreeSet<OsdId>,
    /// Ticks since it was last sent.
    ticks: u32,
}

impl InFlight {
    /// The sub-write for one OSD (a backfill target past the scan gets the
    /// log entry only).
    fn sub_write_to(&self, osd: OsdId) -> SubWrite {
        let mut msg = self.sub_write.clone();
        if self.log_only.contains(&osd) {
            msg.ops = Vec::new();
            msg.log_only = true;
        }
        msg
    }
}

/// How a request id relates to the log.
enum Dup {
    New,
    /// The original is in flight; its completion answers both.
    InFlight,
    Answer(Reply),
}

/// Where a PG copy stands in its interval.
#[derive(Debug)]
enum Phase {
    /// Not this interval's primary: takes what the primary sends once the
    /// primary activated this copy in this interval.
    Replica { activated: bool },
    /// Primary: gathering the copies of the OSDs that may hold the PG.
    Peering {
        waiting: BTreeSet<OsdId>,
        copies: BTreeMap<OsdId, PeerCopy>,
        ticks: u32,
    },
    /// Primary: asked the monitor for another acting set; waits for the
    /// interval that brings it.
    WaitingTemp { ticks: u32 },
    /// Primary: cannot be sure it has every acknowledged write; serves
    /// nothing.
    Incomplete { reason: String },
    /// Primary: the peers adopt the authoritative history.
    Activating {
        waiting: BTreeSet<OsdId>,
        local_done: bool,
        ticks: u32,
    },
    /// Primary: serving (and recovering, backfilling).
    Active,
}

/// The primary's view of healing in the current interval.
#[derive(Debug, Default)]
struct Healing {
    /// Copies that can serve as sources: complete except `missing`.
    sources: BTreeSet<OsdId>,
    /// Object -> OSDs (this one included) lacking its current state.
    missing: BTreeMap<Bytes, BTreeSet<OsdId>>,
    /// Objects being recovered now -> ticks since issued.
    recovering: BTreeMap<Bytes, u32>,
    /// Objects clients wait for, recovered first.
    priority: VecDeque<Bytes>,
    /// Objects no up copy holds.
    unfound: BTreeSet<Bytes>,
    /// Copies being filled by a scan of this one.
    backfill_targets: BTreeSet<OsdId>,
    /// Keys up to this one have been handed to pushes.
    pushed_through: Option<ObjectKey>,
    scan_pending: bool,
    scan_done: bool,
    /// Objects whose writes went to the backfill targets as log entries
    /// only (beyond `pushed_through`) and that no scanned page has listed
    /// since: a page listed before such a write reached the store lacks
    /// the object, so the scan pushes these itself as it passes them.
    log_only_unlisted: BTreeSet<ObjectKey>,
    /// Backfill pushes in flight -> targets that have not acked, ticks.
    backfill_in_flight: BTreeMap<ObjectKey, (BTreeSet<OsdId>, u32)>,
    /// Backfill targets told they are done, not yet acknowledged.
    backfill_done_waiting: BTreeSet<OsdId>,
    /// OSDs holding copies outside the acting and up sets.
    strays: BTreeSet<OsdId>,
    /// Strays whose copies can be brought up to date from the log, with
    /// the objects each lacks: recovery sources for what no member holds
    /// (after a remap the data may sit only there, as Ceph's missing_loc
    /// counts every peer).
    stray_sources: BTreeMap<OsdId, BTreeSet<Bytes>>,
    /// Activation messages, resent until acknowledged.
    activations: BTreeMap<OsdId, PgMsg>,
    /// Stray copy: ticks since the interval began (it announces itself
    /// again now and then, until the primary purges it).
    stray_ticks: u32,
    /// What was last asked of the monitor in this interval.
    temp_requested: Option<Option<Vec<OsdId>>>,
}

/// One replicated PG on one OSD.
#[derive(Debug)]
pub struct Pg {
    pg: PgId,
    whoami: OsdId,
    collection: CollectionId,
    interval: Interval,
    limits: PgLimits,
    last_update: Version,
    /// Every version up to this one is durable locally.
    last_complete: Version,
    /// Every version up to this one is durable on its whole acting set.
    committed_to: Version,
    log: PgLog,
    /// Versions submitted to the store, not yet durable → the version before.
    uncommitted: BTreeMap<Version, Version>,
    /// Primary: accepted writes, not yet answered.
    inflight: BTreeMap<Version, InFlight>,
    /// Replica: acks to send on local commit, to the primary that asked.
    acks_owed: BTreeMap<Version, OsdId>,
    /// This copy's peering facts (persisted under [`INFO_KEY`]).
    info: PgInfo,
    /// Objects this copy lacks (persisted under [`MISSING_KEY_PREFIX`]).
    local_missing: BTreeSet<Bytes>,
    phase: Phase,
    context: MapContext,
    healing: Healing,
    /// Replica: peer messages of this interval that came before the
    /// activation (the messenger does not order them).
    early: Vec<PgMsg>,
    /// Replica: pushed objects to acknowledge on commit, to their sender.
    pushes_owed: BTreeMap<Bytes, OsdId>,
    scrub: Scrubber,
    leases: Leases,
}

/// A PG copy as the store holds it, for [`Pg::restore`].
#[derive(Clone, Debug, Default)]
pub struct StoredPg {
    /// Log entries in version order.
    pub log: Vec<LogEntry>,
    /// Requests trimmed from the log, kept for retries.
    pub dups: Vec<DupEntry>,
    /// `None`: no info stored (a copy that never activated).
    pub info: Option<PgInfo>,
    pub missing: BTreeSet<Bytes>,
    pub scrub: ScrubStamps,
    /// Inconsistencies this copy's scrubs found and kept (as a primary).
    pub inconsistent: Vec<Inconsistency>,
}

impl Pg {
    /// A new PG with no history that is active at once: for tests of the
    /// write path. The daemon uses [`Pg::restore`], which peers first.
    ///
    /// # Errors
    /// The interval is inconsistent.
    pub fn new(
        pg: PgId,
        whoami: OsdId,
        interval: Interval,
        limits: PgLimits,
    ) -> Result<Pg, IntervalError> {
        let mut core = Pg::blank(pg, whoami, interval, limits)?;
        core.info.last_epoch_started = core.interval.epoch_started;
        core.phase = if core.is_primary() {
            Phase::Active
        } else {
            Phase::Replica { activated: true }
        };
        Ok(core)
    }

    fn blank(
        pg: PgId,
        whoami: OsdId,
        interval: Interval,
        limits: PgLimits,
    ) -> Result<Pg, IntervalError> {
        interval.validate()?;
        assert!(limits.inflight_max < limits.log_entries_max);
        Ok(Pg {
            pg,
            whoami,
            collection: CollectionId::pg(pg.pool.0, pg.seed),
            interval,
            limits,
            last_update: Version::ZERO,
            last_complete: Version::ZERO,
            committed_to: Version::ZERO,
            log: PgLog::new(limits.log_entries_max, limits.log_dups_max),
            uncommitted: BTreeMap::new(),
            inflight: BTreeMap::new(),
            acks_owed: BTreeMap::new(),
            info: PgInfo {
                exists: true,
                ..PgInfo::default()
            },
            local_missing: BTreeSet::new(),
            phase: Phase::Replica { activated: false },
            context: MapContext {
                history_from: Epoch(1),
                ..MapContext::default()
            },
            healing: Healing::default(),
            early: Vec::new(),
            pushes_owed: BTreeMap::new(),
            scrub: Scrubber::default(),
            leases: Leases::default(),
        })
    }

    /// A PG copy from what the store holds, in `interval`: the primary
    /// starts peering (the returned effects hold its queries), others wait
    /// for the primary.
    ///
    /// # Errors
    /// The interval is inconsistent.
    pub fn restore(
        pg: PgId,
        whoami: OsdId,
        interval: Interval,
        limits: PgLimits,
        stored: StoredPg,
        context: MapContext,
    ) -> Result<(Pg, Effects), IntervalError> {
        Pg::restore_leased(
            pg,
            whoami,
            interval,
            limits,
            stored,
            context,
            Leases::default(),
        )
    }

    /// As [`Pg::restore`], with read leases as `leases` says (see
    /// [`crate::lease`]): the daemon's way.
    ///
    /// # Errors
    /// The interval is inconsistent.
    pub fn restore_leased(
        pg: PgId,
        whoami: OsdId,
        interval: Interval,
        limits: PgLimits,
        stored: StoredPg,
        context: MapContext,
        leases: Leases,
    ) -> Result<(Pg, Effects), IntervalError> {
        let mut core = Pg::blank(pg, whoami, interval, limits)?;
        core.leases = leases;
        core.log.restore_dups(stored.dups);
        for entry in stored.log {
            if entry.version > core.last_update {
                core.last_update = entry.version;
                core.log.append(entry);
            }
        }
        core.last_complete = core.last_update;
        core.info = stored.info.unwrap_or_default();
        core.info.exists = true;
        core.local_missing = stored.missing;
        core.scrub.stamps = stored.scrub;
        for found in stored.inconsistent {
            // Kept already: no write.
            let _ = core.scrub.record(found);
        }
        core.context = context;
        let mut fx = Effects::default();
        core.enter_interval(&mut fx);
        Ok((core, fx))
    }

    /// Handles one event; never blocks, never does I/O.
    pub fn handle(&mut self, event: PgEvent) -> Effects {
        let mut fx = Effects::default();
        let outcome = match event {
            PgEvent::ClientWrite {
                req,
                client_epoch,
                object,
                ops,
                guard,
            } => {
                let write = NewWrite { req, object, ops };
                self.on_client_write(write, client_epoch, guard, &mut fx);
                Ok(())
            }
            PgEvent::IntervalChange(interval) => self.on_interval_change(interval, &mut fx),
            PgEvent::MapContext(context) => {
                self.on_map_context(context, &mut fx);
                Ok(())
            }
            PgEvent::SubWrite(write) => {
                if matches!(self.phase, Phase::Replica { activated: false })
                    && write.interval_epoch == self.interval.epoch_started
                {
                    self.park(PgMsg::SubWrite(write));
                    Ok(())
                } else {
                    self.on_sub_write(write, &mut fx)
                }
            }
            PgEvent::SubWriteAck(ack) => self.on_sub_write_ack(ack, &mut fx),
            PgEvent::LocalCommitted { version } => self.on_local_committed(version, &mut fx),
            PgEvent::Committed(tag) => {
                self.on_committed(tag, &mut fx);
                Ok(())
            }
            PgEvent::Peer(msg) => self.on_peer(msg, &mut fx),
            PgEvent::BackfillPage { keys, more } => {
                self.on_backfill_page(keys, more, &mut fx);
                Ok(())
            }
            PgEvent::Prioritize { object } => {
                self.prioritize(object, &mut fx);
                Ok(())
            }
            PgEvent::Tick => {
                self.on_tick(&mut fx);
                Ok(())
            }
            PgEvent::Scrub {
                deep,
                repair,
                now_secs,
            } => self.start_scrub(deep, repair, now_secs, &mut fx),
            PgEvent::ScrubPage { keys, more } => {
                self.on_scrub_page(keys, more, &mut fx);
                Ok(())
            }
            PgEvent::ReadError { object, error } => {
                self.on_read_error(object, error, &mut fx);
                Ok(())
            }
        };
        if let Err(why) = outcome {
            fx.log.push(why);
        }
        fx
    }

    fn is_primary(&self) -> bool {
        self.interval.primary == Some(self.whoami)
    }

    fn on_client_write(
        &mut self,
        write: NewWrite,
        client_epoch: Epoch,
        guard: Option<GuardCheck>,
        fx: &mut Effects,
    ) {
        let req = write.req;
        if let Err(reason) = self.check_primary(client_epoch) {
            fx.replies.push((req, Reply::Retry { reason }));
            return;
        }
        // Below min_size nothing is answered, not even a resend from the
        // log: its entry may be on this copy alone.
        let complete = self.complete_acting_count();
        if complete < self.interval.min_size {
            let blocked = Reply::Blocked {
                acting_count: complete,
                min_size: self.interval.min_size,
            };
            fx.replies.push((req, blocked));
            return;
        }
        match self.duplicate(req) {
            Dup::New => {}
            Dup::InFlight => return,
            Dup::Answer(reply) => {
                fx.replies.push((req, reply));
                return;
            }
        }
        if self.object_healing(&write.object) {
            self.prioritize(write.object.clone(), fx);
            fx.replies.push((req, Reply::ObjectBusy));
            return;
        }
        if self
            .scrub
            .run
            .as_ref()
            .is_some_and(|run| run.blocks(&ObjectKey::new(write.object.clone())))
        {
            fx.replies.push((req, Reply::ObjectBusy));
            return;
        }
        let refusal = match guard {
            Some(_) if self.object_unsettled(&write.object) => {
                fx.replies.push((req, Reply::ObjectBusy));
                return;
            }
            Some(check) => check.failure(),
            None => None,
        };
        if let Err(reply) = self.start_write(write, refusal, fx) {
            fx.replies.push((req, reply));
        }
    }

    /// Whether a logged write to `object` is not yet known durable on the
    /// acting set (in flight, or awaiting peering): its outcome could still
    /// change what a guard sees.
    fn object_unsettled(&self, object: &Bytes) -> bool {
        self.log
            .iter()
            .rev()
            .take_while(|entry| entry.version > self.committed_to)
            .any(|entry| entry.object == *object && entry.kind != LogKind::Refused)
    }

    /// Whether some copy still lacks `object`, or a backfill push of it is
    /// under way: a write must wait until the copies agree.
    fn object_healing(&self, object: &Bytes) -> bool {
        self.healing.missing.contains_key(object)
            || self
                .healing
                .backfill_in_flight
                .contains_key(&ObjectKey::new(object.clone()))
    }

    /// Rule: refuse only if this OSD is not an active primary or the
    /// interval began after the client's map, never for unrelated newer
    /// epochs.
    fn check_primary(&self, client_epoch: Epoch) -> Result<(), RetryReason> {
        if !self.is_primary() {
            return Err(RetryReason::NotPrimary {
                primary: self.interval.primary,
            });
        }
        if self.interval.epoch_started > client_epoch {
            return Err(RetryReason::IntervalNewer {
                interval_epoch: self.interval.epoch_started,
                client_epoch,
            });
        }
        if !matches!(self.phase, Phase::Active) {
            return Err(RetryReason::NotActive);
        }
        Ok(())
    }

    fn duplicate(&self, req: ReqId) -> Dup {
        let Some(entry) = self.log.find_req(req) else {
            return Dup::New;
        };
        if self.inflight.contains_key(&entry.version) {
            Dup::InFlight
        } else if entry.version <= self.committed_to {
            Dup::Answer(Reply::Done {
                version: entry.version,
                result: entry.result,
            })
        } else {
            Dup::Answer(Reply::Retry {
                reason: RetryReason::AwaitingPeering {
                    version: entry.version,
                },
            })
        }
    }

    /// Acting OSDs that hold the PG (not being backfilled): the copies a
    /// write is durable on.
    fn complete_acting_count(&self) -> u32 {
        let complete = self
            .interval
            .acting
            .iter()
            .filter(|o| !self.healing.backfill_targets.contains(o))
            .count();
        u32::try_from(complete).unwrap_or(u32::MAX)
    }

    /// Admits, logs and issues a new write (or, with a `refusal` code, logs
    /// its refusal and changes nothing); the `Err` is the reply.
    fn start_write(
        &mut self,
        write: NewWrite,
        refusal: Option<u32>,
        fx: &mut Effects,
    ) -> Result<(), Reply> {
        let NewWrite {
            req,
            object,
            mut ops,
        } = write;
        // History from a later interval than this copy knows of (its map
        // is behind): a version of this interval would not follow it. Not
        // served until the map catches up.
        if self.last_update.epoch > self.interval.epoch_started {
            return Err(Reply::Retry {
                reason: RetryReason::NotActive,
            });
        }
        let min_size = self.interval.min_size;
        let complete = self.complete_acting_count();
        if complete < min_size {
            return Err(Reply::Blocked {
                acting_count: complete,
                min_size,
            });
        }
        if self.inflight.len() >= self.limits.inflight_max {
            return Err(Reply::Busy {
                inflight_max: self.limits.inflight_max,
            });
        }
        let kind = check_ops(&object, &ops).map_err(|reason| Reply::Invalid { reason })?;
        let Some(seq) = self.last_update.seq.checked_add(1) else {
            let full = StoreError::Invalid("PG sequence exhausted".into());
            return Err(Reply::Invalid {
                reason: full.into(),
            });
        };
        let (kind, result) = match refusal {
            Some(code) => {
                ops.clear();
                (LogKind::Refused, LogResult::Err { code })
            }
            None => {
                if kind == LogKind::Write {
                    // The object's version is the PG sequence of its last
                    // write: it only grows, and guards compare against it.
                    ops.push(Op::SetVersion {
                        object: ObjectKey::new(object.clone()),
                        version: seq,
                    });
                }
                (
                    kind,
                    LogResult::Ok {
                        object_version: seq,
                    },
                )
            }
        };
        let version = Version {
            epoch: self.interval.epoch_started,
            seq,
        };
        assert!(
            version > self.last_update,
            "new version {version} not after last_update"
        );
        let key = ObjectKey::new(object.clone());
        let entry = LogEntry {
            version,
            object,
            kind,
            req,
            result,
        };
        let txn = self
            .log_txn(ops.clone(), &entry)
            .map_err(|e| Reply::Invalid { reason: e.into() })?;
        let prior = self.append(entry.clone(), txn, fx);
        let replicas: BTreeSet<OsdId> = self
            .interval
            .acting
            .iter()
            .chain(self.healing.backfill_targets.iter())
            .copied()
            .filter(|osd| *osd != self.whoami)
            .collect();
        // Once the scan has passed the last object, no later scan pushes an
        // object created beyond it: such writes carry their data.
        let beyond_backfill = !self.healing.scan_done
            && self
                .healing
                .pushed_through
                .as_ref()
                .is_none_or(|p| key > *p);
        if beyond_backfill && !self.healing.backfill_targets.is_empty() {
            self.healing.log_only_unlisted.insert(key.clone());
        }
        let log_only: BTreeSet<OsdId> = if beyond_backfill {
            self.healing.backfill_targets.clone()
        } else {
            BTreeSet::new()
        };
        let flight = InFlight {
            req,
            result: entry.result,
            waiting_on: replicas,
            committed_local: false,
            sub_write: SubWrite {
                from: self.whoami,
                interval_epoch: self.interval.epoch_started,
                entry,
                ops,
                prior,
                committed_to: self.committed_to,
                log_only: false,
            },
            log_only,
            ticks: 0,
        };
        for osd in &flight.waiting_on {
            fx.send
                .push((*osd, PgMsg::SubWrite(flight.sub_write_to(*osd))));
        }
        self.inflight.insert(version, flight);
        Ok(())
    }

    /// Sends the in-flight sub-writes again to the OSDs whose acks are
    /// overdue, oldest first (a copy takes them only in order), once the
    /// oldest waited [`SUBWRITE_RESEND_TICKS`]. The session they went on
    /// may have died, or the copy was too busy to take them; a copy that
    /// already has one acknowledges it again ([`Pg::on_sub_write`]).
    fn resend_sub_writes(&mut self) -> Vec<(OsdId, PgMsg)> {
        for flight in self.inflight.values_mut() {
            flight.ticks = flight.ticks.saturating_add(1);
        }
        let overdue = self
            .inflight
            .values()
            .find(|f| !f.waiting_on.is_empty())
            .is_some_and(|f| f.ticks >= SUBWRITE_RESEND_TICKS);
        if !overdue {
            return Vec::new();
        }
        let committed_to = self.committed_to;
        let mut out = Vec::new();
        for flight in self.inflight.values_mut() {
            flight.ticks = 0;
            flight.sub_write.committed_to = committed_to;
            for osd in &flight.waiting_on {
                out.push((*osd, PgMsg::SubWrite(flight.sub_write_to(*osd))));
            }
        }
        out
    }

    /// The write's transaction: the client's ops, its log entry under the
    /// metadata key of its version, and the removal of the log entry the
    /// append will trim, so the stored log stays bounded too.
    fn log_txn(&self, ops: Vec<Op>, entry: &LogEntry) -> Result<Transaction, StoreError> {
        let mut txn = Transaction::new(self.collection);
        txn.ops = ops;
        txn.push(Op::MetaSet {
            key: entry.version.log_key(),
            value: entry.encode(),
        });
        // What the append will trim: the oldest entry becomes a dup, and
        // the oldest dup may be forgotten.
        let (oldest, forgotten) = self.log.next_trim();
        if let Some(oldest) = oldest {
            txn.push(Op::MetaRemove {
                key: oldest.version.log_key(),
            });
            if self.log.dups_max() > 0 {
                let dup = DupEntry::of(oldest);
                txn.push(Op::MetaSet {
                    key: dup.key(),
                    value: dup.encode(),
                });
            }
        }
        if let Some(forgotten) = forgotten {
            txn.push(Op::MetaRemove {
                key: forgotten.key(),
            });
        }
        txn.validate()?;
        Ok(txn)
    }

    /// Appends a validated entry and submits its transaction; returns the
    /// version before it.
    fn append(&mut self, entry: LogEntry, txn: Transaction, fx: &mut Effects) -> Version {
        let prior = self.last_update;
        let version = entry.version;
        assert!(version > prior, "log entry {version} not after {prior}");
        let trimmed = self.log.append(entry);
        assert!(trimmed.to_dups.len() <= 1, "log grew past its bound");
        self.last_update = version;
        self.uncommitted.insert(version, prior);
        fx.store.push(StoreWrite {
            version,
            txn,
            tag: StoreTag::Entry,
        });
        prior
    }

    fn on_sub_write(&mut self, msg: SubWrite, fx: &mut Effects) -> Result<(), Ignored> {
        if let Some(version) = self.applied_before(&msg) {
            // Sent again (its ack was lost or late): acknowledge it once it
            // is durable, never apply it twice.
            if self.uncommitted.contains_key(&version) {
                self.acks_owed.insert(version, msg.from);
            } else {
                let ack = SubWriteAck {
                    from: self.whoami,
                    version,
                };
                fx.send.push((msg.from, PgMsg::SubWriteAck(ack)));
            }
            return Ok(());
        }
        self.check_sub_write(&msg)?;
        if self.acks_owed.len() >= self.limits.inflight_max {
            return Err(Ignored::ReplicaBusy {
                pending: self.acks_owed.len(),
            });
        }
        let txn = self
            .log_txn(msg.ops, &msg.entry)
            .map_err(|e| Ignored::Malformed(e.to_string()))?;
        let version = msg.entry.version;
        self.append(msg.entry, txn, fx);
        self.acks_owed.insert(version, msg.from);
        self.committed_to = self.committed_to.max(msg.committed_to);
        Ok(())
    }

    /// The version of a sub-write of this interval's primary that this
    /// activated copy already applied. Only that primary writes versions of
    /// this interval's epoch, in order, so one at or below `last_update` is
    /// the same write.
    fn applied_before(&self, msg: &SubWrite) -> Option<Version> {
        let version = msg.entry.version;
        let epoch = self.interval.epoch_started;
        let from_primary =
            self.interval.primary == Some(msg.from) && self.interval.primary != Some(self.whoami);
        (matches!(self.phase, Phase::Replica { activated: true })
            && from_primary
            && msg.interval_epoch == epoch
            && version.epoch == epoch
            && version <= self.last_update)
            .then_some(version)
    }

    /// Validates a peer's sub-write: sender, interval, order, content.
    fn check_sub_write(&self, msg: &SubWrite) -> Result<(), Ignored> {
        let primary = self.interval.primary;
        let member =
            self.interval.acting.contains(&self.whoami) || self.interval.up.contains(&self.whoami);
        if primary == Some(self.whoami) || !member {
            return Err(Ignored::NotReplica {
                whoami: self.whoami,
            });
        }
        if primary != Some(msg.from) {
            return Err(Ignored::NotFromPrimary {
                from: msg.from,
                primary,
            });
        }
        if msg.interval_epoch != self.interval.epoch_started {
            return Err(Ignored::WrongInterval {
                got: msg.interval_epoch,
                current: self.interval.epoch_started,
            });
        }
        let version = msg.entry.version;
        if msg.prior != self.last_update || Some(version.seq) != msg.prior.seq.checked_add(1) {
            return Err(Ignored::OutOfOrder {
                got: version,
                prior: msg.prior,
                last_update: self.last_update,
            });
        }
        let malformed = |why: String| Err(Ignored::Malformed(why));
        if version.epoch != msg.interval_epoch || version <= msg.prior {
            return malformed(format!(
                "version {version} in interval {}",
                msg.interval_epoch
            ));
        }
        if msg.committed_to >= version {
            return malformed(format!(
                "committed_to {} not below {version}",
                msg.committed_to
            ));
        }
        if msg.entry.kind == LogKind::Refused || msg.log_only {
            return match (msg.ops.is_empty(), msg.entry.result, msg.log_only) {
                (true, LogResult::Err { .. }, _) | (true, _, true) => Ok(()),
                _ => malformed(format!("refusal with {} ops", msg.ops.len())),
            };
        }
        let expected = LogResult::Ok {
            object_version: version.seq,
        };
        if msg.entry.result != expected {
            return malformed(format!("result {:?}", msg.entry.result));
        }
        match check_ops(&msg.entry.object, &msg.ops) {
            Ok(kind) if kind == msg.entry.kind => Ok(()),
            Ok(kind) => malformed(format!("kind {:?}, ops say {kind:?}", msg.entry.kind)),
            Err(e) => malformed(e.to_string()),
        }
    }

    fn on_sub_write_ack(&mut self, ack: SubWriteAck, fx: &mut Effects) -> Result<(), Ignored> {
        let awaited = self
            .inflight
            .get_mut(&ack.version)
            .is_some_and(|flight| flight.waiting_on.remove(&ack.from));
        if !awaited {
            return Err(Ignored::UnexpectedAck {
                from: ack.from,
                version: ack.version,
            });
        }
        self.release_replies(fx);
        Ok(())
    }

    fn on_local_committed(&mut self, version: Version, fx: &mut Effects) -> Result<(), Ignored> {
        if self.uncommitted.remove(&version).is_none() {
            return Err(Ignored::UnknownCommit { version });
        }
        let complete = match self.uncommitted.first_key_value() {
            Some((_, prior)) => *prior,
            None => self.last_update,
        };
        // An activation may have moved the log under in-flight commits.
        self.last_complete = complete.min(self.last_update).max(self.last_complete);
        if let Some(primary) = self.acks_owed.remove(&version) {
            let ack = SubWriteAck {
                from: self.whoami,
                version,
            };
            fx.send.push((primary, PgMsg::SubWriteAck(ack)));
        }
        if let Some(flight) = self.inflight.get_mut(&version) {
            flight.committed_local = true;
            self.release_replies(fx);
        }
        Ok(())
    }

    /// Answers the oldest in-flight writes that are durable everywhere,
    /// stopping at the first that is not, so replies go in version order.
    fn release_replies(&mut self, fx: &mut Effects) {
        while let Some(first) = self.inflight.first_entry() {
            let flight = first.get();
            if !flight.committed_local || !flight.waiting_on.is_empty() {
                break;
            }
            let (version, flight) = first.remove_entry();
            assert!(version > self.committed_to, "reply for {version} twice");
            self.committed_to = version;
            let reply = Reply::Done {
                version,
                result: flight.result,
            };
            fx.replies.push((flight.req, reply));
        }
        self.scrub_progress(fx);
    }

    /// Moves to a newer interval. In-flight writes are answered `Retry`:
    /// they may or may not be durable on the new acting set, and a resend
    /// is never applied twice because its request id is in the log (peering
    /// settles the entry: it is kept if any copy that peering picks has
    /// it).
    fn on_interval_change(&mut self, interval: Interval, fx: &mut Effects) -> Result<(), Ignored> {
        interval.validate().map_err(Ignored::BadInterval)?;
        if interval.epoch_started <= self.interval.epoch_started {
            return Err(Ignored::StaleInterval {
                got: interval.epoch_started,
                current: self.interval.epoch_started,
            });
        }
        let reason = RetryReason::IntervalChanged {
            epoch: interval.epoch_started,
        };
        for flight in std::mem::take(&mut self.inflight).into_values() {
            fx.replies.push((flight.req, Reply::Retry { reason }));
        }
        // The old primary no longer waits for these acks.
        self.acks_owed.clear();
        self.interval = interval;
        self.enter_interval(fx);
        Ok(())
    }

    /// Starts the current interval: the primary peers, a stray copy tells
    /// the primary it exists (so it is removed once the PG is clean).
    fn enter_interval(&mut self, fx: &mut Effects) {
        self.healing = Healing::default();
        self.early.clear();
        self.pushes_owed.clear();
        // Repairs were recovery of the old interval; what they did not
        // finish stays reported (and kept on disk) until a repair or a
        // scrub clears it. A copy that is no longer primary hands its list
        // to the new primary in its answer to the query.
        self.scrub.run = None;
        self.scrub.repairing.clear();
        if self.is_primary() {
            self.start_peering(fx);
            return;
        }
        self.phase = Phase::Replica { activated: false };
        let member =
            self.interval.acting.contains(&self.whoami) || self.interval.up.contains(&self.whoami);
        if let (false, Some(primary)) = (member, self.interval.primary) {
            let notify = self.notify(self.interval.epoch_started);
            fx.send.push((primary, notify));
        }
    }

    /// This copy as peering sees it.
    fn own_copy(&self) -> PeerCopy {
        PeerCopy {
            info: PgInfo {
                exists: true,
                last_update: self.last_update,
                ..self.info.clone()
            },
            log: self.log.iter().cloned().collect(),
            missing: self.local_missing.clone(),
        }
    }

    fn notify(&self, interval_epoch: Epoch) -> PgMsg {
        self.notify_to(interval_epoch, self.interval.primary.unwrap_or(self.whoami))
    }

    fn notify_to(&self, interval_epoch: Epoch, querier: OsdId) -> PgMsg {
        PgMsg::Notify(Notify {
            from: self.whoami,
            interval_epoch,
            copy: self.own_copy(),
            lease: self.leases.report(querier, self.is_active_primary()),
            inconsistent: self.scrub.inconsistent.values().cloned().collect(),
        })
    }

    /// The other OSDs of this interval's acting and up sets.
    fn members(&self) -> BTreeSet<OsdId> {
        self.interval
            .acting
            .iter()
            .chain(self.interval.up.iter())
            .copied()
            .filter(|o| *o != self.whoami)
            .collect()
    }

    /// The OSDs whose copies peering asks for: the up and acting sets and
    /// every OSD of the past intervals, if up.
    fn probe_set(&self) -> BTreeSet<OsdId> {
        self.interval
            .acting
            .iter()
            .chain(self.interval.up.iter())
            .chain(self.context.past.iter().flat_map(|p| p.acting.iter()))
            .copied()
            .filter(|o| *o != self.whoami && self.context.up_osds.contains(o))
            .collect()
    }

    fn start_peering(&mut self, fx: &mut Effects) {
        self.leases.new_interval();
        self.leases.bind_own(self.whoami);
        let waiting = self.probe_set();
        for osd in &waiting {
            fx.send.push((*osd, self.query()));
        }
        let copies = BTreeMap::from([(self.whoami, self.own_copy())]);
        self.phase = Phase::Peering {
            waiting,
            copies,
            ticks: 0,
        };
        self.try_finish_peering(fx);
    }

    fn query(&self) -> PgMsg {
        PgMsg::Query {
            from: self.whoami,
            interval_epoch: self.interval.epoch_started,
        }
    }

    fn on_map_context(&mut self, context: MapContext, fx: &mut Effects) {
        self.context = context;
        let probe = self.probe_set();
        let query = self.query();
        let members = self.members();
        match &mut self.phase {
            Phase::Peering {
                waiting, copies, ..
            } => {
                // A past interval's OSD that went down is not waited for. A
                // member of this interval is: the map that took it down
                // also ends this interval, and activating without its
                // answer would empty its copy for a backfill, though it may
                // hold the only complete one.
                waiting.retain(|o| self.context.up_osds.contains(o) || members.contains(o));
                // An OSD that came up since peering began may hold the only
                // complete copy of a past interval: ask it too.
                for osd in probe {
                    if !copies.contains_key(&osd) && waiting.insert(osd) {
                        fx.send.push((osd, query.clone()));
                    }
                }
                self.try_finish_peering(fx);
            }
            // An OSD that came back may hold what was missing.
            Phase::Incomplete { .. } => self.start_peering(fx),
            _ => {}
        }
    }

    fn on_peer(&mut self, msg: PgMsg, fx: &mut Effects) -> Result<(), Ignored> {
        let current = self.interval.epoch_started;
        let sender = msg.from();
        let ignore = |what: &'static str, why: String| Ignored::Peering {
            what,
            from: sender,
            why,
        };
        match msg {
            PgMsg::Query {
                from,
                interval_epoch,
            } => {
                fx.send.push((from, self.notify_to(interval_epoch, from)));
                Ok(())
            }
            PgMsg::LeaseRenew {
                from,
                interval_epoch,
                seq,
            } => {
                if !self.sent_by_current_primary(from, interval_epoch) {
                    return Err(ignore(
                        "lease renewal",
                        "not from the active primary".into(),
                    ));
                }
                if self.leases.grant(current, from) {
                    let ack = PgMsg::LeaseAck {
                        from: self.whoami,
                        interval_epoch,
                        seq,
                    };
                    fx.send.push((from, ack));
                }
                Ok(())
            }
            PgMsg::LeaseAck {
                from,
                interval_epoch,
                seq,
            } => {
                if interval_epoch != current || !self.is_primary() {
                    return Err(ignore("lease ack", format!("interval {interval_epoch}")));
                }
                self.leases.acked(from, seq);
                Ok(())
            }
            PgMsg::Notify(notify) => self.on_notify(notify, fx),
            PgMsg::Activate(activate) => self.on_activate(activate, fx),
            PgMsg::Activated {
                from,
                interval_epoch,
            } => {
                if interval_epoch != current {
                    return Err(ignore("activated", format!("interval {interval_epoch}")));
                }
                if let Phase::Activating { waiting, .. } = &mut self.phase {
                    waiting.remove(&from);
                    self.healing.activations.remove(&from);
                }
                self.maybe_active(fx);
                Ok(())
            }
            PgMsg::PushAck {
                from,
                interval_epoch,
                object,
            } => {
                if interval_epoch != current || !self.is_primary() {
                    return Err(ignore("push ack", format!("interval {interval_epoch}")));
                }
                self.on_push_ack(from, object, fx);
                Ok(())
            }
            PgMsg::BackfillDone {
                from,
                interval_epoch,
            } => {
                if self.interval.primary != Some(from) || interval_epoch != current {
                    return Err(ignore("backfill done", "not the current primary".into()));
                }
                if matches!(self.phase, Phase::Replica { activated: false }) {
                    self.park(PgMsg::BackfillDone {
                        from,
                        interval_epoch,
                    });
                    return Ok(());
                }
                self.info.backfilling = false;
                let mut txn = Transaction::new(self.collection);
                txn.push(Op::MetaSet {
                    key: Bytes::from_static(INFO_KEY),
                    value: self.info.encode(),
                });
                fx.store.push(StoreWrite {
                    version: self.last_update,
                    txn,
                    tag: StoreTag::BackfillDone(interval_epoch),
                });
                Ok(())
            }
            PgMsg::BackfillDoneAck {
                from,
                interval_epoch,
            } => {
                if interval_epoch != current {
                    return Err(ignore("backfill ack", format!("interval {interval_epoch}")));
                }
                if self.healing.backfill_done_waiting.remove(&from) {
                    self.healing.backfill_targets.remove(&from);
                    self.healing.sources.insert(from);
                    if self.healing.backfill_done_waiting.is_empty() {
                        self.after_backfill(fx);
                    }
                }
                Ok(())
            }
            PgMsg::Purge {
                from,
                interval_epoch,
            } => {
                let member = self.interval.acting.contains(&self.whoami)
                    || self.interval.up.contains(&self.whoami);
                if self.interval.primary != Some(from) || interval_epoch != current || member {
                    return Err(ignore("purge", "not a stray of this interval".into()));
                }
                fx.purge = Some(current);
                Ok(())
            }
            PgMsg::Push(push) => self.on_push(push, fx),
            PgMsg::Unreadable {
                from,
                interval_epoch,
                object,
            } => {
                if interval_epoch != current || !self.is_active_primary() {
                    return Err(ignore("unreadable", format!("interval {interval_epoch}")));
                }
                self.on_unreadable(from, object, fx);
                Ok(())
            }
            PgMsg::ScrubRequest {
                from,
                interval_epoch,
                chunk,
                after,
                through,
                deep,
            } => {
                if !self.sent_by_current_primary(from, interval_epoch) {
                    return Err(ignore(
                        "scrub request",
                        "not from the active primary".into(),
                    ));
                }
                fx.scrub_maps.push(ScrubOrder {
                    to: from,
                    interval_epoch,
                    chunk,
                    after,
                    through,
                    deep,
                });
                Ok(())
            }
            PgMsg::ScrubMap(map) => self.on_scrub_map(map, fx),
            PgMsg::SubWrite(_) | PgMsg::SubWriteAck(_) | PgMsg::Pull { .. } => {
                Err(ignore("message", "routed to the PG core by mistake".into()))
            }
        }
    }

    /// Whether a message comes from the primary of this copy's current
    /// interval, and this copy took that primary's activation.
    fn sent_by_current_primary(&self, from: OsdId, interval_epoch: Epoch) -> bool {
        self.interval.primary == Some(from)
            && interval_epoch == self.interval.epoch_started
            && !matches!(self.phase, Phase::Replica { activated: false })
    }

    fn on_notify(&mut self, notify: Notify, fx: &mut Effects) -> Result<(), Ignored> {
        let from = notify.from;
        let missing: Vec<Bytes> = notify.copy.missing.iter().cloned().collect();
        if let Some(why) = bad_history(&notify.copy.log, &missing) {
            return Err(Ignored::Malformed(format!("copy of osd.{}: {why}", from.0)));
        }
        match &mut self.phase {
            Phase::Peering {
                waiting, copies, ..
            } if notify.interval_epoch == self.interval.epoch_started => {
                waiting.remove(&from);
                copies.insert(from, notify.copy);
                self.leases.peer_report(from, notify.lease);
                self.take_inconsistencies(notify.inconsistent, fx);
                self.try_finish_peering(fx);
                Ok(())
            }
            Phase::Active | Phase::Activating { .. } => {
                self.take_inconsistencies(notify.inconsistent, fx);
                let member = self.interval.acting.contains(&from)
                    || self.interval.up.contains(&from)
                    || self.healing.backfill_targets.contains(&from);
                if !member && notify.copy.info.exists {
                    self.healing.strays.insert(from);
                    let log: Vec<LogEntry> = self.log.iter().cloned().collect();
                    if notify.copy.info.complete() && log_recoverable(&notify.copy, &log) {
                        let lacks = missing_objects(&notify.copy, &log);
                        self.healing.stray_sources.insert(from, lacks);
                    }
                    self.maybe_clean(fx);
                }
                Ok(())
            }
            _ => Err(Ignored::Peering {
                what: "notify",
                from,
                why: format!("for interval {}", notify.interval_epoch),
            }),
        }
    }

    /// Primary: goes on reporting (and keeps) the inconsistencies another
    /// copy's scrubs found while it was primary, until a repair or a scrub
    /// clears them.
    fn take_inconsistencies(&mut self, found: Vec<Inconsistency>, fx: &mut Effects) {
        if !self.is_primary() {
            return;
        }
        let mut ops = Vec::new();
        for found in found
            .into_iter()
            .take(cairn_proto::limits::NOTIFY_INCONSISTENT_MAX)
        {
            if valid_name(&found.object) && !self.scrub.inconsistent.contains_key(&found.object) {
                ops.extend(self.scrub.record(found));
            }
        }
        self.keep_scrub_state(ops, fx);
    }

    /// Decides, once every probed OSD answered: incomplete, ask for another
    /// acting set, or activate with the authoritative history.
    fn try_finish_peering(&mut self, fx: &mut Effects) {
        let Phase::Peering {
            waiting, copies, ..
        } = &self.phase
        else {
            return;
        };
        if !waiting.is_empty() {
            return;
        }
        let copies = copies.clone();
        if let Some(reason) = blocked_by(&self.context.past, self.context.history_from, &copies) {
            self.become_incomplete(reason, fx);
            return;
        }
        let auth = choose_auth(&copies);
        let auth_log: Vec<LogEntry> = match auth {
            Some(auth) => copies[&auth].log.clone(),
            None if copies.values().all(|c| c.info.last_update == Version::ZERO) => Vec::new(),
            None => {
                self.become_incomplete("no complete copy answered".into(), fx);
                return;
            }
        };
        // The log, not the reported number, says how far the history goes.
        let auth_last = auth_log.last().map_or(Version::ZERO, |e| e.version);
        let eligible: BTreeSet<OsdId> = copies
            .iter()
            .filter(|(_, c)| log_recoverable(c, &auth_log))
            .map(|(o, _)| *o)
            .collect();
        let size = usize::try_from(self.interval.size).unwrap_or(usize::MAX);
        let want = want_acting(&self.interval.up, &self.interval.acting, size, &eligible);
        let acting = &self.interval.acting;
        let keeps_primary = want.first() == acting.first();
        let within_acting = want.iter().all(|o| acting.contains(o));
        if want.is_empty() {
            self.become_incomplete("no copy can be brought up to date".into(), fx);
            return;
        }
        if !(keeps_primary && within_acting) {
            let temp = (want != self.interval.up).then_some(want);
            self.request_temp(temp, fx);
            self.phase = Phase::WaitingTemp { ticks: 0 };
            return;
        }
        // The same OSDs in another order (a temporary acting set that came
        // after the up set changed): serve now, but ask for the order
        // wanted, or for no temporary set, else the PG stays remapped.
        let reordered = want != *acting && same_members(&want, acting);
        self.activate(&copies, &auth_log, auth_last, &eligible, fx);
        if reordered {
            let temp = (want != self.interval.up).then_some(want);
            self.request_temp(temp, fx);
        }
    }

    fn become_incomplete(&mut self, reason: String, fx: &mut Effects) {
        fx.notes.push(format!("incomplete: {reason}"));
        self.phase = Phase::Incomplete { reason };
    }

    fn request_temp(&mut self, temp: Option<Vec<OsdId>>, fx: &mut Effects) {
        if self.healing.temp_requested.as_ref() == Some(&temp) {
            return;
        }
        self.healing.temp_requested = Some(temp.clone());
        fx.pg_temp = Some(temp);
    }

    /// Adopts the authoritative history, tells every peer to do the same
    /// (or to empty itself for a backfill), and records what each lacks.
    fn activate(
        &mut self,
        copies: &BTreeMap<OsdId, PeerCopy>,
        auth_log: &[LogEntry],
        auth_last: Version,
        eligible: &BTreeSet<OsdId>,
        fx: &mut Effects,
    ) {
        let epoch = self.interval.epoch_started;
        let members = self.members();
        let mut healing = Healing::default();
        for (osd, copy) in copies {
            if !members.contains(osd) && *osd != self.whoami && copy.info.exists {
                healing.strays.insert(*osd);
                if eligible.contains(osd) && copy.info.complete() {
                    let lacks = missing_objects(copy, auth_log);
                    healing.stray_sources.insert(*osd, lacks);
                }
            }
        }
        let empty = PeerCopy::default();
        for osd in &members {
            let copy = copies.get(osd).unwrap_or(&empty);
            let backfill = !eligible.contains(osd);
            let (keep_through, entries, missing) = if backfill {
                healing.backfill_targets.insert(*osd);
                (Version::ZERO, auth_log.to_vec(), BTreeSet::new())
            } else {
                let missing = missing_objects(copy, auth_log);
                for object in &missing {
                    healing
                        .missing
                        .entry(object.clone())
                        .or_default()
                        .insert(*osd);
                }
                healing.sources.insert(*osd);
                let (keep, entries) = log_delta(&copy.log, auth_log);
                (keep, entries, missing)
            };
            let dups = if backfill {
                self.log.dups().copied().collect()
            } else {
                Vec::new()
            };
            let msg = PgMsg::Activate(Activate {
                from: self.whoami,
                interval_epoch: epoch,
                keep_through,
                entries,
                last_update: auth_last,
                committed_to: auth_last,
                missing: missing.into_iter().collect(),
                backfill,
                dups,
            });
            // Sent once this copy's own activation is durable
            // (`on_committed`), not now: a peer stores the interval as its
            // `last_epoch_started`, and if this copy then lost its
            // activation (a crash before the flush, a refused write), the
            // peer would vouch for an interval that never activated. A
            // backfill target, emptied and no longer complete, then keeps
            // every earlier interval it was alone in from being passed
            // over, and the PG stays incomplete for good (simulator seeds
            // 200836, 200963). Ceph orders it alike: a primary's activation
            // rests on its `up_thru`, recorded before its peers activate.
            healing.activations.insert(*osd, msg);
        }
        // This copy adopts the history like any other.
        let own = self.own_copy();
        let own_missing = missing_objects(&own, auth_log);
        for object in &own_missing {
            healing
                .missing
                .entry(object.clone())
                .or_default()
                .insert(self.whoami);
        }
        healing.sources.insert(self.whoami);
        let (keep_through, entries) = log_delta(&own.log, auth_log);
        self.adopt(
            keep_through,
            entries,
            Vec::new(),
            auth_last,
            own_missing,
            false,
            StoreTag::Activation(epoch),
            fx,
        );
        self.committed_to = auth_last;
        self.healing = healing;
        fx.notes.push(format!(
            "activating: {} objects to recover, {} copies to backfill",
            self.healing.missing.len(),
            self.healing.backfill_targets.len()
        ));
        self.phase = Phase::Activating {
            waiting: members,
            local_done: false,
            ticks: 0,
        };
    }

    /// Replaces this copy's log after `keep_through` with `entries`, adds
    /// `dups` to its own (a `backfill` replaces them), records `missing` and
    /// the activation, in transactions of bounded size whose last carries
    /// `tag`.
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        &mut self,
        keep_through: Version,
        entries: Vec<LogEntry>,
        dups: Vec<DupEntry>,
        last_update: Version,
        missing: BTreeSet<Bytes>,
        backfill: bool,
        tag: StoreTag,
        fx: &mut Effects,
    ) {
        let mut ops = Vec::new();
        // Missing objects first: a crash part-way leaves a superset.
        for object in missing.difference(&self.local_missing) {
            ops.push(Op::MetaSet {
                key: missing_key(object),
                value: Bytes::new(),
            });
        }
        let mut log = PgLog::new(self.limits.log_entries_max, self.limits.log_dups_max);
        // Own dups stay, unless this copy is replaced by a backfill, whose
        // dups come from the primary.
        let mut kept_dups = Vec::new();
        for dup in self.log.dups() {
            if backfill {
                ops.push(Op::MetaRemove { key: dup.key() });
            } else {
                kept_dups.push(*dup);
            }
        }
        for dup in &dups {
            ops.push(Op::MetaSet {
                key: dup.key(),
                value: dup.encode(),
            });
        }
        kept_dups.extend(dups);
        log.restore_dups(kept_dups);
        for entry in self.log.iter() {
            if entry.version <= keep_through {
                log.append(entry.clone());
            } else {
                ops.push(Op::MetaRemove {
                    key: entry.version.log_key(),
                });
            }
        }
        for entry in entries {
            if entry.version <= keep_through {
                continue;
            }
            ops.push(Op::MetaSet {
                key: entry.version.log_key(),
                value: entry.encode(),
            });
            let trimmed = log.append(entry);
            for dup in trimmed.to_dups {
                // Stored before this adoption, or set above by it.
                ops.push(Op::MetaRemove {
                    key: dup.version.log_key(),
                });
                if log.dups_max() > 0 {
                    ops.push(Op::MetaSet {
                        key: dup.key(),
                        value: dup.encode(),
                    });
                }
            }
            for version in trimmed.forgotten {
                ops.push(Op::MetaRemove {
                    key: version.dup_key(),
                });
            }
        }
        for object in self.local_missing.difference(&missing) {
            ops.push(Op::MetaRemove {
                key: missing_key(object),
            });
        }
        // Never lowered: a copy restarted with an old map may activate an
        // interval that is long over, and its history must still rank by
        // the newest interval it activated in (`choose_auth`).
        self.info.last_epoch_started = self
            .info
            .last_epoch_started
            .max(self.interval.epoch_started);
        self.info.backfilling = backfill;
        ops.push(Op::MetaSet {
            key: Bytes::from_static(INFO_KEY),
            value: self.info.encode(),
        });
        let chunks: Vec<Vec<Op>> = ops.chunks(ADOPT_TXN_OPS_MAX).map(<[Op]>::to_vec).collect();
        let count = chunks.len();
        for (index, chunk) in chunks.into_iter().enumerate() {
            let mut txn = Transaction::new(self.collection);
            txn.ops = chunk;
            fx.store.push(StoreWrite {
                version: last_update,
                txn,
                tag: if index + 1 == count {
                    tag.clone()
                } else {
                    StoreTag::Part
                },
            });
        }
        self.log = log;
        self.last_update = last_update;
        self.local_missing = missing;
    }

    fn on_activate(&mut self, msg: Activate, fx: &mut Effects) -> Result<(), Ignored> {
        if let Some(why) = bad_history(&msg.entries, &msg.missing) {
            return Err(Ignored::Malformed(format!("activation: {why}")));
        }
        if matches!(self.phase, Phase::Replica { activated: true })
            && msg.interval_epoch == self.interval.epoch_started
            && self.interval.primary == Some(msg.from)
        {
            // A resend: this copy already adopted the history.
            let ack = PgMsg::Activated {
                from: self.whoami,
                interval_epoch: msg.interval_epoch,
            };
            fx.send.push((msg.from, ack));
            return Ok(());
        }
        if self.interval.primary != Some(msg.from)
            || msg.interval_epoch != self.interval.epoch_started
            || self.is_primary()
        {
            return Err(Ignored::Peering {
                what: "activate",
                from: msg.from,
                why: format!(
                    "interval {} (current {}, primary {:?})",
                    msg.interval_epoch, self.interval.epoch_started, self.interval.primary
                ),
            });
        }
        // A backfill: the shell emptied the collection's objects first, and
        // the adoption drops every log entry, dup and missing mark of the
        // old copy (keeping nothing of its log).
        let entries = msg.entries;
        let (keep, dups) = if msg.backfill {
            (Version::ZERO, msg.dups)
        } else {
            (msg.keep_through, Vec::new())
        };
        // The primary had this copy's kept inconsistencies in its answer
        // to the query, and reports them now.
        let handed = self.scrub.forget_all();
        self.keep_scrub_state(handed, fx);
        self.adopt(
            keep,
            entries,
            dups,
            msg.last_update,
            msg.missing.into_iter().collect(),
            msg.backfill,
            StoreTag::Activation(msg.interval_epoch),
            fx,
        );
        self.committed_to = msg.committed_to;
        self.phase = Phase::Replica { activated: true };
        for early in std::mem::take(&mut self.early) {
            let more = self.handle(early.into());
            fx.extend(more);
        }
        Ok(())
    }

    fn park(&mut self, msg: PgMsg) {
        if self.early.len() < EARLY_MSGS_MAX {
            self.early.push(msg);
        }
    }

    fn on_committed(&mut self, tag: StoreTag, fx: &mut Effects) {
        match tag {
            StoreTag::Activation(epoch) if epoch == self.interval.epoch_started => {
                if let Phase::Activating { local_done, .. } = &mut self.phase {
                    if !*local_done {
                        // Only now may the peers record this activation.
                        for (osd, msg) in &self.healing.activations {
                            fx.send.push((*osd, msg.clone()));
                        }
                    }
                    *local_done = true;
                    self.maybe_active(fx);
                } else if let (false, Some(primary)) = (self.is_primary(), self.interval.primary) {
                    let ack = PgMsg::Activated {
                        from: self.whoami,
                        interval_epoch: epoch,
                    };
                    fx.send.push((primary, ack));
                }
            }
            StoreTag::Push(object) => {
                self.local_missing.remove(&object);
                if self.is_primary() {
                    if let Some(osds) = self.healing.missing.get_mut(&object) {
                        osds.remove(&self.whoami);
                        self.healing.recovering.remove(&object);
                        if osds.is_empty() {
                            self.healing.missing.remove(&object);
                            let op = self.scrub.repaired(&object);
                            self.keep_scrub_state(op, fx);
                        }
                    }
                    self.schedule_recovery(fx);
                    self.maybe_clean(fx);
                } else if let Some(primary) = self.pushes_owed.remove(&object) {
                    let ack = PgMsg::PushAck {
                        from: self.whoami,
                        interval_epoch: self.interval.epoch_started,
                        object,
                    };
                    fx.send.push((primary, ack));
                }
            }
            StoreTag::BackfillDone(epoch) if epoch == self.interval.epoch_started => {
                if let Some(primary) = self.interval.primary {
                    let ack = PgMsg::BackfillDoneAck {
                        from: self.whoami,
                        interval_epoch: epoch,
                    };
                    fx.send.push((primary, ack));
                }
            }
            _ => {}
        }
    }

    fn maybe_active(&mut self, fx: &mut Effects) {
        let Phase::Activating {
            waiting,
            local_done,
            ..
        } = &self.phase
        else {
            return;
        };
        if !waiting.is_empty() || !*local_done || self.leases.wait_ms() > 0 {
            return;
        }
        self.phase = Phase::Active;
        self.renew_lease(fx);
        fx.notes.push(format!("active: {}", self.state_name()));
        self.schedule_recovery(fx);
        self.schedule_backfill(fx);
        self.maybe_clean(fx);
    }

    /// Applies a pushed object: the primary's own recovery (a pull it asked
    /// for), or a replica's recovery or backfill from the primary.
    fn on_push(&mut self, push: Push, fx: &mut Effects) -> Result<(), Ignored> {
        let from = push.from;
        let ignore = |why: String| Ignored::Peering {
            what: "push",
            from,
            why,
        };
        if push.interval_epoch != self.interval.epoch_started {
            return Err(ignore(format!("interval {}", push.interval_epoch)));
        }
        if self.is_primary() {
            let wanted = self
                .healing
                .missing
                .get(&push.object)
                .is_some_and(|o| o.contains(&self.whoami));
            if !wanted {
                return Err(ignore("an object this primary does not lack".into()));
            }
        } else {
            if self.interval.primary != Some(from) {
                return Err(ignore("not from the primary".into()));
            }
            if matches!(self.phase, Phase::Replica { activated: false }) {
                self.park(PgMsg::Push(push));
                return Ok(());
            }
            self.pushes_owed.insert(push.object.clone(), from);
        }
        // Writes to an object wait while any copy lacks it, so a logged
        // write after `as_of` means this push was already applied (this is
        // a late or duplicated copy) and that write came after: applying
        // the older state now would undo it.
        let newer = self
            .log
            .iter()
            .rev()
            .take_while(|entry| entry.version > push.as_of)
            .any(|entry| entry.object == push.object && entry.kind != LogKind::Refused);
        if newer {
            if !self.is_primary() {
                self.pushes_owed.remove(&push.object);
            }
            return Err(ignore(format!(
                "stale: a write to the object after {} is logged here",
                push.as_of
            )));
        }
        let txn = push_txn(self.collection, &push)
            .map_err(|e| ignore(format!("bad object state: {e}")))?;
        fx.store.push(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Push(push.object),
        });
        Ok(())
    }

    fn on_push_ack(&mut self, from: OsdId, object: Bytes, fx: &mut Effects) {
        let key = ObjectKey::new(object.clone());
        if self.healing.backfill_targets.contains(&from) {
            if let Some((targets, _)) = self.healing.backfill_in_flight.get_mut(&key) {
                targets.remove(&from);
                if targets.is_empty() {
                    self.healing.backfill_in_flight.remove(&key);
                }
            }
            self.schedule_backfill(fx);
            return;
        }
        if let Some(osds) = self.healing.missing.get_mut(&object) {
            osds.remove(&from);
            if osds.is_empty() {
                self.healing.missing.remove(&object);
                self.healing.recovering.remove(&object);
                let op = self.scrub.repaired(&object);
                self.keep_scrub_state(op, fx);
            }
        }
        self.schedule_recovery(fx);
        self.maybe_clean(fx);
    }

    /// A source could not read its copy of `object`: it counts as lacking
    /// it (an acting copy is then repaired by the recovery that follows),
    /// and the object's recovery starts again from another source.
    fn on_unreadable(&mut self, from: OsdId, object: Bytes, fx: &mut Effects) {
        if let Some(lacks) = self.healing.stray_sources.get_mut(&from) {
            lacks.insert(object.clone());
        } else if self.healing.sources.contains(&from) {
            self.healing
                .missing
                .entry(object.clone())
                .or_default()
                .insert(from);
            let found = Inconsistency {
                object: object.clone(),
                bad: BTreeSet::from([from]),
                auth: None,
                reason: format!("osd.{}: read error while recovering", from.0),
            };
            fx.notes.push(format!(
                "{}: osd.{} cannot read its copy; recovering it too",
                String::from_utf8_lossy(&object),
                from.0
            ));
            let op = self.scrub.record(found);
            self.scrub.repairing.insert(object.clone());
            self.keep_scrub_state(op, fx);
        } else {
            return;
        }
        self.healing.recovering.remove(&object);
        self.schedule_recovery(fx);
    }

    /// Moves `object` to the front of recovery (a client waits for it).
    fn prioritize(&mut self, object: Bytes, fx: &mut Effects) {
        if self.healing.missing.contains_key(&object)
            && !self.healing.recovering.contains_key(&object)
            && !self.healing.priority.contains(&object)
        {
            self.healing.priority.push_front(object);
        }
        self.schedule_recovery(fx);
    }

    /// Starts recovery of lacking objects up to the concurrency bound: a
    /// pull when this primary lacks the object, else a push to the copies
    /// that lack it. Waiting clients' objects go first.
    fn schedule_recovery(&mut self, fx: &mut Effects) {
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        let healing = &mut self.healing;
        // Priority objects may exceed the bound by one: a client waits.
        while let Some(object) = healing.priority.pop_front() {
            if healing.missing.contains_key(&object) && !healing.recovering.contains_key(&object) {
                fx.urgent.insert(object.clone());
                start_recovery(
                    healing,
                    &self.context.up_osds,
                    self.whoami,
                    self.interval.epoch_started,
                    object,
                    fx,
                );
                break;
            }
        }
        while healing.recovering.len() < RECOVERY_OPS_MAX {
            let next = healing
                .missing
                .keys()
                .find(|o| !healing.recovering.contains_key(*o) && !healing.unfound.contains(*o))
                .cloned();
            let Some(object) = next else { break };
            start_recovery(
                healing,
                &self.context.up_osds,
                self.whoami,
                self.interval.epoch_started,
                object,
                fx,
            );
        }
    }

    /// Asks for the next page of objects to backfill, if there are targets,
    /// this copy lacks nothing, and pushes are below their bound.
    fn schedule_backfill(&mut self, fx: &mut Effects) {
        let healing = &mut self.healing;
        if !matches!(self.phase, Phase::Active)
            || healing.backfill_targets.is_empty()
            || !healing.backfill_done_waiting.is_empty()
        {
            return;
        }
        let self_missing = healing.missing.values().any(|o| o.contains(&self.whoami));
        if self_missing {
            return;
        }
        if !healing.scan_done {
            if !healing.scan_pending && healing.backfill_in_flight.len() < BACKFILL_PUSHES_MAX {
                healing.scan_pending = true;
                fx.scan = Some(healing.pushed_through.clone());
            }
            return;
        }
        if healing.backfill_in_flight.is_empty() {
            for target in &healing.backfill_targets {
                healing.backfill_done_waiting.insert(*target);
                let done = PgMsg::BackfillDone {
                    from: self.whoami,
                    interval_epoch: self.interval.epoch_started,
                };
                fx.send.push((*target, done));
            }
        }
    }

    /// Pushes a scanned page's objects. It stops at an object with a write
    /// in flight: the write may not be in the store yet, so a push read now
    /// could miss it, while the write went to the targets as a log entry
    /// only (the scan had not reached the object). The next tick or push
    /// ack scans again from there.
    ///
    /// Objects written log-only beyond the scan that the page does not list
    /// (their write reached the store after the listing) are pushed as the
    /// scan passes them, and all that remain when the last page ends.
    fn on_backfill_page(&mut self, keys: Vec<ObjectKey>, more: bool, fx: &mut Effects) {
        if !self.healing.scan_pending {
            return;
        }
        self.healing.scan_pending = false;
        let targets: Vec<OsdId> = self.healing.backfill_targets.iter().copied().collect();
        let healing = &mut self.healing;
        if let Some(through) = &healing.pushed_through {
            healing.log_only_unlisted.retain(|k| k > through);
        }
        for key in &keys {
            healing.log_only_unlisted.remove(key);
        }
        let page_end = keys.last().cloned();
        let mut keys: BTreeSet<ObjectKey> = keys.into_iter().collect();
        keys.extend(
            healing
                .log_only_unlisted
                .iter()
                .filter(|k| !more || page_end.as_ref().is_some_and(|end| *k < end))
                .cloned(),
        );
        for key in keys {
            if self
                .healing
                .pushed_through
                .as_ref()
                .is_some_and(|p| key <= *p)
            {
                continue;
            }
            if self.object_in_flight(&key.name) {
                return;
            }
            let healing = &mut self.healing;
            healing.log_only_unlisted.remove(&key);
            healing.pushed_through = Some(key.clone());
            let waiting: BTreeSet<OsdId> = targets.iter().copied().collect();
            healing.backfill_in_flight.insert(key.clone(), (waiting, 0));
            fx.pushes.push((key.name, targets.clone()));
        }
        if !more {
            self.healing.scan_done = true;
        }
        self.schedule_backfill(fx);
    }

    /// Every backfill target is complete: ask for the acting set placement
    /// wants, if the temporary one differs.
    fn after_backfill(&mut self, fx: &mut Effects) {
        fx.notes.push("backfill complete".into());
        let size = usize::try_from(self.interval.size).unwrap_or(usize::MAX);
        let want = want_acting(
            &self.interval.up,
            &self.interval.acting,
            size,
            &self.healing.sources,
        );
        if want != self.interval.acting {
            let temp = (want != self.interval.up).then_some(want);
            self.request_temp(temp, fx);
        }
        self.maybe_clean(fx);
    }

    /// Once nothing is missing, backfilled or remapped, removes the strays.
    fn maybe_clean(&mut self, fx: &mut Effects) {
        if !self.is_clean() {
            return;
        }
        self.healing.stray_sources.clear();
        for stray in std::mem::take(&mut self.healing.strays) {
            let purge = PgMsg::Purge {
                from: self.whoami,
                interval_epoch: self.interval.epoch_started,
            };
            fx.send.push((stray, purge));
        }
    }

    fn is_clean(&self) -> bool {
        matches!(self.phase, Phase::Active)
            && self.healing.missing.is_empty()
            && self.healing.backfill_targets.is_empty()
            && self.interval.acting == self.interval.up
            && self.interval.acting.len() >= usize::try_from(self.interval.size).unwrap_or(0)
    }

    fn on_tick(&mut self, fx: &mut Effects) {
        let query = self.query();
        match &mut self.phase {
            Phase::Peering { waiting, ticks, .. } => {
                *ticks += 1;
                if *ticks % RESEND_TICKS == 0 {
                    for osd in waiting.iter() {
                        fx.send.push((*osd, query.clone()));
                    }
                }
            }
            Phase::Activating {
                ticks, local_done, ..
            } => {
                *ticks += 1;
                if *local_done && *ticks % RESEND_TICKS == 0 {
                    for (osd, msg) in &self.healing.activations {
                        fx.send.push((*osd, msg.clone()));
                    }
                }
                // A previous primary's read lease may have run out.
                self.maybe_active(fx);
            }
            Phase::WaitingTemp { ticks } => {
                *ticks += 1;
                if *ticks % PG_TEMP_RESEND_TICKS == 0
                    && let Some(temp) = self.healing.temp_requested.clone()
                {
                    fx.pg_temp = Some(temp);
                }
            }
            Phase::Active => {
                fx.send.extend(self.resend_sub_writes());
                let healing = &mut self.healing;
                let mut stalled = Vec::new();
                for (object, ticks) in &mut healing.recovering {
                    *ticks += 1;
                    if *ticks >= STALLED_TICKS {
                        stalled.push(object.clone());
                    }
                }
                for object in stalled {
                    healing.recovering.remove(&object);
                }
                // Unfound objects are looked for again now and then.
                healing.unfound.clear();
                let mut repush = Vec::new();
                for (key, (targets, ticks)) in &mut healing.backfill_in_flight {
                    *ticks += 1;
                    if *ticks >= STALLED_TICKS {
                        *ticks = 0;
                        repush.push((key.name.clone(), targets.iter().copied().collect()));
                    }
                }
                fx.pushes.extend(repush);
                for target in &healing.backfill_done_waiting {
                    let done = PgMsg::BackfillDone {
                        from: self.whoami,
                        interval_epoch: self.interval.epoch_started,
                    };
                    fx.send.push((*target, done));
                }
                if let Some(temp) = healing.temp_requested.clone()
                    && temp.as_ref() != Some(&self.interval.acting)
                {
                    fx.pg_temp = Some(temp);
                }
                self.schedule_recovery(fx);
                self.schedule_backfill(fx);
                self.scrub_tick(fx);
                self.renew_lease(fx);
            }
            Phase::Replica { activated: false } => {
                // A stray's announcement may have come while the primary
                // could not take it (peering, waiting for a temporary
                // acting set) or been lost: announce again, or the copy is
                // never purged.
                let member = self.interval.acting.contains(&self.whoami)
                    || self.interval.up.contains(&self.whoami);
                self.healing.stray_ticks += 1;
                if let (false, Some(primary)) = (member, self.interval.primary)
                    && self.healing.stray_ticks.is_multiple_of(STRAY_NOTIFY_TICKS)
                {
                    let notify = self.notify(self.interval.epoch_started);
                    fx.send.push((primary, notify));
                }
            }
            Phase::Replica { activated: true } | Phase::Incomplete { .. } => {}
        }
    }

    /// The first epoch of the interval in which this copy, as primary, is
    /// clean (`None` unless a clean primary): every copy of that interval
    /// holds every write, so the monitor keeps the map history from there
    /// on for the PG's peering (Ceph's `last_epoch_clean`).
    #[must_use]
    pub fn clean_since(&self) -> Option<Epoch> {
        (self.is_primary() && self.is_clean()).then_some(self.interval.epoch_started)
    }

    /// The PG's state as Ceph names them, `+`-joined (primary's view).
    #[must_use]
    pub fn state_name(&self) -> String {
        let size = usize::try_from(self.interval.size).unwrap_or(usize::MAX);
        let mut parts: Vec<&str> = Vec::new();
        match &self.phase {
            Phase::Replica { .. } => return "replica".into(),
            Phase::Peering { .. } | Phase::WaitingTemp { .. } => return "peering".into(),
            Phase::Incomplete { .. } => return "incomplete".into(),
            Phase::Activating { .. } => return "activating".into(),
            Phase::Active => {}
        }
        let healing = &self.healing;
        if self.complete_acting_count() < self.interval.min_size {
            parts.push("inactive");
        } else {
            parts.push("active");
        }
        let undersized = self.interval.acting.len() < size;
        let degraded =
            undersized || !healing.missing.is_empty() || !healing.backfill_targets.is_empty();
        let remapped = self.interval.acting != self.interval.up;
        if undersized {
            parts.push("undersized");
        }
        if degraded {
            parts.push("degraded");
        }
        if remapped {
            parts.push("remapped");
        }
        if !healing.missing.is_empty() {
            parts.push(if healing.recovering.is_empty() {
                "recovery_wait"
            } else {
                "recovering"
            });
        }
        if !healing.backfill_targets.is_empty() {
            parts.push("backfilling");
        }
        if !healing.unfound.is_empty() {
            parts.push("unfound");
        }
        if !degraded && !remapped {
            parts.push("clean");
        }
        if let Some(run) = &self.scrub.run {
            parts.push("scrubbing");
            if run.deep {
                parts.push("deep");
            }
        }
        if self.scrub.inconsistent_count() > 0 {
            parts.push("inconsistent");
        }
        if !self.scrub.repairing.is_empty() {
            parts.push("repair");
        }
        parts.join("+")
    }

    /// Why the PG is not serving, if it is not.
    #[must_use]
    pub fn blocked_reason(&self) -> Option<String> {
        match &self.phase {
            Phase::Incomplete { reason } => Some(reason.clone()),
            Phase::Peering { waiting, .. } => Some(format!(
                "waiting for {} peer(s): {:?}",
                waiting.len(),
                waiting.iter().map(|o| o.0).collect::<Vec<_>>()
            )),
            Phase::WaitingTemp { .. } => Some("waiting for a temporary acting set".into()),
            Phase::Activating { waiting, .. } if !waiting.is_empty() => {
                Some(format!("waiting for {} peer(s) to activate", waiting.len()))
            }
            Phase::Activating { .. } if self.leases.wait_ms() > 0 => Some(format!(
                "waiting {} ms for a previous primary's read lease to run out",
                self.leases.wait_ms()
            )),
            Phase::Activating { .. } => Some("activating".into()),
            Phase::Replica { .. } | Phase::Active => None,
        }
    }

    /// Objects some copy still lacks (primary), and copies being backfilled.
    #[must_use]
    pub fn healing_counts(&self) -> (usize, usize) {
        (
            self.healing.missing.len(),
            self.healing.backfill_targets.len(),
        )
    }

    /// Marks this copy as being backfilled, for the activation of the
    /// interval starting at `interval_epoch` from `from`, before the shell
    /// empties it: the returned write must be durable before the first
    /// object goes, so a copy emptied part way (a crash, or a new interval
    /// before this core takes the activation) never passes for a complete
    /// one. `None` if that activation does not stand.
    pub fn mark_backfilling(&mut self, from: OsdId, interval_epoch: Epoch) -> Option<StoreWrite> {
        if self.interval.primary != Some(from)
            || self.interval.epoch_started != interval_epoch
            || self.is_primary()
        {
            return None;
        }
        self.info.backfilling = true;
        let mut txn = Transaction::new(self.collection);
        txn.push(Op::MetaSet {
            key: Bytes::from_static(INFO_KEY),
            value: self.info.encode(),
        });
        Some(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        })
    }

    /// Whether this copy answers a pull from `from` of the interval that
    /// began at `interval_epoch`: only the primary of the copy's own
    /// interval may pull. A copy whose map has moved on (a split since,
    /// say) holds other objects than the puller expects, and its answer
    /// "no such object" would erase the puller's copy of a live object.
    #[must_use]
    pub fn answers_pull(&self, from: OsdId, interval_epoch: Epoch) -> bool {
        self.interval.primary == Some(from) && self.interval.epoch_started == interval_epoch
    }

    /// Whether a removal this copy asked for in the interval starting at
    /// `epoch` may still run: the copy is in that interval and a stray.
    #[must_use]
    pub fn purge_stands(&self, epoch: Epoch) -> bool {
        let member =
            self.interval.acting.contains(&self.whoami) || self.interval.up.contains(&self.whoami);
        self.interval.epoch_started == epoch && !member
    }

    /// The PG is being split (its pool's `pg_num` grew), so this core is
    /// retired: the writes it has in flight are answered with a retry (the
    /// clients resend them to the PG their object now belongs to).
    pub fn retire(&mut self, epoch: Epoch) -> Vec<(ReqId, Reply)> {
        let reason = RetryReason::IntervalChanged { epoch };
        std::mem::take(&mut self.inflight)
            .into_values()
            .map(|flight| (flight.req, Reply::Retry { reason }))
            .collect()
    }

    /// Whether this OSD serves client ops for the PG now.
    #[must_use]
    pub fn is_active_primary(&self) -> bool {
        self.is_primary() && matches!(self.phase, Phase::Active)
    }

    /// Whether this copy lacks `object` (a read must wait for recovery).
    #[must_use]
    pub fn lacks(&self, object: &[u8]) -> bool {
        self.local_missing.contains(object)
    }

    /// This copy's peering facts.
    #[must_use]
    pub fn info(&self) -> PgInfo {
        PgInfo {
            last_update: self.last_update,
            ..self.info.clone()
        }
    }

    #[must_use]
    pub fn pg(&self) -> PgId {
        self.pg
    }

    #[must_use]
    pub fn whoami(&self) -> OsdId {
        self.whoami
    }

    #[must_use]
    pub fn interval(&self) -> &Interval {
        &self.interval
    }

    #[must_use]
    pub fn last_update(&self) -> Version {
        self.last_update
    }

    #[must_use]
    pub fn last_complete(&self) -> Version {
        self.last_complete
    }

    /// Every version up to this one is known durable on its acting set.
    #[must_use]
    pub fn committed_to(&self) -> Version {
        self.committed_to
    }

    #[must_use]
    pub fn log(&self) -> &PgLog {
        &self.log
    }

    #[must_use]
    pub fn inflight_count(&self) -> usize {
        self.inflight.len()
    }

    /// Whether a write to `object` is in flight on this primary (admitted,
    /// not yet durable on the whole acting set). A read must not see it
    /// yet: the write may still fail, and a read that returned it would
    /// have observed a value that never existed.
    #[must_use]
    pub fn object_in_flight(&self, object: &[u8]) -> bool {
        self.inflight.keys().any(|version| {
            self.log
                .get(*version)
                .is_some_and(|entry| entry.object == object && entry.kind != LogKind::Refused)
        })
    }
}

/// Scrub (see [`crate::scrub`]): the primary's chunk-by-chunk comparison
/// of its copies, and repair through recovery.
impl Pg {
    /// The shell's clock, in milliseconds, set before each event.
    pub fn set_clock(&mut self, now_ms: u64) {
        self.leases.set_clock(now_ms);
    }

    /// Whether this OSD may serve reads of the PG at `now_ms` (the clock
    /// of [`Pg::set_clock`]): the active primary holding a read lease from
    /// every other acting copy. The time is the caller's, not the last
    /// event's: a primary cut off from its replicas hears little, and its
    /// lease must end on time all the same.
    #[must_use]
    pub fn may_serve_reads(&self, now_ms: u64) -> bool {
        self.is_active_primary()
            && self.complete_acting_count() >= self.interval.min_size
            && self.leases.readable(
                now_ms,
                self.interval
                    .acting
                    .iter()
                    .copied()
                    .filter(|o| *o != self.whoami),
            )
    }

    /// Primary: renews the read lease with every other acting copy.
    fn renew_lease(&mut self, fx: &mut Effects) {
        let Some(seq) = self.leases.renew() else {
            return;
        };
        for osd in &self.interval.acting {
            if *osd != self.whoami {
                let renew = PgMsg::LeaseRenew {
                    from: self.whoami,
                    interval_epoch: self.interval.epoch_started,
                    seq,
                };
                fx.send.push((*osd, renew));
            }
        }
    }

    /// Why a scrub cannot start now, if it cannot.
    #[must_use]
    pub fn scrub_refusal(&self) -> Option<String> {
        if !self.is_primary() {
            return Some(format!("osd.{} is not the PG's primary", self.whoami.0));
        }
        if self.scrub.run.is_some() {
            return Some("a scrub is already under way".into());
        }
        if !self.is_clean() {
            return Some(format!(
                "the PG is {}: it scrubs once active+clean",
                self.state_name()
            ));
        }
        None
    }

    /// Whether some object has fewer good copies than the pool's size
    /// (its recovery goes before merely misplaced data).
    #[must_use]
    pub fn is_degraded(&self) -> bool {
        !self.healing.missing.is_empty() || self.complete_acting_count() < self.interval.size
    }

    /// Whether a copy other than this one can serve as a recovery source.
    #[must_use]
    pub fn has_other_source(&self) -> bool {
        self.healing.sources.iter().any(|o| *o != self.whoami)
    }

    /// How far the backfill scan got, in thousandths of the hash space.
    #[must_use]
    pub fn backfill_permille(&self) -> Option<u32> {
        if self.healing.backfill_targets.is_empty() {
            return None;
        }
        if self.healing.scan_done {
            return Some(1000);
        }
        let hash = self.healing.pushed_through.as_ref().map_or(0, |k| k.hash);
        u32::try_from(u64::from(hash) * 1000 / u64::from(u32::MAX)).ok()
    }

    /// When this copy was last scrubbed (light, deep).
    #[must_use]
    pub fn scrub_stamps(&self) -> ScrubStamps {
        self.scrub.stamps
    }

    /// The scrub under way: `Some(deep)`.
    #[must_use]
    pub fn scrubbing(&self) -> Option<bool> {
        self.scrub.run.as_ref().map(|run| run.deep)
    }

    /// Objects the last scrubs found inconsistent and not yet repaired
    /// (the count, and the first ones kept).
    #[must_use]
    pub fn inconsistent(&self) -> (u64, Vec<&Inconsistency>) {
        (
            self.scrub.inconsistent_count(),
            self.scrub.inconsistent.values().collect(),
        )
    }

    fn start_scrub(
        &mut self,
        deep: bool,
        repair: bool,
        now_secs: u64,
        fx: &mut Effects,
    ) -> Result<(), Ignored> {
        if let Some(why) = self.scrub_refusal() {
            return Err(Ignored::Scrub(why));
        }
        self.scrub.next_chunk += 1;
        self.scrub.run = Some(ScrubRun {
            deep,
            repair,
            started_secs: now_secs,
            cursor: None,
            chunk: self.scrub.next_chunk,
            stage: Stage::Listing,
            objects: 0,
            errors: 0,
        });
        fx.notes.push(format!(
            "{} scrub starts{}",
            if deep { "deep" } else { "light" },
            if repair { " (repairing)" } else { "" }
        ));
        fx.scrub_list = Some(None);
        Ok(())
    }

    /// The primary's own listing chose the next chunk: up to the last key
    /// listed, or to the end if the collection holds no more.
    fn on_scrub_page(&mut self, keys: Vec<ObjectKey>, more: bool, fx: &mut Effects) {
        let Some(run) = &mut self.scrub.run else {
            return;
        };
        if !matches!(run.stage, Stage::Listing) {
            return;
        }
        let through = if more { keys.last().cloned() } else { None };
        run.stage = Stage::Draining { through };
        self.scrub_progress(fx);
    }

    /// Asks every acting copy for its map of the chunk once no write to the
    /// chunk is in flight (new ones wait meanwhile).
    fn scrub_progress(&mut self, fx: &mut Effects) {
        let Some(run) = &self.scrub.run else {
            return;
        };
        let Stage::Draining { through } = &run.stage else {
            return;
        };
        let busy = self.inflight.keys().any(|version| {
            self.log
                .get(*version)
                .is_some_and(|entry| run.blocks(&ObjectKey::new(entry.object.clone())))
        });
        if busy {
            return;
        }
        let through = through.clone();
        let waiting: BTreeSet<OsdId> = self.interval.acting.iter().copied().collect();
        self.ask_scrub_maps(&waiting, fx);
        if let Some(run) = &mut self.scrub.run {
            run.stage = Stage::Collecting {
                through,
                waiting,
                maps: BTreeMap::new(),
                ticks: 0,
            };
        }
    }

    fn ask_scrub_maps(&self, osds: &BTreeSet<OsdId>, fx: &mut Effects) {
        let Some(run) = &self.scrub.run else {
            return;
        };
        for osd in osds {
            let Some(order) = run.order(*osd, self.interval.epoch_started) else {
                return;
            };
            if *osd == self.whoami {
                fx.scrub_maps.push(order);
            } else {
                fx.send.push((*osd, scrub::request(self.whoami, &order)));
            }
        }
    }

    fn on_scrub_map(&mut self, map: ScrubMap, fx: &mut Effects) -> Result<(), Ignored> {
        let from = map.from;
        let ignore = |why: &str| Ignored::Peering {
            what: "scrub map",
            from,
            why: why.into(),
        };
        if map.interval_epoch != self.interval.epoch_started {
            return Err(ignore("of another interval"));
        }
        let Some(mut run) = self.scrub.run.take() else {
            return Err(ignore("no scrub under way"));
        };
        let chunk = run.chunk;
        let complete = match &mut run.stage {
            Stage::Collecting { waiting, maps, .. }
                if map.chunk == chunk && waiting.contains(&from) =>
            {
                waiting.remove(&from);
                maps.insert(from, map);
                waiting.is_empty()
            }
            _ => {
                self.scrub.run = Some(run);
                return Err(ignore("not asked for"));
            }
        };
        if !complete {
            self.scrub.run = Some(run);
            return Ok(());
        }
        let Stage::Collecting { through, maps, .. } =
            std::mem::replace(&mut run.stage, Stage::Listing)
        else {
            unreachable!("matched above");
        };
        run.objects += maps.get(&self.whoami).map_or(0, |m| m.entries.len() as u64);
        for truncated in maps.values().filter(|m| m.truncated) {
            fx.notes.push(format!(
                "scrub: osd.{} holds more objects in a chunk than it could report",
                truncated.from.0
            ));
        }
        let found = scrub::compare(&maps, self.whoami);
        run.errors += found.len() as u64;
        // A deep scrub (which checks all a light one does) clears the kept
        // inconsistencies of its chunk that it no longer finds.
        if run.deep {
            let in_chunk = |key: &ObjectKey| {
                run.cursor.as_ref().is_none_or(|c| key > c)
                    && through.as_ref().is_none_or(|t| key <= t)
            };
            let resolved: Vec<Bytes> = self
                .scrub
                .inconsistent
                .keys()
                .filter(|o| in_chunk(&ObjectKey::new((*o).clone())))
                .filter(|o| !found.iter().any(|f| f.object == **o))
                .cloned()
                .collect();
            let ops: Vec<Op> = resolved
                .iter()
                .filter_map(|o| self.scrub.forget(o))
                .collect();
            self.keep_scrub_state(ops, fx);
        }
        let mut repairs = false;
        for inconsistency in found {
            fx.notes.push(format!(
                "scrub: {} is inconsistent: {}",
                String::from_utf8_lossy(&inconsistency.object),
                inconsistency.reason
            ));
            if run.repair && inconsistency.auth.is_some() {
                self.repair_object(&inconsistency);
                repairs = true;
            }
            let op = self.scrub.record(inconsistency);
            self.keep_scrub_state(op, fx);
        }
        match through {
            Some(last) => {
                run.cursor = Some(last);
                self.scrub.next_chunk += 1;
                run.chunk = self.scrub.next_chunk;
                fx.scrub_list = Some(run.cursor.clone());
                self.scrub.run = Some(run);
            }
            None => self.finish_scrub(&run, fx),
        }
        if repairs {
            self.schedule_recovery(fx);
        }
        Ok(())
    }

    fn finish_scrub(&mut self, run: &ScrubRun, fx: &mut Effects) {
        self.scrub.stamps.light_secs = run.started_secs;
        if run.deep {
            self.scrub.stamps.deep_secs = run.started_secs;
        }
        let txn = Transaction::new(self.collection).with(Op::MetaSet {
            key: Bytes::from_static(scrub::STAMPS_KEY),
            value: self.scrub.stamps.encode(),
        });
        fx.store.push(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        });
        fx.notes.push(format!(
            "{} scrub done: {} objects, {} inconsistent",
            if run.deep { "deep" } else { "light" },
            run.objects,
            run.errors
        ));
    }

    /// Stores a change to the kept inconsistencies (in this copy's
    /// collection, beside its scrub stamps).
    fn keep_scrub_state(&self, ops: impl IntoIterator<Item = Op>, fx: &mut Effects) {
        let mut txn = Transaction::new(self.collection);
        txn.ops.extend(ops);
        if txn.ops.is_empty() {
            return;
        }
        fx.store.push(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        });
    }

    /// Hands an inconsistent object to recovery: the bad copies lack it.
    fn repair_object(&mut self, inconsistency: &Inconsistency) {
        let object = inconsistency.object.clone();
        self.healing
            .missing
            .entry(object.clone())
            .or_default()
            .extend(inconsistency.bad.iter().copied());
        if inconsistency.bad.contains(&self.whoami) {
            self.local_missing.insert(object.clone());
        }
        self.scrub.repairing.insert(object);
    }

    /// A read found this primary's copy of `object` unreadable: recover it
    /// from another copy (the client retries meanwhile).
    fn on_read_error(&mut self, object: Bytes, error: String, fx: &mut Effects) {
        if !self.is_active_primary() {
            return;
        }
        let lacking = self.healing.missing.get(&object);
        if lacking.is_none_or(|osds| !osds.contains(&self.whoami)) {
            let source = self.healing.sources.iter().find(|o| **o != self.whoami);
            let other_source = source.is_some();
            let inconsistency = Inconsistency {
                object: object.clone(),
                bad: BTreeSet::from([self.whoami]),
                auth: source.copied(),
                reason: format!("osd.{}: read error: {error}", self.whoami.0),
            };
            fx.notes.push(format!(
                "read of {} failed: {}{}",
                String::from_utf8_lossy(&object),
                inconsistency.reason,
                if other_source {
                    "; recovering it from another copy"
                } else {
                    "; no other copy to recover from"
                }
            ));
            if other_source {
                self.repair_object(&inconsistency);
            }
            let op = self.scrub.record(inconsistency);
            self.keep_scrub_state(op, fx);
        }
        self.prioritize(object, fx);
    }

    /// Resends scrub requests that got no answer.
    fn scrub_tick(&mut self, fx: &mut Effects) {
        let resend = match self.scrub.run.as_mut().map(|run| &mut run.stage) {
            Some(Stage::Collecting { waiting, ticks, .. }) => {
                *ticks += 1;
                (*ticks % STALLED_TICKS == 0).then(|| waiting.clone())
            }
            Some(Stage::Draining { .. }) => {
                self.scrub_progress(fx);
                None
            }
            Some(Stage::Listing) | None => None,
        };
        if let Some(osds) = resend {
            self.ask_scrub_maps(&osds, fx);
        }
    }
}

/// Whether an object name can reach the store (its key encoding assumes
/// the store's name bound).
#[must_use]
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= cairn_proto::limits::OBJECT_NAME_BYTES_MAX
}

/// What is wrong with a history from a peer, if anything: entries must go
/// up strictly, below the last possible sequence, and name valid objects.
fn bad_history(entries: &[LogEntry], missing: &[Bytes]) -> Option<String> {
    if let Some(pair) = entries.windows(2).find(|w| w[0].version >= w[1].version) {
        return Some(format!(
            "entry {} after {}",
            pair[1].version, pair[0].version
        ));
    }
    if entries.last().is_some_and(|e| e.version.seq == u64::MAX) {
        return Some("sequence exhausted".into());
    }
    let names = entries.iter().map(|e| &e.object).chain(missing.iter());
    names
        .into_iter()
        .find(|name| !valid_name(name))
        .map(|name| format!("object name of {} bytes", name.len()))
}

/// Issues the recovery of one object: a pull from a source if this primary
/// lacks it, else a push to the copies that lack it; an object no source
/// holds is marked unfound.
fn start_recovery(
    healing: &mut Healing,
    up_osds: &BTreeSet<OsdId>,
    whoami: OsdId,
    interval_epoch: Epoch,
    object: Bytes,
    fx: &mut Effects,
) {
    let lacking = healing.missing.get(&object).cloned().unwrap_or_default();
    if lacking.contains(&whoami) {
        let source = healing
            .sources
            .iter()
            .find(|o| !lacking.contains(o) && **o != whoami)
            .copied()
            .or_else(|| {
                healing
                    .stray_sources
                    .iter()
                    .find(|(osd, lacks)| up_osds.contains(osd) && !lacks.contains(&object))
                    .map(|(osd, _)| *osd)
            });
        let Some(source) = source else {
            healing.unfound.insert(object);
            return;
        };
        let pull = PgMsg::Pull {
            from: whoami,
            interval_epoch,
            object: object.clone(),
        };
        fx.send.push((source, pull));
    } else {
        fx.pushes
            .push((object.clone(), lacking.into_iter().collect()));
    }
    healing.recovering.insert(object, 0);
}

/// Whether two OSD lists hold the same OSDs, in any order.
fn same_members(a: &[OsdId], b: &[OsdId]) -> bool {
    a.len() == b.len() && a.iter().all(|o| b.contains(o))
}

/// What a copy with `log` keeps and receives to match `auth_log`: it keeps
/// its entries up to the newest version both logs hold, and takes the
/// authoritative entries after it.
fn log_delta(log: &[LogEntry], auth_log: &[LogEntry]) -> (Version, Vec<LogEntry>) {
    let auth_versions: BTreeSet<Version> = auth_log.iter().map(|e| e.version).collect();
    let common = log
        .iter()
        .rev()
        .map(|e| e.version)
        .find(|v| auth_versions.contains(v))
        .unwrap_or(Version::ZERO);
    let entries = auth_log
        .iter()
        .filter(|e| e.version > common)
        .cloned()
        .collect();
    (common, entries)
}

/// The transaction that makes an object exactly what a push carries,
/// whatever this copy holds of it (touch then remove is valid either way,
/// so a duplicate or reordered push never fails in the store).
///
/// # Errors
/// The pushed state does not make a valid transaction.
pub fn push_txn(collection: CollectionId, push: &Push) -> Result<Transaction, StoreError> {
    let key = ObjectKey::new(push.object.clone());
    let mut txn = Transaction::new(collection);
    txn.push(Op::Touch {
        object: key.clone(),
    });
    txn.push(Op::Remove {
        object: key.clone(),
    });
    if let Some(state) = &push.state {
        txn.push(Op::Touch {
            object: key.clone(),
        });
        if !state.data.is_empty() {
            txn.push(Op::WriteFull {
                object: key.clone(),
                data: state.data.clone().into(),
            });
        }
        if !state.xattrs.is_empty() {
            txn.push(Op::SetXattrs {
                object: key.clone(),
                xattrs: state.xattrs.clone(),
            });
        }
        if !state.omap.is_empty() {
            txn.push(Op::OmapSet {
                object: key.clone(),
                entries: state.omap.clone(),
            });
        }
        txn.push(Op::SetVersion {
            object: key,
            version: state.version,
        });
    }
    txn.push(Op::MetaRemove {
        key: missing_key(&push.object),
    });
    txn.validate()?;
    Ok(txn)
}

/// Checks that every op changes `object` (clients write one object per
/// request, and may not touch the PG's metadata keys) and says whether the
/// request ends by removing it.
fn check_ops(object: &Bytes, ops: &[Op]) -> Result<LogKind, InvalidWrite> {
    if ops.is_empty() {
        return Err(InvalidWrite::Store(StoreError::Invalid(
            "no operations".into(),
        )));
    }
    let key = ObjectKey::new(object.clone());
    let mut kind = LogKind::Write;
    for (index, op) in ops.iter().enumerate() {
        match op {
            Op::Clone { .. } => return Err(InvalidWrite::NotObjectOp(index)),
            _ => match op.object() {
                None => return Err(InvalidWrite::NotObjectOp(index)),
                Some(target) if *target != key => return Err(InvalidWrite::OtherObject(index)),
                Some(_) => {}
            },
        }
        kind = if matches!(op, Op::Remove { .. }) {
            LogKind::Remove
        } else {
            LogKind::Write
        };
    }
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &'static [u8]) -> ObjectKey {
        ObjectKey::new(Bytes::from_static(name))
    }

    #[test]
    fn interval_validation_catches_inconsistent_maps() {
        let mut interval = Interval {
            epoch_started: Epoch(1),
            up: vec![OsdId(1), OsdId(2)],
            acting: vec![OsdId(1), OsdId(2)],
            primary: Some(OsdId(1)),
            min_size: 1,
            size: 2,
        };
        assert_eq!(interval.validate(), Ok(()));
        interval.primary = Some(OsdId(3));
        assert_eq!(
            interval.validate(),
            Err(IntervalError::PrimaryNotActing(OsdId(3)))
        );
        interval.acting.push(OsdId(2));
        assert_eq!(
            interval.validate(),
            Err(IntervalError::DuplicateOsd(OsdId(2)))
        );
    }

    #[test]
    fn client_ops_must_touch_only_their_object() {
        let name = Bytes::from_static(b"a");
        let touch = |k| Op::Touch { object: k };
        assert_eq!(check_ops(&name, &[touch(key(b"a"))]), Ok(LogKind::Write));
        let remove = Op::Remove { object: key(b"a") };
        assert_eq!(
            check_ops(&name, &[touch(key(b"a")), remove]),
            Ok(LogKind::Remove)
        );
        assert_eq!(
            check_ops(&name, &[touch(key(b"b"))]),
            Err(InvalidWrite::OtherObject(0))
        );
        let meta = Op::MetaSet {
            key: Bytes::from_static(b"pglog/forged"),
            value: Bytes::new(),
        };
        assert_eq!(check_ops(&name, &[meta]), Err(InvalidWrite::NotObjectOp(0)));
        assert!(check_ops(&name, &[]).is_err());
    }

    #[test]
    fn stale_or_bad_interval_change_is_ignored() {
        let interval = Interval {
            epoch_started: Epoch(4),
            up: vec![OsdId(1)],
            acting: vec![OsdId(1)],
            primary: Some(OsdId(1)),
            min_size: 1,
            size: 1,
        };
        let pg = PgId::new(cairn_types::PoolId(1), 0);
        let mut pg = Pg::new(pg, OsdId(1), interval.clone(), PgLimits::default()).expect("valid");
        let fx = pg.handle(PgEvent::IntervalChange(interval.clone()));
        assert!(matches!(fx.log[..], [Ignored::StaleInterval { .. }]));
        let bad = Interval {
            epoch_started: Epoch(5),
            min_size: 0,
            ..interval
        };
        let fx = pg.handle(PgEvent::IntervalChange(bad));
        assert_eq!(
            fx.log,
            vec![Ignored::BadInterval(IntervalError::MinSizeZero)]
        );
        assert_eq!(pg.interval().epoch_started, Epoch(4));
    }

    #[test]
    fn a_peer_history_that_could_harm_the_store_is_ignored() {
        let interval = Interval {
            epoch_started: Epoch(4),
            up: vec![OsdId(1), OsdId(2)],
            acting: vec![OsdId(1), OsdId(2)],
            primary: Some(OsdId(1)),
            min_size: 1,
            size: 2,
        };
        let pg = PgId::new(cairn_types::PoolId(1), 0);
        let mut replica = Pg::new(pg, OsdId(2), interval, PgLimits::default()).expect("valid");
        let entry = |seq: u64, name: Vec<u8>| LogEntry {
            version: Version::new(4, seq),
            object: Bytes::from(name),
            kind: LogKind::Write,
            req: ReqId {
                client: 1,
                tid: seq,
            },
            result: LogResult::Ok {
                object_version: seq,
            },
        };
        let activate = |entries, missing| {
            PgEvent::Peer(PgMsg::Activate(Activate {
                from: OsdId(1),
                interval_epoch: Epoch(4),
                keep_through: Version::ZERO,
                entries,
                last_update: Version::new(4, 2),
                committed_to: Version::new(4, 2),
                missing,
                backfill: false,
                dups: Vec::new(),
            }))
        };
        let huge = vec![b'x'; cairn_proto::limits::OBJECT_NAME_BYTES_MAX + 1];
        let cases = [
            activate(
                vec![entry(1, b"a".to_vec()), entry(2, huge.clone())],
                vec![],
            ),
            activate(vec![entry(1, b"a".to_vec())], vec![Bytes::from(huge)]),
            activate(
                vec![entry(2, b"a".to_vec()), entry(1, b"b".to_vec())],
                vec![],
            ),
            activate(vec![entry(u64::MAX, b"a".to_vec())], vec![]),
        ];
        for case in cases {
            let fx = replica.handle(case);
            assert!(fx.store.is_empty(), "nothing reaches the store");
            assert!(
                matches!(fx.log[..], [Ignored::Malformed(_)]),
                "{:?}",
                fx.log
            );
        }
    }
}

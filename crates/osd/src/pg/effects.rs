//! What the PG asks of its shell after an event: [`Effects`] (store
//! transactions, messages, replies and background work), and the replies
//! and refusals they carry.

use super::events::{IntervalError, ReadId};
use super::messages::PgMsg;
use crate::log::{LogResult, ReqId, Version};
use crate::scrub::{ParityCheck, ScrubOrder};
use crate::throttle::Priority;
use bytes::Bytes;
use cairn_store::{ObjectKey, StoreError, Transaction};
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};

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
    /// The pool's kind does not serve these ops.
    #[error("{0}")]
    NotSupported(String),
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

/// The answer to a client read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadAnswer {
    /// Answer with what the store read gave (data, "not found", a failed
    /// guard, a store error).
    Deliver,
    /// `ObjectBusy`: the client retries. The object is being recovered
    /// (or repaired after a corrupt read), a write to it stayed in flight
    /// too long, or what was read no longer stands (a write or a new
    /// interval overtook the read).
    Busy,
    /// The object's only copy is corrupt: nothing to wait for.
    Corrupt(String),
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

/// A transaction to submit; report [`PgEvent::LocalCommitted`](super::PgEvent::LocalCommitted) with
/// `version` once it is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreWrite {
    pub version: Version,
    pub txn: Transaction,
    pub tag: StoreTag,
}

/// One thing the shell must do after an event.
///
/// # The order a shell carries them out
///
/// [`Pg::handle`](super::Pg::handle) returns its effects as a list in the
/// order it made them. Shells do not run that list front to back; both the
/// daemon and the simulator run [`Effects::plan`], which applies one rule:
///
/// 1. **Every [`Effect::Store`] first**, in list order. The daemon queues
///    them while it still holds the PG's lock, so the store sees each PG's
///    transactions in the order its core made them (version order), and
///    nothing else an event caused happens before that event's
///    transactions are queued.
/// 2. **Then the rest, kind by kind** in this order: [`Effect::Note`],
///    [`Effect::Ignored`], [`Effect::PgTempSet`]/[`Effect::PgTempClear`],
///    [`Effect::Push`], [`Effect::Scan`], [`Effect::Purge`],
///    [`Effect::ScrubList`], [`Effect::ScrubMap`],
///    [`Effect::VerifyParity`], [`Effect::Reply`],
///    [`Effect::ReadAnswer`], [`Effect::Read`], [`Effect::Send`]; **within
///    a kind, in list order**. That order is what matters: sends to one peer keep the order the core made them in
///    (a replica takes sub-writes only in log order), replies keep version
///    order. Across kinds nothing depends on it: each kind goes somewhere
///    else (monitor, background reads, clients, peers). It is the order
///    both shells used before effects were a list, which keeps the
///    simulator's runs of a seed what they were.
/// 3. **One of each for a single piece of state.** The temporary acting
///    set (`PgTempSet`/`PgTempClear` are one kind), the backfill scan
///    position ([`Effect::Scan`]), the scrub listing position
///    ([`Effect::ScrubList`]) and the stray removal ([`Effect::Purge`]):
///    only the last of each kind in the list is carried out, a later one
///    replacing an earlier (the core changed its mind within the event, or
///    an event that handled others, such as an activation replaying early
///    messages, appended theirs).
/// 4. A [`Effect::Push`] of an object that another push in the list gives
///    [`Priority::Client`] has it too (a client waits for the object).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Submit this transaction; report its commit as its tag says
    /// ([`PgEvent::LocalCommitted`](super::PgEvent::LocalCommitted) for a
    /// log entry, [`PgEvent::Committed`](super::PgEvent::Committed)
    /// otherwise, nothing for [`StoreTag::Part`]).
    Store(StoreWrite),
    /// Send `msg` to the same PG on OSD `to`.
    Send { to: OsdId, msg: PgMsg },
    /// Answer the client request `req`.
    Reply { req: ReqId, reply: Reply },
    /// Run the store read of client read `read` now and report
    /// [`PgEvent::ReadDone`](super::PgEvent::ReadDone).
    Read { read: ReadId },
    /// Answer client read `read` (no [`PgEvent::ReadDone`](super::PgEvent::ReadDone) follows).
    ReadAnswer { read: ReadId, answer: ReadAnswer },
    /// An input the PG ignored, and why (for the shell to log).
    Ignored(Ignored),
    /// Something worth telling the operator (state changes).
    Note(String),
    /// Ask the monitor to make this the PG's temporary acting set.
    PgTempSet(Vec<OsdId>),
    /// Ask the monitor to drop the PG's temporary acting set.
    PgTempClear,
    /// Read `object` from the local store and push it to `targets`, with
    /// this priority in the OSD's recovery throttle: `Client` if a client
    /// waits for the object, else `Degraded` or `Misplaced` as the PG is
    /// after the event (set by [`Pg::handle`](super::Pg::handle)).
    Push {
        object: Bytes,
        targets: Vec<OsdId>,
        priority: Priority,
    },
    /// List local objects after `after` (`None`: from the start) and
    /// report them as [`PgEvent::BackfillPage`](super::PgEvent::BackfillPage).
    Scan { after: Option<ObjectKey> },
    /// Remove this copy: it is a stray of a PG clean elsewhere, in the
    /// interval starting at `interval_epoch`. The shell removes it only if
    /// the copy is still in that interval when the removal runs (see
    /// [`Pg::purge_stands`](super::Pg::purge_stands)): by then the copy
    /// may have joined a new one.
    Purge { interval_epoch: Epoch },
    /// List local objects after `after` for the scrub and report them as
    /// [`PgEvent::ScrubPage`](super::PgEvent::ScrubPage).
    ScrubList { after: Option<ObjectKey> },
    /// Read this scrub map and send it to its `to` (this OSD's own as a
    /// [`PgEvent::Peer`](super::PgEvent::Peer) of [`PgMsg::ScrubMap`]).
    ScrubMap(ScrubOrder),
    /// Re-encode these objects' shards (read from every position at their
    /// version) and report what disagrees as
    /// [`PgEvent::ParityChecked`](super::PgEvent::ParityChecked) of
    /// `chunk`.
    VerifyParity {
        chunk: u64,
        checks: Vec<ParityCheck>,
    },
}

/// The kinds of [`Effect`] other than [`Effect::Store`], in the order
/// [`Effects::plan`] carries them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Note,
    Ignored,
    PgTemp,
    Push,
    Scan,
    Purge,
    ScrubList,
    ScrubMap,
    VerifyParity,
    Reply,
    ReadAnswer,
    Read,
    Send,
}

impl Kind {
    /// Whether only the last effect of the kind in a list is carried out.
    fn last_wins(self) -> bool {
        matches!(
            self,
            Kind::PgTemp | Kind::Scan | Kind::Purge | Kind::ScrubList
        )
    }
}

impl Effect {
    /// Asks the monitor for `acting` as the temporary acting set, or to
    /// drop it (`None`).
    #[must_use]
    pub fn pg_temp(acting: Option<Vec<OsdId>>) -> Effect {
        match acting {
            Some(acting) => Effect::PgTempSet(acting),
            None => Effect::PgTempClear,
        }
    }

    /// The kind it is carried out with; `None` for a store write.
    fn kind(&self) -> Option<Kind> {
        Some(match self {
            Effect::Store(_) => return None,
            Effect::Note(_) => Kind::Note,
            Effect::Ignored(_) => Kind::Ignored,
            Effect::PgTempSet(_) | Effect::PgTempClear => Kind::PgTemp,
            Effect::Push { .. } => Kind::Push,
            Effect::Scan { .. } => Kind::Scan,
            Effect::Purge { .. } => Kind::Purge,
            Effect::ScrubList { .. } => Kind::ScrubList,
            Effect::ScrubMap(_) => Kind::ScrubMap,
            Effect::VerifyParity { .. } => Kind::VerifyParity,
            Effect::Reply { .. } => Kind::Reply,
            Effect::ReadAnswer { .. } => Kind::ReadAnswer,
            Effect::Read { .. } => Kind::Read,
            Effect::Send { .. } => Kind::Send,
        })
    }
}

/// What the shell must do after an event: an ordered list of [`Effect`]s,
/// carried out as [`Effects::plan`] says.
#[derive(Debug, Default)]
pub struct Effects(Vec<Effect>);

/// Effects in the order a shell carries them out (see [`Effect`]).
#[derive(Debug, Default)]
pub struct Plan {
    /// The store writes, in list order: queued before anything else.
    pub store: Vec<StoreWrite>,
    /// Everything else, kind by kind, in list order within a kind, with
    /// the superseded ones left out.
    pub rest: Vec<Effect>,
}

impl Effects {
    /// Appends one effect.
    pub fn push(&mut self, effect: Effect) {
        self.0.push(effect);
    }

    /// Appends `other`'s effects after this one's.
    pub fn extend(&mut self, other: Effects) {
        self.0.extend(other.0);
    }

    /// Appends a store write.
    pub fn store(&mut self, write: StoreWrite) {
        self.push(Effect::Store(write));
    }

    /// Appends a message to the same PG on `to`.
    pub fn send(&mut self, to: OsdId, msg: PgMsg) {
        self.push(Effect::Send { to, msg });
    }

    /// Appends the answer to a client request.
    pub fn reply(&mut self, req: ReqId, reply: Reply) {
        self.push(Effect::Reply { req, reply });
    }

    /// Appends a note for the operator.
    pub fn note(&mut self, note: impl Into<String>) {
        self.push(Effect::Note(note.into()));
    }

    /// Appends an ignored input.
    pub fn ignore(&mut self, why: Ignored) {
        self.push(Effect::Ignored(why));
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The effects in list order.
    pub fn iter(&self) -> std::slice::Iter<'_, Effect> {
        self.0.iter()
    }

    /// The store writes, in list order.
    pub fn store_writes(&self) -> impl Iterator<Item = &StoreWrite> {
        self.iter().filter_map(|e| match e {
            Effect::Store(write) => Some(write),
            _ => None,
        })
    }

    /// The messages to peers, in list order.
    pub fn sends(&self) -> impl Iterator<Item = (OsdId, &PgMsg)> {
        self.iter().filter_map(|e| match e {
            Effect::Send { to, msg } => Some((*to, msg)),
            _ => None,
        })
    }

    /// The client replies, in list order.
    pub fn replies(&self) -> impl Iterator<Item = (ReqId, &Reply)> {
        self.iter().filter_map(|e| match e {
            Effect::Reply { req, reply } => Some((*req, reply)),
            _ => None,
        })
    }

    /// The ignored inputs, in list order.
    pub fn ignored(&self) -> impl Iterator<Item = &Ignored> {
        self.iter().filter_map(|e| match e {
            Effect::Ignored(why) => Some(why),
            _ => None,
        })
    }

    /// The pushes (object, targets), in list order.
    pub fn pushes(&self) -> impl Iterator<Item = (&Bytes, &[OsdId])> {
        self.iter().filter_map(|e| match e {
            Effect::Push {
                object, targets, ..
            } => Some((object, targets.as_slice())),
            _ => None,
        })
    }

    /// The scrub maps to read, in list order.
    pub fn scrub_orders(&self) -> impl Iterator<Item = &ScrubOrder> {
        self.iter().filter_map(|e| match e {
            Effect::ScrubMap(order) => Some(order),
            _ => None,
        })
    }

    /// Gives every push not for a waiting client `priority`.
    pub fn set_background_push_priority(&mut self, priority: Priority) {
        for effect in &mut self.0 {
            if let Effect::Push { priority: p, .. } = effect
                && *p != Priority::Client
            {
                *p = priority;
            }
        }
    }

    /// The effects in the order a shell carries them out, by the rule on
    /// [`Effect`]: store writes first, then kind by kind (list order within
    /// a kind), the last only of the kinds that set one piece of state.
    #[must_use]
    pub fn plan(self) -> Plan {
        let mut plan = Plan::default();
        if self.0.len() <= 1 {
            // Nothing to order or supersede (the common case of a read).
            for effect in self.0 {
                match effect {
                    Effect::Store(write) => plan.store.push(write),
                    other => plan.rest.push(other),
                }
            }
            return plan;
        }
        let mut last: BTreeMap<Kind, usize> = BTreeMap::new();
        let mut urgent: BTreeSet<Bytes> = BTreeSet::new();
        for (index, effect) in self.0.iter().enumerate() {
            if let Some(kind) = effect.kind().filter(|k| k.last_wins()) {
                last.insert(kind, index);
            }
            if let Effect::Push {
                object,
                priority: Priority::Client,
                ..
            } = effect
            {
                urgent.insert(object.clone());
            }
        }
        let mut rest: Vec<(Kind, Effect)> = Vec::new();
        for (index, mut effect) in self.0.into_iter().enumerate() {
            let Some(kind) = effect.kind() else {
                if let Effect::Store(write) = effect {
                    plan.store.push(write);
                }
                continue;
            };
            if kind.last_wins() && last.get(&kind) != Some(&index) {
                continue;
            }
            if let Effect::Push {
                object, priority, ..
            } = &mut effect
                && urgent.contains(object)
            {
                *priority = Priority::Client;
            }
            rest.push((kind, effect));
        }
        // Stable: list order within a kind.
        rest.sort_by_key(|(kind, _)| *kind);
        plan.rest = rest.into_iter().map(|(_, effect)| effect).collect();
        plan
    }
}

impl IntoIterator for Effects {
    type Item = Effect;
    type IntoIter = std::vec::IntoIter<Effect>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Effects {
    type Item = &'a Effect;
    type IntoIter = std::slice::Iter<'a, Effect>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<Effect> for Effects {
    fn from_iter<I: IntoIterator<Item = Effect>>(iter: I) -> Effects {
        Effects(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::CollectionId;

    fn store(seq: u64) -> Effect {
        Effect::Store(StoreWrite {
            version: Version::new(1, seq),
            txn: Transaction::new(CollectionId::pg(1, 0)),
            tag: StoreTag::Part,
        })
    }

    fn reply(tid: u64) -> Effect {
        Effect::Reply {
            req: ReqId { client: 1, tid },
            reply: Reply::ObjectBusy,
        }
    }

    fn push(name: &'static [u8], urgent: bool) -> Effect {
        let priority = if urgent {
            Priority::Client
        } else {
            Priority::Degraded
        };
        Effect::Push {
            object: Bytes::from_static(name),
            targets: vec![OsdId(2)],
            priority,
        }
    }

    #[test]
    fn the_plan_queues_store_writes_first_then_goes_kind_by_kind() {
        let fx: Effects = [
            reply(1),
            Effect::Note("a".into()),
            store(1),
            Effect::Scan { after: None },
            reply(2),
            store(2),
            Effect::PgTempSet(vec![OsdId(1)]),
        ]
        .into_iter()
        .collect();
        let plan = fx.plan();
        let versions: Vec<Version> = plan.store.iter().map(|w| w.version).collect();
        assert_eq!(versions, vec![Version::new(1, 1), Version::new(1, 2)]);
        assert_eq!(
            plan.rest,
            vec![
                Effect::Note("a".into()),
                Effect::PgTempSet(vec![OsdId(1)]),
                Effect::Scan { after: None },
                reply(1),
                reply(2),
            ],
            "kind by kind, list order within a kind"
        );
    }

    #[test]
    fn the_last_request_for_one_piece_of_state_wins() {
        let key = ObjectKey::new(Bytes::from_static(b"k"));
        let fx: Effects = [
            Effect::PgTempSet(vec![OsdId(1)]),
            Effect::Scan { after: None },
            Effect::PgTempClear,
            Effect::Scan {
                after: Some(key.clone()),
            },
            Effect::ScrubList { after: None },
            Effect::Purge {
                interval_epoch: Epoch(3),
            },
            Effect::Purge {
                interval_epoch: Epoch(4),
            },
        ]
        .into_iter()
        .collect();
        assert_eq!(
            fx.plan().rest,
            vec![
                Effect::PgTempClear,
                Effect::Scan { after: Some(key) },
                Effect::Purge {
                    interval_epoch: Epoch(4),
                },
                Effect::ScrubList { after: None },
            ]
        );
    }

    #[test]
    fn a_push_of_an_object_a_client_waits_for_is_urgent_wherever_it_stands() {
        let fx: Effects = [push(b"a", false), push(b"b", false), push(b"a", true)]
            .into_iter()
            .collect();
        assert_eq!(
            fx.plan().rest,
            vec![push(b"a", true), push(b"b", false), push(b"a", true)]
        );
    }

    #[test]
    fn background_pushes_take_the_pg_priority_and_client_ones_keep_theirs() {
        let mut fx: Effects = [push(b"a", false), push(b"b", true)].into_iter().collect();
        fx.set_background_push_priority(Priority::Misplaced);
        let priorities: Vec<Priority> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Push { priority, .. } => Some(*priority),
                _ => None,
            })
            .collect();
        assert_eq!(priorities, [Priority::Misplaced, Priority::Client]);
    }
}

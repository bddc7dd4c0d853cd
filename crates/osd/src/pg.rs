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

use crate::limits::PgLimits;
use crate::log::{LogEntry, LogKind, LogResult, PgLog, ReqId, Version, err_code};
use bytes::Bytes;
use cairn_store::{CollectionId, ObjectKey, Op, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet};

/// A run of maps during which a PG's acting set and primary stay the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The first map epoch of the interval.
    pub epoch_started: Epoch,
    /// The OSDs holding the PG, primary included; no duplicates.
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// Fewest acting OSDs with which writes are accepted.
    pub min_size: u32,
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

    fn acting_count(&self) -> u32 {
        u32::try_from(self.acting.len()).unwrap_or(u32::MAX)
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
}

/// A compare-and-set condition: the write applies only if its object's
/// state before it matches; otherwise it is refused (and logged as refused,
/// so a retry gets the same answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The object's version is this one (0: the object does not exist).
    Version(u64),
    /// The xattr `name` has this value (`None`: it is absent).
    Xattr { name: Bytes, value: Option<Bytes> },
    /// The object exists: implied by removes (of the object, an xattr or
    /// omap keys), so removing what is missing is answered "not found"
    /// from the log rather than failing in the store after logging.
    Exists,
}

/// Guards with the state of its object as the shell read it from the
/// store, under the same lock as the event, so no write slips between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardCheck {
    /// All must hold; at most one names an xattr.
    pub guards: Vec<Guard>,
    /// The object's version, 0 if it does not exist.
    pub version: u64,
    /// The value of the xattr the guard names, if it names one and it is set.
    pub xattr: Option<Bytes>,
}

impl GuardCheck {
    /// The refusal code of the first guard that does not hold.
    fn failure(&self) -> Option<u32> {
        self.guards.iter().find_map(|guard| match guard {
            Guard::Version(expected) => {
                (*expected != self.version).then_some(err_code::VERSION_MISMATCH)
            }
            Guard::Xattr { value, .. } => {
                (*value != self.xattr).then_some(err_code::XATTR_MISMATCH)
            }
            Guard::Exists => (self.version == 0).then_some(err_code::NOT_FOUND),
        })
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
    /// A new map changed this PG's acting set or primary.
    IntervalChange(Interval),
    SubWrite(SubWrite),
    SubWriteAck(SubWriteAck),
    /// The store made this version's transaction durable.
    LocalCommitted {
        version: Version,
    },
}

impl From<PgMsg> for PgEvent {
    fn from(msg: PgMsg) -> PgEvent {
        match msg {
            PgMsg::SubWrite(write) => PgEvent::SubWrite(write),
            PgMsg::SubWriteAck(ack) => PgEvent::SubWriteAck(ack),
        }
    }
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
}

/// A transaction to submit; report [`PgEvent::LocalCommitted`] with
/// `version` once it is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreWrite {
    pub version: Version,
    pub txn: Transaction,
}

/// What the shell must do after an event.
#[derive(Debug, Default)]
pub struct Effects {
    pub store: Vec<StoreWrite>,
    pub send: Vec<(OsdId, PgMsg)>,
    pub replies: Vec<(ReqId, Reply)>,
    pub log: Vec<Ignored>,
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
}

/// How a request id relates to the log.
enum Dup {
    New,
    /// The original is in flight; its completion answers both.
    InFlight,
    Answer(Reply),
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
}

impl Pg {
    /// A new, empty PG (no history yet).
    ///
    /// # Errors
    /// The interval is inconsistent.
    pub fn new(
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
            log: PgLog::new(limits.log_entries_max),
            uncommitted: BTreeMap::new(),
            inflight: BTreeMap::new(),
            acks_owed: BTreeMap::new(),
        })
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
            PgEvent::SubWrite(write) => self.on_sub_write(write, &mut fx),
            PgEvent::SubWriteAck(ack) => self.on_sub_write_ack(ack, &mut fx),
            PgEvent::LocalCommitted { version } => self.on_local_committed(version, &mut fx),
        };
        if let Err(why) = outcome {
            fx.log.push(why);
        }
        fx
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
        match self.duplicate(req) {
            Dup::New => {}
            Dup::InFlight => return,
            Dup::Answer(reply) => {
                fx.replies.push((req, reply));
                return;
            }
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

    /// Rule: refuse only if this OSD is not primary or the interval began
    /// after the client's map, never for unrelated newer epochs.
    fn check_primary(&self, client_epoch: Epoch) -> Result<(), RetryReason> {
        if self.interval.primary != Some(self.whoami) {
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
        let min_size = self.interval.min_size;
        if self.interval.acting_count() < min_size {
            return Err(Reply::Blocked {
                acting_count: self.interval.acting_count(),
                min_size,
            });
        }
        if self.inflight.len() >= self.limits.inflight_max {
            return Err(Reply::Busy {
                inflight_max: self.limits.inflight_max,
            });
        }
        let kind = check_ops(&object, &ops).map_err(|reason| Reply::Invalid { reason })?;
        let seq = self
            .last_update
            .seq
            .checked_add(1)
            .expect("PG seq overflow");
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
            .copied()
            .filter(|osd| *osd != self.whoami)
            .collect();
        for osd in &replicas {
            let msg = SubWrite {
                from: self.whoami,
                interval_epoch: self.interval.epoch_started,
                entry: entry.clone(),
                ops: ops.clone(),
                prior,
                committed_to: self.committed_to,
            };
            fx.send.push((*osd, PgMsg::SubWrite(msg)));
        }
        let flight = InFlight {
            req,
            result: entry.result,
            waiting_on: replicas,
            committed_local: false,
        };
        self.inflight.insert(version, flight);
        Ok(())
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
        if self.log.len() >= self.limits.log_entries_max
            && let Some(oldest) = self.log.iter().next()
        {
            txn.push(Op::MetaRemove {
                key: oldest.version.log_key(),
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
        assert!(trimmed.len() <= 1, "log grew past its bound");
        self.last_update = version;
        self.uncommitted.insert(version, prior);
        fx.store.push(StoreWrite { version, txn });
        prior
    }

    fn on_sub_write(&mut self, msg: SubWrite, fx: &mut Effects) -> Result<(), Ignored> {
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

    /// Validates a peer's sub-write: sender, interval, order, content.
    fn check_sub_write(&self, msg: &SubWrite) -> Result<(), Ignored> {
        let primary = self.interval.primary;
        if primary == Some(self.whoami) || !self.interval.acting.contains(&self.whoami) {
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
        if msg.entry.kind == LogKind::Refused {
            return match (msg.ops.is_empty(), msg.entry.result) {
                (true, LogResult::Err { .. }) => Ok(()),
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
        assert!(complete >= self.last_complete, "last_complete went back");
        assert!(
            complete <= self.last_update,
            "last_complete passed last_update"
        );
        self.last_complete = complete;
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
            assert!(version <= self.last_complete, "reply before local commit");
            self.committed_to = version;
            let reply = Reply::Done {
                version,
                result: flight.result,
            };
            fx.replies.push((flight.req, reply));
        }
    }

    /// Moves to a newer interval. In-flight writes are answered `Retry`:
    /// they may or may not be durable on the new acting set, and a resend
    /// is never applied twice because its request id is in the log (it is
    /// answered `AwaitingPeering` until peering settles the entry).
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
        Ok(())
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
            acting: vec![OsdId(1), OsdId(2)],
            primary: Some(OsdId(1)),
            min_size: 1,
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
            acting: vec![OsdId(1)],
            primary: Some(OsdId(1)),
            min_size: 1,
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
}

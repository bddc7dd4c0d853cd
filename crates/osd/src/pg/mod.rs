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
//!
//! Layout, by responsibility (one `impl Pg` block per file): `events.rs`,
//! `messages.rs` and `effects.rs` are the vocabulary (what comes in, what
//! copies say to each other, what the shell must do); this file holds the
//! PG's state, its construction and the dispatch of events and ticks;
//! `write.rs` the write path, `activation.rs` peering and activation,
//! `recovery.rs` log-based recovery and stray removal, `backfill.rs` the
//! backfill scan, `scrub.rs` scrub and repair, `read.rs` read leases and
//! whether an object may be read, `status.rs` what the PG reports.
//! `backend.rs` is the seam between the core and the data handling that
//! differs between replication and erasure coding ([`PgBackend`]: a write's
//! ops on each copy, whether a read waits, what a push applies, what scrub
//! compares); [`ReplicatedBackend`] implements it today.

use crate::lease::Leases;
use crate::limits::{
    PG_TEMP_RESEND_TICKS, PgLimits, RESEND_TICKS, STALLED_TICKS, STRAY_NOTIFY_TICKS,
};
use crate::log::{DupEntry, LogEntry, PgLog, Version};
use crate::peering::{PeerCopy, PgInfo};
use crate::scrub::{Inconsistency, ScrubStamps, Scrubber};
use crate::throttle::Priority;
use bytes::Bytes;
use cairn_store::{CollectionId, ObjectKey};
use cairn_types::{Epoch, OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod activation;
mod backend;
mod backfill;
mod effects;
mod events;
mod messages;
mod positions;
mod read;
mod recovery;
mod scrub;
mod status;
mod write;

use crate::limits::PARKED_SUB_WRITES_MAX;
pub use backend::{PgBackend, ReplicatedBackend, ShardWrites, push_txn};
pub use effects::{
    Effect, Effects, Ignored, InvalidWrite, Plan, ReadAnswer, Reply, RetryReason, StoreTag,
    StoreWrite,
};
pub use events::{
    EcShape, Guard, GuardCheck, Interval, IntervalError, MapContext, PgEvent, PreparedWrite, ReadId,
};
pub use messages::{Activate, Notify, ObjectState, PgMsg, Push, SubWrite, SubWriteAck};
use read::PendingRead;
pub(crate) use write::check_ops;
use write::{InFlight, NewWrite};

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
    /// Backfill targets that finished in this interval: they hold its
    /// history (and record it as the last they activated in), so they
    /// take its writes until it ends, as the acting set does. (An
    /// erasure-coded peering rolls back what its shortest such history
    /// lacks: a write they missed would be undone.)
    backfilled: BTreeSet<OsdId>,
    /// Backfill targets told they are done, not yet acknowledged.
    backfill_done_waiting: BTreeSet<OsdId>,
    /// OSDs holding copies outside the acting and up sets.
    strays: BTreeSet<OsdId>,
    /// Strays whose copies can be brought up to date from the log, with
    /// the objects each lacks: recovery sources for what no member holds
    /// (after a remap the data may sit only there, as Ceph's missing_loc
    /// counts every peer).
    stray_sources: BTreeMap<OsdId, BTreeSet<Bytes>>,
    /// Erasure coding: up OSDs left out of this interval to serve as
    /// recovery sources (see `finish_peering_positions`), backfilled in
    /// the next.
    kept: BTreeSet<OsdId>,
    /// Erasure coding: the shard each stray source holds.
    stray_shards: BTreeMap<OsdId, Option<u32>>,
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
    /// The `committed_to` last sent to the copies (erasure coding: with a
    /// sub-write, or in a [`PgMsg::RollForward`] once idle).
    forwarded_to: Version,
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
    /// Replica: sub-writes of this interval that came ahead of their
    /// predecessor, keyed by the version they follow (the wire server
    /// handles one connection's frames concurrently, so they may arrive
    /// out of order); taken in log order as the log reaches them.
    ahead: BTreeMap<Version, SubWrite>,
    /// Primary: client reads in progress (see `read.rs`).
    reads: BTreeMap<ReadId, PendingRead>,
    /// The shell's clock at the current event, in milliseconds.
    now_ms: u64,
    /// Replica: pushed objects to acknowledge on commit, to their sender.
    pushes_owed: BTreeMap<Bytes, OsdId>,
    scrub: Scrubber,
    leases: Leases,
    /// How data becomes each copy's transactions, and what scrub compares.
    backend: Box<dyn PgBackend>,
    /// Erasure coding: the roll-back records of this copy's entries not
    /// yet known committed (see [`crate::undo`]).
    undo: BTreeMap<Version, crate::undo::UndoRecord>,
    /// Stashes whose records were dropped in this tick and the one before
    /// (their removal may not be committed yet): still this copy's own,
    /// not a client's, for usage reports ([`Pg::stashes`]).
    dropped_stashes: [Vec<cairn_store::ObjectKey>; 2],
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
    /// Erasure coding: roll-back records of entries not known committed.
    pub undo: Vec<(Version, crate::undo::UndoRecord)>,
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
        let backend: Box<dyn PgBackend> = match &interval.ec {
            Some(shape) => {
                Box::new(crate::ec::EcBackend::new(shape).map_err(IntervalError::Shape)?)
            }
            None => Box::new(ReplicatedBackend),
        };
        Ok(Pg {
            pg,
            whoami,
            collection: CollectionId::pg(pg.pool.0, pg.seed),
            interval,
            limits,
            last_update: Version::ZERO,
            last_complete: Version::ZERO,
            committed_to: Version::ZERO,
            forwarded_to: Version::ZERO,
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
            ahead: BTreeMap::new(),
            reads: BTreeMap::new(),
            now_ms: 0,
            pushes_owed: BTreeMap::new(),
            scrub: Scrubber::default(),
            leases: Leases::default(),
            backend,
            undo: BTreeMap::new(),
            dropped_stashes: [Vec::new(), Vec::new()],
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
        core.undo = stored.undo.into_iter().collect();
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
        self.dispatch(event, &mut fx);
        while let Some(next) = self.ahead.remove(&self.last_update) {
            self.dispatch(PgEvent::SubWrite(next), &mut fx);
        }
        self.move_reads(&mut fx);
        // The recovery throttle's order: what a client waits for, then
        // what a further failure could lose, then rebalancing.
        let background = if self.is_degraded() {
            Priority::Degraded
        } else {
            Priority::Misplaced
        };
        fx.set_background_push_priority(background);
        fx
    }

    /// Handles one event (the sub-writes it lets through follow in
    /// [`Pg::handle`]).
    fn dispatch(&mut self, event: PgEvent, fx: &mut Effects) {
        let outcome = match event {
            PgEvent::ClientWrite {
                req,
                client_epoch,
                object,
                ops,
                guard,
                prepared,
            } => {
                let write = NewWrite {
                    req,
                    object,
                    ops,
                    prepared,
                };
                self.on_client_write(write, client_epoch, guard, fx);
                Ok(())
            }
            PgEvent::ClientRead { read, object } => {
                self.on_client_read(read, object, fx);
                Ok(())
            }
            PgEvent::ReadDone { read, corrupt } => {
                self.on_read_done(read, corrupt, fx);
                Ok(())
            }
            PgEvent::IntervalChange(interval) => {
                self.ahead.clear();
                self.on_interval_change(interval, fx)
            }
            PgEvent::MapContext(context) => {
                self.on_map_context(context, fx);
                Ok(())
            }
            PgEvent::SubWrite(write)
                if write.interval_epoch == self.interval.epoch_started
                    && write.prior > self.last_update =>
            {
                if self.ahead.len() < PARKED_SUB_WRITES_MAX {
                    self.ahead.insert(write.prior, write);
                }
                Ok(())
            }
            PgEvent::SubWrite(write) => {
                if matches!(self.phase, Phase::Replica { activated: false })
                    && write.interval_epoch == self.interval.epoch_started
                {
                    self.park(PgMsg::SubWrite(write));
                    Ok(())
                } else {
                    self.on_sub_write(write, fx)
                }
            }
            PgEvent::SubWriteAck(ack) => self.on_sub_write_ack(ack, fx),
            PgEvent::LocalCommitted { version } => self.on_local_committed(version, fx),
            PgEvent::Committed(tag) => {
                self.on_committed(tag, fx);
                Ok(())
            }
            PgEvent::Peer(msg) => self.on_peer(msg, fx),
            PgEvent::BackfillPage { keys, more } => {
                self.on_backfill_page(keys, more, fx);
                Ok(())
            }
            PgEvent::Tick => {
                self.on_tick(fx);
                Ok(())
            }
            PgEvent::Scrub {
                deep,
                repair,
                now_secs,
            } => self.start_scrub(deep, repair, now_secs, fx),
            PgEvent::ScrubPage { keys, more } => {
                self.on_scrub_page(keys, more, fx);
                Ok(())
            }
            PgEvent::ParityChecked { chunk, found } => self.on_parity_checked(chunk, found, fx),
            PgEvent::ReadError { object, error } => {
                self.on_read_error(object, error, fx);
                Ok(())
            }
        };
        if let Err(why) = outcome {
            fx.ignore(why);
        }
    }

    fn is_primary(&self) -> bool {
        self.interval.primary == Some(self.whoami)
    }

    fn on_tick(&mut self, fx: &mut Effects) {
        let [older, newer] = &mut self.dropped_stashes;
        *older = std::mem::take(newer);
        let query = self.query();
        match &mut self.phase {
            Phase::Peering { waiting, ticks, .. } => {
                *ticks += 1;
                if *ticks % RESEND_TICKS == 0 {
                    for osd in waiting.iter() {
                        fx.send(*osd, query.clone());
                    }
                }
            }
            Phase::Activating {
                ticks, local_done, ..
            } => {
                *ticks += 1;
                if *local_done && *ticks % RESEND_TICKS == 0 {
                    for (osd, msg) in &self.healing.activations {
                        fx.send(*osd, msg.clone());
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
                    fx.push(Effect::pg_temp(temp));
                }
            }
            Phase::Active => {
                for (to, msg) in self.resend_sub_writes() {
                    fx.send(to, msg);
                }
                self.forward_when_idle(fx);
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
                for (object, targets) in repush {
                    fx.push(Effect::Push {
                        object,
                        targets,
                        priority: Priority::Degraded,
                    });
                }
                for target in &healing.backfill_done_waiting {
                    let done = PgMsg::BackfillDone {
                        from: self.whoami,
                        interval_epoch: self.interval.epoch_started,
                    };
                    fx.send(*target, done);
                }
                if let Some(temp) = healing.temp_requested.clone()
                    && temp.as_ref() != Some(&self.interval.acting)
                {
                    fx.push(Effect::pg_temp(temp));
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
                    fx.send(primary, notify);
                }
            }
            Phase::Replica { activated: true } | Phase::Incomplete { .. } => {}
        }
    }
}

/// Whether an object name can reach the store (its key encoding assumes
/// the store's name bound).
#[must_use]
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= cairn_proto::limits::OBJECT_NAME_BYTES_MAX
        && !crate::undo::is_internal(name)
}

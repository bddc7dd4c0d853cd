//! The write path: admitting a client write on the primary, logging it and
//! sending it to every other copy; a replica applying sub-writes in log
//! order; replies once every acting copy made a version durable, in
//! version order (DESIGN.md "Write (replicated pool)").

use super::effects::{Effects, Ignored, InvalidWrite, Reply, RetryReason, StoreTag, StoreWrite};
use super::events::GuardCheck;
use super::messages::{PgMsg, SubWrite, SubWriteAck};
use super::{Pg, Phase, ShardWrites};
use crate::limits::{SUBWRITE_RESEND_TICKS, UNDO_FORWARD_PER_TXN};
use crate::log::{DupEntry, LogEntry, LogKind, LogResult, ReqId, Version};
use bytes::Bytes;
use cairn_store::{ObjectKey, Op, StoreError, Transaction};
use cairn_types::{Epoch, OsdId};
use std::collections::BTreeSet;

/// A client write as the PG receives it.
pub(super) struct NewWrite {
    pub(super) req: ReqId,
    pub(super) object: Bytes,
    pub(super) ops: Vec<Op>,
    pub(super) prepared: Option<super::PreparedWrite>,
}

#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) req: ReqId,
    pub(super) result: LogResult,
    pub(super) waiting_on: BTreeSet<OsdId>,
    pub(super) committed_local: bool,
    /// The sub-write as sent (without its ops), for a resend to OSDs
    /// whose ack is overdue.
    pub(super) sub_write: SubWrite,
    /// The write's ops on each copy.
    pub(super) writes: ShardWrites,
    /// The backfill targets that got it as a log entry only.
    pub(super) log_only: BTreeSet<OsdId>,
    /// Ticks since it was last sent.
    pub(super) ticks: u32,
}

impl InFlight {
    /// The sub-write for one OSD, holding shard `shard` (`None`:
    /// replicated), with its ops (a backfill target past the scan gets the
    /// log entry only).
    pub(super) fn sub_write_to(&self, osd: OsdId, shard: Option<u32>) -> SubWrite {
        let log_only = self.log_only.contains(&osd);
        let sent = &self.sub_write;
        SubWrite {
            from: sent.from,
            interval_epoch: sent.interval_epoch,
            entry: sent.entry.clone(),
            ops: if log_only {
                Vec::new()
            } else {
                self.writes.for_shard(shard)
            },
            prior: sent.prior,
            committed_to: sent.committed_to,
            log_only,
        }
    }
}

/// How a request id relates to the log.
pub(super) enum Dup {
    New,
    /// The original is in flight; its completion answers both.
    InFlight,
    Answer(Reply),
}

impl Pg {
    pub(super) fn on_client_write(
        &mut self,
        write: NewWrite,
        client_epoch: Epoch,
        guard: Option<GuardCheck>,
        fx: &mut Effects,
    ) {
        let req = write.req;
        if let Err(reason) = self.check_primary(client_epoch) {
            fx.reply(req, Reply::Retry { reason });
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
            fx.reply(req, blocked);
            return;
        }
        match self.duplicate(req) {
            Dup::New => {}
            Dup::InFlight => return,
            Dup::Answer(reply) => {
                fx.reply(req, reply);
                return;
            }
        }
        if self.object_healing(&write.object) {
            self.prioritize(write.object.clone(), fx);
            fx.reply(req, Reply::ObjectBusy);
            return;
        }
        if self
            .scrub
            .run
            .as_ref()
            .is_some_and(|run| run.blocks(&ObjectKey::new(write.object.clone())))
        {
            fx.reply(req, Reply::ObjectBusy);
            return;
        }
        // A write planned on the object's bytes at a version stands only
        // if no other write to it can land first; one planned on this
        // copy's own state (its roll-back records) only if that state is
        // the log's last word on the object.
        if let Some(prepared) = &write.prepared {
            let stale = if prepared.read_shards {
                self.object_unsettled(&write.object)
            } else {
                self.logged_version(&write.object)
                    .is_some_and(|v| v != prepared.base)
            };
            if stale {
                fx.reply(req, Reply::ObjectBusy);
                return;
            }
        }
        let refusal = match guard {
            Some(_) if self.object_unsettled(&write.object) => {
                fx.reply(req, Reply::ObjectBusy);
                return;
            }
            Some(check) => check.failure(),
            None => None,
        };
        if let Err(reply) = self.start_write(write, refusal, fx) {
            fx.reply(req, reply);
        }
    }

    /// Whether a logged write to `object` is not yet known durable on the
    /// acting set (in flight, or awaiting peering): its outcome could still
    /// change what a guard sees.
    pub(super) fn object_unsettled(&self, object: &[u8]) -> bool {
        self.log
            .iter()
            .rev()
            .take_while(|entry| entry.version > self.committed_to)
            .any(|entry| entry.object == object && entry.kind != LogKind::Refused)
    }

    /// The object's version after the log's newest write to it (0: it
    /// removed the object; `None`: the log holds none).
    pub(super) fn logged_version(&self, object: &Bytes) -> Option<u64> {
        let entry = self.log.newest_change(object)?;
        match (entry.kind, entry.result) {
            (LogKind::Write, LogResult::Ok { object_version }) => Some(object_version),
            _ => Some(0),
        }
    }

    /// Whether some copy still lacks `object`, or a backfill push of it is
    /// under way: a write must wait until the copies agree.
    pub(super) fn object_healing(&self, object: &Bytes) -> bool {
        self.healing.missing.contains_key(object)
            || self
                .healing
                .backfill_in_flight
                .contains_key(&ObjectKey::new(object.clone()))
    }

    /// Rule: refuse only if this OSD is not an active primary or the
    /// interval began after the client's map, never for unrelated newer
    /// epochs.
    pub(super) fn check_primary(&self, client_epoch: Epoch) -> Result<(), RetryReason> {
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

    /// Whether the log knows request `req` (applied, in flight, or
    /// refused): a resend is answered from the log, not applied again.
    #[must_use]
    pub fn knows_request(&self, req: ReqId) -> bool {
        !matches!(self.duplicate(req), Dup::New)
    }

    pub(super) fn duplicate(&self, req: ReqId) -> Dup {
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
    pub(super) fn complete_acting_count(&self) -> u32 {
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
    pub(super) fn start_write(
        &mut self,
        write: NewWrite,
        refusal: Option<u32>,
        fx: &mut Effects,
    ) -> Result<(), Reply> {
        let NewWrite {
            req,
            object,
            mut ops,
            prepared,
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
        let writes = match prepared {
            Some(prepared) if refusal.is_none() => {
                let ShardWrites::PerShard(mut per) = prepared.writes else {
                    return Err(Reply::Invalid {
                        reason: InvalidWrite::NotSupported(
                            "a prepared write of a replicated PG".into(),
                        ),
                    });
                };
                for (i, shard) in per.iter_mut().enumerate() {
                    if kind == LogKind::Write {
                        shard.push(Op::SetVersion {
                            object: key.clone(),
                            version: seq,
                        });
                    }
                    if let Some(record) = prepared.undo.get(i) {
                        shard.push(Op::MetaSet {
                            key: crate::undo::undo_key(version),
                            value: record.encode(),
                        });
                    }
                }
                ShardWrites::PerShard(per)
            }
            _ => self
                .backend
                .plan_write(ops)
                .map_err(|reason| Reply::Invalid { reason })?,
        };
        let own = self.interval.shard_of(self.whoami);
        let mut txn = self
            .log_txn(writes.for_shard(own), &entry)
            .map_err(|e| Reply::Invalid { reason: e.into() })?;
        self.keep_undo(&mut txn, &entry, self.committed_to);
        let prior = self.append(entry.clone(), txn, fx);
        let replicas = self.other_copies();
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
                ops: Vec::new(),
                prior,
                committed_to: self.committed_to,
                log_only: false,
            },
            writes,
            log_only,
            ticks: 0,
        };
        for osd in &flight.waiting_on {
            let shard = self.interval.shard_of(*osd);
            fx.send(*osd, PgMsg::SubWrite(flight.sub_write_to(*osd, shard)));
        }
        self.forwarded_to = self.forwarded_to.max(self.committed_to);
        self.inflight.insert(version, flight);
        Ok(())
    }

    /// Sends the in-flight sub-writes again to the OSDs whose acks are
    /// overdue, oldest first (a copy takes them only in order), once the
    /// oldest waited [`SUBWRITE_RESEND_TICKS`]. The session they went on
    /// may have died, or the copy was too busy to take them; a copy that
    /// already has one acknowledges it again ([`Pg::on_sub_write`]).
    pub(super) fn resend_sub_writes(&mut self) -> Vec<(OsdId, PgMsg)> {
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
                let shard = self.interval.shard_of(*osd);
                out.push((*osd, PgMsg::SubWrite(flight.sub_write_to(*osd, shard))));
            }
        }
        out
    }

    /// The write's transaction: the client's ops, its log entry under the
    /// metadata key of its version, and the removal of the log entry the
    /// append will trim, so the stored log stays bounded too.
    pub(super) fn log_txn(
        &self,
        ops: Vec<Op>,
        entry: &LogEntry,
    ) -> Result<Transaction, StoreError> {
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

    /// Erasure coding: records the roll-back record `txn` stores for
    /// `entry` (see [`crate::undo`]), and drops in `txn` the stashes and
    /// records of entries up to `committed` (a bounded number at a time),
    /// which no peering rolls back any more.
    pub(super) fn keep_undo(
        &mut self,
        txn: &mut Transaction,
        entry: &LogEntry,
        committed: Version,
    ) {
        let key = crate::undo::undo_key(entry.version);
        for op in &txn.ops {
            if let Op::MetaSet { key: k, value } = op
                && *k == key
                && let Ok(record) = crate::undo::UndoRecord::decode(value)
            {
                self.undo.insert(entry.version, record);
            }
        }
        let done: Vec<Version> = self
            .undo
            .range(..=committed)
            .map(|(v, _)| *v)
            .take(UNDO_FORWARD_PER_TXN)
            .collect();
        let mut forward = Vec::new();
        for version in done {
            if let Some(record) = self.undo.remove(&version) {
                self.note_dropped(&record);
                forward.extend(record.forward_ops());
                forward.push(Op::MetaRemove {
                    key: crate::undo::undo_key(version),
                });
            }
        }
        txn.ops.splice(0..0, forward);
    }

    /// Erasure coding, an active primary with no write in flight whose
    /// copies have not heard of its latest `committed_to`: tells them
    /// ([`PgMsg::RollForward`]) and rolls its own records forward, so the
    /// last writes' stashes do not stay until the PG's next write.
    pub(super) fn forward_when_idle(&mut self, fx: &mut Effects) {
        if self.backend.erasure_k().is_none()
            || !self.inflight.is_empty()
            || self.committed_to <= self.forwarded_to
        {
            return;
        }
        self.forwarded_to = self.committed_to;
        let msg = PgMsg::RollForward {
            from: self.whoami,
            interval_epoch: self.interval.epoch_started,
            committed_to: self.committed_to,
        };
        for osd in self.other_copies() {
            fx.send(osd, msg.clone());
        }
        self.roll_forward(fx);
    }

    /// The copies a write goes to besides this primary: the acting set's,
    /// the backfill targets' and those of targets that finished.
    fn other_copies(&self) -> BTreeSet<OsdId> {
        self.interval
            .acting
            .iter()
            .chain(self.healing.backfill_targets.iter())
            .chain(self.healing.backfilled.iter())
            .copied()
            .filter(|osd| *osd != self.whoami)
            .collect()
    }

    /// Remembers a dropped record's stash until its removal has surely
    /// committed (two ticks).
    fn note_dropped(&mut self, record: &crate::undo::UndoRecord) {
        if record.has_stash() {
            self.dropped_stashes[1].push(record.stash());
        }
    }

    /// Drops the roll-back records and stashes of every entry up to
    /// `committed_to`, in one transaction of their own.
    pub(super) fn roll_forward(&mut self, fx: &mut Effects) {
        let done: Vec<Version> = self
            .undo
            .range(..=self.committed_to)
            .map(|(v, _)| *v)
            .collect();
        if done.is_empty() {
            return;
        }
        let mut txn = Transaction::new(self.collection);
        for version in done {
            if let Some(record) = self.undo.remove(&version) {
                self.note_dropped(&record);
                txn.ops.extend(record.forward_ops());
                txn.push(Op::MetaRemove {
                    key: crate::undo::undo_key(version),
                });
            }
        }
        fx.store(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        });
    }

    /// Appends a validated entry and submits its transaction; returns the
    /// version before it.
    pub(super) fn append(
        &mut self,
        entry: LogEntry,
        txn: Transaction,
        fx: &mut Effects,
    ) -> Version {
        let prior = self.last_update;
        let version = entry.version;
        assert!(version > prior, "log entry {version} not after {prior}");
        let trimmed = self.log.append(entry);
        assert!(trimmed.to_dups.len() <= 1, "log grew past its bound");
        self.last_update = version;
        self.uncommitted.insert(version, prior);
        fx.store(StoreWrite {
            version,
            txn,
            tag: StoreTag::Entry,
        });
        prior
    }

    pub(super) fn on_sub_write(&mut self, msg: SubWrite, fx: &mut Effects) -> Result<(), Ignored> {
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
                fx.send(msg.from, PgMsg::SubWriteAck(ack));
            }
            return Ok(());
        }
        self.check_sub_write(&msg)?;
        if self.acks_owed.len() >= self.limits.inflight_max {
            return Err(Ignored::ReplicaBusy {
                pending: self.acks_owed.len(),
            });
        }
        let mut txn = self
            .log_txn(msg.ops, &msg.entry)
            .map_err(|e| Ignored::Malformed(e.to_string()))?;
        self.keep_undo(
            &mut txn,
            &msg.entry,
            self.committed_to.max(msg.committed_to),
        );
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
    pub(super) fn applied_before(&self, msg: &SubWrite) -> Option<Version> {
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
    pub(super) fn check_sub_write(&self, msg: &SubWrite) -> Result<(), Ignored> {
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
        self.backend
            .check_sub_write_ops(&msg.entry, self.interval.shard_of(self.whoami), &msg.ops)
            .or_else(malformed)
    }

    pub(super) fn on_sub_write_ack(
        &mut self,
        ack: SubWriteAck,
        fx: &mut Effects,
    ) -> Result<(), Ignored> {
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

    pub(super) fn on_local_committed(
        &mut self,
        version: Version,
        fx: &mut Effects,
    ) -> Result<(), Ignored> {
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
            fx.send(primary, PgMsg::SubWriteAck(ack));
        }
        if let Some(flight) = self.inflight.get_mut(&version) {
            flight.committed_local = true;
            self.release_replies(fx);
        }
        Ok(())
    }

    /// Answers the oldest in-flight writes that are durable everywhere,
    /// stopping at the first that is not, so replies go in version order.
    pub(super) fn release_replies(&mut self, fx: &mut Effects) {
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
            fx.reply(flight.req, reply);
        }
        self.scrub_progress(fx);
    }

    /// The PG is being split (its pool's `pg_num` grew), so this core is
    /// retired: the writes it has in flight are answered with a retry (the
    /// clients resend them to the PG their object now belongs to), and its
    /// reads in progress with `ObjectBusy` (what they read may have moved).
    pub fn retire(&mut self, epoch: Epoch) -> Effects {
        let reason = RetryReason::IntervalChanged { epoch };
        let mut fx = Effects::default();
        for flight in std::mem::take(&mut self.inflight).into_values() {
            fx.reply(flight.req, Reply::Retry { reason });
        }
        self.end_reads(&mut fx);
        fx
    }
}

/// Checks that every op changes `object` (clients write one object per
/// request, and may not touch the PG's metadata keys) and says whether the
/// request ends by removing it.
pub(crate) fn check_ops(object: &Bytes, ops: &[Op]) -> Result<LogKind, InvalidWrite> {
    if ops.is_empty() {
        return Err(InvalidWrite::Store(StoreError::Invalid(
            "no operations".into(),
        )));
    }
    let key = ObjectKey::new(object.clone());
    let mut kind = LogKind::Write;
    for (index, op) in ops.iter().enumerate() {
        match op {
            Op::Clone { .. } | Op::CloneRange { .. } | Op::Rename { .. } => {
                return Err(InvalidWrite::NotObjectOp(index));
            }
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
}

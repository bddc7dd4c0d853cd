//! Peering and activation (docs/reliability.md "Peering"): a new interval,
//! the primary's queries and the copies' answers, the choice of the
//! authoritative history (decided by the pure functions of
//! [`crate::peering`]), temporary acting sets, and every copy's adoption of
//! that history; the dispatch of peer messages.

use super::effects::{Effect, Effects, Ignored, Reply, RetryReason, StoreTag, StoreWrite};
use super::events::{Interval, MapContext};
use super::messages::{Activate, Notify, PgMsg};
use super::{Healing, INFO_KEY, Pg, Phase, missing_key, positions, valid_name};
use crate::limits::{ADOPT_TXN_OPS_MAX, EARLY_MSGS_MAX};
use crate::log::{DupEntry, LogEntry, LogKind, PgLog, Version};
use crate::peering::{
    PeerCopy, PgInfo, blocked_by, choose_auth, choose_auth_rolling_back, log_recoverable,
    missing_objects, missing_objects_with, want_acting,
};
use crate::scrub::ScrubOrder;
use bytes::Bytes;
use cairn_store::{Op, Transaction};
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};

impl Pg {
    /// Moves to a newer interval. In-flight writes are answered `Retry`:
    /// they may or may not be durable on the new acting set, and a resend
    /// is never applied twice because its request id is in the log (peering
    /// settles the entry: it is kept if any copy that peering picks has
    /// it).
    pub(super) fn on_interval_change(
        &mut self,
        interval: Interval,
        fx: &mut Effects,
    ) -> Result<(), Ignored> {
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
            fx.reply(flight.req, Reply::Retry { reason });
        }
        // The old primary no longer waits for these acks.
        self.acks_owed.clear();
        self.interval = interval;
        self.enter_interval(fx);
        Ok(())
    }

    /// Starts the current interval: the primary peers, a stray copy tells
    /// the primary it exists (so it is removed once the PG is clean).
    pub(super) fn enter_interval(&mut self, fx: &mut Effects) {
        // Renewals and delegated reads are of one interval and primary.
        self.leases.new_interval();
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
            fx.send(primary, notify);
        }
    }

    /// This copy as peering sees it.
    pub(super) fn own_copy(&self) -> PeerCopy {
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

    pub(super) fn notify(&self, interval_epoch: Epoch) -> PgMsg {
        self.notify_to(interval_epoch, self.interval.primary.unwrap_or(self.whoami))
    }

    pub(super) fn notify_to(&self, interval_epoch: Epoch, querier: OsdId) -> PgMsg {
        PgMsg::Notify(Notify {
            from: self.whoami,
            interval_epoch,
            copy: self.own_copy(),
            lease: self.leases.report(querier, self.is_active_primary()),
            inconsistent: self.scrub.inconsistent.values().cloned().collect(),
        })
    }

    /// The other OSDs of this interval's acting and up sets.
    pub(super) fn members(&self) -> BTreeSet<OsdId> {
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
    pub(super) fn probe_set(&self) -> BTreeSet<OsdId> {
        self.interval
            .acting
            .iter()
            .chain(self.interval.up.iter())
            .chain(self.context.past.iter().flat_map(|p| p.acting.iter()))
            .copied()
            .filter(|o| *o != self.whoami && self.context.up_osds.contains(o))
            .collect()
    }

    pub(super) fn start_peering(&mut self, fx: &mut Effects) {
        self.leases.new_interval();
        self.leases.bind_own(self.whoami);
        self.leases.bind_delegates(&self.interval.acting);
        let waiting = self.probe_set();
        for osd in &waiting {
            fx.send(*osd, self.query());
        }
        let copies = BTreeMap::from([(self.whoami, self.own_copy())]);
        self.phase = Phase::Peering {
            waiting,
            copies,
            ticks: 0,
        };
        self.try_finish_peering(fx);
    }

    pub(super) fn query(&self) -> PgMsg {
        PgMsg::Query {
            from: self.whoami,
            interval_epoch: self.interval.epoch_started,
        }
    }

    pub(super) fn on_map_context(&mut self, context: MapContext, fx: &mut Effects) {
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
                        fx.send(osd, query.clone());
                    }
                }
                self.try_finish_peering(fx);
            }
            // An OSD that came back may hold what was missing.
            Phase::Incomplete { .. } => self.start_peering(fx),
            _ => {}
        }
    }

    pub(super) fn on_peer(&mut self, msg: PgMsg, fx: &mut Effects) -> Result<(), Ignored> {
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
                fx.send(from, self.notify_to(interval_epoch, from));
                Ok(())
            }
            PgMsg::LeaseRenew {
                from,
                interval_epoch,
                seq,
                delegate,
            } => {
                if !self.sent_by_current_primary(from, interval_epoch) {
                    return Err(ignore(
                        "lease renewal",
                        "not from the active primary".into(),
                    ));
                }
                if self.leases.grant(current, from, seq) {
                    if let Some(delegate) = delegate {
                        self.leases.delegated(delegate);
                    }
                    let ack = PgMsg::LeaseAck {
                        from: self.whoami,
                        interval_epoch,
                        seq,
                    };
                    fx.send(from, ack);
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
                fx.store(StoreWrite {
                    version: self.last_update,
                    txn,
                    tag: StoreTag::BackfillDone(interval_epoch),
                });
                Ok(())
            }
            PgMsg::RollForward {
                from,
                interval_epoch,
                committed_to,
            } => {
                if !self.sent_by_current_primary(from, interval_epoch) {
                    return Err(ignore("roll forward", "not from the active primary".into()));
                }
                // Every version up to it is on this copy too (the primary
                // sends it only once every sub-write was acknowledged).
                self.committed_to = self.committed_to.max(committed_to.min(self.last_update));
                self.roll_forward(fx);
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
                    self.healing.backfilled.insert(from);
                    self.healing.sources.insert(from);
                    self.commit_if_writable();
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
                fx.push(Effect::Purge {
                    interval_epoch: current,
                });
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
                fx.push(Effect::ScrubMap(ScrubOrder {
                    to: from,
                    interval_epoch,
                    chunk,
                    after,
                    through,
                    deep,
                }));
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
    pub(super) fn sent_by_current_primary(&self, from: OsdId, interval_epoch: Epoch) -> bool {
        self.interval.primary == Some(from)
            && interval_epoch == self.interval.epoch_started
            && !matches!(self.phase, Phase::Replica { activated: false })
    }

    pub(super) fn on_notify(&mut self, notify: Notify, fx: &mut Effects) -> Result<(), Ignored> {
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

    /// Decides, once every probed OSD answered: incomplete, ask for another
    /// acting set, or activate with the authoritative history.
    pub(super) fn try_finish_peering(&mut self, fx: &mut Effects) {
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
        let need = self.backend.erasure_k().unwrap_or(1);
        if let Some(reason) =
            blocked_by(&self.context.past, self.context.history_from, &copies, need)
        {
            self.become_incomplete(reason, fx);
            return;
        }
        let auth = if self.backend.erasure_k().is_some() {
            choose_auth_rolling_back(&copies)
        } else {
            choose_auth(&copies)
        };
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
        if let Some(ec) = self.interval.ec.clone() {
            self.finish_peering_positions(&ec, &copies, &auth_log, auth_last, &eligible, fx);
            return;
        }
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
        self.activate(
            &copies,
            &auth_log,
            auth_last,
            &eligible,
            &BTreeSet::new(),
            fx,
        );
        if reordered {
            let temp = (want != self.interval.up).then_some(want);
            self.request_temp(temp, fx);
        }
    }

    /// Peering's end for an erasure-coded PG, whose copies each hold one
    /// position's shard (see [`super::positions`]): each position wants
    /// its up OSD if that holds its shard and can be brought up to date
    /// from the log, else the OSD acting there now if so, else a copy
    /// holding its shard that placement moved elsewhere, else none (a
    /// hole). If that set serves more positions than the acting set, or
    /// as many and more where placement wants them, it asks for it as a
    /// temporary acting set (holes as [`cairn_placement::PG_TEMP_HOLE`],
    /// its primary the first position filled), which serves while the up
    /// OSDs are backfilled. It does so too if the primary cannot be
    /// brought up to date (a backfill fills copies from the primary) and
    /// at least `k` positions are filled, so a PG whose primary's disk
    /// died serves on while the spare placement chose there is filled.
    /// Otherwise the acting set serves as it is, its OSDs that cannot be
    /// brought up to date or that hold another position's shard
    /// backfilled; with fewer than `k` positions the PG is incomplete (no
    /// `k` shards hold the data).
    fn finish_peering_positions(
        &mut self,
        ec: &super::EcShape,
        copies: &BTreeMap<OsdId, PeerCopy>,
        auth_log: &[LogEntry],
        auth_last: Version,
        eligible: &BTreeSet<OsdId>,
        fx: &mut Effects,
    ) {
        let holders: positions::Holders = copies
            .iter()
            .filter(|(o, _)| eligible.contains(*o))
            .map(|(o, c)| {
                let holding = positions::Holding {
                    shard: c.info.shard,
                    complete: missing_objects_with(c, auth_log, true).is_empty(),
                };
                (*o, holding)
            })
            .collect();
        let want = positions::want(&ec.up, &ec.acting, &holders);
        // A member at a position whose shard it does not hold is
        // backfilled with that position's shard (emptied first), like a
        // copy the log cannot bring up to date. So is an up OSD that does
        // not act (the temporary acting set serves its position while it
        // lacks objects): writes go to the acting set only, so a copy
        // recovered from the log would miss them yet pass for one that
        // holds this interval's history, and peering would roll back
        // acknowledged writes to its shorter log.
        let eligible: BTreeSet<OsdId> = eligible
            .iter()
            .filter(|o| {
                let acts = ec.acting.contains(&Some(**o));
                let up_only = !acts && ec.up.contains(&Some(**o));
                !up_only
                    && self
                        .interval
                        .shard_of(**o)
                        .is_none_or(|p| positions::holds(&holders, **o, p as usize))
            })
            .copied()
            .collect();
        let eligible = &eligible;
        // An up OSD that does not act and holds a shard no whole copy in
        // the set holds is kept as it is, a source for recovery, not
        // emptied: it may hold objects the copy acting for its shard
        // lacks (two copies of one shard, each missing writes). It is
        // backfilled in the next interval, once recovery is done.
        let kept: BTreeSet<OsdId> = holders
            .iter()
            .filter(|(o, h)| {
                let up_only = !ec.acting.contains(&Some(**o)) && ec.up.contains(&Some(**o));
                up_only
                    && h.shard.is_some_and(|s| {
                        want.get(s as usize)
                            .copied()
                            .flatten()
                            .is_none_or(|w| holders.get(&w).is_none_or(|h| !h.complete))
                    })
            })
            .map(|(o, _)| *o)
            .collect();
        let filled = want.iter().flatten().count();
        let primary_ok = self.interval.primary.is_some_and(|p| eligible.contains(&p));
        let holes_needed = !primary_ok && filled >= ec.k as usize;
        let better =
            filled >= ec.k as usize && positions::better(&want, &ec.acting, &ec.up, &holders);
        if want != ec.acting && (filled == want.len() || holes_needed || better) {
            let temp = positions::temp(&want, &ec.up);
            self.request_temp(temp, fx);
            self.phase = Phase::WaitingTemp { ticks: 0 };
            return;
        }
        // The acting set as it is must hold k positions that the log can
        // bring up to date: with fewer, the PG could neither decode what
        // it holds nor keep a shorter history from winning the next
        // peering (its lone copies would record the newest activation).
        let serving = ec
            .acting
            .iter()
            .flatten()
            .filter(|o| eligible.contains(o))
            .count();
        if !primary_ok || serving < ec.k as usize {
            self.become_incomplete(
                format!(
                    "{} positions can be brought up to date from the log, {} needed",
                    if primary_ok { serving } else { filled },
                    ec.k
                ),
                fx,
            );
            return;
        }
        self.activate(copies, auth_log, auth_last, eligible, &kept, fx);
    }

    pub(super) fn become_incomplete(&mut self, reason: String, fx: &mut Effects) {
        fx.note(format!("incomplete: {reason}"));
        self.phase = Phase::Incomplete { reason };
    }

    pub(super) fn request_temp(&mut self, temp: Option<Vec<OsdId>>, fx: &mut Effects) {
        if self.healing.temp_requested.as_ref() == Some(&temp) {
            return;
        }
        self.healing.temp_requested = Some(temp.clone());
        fx.push(Effect::pg_temp(temp));
    }

    /// Adopts the authoritative history, tells every peer to do the same
    /// (or to empty itself for a backfill), and records what each lacks.
    /// Members in `kept` are left out of this interval: not activated,
    /// sources for recovery as strays are.
    pub(super) fn activate(
        &mut self,
        copies: &BTreeMap<OsdId, PeerCopy>,
        auth_log: &[LogEntry],
        auth_last: Version,
        eligible: &BTreeSet<OsdId>,
        kept: &BTreeSet<OsdId>,
        fx: &mut Effects,
    ) {
        let epoch = self.interval.epoch_started;
        let members: BTreeSet<OsdId> = self.members().difference(kept).copied().collect();
        let rolls_back = self.backend.erasure_k().is_some();
        // The history adopted counts as committed (roll-back records
        // dropped, retried requests answered as done) only once this
        // interval is active and can take writes (`maybe_active`): a later
        // peering may pass over an interval that never activated or is
        // below min_size (it cannot have accepted writes) and undo the
        // entries it adopted.
        let committed_to = self.committed_to.min(auth_last);
        let mut healing = Healing::default();
        for (osd, copy) in copies {
            if kept.contains(osd) {
                let lacks = missing_objects(copy, auth_log);
                healing.stray_sources.insert(*osd, lacks);
                healing.stray_shards.insert(*osd, copy.info.shard);
                healing.kept.insert(*osd);
            } else if !members.contains(osd) && *osd != self.whoami && copy.info.exists {
                healing.strays.insert(*osd);
                if eligible.contains(osd) && copy.info.complete() {
                    let lacks = missing_objects(copy, auth_log);
                    healing.stray_sources.insert(*osd, lacks);
                    healing.stray_shards.insert(*osd, copy.info.shard);
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
                let missing = missing_objects_with(copy, auth_log, rolls_back);
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
                committed_to,
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
        let own_missing = missing_objects_with(&own, auth_log, rolls_back);
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
        self.committed_to = committed_to;
        self.forwarded_to = committed_to;
        self.healing = healing;
        fx.note(format!(
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
    pub(super) fn adopt(
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
        let mut missing = missing;
        let mut ops = self.roll_back_after(keep_through, backfill, last_update, &mut missing, fx);
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
        // Erasure coding: this copy now holds its position's shard (a
        // backfill fills it with that shard).
        self.info.shard = self.interval.shard_of(self.whoami);
        ops.push(Op::MetaSet {
            key: Bytes::from_static(INFO_KEY),
            value: self.info.encode(),
        });
        let chunks: Vec<Vec<Op>> = ops.chunks(ADOPT_TXN_OPS_MAX).map(<[Op]>::to_vec).collect();
        let count = chunks.len();
        for (index, chunk) in chunks.into_iter().enumerate() {
            let mut txn = Transaction::new(self.collection);
            txn.ops = chunk;
            fx.store(StoreWrite {
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

    /// Erasure coding: undoes this copy's entries after `keep_through`,
    /// newest first, each in a transaction of its own that also drops the
    /// entry and its record (see [`crate::undo`]); an entry without a
    /// record leaves its object in `missing`. Returns the ops that drop
    /// every other record (its entry is kept, so committed), or, for a
    /// `backfill` (whose emptying removed the stashes), all records.
    fn roll_back_after(
        &mut self,
        keep_through: Version,
        backfill: bool,
        last_update: Version,
        missing: &mut BTreeSet<Bytes>,
        fx: &mut Effects,
    ) -> Vec<Op> {
        let mut ops = Vec::new();
        if self.backend.erasure_k().is_none() {
            return ops;
        }
        if !backfill {
            let divergent: Vec<LogEntry> = self
                .log
                .iter()
                .rev()
                .take_while(|e| e.version > keep_through)
                .cloned()
                .collect();
            for entry in divergent {
                match self.undo.remove(&entry.version) {
                    Some(record) => {
                        let mut txn = Transaction::new(self.collection);
                        txn.ops = record.undo_ops();
                        txn.push(Op::MetaRemove {
                            key: crate::undo::undo_key(entry.version),
                        });
                        txn.push(Op::MetaRemove {
                            key: entry.version.log_key(),
                        });
                        fx.note(format!(
                            "rolled back {} of {:?}",
                            entry.version,
                            String::from_utf8_lossy(&entry.object)
                        ));
                        fx.store(StoreWrite {
                            version: last_update,
                            txn,
                            tag: StoreTag::Part,
                        });
                    }
                    None if entry.kind != LogKind::Refused => {
                        missing.insert(entry.object.clone());
                    }
                    None => {}
                }
            }
        }
        for (version, record) in std::mem::take(&mut self.undo) {
            if !backfill {
                ops.extend(record.forward_ops());
            }
            ops.push(Op::MetaRemove {
                key: crate::undo::undo_key(version),
            });
        }
        ops
    }

    pub(super) fn on_activate(&mut self, msg: Activate, fx: &mut Effects) -> Result<(), Ignored> {
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
            fx.send(msg.from, ack);
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

    pub(super) fn park(&mut self, msg: PgMsg) {
        if self.early.len() < EARLY_MSGS_MAX {
            self.early.push(msg);
        }
    }

    pub(super) fn on_committed(&mut self, tag: StoreTag, fx: &mut Effects) {
        match tag {
            StoreTag::Activation(epoch) if epoch == self.interval.epoch_started => {
                if let Phase::Activating { local_done, .. } = &mut self.phase {
                    if !*local_done {
                        // Only now may the peers record this activation.
                        for (osd, msg) in &self.healing.activations {
                            fx.send(*osd, msg.clone());
                        }
                    }
                    *local_done = true;
                    self.maybe_active(fx);
                } else if let (false, Some(primary)) = (self.is_primary(), self.interval.primary) {
                    let ack = PgMsg::Activated {
                        from: self.whoami,
                        interval_epoch: epoch,
                    };
                    fx.send(primary, ack);
                }
            }
            StoreTag::Push(object) => {
                self.local_missing.remove(&object);
                if self.is_primary() {
                    if let Some(osds) = self.healing.missing.get_mut(&object) {
                        osds.remove(&self.whoami);
                        // Replication pulled to this primary and pushes
                        // to the others next; erasure coding's one push
                        // went to all of them at once.
                        if self.backend.erasure_k().is_none() || osds.is_empty() {
                            self.healing.recovering.remove(&object);
                        }
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
                    fx.send(primary, ack);
                }
            }
            StoreTag::BackfillDone(epoch) if epoch == self.interval.epoch_started => {
                if let Some(primary) = self.interval.primary {
                    let ack = PgMsg::BackfillDoneAck {
                        from: self.whoami,
                        interval_epoch: epoch,
                    };
                    fx.send(primary, ack);
                }
            }
            _ => {}
        }
    }

    /// Once the interval can take writes (active, `min_size` complete
    /// acting copies) with none in flight, every acting copy holds the
    /// whole log: it is committed (see `activate`), and the copies roll
    /// it forward when idle. Called on activation and when a backfill
    /// completes a copy (an interval below `min_size` may reach it so).
    pub(super) fn commit_if_writable(&mut self) {
        if matches!(self.phase, Phase::Active)
            && self.inflight.is_empty()
            && self.complete_acting_count() >= self.interval.min_size
        {
            self.committed_to = self.committed_to.max(self.last_update);
        }
    }

    pub(super) fn maybe_active(&mut self, fx: &mut Effects) {
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
        self.commit_if_writable();
        self.renew_lease(fx);
        fx.note(format!("active: {}", self.state_name()));
        self.schedule_recovery(fx);
        self.schedule_backfill(fx);
        self.maybe_clean(fx);
    }
}

/// What is wrong with a history from a peer, if anything: entries must go
/// up strictly, below the last possible sequence, and name valid objects.
pub(super) fn bad_history(entries: &[LogEntry], missing: &[Bytes]) -> Option<String> {
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

/// Whether two OSD lists hold the same OSDs, in any order.
pub(super) fn same_members(a: &[OsdId], b: &[OsdId]) -> bool {
    a.len() == b.len() && a.iter().all(|o| b.contains(o))
}

/// What a copy with `log` keeps and receives to match `auth_log`: it keeps
/// its entries up to the newest version both logs hold, and takes the
/// authoritative entries after it.
pub(super) fn log_delta(log: &[LogEntry], auth_log: &[LogEntry]) -> (Version, Vec<LogEntry>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::PgLimits;
    use crate::log::{LogKind, LogResult, ReqId};
    use crate::pg::{IntervalError, PgEvent};
    use cairn_types::PgId;

    #[test]
    fn stale_or_bad_interval_change_is_ignored() {
        let interval = Interval {
            epoch_started: Epoch(4),
            up: vec![OsdId(1)],
            acting: vec![OsdId(1)],
            primary: Some(OsdId(1)),
            min_size: 1,
            size: 1,
            ec: None,
        };
        let pg = PgId::new(cairn_types::PoolId(1), 0);
        let mut pg = Pg::new(pg, OsdId(1), interval.clone(), PgLimits::default()).expect("valid");
        let fx = pg.handle(PgEvent::IntervalChange(interval.clone()));
        let ignored: Vec<&Ignored> = fx.ignored().collect();
        assert!(matches!(ignored[..], [Ignored::StaleInterval { .. }]));
        let bad = Interval {
            epoch_started: Epoch(5),
            min_size: 0,
            ..interval
        };
        let fx = pg.handle(PgEvent::IntervalChange(bad));
        assert_eq!(
            fx.ignored().collect::<Vec<_>>(),
            vec![&Ignored::BadInterval(IntervalError::MinSizeZero)]
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
            ec: None,
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
            assert!(
                fx.store_writes().next().is_none(),
                "nothing reaches the store"
            );
            let ignored: Vec<&Ignored> = fx.ignored().collect();
            assert!(
                matches!(ignored[..], [Ignored::Malformed(_)]),
                "{ignored:?}"
            );
        }
    }
}

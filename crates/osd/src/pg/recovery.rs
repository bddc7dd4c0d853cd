//! Log-based recovery (docs/reliability.md "Recovery and backfill"): pulls
//! and pushes of objects some copy lacks, clients' objects first, and the
//! removal of stray copies once the PG is clean.

use super::effects::{Effect, Effects, Ignored, StoreTag, StoreWrite};
use super::messages::{PgMsg, Push};
use super::{Healing, Pg, Phase, positions};
use crate::limits::RECOVERY_OPS_MAX;
use crate::log::LogKind;
use crate::scrub::Inconsistency;
use crate::throttle::Priority;
use bytes::Bytes;
use cairn_store::ObjectKey;
use cairn_types::{Epoch, OsdId};
use std::collections::BTreeSet;

impl Pg {
    /// Applies a pushed object: the primary's own recovery (a pull it asked
    /// for), or a replica's recovery or backfill from the primary.
    pub(super) fn on_push(&mut self, push: Push, fx: &mut Effects) -> Result<(), Ignored> {
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
        let txn = self
            .backend
            .push_txn(self.collection, self.interval.shard_of(self.whoami), &push)
            .map_err(|e| ignore(format!("bad object state: {e}")))?;
        fx.store(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Push(push.object),
        });
        Ok(())
    }

    pub(super) fn on_push_ack(&mut self, from: OsdId, object: Bytes, fx: &mut Effects) {
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
    pub(super) fn on_unreadable(&mut self, from: OsdId, object: Bytes, fx: &mut Effects) {
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
            fx.note(format!(
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
    pub(super) fn prioritize(&mut self, object: Bytes, fx: &mut Effects) {
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
    pub(super) fn schedule_recovery(&mut self, fx: &mut Effects) {
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        let whence = Whence {
            up_osds: &self.context.up_osds,
            whoami: self.whoami,
            interval_epoch: self.interval.epoch_started,
            erasure: self
                .backend
                .erasure_k()
                .map(|k| (k, self.interval.acting.as_slice())),
        };
        let healing = &mut self.healing;
        // Priority objects may exceed the bound by one: a client waits.
        while let Some(object) = healing.priority.pop_front() {
            if healing.missing.contains_key(&object) && !healing.recovering.contains_key(&object) {
                start_recovery(healing, &whence, object, true, fx);
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
            start_recovery(healing, &whence, object, false, fx);
        }
    }

    /// Once nothing is missing, backfilled or remapped, removes the strays.
    pub(super) fn maybe_clean(&mut self, fx: &mut Effects) {
        self.next_position_stage(fx);
        if !self.is_clean() {
            return;
        }
        self.healing.stray_sources.clear();
        for stray in std::mem::take(&mut self.healing.strays) {
            let purge = PgMsg::Purge {
                from: self.whoami,
                interval_epoch: self.interval.epoch_started,
            };
            fx.send(stray, purge);
        }
    }

    /// Erasure coding, once nothing is left to recover or backfill: asks
    /// for the acting set of the next stage of a move (see `positions`),
    /// or for the up set once every up OSD holds its position's shard.
    fn next_position_stage(&mut self, fx: &mut Effects) {
        let Some(ec) = &self.interval.ec else {
            return;
        };
        let healing = &self.healing;
        if !matches!(self.phase, Phase::Active)
            || !healing.missing.is_empty()
            || !healing.backfill_targets.is_empty()
            || ec.acting == ec.up
        {
            return;
        }
        if !healing.kept.is_empty() {
            // Recovery no longer needs the copies kept out of this
            // interval: the next one backfills them.
            self.request_temp(None, fx);
            return;
        }
        let mut holders: positions::Holders = healing
            .sources
            .iter()
            .map(|o| {
                let holding = positions::Holding {
                    shard: self.interval.shard_of(*o),
                    complete: true,
                };
                (*o, holding)
            })
            .collect();
        for (osd, lacks) in &healing.stray_sources {
            let holding = positions::Holding {
                shard: healing.stray_shards.get(osd).copied().flatten(),
                complete: lacks.is_empty(),
            };
            holders.entry(*osd).or_insert(holding);
        }
        let want = positions::want(&ec.up, &ec.acting, &holders);
        if want.iter().flatten().count() >= ec.k as usize
            && positions::better(&want, &ec.acting, &ec.up, &holders)
        {
            let temp = positions::temp(&want, &ec.up);
            self.request_temp(temp, fx);
        }
    }

    /// What an erasure-coded rebuild of `object` may read besides the
    /// acting positions, and which version it must rebuild: the strays
    /// that are up and hold the object by their logs (each read whole, as
    /// the shard its metadata names), and the object version of the newest
    /// logged change of it (0: removed, so nothing is read; `None`: not
    /// in the log, as for a backfill, or last refused, where the newest
    /// version `k` shards hold is the current one). A stray's shard of another version (a write it missed, or
    /// one peering rolled back) never seeds the rebuild.
    #[must_use]
    pub fn rebuild_hints(&self, object: &Bytes) -> (Vec<OsdId>, Option<u64>) {
        let need =
            self.log
                .newest_change(object)
                .and_then(|entry| match (entry.kind, entry.result) {
                    (LogKind::Write, crate::log::LogResult::Ok { object_version }) => {
                        Some(object_version)
                    }
                    (LogKind::Remove, crate::log::LogResult::Ok { .. }) => Some(0),
                    // A refused request changed nothing: the version before it
                    // is not at hand.
                    _ => None,
                });
        (
            self.healing.stray_sources_of(&self.context.up_osds, object),
            need,
        )
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
}

/// What recovery starts from: the map and the PG's interval.
pub(super) struct Whence<'a> {
    up_osds: &'a BTreeSet<OsdId>,
    whoami: OsdId,
    interval_epoch: Epoch,
    /// Erasure coding: `k`, and the acting OSDs (each holding its shard).
    erasure: Option<(usize, &'a [OsdId])>,
}

/// Issues the recovery of one object. Replication: a pull from a source
/// if this primary lacks it, else a push to the copies that lack it.
/// Erasure coding: one push to every copy lacking its shard, this primary
/// included, rebuilt by the shell from `k` shards the acting OSDs hold.
/// An object no source holds (or, erasure-coded, with fewer than `k`
/// acting OSDs outside backfill) is marked unfound. `urgent`: a client
/// waits for it.
pub(super) fn start_recovery(
    healing: &mut Healing,
    whence: &Whence<'_>,
    object: Bytes,
    urgent: bool,
    fx: &mut Effects,
) {
    let whoami = whence.whoami;
    let lacking = healing.missing.get(&object).cloned().unwrap_or_default();
    let priority = if urgent {
        Priority::Client
    } else {
        Priority::Degraded
    };
    if let Some((k, acting)) = whence.erasure {
        // Any acting OSD that is not being backfilled may hold a usable
        // shard (one reported unreadable at its position may hold its old
        // position's), and so does a stray whose log says it holds the
        // object (peering may have given its position to a copy the log
        // brings up to date): the shell reads them and finds out.
        let holders = acting
            .iter()
            .filter(|o| !healing.backfill_targets.contains(o) && whence.up_osds.contains(o))
            .count()
            + healing.stray_sources_of(whence.up_osds, &object).len();
        if holders < k {
            healing.unfound.insert(object);
            return;
        }
        fx.push(Effect::Push {
            object: object.clone(),
            targets: lacking.into_iter().collect(),
            priority,
        });
    } else if lacking.contains(&whoami) {
        let source = healing
            .sources
            .iter()
            .find(|o| !lacking.contains(o) && **o != whoami)
            .copied()
            .or_else(|| healing.stray_source(whence.up_osds, &object));
        let Some(source) = source else {
            healing.unfound.insert(object);
            return;
        };
        let pull = PgMsg::Pull {
            from: whoami,
            interval_epoch: whence.interval_epoch,
            object: object.clone(),
        };
        fx.send(source, pull);
    } else {
        fx.push(Effect::Push {
            object: object.clone(),
            targets: lacking.into_iter().collect(),
            priority,
        });
    }
    healing.recovering.insert(object, 0);
}

impl Healing {
    /// The strays that are up and known to hold `object`.
    pub(super) fn stray_sources_of(&self, up_osds: &BTreeSet<OsdId>, object: &[u8]) -> Vec<OsdId> {
        self.stray_sources
            .iter()
            .filter(|(osd, lacks)| up_osds.contains(*osd) && !lacks.contains(object))
            .map(|(osd, _)| *osd)
            .collect()
    }

    /// A stray that is up and known to hold `object` (its copy lacks only
    /// what its log says), to pull the object from when no acting copy has
    /// it.
    pub(super) fn stray_source(&self, up_osds: &BTreeSet<OsdId>, object: &[u8]) -> Option<OsdId> {
        self.stray_sources_of(up_osds, object).into_iter().next()
    }
}

//! Backfill: filling copies the log cannot bring up to date by scanning
//! this copy's objects in hash order and pushing them.

use super::effects::{Effect, Effects, StoreTag, StoreWrite};
use super::messages::PgMsg;
use super::{INFO_KEY, Pg, Phase};
use crate::limits::BACKFILL_PUSHES_MAX;
use crate::peering::want_acting;
use crate::throttle::Priority;
use bytes::Bytes;
use cairn_store::{ObjectKey, Op, Transaction};
use cairn_types::{Epoch, OsdId};
use std::collections::BTreeSet;

impl Pg {
    /// Asks for the next page of objects to backfill, if there are targets,
    /// this copy lacks nothing, and pushes are below their bound.
    pub(super) fn schedule_backfill(&mut self, fx: &mut Effects) {
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
                fx.push(Effect::Scan {
                    after: healing.pushed_through.clone(),
                });
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
                fx.send(*target, done);
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
    pub(super) fn on_backfill_page(&mut self, keys: Vec<ObjectKey>, more: bool, fx: &mut Effects) {
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
            fx.push(Effect::Push {
                object: key.name,
                targets: targets.clone(),
                priority: Priority::Degraded,
            });
        }
        if !more {
            self.healing.scan_done = true;
        }
        self.schedule_backfill(fx);
    }

    /// Every backfill target is complete: ask for the acting set placement
    /// wants, if the temporary one differs.
    pub(super) fn after_backfill(&mut self, fx: &mut Effects) {
        fx.note("backfill complete");
        if self.interval.ec.is_some() {
            // Positions are kept: the next stage of a move (see
            // `positions`) comes once nothing is left to recover.
            self.maybe_clean(fx);
            return;
        }
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
}

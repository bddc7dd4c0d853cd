//! Scrub (see [`crate::scrub`]): the primary's chunk-by-chunk comparison
//! of its copies, the inconsistencies it keeps, and repair through
//! recovery.

use super::effects::{Effect, Effects, Ignored, StoreTag, StoreWrite};
use super::{Pg, valid_name};
use crate::limits::{PARITY_CHECK_TICKS_MAX, STALLED_TICKS};
use crate::scrub::{Inconsistency, ScrubMap, ScrubRun, ScrubStamps, Stage};
use bytes::Bytes;
use cairn_store::{ObjectKey, Op, Transaction};
use cairn_types::OsdId;
use std::collections::{BTreeMap, BTreeSet};

impl Pg {
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

    /// Primary: goes on reporting (and keeps) the inconsistencies another
    /// copy's scrubs found while it was primary, until a repair or a scrub
    /// clears them.
    pub(super) fn take_inconsistencies(&mut self, found: Vec<Inconsistency>, fx: &mut Effects) {
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

    pub(super) fn start_scrub(
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
        fx.note(format!(
            "{} scrub starts{}",
            if deep { "deep" } else { "light" },
            if repair { " (repairing)" } else { "" }
        ));
        fx.push(Effect::ScrubList { after: None });
        Ok(())
    }

    /// The primary's own listing chose the next chunk: up to the last key
    /// listed, or to the end if the collection holds no more.
    pub(super) fn on_scrub_page(&mut self, keys: Vec<ObjectKey>, more: bool, fx: &mut Effects) {
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
    pub(super) fn scrub_progress(&mut self, fx: &mut Effects) {
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

    pub(super) fn ask_scrub_maps(&self, osds: &BTreeSet<OsdId>, fx: &mut Effects) {
        let Some(run) = &self.scrub.run else {
            return;
        };
        for osd in osds {
            let Some(order) = run.order(*osd, self.interval.epoch_started) else {
                return;
            };
            if *osd == self.whoami {
                fx.push(Effect::ScrubMap(order));
            } else {
                fx.send(*osd, crate::scrub::request(self.whoami, &order));
            }
        }
    }

    pub(super) fn on_scrub_map(&mut self, map: ScrubMap, fx: &mut Effects) -> Result<(), Ignored> {
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
            fx.note(format!(
                "scrub: osd.{} holds more objects in a chunk than it could report",
                truncated.from.0
            ));
        }
        let found = self.backend.compare_scrub_maps(&maps, self.whoami);
        // An erasure-coded PG's deep scrub also re-encodes the objects whose
        // shards the maps cannot vouch for, writes to the chunk still held.
        let checks = if run.deep && self.interval.ec.is_some() {
            let positions: BTreeMap<OsdId, u32> = self
                .interval
                .acting
                .iter()
                .filter_map(|osd| self.interval.shard_of(*osd).map(|s| (*osd, s)))
                .collect();
            crate::scrub::parity_checks(&maps, &positions, &found)
        } else {
            Vec::new()
        };
        if !checks.is_empty() {
            run.stage = Stage::Verifying {
                through,
                found,
                ticks: 0,
            };
            fx.push(Effect::VerifyParity {
                chunk: run.chunk,
                checks,
            });
            self.scrub.run = Some(run);
            return Ok(());
        }
        self.conclude_chunk(run, through, found, fx);
        Ok(())
    }

    /// The shell re-encoded the chunk's objects: what it found joins what
    /// the maps showed.
    pub(super) fn on_parity_checked(
        &mut self,
        chunk: u64,
        more: Vec<Inconsistency>,
        fx: &mut Effects,
    ) -> Result<(), Ignored> {
        let Some(mut run) = self.scrub.run.take() else {
            return Err(Ignored::Scrub(
                "a parity check with no scrub under way".into(),
            ));
        };
        if run.chunk != chunk || !matches!(run.stage, Stage::Verifying { .. }) {
            self.scrub.run = Some(run);
            return Err(Ignored::Scrub(format!(
                "a parity check of chunk {chunk}, not the one under way"
            )));
        }
        let Stage::Verifying {
            through, mut found, ..
        } = std::mem::replace(&mut run.stage, Stage::Listing)
        else {
            unreachable!("matched above");
        };
        found.extend(more.into_iter().filter(|f| valid_name(&f.object)));
        self.conclude_chunk(run, through, found, fx);
        Ok(())
    }

    /// Records what a chunk's scrub found (repairing it if asked), clears
    /// what a deep scrub no longer finds, and goes on to the next chunk.
    fn conclude_chunk(
        &mut self,
        mut run: ScrubRun,
        through: Option<ObjectKey>,
        found: Vec<Inconsistency>,
        fx: &mut Effects,
    ) {
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
            fx.note(format!(
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
                fx.push(Effect::ScrubList {
                    after: run.cursor.clone(),
                });
                self.scrub.run = Some(run);
            }
            None => self.finish_scrub(&run, fx),
        }
        if repairs {
            self.schedule_recovery(fx);
        }
    }

    pub(super) fn finish_scrub(&mut self, run: &ScrubRun, fx: &mut Effects) {
        self.scrub.stamps.light_secs = run.started_secs;
        if run.deep {
            self.scrub.stamps.deep_secs = run.started_secs;
        }
        let txn = Transaction::new(self.collection).with(Op::MetaSet {
            key: Bytes::from_static(crate::scrub::STAMPS_KEY),
            value: self.scrub.stamps.encode(),
        });
        fx.store(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        });
        fx.note(format!(
            "{} scrub done: {} objects, {} inconsistent",
            if run.deep { "deep" } else { "light" },
            run.objects,
            run.errors
        ));
    }

    /// Stores a change to the kept inconsistencies (in this copy's
    /// collection, beside its scrub stamps).
    pub(super) fn keep_scrub_state(&self, ops: impl IntoIterator<Item = Op>, fx: &mut Effects) {
        let mut txn = Transaction::new(self.collection);
        txn.ops.extend(ops);
        if txn.ops.is_empty() {
            return;
        }
        fx.store(StoreWrite {
            version: self.last_update,
            txn,
            tag: StoreTag::Part,
        });
    }

    /// Hands an inconsistent object to recovery: the bad copies lack it.
    pub(super) fn repair_object(&mut self, inconsistency: &Inconsistency) {
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
    pub(super) fn on_read_error(&mut self, object: Bytes, error: String, fx: &mut Effects) {
        if !self.is_active_primary() {
            return;
        }
        let lacking = self.healing.missing.get(&object);
        if lacking.is_none_or(|osds| !osds.contains(&self.whoami)) {
            // An acting copy, else a stray known to hold the object (the
            // acting ones may all be backfill targets, empty).
            let source = self
                .healing
                .sources
                .iter()
                .find(|o| **o != self.whoami)
                .copied()
                .or_else(|| self.healing.stray_source(&self.context.up_osds, &object));
            let other_source = source.is_some();
            let inconsistency = Inconsistency {
                object: object.clone(),
                bad: BTreeSet::from([self.whoami]),
                auth: source,
                reason: format!("osd.{}: read error: {error}", self.whoami.0),
            };
            fx.note(format!(
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

    fn give_up_parity_check(&mut self, fx: &mut Effects) {
        let Some(mut run) = self.scrub.run.take() else {
            return;
        };
        let Stage::Verifying { through, found, .. } =
            std::mem::replace(&mut run.stage, Stage::Listing)
        else {
            self.scrub.run = Some(run);
            return;
        };
        fx.note(format!(
            "scrub: the parity check of chunk {} got no answer; going on without it",
            run.chunk
        ));
        self.conclude_chunk(run, through, found, fx);
    }

    /// Resends scrub requests that got no answer.
    pub(super) fn scrub_tick(&mut self, fx: &mut Effects) {
        let resend = match self.scrub.run.as_mut().map(|run| &mut run.stage) {
            Some(Stage::Collecting { waiting, ticks, .. }) => {
                *ticks += 1;
                (*ticks % STALLED_TICKS == 0).then(|| waiting.clone())
            }
            Some(Stage::Draining { .. }) => {
                self.scrub_progress(fx);
                None
            }
            Some(Stage::Verifying { ticks, .. }) => {
                // The shell always answers; should it not (its task died),
                // the chunk goes on without the parity check rather than
                // hold its writes for ever.
                *ticks += 1;
                if *ticks >= PARITY_CHECK_TICKS_MAX {
                    self.give_up_parity_check(fx);
                }
                None
            }
            Some(Stage::Listing) | None => None,
        };
        if let Some(osds) = resend {
            self.ask_scrub_maps(&osds, fx);
        }
    }
}

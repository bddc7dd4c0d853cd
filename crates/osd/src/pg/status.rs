//! What the PG reports: its state as Ceph names it, why it is blocked,
//! healing progress, and its position and history for the shell.

use super::events::Interval;
use super::{Pg, Phase};
use crate::log::{PgLog, Version};
use crate::peering::PgInfo;
use cairn_types::{Epoch, OsdId, PgId};

impl Pg {
    pub(super) fn is_clean(&self) -> bool {
        matches!(self.phase, Phase::Active)
            && self.healing.missing.is_empty()
            && self.healing.backfill_targets.is_empty()
            && !self.remapped()
            && self.interval.acting.len() >= usize::try_from(self.interval.size).unwrap_or(0)
    }

    /// Whether other OSDs act than placement's: the acting set is not the
    /// up set, or, erasure-coded, holds other OSDs than it (the same OSDs
    /// in another order are copies that placement renumbered, each
    /// serving the shard it holds: see `positions`).
    pub(super) fn remapped(&self) -> bool {
        match &self.interval.ec {
            Some(ec) => {
                let mut acting: Vec<OsdId> = ec.acting.iter().flatten().copied().collect();
                let mut up: Vec<OsdId> = ec.up.iter().flatten().copied().collect();
                acting.sort_unstable();
                up.sort_unstable();
                acting != up
            }
            None => self.interval.acting != self.interval.up,
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
        let remapped = self.remapped();
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

    /// Whether this OSD serves client ops for the PG now.
    #[must_use]
    pub fn is_active_primary(&self) -> bool {
        self.is_primary() && matches!(self.phase, Phase::Active)
    }

    /// Whether this copy is a replica its primary activated in the
    /// current interval (it holds the interval's history).
    #[must_use]
    pub fn is_activated_replica(&self) -> bool {
        !self.is_primary() && matches!(self.phase, Phase::Replica { activated: true })
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

    /// The stash objects this copy keeps for roll-back (erasure coding):
    /// not the clients', but they take space until rolled forward.
    pub fn stashes(&self) -> impl Iterator<Item = cairn_store::ObjectKey> + '_ {
        self.undo
            .values()
            .filter(|record| record.has_stash())
            .map(crate::undo::UndoRecord::stash)
            .chain(self.dropped_stashes.iter().flatten().cloned())
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
}

//! Serving reads: the primary's read leases (see [`crate::lease`]) and
//! whether an object may be read now.

use super::Pg;
use super::effects::Effects;
use super::messages::PgMsg;
use crate::log::LogKind;

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
    pub(super) fn renew_lease(&mut self, fx: &mut Effects) {
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
                fx.send(*osd, renew);
            }
        }
    }

    /// Whether this copy lacks `object` (a read must wait for recovery).
    #[must_use]
    pub fn lacks(&self, object: &[u8]) -> bool {
        self.backend
            .read_waits_for_recovery(&self.local_missing, object)
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

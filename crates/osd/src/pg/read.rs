//! Serving reads: the primary's read leases (see [`crate::lease`]) and
//! the read path's decisions.
//!
//! A client read is two events around the shell's store read:
//! [`PgEvent::ClientRead`](super::PgEvent::ClientRead) asks to read; the
//! core answers `ObjectBusy` at once if this copy lacks the object (and
//! puts it first in recovery), or waits while a write to the object is in
//! flight (admitted, not yet durable on the acting set: a read that
//! returned it would have seen a value that may never exist), up to
//! [`READ_WAIT_FOR_WRITE_MAX`], then asks the shell to read
//! ([`Effect::Read`]). The store read runs apart from the core, so a write
//! admitted meanwhile may be in what it read, and a new interval may have
//! ended in-flight writes without making them durable:
//! [`PgEvent::ReadDone`](super::PgEvent::ReadDone) answers `Deliver` only
//! if the read still stands (same interval, lease held, no write to the
//! object in flight), else `ObjectBusy`; a corrupt copy is recovered from
//! another while the client retries.

use super::Pg;
use super::effects::{Effect, Effects, ReadAnswer};
use super::events::ReadId;
use super::messages::PgMsg;
use crate::limits::{READ_WAIT_FOR_WRITE_MAX, READS_PENDING_MAX};
use crate::log::LogKind;
use bytes::Bytes;
use cairn_types::Epoch;

/// A client read the core has not answered yet.
#[derive(Debug)]
pub(super) struct PendingRead {
    /// The object (empty: a listing).
    object: Bytes,
    /// The interval the read began in; it stands only in that one.
    started: Epoch,
    /// When it began (the shell's clock), for the wait's bound.
    since_ms: u64,
    /// Whether the shell is reading the store for it.
    running: bool,
}

impl Pg {
    /// The shell's clock, in milliseconds, set before each event.
    pub fn set_clock(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        self.leases.set_clock(now_ms);
    }

    pub(super) fn on_client_read(&mut self, read: ReadId, object: Bytes, fx: &mut Effects) {
        if self.reads.len() >= READS_PENDING_MAX || self.reads.contains_key(&read) {
            fx.push(Effect::ReadAnswer {
                read,
                answer: ReadAnswer::Busy,
            });
            return;
        }
        if !object.is_empty() && self.lacks(&object) {
            // Recovery brings it first; the client retries meanwhile.
            self.prioritize(object, fx);
            fx.push(Effect::ReadAnswer {
                read,
                answer: ReadAnswer::Busy,
            });
            return;
        }
        let pending = PendingRead {
            object,
            started: self.interval.epoch_started,
            since_ms: self.now_ms,
            running: false,
        };
        self.reads.insert(read, pending);
    }

    /// After every event: reads waiting for their object's writes start
    /// once none is in flight, and give up (`ObjectBusy`) when their
    /// interval ended or the wait passed its bound.
    pub(super) fn move_reads(&mut self, fx: &mut Effects) {
        if self.reads.values().all(|r| r.running) {
            return;
        }
        let wait_max = u64::try_from(READ_WAIT_FOR_WRITE_MAX.as_millis()).unwrap_or(u64::MAX);
        let mut ended = Vec::new();
        let mut start = Vec::new();
        for (read, pending) in &self.reads {
            if pending.running {
                continue;
            }
            if pending.started != self.interval.epoch_started
                || self.now_ms.saturating_sub(pending.since_ms) >= wait_max
            {
                ended.push(*read);
            } else if pending.object.is_empty() || !self.object_in_flight(&pending.object) {
                start.push(*read);
            }
        }
        for read in start {
            if let Some(pending) = self.reads.get_mut(&read) {
                pending.running = true;
            }
            fx.push(Effect::Read { read });
        }
        for read in ended {
            self.reads.remove(&read);
            fx.push(Effect::ReadAnswer {
                read,
                answer: ReadAnswer::Busy,
            });
        }
    }

    /// Answers every read in progress `ObjectBusy` (the core is retired).
    pub(super) fn end_reads(&mut self, fx: &mut Effects) {
        for read in std::mem::take(&mut self.reads).into_keys() {
            fx.push(Effect::ReadAnswer {
                read,
                answer: ReadAnswer::Busy,
            });
        }
    }

    pub(super) fn on_read_done(&mut self, read: ReadId, corrupt: Option<String>, fx: &mut Effects) {
        let Some(pending) = self.reads.remove(&read).filter(|p| p.running) else {
            fx.push(Effect::ReadAnswer {
                read,
                answer: ReadAnswer::Busy,
            });
            return;
        };
        let answer = match corrupt {
            Some(why) if !pending.object.is_empty() => {
                // A pool of one copy has nothing to wait for; otherwise
                // another copy replaces this one (also while the others
                // are down: they come back).
                let repairable = self.has_other_source() || self.interval.size > 1;
                self.on_read_error(pending.object, why.clone(), fx);
                if repairable {
                    ReadAnswer::Busy
                } else {
                    ReadAnswer::Corrupt(why)
                }
            }
            // Not only data: a "not found" or a failed guard read from a
            // state that no longer stands is no answer either (simulator
            // seed 36: a read overtaken by a split found its object moved
            // to the child PG, and answered "not found").
            _ if !self.read_stands(&pending) => ReadAnswer::Busy,
            _ => ReadAnswer::Deliver,
        };
        fx.push(Effect::ReadAnswer { read, answer });
    }

    /// Whether what a read got from the store may be returned: this OSD
    /// still may serve reads of the PG in the interval the read began in,
    /// and no write to the object is in flight.
    fn read_stands(&self, pending: &PendingRead) -> bool {
        self.may_serve_reads(self.now_ms)
            && self.interval.epoch_started == pending.started
            && (pending.object.is_empty() || !self.object_in_flight(&pending.object))
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
        // Direct shard reads are delegated to the acting copies, which
        // take every write of the interval (each declines objects it
        // lacks: see `serves_direct_read`).
        let delegating = self.interval.ec.is_some();
        let replicas: Vec<_> = self
            .interval
            .acting
            .iter()
            .copied()
            .filter(|o| *o != self.whoami)
            .collect();
        for &osd in &replicas {
            let delegate = if delegating {
                self.leases.delegation(osd, replicas.iter().copied())
            } else {
                None
            };
            let renew = PgMsg::LeaseRenew {
                from: self.whoami,
                interval_epoch: self.interval.epoch_started,
                seq,
                delegate,
            };
            fx.send(osd, renew);
        }
    }

    /// Whether this copy may serve a direct read of shard `shard` of
    /// `object` at `now_ms` (erasure coding; docs/erasure-coding.md,
    /// "Direct shard reads"): it acts at that position and holds that
    /// shard; it holds a read lease (the primary its own; a replica one
    /// the primary delegated, which ends before the primary's); it does
    /// not lack the object (recovery owes it); and
    /// no write to the object is logged here above `committed_to` (one
    /// that may still roll back). The shell asks again after its store
    /// read, so what it read was committed and current at that moment.
    ///
    /// # Errors
    /// Why not, for the client, which then asks the primary.
    pub fn serves_direct_read(&self, shard: u32, object: &[u8], now_ms: u64) -> Result<(), String> {
        if self.interval.ec.is_none() {
            return Err("not an erasure-coded PG".into());
        }
        if self.interval.osd_at(shard) != Some(self.whoami) || self.info.shard != Some(shard) {
            return Err(format!("this OSD does not serve shard {shard}"));
        }
        let leased = if self.is_active_primary() {
            self.leases.enabled() && self.may_serve_reads(now_ms)
        } else {
            self.is_activated_replica() && self.leases.serves_direct(now_ms)
        };
        if !leased {
            return Err("no read lease for direct reads".into());
        }
        if self.info.backfilling || self.lacks(object) {
            return Err("this copy lacks the object".into());
        }
        if self.object_unsettled(object) {
            return Err("a write to the object is not yet committed".into());
        }
        Ok(())
    }

    /// Whether this copy lacks `object` (a read must wait for recovery).
    #[must_use]
    pub fn lacks(&self, object: &[u8]) -> bool {
        self.backend
            .read_waits_for_recovery(&self.local_missing, object)
    }

    /// The copies known to lack `object` (recovery owes them it) or that
    /// are being backfilled: an erasure-coded read does not ask them for
    /// their shard.
    #[must_use]
    pub fn copies_lacking(&self, object: &[u8]) -> std::collections::BTreeSet<cairn_types::OsdId> {
        let mut lacking = self
            .healing
            .missing
            .get(object)
            .cloned()
            .unwrap_or_default();
        lacking.extend(self.healing.backfill_targets.iter().copied());
        lacking
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

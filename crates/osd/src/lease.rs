//! Read leases (DESIGN.md "Read"): a primary serves reads only while every
//! replica of its acting set has recently promised not to help another
//! primary take over, so a primary cut off from its replicas stops serving
//! reads before a new primary can accept writes.
//!
//! - The primary renews about every second, numbering each renewal and
//!   noting when it sent it. A replica that takes a renewal from the primary
//!   of its current interval promises, on its own clock, not to let a newer
//!   primary activate until `receipt + lease`, and acknowledges.
//! - The primary may read until `send time + lease` of the oldest of its
//!   replicas' latest acknowledged renewals: its send time is before their
//!   receipt, so its lease ends before any replica's promise does, whatever
//!   the clocks' offsets (only their rates are assumed equal).
//! - A replica that moves to a newer interval takes no renewal of the old
//!   one, so the old primary's lease runs out within `lease` of the first
//!   replica moving. A new primary learns, in each peer's answer to its
//!   query (and from its own promise), how long the promises it may break
//!   still run, and does not activate (take writes or serve reads) before
//!   they end, unless the promise's holder answered too and said it no
//!   longer serves.
//! - A copy loaded at start may have promised before its OSD stopped: it
//!   promises to an unknown holder for what may remain of such a promise
//!   (the shell knows how long the OSD was down; see `daemon.rs`).
//!
//! - Direct shard reads (erasure coding): a renewal may delegate reading
//!   to the replica. The primary sends, with renewal `n`, the number `a`
//!   of the replica's latest acknowledged renewal and `serve_ms`, how long
//!   it may itself still read from the moment it sends `n`. The replica
//!   took renewal `a` before acknowledging it, and the primary had that
//!   acknowledgement before sending `n`; so the replica's receipt of `a`
//!   plus `serve_ms` (less the clock drift) ends before the primary's own
//!   lease, on any clocks whose rates agree within the bound below.
//!
//! Times are milliseconds of a clock the shell sets before each event
//! ([`Leases::set_clock`]); leases are off until the shell enables them.
//!
//! Clocks: the shell uses a monotonic clock, so wall-clock steps (NTP, an
//! operator's `date`) change nothing. Two OSDs' clocks may run at slightly
//! different rates; every conversion between them gives away
//! [`CLOCK_RATE_DRIFT_PPM_MAX`]: the primary stops reading that much
//! before its replicas' promises end on its own clock, and a new primary
//! waits that much longer than a promise's holder reported. Clocks whose
//! rates differ by more than that (1%, against the 0.01% of a crystal and
//! the 0.05% NTP slews at most) are outside the failure model
//! (docs/reliability.md, "Clocks").

use crate::limits::{
    ALIVE_INTERVAL_MS, BOOT_CLOCK_RESOLUTION_MS, CLOCK_RATE_DRIFT_PPM_MAX, LEASE_MS,
    LEASE_RENEWALS_KEPT,
};
use cairn_proto::peer::LeaseReport;
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What `span_ms` on one OSD's clock may shrink to on another's.
fn drift_ms(span_ms: u64) -> u64 {
    span_ms
        .saturating_mul(CLOCK_RATE_DRIFT_PPM_MAX)
        .div_ceil(1_000_000)
}

/// What a copy promised, and to whom (`None`: unknown, after a restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Promise {
    interval: Epoch,
    holder: Option<OsdId>,
    until_ms: u64,
}

/// A copy's lease state, as grantor and (on the primary) as holder.
#[derive(Clone, Debug, Default)]
pub struct Leases {
    lease_ms: Option<u64>,
    clock_ms: u64,
    seq: u64,
    /// Renewals sent: (number, send time).
    sent: VecDeque<(u64, u64)>,
    /// Replica -> send time of its latest acknowledged renewal.
    acked: BTreeMap<OsdId, u64>,
    /// Replica -> number of its latest acknowledged renewal.
    acked_seq: BTreeMap<OsdId, u64>,
    /// Replica: renewals of this interval's primary taken, (number,
    /// receipt time).
    granted: VecDeque<(u64, u64)>,
    /// Replica: until when it may serve direct shard reads.
    delegated_until_ms: u64,
    /// Primary: replica -> until when the direct-read window it delegated
    /// to it may run (kept across intervals: a delegate may not have moved
    /// on yet).
    delegated_to: BTreeMap<OsdId, u64>,
    promise: Option<Promise>,
    /// New primary: holder -> end of a promise that binds this interval.
    waits: BTreeMap<Option<OsdId>, u64>,
    /// Holders that answered this interval's query and no longer serve.
    released: BTreeSet<OsdId>,
}

impl Leases {
    /// Turns leases on; `bound_ms`: how long a promise this copy may have
    /// made before a restart can still run (0: none).
    pub fn enable(&mut self, lease_ms: u64, bound_ms: u64) {
        self.lease_ms = Some(lease_ms);
        if bound_ms > 0 {
            self.promise = Some(Promise {
                interval: Epoch(0),
                holder: None,
                until_ms: self.clock_ms.saturating_add(bound_ms),
            });
        }
    }

    #[must_use]
    pub fn enabled(&self) -> bool {
        self.lease_ms.is_some()
    }

    /// The shell's clock; it never goes back.
    pub fn set_clock(&mut self, now_ms: u64) {
        self.clock_ms = self.clock_ms.max(now_ms);
    }

    #[must_use]
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// A new interval: this copy holds no lease in it yet.
    pub fn new_interval(&mut self) {
        self.sent.clear();
        self.acked.clear();
        self.acked_seq.clear();
        self.granted.clear();
        self.delegated_until_ms = 0;
        self.waits.clear();
        self.released.clear();
    }

    /// Primary: the number of a renewal to send now (`None`: leases off).
    pub fn renew(&mut self) -> Option<u64> {
        self.lease_ms?;
        self.seq += 1;
        if self.sent.len() == LEASE_RENEWALS_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back((self.seq, self.clock_ms));
        Some(self.seq)
    }

    /// Primary: `from` acknowledged renewal `seq`.
    pub fn acked(&mut self, from: OsdId, seq: u64) {
        if let Some((_, at)) = self.sent.iter().find(|(s, _)| *s == seq) {
            let entry = self.acked.entry(from).or_insert(0);
            *entry = (*entry).max(*at);
            let entry = self.acked_seq.entry(from).or_insert(0);
            *entry = (*entry).max(seq);
        }
    }

    /// Primary: when its lease ends (`None`: it does not hold one now, or
    /// leases are off and nothing bounds its reads).
    fn readable_until(
        &self,
        now_ms: u64,
        replicas: impl IntoIterator<Item = OsdId>,
    ) -> Option<u64> {
        let lease = self.lease_ms?;
        let now_ms = now_ms.max(self.clock_ms);
        // The replicas' promises run `lease` on their clocks, which may run
        // faster than this one.
        let readable_ms = lease - drift_ms(lease);
        let mut until = u64::MAX;
        for r in replicas {
            until = until.min(self.acked.get(&r)?.saturating_add(readable_ms));
        }
        (until > now_ms).then_some(until)
    }

    /// Primary: whether it may serve reads now, with these replicas.
    #[must_use]
    pub fn readable(&self, now_ms: u64, replicas: impl IntoIterator<Item = OsdId>) -> bool {
        self.lease_ms.is_none() || self.readable_until(now_ms, replicas).is_some()
    }

    /// Primary, sending a renewal now: what it delegates to `replica` for
    /// direct shard reads, `(acked_seq, serve_ms)` (`None`: nothing, as
    /// the replica acknowledged no renewal yet or the primary holds no
    /// lease).
    pub fn delegation(
        &mut self,
        replica: OsdId,
        replicas: impl IntoIterator<Item = OsdId>,
    ) -> Option<(u64, u64)> {
        let acked_seq = *self.acked_seq.get(&replica)?;
        let until = self.readable_until(self.clock_ms, replicas)?;
        let entry = self.delegated_to.entry(replica).or_insert(0);
        *entry = (*entry).max(until);
        Some((acked_seq, until - self.clock_ms))
    }

    /// Whether a direct-read window this copy delegated may still run.
    fn delegating(&self) -> bool {
        self.delegated_to
            .values()
            .any(|until| *until > self.clock_ms)
    }

    /// New primary, starting an interval with `acting`: a copy it
    /// delegated direct reads to that does not act in it (and so gets none
    /// of its writes) may serve reads until its window ends, unless it
    /// answers the query (then it has moved on): activation waits.
    pub fn bind_delegates(&mut self, acting: &[OsdId]) {
        let clock = self.clock_ms;
        self.delegated_to.retain(|_, until| *until > clock);
        let running: Vec<(OsdId, u64)> = self
            .delegated_to
            .iter()
            .filter(|(osd, _)| !acting.contains(osd))
            .map(|(osd, until)| (*osd, until - clock))
            .collect();
        for (osd, remaining_ms) in running {
            self.note(Some(osd), remaining_ms);
        }
    }

    /// Replica: the primary of `interval` renewed (renewal `seq`);
    /// promises and says whether to acknowledge.
    pub fn grant(&mut self, interval: Epoch, primary: OsdId, seq: u64) -> bool {
        let Some(lease) = self.lease_ms else {
            return false;
        };
        if self.granted.len() == LEASE_RENEWALS_KEPT {
            self.granted.pop_front();
        }
        self.granted.push_back((seq, self.clock_ms));
        let until_ms = self.clock_ms.saturating_add(lease);
        // An unexpired promise to someone else is not shortened.
        let keep_other = self
            .promise
            .is_some_and(|p| p.holder != Some(primary) && p.until_ms >= until_ms);
        if !keep_other {
            self.promise = Some(Promise {
                interval,
                holder: Some(primary),
                until_ms,
            });
        }
        true
    }

    /// Replica: the primary delegated direct shard reads with a renewal
    /// (see [`Leases::delegation`]). A renewal this copy does not recall
    /// taking delegates nothing.
    pub fn delegated(&mut self, (acked_seq, serve_ms): (u64, u64)) {
        if let Some((_, took_ms)) = self.granted.iter().find(|(s, _)| *s == acked_seq) {
            // The primary's clock may run slower than this one.
            let until = took_ms
                .saturating_add(serve_ms)
                .saturating_sub(drift_ms(serve_ms));
            self.delegated_until_ms = self.delegated_until_ms.max(until);
        }
    }

    /// Replica: whether it may serve direct shard reads at `now_ms`.
    #[must_use]
    pub fn serves_direct(&self, now_ms: u64) -> bool {
        self.lease_ms.is_some() && self.delegated_until_ms > now_ms.max(self.clock_ms)
    }

    /// What this copy tells a new primary (`querier`) about its promise.
    #[must_use]
    pub fn report(&self, querier: OsdId, serving: bool) -> LeaseReport {
        let running = self
            .promise
            .filter(|p| p.until_ms > self.clock_ms && p.holder != Some(querier));
        // A primary whose delegates may still read is serving: a new
        // primary must wait out the promises made to it, which outlast
        // every window it delegated.
        LeaseReport {
            holder: running.map(|p| p.holder),
            remaining_ms: running.map_or(0, |p| p.until_ms - self.clock_ms),
            serving: serving || self.delegating(),
        }
    }

    /// New primary: this copy's own promise binds the interval it starts.
    pub fn bind_own(&mut self, whoami: OsdId) {
        let report = self.report(whoami, false);
        if let Some(holder) = report.holder {
            // Measured on this clock: nothing to convert.
            self.note(holder, report.remaining_ms);
        }
    }

    /// New primary: a peer's answer.
    pub fn peer_report(&mut self, from: OsdId, report: LeaseReport) {
        if !report.serving {
            self.released.insert(from);
        }
        if let Some(holder) = report.holder {
            // Reported on the peer's clock, which may run slower than this one.
            let remaining_ms = report
                .remaining_ms
                .saturating_add(drift_ms(report.remaining_ms));
            self.note(holder, remaining_ms);
        }
    }

    fn note(&mut self, holder: Option<OsdId>, remaining_ms: u64) {
        let until = self.clock_ms.saturating_add(remaining_ms);
        let entry = self.waits.entry(holder).or_insert(0);
        *entry = (*entry).max(until);
    }

    /// New primary: how long it must still wait before activating.
    #[must_use]
    pub fn wait_ms(&self) -> u64 {
        self.waits
            .iter()
            .filter(|(holder, _)| holder.is_none_or(|h| !self.released.contains(&h)))
            .map(|(_, until)| until.saturating_sub(self.clock_ms))
            .max()
            .unwrap_or(0)
    }
}

/// A moment on the machine's boot clock (`CLOCK_BOOTTIME`: monotonic,
/// counts suspend, untouched by wall-clock steps), named by the kernel's
/// boot id so moments of different boots never compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliveStamp {
    pub boot_id: String,
    pub uptime_ms: u64,
}

impl AliveStamp {
    /// `BOOT_ID UPTIME_MS`, the uptime fixed-width so rewriting in place
    /// never leaves a longer old tail.
    #[must_use]
    pub fn encode(&self) -> String {
        format!("{} {:020}\n", self.boot_id, self.uptime_ms)
    }

    #[must_use]
    pub fn decode(text: &str) -> Option<AliveStamp> {
        let (boot_id, uptime) = text.trim().split_once(' ')?;
        Some(AliveStamp {
            boot_id: boot_id.to_owned(),
            uptime_ms: uptime.parse().ok()?,
        })
    }
}

/// How long read-lease promises an earlier instance of this OSD made may
/// still run, from the last moment it was recorded alive (`last`) and now.
/// Promises are made only while the alive record is kept at most
/// [`ALIVE_INTERVAL_MS`] old, so they end within a lease of the record
/// plus that. Only a record of this boot counts: the record is not synced,
/// and within one boot the page cache survives the process, so a newer
/// record is never lost; a kernel crash or power loss changes the boot id,
/// and then (or with no readable record, or no boot clock) the whole
/// bound applies. Wall-clock steps cannot shorten it.
#[must_use]
pub fn restart_lease_bound_ms(last: Option<&AliveStamp>, now: Option<&AliveStamp>) -> u64 {
    let full_ms = LEASE_MS + ALIVE_INTERVAL_MS + BOOT_CLOCK_RESOLUTION_MS;
    match (last, now) {
        (Some(last), Some(now))
            if last.boot_id == now.boot_id && last.uptime_ms <= now.uptime_ms =>
        {
            full_ms.saturating_sub(now.uptime_ms - last.uptime_ms)
        }
        _ => full_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: OsdId = OsdId(1);
    const R: OsdId = OsdId(2);
    const NEW: OsdId = OsdId(3);

    fn enabled(clock: u64) -> Leases {
        let mut l = Leases::default();
        l.set_clock(clock);
        l.enable(4_000, 0);
        l
    }

    #[test]
    fn the_primary_reads_only_while_every_replica_acknowledged_recently() {
        let mut primary = enabled(10_000);
        assert!(
            !primary.readable(10_000, [R, NEW]),
            "nothing acknowledged yet"
        );
        let seq = primary.renew().expect("enabled");
        primary.acked(R, seq);
        assert!(
            !primary.readable(10_000, [R, NEW]),
            "one replica is not enough"
        );
        primary.acked(NEW, seq);
        assert!(primary.readable(10_000, [R, NEW]));
        assert!(primary.readable(13_959, [R, NEW]));
        // The clock of the last event stays at 10 s (a cut-off primary
        // hears little): the caller's time decides.
        assert!(
            !primary.readable(13_960, [R, NEW]),
            "lease ran out (less the 40 ms a faster replica clock may take)"
        );
        primary.set_clock(14_000);
        assert!(
            !primary.readable(13_000, [R, NEW]),
            "never earlier than the last event"
        );
        assert!(
            primary.readable(14_000, []),
            "no replica: nothing to promise"
        );
        let unknown = primary.renew().expect("enabled") + 100;
        primary.acked(R, unknown);
        assert!(
            !primary.readable(14_000, [R]),
            "acks of unknown renewals count for nothing"
        );
    }

    #[test]
    fn the_replica_promise_outlasts_the_primary_lease() {
        // The primary sends at its 10 s; the replica's clock is far off
        // and the message takes 300 ms.
        let mut primary = enabled(10_000);
        let seq = primary.renew().expect("enabled");
        let mut replica = enabled(500_000);
        replica.set_clock(500_300);
        assert!(replica.grant(Epoch(5), P, 1));
        primary.set_clock(10_400);
        primary.acked(R, seq);
        // Both clocks advance 3.5 s: the primary's lease has 100 ms left;
        // the replica tells a new primary of 400 ms.
        primary.set_clock(13_900);
        replica.set_clock(503_800);
        assert!(primary.readable(13_900, [R]));
        let report = replica.report(NEW, false);
        assert_eq!(report.holder, Some(Some(P)));
        assert_eq!(report.remaining_ms, 500);
        let mut new = enabled(70_000);
        new.new_interval();
        new.peer_report(R, report);
        assert_eq!(new.wait_ms(), 505, "500 ms and 1% for a slower clock");
        new.set_clock(70_505);
        assert_eq!(new.wait_ms(), 0);
    }

    #[test]
    fn a_replica_clock_running_fast_still_outlasts_the_primary_lease() {
        // Real time = the primary's clock; the replica's clock runs 0.9%
        // fast and the renewal arrives at once. The replica's promise
        // (4,000 ms on its clock) ends at real 4,000 / 1.009 = 3,964.3 ms.
        let mut primary = enabled(0);
        let seq = primary.renew().expect("enabled");
        primary.acked(R, seq);
        let promise_end_real_ms = 4_000.0 / 1.009;
        let last_readable_ms = (0..5_000)
            .rev()
            .find(|&t| primary.readable(t, [R]))
            .expect("readable at first");
        assert!(
            (last_readable_ms as f64) < promise_end_real_ms,
            "the primary read at {last_readable_ms} ms, after the promise ended at {promise_end_real_ms:.1} ms"
        );
        // A new primary whose clock runs 0.9% fast waits out a promise
        // reported by a holder whose clock is accurate.
        let mut replica = enabled(0);
        replica.grant(Epoch(5), P, 1);
        let mut new = enabled(0);
        new.new_interval();
        new.peer_report(R, replica.report(NEW, false));
        let waited_real_ms = new.wait_ms() as f64 / 1.009;
        assert!(
            waited_real_ms >= 4_000.0 * 0.999,
            "waited {waited_real_ms:.1} ms"
        );
    }

    #[test]
    fn a_delegated_window_ends_before_the_primary_lease() {
        // Real time = the primary's clock. The replica's clock is far off
        // and runs 0.9% slow (the direction in which a window measured on
        // the primary's clock would outlast it); messages take 200 ms.
        let replica_clock = |real_ms: u64| 900_000 + real_ms * 991 / 1000;
        let mut primary = enabled(0);
        let mut replica = enabled(replica_clock(0));
        assert_eq!(primary.delegation(R, [R]), None, "nothing acknowledged");
        let first = primary.renew().expect("enabled");
        replica.set_clock(replica_clock(200));
        assert!(replica.grant(Epoch(5), P, first));
        primary.set_clock(400);
        primary.acked(R, first);
        // The next renewal, a second later, delegates.
        primary.set_clock(1_000);
        let second = primary.renew().expect("enabled");
        let delegate = primary
            .delegation(R, [R])
            .expect("the primary holds a lease");
        assert_eq!(delegate.0, first);
        replica.set_clock(replica_clock(1_200));
        assert!(replica.grant(Epoch(5), P, second));
        replica.delegated(delegate);
        assert!(replica.serves_direct(replica_clock(1_200)));
        let primary_last_ms = (0..10_000)
            .rev()
            .find(|&t| primary.readable(t, [R]))
            .expect("readable");
        let replica_last_ms = (0..10_000)
            .rev()
            .find(|&t| replica.serves_direct(replica_clock(t)))
            .expect("serves");
        assert!(
            replica_last_ms < primary_last_ms,
            "the replica served until {replica_last_ms} ms, the primary's lease ended at {primary_last_ms} ms"
        );
        // The primary moves to a new interval: while a window it delegated
        // may run, it tells a new primary it serves, so the new primary
        // waits out the promises made to it.
        primary.new_interval();
        assert!(primary.report(NEW, false).serving);
        // Or, primary again in an interval without the delegate, it waits
        // for the window to end (unless the delegate answers: it moved on).
        primary.bind_delegates(&[P]);
        assert!(primary.wait_ms() > 0);
        assert!(primary.wait_ms() < 4_000);
        let mut answered = primary.clone();
        answered.peer_report(R, LeaseReport::default());
        assert_eq!(answered.wait_ms(), 0);
        let mut with_it = primary.clone();
        with_it.new_interval();
        with_it.bind_delegates(&[P, R]);
        assert_eq!(
            with_it.wait_ms(),
            0,
            "a delegate that acts gets every write"
        );
        primary.set_clock(primary_last_ms + 1);
        assert!(!primary.report(NEW, false).serving);
        assert_eq!(primary.wait_ms(), 0);
        // A renewal the replica never took delegates nothing; a new
        // interval ends the window.
        let mut other = enabled(0);
        other.delegated((99, 3_000));
        assert!(!other.serves_direct(0));
        replica.new_interval();
        assert!(!replica.serves_direct(replica_clock(1_200)));
        let mut off = Leases::default();
        off.delegated((1, 3_000));
        assert!(!off.serves_direct(0), "leases off: no direct reads");
    }

    #[test]
    fn the_restart_bound_counts_only_time_of_the_same_boot() {
        let full = LEASE_MS + ALIVE_INTERVAL_MS + BOOT_CLOCK_RESOLUTION_MS;
        let stamp = |boot: &str, uptime_ms| AliveStamp {
            boot_id: boot.to_owned(),
            uptime_ms,
        };
        let now = Some(stamp("b1", 60_000));
        assert_eq!(restart_lease_bound_ms(None, now.as_ref()), full);
        assert_eq!(
            restart_lease_bound_ms(Some(&stamp("b1", 59_000)), None),
            full
        );
        assert_eq!(
            restart_lease_bound_ms(Some(&stamp("b1", 58_000)), now.as_ref()),
            full - 2_000
        );
        assert_eq!(
            restart_lease_bound_ms(Some(&stamp("b1", 10_000)), now.as_ref()),
            0
        );
        // Another boot: the record may be any age (a power loss, a lost
        // write); the uptimes do not compare.
        assert_eq!(
            restart_lease_bound_ms(Some(&stamp("b0", 59_999)), now.as_ref()),
            full
        );
        // A record from the future of this boot cannot be; trust nothing.
        assert_eq!(
            restart_lease_bound_ms(Some(&stamp("b1", 61_000)), now.as_ref()),
            full
        );
        let text = stamp("0c1e3b2a-1111-2222-3333-444455556666", 1234).encode();
        assert_eq!(
            AliveStamp::decode(&text),
            Some(stamp("0c1e3b2a-1111-2222-3333-444455556666", 1234))
        );
        assert_eq!(
            AliveStamp::decode("00000000001763900000000"),
            None,
            "the old wall-clock format"
        );
        assert_eq!(AliveStamp::decode(""), None);
    }

    #[test]
    fn a_holder_that_answered_and_does_not_serve_releases_its_promises() {
        let mut replica = enabled(0);
        replica.grant(Epoch(5), P, 1);
        let mut new = enabled(100);
        new.new_interval();
        new.peer_report(R, replica.report(NEW, false));
        assert!(new.wait_ms() > 0);
        // The old primary answered too, in the new interval.
        new.peer_report(P, LeaseReport::default());
        assert_eq!(new.wait_ms(), 0);
        // A holder still serving does not release.
        let mut new = enabled(100);
        new.peer_report(R, replica.report(NEW, false));
        new.peer_report(
            P,
            LeaseReport {
                serving: true,
                ..LeaseReport::default()
            },
        );
        assert!(new.wait_ms() > 0);
    }

    #[test]
    fn a_restarted_copy_binds_for_one_lease_and_disabled_leases_bind_nothing() {
        let mut restarted = Leases::default();
        restarted.set_clock(1_000);
        restarted.enable(4_000, 4_000);
        restarted.bind_own(NEW);
        assert_eq!(restarted.wait_ms(), 4_000);
        let report = restarted.report(NEW, false);
        assert_eq!(report.holder, Some(None), "an unknown holder");
        // Its own primary's renewals do not shorten that promise.
        restarted.grant(Epoch(9), P, 1);
        assert_eq!(restarted.report(NEW, false).holder, Some(None));
        let mut off = Leases::default();
        assert!(off.renew().is_none());
        assert!(off.readable(0, [R]));
        assert!(!off.grant(Epoch(1), P, 1));
        off.bind_own(NEW);
        assert_eq!(off.wait_ms(), 0);
    }
}

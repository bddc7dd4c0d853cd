//! Proves the replicated write path of one PG across a primary and its
//! replicas, driven by hand-routed effects in a deterministic, seeded order:
//! acks only after every acting OSD committed, in version order, retries
//! deduplicated, min_size and interval rules enforced, bad peers ignored.

use bytes::Bytes;
use cairn_osd::StoredPg;
use cairn_osd::lease::Leases;
use cairn_osd::limits::LEASE_MS;
use cairn_osd::scrub::{ScrubEntry, ScrubMap, ScrubOrder};
use cairn_osd::{
    Effect, Effects, Guard, GuardCheck, Ignored, Interval, LogKind, LogResult, MapContext,
    ObjectState, Pg, PgEvent, PgLimits, PgMsg, Push, ReadAnswer, ReadId, Reply, ReqId, RetryReason,
    StoreTag, StoreWrite, SubWrite, Version,
};
use cairn_store::{ObjectKey, Op};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const PG: PgId = PgId {
    pool: PoolId(1),
    seed: 7,
};

fn interval(epoch: u64, acting: &[u32], min_size: u32) -> Interval {
    let acting: Vec<OsdId> = acting.iter().map(|id| OsdId(*id)).collect();
    Interval {
        epoch_started: Epoch(epoch),
        up: acting.clone(),
        primary: acting.first().copied(),
        size: u32::try_from(acting.len()).expect("small"),
        acting,
        min_size,
        ec: None,
    }
}

fn write_full(name: &str, data: &str) -> Vec<Op> {
    vec![Op::WriteFull {
        object: ObjectKey::new(Bytes::copy_from_slice(name.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()).into(),
    }]
}

fn req(tid: u64) -> ReqId {
    ReqId { client: 42, tid }
}

/// One PG on several OSDs, with FIFO links between each pair, a pool of
/// pending store commits, and a seeded choice of what happens next.
struct Harness {
    pgs: BTreeMap<OsdId, Pg>,
    links: BTreeMap<(OsdId, OsdId), VecDeque<PgMsg>>,
    commits: Vec<(OsdId, Version, StoreTag)>,
    stored: BTreeMap<OsdId, Vec<StoreWrite>>,
    replies: Vec<(ReqId, Reply)>,
    ignored: Vec<(OsdId, Ignored)>,
    /// Scrub maps the shells were asked to read: (reading OSD, order).
    scrub_orders: Vec<(OsdId, ScrubOrder)>,
    /// The read effects: store reads started and answers.
    reads: Vec<Effect>,
    /// The clock every PG is set to before an event (leases).
    now_ms: u64,
    rng: u64,
}

impl Harness {
    fn new(osds: &[u32], interval: &Interval, limits: PgLimits, seed: u64) -> Harness {
        let pgs = osds
            .iter()
            .map(|id| {
                let pg = Pg::new(PG, OsdId(*id), interval.clone(), limits).expect("valid interval");
                (OsdId(*id), pg)
            })
            .collect();
        Harness {
            pgs,
            links: BTreeMap::new(),
            commits: Vec::new(),
            stored: BTreeMap::new(),
            replies: Vec::new(),
            ignored: Vec::new(),
            scrub_orders: Vec::new(),
            reads: Vec::new(),
            now_ms: 0,
            rng: seed,
        }
    }

    fn pg(&self, osd: u32) -> &Pg {
        &self.pgs[&OsdId(osd)]
    }

    fn event(&mut self, osd: OsdId, event: PgEvent) {
        let pg = self.pgs.get_mut(&osd).expect("known osd");
        pg.set_clock(self.now_ms);
        let fx: Effects = pg.handle(event);
        for write in fx.store_writes() {
            self.commits.push((osd, write.version, write.tag.clone()));
            self.stored.entry(osd).or_default().push(write.clone());
        }
        for (to, msg) in fx.sends() {
            self.links
                .entry((osd, to))
                .or_default()
                .push_back(msg.clone());
        }
        // The shell's part of recovery: read the object, push it.
        let epoch = self.pgs[&osd].interval().epoch_started;
        for (object, targets) in fx.pushes() {
            for to in targets.iter().copied() {
                let push = PgMsg::Push(Push {
                    from: osd,
                    interval_epoch: epoch,
                    object: object.clone(),
                    state: Some(ObjectState::default()),
                    as_of: self.pgs[&osd].last_update(),
                });
                self.links.entry((osd, to)).or_default().push_back(push);
            }
        }
        self.replies
            .extend(fx.replies().map(|(req, reply)| (req, reply.clone())));
        self.scrub_orders
            .extend(fx.scrub_orders().map(|order| (osd, order.clone())));
        self.ignored
            .extend(fx.ignored().map(|why| (osd, why.clone())));
        self.reads.extend(
            fx.iter()
                .filter(|e| matches!(e, Effect::Read { .. } | Effect::ReadAnswer { .. }))
                .cloned(),
        );
    }

    /// Asks osd.1 to read `name`; returns what the core said at once.
    fn read(&mut self, id: u64, name: &str) -> Vec<Effect> {
        let event = PgEvent::ClientRead {
            read: ReadId(id),
            object: Bytes::copy_from_slice(name.as_bytes()),
        };
        self.reads_after(|h| h.event(OsdId(1), event))
    }

    /// What read effects `step` caused.
    fn reads_after(&mut self, step: impl FnOnce(&mut Harness)) -> Vec<Effect> {
        let before = self.reads.len();
        step(self);
        self.reads.split_off(before)
    }

    /// Reports read `id`'s store read to osd.1; returns its answer.
    fn read_done(&mut self, id: u64, corrupt: Option<&str>) -> Vec<Effect> {
        let event = PgEvent::ReadDone {
            read: ReadId(id),
            corrupt: corrupt.map(str::to_owned),
        };
        self.reads_after(|h| h.event(OsdId(1), event))
    }

    fn client_write(&mut self, osd: u32, tid: u64, epoch: u64, name: &str) {
        let event = PgEvent::ClientWrite {
            req: req(tid),
            client_epoch: Epoch(epoch),
            object: Bytes::copy_from_slice(name.as_bytes()),
            ops: write_full(name, &format!("data {tid}")),
            guard: None,
            prepared: None,
        };
        self.event(OsdId(osd), event);
    }

    /// A write of `name` guarded by `guard`, whose object the shell saw at
    /// `version`.
    fn guarded_write(&mut self, tid: u64, name: &str, guard: Guard, version: u64) {
        let event = PgEvent::ClientWrite {
            req: req(tid),
            client_epoch: Epoch(5),
            object: Bytes::copy_from_slice(name.as_bytes()),
            ops: write_full(name, &format!("data {tid}")),
            guard: Some(GuardCheck {
                guards: vec![guard],
                version,
                ..GuardCheck::default()
            }),
            prepared: None,
        };
        self.event(OsdId(1), event);
    }

    /// Delivers every queued message (FIFO per link) until none is left.
    fn deliver_all(&mut self) {
        while let Some(key) = self
            .links
            .iter()
            .find(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
        {
            let msg = self.links.get_mut(&key).and_then(VecDeque::pop_front);
            self.deliver(key.1, msg.expect("non-empty link"));
        }
    }

    /// `rounds` times: delivers every queued message (FIFO per link),
    /// completing every store commit after each, showing each to `seen`
    /// (its receiver and itself) first; then ticks `primary`.
    fn run_rounds(&mut self, rounds: u32, primary: u32, mut seen: impl FnMut(OsdId, &PgMsg)) {
        for _ in 0..rounds {
            while let Some(key) = self
                .links
                .iter()
                .find(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
            {
                let msg = self
                    .links
                    .get_mut(&key)
                    .and_then(VecDeque::pop_front)
                    .expect("queued");
                seen(key.1, &msg);
                self.deliver(key.1, msg);
                let osds: Vec<u32> = self.pgs.keys().map(|o| o.0).collect();
                for osd in osds {
                    self.commit(osd);
                }
            }
            self.event(OsdId(primary), PgEvent::Tick);
        }
    }

    /// Hands `msg` to `to`; a pull is answered by the shell, as a push.
    fn deliver(&mut self, to: OsdId, msg: PgMsg) {
        if let PgMsg::Pull {
            from,
            interval_epoch,
            object,
        } = msg
        {
            let push = PgMsg::Push(Push {
                from: to,
                interval_epoch,
                object,
                state: Some(ObjectState::default()),
                as_of: self.pgs[&to].last_update(),
            });
            self.links.entry((to, from)).or_default().push_back(push);
            return;
        }
        self.event(to, msg.into());
    }

    /// Completes every pending store commit of `osd`.
    fn commit(&mut self, osd: u32) {
        let (mine, rest) = self
            .commits
            .drain(..)
            .partition(|(o, _, _)| *o == OsdId(osd));
        self.commits = rest;
        for (osd, version, tag) in mine {
            self.event(osd, committed(version, tag));
        }
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: deterministic from the seed.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Takes one random step (a link's next message or any pending
    /// commit); false when nothing is pending.
    fn step(&mut self) -> bool {
        let links: Vec<(OsdId, OsdId)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        let choices = links.len() + self.commits.len();
        if choices == 0 {
            return false;
        }
        let pick = usize::try_from(self.next_random() % choices as u64).expect("small");
        if pick < links.len() {
            let key = links[pick];
            let msg = self.links.get_mut(&key).and_then(VecDeque::pop_front);
            self.deliver(key.1, msg.expect("non-empty link"));
        } else {
            let (osd, version, tag) = self.commits.swap_remove(pick - links.len());
            self.event(osd, committed(version, tag));
        }
        true
    }

    fn run(&mut self) {
        while self.step() {}
    }

    fn done_versions(&self) -> Vec<Version> {
        self.replies
            .iter()
            .filter_map(|(_, reply)| match reply {
                Reply::Done { version, .. } => Some(*version),
                _ => None,
            })
            .collect()
    }

    fn log_versions(&self, osd: u32) -> Vec<Version> {
        self.pg(osd).log().iter().map(|e| e.version).collect()
    }
}

/// The event a durable store write reports, as the daemon's commit loop
/// makes it.
fn committed(version: Version, tag: StoreTag) -> PgEvent {
    match tag {
        StoreTag::Entry => PgEvent::LocalCommitted { version },
        tag => PgEvent::Committed(tag),
    }
}

impl Harness {
    /// Moves every OSD to `interval` with all of them up, as the daemon
    /// does on a map change.
    fn change_interval(&mut self, interval: &Interval) {
        let up: BTreeSet<OsdId> = self.pgs.keys().copied().collect();
        let context = MapContext {
            up_osds: up,
            past: Vec::new(),
            history_from: Epoch(1),
        };
        let osds: Vec<OsdId> = self.pgs.keys().copied().collect();
        for osd in osds {
            self.event(osd, PgEvent::MapContext(context.clone()));
            self.event(osd, PgEvent::IntervalChange(interval.clone()));
        }
    }
}

fn three() -> Harness {
    Harness::new(
        &[1, 2, 3],
        &interval(5, &[1, 2, 3], 2),
        PgLimits::default(),
        1,
    )
}

#[test]
fn write_is_acked_only_after_every_acting_osd_commits() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    assert_eq!(h.stored[&OsdId(1)].len(), 1, "primary applies locally");
    let meta = &h.stored[&OsdId(1)][0].txn.ops;
    assert!(matches!(meta.last(), Some(Op::MetaSet { key, .. }) if key.starts_with(b"pglog/")));
    h.deliver_all();
    assert_eq!(h.stored[&OsdId(2)].len(), 1);
    assert_eq!(h.stored[&OsdId(3)].len(), 1);
    h.commit(1);
    h.commit(2);
    h.deliver_all();
    assert!(h.replies.is_empty(), "osd.3 has not committed");
    h.commit(3);
    assert!(h.replies.is_empty(), "osd.3's ack is not delivered yet");
    h.deliver_all();
    assert_eq!(h.done_versions(), vec![Version::new(5, 1)]);
    assert_eq!(h.pg(1).committed_to(), Version::new(5, 1));
    assert_eq!(h.pg(2).last_complete(), Version::new(5, 1));
}

#[test]
fn shuffled_writes_ack_in_order_and_logs_match() {
    let mut h = three();
    for tid in 1..=20 {
        h.client_write(1, tid, 5, &format!("obj{}", tid % 4));
        for _ in 0..tid % 3 {
            h.step();
        }
    }
    h.run();
    let done = h.done_versions();
    assert_eq!(done.len(), 20);
    assert!(done.windows(2).all(|w| w[0] < w[1]), "{done:?}");
    assert_eq!(h.log_versions(1), h.log_versions(2));
    assert_eq!(h.log_versions(1), h.log_versions(3));
    assert!(h.ignored.is_empty(), "{:?}", h.ignored);
}

#[test]
fn retried_request_applies_once() {
    let mut h = three();
    h.client_write(1, 9, 5, "a");
    h.client_write(1, 9, 5, "a");
    assert!(
        h.replies.is_empty(),
        "in-flight duplicate waits for the original"
    );
    h.run();
    assert_eq!(h.replies.len(), 1, "answered once");
    h.client_write(1, 9, 5, "a");
    assert_eq!(h.replies.len(), 2);
    assert_eq!(h.replies[0], h.replies[1], "same result from the log");
    assert_eq!(h.stored[&OsdId(1)].len(), 1, "one transaction only");
    assert_eq!(h.pg(1).last_update(), Version::new(5, 1));
}

#[test]
fn guarded_writes_refuse_on_mismatch_wait_on_unsettled_and_log_the_outcome() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.guarded_write(2, "a", Guard::Version(0), 0);
    assert_eq!(
        h.replies,
        vec![(req(2), Reply::ObjectBusy)],
        "a is unsettled"
    );
    h.replies.clear();
    h.run();
    h.replies.clear();
    h.guarded_write(3, "a", Guard::Version(7), 1);
    h.run();
    let refused = Reply::Done {
        version: Version::new(5, 2),
        result: LogResult::Err {
            code: cairn_osd::log::err_code::of_guard(
                cairn_osd::log::err_code::VERSION_MISMATCH,
                Some(0),
            ),
        },
    };
    assert_eq!(h.replies, vec![(req(3), refused.clone())]);
    for osd in [1, 2, 3] {
        let last = h.pg(osd).log().iter().last().expect("entries");
        assert_eq!(last.kind, LogKind::Refused, "osd {osd} logged the refusal");
    }
    let ops_of = |h: &Harness, osd: u32| -> Vec<usize> {
        h.stored[&OsdId(osd)]
            .iter()
            .map(|w| w.txn.ops.len())
            .collect()
    };
    assert_eq!(
        ops_of(&h, 2),
        vec![3, 1],
        "write+version+log, then log only"
    );
    h.guarded_write(3, "a", Guard::Version(1), 1);
    assert_eq!(
        h.replies.last(),
        Some(&(req(3), refused)),
        "retry: same answer"
    );
    h.guarded_write(4, "a", Guard::Version(1), 1);
    h.run();
    let applied = Reply::Done {
        version: Version::new(5, 3),
        result: LogResult::Ok { object_version: 3 },
    };
    assert_eq!(h.replies.last(), Some(&(req(4), applied)));
    assert_eq!(ops_of(&h, 3), vec![3, 1, 3]);
}

#[test]
fn an_object_is_in_flight_until_every_acting_osd_committed() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    assert!(h.pg(1).object_in_flight(b"a"));
    assert!(!h.pg(1).object_in_flight(b"b"), "only the written object");
    h.commit(1);
    assert!(h.pg(1).object_in_flight(b"a"), "replicas not yet durable");
    h.run();
    assert!(!h.pg(1).object_in_flight(b"a"), "acknowledged: settled");
}

#[test]
fn below_min_size_blocks_and_at_min_size_acks_after_both_commit() {
    let mut h = Harness::new(&[1], &interval(5, &[1], 2), PgLimits::default(), 1);
    h.client_write(1, 1, 5, "a");
    assert_eq!(
        h.replies,
        vec![(
            req(1),
            Reply::Blocked {
                acting_count: 1,
                min_size: 2
            }
        )]
    );
    assert!(h.stored.is_empty());

    let mut h = Harness::new(&[1, 2], &interval(5, &[1, 2], 2), PgLimits::default(), 1);
    h.client_write(1, 1, 5, "a");
    h.commit(1);
    h.deliver_all();
    assert!(h.replies.is_empty());
    h.commit(2);
    h.deliver_all();
    assert_eq!(h.done_versions(), vec![Version::new(5, 1)]);
}

#[test]
fn only_a_newer_interval_or_wrong_primary_makes_clients_retry() {
    let mut h = three();
    h.client_write(1, 1, 4, "a");
    let stale = RetryReason::IntervalNewer {
        interval_epoch: Epoch(5),
        client_epoch: Epoch(4),
    };
    assert_eq!(h.replies, vec![(req(1), Reply::Retry { reason: stale })]);
    h.client_write(2, 2, 9, "a");
    let not_primary = RetryReason::NotPrimary {
        primary: Some(OsdId(1)),
    };
    assert_eq!(
        h.replies[1],
        (
            req(2),
            Reply::Retry {
                reason: not_primary
            }
        )
    );
    // Epoch 7 is older than the cluster's latest (say 9, an unrelated
    // change) but newer than the interval's start: accepted.
    h.client_write(1, 3, 7, "a");
    h.run();
    assert_eq!(h.done_versions(), vec![Version::new(5, 1)]);
}

#[test]
fn replica_ignores_sub_writes_from_non_primary_or_old_interval() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    let key = (OsdId(1), OsdId(2));
    let Some(PgMsg::SubWrite(good)) = h.links[&key].front().cloned() else {
        panic!("expected a sub-write");
    };
    let forged = SubWrite {
        from: OsdId(3),
        ..good.clone()
    };
    h.event(OsdId(2), PgEvent::SubWrite(forged));
    let gap = SubWrite {
        prior: Version::new(5, 1),
        entry: cairn_osd::LogEntry {
            version: Version::new(5, 2),
            result: LogResult::Ok { object_version: 2 },
            ..good.entry.clone()
        },
        ..good.clone()
    };
    h.event(OsdId(2), PgEvent::SubWrite(gap));
    let meta = SubWrite {
        ops: vec![Op::MetaSet {
            key: Bytes::from_static(b"pglog/x"),
            value: Bytes::new(),
        }],
        ..good.clone()
    };
    h.event(OsdId(2), PgEvent::SubWrite(meta));
    h.event(
        OsdId(2),
        PgEvent::IntervalChange(interval(6, &[1, 2, 3], 2)),
    );
    h.event(OsdId(2), PgEvent::SubWrite(good));
    assert!(!h.stored.contains_key(&OsdId(2)), "nothing applied");
    let reasons: Vec<_> = h.ignored.iter().map(|(_, why)| why.clone()).collect();
    assert!(matches!(
        reasons[0],
        Ignored::NotFromPrimary { from: OsdId(3), .. }
    ));
    // The gap is held for its predecessor (not applied, not ignored);
    // the interval change drops it.
    assert!(matches!(reasons[1], Ignored::Malformed(_)));
    assert!(matches!(reasons[2], Ignored::WrongInterval { .. }));
    assert_eq!(reasons.len(), 3);
}

#[test]
fn interval_change_retries_in_flight_and_peering_settles_it_once() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.commit(1);
    let next = interval(6, &[1, 2, 3], 2);
    h.change_interval(&next);
    let changed = RetryReason::IntervalChanged { epoch: Epoch(6) };
    assert_eq!(h.replies, vec![(req(1), Reply::Retry { reason: changed })]);
    // Until peering ends the primary serves nothing.
    h.client_write(1, 1, 6, "a");
    let peering = RetryReason::NotActive;
    assert_eq!(h.replies[1], (req(1), Reply::Retry { reason: peering }));
    h.run();
    assert_eq!(h.pg(1).state_name(), "active+clean");
    // The primary's copy had the write: peering kept it, so the resend
    // is answered from the log and not applied again.
    h.client_write(1, 1, 6, "a");
    let done = Reply::Done {
        version: Version::new(5, 1),
        result: LogResult::Ok { object_version: 1 },
    };
    assert_eq!(h.replies[2], (req(1), done));
    for osd in 1..=3 {
        assert_eq!(h.log_versions(osd), vec![Version::new(5, 1)]);
        let entries = h.stored[&OsdId(osd)]
            .iter()
            .filter(|w| w.tag == StoreTag::Entry)
            .count();
        assert!(entries <= 1, "osd.{osd} applied the write {entries} times");
    }
}

#[test]
fn too_many_in_flight_is_busy() {
    let limits = PgLimits {
        log_entries_max: 8,
        inflight_max: 2,
        ..PgLimits::default()
    };
    let mut h = Harness::new(&[1, 2, 3], &interval(5, &[1, 2, 3], 2), limits, 1);
    for tid in 1..=3 {
        h.client_write(1, tid, 5, "a");
    }
    assert_eq!(h.replies, vec![(req(3), Reply::Busy { inflight_max: 2 })]);
    h.run();
    assert_eq!(h.done_versions().len(), 2);
}

#[test]
fn log_stays_bounded_on_every_osd() {
    let limits = PgLimits {
        log_entries_max: 4,
        log_dups_max: 3,
        inflight_max: 2,
    };
    let mut h = Harness::new(&[1, 2, 3], &interval(5, &[1, 2, 3], 2), limits, 3);
    for tid in 1..=10 {
        h.client_write(1, tid, 5, "a");
        h.run();
    }
    assert_eq!(h.done_versions().len(), 10);
    for osd in 1..=3 {
        assert_eq!(h.log_versions(osd).len(), 4);
        let last = h.stored[&OsdId(osd)].last().expect("stored");
        assert!(
            last.txn
                .ops
                .iter()
                .any(|op| matches!(op, Op::MetaRemove { .. }))
        );
    }
}

#[test]
fn a_retry_after_its_entry_left_the_log_is_answered_from_the_dups() {
    let limits = PgLimits {
        log_entries_max: 4,
        log_dups_max: 8,
        inflight_max: 2,
    };
    let mut h = Harness::new(&[1, 2, 3], &interval(5, &[1, 2, 3], 2), limits, 3);
    h.client_write(1, 1, 5, "a");
    h.run();
    for tid in 2..=7 {
        h.client_write(1, tid, 5, &format!("o{tid}"));
        h.run();
    }
    assert!(
        !h.log_versions(1).contains(&Version::new(5, 1)),
        "the first write's entry was trimmed"
    );
    let stored_before = h.stored[&OsdId(1)].len();
    // Each trim moved the entry to a dup key in the same transaction.
    let dup_keys = h.stored[&OsdId(1)]
        .iter()
        .flat_map(|w| &w.txn.ops)
        .filter(|op| matches!(op, Op::MetaSet { key, .. } if key.starts_with(b"pgdup/")))
        .count();
    assert_eq!(dup_keys, 3);
    h.client_write(1, 1, 5, "a");
    assert_eq!(
        h.stored[&OsdId(1)].len(),
        stored_before,
        "the retry was not applied again"
    );
    assert_eq!(h.replies.len(), 8);
    assert_eq!(h.replies[0], h.replies[7], "the first answer, again");
    assert_eq!(h.pg(1).last_update(), Version::new(5, 7));

    // Past the dups' bound too, a retry is a new request (as in Ceph).
    for tid in 8..=20 {
        h.client_write(1, tid, 5, &format!("o{tid}"));
        h.run();
    }
    h.client_write(1, 1, 5, "a");
    h.run();
    assert_eq!(h.pg(1).last_update(), Version::new(5, 21));
}

#[test]
fn a_push_older_than_a_logged_write_to_its_object_is_ignored() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.run();
    let as_of = h.pg(1).last_update();
    h.client_write(1, 2, 5, "a");
    h.run();
    let before = h.stored[&OsdId(2)].len();
    let push = |as_of| {
        PgMsg::Push(Push {
            from: OsdId(1),
            interval_epoch: Epoch(5),
            object: Bytes::from_static(b"a"),
            state: Some(ObjectState::default()),
            as_of,
        })
    };
    // A late copy of a push read before the second write: ignored.
    h.deliver(OsdId(2), push(as_of));
    assert_eq!(h.stored[&OsdId(2)].len(), before, "nothing applied");
    assert!(
        h.ignored
            .iter()
            .any(|(osd, why)| *osd == OsdId(2) && format!("{why:?}").contains("stale")),
        "{:?}",
        h.ignored
    );
    // One read after it applies.
    h.deliver(OsdId(2), push(h.pg(1).last_update()));
    assert_eq!(h.stored[&OsdId(2)].len(), before + 1);
}

proptest! {
    #[test]
    fn random_interleavings_keep_acks_durable_ordered_and_unique(
        seed in any::<u64>(),
        writes in 1usize..16,
        steps_between in prop::collection::vec(0usize..6, 16),
    ) {
        let mut h = Harness::new(&[1, 2, 3], &interval(5, &[1, 2, 3], 2), PgLimits::default(), seed);
        for (tid, steps) in (0u64..).zip(steps_between.iter().take(writes)) {
            h.client_write(1, tid, 5, &format!("o{}", tid % 3));
            for _ in 0..*steps {
                h.step();
            }
            // Every write acked so far is in every acting log.
            for version in h.done_versions() {
                for osd in 1..=3 {
                    prop_assert!(h.pg(osd).log().get(version).is_some());
                    prop_assert!(h.pg(osd).last_complete() >= version);
                }
            }
        }
        h.run();
        let done = h.done_versions();
        prop_assert_eq!(done.len(), writes);
        prop_assert!(done.windows(2).all(|w| w[0] < w[1]), "acks out of order: {:?}", done);
        for osd in 1..=3 {
            prop_assert_eq!(h.log_versions(osd), done.clone());
        }
        prop_assert!(h.ignored.is_empty());
    }
}

/// Six writes on osd.1 and osd.2 with a 4-entry log, then osd.4 joins the
/// up set (its empty copy is beyond the log); nothing of the new interval
/// has run yet.
fn osd4_joins_beyond_the_log() -> Harness {
    let limits = PgLimits {
        log_entries_max: 4,
        inflight_max: 2,
        ..PgLimits::default()
    };
    let mut h = Harness::new(&[1, 2, 4], &interval(5, &[1, 2], 2), limits, 7);
    for tid in 1..=6 {
        h.client_write(1, tid, 5, &format!("o{tid}"));
        h.run();
    }
    let mut next = interval(6, &[1, 2], 2);
    next.up = vec![OsdId(1), OsdId(2), OsdId(4)];
    next.size = 3;
    h.change_interval(&next);
    h
}

/// As [`osd4_joins_beyond_the_log`], run: osd.4 is backfilled while osd.1
/// and osd.2 act.
fn backfilling() -> Harness {
    let mut h = osd4_joins_beyond_the_log();
    h.run();
    assert_eq!(
        h.pg(1).state_name(),
        "active+undersized+degraded+remapped+backfilling"
    );
    h
}

/// A backfill scan that reaches an object with a write in flight does not
/// push it (the store may not hold the write yet, and the target got the
/// write as a log entry only); it pushes it on a later scan, after the write.
#[test]
fn backfill_waits_for_a_write_in_flight_on_the_scanned_object() {
    let mut h = backfilling();
    h.client_write(1, 10, 6, "o9");
    let key = ObjectKey::new(Bytes::from_static(b"o9"));
    let primary = h.pgs.get_mut(&OsdId(1)).expect("primary");
    let fx = primary.handle(PgEvent::BackfillPage {
        keys: vec![key.clone()],
        more: false,
    });
    assert!(
        fx.pushes().next().is_none(),
        "no push while o9's write is in flight"
    );
    h.run();
    let primary = h.pgs.get_mut(&OsdId(1)).expect("primary");
    let fx = primary.handle(PgEvent::Tick);
    assert!(
        fx.iter()
            .any(|effect| matches!(effect, Effect::Scan { after: None })),
        "the scan starts again where it stopped"
    );
    let fx = primary.handle(PgEvent::BackfillPage {
        keys: vec![key],
        more: false,
    });
    assert_eq!(
        fx.pushes().count(),
        1,
        "o9 is pushed once its write is durable"
    );
}

/// A write admitted while the last page was being listed reached the store
/// too late to be listed, and went to the target as a log entry only: the
/// scan must push that object itself before declaring the target complete.
#[test]
fn backfill_pushes_a_log_only_object_its_last_page_did_not_list() {
    let mut h = backfilling();
    // The scan was asked for; before its (empty, last) page is handled, a
    // write creates o9 beyond it: log-only to osd.4.
    h.client_write(1, 10, 6, "o9");
    h.run();
    let primary = h.pgs.get_mut(&OsdId(1)).expect("primary");
    let fx = primary.handle(PgEvent::BackfillPage {
        keys: Vec::new(),
        more: false,
    });
    assert_eq!(
        fx.pushes().collect::<Vec<_>>(),
        vec![(&Bytes::from_static(b"o9"), &[OsdId(4)][..])],
        "the unlisted log-only object is pushed, not skipped"
    );
}

/// What a copy's scrub map says of one object.
fn scrub_entry(name: &str, version: u64, data_digest: u32) -> ScrubEntry {
    ScrubEntry {
        name: Bytes::copy_from_slice(name.as_bytes()),
        size: 6,
        version,
        xattrs_digest: 0,
        omap_digest: 0,
        data_digest: Some(data_digest),
        error: None,
        sealed: false,
    }
}

#[test]
fn scrub_waits_for_writes_to_its_chunk_holds_new_ones_and_repairs_a_bad_copy() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    // The write to `a` is in flight when the scrub chooses its chunk.
    h.event(
        OsdId(1),
        PgEvent::Scrub {
            deep: true,
            repair: true,
            now_secs: 1000,
        },
    );
    assert_eq!(h.pg(1).scrubbing(), Some(true));
    let keys = vec![
        ObjectKey::new(Bytes::from_static(b"a")),
        ObjectKey::new(Bytes::from_static(b"b")),
    ];
    h.event(OsdId(1), PgEvent::ScrubPage { keys, more: false });
    assert!(h.scrub_orders.is_empty(), "no map while `a` is in flight");
    // A new write to the chunk waits; the one in flight completes.
    h.client_write(1, 2, 5, "b");
    assert_eq!(h.replies.last(), Some(&(req(2), Reply::ObjectBusy)));
    h.run();
    assert_eq!(h.done_versions().len(), 1, "the write to `a` completed");
    // Now every copy is asked for its map (the primary's own included).
    let orders: BTreeSet<u32> = h.scrub_orders.iter().map(|(osd, _)| osd.0).collect();
    assert_eq!(orders, BTreeSet::from([1, 2, 3]));
    assert!(
        h.scrub_orders
            .iter()
            .all(|(_, o)| o.to == OsdId(1) && o.deep)
    );
    // osd.3's copy of `a` differs from the two that agree.
    for (osd, order) in std::mem::take(&mut h.scrub_orders) {
        let digest = if osd == OsdId(3) { 0xbad } else { 0x600d };
        let map = ScrubMap {
            from: osd,
            interval_epoch: order.interval_epoch,
            chunk: order.chunk,
            entries: vec![scrub_entry("a", 1, digest)],
            truncated: false,
        };
        h.event(OsdId(1), PgEvent::Peer(PgMsg::ScrubMap(map)));
    }
    assert_eq!(h.pg(1).scrubbing(), None, "one chunk: the scrub is done");
    assert_eq!(h.pg(1).scrub_stamps().deep_secs, 1000);
    let (count, found) = h.pg(1).inconsistent();
    assert_eq!(count, 1);
    assert_eq!(found[0].bad, BTreeSet::from([OsdId(3)]));
    assert!(h.pg(1).state_name().contains("inconsistent+repair"));
    // Repair pushes the authoritative copy to osd.3; then all agree.
    h.run();
    assert_eq!(h.pg(1).inconsistent().0, 0);
    assert_eq!(h.pg(1).state_name(), "active+clean");
    // A map from a copy not asked (or a stale chunk) is ignored.
    let before = h.ignored.len();
    let stray = ScrubMap {
        from: OsdId(2),
        interval_epoch: Epoch(5),
        chunk: 99,
        entries: vec![],
        truncated: false,
    };
    h.event(OsdId(1), PgEvent::Peer(PgMsg::ScrubMap(stray)));
    assert_eq!(h.ignored.len(), before + 1);
}

#[test]
fn scrub_refuses_on_a_replica_and_on_an_unclean_pg() {
    let mut h = three();
    h.event(
        OsdId(2),
        PgEvent::Scrub {
            deep: false,
            repair: false,
            now_secs: 1,
        },
    );
    assert!(matches!(h.ignored.last(), Some((_, Ignored::Scrub(_)))));
    assert_eq!(h.pg(2).scrubbing(), None);
    // An undersized PG (one copy short) scrubs only once clean.
    let mut h = Harness::new(&[1, 2], &interval(5, &[1, 2], 1), PgLimits::default(), 1);
    let mut short = interval(6, &[1, 2], 1);
    short.size = 3;
    h.change_interval(&short);
    h.run();
    assert!(h.pg(1).scrub_refusal().is_some());
}

/// Three fresh copies with read leases, peered and active at 1 s.
fn leased_three() -> Harness {
    let mut h = three();
    h.now_ms = 1_000;
    let start = interval(5, &[1, 2, 3], 2);
    let context = MapContext {
        up_osds: [1, 2, 3].into_iter().map(OsdId).collect(),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    for osd in [1, 2, 3] {
        let mut leases = Leases::default();
        leases.set_clock(h.now_ms);
        leases.enable(LEASE_MS, 0);
        let (pg, fx) = Pg::restore_leased(
            PG,
            OsdId(osd),
            start.clone(),
            PgLimits::default(),
            StoredPg::default(),
            context.clone(),
            leases,
        )
        .expect("valid interval");
        h.pgs.insert(OsdId(osd), pg);
        for (to, msg) in fx.sends() {
            h.links
                .entry((OsdId(osd), to))
                .or_default()
                .push_back(msg.clone());
        }
    }
    h.run();
    h
}

#[test]
fn a_cut_off_primary_stops_reading_before_a_new_one_takes_writes() {
    let mut h = leased_three();
    assert!(h.pg(1).is_active_primary());
    h.run();
    assert!(h.pg(1).may_serve_reads(h.now_ms), "renewed on activation");
    // Renewals each second keep it readable.
    for _ in 0..3 {
        h.now_ms += 1_000;
        h.event(OsdId(1), PgEvent::Tick);
        h.run();
        assert!(h.pg(1).may_serve_reads(h.now_ms));
    }
    let last_renewal = h.now_ms;
    // osd.1 is cut off from the others: what it sends is lost, and it
    // hears of no new map. osd.2 and osd.3 move on without it 500 ms later.
    h.now_ms += 500;
    let mut next = interval(6, &[2, 3], 2);
    next.size = 3;
    let context = MapContext {
        up_osds: [2, 3].into_iter().map(OsdId).collect(),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    for osd in [2, 3] {
        h.event(OsdId(osd), PgEvent::MapContext(context.clone()));
        h.event(OsdId(osd), PgEvent::IntervalChange(next.clone()));
    }
    let cut = |h: &mut Harness| {
        h.links
            .retain(|(from, to), _| *from != OsdId(1) && *to != OsdId(1));
    };
    cut(&mut h);
    h.run();
    assert!(!h.pg(2).is_active_primary(), "waits for osd.1's lease");
    let why = h.pg(2).blocked_reason().unwrap_or_default();
    assert!(why.contains("read lease"), "{why}");
    // Walk time forward: osd.2 may take writes only once osd.1 can no
    // longer read (both clocks run at the same rate here). osd.1 hears
    // nothing meanwhile, so its last event's clock is stale: a read asks
    // with the time of the read.
    while !h.pg(2).is_active_primary() {
        h.now_ms += 100;
        h.event(OsdId(2), PgEvent::Tick);
        cut(&mut h);
        h.run();
        if h.pg(2).is_active_primary() {
            assert!(
                !h.pg(1).may_serve_reads(h.now_ms),
                "old primary still reads at {} ms",
                h.now_ms
            );
        }
        assert!(h.now_ms < last_renewal + 2 * LEASE_MS, "never activated");
    }
    assert!(h.now_ms >= last_renewal + LEASE_MS);
}

#[test]
fn a_primary_change_with_the_old_primary_answering_waits_for_no_lease() {
    let mut h = leased_three();
    h.now_ms += 1_000;
    h.event(OsdId(1), PgEvent::Tick);
    h.run();
    // osd.1 is marked out but up: it answers the new primary's query, so
    // its lease is known to be given up.
    let next = interval(6, &[2, 3], 2);
    h.change_interval(&next);
    h.run();
    assert!(
        h.pg(2).is_active_primary(),
        "{:?}",
        h.pg(2).blocked_reason()
    );
    assert!(!h.pg(1).may_serve_reads(h.now_ms));
}

/// Two of three copies gone with a write in flight: the survivor holds its
/// log entry, and a resend must not be answered from it while the PG is
/// below min_size (the entry may be on this copy alone).
#[test]
fn a_resend_below_min_size_is_blocked_not_answered_from_the_log() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    // osd.1 applies locally; the sub-writes never arrive (both replicas die).
    h.commit(1);
    h.links.clear();
    let mut alone = interval(6, &[1], 2);
    alone.size = 3;
    let context = MapContext {
        up_osds: BTreeSet::from([OsdId(1)]),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    h.event(OsdId(1), PgEvent::MapContext(context));
    h.event(OsdId(1), PgEvent::IntervalChange(alone));
    h.commit(1);
    h.run();
    h.client_write(1, 1, 6, "a");
    assert!(
        matches!(h.replies.last(), Some((r, Reply::Blocked { .. })) if *r == req(1)),
        "{:?}",
        h.replies.last()
    );
    assert!(h.done_versions().is_empty(), "never acknowledged");
    assert!(
        !h.pg(1).may_serve_reads(h.now_ms),
        "no reads below min_size either"
    );
}

/// A copy restored from `stored` into `interval`, as the daemon loads one.
fn restored(
    osd: u32,
    interval: &Interval,
    stored: StoredPg,
    context: &MapContext,
) -> (Pg, Effects) {
    Pg::restore(
        PG,
        OsdId(osd),
        interval.clone(),
        PgLimits::default(),
        stored,
        context.clone(),
    )
    .expect("valid interval")
}

/// After a remap, the only copy of an object may sit on a stray (here the
/// acting copies both know they lack it): recovery pulls it from the stray
/// rather than leaving it unfound, and then the stray is removed.
#[test]
fn an_object_only_a_stray_holds_is_recovered_from_the_stray() {
    let version = Version::new(5, 1);
    let entry = cairn_osd::LogEntry {
        version,
        object: Bytes::from_static(b"o1"),
        kind: LogKind::Write,
        req: req(1),
        result: LogResult::Ok { object_version: 1 },
    };
    let info = cairn_osd::PgInfo {
        exists: true,
        last_update: version,
        last_epoch_started: Epoch(5),
        backfilling: false,
        shard: None,
    };
    let copy = |missing: &[&'static str]| StoredPg {
        log: vec![entry.clone()],
        info: Some(info.clone()),
        missing: missing
            .iter()
            .map(|m| Bytes::from_static(m.as_bytes()))
            .collect(),
        ..StoredPg::default()
    };
    let now = interval(6, &[1, 2], 1);
    let context = MapContext {
        up_osds: [1, 2, 3].into_iter().map(OsdId).collect(),
        past: vec![cairn_osd::PastInterval {
            first: Epoch(5),
            last: Epoch(5),
            acting: vec![OsdId(1), OsdId(2), OsdId(3)],
            maybe_rw: true,
        }],
        history_from: Epoch(1),
    };
    let mut h = three();
    h.pgs.clear();
    for (osd, stored) in [(1, copy(&["o1"])), (2, copy(&["o1"])), (3, copy(&[]))] {
        let (pg, fx) = restored(osd, &now, stored, &context);
        h.pgs.insert(OsdId(osd), pg);
        for (to, msg) in fx.sends() {
            h.links
                .entry((OsdId(osd), to))
                .or_default()
                .push_back(msg.clone());
        }
    }
    let mut pulled_from = Vec::new();
    h.run_rounds(20, 1, |to, msg| {
        if matches!(msg, PgMsg::Pull { .. }) {
            pulled_from.push(to);
        }
    });
    assert_eq!(
        pulled_from.first(),
        Some(&OsdId(3)),
        "pulled from the stray"
    );
    let state = h.pg(1).state_name();
    assert!(!state.contains("unfound"), "{state}");
    assert_eq!(state, "active+clean", "recovered, and the stray purged");
}

/// A lost sub-write and a lost ack (a session between OSDs died): the
/// primary sends the unacknowledged sub-writes again, in order, once the
/// oldest is overdue; the replica applies the missed one, acknowledges the
/// one it already had without applying it twice, and the client gets one
/// answer per write.
#[test]
fn lost_sub_writes_and_acks_are_resent_and_applied_once() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    // osd.3 never gets the first sub-write; the second reaches it out of
    // order and is ignored.
    let lost = h
        .links
        .get_mut(&(OsdId(1), OsdId(3)))
        .and_then(VecDeque::pop_front);
    assert!(matches!(lost, Some(PgMsg::SubWrite(_))), "{lost:?}");
    h.client_write(1, 2, 5, "b");
    h.deliver_all();
    for osd in [1, 2, 3] {
        h.commit(osd);
    }
    // osd.2's acks are lost too.
    h.links.remove(&(OsdId(2), OsdId(1)));
    h.deliver_all();
    assert!(h.replies.is_empty(), "no write is durable on osd.3");
    assert_eq!(h.stored[&OsdId(2)].len(), 2);
    assert_eq!(h.stored.get(&OsdId(3)).map_or(0, Vec::len), 0);
    for _ in 0..cairn_osd::limits::SUBWRITE_RESEND_TICKS {
        assert!(
            !h.links
                .values()
                .flatten()
                .any(|m| matches!(m, PgMsg::SubWrite(_))),
            "resent before it was overdue"
        );
        h.event(OsdId(1), PgEvent::Tick);
    }
    let resent: Vec<(OsdId, Version)> = h
        .links
        .iter()
        .flat_map(|((_, to), q)| {
            q.iter().filter_map(move |m| match m {
                PgMsg::SubWrite(w) => Some((*to, w.entry.version)),
                _ => None,
            })
        })
        .collect();
    let (one, two) = (Version::new(5, 1), Version::new(5, 2));
    assert_eq!(
        resent,
        vec![
            (OsdId(2), one),
            (OsdId(2), two),
            (OsdId(3), one),
            (OsdId(3), two)
        ]
    );
    h.deliver_all();
    for osd in [1, 2, 3] {
        h.commit(osd);
    }
    h.deliver_all();
    assert_eq!(h.done_versions(), vec![one, two]);
    assert_eq!(h.stored[&OsdId(2)].len(), 2, "osd.2 applied nothing twice");
    assert_eq!(h.stored[&OsdId(3)].len(), 2, "osd.3 applied both, in order");
    assert_eq!(h.log_versions(3), h.log_versions(1));
}

/// A member of the interval goes down while the primary waits for its
/// answer: the map that says so also ends the interval, so peering waits
/// for it. Activating without its answer would make it a backfill target
/// and empty a copy that may be the only complete one.
#[test]
fn peering_waits_for_a_member_that_goes_down_rather_than_backfilling_it() {
    let now = interval(6, &[1, 2], 1);
    let all_up = MapContext {
        up_osds: [1, 2].into_iter().map(OsdId).collect(),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    let (pg, fx) = restored(1, &now, StoredPg::default(), &all_up);
    assert!(
        fx.sends()
            .any(|(to, m)| to == OsdId(2) && matches!(m, PgMsg::Query { .. })),
        "osd.2 is asked"
    );
    let mut h = three();
    h.pgs.clear();
    h.pgs.insert(OsdId(1), pg);
    let two_down = MapContext {
        up_osds: [1].into_iter().map(OsdId).collect(),
        ..all_up
    };
    h.event(OsdId(1), PgEvent::MapContext(two_down));
    assert_eq!(h.pg(1).state_name(), "peering");
    let activations = h
        .links
        .values()
        .flatten()
        .filter(|m| matches!(m, PgMsg::Activate(_)))
        .count();
    assert_eq!(activations, 0, "nothing activated without osd.2's answer");
    // The next interval leaves osd.2 out; the PG activates alone.
    h.event(OsdId(1), PgEvent::IntervalChange(interval(7, &[1], 1)));
    assert_ne!(h.pg(1).state_name(), "peering");
}

/// A copy restarted with an old map activates an interval that is long
/// over: its `last_epoch_started` stays that of the newest interval it
/// activated in, or a later peering ranks an empty copy above its history
/// and the acknowledged writes are gone (simulator seed 40171).
#[test]
fn activating_an_old_interval_never_lowers_last_epoch_started() {
    let version = Version::new(122, 1);
    let stored = StoredPg {
        log: vec![cairn_osd::LogEntry {
            version,
            object: Bytes::from_static(b"o1"),
            kind: LogKind::Write,
            req: req(1),
            result: LogResult::Ok { object_version: 1 },
        }],
        info: Some(cairn_osd::PgInfo {
            exists: true,
            last_update: version,
            last_epoch_started: Epoch(122),
            backfilling: false,
            shard: None,
        }),
        ..StoredPg::default()
    };
    let old = interval(100, &[4], 1);
    let context = MapContext {
        up_osds: [4].into_iter().map(OsdId).collect(),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    let (mut pg, _fx) = restored(4, &old, stored, &context);
    for _ in 0..3 {
        pg.handle(PgEvent::Tick);
    }
    assert_eq!(pg.info().last_epoch_started, Epoch(122));
    assert_eq!(pg.last_update(), version, "history kept");
}

/// Seed 40649: a primary cut off since before a split pulled an object from
/// a copy that had split since, was told "no such object" and lost its copy
/// of a live one. A pull is answered only to the primary of the copy's own
/// interval.
#[test]
fn a_pull_is_answered_only_to_the_primary_of_the_copys_interval() {
    let mut h = three();
    assert!(h.pg(2).answers_pull(OsdId(1), Epoch(5)));
    assert!(!h.pg(2).answers_pull(OsdId(3), Epoch(5)), "not the primary");
    assert!(
        !h.pg(2).answers_pull(OsdId(1), Epoch(4)),
        "an older interval"
    );
    h.change_interval(&interval(9, &[1, 2, 3], 2));
    assert!(
        !h.pg(2).answers_pull(OsdId(1), Epoch(5)),
        "the interval is over"
    );
    assert!(h.pg(2).answers_pull(OsdId(1), Epoch(9)));
}

/// A copy about to be emptied for a backfill is marked first (durably,
/// before its first object goes): if the shell empties it and the
/// activation is then overtaken by a new interval (or the OSD crashes part
/// way), the copy still says it is incomplete, and the next primary
/// backfills it rather than trusting its log.
#[test]
fn a_copy_marked_for_backfill_is_backfilled_not_trusted() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.deliver_all();
    for osd in [1, 2, 3] {
        h.commit(osd);
    }
    h.deliver_all();
    assert_eq!(h.replies.len(), 1, "the write is acknowledged");
    let copy = h.pgs.get_mut(&OsdId(2)).expect("osd.2");
    assert!(
        copy.mark_backfilling(OsdId(3), Epoch(5)).is_none(),
        "not the primary"
    );
    assert!(
        copy.mark_backfilling(OsdId(1), Epoch(4)).is_none(),
        "another interval"
    );
    let mark = copy
        .mark_backfilling(OsdId(1), Epoch(5))
        .expect("the primary's activation stands");
    let Some(Op::MetaSet { value, .. }) = mark.txn.ops.first() else {
        panic!("the mark is the copy's info");
    };
    let mut stored = cairn_osd::PgInfo::default();
    stored.decode_into(value).expect("valid info");
    assert!(stored.backfilling, "stored as backfilling");
    // The activation never comes: a new interval, led by osd.3.
    h.change_interval(&interval(6, &[3, 2, 1], 2));
    let mut backfill_to_2 = None;
    h.run_rounds(10, 3, |to, msg| {
        if let (OsdId(2), PgMsg::Activate(activate)) = (to, msg) {
            backfill_to_2 = Some(activate.backfill);
        }
    });
    assert_eq!(
        backfill_to_2,
        Some(true),
        "osd.2 is backfilled, not recovered from its log: {} {:?}",
        h.pg(3).state_name(),
        h.pg(3).blocked_reason()
    );
}

/// Whether `osd` stored a write of `key` (`set`) or its removal.
fn stored_key(h: &Harness, osd: u32, key: &[u8], set: bool) -> bool {
    h.stored.get(&OsdId(osd)).is_some_and(|writes| {
        writes
            .iter()
            .flat_map(|w| w.txn.ops.iter())
            .any(|op| match op {
                Op::MetaSet { key: k, .. } => set && k[..] == *key,
                Op::MetaRemove { key: k } => !set && k[..] == *key,
                _ => false,
            })
    })
}

/// Scrubs the one-object chunk `a` on `primary` (deep or light), each copy
/// reporting `entry(osd)` for it.
fn scrub_a(h: &mut Harness, primary: u32, deep: bool, entry: impl Fn(OsdId) -> ScrubEntry) {
    h.event(
        OsdId(primary),
        PgEvent::Scrub {
            deep,
            repair: false,
            now_secs: 1000,
        },
    );
    let keys = vec![ObjectKey::new(Bytes::from_static(b"a"))];
    h.event(OsdId(primary), PgEvent::ScrubPage { keys, more: false });
    h.deliver_all();
    for (osd, order) in std::mem::take(&mut h.scrub_orders) {
        let map = ScrubMap {
            from: osd,
            interval_epoch: order.interval_epoch,
            chunk: order.chunk,
            entries: vec![entry(osd)],
            truncated: false,
        };
        h.event(OsdId(primary), PgEvent::Peer(PgMsg::ScrubMap(map)));
    }
    assert_eq!(h.pg(primary).scrubbing(), None, "the scrub finished");
}

/// An inconsistency scrub found (not repaired) stays reported: it is kept
/// in the primary's collection and comes back with a restart; after a
/// primary change the new primary takes it from the old one's answer to
/// its query (and the old one drops its record); a later deep scrub that
/// finds the copies agreeing clears it.
#[test]
fn kept_inconsistencies_outlive_restarts_and_primary_changes_until_a_scrub_clears_them() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.run();
    scrub_a(&mut h, 1, true, |osd| {
        scrub_entry("a", 1, if osd == OsdId(3) { 0xbad } else { 0x600d })
    });
    let (count, found) = h.pg(1).inconsistent();
    assert_eq!(count, 1);
    let found = found[0].clone();
    assert!(stored_key(&h, 1, b"scrubbad/a", true), "kept on disk");
    // A restart brings it back from the stored records.
    let context = MapContext {
        up_osds: [1, 2, 3].into_iter().map(OsdId).collect(),
        past: Vec::new(),
        history_from: Epoch(1),
    };
    let stored = StoredPg {
        inconsistent: vec![found.clone()],
        ..StoredPg::default()
    };
    let (again, _) = restored(1, &interval(5, &[1, 2, 3], 2), stored, &context);
    assert_eq!(again.inconsistent().0, 1, "reported again after a restart");
    // osd.2 becomes primary: it reports what osd.1 found.
    h.change_interval(&interval(6, &[2, 1, 3], 2));
    h.run();
    assert!(h.pg(2).is_active_primary());
    assert_eq!(h.pg(2).inconsistent().1, vec![&found]);
    assert!(
        h.pg(2).state_name().contains("inconsistent"),
        "{}",
        h.pg(2).state_name()
    );
    assert!(stored_key(&h, 2, b"scrubbad/a", true));
    assert_eq!(h.pg(1).inconsistent().0, 0, "handed over");
    assert!(stored_key(&h, 1, b"scrubbad/a", false));
    // A light scrub cannot see a data digest: it clears nothing.
    scrub_a(&mut h, 2, false, |_| ScrubEntry {
        data_digest: None,
        ..scrub_entry("a", 1, 0)
    });
    assert_eq!(h.pg(2).inconsistent().0, 1, "still reported");
    // The copies were repaired by hand: a deep scrub finds them agreeing.
    scrub_a(&mut h, 2, true, |_| scrub_entry("a", 1, 0x600d));
    assert_eq!(h.pg(2).inconsistent().0, 0, "cleared by the deep scrub");
    assert!(stored_key(&h, 2, b"scrubbad/a", false));
    assert_eq!(h.pg(2).state_name(), "active+clean");
}

/// A source that cannot read its copy (bit rot) answers a pull with
/// `Unreadable`: the primary pulls from another copy instead, and repairs
/// the unreadable one too, rather than waiting on the first for good.
#[test]
fn an_unreadable_source_is_passed_over_and_repaired_too() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    h.run();
    // Peered, so the primary knows its sources.
    h.change_interval(&interval(6, &[1, 2, 3], 2));
    h.run();
    assert_eq!(h.pg(1).state_name(), "active+clean");
    let a = Bytes::from_static(b"a");
    h.event(
        OsdId(1),
        PgEvent::ReadError {
            object: a.clone(),
            error: "checksum mismatch".into(),
        },
    );
    // The link a pull is queued on.
    let pull_link = |h: &Harness| {
        h.links
            .iter()
            .find(|(_, q)| q.iter().any(|m| matches!(m, PgMsg::Pull { .. })))
            .map(|(k, _)| *k)
    };
    // The first pull goes to some source; that source's copy rotted too.
    let first = pull_link(&h).expect("a pull");
    let bad = first.1;
    h.links.get_mut(&first).expect("link").clear();
    h.event(
        OsdId(1),
        PgEvent::Peer(PgMsg::Unreadable {
            from: bad,
            interval_epoch: Epoch(6),
            object: a.clone(),
        }),
    );
    let second = pull_link(&h).expect("a second pull");
    assert_ne!(second.1, bad, "pulled from the other copy");
    assert_eq!(h.pg(1).inconsistent().1.len(), 1);
    let mut pushed_to = BTreeSet::new();
    h.run_rounds(5, 1, |to, msg| {
        if matches!(msg, PgMsg::Push(_)) {
            pushed_to.insert(to);
        }
    });
    assert!(
        pushed_to.contains(&bad),
        "the unreadable copy is repaired: {pushed_to:?}"
    );
    assert_eq!(h.pg(1).state_name(), "active+clean");
    assert_eq!(h.pg(1).inconsistent().0, 0, "repaired: no longer reported");
}

/// Hostile but well-formed peer messages (issue 19, item 10): sub-writes,
/// pushes and activations from any sender, of any interval, with huge or
/// out-of-order versions and offsets, reach a replica and the primary of
/// a clean PG. None panics the core, and one the core refuses (it says so
/// in `Ignored`) writes nothing to the store.
mod hostile {
    use super::*;

    const EPOCHS: [u64; 6] = [0, 1, 4, 5, 6, u64::MAX];
    const SEQS: [u64; 5] = [0, 1, 2, 3, u64::MAX];
    const OFFSETS: [u64; 4] = [0, 1 << 40, u64::MAX - 1, u64::MAX];

    fn version(epoch: usize, seq: usize) -> Version {
        Version::new(EPOCHS[epoch % EPOCHS.len()], SEQS[seq % SEQS.len()])
    }

    /// Delivers `event` to `osd` and checks that a refusal stored nothing.
    fn deliver(h: &mut Harness, osd: u32, event: PgEvent) {
        let osd = OsdId(osd);
        let stored_before = h.stored.get(&osd).map_or(0, Vec::len);
        let ignored_before = h.ignored.len();
        h.event(osd, event);
        if h.ignored.len() > ignored_before {
            assert_eq!(
                h.stored.get(&osd).map_or(0, Vec::len),
                stored_before,
                "a refused message wrote to the store: {:?}",
                &h.ignored[ignored_before..]
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn hostile_peer_messages_never_panic_and_refused_ones_store_nothing(
            from in 0u32..6,
            to in 1u32..4,
            interval_pick in 0usize..6,
            entry_epoch in 0usize..6, entry_seq in 0usize..5,
            prior_epoch in 0usize..6, prior_seq in 0usize..5,
            offset_pick in 0usize..4,
            kind in 0u8..3,
            reversed in any::<bool>(),
        ) {
            let mut h = three();
            h.client_write(1, 1, 5, "a");
            let Some(PgMsg::SubWrite(good)) = h.links[&(OsdId(1), OsdId(2))].front().cloned() else {
                panic!("expected a sub-write");
            };
            let interval_epoch = Epoch(EPOCHS[interval_pick]);
            let entry = cairn_osd::LogEntry {
                version: version(entry_epoch, entry_seq),
                ..good.entry.clone()
            };
            let event = match kind {
                0 => PgEvent::SubWrite(SubWrite {
                    from: OsdId(from),
                    interval_epoch,
                    entry,
                    ops: vec![Op::Write {
                        object: ObjectKey::new(Bytes::from_static(b"a")),
                        offset: OFFSETS[offset_pick],
                        data: Bytes::from_static(b"xyz").into(),
                    }],
                    prior: version(prior_epoch, prior_seq),
                    committed_to: version(entry_epoch, entry_seq),
                    log_only: false,
                }),
                1 => PgEvent::Peer(PgMsg::Push(Push {
                    from: OsdId(from),
                    interval_epoch,
                    object: Bytes::from_static(b"a"),
                    state: Some(ObjectState {
                        data: Bytes::from_static(b"pushed"),
                        version: SEQS[entry_seq],
                        ..ObjectState::default()
                    }),
                    as_of: version(prior_epoch, prior_seq),
                })),
                _ => {
                    let mut entries = vec![entry.clone(), cairn_osd::LogEntry {
                        version: version(prior_epoch, prior_seq),
                        ..entry
                    }];
                    if reversed {
                        entries.reverse();
                    }
                    PgEvent::Peer(PgMsg::Activate(cairn_osd::Activate {
                        from: OsdId(from),
                        interval_epoch,
                        keep_through: version(prior_epoch, prior_seq),
                        entries,
                        last_update: version(entry_epoch, entry_seq),
                        committed_to: version(entry_epoch, entry_seq),
                        missing: vec![Bytes::from_static(b"a")],
                        backfill: reversed,
                        dups: Vec::new(),
                    }))
                }
            };
            deliver(&mut h, to, event);
            // Whatever it did, the PG still takes and settles a real write.
            h.run();
        }
    }
}

/// A primary tells its peers to activate only once its own activation is
/// durable. A peer stores the interval as its `last_epoch_started`; were
/// the primary to lose its activation (a crash before the flush, a refused
/// write), an emptied backfill target would vouch for an interval that
/// never activated, and peering could never pass over the earlier
/// intervals it was alone in: incomplete for good (simulator seeds 200836
/// and 200963).
#[test]
fn peers_are_told_to_activate_only_once_the_primary_activation_is_durable() {
    let mut h = osd4_joins_beyond_the_log();
    // Peering runs (queries and answers), but no store write of osd.1
    // becomes durable: its activation stays in flight.
    let mut activations_sent = 0;
    for _ in 0..10 {
        for osd in [2, 4] {
            h.commit(osd);
        }
        while let Some(key) = h.links.iter().find(|(_, q)| !q.is_empty()).map(|(k, _)| *k) {
            let msg = h.links.get_mut(&key).and_then(VecDeque::pop_front);
            let msg = msg.expect("queued");
            activations_sent += usize::from(matches!(msg, PgMsg::Activate(_)));
            h.deliver(key.1, msg);
        }
        h.event(OsdId(1), PgEvent::Tick);
    }
    assert!(
        h.commits
            .iter()
            .any(|(osd, _, tag)| *osd == OsdId(1) && *tag == StoreTag::Activation(Epoch(6))),
        "osd.1 activated, not yet durably: {}",
        h.pg(1).state_name()
    );
    assert_eq!(
        activations_sent, 0,
        "no peer is told to activate before the primary's activation is durable"
    );
    assert!(
        h.pg(4).info().last_epoch_started < Epoch(6) && !h.pg(4).info().backfilling,
        "the backfill target recorded nothing of the interval"
    );
    // Durable now: the peers are told, and the backfill target among them.
    h.commit(1);
    let told: BTreeSet<(OsdId, bool)> = h
        .links
        .iter()
        .flat_map(|((_, to), q)| {
            q.iter().filter_map(move |m| match m {
                PgMsg::Activate(a) => Some((*to, a.backfill)),
                _ => None,
            })
        })
        .collect();
    assert_eq!(
        told,
        [(OsdId(2), false), (OsdId(4), true)].into_iter().collect()
    );
    h.run();
    assert_eq!(
        h.pg(1).state_name(),
        "active+undersized+degraded+remapped+backfilling"
    );
}

fn go(id: u64) -> Effect {
    Effect::Read { read: ReadId(id) }
}

fn answer(id: u64, answer: ReadAnswer) -> Effect {
    Effect::ReadAnswer {
        read: ReadId(id),
        answer,
    }
}

#[test]
fn a_read_waits_for_its_objects_write_to_be_durable_everywhere() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    assert_eq!(h.read(1, "a"), vec![], "a write to a is in flight: wait");
    assert_eq!(h.read(2, "b"), vec![go(2)], "b is settled");
    assert_eq!(h.read(3, ""), vec![go(3)], "a listing waits for nothing");
    assert_eq!(h.read_done(2, None), vec![answer(2, ReadAnswer::Deliver)]);
    h.commit(1);
    h.deliver_all();
    h.commit(2);
    let started = h.reads_after(|h| {
        h.deliver_all();
        h.commit(3);
    });
    assert!(started.is_empty(), "osd.3's ack not delivered: {started:?}");
    let started = h.reads_after(Harness::deliver_all);
    assert_eq!(
        started,
        vec![go(1)],
        "started once the write is acknowledged"
    );
    assert_eq!(h.done_versions(), vec![Version::new(5, 1)]);
    assert_eq!(h.read_done(1, None), vec![answer(1, ReadAnswer::Deliver)]);
    assert_eq!(
        h.read_done(1, None),
        vec![answer(1, ReadAnswer::Busy)],
        "an answered read is unknown"
    );
}

#[test]
fn a_read_a_write_or_a_new_interval_overtook_is_no_answer() {
    let mut h = three();
    assert_eq!(h.read(1, "a"), vec![go(1)]);
    // A write admitted while the store read ran may be in what it read.
    h.client_write(1, 1, 5, "a");
    assert_eq!(h.read_done(1, None), vec![answer(1, ReadAnswer::Busy)]);
    h.run();
    // A read waiting for a write, and one reading, when the interval
    // changes: neither stands.
    h.client_write(1, 2, 5, "a");
    assert_eq!(h.read(2, "a"), vec![]);
    assert_eq!(h.read(3, "c"), vec![go(3)]);
    let ended = h.reads_after(|h| h.change_interval(&interval(6, &[1, 2, 3], 2)));
    assert!(ended.contains(&answer(2, ReadAnswer::Busy)), "{ended:?}");
    assert_eq!(h.read_done(3, None), vec![answer(3, ReadAnswer::Busy)]);
}

#[test]
fn a_read_waits_for_a_write_only_so_long() {
    let mut h = three();
    h.client_write(1, 1, 5, "a");
    assert_eq!(h.read(1, "a"), vec![]);
    // The write never completes (the replicas hear nothing).
    h.links.clear();
    let wait =
        u64::try_from(cairn_osd::limits::READ_WAIT_FOR_WRITE_MAX.as_millis()).expect("small");
    h.now_ms += wait - 1;
    assert_eq!(h.reads_after(|h| h.event(OsdId(1), PgEvent::Tick)), vec![]);
    h.now_ms += 1;
    assert_eq!(
        h.reads_after(|h| h.event(OsdId(1), PgEvent::Tick)),
        vec![answer(1, ReadAnswer::Busy)]
    );
}

#[test]
fn a_corrupt_read_is_repaired_from_another_copy_or_reported_when_none_is_left() {
    let mut h = leased_three();
    h.client_write(1, 1, 5, "a");
    h.run();
    assert_eq!(h.read(1, "a"), vec![go(1)]);
    assert_eq!(
        h.read_done(1, Some("checksum")),
        vec![answer(1, ReadAnswer::Busy)],
        "another copy replaces it: the client retries"
    );
    assert!(h.pg(1).lacks(b"a"), "recovery of the bad copy is under way");
    // A read of an object this copy lacks waits for recovery, which
    // brings it first.
    assert_eq!(h.read(2, "a"), vec![answer(2, ReadAnswer::Busy)]);
    h.run();
    assert!(!h.pg(1).lacks(b"a"), "recovered from osd.2 or osd.3");
    assert_eq!(h.read(3, "a"), vec![go(3)]);

    // One copy: nothing to wait for.
    let mut one = Harness::new(&[1], &interval(5, &[1], 1), PgLimits::default(), 1);
    one.client_write(1, 1, 5, "a");
    one.run();
    assert_eq!(one.read(1, "a"), vec![go(1)]);
    assert_eq!(
        one.read_done(1, Some("checksum")),
        vec![answer(1, ReadAnswer::Corrupt("checksum".into()))]
    );
}

#[test]
fn sub_writes_that_arrive_ahead_of_their_predecessor_are_applied_in_log_order() {
    let mut h = three();
    for tid in 1..=4 {
        h.client_write(1, tid, 5, &format!("obj{tid}"));
    }
    // osd.2 gets the four sub-writes last first.
    let mut to_2: Vec<PgMsg> = h
        .links
        .remove(&(OsdId(1), OsdId(2)))
        .unwrap_or_default()
        .into();
    assert_eq!(to_2.len(), 4);
    to_2.reverse();
    for msg in to_2 {
        h.deliver(OsdId(2), msg);
    }
    assert!(h.ignored.is_empty(), "{:?}", h.ignored);
    assert_eq!(h.pg(2).last_update(), Version::new(5, 4));
    h.run();
    assert_eq!(h.done_versions().len(), 4);
    assert_eq!(h.log_versions(1), h.log_versions(2));
}

//! The simulator's OSD shell: what `cairn_osd::daemon` does around the PG
//! cores, as synchronous steps over a [`SimStore`] (a `MemStore` with
//! manual sync that can hold damaged metadata records).
//!
//! It follows the daemon closely (map replay through the shared
//! [`MapView`], PG creation and loading, the effects of each event carried
//! out in the order of the shared `Effects::plan`, peer pings and failure
//! reports, reads started and answered by the core) and reuses its pure
//! helpers (`load_pg`, `read_object_state`, `read_ops`, `observe`) and the
//! shell's decisions (`cairn_osd::shell`).
//! Where the daemon spawns a task (pushes, scans, purges, reads) the shell
//! asks for a timer, so other events can come in between, as they can in
//! the daemon.
//!
//! Erasure-coded PGs take the daemon's erasure-coded paths (`osd/ec.rs`):
//! writes planned per shard with roll-back records, partial writes and
//! client reads over shard reads sent to the peers (answered or timed out
//! as the daemon's), shard rebuilds for recovery.
//!
//! Durability: every transaction is applied to the store at once (readable,
//! like a page cache) and becomes durable at the next sync, which the world
//! schedules after a random disk latency; only then are the PG cores told it
//! committed. A crash loses what was not synced (or all but a prefix).

use crate::mon::boot_command;
use crate::net::{MapUpdate, Msg, Node};
use crate::store::SimStore;
use bytes::Bytes;
use cairn_osd::codec::plan_write;
use cairn_osd::daemon::{
    PgSlot, build_scrub_map, check_request, client_reply, load_pg, observe, pg_stat, read_done,
    read_object_state, read_ops, read_reply,
};
use cairn_osd::lease::{AliveStamp, Leases, restart_lease_bound_ms};
use cairn_osd::limits::LEASE_MS;
use cairn_osd::limits::{BACKFILL_SCAN_KEYS, PEER_GRACE};
use cairn_osd::map_view::MapView;
use cairn_osd::scrub::ScrubOrder;
use cairn_osd::shell::{
    PeerAction, PeerContext, PgSync, ScrubSchedule, SplitDue, Turned, admit_peer_msg,
    admit_request, due_scrubs, new_copy_lease_bound_ms, plan_pg_sync, push_after_read, push_start,
    servable, splits_due,
};
use cairn_osd::{Effect, Effects, Interval, MapContext, Pg, PgEvent, PgLimits, PgMsg};
use cairn_osd::{ReadAnswer, ReadId};
use cairn_osd::{ReqId, StoreTag, StoredPg, Version};
use cairn_proto::mon::{FailureReport, Heartbeat, MonCommand, OsdStats, Reply};
use cairn_proto::osd::{ClientOp, ClientReply, OpError};
use cairn_store::{CollectionId, Commit, ObjectKey, ObjectStore, Op, StoreError, Transaction};
use cairn_types::checked::CheckedBytes;
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use std::collections::{BTreeMap, BTreeSet};

mod ec;
pub use ec::EcCounts;

/// Period of the PG ticks, monitor heartbeats and peer pings (the daemon's
/// `PG_TICK_INTERVAL`, `HEARTBEAT_INTERVAL`, `PEER_PING_INTERVAL`).
pub const TICK_MS: u64 = 1_000;
/// Period of the plain map fetch that backs up the monitor's pushes (the
/// daemon's subscription is a long poll, re-sent when it fails).
pub const MAP_PULL_MS: u64 = 2_000;

/// When a timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    Ms(u64),
    /// After a random store latency chosen by the world.
    Io,
}

/// Work an OSD asked to do later.
#[derive(Clone, Debug)]
pub enum OsdTimer {
    Tick,
    Heartbeat,
    Ping,
    MapPull,
    Sync,
    Push {
        pg: PgId,
        object: Bytes,
        targets: Vec<OsdId>,
        /// The requester's interval for a pull, else the PG's current one.
        epoch: Option<Epoch>,
    },
    Scan {
        pg: PgId,
        after: Option<ObjectKey>,
    },
    /// A page of objects for a scrub.
    ScrubList {
        pg: PgId,
        after: Option<ObjectKey>,
    },
    /// Build a scrub map and send it where the order says.
    ScrubMap {
        pg: PgId,
        order: ScrubOrder,
    },
    /// Boot again (the monitor marked this OSD down first).
    Boot,
    Purge {
        pg: PgId,
        epoch: Epoch,
    },
    /// The store read of client read `read`, which the core started (the
    /// daemon's read runs on a blocking task, so writes can slip in before
    /// it).
    ReadRun {
        pg: PgId,
        read: ReadId,
    },
    /// The daemon's timeout of the shard reads of fetch `fetch`.
    ShardReadTimeout {
        fetch: u64,
    },
    /// Plan erasure-coded write `req` again (it met `ObjectBusy`).
    EcReplan {
        req: ReqId,
    },
}

/// A client read in progress: who asked, the request (until its store read
/// ran) and what the read gave (until the core answers).
#[derive(Debug)]
struct SimRead {
    asker: Asker,
    op: Option<ClientOp>,
    result: Option<cairn_osd::daemon::ReadResult>,
}

/// Where a client request's answer goes: the client, and the id of the
/// request frame it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asker {
    pub client: u32,
    pub request_id: u64,
}

/// What one step of an OSD wants done.
#[derive(Debug, Default)]
pub struct Outbox {
    pub sends: Vec<(Node, Msg)>,
    pub timers: Vec<(Delay, OsdTimer)>,
    pub trace: Vec<String>,
    /// Things that must not happen (store refusals the daemon would exit
    /// on, unreadable PGs): each fails the run.
    pub anomalies: Vec<String>,
    /// The process stopped itself (as the daemon exits on a store refusal).
    pub stop: bool,
}

/// A disk error armed on an OSD's store: its next write (a transaction
/// submitted) or flush (a sync) fails with EIO or ENOSPC. What the daemon
/// must do, and the shell does as it: a refused transaction or a failed
/// flush stops the process (it exits; its supervisor starts it again),
/// nothing of it acknowledged, and what was not durable is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    WriteEio,
    WriteEnospc,
    FlushEio,
    FlushEnospc,
}

impl DiskFault {
    fn on_flush(self) -> bool {
        matches!(self, DiskFault::FlushEio | DiskFault::FlushEnospc)
    }
}

/// A submitted transaction not yet durable.
#[derive(Debug)]
struct Unsynced {
    /// The PG step to report once durable, if any.
    report: Option<(PgId, Version, StoreTag)>,
    txn: Transaction,
    commit: Commit,
}

/// The running process of an OSD: everything a crash loses.
#[derive(Debug)]
pub struct OsdProc {
    pub view: MapView,
    pub pgs: BTreeMap<PgId, PgSlot>,
    preexisting: BTreeSet<CollectionId>,
    /// Each pool's `pg_num` this process split its copies for.
    split_for: BTreeMap<PoolId, u32>,
    /// Copies split in the current `sync_pgs`: their new cores honour any
    /// read lease the retired ones promised.
    split_now: BTreeSet<CollectionId>,
    /// Map pages were applied without moving the PGs (more were coming).
    sync_owed: bool,
    told_up: BTreeSet<OsdId>,
    waiters: BTreeMap<ReqId, Vec<Asker>>,
    /// Client reads in progress, by read number.
    reads: BTreeMap<ReadId, SimRead>,
    next_read: u64,
    unsynced: Vec<Unsynced>,
    sync_scheduled: bool,
    last_heard: BTreeMap<OsdId, u64>,
    /// Messages naming a newer map than this OSD's, held until a map
    /// update arrives or the daemon's map fetch would have timed out (it
    /// awaits one fetch, then handles the message either way).
    deferred: Vec<(u64, Node, Msg)>,
    /// The monitor answered the boot: the daemon serves only after that
    /// (messages wait meanwhile, as in the listener's backlog).
    booted: bool,
    pre_boot: Vec<(Node, Msg)>,
    /// When this process started, on the OSD's clock (scheduled scrubs
    /// count stamps from it at the earliest, as the daemon does).
    started_ms: u64,
    /// Erasure-coded writes, reads and pushes waiting for shard reads.
    ec: ec::EcState,
}

/// How long the daemon waits for a map fetch (`MON_CALL_TIMEOUT`).
const MAP_FETCH_MS_MAX: u64 = 5_000;
/// Messages held waiting for a map fetch; beyond it they go through at once.
const DEFERRED_MAX: usize = 4_096;

/// One OSD: its store (which survives crashes) and its process.
#[derive(Debug)]
pub struct SimOsd {
    pub id: OsdId,
    pub store: SimStore,
    pub process: Option<OsdProc>,
    /// Bumped at every start and crash, so timers of a dead process are
    /// dropped.
    pub incarnation: u64,
    pub limits: PgLimits,
    /// Transactions lost in crashes, for the report.
    pub lost_txn_count: u64,
    /// The virtual time of the event being handled (the PG cores' clock
    /// for read leases).
    now_ms: u64,
    /// When the process last recorded that it was alive (the daemon's
    /// alive file, rewritten every second): bounds the read leases a
    /// restarted copy may still have promised.
    last_alive_ms: Option<u64>,
    /// Every (object, write) this OSD's store ever held durably with sound
    /// data, recorded at each sync: the double-fault proof
    /// (`checks::double_faults`) needs to know that no sound copy of a lost
    /// version vanished but by injected rot. The write is the PG log's
    /// version (epoch and sequence), not only the object's version (the
    /// sequence): a divergent write and the authoritative one that replaced
    /// it on another branch share the sequence (seed 202303). Epoch 0: the
    /// PG's log did not name the write (the proof then takes any epoch).
    pub sound_held: BTreeSet<(Bytes, Version)>,
    /// How far this OSD's clock is ahead of the virtual one (clock skew
    /// between nodes); every time it is given is its own clock.
    pub clock_offset_ms: u64,
    /// A disk error armed for the next write or flush.
    pub disk_fault: Option<DiskFault>,
    /// Disk errors that hit (for the report).
    pub disk_errors: u64,
    /// PG copies found corrupt at load and reset (for the report).
    pub corrupt_pgs_reset: u64,
    /// The object whose data this OSD's store last wrote durably.
    last_data_write: Option<(CollectionId, ObjectKey)>,
    /// Scheduled scrubs (the daemon's `osd_scrub_interval` and friends),
    /// started at each tick as the daemon does; `None`: none.
    pub scrub_schedule: Option<ScrubSchedule>,
    /// What the erasure-coded paths did (for the report).
    pub ec_counts: EcCounts,
}

/// The last object whose data `txn` writes, if any.
fn data_written(txn: &Transaction) -> Option<(CollectionId, ObjectKey)> {
    txn.ops.iter().rev().find_map(|op| match op {
        Op::Write { object, .. } | Op::WriteFull { object, .. } | Op::Append { object, .. } => {
            Some((txn.collection, object.clone()))
        }
        _ => None,
    })
}

/// Objects one scrub chunk compares (`osd_scrub_chunk_max`'s default).
const SCRUB_CHUNK_OBJECTS: usize = 32;
/// Pause before booting again after the monitor marked this OSD down.
const BOOT_AGAIN_MS: u64 = 50;
/// How long a boot waits for the monitor's answer before it is sent again
/// (the daemon's `MON_CALL_TIMEOUT`).
const BOOT_RETRY_MS: u64 = 5_000;

/// Whether inputs the PG cores ignore are traced (`CAIRN_SIM_TRACE_IGNORED`;
/// there are many, most harmless: late acks, stale intervals).
fn trace_ignored() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CAIRN_SIM_TRACE_IGNORED").is_some())
}

/// OSD ids as plain numbers, for trace lines.
fn ids(osds: &[OsdId]) -> Vec<u32> {
    osds.iter().map(|o| o.0).collect()
}

/// An interval's up and acting sets for a trace line: erasure-coded, by
/// position (`_`: a hole).
fn sets(interval: &Interval) -> String {
    let positions = |osds: &[Option<OsdId>]| {
        let shown: Vec<String> = osds
            .iter()
            .map(|o| o.map_or("_".to_owned(), |o| o.0.to_string()))
            .collect();
        format!("[{}]", shown.join(", "))
    };
    match &interval.ec {
        Some(ec) => format!("up {} acting {}", positions(&ec.up), positions(&ec.acting)),
        None => format!(
            "up {:?} acting {:?}",
            ids(&interval.up),
            ids(&interval.acting)
        ),
    }
}

fn collection_of(pg: PgId) -> CollectionId {
    CollectionId::pg(pg.pool.0, pg.seed)
}

impl SimOsd {
    #[must_use]
    pub fn new(id: OsdId, limits: PgLimits) -> SimOsd {
        SimOsd {
            id,
            store: SimStore::with_manual_sync(),
            process: None,
            incarnation: 0,
            limits,
            lost_txn_count: 0,
            now_ms: 0,
            last_alive_ms: None,
            sound_held: BTreeSet::new(),
            clock_offset_ms: 0,
            disk_fault: None,
            disk_errors: 0,
            corrupt_pgs_reset: 0,
            last_data_write: None,
            scrub_schedule: None,
            ec_counts: EcCounts::default(),
        }
    }

    /// Records the versions the objects `txns` touched hold now that they
    /// are durable, where their data is sound.
    ///
    /// `logs`: the PG logs of the process, which name the write each
    /// object version comes from.
    fn note_durable<'a>(
        &mut self,
        txns: impl Iterator<Item = &'a Transaction> + Clone,
        logs: &BTreeMap<CollectionId, BTreeMap<(Bytes, u64), Version>>,
    ) {
        if let Some(last) = txns.clone().filter_map(data_written).last() {
            self.last_data_write = Some(last);
        }
        let touched: BTreeSet<(CollectionId, ObjectKey)> = txns
            .flat_map(|txn| {
                txn.ops
                    .iter()
                    .filter_map(|op| op.object().map(|o| (txn.collection, o.clone())))
            })
            .collect();
        for (collection, key) in touched {
            if let Ok(stat) = self.store.stat(collection, &key)
                && !self.store.is_rotten(collection, &key)
            {
                let write = logs
                    .get(&collection)
                    .and_then(|log| log.get(&(key.name.clone(), stat.version)))
                    .copied()
                    .unwrap_or(Version {
                        epoch: Epoch(0),
                        seq: stat.version,
                    });
                self.sound_held.insert((key.name.clone(), write));
            }
        }
    }

    /// The writes the process's PG logs name, per collection: (object,
    /// object version) -> log version.
    fn log_writes(&self) -> BTreeMap<CollectionId, BTreeMap<(Bytes, u64), Version>> {
        let Some(process) = self.process.as_ref() else {
            return BTreeMap::new();
        };
        process
            .pgs
            .iter()
            .map(|(pg, slot)| {
                let writes = slot
                    .pg
                    .log()
                    .iter()
                    .map(|e| ((e.object.clone(), e.version.seq), e.version))
                    .collect();
                (collection_of(*pg), writes)
            })
            .collect()
    }

    /// Starts the process: boots with the monitor and arms its timers.
    pub fn start(&mut self, now_ms: u64, out: &mut Outbox) {
        self.incarnation += 1;
        self.now_ms = now_ms;
        let preexisting = self
            .store
            .collections()
            .unwrap_or_default()
            .into_iter()
            .collect();
        self.process = Some(OsdProc {
            view: MapView::genesis(),
            pgs: BTreeMap::new(),
            preexisting,
            split_for: BTreeMap::new(),
            split_now: BTreeSet::new(),
            sync_owed: false,
            told_up: BTreeSet::new(),
            waiters: BTreeMap::new(),
            reads: BTreeMap::new(),
            next_read: 0,
            unsynced: Vec::new(),
            sync_scheduled: false,
            last_heard: BTreeMap::new(),
            deferred: Vec::new(),
            booted: false,
            pre_boot: Vec::new(),
            started_ms: now_ms,
            ec: ec::EcState::new(self.incarnation),
        });
        out.sends
            .push((Node::Mon, Msg::Command(boot_command(self.id))));
        out.timers.push((Delay::Ms(BOOT_RETRY_MS), OsdTimer::Boot));
        out.trace.push(format!("{} starts", self.id));
    }

    /// The monitor took the boot: fetch the map, arm the timers, and handle
    /// what came meanwhile.
    fn finish_boot(&mut self, now_ms: u64, out: &mut Outbox) {
        let process = self.proc_mut();
        process.booted = true;
        let waiting = std::mem::take(&mut process.pre_boot);
        out.sends.push((Node::Mon, Msg::GetMap { have: Epoch(1) }));
        for timer in [OsdTimer::Tick, OsdTimer::Heartbeat, OsdTimer::Ping] {
            out.timers.push((Delay::Ms(TICK_MS), timer));
        }
        out.timers.push((Delay::Ms(MAP_PULL_MS), OsdTimer::MapPull));
        for (from, msg) in waiting {
            self.deliver(now_ms, from, msg, out);
        }
    }

    /// Kills the process: the store keeps what was synced, plus the first
    /// `keep` transactions that were not (a crash in the middle of a group
    /// commit); the rest is lost.
    ///
    /// Returns the objects whose data the last kept transaction wrote, or
    /// else the last write of data that became durable: what a torn write
    /// can hit (its data only partly on disk while its metadata committed:
    /// a write in flight, or the in-place apply of a small write the crash
    /// cut).
    pub fn crash(&mut self, keep: usize, out: &mut Outbox) -> Vec<(CollectionId, ObjectKey)> {
        self.incarnation += 1;
        let logs = self.log_writes();
        let Some(process) = self.process.take() else {
            return Vec::new();
        };
        let pending: Vec<Transaction> = process.unsynced.into_iter().map(|u| u.txn).collect();
        self.store.crash();
        let kept = keep.min(pending.len());
        for txn in pending.iter().take(kept) {
            // These applied once before, in this order: they apply again.
            drop(self.store.submit(txn.clone()));
        }
        self.store.sync();
        self.note_durable(pending.iter().take(kept), &logs);
        let lost = pending.len() - kept;
        self.lost_txn_count += lost as u64;
        out.trace.push(format!(
            "{} crashes: {kept} unsynced transactions kept, {lost} lost",
            self.id
        ));
        if let Some(last) = pending.iter().take(kept).rev().find_map(data_written) {
            self.last_data_write = Some(last);
        }
        self.last_data_write.iter().cloned().collect()
    }

    /// An operator's scrub of `pg` (`cairn pg scrub|deep-scrub|repair`):
    /// started if this OSD holds the PG and its core would start one now.
    pub fn operator_scrub(
        &mut self,
        now_ms: u64,
        pg: PgId,
        deep: bool,
        repair: bool,
        out: &mut Outbox,
    ) {
        self.now_ms = now_ms;
        let Some(process) = self.process.as_ref() else {
            return;
        };
        let refusal = process.pgs.get(&pg).map(|slot| slot.pg.scrub_refusal());
        if let Some(None) = refusal {
            let event = PgEvent::Scrub {
                deep,
                repair,
                now_secs: now_ms / 1000,
            };
            self.feed(pg, event, out);
        }
    }

    /// Transactions submitted and not yet durable.
    #[must_use]
    pub fn unsynced_count(&self) -> usize {
        self.process.as_ref().map_or(0, |p| p.unsynced.len())
    }

    #[must_use]
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Whether a PG this OSD leads reports inconsistent objects.
    #[must_use]
    pub fn reports_inconsistent(&self) -> bool {
        self.process.as_ref().is_some_and(|p| {
            p.pgs
                .values()
                .any(|slot| slot.pg.is_active_primary() && slot.pg.inconsistent().0 > 0)
        })
    }

    /// Handles a message from `from`.
    pub fn deliver(&mut self, now_ms: u64, from: Node, msg: Msg, out: &mut Outbox) {
        if self.process.is_none() {
            return;
        }
        self.now_ms = now_ms;
        if !self.proc().booted {
            match msg {
                Msg::MonReply(Ok(Reply::OsdBooted { .. })) => self.finish_boot(now_ms, out),
                // The map still had this OSD up: the monitor marked it
                // down first (a new interval for its PGs); boot again.
                Msg::MonReply(Ok(Reply::Done { .. })) => {
                    out.timers.push((Delay::Ms(BOOT_AGAIN_MS), OsdTimer::Boot));
                }
                other => {
                    let process = self.proc_mut();
                    if process.pre_boot.len() < DEFERRED_MAX {
                        process.pre_boot.push((from, other));
                    }
                }
            }
            return;
        }
        if self.needs_newer_map(&msg) {
            let process = self.proc_mut();
            if process.deferred.len() < DEFERRED_MAX {
                let have = process.view.epoch();
                process
                    .deferred
                    .push((now_ms + MAP_FETCH_MS_MAX, from, msg));
                out.sends.push((Node::Mon, Msg::GetMap { have }));
                return;
            }
        }
        self.handle(now_ms, from, msg, out);
    }

    /// Whether the daemon would fetch the map before handling `msg`: a PG
    /// message of an interval newer than its copy's, or a client request
    /// with a newer map than its own.
    fn needs_newer_map(&self, msg: &Msg) -> bool {
        let process = self.proc();
        match msg {
            Msg::Pg { pg, msg } => {
                let started = process.pgs.get(pg).map(|s| s.pg.interval().epoch_started);
                started.is_none_or(|s| s < msg.interval_epoch())
                    && msg.interval_epoch() > process.view.epoch()
            }
            Msg::Op { op, .. } => op.epoch > process.view.epoch(),
            // The daemon's `serve_shard_read` refreshes its map first when
            // its copy is behind the asker's interval.
            Msg::ShardRead { read, .. } => {
                let started = process
                    .pgs
                    .get(&read.pg)
                    .map(|s| s.pg.interval().epoch_started);
                started.is_none_or(|s| s < read.interval_epoch)
                    && read.interval_epoch > process.view.epoch()
            }
            _ => false,
        }
    }

    /// Handles the held messages whose map fetch is done (`all`) or timed
    /// out.
    fn release_deferred(&mut self, now_ms: u64, all: bool, out: &mut Outbox) {
        let held = std::mem::take(&mut self.proc_mut().deferred);
        let (ready, waiting): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|(deadline, _, _)| all || *deadline <= now_ms);
        self.proc_mut().deferred = waiting;
        for (_, from, msg) in ready {
            if self.process.is_none() {
                return;
            }
            self.handle(now_ms, from, msg, out);
        }
    }

    fn handle(&mut self, now_ms: u64, from: Node, msg: Msg, out: &mut Outbox) {
        match msg {
            Msg::Pg { pg, msg } => self.peer_msg(pg, msg, out),
            Msg::Ping { .. } => {
                let epoch = self.proc().view.epoch();
                out.sends.push((from, Msg::Pong { epoch }));
            }
            Msg::Pong { .. } => {
                if let (Node::Osd(peer), Some(p)) = (from, self.process.as_mut()) {
                    p.last_heard.insert(peer, now_ms);
                }
            }
            Msg::MonReply(Ok(Reply::Heartbeat { up: false, .. })) => {
                out.sends
                    .push((Node::Mon, Msg::Command(boot_command(self.id))));
            }
            // The map still had this OSD up: the monitor marked it down
            // first (a new interval for its PGs); boot again.
            Msg::MonReply(Ok(Reply::Done { .. })) => {
                out.timers.push((Delay::Ms(BOOT_AGAIN_MS), OsdTimer::Boot));
            }
            Msg::Map(update) => {
                // A full page: the history goes on; ask for the next one,
                // as the daemon's refresh does.
                // A full map is the oldest the monitor keeps: its
                // incrementals come next.
                let more = match &update {
                    MapUpdate::Incrementals(incrementals) => {
                        incrementals.len() >= cairn_proto::limits::INCREMENTALS_PER_REPLY_MAX
                    }
                    MapUpdate::Full { .. } => true,
                };
                // The PGs move once the map caught up, as the daemon's.
                self.apply_map(update, !more, out);
                if more {
                    let have = self.proc().view.epoch();
                    out.sends.push((Node::Mon, Msg::GetMap { have }));
                }
                self.release_deferred(now_ms, true, out);
            }
            Msg::Op {
                request_id,
                op,
                data,
            } => {
                if let Node::Client(client) = from {
                    let asker = Asker { client, request_id };
                    self.client_op(asker, op, data, out);
                }
            }
            Msg::ShardRead { request_id, read } => {
                self.serve_shard_read(from, request_id, &read, out);
            }
            Msg::DirectRead { request_id, read } => {
                self.serve_direct_read(from, request_id, &read, out);
            }
            Msg::ShardReadReply {
                request_id,
                reply,
                data,
            } => self.shard_read_reply(request_id, reply, &data, out),
            _ => {}
        }
    }

    /// Fires a timer of the current incarnation.
    pub fn timer(&mut self, now_ms: u64, timer: OsdTimer, out: &mut Outbox) {
        if self.process.is_none() {
            return;
        }
        self.now_ms = now_ms;
        match timer {
            OsdTimer::Tick => {
                self.release_deferred(now_ms, false, out);
                if self.process.is_none() {
                    return;
                }
                self.last_alive_ms = Some(now_ms);
                let pgs: Vec<PgId> = self.proc().pgs.keys().copied().collect();
                for pg in pgs {
                    self.feed(pg, PgEvent::Tick, out);
                }
                self.schedule_scrubs(now_ms, out);
                out.timers.push((Delay::Ms(TICK_MS), OsdTimer::Tick));
            }
            OsdTimer::Heartbeat => {
                let heartbeat = Heartbeat {
                    osd: self.id,
                    stats: self.stats(),
                };
                out.sends.push((Node::Mon, Msg::Heartbeat(heartbeat)));
                out.timers.push((Delay::Ms(TICK_MS), OsdTimer::Heartbeat));
            }
            OsdTimer::Ping => {
                self.ping_peers(now_ms, out);
                out.timers.push((Delay::Ms(TICK_MS), OsdTimer::Ping));
            }
            OsdTimer::MapPull => {
                let have = self.proc().view.epoch();
                out.sends.push((Node::Mon, Msg::GetMap { have }));
                out.timers.push((Delay::Ms(MAP_PULL_MS), OsdTimer::MapPull));
            }
            OsdTimer::Sync => self.sync(out),
            OsdTimer::Push {
                pg,
                object,
                targets,
                epoch,
            } => self.push_object(pg, object, targets, epoch, out),
            OsdTimer::Scan { pg, after } => self.scan(pg, after, false, out),
            OsdTimer::ScrubList { pg, after } => self.scan(pg, after, true, out),
            OsdTimer::ScrubMap { pg, order } => self.scrub_map(pg, order, out),
            OsdTimer::Boot => {
                out.sends
                    .push((Node::Mon, Msg::Command(boot_command(self.id))));
                if !self.proc().booted {
                    // No answer yet: the daemon's boot call times out and
                    // tries again.
                    out.timers.push((Delay::Ms(BOOT_RETRY_MS), OsdTimer::Boot));
                }
            }
            OsdTimer::Purge { pg, epoch } => self.purge(pg, epoch, out),
            OsdTimer::ReadRun { pg, read } => self.read(pg, read, out),
            OsdTimer::ShardReadTimeout { fetch } => self.shard_read_timeout(fetch, out),
            OsdTimer::EcReplan { req } => self.ec_plan(req, out),
        }
    }

    /// The statistics of a heartbeat: the daemon's report of each PG this
    /// OSD leads (the monitor reads the clean ones from it); space and I/O
    /// counters are not simulated.
    fn stats(&self) -> OsdStats {
        let process = self.proc();
        let pgs = process
            .pgs
            .iter()
            .filter(|(_, slot)| slot.pg.interval().primary == Some(self.id))
            .map(|(pg, slot)| pg_stat(*pg, &slot.pg))
            .collect();
        OsdStats {
            pgs,
            pgs_held: u32::try_from(process.pgs.len()).unwrap_or(u32::MAX),
            map_epoch: process.view.epoch().0,
            ..OsdStats::default()
        }
    }

    /// The daemon's `schedule_scrubs`, by the scenario's schedule.
    fn schedule_scrubs(&mut self, now_ms: u64, out: &mut Outbox) {
        let Some(schedule) = self.scrub_schedule else {
            return;
        };
        let process = self.proc();
        let cores = process.pgs.iter().map(|(pg, slot)| (*pg, &slot.pg));
        let due = due_scrubs(cores, schedule, now_ms / 1000, process.started_ms / 1000);
        for (pg, deep) in due {
            let event = PgEvent::Scrub {
                deep,
                repair: false,
                now_secs: now_ms / 1000,
            };
            self.feed(pg, event, out);
        }
    }

    fn proc(&self) -> &OsdProc {
        self.process.as_ref().expect("running")
    }

    fn proc_mut(&mut self) -> &mut OsdProc {
        self.process.as_mut().expect("running")
    }

    /// Pings the up OSDs this OSD shares a PG with, and reports to the
    /// monitor those silent for longer than the daemon's grace.
    fn ping_peers(&mut self, now_ms: u64, out: &mut Outbox) {
        let whoami = self.id;
        let process = self.proc_mut();
        let up = process.view.up_osds();
        let peers: BTreeSet<OsdId> = process
            .pgs
            .values()
            .flat_map(|slot| {
                let interval = slot.pg.interval();
                interval.acting.iter().chain(interval.up.iter()).copied()
            })
            .filter(|id| *id != whoami && up.contains(id))
            .collect();
        process.last_heard.retain(|id, _| peers.contains(id));
        let grace_ms = u64::try_from(PEER_GRACE.as_millis()).unwrap_or(u64::MAX);
        for peer in peers {
            let heard = *process.last_heard.entry(peer).or_insert(now_ms);
            if now_ms.saturating_sub(heard) > grace_ms {
                let report = FailureReport {
                    reporter: whoami,
                    target: peer,
                };
                out.sends.push((Node::Mon, Msg::FailureReport(report)));
            }
            let epoch = process.view.epoch();
            out.sends.push((Node::Osd(peer), Msg::Ping { epoch }));
        }
    }

    /// Replays a map change and brings the PGs up to date; asks for the
    /// missing epochs if the update does not follow on.
    fn apply_map(&mut self, update: MapUpdate, sync: bool, out: &mut Outbox) {
        let process = self.proc_mut();
        let before = process.view.epoch();
        process.sync_owed |= !sync;
        match update {
            MapUpdate::Incrementals(incrementals) => {
                for inc in &incrementals {
                    if inc.epoch > process.view.epoch() && !process.view.advance(inc) {
                        let have = process.view.epoch();
                        out.sends.push((Node::Mon, Msg::GetMap { have }));
                        break;
                    }
                }
            }
            MapUpdate::Full { map, endpoints } => {
                if map.epoch > process.view.epoch() {
                    process.view.jump(map, endpoints);
                }
            }
        }
        if sync && (process.view.epoch() != before || process.sync_owed) {
            process.sync_owed = false;
            self.sync_pgs(out);
        }
    }

    /// The daemon's `sync_pgs`: creates the PGs this OSD newly acts for or
    /// holds, and tells existing ones of interval changes and of OSDs going
    /// up or down.
    fn sync_pgs(&mut self, out: &mut Outbox) {
        self.split_pgs(out);
        let whoami = self.id;
        let process = self.proc_mut();
        let up_osds = process.view.up_osds();
        let up_changed = process.told_up != up_osds;
        process.told_up = up_osds;
        let process = self.proc();
        let plan = plan_pg_sync(
            whoami,
            &process.view,
            |pg| process.pgs.get(&pg).map(|s| s.pg.interval().epoch_started),
            |pg| process.preexisting.contains(&collection_of(pg)),
            up_changed,
        );
        for step in plan {
            match step {
                PgSync::NewInterval {
                    pg,
                    interval,
                    context,
                } => {
                    out.trace.push(format!(
                        "{whoami} {pg}: interval e{} {}",
                        interval.epoch_started.0,
                        sets(&interval)
                    ));
                    self.feed(pg, PgEvent::MapContext(context), out);
                    self.feed(pg, PgEvent::IntervalChange(interval), out);
                }
                PgSync::Context { pg, context } => {
                    self.feed(pg, PgEvent::MapContext(context), out);
                }
                PgSync::Create {
                    pg,
                    interval,
                    context,
                } => self.create_pg(pg, interval, context, out),
            }
        }
        self.proc_mut().split_now.clear();
    }

    /// The daemon's `split_pgs`: when a pool's `pg_num` grew, retires its
    /// cores (in-flight writes get a retry), splits every copy of the pool
    /// in the store (queued like any write, so a crash keeps a prefix), and
    /// lets them load again as held copies.
    fn split_pgs(&mut self, out: &mut Outbox) {
        let whoami = self.id;
        let process = self.proc();
        let epoch = process.view.epoch();
        let due = splits_due(&process.view, |pool| process.split_for.get(&pool).copied());
        let mut changed = BTreeSet::new();
        for split in due.iter().filter(|split| split.retire) {
            let doomed: Vec<PgId> = self
                .proc()
                .pgs
                .keys()
                .filter(|pg| pg.pool == split.pool)
                .copied()
                .collect();
            for pg in doomed {
                if let Some(mut slot) = self.proc_mut().pgs.remove(&pg) {
                    let fx = slot.pg.retire(epoch);
                    self.execute(pg, fx, out);
                    changed.insert(collection_of(pg));
                }
            }
        }
        let mut queued = Vec::new();
        for &SplitDue { pool, pg_num, .. } in &due {
            let store = &self.store;
            // Applied at once (durable at the next sync, as the daemon's
            // would be after its apply), so planning the next parent
            // reads it; a refused one stops the OSD at the sync.
            let planned = cairn_osd::split::split_pool(store, pool, pg_num, &mut |txn| {
                let commit = store.submit(txn.clone());
                queued.push(Unsynced {
                    report: None,
                    txn,
                    commit,
                });
                Ok(())
            });
            match planned {
                Ok(touched) => {
                    if !touched.is_empty() {
                        out.trace.push(format!(
                            "{whoami} pool {} split to pg_num {pg_num}: {} collections",
                            pool.0,
                            touched.len()
                        ));
                    }
                    changed.extend(touched);
                }
                Err(error) => {
                    out.anomalies
                        .push(format!("{whoami}: PG split failed in the store: {error}"));
                    out.stop = true;
                }
            }
        }
        if !queued.is_empty() {
            let process = self.proc_mut();
            process.unsynced.extend(queued);
            if !process.sync_scheduled {
                process.sync_scheduled = true;
                out.timers.push((Delay::Io, OsdTimer::Sync));
            }
        }
        let process = self.proc_mut();
        for split in due {
            process.split_for.insert(split.pool, split.pg_num);
        }
        process.preexisting.extend(changed.iter().copied());
        process.split_now = changed;
    }

    /// Loads (or creates) a PG's collection and starts its core.
    fn create_pg(&mut self, pg: PgId, interval: Interval, context: MapContext, out: &mut Outbox) {
        let collection = collection_of(pg);
        let pg_num = self
            .proc()
            .view
            .placement
            .pool(pg.pool)
            .map_or(0, |p| p.pg_num);
        let exists = self
            .store
            .collections()
            .is_ok_and(|c| c.contains(&collection));
        let stored = if exists {
            match load_pg(&self.store, collection) {
                Ok(stored) => stored,
                // The daemon's rule: a damaged record of this copy; it is
                // emptied and rebuilt from its peers, vouching for nothing.
                Err(StoreError::Corrupt(why)) => {
                    let epoch = interval.epoch_started;
                    match self.reset_corrupt(pg, collection, pg_num, epoch, &why, out) {
                        Some(stored) => stored,
                        None => return,
                    }
                }
                Err(error) => {
                    out.anomalies
                        .push(format!("{} cannot load {pg}: {error}", self.id));
                    return;
                }
            }
        } else {
            let txn = Transaction::new(collection)
                .with(Op::CreateCollection)
                .with(cairn_osd::split::pg_num_op(pg_num));
            self.submit(None, txn, out);
            StoredPg::default()
        };
        out.trace.push(format!(
            "{} {pg}: {} at interval e{} {}",
            self.id,
            if exists { "loaded" } else { "created" },
            interval.epoch_started.0,
            sets(&interval)
        ));
        // A copy held before this start may have promised a read lease:
        // for at most a lease after the process was last alive.
        // A copy split just now: as long as its retired core's promise.
        // The daemon's record is an `AliveStamp` on the boot clock; the
        // simulated machine never reboots, so one boot id.
        let stamp = |uptime_ms| AliveStamp {
            boot_id: "sim".into(),
            uptime_ms,
        };
        let restart_bound_ms = restart_lease_bound_ms(
            self.last_alive_ms.map(stamp).as_ref(),
            Some(&stamp(self.now_ms)),
        );
        let bound_ms = new_copy_lease_bound_ms(
            self.proc().split_now.contains(&collection),
            self.proc().preexisting.contains(&collection),
            restart_bound_ms,
        );
        let mut leases = Leases::default();
        leases.set_clock(self.now_ms);
        leases.enable(LEASE_MS, bound_ms);
        let restored =
            Pg::restore_leased(pg, self.id, interval, self.limits, stored, context, leases);
        match restored {
            Ok((core, fx)) => {
                let slot = PgSlot {
                    pg: core,
                    wiped_in: None,
                };
                self.proc_mut().pgs.insert(pg, slot);
                self.execute(pg, fx, out);
            }
            Err(error) => out
                .anomalies
                .push(format!("{} bad interval for {pg}: {error}", self.id)),
        }
    }

    /// The daemon's reset of a copy whose metadata is corrupt
    /// (`reset_corrupt_pg`): its transactions, submitted in order (a crash
    /// keeps a prefix), and the copy they leave.
    fn reset_corrupt(
        &mut self,
        pg: PgId,
        collection: CollectionId,
        pg_num: u32,
        epoch: Epoch,
        why: &str,
        out: &mut Outbox,
    ) -> Option<StoredPg> {
        let reset = cairn_osd::daemon::reset_corrupt_pg(&self.store, collection, pg_num, epoch);
        let (txns, stored) = match reset {
            Ok(reset) => reset,
            Err(error) => {
                out.anomalies
                    .push(format!("{} cannot reset corrupt {pg}: {error}", self.id));
                return None;
            }
        };
        for txn in txns {
            self.submit(None, txn, out);
            if out.stop {
                return None;
            }
        }
        self.corrupt_pgs_reset += 1;
        out.trace.push(format!(
            "{} {pg}: copy corrupt ({why}); emptied, to be backfilled",
            self.id
        ));
        Some(stored)
    }

    /// Feeds one event to a PG and carries out its effects.
    pub fn feed(&mut self, pg: PgId, event: PgEvent, out: &mut Outbox) -> bool {
        let now_ms = self.now_ms;
        let Some(slot) = self.proc_mut().pgs.get_mut(&pg) else {
            return false;
        };
        let fx = slot.handle_at(now_ms, event);
        self.execute(pg, fx, out);
        true
    }

    /// Submits a transaction; `report` is what to tell the PG once durable.
    fn submit(
        &mut self,
        report: Option<(PgId, Version, StoreTag)>,
        txn: Transaction,
        out: &mut Outbox,
    ) {
        if let Some(fault) = self.disk_fault.filter(|f| !f.on_flush()) {
            // The store refuses the transaction: nothing of it is applied,
            // its step is never reported committed, and the daemon exits.
            self.disk_fault = None;
            self.disk_errors += 1;
            out.trace.push(format!(
                "{} disk: {fault:?} on a write ({report:?}): the store refuses it; the OSD stops",
                self.id
            ));
            out.stop = true;
            return;
        }
        if out.stop {
            // Stopping: a later transaction of the same step is not applied.
            return;
        }
        let commit = self.store.submit(txn.clone());
        let process = self.proc_mut();
        process.unsynced.push(Unsynced {
            report,
            txn,
            commit,
        });
        if !process.sync_scheduled {
            process.sync_scheduled = true;
            out.timers.push((Delay::Io, OsdTimer::Sync));
        }
    }

    /// The daemon's `queue_store` and `execute`: carries out a PG's
    /// effects in the order [`Effects::plan`] gives.
    fn execute(&mut self, pg: PgId, fx: Effects, out: &mut Outbox) {
        let plan = fx.plan();
        for write in plan.store {
            let report = Some((pg, write.version, write.tag));
            self.submit(report, write.txn, out);
        }
        for effect in plan.rest {
            match effect {
                Effect::Store(_) => unreachable!("the plan keeps store writes apart"),
                Effect::Note(note) => {
                    // The core's note of a roll-back (`rolled back <version>
                    // of <object>`), counted for the report.
                    if note.starts_with("rolled back") {
                        self.ec_counts.rollbacks += 1;
                    }
                    out.trace.push(format!("{} {pg}: {note}", self.id));
                }
                Effect::Ignored(ignored) => {
                    if trace_ignored() {
                        out.trace
                            .push(format!("{} {pg}: ignored: {ignored}", self.id));
                    }
                }
                Effect::PgTempSet(acting) => self.ask_pg_temp(pg, Some(acting), out),
                Effect::PgTempClear => self.ask_pg_temp(pg, None, out),
                // No recovery throttle here: pushes run in timer order.
                Effect::Push {
                    object, targets, ..
                } => {
                    let push = OsdTimer::Push {
                        pg,
                        object,
                        targets,
                        epoch: None,
                    };
                    out.timers.push((Delay::Io, push));
                }
                Effect::Scan { after } => {
                    out.timers.push((Delay::Io, OsdTimer::Scan { pg, after }));
                }
                Effect::Purge { interval_epoch } => {
                    let purge = OsdTimer::Purge {
                        pg,
                        epoch: interval_epoch,
                    };
                    out.timers.push((Delay::Io, purge));
                }
                Effect::ScrubList { after } => {
                    out.timers
                        .push((Delay::Io, OsdTimer::ScrubList { pg, after }));
                }
                Effect::ScrubMap(order) => {
                    out.timers
                        .push((Delay::Io, OsdTimer::ScrubMap { pg, order }));
                }
                Effect::VerifyParity { chunk, checks } => {
                    self.verify_parity(pg, chunk, checks, out);
                }
                Effect::Reply { req, reply } if self.is_ec_write(req) => {
                    self.ec_core_reply(req, reply, out);
                }
                Effect::Reply { req, reply } => {
                    let process = self.proc_mut();
                    let epoch = process.view.epoch();
                    for asker in process.waiters.remove(&req).unwrap_or_default() {
                        Self::reply(out, asker, client_reply(reply.clone(), epoch), Bytes::new());
                    }
                }
                Effect::Read { read } => {
                    out.timers.push((Delay::Io, OsdTimer::ReadRun { pg, read }));
                }
                Effect::ReadAnswer { read, answer } => self.answer_read(read, answer, out),
                Effect::Send { to, msg } => {
                    out.sends.push((Node::Osd(to), Msg::Pg { pg, msg }));
                }
            }
        }
    }

    /// Asks the monitor to set (`Some`) or clear the PG's temporary acting
    /// set.
    fn ask_pg_temp(&self, pg: PgId, acting: Option<Vec<OsdId>>, out: &mut Outbox) {
        let asked = acting.as_deref().map(ids);
        out.trace
            .push(format!("{} {pg}: asks for pg_temp {asked:?}", self.id));
        let command = MonCommand::PgTemp { pg, acting };
        out.sends.push((Node::Mon, Msg::Command(command)));
    }

    /// Makes every submitted transaction durable and tells the PGs, in
    /// submission order. A refused transaction stops the OSD, as the
    /// daemon exits when its store refuses a transaction a PG logged.
    fn sync(&mut self, out: &mut Outbox) {
        if let Some(fault) = self.disk_fault.filter(|f| f.on_flush()) {
            // The flush fails: nothing since the last one is durable, no
            // commit is reported, and the daemon exits (what reached the
            // disk is unknown; the crash that follows drops it).
            self.disk_fault = None;
            self.disk_errors += 1;
            out.trace.push(format!(
                "{} disk: {fault:?} on a flush: nothing of it is durable; the OSD stops",
                self.id
            ));
            out.stop = true;
            return;
        }
        self.store.sync();
        let logs = self.log_writes();
        let process = self.proc_mut();
        process.sync_scheduled = false;
        let done = std::mem::take(&mut process.unsynced);
        self.note_durable(done.iter().map(|u| &u.txn), &logs);
        for unsynced in done {
            let result = unsynced.commit.wait();
            match (result, unsynced.report) {
                (Ok(()), Some((pg, version, tag))) => {
                    let event = match tag {
                        StoreTag::Entry => PgEvent::LocalCommitted { version },
                        StoreTag::Part => continue,
                        tag => PgEvent::Committed(tag),
                    };
                    self.feed(pg, event, out);
                }
                (Ok(()), None) => {}
                (Err(error), report) => {
                    out.anomalies.push(format!(
                        "{}: the store refused a transaction ({report:?}): {error}; \
                         the daemon would exit here. Transaction: {:?}",
                        self.id, unsynced.txn
                    ));
                    out.stop = true;
                    return;
                }
            }
            if self.process.is_none() {
                return;
            }
        }
    }

    /// The daemon's `peer_msg`.
    fn peer_msg(&mut self, pg: PgId, msg: PgMsg, out: &mut Outbox) {
        let ctx = PeerContext {
            whoami: self.id,
            pg,
            view: &self.proc().view,
            loaded: self.proc().pgs.contains_key(&pg),
        };
        match admit_peer_msg(&msg, ctx) {
            PeerAction::Feed => {}
            PeerAction::Drop(why) => {
                out.trace.push(format!(
                    "{} {pg}: e{} message dropped: {why} (map at e{})",
                    self.id,
                    msg.interval_epoch().0,
                    self.proc().view.epoch().0
                ));
                return;
            }
            PeerAction::Push { object, to, epoch } => {
                let push = OsdTimer::Push {
                    pg,
                    object,
                    targets: vec![to],
                    epoch: Some(epoch),
                };
                out.timers.push((Delay::Io, push));
                return;
            }
            PeerAction::AnswerIfNoCopy { to, answer } => {
                // As the daemon's `holds_no_copy`: the store has none.
                let collection = collection_of(pg);
                if self
                    .store
                    .collections()
                    .map_or(true, |all| all.contains(&collection))
                {
                    out.trace.push(format!(
                        "{} {pg}: query of a copy not loaded dropped",
                        self.id
                    ));
                } else {
                    out.sends.push((Node::Osd(to), Msg::Pg { pg, msg: answer }));
                }
                return;
            }
            PeerAction::WipeThenFeed => {
                if let PgMsg::Activate(activate) = &msg {
                    self.wipe_for_backfill(pg, activate.from, activate.interval_epoch, out);
                }
            }
        }
        self.feed(pg, msg.into(), out);
    }

    /// Empties this copy before a backfill into it, once per interval and
    /// only at the current primary's word.
    fn wipe_for_backfill(&mut self, pg: PgId, from: OsdId, epoch: Epoch, out: &mut Outbox) {
        let Some(slot) = self.proc_mut().pgs.get_mut(&pg) else {
            return;
        };
        if slot.wiped_in == Some(epoch) {
            return;
        }
        // The daemon's rule: marked first, in the PG's store order.
        let Some(mark) = slot.pg.mark_backfilling(from, epoch) else {
            return;
        };
        self.submit(Some((pg, mark.version, mark.tag)), mark.txn, out);
        self.empty_collection(collection_of(pg), out);
        if let Some(slot) = self.proc_mut().pgs.get_mut(&pg) {
            slot.wiped_in = Some(epoch);
        }
        out.trace
            .push(format!("{} {pg}: copy emptied for a backfill", self.id));
    }

    /// Removes every object of a collection (its metadata keys stay), in
    /// transactions submitted without waiting (the store applies them at
    /// once, so the listing moves on).
    fn empty_collection(&mut self, collection: CollectionId, out: &mut Outbox) {
        loop {
            let page = match self.store.list(collection, None, 512) {
                Ok(page) => page,
                Err(StoreError::NoCollection(_)) => return,
                Err(error) => {
                    out.anomalies
                        .push(format!("{} cannot list {collection}: {error}", self.id));
                    return;
                }
            };
            if page.keys.is_empty() {
                return;
            }
            let mut txn = Transaction::new(collection);
            for object in page.keys {
                txn.push(Op::Remove { object });
            }
            self.submit(None, txn, out);
            if out.stop {
                // The store refused it (a disk error): the process stops.
                return;
            }
        }
    }

    /// Reads an object's whole state and pushes it.
    fn push_object(
        &mut self,
        pg: PgId,
        object: Bytes,
        targets: Vec<OsdId>,
        epoch: Option<Epoch>,
        out: &mut Outbox,
    ) {
        let pulled = epoch.is_some();
        let ec = self.is_ec(pg);
        let Some(start) = self
            .proc()
            .pgs
            .get(&pg)
            .and_then(|slot| push_start(&slot.pg, &targets, epoch))
        else {
            out.trace.push(format!(
                "{} {pg}: pull of an interval that is over dropped",
                self.id
            ));
            return;
        };
        if ec {
            // As the daemon: a pull is never answered in an erasure-coded
            // PG (its primary rebuilds shards itself).
            if !pulled {
                self.push_shards(pg, object, &targets, start, out);
            }
            return;
        }
        let read = read_object_state(&self.store, collection_of(pg), &object);
        let plan = match push_after_read(self.id, object, &targets, pulled, start, read) {
            Ok(plan) => plan,
            Err(StoreError::NoCollection(_)) => return,
            Err(error) => {
                out.anomalies.push(format!(
                    "{} cannot read an object to push: {error}",
                    self.id
                ));
                return;
            }
        };
        for (target, msg) in plan.sends {
            out.sends.push((Node::Osd(target), Msg::Pg { pg, msg }));
        }
        if let Some(event) = plan.feed {
            self.feed(pg, event, out);
        }
    }

    /// Lists the next page of objects for a backfill, or a scrub.
    fn scan(&mut self, pg: PgId, after: Option<ObjectKey>, scrub: bool, out: &mut Outbox) {
        let limit = if scrub {
            SCRUB_CHUNK_OBJECTS
        } else {
            BACKFILL_SCAN_KEYS
        };
        match cairn_osd::daemon::list_objects(&self.store, collection_of(pg), after.as_ref(), limit)
        {
            Ok(page) => {
                let more = page.next.is_some();
                let keys = page.keys;
                let event = if scrub {
                    PgEvent::ScrubPage { keys, more }
                } else {
                    PgEvent::BackfillPage { keys, more }
                };
                self.feed(pg, event, out);
            }
            Err(error) => out
                .trace
                .push(format!("{} {pg}: object listing failed: {error}", self.id)),
        }
    }

    /// Builds this copy's scrub map of a chunk and sends it where the order
    /// says (to this OSD's own core for the primary).
    fn scrub_map(&mut self, pg: PgId, order: ScrubOrder, out: &mut Outbox) {
        let map = match build_scrub_map(&self.store, pg, self.id, &order) {
            Ok(map) => PgMsg::ScrubMap(map),
            Err(error) => {
                out.trace
                    .push(format!("{} {pg}: scrub listing failed: {error}", self.id));
                return;
            }
        };
        if order.to == self.id {
            self.feed(pg, map.into(), out);
        } else {
            out.sends
                .push((Node::Osd(order.to), Msg::Pg { pg, msg: map }));
        }
    }

    /// Removes a stray copy: the PG is clean on its acting set.
    fn purge(&mut self, pg: PgId, epoch: Epoch, out: &mut Outbox) {
        let stands = self
            .proc()
            .pgs
            .get(&pg)
            .is_some_and(|slot| slot.pg.purge_stands(epoch));
        if !stands {
            out.trace.push(format!(
                "{} {pg}: stray removal of e{} overtaken by a new interval",
                self.id, epoch.0
            ));
            return;
        }
        self.proc_mut().pgs.remove(&pg);
        let collection = collection_of(pg);
        self.proc_mut().preexisting.remove(&collection);
        self.empty_collection(collection, out);
        let txn = Transaction::new(collection).with(Op::RemoveCollection);
        self.submit(None, txn, out);
        out.trace
            .push(format!("{} {pg}: stray copy removed", self.id));
    }

    fn reply(out: &mut Outbox, asker: Asker, reply: ClientReply, data: Bytes) {
        let answer = Msg::OpReply {
            request_id: asker.request_id,
            reply,
            data,
        };
        out.sends.push((Node::Client(asker.client), answer));
    }

    /// Tells the client to refetch the map and resend.
    fn retry(&self, out: &mut Outbox, asker: Asker, reason: String) {
        let error = OpError::Retry {
            epoch: self.proc().view.epoch().0,
            reason,
        };
        Self::reply(out, asker, ClientReply::err(error), Bytes::new());
    }

    /// The daemon's `client_op`: the request's shape, its PG and
    /// servability, then the write path through the PG core or a read from
    /// the store.
    fn client_op(&mut self, asker: Asker, op: ClientOp, data: CheckedBytes, out: &mut Outbox) {
        if let Err(why) = check_request(&op) {
            let reply = ClientReply::err(OpError::Invalid(why));
            return Self::reply(out, asker, reply, Bytes::new());
        }
        match admit_request(&self.proc().view, op.pg, &op.object) {
            Ok(()) => {}
            Err(Turned::Retry(why)) => return self.retry(out, asker, why),
            Err(Turned::NotSupported(why)) => {
                let error = OpError::NotSupported(why);
                return Self::reply(out, asker, ClientReply::err(error), Bytes::new());
            }
        }
        let write = op.is_write();
        if let Err(why) = self.check_servable(op.pg, op.epoch, !write) {
            return self.retry(out, asker, why);
        }
        if write {
            self.client_write(asker, op, data, out);
        } else {
            self.client_read(asker, op, out);
        }
    }

    fn check_servable(&self, pg: PgId, client_epoch: Epoch, read: bool) -> Result<(), String> {
        let core = self.proc().pgs.get(&pg).map(|slot| &slot.pg);
        servable(self.id, pg, core, client_epoch, read, self.now_ms)
    }

    /// The daemon's `client_write`: the wire ops planned into store ops,
    /// the guards read, and the write handed to the PG core, whose reply
    /// answers the client once the write is durable on the acting set.
    /// (No fullness check: the simulated stores do not fill up.)
    fn client_write(&mut self, asker: Asker, op: ClientOp, data: CheckedBytes, out: &mut Outbox) {
        let object = Bytes::from(op.object.into_vec());
        let plan = match plan_write(&object, &op.ops, data) {
            Ok(plan) => plan,
            Err(why) => {
                let reply = ClientReply::err(OpError::Invalid(why));
                return Self::reply(out, asker, reply, Bytes::new());
            }
        };
        let req: ReqId = op.req.into();
        let guards: Vec<cairn_osd::Guard> = op.guards.into_iter().map(Into::into).collect();
        if self.is_ec(op.pg) {
            let (pg, epoch) = (op.pg, op.epoch);
            let (ops, implied) = (plan.ops, plan.implied);
            return self.ec_client_write(asker, pg, epoch, req, object, ops, guards, implied, out);
        }
        let collection = collection_of(op.pg);
        let check = match observe(&self.store, collection, &object, guards, plan.implied) {
            Ok(check) => check,
            Err(error) => return Self::reply(out, asker, ClientReply::err(error), Bytes::new()),
        };
        self.proc_mut().waiters.entry(req).or_default().push(asker);
        let event = PgEvent::ClientWrite {
            req,
            client_epoch: op.epoch,
            object,
            ops: plan.ops,
            guard: check,
            prepared: None,
        };
        if !self.feed(op.pg, event, out) {
            self.proc_mut().waiters.remove(&req);
            self.retry(out, asker, format!("PG {} is not held here", op.pg));
        }
    }

    /// The daemon's `client_read`: the core says when to read the store
    /// and whether what was read may be returned.
    fn client_read(&mut self, asker: Asker, op: ClientOp, out: &mut Outbox) {
        let pg = op.pg;
        let process = self.proc_mut();
        let read = ReadId(process.next_read);
        process.next_read += 1;
        let object = Bytes::copy_from_slice(&op.object);
        let pending = SimRead {
            asker,
            op: Some(op),
            result: None,
        };
        process.reads.insert(read, pending);
        if !self.feed(pg, PgEvent::ClientRead { read, object }, out) {
            self.proc_mut().reads.remove(&read);
            self.retry(out, asker, format!("PG {pg} is not held here"));
        }
    }

    /// The daemon's store read (`read_ops`), reported to the core.
    fn read(&mut self, pg: PgId, read: ReadId, out: &mut Outbox) {
        let Some(op) = self
            .proc_mut()
            .reads
            .get_mut(&read)
            .and_then(|pending| pending.op.take())
        else {
            return;
        };
        let collection = collection_of(pg);
        let key = ObjectKey::new(Bytes::from(op.object.into_vec()));
        let guards: Vec<cairn_osd::Guard> = op.guards.into_iter().map(Into::into).collect();
        if self.is_ec(pg) {
            return self.ec_client_read(pg, read, key, guards, op.ops, out);
        }
        let result = read_ops(&self.store, collection, &key, guards, op.ops);
        let done = read_done(read, &result);
        if let Some(pending) = self.proc_mut().reads.get_mut(&read) {
            pending.result = Some(result);
        }
        if !self.feed(pg, done, out) {
            self.answer_read(read, ReadAnswer::Busy, out);
        }
    }

    /// Answers a client read as the core says.
    fn answer_read(&mut self, read: ReadId, answer: ReadAnswer, out: &mut Outbox) {
        let Some(pending) = self.proc_mut().reads.remove(&read) else {
            return;
        };
        let (reply, data) = read_reply(answer, pending.result);
        Self::reply(out, pending.asker, reply, data);
    }
}

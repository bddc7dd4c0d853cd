//! The simulator's OSD shell: what `cairn_osd::daemon` does around the PG
//! cores, as synchronous steps over a [`SimStore`] (a `MemStore` with
//! manual sync that can hold damaged metadata records).
//!
//! It follows the daemon closely (map replay through the shared
//! [`MapView`], PG creation and loading, the effects of each event, the
//! parking of early sub-writes through the daemon's own [`PgSlot`], peer
//! pings and failure reports, reads that wait for in-flight writes) and
//! reuses its pure helpers (`load_pg`, `read_object_state`, `observe`).
//! Where the daemon spawns a task (pushes, scans, purges, reads) the shell
//! asks for a timer, so other events can come in between, as they can in
//! the daemon.
//!
//! Durability: every transaction is applied to the store at once (readable,
//! like a page cache) and becomes durable at the next sync, which the world
//! schedules after a random disk latency; only then are the PG cores told it
//! committed. A crash loses what was not synced (or all but a prefix).

use crate::linearizability::Snapshot;
use crate::net::{ClientRequest, MapUpdate, Msg, Node, OpBody, OpResult};
use crate::store::SimStore;
use bytes::Bytes;
use cairn_osd::daemon::{
    PgSlot, build_scrub_map, load_pg, observe, read_object_state, read_stands,
};
use cairn_osd::lease::{LEASE_MS, Leases};
use cairn_osd::limits::{BACKFILL_SCAN_KEYS, PEER_GRACE};
use cairn_osd::map_view::MapView;
use cairn_osd::scrub::ScrubOrder;
use cairn_osd::{Effect, Effects, Interval, MapContext, Pg, PgEvent, PgLimits, PgMsg, Push};
use cairn_osd::{ReqId, StoreTag, StoredPg, Version};
use cairn_placement::Redundancy;
use cairn_proto::peer::LeaseReport;
use cairn_store::{CollectionId, Commit, ObjectKey, ObjectStore, Op, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use std::collections::{BTreeMap, BTreeSet};

/// Period of the PG ticks, monitor heartbeats and peer pings (the daemon's
/// `PG_TICK_INTERVAL`, `HEARTBEAT_INTERVAL`, `PEER_PING_INTERVAL`).
pub const TICK_MS: u64 = 1_000;
/// Period of the plain map fetch that backs up the monitor's pushes (the
/// daemon's subscription is a long poll, re-sent when it fails).
pub const MAP_PULL_MS: u64 = 2_000;
/// How long a read waits for in-flight writes to its object (the daemon's
/// `READ_WAIT_FOR_WRITE_MAX`) and how often it looks.
pub const READ_WAIT_MS_MAX: u64 = 5_000;
pub const READ_POLL_MS: u64 = 1;

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
    /// A read waiting for its object's writes to settle.
    ReadWait {
        client: u32,
        request: ClientRequest,
        deadline_ms: u64,
        /// The interval the read began in.
        started: Epoch,
    },
    /// A read whose object was settled, served now (the daemon's read runs
    /// on a blocking task, so writes can slip in before it).
    ReadRun {
        client: u32,
        request: ClientRequest,
        started: Epoch,
    },
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
    waiters: BTreeMap<ReqId, Vec<u32>>,
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
/// How often the daemon rewrites its alive file.
const ALIVE_INTERVAL_MS: u64 = 1_000;

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
            unsynced: Vec::new(),
            sync_scheduled: false,
            last_heard: BTreeMap::new(),
            deferred: Vec::new(),
            booted: false,
            pre_boot: Vec::new(),
        });
        out.sends.push((Node::Mon, Msg::Boot));
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
                Msg::Booted => self.finish_boot(now_ms, out),
                Msg::BootAgain => out.timers.push((Delay::Ms(BOOT_AGAIN_MS), OsdTimer::Boot)),
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
            Msg::Op(request) => request.epoch > process.view.epoch(),
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
            Msg::Ping => out.sends.push((from, Msg::Pong)),
            Msg::Pong => {
                if let (Node::Osd(peer), Some(p)) = (from, self.process.as_mut()) {
                    p.last_heard.insert(peer, now_ms);
                }
            }
            Msg::HeartbeatReply { up: false } => out.sends.push((Node::Mon, Msg::Boot)),
            // The map still had this OSD up: the monitor marked it down
            // first (a new interval for its PGs); boot again.
            Msg::BootAgain => out.timers.push((Delay::Ms(BOOT_AGAIN_MS), OsdTimer::Boot)),
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
            Msg::Op(request) => {
                if let Node::Client(client) = from {
                    self.client_op(now_ms, client, request, out);
                }
            }
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
                out.timers.push((Delay::Ms(TICK_MS), OsdTimer::Tick));
            }
            OsdTimer::Heartbeat => {
                out.sends.push((Node::Mon, Msg::Heartbeat));
                let clean: Vec<(PgId, Epoch)> = self
                    .proc()
                    .pgs
                    .iter()
                    .filter_map(|(pg, slot)| slot.pg.clean_since().map(|e| (*pg, e)))
                    .collect();
                if !clean.is_empty() {
                    out.sends.push((Node::Mon, Msg::PgsClean(clean)));
                }
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
                out.sends.push((Node::Mon, Msg::Boot));
                if !self.proc().booted {
                    // No answer yet: the daemon's boot call times out and
                    // tries again.
                    out.timers.push((Delay::Ms(BOOT_RETRY_MS), OsdTimer::Boot));
                }
            }
            OsdTimer::Purge { pg, epoch } => self.purge(pg, epoch, out),
            OsdTimer::ReadWait {
                client,
                request,
                deadline_ms,
                started,
            } => self.read_wait(now_ms, client, request, (deadline_ms, started), out),
            OsdTimer::ReadRun {
                client,
                request,
                started,
            } => {
                let mut result = match self.read(&request) {
                    // The daemon's rule: a rotten copy is recovered from
                    // another one while the client retries.
                    Err(why) => {
                        let repairable = self.proc().pgs.get(&request.pg).is_some_and(|slot| {
                            slot.pg.has_other_source() || slot.pg.interval().size > 1
                        });
                        let event = PgEvent::ReadError {
                            object: request.object.clone(),
                            error: why.clone(),
                        };
                        self.feed(request.pg, event, out);
                        if repairable {
                            OpResult::Wait(format!("recovering a corrupt copy: {why}"))
                        } else {
                            OpResult::Invalid(format!("read failed: corrupt data: {why}"))
                        }
                    }
                    Ok(result) => result,
                };
                let stands = self
                    .proc()
                    .pgs
                    .get(&request.pg)
                    .is_some_and(|slot| read_stands(slot, now_ms, started, &request.object));
                if !stands {
                    result = OpResult::Wait("read overtaken by a write or a new interval".into());
                }
                out.sends.push((
                    Node::Client(client),
                    Msg::OpReply {
                        req: request.req,
                        result,
                    },
                ));
            }
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
                out.sends
                    .push((Node::Mon, Msg::FailureReport { target: peer }));
            }
            out.sends.push((Node::Osd(peer), Msg::Ping));
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
        let entries: Vec<(PgId, Interval, MapContext)> = process
            .view
            .intervals
            .iter()
            .map(|(pg, interval)| (*pg, interval.clone(), process.view.context(*pg)))
            .collect();
        let up_osds = process.view.up_osds();
        let up_changed = process.told_up != up_osds;
        process.told_up = up_osds;
        for (pg, interval, context) in entries {
            let process = self.proc();
            let known = process.pgs.get(&pg).map(|s| s.pg.interval().epoch_started);
            match known {
                Some(started) if interval.epoch_started > started => {
                    out.trace.push(format!(
                        "{whoami} {pg}: interval e{} up {:?} acting {:?}",
                        interval.epoch_started.0,
                        ids(&interval.up),
                        ids(&interval.acting)
                    ));
                    self.feed(pg, PgEvent::MapContext(context), out);
                    self.feed(pg, PgEvent::IntervalChange(interval), out);
                }
                Some(_) if up_changed => {
                    self.feed(pg, PgEvent::MapContext(context), out);
                }
                Some(_) => {}
                None if interval.acting.contains(&whoami)
                    || interval.up.contains(&whoami)
                    || process.preexisting.contains(&collection_of(pg)) =>
                {
                    self.create_pg(pg, interval, context, out);
                }
                None => {}
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
        let due: Vec<(PoolId, u32, Option<u32>)> = process
            .view
            .pg_nums()
            .iter()
            .filter_map(|(&pool, &pg_num)| {
                let old = process.split_for.get(&pool).copied();
                (old != Some(pg_num)).then_some((pool, pg_num, old))
            })
            .collect();
        let mut changed = BTreeSet::new();
        for &(pool, _, old) in &due {
            if old.is_none() {
                continue;
            }
            let doomed: Vec<PgId> = self
                .proc()
                .pgs
                .keys()
                .filter(|pg| pg.pool == pool)
                .copied()
                .collect();
            for pg in doomed {
                if let Some(mut slot) = self.proc_mut().pgs.remove(&pg) {
                    let fx: Effects = slot
                        .pg
                        .retire(epoch)
                        .into_iter()
                        .map(|(req, reply)| Effect::Reply { req, reply })
                        .collect();
                    self.execute(pg, fx, out);
                    changed.insert(collection_of(pg));
                }
            }
        }
        let mut queued = Vec::new();
        for &(pool, pg_num, _) in &due {
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
        for (pool, pg_num, _) in due {
            process.split_for.insert(pool, pg_num);
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
            "{} {pg}: {} at interval e{} up {:?} acting {:?}",
            self.id,
            if exists { "loaded" } else { "created" },
            interval.epoch_started.0,
            ids(&interval.up),
            ids(&interval.acting)
        ));
        // A copy held before this start may have promised a read lease:
        // for at most a lease after the process was last alive.
        // A copy split just now: as long as its retired core's promise.
        let restarted = self.proc().preexisting.contains(&collection);
        let bound_ms = match self.last_alive_ms {
            _ if self.proc().split_now.contains(&collection) => LEASE_MS,
            Some(alive) if restarted => {
                (LEASE_MS + ALIVE_INTERVAL_MS).saturating_sub(self.now_ms - alive)
            }
            _ => 0,
        };
        let mut leases = Leases::default();
        leases.set_clock(self.now_ms);
        leases.enable(LEASE_MS, bound_ms);
        let restored =
            Pg::restore_leased(pg, self.id, interval, self.limits, stored, context, leases);
        match restored {
            Ok((core, fx)) => {
                let slot = PgSlot {
                    pg: core,
                    parked: BTreeMap::new(),
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
                Effect::Note(note) => out.trace.push(format!("{} {pg}: {note}", self.id)),
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
                Effect::Reply { req, reply } => {
                    let waiters = self.proc_mut().waiters.remove(&req).unwrap_or_default();
                    for client in waiters {
                        let result = to_result(&reply);
                        out.sends
                            .push((Node::Client(client), Msg::OpReply { req, result }));
                    }
                }
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
        out.sends.push((Node::Mon, Msg::PgTemp { pg, acting }));
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
        let started = self
            .proc()
            .pgs
            .get(&pg)
            .map(|s| s.pg.interval().epoch_started);
        match msg {
            PgMsg::Pull {
                from,
                interval_epoch,
                object,
            } => {
                let push = OsdTimer::Push {
                    pg,
                    object,
                    targets: vec![from],
                    epoch: Some(interval_epoch),
                };
                out.timers.push((Delay::Io, push));
                return;
            }
            // The daemon's rule: a copy answers only a query of an interval
            // its map has reached (its copy may be about to split).
            PgMsg::Query { interval_epoch, .. } if interval_epoch > self.proc().view.epoch() => {
                out.trace.push(format!(
                    "{} {pg}: query of e{} dropped: map at e{}",
                    self.id,
                    interval_epoch.0,
                    self.proc().view.epoch().0
                ));
                return;
            }
            PgMsg::Query { interval_epoch, .. }
                if self.proc().view.query_is_stale(pg, interval_epoch) =>
            {
                out.trace.push(format!(
                    "{} {pg}: query of e{} dropped: that interval is over",
                    self.id, interval_epoch.0
                ));
                return;
            }
            PgMsg::Query {
                from,
                interval_epoch,
            } if started.is_none() => {
                // No copy here: say so, so peering need not wait for one.
                // Peering takes the answer as proof that this OSD never
                // activated the PG: as the daemon, check the store too.
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
                    return;
                }
                let notify = PgMsg::Notify(cairn_osd::Notify {
                    from: self.id,
                    interval_epoch,
                    copy: cairn_osd::peering::PeerCopy::default(),
                    lease: LeaseReport::default(),
                    inconsistent: Vec::new(),
                });
                out.sends
                    .push((Node::Osd(from), Msg::Pg { pg, msg: notify }));
                return;
            }
            PgMsg::Activate(ref activate) if activate.backfill => {
                self.wipe_for_backfill(pg, activate.from, activate.interval_epoch, out);
            }
            _ => {}
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
        // The daemon's rule: a pull is answered only to the primary of this
        // copy's interval.
        let Some((epoch, as_of)) = self.proc().pgs.get(&pg).and_then(|slot| {
            let stands = epoch.is_none_or(|e| targets.iter().all(|t| slot.pg.answers_pull(*t, e)));
            stands.then(|| (slot.pg.interval().epoch_started, slot.pg.last_update()))
        }) else {
            out.trace.push(format!(
                "{} {pg}: pull of an interval that is over dropped",
                self.id
            ));
            return;
        };
        let state = match read_object_state(&self.store, collection_of(pg), &object) {
            Ok(state) => state,
            Err(StoreError::NoCollection(_)) => return,
            // The daemon's rule: this copy rotted; the primary recovers it
            // from another copy (and pushes again from there).
            Err(StoreError::Corrupt(why)) => {
                if pulled {
                    let unreadable = PgMsg::Unreadable {
                        from: self.id,
                        interval_epoch: epoch,
                        object: object.clone(),
                    };
                    for target in &targets {
                        out.sends.push((
                            Node::Osd(*target),
                            Msg::Pg {
                                pg,
                                msg: unreadable.clone(),
                            },
                        ));
                    }
                }
                let event = PgEvent::ReadError { object, error: why };
                self.feed(pg, event, out);
                return;
            }
            Err(error) => {
                out.anomalies.push(format!(
                    "{} cannot read an object to push: {error}",
                    self.id
                ));
                return;
            }
        };
        let push = PgMsg::Push(Push {
            from: self.id,
            interval_epoch: epoch,
            object,
            state,
            as_of,
        });
        for target in targets {
            out.sends.push((
                Node::Osd(target),
                Msg::Pg {
                    pg,
                    msg: push.clone(),
                },
            ));
        }
    }

    /// Lists the next page of objects for a backfill, or a scrub.
    fn scan(&mut self, pg: PgId, after: Option<ObjectKey>, scrub: bool, out: &mut Outbox) {
        let limit = if scrub {
            SCRUB_CHUNK_OBJECTS
        } else {
            BACKFILL_SCAN_KEYS
        };
        match self.store.list(collection_of(pg), after.as_ref(), limit) {
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

    fn reply(out: &mut Outbox, client: u32, req: ReqId, result: OpResult) {
        out.sends
            .push((Node::Client(client), Msg::OpReply { req, result }));
    }

    /// The daemon's `client_op`: servability, then the write path through
    /// the PG core or a read from the store.
    fn client_op(&mut self, now_ms: u64, client: u32, request: ClientRequest, out: &mut Outbox) {
        let process = self.proc();
        let req = request.req;
        match process.view.redundancy(request.pg.pool) {
            None => {
                let why = format!("pool {} not in this OSD's map", request.pg.pool.0);
                return Self::reply(out, client, req, OpResult::Retry(why));
            }
            Some(Redundancy::Erasure { .. }) => {
                let why = "erasure-coded pools are not served".to_owned();
                return Self::reply(out, client, req, OpResult::Invalid(why));
            }
            Some(Redundancy::Replicated { .. }) => {}
        }
        let read = !matches!(request.body, OpBody::Write { .. });
        if let Err(why) = self.check_servable(request.pg, request.epoch, read) {
            return Self::reply(out, client, req, OpResult::Retry(why));
        }
        if read {
            let object = request.object.clone();
            let lacking = self
                .proc()
                .pgs
                .get(&request.pg)
                .is_some_and(|slot| slot.pg.lacks(&object));
            if lacking {
                self.feed(request.pg, PgEvent::Prioritize { object }, out);
                return Self::reply(out, client, req, OpResult::Wait("object missing".into()));
            }
            let deadline_ms = now_ms + READ_WAIT_MS_MAX;
            let Some(started) = self
                .proc()
                .pgs
                .get(&request.pg)
                .map(|slot| slot.pg.interval().epoch_started)
            else {
                return Self::reply(out, client, req, OpResult::Retry("PG not held".into()));
            };
            return self.read_wait(now_ms, client, request, (deadline_ms, started), out);
        }
        self.client_write(client, request, out);
    }

    fn check_servable(&self, pg: PgId, client_epoch: Epoch, read: bool) -> Result<(), String> {
        let Some(slot) = self.proc().pgs.get(&pg) else {
            return Err(format!("{pg} is not held by {}", self.id));
        };
        let interval = slot.pg.interval();
        if interval.primary == Some(self.id) && !slot.pg.is_active_primary() {
            return Err(format!("{pg} is {}", slot.pg.state_name()));
        }
        if read && interval.primary == Some(self.id) && !slot.pg.may_serve_reads(self.now_ms) {
            return Err(format!("{pg}: {} holds no read lease now", self.id));
        }
        if read && interval.primary != Some(self.id) {
            return Err(format!("{} is not primary of {pg}", self.id));
        }
        if read && interval.epoch_started > client_epoch {
            return Err(format!("{pg} interval is newer than the client's map"));
        }
        Ok(())
    }

    fn client_write(&mut self, client: u32, request: ClientRequest, out: &mut Outbox) {
        let OpBody::Write { plan, guards } = request.body else {
            return;
        };
        let req = request.req;
        let collection = collection_of(request.pg);
        let check = match observe(
            &self.store,
            collection,
            &request.object,
            guards,
            plan.implied,
        ) {
            Ok(check) => check,
            Err(error) => {
                let why = format!("guard read failed: {error}");
                return Self::reply(out, client, req, OpResult::Invalid(why));
            }
        };
        let ops = plan.ops;
        self.proc_mut().waiters.entry(req).or_default().push(client);
        let event = PgEvent::ClientWrite {
            req,
            client_epoch: request.epoch,
            object: request.object,
            ops,
            guard: check,
        };
        if !self.feed(request.pg, event, out) {
            self.proc_mut().waiters.remove(&req);
            Self::reply(out, client, req, OpResult::Retry("PG not held".into()));
        }
    }

    /// Waits (bounded) until no write to the object is in flight, then
    /// reads it after a store latency.
    fn read_wait(
        &mut self,
        now_ms: u64,
        client: u32,
        request: ClientRequest,
        (deadline_ms, started): (u64, Epoch),
        out: &mut Outbox,
    ) {
        let busy = self
            .proc()
            .pgs
            .get(&request.pg)
            .is_some_and(|slot| slot.pg.object_in_flight(&request.object));
        if !busy {
            let run = OsdTimer::ReadRun {
                client,
                request,
                started,
            };
            out.timers.push((Delay::Io, run));
        } else if now_ms >= deadline_ms {
            Self::reply(
                out,
                client,
                request.req,
                OpResult::Wait("object busy".into()),
            );
        } else {
            let wait = OsdTimer::ReadWait {
                client,
                request,
                deadline_ms,
                started,
            };
            out.timers.push((Delay::Ms(READ_POLL_MS), wait));
        }
    }

    /// A read's result; `Err`: the copy is corrupt (why).
    fn read(&self, request: &ClientRequest) -> Result<OpResult, String> {
        let collection = collection_of(request.pg);
        Ok(match &request.body {
            OpBody::Read => match read_object_state(&self.store, collection, &request.object) {
                Ok(state) => OpResult::Snapshot(state.map(|s| Snapshot {
                    version: s.version,
                    data: s.data,
                    xattrs: s.xattrs,
                    omap: s.omap,
                })),
                Err(StoreError::Corrupt(why)) => return Err(why),
                Err(error) => OpResult::Invalid(format!("read failed: {error}")),
            },
            OpBody::OmapGet(keys) => {
                let key = ObjectKey::new(request.object.clone());
                match self.store.omap_get(collection, &key, keys) {
                    Ok(map) => OpResult::Omap(Some(map)),
                    Err(StoreError::NotFound { .. }) => OpResult::Omap(None),
                    Err(error) => OpResult::Invalid(format!("omap read failed: {error}")),
                }
            }
            OpBody::Write { .. } => OpResult::Invalid("not a read".into()),
        })
    }
}

/// A PG core's reply as the client sees it.
fn to_result(reply: &cairn_osd::Reply) -> OpResult {
    use cairn_osd::{LogResult, Reply};
    match reply {
        Reply::Done {
            result: LogResult::Ok { object_version },
            ..
        } => OpResult::Written(*object_version),
        Reply::Done {
            result: LogResult::Err { code },
            ..
        } => OpResult::Refused(*code),
        Reply::Retry { reason } => OpResult::Retry(format!("{reason:?}")),
        Reply::Blocked { .. } | Reply::Busy { .. } | Reply::ObjectBusy => {
            OpResult::Wait(format!("{reply:?}"))
        }
        Reply::Invalid { reason } => OpResult::Invalid(reason.to_string()),
    }
}

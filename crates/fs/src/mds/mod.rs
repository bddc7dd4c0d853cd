//! `cairn mds`: the metadata server daemon.
//!
//! It beacons to the monitor, which makes one daemon per file system
//! active under a new generation and keeps the others standing by. The
//! active one takes the journal over ([`journal::take_over`]), then serves
//! clients from one actor that owns the namespace cache: each request runs
//! against the cache (loading what it lacks from the metadata pool), is
//! answered at once, and its changes go to the journal writer (group
//! commit). For a short window after taking over, only replays from
//! clients of the predecessor are served.

pub mod cache;
pub mod journal;
pub mod leases;
pub mod limits;
pub mod locks;
pub mod namespace;
pub mod quota;

use crate::format::{self, Dentry, Frag, InodeRec, dir_object, inode_key, inode_object};
use crate::mds::journal::{JournalError, Pools};
use crate::mds::leases::{Evicted, Leases, SharedState, shared};
use crate::mds::limits::{
    BEACON_MS, CACHE_BYTES_DEFAULT, COMPLAINT_MS_DEFAULT, COMPLETED_KEPT, DIR_PAGE_ENTRIES,
    EVICTED_KEPT, INLINE_MAX_DEFAULT, INLINE_MAX_LIMIT, JOURNAL_QUEUE_MAX, LEASE_MS_DEFAULT,
    LOADS_PER_REQUEST_MAX, RECALL_TIMEOUT_MS_DEFAULT, RECONNECT_WINDOW_MS_DEFAULT,
    REQUEST_QUEUE_MAX, SESSION_TIMEOUT_MS_DEFAULT,
};
use crate::mds::namespace::{Namespace, Need, Stop};
use bytes::Bytes;
use cairn_client::{Client, ClientError};
use cairn_proto::mds::{
    BatchResult, FsStat, KIND_MDS_POLL, KIND_MDS_REQUEST, MdsAnswer, MdsError, MdsOp, MdsPoll,
    MdsPollReply, MdsReply, MdsRequest, MdsStatus, POLL_WAIT_MS_MAX, ROOT_INO, SessionInfo,
    SlowRequest, Time,
};
use cairn_proto::mon::{MdsRole, MonCommand, Reply};
use cairn_wire::{Frame, ServeOptions};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

/// How to run an MDS.
#[derive(Clone, Debug)]
pub struct MdsConfig {
    pub mon_addr: String,
    /// The file system to serve.
    pub fs: String,
    /// This daemon's name (unique per file system).
    pub name: String,
    pub addr: SocketAddr,
    pub reconnect_window_ms: u64,
    pub session_timeout_ms: u64,
    /// How long clients may cache what they were answered.
    pub lease_ms: u64,
    /// A lease holder that does not acknowledge a recall this long is
    /// evicted.
    pub recall_timeout_ms: u64,
    /// The namespace cache is trimmed to this many bytes (estimated).
    pub cache_bytes_max: usize,
    /// A request in flight longer than this is slow (logged, and shown in
    /// `cairn status` and `cairn health`).
    pub complaint_ms: u64,
    /// A directory fragment with more entries than this splits in eight.
    pub dir_split_entries: usize,
    /// New regular files keep their data in the MDS until they outgrow
    /// this many bytes (0: never).
    pub inline_max: u64,
}

impl MdsConfig {
    #[must_use]
    pub fn new(mon_addr: &str, fs: &str, name: &str, addr: SocketAddr) -> MdsConfig {
        MdsConfig {
            mon_addr: mon_addr.to_owned(),
            fs: fs.to_owned(),
            name: name.to_owned(),
            addr,
            reconnect_window_ms: RECONNECT_WINDOW_MS_DEFAULT,
            session_timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            lease_ms: LEASE_MS_DEFAULT,
            recall_timeout_ms: RECALL_TIMEOUT_MS_DEFAULT,
            cache_bytes_max: CACHE_BYTES_DEFAULT,
            complaint_ms: COMPLAINT_MS_DEFAULT,
            dir_split_entries: namespace::DIR_SPLIT_ENTRIES_DEFAULT,
            inline_max: INLINE_MAX_DEFAULT,
        }
    }
}

/// Why the MDS stopped.
#[derive(Debug, thiserror::Error)]
pub enum MdsStop {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error("cluster: {0}")]
    Client(#[from] ClientError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("the monitor made another MDS active")]
    Demoted,
}

fn now() -> Time {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Time {
        sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nsec: d.subsec_nanos(),
    }
}

async fn beacon(
    client: &Client,
    config: &MdsConfig,
    addr: &str,
) -> Result<(MdsRole, cairn_proto::mon::FsStatus), ClientError> {
    let command = MonCommand::MdsBeacon {
        fs: config.fs.clone(),
        name: config.name.clone(),
        addr: addr.to_owned(),
    };
    match client.mon_command(command).await? {
        Reply::MdsRole { role, fs } => Ok((role, fs)),
        other => Err(ClientError::Unexpected(format!("{other:?} for a beacon"))),
    }
}

/// Runs the MDS until it fails or is demoted.
///
/// # Errors
/// [`MdsStop`]: why it stopped (an MDS that loses its role must stop, so
/// it never serves from a stale cache).
pub async fn run(config: MdsConfig) -> Result<(), MdsStop> {
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    let addr = listener.local_addr()?.to_string();
    // Its metadata writes pass a full cluster up to the failsafe ratio, so
    // a full file system can still take over, unlink and rmdir.
    let options = cairn_client::ClientOptions {
        full_try: true,
        ..cairn_client::ClientOptions::default()
    };
    // A monitor not up yet (they start together) is waited for.
    let client = loop {
        match Client::connect_with(&config.mon_addr, options.clone()).await {
            Ok(client) => break client,
            Err(error) => {
                tracing::warn!(%error, mon = config.mon_addr, "monitor not reachable yet");
                tokio::time::sleep(Duration::from_millis(BEACON_MS)).await;
            }
        }
    };
    tracing::info!(fs = config.fs, name = config.name, %addr, "MDS standing by");
    // While standing by, it follows the active's journal, so a takeover
    // reads only the tail and writes back only what the active had not.
    let mut follower = journal::Follower::default();
    let mut following = false;
    let (generation, status) = loop {
        match beacon(&client, &config, &addr).await {
            Ok((MdsRole::Active { generation }, status)) => break (generation, status),
            Ok((MdsRole::Standby, status)) => {
                let pools = Pools {
                    client: client.clone(),
                    meta_pool: status.meta_pool.clone(),
                    data_pool: status.data_pool.clone(),
                    generation: 0,
                };
                match follower.follow(&pools).await {
                    Ok(()) if !following => {
                        following = true;
                        tracing::info!(
                            seq = follower.seq(),
                            unwritten = follower.unwritten(),
                            "following the journal"
                        );
                    }
                    Ok(()) => {}
                    Err(error) => {
                        // Read afresh next time (a takeover reads all).
                        tracing::warn!(%error, "following the journal failed");
                        follower = journal::Follower::default();
                        following = false;
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "beacon failed"),
        }
        tokio::time::sleep(Duration::from_millis(BEACON_MS)).await;
    };
    let started = Instant::now();
    tracing::info!(generation, "MDS active: taking the journal over");
    let pools = Pools {
        client: client.clone(),
        meta_pool: status.meta_pool.clone(),
        data_pool: status.data_pool.clone(),
        generation,
    };
    let replayed = journal::take_over(&pools, &mut follower).await?;
    tracing::info!(
        entries = replayed.entries,
        live_entries = replayed.live_entries,
        seq = replayed.seq,
        ms = started.elapsed().as_millis(),
        "journal replayed"
    );
    let mut ns = Namespace::new(replayed.head.ino_reserved, replayed.head.ino_reserved);
    ns.set_split_entries(config.dir_split_entries);
    ns.set_inline_max(config.inline_max.min(INLINE_MAX_LIMIT));
    ensure_root(&pools, &mut ns).await?;
    let (entries_tx, entries_rx) = mpsc::channel(JOURNAL_QUEUE_MAX);
    let (durable_tx, durable_rx) = watch::channel(replayed.seq);
    let (writeback_tx, writeback_rx) = mpsc::unbounded_channel();
    let (written_tx, written_rx) = watch::channel(replayed.seq);
    let flush_now = Arc::new(tokio::sync::Notify::new());
    // Each logs why it stopped: the other then stops too (its queue
    // closed), and either may be the one the select below sees first.
    let writer = tokio::spawn({
        let run = journal::run_writer(
            pools.clone(),
            replayed.segment,
            entries_rx,
            Arc::clone(&flush_now),
            durable_tx,
            writeback_tx,
        );
        async move {
            let stop = run.await;
            tracing::error!(error = %stop, "the journal writer stopped");
            stop
        }
    });
    // Removed files' data objects, deleted in the background (what an
    // earlier active MDS queued too).
    let purge_wake = Arc::new(tokio::sync::Notify::new());
    let purge_stats = Arc::new(journal::PurgeStats::default());
    let purger = tokio::spawn(journal::run_purger(
        pools.clone(),
        Arc::clone(&purge_wake),
        Arc::clone(&purge_stats),
    ));
    let writeback = tokio::spawn({
        let run = journal::run_writeback(
            pools.clone(),
            replayed.head,
            writeback_rx,
            written_tx,
            purge_wake,
        );
        async move {
            let stop = run.await;
            tracing::error!(error = %stop, "the journal write-back stopped");
            stop
        }
    });
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE_MAX);
    let completed = replayed
        .completed
        .iter()
        .map(|k| (*k, replayed.seq))
        .collect();
    let shared_state = SharedState::default();
    let actor = Actor {
        ns,
        pools: pools.clone(),
        seq: replayed.seq,
        journal: entries_tx,
        flush_now,
        durable: durable_rx.clone(),
        sessions: HashMap::new(),
        completed,
        completed_order: BTreeMap::new(),
        locks: locks::Locks::default(),
        lock_waiters: Vec::new(),
        replaying_until: Instant::now() + Duration::from_millis(config.reconnect_window_ms),
        session_timeout: Duration::from_millis(config.session_timeout_ms),
        stat: Arc::new(std::sync::Mutex::new(FsStat::default())),
        nearfull: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        in_batch: false,
        leases: Leases::new(Duration::from_millis(config.lease_ms)),
        shared: Arc::clone(&shared_state),
        recall_timeout: Duration::from_millis(config.recall_timeout_ms),
        recall_waits: Vec::new(),
        queue: requests_tx.downgrade(),
        written_back: written_rx,
        cache_bytes_max: config.cache_bytes_max,
        cache_target: config.cache_bytes_max,
        buffer_waiters: HashMap::new(),
        complaint: Duration::from_millis(config.complaint_ms),
        takeover_reserved: replayed.head.ino_reserved,
        moved: Vec::new(),
        answer_durable: false,
        ino_marks: VecDeque::new(),
        purge: purge_stats,
    };
    let stat = Arc::clone(&actor.stat);
    let nearfull = Arc::clone(&actor.nearfull);
    let actor_task = tokio::spawn(actor.run(requests_rx));
    tokio::spawn(refresh_stat(pools.clone(), stat, nearfull));
    let shell = Shell {
        requests: requests_tx.clone(),
        durable: durable_rx,
        shared: shared_state,
        complaint: Duration::from_millis(config.complaint_ms),
    };
    let handler = move |frame: Frame, _session| {
        let shell = shell.clone();
        async move { Some(shell.handle(frame).await) }
    };
    let serving = tokio::spawn(cairn_wire::serve(
        listener,
        handler,
        ServeOptions::default(),
    ));
    tracing::info!(ms = started.elapsed().as_millis(), "MDS serving");
    let result = tokio::select! {
        stop = keep_beaconing(&client, &config, &addr, generation) => Err(stop),
        ended = writer => Err(MdsStop::Journal(ended.unwrap_or_else(|e| JournalError::Damaged(e.to_string())))),
        ended = writeback => Err(MdsStop::Journal(ended.unwrap_or_else(|e| JournalError::Damaged(e.to_string())))),
        _ = actor_task => Err(MdsStop::Journal(JournalError::Damaged("namespace actor ended".into()))),
    };
    serving.abort();
    purger.abort();
    result
}

/// Beacons until the monitor says another daemon is active.
async fn keep_beaconing(
    client: &Client,
    config: &MdsConfig,
    addr: &str,
    generation: u64,
) -> MdsStop {
    loop {
        tokio::time::sleep(Duration::from_millis(BEACON_MS)).await;
        match beacon(client, config, addr).await {
            Ok((MdsRole::Active { generation: g }, _)) if g == generation => {}
            Ok(_) => return MdsStop::Demoted,
            Err(error) => tracing::warn!(%error, "beacon failed"),
        }
    }
}

async fn ensure_root(pools: &Pools, ns: &mut Namespace) -> Result<(), MdsStop> {
    if let Some(rec) = load_inode(pools, ROOT_INO).await? {
        ns.insert_inode(rec);
        return Ok(());
    }
    let root = Namespace::root_inode(now());
    let entry = format::Entry {
        seq: 0,
        session: 0,
        tid: 0,
        deltas: vec![format::Delta::PutInode(root.clone())],
    };
    journal::write_back(pools, &[entry]).await?;
    ns.insert_inode(root);
    ns.insert_frag(ROOT_INO, Frag::WHOLE, []);
    Ok(())
}

async fn load_inode(pools: &Pools, ino: u64) -> Result<Option<InodeRec>, ClientError> {
    let key = Bytes::copy_from_slice(&inode_key(ino));
    let found = match pools
        .client
        .omap_get(
            &pools.meta_pool,
            inode_object(ino).as_bytes(),
            std::slice::from_ref(&key),
        )
        .await
    {
        Ok(found) => found,
        Err(ClientError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    match found.get(&key) {
        None => Ok(None),
        Some(bytes) => {
            let rec: InodeRec = format::decode(bytes)
                .map_err(|e| ClientError::Unexpected(format!("inode {ino:x}: {e}")))?;
            if !format::valid_tree(&rec.frags) {
                return Err(ClientError::Unexpected(format!(
                    "inode {ino:x}: its fragments do not cover the directory"
                )));
            }
            Ok(Some(rec))
        }
    }
}

/// The stored entries of fragment `frag` of directory `ino`.
async fn load_frag(
    pools: &Pools,
    ino: u64,
    frag: Frag,
) -> Result<Vec<(ByteBuf, Dentry)>, ClientError> {
    let object = dir_object(ino, frag);
    let mut entries = Vec::new();
    let mut after: Option<Bytes> = None;
    loop {
        let page = match pools
            .client
            .omap_range(
                &pools.meta_pool,
                object.as_bytes(),
                after.as_deref(),
                DIR_PAGE_ENTRIES,
            )
            .await
        {
            Ok(page) => page,
            Err(ClientError::NotFound) => break,
            Err(e) => return Err(e),
        };
        // Entries are small (a name of at most 255 bytes and a dentry): a
        // page is never cut by bytes, so a short one is the end.
        let full = page.len() >= DIR_PAGE_ENTRIES as usize;
        for (name, value) in page {
            let dentry: Dentry = format::decode(&value)
                .map_err(|e| ClientError::Unexpected(format!("dir {ino:x}: {e}")))?;
            entries.push((ByteBuf::from(name.to_vec()), dentry));
            after = Some(name);
        }
        if !full {
            break;
        }
    }
    Ok(entries)
}

/// Keeps the file system's space figures for `statfs` (every 5 s).
async fn refresh_stat(
    pools: Pools,
    stat: Arc<std::sync::Mutex<FsStat>>,
    nearfull_flag: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut nearfull = false;
    loop {
        if let Ok(reports) = pools.client.osd_stats().await {
            // The data pool's share of raw space: 1 / size, or k / (k + m).
            let (num, den) = match pools.client.map().await {
                Ok(map) => map
                    .pools
                    .iter()
                    .find(|p| p.name == pools.data_pool)
                    .map_or((1, 1), |p| p.redundancy.usable_fraction()),
                Err(_) => (1, 1),
            };
            let share = |raw: u64| {
                u64::try_from(u128::from(raw) * u128::from(num) / u128::from(den.max(1)))
                    .unwrap_or(u64::MAX)
            };
            let total: u64 = reports.iter().map(|r| r.stats.total_bytes).sum();
            let free: u64 = reports.iter().map(|r| r.stats.available_bytes).sum();
            if let Ok(mut s) = stat.lock() {
                s.total_bytes = share(total);
                s.free_bytes = share(free);
            }
            nearfull = reports.iter().any(|r| r.stats.nearfull);
            nearfull_flag.store(nearfull, std::sync::atomic::Ordering::Relaxed);
        }
        let pause = if nearfull { 1 } else { 5 };
        tokio::time::sleep(Duration::from_secs(pause)).await;
    }
}

/// One client session.
#[derive(Debug)]
struct Session {
    name: String,
    last_seen: Instant,
    /// Opens per inode the session holds.
    opens: HashMap<u64, u32>,
    /// Inode number ranges `[first, end)` delegated to it (the latest
    /// few), for its asynchronous creates.
    inos: VecDeque<(u64, u64)>,
}

impl Session {
    fn owns_ino(&self, ino: u64) -> bool {
        self.inos
            .iter()
            .any(|(first, end)| (*first..*end).contains(&ino))
    }

    fn delegated(&mut self, first: u64, end: u64) {
        self.inos.push_back((first, end));
        while self.inos.len() > cairn_proto::mds::INO_RANGES_KEPT {
            self.inos.pop_front();
        }
    }
}

/// The most inode numbers one `TakeInos` hands out.
const INOS_PER_TAKE_MAX: u32 = 65_536;

/// The ops a `Batch` may hold: what a client answers itself under a
/// directory delegation.
fn batchable(op: &MdsOp) -> bool {
    matches!(
        op,
        MdsOp::Create { ino: Some(_), .. }
            | MdsOp::Unlink { .. }
            | MdsOp::Release { .. }
            | MdsOp::Written { .. }
            | MdsOp::WriteInline { .. }
            | MdsOp::Returned { .. }
    )
}

/// The inodes whose state `op` reads or changes, as far as a buffer
/// lease or a directory delegation held by another session matters: the
/// inode it names, the directories whose entries it reads or changes, and
/// (if cached) the inodes those names lead to.
fn touched(op: &MdsOp, ns: &Namespace, out: &mut Vec<u64>) {
    out.extend(op.inodes());
    match op {
        MdsOp::Unlink { parent, name, .. } | MdsOp::Rmdir { parent, name } => {
            out.extend(ns.peek(*parent, name));
        }
        MdsOp::Rename {
            parent,
            name,
            new_parent,
            new_name,
            ..
        } => {
            out.extend(ns.peek(*parent, name));
            out.extend(ns.peek(*new_parent, new_name));
        }
        MdsOp::Batch { ops } => {
            for b in ops {
                touched(&b.op, ns, out);
            }
        }
        _ => {}
    }
}

/// How the actor answers a request.
enum Answer {
    Now(MdsReply),
    /// Once everything journaled so far is durable.
    WhenDurable(MdsAnswer),
}

enum ActorMsg {
    Request(MdsRequest, oneshot::Sender<MdsReply>),
    Touch(u64),
    Evict(u64, String),
    /// The holder of a buffer lease on this inode was asked to flush a
    /// recall timeout ago.
    BufferTimeout(u64),
}

/// A recall an answer waits for: (holder, its acknowledgements, the
/// recall's number, the holder's lease end).
type RecallWait = (u64, watch::Receiver<u64>, u64, Instant);

struct Actor {
    ns: Namespace,
    /// The purge queue as the purger last saw it.
    purge: Arc<journal::PurgeStats>,
    pools: Pools,
    /// The last sequence handed out.
    seq: u64,
    journal: mpsc::Sender<format::Entry>,
    /// Tells the journal writer someone waits for durability.
    flush_now: Arc<tokio::sync::Notify>,
    durable: watch::Receiver<u64>,
    sessions: HashMap<u64, Session>,
    /// Changes applied, for resends and replays: (session, tid) → seq.
    completed: HashMap<(u64, u64), u64>,
    completed_order: BTreeMap<u64, (u64, u64)>,
    /// Advisory locks of every client (in memory only).
    locks: locks::Locks,
    /// Lock requests waiting for a conflicting lock to go, in arrival order.
    lock_waiters: Vec<(MdsRequest, oneshot::Sender<MdsReply>)>,
    replaying_until: Instant,
    session_timeout: Duration,
    stat: Arc<std::sync::Mutex<FsStat>>,
    /// An OSD is past its nearfull ratio (as last reported): small files'
    /// data written by a client waiting for the answer goes to objects,
    /// where the OSDs refuse it once full (`ENOSPC`), rather than into the
    /// journal, which passes the full ratio. What a mount sends in the
    /// background for closed files stays inline (nobody could hear an
    /// error; like creates, it lands in the headroom past the full ratio).
    nearfull: Arc<std::sync::atomic::AtomicBool>,
    /// Answering the ops of a batch.
    in_batch: bool,
    leases: Leases,
    shared: SharedState,
    recall_timeout: Duration,
    /// Recalls the request being answered waits for.
    recall_waits: Vec<RecallWait>,
    /// The actor's own queue (evictions decided by recall waiters).
    queue: mpsc::WeakSender<ActorMsg>,
    /// Every change up to this sequence is in the metadata pool.
    written_back: watch::Receiver<u64>,
    cache_bytes_max: usize,
    /// What the cache is trimmed to now (at most `cache_bytes_max`).
    cache_target: usize,
    /// Requests waiting for another session to flush a file it buffers.
    buffer_waiters: HashMap<u64, Vec<(MdsRequest, oneshot::Sender<MdsReply>)>>,
    /// A request in flight this long is slow.
    complaint: Duration,
    /// Inode numbers below this may have been handed out before this MDS
    /// took over.
    takeover_reserved: u64,
    /// Records of files whose inline data the request being answered
    /// moved to objects, journaled with it.
    moved: Vec<format::Delta>,
    /// The request being answered moved inline data: its answer waits
    /// until its journal entry is durable.
    answer_durable: bool,
    /// Inode-number reservations journaled and not known durable yet:
    /// (journal sequence, mark), oldest first.
    ino_marks: VecDeque<(u64, u64)>,
}

impl Actor {
    async fn run(mut self, mut queue: mpsc::Receiver<ActorMsg>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                msg = queue.recv() => match msg {
                    Some(ActorMsg::Request(request, reply)) if matches!(request.op, MdsOp::SetLock { .. }) => {
                        self.set_lock(request, reply);
                    }
                    Some(ActorMsg::Request(request, reply)) => self.dispatch(request, reply).await,
                    Some(ActorMsg::Touch(session)) => self.touch(session),
                    Some(ActorMsg::Evict(session, reason)) => {
                        self.evict(session, reason).await;
                        self.wake_buffer_waiters();
                    }
                    Some(ActorMsg::BufferTimeout(ino)) => self.buffer_timeout(ino).await,
                    None => return,
                },
                _ = tick.tick() => {
                    self.leases.sweep(Instant::now());
                    self.wake_buffer_waiters();
                    self.expire_sessions().await;
                    self.trim_cache();
                }
            }
        }
    }

    /// Answers one request, unless it needs the size of a file another
    /// session buffers: then it waits for that session's flush.
    async fn dispatch(&mut self, request: MdsRequest, reply: oneshot::Sender<MdsReply>) {
        let now = Instant::now();
        // A file moved to another directory takes its usage to another
        // quota realm: its size must be the one its writer will report,
        // even when the writer is the one moving it.
        if let MdsOp::Rename {
            parent,
            name,
            new_parent,
            ..
        } = &request.op
            && parent != new_parent
            && let Some(ino) = self.ns.peek(*parent, name)
            && let Some(holder) = self.leases.buffer_holder(ino, now)
        {
            self.park(ino, holder, request, reply);
            return;
        }
        // A file another session buffers (its size is the one that session
        // will report), or a directory another session holds the
        // delegation of (it may have answered creates and unlinks there
        // that it has not sent yet): the holder flushes first.
        let mut inos = Vec::new();
        touched(&request.op, &self.ns, &mut inos);
        for ino in inos {
            if let Some(holder) = self.leases.buffer_holder(ino, now)
                && holder != request.session
            {
                self.park(ino, holder, request, reply);
                return;
            }
        }
        let lookup = matches!(request.op, MdsOp::Lookup { .. }).then(|| request.clone());
        let answer = self.request(request).await;
        if let (
            Some(lookup),
            Answer::Now(MdsReply {
                result: Ok(MdsAnswer::Attr(a)),
                ..
            }),
        ) = (lookup, &answer)
            && let Some(holder) = self.leases.buffer_holder(a.ino, now)
            && holder != lookup.session
        {
            let ino = a.ino;
            self.recall_waits.clear();
            self.park(ino, holder, lookup, reply);
            return;
        }
        let waits = std::mem::take(&mut self.recall_waits);
        match answer {
            Answer::Now(answer) if waits.is_empty() => drop(reply.send(answer)),
            Answer::Now(answer) => self.reply_after_recalls(waits, answer, reply),
            Answer::WhenDurable(answer) => self.reply_when_durable(waits, answer, reply),
        }
    }

    /// Parks a request until `holder` flushes `ino` (asked once), or the
    /// recall timeout evicts it.
    fn park(
        &mut self,
        ino: u64,
        holder: u64,
        request: MdsRequest,
        reply: oneshot::Sender<MdsReply>,
    ) {
        let waiting = self.buffer_waiters.entry(ino).or_default();
        let first = waiting.is_empty();
        waiting.push((request, reply));
        if !first {
            return;
        }
        shared(&self.shared)
            .mailbox(holder)
            .send(vec![cairn_proto::mds::Inval::Flush(ino)]);
        let queue = self.queue.clone();
        let timeout = self.recall_timeout;
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(queue) = queue.upgrade() {
                drop(queue.send(ActorMsg::BufferTimeout(ino)).await);
            }
        });
    }

    async fn buffer_timeout(&mut self, ino: u64) {
        if !self.buffer_waiters.contains_key(&ino) {
            return;
        }
        if let Some(holder) = self.leases.buffer_holder(ino, Instant::now()) {
            let reason = format!(
                "did not flush the buffered data of inode {ino} within {} ms",
                self.recall_timeout.as_millis()
            );
            self.evict(holder, reason).await;
        }
        self.wake_buffer_waiters();
    }

    /// Sends every request waiting for a buffer that is no longer held
    /// back to the queue.
    fn wake_buffer_waiters(&mut self) {
        let now = Instant::now();
        let free: Vec<u64> = self
            .buffer_waiters
            .keys()
            .copied()
            .filter(|ino| self.leases.buffer_holder(*ino, now).is_none())
            .collect();
        for ino in free {
            let Some(waiting) = self.buffer_waiters.remove(&ino) else {
                continue;
            };
            let Some(queue) = self.queue.upgrade() else {
                return;
            };
            tokio::spawn(async move {
                for (request, reply) in waiting {
                    drop(queue.send(ActorMsg::Request(request, reply)).await);
                }
            });
        }
    }

    /// Keeps the MDS's resident memory within the cache budget: the cache
    /// is trimmed to a target that shrinks while the process is larger
    /// than the budget (leases, queues and the allocator's slack count
    /// too) and grows back toward the budget once there is room.
    fn trim_cache(&mut self) {
        let budget = self.cache_bytes_max;
        if let Some(rss) = resident_bytes() {
            // Aim at 90 %: a second's growth stays under the budget.
            if rss > budget / 10 * 9 {
                self.cache_target = (self.cache_target / 10 * 9).max(budget / 10);
            } else if rss < budget / 10 * 7 {
                self.cache_target = (self.cache_target / 20 * 21).min(budget);
            }
        }
        let written_back = *self.written_back.borrow();
        let trimmed = self.ns.trim(self.cache_target, written_back);
        if trimmed.inodes + trimmed.dirs > 0 {
            tracing::debug!(
                inodes = trimmed.inodes,
                fragments = trimmed.dirs,
                target = self.cache_target,
                "cache trimmed"
            );
        }
    }

    fn touch(&mut self, session: u64) {
        if session == 0 {
            // An administrative request (`cairn fs ...`), not a mount.
            return;
        }
        self.sessions
            .entry(session)
            .or_insert_with(|| Session {
                name: String::new(),
                last_seen: Instant::now(),
                opens: HashMap::new(),
                inos: VecDeque::new(),
            })
            .last_seen = Instant::now();
    }

    async fn expire_sessions(&mut self) {
        let timeout = self.session_timeout;
        let gone: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen.elapsed() > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            let reason = format!("no request or poll for {} ms", timeout.as_millis());
            self.evict(id, reason).await;
        }
    }

    /// Ends a session: its leases, opens and locks go, and it is refused
    /// until it says `Hello` afresh.
    async fn evict(&mut self, id: u64, reason: String) {
        let session = self.sessions.remove(&id);
        let name = session.as_ref().map(|s| s.name.clone()).unwrap_or_default();
        tracing::warn!(
            session = format_args!("{id:x}"),
            name,
            reason,
            "session evicted"
        );
        {
            let mut shared = shared(&self.shared);
            shared.mailboxes.remove(&id);
            shared.evicted.insert(
                id,
                Evicted {
                    name,
                    reason,
                    at: Instant::now(),
                },
            );
            if shared.evicted.len() > EVICTED_KEPT
                && let Some(oldest) = shared
                    .evicted
                    .iter()
                    .min_by_key(|(_, e)| e.at)
                    .map(|(k, _)| *k)
            {
                shared.evicted.remove(&oldest);
            }
        }
        self.leases.drop_session(id);
        if let Some(session) = session {
            let deltas = self.ns.release_all(&session.opens);
            self.change(id, 0, deltas).await;
        }
        self.lock_waiters.retain(|(r, _)| r.session != id);
        if self.locks.drop_session(id) {
            self.retry_lock_waiters();
        }
    }

    /// Journals `deltas` and recalls the leases they break (the waits go to
    /// `recall_waits`).
    async fn change(&mut self, session: u64, tid: u64, deltas: Vec<format::Delta>) -> Option<u64> {
        let now = Instant::now();
        let broken = self.leases.broken_by(&deltas, session, now);
        if !broken.is_empty() {
            let mut shared = shared(&self.shared);
            for (holder, (invals, until)) in broken {
                let mailbox = shared.mailbox(holder);
                let id = mailbox.send(invals);
                self.recall_waits.push((holder, mailbox.acked(), id, until));
            }
        }
        self.ns.note_changed(&deltas, self.seq + 1);
        self.journal_deltas(session, tid, deltas).await
    }

    /// Sends `answer` once every holder acknowledged its recall (or its
    /// lease ran out); a holder silent past the recall timeout is evicted.
    fn reply_after_recalls(
        &self,
        waits: Vec<RecallWait>,
        answer: MdsReply,
        reply: oneshot::Sender<MdsReply>,
    ) {
        let recalls = self.recalls_acked(waits);
        tokio::spawn(async move {
            recalls.await;
            drop(reply.send(answer));
        });
    }

    /// Returns once every holder in `waits` acknowledged its recall or its
    /// lease ran out; evicts a holder silent past the recall timeout.
    fn recalls_acked(&self, waits: Vec<RecallWait>) -> impl Future<Output = ()> + use<> {
        let timeout = self.recall_timeout;
        let queue = self.queue.clone();
        async move {
            let started = Instant::now();
            let give_up = started + timeout;
            for (holder, mut acked, id, until) in waits {
                let deadline = until.min(give_up);
                let timed_out =
                    tokio::time::timeout_at(deadline.into(), acked.wait_for(|a| *a >= id))
                        .await
                        .is_err();
                if timed_out
                    && until > give_up
                    && let Some(queue) = queue.upgrade()
                {
                    let reason = format!(
                        "did not acknowledge a cache recall within {} ms",
                        timeout.as_millis()
                    );
                    drop(queue.send(ActorMsg::Evict(holder, reason)).await);
                }
            }
        }
    }

    /// Lets `session` cache what `answer` told it.
    fn grant(&mut self, session: u64, op: &MdsOp, answer: Option<&MdsAnswer>) {
        let now = Instant::now();
        match answer {
            Some(MdsAnswer::Created { attr, buffer }) => {
                self.leases.grant_attrs(attr.ino, session, now);
                // Its maker may keep written data past close, or answer
                // creates in the directory itself (nobody else can know
                // the inode yet).
                if *buffer {
                    self.leases.grant_buffer(attr.ino, session, now);
                }
                if attr.mode & libc::S_IFMT == libc::S_IFDIR {
                    self.leases.grant_entries(attr.ino, session, now);
                }
            }
            // A removed directory's last attributes: nothing to lease.
            Some(MdsAnswer::Attr(_)) if matches!(op, MdsOp::Rmdir { .. }) => {}
            Some(MdsAnswer::Attr(a)) => {
                self.leases.grant_attrs(a.ino, session, now);
                // A directory made: its maker may know all of its entries.
                if matches!(op, MdsOp::Create { .. }) && a.mode & libc::S_IFMT == libc::S_IFDIR {
                    self.leases.grant_entries(a.ino, session, now);
                }
            }
            Some(MdsAnswer::Opened { attr, .. }) => {
                self.leases.grant_attrs(attr.ino, session, now);
            }
            Some(MdsAnswer::Session { root, .. }) => {
                self.leases.grant_attrs(root.ino, session, now)
            }
            _ => {}
        }
        if let Some(dir) = op.leased_dir() {
            self.leases.grant_entries(dir, session, now);
        }
    }

    /// The cache's use and the requests in flight.
    fn status(&self) -> MdsAnswer {
        let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let shared = shared(&self.shared);
        let slow: Vec<SlowRequest> = shared
            .in_flight
            .values()
            .filter(|(since, _, _)| since.elapsed() >= self.complaint)
            .map(|(since, session, op)| SlowRequest {
                session: *session,
                op: (*op).to_owned(),
                age_ms: ms(since.elapsed()),
            })
            .collect();
        MdsAnswer::Status(MdsStatus {
            cached_inodes: to_u64(self.ns.inodes.len()),
            cached_dirs: to_u64(self.ns.dirs.len()),
            cache_bytes: to_u64(self.ns.cache_bytes()),
            cache_target_bytes: to_u64(self.cache_target),
            cache_budget_bytes: to_u64(self.cache_bytes_max),
            resident_bytes: to_u64(resident_bytes().unwrap_or(0)),
            // This request aside.
            in_flight: to_u64(shared.in_flight.len().saturating_sub(1)),
            slow_now: to_u64(slow.len()),
            slow: slow.into_iter().take(10).collect(),
            slow_total: shared.slow_total,
            complaint_ms: ms(self.complaint),
            purge_waiting: self
                .purge
                .waiting
                .load(std::sync::atomic::Ordering::Relaxed),
            purge_waiting_more: self
                .purge
                .waiting
                .load(std::sync::atomic::Ordering::Relaxed)
                >= u64::from(crate::mds::limits::PURGE_PAGE_FILES),
            purged_total: self.purge.purged.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    fn sessions_info(&self) -> MdsAnswer {
        let counts = self.leases.counts();
        let shared = shared(&self.shared);
        let mut list: Vec<SessionInfo> = self
            .sessions
            .iter()
            .map(|(id, s)| SessionInfo {
                id: *id,
                name: s.name.clone(),
                opens: s.opens.values().map(|n| u64::from(*n)).sum(),
                leases: counts.get(id).copied().unwrap_or(0),
                recalls_pending: shared.mailboxes.get(id).map_or(0, |m| m.pending_count()),
                idle_ms: u64::try_from(s.last_seen.elapsed().as_millis()).unwrap_or(u64::MAX),
                evicted: None,
            })
            .collect();
        list.extend(shared.evicted.iter().map(|(id, e)| SessionInfo {
            id: *id,
            name: e.name.clone(),
            opens: 0,
            leases: 0,
            recalls_pending: 0,
            idle_ms: u64::try_from(e.at.elapsed().as_millis()).unwrap_or(u64::MAX),
            evicted: Some(e.reason.clone()),
        }));
        list.sort_by_key(|s| (s.evicted.is_some(), s.id));
        MdsAnswer::Sessions(list)
    }

    /// Takes or releases a lock; a request that must wait is parked.
    fn set_lock(&mut self, request: MdsRequest, reply: oneshot::Sender<MdsReply>) {
        self.touch(request.session);
        let MdsOp::SetLock { kind, wait, .. } = request.op else {
            return;
        };
        // After a takeover the locks are the clients' to take again first
        // (as replays, within the reconnect window); others wait.
        if Instant::now() < self.replaying_until && !request.replay {
            drop(reply.send(self.lock_reply(Err(MdsError::Busy))));
            return;
        }
        let result = self.try_lock(&request);
        tracing::debug!(
            session = format!("{:x}", request.session),
            op = ?request.op,
            ?result,
            "lock"
        );
        match result {
            Ok(()) => {
                drop(reply.send(self.lock_reply(Ok(MdsAnswer::Done))));
                if kind == cairn_proto::mds::LockKind::Unlock {
                    self.retry_lock_waiters();
                }
            }
            Err(held) if request.replay => {
                tracing::warn!(
                    session = format!("{:x}", request.session),
                    ?held,
                    "a lock taken again after a takeover conflicts with one held"
                );
                drop(reply.send(self.lock_reply(Err(MdsError::Errno(libc::EAGAIN)))));
            }
            Err(_) if wait => self.lock_waiters.push((request, reply)),
            Err(_) => drop(reply.send(self.lock_reply(Err(MdsError::Errno(libc::EAGAIN))))),
        }
    }

    fn try_lock(&mut self, request: &MdsRequest) -> Result<(), cairn_proto::mds::LockInfo> {
        match locks::requested(&request.op, request.session) {
            Some((ino, range, kind, pid)) => self.locks.set(ino, range, kind, pid),
            None => Ok(()),
        }
    }

    fn lock_reply(&self, result: Result<MdsAnswer, MdsError>) -> MdsReply {
        MdsReply {
            result,
            journal_seq: None,
            durable_seq: *self.durable.borrow(),
        }
    }

    /// Grants, in arrival order, every parked lock request that no longer
    /// conflicts.
    fn retry_lock_waiters(&mut self) {
        let waiting = std::mem::take(&mut self.lock_waiters);
        for (request, reply) in waiting {
            if reply.is_closed() {
                continue;
            }
            match self.try_lock(&request) {
                Ok(()) => drop(reply.send(self.lock_reply(Ok(MdsAnswer::Done)))),
                Err(_) => self.lock_waiters.push((request, reply)),
            }
        }
    }

    /// Sends `answer` once everything handed out so far is durable and
    /// the recalls in `waits` are acknowledged (as
    /// [`reply_after_recalls`](Self::reply_after_recalls)).
    fn reply_when_durable(
        &self,
        waits: Vec<RecallWait>,
        answer: MdsAnswer,
        reply: oneshot::Sender<MdsReply>,
    ) {
        let target = self.seq;
        self.flush_now.notify_one();
        let mut durable = self.durable.clone();
        let recalls = self.recalls_acked(waits);
        tokio::spawn(async move {
            recalls.await;
            let reached = durable.wait_for(|d| *d >= target).await.map(|d| *d);
            let answer = match reached {
                Ok(d) => MdsReply {
                    result: Ok(answer),
                    journal_seq: None,
                    durable_seq: d,
                },
                Err(_) => MdsReply {
                    result: Err(MdsError::NotActive),
                    journal_seq: None,
                    durable_seq: 0,
                },
            };
            drop(reply.send(answer));
        });
    }

    async fn journal_deltas(
        &mut self,
        session: u64,
        tid: u64,
        deltas: Vec<format::Delta>,
    ) -> Option<u64> {
        if deltas.is_empty() {
            return None;
        }
        self.seq += 1;
        for delta in &deltas {
            if let format::Delta::InoReserved(mark) = delta {
                self.ino_marks.push_back((self.seq, *mark));
            }
        }
        let entry = format::Entry {
            seq: self.seq,
            session,
            tid,
            deltas,
        };
        // The writer ends only when the MDS is stopping.
        drop(self.journal.send(entry).await);
        Some(self.seq)
    }

    fn remember(&mut self, key: (u64, u64), seq: u64) {
        self.completed.insert(key, seq);
        self.completed_order.insert(seq, key);
        while self.completed_order.len() > COMPLETED_KEPT {
            if let Some((_, old)) = self.completed_order.pop_first() {
                self.completed.remove(&old);
            }
        }
    }

    /// Why a request of an evicted session is refused; a fresh `Hello`
    /// (not a replay) opens it again.
    fn refused(&self, request: &MdsRequest) -> Option<String> {
        let mut shared = shared(&self.shared);
        let evicted = shared.evicted.get(&request.session)?;
        if matches!(request.op, MdsOp::Hello { .. }) && !request.replay {
            shared.evicted.remove(&request.session);
            return None;
        }
        Some(evicted.reason.clone())
    }

    /// Answers a request, now or (`Sync`, `TakeInos`) once durable.
    async fn request(&mut self, request: MdsRequest) -> Answer {
        let durable_seq = *self.durable.borrow();
        while let Some(&(seq, mark)) = self.ino_marks.front()
            && seq <= durable_seq
        {
            self.ns.set_ino_durable(mark);
            self.ino_marks.pop_front();
        }
        // (A flag a failed change left.)
        self.ns.take_ino_undurable();
        let reply = |result, journal_seq| {
            Answer::Now(MdsReply {
                result,
                journal_seq,
                durable_seq,
            })
        };
        // Administration: no session of its own.
        match &request.op {
            MdsOp::Sessions => return reply(Ok(self.sessions_info()), None),
            MdsOp::Status => return reply(Ok(self.status()), None),
            MdsOp::Evict { session } => {
                let found = self.sessions.contains_key(session);
                if found {
                    self.evict(*session, "evicted by an administrator".into())
                        .await;
                }
                let result = if found {
                    Ok(MdsAnswer::Done)
                } else {
                    Err(MdsError::Errno(libc::ENOENT))
                };
                return reply(result, None);
            }
            _ => {}
        }
        if let Some(why) = self.refused(&request) {
            return reply(Err(MdsError::Evicted(why)), None);
        }
        self.touch(request.session);
        if let MdsOp::Hello { name } = &request.op {
            if let Some(s) = self.sessions.get_mut(&request.session) {
                s.name.clone_from(name);
            }
            let answer = self.hello().await;
            if let Ok(a) = &answer {
                self.grant(request.session, &request.op, Some(a));
            }
            return reply(answer, None);
        }
        if let MdsOp::Returned { ino } = request.op {
            if self.leases.end_buffer(ino, request.session) {
                self.wake_buffer_waiters();
            }
            return reply(Ok(MdsAnswer::Done), None);
        }
        if let MdsOp::Reassert {
            attrs,
            dirs,
            buffers,
            inos,
        } = &request.op
        {
            let now = Instant::now();
            // Ranges an earlier MDS delegated (below the mark this one
            // took over at; this one delegates only above it).
            let below = self.takeover_reserved;
            if let Some(s) = self.sessions.get_mut(&request.session) {
                for (first, end) in inos {
                    if first < end && *end <= below && !s.owns_ino(*first) {
                        s.delegated(*first, *end);
                    }
                }
            }
            for ino in buffers {
                self.leases.grant_buffer(*ino, request.session, now);
            }
            for ino in attrs {
                self.leases.grant_attrs(*ino, request.session, now);
            }
            for dir in dirs {
                self.leases.grant_entries(*dir, request.session, now);
            }
            return reply(Ok(MdsAnswer::Done), None);
        }
        if matches!(request.op, MdsOp::Sync) {
            return Answer::WhenDurable(MdsAnswer::Done);
        }
        if Instant::now() < self.replaying_until && !request.replay {
            return reply(Err(MdsError::Busy), None);
        }
        if let MdsOp::TakeInos { count } = request.op {
            // Answered once the reservation is durable: a new MDS must
            // never hand these numbers out again.
            let count = count.clamp(1, INOS_PER_TAKE_MAX);
            let (first, deltas) = self.ns.allocate_range(u64::from(count));
            self.journal_deltas(request.session, request.tid, deltas)
                .await;
            if let Some(s) = self.sessions.get_mut(&request.session) {
                s.delegated(first, first + u64::from(count));
            }
            return Answer::WhenDurable(MdsAnswer::Inos { first, count });
        }
        if let MdsOp::Batch { ops } = request.op {
            let mut results = Vec::with_capacity(ops.len());
            let mut durable = false;
            self.in_batch = true;
            for op in ops {
                if !batchable(&op.op) {
                    results.push(BatchResult {
                        result: Err(MdsError::BadRequest(format!(
                            "{} cannot be batched",
                            op.op.kind()
                        ))),
                        journal_seq: None,
                    });
                    continue;
                }
                // Using a delegation renews it.
                if let MdsOp::Create { parent, .. } | MdsOp::Unlink { parent, .. } = &op.op
                    && self.leases.buffer_holder(*parent, Instant::now()) == Some(request.session)
                {
                    self.leases
                        .grant_buffer(*parent, request.session, Instant::now());
                }
                let one = MdsRequest {
                    session: request.session,
                    tid: op.tid,
                    caller: op.caller,
                    replay: request.replay,
                    op: op.op,
                };
                results.push(match Box::pin(self.request(one)).await {
                    Answer::Now(r) => BatchResult {
                        result: r.result,
                        journal_seq: r.journal_seq,
                    },
                    // One that moved inline data to objects: the whole
                    // answer waits until that is durable.
                    Answer::WhenDurable(answer) => {
                        durable = true;
                        BatchResult {
                            result: Ok(answer),
                            journal_seq: None,
                        }
                    }
                });
            }
            self.in_batch = false;
            if durable {
                return Answer::WhenDurable(MdsAnswer::Batch(results));
            }
            return reply(Ok(MdsAnswer::Batch(results)), None);
        }
        // A number the client chose itself must be one delegated to it
        // (a replay keeps the number its first answer gave).
        if let MdsOp::Create { ino: Some(ino), .. } = request.op
            && !request.replay
            && !self
                .sessions
                .get(&request.session)
                .is_some_and(|s| s.owns_ino(ino))
        {
            return reply(
                Err(MdsError::BadRequest(format!(
                    "inode number {ino} was not delegated to this session"
                ))),
                None,
            );
        }
        if let MdsOp::GetLock {
            ino,
            owner,
            start,
            end,
            kind,
        } = request.op
        {
            let range = locks::LockRange {
                session: request.session,
                owner,
                start,
                end,
            };
            let found = self.locks.conflict(ino, range, kind);
            return reply(Ok(MdsAnswer::Lock(found)), None);
        }
        if let MdsOp::StatFs = request.op {
            let mut stat = self.stat.lock().map(|s| *s).unwrap_or_default();
            // The root's usage: every inode below it, and the root.
            stat.files = match self
                .run_loaded(&MdsOp::GetAttr { ino: ROOT_INO }, request.caller)
                .await
            {
                Ok(_) => self.ns.root_usage().files.unsigned_abs() + 1,
                Err(_) => 0,
            };
            return reply(Ok(MdsAnswer::StatFs(stat)), None);
        }
        let key = (request.session, request.tid);
        if request.op.is_change() && self.completed.contains_key(&key) {
            // A resend of a change already made: answer as it stands now.
            let answer = self.answer_again(&request).await;
            self.grant(request.session, &request.op, answer.as_ref().ok());
            return reply(answer, None);
        }
        let outcome = self.execute(&request).await;
        match outcome {
            Err(e) => {
                if e == MdsError::Errno(libc::ENOENT) {
                    // A name found missing may be cached as missing.
                    self.grant(request.session, &request.op, None);
                }
                reply(Err(e), None)
            }
            Ok(mut outcome) => {
                self.track_opens(&request);
                if let (
                    MdsOp::Create {
                        open: true, parent, ..
                    },
                    MdsAnswer::Attr(attr),
                ) = (&request.op, &outcome.answer)
                    && attr.mode & libc::S_IFMT == libc::S_IFREG
                {
                    let buffer = !self.ns.limited(*parent);
                    outcome.answer = MdsAnswer::Created {
                        attr: attr.clone(),
                        buffer,
                    };
                }
                // A directory made outside any quota limit: its maker
                // holds its delegation.
                if let (MdsOp::Create { parent, .. }, MdsAnswer::Attr(attr)) =
                    (&request.op, &outcome.answer)
                    && attr.mode & libc::S_IFMT == libc::S_IFDIR
                    && !request.replay
                    && !self.ns.limited(*parent)
                {
                    outcome.answer = MdsAnswer::Created {
                        attr: attr.clone(),
                        buffer: true,
                    };
                }
                self.grant(request.session, &request.op, Some(&outcome.answer));
                let seq = self
                    .change(request.session, request.tid, outcome.deltas)
                    .await;
                if request.replay && Instant::now() < self.replaying_until {
                    // A replay after a failover was answered once already,
                    // after its recalls; the holders get them again but the
                    // answer does not wait (they may be replaying too, with
                    // their polls held behind their replays).
                    self.recall_waits.clear();
                }
                if let Some(seq) = seq {
                    self.remember(key, seq);
                }
                // A new inode number past the durable reservation: kept
                // from the client until the reservation is durable.
                let undurable = self.ns.take_ino_undurable();
                if std::mem::take(&mut self.answer_durable) || undurable {
                    return Answer::WhenDurable(outcome.answer);
                }
                reply(Ok(outcome.answer), seq)
            }
        }
    }

    async fn hello(&mut self) -> Result<MdsAnswer, MdsError> {
        let caller = cairn_proto::mds::Caller::default();
        let root = self
            .run_loaded(&MdsOp::GetAttr { ino: ROOT_INO }, caller)
            .await?;
        let MdsAnswer::Attr(root) = root.answer else {
            return Err(MdsError::Errno(libc::EIO));
        };
        Ok(MdsAnswer::Session {
            data_pool: self.pools.data_pool.clone(),
            root,
            replaying: Instant::now() < self.replaying_until,
            lease_ms: u32::try_from(self.leases.lease().as_millis()).unwrap_or(u32::MAX),
            inline_max: u32::try_from(self.ns.inline_max()).unwrap_or(u32::MAX),
        })
    }

    fn track_opens(&mut self, request: &MdsRequest) {
        let Some(session) = self.sessions.get_mut(&request.session) else {
            return;
        };
        let mut last_close = None;
        match &request.op {
            MdsOp::Open { ino, .. } => *session.opens.entry(*ino).or_default() += 1,
            MdsOp::Release { ino } => {
                if let Some(n) = session.opens.get_mut(ino) {
                    *n -= 1;
                    if *n == 0 {
                        session.opens.remove(ino);
                    }
                }
                // Its last close (an open from before a failover is not
                // known here: its release is the last too).
                if !session.opens.contains_key(ino) {
                    last_close = Some(*ino);
                }
            }
            _ => {}
        }
        // Its last close: nothing of it is buffered now.
        if let Some(ino) = last_close
            && self.leases.end_buffer(ino, request.session)
        {
            self.wake_buffer_waiters();
        }
    }

    /// Registers the inode a `Create` with `open` made as open by the
    /// session (its number is known only from the answer).
    fn track_created(&mut self, session: u64, ino: u64) {
        if let Some(s) = self.sessions.get_mut(&session) {
            *s.opens.entry(ino).or_default() += 1;
        }
    }

    async fn answer_again(&mut self, request: &MdsRequest) -> Result<MdsAnswer, MdsError> {
        let lookup = match &request.op {
            MdsOp::Create { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Link { parent, name, .. } => Some(MdsOp::Lookup {
                parent: *parent,
                name: name.clone(),
            }),
            MdsOp::SetAttr { ino, .. }
            | MdsOp::Written { ino, .. }
            | MdsOp::WriteInline { ino, .. }
            | MdsOp::Uninline { ino }
            | MdsOp::Open { ino, .. } => Some(MdsOp::GetAttr { ino: *ino }),
            _ => None,
        };
        match lookup {
            Some(op) => self.run_loaded(&op, request.caller).await.map(|o| o.answer),
            None => Ok(MdsAnswer::Done),
        }
    }

    async fn execute(&mut self, request: &MdsRequest) -> Result<namespace::Outcome, MdsError> {
        let outcome = self.run_loaded(&request.op, request.caller).await;
        let moved = std::mem::take(&mut self.moved);
        let outcome = match outcome {
            Ok(mut outcome) if !moved.is_empty() => {
                // Journaled with the request, answered once durable.
                self.answer_durable = true;
                let mut deltas = moved;
                deltas.append(&mut outcome.deltas);
                outcome.deltas = deltas;
                outcome
            }
            Ok(outcome) => outcome,
            Err(e) => {
                if !moved.is_empty() {
                    self.journal_deltas(request.session, request.tid, moved)
                        .await;
                }
                return Err(e);
            }
        };
        if let (MdsOp::Create { open: true, .. }, MdsAnswer::Attr(attr)) =
            (&request.op, &outcome.answer)
            && attr.mode & libc::S_IFMT == libc::S_IFREG
        {
            self.track_created(request.session, attr.ino);
        }
        Ok(outcome)
    }

    /// Runs `op`, loading what the cache lacks until it answers.
    async fn run_loaded(
        &mut self,
        op: &MdsOp,
        caller: cairn_proto::mds::Caller,
    ) -> Result<namespace::Outcome, MdsError> {
        let mut missing = HashSet::new();
        let mut op = std::borrow::Cow::Borrowed(op);
        for _ in 0..LOADS_PER_REQUEST_MAX {
            let paused = match op.as_ref() {
                MdsOp::WriteInline { ino, .. }
                    if !self.in_batch
                        && self.nearfull.load(std::sync::atomic::Ordering::Relaxed)
                        && self.ns.inode_rec(*ino).is_ok() =>
                {
                    Some((*ino, true))
                }
                _ => None,
            };
            if let Some((ino, write)) = self.ns.needs_objects(&op).or(paused) {
                self.move_to_objects(ino).await?;
                if write {
                    op = std::borrow::Cow::Owned(self.write_objects(&op).await?);
                }
            }
            match self.ns.execute(&op, caller, now()) {
                Ok(outcome) => return Ok(outcome),
                Err(Stop::Errno(e)) => return Err(MdsError::Errno(e)),
                Err(Stop::Need(need)) => {
                    if !missing.insert(need) {
                        // Loaded and still missing: it does not exist.
                        return Err(MdsError::Errno(libc::ENOENT));
                    }
                    self.load(need).await?;
                }
                Err(Stop::NeedMany(needs)) => {
                    let fresh: Vec<Need> =
                        needs.into_iter().filter(|n| missing.insert(*n)).collect();
                    if fresh.is_empty() {
                        return Err(MdsError::Errno(libc::ENOENT));
                    }
                    for need in fresh {
                        self.load(need).await?;
                    }
                }
            }
        }
        Err(MdsError::Errno(libc::EIO))
    }

    /// Moves an inline file's data to its data objects (written and
    /// acknowledged by the OSDs first); the record without it is
    /// journaled with the request ([`Actor::moved`]), whose answer then
    /// waits until that is durable (a client writes the objects itself
    /// after it, and must never see the data moved again).
    async fn move_to_objects(&mut self, ino: u64) -> Result<(), MdsError> {
        let Ok(rec) = self.ns.inode_rec(ino) else {
            return Ok(());
        };
        let Some(data) = rec.inline.clone() else {
            return Ok(());
        };
        if !data.is_empty() {
            let layout = rec.attr.layout;
            self.data_path()
                .write(ino, &layout, 0, Bytes::from(data.into_vec()))
                .await
                .map_err(MdsError::Errno)?;
        }
        let deltas = self.ns.uninlined(ino);
        self.moved.extend(deltas);
        Ok(())
    }

    /// Writes the ranges of a `WriteInline` of a file whose data is in
    /// objects there; the size report to apply instead.
    async fn write_objects(&mut self, op: &MdsOp) -> Result<MdsOp, MdsError> {
        let MdsOp::WriteInline {
            ino,
            ranges,
            size,
            mtime,
        } = op
        else {
            return Ok(op.clone());
        };
        let layout = self
            .ns
            .inode_rec(*ino)
            .map_err(|_| MdsError::Errno(libc::ENOENT))?
            .attr
            .layout;
        let path = self.data_path();
        let mut end = *size;
        for (offset, bytes) in ranges {
            end = end.max(offset.saturating_add(bytes.len() as u64));
            path.write(*ino, &layout, *offset, Bytes::from(bytes.to_vec()))
                .await
                .map_err(MdsError::Errno)?;
        }
        Ok(MdsOp::Written {
            ino: *ino,
            size: end,
            mtime: *mtime,
        })
    }

    fn data_path(&self) -> crate::mount::data::DataPath {
        crate::mount::data::DataPath::new(self.pools.client.clone(), self.pools.data_pool.clone())
    }

    async fn load(&mut self, need: Need) -> Result<(), MdsError> {
        let io = |e: ClientError| {
            tracing::warn!(error = %e, "metadata pool read failed");
            MdsError::Errno(libc::EIO)
        };
        match need {
            Need::Inode(ino) => {
                if let Some(rec) = load_inode(&self.pools, ino).await.map_err(io)? {
                    self.ns.saw_ino(ino);
                    self.ns.insert_inode(rec);
                }
            }
            Need::Frag(ino, frag) => {
                let entries = load_frag(&self.pools, ino, frag).await.map_err(io)?;
                let strays = self.ns.insert_frag(ino, frag, entries);
                if strays > 0 {
                    tracing::warn!(
                        dir = format_args!("{ino:x}"),
                        object = dir_object(ino, frag),
                        strays,
                        "directory object holds names of another fragment; left out"
                    );
                }
            }
        }
        Ok(())
    }
}

/// Sends one administrative request (`Sessions`, `Evict`) to the MDS at
/// `addr`.
///
/// # Errors
/// Why the MDS could not be asked, or its refusal.
pub async fn ask(addr: &str, op: MdsOp) -> Result<MdsAnswer, String> {
    let conn = cairn_wire::Connection::connect(addr, cairn_wire::ConnectOptions::default())
        .await
        .map_err(|e| format!("MDS at {addr}: {e}"))?;
    let request = MdsRequest {
        session: 0,
        tid: 0,
        caller: cairn_proto::mds::Caller::default(),
        replay: false,
        op,
    };
    let (reply, _) = conn
        .call::<MdsRequest, MdsReply>(&request, Bytes::new())
        .await
        .map_err(|e| format!("MDS at {addr}: {e}"))?;
    match reply.result {
        Ok(answer) => Ok(answer),
        Err(MdsError::Errno(e)) => Err(std::io::Error::from_raw_os_error(e).to_string()),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// What every connection handler shares.
#[derive(Clone)]
struct Shell {
    requests: mpsc::Sender<ActorMsg>,
    durable: watch::Receiver<u64>,
    shared: SharedState,
    complaint: Duration,
}

/// A request in [`leases::Shared::in_flight`] until dropped (answered, or
/// its connection gone).
struct InFlight<'a> {
    shared: &'a SharedState,
    number: u64,
    complaint: Duration,
}

impl<'a> InFlight<'a> {
    fn start(shared: &'a SharedState, complaint: Duration, request: &MdsRequest) -> InFlight<'a> {
        let mut state = leases::shared(shared);
        state.next_request += 1;
        let number = state.next_request;
        state
            .in_flight
            .insert(number, (Instant::now(), request.session, request.op.kind()));
        InFlight {
            shared,
            number,
            complaint,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = leases::shared(self.shared);
        if let Some((since, session, op)) = state.in_flight.remove(&self.number) {
            let took = since.elapsed();
            if took >= self.complaint {
                state.slow_total += 1;
                drop(state);
                tracing::warn!(session = format!("{session:x}"), op, ?took, "slow request");
            }
        }
    }
}

fn respond<M: cairn_wire::Message>(msg: &M) -> Frame {
    match Frame::response(0, msg, Bytes::new()) {
        Ok(frame) => frame,
        Err(error) => {
            let fallback = MdsReply {
                result: Err(MdsError::BadRequest(error.to_string())),
                journal_seq: None,
                durable_seq: 0,
            };
            Frame::response(0, &fallback, Bytes::new()).expect("a small error reply encodes")
        }
    }
}

impl Shell {
    async fn handle(&self, frame: Frame) -> Frame {
        match frame.kind {
            KIND_MDS_REQUEST => match frame.decode_body::<MdsRequest>() {
                Ok(request) => respond(&self.request(request).await),
                Err(e) => respond(&bad(e.to_string())),
            },
            KIND_MDS_POLL => match frame.decode_body::<MdsPoll>() {
                Ok(poll) => respond(&self.poll(poll).await),
                Err(e) => respond(&MdsPollReply {
                    result: Err(MdsError::BadRequest(e.to_string())),
                    recalls: Vec::new(),
                }),
            },
            other => respond(&bad(format!(
                "message kind {other:#06x} is not an MDS request"
            ))),
        }
    }

    async fn request(&self, request: MdsRequest) -> MdsReply {
        // A lock request that waits for its lock waits as long as another
        // holds it: not a slow request.
        let waits = matches!(request.op, MdsOp::SetLock { wait: true, .. });
        let _in_flight = (!waits).then(|| InFlight::start(&self.shared, self.complaint, &request));
        let (tx, rx) = oneshot::channel();
        if self
            .requests
            .send(ActorMsg::Request(request, tx))
            .await
            .is_err()
        {
            return not_active();
        }
        rx.await.unwrap_or_else(|_| not_active())
    }

    /// Holds a poll until there is news (a newer durable sequence or a
    /// recall) or its wait ends; takes the acknowledgement of recalls.
    async fn poll(&self, poll: MdsPoll) -> MdsPollReply {
        let refuse = |e| MdsPollReply {
            result: Err(e),
            recalls: Vec::new(),
        };
        let mailbox = {
            let mut shared = shared(&self.shared);
            if let Some(evicted) = shared.evicted.get(&poll.session) {
                return refuse(MdsError::Evicted(evicted.reason.clone()));
            }
            shared.mailbox(poll.session)
        };
        mailbox.ack(poll.recalled);
        if self
            .requests
            .send(ActorMsg::Touch(poll.session))
            .await
            .is_err()
        {
            return refuse(MdsError::NotActive);
        }
        if mailbox.pending_count() == 0 {
            let wait = Duration::from_millis(u64::from(poll.wait_ms.min(POLL_WAIT_MS_MAX)));
            let mut durable = self.durable.clone();
            let newer = durable.wait_for(|d| *d > poll.durable_seq);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = newer => {}
                () = mailbox.wake.notified() => {}
            }
        }
        let seq = *self.durable.borrow();
        MdsPollReply {
            result: Ok(seq),
            recalls: mailbox.pending(),
        }
    }
}

/// This process's resident memory (Linux `/proc/self/statm`).
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn bad(why: String) -> MdsReply {
    MdsReply {
        result: Err(MdsError::BadRequest(why)),
        journal_seq: None,
        durable_seq: 0,
    }
}

fn not_active() -> MdsReply {
    MdsReply {
        result: Err(MdsError::NotActive),
        journal_seq: None,
        durable_seq: 0,
    }
}

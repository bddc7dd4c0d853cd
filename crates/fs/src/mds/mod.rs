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

pub mod journal;
pub mod limits;
pub mod locks;
pub mod namespace;

use crate::format::{self, Dentry, InodeRec, dir_object, inode_key, inode_object};
use crate::mds::journal::{JournalError, Pools};
use crate::mds::limits::{
    BEACON_MS, COMPLETED_KEPT, DIR_PAGE_ENTRIES, JOURNAL_QUEUE_MAX, LOADS_PER_REQUEST_MAX,
    RECONNECT_WINDOW_MS_DEFAULT, REQUEST_QUEUE_MAX, SESSION_TIMEOUT_MS_DEFAULT,
};
use crate::mds::namespace::{DirCache, Namespace, Need, Stop};
use bytes::Bytes;
use cairn_client::{Client, ClientError};
use cairn_proto::mds::{
    FsStat, KIND_MDS_POLL, KIND_MDS_REQUEST, MdsAnswer, MdsError, MdsOp, MdsPoll, MdsPollReply,
    MdsReply, MdsRequest, POLL_WAIT_MS_MAX, ROOT_INO, Time,
};
use cairn_proto::mon::{MdsRole, MonCommand, Reply};
use cairn_wire::{Frame, ServeOptions};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, HashMap, HashSet};
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
    let client = Client::connect(&config.mon_addr).await?;
    tracing::info!(fs = config.fs, name = config.name, %addr, "MDS standing by");
    let (generation, status) = loop {
        match beacon(&client, &config, &addr).await {
            Ok((MdsRole::Active { generation }, status)) => break (generation, status),
            Ok((MdsRole::Standby, _)) => {}
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
    let replayed = journal::take_over(&pools).await?;
    tracing::info!(
        entries = replayed.entries,
        seq = replayed.seq,
        ms = started.elapsed().as_millis(),
        "journal replayed"
    );
    let mut ns = Namespace::new(replayed.head.ino_reserved, replayed.head.ino_reserved);
    ensure_root(&pools, &mut ns).await?;
    let (entries_tx, entries_rx) = mpsc::channel(JOURNAL_QUEUE_MAX);
    let (durable_tx, durable_rx) = watch::channel(replayed.seq);
    let (writeback_tx, writeback_rx) = mpsc::unbounded_channel();
    let flush_now = Arc::new(tokio::sync::Notify::new());
    let writer = tokio::spawn(journal::run_writer(
        pools.clone(),
        replayed.segment,
        entries_rx,
        Arc::clone(&flush_now),
        durable_tx,
        writeback_tx,
    ));
    let writeback = tokio::spawn(journal::run_writeback(
        pools.clone(),
        replayed.head,
        writeback_rx,
    ));
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE_MAX);
    let completed = replayed
        .completed
        .iter()
        .map(|k| (*k, replayed.seq))
        .collect();
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
    };
    let stat = Arc::clone(&actor.stat);
    let actor_task = tokio::spawn(actor.run(requests_rx));
    tokio::spawn(refresh_stat(pools.clone(), stat));
    let shell = Shell {
        requests: requests_tx.clone(),
        durable: durable_rx,
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
    ns.insert_dir(ROOT_INO, DirCache::default());
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
        Some(bytes) => format::decode(bytes)
            .map(Some)
            .map_err(|e| ClientError::Unexpected(format!("inode {ino}: {e}"))),
    }
}

async fn load_dir(pools: &Pools, ino: u64) -> Result<DirCache, ClientError> {
    let object = dir_object(ino);
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
    Ok(DirCache::from_entries(entries))
}

/// Keeps the file system's space figures for `statfs` (every 5 s).
async fn refresh_stat(pools: Pools, stat: Arc<std::sync::Mutex<FsStat>>) {
    loop {
        if let Ok(reports) = pools.client.osd_stats().await {
            let copies = match pools.client.map().await {
                Ok(map) => map
                    .pools
                    .iter()
                    .find(|p| p.name == pools.data_pool)
                    .map_or(1, |p| match p.redundancy {
                        cairn_placement::Redundancy::Replicated { size, .. } => {
                            u64::from(size.max(1))
                        }
                        cairn_placement::Redundancy::Erasure { k, m } => {
                            u64::from(k + m) / u64::from(k.max(1))
                        }
                    }),
                Err(_) => 1,
            };
            let total: u64 = reports.iter().map(|r| r.stats.total_bytes).sum();
            let free: u64 = reports.iter().map(|r| r.stats.available_bytes).sum();
            if let Ok(mut s) = stat.lock() {
                s.total_bytes = total / copies;
                s.free_bytes = free / copies;
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// One client session.
#[derive(Debug)]
struct Session {
    last_seen: Instant,
    /// Opens per inode the session holds.
    opens: HashMap<u64, u32>,
}

enum ActorMsg {
    Request(MdsRequest, oneshot::Sender<MdsReply>),
    Touch(u64),
}

struct Actor {
    ns: Namespace,
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
                    Some(ActorMsg::Request(request, reply)) => {
                        let answer = self.request(request).await;
                        if let Some(answer) = answer {
                            drop(reply.send(answer));
                        } else {
                            self.reply_when_durable(reply);
                        }
                    }
                    Some(ActorMsg::Touch(session)) => self.touch(session),
                    None => return,
                },
                _ = tick.tick() => self.expire_sessions().await,
            }
        }
    }

    fn touch(&mut self, session: u64) {
        self.sessions
            .entry(session)
            .or_insert_with(|| Session {
                last_seen: Instant::now(),
                opens: HashMap::new(),
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
            let Some(session) = self.sessions.remove(&id) else {
                continue;
            };
            tracing::warn!(
                session = format_args!("{id:x}"),
                opens = session.opens.len(),
                "session timed out: evicted"
            );
            let deltas = self.ns.release_all(&session.opens);
            self.journal_deltas(id, 0, deltas).await;
            self.lock_waiters.retain(|(r, _)| r.session != id);
            if self.locks.drop_session(id) {
                self.retry_lock_waiters();
            }
        }
    }

    /// Takes or releases a lock; a request that must wait is parked.
    fn set_lock(&mut self, request: MdsRequest, reply: oneshot::Sender<MdsReply>) {
        self.touch(request.session);
        let MdsOp::SetLock { kind, wait, .. } = request.op else {
            return;
        };
        match self.try_lock(&request) {
            Ok(()) => {
                drop(reply.send(self.lock_reply(Ok(MdsAnswer::Done))));
                if kind == cairn_proto::mds::LockKind::Unlock {
                    self.retry_lock_waiters();
                }
            }
            Err(_) if wait => self.lock_waiters.push((request, reply)),
            Err(_) => drop(reply.send(self.lock_reply(Err(MdsError::Errno(libc::EAGAIN))))),
        }
    }

    fn try_lock(&mut self, request: &MdsRequest) -> Result<(), cairn_proto::mds::LockInfo> {
        let MdsOp::SetLock {
            ino,
            owner,
            start,
            end,
            kind,
            pid,
            ..
        } = request.op
        else {
            return Ok(());
        };
        let range = locks::LockRange {
            session: request.session,
            owner,
            start,
            end,
        };
        self.locks.set(ino, range, kind, pid)
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

    /// Sends `reply` once everything handed out so far is durable.
    fn reply_when_durable(&self, reply: oneshot::Sender<MdsReply>) {
        let target = self.seq;
        self.flush_now.notify_one();
        let mut durable = self.durable.clone();
        tokio::spawn(async move {
            let reached = durable.wait_for(|d| *d >= target).await.map(|d| *d);
            let answer = match reached {
                Ok(d) => MdsReply {
                    result: Ok(MdsAnswer::Done),
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

    /// Answers a request; `None` for a `Sync` (answered once durable).
    async fn request(&mut self, request: MdsRequest) -> Option<MdsReply> {
        let durable_seq = *self.durable.borrow();
        let reply = |result, journal_seq| MdsReply {
            result,
            journal_seq,
            durable_seq,
        };
        self.touch(request.session);
        if let MdsOp::Hello { .. } = &request.op {
            return Some(reply(self.hello().await, None));
        }
        if matches!(request.op, MdsOp::Sync) {
            return None;
        }
        if Instant::now() < self.replaying_until && !request.replay {
            return Some(reply(Err(MdsError::Busy), None));
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
            return Some(reply(Ok(MdsAnswer::Lock(found)), None));
        }
        if let MdsOp::StatFs = request.op {
            let mut stat = self.stat.lock().map(|s| *s).unwrap_or_default();
            // Inodes the MDS has cached: a lower bound of the files (the
            // namespace keeps no count of its own yet).
            stat.files = self.ns.cached().0 as u64;
            return Some(reply(Ok(MdsAnswer::StatFs(stat)), None));
        }
        let key = (request.session, request.tid);
        if request.op.is_change() && self.completed.contains_key(&key) {
            // A resend of a change already made: answer as it stands now.
            return Some(reply(self.answer_again(&request).await, None));
        }
        let outcome = self.execute(&request).await;
        match outcome {
            Err(e) => Some(reply(Err(e), None)),
            Ok(outcome) => {
                self.track_opens(&request);
                let seq = self
                    .journal_deltas(request.session, request.tid, outcome.deltas)
                    .await;
                if let Some(seq) = seq {
                    self.remember(key, seq);
                }
                Some(reply(Ok(outcome.answer), seq))
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
        })
    }

    fn track_opens(&mut self, request: &MdsRequest) {
        let Some(session) = self.sessions.get_mut(&request.session) else {
            return;
        };
        match &request.op {
            MdsOp::Open { ino, .. } => *session.opens.entry(*ino).or_default() += 1,
            MdsOp::Release { ino } => {
                if let Some(n) = session.opens.get_mut(ino) {
                    *n -= 1;
                    if *n == 0 {
                        session.opens.remove(ino);
                    }
                }
            }
            _ => {}
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
            MdsOp::SetAttr { ino, .. } | MdsOp::Written { ino, .. } | MdsOp::Open { ino, .. } => {
                Some(MdsOp::GetAttr { ino: *ino })
            }
            _ => None,
        };
        match lookup {
            Some(op) => self.run_loaded(&op, request.caller).await.map(|o| o.answer),
            None => Ok(MdsAnswer::Done),
        }
    }

    async fn execute(&mut self, request: &MdsRequest) -> Result<namespace::Outcome, MdsError> {
        let outcome = self.run_loaded(&request.op, request.caller).await?;
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
        for _ in 0..LOADS_PER_REQUEST_MAX {
            match self.ns.execute(op, caller, now()) {
                Ok(outcome) => return Ok(outcome),
                Err(Stop::Errno(e)) => return Err(MdsError::Errno(e)),
                Err(Stop::Need(need)) => {
                    if !missing.insert(need) {
                        // Loaded and still missing: it does not exist.
                        return Err(MdsError::Errno(libc::ENOENT));
                    }
                    self.load(need).await?;
                }
            }
        }
        Err(MdsError::Errno(libc::EIO))
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
            Need::Dir(ino) => {
                let dir = load_dir(&self.pools, ino).await.map_err(io)?;
                self.ns.insert_dir(ino, dir);
            }
        }
        Ok(())
    }
}

/// What every connection handler shares.
#[derive(Clone)]
struct Shell {
    requests: mpsc::Sender<ActorMsg>,
    durable: watch::Receiver<u64>,
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
                }),
            },
            other => respond(&bad(format!(
                "message kind {other:#06x} is not an MDS request"
            ))),
        }
    }

    async fn request(&self, request: MdsRequest) -> MdsReply {
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

    async fn poll(&self, poll: MdsPoll) -> MdsPollReply {
        if self
            .requests
            .send(ActorMsg::Touch(poll.session))
            .await
            .is_err()
        {
            return MdsPollReply {
                result: Err(MdsError::NotActive),
            };
        }
        let wait = Duration::from_millis(u64::from(poll.wait_ms.min(POLL_WAIT_MS_MAX)));
        let mut durable = self.durable.clone();
        let newer = durable.wait_for(|d| *d > poll.durable_seq);
        let seq = match tokio::time::timeout(wait, newer).await {
            Ok(Ok(d)) => *d,
            _ => *self.durable.borrow(),
        };
        MdsPollReply { result: Ok(seq) }
    }
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

//! The client's session with the active MDS: finding it through the
//! monitor, sending requests, keeping every change not yet durable and
//! replaying those to a new MDS after a failover, and the leases that let
//! the kernel cache what the MDS answered: their time, their recalls
//! (through the kernel's invalidation notices) and their reassertion to a
//! new MDS.

use crate::mds::locks::{self, LockRange, Locks};
use crate::mds::namespace;
use crate::mount::limits::{
    BATCH_DATA_BYTES_MAX, BATCH_OPS_MAX, DELEGATION_MARGIN_MS, INOS_PER_TAKE, LEASE_MARGIN_MS,
    MDS_DISCOVER_PAUSE_MS, MDS_REQUEST_DEADLINE_MS, MDS_REQUEST_TIMEOUT_MS, OUTBOX_MAX,
    POLL_WAIT_MS, REASSERT_BATCH, REINVALIDATE_MS,
};
use bytes::Bytes;
use cairn_client::Client;
use cairn_proto::mds::{
    Attr, BatchOp, Caller, Errno, Inval, LockKind, MdsAnswer, MdsError, MdsOp, MdsPoll,
    MdsPollReply, MdsReply, MdsRequest, Time,
};
use cairn_proto::mon::{MonCommand, Reply};
use cairn_wire::{ConnectOptions, Connection};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A change the MDS answered but has not yet made durable.
#[derive(Clone, Debug)]
struct Unsafe {
    request: MdsRequest,
    seq: u64,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    fs: String,
    session: u64,
    name: String,
    tid: AtomicU64,
    /// The connection to the active MDS and its number (bumped on each
    /// reconnect, so only one caller replaces a dead connection).
    conn: tokio::sync::Mutex<Option<(Connection, u64)>>,
    conn_number: AtomicU64,
    unsafe_changes: Mutex<BTreeMap<u64, Unsafe>>,
    durable: AtomicU64,
    data_pool: Mutex<String>,
    /// The MDS's lease time, in milliseconds (0 before the first hello).
    lease_ms: AtomicU64,
    /// Files up to this size keep their data in the MDS (as it said).
    inline_max: AtomicU64,
    /// Bumped at each batch of recalls received: an answer to a request
    /// sent before a bump may predate the change recalled, so it is not
    /// cached.
    recall_epoch: AtomicU64,
    /// The last recall number done (per MDS connection).
    recalled: AtomicU64,
    /// Leases held (for reassertion after a failover): attributes by
    /// inode and entries by directory, with their ends.
    held: Mutex<Held>,
    /// Directories whose every entry this mount knows (it made them and
    /// has held their entries' lease since): their names. A lookup of
    /// another name there is answered "missing" without the MDS.
    complete: Mutex<HashMap<u64, HashSet<Vec<u8>>>>,
    /// Files whose written data this mount may keep past close (buffer
    /// leases), for reassertion.
    buffers: Mutex<HashSet<u64>>,
    /// Files the MDS asked to have flushed, and the wake-up of the flusher.
    flushes: Mutex<Vec<u64>>,
    flush_wake: tokio::sync::Notify,
    /// Told of every inode another mount changed (recalled).
    inode_hook: OnceLock<Hook>,
    /// Where recalls go to be done in the kernel.
    invalidator: OnceLock<std::sync::mpsc::Sender<Vec<Inval>>>,
    /// Set once evicted: calls fail until the leases have run out, then
    /// the session opens afresh.
    evicted_until: Mutex<Option<Instant>>,
    /// The advisory locks the MDS granted this mount (as session 0), taken
    /// again from a new MDS after a failover.
    locks: Mutex<Locks>,
    /// Directories this mount holds the delegation of: it answers creates
    /// and unlinks there itself. Lock order: `delegated`, `complete`,
    /// `inos`, `outbox`.
    delegated: Mutex<HashMap<u64, Delegation>>,
    /// Inode numbers the MDS delegated for those creates.
    inos: Mutex<InoPool>,
    /// Changes answered here, in order, waiting to go in a `Batch`.
    outbox: Mutex<Vec<BatchOp>>,
    outbox_wake: tokio::sync::Notify,
    /// Changes ever put in the outbox, and those the MDS has answered (or
    /// that failed): every call waits until the MDS has what came before.
    queued: AtomicU64,
    applied: tokio::sync::watch::Sender<u64>,
    /// The runtime background work is spawned on (calls come from FUSE
    /// threads too).
    rt: tokio::runtime::Handle,
    /// Attributes the MDS answered (or this mount made), answered to the
    /// kernel's `getattr` while their lease lasts.
    attrs: Mutex<AttrCache>,
}

/// The attributes this mount may answer from itself, as the MDS last gave
/// them. An entry goes when a recall or a change of the inode through the
/// MDS makes it stale; an answer to a request sent before that is not
/// kept.
#[derive(Debug, Default)]
struct AttrCache {
    map: HashMap<u64, Attr>,
    /// Bumped at every invalidation.
    epoch: u64,
    /// The epoch each inode was last invalidated at.
    stale_at: HashMap<u64, u64>,
    /// Answers to requests sent before this epoch are not kept (set when
    /// everything goes, or `stale_at` is emptied).
    floor: u64,
    /// Changes of this mount at the MDS in flight, and whether two were at
    /// once since there were none (their answers may then come in another
    /// order than the MDS applied them).
    changing: u32,
    overlapped: bool,
    /// Cached inodes known to have no xattrs (made by this mount, and
    /// neither changed nor recalled since): `getxattr` is answered here.
    /// The kernel asks `security.capability` before every write to a file.
    bare: HashSet<u64>,
}

/// Invalidations [`AttrCache::stale_at`] remembers before it starts over.
const STALE_KEPT: usize = 65_536;

impl AttrCache {
    fn invalidate(&mut self, ino: u64) {
        self.epoch += 1;
        self.map.remove(&ino);
        self.bare.remove(&ino);
        if self.stale_at.len() >= STALE_KEPT {
            self.stale_at.clear();
            self.floor = self.epoch;
        }
        self.stale_at.insert(ino, self.epoch);
    }

    fn clear(&mut self) {
        self.epoch += 1;
        self.map.clear();
        self.bare.clear();
        self.stale_at.clear();
        self.floor = self.epoch;
    }

    /// A change of this mount goes to the MDS: what it changes is stale.
    fn begin_change(&mut self, op: &MdsOp) {
        if matches!(
            op,
            MdsOp::Unlink { .. } | MdsOp::Rmdir { .. } | MdsOp::Rename { .. }
        ) {
            // The inodes the names lead to change too.
            self.clear();
        } else {
            for ino in op.inodes() {
                self.invalidate(ino);
            }
        }
        self.changing += 1;
        if self.changing > 1 {
            self.overlapped = true;
        }
    }

    /// A change answered with `attr` (if any; of a new inode if `made`):
    /// kept only if no other change was in flight meanwhile.
    fn end_change(&mut self, attr: Option<&Attr>, made: bool, sent_epoch: u64) {
        let alone = !self.overlapped;
        self.changing = self.changing.saturating_sub(1);
        if self.changing == 0 {
            self.overlapped = false;
        }
        match attr {
            Some(a) if alone && made => self.fill_new(a, sent_epoch),
            Some(a) if alone => {
                self.fill(a, sent_epoch);
            }
            Some(a) => self.invalidate(a.ino),
            None => {}
        }
    }

    /// Keeps `attr`, answered to a request sent at `sent_epoch`, unless
    /// its inode went stale since; `true` if kept.
    fn fill(&mut self, attr: &Attr, sent_epoch: u64) -> bool {
        let stale = sent_epoch < self.floor
            || self
                .stale_at
                .get(&attr.ino)
                .is_some_and(|at| *at > sent_epoch);
        if !stale {
            self.map.insert(attr.ino, attr.clone());
        }
        !stale
    }

    /// As [`fill`](Self::fill), for an inode just made (so without xattrs).
    fn fill_new(&mut self, attr: &Attr, sent_epoch: u64) {
        if self.fill(attr, sent_epoch) {
            self.bare.insert(attr.ino);
        }
    }
}

/// A directory this mount holds the delegation of.
#[derive(Debug, Clone)]
struct Delegation {
    /// Its attributes as the MDS last answered them (a new file's group
    /// and layout come from them).
    attr: Attr,
    until: Instant,
}

/// Inode numbers delegated to this session.
#[derive(Debug, Default)]
struct InoPool {
    /// Unused numbers, `[next, end)` ranges in order.
    free: VecDeque<(u64, u64)>,
    /// The latest ranges granted, told to a new MDS after a failover (a
    /// create from one may still be in the outbox).
    granted: VecDeque<(u64, u64)>,
    /// A `TakeInos` is on its way.
    asking: bool,
}

/// What a mount may answer itself.
#[derive(Debug)]
pub enum Here<T> {
    /// Answered here.
    Done(T),
    /// It could be once the outbox has room or inode numbers come.
    Wait,
    /// Only the MDS can answer.
    Mds,
}

/// How far back in the outbox a release looks for its file's create.
const RELEASE_SCAN: usize = 64;

impl InoPool {
    fn left(&self) -> u64 {
        self.free.iter().map(|(next, end)| end - next).sum()
    }

    fn take(&mut self) -> Option<u64> {
        let front = self.free.front_mut()?;
        let ino = front.0;
        front.0 += 1;
        if front.0 >= front.1 {
            self.free.pop_front();
        }
        Some(ino)
    }

    fn add(&mut self, first: u64, end: u64) {
        self.free.push_back((first, end));
        self.granted.push_back((first, end));
        while self.granted.len() > cairn_proto::mds::INO_RANGES_KEPT {
            self.granted.pop_front();
        }
    }
}

/// Called with each inode recalled.
pub type InodeHook = Box<dyn Fn(u64) + Send + Sync>;

/// An [`InodeHook`], shown by name only.
struct Hook(InodeHook);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InodeHook")
    }
}

#[derive(Debug, Default)]
struct Held {
    attrs: HashMap<u64, Instant>,
    dirs: HashMap<u64, Instant>,
}

impl Held {
    fn live(map: &mut HashMap<u64, Instant>, now: Instant) -> Vec<u64> {
        map.retain(|_, until| *until > now);
        map.keys().copied().collect()
    }
}

/// A file-system session; clone freely.
#[derive(Debug, Clone)]
pub struct MdsSession {
    inner: Arc<Inner>,
}

fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

impl MdsSession {
    /// Opens a session with the active MDS of file system `fs`; returns it
    /// and the root's attributes.
    ///
    /// # Errors
    /// An errno if no MDS answers in time.
    pub async fn open(
        client: Client,
        fs: &str,
        name: &str,
    ) -> Result<(MdsSession, MdsAnswer), Errno> {
        let session = MdsSession {
            inner: Arc::new(Inner {
                client,
                fs: fs.to_owned(),
                session: random_id(),
                name: name.to_owned(),
                tid: AtomicU64::new(1),
                conn: tokio::sync::Mutex::new(None),
                conn_number: AtomicU64::new(0),
                unsafe_changes: Mutex::new(BTreeMap::new()),
                durable: AtomicU64::new(0),
                data_pool: Mutex::new(String::new()),
                lease_ms: AtomicU64::new(0),
                inline_max: AtomicU64::new(0),
                recall_epoch: AtomicU64::new(0),
                recalled: AtomicU64::new(0),
                held: Mutex::new(Held::default()),
                complete: Mutex::new(HashMap::new()),
                buffers: Mutex::new(HashSet::new()),
                flushes: Mutex::new(Vec::new()),
                flush_wake: tokio::sync::Notify::new(),
                inode_hook: OnceLock::new(),
                invalidator: OnceLock::new(),
                evicted_until: Mutex::new(None),
                locks: Mutex::new(Locks::default()),
                delegated: Mutex::new(HashMap::new()),
                inos: Mutex::new(InoPool::default()),
                outbox: Mutex::new(Vec::new()),
                outbox_wake: tokio::sync::Notify::new(),
                queued: AtomicU64::new(0),
                applied: tokio::sync::watch::channel(0).0,
                rt: tokio::runtime::Handle::current(),
                attrs: Mutex::new(AttrCache::default()),
            }),
        };
        let hello = session
            .call(
                MdsOp::Hello {
                    name: name.to_owned(),
                },
                Caller::default(),
            )
            .await?;
        tokio::spawn(poll_forever(Arc::downgrade(&session.inner)));
        tokio::spawn(send_forever(Arc::downgrade(&session.inner)));
        session.want_inos();
        Ok((session, hello))
    }

    /// The id the MDS knows this session by.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.session
    }

    #[must_use]
    pub fn data_pool(&self) -> String {
        lock(&self.inner.data_pool).clone()
    }

    #[must_use]
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Changes not yet durable.
    #[must_use]
    pub fn unsafe_count(&self) -> usize {
        lock(&self.inner.unsafe_changes).len()
    }

    /// Where recalls are done: the kernel's invalidation notices, sent
    /// from a thread of their own (a notice may wait on a directory lock
    /// that a request of this mount holds, so it never blocks the
    /// acknowledgement, which goes as soon as the recall is queued).
    pub fn set_notifier(&self, notifier: fuser::Notifier) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.inner.invalidator.set(tx).is_ok() {
            let spawned = std::thread::Builder::new()
                .name("cairn-inval".into())
                .spawn(move || run_invalidator(&notifier, &rx));
            if let Err(error) = spawned {
                tracing::error!(%error, "no invalidation thread: caching stays off");
            }
        }
    }

    /// Sets what is told of each inode recalled (once).
    pub fn on_inode_recall(&self, hook: InodeHook) {
        drop(self.inner.inode_hook.set(Hook(hook)));
    }

    /// Files up to this size keep their data in the MDS (0: none do).
    pub fn inline_max(&self) -> u64 {
        self.inner.inline_max.load(Ordering::Relaxed)
    }

    /// Sends `op` to the MDS in the next batch, in order with the changes
    /// answered here (for a file this mount holds the buffer lease of:
    /// nobody else can see it before the batch is applied).
    pub fn send_later(&self, op: MdsOp, caller: Caller) {
        self.queue(op, caller);
    }

    /// Notes an inline write of `ino` sent in the next batch (a file this
    /// mount holds the buffer lease of): its cached attributes take the
    /// size and times the MDS will give it.
    pub fn written_here(&self, ino: u64, size: u64, mtime: Time) {
        let mut cache = lock(&self.inner.attrs);
        if let Some(a) = cache.map.get_mut(&ino) {
            a.size = size;
            a.mtime = a.mtime.max(mtime);
            a.ctime = a.ctime.max(mtime);
        }
    }

    /// Notes a buffer lease on `ino`.
    pub fn buffered(&self, ino: u64) {
        lock(&self.inner.buffers).insert(ino);
    }

    /// Notes the end of a buffer lease on `ino`.
    pub fn unbuffered(&self, ino: u64) {
        lock(&self.inner.buffers).remove(&ino);
    }

    /// Answers the create of regular file `name` in `parent` here, without
    /// the MDS, when this mount holds the directory's delegation, knows
    /// its entries (so the name is free) and has a delegated inode number:
    /// the file's attributes and how long the kernel may cache them. The
    /// create goes to the MDS in the next batch. [`Here::Wait`]: the
    /// outbox is full or no number is left; [`Here::Mds`]: ask the MDS.
    pub fn create_here(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        caller: Caller,
        time: Time,
    ) -> Here<(Attr, Duration)> {
        if !namespace::creatable_name(name) {
            return Here::Mds;
        }
        let mut delegated = lock(&self.inner.delegated);
        let (attr, left) = {
            let Some(d) = delegated.get_mut(&parent) else {
                return Here::Mds;
            };
            let Some(left) = self.delegation_left(d) else {
                return Here::Mds;
            };
            let mut complete = lock(&self.inner.complete);
            let Some(names) = complete.get_mut(&parent) else {
                return Here::Mds;
            };
            if names.contains(name) {
                return Here::Mds;
            }
            if self.outbox_full() {
                return Here::Wait;
            }
            let Some(ino) = self.take_ino() else {
                return Here::Wait;
            };
            names.insert(name.to_vec());
            let attr = namespace::new_attr(ino, libc::S_IFREG, mode, caller, &d.attr, time);
            d.attr.mtime = time;
            d.attr.ctime = time;
            (attr, left)
        };
        self.queue(
            MdsOp::Create {
                parent,
                name: ByteBuf::from(name),
                mode: attr.mode,
                umask: 0,
                rdev: 0,
                open: true,
                ino: Some(attr.ino),
                time: Some(time),
            },
            caller,
        );
        drop(delegated);
        let until = Instant::now() + left;
        let mut held = lock(&self.inner.held);
        held.attrs.insert(attr.ino, until);
        held.dirs.insert(parent, until);
        drop(held);
        lock(&self.inner.buffers).insert(attr.ino);
        let mut cache = lock(&self.inner.attrs);
        let epoch = cache.epoch;
        cache.fill_new(&attr, epoch);
        drop(cache);
        Here::Done((attr, left))
    }

    /// Waits until a create answered here could go ahead: the outbox has
    /// room and inode numbers are delegated (or a second has passed).
    pub async fn room_here(&self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let ready = !self.outbox_full() && lock(&self.inner.inos).left() > 0;
            if ready {
                return;
            }
            if lock(&self.inner.inos).left() == 0 {
                self.want_inos();
            }
            let mut applied = self.inner.applied.subscribe();
            let moved = applied.changed();
            drop(tokio::time::timeout(Duration::from_millis(5), moved).await);
        }
    }

    fn outbox_full(&self) -> bool {
        self.inner
            .queued
            .load(Ordering::Acquire)
            .saturating_sub(*self.inner.applied.borrow())
            >= OUTBOX_MAX
    }

    /// Answers the unlink of `name` from `parent` here, without the MDS,
    /// when this mount holds the directory's delegation and knows the
    /// name is there (the kernel has checked it is no directory and that
    /// the caller may remove it). `false`: ask the MDS.
    pub fn unlink_here(&self, parent: u64, name: &[u8], caller: Caller, time: Time) -> bool {
        let mut delegated = lock(&self.inner.delegated);
        let Some(d) = delegated.get_mut(&parent) else {
            return false;
        };
        if self.delegation_left(d).is_none() || self.outbox_full() {
            return false;
        }
        let mut complete = lock(&self.inner.complete);
        let Some(names) = complete.get_mut(&parent) else {
            return false;
        };
        if !names.remove(name) {
            return false;
        }
        drop(complete);
        d.attr.mtime = time;
        d.attr.ctime = time;
        // Which inode the name led to is not known here.
        lock(&self.inner.attrs).clear();
        self.queue(
            MdsOp::Unlink {
                parent,
                name: ByteBuf::from(name),
                time: Some(time),
            },
            caller,
        );
        true
    }

    /// The attributes of a directory this mount holds the delegation of
    /// (with the times of the changes it answered there itself), and how
    /// long the kernel may cache them.
    pub fn attr_here(&self, ino: u64) -> Option<(Attr, Duration)> {
        {
            let delegated = lock(&self.inner.delegated);
            if let Some(d) = delegated.get(&ino) {
                let left = d.until.saturating_duration_since(Instant::now());
                if left > Duration::from_millis(DELEGATION_MARGIN_MS) {
                    return Some((d.attr.clone(), left));
                }
            }
        }
        // Attributes this mount leases, as the MDS last answered them.
        let until = *lock(&self.inner.held).attrs.get(&ino)?;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || lock(&self.inner.evicted_until).is_some() {
            return None;
        }
        let attr = lock(&self.inner.attrs).map.get(&ino)?.clone();
        Some((attr, left))
    }

    /// Whether inode `ino` is known to have no xattrs: this mount made it
    /// and leases its attributes, and nothing changed or recalled them
    /// since (an xattr change at the MDS recalls the attributes).
    pub fn no_xattrs_here(&self, ino: u64) -> bool {
        let Some(until) = lock(&self.inner.held).attrs.get(&ino).copied() else {
            return false;
        };
        if until <= Instant::now() || lock(&self.inner.evicted_until).is_some() {
            return false;
        }
        let cache = lock(&self.inner.attrs);
        cache.bare.contains(&ino) && cache.map.contains_key(&ino)
    }

    /// What is left of delegation `d` to use, if enough (a batch sent now
    /// must reach the MDS before it ends).
    fn delegation_left(&self, d: &Delegation) -> Option<Duration> {
        let left = d.until.saturating_duration_since(Instant::now());
        (left > Duration::from_millis(DELEGATION_MARGIN_MS)).then_some(left)
    }

    /// A delegated inode number; asks for more when half are used.
    fn take_ino(&self) -> Option<u64> {
        let mut pool = lock(&self.inner.inos);
        let ino = pool.take();
        let low = pool.left() < u64::from(INOS_PER_TAKE / 2) && !pool.asking;
        drop(pool);
        if low {
            self.want_inos();
        }
        ino
    }

    /// Asks the MDS for more inode numbers in the background.
    fn want_inos(&self) {
        {
            let mut pool = lock(&self.inner.inos);
            if pool.asking {
                return;
            }
            pool.asking = true;
        }
        let session = self.clone();
        self.inner.rt.spawn(async move {
            let request = MdsRequest {
                session: session.inner.session,
                tid: session.inner.tid.fetch_add(1, Ordering::Relaxed),
                caller: Caller::default(),
                replay: false,
                op: MdsOp::TakeInos {
                    count: INOS_PER_TAKE,
                },
            };
            let answer = session.send(request).await;
            let mut pool = lock(&session.inner.inos);
            pool.asking = false;
            match answer {
                Ok(MdsAnswer::Inos { first, count }) => {
                    pool.add(first, first + u64::from(count));
                }
                other => tracing::debug!(?other, "no inode numbers delegated"),
            }
        });
    }

    /// Sends the release of `ino` to the MDS later, in order with the
    /// changes answered here (its answer changes nothing). A file made
    /// here and not sent yet is sent made closed instead.
    pub fn release_later(&self, ino: u64) {
        {
            let mut outbox = lock(&self.inner.outbox);
            let made_here =
                outbox
                    .iter_mut()
                    .rev()
                    .take(RELEASE_SCAN)
                    .find_map(|b| match &mut b.op {
                        MdsOp::Create {
                            ino: Some(made),
                            open,
                            ..
                        } if *made == ino && *open => Some(open),
                        _ => None,
                    });
            if let Some(open) = made_here {
                *open = false;
                drop(outbox);
                // Closed before the MDS heard of it: no buffer lease.
                lock(&self.inner.buffers).remove(&ino);
                return;
            }
        }
        self.queue(MdsOp::Release { ino }, Caller::default());
    }

    fn queue(&self, op: MdsOp, caller: Caller) {
        let tid = self.inner.tid.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.outbox).push(BatchOp { tid, caller, op });
        self.inner.queued.fetch_add(1, Ordering::AcqRel);
        self.inner.outbox_wake.notify_one();
    }

    /// Waits until the MDS has answered every change put in the outbox
    /// before this call.
    async fn outbox_sent(&self) {
        let target = self.inner.queued.load(Ordering::Acquire);
        if *self.inner.applied.borrow() >= target {
            return;
        }
        let mut applied = self.inner.applied.subscribe();
        drop(applied.wait_for(|a| *a >= target).await);
    }

    /// Sends one batch from the outbox; `false` if it was empty.
    async fn send_batch(&self) -> bool {
        let ops: Vec<BatchOp> = {
            let mut outbox = lock(&self.inner.outbox);
            // At least one op; inline data kept well inside a body.
            let mut data = 0;
            let n = outbox
                .iter()
                .take(BATCH_OPS_MAX)
                .take_while(|b| {
                    data += b.op.data_bytes();
                    data <= BATCH_DATA_BYTES_MAX
                })
                .count()
                .max(1)
                .min(outbox.len());
            outbox.drain(..n).collect()
        };
        if ops.is_empty() {
            return false;
        }
        let count = ops.len() as u64;
        let sent = Instant::now();
        let request = MdsRequest {
            session: self.inner.session,
            tid: self.inner.tid.fetch_add(1, Ordering::Relaxed),
            caller: Caller::default(),
            replay: false,
            op: MdsOp::Batch { ops: ops.clone() },
        };
        let answer = match self.resume_if_evicted().await {
            Ok(()) => self.send(request).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(MdsAnswer::Batch(results)) if results.len() == ops.len() => {
                let durable = self.inner.durable.load(Ordering::Relaxed);
                let mut dirs = HashSet::new();
                for (op, done) in ops.into_iter().zip(results) {
                    if let MdsOp::Create { parent, .. } | MdsOp::Unlink { parent, .. } = &op.op {
                        dirs.insert(*parent);
                    }
                    let request = MdsRequest {
                        session: self.inner.session,
                        tid: op.tid,
                        caller: op.caller,
                        replay: false,
                        op: op.op,
                    };
                    match done.result {
                        Ok(answer) => {
                            self.keep_if_unsafe(&request, &answer, done.journal_seq, durable);
                        }
                        Err(error) => tracing::error!(
                            op = request.op.kind(),
                            ?error,
                            "the MDS refused a change this mount had answered itself"
                        ),
                    }
                }
                // The MDS renewed the delegations the batch used.
                let lease = Duration::from_millis(
                    self.inner
                        .lease_ms
                        .load(Ordering::Relaxed)
                        .saturating_sub(LEASE_MARGIN_MS),
                );
                let mut delegated = lock(&self.inner.delegated);
                for dir in dirs {
                    if let Some(d) = delegated.get_mut(&dir) {
                        d.until = d.until.max(sent + lease);
                    }
                }
            }
            other => tracing::error!(
                count,
                ?other,
                "changes this mount answered itself did not reach the MDS: they are lost"
            ),
        }
        self.inner.applied.send_modify(|a| *a += count);
        true
    }

    /// Files the MDS wants flushed, waiting up to `wait` for one.
    pub async fn flushes_wanted(&self, wait: Duration) -> Vec<u64> {
        let asked = self.take_flushes();
        if !asked.is_empty() {
            return asked;
        }
        drop(tokio::time::timeout(wait, self.flush_asked()).await);
        self.take_flushes()
    }

    /// Files the MDS wants flushed that no call has taken yet.
    pub fn take_flushes(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.inner.flushes))
    }

    /// Returns once the MDS asks for a flush (or at once if it asked
    /// since the last wait).
    pub async fn flush_asked(&self) {
        self.inner.flush_wake.notified().await;
    }

    /// Sends `op` and waits for its answer, across MDS failovers.
    ///
    /// # Errors
    /// The MDS's errno, or `EIO` when no MDS answers before the deadline.
    pub async fn call(&self, op: MdsOp, caller: Caller) -> Result<MdsAnswer, Errno> {
        self.call_leased(op, caller).await.0
    }

    /// Like [`call`](Self::call), with how long the kernel may cache the
    /// answer (its attributes, and for a lookup or a name made, the
    /// entry): zero when no lease covers it.
    pub async fn call_leased(
        &self,
        op: MdsOp,
        caller: Caller,
    ) -> (Result<MdsAnswer, Errno>, Duration) {
        // The MDS must have every change answered here before this one.
        self.outbox_sent().await;
        if let Err(e) = self.resume_if_evicted().await {
            return (Err(e), Duration::ZERO);
        }
        let change = op.is_change();
        let removes_dir = matches!(op, MdsOp::Rmdir { .. });
        // A create that succeeds made a new inode (an existing name is
        // `EEXIST`).
        let makes_inode = matches!(op, MdsOp::Create { .. } | MdsOp::Symlink { .. });
        let (attr_epoch, quiet) = {
            let mut cache = lock(&self.inner.attrs);
            if change {
                cache.begin_change(&op);
            }
            (cache.epoch, cache.changing == 0)
        };
        if change {
            // A delegated directory this changes at the MDS (its
            // attributes, its links, what its new files inherit) is no
            // longer known here well enough to answer for it.
            let mut delegated = lock(&self.inner.delegated);
            if !delegated.is_empty() {
                for dir in op.inodes() {
                    delegated.remove(&dir);
                }
            }
        }
        let sent = Instant::now();
        let epoch = self.inner.recall_epoch.load(Ordering::Acquire);
        let dir = op.leased_dir();
        let names = NamesChange::of(&op);
        let makes = matches!(names, NamesChange::Made { .. });
        let tid = self.inner.tid.fetch_add(1, Ordering::Relaxed);
        let request = MdsRequest {
            session: self.inner.session,
            tid,
            caller,
            replay: false,
            op,
        };
        let result = self.send(request).await;
        let ttl = self.lease_left(sent, epoch);
        {
            // What the answer tells of an inode's attributes is kept while
            // leased, unless it may be older than a change of this mount.
            let answered = match &result {
                Ok(
                    MdsAnswer::Attr(a)
                    | MdsAnswer::Created { attr: a, .. }
                    | MdsAnswer::Opened { attr: a, .. },
                ) if !ttl.is_zero() && !removes_dir => Some(a),
                _ => None,
            };
            let mut cache = lock(&self.inner.attrs);
            if change {
                cache.end_change(answered, makes_inode, attr_epoch);
            } else if let Some(a) = answered
                && quiet
            {
                cache.fill(a, attr_epoch);
            }
        }
        if result.is_ok() {
            self.names_changed(names, &result, !ttl.is_zero());
        }
        if let Ok(MdsAnswer::Attr(a)) = &result {
            // A delegated directory's attributes from the MDS, which has
            // every change made there: removed, it is delegated no more.
            let mut delegated = lock(&self.inner.delegated);
            if let Some(d) = delegated.get_mut(&a.ino) {
                if a.nlink == 0 {
                    delegated.remove(&a.ino);
                } else {
                    d.attr = a.clone();
                }
            }
        }
        if ttl.is_zero() {
            return (result, ttl);
        }
        let until = Instant::now() + ttl;
        if let Ok(MdsAnswer::Created { attr, buffer: true }) = &result
            && attr.mode & libc::S_IFMT == libc::S_IFDIR
        {
            // A directory made here, delegated to this mount.
            lock(&self.inner.delegated).insert(
                attr.ino,
                Delegation {
                    attr: attr.clone(),
                    until,
                },
            );
            lock(&self.inner.buffers).insert(attr.ino);
        }
        let mut held = lock(&self.inner.held);
        if let Ok(
            MdsAnswer::Attr(a)
            | MdsAnswer::Created { attr: a, .. }
            | MdsAnswer::Opened { attr: a, .. },
        ) = &result
        {
            held.attrs.insert(a.ino, until);
            if a.mode & libc::S_IFMT == libc::S_IFDIR && makes {
                held.dirs.insert(a.ino, until);
            }
        }
        if let Some(dir) = dir
            && matches!(result, Ok(_) | Err(libc::ENOENT))
        {
            held.dirs.insert(dir, until);
        }
        (result, ttl)
    }

    /// Keeps the names of complete directories as this mount changes them;
    /// a directory it just made (and leases) starts complete and empty.
    fn names_changed(&self, change: NamesChange, result: &Result<MdsAnswer, Errno>, leased: bool) {
        let mut complete = lock(&self.inner.complete);
        match change {
            NamesChange::None => {}
            NamesChange::Made { parent, name } => {
                if let Some(names) = complete.get_mut(&parent) {
                    names.insert(name);
                }
                if let Ok(MdsAnswer::Attr(a) | MdsAnswer::Created { attr: a, .. }) = result
                    && a.mode & libc::S_IFMT == libc::S_IFDIR
                    && leased
                {
                    complete.insert(a.ino, HashSet::new());
                }
            }
            NamesChange::Removed { parent, name } => {
                if let Some(names) = complete.get_mut(&parent) {
                    names.remove(&name);
                }
            }
            NamesChange::Moved { from, to } => {
                if let Some(names) = complete.get_mut(&from.0) {
                    names.remove(&from.1);
                }
                if let Some(names) = complete.get_mut(&to.0) {
                    names.insert(to.1);
                }
            }
        }
    }

    /// How long the kernel may cache `name` as missing from `parent`
    /// without asking the MDS: `Some` when this mount knows every entry of
    /// `parent` (under a live lease) and `name` is not among them.
    #[must_use]
    pub fn known_missing(&self, parent: u64, name: &[u8]) -> Option<Duration> {
        if name.len() > cairn_proto::mds::NAME_BYTES_MAX {
            // Not missing but invalid: the MDS says so (`ENAMETOOLONG`).
            return None;
        }
        let until = *lock(&self.inner.held).dirs.get(&parent)?;
        let complete = lock(&self.inner.complete);
        let names = complete.get(&parent)?;
        if names.contains(name) {
            return None;
        }
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// What is left of a lease asked for at `sent`: nothing if a recall
    /// came since, or the session is evicted.
    fn lease_left(&self, sent: Instant, epoch: u64) -> Duration {
        if self.inner.recall_epoch.load(Ordering::Acquire) != epoch
            || lock(&self.inner.evicted_until).is_some()
        {
            return Duration::ZERO;
        }
        let lease = Duration::from_millis(
            self.inner
                .lease_ms
                .load(Ordering::Relaxed)
                .saturating_sub(LEASE_MARGIN_MS),
        );
        (sent + lease).saturating_duration_since(Instant::now())
    }

    /// After an eviction: `EIO` until every lease given before has run
    /// out (the kernel has dropped what it cached), then a fresh session.
    async fn resume_if_evicted(&self) -> Result<(), Errno> {
        let until = *lock(&self.inner.evicted_until);
        let Some(until) = until else {
            return Ok(());
        };
        if Instant::now() < until {
            return Err(libc::EIO);
        }
        let hello = MdsRequest {
            session: self.inner.session,
            tid: self.inner.tid.fetch_add(1, Ordering::Relaxed),
            caller: Caller::default(),
            replay: false,
            op: MdsOp::Hello {
                name: self.inner.name.clone(),
            },
        };
        match self.send(hello).await? {
            MdsAnswer::Session {
                lease_ms,
                inline_max,
                ..
            } => {
                self.inner
                    .lease_ms
                    .store(u64::from(lease_ms), Ordering::Relaxed);
                self.inner
                    .inline_max
                    .store(u64::from(inline_max), Ordering::Relaxed);
                *lock(&self.inner.evicted_until) = None;
                tracing::warn!("session opened again after its eviction");
                Ok(())
            }
            _ => Err(libc::EIO),
        }
    }

    fn note_evicted(&self, why: &str) {
        let mut until = lock(&self.inner.evicted_until);
        if until.is_none() {
            tracing::error!(
                why,
                "this mount was evicted by the MDS: calls fail until its cached leases run out"
            );
            let lease = Duration::from_millis(self.inner.lease_ms.load(Ordering::Relaxed));
            *until = Some(Instant::now() + lease);
            *lock(&self.inner.held) = Held::default();
            *lock(&self.inner.locks) = Locks::default();
            lock(&self.inner.delegated).clear();
            lock(&self.inner.attrs).clear();
            *lock(&self.inner.inos) = InoPool::default();
            lock(&self.inner.complete).clear();
            self.inner.recall_epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    async fn send(&self, mut request: MdsRequest) -> Result<MdsAnswer, Errno> {
        let tid = request.tid;
        // A lock request that waits may wait as long as the lock is held.
        let waits = matches!(request.op, MdsOp::SetLock { wait: true, .. });
        let deadline =
            (!waits).then(|| Instant::now() + Duration::from_millis(MDS_REQUEST_DEADLINE_MS));
        loop {
            if deadline.is_some_and(|d| Instant::now() > d) {
                tracing::warn!(tid, "no MDS answered before the deadline");
                return Err(libc::EIO);
            }
            let (conn, number) = match self.connection().await {
                Ok(c) => c,
                Err(Some(why)) => {
                    self.note_evicted(&why);
                    return Err(libc::EIO);
                }
                Err(None) => {
                    tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
                    continue;
                }
            };
            let sent = conn
                .call::<MdsRequest, MdsReply>(&request, Bytes::new())
                .await;
            let reply = match sent {
                Ok((reply, _)) => reply,
                Err(error) => {
                    tracing::debug!(%error, "MDS connection failed");
                    self.drop_connection(number).await;
                    // It may have been applied: a resend is marked so the
                    // MDS recognises it.
                    request.replay = true;
                    continue;
                }
            };
            self.saw_durable(reply.durable_seq);
            match reply.result {
                Ok(answer) => {
                    self.keep_if_unsafe(&request, &answer, reply.journal_seq, reply.durable_seq);
                    self.note_lock(&request.op);
                    return Ok(answer);
                }
                Err(MdsError::Errno(e)) => return Err(e),
                Err(MdsError::Busy) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(MdsError::NotActive) => {
                    self.drop_connection(number).await;
                    tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
                }
                Err(MdsError::BadRequest(why)) => {
                    tracing::error!(why, "the MDS refused a request as malformed");
                    return Err(libc::EIO);
                }
                Err(MdsError::Evicted(why)) => {
                    self.note_evicted(&why);
                    return Err(libc::EIO);
                }
            }
        }
    }

    /// Mirrors a lock the MDS granted or released.
    fn note_lock(&self, op: &MdsOp) {
        if let Some((ino, range, kind, pid)) = locks::requested(op, 0) {
            // One session: never a conflict.
            let _ = lock(&self.inner.locks).set(ino, range, kind, pid);
        }
    }

    /// Takes this mount's locks again from a (possibly new) MDS, as
    /// replays: within the reconnect window, before anyone else may lock.
    async fn reclaim_locks(&self, conn: &Connection) -> Result<(), ()> {
        let held = lock(&self.inner.locks).all();
        if !held.is_empty() {
            tracing::info!(count = held.len(), "taking the locks held again");
        }
        for (ino, range, kind, pid) in held {
            let request = MdsRequest {
                session: self.inner.session,
                tid: 0,
                caller: Caller::default(),
                replay: true,
                op: MdsOp::SetLock {
                    ino,
                    owner: range.owner,
                    start: range.start,
                    end: range.end,
                    kind,
                    pid,
                    wait: false,
                },
            };
            let (reply, _) = conn
                .call::<MdsRequest, MdsReply>(&request, Bytes::new())
                .await
                .map_err(drop)?;
            match reply.result {
                Ok(_) => {}
                Err(MdsError::Busy | MdsError::NotActive) => return Err(()),
                Err(e) => {
                    // Lost (someone else holds it now): forgotten, logged.
                    tracing::error!(ino, owner = range.owner, error = ?e, "a lock could not be taken again after a failover");
                    let unlock = LockRange {
                        session: 0,
                        ..range
                    };
                    let _ = lock(&self.inner.locks).set(ino, unlock, LockKind::Unlock, pid);
                }
            }
        }
        Ok(())
    }

    fn keep_if_unsafe(
        &self,
        request: &MdsRequest,
        answer: &MdsAnswer,
        seq: Option<u64>,
        durable: u64,
    ) {
        let Some(seq) = seq else { return };
        if seq <= durable {
            return;
        }
        let mut request = request.clone();
        request.replay = true;
        // A replayed create keeps the inode number it was given.
        if let (
            MdsOp::Create { ino, .. } | MdsOp::Symlink { ino, .. },
            MdsAnswer::Attr(attr) | MdsAnswer::Created { attr, .. },
        ) = (&mut request.op, answer)
        {
            *ino = Some(attr.ino);
        }
        if let MdsOp::Create { open, .. } = &mut request.op {
            // The open it made died with the old MDS's session state.
            *open = false;
        }
        lock(&self.inner.unsafe_changes).insert(request.tid, Unsafe { request, seq });
    }

    fn saw_durable(&self, seq: u64) {
        self.inner.durable.fetch_max(seq, Ordering::Relaxed);
        let mut changes = lock(&self.inner.unsafe_changes);
        changes.retain(|_, u| u.seq > seq);
    }

    async fn drop_connection(&self, number: u64) {
        let mut conn = self.inner.conn.lock().await;
        if conn.as_ref().is_some_and(|(_, n)| *n == number) {
            *conn = None;
        }
    }

    /// The current connection, or a new one to the active MDS (with the
    /// session resumed, its leases reasserted and the unsafe changes
    /// replayed). `Err(Some(why))`: the session was evicted.
    async fn connection(&self) -> Result<(Connection, u64), Option<String>> {
        let mut slot = self.inner.conn.lock().await;
        if let Some((conn, number)) = slot.as_ref()
            && !conn.is_closed()
        {
            return Ok((conn.clone(), *number));
        }
        *slot = None;
        let addr = self.active_addr().await.ok_or(None)?;
        let options = ConnectOptions {
            request_timeout: Duration::from_millis(MDS_REQUEST_TIMEOUT_MS),
            ..ConnectOptions::default()
        };
        let conn = Connection::connect(addr.as_str(), options)
            .await
            .map_err(|_| None)?;
        let hello = MdsRequest {
            session: self.inner.session,
            tid: 0,
            caller: Caller::default(),
            replay: true,
            op: MdsOp::Hello {
                name: self.inner.name.clone(),
            },
        };
        let (reply, _) = conn
            .call::<MdsRequest, MdsReply>(&hello, Bytes::new())
            .await
            .map_err(|_| None)?;
        match reply.result {
            Ok(MdsAnswer::Session {
                data_pool,
                lease_ms,
                inline_max,
                ..
            }) => {
                *lock(&self.inner.data_pool) = data_pool;
                self.inner
                    .lease_ms
                    .store(u64::from(lease_ms), Ordering::Relaxed);
                self.inner
                    .inline_max
                    .store(u64::from(inline_max), Ordering::Relaxed);
            }
            Err(MdsError::Evicted(why)) => return Err(Some(why)),
            _ => return Err(None),
        }
        // Recall numbers are the MDS's, per session: start afresh. What
        // changed while no MDS heard this mount is unknown.
        self.inner.recalled.store(0, Ordering::Relaxed);
        lock(&self.inner.complete).clear();
        lock(&self.inner.attrs).clear();
        self.reassert(&conn).await.map_err(|()| None)?;
        self.reclaim_locks(&conn).await.map_err(|()| None)?;
        // A new MDS numbers its journal afresh from what survived.
        self.inner
            .durable
            .store(reply.durable_seq, Ordering::Relaxed);
        self.replay(&conn).await.map_err(|()| None)?;
        let number = self.inner.conn_number.fetch_add(1, Ordering::Relaxed) + 1;
        *slot = Some((conn.clone(), number));
        Ok((conn, number))
    }

    /// Tells a (possibly new) MDS which leases this session still holds,
    /// so its changes recall them.
    async fn reassert(&self, conn: &Connection) -> Result<(), ()> {
        let (attrs, dirs) = {
            let mut held = lock(&self.inner.held);
            let now = Instant::now();
            (
                Held::live(&mut held.attrs, now),
                Held::live(&mut held.dirs, now),
            )
        };
        let buffers: Vec<u64> = lock(&self.inner.buffers).iter().copied().collect();
        let inos: Vec<(u64, u64)> = lock(&self.inner.inos).granted.iter().copied().collect();
        let batches = attrs
            .len()
            .max(dirs.len())
            .max(buffers.len())
            .max(1)
            .div_ceil(REASSERT_BATCH);
        for i in 0..batches {
            let part = |v: &[u64]| {
                v.iter()
                    .skip(i * REASSERT_BATCH)
                    .take(REASSERT_BATCH)
                    .copied()
                    .collect()
            };
            let request = MdsRequest {
                session: self.inner.session,
                tid: 0,
                caller: Caller::default(),
                replay: true,
                op: MdsOp::Reassert {
                    attrs: part(&attrs),
                    dirs: part(&dirs),
                    buffers: part(&buffers),
                    inos: if i == 0 { inos.clone() } else { Vec::new() },
                },
            };
            let (reply, _) = conn
                .call::<MdsRequest, MdsReply>(&request, Bytes::new())
                .await
                .map_err(drop)?;
            if reply.result.is_err() {
                return Err(());
            }
        }
        Ok(())
    }

    /// Hands recalls to the invalidation thread; returns once queued.
    fn recall(&self, recalls: Vec<cairn_proto::mds::Recall>) {
        let done = self.inner.recalled.load(Ordering::Relaxed);
        let fresh: Vec<_> = recalls.into_iter().filter(|r| r.id > done).collect();
        let Some(last) = fresh.iter().map(|r| r.id).max() else {
            return;
        };
        self.inner.recall_epoch.fetch_add(1, Ordering::AcqRel);
        {
            // Another mount changed these directories: no longer complete.
            let mut complete = lock(&self.inner.complete);
            for r in &fresh {
                if let Inval::Entry { parent, .. } = &r.inval {
                    complete.remove(parent);
                }
            }
        }
        let (flushes, invals): (Vec<Inval>, Vec<Inval>) = fresh
            .into_iter()
            .map(|r| r.inval)
            .partition(|i| matches!(i, Inval::Flush(_)));
        if !flushes.is_empty() {
            // A recalled delegation: nothing more is answered here; the
            // flusher's `Returned` goes once the outbox is sent.
            let mut delegated = lock(&self.inner.delegated);
            for inval in &flushes {
                if let Inval::Flush(ino) = inval {
                    delegated.remove(ino);
                }
            }
            drop(delegated);
            lock(&self.inner.flushes).extend(flushes.iter().filter_map(|i| match i {
                Inval::Flush(ino) => Some(*ino),
                _ => None,
            }));
            self.inner.flush_wake.notify_one();
        }
        {
            let mut cache = lock(&self.inner.attrs);
            // (An inode whose links another mount changed is recalled
            // itself, since this mount leases whatever it caches.)
            for inval in &invals {
                if let Inval::Inode(ino) = inval {
                    cache.invalidate(*ino);
                }
            }
        }
        if let Some(hook) = self.inner.inode_hook.get() {
            for inval in &invals {
                if let Inval::Inode(ino) = inval {
                    (hook.0)(*ino);
                }
            }
        }
        if let Some(tx) = self.inner.invalidator.get() {
            drop(tx.send(invals));
        }
        self.inner.recalled.fetch_max(last, Ordering::Relaxed);
    }

    async fn replay(&self, conn: &Connection) -> Result<(), ()> {
        let pending: Vec<Unsafe> = lock(&self.inner.unsafe_changes).values().cloned().collect();
        if pending.is_empty() {
            return Ok(());
        }
        tracing::info!(
            count = pending.len(),
            "replaying changes the old MDS had not made durable"
        );
        for u in pending {
            let (reply, _) = conn
                .call::<MdsRequest, MdsReply>(&u.request, Bytes::new())
                .await
                .map_err(drop)?;
            let mut changes = lock(&self.inner.unsafe_changes);
            match (reply.result, reply.journal_seq) {
                (Ok(_), Some(seq)) if seq > reply.durable_seq => {
                    if let Some(entry) = changes.get_mut(&u.request.tid) {
                        entry.seq = seq;
                    }
                }
                (Err(MdsError::Busy | MdsError::NotActive), _) => return Err(()),
                (result, _) => {
                    if let Err(e) = result {
                        tracing::warn!(tid = u.request.tid, op = u.request.op.kind(), error = ?e, "a replayed change failed");
                    }
                    changes.remove(&u.request.tid);
                }
            }
        }
        Ok(())
    }

    async fn active_addr(&self) -> Option<String> {
        match self.inner.client.mon_command(MonCommand::FsLs).await {
            Ok(Reply::FsMap(list)) => list
                .into_iter()
                .find(|f| f.name == self.inner.fs)
                .and_then(|f| f.active)
                .map(|a| a.addr),
            _ => None,
        }
    }
}

/// Keeps the session alive and learns the durable sequence.
async fn poll_forever(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let session = MdsSession { inner: strong };
        if session.resume_if_evicted().await.is_err() {
            drop(session);
            tokio::time::sleep(Duration::from_millis(u64::from(POLL_WAIT_MS))).await;
            continue;
        }
        let conn = session.connection().await;
        let (conn, number) = match conn {
            Ok(c) => c,
            Err(why) => {
                if let Some(why) = why {
                    session.note_evicted(&why);
                }
                drop(session);
                tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
                continue;
            }
        };
        let poll = MdsPoll {
            session: session.inner.session,
            durable_seq: session.inner.durable.load(Ordering::Relaxed),
            wait_ms: POLL_WAIT_MS,
            recalled: session.inner.recalled.load(Ordering::Relaxed),
        };
        let answer = conn
            .call::<MdsPoll, MdsPollReply>(&poll, Bytes::new())
            .await;
        match answer {
            Ok((
                MdsPollReply {
                    result: Ok(seq),
                    recalls,
                },
                _,
            )) => {
                session.saw_durable(seq);
                session.recall(recalls);
            }
            Ok((
                MdsPollReply {
                    result: Err(MdsError::Evicted(why)),
                    ..
                },
                _,
            )) => session.note_evicted(&why),
            Ok(_) | Err(_) => {
                session.drop_connection(number).await;
                drop(session);
                tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
            }
        }
    }
}

/// Sends the outbox to the MDS, one batch at a time: what is answered
/// here while a batch is on its way goes in the next.
async fn send_forever(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let session = MdsSession { inner: strong };
        if !session.send_batch().await {
            let wake = session.inner.outbox_wake.notified();
            drop(tokio::time::timeout(Duration::from_secs(1), wake).await);
        }
    }
}

/// How a request changes the names of a directory.
#[derive(Clone, Debug)]
enum NamesChange {
    None,
    Made {
        parent: u64,
        name: Vec<u8>,
    },
    Removed {
        parent: u64,
        name: Vec<u8>,
    },
    Moved {
        from: (u64, Vec<u8>),
        to: (u64, Vec<u8>),
    },
}

impl NamesChange {
    fn of(op: &MdsOp) -> NamesChange {
        match op {
            MdsOp::Create { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Link { parent, name, .. } => NamesChange::Made {
                parent: *parent,
                name: name.to_vec(),
            },
            MdsOp::Unlink { parent, name, .. } | MdsOp::Rmdir { parent, name } => {
                NamesChange::Removed {
                    parent: *parent,
                    name: name.to_vec(),
                }
            }
            MdsOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
            } if flags & cairn_proto::mds::RENAME_EXCHANGE == 0 => NamesChange::Moved {
                from: (*parent, name.to_vec()),
                to: (*new_parent, new_name.to_vec()),
            },
            _ => NamesChange::None,
        }
    }
}

/// Does recalls in the kernel: each batch at once and again a moment
/// later, for an answer that was on its way to the kernel when the recall
/// came (it was checked against the recall count just before).
fn run_invalidator(notifier: &fuser::Notifier, rx: &std::sync::mpsc::Receiver<Vec<Inval>>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut again: VecDeque<(Instant, Vec<Inval>)> = VecDeque::new();
    loop {
        let got = match again.front() {
            Some((at, _)) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(invals) => {
                invalidate(notifier, &invals);
                again.push_back((
                    Instant::now() + Duration::from_millis(REINVALIDATE_MS),
                    invals,
                ));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while let Some((at, _)) = again.front()
            && *at <= Instant::now()
        {
            if let Some((_, invals)) = again.pop_front() {
                invalidate(notifier, &invals);
            }
        }
    }
}

fn invalidate(notifier: &fuser::Notifier, invals: &[Inval]) {
    use std::os::unix::ffi::OsStrExt;
    for inval in invals {
        // The kernel not knowing the inode or entry is fine: nothing cached.
        let _ = match inval {
            Inval::Inode(ino) => notifier.inval_inode(fuser::INodeNo(*ino), 0, 0),
            Inval::Entry { parent, name } => {
                notifier.inval_entry(fuser::INodeNo(*parent), std::ffi::OsStr::from_bytes(name))
            }
            Inval::Flush(_) => Ok(()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64, size: u64) -> Attr {
        Attr {
            ino,
            size,
            ..Attr::default()
        }
    }

    fn set_attr(ino: u64) -> MdsOp {
        MdsOp::SetAttr {
            ino,
            set: cairn_proto::mds::SetAttr::default(),
        }
    }

    #[test]
    fn an_answer_older_than_a_change_is_not_kept() {
        let mut cache = AttrCache::default();
        // A getattr sent, then a change of the inode made and answered,
        // then the getattr's (older) answer arrives.
        let sent = cache.epoch;
        cache.begin_change(&set_attr(7));
        let change_sent = cache.epoch;
        cache.end_change(Some(&attr(7, 9)), false, change_sent);
        assert_eq!(cache.map.get(&7).map(|a| a.size), Some(9));
        cache.fill(&attr(7, 1), sent);
        assert_eq!(
            cache.map.get(&7).map(|a| a.size),
            Some(9),
            "older answer kept"
        );
        // Another inode's answer is kept.
        cache.fill(&attr(8, 3), sent);
        assert!(cache.map.contains_key(&8));
    }

    #[test]
    fn overlapping_changes_keep_neither_answer() {
        let mut cache = AttrCache::default();
        cache.begin_change(&set_attr(7));
        let first = cache.epoch;
        cache.begin_change(&set_attr(7));
        let second = cache.epoch;
        // The MDS may have applied them in either order.
        cache.end_change(Some(&attr(7, 2)), false, second);
        cache.end_change(Some(&attr(7, 1)), false, first);
        assert!(!cache.map.contains_key(&7));
        // Once none is in flight, a lone change's answer is kept again.
        cache.begin_change(&set_attr(7));
        let lone = cache.epoch;
        cache.end_change(Some(&attr(7, 5)), false, lone);
        assert_eq!(cache.map.get(&7).map(|a| a.size), Some(5));
    }

    #[test]
    fn a_new_inode_has_no_xattrs_until_changed_or_recalled() {
        let mut cache = AttrCache::default();
        let sent = cache.epoch;
        cache.fill_new(&attr(7, 0), sent);
        cache.fill(&attr(8, 0), sent);
        assert!(cache.bare.contains(&7) && !cache.bare.contains(&8));
        // A getattr answer keeps it; its own xattr change drops it.
        cache.fill(&attr(7, 3), sent);
        assert!(cache.bare.contains(&7));
        cache.begin_change(&MdsOp::SetXattr {
            ino: 7,
            name: ByteBuf::from(b"user.a".to_vec()),
            value: ByteBuf::from(b"1".to_vec()),
            flags: 0,
        });
        assert!(!cache.bare.contains(&7));
        cache.end_change(Some(&attr(7, 3)), false, cache.epoch);
        assert!(!cache.bare.contains(&7), "a change's answer is not new");
        // A recall drops it too.
        cache.fill_new(&attr(9, 0), cache.epoch);
        cache.invalidate(9);
        assert!(!cache.bare.contains(&9));
        // A create's answer, alone, is new.
        cache.begin_change(&set_attr(10));
        let epoch = cache.epoch;
        cache.end_change(Some(&attr(10, 0)), true, epoch);
        assert!(cache.bare.contains(&10));
    }

    #[test]
    fn an_unlink_forgets_every_inode() {
        let mut cache = AttrCache::default();
        let sent = cache.epoch;
        cache.fill(&attr(7, 1), sent);
        cache.begin_change(&MdsOp::Unlink {
            parent: 1,
            name: ByteBuf::from(b"f".to_vec()),
            time: None,
        });
        assert!(cache.map.is_empty());
        cache.end_change(None, false, cache.epoch);
        cache.fill(&attr(7, 1), sent);
        assert!(cache.map.is_empty(), "an answer from before the unlink");
    }

    #[test]
    fn delegated_numbers_are_handed_out_in_order_across_ranges() {
        let mut pool = InoPool::default();
        assert_eq!(pool.take(), None);
        pool.add(10, 12);
        pool.add(20, 21);
        assert_eq!(pool.left(), 3);
        assert_eq!(
            [pool.take(), pool.take(), pool.take(), pool.take()],
            [Some(10), Some(11), Some(20), None]
        );
        for i in 0..10 {
            pool.add(100 * i, 100 * i + 1);
        }
        assert_eq!(pool.granted.len(), cairn_proto::mds::INO_RANGES_KEPT);
    }
}

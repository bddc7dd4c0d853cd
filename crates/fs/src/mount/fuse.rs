//! The kernel's FUSE requests, answered from the MDS session and the data
//! path. Every request is handed to the tokio runtime at once, so the
//! FUSE threads never wait on the network.
//!
//! The mount uses `default_permissions`: the kernel checks permissions
//! (owner, group and supplementary groups, other, sticky directories,
//! root) from the attributes we return. The kernel caches attributes and
//! entries for as long as the MDS's lease on them lasts; another mount's
//! change recalls the lease first (see [`MdsSession`]), so it is seen at
//! once. File data goes through the page cache, dropped at each open
//! (close-to-open) and by a recall of the inode.

use crate::mount::data::{DataPath, Dirty, Readahead, ReadaheadBudget};
use crate::mount::limits::{
    DIRTY_BYTES_PER_FILE_MAX, KEEP_AFTER_CLOSE_MS, KEEP_LEASE_MARGIN_MS, KEPT_SENDS_IN_FLIGHT,
    READ_UNHELD_ATTEMPTS, READDIR_PAGE_ENTRIES, REPORTED_KEPT_MS, WRITE_BEHIND_BUFFERS,
};
use crate::mount::session::{Here, MdsSession};
use bytes::Bytes;
use cairn_proto::mds::{
    Attr, Caller, Errno, Layout, LockKind, MdsAnswer, MdsOp, SetAttr, SetTime, Time,
};
use fuser::{
    Errno as FuseErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use serde_bytes::ByteBuf;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_system(t: Time) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    let secs = Duration::from_secs(t.sec.unsigned_abs());
    let whole = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(secs)
    } else {
        UNIX_EPOCH.checked_sub(secs)
    };
    whole
        .and_then(|w| w.checked_add(nanos))
        .unwrap_or(UNIX_EPOCH)
}

fn from_system(t: SystemTime) -> Time {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Time {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            // Before 1970: whole seconds down, nanoseconds up from there.
            let d = e.duration();
            let mut sec = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let mut nsec = d.subsec_nanos();
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Time { sec, nsec }
        }
    }
}

fn now() -> Time {
    from_system(SystemTime::now())
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: to_system(a.atime),
        mtime: to_system(a.mtime),
        ctime: to_system(a.ctime),
        crtime: to_system(a.btime),
        kind: kind_of(a.mode),
        perm: u16::try_from(a.mode & 0o7777).unwrap_or(0),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.layout.stripe_unit.min(4 << 20),
        flags: 0,
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn name_buf(name: &OsStr) -> ByteBuf {
    ByteBuf::from(name.as_bytes().to_vec())
}

fn fe(e: Errno) -> FuseErrno {
    FuseErrno::from_i32(e)
}

/// The end and time of a file's writes the MDS has not heard of, and
/// when it heard of them (kept a moment after).
type Unreported = (u64, Time, Option<Instant>);

/// Where a file's data is, as this mount knows it.
#[derive(Clone, Debug)]
enum Home {
    /// In data objects of the data pool.
    Objects,
    /// Kept by the MDS (inline data): these bytes, as the MDS last said
    /// or as this mount last wrote them. Read from here while this mount
    /// leases the file's attributes (a change elsewhere recalls them).
    Inline(Bytes),
    /// Not known: the MDS is asked (`ReadInline`) before data is read or
    /// written.
    Ask,
}

impl Home {
    fn of(inline: Option<ByteBuf>) -> Home {
        inline.map_or(Home::Objects, |d| Home::Inline(Bytes::from(d.into_vec())))
    }
}

/// What this mount knows of one file it has open.
#[derive(Debug)]
struct FileState {
    layout: Layout,
    /// Where its data is.
    home: Home,
    /// The size as the MDS last said.
    mds_size: u64,
    /// The end of local writes not yet reported to the MDS.
    written_end: u64,
    /// When the unreported writes happened.
    written_mtime: Option<Time>,
    dirty: Dirty,
    readahead: Readahead,
    opens: u32,
    /// While the MDS lets this mount keep written data past `close`
    /// (the buffer lease of a file it made).
    buffered_until: Option<Instant>,
    /// Since when data kept past a close waits.
    kept_since: Option<Instant>,
    /// Releases held back until the kept data is sent.
    deferred_releases: u32,
    /// Full buffers being sent in the background while writes fill the
    /// next (write-behind), oldest first; settled before anything that
    /// reads, cuts or reports the file's data.
    sending: VecDeque<Sending>,
    /// Its bytes counted in [`Core::buffered`].
    counted: u64,
}

/// Dirty ranges on their way to the OSDs, and the size and time of the
/// writes they hold (reported once they are there).
#[derive(Debug)]
struct Sending {
    ranges: Vec<(u64, Bytes)>,
    bytes: u64,
    end: u64,
    mtime: Time,
    task: tokio::task::JoinHandle<Result<(), Errno>>,
}

impl FileState {
    /// Bytes of written data it holds: buffered and on their way.
    fn held(&self) -> u64 {
        self.dirty.bytes() + self.sending.iter().map(|p| p.bytes).sum::<u64>()
    }

    fn clean(&self) -> bool {
        self.dirty.is_empty() && self.written_mtime.is_none()
    }

    /// Whether what this file kept past close is to be sent now: kept
    /// longer than `KEEP_AFTER_CLOSE_MS` or near its lease's end (or
    /// `all`), and something is kept (data, a size, held-back closes).
    fn kept_due(&self, all: bool) -> bool {
        let old = Duration::from_millis(KEEP_AFTER_CLOSE_MS);
        let due = all
            || self.kept_since.is_some_and(|t| t.elapsed() >= old)
            || (self.buffered_until.is_some() && !self.may_keep());
        due && !(self.clean() && self.deferred_releases == 0)
    }

    /// Whether a close may keep this file's written data.
    fn may_keep(&self) -> bool {
        self.buffered_until
            .is_some_and(|u| u > Instant::now() + Duration::from_millis(KEEP_LEASE_MARGIN_MS))
    }
}

impl FileState {
    fn size(&self) -> u64 {
        self.mds_size.max(self.written_end)
    }

    /// Takes the written bytes to send them. The read-ahead window goes
    /// too: it showed them only laid over it, and a read fetching
    /// meanwhile sees its ticket change and reads again.
    fn take_dirty(&mut self) -> Vec<(u64, Bytes)> {
        self.readahead.clear();
        self.dirty.take()
    }
}

/// The bytes of a chunk read ahead, fetched by the first caller (the
/// others wait for it).
async fn fetch_chunk(
    data: &DataPath,
    ino: u64,
    layout: &Layout,
    chunk: &crate::mount::data::Chunk,
) -> Result<Bytes, Errno> {
    chunk
        .bytes
        .get_or_init(|| async { data.read(ino, layout, chunk.offset, chunk.length).await })
        .await
        .clone()
}

#[derive(Clone, Copy, Debug)]
struct Handle {
    ino: u64,
    /// `O_DIRECT` or `O_SYNC`: each write reaches the OSDs before it is
    /// answered.
    write_through: bool,
    sync: bool,
    /// Opened setgid without group execute: a write by a caller outside
    /// the file's group clears the bit, which the kernel leaves to us.
    sgid_watch: bool,
}

/// Setgid without group execute, the one case of a write clearing a
/// privilege bit that the kernel does not send us as a `chmod` (it clears
/// setuid, and setgid with group execute, itself).
fn sgid_only(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFREG && mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID
}

/// Whether process `pid` (primary group `primary`) is in group `gid`,
/// supplementary groups included. A process gone is taken as outside.
fn in_group(pid: u32, primary: u32, gid: u32) -> bool {
    if primary == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

#[derive(Debug)]
struct Core {
    session: MdsSession,
    data: DataPath,
    files: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<FileState>>>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// (inode, lock owner) pairs that may hold a lock at the MDS: a close
    /// by that owner releases them.
    lockers: Mutex<std::collections::HashSet<(u64, u64)>>,
    /// Per file: the end and time of writes the MDS has not heard of
    /// (or, with when, heard of just now).
    unreported: Mutex<HashMap<u64, Unreported>>,
    /// The last directories this mount removed, with no links: a process
    /// may still have one as its cwd, and Linux shows it so.
    removed_dirs: Mutex<std::collections::VecDeque<Attr>>,
    /// Written bytes held across files (buffered or on their way), and
    /// the most a writer may add to before it sends its own first.
    buffered: AtomicU64,
    buffer_cap: u64,
    /// Bytes read ahead across files.
    readahead: Arc<ReadaheadBudget>,
}

/// How many removed directories [`Core::removed_dirs`] remembers.
const REMOVED_DIRS_KEPT: usize = 64;

/// The FUSE file system of one mount.
#[derive(Debug)]
pub struct CairnFs {
    rt: tokio::runtime::Handle,
    core: Arc<Core>,
}

impl CairnFs {
    #[must_use]
    /// A file system over `session`, holding at most about `buffer_cap`
    /// bytes of written data across files.
    pub fn new(rt: tokio::runtime::Handle, session: MdsSession, buffer_cap: u64) -> CairnFs {
        let data = DataPath::new(session.client().clone(), session.data_pool());
        let fs = CairnFs {
            rt,
            core: Arc::new(Core {
                session,
                data,
                files: Mutex::new(HashMap::new()),
                handles: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                lockers: Mutex::new(std::collections::HashSet::new()),
                unreported: Mutex::new(HashMap::new()),
                removed_dirs: Mutex::new(std::collections::VecDeque::new()),
                buffered: AtomicU64::new(0),
                buffer_cap,
                readahead: ReadaheadBudget::new(crate::mount::limits::READAHEAD_BUDGET_BYTES),
            }),
        };
        let weak = Arc::downgrade(&fs.core);
        fs.core.session.on_inode_recall(Box::new(move |ino| {
            if let Some(core) = weak.upgrade() {
                core.forget_unreported(ino);
            }
        }));
        let core = Arc::clone(&fs.core);
        fs.rt.spawn(async move {
            loop {
                let wanted = core
                    .session
                    .flushes_wanted(Duration::from_millis(500))
                    .await;
                core.send_kept(&wanted, false).await;
            }
        });
        fs
    }

    fn spawn<F>(&self, f: impl FnOnce(Arc<Core>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(f(Arc::clone(&self.core)));
    }
}

impl Core {
    async fn call(&self, op: MdsOp, who: Caller) -> Result<MdsAnswer, Errno> {
        self.session.call(op, who).await
    }

    async fn attr(&self, op: MdsOp, who: Caller) -> Result<Attr, Errno> {
        self.leased_attr(op, who).await.map(|(a, _)| a)
    }

    /// The attributes `op` answers and how long the kernel may cache them.
    async fn leased_attr(&self, op: MdsOp, who: Caller) -> Result<(Attr, Duration), Errno> {
        match self.session.call_leased(op, who).await {
            (Ok(MdsAnswer::Attr(a) | MdsAnswer::Created { attr: a, .. }), ttl) => {
                Ok((self.merge(a), ttl))
            }
            (Ok(_), _) => Err(libc::EIO),
            (Err(e), _) => Err(e),
        }
    }

    /// The MDS's attributes with this mount's unreported writes.
    fn merge(&self, mut a: Attr) -> Attr {
        let unreported = {
            let mut map = lock(&self.unreported);
            match map.get(&a.ino).copied() {
                // Reported a while ago: the MDS's answer has it.
                Some((_, _, Some(at)))
                    if at.elapsed() > Duration::from_millis(REPORTED_KEPT_MS) =>
                {
                    map.remove(&a.ino);
                    None
                }
                other => other,
            }
        };
        if let Some((end, t, reported)) = unreported {
            a.size = a.size.max(end);
            if reported.is_none() && t > a.mtime {
                a.mtime = t;
                a.ctime = a.ctime.max(t);
            }
        }
        a
    }

    /// Mirrors a file's unreported writes where [`merge`](Self::merge)
    /// reads them without waiting for the file's lock (held across a
    /// flush, while other processes `stat` the file).
    ///
    /// A size just reported stays a moment: an answer to a request the
    /// MDS took before the report may still be on its way.
    fn note_unreported(&self, ino: u64, s: &FileState) {
        let mut map = lock(&self.unreported);
        match s.written_mtime {
            Some(t) => {
                map.insert(ino, (s.written_end, t, None));
            }
            None => {
                if let Some(entry) = map.get_mut(&ino) {
                    entry.0 = entry.0.min(s.size());
                    entry.2.get_or_insert_with(Instant::now);
                }
            }
        }
    }

    /// Forgets a size already reported for `ino` (not one still to be).
    fn forget_reported(&self, ino: u64) {
        let mut map = lock(&self.unreported);
        if map.get(&ino).is_some_and(|e| e.2.is_some()) {
            map.remove(&ino);
        }
    }

    /// Forgets what this mount wrote to `ino` once another mount changed
    /// it (a recall), or a report was refused.
    fn forget_unreported(&self, ino: u64) {
        lock(&self.unreported).remove(&ino);
    }

    /// Clears the setgid bit of a file without group execute before a
    /// write or truncate by `who` (process `pid`), not root, when it is
    /// outside the file's group (Linux's rule; the kernel already cleared
    /// setuid, and setgid with group execute).
    async fn drop_sgid(&self, ino: u64, who: Caller, pid: u32) -> Result<(), Errno> {
        let current = match self.call(MdsOp::GetAttr { ino }, who).await? {
            MdsAnswer::Attr(a) => a,
            _ => return Err(libc::EIO),
        };
        if !sgid_only(current.mode) || in_group(pid, who.gid, current.gid) {
            return Ok(());
        }
        let set = SetAttr {
            mode: Some(current.mode & 0o7777 & !libc::S_ISGID),
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
        };
        // The kernel allowed the write: the change is made as the file
        // system's own, not as the writer (who may not own the file).
        let root = Caller { uid: 0, gid: 0 };
        self.call(MdsOp::SetAttr { ino, set }, root).await.map(drop)
    }

    fn note_removed_dir(&self, gone: Attr) {
        let mut kept = lock(&self.removed_dirs);
        if kept.len() >= REMOVED_DIRS_KEPT {
            kept.pop_front();
        }
        kept.push_back(gone);
    }

    /// A directory this mount removed lately, as it was when removed.
    fn removed_dir(&self, ino: u64) -> Option<Attr> {
        lock(&self.removed_dirs)
            .iter()
            .rev()
            .find(|a| a.ino == ino)
            .cloned()
    }

    fn file(&self, ino: u64) -> Option<Arc<tokio::sync::Mutex<FileState>>> {
        lock(&self.files).get(&ino).cloned()
    }

    fn handle(&self, fh: u64) -> Option<Handle> {
        lock(&self.handles).get(&fh).copied()
    }

    /// Registers an open of `attr`'s file whose data is at `home`; returns
    /// its handle number.
    fn opened(&self, attr: &Attr, flags: i32, home: Home) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            ino: attr.ino,
            write_through: flags & (libc::O_DIRECT | libc::O_SYNC | libc::O_DSYNC) != 0,
            sync: flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
            sgid_watch: sgid_only(attr.mode),
        };
        lock(&self.handles).insert(fh, handle);
        let mut files = lock(&self.files);
        let state = files.entry(attr.ino).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(FileState {
                layout: attr.layout,
                home: home.clone(),
                mds_size: attr.size,
                written_end: 0,
                written_mtime: None,
                dirty: Dirty::default(),
                readahead: Readahead::default(),
                opens: 0,
                buffered_until: None,
                kept_since: None,
                deferred_releases: 0,
                sending: VecDeque::new(),
                counted: 0,
            }))
        });
        if let Ok(mut s) = state.try_lock() {
            s.opens += 1;
            s.mds_size = attr.size;
            s.layout = attr.layout;
            // Close-to-open: what another mount wrote is read afresh.
            s.readahead.clear();
            // Data once in objects never moves back (what this mount wrote
            // there may not be reported yet).
            if !matches!(s.home, Home::Objects) {
                s.home = home;
            }
        } else {
            let state = Arc::clone(state);
            drop(files);
            let attr = attr.clone();
            tokio::spawn(async move {
                let mut s = state.lock().await;
                s.opens += 1;
                s.mds_size = s.mds_size.max(attr.size);
                s.readahead.clear();
                // What the open said may be older than a write since.
                if !matches!(s.home, Home::Objects) {
                    s.home = Home::Ask;
                }
            });
        }
        fh
    }

    /// Sends the file's dirty bytes to the OSDs.
    /// Sends the file's dirty bytes to the OSDs. What could not be sent
    /// (a full cluster, say) stays dirty for the next flush.
    async fn flush_data(&self, ino: u64, s: &mut FileState) -> Result<(), Errno> {
        let sent = self.send_dirty(ino, s, false).await;
        self.recount(s);
        sent
    }

    /// As [`flush_data`](Self::flush_data), for data kept past its close:
    /// an inline file's under a buffer lease goes in the next batch
    /// (nobody waits for it; a refusal is logged).
    async fn flush_kept(&self, ino: u64, s: &mut FileState) -> Result<(), Errno> {
        let sent = self.send_dirty(ino, s, true).await;
        self.recount(s);
        sent
    }

    async fn send_dirty(&self, ino: u64, s: &mut FileState, later: bool) -> Result<(), Errno> {
        self.settle(s).await?;
        if s.dirty.is_empty() && s.written_mtime.is_none() {
            return Ok(());
        }
        if self.send_inline(ino, s, later).await? {
            return Ok(());
        }
        if s.dirty.is_empty() {
            return Ok(());
        }
        self.to_objects(ino, s).await?;
        let mut ranges = s.take_dirty().into_iter();
        while let Some((offset, bytes)) = ranges.next() {
            if let Err(e) = self.data.write(ino, &s.layout, offset, bytes.clone()).await {
                s.dirty.insert(offset, &bytes);
                for (o, b) in ranges {
                    s.dirty.insert(o, &b);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Learns where the file's data is, if not known.
    async fn find_home(&self, ino: u64, s: &mut FileState) -> Result<(), Errno> {
        if !matches!(s.home, Home::Ask) {
            return Ok(());
        }
        match self
            .call(MdsOp::ReadInline { ino }, Caller::default())
            .await?
        {
            MdsAnswer::Opened { attr, inline } => {
                s.mds_size = attr.size;
                s.home = Home::of(inline);
                Ok(())
            }
            _ => Err(libc::EIO),
        }
    }

    /// The data of an inline file as the MDS keeps it (asked again unless
    /// this mount leases the file's attributes); `None` for a file whose
    /// data is in objects.
    async fn inline_data(&self, ino: u64, s: &mut FileState) -> Result<Option<Bytes>, Errno> {
        if matches!(s.home, Home::Inline(_)) && self.session.attr_here(ino).is_none() {
            s.home = Home::Ask;
        }
        self.find_home(ino, s).await?;
        Ok(match &s.home {
            Home::Inline(data) => Some(data.clone()),
            _ => None,
        })
    }

    /// Sends what was written to a file the MDS keeps the data of, to the
    /// MDS: with `later`, in the next batch for a file this mount holds
    /// the buffer lease of; at once otherwise (so a full cluster's
    /// `ENOSPC` reaches the caller). `false`: the data goes to objects
    /// (the file is not inline, or would outgrow the limit).
    async fn send_inline(&self, ino: u64, s: &mut FileState, later: bool) -> Result<bool, Errno> {
        if matches!(s.home, Home::Objects) {
            return Ok(false);
        }
        self.find_home(ino, s).await?;
        let Home::Inline(current) = s.home.clone() else {
            return Ok(false);
        };
        let size = s.size().max(s.dirty.end());
        // Past the limit; or an OSD just refused data for a full cluster,
        // and a caller waits: its bytes go where the OSDs refuse them too
        // (the journal passes the full ratio).
        if size > self.session.inline_max() || (!later && self.data.recently_full()) {
            return Ok(false);
        }
        let mtime = s.written_mtime.unwrap_or_else(now);
        let taken = s.take_dirty();
        let ranges: Vec<(u64, ByteBuf)> = taken
            .iter()
            .map(|(offset, bytes)| (*offset, ByteBuf::from(bytes.to_vec())))
            .collect();
        let op = MdsOp::WriteInline {
            ino,
            ranges,
            size,
            mtime,
        };
        if later && s.may_keep() {
            // Nobody else may see the file before the MDS has the batch.
            self.session.send_later(op, Caller::default());
            let mut data = current.to_vec();
            data.resize(usize::try_from(size).map_err(|_| libc::EFBIG)?, 0);
            for (offset, bytes) in &taken {
                let at = usize::try_from(*offset).map_err(|_| libc::EFBIG)?;
                data[at..at + bytes.len()].copy_from_slice(bytes);
            }
            s.home = Home::Inline(Bytes::from(data));
            s.mds_size = size;
            self.session.written_here(ino, size, mtime);
        } else {
            match self.call(op, Caller::default()).await {
                Ok(MdsAnswer::Attr(a)) => s.mds_size = a.size,
                Ok(_) => s.mds_size = s.mds_size.max(size),
                Err(e) => {
                    for (offset, bytes) in &taken {
                        s.dirty.insert(*offset, bytes);
                    }
                    if e == libc::EDQUOT {
                        return self.refused_past_quota(ino, s, size).await.map(|()| true);
                    }
                    return Err(e);
                }
            }
            // Others may write it too: read back from the MDS.
            s.home = Home::Ask;
        }
        s.written_end = 0;
        s.written_mtime = None;
        self.note_unreported(ino, s);
        Ok(true)
    }

    /// Makes sure the file's data is in objects before this mount writes
    /// there: the MDS moves an inline file's data first. A file this mount
    /// made and holds the buffer lease of, with nothing written yet, needs
    /// no move (its size report says the data is in objects).
    async fn to_objects(&self, ino: u64, s: &mut FileState) -> Result<(), Errno> {
        match &s.home {
            Home::Objects => return Ok(()),
            Home::Inline(data) if data.is_empty() && s.may_keep() => {}
            Home::Inline(_) | Home::Ask => {
                match self
                    .call(MdsOp::Uninline { ino }, Caller::default())
                    .await?
                {
                    MdsAnswer::Attr(a) => s.mds_size = s.mds_size.max(a.size),
                    _ => return Err(libc::EIO),
                }
            }
        }
        s.home = Home::Objects;
        Ok(())
    }

    /// Brings [`Core::buffered`] up to date with what `s` holds now.
    fn recount(&self, s: &mut FileState) {
        let held = s.held();
        if held >= s.counted {
            self.buffered.fetch_add(held - s.counted, Ordering::Relaxed);
        } else {
            self.buffered.fetch_sub(s.counted - held, Ordering::Relaxed);
        }
        s.counted = held;
    }

    /// Whether the mount holds more written data than it may.
    fn over_buffer_cap(&self) -> bool {
        self.buffered.load(Ordering::Relaxed) > self.buffer_cap
    }

    /// Waits for every buffer sent in the background. A failed send puts
    /// the bytes of every buffer back, oldest first and the newer dirty
    /// ones on top (a later buffer that went out is not undone by an
    /// earlier one sent again), and returns the error.
    async fn settle(&self, s: &mut FileState) -> Result<(), Errno> {
        while !s.sending.is_empty() {
            let settled = self.settle_oldest(s).await;
            self.recount(s);
            settled?;
        }
        Ok(())
    }

    /// As [`settle`](Self::settle) for a read or a truncate, which a failed
    /// background send does not fail: its bytes are back in the buffer
    /// (read from there, cut with it), and the next flush sends them again
    /// and reports its error.
    async fn settle_keeping(&self, ino: u64, s: &mut FileState) {
        if let Err(errno) = self.settle(s).await {
            tracing::debug!(
                ino,
                errno,
                "a buffer sent behind failed; kept for the next flush"
            );
        }
    }

    /// Waits for the oldest buffer sent in the background (see
    /// [`settle`](Self::settle) for a failure).
    async fn settle_oldest(&self, s: &mut FileState) -> Result<(), Errno> {
        let Some(oldest) = s.sending.pop_front() else {
            return Ok(());
        };
        let Err(error) = oldest.task.await.unwrap_or(Err(libc::EIO)) else {
            return Ok(());
        };
        let mut batches = vec![oldest.ranges];
        while let Some(rest) = s.sending.pop_front() {
            drop(rest.task.await);
            batches.push(rest.ranges);
        }
        let newer = s.take_dirty();
        for (offset, bytes) in batches.iter().flatten().chain(newer.iter()) {
            s.dirty.insert(*offset, bytes);
        }
        Err(error)
    }

    /// A full buffer goes out in the background while writes go on into
    /// an empty one. With [`WRITE_BEHIND_BUFFERS`] already on their way,
    /// the oldest is settled first and its size reported (so a quota stops
    /// a growing file within that many buffers and the one filling).
    async fn send_behind(&self, ino: u64, s: &mut FileState) -> Result<(), Errno> {
        self.to_objects(ino, s).await?;
        while s.sending.len() >= WRITE_BEHIND_BUFFERS {
            let Some((end, mtime)) = s.sending.front().map(|p| (p.end, p.mtime)) else {
                break;
            };
            self.settle_oldest(s).await?;
            let report = MdsOp::Written {
                ino,
                size: end,
                mtime,
            };
            match self.call(report, Caller::default()).await {
                Ok(MdsAnswer::Attr(a)) => s.mds_size = a.size,
                Ok(_) => s.mds_size = s.mds_size.max(end),
                Err(libc::EDQUOT) => {
                    // Nothing may land past the cut made below (a failed
                    // send's bytes come back to the buffer, cut too).
                    self.settle_keeping(ino, s).await;
                    let size = s.size().max(s.dirty.end());
                    return self.refused_past_quota(ino, s, size).await;
                }
                Err(e) => return Err(e),
            }
        }
        let ranges = s.take_dirty();
        let data = self.data.clone();
        let layout = s.layout;
        let sent = ranges.clone();
        let task = tokio::spawn(async move {
            for (offset, bytes) in sent {
                data.write(ino, &layout, offset, bytes).await?;
            }
            Ok(())
        });
        s.sending.push_back(Sending {
            bytes: ranges.iter().map(|(_, b)| b.len() as u64).sum(),
            ranges,
            end: s.written_end,
            mtime: s.written_mtime.unwrap_or_else(now),
            task,
        });
        Ok(())
    }

    /// Sends dirty bytes, then tells the MDS the new size and time.
    async fn flush(&self, ino: u64, who: Caller) -> Result<(), Errno> {
        self.flush_or_keep(ino, who, false).await
    }

    /// As [`flush`](Self::flush), but at a close (`keep`) a file under a
    /// buffer lease keeps its data here until the flusher or a recall.
    async fn flush_or_keep(&self, ino: u64, who: Caller, keep: bool) -> Result<(), Errno> {
        let Some(state) = self.file(ino) else {
            return Ok(());
        };
        let mut s = state.lock().await;
        if keep && s.may_keep() {
            if !s.clean() {
                s.kept_since.get_or_insert_with(Instant::now);
            }
            return Ok(());
        }
        self.flush_data(ino, &mut s).await?;
        self.report_size(ino, &mut s, who).await
    }

    /// After a size report refused with `EDQUOT`: the bytes past the size
    /// the MDS keeps (up to `size`) are cut from the buffer and the data
    /// objects and forgotten; returns the `EDQUOT`.
    async fn refused_past_quota(
        &self,
        ino: u64,
        s: &mut FileState,
        size: u64,
    ) -> Result<(), Errno> {
        let keep = s.mds_size;
        s.dirty.cut(keep);
        self.recount(s);
        s.written_end = 0;
        s.written_mtime = None;
        self.forget_unreported(ino);
        s.readahead.clear();
        if size > keep {
            self.data.truncate(ino, &s.layout, size, keep).await?;
        }
        Err(libc::EDQUOT)
    }

    /// Tells the MDS the size and time of the writes sent to the OSDs. A
    /// size past a quota is refused (`EDQUOT`): the bytes beyond the size
    /// the MDS keeps are cut from the data objects and forgotten.
    async fn report_size(&self, ino: u64, s: &mut FileState, who: Caller) -> Result<(), Errno> {
        let Some(mtime) = s.written_mtime else {
            return Ok(());
        };
        let size = s.written_end;
        // A size report says the data is in objects (an inline file's is
        // moved there first).
        self.to_objects(ino, s).await?;
        match self.call(MdsOp::Written { ino, size, mtime }, who).await {
            Ok(MdsAnswer::Attr(a)) => s.mds_size = a.size,
            Ok(_) => s.mds_size = s.mds_size.max(size),
            Err(libc::EDQUOT) => return self.refused_past_quota(ino, s, size).await,
            Err(e) => return Err(e),
        }
        s.written_end = 0;
        s.written_mtime = None;
        self.note_unreported(ino, s);
        Ok(())
    }

    async fn write(&self, h: Handle, offset: u64, data: Vec<u8>) -> Result<u32, Errno> {
        let state = self.file(h.ino).ok_or(libc::EBADF)?;
        let mut s = state.lock().await;
        // The kernel gives the offset, `O_APPEND` (as set now, after any
        // `F_SETFL`) included.
        let length = data.len() as u64;
        let end = offset.checked_add(length).ok_or(libc::EFBIG)?;
        s.readahead.clear();
        if h.write_through {
            self.flush_data(h.ino, &mut s).await?;
            self.to_objects(h.ino, &mut s).await?;
            // Straight to the OSDs without holding the file: direct writes
            // of one file (an `io_submit` of many) go at once, as on a
            // disk, where concurrent overlapping writes land in any order.
            let layout = s.layout;
            drop(s);
            self.data
                .write(h.ino, &layout, offset, Bytes::from(data))
                .await?;
            s = state.lock().await;
            s.readahead.clear();
            self.note_written(h.ino, &mut s, end);
        } else {
            self.buffer(h.ino, &mut s, offset, &data);
        }
        if s.dirty.bytes() > DIRTY_BYTES_PER_FILE_MAX {
            self.send_behind(h.ino, &mut s).await?;
        }
        if self.over_buffer_cap() && s.held() > 0 {
            // The mount holds all the written data it may: this writer
            // sends its own and waits for it (so memory stays near the
            // cap whatever the number of files written at once).
            if !s.dirty.is_empty() {
                self.send_behind(h.ino, &mut s).await?;
            }
            self.settle(&mut s).await?;
        }
        self.recount(&mut s);
        drop(s);
        if h.sync {
            self.flush(h.ino, Caller::default()).await?;
            self.call(MdsOp::Sync, Caller::default()).await?;
        }
        u32::try_from(length).map_err(|_| libc::EINVAL)
    }

    /// Notes a write that ends at `end`.
    fn note_written(&self, ino: u64, s: &mut FileState, end: u64) {
        s.written_end = s.written_end.max(end).max(s.mds_size);
        s.written_mtime = Some(now());
        self.note_unreported(ino, s);
    }

    /// Puts a write in the file's buffer.
    fn buffer(&self, ino: u64, s: &mut FileState, offset: u64, data: &[u8]) {
        s.readahead.clear();
        s.dirty.insert(offset, data);
        self.note_written(ino, s, offset + data.len() as u64);
    }

    /// A buffered write done at once, on the kernel's thread, when it
    /// needs no wait (the file is free and its buffer has room); `None`
    /// leaves it to [`write`](Self::write).
    fn write_now(&self, h: Handle, offset: u64, data: &[u8]) -> Option<Result<u32, Errno>> {
        if h.write_through || h.sync || h.sgid_watch || self.over_buffer_cap() {
            return None;
        }
        let length = u32::try_from(data.len()).ok()?;
        let Some(end) = offset.checked_add(u64::from(length)) else {
            return Some(Err(libc::EFBIG));
        };
        let state = self.file(h.ino)?;
        let mut s = state.try_lock().ok()?;
        if s.dirty.bytes() + u64::from(length) > DIRTY_BYTES_PER_FILE_MAX {
            return None;
        }
        self.buffer(h.ino, &mut s, offset, data);
        self.recount(&mut s);
        debug_assert!(s.written_end >= end);
        Some(Ok(length))
    }

    async fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Bytes, Errno> {
        self.read_attempt(ino, offset, size, 0).await
    }

    async fn read_attempt(
        &self,
        ino: u64,
        offset: u64,
        size: u32,
        attempt: u32,
    ) -> Result<Bytes, Errno> {
        let state = self.file(ino).ok_or(libc::EBADF)?;
        let mut s = state.lock().await;
        // What is on its way to the OSDs is read from there once it is.
        self.settle_keeping(ino, &mut s).await;
        let inline = self.inline_data(ino, &mut s).await?;
        let file_size = s.size();
        if offset >= file_size {
            return Ok(Bytes::new());
        }
        let length = u64::from(size).min(file_size - offset);
        if let Some(data) = inline {
            // Past the kept bytes, up to the size, is written data or a
            // hole.
            let mut buf = vec![0u8; usize::try_from(length).unwrap_or(0)];
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let end = start.saturating_add(buf.len()).min(data.len());
            buf[..end - start].copy_from_slice(&data[start..end]);
            s.dirty.overlay(offset, &mut buf);
            return Ok(Bytes::from(buf));
        }
        let layout = s.layout;
        let fetched = if attempt >= READ_UNHELD_ATTEMPTS {
            // Written to all the while: fetched holding the file.
            self.data.read(ino, &layout, offset, length).await?
        } else {
            // Fetched without holding the file, so reads of one file (an
            // `io_submit` of many, the kernel's read-ahead, several
            // readers) go at once. What was written meanwhile is laid
            // over below; if written bytes were sent to the OSDs meanwhile
            // (they are no longer there to lay over, and the fetch may
            // predate them), the read starts again.
            let ticket = s.readahead.ticket();
            let plan = s.readahead.plan(offset, length, file_size, &self.readahead);
            for chunk in plan.start {
                let data = self.data.clone();
                // A failure is met by the read that needs the chunk.
                tokio::spawn(async move {
                    let _ = fetch_chunk(&data, ino, &layout, &chunk).await;
                });
            }
            drop(s);
            let mut got = None;
            let ahead = !plan.covering.is_empty();
            if ahead {
                let mut chunks = Vec::with_capacity(plan.covering.len());
                for chunk in plan.covering {
                    match fetch_chunk(&self.data, ino, &layout, &chunk).await {
                        Ok(bytes) => chunks.push((chunk, bytes)),
                        Err(_) => {
                            state.lock().await.readahead.forget(&chunk);
                            break;
                        }
                    }
                }
                got = crate::mount::data::assemble(&chunks, offset, length);
            }
            let got_ahead = got.is_some();
            let fetched = match got {
                Some(bytes) => bytes,
                None => {
                    tracing::debug!(ino, offset, length, "read not from read-ahead");
                    self.data.read(ino, &layout, offset, length).await?
                }
            };
            s = state.lock().await;
            if s.readahead.ticket() != ticket {
                drop(s);
                return Box::pin(self.read_attempt(ino, offset, size, attempt + 1)).await;
            }
            if got_ahead {
                s.readahead.served(offset, length);
            }
            fetched
        };
        if s.dirty.is_empty() {
            return Ok(fetched);
        }
        let mut buf = fetched.to_vec();
        s.dirty.overlay(offset, &mut buf);
        Ok(Bytes::from(buf))
    }

    async fn set_attr(
        &self,
        ino: u64,
        mut set: SetAttr,
        (who, pid): (Caller, u32),
    ) -> Result<(Attr, Duration), Errno> {
        if set.size.is_none() {
            // Writes come before the change in time: their size and time
            // reach the MDS first (a later report would undo a utime).
            self.flush(ino, who).await?;
        }
        // What this mount reported before is no longer the last word.
        self.forget_reported(ino);
        if let Some(size) = set.size {
            let state = self.file(ino);
            let guard = match &state {
                Some(st) => Some(st.lock().await),
                None => None,
            };
            let current = match self.call(MdsOp::GetAttr { ino }, who).await? {
                MdsAnswer::Attr(a) => a,
                _ => return Err(libc::EIO),
            };
            // A truncate clears what a write would (see `drop_sgid`).
            if set.mode.is_none()
                && who.uid != 0
                && sgid_only(current.mode)
                && !in_group(pid, who.gid, current.gid)
            {
                set.mode = Some(current.mode & 0o7777 & !libc::S_ISGID);
            }
            let mut old = current.size;
            if let Some(s) = &guard {
                old = old.max(s.size()).max(s.dirty.end());
            }
            if let Some(mut s) = guard {
                self.settle_keeping(ino, &mut s).await;
                s.dirty.cut(size);
                self.recount(&mut s);
                s.written_end = s.written_end.min(size);
                self.note_unreported(ino, &s);
                s.readahead.clear();
                if matches!(s.home, Home::Objects) {
                    self.data.truncate(ino, &current.layout, old, size).await?;
                } else {
                    // The MDS cuts or moves inline data with the size.
                    s.home = Home::Ask;
                }
                let (attr, ttl) = self
                    .leased_attr(
                        MdsOp::SetAttr {
                            ino,
                            set: set.clone(),
                        },
                        who,
                    )
                    .await?;
                s.mds_size = attr.size;
                s.written_end = 0;
                s.written_mtime = None;
                self.note_unreported(ino, &s);
                return Ok((attr, ttl));
            }
            self.data.truncate(ino, &current.layout, old, size).await?;
        }
        if set.mtime.is_none() && set.size.is_some() {
            set.mtime = Some(SetTime::Now);
        }
        self.leased_attr(MdsOp::SetAttr { ino, set }, who).await
    }

    /// Answers a create made here (under a directory delegation).
    fn created_here(&self, (a, ttl): (Attr, Duration), flags: i32, reply: ReplyCreate) {
        let fh = self.opened(&a, flags, self.new_home());
        if let Some(state) = self.file(a.ino)
            && let Ok(mut s) = state.try_lock()
        {
            // Its maker may keep written data past close, as with a
            // buffer lease from the MDS.
            s.buffered_until = Some(Instant::now() + ttl);
        }
        reply.created(
            &ttl,
            &file_attr(&a),
            Generation(0),
            FileHandle(fh),
            fopen_flags(flags),
        );
    }

    /// Where a new regular file's data is: kept by the MDS when it keeps
    /// small files.
    fn new_home(&self) -> Home {
        if self.session.inline_max() > 0 {
            Home::Inline(Bytes::new())
        } else {
            Home::Objects
        }
    }

    /// Whether `ino` has nothing to flush (checked without waiting).
    fn clean(&self, ino: u64) -> bool {
        let Some(state) = self.file(ino) else {
            return true;
        };
        state
            .try_lock()
            .is_ok_and(|s| s.dirty.is_empty() && s.written_mtime.is_none())
    }

    /// Forgets handle `fh` at once if its file has nothing to flush;
    /// `false` leaves it for [`release`](Self::release).
    fn release_clean(&self, fh: u64) -> bool {
        let Some(h) = self.handle(fh) else {
            return false;
        };
        let mut files = lock(&self.files);
        let Some(state) = files.get(&h.ino).cloned() else {
            drop(files);
            lock(&self.handles).remove(&fh);
            return true;
        };
        let Ok(mut s) = state.try_lock() else {
            return false;
        };
        if !s.dirty.is_empty() || s.written_mtime.is_some() {
            return false;
        }
        s.opens = s.opens.saturating_sub(1);
        let last = s.opens == 0;
        let mut deferred = 0;
        if last {
            self.recount(&mut s);
            // Closes held back while data was kept (sent since, by a
            // flush of another handle): the MDS hears of them now, or it
            // keeps the file open, and a removed one's data, for ever.
            deferred = std::mem::take(&mut s.deferred_releases);
            forget_state(&mut files, h.ino, &state);
        }
        drop(s);
        drop(files);
        lock(&self.handles).remove(&fh);
        if last {
            // Its last close here ends the buffer lease at the MDS.
            self.session.unbuffered(h.ino);
        }
        for _ in 0..deferred {
            self.session.release_later(h.ino);
        }
        true
    }

    async fn release(&self, fh: u64) -> Result<(), Errno> {
        let Some(h) = lock(&self.handles).remove(&fh) else {
            return Ok(());
        };
        let flushed = self.flush_or_keep(h.ino, Caller::default(), true).await;
        if let Some(state) = self.file(h.ino) {
            let mut s = state.lock().await;
            s.opens = s.opens.saturating_sub(1);
            if s.opens == 0 && !s.clean() {
                // Kept data: the MDS hears of this close once it is sent
                // (its buffer lease ends with the last release).
                s.deferred_releases += 1;
                return flushed;
            }
            if s.opens == 0 {
                self.recount(&mut s);
                // As in `release_clean`: closes held back go now too.
                for _ in 0..std::mem::take(&mut s.deferred_releases) {
                    self.session.release_later(h.ino);
                }
                forget_state(&mut lock(&self.files), h.ino, &state);
                self.session.unbuffered(h.ino);
            }
        }
        self.call(MdsOp::Release { ino: h.ino }, Caller::default())
            .await?;
        flushed
    }

    /// Sends what closed files kept: those kept longer than
    /// `KEEP_AFTER_CLOSE_MS`, near the end of their lease, or recalled
    /// (`wanted`), or all of them (`all`), up to `KEPT_SENDS_IN_FLIGHT`
    /// files at once.
    ///
    /// What the MDS waits for never waits behind the rest (thousands of
    /// small files may be due at once, and a recall must be answered
    /// within its timeout, or the MDS evicts this mount): the files
    /// recalled go first, and a recall arriving while the others are
    /// being sent is taken up at once.
    async fn send_kept(self: &Arc<Self>, wanted: &[u64], all: bool) {
        let mut sends = tokio::task::JoinSet::new();
        self.send_recalled(wanted, &mut sends).await;
        let mut states: Vec<(u64, Arc<tokio::sync::Mutex<FileState>>)> = lock(&self.files)
            .iter()
            .filter(|(ino, _)| !wanted.contains(ino))
            .map(|(ino, s)| (*ino, Arc::clone(s)))
            .collect();
        // Oldest first.
        states.sort_by_key(|(ino, _)| *ino);
        let mut states = states.into_iter();
        loop {
            let fresh = self.session.take_flushes();
            if !fresh.is_empty() {
                self.send_recalled(&fresh, &mut sends).await;
                continue;
            }
            if sends.len() < KEPT_SENDS_IN_FLIGHT
                && let Some((ino, state)) = states.next()
            {
                // Most files are not due: looked at here, without a task
                // (one busy with a write is looked at next round; at
                // unmount every one is waited for). One closed with
                // nothing left, whose state another send held when it was
                // done with it, is forgotten now.
                if !all {
                    match state.try_lock() {
                        Ok(s) if s.kept_due(false) => {}
                        Ok(mut s) => {
                            if s.opens == 0
                                && s.clean()
                                && s.deferred_releases == 0
                                && s.sending.is_empty()
                            {
                                self.recount(&mut s);
                                forget_state(&mut lock(&self.files), ino, &state);
                            }
                            continue;
                        }
                        Err(_) => continue,
                    }
                }
                let core = Arc::clone(self);
                sends.spawn(async move { core.send_one_kept(ino, state, false, all).await });
                continue;
            }
            if sends.is_empty() {
                return;
            }
            tokio::select! {
                done = sends.join_next() => {
                    if let Some(Err(e)) = done {
                        tracing::error!(error = %e, "sending a kept file failed");
                    }
                }
                () = self.session.flush_asked() => {}
            }
        }
    }

    /// Starts the sends of recalled files; a recall of a file this mount
    /// no longer knows (nothing is kept) or of a directory's delegation
    /// (the outbox is sent first) is answered at once.
    async fn send_recalled(self: &Arc<Self>, wanted: &[u64], sends: &mut tokio::task::JoinSet<()>) {
        for ino in wanted {
            match self.file(*ino) {
                None => {
                    self.session.unbuffered(*ino);
                    drop(
                        self.call(MdsOp::Returned { ino: *ino }, Caller::default())
                            .await,
                    );
                }
                Some(state) => {
                    let core = Arc::clone(self);
                    let ino = *ino;
                    sends.spawn(async move { core.send_one_kept(ino, state, true, false).await });
                }
            }
        }
    }

    /// Sends what file `ino` kept, if due (always when `recalled` or
    /// `all`); a recall ends with `Returned`.
    async fn send_one_kept(
        &self,
        ino: u64,
        state: Arc<tokio::sync::Mutex<FileState>>,
        recalled: bool,
        all: bool,
    ) {
        // A file busy with a write is looked at next round, unless the
        // MDS waits for it.
        let mut s = match state.try_lock() {
            Ok(s) => s,
            Err(_) if recalled || all => state.lock().await,
            Err(_) => return,
        };
        if !recalled && !s.kept_due(all) {
            return;
        }
        if let Err(errno) = self.flush_kept(ino, &mut s).await {
            tracing::warn!(ino, errno, "data kept past close not sent yet");
            return;
        }
        let written_end = s.size();
        match self.report_size(ino, &mut s, Caller::default()).await {
            Ok(()) => {}
            Err(libc::ENOENT) => {
                // Its last link was removed meanwhile (its objects may be
                // purged already): what was just written would be left
                // behind for good. Numbers are never used again.
                if let Err(errno) = self.data.truncate(ino, &s.layout, written_end, 0).await {
                    tracing::warn!(ino, errno, "data of a removed file left in objects");
                }
                s.written_end = 0;
                s.written_mtime = None;
                self.note_unreported(ino, &s);
            }
            Err(errno) => {
                // Sent to the OSDs but not visible yet: kept, and tried
                // again next round (after an eviction, once the session
                // is open again).
                tracing::warn!(ino, errno, "size of data kept past close not reported yet");
                return;
            }
        }
        s.kept_since = None;
        s.buffered_until = None;
        let releases = std::mem::take(&mut s.deferred_releases);
        if s.opens == 0 {
            self.recount(&mut s);
            forget_state(&mut lock(&self.files), ino, &state);
        }
        drop(s);
        self.session.unbuffered(ino);
        // In order with what was just sent in the next batch (an inline
        // file's data); their answers change nothing.
        for _ in 0..releases {
            self.session.release_later(ino);
        }
        // Recalled: the lease ends now, even while the file stays open
        // here (the releases above end it only with the last open).
        if recalled {
            drop(self.call(MdsOp::Returned { ino }, Caller::default()).await);
        }
    }

    /// Releases every lock `owner` holds on `ino`, if it may hold any (a
    /// close drops a process's `fcntl` locks; the last close of an open
    /// file its `flock`).
    async fn unlock_owner(&self, ino: u64, owner: u64) -> Result<(), Errno> {
        if !lock(&self.lockers).remove(&(ino, owner)) {
            return Ok(());
        }
        let op = MdsOp::SetLock {
            ino,
            owner,
            start: 0,
            end: u64::MAX,
            kind: LockKind::Unlock,
            pid: 0,
            wait: false,
        };
        self.call(op, Caller::default()).await.map(drop)
    }

    async fn fallocate(
        &self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
        who: Caller,
    ) -> Result<(), Errno> {
        let end = offset.checked_add(length).ok_or(libc::EFBIG)?;
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                return Err(libc::EOPNOTSUPP);
            }
            self.flush(ino, who).await?;
            if let Some(state) = self.file(ino) {
                self.to_objects(ino, &mut *state.lock().await).await?;
            }
            let layout = match self.call(MdsOp::GetAttr { ino }, who).await? {
                MdsAnswer::Attr(a) => a.layout,
                _ => return Err(libc::EIO),
            };
            return self.data.zero(ino, &layout, offset, length).await;
        }
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Ok(());
        }
        // Space is not reserved ahead (objects are sparse); the size grows.
        if let Some(state) = self.file(ino) {
            let mut s = state.lock().await;
            if end > s.size() {
                s.written_end = end;
                s.written_mtime = Some(now());
                self.note_unreported(ino, &s);
            }
            return Ok(());
        }
        let attr = self.attr(MdsOp::GetAttr { ino }, who).await?;
        if end > attr.size {
            self.call(
                MdsOp::Written {
                    ino,
                    size: end,
                    mtime: now(),
                },
                who,
            )
            .await?;
        }
        Ok(())
    }
}

/// Forgets `ino`'s state once its last handle closed, unless someone else
/// still holds it: an open of it on its way (`opened` hands a busy state
/// a task that counts the open when the lock frees), or a request in
/// flight. The map and the caller hold one reference each.
fn forget_state(
    files: &mut HashMap<u64, Arc<tokio::sync::Mutex<FileState>>>,
    ino: u64,
    state: &Arc<tokio::sync::Mutex<FileState>>,
) {
    if files.get(&ino).is_some_and(|cur| Arc::ptr_eq(cur, state)) && Arc::strong_count(state) <= 2 {
        files.remove(&ino);
    }
}

/// How the kernel treats an open file: `O_DIRECT` bypasses its page cache.
fn fopen_flags(flags: i32) -> FopenFlags {
    if flags & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::empty()
    }
}

fn reply_entry(reply: ReplyEntry, result: Result<(Attr, Duration), Errno>) {
    match result {
        Ok((a, ttl)) => reply.entry(&ttl, &file_attr(&a), Generation(0)),
        Err(e) => reply.error(fe(e)),
    }
}

/// A name missing, which the kernel may cache as missing for `ttl` (an
/// entry with inode 0).
fn reply_missing(reply: ReplyEntry, ttl: Duration) {
    let mut none = file_attr(&Attr::default());
    none.ino = INodeNo(0);
    reply.entry(&ttl, &none, Generation(0));
}

fn reply_empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fe(e)),
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(from_kernel_time(t)),
    }
}

/// A time the kernel sent, as fuser decoded it. fuser 0.18 turns the
/// kernel's (seconds, nanoseconds) with negative seconds into the epoch
/// minus (|seconds| + nanoseconds), where the time is the epoch minus
/// |seconds| plus nanoseconds; this undoes that, so times before 1970
/// are kept exactly.
fn from_kernel_time(t: SystemTime) -> Time {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => from_system(t),
        Err(e) => {
            let d = e.duration();
            Time {
                sec: -i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nsec: d.subsec_nanos(),
            }
        }
    }
}

impl Filesystem for CairnFs {
    /// At unmount: what closed files kept goes to the OSDs first, for at
    /// most [`UNMOUNT_SEND_DEADLINE_MS`](crate::mount::limits::UNMOUNT_SEND_DEADLINE_MS)
    /// (a cluster that does not answer does not hold the unmount for
    /// ever; what could not be sent is logged).
    fn destroy(&mut self) {
        let core = Arc::clone(&self.core);
        let deadline = Duration::from_millis(crate::mount::limits::UNMOUNT_SEND_DEADLINE_MS);
        let sent = self.rt.block_on(async move {
            tokio::time::timeout(deadline, core.send_kept(&[], true)).await
        });
        if sent.is_err() {
            let left = lock(&self.core.files).len();
            tracing::error!(
                files = left,
                seconds = deadline.as_secs(),
                "unmounted before what closed files kept reached the cluster: it did not answer"
            );
        }
    }

    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // Large writes in few requests; a bigger kernel readahead.
        // A kernel that allows less keeps its own maximum.
        let _ = config.set_max_write(crate::mount::limits::MAX_WRITE_BYTES);
        let _ = config.set_max_readahead(1 << 20);
        // fcntl and flock locks come to us, so they hold across mounts.
        let _ = config.add_capabilities(
            fuser::InitFlags::FUSE_POSIX_LOCKS | fuser::InitFlags::FUSE_FLOCK_LOCKS,
        );
        // An asynchronous O_DIRECT request (libaio, io_uring) reaches us as
        // its pieces at once, not one after another; lookups and readdirs
        // of one directory run in parallel.
        let _ = config.add_capabilities(
            fuser::InitFlags::FUSE_ASYNC_DIO | fuser::InitFlags::FUSE_PARALLEL_DIROPS,
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(ttl) = self.core.session.known_missing(parent.0, name.as_bytes()) {
            reply_missing(reply, ttl);
            return;
        }
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            let op = MdsOp::Lookup {
                parent: parent.0,
                name,
            };
            match core.session.call_leased(op, who).await {
                (Ok(MdsAnswer::Attr(a)), ttl) => {
                    reply.entry(&ttl, &file_attr(&core.merge(a)), Generation(0));
                }
                // A name found missing: the kernel may cache its absence
                // (an entry with inode 0) while the lease lasts.
                (Err(libc::ENOENT), ttl) if !ttl.is_zero() => reply_missing(reply, ttl),
                (Ok(_), _) => reply.error(FuseErrno::EIO),
                (Err(e), _) => reply.error(fe(e)),
            }
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some((a, ttl)) = self.core.session.attr_here(ino.0) {
            // A directory delegated to this mount, or attributes it leases:
            // answered here, with the writes the MDS has not heard of.
            reply.attr(&ttl, &file_attr(&self.core.merge(a)));
            return;
        }
        let who = caller(req);
        self.spawn(|core| async move {
            match core.leased_attr(MdsOp::GetAttr { ino: ino.0 }, who).await {
                Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a)),
                Err(libc::ENOENT) => match core.removed_dir(ino.0) {
                    Some(a) => reply.attr(&Duration::ZERO, &file_attr(&a)),
                    None => reply.error(FuseErrno::ENOENT),
                },
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (who, pid) = (caller(req), req.pid());
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        self.spawn(|core| async move {
            match core.set_attr(ino.0, set, (who, pid)).await {
                Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a)),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let who = caller(req);
        self.spawn(|core| async move {
            match core.call(MdsOp::Readlink { ino: ino.0 }, who).await {
                Ok(MdsAnswer::Value(v)) => reply.data(&v),
                Ok(_) => reply.error(FuseErrno::EIO),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            let op = MdsOp::Create {
                parent: parent.0,
                name,
                mode,
                umask,
                rdev,
                open: false,
                ino: None,
                time: None,
            };
            reply_entry(reply, core.leased_attr(op, who).await);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            let mode = libc::S_IFDIR | (mode & 0o7777);
            let op = MdsOp::Create {
                parent: parent.0,
                name,
                mode,
                umask,
                rdev: 0,
                open: false,
                ino: None,
                time: None,
            };
            reply_entry(reply, core.leased_attr(op, who).await);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let who = caller(req);
        if self
            .core
            .session
            .unlink_here(parent.0, name.as_bytes(), who, now())
        {
            reply.ok();
            return;
        }
        let name = name_buf(name);
        self.spawn(|core| async move {
            let r = core
                .call(
                    MdsOp::Unlink {
                        parent: parent.0,
                        name,
                        time: None,
                    },
                    who,
                )
                .await
                .map(drop);
            reply_empty(reply, r);
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            let r = core
                .call(
                    MdsOp::Rmdir {
                        parent: parent.0,
                        name,
                    },
                    who,
                )
                .await
                .map(|answer| {
                    if let MdsAnswer::Attr(gone) = answer {
                        core.note_removed_dir(gone);
                    }
                });
            reply_empty(reply, r);
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (who, name) = (caller(req), name_buf(link_name));
        let target = ByteBuf::from(target.as_os_str().as_bytes().to_vec());
        self.spawn(|core| async move {
            let op = MdsOp::Symlink {
                parent: parent.0,
                name,
                target,
                ino: None,
            };
            reply_entry(reply, core.leased_attr(op, who).await);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let who = caller(req);
        let (name, new_name) = (name_buf(name), name_buf(newname));
        let flags = flags.bits();
        self.spawn(|core| async move {
            let op = MdsOp::Rename {
                parent: parent.0,
                name,
                new_parent: newparent.0,
                new_name,
                flags,
            };
            reply_empty(reply, core.call(op, who).await.map(drop));
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (who, name) = (caller(req), name_buf(newname));
        self.spawn(|core| async move {
            let op = MdsOp::Link {
                ino: ino.0,
                parent: newparent.0,
                name,
            };
            reply_entry(reply, core.leased_attr(op, who).await);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let who = caller(req);
        self.spawn(|core| async move {
            let op = MdsOp::Open {
                ino: ino.0,
                truncate: false,
            };
            // Inline writes of a file go in this mount's next batch, queued
            // under its state: held while the MDS answers, none is queued
            // meanwhile, so the answer has every one queued before (the
            // call waits for them), and no newer one is missing from it.
            let state = core.file(ino.0);
            let held = match &state {
                Some(st) => Some(st.lock().await),
                None => None,
            };
            let answer = core.call(op, who).await;
            drop(held);
            let opened = match answer {
                Ok(MdsAnswer::Opened { attr, inline }) => Ok((attr, Home::of(inline))),
                // A resend answered from the namespace as it stands.
                Ok(MdsAnswer::Attr(attr)) => Ok((attr, Home::Ask)),
                Ok(_) => Err(libc::EIO),
                Err(e) => Err(e),
            };
            match opened {
                Ok((a, home)) => {
                    let a = core.merge(a);
                    let fh = core.opened(&a, flags.0, home);
                    reply.opened(FileHandle(fh), fopen_flags(flags.0));
                }
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let who = caller(req);
        // Answered here under the directory's delegation (the MDS hears of
        // it in the next batch), if this mount may.
        let here = self
            .core
            .session
            .create_here(parent.0, name.as_bytes(), mode, who, now());
        let reply = match here {
            Here::Done(made) => {
                self.core.created_here(made, flags, reply);
                return;
            }
            Here::Wait | Here::Mds => reply,
        };
        let wait = matches!(here, Here::Wait);
        let name = name_buf(name);
        self.spawn(|core| async move {
            if wait {
                core.session.room_here().await;
                if let Here::Done(made) =
                    core.session.create_here(parent.0, &name, mode, who, now())
                {
                    core.created_here(made, flags, reply);
                    return;
                }
            }
            let mode = libc::S_IFREG | (mode & 0o7777);
            let op = MdsOp::Create {
                parent: parent.0,
                name,
                mode,
                umask,
                rdev: 0,
                open: true,
                ino: None,
                time: None,
            };
            let made = match core.session.call_leased(op, who).await {
                (Ok(MdsAnswer::Created { attr, buffer }), ttl) => {
                    Ok((attr, buffer, ttl, core.new_home()))
                }
                // A resend answered from the namespace as it stands.
                (Ok(MdsAnswer::Attr(attr)), ttl) => Ok((attr, false, ttl, Home::Ask)),
                (Ok(_), _) => Err(libc::EIO),
                (Err(e), _) => Err(e),
            };
            match made {
                Ok((attr, buffer, ttl, home)) => {
                    let a = core.merge(attr);
                    let fh = core.opened(&a, flags, home);
                    if buffer
                        && !ttl.is_zero()
                        && let Some(state) = core.file(a.ino)
                    {
                        // The MDS lets the maker of a file keep its written
                        // data past close while the lease lasts.
                        state.lock().await.buffered_until = Some(Instant::now() + ttl);
                        core.session.buffered(a.ino);
                    }
                    let open_flags = fopen_flags(flags);
                    reply.created(
                        &ttl,
                        &file_attr(&a),
                        Generation(0),
                        FileHandle(fh),
                        open_flags,
                    );
                }
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(|core| async move {
            match core.read(ino.0, offset, size).await {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(h) = self.core.handle(fh.0)
            && let Some(done) = self.core.write_now(h, offset, data)
        {
            match done {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(fe(e)),
            }
            return;
        }
        let data = data.to_vec();
        let (who, pid) = (caller(req), req.pid());
        self.spawn(|core| async move {
            let Some(h) = core.handle(fh.0) else {
                reply.error(FuseErrno::EBADF);
                return;
            };
            if h.sgid_watch && who.uid != 0 {
                if let Err(e) = core.drop_sgid(h.ino, who, pid).await {
                    reply.error(fe(e));
                    return;
                }
                if let Some(h) = lock(&core.handles).get_mut(&fh.0) {
                    h.sgid_watch = false;
                }
            }
            match core.write(h, offset, data).await {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to send and no lock to drop (the common close): answered
        // here, without a hop to the runtime.
        if self.core.clean(ino.0) && !lock(&self.core.lockers).contains(&(ino.0, lock_owner.0)) {
            reply.ok();
            return;
        }
        let who = caller(req);
        self.spawn(|core| async move {
            let flushed = core.flush_or_keep(ino.0, who, true).await;
            let unlocked = core.unlock_owner(ino.0, lock_owner.0).await;
            reply_empty(reply, flushed.and(unlocked));
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let locks = lock_owner.is_some_and(|o| lock(&self.core.lockers).contains(&(ino.0, o.0)));
        if !locks && self.core.release_clean(fh.0) {
            // The MDS hears of the close in the background: the kernel
            // does not wait for a release, and its answer changes nothing.
            reply.ok();
            self.core.session.release_later(ino.0);
            return;
        }
        self.spawn(|core| async move {
            // The kernel names the owner when a `flock` goes with the file.
            if let Some(owner) = lock_owner
                && let Err(errno) = core.unlock_owner(ino.0, owner.0).await
            {
                tracing::warn!(errno, "releasing a flock at close failed");
            }
            reply_empty(reply, core.release(fh.0).await);
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let who = caller(req);
        self.spawn(|core| async move {
            let r = async {
                core.flush(ino.0, who).await?;
                core.call(MdsOp::Sync, who).await.map(drop)
            };
            reply_empty(reply, r.await);
        });
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let who = caller(req);
        self.spawn(|core| async move {
            if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
                reply.ok();
                return;
            }
            if offset < 2 && reply.add(ino, 2, FileType::Directory, "..") {
                reply.ok();
                return;
            }
            let mut cookie = if offset <= 2 { 0 } else { offset };
            loop {
                let op = MdsOp::ReadDir {
                    ino: ino.0,
                    cookie,
                    max: READDIR_PAGE_ENTRIES,
                };
                let (entries, eof) = match core.call(op, who).await {
                    Ok(MdsAnswer::Entries { entries, eof }) => (entries, eof),
                    Ok(_) => {
                        reply.error(FuseErrno::EIO);
                        return;
                    }
                    Err(e) => {
                        reply.error(fe(e));
                        return;
                    }
                };
                for e in &entries {
                    if reply.add(
                        INodeNo(e.ino),
                        e.cookie,
                        kind_of(e.kind),
                        OsStr::from_bytes(&e.name),
                    ) {
                        reply.ok();
                        return;
                    }
                    cookie = e.cookie;
                }
                if eof || entries.is_empty() {
                    reply.ok();
                    return;
                }
            }
        });
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let who = caller(req);
        self.spawn(|core| async move {
            reply_empty(reply, core.call(MdsOp::Sync, who).await.map(drop));
        });
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let who = caller(req);
        self.spawn(|core| async move {
            match core.call(MdsOp::StatFs, who).await {
                Ok(MdsAnswer::StatFs(s)) => {
                    let bsize = 4096u64;
                    let files_free = u64::MAX >> 20;
                    reply.statfs(
                        s.total_bytes / bsize,
                        s.free_bytes / bsize,
                        s.free_bytes / bsize,
                        s.files + files_free,
                        files_free,
                        4096,
                        255,
                        4096,
                    );
                }
                Ok(_) => reply.error(FuseErrno::EIO),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (who, name) = (caller(req), name_buf(name));
        let value = ByteBuf::from(value.to_vec());
        let flags = u32::try_from(flags).unwrap_or(0);
        self.spawn(|core| async move {
            let op = MdsOp::SetXattr {
                ino: ino.0,
                name,
                value,
                flags,
            };
            reply_empty(reply, core.call(op, who).await.map(drop));
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if self.core.session.no_xattrs_here(ino.0) {
            // A file this mount made, unchanged since (the kernel asks
            // for `security.capability` before each write).
            reply.error(FuseErrno::ENODATA);
            return;
        }
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            match core.call(MdsOp::GetXattr { ino: ino.0, name }, who).await {
                Ok(MdsAnswer::Value(v)) => xattr_reply(reply, &v, size),
                Ok(_) => reply.error(FuseErrno::EIO),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if self.core.session.no_xattrs_here(ino.0) {
            xattr_reply(reply, &[], size);
            return;
        }
        let who = caller(req);
        self.spawn(|core| async move {
            match core.call(MdsOp::ListXattr { ino: ino.0 }, who).await {
                Ok(MdsAnswer::Names(names)) => {
                    let mut out = Vec::new();
                    for n in names {
                        out.extend_from_slice(&n);
                        out.push(0);
                    }
                    xattr_reply(reply, &out, size);
                }
                Ok(_) => reply.error(FuseErrno::EIO),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (who, name) = (caller(req), name_buf(name));
        self.spawn(|core| async move {
            let op = MdsOp::RemoveXattr { ino: ino.0, name };
            reply_empty(reply, core.call(op, who).await.map(drop));
        });
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        let Some(kind) = lock_kind(typ) else {
            reply.error(FuseErrno::EINVAL);
            return;
        };
        self.spawn(|core| async move {
            let op = MdsOp::GetLock {
                ino: ino.0,
                owner: lock_owner.0,
                start,
                end,
                kind,
            };
            match core.call(op, Caller::default()).await {
                Ok(MdsAnswer::Lock(Some(l))) => {
                    let typ = if l.kind == LockKind::Write {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    };
                    reply.locked(l.start, l.end, typ, l.pid);
                }
                Ok(MdsAnswer::Lock(None)) => reply.locked(start, end, libc::F_UNLCK, 0),
                Ok(_) => reply.error(FuseErrno::EIO),
                Err(e) => reply.error(fe(e)),
            }
        });
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(kind) = lock_kind(typ) else {
            reply.error(FuseErrno::EINVAL);
            return;
        };
        self.spawn(|core| async move {
            if kind != LockKind::Unlock {
                lock(&core.lockers).insert((ino.0, lock_owner.0));
            }
            let op = MdsOp::SetLock {
                ino: ino.0,
                owner: lock_owner.0,
                start,
                end,
                kind,
                pid,
                wait: sleep,
            };
            reply_empty(reply, core.call(op, Caller::default()).await.map(drop));
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let who = caller(req);
        self.spawn(|core| async move {
            reply_empty(
                reply,
                core.fallocate(ino.0, offset, length, mode, who).await,
            );
        });
    }
}

fn lock_kind(typ: i32) -> Option<LockKind> {
    match typ {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => Some(LockKind::Unlock),
        _ => None,
    }
}

fn xattr_reply(reply: ReplyXattr, value: &[u8], size: u32) {
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(FuseErrno::ERANGE);
    } else {
        reply.data(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How fuser 0.18 decodes a time the kernel sends.
    fn as_fuser_decodes(sec: i64, nsec: u32) -> SystemTime {
        if sec >= 0 {
            UNIX_EPOCH + Duration::new(sec.unsigned_abs(), nsec)
        } else {
            UNIX_EPOCH - Duration::new(sec.unsigned_abs(), nsec)
        }
    }

    #[test]
    fn kernel_times_before_1970_are_kept_exactly() {
        for (sec, nsec) in [
            (-1_500_000_001, 876_543_211),
            (-1, 999_999_999),
            (-1, 0),
            (0, 0),
            (0, 5),
            (1_234_567_890, 123_456_789),
        ] {
            let t = from_kernel_time(as_fuser_decodes(sec, nsec));
            assert_eq!((t.sec, t.nsec), (sec, nsec));
        }
    }
}

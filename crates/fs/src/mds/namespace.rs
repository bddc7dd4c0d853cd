//! The namespace's decisions, sans-IO: a cache of inodes and directories
//! and the POSIX rules of every operation. An operation either answers
//! (with the [`Delta`]s to journal) or names what it needs loaded first
//! ([`Need`]); the server loads it from the metadata pool and runs the
//! operation again. Nothing here reads a clock: `now` comes with the call.

use crate::format::{Delta, Dentry, Frag, InodeRec, frag_of, name_hash};
use crate::mds::quota::{self, Usage};
use cairn_proto::mds::{
    Attr, Caller, DirEntry, Errno, Layout, MdsAnswer, MdsOp, NAME_BYTES_MAX, RENAME_EXCHANGE,
    RENAME_NOREPLACE, ROOT_INO, SYMLINK_BYTES_MAX, SetAttr, SetTime, Time, XATTR_CREATE,
    XATTR_NAME_BYTES_MAX, XATTR_REPLACE, XATTR_VALUE_BYTES_MAX,
};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, BTreeSet, HashMap};

const S_IFMT: u32 = libc::S_IFMT;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_IFREG: u32 = libc::S_IFREG;
const S_IFLNK: u32 = libc::S_IFLNK;
const S_ISGID: u32 = libc::S_ISGID;

/// Inode numbers are reserved in the journal this many at a time, so a new
/// MDS never hands out one its predecessor did.
pub const INO_RESERVE_STEP: u64 = 4096;

/// The virtual xattr that shows and sets a layout (as CephFS's
/// `ceph.dir.layout` / `ceph.file.layout`).
pub const LAYOUT_XATTR: &[u8] = b"cairn.layout";

/// Something the cache lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Need {
    Inode(u64),
    /// A fragment of a directory.
    Frag(u64, Frag),
}

/// Why an operation did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    Need(Need),
    /// Several things at once (a walk of a subtree, one level a time).
    NeedMany(Vec<Need>),
    Errno(Errno),
}

impl From<Need> for Stop {
    fn from(need: Need) -> Stop {
        Stop::Need(need)
    }
}

fn errno(e: i32) -> Stop {
    Stop::Errno(e)
}

/// The loaded entries of one directory fragment, ordered by cookie (the
/// name hash shifted, so fragments follow one another in cookie order;
/// stable for the entry's life, across splits and merges).
#[derive(Clone, Debug)]
pub struct FragCache {
    frag: Frag,
    by_cookie: BTreeMap<u64, (ByteBuf, Dentry)>,
    cookies: HashMap<Vec<u8>, u64>,
    /// When last used (the namespace's clock).
    pub(crate) last_used: u64,
    /// The journal sequence of its last change (0: none since loaded).
    pub(crate) changed_at: u64,
}

impl FragCache {
    /// Fragment `frag` with `entries` (those whose names belong to it).
    #[must_use]
    pub fn new(frag: Frag, entries: impl IntoIterator<Item = (ByteBuf, Dentry)>) -> FragCache {
        let mut cache = FragCache {
            frag,
            by_cookie: BTreeMap::new(),
            cookies: HashMap::new(),
            last_used: 0,
            changed_at: 0,
        };
        for (name, dentry) in entries {
            cache.insert(name, dentry);
        }
        cache
    }

    fn get(&self, name: &[u8]) -> Option<Dentry> {
        let cookie = self.cookies.get(name)?;
        Some(self.by_cookie[cookie].1)
    }

    fn insert(&mut self, name: ByteBuf, dentry: Dentry) {
        if let Some(cookie) = self.cookies.get(name.as_slice()) {
            self.by_cookie.insert(*cookie, (name, dentry));
            return;
        }
        let (low, high) = cookie_range(self.frag);
        let mut cookie = name_cookie(&name);
        // A hash collision (one in 2^61) takes the next free cookie of
        // this fragment, so cookies stay in fragment order.
        while self.by_cookie.contains_key(&cookie) {
            cookie = if cookie >= high { low } else { cookie + 1 };
        }
        self.cookies.insert(name.to_vec(), cookie);
        self.by_cookie.insert(cookie, (name, dentry));
    }

    fn remove(&mut self, name: &[u8]) -> Option<Dentry> {
        let cookie = self.cookies.remove(name)?;
        self.by_cookie.remove(&cookie).map(|(_, d)| d)
    }

    fn into_entries(self) -> impl Iterator<Item = (ByteBuf, Dentry)> {
        self.by_cookie.into_values()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.by_cookie.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_cookie.is_empty()
    }

    /// Estimated bytes: names twice, and `per_entry` for each entry.
    #[must_use]
    pub fn bytes(&self, per_entry: usize) -> usize {
        self.by_cookie
            .values()
            .map(|(name, _)| 2 * name.len() + per_entry)
            .sum()
    }
}

/// A directory's loaded fragments.
#[derive(Clone, Debug, Default)]
pub struct DirCache {
    pub(crate) frags: BTreeMap<Frag, FragCache>,
}

impl DirCache {
    /// Estimated bytes of every loaded fragment.
    #[must_use]
    pub fn bytes(&self, per_entry: usize) -> usize {
        self.frags.values().map(|f| f.bytes(per_entry)).sum()
    }
}

/// A readdir cookie: at least 3 (FUSE offsets 1 and 2 are `.` and `..`),
/// below 2^62 (offsets are signed).
fn name_cookie(name: &[u8]) -> u64 {
    (name_hash(name) >> 2).max(3)
}

/// The cookies of a fragment's names.
fn cookie_range(frag: Frag) -> (u64, u64) {
    ((frag.first_hash() >> 2).max(3), frag.last_hash() >> 2)
}

/// A directory's fragments in hash order (one, whole, if not split).
fn tree_of(rec: &InodeRec) -> Vec<Frag> {
    if rec.frags.is_empty() {
        vec![Frag::WHOLE]
    } else {
        rec.frags.clone()
    }
}

/// Entries past which a fragment splits, by default (CephFS's
/// `mds_bal_split_size`).
pub const DIR_SPLIT_ENTRIES_DEFAULT: usize = 10_000;

/// A split makes `2^SPLIT_BITS` fragments (CephFS's `mds_bal_split_bits`).
pub const SPLIT_BITS: u8 = 3;

/// The result of one operation: its answer and the changes to journal.
#[derive(Debug)]
pub struct Outcome {
    pub answer: MdsAnswer,
    pub deltas: Vec<Delta>,
}

/// The cached namespace.
#[derive(Debug, Default)]
pub struct Namespace {
    pub(crate) inodes: HashMap<u64, InodeRec>,
    pub(crate) dirs: HashMap<u64, DirCache>,
    /// Opens per inode, across sessions.
    pub(crate) opens: HashMap<u64, u32>,
    /// When each cached inode or directory was last used (a clock tick).
    pub(crate) last_used: HashMap<u64, u64>,
    /// The journal sequence of each cached entry's last change.
    pub(crate) changed_at: HashMap<u64, u64>,
    pub(crate) clock: u64,
    /// Next inode number to hand out.
    next_ino: u64,
    /// Inode numbers below this are reserved in the journal.
    ino_reserved: u64,
    /// Inode numbers below this are reserved in durable journal entries:
    /// a number at or past it is answered only once its reservation is
    /// durable, or a new active MDS, starting from the durable mark, could
    /// hand it out a second time.
    ino_durable: u64,
    /// The change being made handed out a number past `ino_durable`.
    ino_undurable: bool,
    /// A fragment with more entries than this splits.
    split_entries: usize,
    /// Regular files up to this size keep their data in their record
    /// (0: none do).
    inline_max: u64,
}

fn is_dir(rec: &InodeRec) -> bool {
    rec.attr.mode & S_IFMT == S_IFDIR
}

fn check_name(name: &[u8]) -> Result<(), Stop> {
    if name.len() > NAME_BYTES_MAX {
        return Err(errno(libc::ENAMETOOLONG));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

/// Whether `name` may name a new entry (the MDS answers the rest).
#[must_use]
pub fn creatable_name(name: &[u8]) -> bool {
    check_name(name).is_ok() && !is_dot(name)
}

/// The attributes of a new inode `ino` of type `kind` (`S_IFMT` bits)
/// made by `caller` in a directory with attributes `parent` at `now`: a
/// setgid directory hands its group down, and its setgid bit to
/// subdirectories. The MDS makes inodes so, and a client answering a
/// create itself (under a directory delegation) the same way.
#[must_use]
pub fn new_attr(ino: u64, kind: u32, mode: u32, caller: Caller, parent: &Attr, now: Time) -> Attr {
    let mut mode = kind | (mode & 0o7777);
    let mut gid = caller.gid;
    if parent.mode & S_ISGID != 0 {
        gid = parent.gid;
        if kind == S_IFDIR {
            mode |= S_ISGID;
        }
    }
    Attr {
        ino,
        size: 0,
        mode,
        nlink: if kind == S_IFDIR { 2 } else { 1 },
        uid: caller.uid,
        gid,
        rdev: 0,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        layout: parent.layout,
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn apply_time(set: SetTime, now: Time) -> Time {
    match set {
        SetTime::Now => now,
        SetTime::At(t) => t,
    }
}

impl Namespace {
    /// An empty cache that hands out inode numbers from `next_ino`, with
    /// numbers below `ino_reserved` already reserved.
    #[must_use]
    pub fn new(next_ino: u64, ino_reserved: u64) -> Namespace {
        Namespace {
            next_ino: next_ino.max(ROOT_INO + 1),
            ino_reserved,
            ino_durable: ino_reserved,
            split_entries: DIR_SPLIT_ENTRIES_DEFAULT,
            ..Namespace::default()
        }
    }

    /// The root directory of a new file system.
    #[must_use]
    pub fn root_inode(now: Time) -> InodeRec {
        InodeRec {
            attr: Attr {
                ino: ROOT_INO,
                size: 0,
                mode: S_IFDIR | 0o755,
                nlink: 2,
                atime: now,
                mtime: now,
                ctime: now,
                btime: now,
                ..Attr::default()
            },
            parent: ROOT_INO,
            xattrs: vec![
                (
                    ByteBuf::from(quota::RFILES_XATTR.to_vec()),
                    ByteBuf::from(b"0".to_vec()),
                ),
                (
                    ByteBuf::from(quota::RBYTES_XATTR.to_vec()),
                    ByteBuf::from(b"0".to_vec()),
                ),
            ],
            ..InodeRec::default()
        }
    }

    pub fn insert_inode(&mut self, rec: InodeRec) {
        self.touch(rec.attr.ino);
        self.inodes.insert(rec.attr.ino, rec);
    }

    /// Sets the entries past which a directory fragment splits (it
    /// merges with its siblings when they hold a quarter of that
    /// together).
    pub fn set_split_entries(&mut self, entries: usize) {
        self.split_entries = entries.max(1);
    }

    /// Sets the size up to which regular files keep their data in the MDS
    /// (0: new files start in data objects).
    pub fn set_inline_max(&mut self, bytes: u64) {
        self.inline_max = bytes;
    }

    #[must_use]
    pub fn inline_max(&self) -> u64 {
        self.inline_max
    }

    /// The data an inline file holds (`None`: not inline, or not cached).
    #[must_use]
    pub fn inline_data(&self, ino: u64) -> Option<&ByteBuf> {
        self.inodes.get(&ino)?.inline.as_ref()
    }

    /// Marks a file's data as moved to its data objects (the caller wrote
    /// them): its record without inline data, to journal.
    pub fn uninlined(&mut self, ino: u64) -> Vec<Delta> {
        match self.inodes.get_mut(&ino) {
            Some(rec) if rec.inline.is_some() => {
                rec.inline = None;
                vec![Delta::PutInode(rec.clone())]
            }
            _ => Vec::new(),
        }
    }

    /// Caches fragment `frag` of directory `ino` as loaded: its stored
    /// entries that belong to it (a name of another fragment, which a
    /// sound store never holds, is left out). A fragment already cached
    /// is kept (it may hold changes not yet written back).
    pub fn insert_frag(
        &mut self,
        ino: u64,
        frag: Frag,
        entries: impl IntoIterator<Item = (ByteBuf, Dentry)>,
    ) -> usize {
        self.clock += 1;
        let clock = self.clock;
        let dir = self.dirs.entry(ino).or_default();
        if let Some(cached) = dir.frags.get_mut(&frag) {
            cached.last_used = clock;
            return 0;
        }
        let mut strays = 0;
        let mine = entries.into_iter().filter(|(name, _)| {
            let ok = frag.contains(name_hash(name));
            strays += usize::from(!ok);
            ok
        });
        let mut cache = FragCache::new(frag, mine);
        cache.last_used = clock;
        dir.frags.insert(frag, cache);
        strays
    }

    /// The number of cached inodes, directories and directory fragments.
    #[must_use]
    pub fn cached(&self) -> (usize, usize, usize) {
        let frags = self.dirs.values().map(|d| d.frags.len()).sum();
        (self.inodes.len(), self.dirs.len(), frags)
    }

    /// Hands out `count` fresh inode numbers at once (a delegation to a
    /// client): the first, with the deltas reserving them.
    pub fn allocate_range(&mut self, count: u64) -> (u64, Vec<Delta>) {
        let first = self.next_ino;
        self.next_ino += count;
        let mut deltas = Vec::new();
        self.reserve_to_next(&mut deltas);
        (first, deltas)
    }

    /// Moves the reserved mark ahead of the next number to hand out, half
    /// a step early, so its entry is durable before the numbers are
    /// reached (and creates seldom wait for it).
    fn reserve_to_next(&mut self, deltas: &mut Vec<Delta>) {
        if self.next_ino + INO_RESERVE_STEP / 2 > self.ino_reserved {
            self.ino_reserved = self.next_ino + INO_RESERVE_STEP;
            deltas.push(Delta::InoReserved(self.ino_reserved));
        }
    }

    /// Numbers below `mark` are reserved in durable journal entries.
    pub fn set_ino_durable(&mut self, mark: u64) {
        self.ino_durable = self.ino_durable.max(mark);
    }

    /// Whether the change just made handed out a number whose reservation
    /// is not durable yet (its answer must wait until it is); clears it.
    pub fn take_ino_undurable(&mut self) -> bool {
        std::mem::take(&mut self.ino_undurable)
    }

    /// Inode numbers below this may have been handed out (by this MDS or
    /// an earlier one).
    #[must_use]
    pub fn ino_reserved(&self) -> u64 {
        self.ino_reserved
    }

    /// A number handed out ([`Outcome`]s of replays carry their own); it
    /// must not be given again.
    pub fn saw_ino(&mut self, ino: u64) {
        self.next_ino = self.next_ino.max(ino + 1);
    }

    fn inode(&self, ino: u64) -> Result<&InodeRec, Stop> {
        self.inodes.get(&ino).ok_or(Stop::Need(Need::Inode(ino)))
    }

    pub(crate) fn inode_rec(&self, ino: u64) -> Result<&InodeRec, Stop> {
        self.inode(ino)
    }

    pub(crate) fn inode_mut(&mut self, ino: u64) -> Option<&mut InodeRec> {
        self.inodes.get_mut(&ino)
    }

    /// The inode `name` of `parent` names, if cached.
    #[must_use]
    pub fn peek(&self, parent: u64, name: &[u8]) -> Option<u64> {
        let frag = frag_of(&self.inodes.get(&parent)?.frags, name_hash(name));
        self.dirs
            .get(&parent)?
            .frags
            .get(&frag)?
            .get(name)
            .map(|d| d.ino)
    }

    /// Every entry of directory `ino`, or what must be loaded first.
    pub(crate) fn dir_entries(&self, ino: u64) -> Result<Vec<Dentry>, Vec<Need>> {
        let rec = self.inode(ino).map_err(|_| vec![Need::Inode(ino)])?;
        let mut entries = Vec::new();
        let mut missing = Vec::new();
        for frag in tree_of(rec) {
            match self.dirs.get(&ino).and_then(|d| d.frags.get(&frag)) {
                Some(f) => entries.extend(f.by_cookie.values().map(|(_, d)| *d)),
                None => missing.push(Need::Frag(ino, frag)),
            }
        }
        if missing.is_empty() {
            Ok(entries)
        } else {
            Err(missing)
        }
    }

    /// The fragment of directory `dir` that holds `name`, loaded.
    fn frag_for(&self, dir: u64, name: &[u8]) -> Result<&FragCache, Stop> {
        let rec = self.inode(dir)?;
        if !is_dir(rec) {
            return Err(errno(libc::ENOTDIR));
        }
        let frag = frag_of(&rec.frags, name_hash(name));
        self.dirs
            .get(&dir)
            .and_then(|d| d.frags.get(&frag))
            .ok_or(Stop::Need(Need::Frag(dir, frag)))
    }

    /// Whether directory `ino` has no entries (every fragment is read).
    fn dir_is_empty(&self, ino: u64) -> Result<bool, Stop> {
        let rec = self.inode(ino)?;
        if !is_dir(rec) {
            return Err(errno(libc::ENOTDIR));
        }
        let mut missing = Vec::new();
        for frag in tree_of(rec) {
            match self.dirs.get(&ino).and_then(|d| d.frags.get(&frag)) {
                Some(f) if !f.is_empty() => return Ok(false),
                Some(_) => {}
                None => missing.push(Need::Frag(ino, frag)),
            }
        }
        match missing.len() {
            0 => Ok(true),
            1 => Err(Stop::Need(missing[0])),
            _ => Err(Stop::NeedMany(missing)),
        }
    }

    /// The entry `name` of `parent` and its inode.
    fn child(&self, parent: u64, name: &[u8]) -> Result<Option<(Dentry, &InodeRec)>, Stop> {
        match self.frag_for(parent, name)?.get(name) {
            None => Ok(None),
            Some(d) => Ok(Some((d, self.inode(d.ino)?))),
        }
    }

    /// Puts entry `name` in directory `dir` (whose fragment for it is
    /// loaded: the caller looked the name up).
    fn put_entry(&mut self, dir: u64, name: &ByteBuf, dentry: Dentry, deltas: &mut Vec<Delta>) {
        let frag = frag_of(
            self.inodes.get(&dir).map_or(&[][..], |r| &r.frags),
            name_hash(name),
        );
        self.dirs
            .get_mut(&dir)
            .and_then(|d| d.frags.get_mut(&frag))
            .expect("the caller looked the name up, so its fragment is loaded")
            .insert(name.clone(), dentry);
        deltas.push(Delta::PutDentry {
            dir,
            frag,
            name: name.clone(),
            dentry,
        });
    }

    /// Takes entry `name` out of directory `dir`'s cache (no delta: the
    /// caller journals the removal or an entry in its place).
    fn take_entry(&mut self, dir: u64, name: &[u8]) -> Frag {
        let frag = frag_of(
            self.inodes.get(&dir).map_or(&[][..], |r| &r.frags),
            name_hash(name),
        );
        if let Some(f) = self.dirs.get_mut(&dir).and_then(|d| d.frags.get_mut(&frag)) {
            f.remove(name);
        }
        frag
    }

    /// Removes entry `name` of directory `dir`.
    fn drop_entry(&mut self, dir: u64, name: &ByteBuf, deltas: &mut Vec<Delta>) {
        let frag = self.take_entry(dir, name);
        deltas.push(Delta::DropDentry {
            dir,
            frag,
            name: name.clone(),
        });
    }

    /// Runs one operation.
    ///
    /// # Errors
    /// [`Stop::Need`] to load something first, [`Stop::Errno`] for the
    /// caller's error.
    pub fn execute(&mut self, op: &MdsOp, caller: Caller, now: Time) -> Result<Outcome, Stop> {
        self.note_use(op);
        let mut outcome = self.execute_op(op, caller, now)?;
        self.refrag(&mut outcome.deltas);
        Ok(outcome)
    }

    fn execute_op(&mut self, op: &MdsOp, caller: Caller, now: Time) -> Result<Outcome, Stop> {
        match op {
            MdsOp::Hello { .. } | MdsOp::StatFs | MdsOp::Sync => Ok(done(Vec::new())),
            // Locks are the server's, not the namespace's.
            MdsOp::SetLock { .. } | MdsOp::GetLock { .. } => Err(errno(libc::EINVAL)),
            // Leases and sessions are the server's too.
            MdsOp::Reassert { .. }
            | MdsOp::Returned { .. }
            | MdsOp::Sessions
            | MdsOp::Status
            | MdsOp::TakeInos { .. }
            | MdsOp::Batch { .. }
            | MdsOp::Evict { .. } => Err(errno(libc::EINVAL)),
            MdsOp::Lookup { parent, name } => self.lookup(*parent, name),
            MdsOp::GetAttr { ino } => Ok(attr_answer(self.inode(*ino)?.attr.clone(), vec![])),
            MdsOp::SetAttr { ino, set } => self.set_attr(*ino, set, now),
            MdsOp::Create {
                parent,
                name,
                mode,
                rdev,
                open,
                ino,
                time,
                ..
            } => {
                let node = NewNode {
                    mode: *mode,
                    rdev: *rdev,
                    target: None,
                    open: *open,
                };
                // An asynchronous create keeps the time its client gave.
                self.create(*parent, name, node, *ino, caller, time.unwrap_or(now))
            }
            MdsOp::Symlink {
                parent,
                name,
                target,
                ino,
            } => {
                if target.is_empty() || target.len() > SYMLINK_BYTES_MAX {
                    return Err(errno(libc::ENAMETOOLONG));
                }
                let node = NewNode {
                    mode: S_IFLNK | 0o777,
                    rdev: 0,
                    target: Some(target.clone()),
                    open: false,
                };
                self.create(*parent, name, node, *ino, caller, now)
            }
            MdsOp::Link { ino, parent, name } => self.link(*ino, *parent, name, now),
            MdsOp::Unlink { parent, name, time } => {
                // An asynchronous unlink keeps the time its client gave.
                self.unlink(*parent, name, false, time.unwrap_or(now))
            }
            MdsOp::Rmdir { parent, name } => self.unlink(*parent, name, true, now),
            MdsOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
            } => self.rename((*parent, name), (*new_parent, new_name), *flags, now),
            MdsOp::ReadDir { ino, cookie, max } => self.read_dir(*ino, *cookie, *max),
            MdsOp::Readlink { ino } => {
                let rec = self.inode(*ino)?;
                match &rec.target {
                    Some(t) => Ok(done_with(MdsAnswer::Value(t.clone()), vec![])),
                    None => Err(errno(libc::EINVAL)),
                }
            }
            MdsOp::Open { ino, truncate } => self.open(*ino, *truncate, now),
            MdsOp::Release { ino } => Ok(self.release(*ino)),
            MdsOp::Written { ino, size, mtime } => self.written(*ino, *size, *mtime),
            MdsOp::WriteInline {
                ino,
                ranges,
                size,
                mtime,
            } => self.write_inline(*ino, ranges, *size, *mtime),
            MdsOp::Uninline { ino } => Ok(attr_answer(self.inode(*ino)?.attr.clone(), vec![])),
            MdsOp::ReadInline { ino } => {
                let rec = self.inode(*ino)?;
                let answer = MdsAnswer::Opened {
                    attr: rec.attr.clone(),
                    inline: rec.inline.clone(),
                };
                Ok(done_with(answer, vec![]))
            }
            MdsOp::SetXattr {
                ino,
                name,
                value,
                flags,
            } => self.set_xattr(*ino, (name, value), *flags, caller, now),
            MdsOp::GetXattr { ino, name } => self.get_xattr(*ino, name),
            MdsOp::ListXattr { ino } => {
                let rec = self.inode(*ino)?;
                // trusted.* is for root's eyes only, as in Linux.
                let names = rec
                    .xattrs
                    .iter()
                    .map(|(n, _)| n.clone())
                    .filter(|n| caller.uid == 0 || !n.starts_with(b"trusted."))
                    .collect();
                Ok(done_with(MdsAnswer::Names(names), vec![]))
            }
            MdsOp::RemoveXattr { ino, name } => {
                if quota::is_limit(name) {
                    let absent = xattr_absent(self.inode(*ino)?, name);
                    if absent {
                        return Err(errno(libc::ENODATA));
                    }
                    let zero = ByteBuf::from(b"0".to_vec());
                    return self.set_xattr(*ino, (name, &zero), 0, caller, now);
                }
                self.remove_xattr(*ino, name, now)
            }
        }
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Result<Outcome, Stop> {
        if name.len() > NAME_BYTES_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        if name == b"." {
            return Ok(attr_answer(self.inode(parent)?.attr.clone(), vec![]));
        }
        if name == b".." {
            let parent_of = self.inode(parent)?.parent;
            return Ok(attr_answer(self.inode(parent_of)?.attr.clone(), vec![]));
        }
        match self.child(parent, name)? {
            Some((_, rec)) => Ok(attr_answer(rec.attr.clone(), vec![])),
            None => Err(errno(libc::ENOENT)),
        }
    }

    fn allocate_ino(&mut self, asked: Option<u64>, deltas: &mut Vec<Delta>) -> Result<u64, Stop> {
        let ino = match asked {
            // A replay keeps the number its first answer gave, unless
            // that number is taken (then the client's view is lost anyway).
            Some(ino) if ino > ROOT_INO && !self.inodes.contains_key(&ino) => ino,
            Some(ino) => {
                tracing::warn!(ino, "a replayed create's inode number is taken");
                self.next_ino
            }
            None => self.next_ino,
        };
        self.next_ino = self.next_ino.max(ino + 1);
        self.reserve_to_next(deltas);
        if ino >= self.ino_durable {
            self.ino_undurable = true;
        }
        Ok(ino)
    }

    fn create(
        &mut self,
        parent: u64,
        name: &ByteBuf,
        node: NewNode,
        asked_ino: Option<u64>,
        caller: Caller,
        now: Time,
    ) -> Result<Outcome, Stop> {
        check_name(name)?;
        if is_dot(name) {
            return Err(errno(libc::EEXIST));
        }
        if self.child(parent, name)?.is_some() {
            return Err(errno(libc::EEXIST));
        }
        let kind = node.mode & S_IFMT;
        let kind = if kind == 0 { S_IFREG } else { kind };
        let realms = self.realms(parent)?;
        self.check_room(&realms, Usage::new(1, 0))?;
        let parent_rec = self.inode(parent)?.clone();
        let mut deltas = Vec::new();
        let ino = self.allocate_ino(asked_ino, &mut deltas)?;
        let mut attr = new_attr(ino, kind, node.mode, caller, &parent_rec.attr, now);
        attr.size = node.target.as_ref().map_or(0, |t| t.len() as u64);
        attr.rdev = node.rdev;
        // A new regular file starts inline when small files are kept here.
        let inline = (kind == S_IFREG && self.inline_max > 0).then(ByteBuf::new);
        let rec = InodeRec {
            attr,
            parent,
            xattrs: Vec::new(),
            target: node.target,
            frags: Vec::new(),
            inline,
        };
        let dentry = Dentry { ino, kind };
        let mut parent_rec = parent_rec;
        parent_rec.attr.mtime = now;
        parent_rec.attr.ctime = now;
        if kind == S_IFDIR {
            parent_rec.attr.nlink += 1;
            self.clock += 1;
            let mut whole = FragCache::new(Frag::WHOLE, []);
            whole.last_used = self.clock;
            let mut dir = DirCache::default();
            dir.frags.insert(Frag::WHOLE, whole);
            self.dirs.insert(ino, dir);
        }
        let attr = rec.attr.clone();
        if kind == S_IFREG && node.open {
            // The creator holds it open.
            *self.opens.entry(ino).or_default() += 1;
        }
        deltas.push(Delta::PutInode(rec.clone()));
        deltas.push(Delta::PutInode(parent_rec.clone()));
        self.inodes.insert(ino, rec);
        self.inodes.insert(parent, parent_rec);
        self.put_entry(parent, name, dentry, &mut deltas);
        self.charge(&realms, Usage::new(1, 0), &mut deltas);
        Ok(attr_answer(attr, deltas))
    }

    fn link(&mut self, ino: u64, parent: u64, name: &ByteBuf, now: Time) -> Result<Outcome, Stop> {
        check_name(name)?;
        let rec = self.inode(ino)?;
        if is_dir(rec) {
            return Err(errno(libc::EPERM));
        }
        if rec.attr.nlink == 0 {
            return Err(errno(libc::ENOENT));
        }
        if is_dot(name) || self.child(parent, name)?.is_some() {
            return Err(errno(libc::EEXIST));
        }
        let mut rec = self.inode(ino)?.clone();
        let mut parent_rec = self.inode(parent)?.clone();
        rec.attr.nlink += 1;
        rec.attr.ctime = now;
        parent_rec.attr.mtime = now;
        parent_rec.attr.ctime = now;
        let dentry = Dentry {
            ino,
            kind: rec.attr.mode & S_IFMT,
        };
        let attr = rec.attr.clone();
        let mut deltas = vec![
            Delta::PutInode(rec.clone()),
            Delta::PutInode(parent_rec.clone()),
        ];
        self.inodes.insert(ino, rec);
        self.inodes.insert(parent, parent_rec);
        self.put_entry(parent, name, dentry, &mut deltas);
        Ok(attr_answer(attr, deltas))
    }

    /// Drops one link of `ino` (already taken out of its directory):
    /// the deltas for the inode, and its removal when no link and no open
    /// is left.
    fn drop_link(&mut self, ino: u64, now: Time, realms: &[u64], deltas: &mut Vec<Delta>) {
        let Some(rec) = self.inodes.get_mut(&ino) else {
            return;
        };
        if is_dir(rec) {
            rec.attr.nlink = 0;
        } else {
            rec.attr.nlink = rec.attr.nlink.saturating_sub(1);
        }
        rec.attr.ctime = now;
        if rec.attr.nlink > 0 {
            deltas.push(Delta::PutInode(rec.clone()));
            return;
        }
        let freed = Usage::new(-1, -regular_bytes(rec));
        self.charge(realms, freed, deltas);
        let Some(rec) = self.inodes.get_mut(&ino) else {
            return;
        };
        if is_dir(rec) {
            let frags = tree_of(rec);
            self.dirs.remove(&ino);
            deltas.push(Delta::DropDir { ino, frags });
        }
        if self.opens.get(&ino).copied().unwrap_or(0) > 0 {
            // Open somewhere: the data stays until the last release.
            deltas.push(Delta::PutInode(rec.clone()));
            return;
        }
        deltas.extend(self.forget(ino));
    }

    /// Removes an inode with no links and no opens: its record, and its
    /// data objects.
    fn forget(&mut self, ino: u64) -> Vec<Delta> {
        let Some(rec) = self.inodes.remove(&ino) else {
            return Vec::new();
        };
        self.opens.remove(&ino);
        let mut deltas = vec![Delta::DropInode(ino)];
        // An inline file has no data objects.
        if rec.attr.mode & S_IFMT == S_IFREG && rec.inline.is_none() {
            deltas.push(Delta::Purge {
                ino,
                size: rec.attr.size,
                layout: rec.attr.layout,
            });
        }
        deltas
    }

    fn unlink(
        &mut self,
        parent: u64,
        name: &ByteBuf,
        dir: bool,
        now: Time,
    ) -> Result<Outcome, Stop> {
        if name.len() > NAME_BYTES_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        if dir && name.as_slice() == b"." {
            return Err(errno(libc::EINVAL));
        }
        if dir && name.as_slice() == b".." {
            return Err(errno(libc::ENOTEMPTY));
        }
        let Some((dentry, rec)) = self.child(parent, name)? else {
            return Err(errno(libc::ENOENT));
        };
        match (dir, is_dir(rec)) {
            (false, true) => return Err(errno(libc::EISDIR)),
            (true, false) => return Err(errno(libc::ENOTDIR)),
            (true, true) => {
                if !self.dir_is_empty(dentry.ino)? {
                    return Err(errno(libc::ENOTEMPTY));
                }
            }
            (false, false) => {}
        }
        let realms = self.realms(rec.parent)?;
        // A removed directory answers with its last attributes (no
        // links): a mount that has it as a cwd shows it so, as Linux does.
        let mut gone = rec.attr.clone();
        gone.nlink = 0;
        gone.ctime = now;
        let mut deltas = Vec::new();
        let mut parent_rec = self.inode(parent)?.clone();
        self.drop_entry(parent, name, &mut deltas);
        parent_rec.attr.mtime = now;
        parent_rec.attr.ctime = now;
        if dir {
            parent_rec.attr.nlink = parent_rec.attr.nlink.saturating_sub(1);
        }
        deltas.push(Delta::PutInode(parent_rec.clone()));
        self.inodes.insert(parent, parent_rec);
        self.drop_link(dentry.ino, now, &realms, &mut deltas);
        if dir {
            return Ok(attr_answer(gone, deltas));
        }
        Ok(done(deltas))
    }

    /// Whether `ino` is `ancestor` or below it.
    fn is_within(&self, mut ino: u64, ancestor: u64) -> Result<bool, Stop> {
        for _ in 0..100_000 {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.inode(ino)?.parent;
        }
        Ok(false)
    }

    fn rename(
        &mut self,
        (parent, name): (u64, &ByteBuf),
        (new_parent, new_name): (u64, &ByteBuf),
        flags: u32,
        now: Time,
    ) -> Result<Outcome, Stop> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(errno(libc::EINVAL));
        }
        check_name(new_name)?;
        if name.len() > NAME_BYTES_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        if is_dot(name) || is_dot(new_name) {
            return Err(errno(libc::EBUSY));
        }
        let Some((src, src_rec)) = self.child(parent, name)? else {
            return Err(errno(libc::ENOENT));
        };
        let src_is_dir = is_dir(src_rec);
        let target = self.child(new_parent, new_name)?;
        let target = target.map(|(d, rec)| (d, is_dir(rec)));
        if flags & RENAME_EXCHANGE != 0 {
            let Some((dst, dst_is_dir)) = target else {
                return Err(errno(libc::ENOENT));
            };
            return self.exchange(
                (parent, name, src, src_is_dir),
                (new_parent, new_name, dst, dst_is_dir),
                now,
            );
        }
        if let Some((dst, dst_is_dir)) = target {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(errno(libc::EEXIST));
            }
            if dst.ino == src.ino {
                // Two links of one file: POSIX says do nothing.
                return Ok(done(Vec::new()));
            }
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(errno(libc::ENOTDIR)),
                (false, true) => return Err(errno(libc::EISDIR)),
                (true, true) if !self.dir_is_empty(dst.ino)? => {
                    return Err(errno(libc::ENOTEMPTY));
                }
                _ => {}
            }
        }
        if src_is_dir && self.is_within(new_parent, src.ino)? {
            return Err(errno(libc::EINVAL));
        }
        let victim_realms = match target {
            Some((dst, _)) => {
                let victim_parent = self.inode(dst.ino)?.parent;
                self.realms(victim_parent)?
            }
            None => Vec::new(),
        };
        let moving = self.moving_usage(src.ino, new_parent)?;
        // Everything that can be missing from the cache has been touched.
        let mut deltas = Vec::new();
        if let Some((dst, dst_is_dir)) = target {
            // The entry put below replaces it.
            self.take_entry(new_parent, new_name);
            if dst_is_dir {
                let p = self.inodes.get_mut(&new_parent).expect("checked");
                p.attr.nlink = p.attr.nlink.saturating_sub(1);
            }
            self.drop_link(dst.ino, now, &victim_realms, &mut deltas);
        }
        self.drop_entry(parent, name, &mut deltas);
        self.put_entry(new_parent, new_name, src, &mut deltas);
        if src_is_dir && parent != new_parent {
            let from = &mut self.inodes.get_mut(&parent).expect("checked").attr;
            from.nlink = from.nlink.saturating_sub(1);
            self.inodes
                .get_mut(&new_parent)
                .expect("checked")
                .attr
                .nlink += 1;
        }
        let moved = self.inodes.get_mut(&src.ino).expect("checked");
        moved.attr.ctime = now;
        // A file's primary parent follows its last rename (quota realms).
        moved.parent = new_parent;
        deltas.push(Delta::PutInode(moved.clone()));
        self.touch_dirs(&[parent, new_parent], now, &mut deltas);
        self.apply_move(&moving, &mut deltas);
        Ok(done(deltas))
    }

    fn exchange(
        &mut self,
        (parent, name, src, src_is_dir): (u64, &ByteBuf, Dentry, bool),
        (new_parent, new_name, dst, dst_is_dir): (u64, &ByteBuf, Dentry, bool),
        now: Time,
    ) -> Result<Outcome, Stop> {
        if src.ino == dst.ino {
            return Ok(done(Vec::new()));
        }
        if src_is_dir && self.is_within(new_parent, src.ino)? {
            return Err(errno(libc::EINVAL));
        }
        if dst_is_dir && self.is_within(parent, dst.ino)? {
            return Err(errno(libc::EINVAL));
        }
        let moving_src = self.moving_usage(src.ino, new_parent)?;
        let moving_dst = self.moving_usage(dst.ino, parent)?;
        let mut deltas = Vec::new();
        self.put_entry(parent, name, dst, &mut deltas);
        self.put_entry(new_parent, new_name, src, &mut deltas);
        if parent != new_parent && src_is_dir != dst_is_dir {
            let (gains, loses) = if src_is_dir {
                (new_parent, parent)
            } else {
                (parent, new_parent)
            };
            self.inodes.get_mut(&gains).expect("checked").attr.nlink += 1;
            let from = &mut self.inodes.get_mut(&loses).expect("checked").attr;
            from.nlink = from.nlink.saturating_sub(1);
        }
        for (ino, is_dir, now_in) in [
            (src.ino, src_is_dir, new_parent),
            (dst.ino, dst_is_dir, parent),
        ] {
            let rec = self.inodes.get_mut(&ino).expect("checked");
            rec.attr.ctime = now;
            let _ = is_dir;
            rec.parent = now_in;
            deltas.push(Delta::PutInode(rec.clone()));
        }
        self.touch_dirs(&[parent, new_parent], now, &mut deltas);
        self.apply_move(&moving_src, &mut deltas);
        self.apply_move(&moving_dst, &mut deltas);
        Ok(done(deltas))
    }

    /// Sets the change times of directories whose entries changed.
    fn touch_dirs(&mut self, dirs: &[u64], now: Time, deltas: &mut Vec<Delta>) {
        let mut seen = Vec::new();
        for ino in dirs {
            if seen.contains(ino) {
                continue;
            }
            seen.push(*ino);
            if let Some(rec) = self.inodes.get_mut(ino) {
                rec.attr.mtime = now;
                rec.attr.ctime = now;
                deltas.push(Delta::PutInode(rec.clone()));
            }
        }
    }

    /// Entries after `cookie`, in cookie order: from the fragment that
    /// holds the cookie's names on, one fragment after another.
    fn read_dir(&self, ino: u64, cookie: u64, max: u32) -> Result<Outcome, Stop> {
        let rec = self.inode(ino)?;
        if !is_dir(rec) {
            return Err(errno(libc::ENOTDIR));
        }
        let max = max.clamp(1, cairn_proto::mds::READDIR_ENTRIES_MAX) as usize;
        let mut entries = Vec::new();
        let start = cookie.saturating_add(1);
        let tree = tree_of(rec);
        // Cookies are below 2^62: past that there is nothing.
        let Some(start_hash) = start.checked_mul(4) else {
            return Ok(done_with(MdsAnswer::Entries { entries, eof: true }, vec![]));
        };
        let first = tree
            .iter()
            .position(|f| f.last_hash() >= start_hash)
            .unwrap_or(tree.len());
        for (i, frag) in tree.iter().enumerate().skip(first) {
            let cached = self
                .dirs
                .get(&ino)
                .and_then(|d| d.frags.get(frag))
                .ok_or(Stop::Need(Need::Frag(ino, *frag)))?;
            let mut range = cached.by_cookie.range(start..);
            for (c, (name, dentry)) in range.by_ref().take(max - entries.len()) {
                entries.push(DirEntry {
                    name: name.clone(),
                    ino: dentry.ino,
                    kind: dentry.kind,
                    cookie: *c,
                });
            }
            if entries.len() == max {
                // Past the last fragment's last entry is the end; else
                // the next call says.
                let eof = i + 1 == tree.len() && range.next().is_none();
                return Ok(done_with(MdsAnswer::Entries { entries, eof }, vec![]));
            }
        }
        Ok(done_with(MdsAnswer::Entries { entries, eof: true }, vec![]))
    }

    /// Splits the fragments `deltas` grew past the split size, and merges
    /// those they shrank with their siblings when all are small (CephFS's
    /// `mds_bal_merge_size`, here a quarter of the split size).
    fn refrag(&mut self, deltas: &mut Vec<Delta>) {
        let mut grown = BTreeSet::new();
        let mut shrunk = BTreeSet::new();
        for d in deltas.iter() {
            match d {
                Delta::PutDentry { dir, frag, .. } => {
                    grown.insert((*dir, *frag));
                }
                Delta::DropDentry { dir, frag, .. } => {
                    shrunk.insert((*dir, *frag));
                }
                _ => {}
            }
        }
        for (dir, frag) in grown {
            let big = self
                .dirs
                .get(&dir)
                .and_then(|d| d.frags.get(&frag))
                .is_some_and(|f| f.len() > self.split_entries);
            if big && frag.bits + SPLIT_BITS <= Frag::BITS_MAX {
                self.replace_frags(dir, &[frag], &frag.split(SPLIT_BITS), deltas);
            }
        }
        for (dir, frag) in shrunk {
            let mut frag = frag;
            // A merge may leave the merged fragment small among small
            // siblings: up the tree while it does.
            while self.merge_siblings(dir, frag, deltas) {
                frag = frag.parent(SPLIT_BITS);
            }
        }
    }

    /// Merges `frag` with its siblings into their parent fragment if all
    /// are leaves, loaded, and hold a quarter of the split size together.
    fn merge_siblings(&mut self, dir: u64, frag: Frag, deltas: &mut Vec<Delta>) -> bool {
        if frag.bits < SPLIT_BITS {
            return false;
        }
        let parent = frag.parent(SPLIT_BITS);
        let siblings = parent.split(SPLIT_BITS);
        let (Some(rec), Some(cached)) = (self.inodes.get(&dir), self.dirs.get(&dir)) else {
            return false;
        };
        // A sibling gone already, or split further, stops it.
        let mut total = 0;
        for s in &siblings {
            match cached.frags.get(s) {
                Some(f) if rec.frags.contains(s) => total += f.len(),
                _ => return false,
            }
        }
        if total > self.split_entries / 4 {
            return false;
        }
        self.replace_frags(dir, &siblings, &[parent], deltas);
        true
    }

    /// Replaces loaded fragments `from` of `dir` by `to` (covering the
    /// same hashes), moving their entries, with the deltas that store it.
    fn replace_frags(&mut self, dir: u64, from: &[Frag], to: &[Frag], deltas: &mut Vec<Delta>) {
        self.clock += 1;
        let clock = self.clock;
        let (Some(rec), Some(cached)) = (self.inodes.get_mut(&dir), self.dirs.get_mut(&dir)) else {
            return;
        };
        let mut entries = Vec::new();
        for f in from {
            if let Some(old) = cached.frags.remove(f) {
                entries.extend(old.into_entries());
            }
        }
        let mut fresh: BTreeMap<Frag, FragCache> =
            to.iter().map(|f| (*f, FragCache::new(*f, []))).collect();
        for (name, dentry) in &entries {
            let f = frag_of(to, name_hash(name));
            if let Some(c) = fresh.get_mut(&f) {
                c.insert(name.clone(), *dentry);
            }
        }
        for (f, mut c) in fresh {
            c.last_used = clock;
            cached.frags.insert(f, c);
        }
        let mut tree: Vec<Frag> = tree_of(rec)
            .into_iter()
            .filter(|f| !from.contains(f))
            .chain(to.iter().copied())
            .collect();
        tree.sort_by_key(|f| f.first_hash());
        rec.frags = if tree == [Frag::WHOLE] {
            Vec::new()
        } else {
            tree
        };
        tracing::info!(
            dir = format_args!("{dir:x}"),
            entries = entries.len(),
            from = from.len(),
            to = to.len(),
            "directory refragmented"
        );
        deltas.push(Delta::Refrag {
            dir,
            from: from.to_vec(),
            to: to.to_vec(),
            entries,
        });
        deltas.push(Delta::PutInode(rec.clone()));
    }

    fn set_attr(&mut self, ino: u64, set: &SetAttr, now: Time) -> Result<Outcome, Stop> {
        let mut rec = self.inode(ino)?.clone();
        let mut grown = Usage::default();
        let mut realms = Vec::new();
        if let Some(size) = set.size
            && rec.attr.mode & S_IFMT == S_IFREG
            && size != rec.attr.size
        {
            grown = Usage::new(0, to_i64(size) - to_i64(rec.attr.size));
            realms = self.realms(rec.parent)?;
            self.check_room(&realms, grown)?;
        }
        if let Some(mode) = set.mode {
            rec.attr.mode = (rec.attr.mode & S_IFMT) | (mode & 0o7777);
        }
        if let Some(uid) = set.uid {
            rec.attr.uid = uid;
        }
        if let Some(gid) = set.gid {
            rec.attr.gid = gid;
        }
        let mut deltas = Vec::new();
        if let Some(size) = set.size {
            if is_dir(&rec) {
                return Err(errno(libc::EISDIR));
            }
            if rec.attr.mode & S_IFMT != S_IFREG {
                return Err(errno(libc::EINVAL));
            }
            // A truncate changes the time even when the size stays
            // (Linux's `O_TRUNC` of an empty file, `truncate` to the same
            // size).
            rec.attr.size = size;
            resize_inline(&mut rec, self.inline_max)?;
            rec.attr.mtime = now;
        }
        if let Some(t) = set.atime {
            rec.attr.atime = apply_time(t, now);
        }
        if let Some(t) = set.mtime {
            rec.attr.mtime = apply_time(t, now);
        }
        rec.attr.ctime = now;
        let attr = rec.attr.clone();
        deltas.push(Delta::PutInode(rec.clone()));
        self.inodes.insert(ino, rec);
        self.charge(&realms, grown, &mut deltas);
        Ok(attr_answer(attr, deltas))
    }

    fn open(&mut self, ino: u64, truncate: bool, now: Time) -> Result<Outcome, Stop> {
        let rec = self.inode(ino)?;
        if rec.attr.nlink == 0 {
            return Err(errno(libc::ENOENT));
        }
        let mut deltas = Vec::new();
        let mut attr = rec.attr.clone();
        if truncate && rec.attr.mode & S_IFMT == S_IFREG && rec.attr.size > 0 {
            let realms = self.realms(rec.parent)?;
            let freed = Usage::new(0, -to_i64(rec.attr.size));
            let rec = self.inode(ino)?;
            let mut rec = rec.clone();
            rec.attr.size = 0;
            rec.attr.mtime = now;
            rec.attr.ctime = now;
            if let Some(data) = &mut rec.inline {
                data.clear();
            }
            attr = rec.attr.clone();
            deltas.push(Delta::PutInode(rec.clone()));
            self.inodes.insert(ino, rec);
            self.charge(&realms, freed, &mut deltas);
        }
        *self.opens.entry(ino).or_default() += 1;
        let inline = self.inode(ino)?.inline.clone();
        Ok(done_with(MdsAnswer::Opened { attr, inline }, deltas))
    }

    fn release(&mut self, ino: u64) -> Outcome {
        let Some(count) = self.opens.get_mut(&ino) else {
            return done(Vec::new());
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return done(Vec::new());
        }
        self.opens.remove(&ino);
        let orphan = self.inodes.get(&ino).is_some_and(|r| r.attr.nlink == 0);
        if orphan {
            return done(self.forget(ino));
        }
        done(Vec::new())
    }

    /// Forgets every open of a session that went away (`counts`: opens
    /// per inode it held).
    pub fn release_all(&mut self, counts: &HashMap<u64, u32>) -> Vec<Delta> {
        let mut deltas = Vec::new();
        for (ino, n) in counts {
            for _ in 0..*n {
                deltas.extend(self.release(*ino).deltas);
            }
        }
        deltas
    }

    fn written(&mut self, ino: u64, size: u64, mtime: Time) -> Result<Outcome, Stop> {
        let mut rec = self.inode(ino)?.clone();
        if rec.attr.mode & S_IFMT != S_IFREG {
            return Err(errno(libc::EINVAL));
        }
        let grown = size > rec.attr.size;
        if !grown && mtime <= rec.attr.mtime {
            return Ok(attr_answer(rec.attr, vec![]));
        }
        let added = Usage::new(0, to_i64(size.max(rec.attr.size)) - to_i64(rec.attr.size));
        let realms = if grown {
            self.realms(rec.parent)?
        } else {
            Vec::new()
        };
        self.check_room(&realms, added)?;
        rec.attr.size = rec.attr.size.max(size);
        rec.attr.mtime = rec.attr.mtime.max(mtime);
        rec.attr.ctime = rec.attr.ctime.max(mtime);
        // The data is in objects now. A file still inline here had none
        // (its maker wrote them under its buffer lease); the server moved
        // any it had first ([`needs_objects`]).
        if rec.inline.as_ref().is_some_and(|d| !d.is_empty()) {
            return Err(errno(libc::EIO));
        }
        rec.inline = None;
        let attr = rec.attr.clone();
        let mut deltas = vec![Delta::PutInode(rec.clone())];
        self.inodes.insert(ino, rec);
        self.charge(&realms, added, &mut deltas);
        Ok(attr_answer(attr, deltas))
    }

    /// Writes `ranges` into an inline file's data (the server moved it to
    /// objects first if it would outgrow the limit: [`needs_objects`]).
    fn write_inline(
        &mut self,
        ino: u64,
        ranges: &[(u64, ByteBuf)],
        size: u64,
        mtime: Time,
    ) -> Result<Outcome, Stop> {
        let rec = self.inode(ino)?;
        if rec.attr.mode & S_IFMT != S_IFREG {
            return Err(errno(libc::EINVAL));
        }
        let end = inline_end(rec, ranges, size).ok_or(errno(libc::EFBIG))?;
        if rec.inline.is_none() || end > self.inline_max {
            // The server writes these to the objects instead
            // ([`needs_objects`]).
            return Err(errno(libc::EIO));
        }
        let mut rec = rec.clone();
        let added = Usage::new(0, to_i64(end) - to_i64(rec.attr.size));
        let realms = if end > rec.attr.size {
            self.realms(rec.parent)?
        } else {
            Vec::new()
        };
        self.check_room(&realms, added)?;
        rec.attr.size = end;
        let data = rec.inline.get_or_insert_with(ByteBuf::new);
        data.resize(usize::try_from(end).unwrap_or(usize::MAX), 0);
        for (offset, bytes) in ranges {
            let at = usize::try_from(*offset).unwrap_or(usize::MAX);
            data[at..at + bytes.len()].copy_from_slice(bytes);
        }
        rec.attr.mtime = rec.attr.mtime.max(mtime);
        rec.attr.ctime = rec.attr.ctime.max(mtime);
        let attr = rec.attr.clone();
        let mut deltas = vec![Delta::PutInode(rec.clone())];
        self.inodes.insert(ino, rec);
        self.charge(&realms, added, &mut deltas);
        Ok(attr_answer(attr, deltas))
    }

    /// Whether `op` needs an inline file's data moved to its objects
    /// before it runs (the file's number), or, for a `WriteInline`, its
    /// ranges written to the objects (`Some` with `true`).
    #[must_use]
    pub fn needs_objects(&self, op: &MdsOp) -> Option<(u64, bool)> {
        let rec_of = |ino: &u64| self.inodes.get(ino);
        match op {
            MdsOp::Uninline { ino } => rec_of(ino)?.inline.as_ref().map(|_| (*ino, false)),
            MdsOp::WriteInline {
                ino, ranges, size, ..
            } => {
                let rec = rec_of(ino)?;
                let fits = rec.inline.is_some()
                    && inline_end(rec, ranges, *size).is_some_and(|e| e <= self.inline_max);
                (!fits).then_some((*ino, true))
            }
            MdsOp::SetAttr { ino, set } => {
                let rec = rec_of(ino)?;
                let data = rec.inline.as_ref()?;
                let size = set.size?;
                (size > self.inline_max && !data.is_empty()).then_some((*ino, false))
            }
            MdsOp::Written { ino, .. } => {
                let data = rec_of(ino)?.inline.as_ref()?;
                (!data.is_empty()).then_some((*ino, false))
            }
            _ => None,
        }
    }

    fn set_xattr(
        &mut self,
        ino: u64,
        (name, value): (&ByteBuf, &ByteBuf),
        flags: u32,
        caller: Caller,
        now: Time,
    ) -> Result<Outcome, Stop> {
        check_xattr_name(name)?;
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(errno(libc::E2BIG));
        }
        if quota::is_usage(name) {
            return Err(errno(libc::EPERM));
        }
        if quota::is_limit(name) {
            return self.set_limit(ino, (name, value), flags, caller, now);
        }
        let mut rec = self.inode(ino)?.clone();
        if name.as_slice() == LAYOUT_XATTR {
            let layout = parse_layout(value).ok_or(errno(libc::EINVAL))?;
            if !is_dir(&rec) && rec.attr.size > 0 {
                // Data already laid out stays where it is.
                return Err(errno(libc::ENOTEMPTY));
            }
            rec.attr.layout = layout;
        } else {
            let existing = rec.xattrs.iter().position(|(n, _)| n == name);
            match existing {
                Some(_) if flags & XATTR_CREATE != 0 => return Err(errno(libc::EEXIST)),
                None if flags & XATTR_REPLACE != 0 => return Err(errno(libc::ENODATA)),
                Some(i) => rec.xattrs[i].1 = value.clone(),
                None => rec.xattrs.push((name.clone(), value.clone())),
            }
        }
        rec.attr.ctime = now;
        let deltas = vec![Delta::PutInode(rec.clone())];
        self.inodes.insert(ino, rec);
        Ok(done(deltas))
    }

    /// Sets (or, with 0, lifts) a quota limit of a directory; a directory
    /// that becomes a realm counts its subtree first.
    fn set_limit(
        &mut self,
        ino: u64,
        (name, value): (&ByteBuf, &ByteBuf),
        flags: u32,
        caller: Caller,
        now: Time,
    ) -> Result<Outcome, Stop> {
        if caller.uid != 0 {
            return Err(errno(libc::EPERM));
        }
        let limit: u64 = std::str::from_utf8(value)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or(errno(libc::EINVAL))?;
        let rec = self.inode(ino)?;
        if !is_dir(rec) {
            return Err(errno(libc::ENOTDIR));
        }
        let absent = xattr_absent(rec, name);
        if flags & XATTR_CREATE != 0 && !absent {
            return Err(errno(libc::EEXIST));
        }
        if flags & XATTR_REPLACE != 0 && absent {
            return Err(errno(libc::ENODATA));
        }
        let counted = quota::is_realm(rec) && quota::xattr_u64(rec, quota::RFILES_XATTR).is_some();
        let below = if counted {
            None
        } else {
            Some(self.walk_usage(ino)?)
        };
        let mut rec = self.inode(ino)?.clone();
        if limit == 0 {
            quota::remove_xattr(&mut rec, name);
        } else {
            quota::set_xattr_u64(&mut rec, name, limit);
        }
        if !quota::is_realm(&rec) {
            quota::remove_xattr(&mut rec, quota::RFILES_XATTR);
            quota::remove_xattr(&mut rec, quota::RBYTES_XATTR);
        } else if let Some(below) = below {
            quota::set_xattr_u64(&mut rec, quota::RFILES_XATTR, below.files.unsigned_abs());
            quota::set_xattr_u64(&mut rec, quota::RBYTES_XATTR, below.bytes.unsigned_abs());
        }
        rec.attr.ctime = now;
        let deltas = vec![Delta::PutInode(rec.clone())];
        self.inodes.insert(ino, rec);
        Ok(done(deltas))
    }

    /// The usage a move of `ino` into `to_dir` takes out of the realms it
    /// leaves and into those it joins (`EDQUOT` if they have no room).
    fn moving_usage(&self, ino: u64, to_dir: u64) -> Result<Move, Stop> {
        let rec = self.inode(ino)?;
        let from = self.realms(rec.parent)?;
        let to = self.realms(to_dir)?;
        if from == to {
            return Ok(Move::default());
        }
        let usage = if is_dir(rec) {
            let below = self.subtree_usage(ino)?;
            Usage::new(below.files + 1, below.bytes)
        } else {
            Usage::new(1, regular_bytes(rec))
        };
        let leaving: Vec<u64> = from.iter().filter(|r| !to.contains(r)).copied().collect();
        let joining: Vec<u64> = to.iter().filter(|r| !from.contains(r)).copied().collect();
        self.check_room(&joining, usage)?;
        Ok(Move {
            leaving,
            joining,
            usage,
        })
    }

    fn apply_move(&mut self, m: &Move, deltas: &mut Vec<Delta>) {
        self.charge(&m.leaving, -m.usage, deltas);
        self.charge(&m.joining, m.usage, deltas);
    }

    fn get_xattr(&self, ino: u64, name: &ByteBuf) -> Result<Outcome, Stop> {
        check_xattr_name(name)?;
        let rec = self.inode(ino)?;
        if quota::is_usage(name) && is_dir(rec) {
            let usage = self.subtree_usage(ino)?;
            let value = if name.as_slice() == quota::RFILES_XATTR {
                usage.files
            } else {
                usage.bytes
            };
            return Ok(done_with(
                MdsAnswer::Value(ByteBuf::from(value.to_string().into_bytes())),
                vec![],
            ));
        }
        if name.as_slice() == LAYOUT_XATTR {
            let l = rec.attr.layout;
            let text = format!(
                "object_size={} stripe_unit={} stripe_count={}",
                l.object_size, l.stripe_unit, l.stripe_count
            );
            return Ok(done_with(
                MdsAnswer::Value(ByteBuf::from(text.into_bytes())),
                vec![],
            ));
        }
        match rec.xattrs.iter().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(done_with(MdsAnswer::Value(v.clone()), vec![])),
            None => Err(errno(libc::ENODATA)),
        }
    }

    fn remove_xattr(&mut self, ino: u64, name: &ByteBuf, now: Time) -> Result<Outcome, Stop> {
        check_xattr_name(name)?;
        let mut rec = self.inode(ino)?.clone();
        let Some(i) = rec.xattrs.iter().position(|(n, _)| n == name) else {
            return Err(errno(libc::ENODATA));
        };
        rec.xattrs.remove(i);
        rec.attr.ctime = now;
        let deltas = vec![Delta::PutInode(rec.clone())];
        self.inodes.insert(ino, rec);
        Ok(done(deltas))
    }
}

/// Usage moving between realms with a rename.
#[derive(Debug, Default)]
struct Move {
    leaving: Vec<u64>,
    joining: Vec<u64>,
    usage: Usage,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The bytes a quota counts for an inode: a regular file's size.
fn regular_bytes(rec: &InodeRec) -> i64 {
    if rec.attr.mode & S_IFMT == S_IFREG {
        to_i64(rec.attr.size)
    } else {
        0
    }
}

/// The size an inline file would have after `ranges` and a size report of
/// `size`; `None` past what memory can hold.
fn inline_end(rec: &InodeRec, ranges: &[(u64, ByteBuf)], size: u64) -> Option<u64> {
    let mut end = rec.attr.size.max(size);
    for (offset, bytes) in ranges {
        end = end.max(offset.checked_add(bytes.len() as u64)?);
    }
    usize::try_from(end).ok().map(|_| end)
}

/// Cuts or zero-extends an inline file's data to its size. A size past
/// the limit leaves only an empty file's data behind (a non-empty one was
/// moved to objects first: [`Namespace::needs_objects`]).
fn resize_inline(rec: &mut InodeRec, inline_max: u64) -> Result<(), Stop> {
    let size = rec.attr.size;
    let Some(data) = &mut rec.inline else {
        return Ok(());
    };
    if size > inline_max {
        if !data.is_empty() {
            return Err(errno(libc::EIO));
        }
        rec.inline = None;
        return Ok(());
    }
    data.resize(usize::try_from(size).map_err(|_| errno(libc::EFBIG))?, 0);
    Ok(())
}

fn xattr_absent(rec: &InodeRec, name: &[u8]) -> bool {
    !rec.xattrs.iter().any(|(n, _)| n.as_slice() == name)
}

struct NewNode {
    mode: u32,
    rdev: u32,
    target: Option<ByteBuf>,
    open: bool,
}

fn check_xattr_name(name: &[u8]) -> Result<(), Stop> {
    if name.is_empty() {
        return Err(errno(libc::EINVAL));
    }
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(errno(libc::ERANGE));
    }
    let prefixes = [&b"user."[..], b"trusted.", b"security."];
    if prefixes.contains(&name) {
        return Err(errno(libc::EINVAL));
    }
    let ours = name == LAYOUT_XATTR || quota::is_limit(name) || quota::is_usage(name);
    if !ours && !prefixes.iter().any(|p| name.starts_with(p)) {
        // system.posix_acl_* and unknown namespaces: no ACL support.
        return Err(errno(libc::EOPNOTSUPP));
    }
    Ok(())
}

/// Reads `object_size=N stripe_unit=N stripe_count=N` (any subset, the
/// rest from the default layout).
#[must_use]
pub fn parse_layout(value: &[u8]) -> Option<Layout> {
    let text = std::str::from_utf8(value).ok()?;
    let mut layout = Layout::default();
    for part in text.split_whitespace() {
        let (key, number) = part.split_once('=')?;
        let number: u32 = number.parse().ok()?;
        match key {
            "object_size" => layout.object_size = number,
            "stripe_unit" => layout.stripe_unit = number,
            "stripe_count" => layout.stripe_count = number,
            _ => return None,
        }
    }
    layout.is_valid().then_some(layout)
}

fn done(deltas: Vec<Delta>) -> Outcome {
    Outcome {
        answer: MdsAnswer::Done,
        deltas,
    }
}

fn done_with(answer: MdsAnswer, deltas: Vec<Delta>) -> Outcome {
    Outcome { answer, deltas }
}

fn attr_answer(attr: Attr, deltas: Vec<Delta>) -> Outcome {
    Outcome {
        answer: MdsAnswer::Attr(attr),
        deltas,
    }
}

/// A `Create` of `name` in `parent` with `mode` (tests).
#[cfg(test)]
pub(crate) fn create_op(parent: u64, name: &str, mode: u32) -> MdsOp {
    MdsOp::Create {
        parent,
        name: ByteBuf::from(name.as_bytes().to_vec()),
        mode,
        umask: 0,
        rdev: 0,
        open: false,
        ino: None,
        time: None,
    }
}

#[cfg(test)]
mod inline_tests {
    use super::*;

    fn root_with_frag(ns: &mut Namespace) {
        ns.insert_inode(Namespace::root_inode(Time::default()));
        ns.insert_frag(ROOT_INO, Frag::WHOLE, []);
    }

    fn run(ns: &mut Namespace, op: &MdsOp) -> Result<Outcome, Stop> {
        ns.execute(op, Caller::default(), Time { sec: 5, nsec: 0 })
    }

    fn write(ino: u64, offset: u64, bytes: &[u8]) -> MdsOp {
        MdsOp::WriteInline {
            ino,
            ranges: vec![(offset, ByteBuf::from(bytes.to_vec()))],
            size: 0,
            mtime: Time { sec: 6, nsec: 0 },
        }
    }

    fn data(ns: &Namespace, ino: u64) -> Option<Vec<u8>> {
        ns.inline_data(ino).map(|d| d.to_vec())
    }

    #[test]
    fn small_files_keep_their_data_until_they_outgrow_the_limit() {
        let mut ns = Namespace::new(2, 2);
        root_with_frag(&mut ns);
        ns.set_inline_max(16);
        let made = run(&mut ns, &create_op(ROOT_INO, "f", S_IFREG | 0o644)).expect("create");
        let MdsAnswer::Attr(attr) = made.answer else {
            panic!("no attr")
        };
        let ino = attr.ino;
        assert_eq!(data(&ns, ino), Some(Vec::new()));
        // Writes land in the record, holes read as zeros.
        let out = run(&mut ns, &write(ino, 2, b"abc")).expect("write");
        assert!(matches!(&out.deltas[0], Delta::PutInode(r) if r.inline.is_some()));
        assert_eq!(data(&ns, ino), Some(b"\0\0abc".to_vec()));
        assert_eq!(ns.inode_rec(ino).expect("rec").attr.size, 5);
        run(&mut ns, &write(ino, 0, b"xy")).expect("write");
        assert_eq!(data(&ns, ino), Some(b"xyabc".to_vec()));
        // A truncate cuts or zero-extends the kept bytes.
        let cut = MdsOp::SetAttr {
            ino,
            set: SetAttr {
                size: Some(3),
                ..SetAttr::default()
            },
        };
        run(&mut ns, &cut).expect("truncate");
        assert_eq!(data(&ns, ino), Some(b"xya".to_vec()));
        // Past the limit the server must move the data first.
        assert_eq!(
            ns.needs_objects(&write(ino, 10, b"0123456789")),
            Some((ino, true))
        );
        assert_eq!(ns.needs_objects(&write(ino, 3, b"z")), None);
        assert_eq!(
            ns.needs_objects(&MdsOp::Uninline { ino }),
            Some((ino, false))
        );
        let grow = MdsOp::SetAttr {
            ino,
            set: SetAttr {
                size: Some(100),
                ..SetAttr::default()
            },
        };
        assert_eq!(ns.needs_objects(&grow), Some((ino, false)));
        let moved = ns.uninlined(ino);
        assert!(matches!(&moved[..], [Delta::PutInode(r)] if r.inline.is_none()));
        assert_eq!(ns.needs_objects(&MdsOp::Uninline { ino }), None);
        // Out of the MDS for good: writes go to objects, and its removal
        // purges them.
        assert_eq!(ns.needs_objects(&write(ino, 0, b"q")), Some((ino, true)));
        let unlink = MdsOp::Unlink {
            parent: ROOT_INO,
            name: ByteBuf::from(b"f".to_vec()),
            time: None,
        };
        let gone = run(&mut ns, &unlink).expect("unlink");
        assert!(gone.deltas.iter().any(|d| matches!(d, Delta::Purge { .. })));
    }

    #[test]
    fn an_inline_file_removed_has_no_objects_to_purge() {
        let mut ns = Namespace::new(2, 2);
        root_with_frag(&mut ns);
        ns.set_inline_max(4096);
        let made = run(&mut ns, &create_op(ROOT_INO, "g", S_IFREG | 0o644)).expect("create");
        let MdsAnswer::Attr(attr) = made.answer else {
            panic!("no attr")
        };
        run(&mut ns, &write(attr.ino, 0, b"hello")).expect("write");
        let open = MdsOp::Open {
            ino: attr.ino,
            truncate: false,
        };
        let opened = run(&mut ns, &open).expect("open");
        assert!(matches!(
            opened.answer,
            MdsAnswer::Opened { inline: Some(ref d), .. } if d.as_slice() == b"hello"
        ));
        run(&mut ns, &MdsOp::Release { ino: attr.ino }).expect("release");
        let unlink = MdsOp::Unlink {
            parent: ROOT_INO,
            name: ByteBuf::from(b"g".to_vec()),
            time: None,
        };
        let gone = run(&mut ns, &unlink).expect("unlink");
        assert!(gone.deltas.iter().any(|d| matches!(d, Delta::DropInode(_))));
        assert!(!gone.deltas.iter().any(|d| matches!(d, Delta::Purge { .. })));
        // With inline data off, new files start in objects.
        ns.set_inline_max(0);
        let made = run(&mut ns, &create_op(ROOT_INO, "h", S_IFREG | 0o644)).expect("create");
        let MdsAnswer::Attr(attr) = made.answer else {
            panic!("no attr")
        };
        assert_eq!(data(&ns, attr.ino), None);
    }
}

#[cfg(test)]
mod ino_reservation_tests {
    use super::*;

    fn create(ns: &mut Namespace, name: &str) -> (u64, bool) {
        let out = ns
            .execute(
                &create_op(ROOT_INO, name, S_IFREG | 0o644),
                Caller::default(),
                Time::default(),
            )
            .expect("create");
        let MdsAnswer::Attr(attr) = out.answer else {
            panic!("no attr")
        };
        (attr.ino, ns.take_ino_undurable())
    }

    #[test]
    fn no_number_is_answered_before_its_reservation_is_durable() {
        // A new MDS starts from the durable mark: anything it could hand
        // out again must wait for the entry reserving it.
        let mut ns = Namespace::new(100, 100);
        ns.insert_inode(Namespace::root_inode(Time::default()));
        ns.insert_frag(ROOT_INO, Frag::WHOLE, []);
        let (ino, undurable) = create(&mut ns, "a");
        assert_eq!(ino, 100);
        assert!(undurable, "past the durable mark");
        let reserved = ns.ino_reserved();
        assert!(reserved >= 100 + INO_RESERVE_STEP);
        // The reservation is durable now: the next numbers need not wait,
        // and the mark moves on half a step before it is reached.
        ns.set_ino_durable(reserved);
        let (ino, undurable) = create(&mut ns, "b");
        assert_eq!(ino, 101);
        assert!(!undurable);
        let mut n = 0;
        while ns.ino_reserved() == reserved {
            let (ino, undurable) = create(&mut ns, &format!("c{n}"));
            assert!(!undurable, "{ino} waited");
            n += 1;
        }
        assert!(ns.ino_reserved() > reserved);
        assert!(
            ns.next_ino + INO_RESERVE_STEP / 2 <= reserved + 1,
            "renewed half a step before the mark"
        );
        // A replay keeps its number; a number taken gets a fresh one.
        let replay = MdsOp::Create {
            parent: ROOT_INO,
            name: ByteBuf::from(b"r".to_vec()),
            mode: S_IFREG | 0o644,
            umask: 0,
            rdev: 0,
            open: false,
            ino: Some(101),
            time: None,
        };
        let out = ns
            .execute(&replay, Caller::default(), Time::default())
            .expect("replay");
        let MdsAnswer::Attr(attr) = out.answer else {
            panic!("no attr")
        };
        assert_ne!(attr.ino, 101);
    }
}

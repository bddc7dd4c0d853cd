//! File-system clients ↔ the metadata server (MDS).
//!
//! Message kinds `0x0300..=0x03ff` belong to the MDS; they are frozen once
//! assigned.
//!
//! | kind | message | direction |
//! |---|---|---|
//! | `0x0300` | [`MdsRequest`] | client → MDS, request |
//! | `0x0301` | [`MdsReply`] | MDS → client, response (also to any malformed request) |
//! | `0x0302` | [`MdsPoll`] | client → MDS, request held up to `wait_ms` |
//! | `0x0303` | [`MdsPollReply`] | MDS → client, response |
//!
//! A change is answered as soon as the MDS has applied it in its cache,
//! with the journal sequence number it will be durable under
//! (`MdsReply::journal_seq`); every reply carries the highest sequence
//! already durable (`durable_seq`). A client keeps each request whose
//! sequence is not yet durable ("unsafe") and sends it again, marked
//! `replay`, to the MDS that takes over after a crash. The poll is the
//! session's keep-alive and carries what the MDS has to tell the client
//! (the durable sequence and cache recalls), since the wire has no
//! server-initiated messages.
//!
//! Leases: every answer carrying an inode's attributes lets the asking
//! session cache them, and every `Lookup` (found or not), `Create`,
//! `Symlink` and `Link` lets it cache the entries of the parent
//! directory, for the session's lease time (`MdsAnswer::Session`) from
//! when the request was sent. Before a change by another session is
//! answered, the MDS sends each holder a [`Recall`] on its poll and waits
//! until the holder acknowledges it (the next poll's `recalled`), its
//! lease runs out, or the recall timeout passes; then the holder is
//! evicted (`MdsError::Evicted`).
//!
//! Buffer leases: a session that creates a regular file open
//! (`Create { open: true }`, answered `Created { buffer: true }`) may
//! keep data written to it past `close`
//! (the client then holds back its `Release`). Another session's request
//! that needs the file's size (a lookup answering it, `GetAttr`, `Open`,
//! `SetAttr`, `Link`, `Written`) waits at the MDS while the holder is sent
//! `Inval::Flush`; the holder's `Release` or `Returned` ends the lease.
//!
//! Directory delegations: a session that makes a directory outside any
//! quota limit (answered `Created { buffer: true }`) holds its
//! delegation, a buffer lease on the directory. While it holds it, it
//! knows every entry there and may answer creates of regular files (with
//! inode numbers from `TakeInos`), unlinks and releases there itself,
//! sending them later, in order, in a `Batch`. Another session's request
//! that reads or changes the directory (its entries or attributes) waits
//! while the holder is sent `Inval::Flush` of the directory; the holder
//! sends its batch and answers `Returned`.
//!
//! Errors are Linux errno values ([`Errno`]): the client hands them to the
//! kernel as they are.

use cairn_wire::Message;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

pub const KIND_MDS_REQUEST: u16 = 0x0300;
pub const KIND_MDS_REPLY: u16 = 0x0301;
pub const KIND_MDS_POLL: u16 = 0x0302;
pub const KIND_MDS_POLL_REPLY: u16 = 0x0303;

/// The root directory's inode number (FUSE's root).
pub const ROOT_INO: u64 = 1;

/// Inode number ranges (`TakeInos`) the MDS remembers per session and a
/// client reasserts after a failover: the latest ones. A client asks for
/// the next range when half of its current one is used, so creates from
/// older ones have long been applied.
pub const INO_RANGES_KEPT: usize = 8;

/// Longest name of one directory entry, in bytes (POSIX `NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;

/// Longest symlink target, in bytes (`PATH_MAX`).
pub const SYMLINK_BYTES_MAX: usize = 4096;

/// Longest xattr name, in bytes (Linux `XATTR_NAME_MAX`).
pub const XATTR_NAME_BYTES_MAX: usize = 255;

/// Largest xattr value, in bytes (Linux `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_BYTES_MAX: usize = 65_536;

/// Most entries one `ReadDir` answer carries.
pub const READDIR_ENTRIES_MAX: u32 = 4096;

/// Longest a poll is held.
pub const POLL_WAIT_MS_MAX: u32 = 10_000;

/// A Linux errno value (`ENOENT` is 2).
pub type Errno = i32;

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// How a file's data is striped into objects of the data pool (CephFS's
/// layout): stripe units of `stripe_unit` bytes go round-robin over
/// `stripe_count` objects of `object_size` bytes each, then the next set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub object_size: u32,
    pub stripe_unit: u32,
    pub stripe_count: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            object_size: 4 << 20,
            stripe_unit: 4 << 20,
            stripe_count: 1,
        }
    }
}

impl Layout {
    /// Whether the layout is usable: a stripe unit of at least 4 KiB that
    /// divides the object size, a stripe count of 1 to 256, objects of at
    /// most 1 GiB.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.stripe_unit >= 4096
            && self.object_size >= self.stripe_unit
            && self.object_size.is_multiple_of(self.stripe_unit)
            && (1..=256).contains(&self.stripe_count)
            && self.object_size <= 1 << 30
    }
}

/// One inode's attributes as clients see them. `mode` holds the file type
/// bits (`S_IFMT`) and the permission bits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub btime: Time,
    pub layout: Layout,
}

/// A time to set: the MDS's clock, or a given one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    At(Time),
}

/// The attributes a `SetAttr` changes (`None`: unchanged).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// Who asks: the calling process's credentials, for new inodes' owners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// One directory entry of a `ReadDir` answer. `cookie` is stable for the
/// entry's life: reading on after it never skips or repeats an entry that
/// stays in the directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: ByteBuf,
    pub ino: u64,
    /// `S_IFMT` bits of the entry's inode.
    pub kind: u32,
    pub cookie: u64,
}

/// `rename` flags (Linux's `renameat2`).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `setxattr` flags.
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

/// What a client asks of the MDS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsOp {
    /// Opens (or, with the same `session`, resumes) a session; answered
    /// with [`MdsAnswer::Session`].
    Hello {
        name: String,
    },
    Lookup {
        parent: u64,
        name: ByteBuf,
    },
    GetAttr {
        ino: u64,
    },
    SetAttr {
        ino: u64,
        set: SetAttr,
    },
    /// A new inode of the type in `mode` (file, directory, FIFO, socket,
    /// device) named `name` in `parent`. `ino` is set on a replay, to the
    /// number the first answer gave, and on an asynchronous create, to a
    /// number the MDS delegated to the session (`TakeInos`); `time` on an
    /// asynchronous create, to when the client answered it.
    Create {
        parent: u64,
        name: ByteBuf,
        mode: u32,
        umask: u32,
        rdev: u32,
        /// The creator opens it at once (`open(O_CREAT)`, not `mknod`).
        open: bool,
        ino: Option<u64>,
        time: Option<Time>,
    },
    Symlink {
        parent: u64,
        name: ByteBuf,
        target: ByteBuf,
        ino: Option<u64>,
    },
    Link {
        ino: u64,
        parent: u64,
        name: ByteBuf,
    },
    /// `time`: on an asynchronous unlink, when the client answered it.
    Unlink {
        parent: u64,
        name: ByteBuf,
        time: Option<Time>,
    },
    Rmdir {
        parent: u64,
        name: ByteBuf,
    },
    Rename {
        parent: u64,
        name: ByteBuf,
        new_parent: u64,
        new_name: ByteBuf,
        flags: u32,
    },
    /// Entries after `cookie` (0: from the start), at most `max`.
    ReadDir {
        ino: u64,
        cookie: u64,
        max: u32,
    },
    Readlink {
        ino: u64,
    },
    /// The client opens the file (the MDS keeps an unlinked file's data
    /// until every open is released); `truncate` empties it.
    Open {
        ino: u64,
        truncate: bool,
    },
    Release {
        ino: u64,
    },
    /// The client wrote data up to `size` (the size only grows this way)
    /// at `mtime`.
    Written {
        ino: u64,
        size: u64,
        mtime: Time,
    },
    SetXattr {
        ino: u64,
        name: ByteBuf,
        value: ByteBuf,
        flags: u32,
    },
    GetXattr {
        ino: u64,
        name: ByteBuf,
    },
    ListXattr {
        ino: u64,
    },
    RemoveXattr {
        ino: u64,
        name: ByteBuf,
    },
    StatFs,
    /// Answered once every change this session made before it is durable.
    Sync,
    /// An advisory byte-range lock (`fcntl`, and `flock` as a whole-file
    /// range) on `[start, end]` (inclusive) held by `owner` of the session;
    /// `LockKind::Unlock` releases. With `wait`, answered once granted;
    /// without, a conflict is `EAGAIN`.
    SetLock {
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
        kind: LockKind,
        pid: u32,
        wait: bool,
    },
    /// The first lock that conflicts with the one described, answered
    /// with [`MdsAnswer::Lock`].
    GetLock {
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
        kind: LockKind,
    },
    /// After a failover: the leases the session still holds from the
    /// previous MDS (attributes of `attrs`, entries of `dirs`, written
    /// data it still buffers of `buffers`).
    Reassert {
        attrs: Vec<u64>,
        dirs: Vec<u64>,
        buffers: Vec<u64>,
        /// Inode number ranges `[first, end)` an earlier MDS delegated to
        /// the session, whose creates may still be on their way.
        inos: Vec<(u64, u64)>,
    },
    /// The session buffers no written data of `ino` any more (it was sent
    /// to the OSDs and its size reported): its buffer lease ends.
    Returned {
        ino: u64,
    },
    /// Administration: every session, answered with
    /// [`MdsAnswer::Sessions`].
    Sessions,
    /// Administration: evicts a session (its leases, opens and locks go).
    Evict {
        session: u64,
    },
    /// Administration: the MDS's cache use and requests in flight,
    /// answered with [`MdsAnswer::Status`].
    Status,
    /// Delegates `count` fresh inode numbers to the session for its
    /// asynchronous creates, answered with [`MdsAnswer::Inos`].
    TakeInos {
        count: u32,
    },
    /// Changes a client answered itself under a directory delegation
    /// (asynchronous creates, unlinks, and releases), applied in order,
    /// each as the request it would be alone (its own `tid` and caller);
    /// answered with [`MdsAnswer::Batch`], one result per op.
    Batch {
        ops: Vec<BatchOp>,
    },
    /// Writes `ranges` (offset, bytes) of a file whose data the MDS keeps
    /// (inline data, for small files), growing it to at least `size`, at
    /// `mtime`; answered with the new attributes. The MDS moves the data
    /// to the file's objects first when the file would outgrow its inline
    /// limit, and writes the ranges there when it is not inline (then the
    /// answer waits until that is durable).
    WriteInline {
        ino: u64,
        ranges: Vec<(u64, ByteBuf)>,
        size: u64,
        mtime: Time,
    },
    /// Moves an inline file's data to its objects in the data pool, so the
    /// client may write there itself; answered with the attributes once
    /// that is durable.
    Uninline {
        ino: u64,
    },
    /// A file's attributes and, while it is inline, its data: answered
    /// with [`MdsAnswer::Opened`].
    ReadInline {
        ino: u64,
    },
}

/// One op of a [`MdsOp::Batch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOp {
    pub tid: u64,
    pub caller: Caller,
    pub op: MdsOp,
}

/// The result of one op of a [`MdsOp::Batch`], as its own reply would be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub result: Result<MdsAnswer, MdsError>,
    pub journal_seq: Option<u64>,
}

/// What a lock request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// A lock held, as `GetLock` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub start: u64,
    pub end: u64,
    pub kind: LockKind,
    pub pid: u32,
}

impl MdsOp {
    /// The operation's name, for logs and `cairn status`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            MdsOp::Hello { .. } => "Hello",
            MdsOp::Lookup { .. } => "Lookup",
            MdsOp::GetAttr { .. } => "GetAttr",
            MdsOp::SetAttr { .. } => "SetAttr",
            MdsOp::Create { .. } => "Create",
            MdsOp::Symlink { .. } => "Symlink",
            MdsOp::Link { .. } => "Link",
            MdsOp::Unlink { .. } => "Unlink",
            MdsOp::Rmdir { .. } => "Rmdir",
            MdsOp::Rename { .. } => "Rename",
            MdsOp::ReadDir { .. } => "ReadDir",
            MdsOp::Readlink { .. } => "Readlink",
            MdsOp::Open { .. } => "Open",
            MdsOp::Release { .. } => "Release",
            MdsOp::Written { .. } => "Written",
            MdsOp::WriteInline { .. } => "WriteInline",
            MdsOp::Uninline { .. } => "Uninline",
            MdsOp::ReadInline { .. } => "ReadInline",
            MdsOp::SetXattr { .. } => "SetXattr",
            MdsOp::GetXattr { .. } => "GetXattr",
            MdsOp::ListXattr { .. } => "ListXattr",
            MdsOp::RemoveXattr { .. } => "RemoveXattr",
            MdsOp::StatFs => "StatFs",
            MdsOp::Sync => "Sync",
            MdsOp::GetLock { .. } => "GetLock",
            MdsOp::SetLock { .. } => "SetLock",
            MdsOp::Reassert { .. } => "Reassert",
            MdsOp::Returned { .. } => "Returned",
            MdsOp::Sessions => "Sessions",
            MdsOp::Evict { .. } => "Evict",
            MdsOp::Status => "Status",
            MdsOp::TakeInos { .. } => "TakeInos",
            MdsOp::Batch { .. } => "Batch",
        }
    }

    /// The directory whose entries the asking session may cache once
    /// answered (a name looked up, found or not, or made).
    #[must_use]
    pub fn leased_dir(&self) -> Option<u64> {
        match self {
            MdsOp::Lookup { parent, .. }
            | MdsOp::Create { parent, .. }
            | MdsOp::Symlink { parent, .. }
            | MdsOp::Link { parent, .. } => Some(*parent),
            _ => None,
        }
    }

    /// The inodes the op names by number: the one it reads or changes, and
    /// the directories whose entries it reads or changes.
    #[must_use]
    pub fn inodes(&self) -> Vec<u64> {
        match self {
            MdsOp::GetAttr { ino }
            | MdsOp::SetAttr { ino, .. }
            | MdsOp::Open { ino, .. }
            | MdsOp::Written { ino, .. }
            | MdsOp::WriteInline { ino, .. }
            | MdsOp::Uninline { ino }
            | MdsOp::ReadInline { ino }
            | MdsOp::ReadDir { ino, .. }
            | MdsOp::SetXattr { ino, .. }
            | MdsOp::GetXattr { ino, .. }
            | MdsOp::ListXattr { ino }
            | MdsOp::RemoveXattr { ino, .. } => vec![*ino],
            MdsOp::Link { ino, parent, .. } => vec![*ino, *parent],
            MdsOp::Lookup { parent, .. }
            | MdsOp::Create { parent, .. }
            | MdsOp::Symlink { parent, .. }
            | MdsOp::Unlink { parent, .. }
            | MdsOp::Rmdir { parent, .. } => vec![*parent],
            MdsOp::Rename {
                parent, new_parent, ..
            } => vec![*parent, *new_parent],
            _ => Vec::new(),
        }
    }

    /// Bytes of file data the op carries (inline writes), for keeping
    /// batches inside a request body.
    #[must_use]
    pub fn data_bytes(&self) -> usize {
        match self {
            MdsOp::WriteInline { ranges, .. } => ranges.iter().map(|(_, b)| b.len() + 16).sum(),
            MdsOp::Batch { ops } => ops.iter().map(|b| b.op.data_bytes()).sum(),
            _ => 0,
        }
    }

    /// Whether the op changes the namespace (and so is journaled).
    #[must_use]
    pub fn is_change(&self) -> bool {
        matches!(
            self,
            MdsOp::SetAttr { .. }
                | MdsOp::Create { .. }
                | MdsOp::Symlink { .. }
                | MdsOp::Link { .. }
                | MdsOp::Unlink { .. }
                | MdsOp::Rmdir { .. }
                | MdsOp::Rename { .. }
                | MdsOp::Open { truncate: true, .. }
                | MdsOp::Written { .. }
                | MdsOp::WriteInline { .. }
                | MdsOp::Uninline { .. }
                | MdsOp::SetXattr { .. }
                | MdsOp::RemoveXattr { .. }
        )
    }
}

/// Request `KIND_MDS_REQUEST`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsRequest {
    /// The client's session id (random, chosen by the client).
    pub session: u64,
    /// Increasing per session; a replay keeps the first attempt's.
    pub tid: u64,
    pub caller: Caller,
    /// Sent again to a new MDS after a failover.
    pub replay: bool,
    pub op: MdsOp,
}

impl Message for MdsRequest {
    const KIND: u16 = KIND_MDS_REQUEST;
}

/// What the file system holds, for `statfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub files: u64,
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsAnswer {
    /// The session is open: the file system's data pool and root.
    Session {
        data_pool: String,
        root: Attr,
        /// Whether the MDS is still taking replays from reconnecting
        /// clients.
        replaying: bool,
        /// How long a lease lasts from when its request was sent.
        lease_ms: u32,
        /// Files up to this size keep their data in the MDS (inline
        /// data); 0: none do.
        inline_max: u32,
    },
    Attr(Attr),
    /// A regular file made open (`Create { open: true }`): its attributes,
    /// and whether its maker holds a buffer lease on it (none under a
    /// quota, so a quota refuses at `close` rather than later). A
    /// directory made: whether its maker holds its delegation (it may
    /// then answer creates and unlinks in it itself, sending them later
    /// in a `Batch`).
    Created {
        attr: Attr,
        buffer: bool,
    },
    Entries {
        entries: Vec<DirEntry>,
        eof: bool,
    },
    Value(ByteBuf),
    Names(Vec<ByteBuf>),
    StatFs(FsStat),
    Done,
    /// A conflicting lock, or none.
    Lock(Option<LockInfo>),
    Sessions(Vec<SessionInfo>),
    Status(MdsStatus),
    /// Inode numbers `[first, first + count)`, the session's to create.
    Inos {
        first: u64,
        count: u32,
    },
    Batch(Vec<BatchResult>),
    /// A file opened (or its inline data asked for): its attributes, and
    /// its data while the MDS keeps it (`None`: the data is in objects).
    Opened {
        attr: Attr,
        inline: Option<ByteBuf>,
    },
}

/// The MDS's own state, for `cairn status` and `cairn health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsStatus {
    /// Inodes and directories cached.
    pub cached_inodes: u64,
    pub cached_dirs: u64,
    /// The cache's estimated size, what it is trimmed to now, and the
    /// configured budget.
    pub cache_bytes: u64,
    pub cache_target_bytes: u64,
    pub cache_budget_bytes: u64,
    /// The process's resident memory.
    pub resident_bytes: u64,
    /// Requests being answered now.
    pub in_flight: u64,
    /// Requests in flight longer than `complaint_ms`, the oldest first (at
    /// most ten), and how many there are.
    pub slow: Vec<SlowRequest>,
    pub slow_now: u64,
    /// Requests answered late (past `complaint_ms`) since the MDS started.
    pub slow_total: u64,
    pub complaint_ms: u64,
    /// Removed files whose data objects the purge queue still deletes, as
    /// the purger last read a page of it; `purge_waiting_more`: that page
    /// was full, so there may be more.
    pub purge_waiting: u64,
    pub purge_waiting_more: bool,
    /// Files the purge queue emptied since this MDS started.
    pub purged_total: u64,
}

/// A request the MDS has been answering for long.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlowRequest {
    pub session: u64,
    /// The operation (`Create`, `Rename`, ...).
    pub op: String,
    pub age_ms: u64,
}

/// One session as the MDS sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: u64,
    /// The client's name (`host:pid` for a mount).
    pub name: String,
    /// Files it has open.
    pub opens: u64,
    /// Inodes and directories it holds leases on.
    pub leases: u64,
    /// Recalls sent and not yet acknowledged.
    pub recalls_pending: u64,
    /// Since its last request or poll.
    pub idle_ms: u64,
    /// Set for an evicted session: why.
    pub evicted: Option<String>,
}

/// What a holder must drop from its cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Inval {
    /// The inode's attributes and cached data.
    Inode(u64),
    /// One entry of a directory (found or not).
    Entry { parent: u64, name: ByteBuf },
    /// Written data of the inode the holder keeps past `close`: send it
    /// to the OSDs, report its size, and answer `Returned` (or
    /// `Release`). For a directory the holder has the delegation of: send
    /// every change it answered itself there, then answer `Returned`.
    Flush(u64),
}

/// A numbered cache recall (numbers increase per session).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recall {
    pub id: u64,
    pub inval: Inval,
}

/// Why an MDS request failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsError {
    /// A POSIX error for the caller.
    Errno(Errno),
    /// This MDS is not (or no longer) the active one: ask the monitor.
    NotActive,
    /// The MDS is starting up (replaying its journal or taking replays):
    /// try again shortly.
    Busy,
    /// The request does not decode or breaks a protocol limit.
    BadRequest(String),
    /// The session was evicted (why): its leases, opens and locks are
    /// gone; it may open again with `Hello` once its leases have run out.
    Evicted(String),
}

/// Response `KIND_MDS_REPLY`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsReply {
    pub result: Result<MdsAnswer, MdsError>,
    /// For a change: the journal sequence it becomes durable under.
    pub journal_seq: Option<u64>,
    /// Every change up to this sequence is durable.
    pub durable_seq: u64,
}

impl Message for MdsReply {
    const KIND: u16 = KIND_MDS_REPLY;
}

/// Request `KIND_MDS_POLL`: keeps the session alive; held until the
/// durable sequence passes `durable_seq` or `wait_ms` passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsPoll {
    pub session: u64,
    pub durable_seq: u64,
    pub wait_ms: u32,
    /// Every recall up to this number is done.
    pub recalled: u64,
}

impl Message for MdsPoll {
    const KIND: u16 = KIND_MDS_POLL;
}

/// Response `KIND_MDS_POLL_REPLY`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsPollReply {
    /// The durable sequence.
    pub result: Result<u64, MdsError>,
    /// Recalls not yet acknowledged.
    pub recalls: Vec<Recall>,
}

impl Message for MdsPollReply {
    const KIND: u16 = KIND_MDS_POLL_REPLY;
}

//! The FUSE shell: decodes kernel requests, runs them on [`State`] under its
//! lock, and replies. No file system logic lives here.

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::time::SystemTime;

use fuser::AccessFlags;
use fuser::BsdFileFlags;
use fuser::Errno;
use fuser::FileHandle;
use fuser::Filesystem;
use fuser::FopenFlags;
use fuser::Generation;
use fuser::INodeNo;
use fuser::LockOwner;
use fuser::OpenFlags;
use fuser::RenameFlags;
use fuser::ReplyAttr;
use fuser::ReplyCreate;
use fuser::ReplyData;
use fuser::ReplyDirectory;
use fuser::ReplyEmpty;
use fuser::ReplyEntry;
use fuser::ReplyOpen;
use fuser::ReplyStatfs;
use fuser::ReplyWrite;
use fuser::Request;
use fuser::TimeOrNow;
use fuser::WriteFlags;

use crate::limits::ATTR_TTL;
use crate::limits::ENTRY_TTL;
use crate::state::NewNode;
use crate::state::SetAttr;
use crate::state::State;

/// Direct I/O on every open file: the kernel keeps no page cache for this
/// file system, so reads after a power loss cannot return stale pages, and
/// every `write(2)` reaches the overlay at once, in order.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;

/// Locks the state, recovering it from a poisoned lock: a panic is already
/// reported by the thread that had it.
pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub(crate) struct LossyOps {
    pub(crate) state: Arc<Mutex<State>>,
    /// How long, in µs, an `O_DSYNC` write stays in flight (tearable by a
    /// power loss) before it is made durable; 0: no window.
    pub(crate) sync_write_window_us: Arc<std::sync::atomic::AtomicU64>,
}

impl LossyOps {
    fn sync_write_window(&self) -> Option<std::time::Duration> {
        let us = self
            .sync_write_window_us
            .load(std::sync::atomic::Ordering::Relaxed);
        (us > 0).then(|| std::time::Duration::from_micros(us))
    }

    /// Runs `op` on the state unless the file system is shutting down.
    fn with<T>(&self, op: impl FnOnce(&mut State) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut state = lock(&self.state);
        if state.is_shut_down() {
            return Err(Errno::EIO);
        }
        op(&mut state)
    }

    fn reply_entry(
        &self,
        reply: ReplyEntry,
        op: impl FnOnce(&mut State) -> Result<fuser::FileAttr, Errno>,
    ) {
        match self.with(|state| Ok((op(state)?, state.generation()))) {
            Ok((attr, generation)) => reply.entry(&ENTRY_TTL, &attr, Generation(generation)),
            Err(err) => reply.error(err),
        }
    }

    fn reply_empty(&self, reply: ReplyEmpty, op: impl FnOnce(&mut State) -> Result<(), Errno>) {
        match self.with(op) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }
}

fn new_node(req: &Request, mode: u32, umask: u32) -> NewNode {
    NewNode {
        mode,
        umask,
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl Filesystem for LossyOps {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.reply_entry(reply, |state| state.lookup(parent.0, name));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|state| state.attr(ino.0)) {
            Ok(attr) => reply.attr(&ATTR_TTL, &attr),
            Err(err) => reply.error(err),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size_bytes: size,
            atime,
            mtime,
            ctime,
        };
        match self.with(|state| state.setattr(ino.0, &set)) {
            Ok(attr) => reply.attr(&ATTR_TTL, &attr),
            Err(err) => reply.error(err),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        let node = new_node(req, mode, umask);
        self.reply_entry(reply, |state| state.mknod_file(parent.0, name, node));
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
        let node = new_node(req, mode, umask);
        self.reply_entry(reply, |state| state.mkdir(parent.0, name, node));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_empty(reply, |state| state.unlink(parent.0, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_empty(reply, |state| state.rmdir(parent.0, name));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| {
            state.rename((parent.0, name), (newparent.0, newname), flags)
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|state| state.open(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), OPEN_FLAGS),
            Err(err) => reply.error(err),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let node = new_node(req, mode, umask);
        match self.with(|state| Ok((state.create(parent.0, name, node)?, state.generation()))) {
            Ok(((attr, fh), generation)) => reply.created(
                &ENTRY_TTL,
                &attr,
                Generation(generation),
                FileHandle(fh),
                OPEN_FLAGS,
            ),
            Err(err) => reply.error(err),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|state| state.read(fh.0, offset, size)) {
            Ok(bytes) => reply.data(&bytes),
            Err(err) => reply.error(err),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel passes `O_DSYNC`/`O_SYNC` (of the open file or of this
        // one write) for the server to honour: such a write is durable when
        // it returns (its own range, as `generic_write_sync` flushes).
        let sync = flags.0 & (libc::O_DSYNC | libc::O_SYNC) != 0;
        let result = if !sync {
            self.with(|state| state.write(fh.0, offset, data))
        } else if let Some(window) = self.sync_write_window() {
            // In flight for a while: a power loss meanwhile tears it, and
            // the writer then gets EIO (its handle died with the power).
            self.with(|state| state.start_sync_write(fh.0, offset, data))
                .and_then(|seq| {
                    std::thread::sleep(window);
                    self.with(|state| state.finish_sync_write(fh.0, offset, data, seq))
                })
                .map(|()| u32::try_from(data.len()).unwrap_or(u32::MAX))
        } else {
            self.with(|state| {
                let seq = state.start_sync_write(fh.0, offset, data)?;
                state.finish_sync_write(fh.0, offset, data, seq)?;
                Ok(u32::try_from(data.len()).unwrap_or(u32::MAX))
            })
        };
        match result {
            Ok(written) => reply.written(written),
            Err(err) => reply.error(err),
        }
    }

    /// `close(2)`: makes nothing durable, and succeeds even on a handle from
    /// before a power loss so that closing it is never an error.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| state.release(fh.0));
    }

    /// `fsync` and `fdatasync` alike.
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| state.fsync(fh.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|state| state.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(err) => reply.error(err),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let filled = self.with(|state| {
            for (index, entry) in state.readdir(fh.0, offset)?.iter().enumerate() {
                // The offset of an entry is that of the next one to return.
                let next_offset = offset + index as u64 + 1;
                if reply.add(INodeNo(entry.ino), next_offset, entry.kind, &entry.name) {
                    break;
                }
            }
            Ok(())
        });
        match filled {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| {
            state.releasedir(fh.0);
            Ok(())
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| state.fsyncdir(fh.0));
    }

    /// The backing directory's numbers: free space is what matters to tests.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let stat = self.with(|state| {
            nix::sys::statvfs::statvfs(state.backing_root())
                .map_err(|err| Errno::from_i32(err as i32))
        });
        match stat {
            Ok(stat) => reply.statfs(
                stat.blocks(),
                stat.blocks_free(),
                stat.blocks_available(),
                stat.files(),
                stat.files_free(),
                u32::try_from(stat.block_size()).unwrap_or(u32::MAX),
                u32::try_from(stat.name_max()).unwrap_or(u32::MAX),
                u32::try_from(stat.fragment_size()).unwrap_or(u32::MAX),
            ),
            Err(err) => reply.error(err),
        }
    }

    /// Only reached without `default_permissions`; root may do anything.
    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(reply, |state| state.fallocate(fh.0, offset, length, mode));
    }
}

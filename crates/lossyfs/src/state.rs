//! Inode table, the visible namespace over the durable one, and the rules
//! that move state from volatile to durable.
//!
//! Every inode has a *visible* place (parent and name, what the mounted view
//! shows) and maybe a *durable* place (where its bytes live in the backing
//! directory). They differ until the parent directory is fsynced. An inode
//! whose data is durable but whose name is not lives in the orphan directory,
//! which a power loss empties, just as fsck drops unlinked inodes.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::fs;
use std::fs::File;
use std::fs::FileTimes;
use std::fs::OpenOptions;
use std::fs::Permissions;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::SystemTime;

use fuser::Errno;
use fuser::FileAttr;
use fuser::FileType;
use fuser::INodeNo;
use fuser::RenameFlags;
use fuser::TimeOrNow;

use crate::NewNameDurability;
use crate::limits::BLOCK_SIZE_BYTES;
use crate::limits::ORPHAN_DIR_NAME;
use crate::limits::ZERO_FILL_CHUNK_BYTES;
use crate::overlay::Overlay;
use crate::overlay::SyncPlan;

pub(crate) const ROOT_INO: u64 = 1;

/// Where an inode's bytes live in the backing directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Loc {
    /// The backing root itself.
    Root,
    /// `<backing>/.lossyfs-orphans/<ino>`: durable data, no durable name.
    Orphan,
    /// `<backing path of parent>/<name>`.
    Entry { parent: u64, name: OsString },
}

#[derive(Debug, Default)]
struct Children {
    visible: BTreeMap<OsString, u64>,
    /// Mirrors the entries of the backing directory.
    durable: BTreeMap<OsString, u64>,
}

#[derive(Debug)]
struct FileBody {
    overlay: Overlay,
    /// `st_blocks` of the durable file, for `stat`.
    durable_blocks: u64,
    /// Open backing file, kept while the kernel has the file open.
    backing: Option<File>,
}

#[derive(Debug)]
enum Body {
    File(FileBody),
    /// `None` until the backing directory has been listed.
    Dir(Option<Children>),
}

#[derive(Debug, Clone, Copy)]
struct Attrs {
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

#[derive(Debug)]
struct Inode {
    visible: Option<(u64, OsString)>,
    durable: Option<Loc>,
    /// Open file handles; an unlinked file stays alive while open.
    open_count: u32,
    attrs: Attrs,
    body: Body,
}

/// One entry of a directory listing snapshot.
#[derive(Debug, Clone)]
pub(crate) struct DirEntry {
    pub(crate) ino: u64,
    pub(crate) kind: FileType,
    pub(crate) name: OsString,
}

#[derive(Debug)]
enum Handle {
    File { ino: u64 },
    Dir { ino: u64, entries: Vec<DirEntry> },
}

/// Attribute changes requested by `setattr`.
#[derive(Debug, Default)]
pub(crate) struct SetAttr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size_bytes: Option<u64>,
    pub(crate) atime: Option<TimeOrNow>,
    pub(crate) mtime: Option<TimeOrNow>,
    pub(crate) ctime: Option<SystemTime>,
}

/// Who creates a node, with which mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewNode {
    pub(crate) mode: u32,
    pub(crate) umask: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// The whole file system: volatile view plus the paths to the durable one.
#[derive(Debug)]
pub(crate) struct State {
    backing_root: PathBuf,
    orphan_dir: PathBuf,
    inodes: HashMap<u64, Inode>,
    handles: HashMap<u64, Handle>,
    /// Never reused, so handles and inodes from before a power loss stay dead.
    next_ino: u64,
    next_fh: u64,
    write_seq: u64,
    /// The `O_DSYNC` write taken but not yet made durable (`write_seq`):
    /// a power loss now tears it.
    in_flight_sync: Option<InFlightSync>,
    power_loss_count: u64,
    new_names: NewNameDurability,
    shut_down: bool,
}

/// An `O_DSYNC` write taken but not yet durable.
#[derive(Debug, Clone)]
struct InFlightSync {
    write_seq: u64,
    ino: u64,
    offset_bytes: u64,
    bytes: Vec<u8>,
}

impl State {
    /// Opens the durable state in `backing_root`, dropping leftover orphans.
    pub(crate) fn new(backing_root: &Path, new_names: NewNameDurability) -> io::Result<State> {
        let mut state = State {
            backing_root: backing_root.to_path_buf(),
            orphan_dir: backing_root.join(ORPHAN_DIR_NAME),
            inodes: HashMap::new(),
            handles: HashMap::new(),
            next_ino: ROOT_INO + 1,
            next_fh: 1,
            write_seq: 0,
            in_flight_sync: None,
            power_loss_count: 0,
            new_names,
            shut_down: false,
        };
        state.reset()?;
        Ok(state)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Stops all further access to the backing directory and drops orphans.
    pub(crate) fn shut_down(&mut self) -> io::Result<()> {
        self.shut_down = true;
        self.handles.clear();
        self.inodes.clear();
        remove_dir_all_if_exists(&self.orphan_dir)
    }

    /// Generation for replies: inode numbers are never reused, so any
    /// constant works; the power loss count helps when reading traces.
    pub(crate) fn generation(&self) -> u64 {
        self.power_loss_count
    }

    pub(crate) fn backing_root(&self) -> &Path {
        &self.backing_root
    }

    /// Forgets everything volatile: the view becomes the backing directory.
    fn reset(&mut self) -> io::Result<()> {
        self.in_flight_sync = None;
        self.handles.clear();
        self.inodes.clear();
        remove_dir_all_if_exists(&self.orphan_dir)?;
        fs::create_dir(&self.orphan_dir)?;
        let meta = fs::metadata(&self.backing_root)?;
        self.inodes.insert(
            ROOT_INO,
            Inode {
                visible: None,
                durable: Some(Loc::Root),
                open_count: 0,
                attrs: attrs_from(&meta),
                body: Body::Dir(None),
            },
        );
        Ok(())
    }

    // ----- lookups and attributes -----

    pub(crate) fn lookup(&mut self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        self.attr(ino)
    }

    pub(crate) fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let inode = self.inode(ino)?;
        let (kind, size, blocks, nlink) = match &inode.body {
            Body::File(body) => (
                FileType::RegularFile,
                body.overlay.size_bytes(),
                body.durable_blocks + body.overlay.dirty_data_bytes().div_ceil(512),
                u32::from(inode.visible.is_some()),
            ),
            Body::Dir(_) => (FileType::Directory, u64::from(BLOCK_SIZE_BYTES), 8, 2),
        };
        let attrs = inode.attrs;
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks,
            atime: attrs.atime,
            mtime: attrs.mtime,
            ctime: attrs.ctime,
            crtime: attrs.ctime,
            kind,
            perm: attrs.perm,
            nlink,
            uid: attrs.uid,
            gid: attrs.gid,
            rdev: 0,
            blksize: BLOCK_SIZE_BYTES,
            flags: 0,
        })
    }

    pub(crate) fn setattr(&mut self, ino: u64, set: &SetAttr) -> Result<FileAttr, Errno> {
        let now = SystemTime::now();
        let inode = self.inode_mut(ino)?;
        if let Some(size_bytes) = set.size_bytes {
            let Body::File(body) = &mut inode.body else {
                return Err(Errno::EISDIR);
            };
            check_range(size_bytes, 0)?;
            body.overlay.set_size(size_bytes);
            inode.attrs.mtime = now;
        }
        let attrs = &mut inode.attrs;
        if let Some(mode) = set.mode {
            attrs.perm = (mode & 0o7777) as u16;
        }
        attrs.uid = set.uid.unwrap_or(attrs.uid);
        attrs.gid = set.gid.unwrap_or(attrs.gid);
        if let Some(atime) = set.atime {
            attrs.atime = resolve_time(atime, now);
        }
        if let Some(mtime) = set.mtime {
            attrs.mtime = resolve_time(mtime, now);
        }
        attrs.ctime = set.ctime.unwrap_or(now);
        if let Body::File(body) = &mut inode.body {
            body.overlay.mark_dirty();
        }
        self.attr(ino)
    }

    // ----- namespace -----

    pub(crate) fn mkdir(
        &mut self,
        parent: u64,
        name: &OsStr,
        node: NewNode,
    ) -> Result<FileAttr, Errno> {
        let ino = self.new_node(parent, name, node, Body::Dir(Some(Children::default())))?;
        self.attr(ino)
    }

    /// Creates a file and opens it: `(attributes, file handle)`.
    pub(crate) fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        node: NewNode,
    ) -> Result<(FileAttr, u64), Errno> {
        let body = Body::File(FileBody {
            overlay: Overlay::new(0),
            durable_blocks: 0,
            backing: None,
        });
        let ino = self.new_node(parent, name, node, body)?;
        let fh = self.open(ino)?;
        Ok((self.attr(ino)?, fh))
    }

    /// `mknod` of a regular file: a create without the open.
    pub(crate) fn mknod_file(
        &mut self,
        parent: u64,
        name: &OsStr,
        node: NewNode,
    ) -> Result<FileAttr, Errno> {
        let (attr, fh) = self.create(parent, name, node)?;
        self.release(fh)?;
        Ok(attr)
    }

    fn new_node(
        &mut self,
        parent: u64,
        name: &OsStr,
        node: NewNode,
        body: Body,
    ) -> Result<u64, Errno> {
        check_name(parent, name)?;
        if self.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        if !self.is_linked(parent) {
            return Err(Errno::ENOENT);
        }
        let now = SystemTime::now();
        let ino = self.next_ino;
        self.next_ino += 1;
        let attrs = Attrs {
            perm: (node.mode & !node.umask & 0o7777) as u16,
            uid: node.uid,
            gid: node.gid,
            atime: now,
            mtime: now,
            ctime: now,
        };
        let inode = Inode {
            visible: Some((parent, name.to_os_string())),
            durable: None,
            open_count: 0,
            attrs,
            body,
        };
        self.inodes.insert(ino, inode);
        self.children_mut(parent)
            .visible
            .insert(name.to_os_string(), ino);
        self.touch(parent, now);
        Ok(ino)
    }

    pub(crate) fn unlink(&mut self, parent: u64, name: &OsStr) -> Result<(), Errno> {
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        if matches!(self.node(ino).body, Body::Dir(_)) {
            return Err(Errno::EISDIR);
        }
        self.unlink_visible(parent, name, ino);
        self.collect(ino)
    }

    pub(crate) fn rmdir(&mut self, parent: u64, name: &OsStr) -> Result<(), Errno> {
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        if !self.children(ino)?.visible.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.unlink_visible(parent, name, ino);
        self.collect(ino)
    }

    fn unlink_visible(&mut self, parent: u64, name: &OsStr, ino: u64) {
        let now = SystemTime::now();
        let removed = self.children_mut(parent).visible.remove(name);
        assert_eq!(removed, Some(ino));
        let inode = self.node_mut(ino);
        inode.visible = None;
        inode.attrs.ctime = now;
        self.touch(parent, now);
    }

    /// Renames in the visible view only; atomic because it is one map update
    /// under the state lock.
    pub(crate) fn rename(
        &mut self,
        from: (u64, &OsStr),
        to: (u64, &OsStr),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        check_name(to.0, to.1)?;
        let ino = self.child(from.0, from.1)?.ok_or(Errno::ENOENT)?;
        let target = self.child(to.0, to.1)?;
        if !self.is_linked(to.0) {
            return Err(Errno::ENOENT);
        }
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let other = target.ok_or(Errno::ENOENT)?;
            return self.exchange((from.0, from.1, ino), (to.0, to.1, other));
        }
        if (from.0, from.1) == (to.0, to.1) {
            return Ok(());
        }
        if self.is_visible_ancestor(ino, to.0) {
            return Err(Errno::EINVAL);
        }
        if let Some(other) = target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            self.check_replace(ino, other)?;
            self.unlink_visible(to.0, to.1, other);
        }
        self.unlink_visible(from.0, from.1, ino);
        self.children_mut(to.0)
            .visible
            .insert(to.1.to_os_string(), ino);
        self.node_mut(ino).visible = Some((to.0, to.1.to_os_string()));
        match target {
            Some(other) => self.collect(other),
            None => Ok(()),
        }
    }

    fn exchange(&mut self, a: (u64, &OsStr, u64), b: (u64, &OsStr, u64)) -> Result<(), Errno> {
        if self.is_visible_ancestor(a.2, b.0) || self.is_visible_ancestor(b.2, a.0) {
            return Err(Errno::EINVAL);
        }
        self.children_mut(a.0)
            .visible
            .insert(a.1.to_os_string(), b.2);
        self.children_mut(b.0)
            .visible
            .insert(b.1.to_os_string(), a.2);
        self.node_mut(a.2).visible = Some((b.0, b.1.to_os_string()));
        self.node_mut(b.2).visible = Some((a.0, a.1.to_os_string()));
        Ok(())
    }

    /// `rename(2)` rules for replacing `other` with `ino`.
    fn check_replace(&mut self, ino: u64, other: u64) -> Result<(), Errno> {
        let ino_is_dir = matches!(self.node(ino).body, Body::Dir(_));
        match (ino_is_dir, matches!(self.node(other).body, Body::Dir(_))) {
            (true, false) => Err(Errno::ENOTDIR),
            (false, true) => Err(Errno::EISDIR),
            (true, true) if !self.children(other)?.visible.is_empty() => Err(Errno::ENOTEMPTY),
            _ => Ok(()),
        }
    }

    /// Whether `ancestor` is `dir` or above it in the visible tree.
    fn is_visible_ancestor(&self, ancestor: u64, dir: u64) -> bool {
        let mut at = dir;
        loop {
            if at == ancestor {
                return true;
            }
            match self
                .inodes
                .get(&at)
                .and_then(|inode| inode.visible.as_ref())
            {
                Some((parent, _)) => at = *parent,
                None => return false,
            }
        }
    }

    // ----- files -----

    pub(crate) fn open(&mut self, ino: u64) -> Result<u64, Errno> {
        let inode = self.inode_mut(ino)?;
        if !matches!(inode.body, Body::File(_)) {
            return Err(Errno::EISDIR);
        }
        inode.open_count += 1;
        Ok(self.new_handle(Handle::File { ino }))
    }

    /// Closes a file handle. Makes nothing durable.
    pub(crate) fn release(&mut self, fh: u64) -> Result<(), Errno> {
        let Some(Handle::File { ino }) = self.handles.remove(&fh) else {
            // A handle from before a power loss: nothing left to release.
            return Ok(());
        };
        let inode = self.node_mut(ino);
        assert!(inode.open_count > 0, "release of inode {ino} with no opens");
        inode.open_count -= 1;
        if inode.open_count == 0
            && let Body::File(body) = &mut inode.body
        {
            body.backing = None;
        }
        self.collect(ino)
    }

    /// Checks that `fh` is a live file handle (flush must not sync anything).
    pub(crate) fn check_file_handle(&self, fh: u64) -> Result<u64, Errno> {
        match self.handles.get(&fh) {
            Some(Handle::File { ino }) => Ok(*ino),
            Some(Handle::Dir { .. }) => Err(Errno::EBADF),
            // Opened before a power loss.
            None => Err(Errno::EIO),
        }
    }

    pub(crate) fn read(
        &mut self,
        fh: u64,
        offset_bytes: u64,
        size_bytes: u32,
    ) -> Result<Vec<u8>, Errno> {
        let ino = self.check_file_handle(fh)?;
        let overlay = &self.file_body(ino).overlay;
        let end_bytes = offset_bytes
            .saturating_add(u64::from(size_bytes))
            .min(overlay.size_bytes());
        if offset_bytes >= end_bytes {
            return Ok(Vec::new());
        }
        let durable_end_bytes = overlay.durable_visible_bytes().min(end_bytes);
        let mut buf = vec![0u8; (end_bytes - offset_bytes) as usize];
        if offset_bytes < durable_end_bytes {
            self.open_backing(ino)?;
            let body = self.file_body(ino);
            let file = body.backing.as_ref().ok_or(Errno::EIO)?;
            let durable_len = (durable_end_bytes - offset_bytes) as usize;
            read_fill(file, offset_bytes, &mut buf[..durable_len])?;
        }
        self.file_body(ino).overlay.apply_to(offset_bytes, &mut buf);
        Ok(buf)
    }

    pub(crate) fn write(&mut self, fh: u64, offset_bytes: u64, data: &[u8]) -> Result<u32, Errno> {
        let ino = self.check_file_handle(fh)?;
        check_range(offset_bytes, data.len() as u64)?;
        let written = u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        self.write_seq += 1;
        let write_seq = self.write_seq;
        let now = SystemTime::now();
        let inode = self.node_mut(ino);
        inode.attrs.mtime = now;
        inode.attrs.ctime = now;
        if let Body::File(body) = &mut inode.body {
            body.overlay.write(offset_bytes, data, write_seq);
        }
        Ok(written)
    }

    /// The first half of an `O_DSYNC` write: taken like any write, and
    /// in flight (a power loss tears it) until [`State::finish_sync_write`].
    /// Returns its `write_seq`.
    pub(crate) fn start_sync_write(
        &mut self,
        fh: u64,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<u64, Errno> {
        self.write(fh, offset_bytes, data)?;
        let ino = self.check_file_handle(fh)?;
        self.in_flight_sync = Some(InFlightSync {
            write_seq: self.write_seq,
            ino,
            offset_bytes,
            bytes: data.to_vec(),
        });
        Ok(self.write_seq)
    }

    /// Makes the `O_DSYNC` write `write_seq` durable, as
    /// `generic_write_sync` does: only its own range (and the size it
    /// extends the file to), not the file's other unsynced writes. A file
    /// shrunk since its last sync is synced whole instead.
    pub(crate) fn finish_sync_write(
        &mut self,
        fh: u64,
        offset_bytes: u64,
        data: &[u8],
        write_seq: u64,
    ) -> Result<(), Errno> {
        let ino = self.check_file_handle(fh)?;
        if self
            .in_flight_sync
            .as_ref()
            .is_some_and(|w| w.write_seq == write_seq)
        {
            self.in_flight_sync = None;
        }
        if self.file_body(ino).overlay.shrunk_since_sync() {
            return self.fsync(fh);
        }
        // A new file: its name becomes durable with the write, as with
        // an fsync (a journaling file system commits the create with the
        // flush), but none of its other unsynced writes.
        self.ensure_storage(ino)?;
        self.name_if_unnamed(ino)?;
        self.open_backing(ino)?;
        let body = self.file_body_mut(ino);
        let file = body.backing.as_ref().ok_or(Errno::EIO)?;
        file.write_all_at(data, offset_bytes)?;
        file.sync_data()?;
        body.durable_blocks = file.metadata()?.blocks();
        body.overlay
            .wrote_through(offset_bytes + data.len() as u64, write_seq);
        Ok(())
    }

    pub(crate) fn fallocate(
        &mut self,
        fh: u64,
        offset_bytes: u64,
        len_bytes: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;
        let ino = self.check_file_handle(fh)?;
        check_range(offset_bytes, len_bytes)?;
        let end_bytes = offset_bytes + len_bytes;
        let overlay = &mut self.file_body_mut(ino).overlay;
        match mode {
            0 if end_bytes > overlay.size_bytes() => overlay.set_size(end_bytes),
            0 | KEEP_SIZE => {}
            m if m == PUNCH_HOLE | KEEP_SIZE => overlay.zero(offset_bytes, len_bytes, false),
            ZERO_RANGE => overlay.zero(offset_bytes, len_bytes, true),
            m if m == ZERO_RANGE | KEEP_SIZE => overlay.zero(offset_bytes, len_bytes, false),
            _ => return Err(Errno::EOPNOTSUPP),
        }
        Ok(())
    }

    /// `fsync`/`fdatasync`: the file's data, size and attributes become
    /// durable. Its name too if it has none yet and the rule says so.
    pub(crate) fn fsync(&mut self, fh: u64) -> Result<(), Errno> {
        let ino = self.check_file_handle(fh)?;
        if self.file_body(ino).overlay.is_dirty() {
            self.sync_file_data(ino)?;
        }
        self.name_if_unnamed(ino)
    }

    fn sync_file_data(&mut self, ino: u64) -> Result<(), Errno> {
        self.ensure_storage(ino)?;
        self.open_backing(ino)?;
        let inode = self.node_mut(ino);
        let attrs = inode.attrs;
        let Body::File(body) = &mut inode.body else {
            unreachable!("check_file_handle returned a directory");
        };
        let file = body.backing.as_ref().ok_or(Errno::EIO)?;
        apply_plan(file, &body.overlay.sync_plan())?;
        file.set_permissions(Permissions::from_mode(u32::from(attrs.perm)))?;
        std::os::unix::fs::fchown(file, Some(attrs.uid), Some(attrs.gid))?;
        file.set_times(
            FileTimes::new()
                .set_accessed(attrs.atime)
                .set_modified(attrs.mtime),
        )?;
        file.sync_all()?;
        body.durable_blocks = file.metadata()?.blocks();
        body.overlay.synced();
        Ok(())
    }

    /// Under [`NewNameDurability::OnOwnFsync`]: an fsynced inode that has no
    /// durable name gets its visible one, and so do its ancestors lacking
    /// one, as a journaling file system commits the creates with the fsync.
    fn name_if_unnamed(&mut self, ino: u64) -> Result<(), Errno> {
        if self.new_names != NewNameDurability::OnOwnFsync {
            return Ok(());
        }
        let mut unnamed = Vec::new();
        let mut at = ino;
        while !self.is_durably_named(at) {
            match &self.node(at).visible {
                Some((parent, _)) => {
                    unnamed.push(at);
                    at = *parent;
                }
                // Unlinked somewhere up the chain: no name to persist.
                None => return Ok(()),
            }
        }
        for ino in unnamed.into_iter().rev() {
            self.link_visible(ino)?;
        }
        Ok(())
    }

    fn open_backing(&mut self, ino: u64) -> Result<(), Errno> {
        if self.file_body(ino).backing.is_some() {
            return Ok(());
        }
        let path = self.storage_path(ino).ok_or(Errno::EIO)?;
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        self.file_body_mut(ino).backing = Some(file);
        Ok(())
    }

    // ----- directories -----

    pub(crate) fn opendir(&mut self, ino: u64) -> Result<u64, Errno> {
        let parent = match &self.inode(ino)?.visible {
            Some((parent, _)) => *parent,
            None => ROOT_INO,
        };
        let mut entries = vec![
            DirEntry {
                ino,
                kind: FileType::Directory,
                name: ".".into(),
            },
            DirEntry {
                ino: parent,
                kind: FileType::Directory,
                name: "..".into(),
            },
        ];
        let children: Vec<(OsString, u64)> = self
            .children(ino)?
            .visible
            .iter()
            .map(|(name, ino)| (name.clone(), *ino))
            .collect();
        for (name, child) in children {
            let kind = match self.node(child).body {
                Body::File(_) => FileType::RegularFile,
                Body::Dir(_) => FileType::Directory,
            };
            entries.push(DirEntry {
                ino: child,
                kind,
                name,
            });
        }
        Ok(self.new_handle(Handle::Dir { ino, entries }))
    }

    /// The listing snapshot of `fh` from `offset` on.
    pub(crate) fn readdir(&self, fh: u64, offset: u64) -> Result<&[DirEntry], Errno> {
        match self.handles.get(&fh) {
            Some(Handle::Dir { entries, .. }) => {
                let from = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(entries.len());
                Ok(&entries[from..])
            }
            Some(Handle::File { .. }) => Err(Errno::EBADF),
            None => Err(Errno::EIO),
        }
    }

    pub(crate) fn releasedir(&mut self, fh: u64) {
        self.handles.remove(&fh);
    }

    /// `fsync` of a directory: its entries become exactly the visible ones
    /// (and its own name, as for a file, if it has none yet).
    ///
    /// An entry renamed out to another directory moves there durably too, so
    /// a rename is atomic and durable once either directory is fsynced.
    pub(crate) fn fsyncdir(&mut self, fh: u64) -> Result<(), Errno> {
        let dir = match self.handles.get(&fh) {
            Some(Handle::Dir { ino, .. }) => *ino,
            Some(Handle::File { .. }) => return Err(Errno::EBADF),
            None => return Err(Errno::EIO),
        };
        self.inode(dir)?;
        if !self.is_linked(dir) {
            // Removed: it has nothing left to persist.
            return Ok(());
        }
        self.children(dir)?;
        self.ensure_storage(dir)?;
        let stale: Vec<(OsString, u64)> = {
            let children = self.children_mut(dir);
            children
                .durable
                .iter()
                .filter(|(name, ino)| children.visible.get(*name) != Some(*ino))
                .map(|(name, ino)| (name.clone(), *ino))
                .collect()
        };
        for (name, ino) in stale {
            let here = Loc::Entry { parent: dir, name };
            let Some(inode) = self.inodes.get(&ino) else {
                continue;
            };
            if inode.durable.as_ref() != Some(&here) {
                continue; // An earlier step of this fsync moved it.
            }
            if inode.visible.is_some() {
                self.link_visible(ino)?;
            } else {
                self.displace(ino)?;
            }
        }
        let missing: Vec<u64> = self.children_mut(dir).visible.values().copied().collect();
        for ino in missing {
            self.link_visible(ino)?;
        }
        self.name_if_unnamed(dir)
    }

    // ----- durable namespace moves -----

    /// Makes `ino`'s durable place its visible one.
    fn link_visible(&mut self, ino: u64) -> Result<(), Errno> {
        let (parent, name) = self
            .node(ino)
            .visible
            .clone()
            .expect("link_visible of an unlinked inode");
        let target = Loc::Entry {
            parent,
            name: name.clone(),
        };
        if self.node(ino).durable.as_ref() == Some(&target) {
            return Ok(());
        }
        self.ensure_storage(parent)?;
        if self.is_durable_ancestor(ino, parent) {
            // A directory cannot move into its own subtree: detach the
            // subtree first (its entries in `ino` are lost, as if unsynced).
            self.stage(parent)?;
        }
        if let Some(&occupant) = self.children_mut(parent).durable.get(&name) {
            self.displace(occupant)?;
        }
        let dst = self.storage_path(parent).ok_or(Errno::EIO)?.join(&name);
        match self.storage_path(ino) {
            Some(src) => fs::rename(src, &dst)?,
            None => self.create_storage(ino, &dst)?,
        }
        self.set_durable(ino, Some(target));
        Ok(())
    }

    /// Gives `ino` durable storage if it has none: an orphan in the backing.
    fn ensure_storage(&mut self, ino: u64) -> Result<(), Errno> {
        if self.node(ino).durable.is_some() {
            return Ok(());
        }
        let path = self.orphan_path(ino);
        self.create_storage(ino, &path)?;
        self.set_durable(ino, Some(Loc::Orphan));
        Ok(())
    }

    fn create_storage(&self, ino: u64, path: &Path) -> Result<(), Errno> {
        let inode = self.node(ino);
        let perm = Permissions::from_mode(u32::from(inode.attrs.perm));
        match &inode.body {
            Body::File(body) => {
                assert_eq!(
                    body.overlay.durable_visible_bytes(),
                    0,
                    "file {ino} without storage has durable bytes"
                );
                let file = OpenOptions::new().write(true).create_new(true).open(path)?;
                file.set_permissions(perm)?;
            }
            Body::Dir(_) => {
                fs::create_dir(path)?;
                fs::set_permissions(path, perm)?;
            }
        }
        Ok(())
    }

    /// Removes a durable entry whose inode is no longer there: keeps the
    /// inode as an orphan if still alive, deletes it otherwise.
    fn displace(&mut self, ino: u64) -> Result<(), Errno> {
        if self.is_alive(ino) {
            self.stage(ino)
        } else {
            self.evict(ino)
        }
    }

    /// Moves `ino`'s storage to the orphan directory.
    fn stage(&mut self, ino: u64) -> Result<(), Errno> {
        if self.node(ino).durable == Some(Loc::Orphan) {
            return Ok(());
        }
        let src = self.storage_path(ino).ok_or(Errno::EIO)?;
        fs::rename(src, self.orphan_path(ino))?;
        self.set_durable(ino, Some(Loc::Orphan));
        Ok(())
    }

    /// Deletes a dead inode's storage, and the inode.
    fn evict(&mut self, ino: u64) -> Result<(), Errno> {
        assert!(!self.is_alive(ino), "evict of live inode {ino}");
        if let Some(path) = self.storage_path(ino) {
            if matches!(self.node(ino).body, Body::Dir(_)) {
                let kids: Vec<u64> = self.children(ino)?.durable.values().copied().collect();
                for kid in kids {
                    self.displace(kid)?;
                }
                fs::remove_dir(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
            self.set_durable(ino, None);
        }
        self.inodes.remove(&ino);
        Ok(())
    }

    /// Frees what a dead inode no longer needs.
    fn collect(&mut self, ino: u64) -> Result<(), Errno> {
        if self.is_alive(ino) {
            return Ok(());
        }
        match self.node(ino).durable {
            None | Some(Loc::Orphan) => self.evict(ino),
            // Still durably named: the parent's fsync removes it.
            Some(_) => {
                if let Body::File(body) = &mut self.node_mut(ino).body {
                    body.overlay.drop_data();
                }
                Ok(())
            }
        }
    }

    fn set_durable(&mut self, ino: u64, loc: Option<Loc>) {
        if let Some(Loc::Entry { parent, name }) = self.node(ino).durable.clone() {
            let removed = self.children_mut(parent).durable.remove(&name);
            assert_eq!(removed, Some(ino));
        }
        if let Some(Loc::Entry { parent, name }) = &loc {
            let previous = self.children_mut(*parent).durable.insert(name.clone(), ino);
            assert_eq!(
                previous, None,
                "durable entry {name:?} in {parent} still taken"
            );
        }
        self.node_mut(ino).durable = loc;
    }

    fn is_durable_ancestor(&self, ancestor: u64, dir: u64) -> bool {
        let mut at = dir;
        while let Some(Loc::Entry { parent, .. }) = &self.node(at).durable {
            if *parent == ancestor {
                return true;
            }
            at = *parent;
        }
        false
    }

    /// Whether `ino` survives a power loss under a durable name.
    fn is_durably_named(&self, ino: u64) -> bool {
        let mut at = ino;
        loop {
            match &self.node(at).durable {
                Some(Loc::Root) => return true,
                Some(Loc::Entry { parent, .. }) => at = *parent,
                Some(Loc::Orphan) | None => return false,
            }
        }
    }

    fn storage_path(&self, ino: u64) -> Option<PathBuf> {
        match self.node(ino).durable.as_ref()? {
            Loc::Root => Some(self.backing_root.clone()),
            Loc::Orphan => Some(self.orphan_path(ino)),
            Loc::Entry { parent, name } => Some(self.storage_path(*parent)?.join(name)),
        }
    }

    fn orphan_path(&self, ino: u64) -> PathBuf {
        self.orphan_dir.join(ino.to_string())
    }

    // ----- power loss -----

    /// Throws away everything volatile after tearing the last unsynced write.
    pub(crate) fn power_loss(&mut self, seed: u64, keep_some: bool) -> io::Result<String> {
        let kept = if keep_some {
            self.keep_random_blocks(seed)?
        } else {
            String::new()
        };
        let torn = self.tear_last_write(seed)?;
        // A write the device was still taking is torn too, whichever came
        // last.
        let torn_sync = self.tear_in_flight_sync(seed.rotate_left(17))?;
        let torn = format!("{torn}{torn_sync}{kept}");
        let dirty_bytes = self.dirty_bytes();
        let dirty_files = self
            .inodes
            .values()
            .filter(|inode| matches!(&inode.body, Body::File(body) if body.overlay.is_dirty()))
            .count();
        self.power_loss_count += 1;
        self.reset()?;
        Ok(format!(
            "power loss #{} (seed {seed}): {torn}; dropped {dirty_bytes} dirty bytes in {dirty_files} files",
            self.power_loss_count
        ))
    }

    /// A disk's cache writes back in any order: before the power goes,
    /// each unsynced 4 KiB block of data (within the durable file's size:
    /// the size itself is metadata, not written back) of a durably named
    /// file reaches the disk with probability one half.
    fn keep_random_blocks(&mut self, seed: u64) -> io::Result<String> {
        const BLOCK: u64 = 4096;
        let mut kept_blocks = 0u64;
        let mut dropped_blocks = 0u64;
        let inos: Vec<u64> = self.inodes.keys().copied().collect();
        for ino in inos {
            if !self.is_durably_named(ino) {
                continue;
            }
            let Some(path) = self.storage_path(ino) else {
                continue;
            };
            let Body::File(body) = &self.node(ino).body else {
                continue;
            };
            let durable_size = body.overlay.durable_size_bytes();
            let plan = body.overlay.sync_plan();
            let mut chosen: Vec<(u64, Vec<u8>)> = Vec::new();
            for (offset, bytes) in &plan.writes {
                let mut at = *offset;
                let end = offset + bytes.len() as u64;
                while at < end.min(durable_size) {
                    let block_end = ((at / BLOCK) + 1) * BLOCK;
                    let stop = block_end.min(end).min(durable_size);
                    let coin = split_mix64(seed ^ ino.rotate_left(32) ^ (at / BLOCK));
                    let from = usize::try_from(at - offset).unwrap_or(0);
                    let to = usize::try_from(stop - offset).unwrap_or(0);
                    if coin.is_multiple_of(2) {
                        chosen.push((at, bytes[from..to].to_vec()));
                        kept_blocks += 1;
                    } else {
                        dropped_blocks += 1;
                    }
                    at = stop;
                }
            }
            if chosen.is_empty() {
                continue;
            }
            let file = OpenOptions::new().write(true).open(&path)?;
            for (at, bytes) in chosen {
                file.write_all_at(&bytes, at)?;
            }
        }
        Ok(format!(
            "; {kept_blocks} unsynced blocks written back at random, {dropped_blocks} not"
        ))
    }

    /// Tears the `O_DSYNC` write in flight, if it is not the last write
    /// (which [`State::tear_last_write`] tore already).
    fn tear_in_flight_sync(&mut self, seed: u64) -> io::Result<String> {
        let Some(write) = self.in_flight_sync.take() else {
            return Ok(String::new());
        };
        Ok(self
            .tear(write.ino, write.offset_bytes, &write.bytes, seed)?
            .map(|torn| format!("; tore in-flight O_DSYNC write of {torn}"))
            .unwrap_or_default())
    }

    fn tear_last_write(&mut self, seed: u64) -> io::Result<String> {
        let last = self
            .inodes
            .iter()
            .filter_map(|(ino, inode)| match &inode.body {
                Body::File(body) => body.overlay.last_write().map(|write| (*ino, write)),
                Body::Dir(_) => None,
            })
            .max_by_key(|(_, write)| write.write_seq)
            .map(|(ino, write)| (ino, write.clone()));
        let Some((ino, write)) = last else {
            return Ok("no unsynced write to tear".to_string());
        };
        let what = if self
            .in_flight_sync
            .as_ref()
            .is_some_and(|w| w.write_seq == write.write_seq)
        {
            self.in_flight_sync = None;
            "in-flight O_DSYNC write"
        } else {
            "write"
        };
        Ok(
            match self.tear(ino, write.offset_bytes, &write.bytes, seed)? {
                Some(torn) => format!("tore {what} of {torn}"),
                None => format!(
                    "last unsynced write ({} bytes at {}) was to a file with no durable name",
                    write.bytes.len(),
                    write.offset_bytes
                ),
            },
        )
    }

    /// Writes a random prefix of `bytes` at `at` into `ino`'s durable file,
    /// if it has a durable name; says what it kept.
    fn tear(&self, ino: u64, at: u64, bytes: &[u8], seed: u64) -> io::Result<Option<String>> {
        let path = match self.storage_path(ino) {
            Some(path) if self.is_durably_named(ino) => path,
            _ => return Ok(None),
        };
        let len_bytes = bytes.len();
        let kept_bytes = (split_mix64(seed) % (len_bytes as u64 + 1)) as usize;
        let file = OpenOptions::new().write(true).open(&path)?;
        file.write_all_at(&bytes[..kept_bytes], at)?;
        let shown = path
            .strip_prefix(&self.backing_root)
            .unwrap_or(&path)
            .display();
        Ok(Some(format!(
            "{len_bytes} bytes at {at} in {shown}: kept {kept_bytes}"
        )))
    }

    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.inodes
            .values()
            .map(|inode| match &inode.body {
                Body::File(body) => body.overlay.dirty_data_bytes(),
                Body::Dir(_) => 0,
            })
            .sum()
    }

    // ----- table access -----

    fn new_handle(&mut self, handle: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, handle);
        fh
    }

    /// An inode the kernel names; unknown means from before a power loss.
    fn inode(&self, ino: u64) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::ESTALE)
    }

    fn inode_mut(&mut self, ino: u64) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(Errno::ESTALE)
    }

    /// An inode our own state refers to: missing is a bug.
    fn node(&self, ino: u64) -> &Inode {
        self.inodes
            .get(&ino)
            .unwrap_or_else(|| panic!("inode {ino} referenced but not in the table"))
    }

    fn node_mut(&mut self, ino: u64) -> &mut Inode {
        self.inodes
            .get_mut(&ino)
            .unwrap_or_else(|| panic!("inode {ino} referenced but not in the table"))
    }

    fn file_body(&self, ino: u64) -> &FileBody {
        match &self.node(ino).body {
            Body::File(body) => body,
            Body::Dir(_) => panic!("inode {ino} is a directory, expected a file"),
        }
    }

    fn file_body_mut(&mut self, ino: u64) -> &mut FileBody {
        match &mut self.node_mut(ino).body {
            Body::File(body) => body,
            Body::Dir(_) => panic!("inode {ino} is a directory, expected a file"),
        }
    }

    fn is_linked(&self, ino: u64) -> bool {
        ino == ROOT_INO
            || self
                .inodes
                .get(&ino)
                .is_some_and(|inode| inode.visible.is_some())
    }

    fn is_alive(&self, ino: u64) -> bool {
        let inode = self.node(ino);
        ino == ROOT_INO || inode.visible.is_some() || inode.open_count > 0
    }

    /// The visible child `name` of `dir`, listing the backing directory first
    /// if needed.
    fn child(&mut self, dir: u64, name: &OsStr) -> Result<Option<u64>, Errno> {
        Ok(self.children(dir)?.visible.get(name).copied())
    }

    /// The children of a directory, loaded from its backing directory on
    /// first use.
    fn children(&mut self, dir: u64) -> Result<&Children, Errno> {
        match &self.inode(dir)?.body {
            Body::File(_) => return Err(Errno::ENOTDIR),
            Body::Dir(Some(_)) => {}
            Body::Dir(None) => self.load_children(dir)?,
        }
        match &self.node(dir).body {
            Body::Dir(Some(children)) => Ok(children),
            _ => unreachable!("children of {dir} just loaded"),
        }
    }

    /// Children of a directory already loaded (any directory an inode points at).
    fn children_mut(&mut self, dir: u64) -> &mut Children {
        match &mut self.node_mut(dir).body {
            Body::Dir(Some(children)) => children,
            _ => panic!("inode {dir} is not a loaded directory"),
        }
    }

    fn load_children(&mut self, dir: u64) -> Result<(), Errno> {
        let mut children = Children::default();
        if let Some(path) = self.storage_path(dir) {
            for entry in fs::read_dir(path)? {
                let entry = entry?;
                let name = entry.file_name();
                if dir == ROOT_INO && name == ORPHAN_DIR_NAME {
                    continue;
                }
                let meta = entry.metadata()?;
                let body = if meta.is_file() {
                    Body::File(FileBody {
                        overlay: Overlay::new(meta.len()),
                        durable_blocks: meta.blocks(),
                        backing: None,
                    })
                } else if meta.is_dir() {
                    Body::Dir(None)
                } else {
                    continue; // Symlinks and special files are not served.
                };
                let ino = self.next_ino;
                self.next_ino += 1;
                let inode = Inode {
                    visible: Some((dir, name.clone())),
                    durable: Some(Loc::Entry {
                        parent: dir,
                        name: name.clone(),
                    }),
                    open_count: 0,
                    attrs: attrs_from(&meta),
                    body,
                };
                self.inodes.insert(ino, inode);
                children.visible.insert(name.clone(), ino);
                children.durable.insert(name, ino);
            }
        }
        self.node_mut(dir).body = Body::Dir(Some(children));
        Ok(())
    }

    fn touch(&mut self, dir: u64, now: SystemTime) {
        let attrs = &mut self.node_mut(dir).attrs;
        attrs.mtime = now;
        attrs.ctime = now;
    }
}

fn attrs_from(meta: &fs::Metadata) -> Attrs {
    let time = |secs: i64, nanos: i64| {
        let since =
            std::time::Duration::new(secs.unsigned_abs(), nanos.clamp(0, 999_999_999) as u32);
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + since
        } else {
            SystemTime::UNIX_EPOCH - since
        }
    };
    Attrs {
        perm: (meta.mode() & 0o7777) as u16,
        uid: meta.uid(),
        gid: meta.gid(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
    }
}

fn resolve_time(time: TimeOrNow, now: SystemTime) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => now,
    }
}

fn check_name(parent: u64, name: &OsStr) -> Result<(), Errno> {
    if parent == ROOT_INO && name == ORPHAN_DIR_NAME {
        return Err(Errno::EPERM);
    }
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// File offsets must fit an `off_t`.
fn check_range(offset_bytes: u64, len_bytes: u64) -> Result<(), Errno> {
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(Errno::EFBIG),
    }
}

/// Reads `buf.len()` bytes at `offset`; bytes past the end of file stay zero.
fn read_fill(file: &File, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset_bytes + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Performs a sync plan on the durable file.
fn apply_plan(file: &File, plan: &SyncPlan<'_>) -> Result<(), Errno> {
    if let Some(len_bytes) = plan.truncate_to_bytes {
        file.set_len(len_bytes)?;
    }
    file.set_len(plan.size_bytes)?;
    for &(offset_bytes, len_bytes) in &plan.zero_ranges {
        zero_range(file, offset_bytes, len_bytes)?;
    }
    for &(offset_bytes, bytes) in &plan.writes {
        file.write_all_at(bytes, offset_bytes)?;
    }
    Ok(())
}

/// Punches a hole (keeps sparse files sparse); writes zeros if the backing
/// file system cannot punch.
fn zero_range(file: &File, offset_bytes: u64, len_bytes: u64) -> Result<(), Errno> {
    use nix::fcntl::FallocateFlags;
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let offset = i64::try_from(offset_bytes).map_err(|_| Errno::EFBIG)?;
    let len = i64::try_from(len_bytes).map_err(|_| Errno::EFBIG)?;
    match nix::fcntl::fallocate(file, flags, offset, len) {
        Ok(()) => return Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => {}
        Err(err) => return Err(Errno::from_i32(err as i32)),
    }
    let zeros = vec![0u8; ZERO_FILL_CHUNK_BYTES];
    let mut done = 0u64;
    while done < len_bytes {
        let chunk = (len_bytes - done).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..chunk], offset_bytes + done)?;
        done += chunk as u64;
    }
    Ok(())
}

fn remove_dir_all_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// One step of SplitMix64: a well-mixed value from any seed, so that
/// neighbouring seeds tear differently.
fn split_mix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

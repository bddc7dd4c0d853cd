//! A FUSE file system for power-loss tests, used in-process: it passes file
//! operations through to a backing directory but keeps everything that no
//! completed `fsync`/`fdatasync`/directory fsync has covered in memory, and
//! [`LossyFs::power_loss`] throws that away, tearing the last unsynced write.
//! SIGKILL keeps the page cache and so cannot catch a missing fsync; this can.
//!
//! An `O_DSYNC` write is durable when it returns, but only its own range
//! (and the size it extends the file to), as `generic_write_sync` flushes
//! it, not the file's other unsynced writes; with
//! [`MountOptions::sync_write_window`] it stays in flight a while first, so
//! a power loss can tear it.
//!
//! It does not: serve symlinks, hard links, xattrs or special files, support
//! shared writable `mmap` (files are opened with direct I/O), or reorder
//! writes *within* one fsync (an fsync is atomic).
//!
//! The one design choice to know: unlink, rmdir and rename become durable
//! only when a directory holding the entry is fsynced (for a rename, either
//! the source or the destination: it is atomic). A *new* file or
//! directory's name becomes durable when its parent is fsynced and, by
//! default ([`NewNameDurability::OnOwnFsync`]), also when the new inode
//! itself is fsynced, with any new ancestors: that is what ext4, xfs and
//! btrfs do in practice, and fjall 3 relies on it (it never fsyncs the
//! parent of a new keyspace directory). [`NewNameDurability::OnParentFsync`]
//! is strict POSIX instead. Data whose name is not durable lives in a hidden
//! orphan directory in the backing directory, emptied at every power loss.
//!
//! Dropping a [`LossyFs`] unmounts it without writing anything back: the
//! backing directory then holds exactly the durable state.

mod fs;
mod limits;
mod overlay;
mod state;

use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use fuser::BackgroundSession;
use fuser::Config;
use fuser::MountOption;
use fuser::SessionACL;

use crate::fs::LossyOps;
use crate::state::State;

/// When the name of a newly created file or directory becomes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NewNameDurability {
    /// When its parent directory is fsynced, or when the new inode itself
    /// is fsynced (its new ancestors' names then too). Matches journaling
    /// Linux file systems; needed by fjall.
    #[default]
    OnOwnFsync,
    /// Only when its parent directory is fsynced (strict POSIX): an fsynced
    /// new file in a never-fsynced directory is lost.
    OnParentFsync,
}

/// How to mount; `Default` gives what [`LossyFs::mount`] uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct MountOptions {
    pub new_names: NewNameDurability,
    /// Keeps each `O_DSYNC` write in flight this long before making it
    /// durable, so a power loss can land inside one and tear it (the
    /// description [`LossyFs::power_loss`] returns then says "in-flight
    /// O_DSYNC write"). `None`: such writes are durable at once.
    pub sync_write_window: Option<Duration>,
}

/// A mounted lossy view of a backing directory, served by a background thread.
#[derive(Debug)]
pub struct LossyFs {
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    sync_write_window_us: Arc<std::sync::atomic::AtomicU64>,
}

impl LossyFs {
    /// Mounts a lossy view of `backing` at `mountpoint` (both existing dirs).
    /// Serves in a background thread. Needs root (or `CAP_SYS_ADMIN`) and
    /// `/dev/fuse`; no `fusermount` binary is involved.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<LossyFs> {
        LossyFs::mount_with(backing, mountpoint, MountOptions::default())
    }

    /// [`LossyFs::mount`] with a choice of durability rules.
    pub fn mount_with(
        backing: &Path,
        mountpoint: &Path,
        options: MountOptions,
    ) -> io::Result<LossyFs> {
        let backing = backing.canonicalize()?;
        let mountpoint = mountpoint.canonicalize()?;
        for dir in [&backing, &mountpoint] {
            if !dir.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", dir.display()),
                ));
            }
        }
        if mountpoint.starts_with(&backing) || backing.starts_with(&mountpoint) {
            // Serving the mount from inside itself would deadlock the one
            // serving thread.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "backing directory and mountpoint must not contain each other",
            ));
        }
        let state = Arc::new(Mutex::new(State::new(&backing, options.new_names)?));
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("lossyfs".to_string()),
            MountOption::Subtype("lossyfs".to_string()),
            MountOption::DefaultPermissions,
            MountOption::NoAtime,
        ];
        // `allow_other` for the kernel; fuser then admits root and the owner.
        config.acl = SessionACL::RootAndOwner;
        let window_us = options
            .sync_write_window
            .map_or(0, |w| u64::try_from(w.as_micros()).unwrap_or(u64::MAX));
        let sync_write_window_us = Arc::new(std::sync::atomic::AtomicU64::new(window_us));
        let ops = LossyOps {
            state: Arc::clone(&state),
            sync_write_window_us: Arc::clone(&sync_write_window_us),
        };
        let session = fuser::spawn_mount(ops, &mountpoint, &config)?;
        Ok(LossyFs {
            state,
            session: Some(session),
            mountpoint,
            sync_write_window_us,
        })
    }

    /// Cuts the power: drops everything not fsynced, tearing the last
    /// unsynced write with randomness from `seed`. Returns a short
    /// description of what was torn (for test logs).
    ///
    /// The torn write is the most recent write request not yet covered by an
    /// fsync of its file; a random prefix of it (possibly empty, possibly
    /// whole) lands in the durable file, if that file has a durable name.
    /// File handles opened before return `EIO` afterwards.
    ///
    /// # Panics
    /// If the backing directory cannot be written: the test cannot go on.
    pub fn power_loss(&self, seed: u64) -> String {
        let mut state = fs::lock(&self.state);
        state.power_loss(seed, false).unwrap_or_else(|err| {
            panic!("lossyfs power loss on {}: {err}", self.mountpoint.display())
        })
    }

    /// As [`LossyFs::power_loss`], but first, as a disk cache writing back
    /// in any order would, each unsynced 4 KiB block of file data within
    /// the durable size reaches the backing file with probability one half
    /// (chosen from `seed`): a store must not rely on unsynced writes
    /// being lost together, nor on their order.
    ///
    /// # Panics
    /// As [`LossyFs::power_loss`].
    pub fn power_loss_keeping_some(&self, seed: u64) -> String {
        let mut state = fs::lock(&self.state);
        state.power_loss(seed, true).unwrap_or_else(|err| {
            panic!("lossyfs power loss on {}: {err}", self.mountpoint.display())
        })
    }

    /// Changes [`MountOptions::sync_write_window`] from now on.
    pub fn set_sync_write_window(&self, window: Option<Duration>) {
        let us = window.map_or(0, |w| u64::try_from(w.as_micros()).unwrap_or(u64::MAX));
        self.sync_write_window_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of dirty (unsynced) data currently held.
    pub fn dirty_bytes(&self) -> u64 {
        fs::lock(&self.state).dirty_bytes()
    }

    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

impl Drop for LossyFs {
    /// Unmounts; unsynced state is dropped, not written back.
    fn drop(&mut self) {
        if let Err(err) = fs::lock(&self.state).shut_down() {
            eprintln!("lossyfs: cleaning orphans at unmount: {err}");
        }
        let Some(session) = self.session.take() else {
            return;
        };
        // Lazy detach: a plain unmount fails while a test still holds a file
        // open, and the serving thread ends once the last one is closed.
        if let Err(err) = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("lossyfs: unmounting {}: {err}", self.mountpoint.display());
        }
        let deadline = Instant::now() + limits::UNMOUNT_WAIT;
        while !session.guard.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !session.guard.is_finished() {
            eprintln!(
                "lossyfs: files under {} still open; leaving the serving thread (it answers EIO)",
                self.mountpoint.display()
            );
            return;
        }
        if let Err(err) = session.join() {
            eprintln!(
                "lossyfs: serving thread for {}: {err}",
                self.mountpoint.display()
            );
        }
    }
}

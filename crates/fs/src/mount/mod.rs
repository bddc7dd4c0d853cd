//! `cairn mount`: the FUSE client.
//!
//! It opens a session with the active MDS of a file system
//! ([`session::MdsSession`]), mounts with the kernel's FUSE (through
//! `fuser`, without libfuse) and answers the kernel's requests
//! ([`fuse::CairnFs`]): metadata through the MDS, file data straight on
//! the OSDs ([`data`]).

pub mod data;
pub mod fuse;
pub mod limits;
pub mod session;

use cairn_client::Client;
use cairn_proto::mds::MdsAnswer;
use fuser::{Config, MountOption, SessionACL};
use std::path::PathBuf;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    pub mon_addr: String,
    pub fs: String,
    pub mountpoint: PathBuf,
    /// Let every user of the host use the mount (`allow_other`); the
    /// kernel still checks permissions.
    pub allow_other: bool,
    /// Kernel threads reading FUSE requests.
    pub threads: usize,
    /// Written data the mount holds across files (buffered, kept past
    /// close, on its way to the OSDs) before writers send their own at
    /// once and wait for it.
    pub write_buffer_bytes: u64,
}

/// Why a mount failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cluster: {0}")]
    Client(#[from] cairn_client::ClientError),
    #[error("no MDS of file system {fs:?} answered: errno {errno}")]
    NoMds { fs: String, errno: i32 },
    #[error("mount {path}: {error}")]
    Mount { path: String, error: std::io::Error },
}

/// A live mount; dropping it unmounts.
#[derive(Debug)]
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    pub mds_session: session::MdsSession,
}

impl Mounted {
    /// Unmounts (if the kernel still has the mount) and waits for the
    /// serving thread to end.
    pub fn unmount(mut self) {
        if let Some(s) = self.session.take()
            && let Err(error) = s.umount_and_join()
        {
            // Unmounted already by another hand (`umount`), or busy.
            tracing::warn!(%error, "unmount");
        }
    }
}

/// Lets FUSE requests carry a whole 4 MiB object: the kernel caps a
/// connection's request at `fs.fuse.max_pages_limit` pages (256, 1 MiB,
/// by default), so an `O_DIRECT` 4 MiB write would reach the OSDs as four
/// partial object writes. Raised (by root; logged) to what
/// [`limits::MAX_WRITE_BYTES`] needs; other FUSE file systems keep what
/// they ask for. Left as is when it cannot be written.
fn allow_whole_object_requests() {
    const PATH: &str = "/proc/sys/fs/fuse/max_pages_limit";
    let want = u64::from(limits::MAX_WRITE_BYTES) / 4096;
    let Ok(text) = std::fs::read_to_string(PATH) else {
        return;
    };
    let Ok(now) = text.trim().parse::<u64>() else {
        return;
    };
    if now >= want {
        return;
    }
    match std::fs::write(PATH, want.to_string()) {
        Ok(()) => tracing::info!(from = now, to = want, "raised fs.fuse.max_pages_limit"),
        Err(error) => tracing::info!(
            %error,
            limit = now,
            "fs.fuse.max_pages_limit stays: FUSE requests carry at most {} KiB",
            now * 4
        ),
    }
}

/// Widens the kernel's readahead on this mount to
/// [`limits::KERNEL_READAHEAD_BYTES`]: a FUSE connection starts with the
/// kernel's default (128 KiB), in requests too small for the mount's own
/// read-ahead to start on. The mount's backing device info is named after
/// the mount's device number; written by root (logged), else left as is.
fn widen_kernel_readahead(mountpoint: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let want = limits::KERNEL_READAHEAD_BYTES / 1024;
    match std::fs::write(&path, want.to_string()) {
        Ok(()) => tracing::info!(kib = want, path, "kernel readahead widened"),
        Err(error) => tracing::info!(%error, path, "kernel readahead stays at its default"),
    }
}

/// Opens a session and mounts; the mount serves from `rt` until the
/// returned [`Mounted`] is dropped.
///
/// # Errors
/// [`MountError`].
pub async fn mount(
    config: &MountConfig,
    rt: tokio::runtime::Handle,
) -> Result<Mounted, MountError> {
    let client = Client::connect(&config.mon_addr).await?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = format!("{}:{}", host.trim(), std::process::id());
    let (mds_session, hello) = session::MdsSession::open(client, &config.fs, &name)
        .await
        .map_err(|errno| MountError::NoMds {
            fs: config.fs.clone(),
            errno,
        })?;
    if let MdsAnswer::Session { data_pool, .. } = &hello {
        tracing::info!(fs = config.fs, data_pool, "session open");
    }
    allow_whole_object_requests();
    let fs = fuse::CairnFs::new(rt, mds_session.clone(), config.write_buffer_bytes);
    let mut fuse_config = Config::default();
    fuse_config.mount_options = vec![
        MountOption::FSName(format!("cairn:{}", config.fs)),
        MountOption::Subtype("cairn".into()),
        MountOption::DefaultPermissions,
        MountOption::Suid,
        MountOption::Dev,
        MountOption::Exec,
    ];
    fuse_config.acl = if config.allow_other {
        SessionACL::All
    } else {
        SessionACL::RootAndOwner
    };
    fuse_config.n_threads = Some(config.threads.max(1));
    let session = fuser::spawn_mount(fs, &config.mountpoint, &fuse_config).map_err(|error| {
        MountError::Mount {
            path: config.mountpoint.display().to_string(),
            error,
        }
    })?;
    mds_session.set_notifier(session.notifier());
    // On a thread of its own: the stat waits for the kernel's INIT and
    // is a FUSE request this process serves, which must not hold one of
    // the runtime's workers.
    let mountpoint = config.mountpoint.clone();
    let widened = std::thread::Builder::new()
        .name("cairn-readahead".into())
        .spawn(move || widen_kernel_readahead(&mountpoint));
    if let Err(error) = widened {
        tracing::info!(%error, "kernel readahead stays at its default");
    }
    Ok(Mounted {
        session: Some(session),
        mds_session,
    })
}

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
    let fs = fuse::CairnFs::new(rt, mds_session.clone());
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
    Ok(Mounted {
        session: Some(session),
        mds_session,
    })
}

//! Every bound and tunable of the lossy file system, in one place.

use std::time::Duration;

/// How long the kernel may cache a directory entry. Zero, so that after a
/// power loss every path is looked up again and sees the durable namespace.
pub(crate) const ENTRY_TTL: Duration = Duration::ZERO;

/// How long the kernel may cache attributes. Zero for the same reason: a
/// cached size from before a power loss would clip or extend reads.
pub(crate) const ATTR_TTL: Duration = Duration::ZERO;

/// A dirty extent grows by appending only up to this size; past it a new
/// extent starts. Keeps an overwrite in the middle of a long append run from
/// copying megabytes to split one huge buffer.
pub(crate) const EXTENT_MERGE_BYTES_MAX: usize = 1024 * 1024;

/// Zeros are written in chunks of this size when the backing file system
/// cannot punch holes.
pub(crate) const ZERO_FILL_CHUNK_BYTES: usize = 1024 * 1024;

/// Name of the directory, directly under the backing root, that holds
/// durable-but-unlinked inodes (fsynced files whose name is not yet durable).
/// Hidden from the mounted view, emptied at every mount and power loss.
pub(crate) const ORPHAN_DIR_NAME: &str = ".lossyfs-orphans";

/// Block size reported by `stat`.
pub(crate) const BLOCK_SIZE_BYTES: u32 = 4096;

/// How long dropping a `LossyFs` waits for the serving thread to end after
/// detaching the mount. It ends within milliseconds unless a file under the
/// mount is still open; then it is left behind, answering EIO, which is
/// harmless because it no longer touches the backing directory.
pub(crate) const UNMOUNT_WAIT: Duration = Duration::from_secs(1);

//! The local object store under every OSD: collections of objects (data,
//! xattrs, an ordered omap, a version) changed only by atomic transactions,
//! every byte covered by a checksum that is checked on every read.
//!
//! It stores and retrieves; it knows nothing of placement, replication or the
//! network. Two implementations share the [`ObjectStore`] trait: [`DiskStore`]
//! (the real one) and [`MemStore`] (for tests and the simulator, able to
//! "crash").
//!
//! The one design choice to know: **bulk data is written once**. Large
//! payloads go to freshly allocated extents of one data file (never over live
//! data), then one metadata commit in an embedded key-value store (fjall)
//! points at them. A batch of concurrent transactions becomes durable
//! together with one record in a commit log (group commit), which also
//! carries the bytes of small payloads, so a batch of small writes costs one
//! flush. Objects up to 2 KiB live inline in their metadata record. See
//! `docs/store-format.md`.

mod alloc;
pub mod bench;
mod commit;
mod data;
mod disk;
pub mod failpoint;
mod flush;
pub mod limits;
mod mem;
mod overlay;
mod record;
mod recovery;
mod shared;
mod space;
mod txn;
mod wal;

pub use disk::{DiskStore, Prepared};
pub use mem::MemStore;
pub use shared::StoreConfig;
pub use space::SpaceAudit;
pub use txn::{Op, Transaction};

use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;

/// A collection: the objects of one placement group (or of the OSD itself).
/// Opaque to the store; the OSD derives it from the PG id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CollectionId(pub u64);

impl CollectionId {
    /// The collection of PG `seed` of pool `pool`.
    #[must_use]
    pub fn pg(pool: u32, seed: u32) -> CollectionId {
        CollectionId((u64::from(pool) << 32) | u64::from(seed))
    }
}

impl fmt::Display for CollectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// An object's identity within a collection: its name and the 32-bit hash
/// of the name that placement uses. Objects are listed in `(hash, name)`
/// order, the order recovery and scrub walk, and collections split by hash
/// bits.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub hash: u32,
    pub name: Bytes,
}

impl ObjectKey {
    /// The key of `name`, hashed as placement hashes object names.
    pub fn new(name: impl Into<Bytes>) -> ObjectKey {
        let name = name.into();
        ObjectKey {
            hash: cairn_types::object_hash32(&name),
            name,
        }
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}:{}",
            self.hash,
            String::from_utf8_lossy(&self.name)
        )
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What to read. The default reads the whole object, verifying checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    pub offset_bytes: u64,
    /// `None` reads to the end of the object.
    pub length_bytes: Option<u64>,
    pub verify_checksum: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            offset_bytes: 0,
            length_bytes: None,
            verify_checksum: true,
        }
    }
}

impl ReadOptions {
    /// The byte range `[start, end)` this reads of an object of `size`
    /// bytes.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] if it exceeds [`limits::READ_BYTES_MAX`].
    pub fn span(&self, size: u64) -> Result<(u64, u64), StoreError> {
        let start = self.offset_bytes.min(size);
        let end = self
            .length_bytes
            .map_or(size, |len| start.saturating_add(len).min(size));
        if end - start > limits::READ_BYTES_MAX {
            return Err(StoreError::Invalid(format!(
                "a read of {} bytes exceeds the {}-byte limit; read in ranges",
                end - start,
                limits::READ_BYTES_MAX
            )));
        }
        Ok((start, end))
    }

    #[must_use]
    pub fn range(offset_bytes: u64, length_bytes: u64) -> ReadOptions {
        ReadOptions {
            offset_bytes,
            length_bytes: Some(length_bytes),
            verify_checksum: true,
        }
    }
}

/// An object's size and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectStat {
    pub size_bytes: u64,
    pub version: u64,
}

/// Space on the store's file system, and the thresholds in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    /// Bytes of object data held (allocated extents and inline data).
    pub stored_bytes: u64,
    pub nearfull_ratio: f64,
    pub full_ratio: f64,
}

impl Capacity {
    #[must_use]
    pub fn used_ratio(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        if self.total_bytes == 0 {
            0.0
        } else {
            self.used_bytes as f64 / self.total_bytes as f64
        }
    }

    #[must_use]
    pub fn is_nearfull(&self) -> bool {
        self.used_ratio() >= self.nearfull_ratio
    }

    #[must_use]
    pub fn is_full(&self) -> bool {
        self.used_ratio() >= self.full_ratio
    }
}

/// A page of object keys, and where the next page starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPage {
    pub keys: Vec<ObjectKey>,
    /// Pass as `after` to get the next page; `None` at the end.
    pub next: Option<ObjectKey>,
}

impl ObjectPage {
    /// A page of at most `limit` keys from keys listed in order, fetched one
    /// past the limit so that a further page is known to exist.
    pub(crate) fn from_overfetched(mut keys: Vec<ObjectKey>, limit: usize) -> ObjectPage {
        let next = if keys.len() > limit {
            keys.truncate(limit);
            keys.last().cloned()
        } else {
            None
        };
        ObjectPage { keys, next }
    }
}

/// Operating errors of a store. None of them is a panic: bytes read from
/// disk that fail their checksum are [`StoreError::Corrupt`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("object {object} not found in collection {collection}")]
    NotFound {
        collection: CollectionId,
        object: ObjectKey,
    },
    #[error("collection {0} does not exist")]
    NoCollection(CollectionId),
    #[error("collection {0} already exists")]
    CollectionExists(CollectionId),
    #[error("collection {0} is not empty")]
    CollectionNotEmpty(CollectionId),
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("store is full: {used_bytes} of {total_bytes} bytes used (full ratio {full_ratio})")]
    Full {
        used_bytes: u64,
        total_bytes: u64,
        full_ratio: f64,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error("the store crashed before this transaction was durable")]
    Crashed,
    #[error("the store is closed")]
    Closed,
}

impl From<std::io::Error> for StoreError {
    fn from(error: std::io::Error) -> StoreError {
        if error.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
            StoreError::Io(format!("no space left on device: {error}"))
        } else {
            StoreError::Io(error.to_string())
        }
    }
}

impl From<fjall::Error> for StoreError {
    /// Damage the metadata database detects (its block checksums, tags,
    /// trailers, journal recovery) is corruption; the rest is I/O.
    fn from(error: fjall::Error) -> StoreError {
        use fjall::Error as F;
        match error {
            F::Storage(inner) => match inner {
                lsm_tree::Error::Io(io) => StoreError::from(io),
                other => StoreError::Corrupt(format!("metadata store: {other:?}")),
            },
            F::Io(io) => StoreError::from(io),
            F::JournalRecovery(_)
            | F::InvalidTrailer
            | F::InvalidTag(_)
            | F::Decompress(_)
            | F::Unrecoverable => StoreError::Corrupt(format!("metadata store: {error:?}")),
            other => StoreError::Io(format!("metadata store: {other:?}")),
        }
    }
}

/// The handle of a submitted transaction: wait on it to learn when it is
/// durable (or why it failed).
#[derive(Debug)]
pub struct Commit(std::sync::mpsc::Receiver<Result<(), StoreError>>);

impl Commit {
    pub(crate) fn channel() -> (std::sync::mpsc::SyncSender<Result<(), StoreError>>, Commit) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        (tx, Commit(rx))
    }

    pub(crate) fn done(result: Result<(), StoreError>) -> Commit {
        let (tx, commit) = Commit::channel();
        let _ = tx.send(result);
        commit
    }

    /// Blocks until the transaction is durable, or failed.
    ///
    /// # Errors
    /// The transaction's error; [`StoreError::Closed`] if the store stopped.
    pub fn wait(self) -> Result<(), StoreError> {
        self.0.recv().unwrap_or(Err(StoreError::Closed))
    }
}

/// The interface every OSD stores through.
pub trait ObjectStore: Send + Sync {
    /// Queues a transaction. It applies atomically, after every transaction
    /// submitted before it, and is durable when the returned [`Commit`]
    /// completes. Concurrent transactions share durable flushes.
    fn submit(&self, txn: Transaction) -> Commit;

    /// Submits and waits.
    ///
    /// # Errors
    /// As [`Commit::wait`].
    fn apply(&self, txn: Transaction) -> Result<(), StoreError> {
        self.submit(txn).wait()
    }

    /// Reads object data, verifying checksums unless told not to.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::Corrupt`] naming the object
    /// and range, or [`StoreError::Io`].
    fn read(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        options: ReadOptions,
    ) -> Result<Bytes, StoreError>;

    /// Size and version of an object.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] and the like.
    fn stat(&self, c: CollectionId, o: &ObjectKey) -> Result<ObjectStat, StoreError>;

    /// All xattrs of an object.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] and the like.
    fn xattrs(&self, c: CollectionId, o: &ObjectKey) -> Result<BTreeMap<Bytes, Bytes>, StoreError>;

    /// Omap entries of an object with keys `> after` (or from the start),
    /// in key order, at most `limit` of them.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] and the like.
    fn omap_range(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError>;

    /// The values of the given omap keys that exist.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] and the like.
    fn omap_get(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>, StoreError>;

    /// Objects of a collection in `(hash, name)` order, after `after`.
    ///
    /// # Errors
    /// [`StoreError::NoCollection`] and the like.
    fn list(
        &self,
        c: CollectionId,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<ObjectPage, StoreError>;

    /// Every collection, in order.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn collections(&self) -> Result<Vec<CollectionId>, StoreError>;

    /// A value of the collection's own key space (the OSD keeps its PG log
    /// there).
    ///
    /// # Errors
    /// [`StoreError::NoCollection`] and the like.
    fn meta_get(&self, c: CollectionId, key: &[u8]) -> Result<Option<Bytes>, StoreError>;

    /// Entries of the collection's key space with keys `> after`, at most
    /// `limit`.
    ///
    /// # Errors
    /// [`StoreError::NoCollection`] and the like.
    fn meta_range(
        &self,
        c: CollectionId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError>;

    /// Space used and free.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    fn capacity(&self) -> Result<Capacity, StoreError>;

    /// Objects, object bytes and allocated bytes of every collection that
    /// holds any object. This default lists and stats every object (and
    /// counts allocation as the object's size); [`DiskStore`] keeps the
    /// figures as it commits.
    ///
    /// # Errors
    /// [`StoreError::Io`] and the like.
    fn collection_usage(&self) -> Result<BTreeMap<CollectionId, CollectionUsage>, StoreError> {
        let mut out = BTreeMap::new();
        for c in self.collections()? {
            let mut usage = CollectionUsage::default();
            let mut after: Option<ObjectKey> = None;
            loop {
                let page = self.list(c, after.as_ref(), 1024)?;
                for key in &page.keys {
                    let stat = self.stat(c, key)?;
                    usage.add(&CollectionUsage::object(stat.size_bytes, stat.size_bytes));
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            if usage != CollectionUsage::default() {
                out.insert(c, usage);
            }
        }
        Ok(out)
    }
}

/// What the objects of one collection hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectionUsage {
    pub objects: u64,
    /// The objects' sizes, summed.
    pub bytes: u64,
    /// Space their data takes: data-file allocation units, and the bytes
    /// kept inline in their metadata records.
    pub allocated_bytes: u64,
}

impl CollectionUsage {
    /// One object of `bytes` taking `allocated_bytes`.
    #[must_use]
    pub fn object(bytes: u64, allocated_bytes: u64) -> CollectionUsage {
        CollectionUsage {
            objects: 1,
            bytes,
            allocated_bytes,
        }
    }

    pub fn add(&mut self, other: &CollectionUsage) {
        self.objects = self.objects.saturating_add(other.objects);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
    }

    pub fn subtract(&mut self, other: &CollectionUsage) {
        self.objects = self.objects.saturating_sub(other.objects);
        self.bytes = self.bytes.saturating_sub(other.bytes);
        self.allocated_bytes = self.allocated_bytes.saturating_sub(other.allocated_bytes);
    }
}

//! The simulator's store: a [`MemStore`] that can also hold damaged
//! metadata records. The disk store seals every metadata value (PG log
//! entries, PG info, missing marks, dups) with a CRC over key and body
//! (`cairn_store::record`), so a torn or misdirected metadata write, or
//! rot in it, reads as [`StoreError::Corrupt`]; [`SimStore::damage_meta`]
//! makes a key read so, until a transaction writes or removes it (a new
//! record replaces the damaged one) or drops its collection.

use bytes::Bytes;
use cairn_store::{
    Capacity, CollectionId, Commit, MemStore, ObjectKey, ObjectPage, ObjectStat, ObjectStore, Op,
    ReadOptions, StoreError, Transaction,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// A [`MemStore`] with damaged metadata records.
#[derive(Debug, Default)]
pub struct SimStore {
    mem: MemStore,
    /// Damaged metadata keys, per collection, as the store reads now.
    damaged: Mutex<BTreeMap<CollectionId, BTreeSet<Bytes>>>,
    /// The same on disk: a crash goes back to it (a rewrite of a damaged
    /// record that was not durable is lost with the crash).
    damaged_durable: Mutex<BTreeMap<CollectionId, BTreeSet<Bytes>>>,
}

type Damaged = BTreeMap<CollectionId, BTreeSet<Bytes>>;

fn locked(m: &Mutex<Damaged>) -> std::sync::MutexGuard<'_, Damaged> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::ops::Deref for SimStore {
    type Target = MemStore;

    fn deref(&self) -> &MemStore {
        &self.mem
    }
}

impl SimStore {
    /// A store whose transactions become durable only at a sync.
    #[must_use]
    pub fn with_manual_sync() -> SimStore {
        SimStore {
            mem: MemStore::with_manual_sync(),
            damaged: Mutex::default(),
            damaged_durable: Mutex::default(),
        }
    }

    fn damaged(&self) -> std::sync::MutexGuard<'_, Damaged> {
        locked(&self.damaged)
    }

    /// [`MemStore::sync`], the damaged records' state included.
    pub fn sync(&self) {
        self.mem.sync();
        *locked(&self.damaged_durable) = self.damaged().clone();
    }

    /// [`MemStore::crash`], the damaged records' state included.
    pub fn crash(&self) {
        self.mem.crash();
        *self.damaged() = locked(&self.damaged_durable).clone();
    }

    /// Damages the record of `key` in `c`'s metadata: reads of it fail with
    /// `Corrupt` until it is written again. `false` if there is no such
    /// record.
    pub fn damage_meta(&self, c: CollectionId, key: &[u8]) -> bool {
        if !matches!(self.mem.meta_get(c, key), Ok(Some(_))) {
            return false;
        }
        for state in [&self.damaged, &self.damaged_durable] {
            locked(state)
                .entry(c)
                .or_default()
                .insert(Bytes::copy_from_slice(key));
        }
        true
    }

    /// Whether any metadata record of `c` is damaged.
    #[must_use]
    pub fn meta_damaged(&self, c: CollectionId) -> bool {
        self.damaged().get(&c).is_some_and(|keys| !keys.is_empty())
    }

    fn corrupt(c: CollectionId, key: &[u8]) -> StoreError {
        StoreError::Corrupt(format!(
            "{c} metadata record {}: checksum mismatch",
            String::from_utf8_lossy(key)
        ))
    }

    /// A transaction that writes, removes or drops damaged records heals
    /// them (durably at the next sync). One the store refuses stops the
    /// OSD, whose crash brings the durable damage back.
    fn heal(&self, txn: &Transaction) {
        let mut damaged = self.damaged();
        let Some(keys) = damaged.get_mut(&txn.collection) else {
            return;
        };
        for op in &txn.ops {
            match op {
                Op::MetaSet { key, .. } | Op::MetaRemove { key } => {
                    keys.remove(key);
                }
                Op::RemoveCollection => keys.clear(),
                _ => {}
            }
        }
    }
}

impl ObjectStore for SimStore {
    fn submit(&self, txn: Transaction) -> Commit {
        let commit = self.mem.submit(txn.clone());
        self.heal(&txn);
        commit
    }

    fn read(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        options: ReadOptions,
    ) -> Result<Bytes, StoreError> {
        self.mem.read(c, o, options)
    }

    fn stat(&self, c: CollectionId, o: &ObjectKey) -> Result<ObjectStat, StoreError> {
        self.mem.stat(c, o)
    }

    fn xattrs(&self, c: CollectionId, o: &ObjectKey) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        self.mem.xattrs(c, o)
    }

    fn omap_range(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.mem.omap_range(c, o, after, limit)
    }

    fn omap_get(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        self.mem.omap_get(c, o, keys)
    }

    fn list(
        &self,
        c: CollectionId,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<ObjectPage, StoreError> {
        self.mem.list(c, after, limit)
    }

    fn collections(&self) -> Result<Vec<CollectionId>, StoreError> {
        self.mem.collections()
    }

    fn meta_get(&self, c: CollectionId, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        if self
            .damaged()
            .get(&c)
            .is_some_and(|keys| keys.contains(key))
        {
            return Err(Self::corrupt(c, key));
        }
        self.mem.meta_get(c, key)
    }

    fn meta_range(
        &self,
        c: CollectionId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let page = self.mem.meta_range(c, after, limit)?;
        let damaged = self.damaged();
        if let Some(keys) = damaged.get(&c)
            && let Some((key, _)) = page.iter().find(|(key, _)| keys.contains(key))
        {
            return Err(Self::corrupt(c, key));
        }
        Ok(page)
    }

    fn capacity(&self) -> Result<Capacity, StoreError> {
        self.mem.capacity()
    }
}

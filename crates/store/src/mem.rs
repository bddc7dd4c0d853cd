//! [`MemStore`]: the store's contract kept in memory, for fast tests, the
//! simulator, and as the reference the real store is property-tested
//! against. It can crash: with manual sync, transactions are applied but not
//! durable until [`MemStore::sync`], and [`MemStore::crash`] drops all that
//! were not. A transaction is atomic, so a write torn by a crash is one that
//! never happened: that is the contract [`crate::DiskStore`] keeps on disk.

use crate::txn::{Op, Transaction};
use crate::{
    Capacity, CollectionId, Commit, ObjectKey, ObjectPage, ObjectStat, ObjectStore, ReadOptions,
    StoreError, limits,
};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::mpsc::SyncSender;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MemObject {
    data: Vec<u8>,
    version: u64,
    xattrs: BTreeMap<Bytes, Bytes>,
    omap: BTreeMap<Bytes, Bytes>,
    /// A byte of `data` that rotted ([`MemStore::rot`]): reads that verify
    /// checksums and touch its checksum block fail with `Corrupt`, as the
    /// disk store's do; a write that covers the byte heals it.
    rotten: Option<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MemCollection {
    objects: BTreeMap<ObjectKey, MemObject>,
    meta: BTreeMap<Bytes, Bytes>,
}

type State = BTreeMap<CollectionId, MemCollection>;

#[derive(Debug, Default)]
struct Inner {
    durable: State,
    current: State,
    waiting: Vec<SyncSender<Result<(), StoreError>>>,
}

/// The in-memory store.
#[derive(Debug, Default)]
pub struct MemStore {
    inner: Mutex<Inner>,
    manual_sync: bool,
}

impl MemStore {
    /// A store whose every transaction is durable when submitted.
    #[must_use]
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// A store whose transactions become durable only at [`MemStore::sync`].
    #[must_use]
    pub fn with_manual_sync() -> MemStore {
        MemStore {
            manual_sync: true,
            ..MemStore::default()
        }
    }

    /// Makes every applied transaction durable and completes their commits.
    pub fn sync(&self) {
        let mut inner = self.lock();
        inner.durable = inner.current.clone();
        for waiter in inner.waiting.drain(..) {
            let _ = waiter.send(Ok(()));
        }
    }

    /// Loses everything not yet durable; their commits fail with
    /// [`StoreError::Crashed`].
    pub fn crash(&self) {
        let mut inner = self.lock();
        inner.current = inner.durable.clone();
        for waiter in inner.waiting.drain(..) {
            let _ = waiter.send(Err(StoreError::Crashed));
        }
    }

    /// Flips a bit of `o`'s data at `offset` (within its size), on disk
    /// and in memory alike, as bit rot would: reads that verify checksums
    /// and touch that 4 KiB block fail with [`StoreError::Corrupt`], as
    /// [`crate::DiskStore`]'s do. `false` if there is no such byte.
    pub fn rot(&self, c: CollectionId, o: &ObjectKey, offset: usize) -> bool {
        let mut inner = self.lock();
        let mut done = false;
        let Inner {
            durable, current, ..
        } = &mut *inner;
        for state in [durable, current] {
            let object = state
                .get_mut(&c)
                .and_then(|coll| coll.objects.get_mut(o))
                .filter(|object| offset < object.data.len());
            if let Some(object) = object {
                if object.rotten.is_none() {
                    object.data[offset] ^= 0x10;
                }
                object.rotten = Some(offset);
                done = true;
            }
        }
        done
    }

    /// Whether any object holds a rotten byte (in memory).
    #[must_use]
    pub fn any_rotten(&self) -> bool {
        let inner = self.lock();
        inner
            .current
            .values()
            .any(|coll| coll.objects.values().any(|o| o.rotten.is_some()))
    }

    /// Whether `o`'s data holds a rotten byte (in memory).
    #[must_use]
    pub fn is_rotten(&self, c: CollectionId, o: &ObjectKey) -> bool {
        let inner = self.lock();
        inner
            .current
            .get(&c)
            .and_then(|coll| coll.objects.get(o))
            .is_some_and(|object| object.rotten.is_some())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock already failed a test; the state
        // is still the last consistent one, so keep serving it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with_object<T>(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        f: impl FnOnce(&MemObject) -> T,
    ) -> Result<T, StoreError> {
        let inner = self.lock();
        let collection = inner.current.get(&c).ok_or(StoreError::NoCollection(c))?;
        let object = collection
            .objects
            .get(o)
            .ok_or_else(|| StoreError::NotFound {
                collection: c,
                object: o.clone(),
            })?;
        Ok(f(object))
    }
}

/// Applies `txn` to a copy of what it touches and returns the copies; the
/// caller installs them only if every operation succeeded.
fn apply(
    state: &State,
    txn: &Transaction,
) -> Result<BTreeMap<CollectionId, Option<MemCollection>>, StoreError> {
    let c = txn.collection;
    let mut touched: BTreeMap<CollectionId, Option<MemCollection>> = BTreeMap::new();
    touched.insert(c, state.get(&c).cloned());
    for op in &txn.ops {
        match op {
            Op::CreateCollection => {
                if touched[&c].is_some() {
                    return Err(StoreError::CollectionExists(c));
                }
                touched.insert(c, Some(MemCollection::default()));
            }
            Op::RemoveCollection => {
                let coll = touched[&c].as_ref().ok_or(StoreError::NoCollection(c))?;
                if !coll.objects.is_empty() {
                    return Err(StoreError::CollectionNotEmpty(c));
                }
                touched.insert(c, None);
            }
            Op::SplitCollection { to, bits, value } => {
                let mask = split_mask(*bits);
                let target = touched
                    .entry(*to)
                    .or_insert_with(|| state.get(to).cloned())
                    .take();
                let mut target = target.unwrap_or_default();
                let source = touched
                    .get_mut(&c)
                    .and_then(Option::as_mut)
                    .ok_or(StoreError::NoCollection(c))?;
                let moving: Vec<ObjectKey> = source
                    .objects
                    .keys()
                    .filter(|k| k.hash & mask == *value)
                    .cloned()
                    .collect();
                for key in moving {
                    if let Some(object) = source.objects.remove(&key) {
                        target.objects.insert(key, object);
                    }
                }
                touched.insert(*to, Some(target));
            }
            other => {
                let coll = touched
                    .get_mut(&c)
                    .and_then(Option::as_mut)
                    .ok_or(StoreError::NoCollection(c))?;
                apply_object_op(c, coll, other)?;
            }
        }
    }
    Ok(touched)
}

/// `hash & mask == value` selects a split's objects.
pub(crate) fn split_mask(bits: u8) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

fn apply_object_op(c: CollectionId, coll: &mut MemCollection, op: &Op) -> Result<(), StoreError> {
    let missing = |o: &ObjectKey| StoreError::NotFound {
        collection: c,
        object: o.clone(),
    };
    match op {
        Op::MetaSet { key, value } => {
            coll.meta.insert(key.clone(), value.clone());
        }
        Op::MetaRemove { key } => {
            coll.meta.remove(key);
        }
        Op::Remove { object } => {
            coll.objects.remove(object).ok_or_else(|| missing(object))?;
        }
        Op::Clone { from, to } => {
            let source = coll.objects.get(from).ok_or_else(|| missing(from))?.clone();
            coll.objects.insert(to.clone(), source);
        }
        Op::CloneRange {
            from,
            to,
            offset,
            length,
            to_offset,
        } => {
            let source = coll.objects.get(from).ok_or_else(|| missing(from))?;
            let size = source.data.len() as u64;
            let end = offset.saturating_add(*length).min(size);
            if *offset < end {
                // Rot is copied as rot (as the disk store does): a rotten
                // byte's block, copied, fails at its new place too.
                let block = usize_of(limits::CSUM_BLOCK_BYTES);
                let copied_rot = source.rotten.and_then(|r| {
                    let first = r / block * block;
                    let (start, stop) = (usize_of(*offset), usize_of(end));
                    (start < first + block && first < stop)
                        .then(|| r.clamp(start, stop - 1) - start)
                });
                let bytes = source.data[usize_of(*offset)..usize_of(end)].to_vec();
                let target = coll.objects.entry(to.clone()).or_default();
                let at = usize_of(*to_offset);
                if target
                    .rotten
                    .is_some_and(|r| at <= r && r < at + bytes.len())
                {
                    target.rotten = None;
                }
                if target.data.len() < at + bytes.len() {
                    target.data.resize(at + bytes.len(), 0);
                }
                target.data[at..at + bytes.len()].copy_from_slice(&bytes);
                if let Some(within) = copied_rot {
                    target.rotten = Some(at + within);
                }
            }
        }
        Op::Rename { from, to } => {
            let source = coll.objects.remove(from).ok_or_else(|| missing(from))?;
            coll.objects.insert(to.clone(), source);
        }
        Op::RemoveXattr { object, name } => {
            coll.objects
                .get_mut(object)
                .ok_or_else(|| missing(object))?
                .xattrs
                .remove(name);
        }
        Op::OmapRemove { object, keys } => {
            let o = coll
                .objects
                .get_mut(object)
                .ok_or_else(|| missing(object))?;
            for key in keys {
                o.omap.remove(key);
            }
        }
        Op::OmapRemoveRange { object, start, end } => {
            let o = coll
                .objects
                .get_mut(object)
                .ok_or_else(|| missing(object))?;
            if start < end {
                let doomed: Vec<Bytes> = o
                    .omap
                    .range(start.clone()..end.clone())
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in doomed {
                    o.omap.remove(&key);
                }
            }
        }
        Op::OmapClear { object } => {
            coll.objects
                .get_mut(object)
                .ok_or_else(|| missing(object))?
                .omap
                .clear();
        }
        creating => {
            let object = creating
                .object()
                .ok_or_else(|| StoreError::Invalid("operation without object".into()))?;
            let o = coll.objects.entry(object.clone()).or_default();
            apply_creating_op(o, creating);
        }
    }
    Ok(())
}

fn apply_creating_op(o: &mut MemObject, op: &Op) {
    // A write that covers the rotten byte replaces it (and its block's
    // checksum); the rest of its block is still read back as written.
    if let Some(at) = o.rotten {
        let at = at as u64;
        let healed = match op {
            Op::Write { offset, data, .. } => *offset <= at && at < offset + data.len() as u64,
            Op::WriteFull { .. } => true,
            Op::Truncate { size, .. } => *size <= at,
            Op::Zero { offset, length, .. } => *offset <= at && at < offset.saturating_add(*length),
            _ => false,
        };
        if healed {
            o.rotten = None;
        }
    }
    match op {
        Op::Write { offset, data, .. } => write_at(&mut o.data, *offset, data),
        Op::WriteFull { data, .. } => o.data = data.to_vec(),
        Op::Append { data, .. } => o.data.extend_from_slice(data),
        Op::Truncate { size, .. } => o.data.resize(usize_of(*size), 0),
        Op::Zero { offset, length, .. } => {
            let size = o.data.len() as u64;
            let start = (*offset).min(size);
            let end = offset.saturating_add(*length).min(size);
            o.data[usize_of(start)..usize_of(end)].fill(0);
        }
        Op::SetVersion { version, .. } => o.version = *version,
        Op::SetXattrs { xattrs, .. } => o
            .xattrs
            .extend(xattrs.iter().map(|(k, v)| (k.clone(), v.clone()))),
        Op::OmapSet { entries, .. } => o
            .omap
            .extend(entries.iter().map(|(k, v)| (k.clone(), v.clone()))),
        _ => {} // Touch: creation was all it asked.
    }
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("object sizes are bounded by OBJECT_SIZE_BYTES_MAX")
}

fn write_at(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = usize_of(offset);
    let end = start + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
}

impl ObjectStore for MemStore {
    fn submit(&self, txn: Transaction) -> Commit {
        if let Err(e) = txn.validate() {
            return Commit::done(Err(e));
        }
        let mut inner = self.lock();
        let touched = match apply(&inner.current, &txn) {
            Ok(touched) => touched,
            Err(e) => return Commit::done(Err(e)),
        };
        for (id, coll) in touched {
            match coll {
                Some(coll) => inner.current.insert(id, coll),
                None => inner.current.remove(&id),
            };
        }
        if self.manual_sync {
            let (tx, commit) = Commit::channel();
            inner.waiting.push(tx);
            commit
        } else {
            inner.durable = inner.current.clone();
            Commit::done(Ok(()))
        }
    }

    fn read(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        options: ReadOptions,
    ) -> Result<Bytes, StoreError> {
        self.with_object(c, o, |object| {
            let (start, end) = options.span(object.data.len() as u64)?;
            if let (true, Some(at)) = (options.verify_checksum, object.rotten) {
                let block = usize_of(limits::CSUM_BLOCK_BYTES);
                let first = at / block * block;
                if usize_of(start) < first + block && first < usize_of(end) {
                    return Err(StoreError::Corrupt(format!(
                        "{c}/{o:?}: checksum mismatch in bytes {first}..{}",
                        first + block
                    )));
                }
            }
            Ok(Bytes::copy_from_slice(
                &object.data[usize_of(start)..usize_of(end)],
            ))
        })?
    }

    fn stat(&self, c: CollectionId, o: &ObjectKey) -> Result<ObjectStat, StoreError> {
        self.with_object(c, o, |object| ObjectStat {
            size_bytes: object.data.len() as u64,
            version: object.version,
        })
    }

    fn xattrs(&self, c: CollectionId, o: &ObjectKey) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        self.with_object(c, o, |object| object.xattrs.clone())
    }

    fn omap_range(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let limit = limit.min(limits::PAGE_ITEMS_MAX);
        self.with_object(c, o, |object| {
            object
                .omap
                .iter()
                .filter(|(k, _)| after.is_none_or(|a| k.as_ref() > a))
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    }

    fn omap_get(
        &self,
        c: CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>, StoreError> {
        self.with_object(c, o, |object| {
            keys.iter()
                .filter_map(|k| object.omap.get(k).map(|v| (k.clone(), v.clone())))
                .collect()
        })
    }

    fn list(
        &self,
        c: CollectionId,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Result<ObjectPage, StoreError> {
        let limit = limit.clamp(1, limits::PAGE_ITEMS_MAX);
        let inner = self.lock();
        let coll = inner.current.get(&c).ok_or(StoreError::NoCollection(c))?;
        let keys: Vec<ObjectKey> = coll
            .objects
            .keys()
            .filter(|k| after.is_none_or(|a| *k > a))
            .take(limit + 1)
            .cloned()
            .collect();
        Ok(ObjectPage::from_overfetched(keys, limit))
    }

    fn collections(&self) -> Result<Vec<CollectionId>, StoreError> {
        Ok(self.lock().current.keys().copied().collect())
    }

    fn meta_get(&self, c: CollectionId, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        let inner = self.lock();
        let coll = inner.current.get(&c).ok_or(StoreError::NoCollection(c))?;
        Ok(coll.meta.get(key).cloned())
    }

    fn meta_range(
        &self,
        c: CollectionId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let limit = limit.min(limits::PAGE_ITEMS_MAX);
        let inner = self.lock();
        let coll = inner.current.get(&c).ok_or(StoreError::NoCollection(c))?;
        Ok(coll
            .meta
            .iter()
            .filter(|(k, _)| after.is_none_or(|a| k.as_ref() > a))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn capacity(&self) -> Result<Capacity, StoreError> {
        let inner = self.lock();
        let stored: u64 = inner
            .current
            .values()
            .flat_map(|c| c.objects.values())
            .map(|o| o.data.len() as u64)
            .sum();
        Ok(Capacity {
            total_bytes: u64::MAX,
            used_bytes: stored,
            available_bytes: u64::MAX - stored,
            stored_bytes: stored,
            nearfull_ratio: 0.85,
            full_ratio: 0.95,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> CollectionId {
        CollectionId(1)
    }

    fn write(name: &str, data: &'static [u8]) -> Transaction {
        Transaction::new(c()).with(Op::WriteFull {
            object: ObjectKey::new(Bytes::from(name.to_owned())),
            data: Bytes::from_static(data).into(),
        })
    }

    /// Bit rot: a verified read of the rotten block is `Corrupt`, never
    /// wrong bytes; an unverified one sees the flipped byte; other blocks
    /// read fine; a crash keeps the rot (it is on disk); a write covering
    /// the byte heals it.
    #[test]
    fn rot_fails_verified_reads_of_its_block_until_rewritten() {
        let store = MemStore::with_manual_sync();
        store.submit(Transaction::new(c()).with(Op::CreateCollection));
        store.submit(write("a", &[7u8; 10_000]));
        store.sync();
        let key = ObjectKey::new(Bytes::from_static(b"a"));
        assert!(!store.rot(c(), &key, 20_000), "past the end");
        assert!(store.rot(c(), &key, 5_000));
        assert!(store.is_rotten(c(), &key) && store.any_rotten());
        assert!(matches!(
            store.read(c(), &key, ReadOptions::default()),
            Err(StoreError::Corrupt(_))
        ));
        let head = ReadOptions {
            length_bytes: Some(4096),
            ..ReadOptions::default()
        };
        assert_eq!(store.read(c(), &key, head).map(|b| b.len()), Ok(4096));
        let unverified = ReadOptions {
            verify_checksum: false,
            ..ReadOptions::default()
        };
        let data = store.read(c(), &key, unverified).expect("unverified read");
        assert_ne!(data[5_000], 7, "the flipped byte");
        store.crash();
        assert!(store.is_rotten(c(), &key), "rot is on disk");
        store.submit(write("a", b"new"));
        assert!(!store.is_rotten(c(), &key), "a full rewrite heals it");
        assert_eq!(
            store.read(c(), &key, ReadOptions::default()),
            Ok(Bytes::from_static(b"new"))
        );
    }

    /// With manual sync, a crash loses exactly the transactions not yet
    /// synced, fails their commits, and keeps everything synced.
    #[test]
    fn crash_drops_only_what_was_not_synced() {
        let store = MemStore::with_manual_sync();
        let create = store.submit(Transaction::new(c()).with(Op::CreateCollection));
        let first = store.submit(write("a", b"one"));
        store.sync();
        assert_eq!(create.wait(), Ok(()));
        assert_eq!(first.wait(), Ok(()));
        let lost = store.submit(write("a", b"two"));
        let lost_new = store.submit(write("b", b"new"));
        // Applied (readable) before it is durable, like a page cache.
        let key = ObjectKey::new(Bytes::from_static(b"a"));
        assert_eq!(
            store.read(c(), &key, ReadOptions::default()),
            Ok(Bytes::from_static(b"two"))
        );
        store.crash();
        assert_eq!(lost.wait(), Err(StoreError::Crashed));
        assert_eq!(lost_new.wait(), Err(StoreError::Crashed));
        assert_eq!(
            store.read(c(), &key, ReadOptions::default()),
            Ok(Bytes::from_static(b"one"))
        );
        let b = ObjectKey::new(Bytes::from_static(b"b"));
        assert!(matches!(
            store.stat(c(), &b),
            Err(StoreError::NotFound { .. })
        ));
    }

    /// A failing transaction changes nothing, even when earlier operations
    /// in it succeeded.
    #[test]
    fn failed_transactions_are_atomic() {
        let store = MemStore::new();
        store
            .apply(Transaction::new(c()).with(Op::CreateCollection))
            .expect("create");
        let key = ObjectKey::new(Bytes::from_static(b"x"));
        let txn = Transaction::new(c())
            .with(Op::WriteFull {
                object: key.clone(),
                data: Bytes::from_static(b"data").into(),
            })
            .with(Op::Remove {
                object: ObjectKey::new(Bytes::from_static(b"missing")),
            });
        assert!(matches!(store.apply(txn), Err(StoreError::NotFound { .. })));
        assert!(matches!(
            store.stat(c(), &key),
            Err(StoreError::NotFound { .. })
        ));
    }
}

//! PG splits: when a pool's `pg_num` grows, each PG copy on an OSD hands
//! the objects that now hash to its new children to them, with their share
//! of the PG log and missing set (DESIGN.md "Placement"). A split is local
//! and metadata-only: the store moves object records between collections,
//! never their data. The children start where their parent is (placement
//! keeps them on the parent's OSDs until `pgp_num` moves them), and peer
//! like any PG in a new interval.
//!
//! Crash safety: a split is several transactions (a child's keys, then its
//! objects, per child; then the parent's cleanup and its new `pg_num`). The
//! parent's recorded `pg_num` changes last, so until then planning again
//! from the parent finishes the split: every step writes what the first
//! attempt wrote. The daemon and the simulator both split here.

use crate::limits::{META_PAGE_KEYS, SPLIT_TXN_OPS_MAX};
use crate::log::{DUP_KEY_PREFIX, LOG_KEY_PREFIX, LogEntry};
use crate::pg::{INFO_KEY, MISSING_KEY_PREFIX};
use crate::scrub::{INCONSISTENT_KEY_PREFIX, STAMPS_KEY};
use bytes::Bytes;
use cairn_placement::hash::{split_children, split_rule, stable_mod};
use cairn_store::{CollectionId, ObjectStore, Op, StoreError, Transaction};
use cairn_types::{PgId, PoolId, object_hash32};
use std::collections::BTreeSet;

/// Metadata key of the `pg_num` a PG collection's objects are split for
/// (u32 big-endian). A collection without it predates splits and counts as
/// split for the pool's current `pg_num`.
pub const PG_NUM_KEY: &[u8] = b"pgnum";

/// The collection of PG `pg`.
#[must_use]
pub fn collection_of(pg: PgId) -> CollectionId {
    CollectionId::pg(pg.pool.0, pg.seed)
}

/// The PG whose collection is `c` (the inverse of [`collection_of`]).
#[must_use]
pub fn pg_of_collection(c: CollectionId) -> PgId {
    PgId {
        pool: cairn_types::PoolId((c.0 >> 32) as u32),
        seed: c.0 as u32,
    }
}

/// The operation recording that a collection is split for `pg_num`.
#[must_use]
pub fn pg_num_op(pg_num: u32) -> Op {
    Op::MetaSet {
        key: Bytes::from_static(PG_NUM_KEY),
        value: Bytes::copy_from_slice(&pg_num.to_be_bytes()),
    }
}

/// The `pg_num` collection `c` is split for (`None`: not recorded).
///
/// # Errors
/// The store cannot read the key, or its value is malformed (`Corrupt`).
pub fn split_for(store: &dyn ObjectStore, c: CollectionId) -> Result<Option<u32>, StoreError> {
    let Some(value) = store.meta_get(c, PG_NUM_KEY)? else {
        return Ok(None);
    };
    let bytes: [u8; 4] = value[..]
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("{c} pg_num key of {} bytes", value.len())))?;
    Ok(Some(u32::from_be_bytes(bytes)))
}

/// Splits every PG collection of `pool` in the store for `pg_num`, parents
/// before children, submitting each transaction with `submit` in order
/// (the daemon applies it durably; the simulator queues it like any write,
/// so a crash may keep any prefix). The store must already hold every
/// earlier write to the pool's collections. Returns the collections a
/// split created or changed.
///
/// # Errors
/// The store failed; what was submitted is a prefix that planning again
/// finishes.
pub fn split_pool(
    store: &dyn ObjectStore,
    pool: PoolId,
    pg_num: u32,
    submit: &mut dyn FnMut(Transaction) -> Result<(), StoreError>,
) -> Result<BTreeSet<CollectionId>, StoreError> {
    let mut seeds: BTreeSet<u32> = store
        .collections()?
        .into_iter()
        .filter(|c| c.0 >> 32 == u64::from(pool.0))
        .map(|c| u32::try_from(c.0 & 0xffff_ffff).unwrap_or(u32::MAX))
        .filter(|&seed| seed < pg_num)
        .collect();
    let mut touched = BTreeSet::new();
    while let Some(seed) = seeds.pop_first() {
        let parent = PgId::new(pool, seed);
        let c = collection_of(parent);
        // One step per pass: a child left by an interrupted earlier split
        // to a smaller pg_num is finished at that size first.
        while let Some(from) = split_for(store, c)?.filter(|&from| from < pg_num) {
            let mut to = pg_num;
            let known = store.collections()?;
            for child in split_children(seed, from, pg_num) {
                let cc = collection_of(PgId::new(pool, child));
                if known.contains(&cc)
                    && let Some(m) = split_for(store, cc)?
                    && m > from
                {
                    to = to.min(m);
                }
            }
            for txn in split_txns(store, parent, from, to)? {
                touched.insert(txn.collection);
                submit(txn)?;
            }
            seeds.extend(split_children(seed, from, to));
        }
    }
    Ok(touched)
}

/// The transactions splitting PG `parent`'s collection from `from` to `to`
/// PGs, to submit in order.
///
/// # Errors
/// The store cannot read the parent, or a log entry is malformed.
pub fn split_txns(
    store: &dyn ObjectStore,
    parent: PgId,
    from: u32,
    to: u32,
) -> Result<Vec<Transaction>, StoreError> {
    let pc = collection_of(parent);
    let meta = all_meta(store, pc)?;
    let existing = store.collections()?;
    let object_of = |key: &Bytes, value: &Bytes| -> Result<Option<Bytes>, StoreError> {
        if let Some(name) = key
            .strip_prefix(MISSING_KEY_PREFIX)
            .or_else(|| key.strip_prefix(INCONSISTENT_KEY_PREFIX))
        {
            return Ok(Some(Bytes::copy_from_slice(name)));
        }
        if key.starts_with(LOG_KEY_PREFIX) {
            let entry = LogEntry::decode(value)
                .map_err(|e| StoreError::Corrupt(format!("{pc} log entry: {e}")))?;
            return Ok(Some(entry.object));
        }
        // A roll-back record goes with its object (whose stash the store
        // moves with it: stashes hash as their objects do).
        if key.starts_with(crate::undo::UNDO_KEY_PREFIX) {
            let record = crate::undo::UndoRecord::decode(value)
                .map_err(|e| StoreError::Corrupt(format!("{pc} undo record: {e}")))?;
            return Ok(Some(record.object));
        }
        Ok(None)
    };
    // Per key: the PG its object belongs to at `to` (None: a PG-wide key).
    let mut keyed = Vec::with_capacity(meta.len());
    for (key, value) in meta {
        let owner = object_of(&key, &value)?.map(|o| stable_mod(object_hash32(&o), to));
        keyed.push((key, value, owner));
    }
    let shared = |key: &Bytes| {
        key.starts_with(DUP_KEY_PREFIX) || key[..] == *INFO_KEY || key[..] == *STAMPS_KEY
    };
    let mut txns = Vec::new();
    for child in split_children(parent.seed, from, to) {
        let cc = collection_of(PgId::new(parent.pool, child));
        // The child's keys first, its marker in the first transaction, so
        // an interrupted split is recognised (see `split_pool`).
        let mut ops = Vec::new();
        if !existing.contains(&cc) {
            ops.push(Op::CreateCollection);
        }
        ops.push(pg_num_op(to));
        for (key, value, owner) in &keyed {
            if *owner == Some(child) || (owner.is_none() && shared(key)) {
                ops.push(Op::MetaSet {
                    key: key.clone(),
                    value: value.clone(),
                });
            }
        }
        chunked(cc, ops, &mut txns);
        let (bits, value) = split_rule(child, to);
        txns.push(Transaction::new(pc).with(Op::SplitCollection {
            to: cc,
            bits,
            value,
        }));
    }
    // Then the parent forgets what moved; its new pg_num comes last.
    let mut ops: Vec<Op> = keyed
        .into_iter()
        .filter(|(_, _, owner)| owner.is_some_and(|o| o != parent.seed))
        .map(|(key, _, _)| Op::MetaRemove { key })
        .collect();
    ops.push(pg_num_op(to));
    chunked(pc, ops, &mut txns);
    Ok(txns)
}

/// Every metadata key of collection `c`.
fn all_meta(store: &dyn ObjectStore, c: CollectionId) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
    let mut out = Vec::new();
    loop {
        let after = out.last().map(|(k, _): &(Bytes, Bytes)| k.clone());
        let page = store.meta_range(c, after.as_deref(), META_PAGE_KEYS)?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

/// `ops` on collection `c` as transactions of at most [`SPLIT_TXN_OPS_MAX`].
fn chunked(c: CollectionId, ops: Vec<Op>, txns: &mut Vec<Transaction>) {
    let mut txn = Transaction::new(c);
    for op in ops {
        if txn.ops.len() >= SPLIT_TXN_OPS_MAX {
            txns.push(std::mem::replace(&mut txn, Transaction::new(c)));
        }
        txn.push(op);
    }
    if !txn.ops.is_empty() {
        txns.push(txn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::load_pg;
    use crate::log::{DupEntry, LogKind, LogResult, ReqId, Version};
    use cairn_store::{MemStore, ObjectKey};

    const POOL: PoolId = PoolId(3);

    fn name(i: usize) -> Bytes {
        Bytes::from(format!("obj-{i}"))
    }

    /// PG 0 of a pool of `pg_num` holding `objects` objects, each written
    /// once and logged, the last few missing, with dups.
    fn parent_store(pg_num: u32, objects: usize) -> (MemStore, Vec<Bytes>) {
        let store = MemStore::new();
        let pg = PgId::new(POOL, 0);
        let c = collection_of(pg);
        store
            .apply(
                Transaction::new(c)
                    .with(Op::CreateCollection)
                    .with(pg_num_op(pg_num)),
            )
            .expect("store");
        let mut names = Vec::new();
        let mut seq = 0;
        for i in 0.. {
            if names.len() == objects {
                break;
            }
            let n = name(i);
            if stable_mod(object_hash32(&n), pg_num) != 0 {
                continue;
            }
            seq += 1;
            let version = Version::new(2, seq);
            let entry = LogEntry {
                version,
                req: ReqId {
                    client: 9,
                    tid: seq,
                },
                object: n.clone(),
                kind: LogKind::Write,
                result: LogResult::Ok {
                    object_version: seq,
                },
            };
            let dup = DupEntry::of(&entry);
            let mut txn = Transaction::new(c)
                .with(Op::WriteFull {
                    object: ObjectKey::new(n.clone()),
                    data: Bytes::from(vec![u8::try_from(i % 251).expect("store"); 100]).into(),
                })
                .with(Op::MetaSet {
                    key: version.log_key(),
                    value: entry.encode(),
                })
                .with(Op::MetaSet {
                    key: version.dup_key(),
                    value: dup.encode(),
                });
            if names.len() + 3 > objects {
                txn.push(Op::MetaSet {
                    key: crate::pg::missing_key(&n),
                    value: Bytes::new(),
                });
            }
            store.apply(txn).expect("store");
            names.push(n);
        }
        (store, names)
    }

    fn split_all(store: &MemStore, pg_num: u32) -> BTreeSet<CollectionId> {
        split_pool(store, POOL, pg_num, &mut |txn| store.apply(txn)).expect("store")
    }

    /// Every object, log entry and missing mark is in the PG its hash names
    /// at `pg_num`, and every PG is recorded as split for it.
    fn assert_split(store: &MemStore, names: &[Bytes], pg_num: u32) {
        for n in names {
            let seed = stable_mod(object_hash32(n), pg_num);
            let c = collection_of(PgId::new(POOL, seed));
            assert!(
                store.stat(c, &ObjectKey::new(n.clone())).is_ok(),
                "{n:?} in {c}"
            );
        }
        let mut objects = 0;
        for c in store.collections().expect("store") {
            let seed = u32::try_from(c.0 & 0xffff_ffff).expect("store");
            assert_eq!(split_for(store, c).expect("store"), Some(pg_num), "{c}");
            let stored = load_pg(store, c).expect("store");
            for e in &stored.log {
                assert_eq!(
                    stable_mod(object_hash32(&e.object), pg_num),
                    seed,
                    "{c} log"
                );
            }
            for m in &stored.missing {
                assert_eq!(stable_mod(object_hash32(m), pg_num), seed, "{c} missing");
            }
            assert_eq!(stored.dups.len(), names.len(), "{c}: every dup kept");
            objects += store.list(c, None, 10_000).expect("store").keys.len();
        }
        assert_eq!(objects, names.len(), "nothing lost or doubled");
    }

    #[test]
    fn a_split_moves_objects_log_and_missing_to_the_children() {
        let (store, names) = parent_store(1, 200);
        let touched = split_all(&store, 6);
        assert_eq!(touched.len(), 6, "the parent and its five children");
        assert_split(&store, &names, 6);
        // Growing again splits the children in turn.
        split_all(&store, 13);
        assert_split(&store, &names, 13);
        assert!(
            split_all(&store, 13).is_empty(),
            "a finished split is a no-op"
        );
    }

    #[test]
    fn an_interrupted_split_finishes_when_planned_again() {
        let (reference, names) = parent_store(2, 150);
        let mut steps = 0;
        split_pool(&reference, POOL, 8, &mut |txn| {
            steps += 1;
            reference.apply(txn)
        })
        .expect("store");
        assert!(steps > 4);
        for cut in 0..steps {
            let (store, _) = parent_store(2, 150);
            let mut n = 0;
            let result = split_pool(&store, POOL, 8, &mut |txn| {
                n += 1;
                if n > cut {
                    return Err(StoreError::Io("power lost".into()));
                }
                store.apply(txn)
            });
            assert!(result.is_err());
            // The pool may have grown again meanwhile.
            let final_pg_num = if cut % 2 == 0 { 8 } else { 16 };
            split_all(&store, final_pg_num);
            assert_split(&store, &names, final_pg_num);
        }
    }

    #[test]
    fn large_logs_split_in_bounded_transactions() {
        let (store, names) = parent_store(1, 2500);
        let mut largest = 0;
        split_pool(&store, POOL, 2, &mut |txn| {
            largest = largest.max(txn.ops.len());
            store.apply(txn)
        })
        .expect("store");
        assert!(largest <= cairn_store::limits::TXN_OPS_MAX, "{largest} ops");
        assert_split(&store, &names, 2);
    }

    #[test]
    fn a_collection_without_a_marker_is_left_alone() {
        let store = MemStore::new();
        let c = collection_of(PgId::new(POOL, 0));
        store
            .apply(Transaction::new(c).with(Op::CreateCollection))
            .expect("store");
        assert!(split_all(&store, 4).is_empty());
        store
            .apply(Transaction::new(c).with(Op::MetaSet {
                key: Bytes::from_static(PG_NUM_KEY),
                value: Bytes::from_static(b"xy"),
            }))
            .expect("store");
        assert!(matches!(split_for(&store, c), Err(StoreError::Corrupt(_))));
    }
}

//! The disk store behaves exactly like the in-memory reference on random
//! transaction sequences (every op kind, sizes around the inline limit and
//! checksum blocks, failing transactions), before and after a reopen.

use bytes::Bytes;
use cairn_store::{
    CollectionId, CollectionUsage, DiskStore, MemStore, ObjectKey, ObjectStore, Op, ReadOptions,
    StoreConfig, StoreError, Transaction,
};
use cairn_types::checked::CheckedBytes;
use proptest::prelude::*;
use std::collections::BTreeMap;

const A: CollectionId = CollectionId(1);
const B: CollectionId = CollectionId(2);

fn object(i: u8) -> ObjectKey {
    ObjectKey::new(Bytes::from(format!("obj-{i}")))
}

/// Odd seeds give block-aligned memory, as the wire delivers large data
/// segments (the store writes those without staging a copy); even seeds an
/// ordinary allocation.
/// Aligned for odd seeds (as a received data segment), and carrying its
/// block checksums for seeds that are 1 or 2 mod 4 (as one the wire
/// verified), so every way a payload reaches the store is exercised.
fn payload(len: usize, seed: u8) -> CheckedBytes {
    let bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let bytes = if seed % 2 == 1 {
        cairn_iobuf::aligned_copy(&bytes).expect("mapped")
    } else {
        Bytes::from(bytes)
    };
    if matches!(seed % 4, 1 | 2) {
        CheckedBytes::summed(bytes)
    } else {
        bytes.into()
    }
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(100),
        Just(4095),
        Just(4097),
        Just(16 * 1024),
        Just(16 * 1024 + 1),
        Just(70_000),
        Just(300_000),
        Just(1_200_003),
    ]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(4096),
        Just(5000),
        Just(16_000),
        Just(20_000),
        Just(100_000)
    ]
}

fn small_map() -> impl Strategy<Value = BTreeMap<Bytes, Bytes>> {
    prop::collection::btree_map(
        (0u8..6).prop_map(|k| Bytes::from(format!("k{k}"))),
        (0usize..40, any::<u8>()).prop_map(|(n, s)| payload(n, s).into()),
        0..4,
    )
}

fn op() -> impl Strategy<Value = Op> {
    let obj = || (0u8..5).prop_map(object);
    prop_oneof![
        3 => (obj(), offset(), size(), any::<u8>()).prop_map(|(object, offset, n, s)| Op::Write { object, offset, data: payload(n, s) }),
        3 => (obj(), size(), any::<u8>()).prop_map(|(object, n, s)| Op::WriteFull { object, data: payload(n, s) }),
        2 => (obj(), size(), any::<u8>()).prop_map(|(object, n, s)| Op::Append { object, data: payload(n, s) }),
        1 => (obj(), offset()).prop_map(|(object, size)| Op::Truncate { object, size }),
        1 => (obj(), offset(), offset()).prop_map(|(object, offset, length)| Op::Zero { object, offset, length }),
        1 => obj().prop_map(|object| Op::Touch { object }),
        2 => obj().prop_map(|object| Op::Remove { object }),
        1 => (obj(), obj()).prop_map(|(from, to)| Op::Clone { from, to }),
        1 => (obj(), obj(), offset(), offset(), offset()).prop_map(|(from, to, offset, length, to_offset)| Op::CloneRange { from, to, offset, length, to_offset }),
        1 => (obj(), obj()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => (obj(), any::<u64>()).prop_map(|(object, version)| Op::SetVersion { object, version }),
        1 => (obj(), small_map()).prop_map(|(object, xattrs)| Op::SetXattrs { object, xattrs }),
        1 => (obj(), 0u8..6).prop_map(|(object, k)| Op::RemoveXattr { object, name: Bytes::from(format!("k{k}")) }),
        2 => (obj(), small_map()).prop_map(|(object, entries)| Op::OmapSet { object, entries }),
        1 => (obj(), 0u8..6).prop_map(|(object, k)| Op::OmapRemove { object, keys: vec![Bytes::from(format!("k{k}"))] }),
        1 => (obj(), 0u8..6, 0u8..6).prop_map(|(object, a, b)| Op::OmapRemoveRange {
            object, start: Bytes::from(format!("k{a}")), end: Bytes::from(format!("k{b}"))
        }),
        1 => obj().prop_map(|object| Op::OmapClear { object }),
        1 => (0u8..4, any::<u8>()).prop_map(|(k, s)| Op::MetaSet { key: Bytes::from(format!("m{k}")), value: payload(8, s).into() }),
        1 => (0u8..4).prop_map(|k| Op::MetaRemove { key: Bytes::from(format!("m{k}")) }),
    ]
}

fn txn() -> impl Strategy<Value = Transaction> {
    prop_oneof![
        12 => prop::collection::vec(op(), 1..4).prop_map(|ops| Transaction { collection: A, ops }),
        1 => (0u8..2, 0u32..2).prop_map(|(bits, value)| Transaction::new(A).with(Op::SplitCollection { to: B, bits, value })),
        1 => Just(Transaction::new(B).with(Op::RemoveCollection)),
        1 => Just(Transaction::new(B).with(Op::CreateCollection)),
        1 => prop::collection::vec(op(), 1..3).prop_map(|ops| Transaction { collection: B, ops }),
    ]
}

/// Everything observable about a store, for comparison.
fn dump(store: &dyn ObjectStore) -> String {
    let mut out = String::new();
    for c in store.collections().expect("collections") {
        out += &format!("collection {c}\n");
        for (k, v) in store.meta_range(c, None, 1000).expect("meta") {
            out += &format!("  meta {k:?}={v:?}\n");
        }
        let mut after = None;
        loop {
            let page = store.list(c, after.as_ref(), 2).expect("list");
            for o in &page.keys {
                let stat = store.stat(c, o).expect("stat");
                let data = store.read(c, o, ReadOptions::default()).expect("read");
                let digest = crc32c(&data);
                out += &format!(
                    "  {o:?} size {} version {} data {digest:08x}\n",
                    stat.size_bytes, stat.version
                );
                out += &format!("    xattrs {:?}\n", store.xattrs(c, o).expect("xattrs"));
                out += &format!(
                    "    omap {:?}\n",
                    store.omap_range(c, o, None, 1000).expect("omap")
                );
                // A ranged read crossing block and piece boundaries.
                let part = store
                    .read(c, o, ReadOptions::range(4000, 9000))
                    .expect("range");
                let expected = data.slice((4000.min(data.len()))..(13_000.min(data.len())));
                assert_eq!(part, expected, "ranged read of {o:?}");
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    out
}

fn crc32c(data: &[u8]) -> u32 {
    // Same polynomial as the store; only used to shorten the dump.
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn same_outcome(a: &Result<(), StoreError>, b: &Result<(), StoreError>) -> bool {
    match (a, b) {
        (Ok(()), Ok(())) => true,
        (Err(x), Err(y)) => std::mem::discriminant(x) == std::mem::discriminant(y),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn disk_store_matches_the_model(txns in prop::collection::vec(txn(), 1..30)) {
        let dir = tempfile::Builder::new().prefix("cairn-model-").tempdir_in("/var/tmp").expect("tempdir");
        let model = MemStore::new();
        let create = Transaction::new(A).with(Op::CreateCollection);
        model.apply(create.clone()).expect("create");
        let kept;
        {
            let disk = DiskStore::open(dir.path(), StoreConfig::default()).expect("open");
            disk.apply(create).expect("create");
            for t in &txns {
                let expected = model.apply(t.clone());
                let got = disk.apply(t.clone());
                prop_assert!(same_outcome(&expected, &got), "{t:?}: model {expected:?}, disk {got:?}");
            }
            prop_assert_eq!(dump(&model), dump(&disk));
            // The usage the committer keeps counts what a listing finds...
            let counted = disk.collection_usage().expect("usage");
            let listed = model.collection_usage().expect("usage");
            let objects_and_bytes = |u: &BTreeMap<CollectionId, CollectionUsage>| {
                u.iter().map(|(c, u)| (*c, u.objects, u.bytes)).collect::<Vec<_>>()
            };
            prop_assert_eq!(objects_and_bytes(&counted), objects_and_bytes(&listed));
            kept = counted;
        }
        let reopened = DiskStore::open(dir.path(), StoreConfig::default()).expect("reopen");
        prop_assert_eq!(dump(&model), dump(&reopened), "after reopen");
        // ...and what a count from scratch at open finds, allocation included.
        prop_assert_eq!(kept, reopened.collection_usage().expect("usage"), "usage after reopen");
    }

    /// Concurrent submitters (so batches form) end in the same state as
    /// the same transactions applied one by one, when they touch distinct
    /// objects.
    #[test]
    fn group_commit_is_invisible(sizes in prop::collection::vec(size(), 8..24)) {
        let dir = tempfile::Builder::new().prefix("cairn-group-").tempdir_in("/var/tmp").expect("tempdir");
        let disk = std::sync::Arc::new(DiskStore::open(dir.path(), StoreConfig::default()).expect("open"));
        let model = MemStore::new();
        let create = Transaction::new(A).with(Op::CreateCollection);
        disk.apply(create.clone()).expect("create");
        model.apply(create).expect("create");
        let txns: Vec<Transaction> = sizes.iter().enumerate().map(|(i, &n)| {
            Transaction::new(A)
                .with(Op::WriteFull { object: ObjectKey::new(Bytes::from(format!("g{i}"))), data: payload(n, i as u8) })
                .with(Op::OmapSet { object: ObjectKey::new(Bytes::from(format!("g{i}"))), entries: BTreeMap::from([(Bytes::from("i"), Bytes::from(i.to_string()))]) })
        }).collect();
        let commits: Vec<_> = txns.iter().map(|t| disk.submit(t.clone())).collect();
        for c in commits {
            c.wait().expect("commit");
        }
        for t in txns {
            model.apply(t).expect("apply");
        }
        prop_assert_eq!(dump(&model), dump(disk.as_ref()));
    }
}

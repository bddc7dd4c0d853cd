//! Erasure-coded pools on a real `cairn up` cluster (6 OSDs, 4+2 with a
//! 4 KiB stripe unit): whole-object writes and reads of every size class
//! through the client and the CLI, byte ranges across chunk and stripe
//! boundaries, stat, xattrs, listing, exclusive creates and removes;
//! partial writes against a model; omap refused with a clear error; and, after
//! shutdown, every shard checked in the OSDs' stores: on its own position,
//! exactly its length (never padded to a stripe), the same metadata on
//! every shard, the parity the code of the data, the data the object.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadOp, ReadRange, ReadResult, WriteOp};
use common::{Cluster, mon_addr, ok, pattern, runtime};
use std::collections::BTreeMap;

const POOL: &str = "ec";

/// Creates the erasure-coded pool `ec` (`K+M` as `code`, 4 KiB stripe
/// unit, `pg_num` PGs, `extra` flags) and waits until every PG is clean.
fn create_pool(cluster: &Cluster, code: &str, pg_num: &str, extra: &[&str]) {
    let mut args = vec![
        "pool",
        "create",
        POOL,
        "--erasure",
        code,
        "--stripe-unit",
        "4K",
        "--pg-num",
        pg_num,
    ];
    args.extend_from_slice(extra);
    ok(cluster.cairn(&args), "pool create --erasure");
    common::wait_clean(cluster);
}

/// The acting OSDs of each PG of the pool, in position order.
fn pool_acting(cluster: &Cluster) -> BTreeMap<String, Vec<u64>> {
    let pool_id = common::ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls")
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == POOL)
        .and_then(|p| p["id"].as_u64())
        .expect("the pool's id");
    common::checks::acting_sets(cluster)
        .into_iter()
        .filter(|(pg, _)| pg.starts_with(&format!("{pool_id}.")))
        .collect()
}

/// Reads every object of `model` whole and checks its bytes.
fn read_all(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    model: &BTreeMap<String, Vec<u8>>,
    when: &str,
) {
    rt.block_on(async {
        for (name, data) in model {
            let got = client
                .read(POOL, name.as_bytes(), range(0, None))
                .await
                .unwrap_or_else(|e| panic!("{when}: read {name}: {e}"));
            assert!(
                got[..] == data[..],
                "{when}: {name} reads back different bytes"
            );
        }
    });
}

fn range(offset_bytes: u64, length_bytes: Option<u64>) -> ReadRange {
    ReadRange {
        offset_bytes,
        length_bytes,
    }
}

#[test]
fn an_erasure_coded_pool_serves_whole_objects_and_stores_only_shards() {
    let cluster = Cluster::up("ec-objects", 6, 19500, &[]);
    create_pool(&cluster, "4+2", "8", &[]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");

    // Every size class: empty, below the chunk alignment, one chunk, one
    // stripe (16 KiB), a few stripes and a ragged end, 5 MiB.
    let sizes = [0usize, 1, 100, 4096, 16 * 1024, 100 * 1024 + 7, 5 << 20];
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    rt.block_on(async {
        for (i, size) in sizes.iter().enumerate() {
            let name = format!("obj-{size}");
            let data = pattern(i as u64 + 1, *size);
            let version = client
                .write_full(POOL, name.as_bytes(), Bytes::from(data.clone()))
                .await
                .unwrap_or_else(|e| panic!("put {name}: {e}"));
            assert!(version > 0);
            let back = client
                .read(POOL, name.as_bytes(), range(0, None))
                .await
                .unwrap_or_else(|e| panic!("get {name}: {e}"));
            assert_eq!(back.len(), data.len(), "{name}");
            assert!(back[..] == data[..], "{name} reads back different bytes");
            let stat = client.stat(POOL, name.as_bytes()).await.expect("stat");
            assert_eq!(stat.size_bytes, *size as u64, "{name}: stat size");
            assert_eq!(stat.version, version, "{name}: stat version");
            model.insert(name, data);
        }
        // Byte ranges across chunk and stripe boundaries, past the end,
        // and several in one request.
        let big = &model["obj-5242880"];
        for (offset, len) in [
            (0u64, 1u64),
            (4095, 2),
            (16383, 16386),
            (12_288, 4096),
            (1 << 20, 3 << 20),
            (5 << 20, 10),
            ((5 << 20) - 5, 100),
        ] {
            let got = client
                .read(POOL, b"obj-5242880", range(offset, Some(len)))
                .await
                .expect("range read");
            let start = usize::try_from(offset).expect("small").min(big.len());
            let end = usize::try_from(offset + len).expect("small").min(big.len());
            assert!(got[..] == big[start..end], "range {offset}+{len}");
        }
        let several = ReadOp::new().stat().read(5, Some(10)).read(40_000, Some(3));
        let results = client
            .operate_read(POOL, b"obj-102407", several)
            .await
            .expect("compound read");
        let small = &model["obj-102407"];
        match &results[..] {
            [
                ReadResult::Stat(stat),
                ReadResult::Data(a),
                ReadResult::Data(b),
            ] => {
                assert_eq!(stat.size_bytes, small.len() as u64);
                assert!(a[..] == small[5..15] && b[..] == small[40_000..40_003]);
            }
            other => panic!("compound read answered {other:?}"),
        }

        // Xattrs on every shard, read from the primary's.
        client
            .set_xattr(POOL, b"obj-4096", b"user.kind", Bytes::from_static(b"ec"))
            .await
            .expect("setxattr");
        let xattrs = client.get_xattrs(POOL, b"obj-4096").await.expect("xattrs");
        assert_eq!(
            xattrs,
            BTreeMap::from([(Bytes::from_static(b"user.kind"), Bytes::from_static(b"ec"))]),
            "the shard metadata stays hidden"
        );

        // An exclusive create: the second finds the object.
        let create = || {
            WriteOp::new()
                .create(true)
                .write_full(Bytes::from_static(b"once"))
        };
        client
            .operate(POOL, b"created", create())
            .await
            .expect("first create");
        assert!(matches!(
            client.operate(POOL, b"created", create()).await,
            Err(ClientError::Exists)
        ));
        model.insert("created".into(), b"once".to_vec());

        // Removal, then reads of what is gone.
        client.remove(POOL, b"obj-100").await.expect("remove");
        model.remove("obj-100");
        assert!(matches!(
            client.read(POOL, b"obj-100", range(0, None)).await,
            Err(ClientError::NotFound)
        ));

        // Omap is not served: refused, nothing changed.
        let refused = client
            .omap_set(
                POOL,
                b"obj-4096",
                &BTreeMap::from([(Bytes::from_static(b"k"), Bytes::from_static(b"v"))]),
            )
            .await;
        match refused {
            Err(ClientError::Op(error)) => {
                assert!(error.to_string().contains("not supported"), "{error}");
            }
            other => panic!("an omap write answered {other:?}"),
        }
        let same = client
            .read(POOL, b"obj-4096", range(0, None))
            .await
            .expect("read after refusals");
        assert!(
            same[..] == model["obj-4096"][..],
            "a refusal changed the object"
        );

        // Partial writes (at offsets, appends, truncates, zeroing, several
        // in one request) against the same operations on a byte vector,
        // read back after each, on a small object and on multi-stripe
        // ones; two clients append to one object at once.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |below: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % below.max(1)
        };
        for (name, initial) in [
            ("part-small", 3000usize),
            ("part-big", 300_000),
            ("part-new", 0),
        ] {
            let mut want: Vec<u8> = pattern(7, initial);
            if initial > 0 {
                client
                    .write_full(POOL, name.as_bytes(), Bytes::from(want.clone()))
                    .await
                    .expect("initial put");
            }
            for step in 0..25 {
                let mut op = WriteOp::new();
                for _ in 0..=next(2) {
                    let len = want.len() as u64;
                    let fill = pattern(
                        step * 31 + next(1000),
                        usize::try_from(next(40_000) + 1).expect("small"),
                    );
                    match next(4) {
                        0 => {
                            let offset = next(len + 50_000);
                            let end = usize::try_from(offset).expect("small") + fill.len();
                            if want.len() < end {
                                want.resize(end, 0);
                            }
                            want[end - fill.len()..end].copy_from_slice(&fill);
                            op = op.write(offset, Bytes::from(fill));
                        }
                        1 => {
                            want.extend_from_slice(&fill);
                            op = op.append(Bytes::from(fill));
                        }
                        2 => {
                            let size = next(len + 50_000);
                            want.resize(usize::try_from(size).expect("small"), 0);
                            op = op.truncate(size);
                        }
                        _ => {
                            let (offset, length) = (next(len + 10), next(60_000));
                            let end = usize::try_from(offset + length)
                                .expect("small")
                                .min(want.len());
                            let from = usize::try_from(offset).expect("small").min(end);
                            want[from..end].fill(0);
                            op = op.zero(offset, length);
                        }
                    }
                }
                client
                    .operate(POOL, name.as_bytes(), op)
                    .await
                    .unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
                let got = client
                    .read(POOL, name.as_bytes(), range(0, None))
                    .await
                    .unwrap_or_else(|e| panic!("{name} step {step}: read: {e}"));
                assert_eq!(got.len(), want.len(), "{name} step {step}: size");
                assert!(got[..] == want[..], "{name} step {step}: bytes differ");
            }
            model.insert(name.to_owned(), want);
        }
        // Small overwrites inside whole stripes: a parity delta each (read
        // the changed bytes and the parity over them, write those alone).
        let width = 4 * 4096;
        let mut want = pattern(11, 20 * width);
        client
            .write_full(POOL, b"part-delta", Bytes::from(want.clone()))
            .await
            .expect("initial put");
        for step in 0..20u64 {
            let n = usize::try_from(next(1000) + 1).expect("small");
            let chunk = usize::try_from(next(80)).expect("small");
            let offset = chunk * 4096 + usize::try_from(next(4096 - n as u64)).expect("small");
            let fill = pattern(100 + step, n);
            want[offset..offset + n].copy_from_slice(&fill);
            client
                .write(POOL, b"part-delta", offset as u64, Bytes::from(fill))
                .await
                .unwrap_or_else(|e| panic!("part-delta step {step}: {e}"));
            let got = client
                .read(POOL, b"part-delta", range(0, None))
                .await
                .unwrap_or_else(|e| panic!("part-delta step {step}: read: {e}"));
            assert!(got[..] == want[..], "part-delta step {step}: bytes differ");
        }
        model.insert("part-delta".to_owned(), want);
        let (a, b) = tokio::join!(
            async {
                for i in 0..40u64 {
                    client
                        .append(
                            POOL,
                            b"appended",
                            Bytes::from(vec![b'a'; 1000 + i as usize]),
                        )
                        .await
                        .expect("append a");
                }
            },
            async {
                for i in 0..40u64 {
                    client
                        .append(
                            POOL,
                            b"appended",
                            Bytes::from(vec![b'b'; 3000 + i as usize]),
                        )
                        .await
                        .expect("append b");
                }
            }
        );
        let ((), ()) = (a, b);
        let got = client
            .read(POOL, b"appended", range(0, None))
            .await
            .expect("read appended");
        let total: usize = (0..40).map(|i| 1000 + i + 3000 + i).sum();
        assert_eq!(got.len(), total, "every append landed once");
        // Each append is whole and in order per writer.
        let (mut i, mut na, mut nb) = (0usize, 0usize, 0usize);
        while i < got.len() {
            let byte = got[i];
            let n = if byte == b'a' { 1000 + na } else { 3000 + nb };
            assert!(
                got[i..i + n].iter().all(|x| *x == byte),
                "a torn append at {i}"
            );
            if byte == b'a' {
                na += 1;
            } else {
                nb += 1;
            }
            i += n;
        }
        model.insert("appended".into(), got.to_vec());
    });

    // The CLI: put, get, ls.
    let file = cluster.dir.join("cli-in");
    let data = pattern(99, 300_000);
    std::fs::write(&file, &data).expect("write input");
    let path = file.display().to_string();
    ok(
        cluster.cairn(&["object", "put", "--pool", POOL, "cli", &path]),
        "object put",
    );
    let got = ok(
        cluster.cairn(&["object", "get", "--pool", POOL, "cli"]),
        "object get",
    );
    assert!(got == data, "object get returned other bytes");
    model.insert("cli".into(), data);
    let listed = String::from_utf8(ok(
        cluster.cairn(&["object", "ls", "--pool", POOL]),
        "object ls",
    ))
    .expect("utf-8");
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort_unstable();
    let expected: Vec<&str> = model.keys().map(String::as_str).collect();
    assert_eq!(listed, expected, "object ls lists each object once");

    // Shards on disk, checked against the model.
    let acting = pool_acting(&cluster);
    let dirs = common::checks::osd_dirs(&cluster, cluster.base_port);
    ok(
        cluster.cairn(&["down", "--data", &cluster.dir.display().to_string()]),
        "cairn down",
    );
    let layout = cairn_ec::StripeLayout::new(4, 2, 4096).expect("layout");
    let (objects, stored) = common::checks::shards_match(&acting, &dirs, &layout);
    assert_eq!(
        objects, model,
        "the shards decode to exactly what was written"
    );
    let logical: u64 = model.values().map(|d| d.len() as u64).sum();
    let expected_stored: u64 = model
        .values()
        .map(|d| layout.stored_bytes(d.len() as u64))
        .sum();
    assert_eq!(stored, expected_stored, "shards are never padded");
    eprintln!("{logical} object bytes stored as {stored} shard bytes");
}

/// Waits up to 30 s for `done` to hold of `cairn osd tree`'s OSDs.
fn wait_osds(cluster: &Cluster, what: &str, done: impl Fn(&[serde_json::Value]) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let osds = common::tree_osds(cluster);
        if done(&osds) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {osds:?}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// A 4+2 pool on 6 OSDs loses one (no spare: its position stays a hole):
/// every object still reads back, decoded around the missing shard, and
/// writes go on with 5 of 6 shards. The OSD comes back: recovery rebuilds
/// exactly the shards it missed from 4 others, the PGs become clean, and
/// every shard on disk is what it should be.
#[test]
fn an_erasure_coded_pool_reads_around_a_lost_osd_and_rebuilds_its_shards() {
    let cluster = Cluster::up("ec-degraded", 6, 19530, &["--down-grace", "2s"]);
    let data_dir = cluster.dir.display().to_string();
    create_pool(&cluster, "4+2", "8", &[]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");
    let sizes = [1usize, 3000, 4096, 20_000, 70_001, 1 << 20];
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let put = |model: &mut BTreeMap<String, Vec<u8>>, name: String, seed: u64, size: usize| {
        let data = pattern(seed, size);
        rt.block_on(client.write_full(POOL, name.as_bytes(), Bytes::from(data.clone())))
            .unwrap_or_else(|e| panic!("put {name}: {e}"));
        model.insert(name, data);
    };
    let check_all = |model: &BTreeMap<String, Vec<u8>>, when: &str| {
        read_all(&rt, &client, model, when);
        rt.block_on(async {
            for (name, data) in model {
                if data.len() > 9000 {
                    let got = client
                        .read(POOL, name.as_bytes(), range(4000, Some(5000)))
                        .await
                        .unwrap_or_else(|e| panic!("{when}: range of {name}: {e}"));
                    assert!(got[..] == data[4000..9000], "{when}: a range of {name}");
                }
            }
        });
    };
    for i in 0..30u64 {
        let size = sizes[i as usize % sizes.len()];
        put(&mut model, format!("before-{i}"), i, size);
    }

    // osd.2 stops: reads decode around its shards; writes go on.
    let id_of = |index: u16| {
        let addr = format!("127.0.0.1:{}", cluster.base_port + 1 + index);
        common::tree_osds(&cluster)
            .iter()
            .find(|o| o["addr"] == addr.as_str())
            .and_then(|o| o["id"].as_u64())
            .expect("the OSD's id")
    };
    let stopped = id_of(2);
    ok(
        cluster.cairn(&["daemon", "stop", "osd.2", "--data", &data_dir]),
        "daemon stop",
    );
    wait_osds(&cluster, "osd.2 marked down", |osds| {
        osds.iter().any(|o| o["id"] == stopped && o["up"] == false)
    });
    check_all(&model, "one OSD down");
    for i in 0..20u64 {
        let size = sizes[i as usize % sizes.len()];
        put(&mut model, format!("during-{i}"), 1000 + i, size);
    }
    // Overwrites and removes of objects the stopped OSD holds old shards of.
    for i in 0..6u64 {
        put(
            &mut model,
            format!("before-{i}"),
            2000 + i,
            sizes[(i as usize + 1) % sizes.len()],
        );
    }
    for i in 6..9u64 {
        let name = format!("before-{i}");
        rt.block_on(client.remove(POOL, name.as_bytes()))
            .expect("remove");
        model.remove(&name);
    }
    check_all(&model, "one OSD down, after writes");

    // It comes back: only what it missed is rebuilt, then clean.
    let recovered_before: u64 = recovered_bytes(&cluster);
    ok(
        cluster.cairn(&["daemon", "start", "osd.2", "--data", &data_dir]),
        "daemon start",
    );
    wait_osds(&cluster, "osd.2 up again", |osds| {
        osds.iter().any(|o| o["id"] == stopped && o["up"] == true)
    });
    common::wait_clean(&cluster);
    check_all(&model, "after recovery");
    let rebuilt = recovered_bytes(&cluster) - recovered_before;
    // The stopped OSD holds one shard of every object (6 positions, 6
    // OSDs): at most the longest shard (data shard 0's, or parity's) of
    // each object written meanwhile, and nothing of the others.
    let layout = cairn_ec::StripeLayout::new(4, 2, 4096).expect("layout");
    let overwritten: Vec<String> = (0..6).map(|i| format!("before-{i}")).collect();
    let one_shard_each: u64 = model
        .iter()
        .filter(|(name, _)| name.starts_with("during-") || overwritten.contains(name))
        .map(|(_, d)| {
            let size = d.len() as u64;
            layout.parity_len(layout.chunk_for(size), size)
        })
        .sum();
    eprintln!("rebuilt {rebuilt} shard bytes; at most {one_shard_each} expected");
    assert!(rebuilt > 0, "nothing was rebuilt");
    assert!(
        rebuilt <= one_shard_each,
        "recovery pushed {rebuilt} bytes: more than the stopped OSD's shards of what was written meanwhile"
    );

    // Bit rot in every block of osd.3's data file: reads decode around
    // its shards and report them; a deep scrub finds the rest (parity
    // shards no read touches), and repair rebuilds them all.
    common::rot(&cluster, 3);
    check_all(&model, "osd.3's shards rotten");
    ok(
        cluster.cairn(&["pool", "scrub", POOL, "--deep"]),
        "pool scrub --deep",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
        let states = status["pgs_by_state"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let clean = states.len() == 1 && states.contains_key("active+clean");
        if clean && status["scrub"]["inconsistent_objects"] == 0 && recovered_bytes(&cluster) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rotten shards not repaired: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    common::wait_clean(&cluster);
    check_all(&model, "after repair");

    // Every shard right on disk.
    let acting = pool_acting(&cluster);
    let dirs = common::checks::osd_dirs(&cluster, cluster.base_port);
    ok(cluster.cairn(&["down", "--data", &data_dir]), "cairn down");
    let (objects, _) = common::checks::shards_match(&acting, &dirs, &layout);
    assert_eq!(
        objects, model,
        "the shards decode to exactly what was written"
    );
}

/// The bytes the OSDs pushed for recovery so far, from `cairn status
/// --json` (after the next heartbeats, which carry them).
fn recovered_bytes(cluster: &Cluster) -> u64 {
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    status["recovery"]["recovered_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no recovered bytes in {status}"))
}

/// Each OSD holds the shard of its position, so marking an OSD out of a
/// 2+1 pool on 5 OSDs moves only that position to a spare: the old OSDs
/// keep serving in their positions while the spares are backfilled with
/// the shards of theirs (rebuilt from the other two), then every PG is
/// clean on its new OSDs with every shard right and every object intact.
/// Twice, so a primary's position moves too.
#[test]
fn an_out_osd_is_replaced_at_its_position_by_a_backfilled_spare() {
    // Short PG logs, so a new copy is filled by backfill, not from the log.
    let cluster = Cluster::up_with_env(
        common::test_dir("ec-out"),
        6,
        19560,
        &["--down-grace", "2s"],
        &[("CAIRN_PG_LOG_ENTRIES", "257")],
    );
    create_pool(&cluster, "2+1", "4", &["--failure-domain", "osd"]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    rt.block_on(async {
        for i in 0..60u64 {
            let data = pattern(i, [100usize, 5000, 40_000, 300_000][i as usize % 4]);
            let name = format!("obj-{i}");
            client
                .write_full(POOL, name.as_bytes(), Bytes::from(data.clone()))
                .await
                .expect("put");
            model.insert(name, data);
        }
    });
    for out in ["osd.0", "osd.3"] {
        ok(cluster.cairn(&["osd", "out", out]), "osd out");
        common::wait_clean(&cluster);
        rt.block_on(async {
            for (name, data) in &model {
                let got = client
                    .read(POOL, name.as_bytes(), range(0, None))
                    .await
                    .unwrap_or_else(|e| panic!("after {out} out: read {name}: {e}"));
                assert!(got[..] == data[..], "after {out} out: {name} differs");
            }
            // Partial writes go on in the new positions.
            let name = "obj-3";
            client
                .write(POOL, name.as_bytes(), 1000, Bytes::from_static(b"moved"))
                .await
                .expect("partial write");
        });
        model.get_mut("obj-3").expect("obj-3")[1000..1005].copy_from_slice(b"moved");
    }
    // A primary's disk dies: its OSD stops for good and is marked out. Its
    // PGs serve on from their next position under a temporary acting set
    // with a hole, while the spare placement chose at the dead position is
    // backfilled with that position's shards (the logs are too short to
    // fill it from); then the spare acts.
    rt.block_on(async {
        for i in 0..1400u64 {
            let data = pattern(5000 + i, 100);
            let name = format!("filler-{i}");
            client
                .write_full(POOL, name.as_bytes(), Bytes::from(data.clone()))
                .await
                .expect("put");
            model.insert(name, data);
        }
    });
    let acting = pool_acting(&cluster);
    let (pg, osds) = acting.iter().next().expect("a PG");
    let victim = osds[0];
    let dirs = common::checks::osd_dirs(&cluster, cluster.base_port);
    let dir = dirs[&victim]
        .file_name()
        .expect("dir")
        .to_string_lossy()
        .into_owned();
    eprintln!("osd.{victim} ({dir}), primary of {pg}, stops for good");
    let data_dir = cluster.dir.display().to_string();
    ok(
        cluster.cairn(&["daemon", "stop", &dir, "--data", &data_dir]),
        "daemon stop",
    );
    wait_osds(&cluster, "the dead OSD marked down", |osds| {
        osds.iter().any(|o| o["id"] == victim && o["up"] == false)
    });
    ok(
        cluster.cairn(&["osd", "out", &format!("osd.{victim}")]),
        "osd out",
    );
    common::wait_clean(&cluster);
    let healed = pool_acting(&cluster);
    assert!(
        healed[pg.as_str()][0] != victim && healed.values().all(|o| !o.contains(&victim)),
        "{pg} still names osd.{victim}: {healed:?}"
    );
    rt.block_on(async {
        for (name, data) in &model {
            let got = client
                .read(POOL, name.as_bytes(), range(0, None))
                .await
                .unwrap_or_else(|e| panic!("after the dead primary: read {name}: {e}"));
            assert!(
                got[..] == data[..],
                "after the dead primary: {name} differs"
            );
        }
        client
            .write(POOL, b"obj-3", 2000, Bytes::from_static(b"again"))
            .await
            .expect("partial write");
    });
    model.get_mut("obj-3").expect("obj-3")[2000..2005].copy_from_slice(b"again");
    let acting = pool_acting(&cluster);
    ok(
        cluster.cairn(&["down", "--data", &cluster.dir.display().to_string()]),
        "cairn down",
    );
    let layout = cairn_ec::StripeLayout::new(2, 1, 4096).expect("layout");
    let (objects, _) = common::checks::shards_match(&acting, &dirs, &layout);
    assert_eq!(
        objects, model,
        "the shards decode to exactly what was written"
    );
}

/// The write hole. Lanes patch their objects of a 2+1 pool (compound
/// partial overwrites of two places, a 16-byte header and a 5000-byte
/// patch, in different stripes) while a PG's primary is SIGKILLed, then
/// one of its other shard OSDs, then a primary cuts a write short on
/// purpose (`CAIRN_DEBUG_CUT_EC_WRITE`: its sub-write reaches one shard)
/// and is stopped for good and marked out: a write cut short lands on
/// some shards and not others, and peering must roll it back where it
/// landed (or keep it where it is on enough shards); the cut one is on a
/// single shard of the two left, which cannot rebuild the third, so only
/// a roll-back lets the PG heal onto the spare. Readers never see an object
/// older than its last acknowledged version, nor torn; after healing
/// every object is whole at its last acknowledged version or the one
/// write after it, no object is unfound, and after shutdown every shard
/// matches the others (the parity the code of the data, one version).
#[test]
fn partial_overwrites_cut_by_sigkill_leave_no_torn_stripe() {
    use common::checks::{LoadShape, VersionedLoad, osd_dirs};
    let _serial = common::serial();
    let dir = common::test_dir("ec-write-hole");
    let trigger = dir.with_extension("cut-write");
    let trigger_path = trigger.display().to_string();
    let cluster = Cluster::up_with_env(
        dir,
        4,
        19590,
        &["--down-grace", "2s"],
        &[
            (cairn_osd::daemon::DEBUG_CUT_EC_WRITE_ENV, &trigger_path),
            // The PGs' notes, roll-backs among them.
            ("RUST_LOG", "warn,cairn_osd=info"),
        ],
    );
    create_pool(&cluster, "2+1", "4", &["--min-size", "2"]);
    let rt = runtime();
    let config = cairn_client::ClientConfig::load(&cluster.conf).expect("client config");
    let client = rt
        .block_on(Client::connect_with(
            &config.mon,
            common::client_options(std::time::Duration::from_secs(60)),
        ))
        .expect("client");
    let shape = LoadShape {
        pool: POOL,
        patches: true,
    };
    let load = rt.block_on(async { VersionedLoad::start_shaped(&client, shape, 4, 48) });
    let wait_acked = |at_least: u64, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        while load.acked() < at_least
            || !common::tree_osds(&cluster).iter().all(|o| o["up"] == true)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: writes stalled"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_acked(150, "before the kills");
    let dirs = osd_dirs(&cluster, cluster.base_port);
    for position in [0usize, 1] {
        let acting = pool_acting(&cluster);
        let (pg, osds) = acting.iter().next().expect("a PG");
        let victim = osds[position];
        let dir = dirs[&victim]
            .file_name()
            .expect("dir")
            .to_string_lossy()
            .into_owned();
        eprintln!("SIGKILL osd.{victim}, position {position} of {pg}");
        let acked = load.acked();
        common::kill(cluster.daemon_pid(&dir));
        // The supervisor restarts it; the lanes go on through it.
        wait_acked(acked + 150, "after a kill");
    }
    // A write cut short: one shard has it, the other does not, and its
    // primary is gone.
    let acked = load.acked();
    std::fs::write(&trigger, b"cut").expect("arm the cut");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while trigger.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no primary cut a write"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cutter = (0..4)
        .map(|i| format!("osd.{i}"))
        .find(|name| {
            std::fs::read_to_string(cluster.dir.join("logs").join(format!("{name}.log")))
                .unwrap_or_default()
                .contains(cairn_osd::daemon::DEBUG_CUT_EC_WRITE_ENV)
        })
        .expect("the OSD that cut a write");
    let data_dir = cluster.dir.display().to_string();
    ok(
        cluster.cairn(&["daemon", "stop", &cutter, "--data", &data_dir]),
        "daemon stop",
    );
    let cutter_id = *dirs
        .iter()
        .find(|(_, d)| d.ends_with(&cutter))
        .expect("the cutter's id")
        .0;
    eprintln!("{cutter} (osd id {cutter_id}) cut a write and is gone for good");
    wait_osds(&cluster, "the cutter marked down", |osds| {
        osds.iter()
            .any(|o| o["id"] == cutter_id && o["up"] == false)
    });
    ok(
        cluster.cairn(&["osd", "out", &format!("osd.{cutter_id}")]),
        "osd out",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while load.acked() < acked + 150 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes stalled after the cut"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut load = load;
    let report = rt.block_on(load.stop());
    eprintln!("load: {report:?}");
    assert!(
        report.violations.is_empty(),
        "stale or torn reads: {:?}",
        report.violations
    );
    common::wait_clean(&cluster);
    let lost = rt.block_on(load.verify(&client));
    assert!(lost.is_empty(), "after healing: {lost:?}");
    let acting = pool_acting(&cluster);
    let rolled_back: usize = std::fs::read_dir(cluster.dir.join("logs"))
        .expect("logs")
        .flatten()
        .map(|f| {
            std::fs::read_to_string(f.path())
                .unwrap_or_default()
                .matches("rolled back")
                .count()
        })
        .sum();
    eprintln!("entries rolled back by peering: {rolled_back}");
    assert!(rolled_back >= 1, "the cut write was not rolled back");
    ok(
        cluster.cairn(&["down", "--data", &cluster.dir.display().to_string()]),
        "cairn down",
    );
    let layout = cairn_ec::StripeLayout::new(2, 1, 4096).expect("layout");
    let (objects, _) = common::checks::shards_match(&acting, &dirs, &layout);
    assert_eq!(objects.len(), 48, "every patched object, shard by shard");
}

/// With exactly `k + m` OSDs, a split places every child PG on a
/// permutation of its parent's OSDs, so most copies hold another
/// position's shard than placement now gives them. Each copy records its
/// shard and peering keeps it at that shard's position (a temporary
/// acting set, no data moved): the PGs are clean, every shard is where
/// its position says, and with one OSD stopped every object still
/// decodes from the other two (two positions holding one shard, as before
/// shard identity, would leave some objects one shard short).
#[test]
fn a_split_that_renumbers_shards_keeps_each_shard_at_its_position() {
    let cluster = Cluster::up("ec-renumber", 3, 19570, &["--down-grace", "2s"]);
    let data_dir = cluster.dir.display().to_string();
    create_pool(&cluster, "2+1", "4", &["--min-size", "2"]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let sizes = [1usize, 4096, 9000, 70_001];
    for i in 0..40u64 {
        let name = format!("obj-{i}");
        let data = pattern(i, sizes[i as usize % sizes.len()]);
        rt.block_on(client.write_full(POOL, name.as_bytes(), Bytes::from(data.clone())))
            .unwrap_or_else(|e| panic!("put {name}: {e}"));
        model.insert(name, data);
    }

    ok(
        cluster.cairn(&["pool", "set", POOL, "--pg-num", "16"]),
        "pool set --pg-num",
    );
    common::wait_clean(&cluster);
    let pgs = common::ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
    let renumbered = pgs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["up"] != p["acting"])
        .count();
    eprintln!("{renumbered} of 16 PGs keep their copies in another order than placement's");
    assert!(
        renumbered > 0,
        "no split child was renumbered, so this test shows nothing: {pgs}"
    );
    read_all(&rt, &client, &model, "after the split");

    // One OSD stops: every object decodes from the other two positions.
    ok(
        cluster.cairn(&["daemon", "stop", "osd.1", "--data", &data_dir]),
        "daemon stop",
    );
    let stopped_addr = format!("127.0.0.1:{}", cluster.base_port + 2);
    wait_osds(&cluster, "osd.1 marked down", |osds| {
        osds.iter()
            .any(|o| o["addr"] == stopped_addr.as_str() && o["up"] == false)
    });
    read_all(&rt, &client, &model, "one OSD of three down");
    ok(
        cluster.cairn(&["daemon", "start", "osd.1", "--data", &data_dir]),
        "daemon start",
    );
    common::wait_clean(&cluster);

    // Every shard at its position on disk.
    let acting = pool_acting(&cluster);
    let dirs = common::checks::osd_dirs(&cluster, cluster.base_port);
    ok(cluster.cairn(&["down", "--data", &data_dir]), "cairn down");
    let layout = cairn_ec::StripeLayout::new(2, 1, 4096).expect("layout");
    let (objects, _) = common::checks::shards_match(&acting, &dirs, &layout);
    assert_eq!(objects, model, "the shards decode to what was written");
}

/// Reads `model` whole until every read is answered by the data shards
/// directly (a fresh write is not committed on the shards until the
/// primary's next message, and read delegation starts with the second
/// lease renewal), or the deadline passes.
fn wait_direct(rt: &tokio::runtime::Runtime, client: &Client, model: &BTreeMap<String, Vec<u8>>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let before = client.direct_read_stats();
        read_all(rt, client, model, "waiting for direct reads");
        let after = client.direct_read_stats();
        if after.via_primary == before.via_primary {
            assert_eq!(after.direct - before.direct, model.len() as u64);
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reads still go through the primary: {after:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
fn direct_shard_reads_skip_the_primary_and_never_mix_versions() {
    let cluster = Cluster::up("ec-direct", 3, 19610, &["--down-grace", "2s"]);
    let data_dir = cluster.dir.display().to_string();
    create_pool(&cluster, "2+1", "8", &["--min-size", "2"]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");
    // Small objects (split across both data shards), one of a single
    // stripe, and a large one whose ranged reads touch one shard.
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let sizes = [0usize, 1, 4096, 8192, 70_001, 1 << 20];
    for (i, size) in sizes.iter().enumerate() {
        let name = format!("obj-{size}");
        let data = pattern(i as u64 + 7, *size);
        rt.block_on(client.write_full(POOL, name.as_bytes(), Bytes::from(data.clone())))
            .unwrap_or_else(|e| panic!("put {name}: {e}"));
        model.insert(name, data);
    }
    wait_direct(&rt, &client, &model);

    // Ranged reads within one stripe unit, across units and shards, past
    // the end, and of a missing object: all answered directly.
    let before = client.direct_read_stats();
    let big = &model["obj-1048576"];
    let ranges = [
        (0u64, 100u64),
        (4096 * 5 + 17, 4000),
        (4095, 2),
        (100_000, 70_000),
        ((1 << 20) - 10, 100),
        (2 << 20, 10),
    ];
    rt.block_on(async {
        for (offset, len) in ranges {
            let got = client
                .read(POOL, b"obj-1048576", range(offset, Some(len)))
                .await
                .expect("range read");
            let start = usize::try_from(offset).expect("small").min(big.len());
            let end = usize::try_from(offset + len).expect("small").min(big.len());
            assert!(got[..] == big[start..end], "range {offset}+{len}");
        }
        let small = &model["obj-70001"];
        let got = client
            .read(POOL, b"obj-70001", range(5000, Some(3000)))
            .await
            .expect("range read of a smaller-chunk object");
        assert!(got[..] == small[5000..8000]);
        let missing = client.read(POOL, b"never-written", range(0, None)).await;
        assert!(matches!(missing, Err(ClientError::NotFound)), "{missing:?}");
    });
    let after = client.direct_read_stats();
    assert_eq!(
        (
            after.direct - before.direct,
            after.via_primary - before.via_primary
        ),
        (ranges.len() as u64 + 2, 0),
        "every read of a settled object goes to the shards"
    );

    // One writer overwrites an object with uniform values while readers
    // read it: every read returns one whole value, never older than the
    // last write acknowledged before the read began. Reads racing a write
    // go to the primary; in the writer's pauses (longer than the primary's
    // tick, which tells the shards the last write is committed) the shards
    // answer.
    const WRITES: u64 = 60;
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let fill = |v: u64| Bytes::from(vec![(v % 251) as u8 + 1; 4096]);
    rt.block_on(client.write_full(POOL, b"race", fill(0)))
        .expect("first write");
    let before = client.direct_read_stats();
    rt.block_on(async {
        let writer = {
            let (client, acked) = (client.clone(), acked.clone());
            tokio::spawn(async move {
                for v in 1..=WRITES {
                    client
                        .write_full(POOL, b"race", fill(v))
                        .await
                        .expect("overwrite");
                    acked.store(v, std::sync::atomic::Ordering::SeqCst);
                    if v % 15 == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                    }
                }
            })
        };
        let mut readers = Vec::new();
        for _ in 0..4 {
            let (client, acked) = (client.clone(), acked.clone());
            readers.push(tokio::spawn(async move {
                let mut last = 0u64;
                let mut reads = 0u64;
                while acked.load(std::sync::atomic::Ordering::SeqCst) < WRITES {
                    let floor = acked.load(std::sync::atomic::Ordering::SeqCst);
                    let got = client
                        .read(POOL, b"race", range(0, None))
                        .await
                        .expect("read during overwrites");
                    assert_eq!(got.len(), 4096);
                    assert!(got.iter().all(|b| *b == got[0]), "a read mixed two writes");
                    // Values cycle through 251 bytes; the writes never wrap.
                    let value = u64::from(got[0] - 1);
                    assert!(
                        value >= floor && value >= last,
                        "read {value} after {floor} was acknowledged (last read {last})"
                    );
                    last = value;
                    reads += 1;
                }
                reads
            }));
        }
        writer.await.expect("writer");
        for reader in readers {
            assert!(reader.await.expect("reader") > 0);
        }
    });
    let raced = client.direct_read_stats();
    eprintln!(
        "during overwrites: {} direct reads, {} via the primary",
        raced.direct - before.direct,
        raced.via_primary - before.via_primary
    );
    assert!(
        raced.via_primary > before.via_primary && raced.direct > before.direct,
        "reads did not both race writes and go direct between them, so this test shows nothing"
    );

    // A data shard's OSD stops: reads go to the primary until its PGs are
    // active again without it, then to the shards again, the client
    // decoding what the stopped OSD held from the other two.
    let acting = pool_acting(&cluster);
    let (pg, osds) = acting
        .iter()
        .find(|(_, osds)| osds.len() == 3)
        .expect("a PG");
    eprintln!("stopping osd.{} (position 1 of PG {pg})", osds[1]);
    ok(
        cluster.cairn(&[
            "daemon",
            "stop",
            &format!("osd.{}", osds[1]),
            "--data",
            &data_dir,
        ]),
        "daemon stop",
    );
    read_all(&rt, &client, &model, "with one OSD stopped");
    let before = client.direct_read_stats();
    wait_direct(&rt, &client, &model);
    let after = client.direct_read_stats();
    assert!(
        after.decoded > before.decoded,
        "no direct read decoded a missing data shard: {after:?}"
    );
}

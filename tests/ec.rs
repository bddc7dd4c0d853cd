//! Erasure-coded pools on a real `cairn up` cluster (6 OSDs, 4+2 with a
//! 4 KiB stripe unit): whole-object writes and reads of every size class
//! through the client and the CLI, byte ranges across chunk and stripe
//! boundaries, stat, xattrs, listing, exclusive creates and removes; what
//! the pool does not serve yet refused with a clear error; and, after
//! shutdown, every shard checked in the OSDs' stores: on its own position,
//! exactly its length (never padded to a stripe), the same metadata on
//! every shard, the parity the code of the data, the data the object.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadOp, ReadRange, ReadResult, WriteOp};
use common::{Cluster, mon_addr, ok, pattern, runtime};
use std::collections::BTreeMap;

const POOL: &str = "ec";

fn range(offset_bytes: u64, length_bytes: Option<u64>) -> ReadRange {
    ReadRange {
        offset_bytes,
        length_bytes,
    }
}

#[test]
fn an_erasure_coded_pool_serves_whole_objects_and_stores_only_shards() {
    let cluster = Cluster::up("ec-objects", 6, 19500, &[]);
    ok(
        cluster.cairn(&[
            "pool",
            "create",
            POOL,
            "--erasure",
            "4+2",
            "--stripe-unit",
            "4K",
            "--pg-num",
            "8",
        ]),
        "pool create --erasure",
    );
    common::wait_clean(&cluster);
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

        // What the pool does not serve: refused, nothing changed.
        for (what, result) in [
            (
                "a write at an offset",
                client
                    .write(POOL, b"obj-4096", 10, Bytes::from_static(b"x"))
                    .await,
            ),
            (
                "an append",
                client
                    .append(POOL, b"obj-4096", Bytes::from_static(b"x"))
                    .await,
            ),
            (
                "an omap write",
                client
                    .omap_set(
                        POOL,
                        b"obj-4096",
                        &BTreeMap::from([(Bytes::from_static(b"k"), Bytes::from_static(b"v"))]),
                    )
                    .await,
            ),
        ] {
            match result {
                Err(ClientError::Op(error)) => assert!(
                    error.to_string().contains("not supported"),
                    "{what}: {error}"
                ),
                other => panic!("{what} answered {other:?}"),
            }
        }
        let same = client
            .read(POOL, b"obj-4096", range(0, None))
            .await
            .expect("read after refusals");
        assert!(
            same[..] == model["obj-4096"][..],
            "a refusal changed the object"
        );
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
    let acting = common::checks::acting_sets(&cluster);
    let pool_id = common::ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls")
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == POOL)
        .and_then(|p| p["id"].as_u64())
        .expect("the pool's id");
    let acting: BTreeMap<String, Vec<u64>> = acting
        .into_iter()
        .filter(|(pg, _)| pg.starts_with(&format!("{pool_id}.")))
        .collect();
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

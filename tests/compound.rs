//! Compound object operations on a real cluster: every guard holds or
//! fails by its index and changes nothing; a write of data, xattrs, omap
//! and header is one version and reads back in one round trip; a request
//! resent with the same id applies once; and under SIGKILL of the primary
//! mid-operation every object is all or nothing on every copy.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientError, Guard, ReadOp, ReadResult, WriteOp};
use cairn_placement::Placement;
use cairn_proto::osd::{ClientOp, ClientReply, OpKind, OpOutput, ReqIdWire};
use cairn_wire::{ConnectOptions, Connection};
use common::{Cluster, POOL, client_options, kill, mon_addr, ok, runtime, serial, wait_clean};
use serde_bytes::ByteBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const BASE_PORT: u16 = 18540;
const KILL_BASE_PORT: u16 = 18560;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The object's data, xattrs, omap and header as one read returns them.
async fn snapshot(client: &Client, name: &[u8]) -> Result<Vec<ReadResult>, ClientError> {
    let op = ReadOp::new()
        .stat()
        .read(0, None)
        .xattrs()
        .omap_range(None, 1000)
        .omap_header();
    client.operate_read(POOL, name, op).await
}

#[test]
fn guards_hold_or_fail_by_index_and_compound_ops_apply_as_one() {
    let _serial = serial();
    let cluster = Cluster::up("compound-guards", 3, BASE_PORT, &[]);
    runtime().block_on(async {
        let client = Client::connect_with(&mon_addr(&cluster), client_options(Duration::from_secs(60)))
            .await
            .expect("connect");
        let obj: &[u8] = b"doc";

        // One request: exclusive create, data, xattr, omap, header.
        let create = WriteOp::new()
            .guard(Guard::NotExists)
            .create(true)
            .write_full(b("hello world"))
            .set_xattr(b"etag", b"e1")
            .omap_set([(&b"k1"[..], &b"v1"[..]), (b"k2", b"v2")])
            .omap_set_header(b"hdr");
        let v1 = client.operate(POOL, obj, create.clone()).await.expect("create");
        let all = snapshot(&client, obj).await.expect("read back");
        assert!(matches!(all[0], ReadResult::Stat(s) if s.size_bytes == 11 && s.version == v1));
        assert_eq!(all[1], ReadResult::Data(b("hello world")));
        let ReadResult::Xattrs(xattrs) = &all[2] else {
            panic!("xattrs: {all:?}")
        };
        assert_eq!(xattrs.len(), 1, "the header is not an xattr: {xattrs:?}");
        assert_eq!(xattrs[&b("etag")], b("e1"));
        assert_eq!(
            all[3],
            ReadResult::Omap(vec![(b("k1"), b("v1")), (b("k2"), b("v2"))])
        );
        assert_eq!(all[4], ReadResult::Value(Some(b("hdr"))));

        // Again: the object exists. Its guard fails first, by index 0;
        // without it the exclusive create's own condition answers Exists.
        let again = client.operate(POOL, obj, create).await;
        assert!(
            matches!(again, Err(ClientError::CompareFailed { guard: 0, .. })),
            "{again:?}"
        );
        let exclusive = WriteOp::new().create(true).write_full(b("x"));
        let exists = client.operate(POOL, obj, exclusive).await;
        assert!(matches!(exists, Err(ClientError::Exists)), "{exists:?}");

        // Each guard kind, holding and failing. A failing one is named by
        // its index even after guards that hold, and changes nothing.
        let holding = [
            Guard::Exists,
            Guard::Version(v1),
            Guard::Xattr {
                name: b("etag"),
                value: Some(b("e1")),
            },
            Guard::Xattr {
                name: b("missing"),
                value: None,
            },
            Guard::OmapKey {
                key: b("k1"),
                value: Some(b("v1")),
            },
            Guard::OmapKey {
                key: b("k9"),
                value: None,
            },
        ];
        let failing = [
            Guard::NotExists,
            Guard::Version(v1 + 1000),
            Guard::Version(0),
            Guard::Xattr {
                name: b("etag"),
                value: Some(b("other")),
            },
            Guard::Xattr {
                name: b("etag"),
                value: None,
            },
            Guard::OmapKey {
                key: b("k1"),
                value: Some(b("v2")),
            },
            Guard::OmapKey {
                key: b("k9"),
                value: Some(b("v")),
            },
        ];
        for bad in failing {
            let mut op = WriteOp::new();
            for good in &holding {
                op = op.guard(good.clone());
            }
            let op = op
                .guard(bad.clone())
                .write_full(b("clobbered"))
                .set_xattr(b"etag", b"e2")
                .omap_clear();
            let refused = client.operate(POOL, obj, op).await;
            let index = u32::try_from(holding.len()).expect("few guards");
            assert!(
                matches!(&refused, Err(ClientError::CompareFailed { guard, .. }) if *guard == index),
                "{bad:?}: {refused:?}"
            );
            let now = snapshot(&client, obj).await.expect("read");
            assert_eq!(now, all, "a refused request changed nothing ({bad:?})");
        }
        // All holding: the writes apply, as one new version.
        let mut op = WriteOp::new();
        for good in holding {
            op = op.guard(good);
        }
        let op = op
            .truncate(5)
            .append(b("!"))
            .set_xattr(b"etag", b"e2")
            .omap_remove([&b"k1"[..]])
            .omap_set_header(b"hdr2");
        let v2 = client.operate(POOL, obj, op).await.expect("guarded write");
        assert!(v2 > v1);
        let after = snapshot(&client, obj).await.expect("read");
        assert!(matches!(after[0], ReadResult::Stat(s) if s.version == v2 && s.size_bytes == 6));
        assert_eq!(after[1], ReadResult::Data(b("hello!")));
        assert_eq!(after[3], ReadResult::Omap(vec![(b("k2"), b("v2"))]));
        assert_eq!(after[4], ReadResult::Value(Some(b("hdr2"))));

        // Reads are guarded too; a failed read guard is named.
        let guarded_read = ReadOp::new().guard(Guard::Version(v1)).stat();
        let stale = client.operate_read(POOL, obj, guarded_read).await;
        assert!(
            matches!(stale, Err(ClientError::CompareFailed { guard: 0, .. })),
            "{stale:?}"
        );
        let one = ReadOp::new().guard(Guard::Version(v2)).xattr(b"etag").xattr(b"none");
        let values = client.operate_read(POOL, obj, one).await.expect("read");
        assert_eq!(
            values,
            [ReadResult::Value(Some(b("e2"))), ReadResult::Value(None)]
        );

        // Ops that need the object answer NotFound from a missing one and
        // change nothing; removing and writing again in one request is a
        // replace.
        let missing = WriteOp::new().omap_clear().set_xattr(b"a", b"b");
        let gone = client.operate(POOL, b"nothing-here", missing).await;
        assert!(matches!(gone, Err(ClientError::NotFound)), "{gone:?}");
        let none = client.stat(POOL, b"nothing-here").await;
        assert!(matches!(none, Err(ClientError::NotFound)), "{none:?}");
        let replace = WriteOp::new().remove().write_full(b("fresh"));
        client.operate(POOL, obj, replace).await.expect("replace");
        let fresh = snapshot(&client, obj).await.expect("read");
        assert_eq!(fresh[1], ReadResult::Data(b("fresh")));
        assert_eq!(fresh[2], ReadResult::Xattrs(Default::default()));
        assert_eq!(fresh[3], ReadResult::Omap(Vec::new()));
        assert_eq!(fresh[4], ReadResult::Value(None));

        // Requests that cannot apply are refused before anything is done.
        let internal = WriteOp::new().set_xattr(b"\0omap-header", b"x");
        assert!(matches!(
            client.operate(POOL, obj, internal).await,
            Err(ClientError::Op(_))
        ));
        let dangling = WriteOp::new().remove().omap_clear();
        assert!(matches!(
            client.operate(POOL, obj, dangling).await,
            Err(ClientError::Op(_))
        ));

        resend_applies_once(&client, b"counter").await;
    });
    cli_put_is_one_atomic_request(&cluster);
    wait_clean(&cluster);
    assert!(cluster.stop_and_compare_copies() > 0);
}

/// `cairn object put` with a guard, xattrs and omap entries sends them as
/// one request: all applied, or (guard failed) none.
fn cli_put_is_one_atomic_request(cluster: &Cluster) {
    let file = cluster.dir.join("payload");
    std::fs::write(&file, b"from the cli").expect("write payload");
    let file = file.display().to_string();
    let put = |extra: &[&str]| {
        let mut args = vec!["object", "put", "--pool", POOL, "cli-obj", file.as_str()];
        args.extend_from_slice(extra);
        cluster.cairn(&args)
    };
    let first = [
        "--if-absent",
        "--xattr",
        "etag=abc",
        "--omap",
        "k=v",
        "--omap",
        "k2=v2",
    ];
    ok(put(&first), "put --if-absent");
    let again = put(&["--if-absent", "--xattr", "etag=zzz"]);
    assert!(!again.status.success(), "a second exclusive create fails");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("object exists"), "stderr: {stderr}");
    let etag = ok(
        cluster.cairn(&["object", "getxattr", "--pool", POOL, "cli-obj", "etag"]),
        "getxattr",
    );
    assert_eq!(etag, b"abc", "the refused put changed nothing");
    let omap = ok(
        cluster.cairn(&[
            "object",
            "listomapvals",
            "--pool",
            POOL,
            "cli-obj",
            "--json",
        ]),
        "listomapvals",
    );
    let omap = String::from_utf8_lossy(&omap);
    assert!(omap.contains("k2") && omap.contains("v2"), "omap: {omap}");
    let bad = put(&["--xattr", "no-equals-sign"]);
    assert!(!bad.status.success(), "a malformed --xattr is refused");
}

/// Sends one compound append twice under one request id, straight over the
/// wire: the second answer repeats the first (same version), and the
/// object grew once.
async fn resend_applies_once(client: &Client, name: &[u8]) {
    let map = client.refresh_map().await.expect("map");
    let endpoints = client.endpoints().await.expect("endpoints");
    let pool = map.pool_by_name(POOL).expect("pool");
    let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, name);
    let primary = Placement::new(&map)
        .map_pg(pg)
        .expect("placed")
        .primary
        .expect("a primary");
    let conn = Connection::connect(endpoints[&primary].addr.as_str(), ConnectOptions::default())
        .await
        .expect("connect");
    let request = ClientOp {
        pg,
        epoch: map.epoch,
        req: ReqIdWire {
            client: 0x5eed,
            tid: 1,
        },
        object: ByteBuf::from(name.to_vec()),
        guards: Vec::new(),
        ops: vec![
            OpKind::Append { len: 4 },
            OpKind::OmapSet {
                entries: vec![(ByteBuf::from(b"n".to_vec()), ByteBuf::from(b"1".to_vec()))],
            },
        ],
        full_try: false,
    };
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (reply, _): (ClientReply, Bytes) = conn.call(&request, b("abcd")).await.expect("call");
        answers.push(reply);
    }
    assert!(
        matches!(answers[0].result.as_deref(), Ok([OpOutput::Written { .. }])),
        "{answers:?}"
    );
    assert_eq!(
        answers[0], answers[1],
        "the resend is answered from the log"
    );
    let data = client
        .read(POOL, name, cairn_client::ReadRange::default())
        .await
        .expect("read");
    assert_eq!(data, b("abcd"), "appended once");
}

/// How many objects the SIGKILL test writes, each again and again.
const KILL_OBJECTS: u64 = 6;

/// One generation of an object: 256 KiB of data derived from it, and the
/// same generation in an xattr, an omap key and the header.
fn generation_data(generation: u64) -> Bytes {
    (0..256 * 1024u64)
        .map(|i| (i.wrapping_mul(31) ^ generation).to_le_bytes()[0])
        .collect::<Vec<u8>>()
        .into()
}

fn generation_op(generation: u64) -> WriteOp {
    let mark = generation.to_string();
    WriteOp::new()
        .write_full(generation_data(generation))
        .set_xattr(b"gen", mark.as_bytes())
        .omap_set([(&b"gen"[..], mark.as_bytes())])
        .omap_set_header(mark.as_bytes())
}

/// The generation an object holds, if its data, xattr, omap and header
/// all say the same one; else what disagrees.
fn generation_of(results: &[ReadResult]) -> Result<u64, String> {
    let [
        _,
        ReadResult::Data(data),
        ReadResult::Xattrs(xattrs),
        ReadResult::Omap(omap),
        ReadResult::Value(header),
    ] = results
    else {
        return Err(format!("unexpected shape {results:?}"));
    };
    let parse = |b: &Bytes| String::from_utf8_lossy(b).parse::<u64>().ok();
    let from_xattr = xattrs.get(&b("gen")).and_then(parse);
    let from_omap = omap
        .iter()
        .find(|(k, _)| k == "gen")
        .and_then(|(_, v)| parse(v));
    let from_header = header.as_ref().and_then(parse);
    let Some(generation) = from_xattr else {
        return Err("no gen xattr".into());
    };
    let from_data = (*data == generation_data(generation)).then_some(generation);
    if from_omap == Some(generation)
        && from_header == Some(generation)
        && from_data == Some(generation)
    {
        Ok(generation)
    } else {
        Err(format!(
            "xattr {from_xattr:?}, omap {from_omap:?}, header {from_header:?}, data matches: {}",
            from_data.is_some()
        ))
    }
}

#[test]
fn compound_writes_are_all_or_nothing_when_the_primary_is_killed_mid_operation() {
    let _serial = serial();
    let cluster = Cluster::up("compound-kill", 3, KILL_BASE_PORT, &[]);
    runtime().block_on(async {
        let client =
            Client::connect_with(&mon_addr(&cluster), client_options(Duration::from_secs(90)))
                .await
                .expect("connect");
        // Writers: each object gets generation after generation; the last
        // acknowledged one is recorded.
        let stop = Arc::new(AtomicBool::new(false));
        let mut lanes = Vec::new();
        for index in 0..KILL_OBJECTS {
            let client = client.clone();
            let stop = stop.clone();
            lanes.push(tokio::spawn(async move {
                let name = format!("obj-{index}");
                let mut acked = 0u64;
                let mut generation = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    generation += 1;
                    let op = generation_op(generation);
                    if client.operate(POOL, name.as_bytes(), op).await.is_ok() {
                        acked = generation;
                    }
                }
                (name, acked, generation)
            }));
        }
        // Kill whichever OSD is primary of obj-0, three times, mid-stream;
        // the supervisor restarts it each time.
        let started = Instant::now();
        for round in 0..3u64 {
            tokio::time::sleep(Duration::from_millis(1500 + 700 * round)).await;
            let map = client.refresh_map().await.expect("map");
            let pool = map.pool_by_name(POOL).expect("pool");
            let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, b"obj-0");
            let primary = Placement::new(&map).map_pg(pg).expect("placed").primary;
            let Some(primary) = primary else { continue };
            let pid = cluster.daemon_pid(&format!("osd.{}", primary.0));
            if !common::is_running(pid) {
                continue; // still being restarted
            }
            eprintln!(
                "round {round}: SIGKILL osd.{} (pid {pid}) at {:?}",
                primary.0,
                started.elapsed()
            );
            kill(pid);
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, Ordering::Relaxed);
        let mut outcomes = Vec::new();
        for lane in lanes {
            outcomes.push(lane.await.expect("writer"));
        }
        for (name, acked, sent) in &outcomes {
            assert!(*acked > 0, "{name}: some write was acknowledged");
            let results = snapshot(&client, name.as_bytes()).await.expect("read");
            let holds =
                generation_of(&results).unwrap_or_else(|why| panic!("{name} is torn: {why}"));
            assert!(
                holds >= *acked && holds <= *sent,
                "{name} holds generation {holds}; acknowledged {acked}, sent {sent}"
            );
            eprintln!("{name}: generation {holds} (acknowledged {acked}, sent {sent})");
        }
    });
    wait_clean(&cluster);
    // Every copy of every object is the same: none kept half a request.
    assert!(cluster.stop_and_compare_copies() >= KILL_OBJECTS);
}

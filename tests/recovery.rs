//! Self-healing with real processes: a whole cluster restarted on its data,
//! an OSD SIGKILLed and brought back while writers run, an OSD marked out
//! (its data moves, old copies go only after new ones are complete). After
//! each: every PG `active+clean` and every acknowledged write byte-exact.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientConfig, ClientOptions, ReadRange};
use common::{
    Cluster, POOL, Writers, acked_and_errors, kill, ok, ok_json, osd_pg_count, runtime, verify,
    wait_clean, write_each,
};
use std::time::{Duration, Instant};

const OP_DEADLINE: Duration = Duration::from_secs(30);

fn options() -> ClientOptions {
    common::client_options(OP_DEADLINE)
}

#[test]
fn a_restarted_cluster_serves_its_data() {
    let _serial = common::serial();
    let base_port = 18000;
    let cluster = Cluster::up("restart", 3, base_port, &[]);
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let indexes: Vec<u64> = (0..200).collect();
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        write_each(&client, indexes.iter().copied()).await;
    });
    let data = cluster.dir.display().to_string();
    ok(cluster.cairn(&["down", "--data", &data]), "cairn down");
    let port = base_port.to_string();
    ok(
        cluster.cairn(&[
            "up",
            "--detach",
            "--data",
            &data,
            "--base-port",
            &port,
            "--s3-port",
            "0",
        ]),
        "cairn up again",
    );
    let took = wait_clean(&cluster);
    eprintln!("restarted cluster active+clean {took:?} after `cairn up` returned");
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        verify(&client, &indexes).await;
        // And it takes writes again.
        client
            .write_full(POOL, b"after-restart", Bytes::from_static(b"x"))
            .await
            .expect("write after restart");
    });
    cluster.stop_and_compare_copies();
}

#[test]
fn a_killed_osd_returns_and_recovers_under_writes() {
    let _serial = common::serial();
    let base_port = 18050;
    let cluster = Cluster::up(
        "kill-return",
        4,
        base_port,
        &["--no-restart", "--down-grace", "3s"],
    );
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let lanes = 4;
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        let writers = Writers::start(&client, lanes);
        for round in 0..2 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let name = format!("osd.{}", round + 1);
            kill(cluster.daemon_pid(&name));
            // Down, then back while the writers go on.
            tokio::time::sleep(Duration::from_secs(6)).await;
            let data = cluster.dir.display().to_string();
            ok(
                cluster.cairn(&["daemon", "start", &name, "--data", &data]),
                "daemon start",
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (acked, errors) = acked_and_errors(&writers.stop().await);
        eprintln!(
            "{} writes acknowledged, {} errors",
            acked.len(),
            errors.len()
        );
        assert!(acked.len() > 100, "writes went on: {errors:?}");
        assert!(errors.is_empty(), "no write failed for good: {errors:?}");
        let took = wait_clean(&cluster);
        eprintln!("active+clean {took:?} after the writers stopped");
        let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
        let recovered = status["recovery"]["recovered_objects"]
            .as_u64()
            .unwrap_or(0);
        eprintln!("objects recovered onto the returning OSDs: {recovered}");
        assert!(
            recovered > 0,
            "the returning OSDs caught up by recovery: {status}"
        );
        verify(&client, &acked).await;
    });
    cluster.stop_and_compare_copies();
}

#[test]
fn an_osd_marked_out_moves_its_data_and_stray_copies_go() {
    let _serial = common::serial();
    let base_port = 18100;
    let cluster = Cluster::up("out", 4, base_port, &["--no-restart"]);
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let indexes: Vec<u64> = (0..300).collect();
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        write_each(&client, indexes.iter().copied()).await;
        ok(cluster.cairn(&["osd", "out", "2"]), "osd out");
        // Writes go on while the data moves.
        write_each(&client, 300..400).await;
        let took = wait_clean(&cluster);
        eprintln!("active+clean {took:?} after the writes that followed `osd out`");
        let all: Vec<u64> = (0..400).collect();
        verify(&client, &all).await;
        // osd.2 holds no PG any more: its stray copies were removed.
        let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
        assert_eq!(status["osds_in"], 3, "{status}");
        let moved = status["recovery"]["recovered_objects"]
            .as_u64()
            .unwrap_or(0);
        eprintln!("objects pushed to their new OSDs: {moved}");
        assert!(moved > 0, "data moved to the new copies: {status}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let collections = osd_pg_count(&cluster, 2);
            if collections == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "osd.2 still holds {collections} PG copies"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    cluster.stop_and_compare_copies();
}

/// `cairn pool set --pg-num` on a pool with data, under writes, with an
/// OSD SIGKILLed just after and brought back: every PG copy splits in
/// place, the new PGs then move to their own OSDs (pgp_num follows), and
/// once clean every acknowledged write reads back from its new PG and
/// every OSD holds exactly the copies placement gives it.
#[test]
fn raising_pg_num_splits_pgs_under_writes_and_a_kill() {
    let _serial = common::serial();
    let base_port = 18250;
    let cluster = Cluster::up(
        "split",
        4,
        base_port,
        &["--no-restart", "--down-grace", "3s"],
    );
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let first: Vec<u64> = (0..300).collect();
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        write_each(&client, first.iter().copied()).await;
        let writers = Writers::start(&client, 3);
        tokio::time::sleep(Duration::from_secs(1)).await;
        ok(
            cluster.cairn(&["pool", "set", POOL, "--pg-num", "64"]),
            "pool set --pg-num",
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        kill(cluster.daemon_pid("osd.3"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let data = cluster.dir.display().to_string();
        ok(
            cluster.cairn(&["daemon", "start", "osd.3", "--data", &data]),
            "daemon start",
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (acked, errors) = acked_and_errors(&writers.stop().await);
        eprintln!(
            "{} writes acknowledged, {} errors",
            acked.len(),
            errors.len()
        );
        assert!(acked.len() > 50, "writes went on: {errors:?}");
        assert!(errors.is_empty(), "no write failed for good: {errors:?}");
        let took = wait_clean(&cluster);
        eprintln!("active+clean {took:?} after the writers stopped");
        verify(&client, &first).await;
        verify(&client, &acked).await;
        let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
        let pgs = pgs.as_array().cloned().unwrap_or_default();
        assert_eq!(pgs.len(), 64, "every PG reported");
        let child_entries: u64 = pgs
            .iter()
            .filter(|pg| {
                pg["pg"].as_str().is_some_and(|id| {
                    u32::from_str_radix(id.rsplit('.').next().unwrap_or("0"), 16).unwrap_or(0) >= 32
                })
            })
            .map(|pg| pg["log_entries"].as_u64().unwrap_or(0))
            .sum();
        eprintln!("log entries in the 32 new PGs: {child_entries}");
        assert!(
            child_entries > 100,
            "the new PGs took their share of the logs"
        );
        // The split copies left on OSDs the new PGs moved away from go.
        let held = wait_placement_exact(&cluster).await;
        eprintln!("PG copies held per OSD: {held:?}");
    });
    cluster.stop_and_compare_copies();
}

/// Waits (30 s at most) until every OSD holds exactly the PG copies its up
/// sets give it (new copies complete, old ones removed); returns them.
async fn wait_placement_exact(cluster: &Cluster) -> std::collections::BTreeMap<u64, u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let placed = placed_copies(cluster);
        let held: std::collections::BTreeMap<u64, u64> = placed
            .keys()
            .map(|osd| (*osd, osd_pg_count(cluster, *osd)))
            .collect();
        if held == placed {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "copies held {held:?}, placement says {placed:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// PG copies each OSD should hold: how many PGs have it in their up set.
fn placed_copies(cluster: &Cluster) -> std::collections::BTreeMap<u64, u64> {
    let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
    let mut placed = std::collections::BTreeMap::new();
    for pg in pgs.as_array().cloned().unwrap_or_default() {
        for osd in pg["up"].as_array().cloned().unwrap_or_default() {
            *placed.entry(osd.as_u64().expect("osd id")).or_insert(0) += 1;
        }
    }
    placed
}

/// `cairn osd reweight` under writes: the OSD's share shrinks, data moves,
/// and once clean every OSD holds exactly the PG copies placement gives it
/// (new copies complete before old ones go).
#[test]
fn a_reweighted_osd_gives_up_its_share_and_keeps_the_rest() {
    let _serial = common::serial();
    let cluster = Cluster::up("reweight", 4, 18200, &["--no-restart"]);
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        write_each(&client, 0..300).await;
        let before = osd_pg_count(&cluster, 2);
        let bad = cluster.cairn(&["osd", "reweight", "2", "0"]);
        assert!(!bad.status.success(), "a zero weight is refused");
        ok(
            cluster.cairn(&["osd", "reweight", "2", "0.25"]),
            "osd reweight",
        );
        write_each(&client, 300..400).await;
        let took = wait_clean(&cluster);
        eprintln!("active+clean {took:?} after the writes that followed the reweight");
        let all: Vec<u64> = (0..400).collect();
        verify(&client, &all).await;
        let held = wait_placement_exact(&cluster).await;
        let after = held.get(&2).copied().unwrap_or(0);
        eprintln!("osd.2 held {before} PG copies, now {after}: {held:?}");
        assert!(after < before && after > 0, "{before} -> {after}");
    });
    cluster.stop_and_compare_copies();
}

/// Bytes of the small objects of the backfill test.
fn small(index: u64) -> Bytes {
    Bytes::from(common::pattern(index, 512))
}

/// With a PG log of 300 entries and 500 writes per PG, the copies an `osd
/// out` moves cannot catch up from the log: they are backfilled by scan
/// while a temporary acting set keeps complete copies serving.
#[test]
fn copies_beyond_the_log_are_backfilled() {
    let _serial = common::serial();
    let base_port = 18150;
    // Inherited by `cairn up`'s supervisor and the OSDs it starts.
    let cluster = Cluster::up_with_env(
        common::test_dir("backfill"),
        4,
        base_port,
        &["--no-restart"],
        &[("CAIRN_PG_LOG_ENTRIES", "300")],
    );
    ok(
        cluster.cairn(&[
            "pool",
            "create",
            "bf",
            "--pg-num",
            "4",
            "--size",
            "3",
            "--min-size",
            "2",
        ]),
        "pool create",
    );
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let count = 2000u64;
    runtime().block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        let write_range = |range: std::ops::Range<u64>| {
            let client = client.clone();
            async move {
                let lanes: Vec<_> = (0..8u64)
                    .map(|lane| {
                        let client = client.clone();
                        let range = range.clone();
                        tokio::spawn(async move {
                            for index in range.filter(|i| i % 8 == lane) {
                                let name = format!("bf-{index}");
                                client
                                    .write_full("bf", name.as_bytes(), small(index))
                                    .await
                                    .unwrap_or_else(|e| panic!("write {name}: {e}"));
                            }
                        })
                    })
                    .collect();
                for lane in lanes {
                    lane.await.expect("lane");
                }
            }
        };
        write_range(0..count).await;
        ok(cluster.cairn(&["osd", "out", "1"]), "osd out");
        write_range(count..count + 200).await;
        let took = wait_clean(&cluster);
        eprintln!("backfilled and active+clean {took:?} after the last write");
        for index in 0..count + 200 {
            let name = format!("bf-{index}");
            let data = client
                .read("bf", name.as_bytes(), ReadRange::default())
                .await
                .unwrap_or_else(|e| panic!("read {name}: {e}"));
            assert!(data == small(index), "{name} reads back byte-exact");
        }
        let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
        let moved = status["recovery"]["recovered_objects"]
            .as_u64()
            .unwrap_or(0);
        eprintln!("objects pushed: {moved}");
        assert!(moved >= 200, "whole PG copies were pushed: {status}");
        assert_eq!(osd_pg_count(&cluster, 1), 0, "osd.1's copies removed");
    });
    cluster.stop_and_compare_copies();
}

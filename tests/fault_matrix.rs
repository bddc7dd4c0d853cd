//! Whole-group faults under a versioned overwrite load (issue 19, item 9):
//! every OSD of a PG SIGKILLed at once mid-write and restarted; the
//! monitor SIGKILLed under load; and a whole 3-OSD cluster whose data dir
//! is on the lossy file system, cut by a simulated power failure mid-write
//! (everything not fsynced dropped, the last unsynced write torn) and
//! started again, with a replicated pool and an erasure-coded one under
//! partial overwrites. In each: readers never see an object older than its last
//! acknowledged version; after healing every object holds its last
//! acknowledged version (or the one unacknowledged write after it); a deep
//! scrub of every pool finds nothing; and after shutdown every PG's copies
//! on its acting OSDs are identical, compared store by store.

mod common;

use cairn_client::{Client, ClientConfig};
use common::checks::{LoadShape, VersionedLoad, acting_sets, osd_dirs};
use common::{Cluster, client_options, kill, serial, tree_osds, wait_clean};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const LANES: u64 = 4;
/// The erasure-coded pool of the power-cut test.
const EC_POOL: &str = "ec";
const OBJECTS: u64 = 96;
/// Clients wait out the faults, as Ceph clients block.
const OP_DEADLINE: Duration = Duration::from_secs(60);

/// A client on `rt`, whose tasks it runs.
fn connect(rt: &tokio::runtime::Runtime, cluster: &Cluster) -> Client {
    connect_with_deadline(rt, cluster, OP_DEADLINE)
}

fn connect_with_deadline(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    op_deadline: Duration,
) -> Client {
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    rt.block_on(Client::connect_with(
        &config.mon,
        client_options(op_deadline),
    ))
    .expect("client")
}

/// Stops the load, waits for `active+clean`, checks every version, a deep
/// scrub, then stops the cluster and compares the copies.
fn settle_and_check(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    client: &Client,
    mut load: VersionedLoad,
    acked_floor: u64,
) {
    let report = rt.block_on(load.stop());
    eprintln!("load: {report:?}");
    assert!(
        report.violations.is_empty(),
        "stale or lost reads: {:?}",
        report.violations
    );
    assert!(
        report.writes_acked >= acked_floor,
        "only {} writes acknowledged (floor {acked_floor})",
        report.writes_acked
    );
    assert!(report.reads_checked > 0, "no read was checked");
    // Also deep-scrubs every pool, which must find nothing.
    wait_clean(cluster);
    let lost = rt.block_on(load.verify(client));
    assert!(lost.is_empty(), "after healing: {lost:?}");
    let compared = cluster.stop_and_compare_copies();
    assert!(
        compared >= OBJECTS,
        "only {compared} object copies compared"
    );
}

#[test]
fn every_osd_of_a_pg_killed_at_once_loses_no_acknowledged_version() {
    let _serial = serial();
    let base = 17730;
    let cluster = Cluster::up("kill-pg", 4, base, &["--down-grace", "2s"]);
    let rt = common::runtime();
    let client = connect(&rt, &cluster);
    let load = rt.block_on(async { VersionedLoad::start(&client, LANES, OBJECTS) });
    std::thread::sleep(Duration::from_secs(3));
    // PG 1.0's whole acting set, at once.
    let acting = acting_sets(&cluster)["1.0"].clone();
    assert_eq!(acting.len(), 3, "{acting:?}");
    let dirs = osd_dirs(&cluster, base);
    let acked_before = load.acked();
    for id in &acting {
        let dir = dirs[id]
            .file_name()
            .expect("dir")
            .to_string_lossy()
            .into_owned();
        kill(cluster.daemon_pid(&dir));
    }
    // The supervisor restarts them; the load goes on through it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !tree_osds(&cluster).iter().all(|o| o["up"] == true) || load.acked() < acked_before + 200
    {
        assert!(
            Instant::now() < deadline,
            "the cluster did not come back under load"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    settle_and_check(&rt, &cluster, &client, load, 200);
}

#[test]
fn the_monitor_killed_under_load_stops_no_client() {
    let _serial = serial();
    let base = 17750;
    let cluster = Cluster::up("kill-mon", 3, base, &[]);
    let rt = common::runtime();
    let client = connect(&rt, &cluster);
    let load = rt.block_on(async { VersionedLoad::start(&client, LANES, OBJECTS) });
    std::thread::sleep(Duration::from_secs(2));
    let mon = cluster.daemon_pid("mon");
    kill(mon);
    // Writes go on while the monitor is away: it is not on the data path.
    let acked = load.acked();
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acked() < acked + 100 {
        assert!(Instant::now() < deadline, "writes stopped with the monitor");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The supervisor brings it back, with the map it had.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.cairn(&["status"]).status.code() != Some(0) {
        assert!(Instant::now() < deadline, "the monitor did not come back");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_ne!(cluster.daemon_pid("mon"), mon, "the monitor was restarted");
    std::thread::sleep(Duration::from_secs(2));
    settle_and_check(&rt, &cluster, &client, load, 200);
}

/// Whether this process may mount FUSE file systems. Under `CI=true` the
/// answer must be yes: a skipped power-loss test would pass unseen.
fn fuse_available(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    let fuse = std::path::Path::new("/dev/fuse").exists();
    if root && fuse {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: needs root and /dev/fuse, which CI must provide"
    );
    eprintln!("SKIPPED {test}: needs root and /dev/fuse");
    false
}

#[test]
fn a_whole_cluster_cut_by_a_power_failure_keeps_every_acknowledged_write() {
    if !fuse_available("a_whole_cluster_cut_by_a_power_failure") {
        return;
    }
    let _serial = serial();
    let base = 17770;
    // Each OSD's data dir is a lossy mount of its own; the monitor, the
    // supervisor's files and the logs stay on the real disk (the OSD
    // hosts lose power, the monitor's host does not).
    let cluster_dir = common::test_dir("cluster-power");
    // Declared first, dropped last: a backing dir outlives its mount.
    let (backings, mounts) =
        common::lossy_osd_dirs(&cluster_dir, 3, "cairn-cluster-power-backing-");
    let cluster = Cluster::up_at(cluster_dir.clone(), 3, base, &[]);
    // Beside the replicated pool, an erasure-coded one under partial
    // overwrites: the cut leaves stripes written on some shards only.
    let ec_pool = [
        "pool",
        "create",
        EC_POOL,
        "--erasure",
        "2+1",
        "--min-size",
        "2",
        "--stripe-unit",
        "4K",
        "--pg-num",
        "8",
    ];
    common::ok(cluster.cairn(&ec_pool), "pool create --erasure");
    wait_clean(&cluster);
    let rt = common::runtime();
    // Writes in flight at the cut wait out their deadline: keep it short.
    let client = connect_with_deadline(&rt, &cluster, Duration::from_secs(10));
    let mut load = rt.block_on(async { VersionedLoad::start(&client, LANES, OBJECTS) });
    let patches = LoadShape {
        pool: EC_POOL,
        patches: true,
    };
    let mut ec_load =
        rt.block_on(async { VersionedLoad::start_shaped(&client, patches, LANES, OBJECTS / 2) });
    let deadline = Instant::now() + Duration::from_secs(60);
    while load.acked() < 300 || ec_load.acked() < 150 {
        assert!(Instant::now() < deadline, "too few writes before the cut");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The power goes: every process at once (the supervisor first, so it
    // restarts nothing), then everything not fsynced.
    for pid in common::recorded_pids(&cluster.dir) {
        if common::is_running(pid) {
            kill(pid);
        }
    }
    // Its processes are gone; the cluster guard must not clean up the dir
    // the next cluster starts from.
    std::mem::forget(cluster);
    let mut dirty = 0;
    for (osd, fs) in mounts.iter().enumerate() {
        dirty += fs.dirty_bytes();
        let torn = fs.power_loss(0x00c0_ffee + osd as u64);
        eprintln!("osd.{osd}: {torn}");
    }
    eprintln!("power cut with {dirty} unsynced bytes");
    assert!(dirty > 0, "the cut dropped nothing: it tests nothing");
    // What the lanes saw before the cut counts; their writes in flight
    // failed or will time out against the dead cluster.
    for load in [&mut load, &mut ec_load] {
        let report = rt.block_on(load.stop());
        assert!(
            report.violations.is_empty(),
            "before the cut: {:?}",
            report.violations
        );
    }
    // Power back: the same cluster, from what was durable.
    // The logs live on the lossy mount, gone with it: show them on failure.
    let dump_logs = |dir: &std::path::Path| {
        let listing = std::process::Command::new("find")
            .arg(dir)
            .args(["-maxdepth", "2", "-printf", "%p %s\n"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        eprintln!("--- files\n{listing}");
        for log in ["up", "mon", "osd.0", "osd.1", "osd.2"] {
            let text = std::fs::read_to_string(dir.join("logs").join(format!("{log}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!(
                "--- {log}.log (last lines, newest first)\n{}",
                tail.join("\n")
            );
        }
    };
    // Not `Cluster::up_at`: its guard would remove the dir, logs and all,
    // before they could be shown.
    let up = common::cairn(
        &cluster_dir.join("cairn.toml"),
        &[
            "up",
            "--detach",
            "--data",
            &cluster_dir.display().to_string(),
            "--osds",
            "3",
            "--base-port",
            &base.to_string(),
            "--s3-port",
            "0",
        ],
    );
    if !up.status.success() {
        dump_logs(&cluster_dir);
        panic!(
            "cairn up after the power cut failed: {}",
            String::from_utf8_lossy(&up.stderr)
        );
    }
    let cluster = Cluster {
        conf: cluster_dir.join("cairn.toml"),
        dir: cluster_dir.clone(),
        base_port: base,
    };
    let client = connect(&rt, &cluster);
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_clean(&cluster);
        let lost = rt.block_on(load.verify(&client));
        assert!(
            lost.is_empty(),
            "acknowledged writes lost to the power cut: {lost:?}"
        );
        let lost = rt.block_on(ec_load.verify(&client));
        assert!(
            lost.is_empty(),
            "acknowledged patches lost to the power cut: {lost:?}"
        );
    }));
    if let Err(panic) = checked {
        for args in [
            &["health", "detail"][..],
            &["osd", "tree"][..],
            &["pg", "ls"][..],
        ] {
            let out = cluster.cairn(args);
            eprintln!(
                "--- cairn {args:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        dump_logs(&cluster_dir);
        std::panic::resume_unwind(panic);
    }
    // Replicated copies are identical; erasure-coded shards agree (one
    // version, the parity the code of the data).
    let ec_id = common::ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls")
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == EC_POOL)
        .and_then(|p| p["id"].as_u64())
        .expect("the erasure-coded pool's id");
    let (ec_acting, acting): (BTreeMap<_, _>, BTreeMap<_, _>) = acting_sets(&cluster)
        .into_iter()
        .partition(|(pg, _)| pg.starts_with(&format!("{ec_id}.")));
    let dirs = osd_dirs(&cluster, base);
    common::ok(
        cluster.cairn(&["down", "--data", &cluster_dir.display().to_string()]),
        "cairn down",
    );
    assert!(common::checks::copies_match(&acting, &dirs) >= OBJECTS);
    let layout = cairn_ec::StripeLayout::new(2, 1, 4096).expect("layout");
    let (objects, _) = common::checks::shards_match(&ec_acting, &dirs, &layout);
    // An object whose first write was in flight at the cut may be absent.
    let present = objects.len() as u64;
    assert!(
        (ec_load.acked_objects()..=OBJECTS / 2).contains(&present),
        "{present} patched objects on the shards, {} acknowledged",
        ec_load.acked_objects()
    );
    // Unmount before the guard removes the dir.
    drop(mounts);
    drop(cluster);
    drop(backings);
}

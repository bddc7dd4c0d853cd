//! Scrub with real processes: bytes flipped in one OSD's data file on disk
//! (bit rot under a running cluster). A light scrub compares metadata and
//! cannot see it; a deep scrub reads every byte and finds each damaged
//! copy; `cairn health detail` names them; a read of a damaged primary copy
//! is answered from a repaired one; `cairn pg repair` (or automatic repair)
//! restores every copy, and a second deep scrub finds nothing.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientConfig, ClientOptions, ReadRange};
use common::{Cluster, ok, ok_json};
use std::time::{Duration, Instant};

const POOL: &str = "data";
const OBJECTS: u64 = 48;
const WAIT: Duration = Duration::from_secs(90);

/// Object `index`: 64 KiB (stored as extents in the data file, not inline).
fn payload(index: u64) -> Bytes {
    Bytes::from(common::pattern(index + 7000, 64 << 10))
}

fn options() -> ClientOptions {
    ClientOptions {
        op_deadline: Duration::from_secs(30),
        map_refresh_interval: Duration::from_millis(300),
        ..ClientOptions::default()
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The OSD id the monitor gave the daemon `cairn up` runs in `osd.N/`.
fn osd_id(cluster: &Cluster, dir_index: u32) -> String {
    let path = cluster.dir.join(format!("osd.{dir_index}/osd_id"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// Runs `cairn pool scrub` and waits until every PG reports a scrub of the
/// kind asked for that started at or after now.
fn scrub_pool(cluster: &Cluster, deep: bool) {
    let since = unix_secs();
    let mut args = vec!["pool", "scrub", POOL];
    if deep {
        args.push("--deep");
    }
    let out = String::from_utf8_lossy(&ok(cluster.cairn(&args), "pool scrub")).into_owned();
    assert!(out.contains("32 of 32"), "every PG starts its scrub: {out}");
    let field = if deep {
        "last_deep_scrub_secs"
    } else {
        "last_scrub_secs"
    };
    let started = Instant::now();
    loop {
        let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
        let pgs = pgs.as_array().cloned().unwrap_or_default();
        let done = pgs.len() == 32
            && pgs
                .iter()
                .all(|p| p[field].as_u64().unwrap_or(0) >= since && p["scrubbing"].is_null());
        if done {
            return;
        }
        assert!(started.elapsed() < WAIT, "scrubs did not finish: {pgs:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn inconsistent_objects(cluster: &Cluster) -> u64 {
    let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
    status["scrub"]["inconsistent_objects"]
        .as_u64()
        .unwrap_or_else(|| panic!("no scrub summary: {status}"))
}

/// Polls `cairn status --json` until `done` holds of it and of its PG
/// states; panics with `what` and the last status after [`WAIT`].
fn wait_status(
    cluster: &Cluster,
    what: &str,
    done: impl Fn(&serde_json::Value, &[String]) -> bool,
) {
    let started = Instant::now();
    loop {
        let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
        let states: Vec<String> = status["pgs_by_state"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if done(&status, &states) {
            return;
        }
        assert!(started.elapsed() < WAIT, "{what}: {status}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until no PG has inconsistent objects and all are active+clean.
fn wait_repaired(cluster: &Cluster) {
    wait_status(cluster, "not repaired", |status, states| {
        states == ["active+clean"] && status["scrub"]["inconsistent_objects"] == 0
    });
}

async fn verify(client: &Client) {
    for index in 0..OBJECTS {
        let name = format!("rot-{index}");
        let got = client
            .read(POOL, name.as_bytes(), ReadRange::default())
            .await
            .unwrap_or_else(|e| panic!("read {name}: {e}"));
        assert!(got == payload(index), "{name} differs after repair");
    }
}

#[test]
fn deep_scrub_finds_rotten_copies_and_repair_restores_them() {
    let _serial = common::serial();
    let cluster = Cluster::up("scrub", 3, 18720, &[]);
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    ok(
        cluster.cairn(&["config", "set", "osd_scrub_auto_repair", "false"]),
        "config set",
    );
    let rt = common::runtime();
    let client = rt.block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        for index in 0..OBJECTS {
            let name = format!("rot-{index}");
            client
                .write_full(POOL, name.as_bytes(), payload(index))
                .await
                .unwrap_or_else(|e| panic!("write {name}: {e}"));
        }
        client
    });
    let blocks = common::rot(&cluster, 2);
    assert!(
        blocks >= OBJECTS * 16,
        "only {blocks} blocks in the data file"
    );

    // Metadata is intact: a light scrub sees nothing.
    scrub_pool(&cluster, false);
    assert_eq!(
        inconsistent_objects(&cluster),
        0,
        "light scrub reads no data"
    );

    // A deep scrub reads every copy: each object's copy on osd.2 is bad.
    scrub_pool(&cluster, true);
    assert_eq!(inconsistent_objects(&cluster), OBJECTS);
    let health = ok_json(cluster.cairn(&["health", "detail", "--json"]), "health");
    assert_eq!(health["status"], "HEALTH_ERR", "{health}");
    let detail = health["detail"].to_string();
    let rotten = format!("osd.{}: read error", osd_id(&cluster, 2));
    assert!(detail.contains(&rotten), "detail names the copy: {health}");
    let human =
        String::from_utf8_lossy(&ok(cluster.cairn(&["health", "detail"]), "health")).into_owned();
    assert!(human.contains("inconsistent"), "{human}");

    // The list is kept: an OSD restart (new intervals for each PG, some
    // primaries moving away and back) leaves every object reported.
    let data = cluster.dir.display().to_string();
    ok(
        cluster.cairn(&["daemon", "stop", "osd.0", "--data", &data]),
        "daemon stop",
    );
    std::thread::sleep(Duration::from_secs(2));
    ok(
        cluster.cairn(&["daemon", "start", "osd.0", "--data", &data]),
        "daemon start",
    );
    wait_status(
        &cluster,
        "not every object reported after a restart",
        |status, states| {
            status["reported_epoch"] == status["epoch"]
                && states.iter().all(|s| s.starts_with("active+clean"))
                && status["scrub"]["inconsistent_objects"] == OBJECTS
        },
    );

    // Reads are right meanwhile: a damaged primary copy (osd.2's PGs) is
    // recovered from another copy before the read is answered.
    rt.block_on(verify(&client));

    // `cairn pg repair` on each inconsistent PG.
    let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
    let mut repaired = 0;
    for pg in pgs.as_array().cloned().unwrap_or_default() {
        if pg["inconsistent_objects"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let id = pg["pg"].as_str().expect("pg id").to_owned();
        let out = ok(cluster.cairn(&["pg", "repair", &id]), "pg repair");
        assert!(String::from_utf8_lossy(&out).contains("repair"));
        repaired += 1;
    }
    assert!(repaired > 0);
    wait_repaired(&cluster);
    scrub_pool(&cluster, true);
    assert_eq!(inconsistent_objects(&cluster), 0, "repair fixed every copy");
    rt.block_on(verify(&client));

    // With automatic repair (the default), a deep scrub repairs on its own.
    ok(
        cluster.cairn(&["config", "rm", "osd_scrub_auto_repair"]),
        "config rm",
    );
    // OSDs fetch changed settings on their next heartbeat (every second).
    std::thread::sleep(Duration::from_secs(3));
    common::rot(&cluster, 1);
    scrub_pool(&cluster, true);
    wait_repaired(&cluster);
    scrub_pool(&cluster, true);
    assert_eq!(inconsistent_objects(&cluster), 0);
    rt.block_on(verify(&client));
    drop(client);
    drop(rt);
    drop(cluster);
}

#[test]
fn scrub_commands_refuse_bad_input_clearly() {
    let _serial = common::serial();
    let cluster = Cluster::up("scrub-input", 3, 18760, &[]);
    let bad = cluster.cairn(&["pg", "scrub", "nonsense"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a PG id"));
    let missing = cluster.cairn(&["pg", "deep-scrub", "9.0"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no PG 9.0"));
    let pool = cluster.cairn(&["pool", "scrub", "nope"]);
    assert!(!pool.status.success());
    let setting = cluster.cairn(&["config", "set", "osd_recovery_max_active", "0"]);
    assert!(!setting.status.success());
    assert!(String::from_utf8_lossy(&setting.stderr).contains("within"));
    let unknown = cluster.cairn(&["config", "get", "osd_no_such"]);
    assert!(!unknown.status.success());
    // A good setting round-trips and is listed as set.
    ok(
        cluster.cairn(&["config", "set", "osd_recovery_max_bytes_per_sec", "64M"]),
        "config set",
    );
    let value = ok(
        cluster.cairn(&["config", "get", "osd_recovery_max_bytes_per_sec"]),
        "config get",
    );
    assert_eq!(String::from_utf8_lossy(&value).trim(), "67108864");
    let listed = ok_json(cluster.cairn(&["config", "ls", "--json"]), "config ls");
    let row = listed
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["name"] == "osd_recovery_max_bytes_per_sec")
        })
        .cloned()
        .expect("listed");
    assert_eq!(row["set"], true, "{row}");
    // Settings survive a monitor restart.
    let data = cluster.dir.display().to_string();
    ok(
        cluster.cairn(&["daemon", "stop", "mon", "--data", &data]),
        "stop mon",
    );
    ok(
        cluster.cairn(&["daemon", "start", "mon", "--data", &data]),
        "start mon",
    );
    let value = ok(
        cluster.cairn(&["config", "get", "osd_recovery_max_bytes_per_sec"]),
        "config get after restart",
    );
    assert_eq!(String::from_utf8_lossy(&value).trim(), "67108864");
}

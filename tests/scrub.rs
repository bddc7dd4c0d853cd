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

/// Runs `cairn pool scrub` on the replicated pool and waits until every PG
/// reports a scrub of the kind asked for that started at or after now.
fn scrub_pool(cluster: &Cluster, deep: bool) {
    scrub_pool_named(cluster, POOL, deep);
}

/// [`scrub_pool`] of any pool: every PG of `pool` (and only those).
fn scrub_pool_named(cluster: &Cluster, pool: &str, deep: bool) {
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let entry = pools
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == pool)
        .cloned()
        .unwrap_or_else(|| panic!("no pool {pool}: {pools}"));
    let (id, pg_num) = (
        entry["id"].as_u64().expect("pool id"),
        entry["pg_num"].as_u64().expect("pg_num"),
    );
    let since = unix_secs();
    let mut args = vec!["pool", "scrub", pool];
    if deep {
        args.push("--deep");
    }
    let out = String::from_utf8_lossy(&ok(cluster.cairn(&args), "pool scrub")).into_owned();
    assert!(
        out.contains(&format!("{pg_num} of {pg_num}")),
        "every PG starts its scrub: {out}"
    );
    let field = if deep {
        "last_deep_scrub_secs"
    } else {
        "last_scrub_secs"
    };
    let started = Instant::now();
    loop {
        let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
        let pgs: Vec<serde_json::Value> = pgs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["pg"]
                    .as_str()
                    .is_some_and(|pg| pg.starts_with(&format!("{id}.")))
            })
            .cloned()
            .collect();
        let done = pgs.len() as u64 == pg_num
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

/// Silent damage on an erasure-coded pool: bytes rewritten, under sound
/// block checksums, on shards that partial writes left without a recorded
/// crc32c. Every per-shard check passes; the deep scrub's parity check
/// (re-encoding the data shards) finds each damaged object and names the
/// shard (4+2 locates one wrong shard), repair rebuilds it, and the
/// objects read back as written.
#[test]
fn a_deep_scrub_re_encodes_erasure_coded_objects_and_repairs_silent_damage() {
    use cairn_store::{CollectionId, DiskStore, ObjectStore, Op, StoreConfig, Transaction};
    use cairn_types::checked::CheckedBytes;
    const EC_POOL: &str = "ec";
    const EC_OBJECTS: u64 = 12;
    let _serial = common::serial();
    let cluster = Cluster::up("scrub-ec", 6, 19650, &[]);
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    ok(
        cluster.cairn(&["config", "set", "osd_scrub_auto_repair", "false"]),
        "config set",
    );
    ok(
        cluster.cairn(&[
            "pool",
            "create",
            EC_POOL,
            "--erasure",
            "4+2",
            "--stripe-unit",
            "4K",
            "--pg-num",
            "8",
            "--failure-domain",
            "osd",
        ]),
        "pool create",
    );
    common::wait_clean(&cluster);
    let pool_id = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls")
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == EC_POOL)
        .and_then(|p| p["id"].as_u64())
        .expect("pool id");
    // Whole writes, then a small overwrite of each: its data shard and the
    // parity shards lose their recorded crc32c.
    let rt = common::runtime();
    let mut model: Vec<Vec<u8>> = Vec::new();
    let client = rt.block_on(async {
        let client = Client::connect_with(&config.mon, options())
            .await
            .expect("connect");
        for index in 0..EC_OBJECTS {
            let name = format!("ec-{index}");
            let mut bytes = payload(index).to_vec();
            client
                .write_full(EC_POOL, name.as_bytes(), Bytes::from(bytes.clone()))
                .await
                .unwrap_or_else(|e| panic!("write {name}: {e}"));
            let patch = common::pattern(index + 9000, 300);
            client
                .write(EC_POOL, name.as_bytes(), 5000, Bytes::from(patch.clone()))
                .await
                .unwrap_or_else(|e| panic!("overwrite {name}: {e}"));
            bytes[5000..5300].copy_from_slice(&patch);
            model.push(bytes);
        }
        client
    });
    scrub_pool_named(&cluster, EC_POOL, true);
    assert_eq!(inconsistent_objects(&cluster), 0, "sound shards re-encode");

    // osd.1 stops; on its store, every unsealed shard of the pool gets
    // other bytes, written properly.
    let data = cluster.dir.display().to_string();
    ok(
        cluster.cairn(&["daemon", "stop", "osd.1", "--data", &data]),
        "daemon stop",
    );
    std::thread::sleep(Duration::from_secs(1));
    let damaged = {
        let store = DiskStore::open(&cluster.dir.join("osd.1/store"), StoreConfig::default())
            .expect("open osd.1's store");
        let mut damaged = 0u64;
        let collections: Vec<CollectionId> = store
            .collections()
            .expect("collections")
            .into_iter()
            .filter(|c| c.0 >> 32 == pool_id)
            .collect();
        for collection in collections {
            let page = store.list(collection, None, 1000).expect("list");
            for key in page.keys {
                let xattrs = store.xattrs(collection, &key).expect("xattrs");
                let Some(meta) = xattrs.get(cairn_osd::ec::EC_META_XATTR) else {
                    continue;
                };
                let meta = cairn_osd::ec::ShardMeta::decode(meta).expect("shard metadata");
                if meta.crc.is_some() {
                    continue;
                }
                let garbage = Bytes::from(vec![0x5au8; 200]);
                let txn = Transaction::new(collection).with(Op::Write {
                    object: key.clone(),
                    offset: 100,
                    data: CheckedBytes::summed(garbage),
                });
                store.apply(txn).expect("rewrite a shard");
                damaged += 1;
            }
        }
        damaged
    };
    assert!(damaged > 0, "osd.1 holds unsealed shards");
    ok(
        cluster.cairn(&["daemon", "start", "osd.1", "--data", &data]),
        "daemon start",
    );
    // (Not `common::wait_clean`, whose deep scrub would find the damage.)
    wait_status(&cluster, "not clean after the restart", |status, states| {
        status["reported_epoch"] == status["epoch"] && states == ["active+clean"]
    });

    // A light scrub and the per-shard checks see nothing; the deep scrub's
    // parity check finds every damaged object and names osd.1.
    scrub_pool_named(&cluster, EC_POOL, false);
    assert_eq!(inconsistent_objects(&cluster), 0, "light scrub");
    scrub_pool_named(&cluster, EC_POOL, true);
    assert_eq!(inconsistent_objects(&cluster), damaged);
    let victim = osd_id(&cluster, 1);
    let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
    for pg in pgs.as_array().cloned().unwrap_or_default() {
        if pg["inconsistent_objects"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        for found in pg["inconsistent"].as_array().cloned().unwrap_or_default() {
            let found = found.as_str().unwrap_or_default().to_owned();
            assert!(
                found.contains(&format!(
                    "on osd.{victim} disagrees with the code of the others"
                )),
                "osd.{victim} named as the wrong shard: {found}"
            );
        }
        let id = pg["pg"].as_str().expect("pg id").to_owned();
        ok(cluster.cairn(&["pg", "repair", &id]), "pg repair");
    }
    wait_repaired(&cluster);
    scrub_pool_named(&cluster, EC_POOL, true);
    assert_eq!(
        inconsistent_objects(&cluster),
        0,
        "repair fixed every shard"
    );
    rt.block_on(async {
        for (index, want) in model.iter().enumerate() {
            let name = format!("ec-{index}");
            let got = client
                .read(EC_POOL, name.as_bytes(), ReadRange::default())
                .await
                .unwrap_or_else(|e| panic!("read {name}: {e}"));
            assert!(got[..] == want[..], "{name} differs after repair");
        }
    });
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

//! The administration commands against a real `cairn up` cluster:
//! `osd tree` shows three up, in OSDs with weights; `osd out`/`osd in`
//! flip an OSD's in flag; `df` reports the OSDs' capacity and each pool;
//! `pool set` grows PGs and lowers min_size; erasure-coded pools are
//! created (or refused, with the reason) and listed with their space
//! efficiency; `pool rm` needs confirming and then deletes the pool.

mod common;

use common::{Cluster, ok, ok_json, tree_osds};

fn pool<'a>(pools: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    pools.as_array()?.iter().find(|p| p["name"] == name)
}

/// Five 200,000-byte objects in `data` (size 3) and in `ec` (2+1): `df`
/// and `pool ls` count them, their bytes, and the raw space they take
/// (three copies; three shards of half the object, each rounded up to the
/// code's 4 KiB block and the store's allocation unit).
fn pools_hold_what_was_written(cluster: &Cluster) {
    const OBJECT_BYTES: usize = 200_000;
    for pool in ["data", "ec"] {
        for i in 0..5 {
            let body = vec![b'a' + i as u8; OBJECT_BYTES];
            ok(
                common::cairn_with_input(
                    &cluster.conf,
                    &["object", "put", "--pool", pool, &format!("usage-{i}"), "-"],
                    Some(&body),
                ),
                "object put",
            );
        }
    }
    let written = 5 * OBJECT_BYTES as u64;
    // Each copy's OSD reports its own PG's bytes on its own beat, so the
    // raw figure lags the stored one until every copy has reported: wait
    // for both, and let the bounds below catch what is really wrong.
    let counted = |p: &serde_json::Value| {
        let least_raw = if p["name"] == "data" { 3.0 } else { 1.5 };
        p["objects"] == 5
            && p["stored_bytes"].as_u64().is_some_and(|b| b >= written)
            && p["raw_per_stored"].as_f64().is_some_and(|r| r >= least_raw)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let df = loop {
        let df = ok_json(cluster.cairn(&["df", "--json"]), "df");
        let all = ["data", "ec"]
            .iter()
            .all(|name| pool(&df["pools"], name).is_some_and(counted));
        if all {
            break df;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "df never counted the objects written: {df}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let ratio = |name: &str| {
        let p = pool(&df["pools"], name).expect("pool in df");
        let stored = p["stored_bytes"].as_u64().expect("stored");
        assert!(
            stored <= written + 5 * 16 * 1024,
            "{name}: {stored} bytes stored for {written} written: {p}"
        );
        p["raw_per_stored"].as_f64().expect("raw_per_stored")
    };
    let data = ratio("data");
    assert!(
        (3.0..3.2).contains(&data),
        "size 3 takes {data} raw bytes per byte: {df}"
    );
    let ec = ratio("ec");
    assert!(
        (1.5..1.7).contains(&ec),
        "2+1 takes {ec} raw bytes per byte: {df}"
    );
    // Overwritten whole, each object's old shards go to roll-back stashes;
    // the idle PGs roll them forward within seconds, so the raw space goes
    // back to what the objects take.
    for i in 0..5 {
        let body = vec![b'A' + i as u8; OBJECT_BYTES];
        ok(
            common::cairn_with_input(
                &cluster.conf,
                &["object", "put", "--pool", "ec", &format!("usage-{i}"), "-"],
                Some(&body),
            ),
            "object put (overwrite)",
        );
    }
    // Past the OSDs' next heartbeats (1 s apart), so no report from before
    // the overwrites passes the check below.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let df = ok_json(cluster.cairn(&["df", "--json"]), "df");
        let p = pool(&df["pools"], "ec").expect("ec in df");
        let ratio = p["raw_per_stored"].as_f64().unwrap_or(0.0);
        if counted(p) && (1.5..1.7).contains(&ratio) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stashes of overwritten objects were never rolled forward: {p}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let table = String::from_utf8_lossy(&ok(cluster.cairn(&["df"]), "df")).into_owned();
    assert!(
        table.contains("raw/stored") && table.contains("976.6 KiB"),
        "{table}"
    );
    // The OSDs' reports come with their heartbeats, each on its own
    // schedule: `pool ls` agrees once they all came after the writes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
        let listed = pool(&pools, "ec").expect("ec in pool ls");
        if counted(listed) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "pool ls: {listed}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[test]
fn osd_tree_out_in_df_and_pool_set_rm() {
    let cluster = Cluster::up("admin", 3, 17500, &[]);

    let osds = tree_osds(&cluster);
    assert_eq!(osds.len(), 3, "{osds:?}");
    for osd in &osds {
        assert_eq!(osd["up"], true, "{osd}");
        assert_eq!(osd["in"], true, "{osd}");
        assert!(osd["weight"].as_f64().is_some_and(|w| w > 0.0), "{osd}");
    }
    let human =
        String::from_utf8_lossy(&ok(cluster.cairn(&["osd", "tree"]), "osd tree")).into_owned();
    assert!(human.contains("host") && human.contains("osd.1"), "{human}");

    ok(cluster.cairn(&["osd", "out", "osd.1"]), "osd out");
    let out = tree_osds(&cluster);
    let row = out.iter().find(|o| o["id"] == 1).expect("osd.1");
    assert_eq!(row["in"], false, "out: {row}");
    ok(cluster.cairn(&["osd", "in", "1"]), "osd in");
    let back = tree_osds(&cluster);
    let row = back.iter().find(|o| o["id"] == 1).expect("osd.1");
    assert_eq!(row["in"], true, "in again: {row}");
    assert!(!cluster.cairn(&["osd", "out", "osd.x"]).status.success());

    let df = ok_json(cluster.cairn(&["df", "--json"]), "df");
    let capacity = df["capacity_bytes_total"].as_u64().expect("capacity");
    assert!(capacity > 0, "{df}");
    assert_eq!(df["osds_up_in"], 3, "{df}");
    let data = pool(&df["pools"], "data").expect("pool data in df");
    assert_eq!(
        data["usable_bytes_max"].as_u64(),
        Some(capacity / 3),
        "{df}"
    );
    ok(cluster.cairn(&["df"]), "df (table)");

    ok(
        cluster.cairn(&["pool", "create", "scratch", "--pg-num", "8"]),
        "pool create",
    );
    ok(
        cluster.cairn(&[
            "pool",
            "set",
            "scratch",
            "--pg-num",
            "16",
            "--pgp-num",
            "16",
            "--min-size",
            "1",
        ]),
        "pool set",
    );
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let scratch = pool(&pools, "scratch").expect("scratch");
    assert_eq!(scratch["pg_num"], 16, "{scratch}");
    assert_eq!(scratch["pgp_num"], 16, "{scratch}");
    assert_eq!(scratch["redundancy"], "replicated size 3 min_size 1");
    assert!(
        !cluster.cairn(&["pool", "set", "scratch"]).status.success(),
        "pool set with nothing to set fails"
    );
    // With an object in it, raising pg_num splits its PG: the object is
    // still there, and pgp_num follows pg_num.
    ok(
        common::cairn_with_input(
            &cluster.conf,
            &["object", "put", "--pool", "scratch", "kept", "-"],
            Some(b"still here"),
        ),
        "object put",
    );
    let split = ok(
        cluster.cairn(&["pool", "set", "scratch", "--pg-num", "32"]),
        "pool set --pg-num with data",
    );
    let said = String::from_utf8_lossy(&split);
    assert!(
        said.contains("pg_num 16 -> 32") && said.contains("pgp_num 16 -> 32"),
        "{said}"
    );
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let scratch = pool(&pools, "scratch").expect("scratch");
    assert_eq!(scratch["pg_num"], 32, "{scratch}");
    assert_eq!(scratch["pgp_num"], 32, "{scratch}");
    let shrink = cluster.cairn(&["pool", "set", "scratch", "--pg-num", "8"]);
    assert!(!shrink.status.success(), "pg_num does not shrink");
    let kept = ok(
        cluster.cairn(&["object", "get", "--pool", "scratch", "kept", "-"]),
        "object get",
    );
    assert_eq!(kept, b"still here");

    // Erasure-coded pools: k + m failure domains needed (3 OSDs here),
    // k, m >= 1, a power-of-two stripe unit from 4K to 1M, min_size from k
    // to k + m (k + 1 by default, settable later); shown with their space
    // efficiency by `pool ls` and `df`.
    for (args, says) in [
        (&["--erasure", "4+2"][..], "needs 6"),
        (&["--erasure", "2+0"], "m >= 1"),
        (
            &["--erasure", "2+1", "--stripe-unit", "3000"],
            "power of two",
        ),
        (&["--erasure", "2+1", "--stripe-unit", "2M"], "stripe unit"),
        (&["--erasure", "2+1", "--min-size", "1"], "min_size 1"),
        (&["--erasure", "two+1"], "expected K+M"),
        (&["--erasure", "2+1", "--size", "3"], "cannot be used with"),
    ] {
        let mut full = vec!["pool", "create", "bad-ec", "--pg-num", "4"];
        full.extend_from_slice(args);
        let out = cluster.cairn(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "pool create {args:?}: want an error saying {says:?}, got: {err}"
        );
    }
    let created = ok(
        cluster.cairn(&[
            "pool",
            "create",
            "ec",
            "--erasure",
            "2+1",
            "--stripe-unit",
            "64K",
            "--pg-num",
            "4",
        ]),
        "pool create --erasure",
    );
    assert!(
        String::from_utf8_lossy(&created).contains("erasure 2+1 min_size 3 stripe_unit 64K"),
        "{}",
        String::from_utf8_lossy(&created)
    );
    ok(
        cluster.cairn(&["pool", "set", "ec", "--min-size", "2"]),
        "pool set --min-size on an erasure-coded pool",
    );
    assert!(
        !cluster
            .cairn(&["pool", "set", "ec", "--min-size", "4"])
            .status
            .success(),
        "min_size above k + m is refused"
    );
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let ec = pool(&pools, "ec").expect("ec");
    assert_eq!(
        ec["redundancy"], "erasure 2+1 min_size 2 stripe_unit 64K",
        "{ec}"
    );
    let efficiency = |p: &serde_json::Value| p["space_efficiency"].as_f64().unwrap_or(0.0);
    assert!((efficiency(ec) - 2.0 / 3.0).abs() < 1e-9, "{ec}");
    let data = pool(&pools, "data").expect("data");
    assert!((efficiency(data) - 1.0 / 3.0).abs() < 1e-9, "{data}");
    let df = ok_json(cluster.cairn(&["df", "--json"]), "df");
    let ec = pool(&df["pools"], "ec").expect("ec in df");
    assert_eq!(
        ec["usable_bytes_max"].as_u64(),
        Some(capacity * 2 / 3),
        "{df}"
    );
    assert!(
        String::from_utf8_lossy(&ok(cluster.cairn(&["pool", "ls"]), "pool ls")).contains("67%"),
        "pool ls shows the space efficiency"
    );
    pools_hold_what_was_written(&cluster);
    ok(
        cluster.cairn(&["pool", "rm", "ec", "--yes-i-really-mean-it"]),
        "pool rm ec",
    );

    let unconfirmed = cluster.cairn(&["pool", "rm", "scratch"]);
    assert!(!unconfirmed.status.success(), "pool rm needs confirming");
    ok(
        cluster.cairn(&["pool", "rm", "scratch", "--yes-i-really-mean-it"]),
        "pool rm",
    );
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    assert!(pool(&pools, "scratch").is_none(), "{pools}");
    assert!(pool(&pools, "data").is_some(), "{pools}");
}

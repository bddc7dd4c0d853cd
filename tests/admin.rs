//! The administration commands against a real `cairn up` cluster:
//! `osd tree` shows three up, in OSDs with weights; `osd out`/`osd in`
//! flip an OSD's in flag; `df` reports the OSDs' capacity and each pool;
//! `pool set` grows PGs and lowers min_size; `pool rm` needs confirming
//! and then deletes the pool.

mod common;

use common::{Cluster, ok, ok_json, tree_osds};

fn pool<'a>(pools: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    pools.as_array()?.iter().find(|p| p["name"] == name)
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

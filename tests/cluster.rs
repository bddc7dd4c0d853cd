//! `cairn up --detach` starts a real local cluster (a monitor and three
//! OSDs as child processes); the CLI creates a pool, puts a 4 MiB object
//! and small ones from files and stdin, gets them back byte-exact, sees
//! three OSDs up in `status --json`; `cairn down` leaves no process behind.

mod common;

use common::{Cluster, is_running, ok, recorded_pids, test_dir};
use std::path::Path;
use std::process::Output;

/// Runs `cairn ARGS` with the cluster's config, bounded.
fn cairn(conf: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    common::cairn_with_input(conf, args, stdin)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap_or(0) ^ seed)
        .collect()
}

#[test]
fn up_put_get_status_down() {
    let dir = test_dir("cluster");
    let cluster = Cluster {
        dir: dir.clone(),
        conf: dir.join("cairn.toml"),
        base_port: 17100,
    };
    let data = dir.display().to_string();
    let conf = dir.join("cairn.toml");
    let up = cairn(
        &conf,
        &[
            "up",
            "--detach",
            "--data",
            &data,
            "--osds",
            "3",
            "--base-port",
            "17100",
            // The file-system tests run an MDS, the S3 tests a gateway;
            // this one counts the daemons and PGs of a bare cluster.
            "--mds",
            "0",
            "--s3-port",
            "0",
        ],
        None,
    );
    let summary = String::from_utf8_lossy(&ok(up, "cairn up")).into_owned();
    assert!(summary.contains("127.0.0.1:17100"), "summary: {summary}");
    assert!(conf.exists(), "cairn up writes the client config");
    let pids = recorded_pids(&dir);
    assert_eq!(pids.len(), 5, "supervisor, mon and 3 OSDs: {pids:?}");
    assert!(pids.iter().all(|p| is_running(*p)));

    let status = ok(cairn(&conf, &["status", "--json"], None), "status");
    let status: serde_json::Value = serde_json::from_slice(&status).expect("json");
    assert_eq!(status["osds_up"], 3, "{status}");
    assert_eq!(status["osds_total"], 3, "{status}");
    // `up` returns only once every PG is reported, all active on a fresh
    // cluster.
    assert_eq!(status["pgs_by_state"]["active+clean"], 32, "{status}");
    assert_eq!(status["health"]["status"], "HEALTH_OK", "{status}");
    assert!(
        status["pools"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "data")),
        "default pool: {status}"
    );

    ok(
        cairn(
            &conf,
            &["pool", "create", "objs", "--size", "3", "--pg-num", "16"],
            None,
        ),
        "pool create",
    );
    let pools = ok(cairn(&conf, &["pool", "ls", "--json"], None), "pool ls");
    let pools: serde_json::Value = serde_json::from_slice(&pools).expect("json");
    assert!(
        pools
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "objs"))
    );

    let objects: Vec<(String, Vec<u8>)> = [4usize << 20, 0, 1, 4096]
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let seed = u8::try_from(i).unwrap_or(0);
            (format!("obj-{size}"), pattern(*size, seed))
        })
        .collect();
    for (name, bytes) in &objects {
        let file = dir.join(format!("{name}.in"));
        std::fs::write(&file, bytes).expect("write input");
        let file = file.display().to_string();
        ok(
            cairn(
                &conf,
                &["object", "put", "--pool", "objs", name, &file],
                None,
            ),
            "object put",
        );
    }
    ok(
        cairn(
            &conf,
            &["object", "put", "--pool", "objs", "from-stdin", "-"],
            Some(b"hello"),
        ),
        "object put from stdin",
    );
    for (name, bytes) in &objects {
        let out = dir.join(format!("{name}.out"));
        let out_arg = out.display().to_string();
        ok(
            cairn(
                &conf,
                &["object", "get", "--pool", "objs", name, &out_arg],
                None,
            ),
            "object get",
        );
        assert!(
            std::fs::read(&out).expect("read output") == *bytes,
            "{name} byte-exact"
        );
    }
    let stdout = ok(
        cairn(
            &conf,
            &["object", "get", "--pool", "objs", "from-stdin", "-"],
            None,
        ),
        "object get to stdout",
    );
    assert_eq!(stdout, b"hello");
    let stat = ok(
        cairn(
            &conf,
            &["object", "stat", "--pool", "objs", "obj-4194304", "--json"],
            None,
        ),
        "object stat",
    );
    let stat: serde_json::Value = serde_json::from_slice(&stat).expect("json");
    assert_eq!(stat["size_bytes"], 4 << 20);
    ok(
        cairn(&conf, &["object", "rm", "--pool", "objs", "obj-1"], None),
        "object rm",
    );
    let missing = cairn(&conf, &["object", "stat", "--pool", "objs", "obj-1"], None);
    assert!(!missing.status.success(), "a removed object is gone");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    let down = cairn(&conf, &["down", "--data", &data], None);
    ok(down, "cairn down");
    for pid in &pids {
        assert!(
            !is_running(*pid),
            "pid {pid} still running after cairn down"
        );
    }
    drop(cluster);
}

/// A second `cairn up` on a port another cluster serves must not take that
/// cluster for its own: its monitor cannot bind, and `up` says so instead
/// of reporting ready (a benchmark once wrote to the wrong cluster so).
#[test]
fn up_refuses_another_clusters_monitor_on_its_port() {
    let first = Cluster::up("port-owner", 1, 17150, &[]);
    let second_dir = test_dir("port-taker");
    let data = second_dir.display().to_string();
    let conf = second_dir.join("cairn.toml");
    let taken = cairn(
        &conf,
        &[
            "up",
            "--detach",
            "--data",
            &data,
            "--osds",
            "1",
            "--base-port",
            "17150",
            "--s3-port",
            "0",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&taken.stderr).into_owned();
    assert!(!taken.status.success(), "up on a taken port: {stderr}");
    assert!(
        stderr.contains("not this one") || stderr.contains("before the cluster was ready"),
        "says why: {stderr}"
    );
    assert!(
        !conf.exists(),
        "no client config for a cluster that is not up"
    );
    // Its daemons are gone; the first cluster is untouched.
    let _ = cairn(&conf, &["down", "--data", &data], None);
    for pid in recorded_pids(&second_dir) {
        assert!(!is_running(pid), "pid {pid} of the refused cluster runs on");
    }
    ok(first.cairn(&["status"]), "the first cluster still serves");
    let _ = std::fs::remove_dir_all(&second_dir);
}

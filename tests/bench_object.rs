//! `cairn bench object` against a real `cairn up` cluster: a 3 s write run
//! records its objects, `seq` reads each back once, `rand --cleanup` reads
//! random ones and removes them all (a `seq` run also prints the human
//! live lines and summary); every run has ops, no errors, and
//! bytes equal to ops times the object size.

mod common;

use common::{Cluster, ok_json};

const OBJECT_SIZE_BYTES: u64 = 256 << 10;

fn bench(cluster: &Cluster, mode: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "object",
        "--pool",
        "data",
        "--mode",
        mode,
        "--object-size",
        "256K",
        "--concurrency",
        "4",
        "--duration",
        "3s",
        "--json",
    ];
    args.extend_from_slice(extra);
    let summary = ok_json(cluster.cairn(&args), mode);
    let ops = summary["ops"].as_u64().expect("ops");
    assert!(ops > 0, "{mode}: no ops: {summary}");
    assert_eq!(summary["errors"], 0, "{mode}: {summary}");
    assert_eq!(
        summary["bytes_total"].as_u64(),
        Some(ops * OBJECT_SIZE_BYTES),
        "{mode}: bytes = ops x size: {summary}"
    );
    assert!(summary["latency_max_secs"].as_f64() >= summary["latency_p50_secs"].as_f64());
    summary
}

#[test]
fn write_then_seq_then_rand_with_cleanup() {
    let cluster = Cluster::up("bench-object", 3, 17400, &[]);
    let write = bench(&cluster, "write", &[]);
    let written = write["ops"].as_u64().expect("ops");
    let list = cluster.dir.join("bench-data.txt");
    let listed = std::fs::read_to_string(&list).expect("object list");
    assert_eq!(listed.lines().count() as u64, written, "one line per write");

    let seq = bench(&cluster, "seq", &[]);
    assert!(seq["ops"].as_u64() <= Some(written), "seq reads each once");

    // The human form: live lines and a summary.
    let human = common::ok(
        cluster.cairn(&[
            "bench",
            "object",
            "--pool",
            "data",
            "--mode",
            "seq",
            "--duration",
            "2s",
        ]),
        "seq (human)",
    );
    let human = String::from_utf8_lossy(&human);
    assert!(
        human.contains("cur MiB/s") && human.contains("Total ops:"),
        "{human}"
    );
    assert!(human.contains("Errors:                0"), "{human}");

    let rand = bench(&cluster, "rand", &["--cleanup"]);
    assert_eq!(rand["objects_removed"].as_u64(), Some(written));
    assert!(!list.exists(), "--cleanup removes the list");
    let first = listed.split(' ').next().expect("a name");
    let gone = cluster.cairn(&["object", "stat", "--pool", "data", first]);
    assert!(!gone.status.success(), "{first} removed");
}

//! `cairn bench object` against a real `cairn up` cluster: a 3 s write run
//! records its objects, `seq` reads each back once, `rand --cleanup` reads
//! random ones and removes them all (a `seq` run also prints the human
//! live lines and summary); every run has ops, no errors, and
//! bytes equal to ops times the object size. A write run with `--objects`
//! and `--series` cycles over that many names, records one CSV line per
//! second whose operations add up to the summary's, and ends early with a
//! summary on SIGINT.

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

#[test]
fn objects_cycle_series_records_and_sigint_ends_the_run() {
    let cluster = Cluster::up("bench-series", 3, 17420, &[]);
    let series = cluster.dir.join("series.csv");
    let series_arg = series.display().to_string();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "object", "--pool", "data", "--mode", "write"])
        .args(["--object-size", "256K", "--concurrency", "4"])
        .args(["--duration", "60s", "--objects", "3", "--json"])
        .args(["--series", &series_arg])
        .env("CAIRN_CONF", &cluster.conf)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cairn bench");
    let started = std::time::Instant::now();
    // Two whole seconds recorded (plus the header), then SIGINT.
    while std::fs::read_to_string(&series).map_or(0, |s| s.lines().count()) < 3 {
        assert!(started.elapsed().as_secs() < 30, "no series lines");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = child.id().to_string();
    common::ok(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .output()
            .expect("kill"),
        "kill -INT",
    );
    let output = child.wait_with_output().expect("wait");
    let summary: serde_json::Value =
        serde_json::from_slice(&common::ok(output, "bench write")).expect("summary JSON");
    assert!(
        started.elapsed().as_secs() < 30,
        "SIGINT ends the run: {summary}"
    );
    let ops = summary["ops"].as_u64().expect("ops");
    assert!(ops > 3, "more writes than names: {summary}");
    assert_eq!(summary["errors"], 0, "{summary}");

    let listed = std::fs::read_to_string(cluster.dir.join("bench-data.txt")).expect("list");
    assert_eq!(listed.lines().count(), 3, "each name listed once: {listed}");

    let text = std::fs::read_to_string(&series).expect("series");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "unix_time_secs,elapsed_secs,interval_secs,mib_per_sec,ops,errors,in_flight,latency_avg_secs"
        )
    );
    let mut ops_sum = 0u64;
    let mut time_before = 0.0f64;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 8, "{line}");
        let time: f64 = fields[0].parse().expect("time");
        assert!(time >= time_before, "times in order: {text}");
        time_before = time;
        ops_sum += fields[4].parse::<u64>().expect("ops");
    }
    assert_eq!(ops_sum, ops, "the series adds up to the summary: {text}");
}

//! `cairn placement …` run as a real process: the simulator's report, the
//! balancer writing a map that `map` then reads, and clear errors (never a
//! panic) for bad flags and bad map files.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(args: &[&str]) -> serde_json::Value {
    let output = cairn(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_str(&stdout(&output)).expect("valid JSON")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cairn-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn simulate_reports_distribution_movement_and_speed() {
    let args = [
        "placement",
        "simulate",
        "--racks",
        "2",
        "--hosts",
        "20",
        "--osds-per-host",
        "4",
        "--pg-num",
        "512",
        "--size",
        "3",
        "--json",
    ];
    let report = json(&args);
    assert_eq!(report["cluster"]["osds"], 80);
    assert_eq!(report["cluster"]["hosts"], 20);
    assert_eq!(report["cluster"]["racks"], 2);
    let pool = &report["pools"][0];
    assert_eq!(pool["distribution"]["pg_replicas"], 512 * 3);
    assert_eq!(pool["distribution"]["undersized_pgs"], 0);
    assert_eq!(pool["distribution"]["per_osd"]["items"], 80);
    let movement = pool["movement"].as_array().expect("movement rows");
    let scenarios: Vec<&str> = movement
        .iter()
        .map(|m| m["scenario"].as_str().expect("name"))
        .collect();
    assert_eq!(
        scenarios,
        [
            "mark osd.0 out",
            "add 1 osd to host0",
            "add host (4 osds) to rack0",
            "remove osd.0",
            "remove host0",
            "reweight osd.0 to 0.5x"
        ]
    );
    for row in movement {
        // Replicated placement moves exactly what each change requires.
        assert_eq!(row["moved_replicas"], row["optimal_replicas"], "{row}");
    }
    assert!(
        pool["throughput"]["mappings_per_sec"]
            .as_f64()
            .expect("rate")
            > 0.0
    );

    // The human report has the same parts.
    let output = cairn(&args[..args.len() - 1]);
    assert!(output.status.success());
    let text = stdout(&output);
    for part in [
        "PG replicas per OSD",
        "max÷mean",
        "Data movement",
        "mark osd.0 out",
        "Mapping speed",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
}

#[test]
fn simulate_mixed_weights_classes_and_erasure_coding() {
    let report = json(&[
        "placement",
        "simulate",
        "--hosts",
        "12",
        "--osds-per-host",
        "4",
        "--weights",
        "1,2,4",
        "--classes",
        "hdd,hdd,hdd,ssd",
        "--ec",
        "4+2",
        "--device-class",
        "hdd",
        "--pg-num",
        "256",
        "--no-movement",
        "--json",
    ]);
    let pool = &report["pools"][0];
    assert_eq!(
        pool["pool"]["rule"],
        "erasure 4+2 min_size 5 stripe_unit 16K"
    );
    assert_eq!(pool["pool"]["size"], 6);
    assert_eq!(
        pool["distribution"]["per_osd"]["items"], 36,
        "only hdd OSDs hold data"
    );
    assert_eq!(pool["distribution"]["pg_replicas"], 256 * 6);
}

#[test]
fn balance_writes_a_map_that_map_and_simulate_read_back() {
    let dir = temp_dir("balance");
    let balanced = dir.join("balanced.toml");
    let balanced_arg = balanced.to_str().expect("utf-8 path");
    let results = json(&[
        "placement",
        "balance",
        "--hosts",
        "16",
        "--osds-per-host",
        "3",
        "--pg-num",
        "256",
        "--out",
        balanced_arg,
        "--json",
    ]);
    let result = &results[0];
    assert!(result["moves"].as_u64().expect("moves") > 0);
    let after = result["max_over_mean_after"].as_f64().expect("after");
    assert!(
        after
            <= result["max_over_mean_reachable"]
                .as_f64()
                .expect("reachable")
                + 1e-9
    );
    assert!(after < result["max_over_mean_before"].as_f64().expect("before"));

    // The written map keeps its remaps and places with them.
    let report = json(&[
        "placement",
        "simulate",
        "--map",
        balanced_arg,
        "--no-movement",
        "--json",
    ]);
    let measured = report["pools"][0]["distribution"]["per_osd"]["max_over_mean"]
        .as_f64()
        .expect("ratio");
    assert!((measured - after).abs() < 1e-9, "{measured} vs {after}");

    let mapping = json(&[
        "placement",
        "map",
        "--map",
        balanced_arg,
        "--pool",
        "sim",
        "my-object",
        "--json",
    ]);
    assert_eq!(mapping["object"], "my-object");
    assert_eq!(mapping["up"].as_array().expect("up").len(), 3);
    assert_eq!(mapping["primary"], mapping["up"][0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_gets_a_clear_error_and_no_panic() {
    let dir = temp_dir("bad");
    let garbage = dir.join("garbage.bin");
    std::fs::write(&garbage, b"CMAP\x01\x00\x00\x00\xff\xff\xff\xff garbage").expect("write");
    let text = dir.join("bad.toml");
    std::fs::write(&text, "[[osds]]\nid = 0\nhost = \"a b\"\n").expect("write");
    let missing = dir.join("missing.toml");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--hosts", "2", "--size", "3"],
            "needs 3 distinct hosts with OSDs in, but the map has 2",
        ),
        (vec!["--pg-num", "0"], "pg_num 0 must be between 1"),
        (
            vec!["--size", "3", "--min-size", "5"],
            "min_size 5 must be between 1 and size 3",
        ),
        (vec!["--ec", "four+two"], "expected K+M"),
        (vec!["--ec", "4+0"], "need k >= 1, m >= 1"),
        (vec!["--failure-domain", "planet"], "not a failure domain"),
        (vec!["--weights=-1"], "out of range"),
        (vec!["--hosts", "0"], "at least 1"),
        (
            vec!["--device-class", "nvme"],
            "needs 3 distinct hosts of class nvme",
        ),
        (
            vec!["--map", garbage.to_str().expect("path")],
            "cannot read map",
        ),
        (
            vec!["--map", text.to_str().expect("path")],
            "invalid host name",
        ),
        (
            vec!["--map", missing.to_str().expect("path")],
            "cannot read",
        ),
    ]
    .into_iter()
    .map(|(args, message)| (args.into_iter().map(String::from).collect(), message))
    .collect();
    for (args, message) in cases {
        let mut full = vec![
            "placement".to_owned(),
            "simulate".to_owned(),
            "--no-movement".to_owned(),
        ];
        full.extend(args.iter().cloned());
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let output = cairn(&refs);
        let err = stderr(&output);
        let code = output.status.code();
        assert!(
            matches!(code, Some(1 | 2)),
            "{args:?} exited {code:?}: {err}"
        );
        assert!(err.contains(message), "{args:?}: {err:?} lacks {message:?}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

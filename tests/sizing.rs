//! `cairn sizing`: two synthetic sweep directories whose points follow a
//! known write roofline (40 MiB/s per OSD, 0.5 × disk MiB/s × data
//! fraction, 100 MiB/s per core) and a small catalog give the cheapest
//! configuration computed by hand; the built-in catalog gives an answer no
//! runner-up undercuts; a bad target and a bad catalog exit non-zero
//! naming what is wrong.

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

/// A point of a sweep's summary.json, with the fields sizing ignores too.
fn point(index: u64, label: &str, osds: f64, cores: f64, disk: f64, fraction: f64) -> Value {
    let write = (40.0 * osds).min(0.5 * disk * fraction).min(100.0 * cores);
    let read = (60.0 * osds).min(0.8 * disk).min(200.0 * cores);
    let phase = |name: &str, mib: f64| {
        json!({
            "phase": name,
            "mib_per_sec": [mib],
            "median_mib_per_sec": mib,
            "min_mib_per_sec": mib,
            "max_mib_per_sec": mib,
            "median_iops": mib / 4.0,
            "median_latency_p99_secs": 0.5
        })
    };
    json!({
        "point": index,
        "label": label,
        "settings": {"osds": osds, "pg_num": 32, "size": 3},
        "resources": {
            "osds": osds,
            "hosts": osds,
            "cores": cores,
            "disk_mib_per_sec": disk,
            "disk_iops": null,
            "memory_bytes": osds * 4.0 * 1073741824.0,
            "net_mib_per_sec": null,
            "data_fraction": fraction
        },
        "phases": [phase("write", write), phase("rand", read)]
    })
}

fn sweep(dir: &Path, points: Vec<Value>) {
    std::fs::create_dir_all(dir).expect("run directory");
    let summary = json!({
        "plan": {"name": "synthetic", "repeats": 1, "workload": {"kind": "object"}},
        "machine": {
            "hostname": "test-host",
            "kernel": "6.1",
            "cpus": 2,
            "memory_bytes": 25000000000u64,
            "cairn_version": "0.1.0"
        },
        "ran": 2,
        "resumed": 0,
        "points": points
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).expect("summary.json");
}

const CATALOG: &str = r#"
[node]
base_price = 1000.0
disks_per_node = [2, 4]
[[disk]]
name = "D"
mib_per_sec = 300.0
iops = 1000.0
capacity_tb = 1.0
price = 100.0
[[cpu]]
cores = 2
price = 100.0
[[cpu]]
cores = 4
price = 300.0
[[memory]]
size_gib = 16
price = 100.0
[[nic]]
gbit_per_sec = 10.0
price = 100.0
"#;

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs")
}

fn answer(args: &[&str]) -> Value {
    let out = cairn(args);
    assert!(
        out.status.success(),
        "cairn {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn sizing_answers_from_two_sweeps() {
    let temp = tempfile::tempdir().expect("temp dir");
    let (a, b) = (temp.path().join("A"), temp.path().join("B"));
    sweep(
        &a,
        vec![
            point(0, "osds=3 disk=300", 3.0, 8.0, 300.0, 1.0 / 3.0),
            point(1, "osds=3 disk=3000", 3.0, 8.0, 3000.0, 1.0 / 3.0),
        ],
    );
    sweep(
        &b,
        vec![
            point(0, "osds=6 cores=1", 6.0, 1.0, 6000.0, 1.0 / 3.0),
            point(1, "osds=6 size=2", 6.0, 8.0, 1200.0, 0.5),
        ],
    );
    let catalog = temp.path().join("catalog.toml");
    std::fs::write(&catalog, CATALOG).expect("catalog");
    let (a, b, catalog) = (
        a.display().to_string(),
        b.display().to_string(),
        catalog.display().to_string(),
    );
    let target = "write=1000MiB/s,headroom=0.5";
    let report = answer(&[
        "sizing",
        "--from",
        &a,
        "--from",
        &b,
        "--target",
        target,
        "--catalog",
        &catalog,
        "--json",
    ]);
    // 4 disks and 2 cores write 160 MiB/s a node (40 per OSD); a 2000
    // MiB/s peak takes 13 nodes of 1700: 22100.
    let chosen = &report["chosen"];
    assert_eq!(chosen["nodes"], 13, "{report:#}");
    assert_eq!(chosen["shape"]["disks_per_node"], 4);
    assert_eq!(chosen["shape"]["cores_per_node"], 2);
    assert!((number(&chosen["price_total"]) - 22_100.0).abs() < 1e-6);
    assert_eq!(chosen["figures"][0]["measure"], "write");
    assert_eq!(chosen["figures"][0]["meets"], true);
    let write = report["fits"]
        .as_array()
        .and_then(|fits| fits.iter().find(|f| f["measure"] == "write"))
        .expect("a write fit");
    let osds = write["terms"]
        .as_array()
        .and_then(|terms| terms.iter().find(|t| t["resource"] == "osds"))
        .expect("an OSD term");
    assert!((number(&osds["coefficient"]) - 40.0).abs() < 0.4, "{osds}");
    assert!(number(&write["error_max"]) < 1e-6);

    // The built-in catalog: some configuration, and none cheaper among
    // the runners-up.
    let report = answer(&[
        "sizing",
        "--from",
        &a,
        "--from",
        &b,
        "--target",
        "write=2GB/s,capacity=500TB",
        "--json",
    ]);
    let total = number(&report["chosen"]["price_total"]);
    assert!(total > 0.0, "{report:#}");
    for runner in report["runners_up"].as_array().expect("runners-up") {
        assert!(number(&runner["price_total"]) >= total);
    }
    assert!(
        report["chosen"]["figures"]
            .as_array()
            .expect("figures")
            .iter()
            .all(|f| f["meets"] == true)
    );

    // A bad target and a bad catalog: a non-zero exit naming the problem.
    let out = cairn(&[
        "sizing",
        "--from",
        &a,
        "--from",
        &b,
        "--target",
        "write=1GB/s,colour=blue",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("colour") && stderr.contains("unknown key"),
        "{stderr}"
    );
    std::fs::write(
        &catalog,
        CATALOG.replace(
            "price = 100.0\n[[cpu]]",
            "price = 100.0\nspeed = 1\n[[cpu]]",
        ),
    )
    .expect("bad catalog");
    let out = cairn(&[
        "sizing",
        "--from",
        &a,
        "--from",
        &b,
        "--target",
        target,
        "--catalog",
        &catalog,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("speed"), "{stderr}");
}

//! What every `cairn bench io500 --json` report must hold, whatever it
//! ran on (`--dir` or `--endpoint`).

use serde_json::Value;

/// IO500's phases in its order.
pub const PHASES: [&str; 12] = [
    "ior-easy-write",
    "mdtest-easy-create",
    "ior-hard-write",
    "mdtest-hard-create",
    "find",
    "ior-easy-read",
    "mdtest-easy-stat",
    "ior-hard-read",
    "mdtest-hard-stat",
    "mdtest-easy-unlink",
    "mdtest-hard-read",
    "mdtest-hard-unlink",
];

/// The phase named `name` of `report`.
pub fn phase<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["phases"]
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["phase"] == name))
        .unwrap_or_else(|| panic!("no {name} phase: {report}"))
}

pub fn ops(report: &Value, name: &str) -> u64 {
    phase(report, name)["ops"].as_u64().expect("ops")
}

/// Checks a run of `proc_count` processes: the twelve phases in IO500's
/// order, each with operations and a rate; every write ending with as
/// many per process (the ones behind caught up after the stonewall);
/// every read, stat and delete acting on exactly what its write left;
/// find listing every mdtest file or object and matching those its
/// pattern names; the score the square root of the product of the
/// geometric means of the phases' own figures.
pub fn check_report(report: &Value, proc_count: u64) {
    let names: Vec<&str> = report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["phase"].as_str().expect("name"))
        .collect();
    assert_eq!(names, PHASES, "{report}");
    for name in PHASES {
        let phase = phase(report, name);
        assert!(phase["ops_per_sec"].as_f64() > Some(0.0), "{phase}");
        assert!(phase["ops"].as_u64() > Some(0), "{phase}");
    }
    for (write, reads) in [
        ("ior-easy-write", &["ior-easy-read"][..]),
        ("ior-hard-write", &["ior-hard-read"]),
        (
            "mdtest-easy-create",
            &["mdtest-easy-stat", "mdtest-easy-unlink"],
        ),
        (
            "mdtest-hard-create",
            &["mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-unlink"],
        ),
    ] {
        let per_proc = phase(report, write)["proc_ops"]
            .as_array()
            .expect("proc_ops");
        assert_eq!(per_proc.len() as u64, proc_count, "{write}");
        assert!(
            per_proc.iter().all(|n| *n == per_proc[0]),
            "{}",
            phase(report, write)
        );
        for read in reads {
            assert_eq!(
                ops(report, read),
                ops(report, write),
                "{read} after {write}: {report}"
            );
        }
    }
    assert_eq!(
        ops(report, "find"),
        ops(report, "mdtest-easy-create") + ops(report, "mdtest-hard-create")
    );
    // find -size 3901c -name '*01*': mdtest-hard's files f.PROC.INDEX.
    let hard_per_proc = ops(report, "mdtest-hard-create") / proc_count;
    let matching = (0..proc_count)
        .flat_map(|p| (0..hard_per_proc).map(move |i| format!("f.{p}.{i}")))
        .filter(|name| name.contains("01"))
        .count() as u64;
    let find = phase(report, "find");
    assert_eq!(find["found"].as_u64(), Some(matching), "{find}");
    check_score(report);
}

/// IO500's score from the phases' own figures: bandwidth in GiB/s (the
/// ior phases), metadata in kIOPS (the rest).
fn check_score(report: &Value) {
    let figure = |name: &str| {
        let phase = phase(report, name);
        if name.starts_with("ior") {
            phase["mib_per_sec"].as_f64().expect("MiB/s") / 1024.0
        } else {
            phase["ops_per_sec"].as_f64().expect("ops/s") / 1000.0
        }
    };
    let geometric_mean = |names: Vec<&str>| {
        (names.iter().map(|n| figure(n).ln()).sum::<f64>() / names.len() as f64).exp()
    };
    let (bandwidth, metadata): (Vec<&str>, Vec<&str>) =
        PHASES.into_iter().partition(|n| n.starts_with("ior"));
    let bw = geometric_mean(bandwidth);
    let md = geometric_mean(metadata);
    let io500 = &report["io500"];
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs());
    assert!(
        close(io500["bandwidth_gib_per_sec"].as_f64(), bw),
        "{io500}: {bw}"
    );
    assert!(close(io500["metadata_kiops"].as_f64(), md), "{io500}: {md}");
    assert!(
        close(io500["score"].as_f64(), (bw * md).sqrt()),
        "{io500}: {bw} {md}"
    );
    assert!(bw > 0.0 && md > 0.0, "{io500}");
    assert_eq!(io500["phases"].as_array().map(Vec::len), Some(12));
}

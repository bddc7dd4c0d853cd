//! `cairn bench sweep`: a 2×2 plan (placement groups × OSDs, one repeat,
//! 1 s phases) runs each point on a fresh cluster and summarizes every
//! point's phases with positive rates; run again, it finds every repeat
//! done and starts no cluster; with one result removed (an interrupted
//! run), it runs only that one; another plan on the same directory, and
//! plans with an unknown key or an impossible point, are refused before
//! anything runs.

mod common;

use std::path::Path;

const PLAN: &str = r#"
name = "placement groups against OSDs"
mirrors = "a test's small sweep"
repeats = 1
[cluster]
size = 1
concurrency = 4
object_size = "64K"
[matrix]
pg_num = [8, 16]
osds = [1, 2]
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "1s"
"#;

/// Headless Chromium (Debian's `chromium`) renders the report: its
/// screenshot must carry much more than a blank page's of the same size.
fn renders(dir: &Path, html: &Path) {
    let shoot = |page: &str, png: &Path| {
        let out = std::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .arg(format!("--screenshot={}", png.display()))
            .args(["--window-size=1000,2400", page])
            .output()
            .expect("chromium runs (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::metadata(png).expect("a screenshot").len()
    };
    let blank = dir.join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").expect("blank page");
    let report = shoot(
        &format!("file://{}", html.display()),
        &dir.join("report.png"),
    );
    let empty = shoot(
        &format!("file://{}", blank.display()),
        &dir.join("blank.png"),
    );
    assert!(
        report > 4 * empty,
        "the report renders: {report} bytes against a blank page's {empty}"
    );
}

fn sweep(plan: &Path, out: &Path, data: &Path) -> std::process::Output {
    let (plan, out, data) = (
        plan.display().to_string(),
        out.display().to_string(),
        data.display().to_string(),
    );
    common::cairn(
        Path::new("/dev/null"),
        &[
            "bench",
            "sweep",
            "--plan",
            &plan,
            "--out",
            &out,
            "--data",
            &data,
            "--base-port",
            "17600",
            "--json",
        ],
    )
}

#[test]
fn a_two_by_two_sweep_runs_resumes_and_refuses_bad_plans() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep");
    let plan = dir.join("plan.toml");
    let out = dir.join("out");
    let data = dir.join("data");
    std::fs::write(&plan, PLAN).expect("write plan");

    let summary = common::ok_json(sweep(&plan, &out, &data), "bench sweep");
    assert_eq!(summary["ran"], 4, "{summary}");
    assert_eq!(summary["resumed"], 0, "{summary}");
    let points = summary["points"].as_array().expect("points");
    let labels: Vec<&str> = points
        .iter()
        .map(|p| p["label"].as_str().expect("label"))
        .collect();
    assert_eq!(
        labels,
        [
            "osds=1 pg_num=8",
            "osds=1 pg_num=16",
            "osds=2 pg_num=8",
            "osds=2 pg_num=16"
        ]
    );
    for point in points {
        let phases = point["phases"].as_array().expect("phases");
        assert_eq!(phases.len(), 2, "{point}");
        for phase in phases {
            assert!(phase["median_mib_per_sec"].as_f64() > Some(0.0), "{point}");
            assert!(phase["median_iops"].as_f64() > Some(0.0), "{point}");
        }
    }
    let samples = std::fs::read_dir(out.join("points"))
        .expect("points dir")
        .count();
    assert_eq!(samples, 4, "every raw result kept");
    assert!(out.join("summary.json").exists() && out.join("plan.json").exists());
    assert!(summary["machine"]["cpus"].as_u64() > Some(0), "{summary}");
    // The report: per phase, a bar chart of throughput, one of p99
    // latency, and a line chart against each swept setting.
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("placement groups against OSDs"),
        "the plan's name"
    );
    assert_eq!(html.matches("<svg").count(), 2 * (2 + 2), "plots");
    for label in ["osds=2 pg_num=16", "against pg_num", "against osds", "rand"] {
        assert!(html.contains(label), "{label} in the report");
    }
    renders(&dir, &out.join("report.html"));
    // Two runs side by side: the same run against itself is 1.00 throughout.
    let same = common::ok_json(
        common::cairn(
            Path::new("/dev/null"),
            &[
                "bench",
                "compare",
                &out.display().to_string(),
                &out.display().to_string(),
                "--json",
            ],
        ),
        "bench compare",
    );
    let rows = same.as_array().expect("rows");
    assert_eq!(
        rows.len(),
        4 * 2 * 2,
        "each point's phases, MiB/s and IOPS: {same}"
    );
    assert!(
        rows.iter().all(|r| r["ratio"].as_f64() == Some(1.0)),
        "{same}"
    );
    // Each point's cluster is gone with its data.
    assert_eq!(std::fs::read_dir(&data).expect("data dir").count(), 0);

    // Again: everything is done already.
    let again = common::ok_json(sweep(&plan, &out, &data), "bench sweep again");
    assert_eq!(
        (again["ran"].as_u64(), again["resumed"].as_u64()),
        (Some(0), Some(4)),
        "{again}"
    );
    assert_eq!(again["points"], summary["points"], "the same results");

    // An interrupted run: one result missing, and only it runs.
    std::fs::remove_file(out.join("points").join("p0002-r001.json")).expect("remove one");
    let resumed = common::ok_json(sweep(&plan, &out, &data), "bench sweep resumed");
    assert_eq!(
        (resumed["ran"].as_u64(), resumed["resumed"].as_u64()),
        (Some(1), Some(3)),
        "{resumed}"
    );

    // Another plan on the same directory is refused.
    std::fs::write(&plan, PLAN.replace("repeats = 1", "repeats = 2")).expect("write plan");
    let other = sweep(&plan, &out, &data);
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && stderr.contains("another plan"),
        "{stderr}"
    );

    // Bad plans: refused before anything runs (no output directory made).
    for (bad, says) in [
        (PLAN.replace("size = 1", "sise = 1"), "sise"),
        (PLAN.replace("size = 1", "size = 2"), "impossible"),
        (
            PLAN.replace("osds = [1, 2]", "osds = [1, \"two\"]"),
            "whole number",
        ),
    ] {
        std::fs::write(&plan, &bad).expect("write plan");
        let fresh = dir.join("fresh");
        let refused = sweep(&plan, &fresh, &data);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(says),
            "{says}: {stderr}"
        );
        assert!(!fresh.exists(), "{says}: nothing made");
    }
    drop(std::fs::remove_dir_all(&dir));
}

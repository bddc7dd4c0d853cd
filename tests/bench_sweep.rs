//! `cairn bench sweep`: a 2×2 plan (placement groups × an emulated disk
//! bandwidth per OSD, one repeat, short phases, an OSD killed and
//! restarted during the writes) runs each point on a fresh cluster and
//! summarizes every point's phases with positive rates; the disk limits
//! were measured with fio before anything ran and held; the failure's
//! timeline shows the kill, the OSD down in the map and the cluster clean
//! again; run again, it finds every repeat done and starts no cluster;
//! with one result removed (an interrupted run), it runs only that one;
//! another plan on the same directory, plans with an unknown key or an
//! impossible point, and a limit the kernel refuses, are refused before
//! anything runs.
//!
//! Needs root (cgroups; both CI machines and sessions run as root) and fio.

mod common;

use std::path::Path;

const PLAN: &str = r#"
name = "placement groups against disk bandwidth"
mirrors = "a test's small sweep"
repeats = 1
[cluster]
osds = 3
size = 2
concurrency = 4
object_size = "64K"
down_grace = "1s"
[matrix]
pg_num = [8, 16]
disk_bw = ["16M", "64M"]
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "6s"
clean_wait = "60s"
[[failure]]
at = "1500ms"
action = "kill"
osd = 2
[[failure]]
at = "4500ms"
action = "restart"
osd = 2
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
    sweep_on(plan, out, data, "17600")
}

fn sweep_on(plan: &Path, out: &Path, data: &Path, base_port: &str) -> std::process::Output {
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
            base_port,
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
            "disk_bw=16M pg_num=8",
            "disk_bw=16M pg_num=16",
            "disk_bw=64M pg_num=8",
            "disk_bw=64M pg_num=16"
        ]
    );
    for point in points {
        let phases = point["phases"].as_array().expect("phases");
        assert_eq!(phases.len(), 2, "{point}");
        for phase in phases {
            assert!(phase["median_mib_per_sec"].as_f64() > Some(0.0), "{point}");
            assert!(phase["median_iops"].as_f64() > Some(0.0), "{point}");
        }
        // The kill: seen down in the map, then clean after the restart.
        let failures = &phases[0]["failures"];
        let detection = failures["median_detection_secs"]
            .as_f64()
            .expect("detected");
        let clean = failures["median_clean_secs"].as_f64().expect("clean again");
        assert!(detection > 0.0 && detection < clean, "{point}");
        assert!(
            clean > 3.0,
            "clean only after the restart at 4.5 s: {point}"
        );
        assert!(
            failures["median_before_mib_per_sec"].as_f64() > Some(0.0),
            "{point}"
        );
        assert!(
            phases[1]["failures"].is_null(),
            "no failure in rand: {point}"
        );
        // What `cairn sizing` fits: the OSDs' disks are their limits.
        let disk = point["resources"]["disk_mib_per_sec"].as_f64();
        let per_osd = if labels[0] == point["label"] || labels[1] == point["label"] {
            16.0
        } else {
            64.0
        };
        assert_eq!(disk, Some(3.0 * per_osd), "{point}");
        assert_eq!(
            point["resources"]["data_fraction"].as_f64(),
            Some(0.5),
            "{point}"
        );
    }
    // Each disk limit was measured with fio before any point ran, and held.
    let limits = summary["limits"].as_array().expect("limits");
    assert_eq!(limits.len(), 2, "two distinct limits: {summary}");
    for set in limits {
        let check = &set["checks"][0];
        assert_eq!(check["limit"], "disk_bw", "{set}");
        assert_eq!(check["applied"], true, "{set}");
        let measured: f64 = check["checked"]
            .as_str()
            .and_then(|c| c.rsplit(": ").next())
            .and_then(|c| c.trim_end_matches(" MiB/s").parse().ok())
            .expect("a measured figure");
        let limit = if set["points"][0].as_str().unwrap_or("").contains("16M") {
            16.0
        } else {
            64.0
        };
        assert!(measured <= limit * 1.25 && measured > 0.0, "{set}");
    }
    // Raw results: a sample per repeat, and the failed phase's series.
    let mut samples: Vec<String> = std::fs::read_dir(out.join("points"))
        .expect("points dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    samples.sort();
    assert_eq!(samples.len(), 8, "every raw result kept: {samples:?}");
    assert!(
        samples.contains(&"p0000-r001-write.csv".to_owned()),
        "{samples:?}"
    );
    let sample: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("points").join("p0000-r001.json")).expect("a sample"),
    )
    .expect("JSON");
    let events: Vec<&str> = sample["timelines"]["write"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["what"].as_str().expect("what"))
        .collect();
    for what in [
        "kill osd.2",
        "down in the map",
        "restart osd.2",
        "active+clean",
    ] {
        assert!(events.contains(&what), "{what} in {events:?}");
    }
    assert!(out.join("summary.json").exists() && out.join("plan.json").exists());
    assert!(summary["machine"]["cpus"].as_u64() > Some(0), "{summary}");
    // The report: per phase, a bar chart of throughput, one of p99
    // latency, and a line chart against each swept setting.
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("placement groups against disk bandwidth"),
        "the plan's name"
    );
    // Two phases of two bars and two lines, and the write phase's two
    // time series per point.
    assert_eq!(html.matches("<svg").count(), 2 * (2 + 2) + 4 * 2, "plots");
    for label in [
        "disk_bw=64M pg_num=16",
        "against pg_num",
        "against disk_bw",
        "rand",
        "around the failures",
        "kill osd.2",
        "cgroup v",
    ] {
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
    assert_eq!(
        again["limits"], summary["limits"],
        "the earlier run's checks kept, not measured again"
    );

    // An interrupted run: one result missing, and only it runs.
    std::fs::remove_file(out.join("points").join("p0002-r001.json")).expect("remove one");
    std::fs::remove_file(out.join("points").join("p0002-r001-write.csv")).expect("remove one");
    let resumed = common::ok_json(sweep(&plan, &out, &data), "bench sweep resumed");
    assert_eq!(
        (resumed["ran"].as_u64(), resumed["resumed"].as_u64()),
        (Some(1), Some(3)),
        "{resumed}"
    );
    // Its limit checked again, the others' kept: each point's once.
    let mut checked_points: Vec<&str> = resumed["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .flat_map(|set| set["points"].as_array().expect("points").iter())
        .map(|p| p.as_str().expect("a label"))
        .collect();
    checked_points.sort_unstable();
    let mut all = labels.clone();
    all.sort_unstable();
    assert_eq!(checked_points, all, "{resumed}");

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
        (PLAN.replace("size = 2", "sise = 2"), "sise"),
        (PLAN.replace("osds = 3", "osds = 1"), "impossible"),
        (
            PLAN.replace("pg_num = [8, 16]", "pg_num = [8, \"two\"]"),
            "whole number",
        ),
        (PLAN.replace("osd = 2", "osd = 3"), "only 3 OSDs"),
        (
            PLAN.replace("at = \"1500ms\"", "at = \"9s\""),
            "within the phase",
        ),
        // The kernel refuses a cpuset of cores the machine lacks.
        (
            PLAN.replace("size = 2", "size = 2\ncores = 4096"),
            "the kernel refused",
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

/// Two object clients per phase, started by Open MPI's `mpirun` (then by
/// the sweep itself): each copy takes its rank from the launcher, writes
/// its own list of names and its own report after the start barrier, and
/// the phase is their sum. `cairn bench gather` adds the same reports up
/// by hand; copies that would share a file, or a rank without a launcher,
/// are refused.
#[test]
fn clients_start_through_mpirun_and_their_reports_add_up() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep-mpirun");
    let plan = dir.join("plan.toml");
    let mpi_plan = r#"
name = "two clients through mpirun"
mirrors = "a test"
[cluster]
osds = 2
size = 2
pg_num = 8
concurrency = 2
object_size = "64K"
[matrix]
clients = [2]
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "2s"
"#;
    for (launcher, name) in [("", "mpirun"), ("launcher = \"direct\"\n", "direct")] {
        std::fs::write(&plan, format!("{mpi_plan}{launcher}")).expect("write plan");
        let out = dir.join(format!("out-{name}"));
        let data = dir.join(format!("data-{name}"));
        let summary = common::ok_json(sweep_on(&plan, &out, &data, "17680"), name);
        assert_eq!(summary["ran"], 1, "{name}: {summary}");
        let sample: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join("points").join("p0000-r001.json")).expect("a sample"),
        )
        .expect("sample JSON");
        for phase in ["write", "rand"] {
            let value = &sample["phases"][phase];
            let clients = value["clients"].as_array().expect("each client's report");
            assert_eq!(clients.len(), 2, "{name} {phase}: {value}");
            let each: Vec<f64> = clients
                .iter()
                .map(|c| c["bandwidth_mib_per_sec"].as_f64().unwrap_or(0.0))
                .collect();
            assert!(each.iter().all(|&b| b > 0.0), "{name} {phase}: {each:?}");
            let total = value["bandwidth_mib_per_sec"].as_f64().unwrap_or(0.0);
            assert!(
                (total - each.iter().sum::<f64>()).abs() < 1e-6,
                "{name} {phase}: {total} is not the sum of {each:?}"
            );
        }
        // The point's directory is gone with its cluster: gather the
        // clients' reports the sample kept, as an operator would gather
        // the files of `--report`.
        let reports: Vec<std::path::PathBuf> = (0..2)
            .map(|r| {
                let file = dir.join(format!("{name}-r{r}.json"));
                let report = &sample["phases"]["write"]["clients"][r];
                std::fs::write(&file, report.to_string()).expect("write report");
                file
            })
            .collect();
        let args: Vec<String> = std::iter::once("bench".to_owned())
            .chain(std::iter::once("gather".to_owned()))
            .chain(reports.iter().map(|r| r.display().to_string()))
            .chain(std::iter::once("--json".to_owned()))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let gathered = common::ok_json(common::cairn(Path::new("/dev/null"), &args), "gather");
        assert_eq!(
            gathered["bandwidth_mib_per_sec"], sample["phases"]["write"]["bandwidth_mib_per_sec"],
            "{name}: gather adds up as the sweep did"
        );
    }

    // Two copies sharing one list, and a rank placeholder without a
    // launcher, are refused before anything is measured.
    let shared = common::cairn_with_env(
        Path::new("/dev/null"),
        &[
            "bench", "object", "--pool", "p", "--mode", "write", "--list", "one.txt",
        ],
        None,
        &[("CAIRN_RANK", "0"), ("CAIRN_RANKS", "2")],
    );
    let stderr = String::from_utf8_lossy(&shared.stderr);
    assert!(
        !shared.status.success() && stderr.contains("{rank}"),
        "{stderr}"
    );
    let unranked = common::cairn(
        Path::new("/dev/null"),
        &[
            "bench",
            "object",
            "--pool",
            "p",
            "--mode",
            "write",
            "--list",
            "l-{rank}.txt",
        ],
    );
    let stderr = String::from_utf8_lossy(&unranked.stderr);
    assert!(
        !unranked.status.success() && stderr.contains("OMPI_COMM_WORLD_RANK"),
        "{stderr}"
    );
    drop(std::fs::remove_dir_all(&dir));
}

/// Cairn and Ceph in one sweep: the Ceph point deploys the anchor cluster
/// of `../shared/anchors/ceph`, runs `rados bench` on a pool of its own
/// made with the point's settings, and tears the cluster down when the
/// sweep ends; both points' figures stand in one summary. A Ceph point
/// the anchor cannot be (5 OSDs) is refused before anything runs.
///
/// Needs Ceph's packages (scripts/test.sh installs them) and the anchor's
/// fixed monitor ports (3300, 6789) free.
#[test]
fn a_sweep_runs_the_same_point_on_cairn_and_on_ceph() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep-ceph");
    let anchor = common::repo().join("../shared/anchors/ceph");
    let plan = dir.join("plan.toml");
    let side_by_side = r#"
name = "Cairn against Ceph"
mirrors = "a test"
[cluster]
osds = 3
size = 2
pg_num = 16
concurrency = 4
object_size = "64K"
[matrix]
system = ["cairn", "ceph"]
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "2s"
"#;
    let run = |plan_text: &str, out: &Path| {
        std::fs::write(&plan, plan_text).expect("write plan");
        let (plan, out, data, anchor) = (
            plan.display().to_string(),
            out.display().to_string(),
            dir.join("data").display().to_string(),
            anchor.display().to_string(),
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
                "--ceph-anchor",
                &anchor,
                "--json",
            ],
        )
    };
    let out = dir.join("out");
    let summary = common::ok_json(run(side_by_side, &out), "bench sweep on cairn and ceph");
    assert_eq!(summary["ran"], 2, "{summary}");
    for (index, tool) in [(0, None), (1, Some("rados bench"))] {
        let sample: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join("points").join(format!("p{index:04}-r001.json")))
                .expect("a sample"),
        )
        .expect("sample JSON");
        for phase in ["write", "rand"] {
            let value = &sample["phases"][phase];
            assert!(
                value["bandwidth_mib_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
                "point {index} {phase}: {value}"
            );
            assert_eq!(
                value["tool"].as_str(),
                tool,
                "point {index} {phase}: {value}"
            );
        }
    }
    // The anchor is gone with the sweep: no daemons, no loop devices.
    assert!(
        !dir.join("data").join("ceph-anchor").exists(),
        "teardown.sh removed the Ceph cluster"
    );
    let report = std::fs::read_to_string(out.join("report.html")).expect("report");
    assert!(report.contains("system=ceph") && report.contains("system=cairn"));

    let refused = run(
        &side_by_side.replace("osds = 3", "osds = 5"),
        &dir.join("fresh"),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("the Ceph anchor runs 3 OSDs"),
        "{stderr}"
    );
    assert!(!dir.join("fresh").exists(), "nothing made");
    drop(std::fs::remove_dir_all(&dir));
}

/// An OSD killed under S3 PUTs through the point's gateway: the sweep
/// keeps the S3 client's series, sees the OSD down and the cluster clean
/// again after the restart, and times both, as for object workloads.
#[test]
fn an_osd_killed_under_s3_puts_is_timed_from_detection_to_clean() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep-s3-failure");
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        r#"
name = "an OSD killed under S3 PUTs"
mirrors = "a test"
[cluster]
osds = 3
clients = 2
size = 2
pg_num = 16
concurrency = 4
object_size = "64K"
down_grace = "1s"
[workload]
kind = "s3"
phases = ["put", "get"]
duration = "6s"
clean_wait = "60s"
[[failure]]
at = "1500ms"
action = "kill"
osd = 2
[[failure]]
at = "4s"
action = "restart"
osd = 2
"#,
    )
    .expect("write plan");
    let out = dir.join("out");
    let summary = common::ok_json(
        sweep_on(&plan, &out, &dir.join("data"), "17600"),
        "bench sweep s3 with a failure",
    );
    let phases = summary["points"][0]["phases"].as_array().expect("phases");
    assert_eq!(phases[0]["phase"], "put", "{summary}");
    let failures = &phases[0]["failures"];
    let detection = failures["median_detection_secs"]
        .as_f64()
        .expect("detected");
    let clean = failures["median_clean_secs"].as_f64().expect("clean again");
    assert!(detection > 0.0 && detection < clean, "{failures}");
    assert!(
        clean > 2.5,
        "clean only after the restart at 4 s: {failures}"
    );
    assert!(
        failures["median_before_mib_per_sec"].as_f64() > Some(0.0),
        "{failures}"
    );
    assert!(
        phases[1]["median_iops"].as_f64() > Some(0.0),
        "GETs after the failure: {summary}"
    );
    // Each of the two clients (started by mpirun) kept its series; the
    // timeline adds them up second by second.
    let mut first_seconds = 0.0;
    for client in 0..2 {
        let series = out
            .join("points")
            .join(format!("p0000-r001-put-c{client}.csv"));
        let lines = std::fs::read_to_string(&series).expect("each S3 client's series");
        assert!(lines.lines().count() > 4, "a line a second: {lines}");
        let second: Vec<&str> = lines.lines().nth(1).expect("a second").split(',').collect();
        let header: Vec<&str> = lines.lines().next().expect("a header").split(',').collect();
        let at = header
            .iter()
            .position(|h| *h == "mib_per_sec")
            .expect("mib_per_sec");
        first_seconds += second[at].parse::<f64>().expect("a rate");
    }
    let sample: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("points").join("p0000-r001.json")).expect("a sample"),
    )
    .expect("sample JSON");
    let ticks = &sample["timelines"]["put"]["ticks"];
    let summed = ticks[0]["mib_per_sec"].as_f64().expect("a first tick");
    assert!(
        (summed - first_seconds).abs() < 0.01,
        "the first second is both clients' together: {summed} against {first_seconds}"
    );
    drop(std::fs::remove_dir_all(&dir));
}

/// Two emulated hosts of two OSDs each behind 200 Mbit/s links, each
/// host's OSDs sharing one memory limit, one host cut off under the
/// writes and joined again: the link's rate was measured before the run
/// and held, each host's OSDs ran in its group, the partition is timed
/// from detection to clean, the point's resources count hosts, their
/// links and their memory, and nothing of the namespaces is left. Points and failures that cannot work with hosts are refused
/// before anything runs, as is a link delay where the kernel has no
/// netem (where it has, the delay is measured instead).
#[test]
fn a_host_cut_off_under_writes_behind_limited_links() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep-hosts");
    let plan = dir.join("plan.toml");
    let text = r#"
name = "a host cut off under writes"
mirrors = "a test"
[cluster]
osds = 4
hosts = 2
# Each host's two OSDs share one group's memory.
limits_per = "host"
memory = "1G"
size = 2
pg_num = 16
concurrency = 4
object_size = "64K"
down_grace = "1s"
net_rate = "200mbit"
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "6s"
clean_wait = "60s"
[[failure]]
at = "1500ms"
action = "partition"
host = 1
[[failure]]
at = "4s"
action = "heal"
host = 1
"#;
    std::fs::write(&plan, text).expect("write plan");
    let out = dir.join("out");
    let summary = common::ok_json(
        sweep_on(&plan, &out, &dir.join("data"), "17600"),
        "bench sweep with emulated hosts",
    );
    let checks = summary["limits"][0]["checks"].as_array().expect("checks");
    let rate = checks
        .iter()
        .find(|c| c["limit"] == "net_rate")
        .expect("the link rate was checked");
    assert_eq!(rate["applied"], true, "{rate}");
    assert!(
        checks
            .iter()
            .any(|c| c["limit"] == "memory" && c["applied"] == true),
        "{summary}"
    );
    let point = &summary["points"][0];
    assert_eq!(point["resources"]["hosts"], 2, "{point}");
    let net = point["resources"]["net_mib_per_sec"].as_f64().expect("net");
    assert!(
        (net - 2.0 * 200e6 / 8.0 / 1_048_576.0).abs() < 0.01,
        "{net}"
    );
    // Memory is the hosts' (two of 1 GiB), not the OSDs' (four).
    assert_eq!(
        point["resources"]["memory_bytes"].as_u64(),
        Some(2 << 30),
        "{point}"
    );
    // Each host's OSDs ran in its one group: OSD N is on host N mod 2.
    let sample: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("points").join("p0000-r001.json")).expect("a sample"),
    )
    .expect("sample JSON");
    assert_eq!(
        sample["groups"],
        serde_json::json!({"host.0": ["osd.0", "osd.2"], "host.1": ["osd.1", "osd.3"]}),
        "{sample}"
    );
    let phases = point["phases"].as_array().expect("phases");
    let failures = &phases[0]["failures"];
    let detection = failures["median_detection_secs"]
        .as_f64()
        .expect("the cut host's OSD was marked down");
    let clean = failures["median_clean_secs"].as_f64().expect("clean again");
    assert!(detection > 0.0 && detection < clean, "{failures}");
    assert!(clean > 2.0, "clean only after the heal at 4 s: {failures}");
    assert!(
        phases[1]["median_iops"].as_f64() > Some(0.0),
        "reads after the heal: {summary}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("report");
    assert!(html.contains("partition host1"), "the report names the cut");
    let listed = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed.contains("cairn17600"), "namespaces left: {listed}");

    let refused = |plan_text: &str, says: &str| {
        std::fs::write(&plan, plan_text).expect("write plan");
        let out = sweep_on(&plan, &dir.join("refused"), &dir.join("data"), "17600");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "refused: {plan_text}");
        assert!(stderr.contains(says), "{says:?} in {stderr}");
    };
    refused(&text.replace("size = 2", "size = 3"), "different hosts");
    refused(
        &text.replace("host = 1\n[[failure]]", "osd = 1\n[[failure]]"),
        "give host",
    );
    refused(&text.replace("host = 1", "host = 5"), "only 2 hosts");
    refused(&text.replace("hosts = 2\n", ""), "give hosts");
    refused(
        &text.replace("limits_per = \"host\"", "limits_per = \"rack\""),
        "\"osd\" or \"host\"",
    );
    let delayed = text.replace("net_rate = \"200mbit\"", "net_delay = \"2ms\"");
    std::fs::write(&plan, &delayed).expect("write plan");
    let run = sweep_on(&plan, &dir.join("delayed"), &dir.join("data"), "17600");
    if run.status.success() {
        let summary: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json");
        let checks = summary["limits"][0]["checks"].as_array().expect("checks");
        assert!(
            checks
                .iter()
                .any(|c| c["limit"] == "net_delay" && c["applied"] == true),
            "{summary}"
        );
    } else {
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            stderr.contains("netem"),
            "a delay refused says why: {stderr}"
        );
        assert!(
            !dir.join("delayed").join("points").exists(),
            "refused before anything ran"
        );
    }
    drop(std::fs::remove_dir_all(&dir));
}

/// IO500's S3 variant as a sweep workload (`via = "s3"`): the point's
/// gateway serves `bench io500 --endpoint`, whose twelve phases and score
/// land in the summary, with an OSD killed and restarted under its first
/// phase (a file workload's failures count from its start and have no
/// per-second series); `via` on another kind, and a file workload's
/// failure naming a phase, are refused.
#[test]
fn io500_over_s3_is_a_sweep_workload() {
    let _serial = common::serial();
    let dir = common::test_dir("bench-sweep-io500-s3");
    let plan = dir.join("plan.toml");
    let text = r#"
name = "IO500 over S3"
mirrors = "a test"
[cluster]
osds = 2
size = 2
pg_num = 8
clients = 2
down_grace = "1s"
[workload]
kind = "io500"
via = "s3"
duration = "3s"
max_bytes = "256M"
clean_wait = "60s"
[[failure]]
at = "500ms"
action = "kill"
osd = 1
[[failure]]
at = "2s"
action = "restart"
osd = 1
"#;
    std::fs::write(&plan, text).expect("write plan");
    let summary = common::ok_json(
        sweep_on(&plan, &dir.join("out"), &dir.join("data"), "17600"),
        "bench sweep io500 over s3",
    );
    let phases = summary["points"][0]["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["phase"].as_str()).collect();
    for wanted in ["ior-easy-write", "mdtest-hard-read", "find", "io500 score"] {
        assert!(
            names.iter().any(|n| n.starts_with(wanted)),
            "{wanted} in {names:?}"
        );
    }
    let easy = phases
        .iter()
        .find(|p| {
            p["phase"]
                .as_str()
                .is_some_and(|n| n.starts_with("ior-easy-write"))
        })
        .expect("ior-easy-write");
    assert!(easy["median_mib_per_sec"].as_f64() > Some(0.0), "{easy}");
    let failures = &easy["failures"];
    let detection = failures["median_detection_secs"]
        .as_f64()
        .expect("the killed OSD marked down");
    let clean = failures["median_clean_secs"].as_f64().expect("clean again");
    assert!(detection > 0.0 && detection < clean, "{failures}");
    assert!(
        failures["median_before_mib_per_sec"].is_null(),
        "no per-second series: {failures}"
    );
    let html = std::fs::read_to_string(dir.join("out").join("report.html")).expect("report");
    assert!(
        html.contains("kill osd.1 at"),
        "the report lists the events"
    );
    let phased = text.replace("at = \"500ms\"", "phase = \"ior-easy\"\nat = \"500ms\"");
    std::fs::write(&plan, phased).expect("plan");
    let refused = sweep_on(&plan, &dir.join("refused"), &dir.join("data"), "17600");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("give no phase"),
        "{stderr}"
    );
    let fs = text
        .replace("kind = \"io500\"", "kind = \"fs\"\nphases = [\"ior-easy\"]")
        .replace("max_bytes = \"256M\"\n", "");
    std::fs::write(&plan, fs).expect("plan");
    let refused = sweep_on(&plan, &dir.join("refused"), &dir.join("data"), "17600");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("via is for kind io500"),
        "{stderr}"
    );
    drop(std::fs::remove_dir_all(&dir));
}

/// The CPUs online, as the kernel lists them ("0-1" is two).
fn cpus_online() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("cpu list");
    text.trim()
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>().expect("a CPU") - a.parse::<usize>().expect("a CPU") + 1
            }
            None => 1,
        })
        .sum()
}

/// The processes whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

const ONE_CPU_PLAN: &str = r#"
name = "recovery with no client load, on one CPU"
mirrors = "a test"
[cluster]
# Four: `cairn up`'s own pool keeps three copies, on the three left.
osds = 4
size = 2
pg_num = 16
concurrency = 4
object_size = "64K"
down_grace = "1s"
down_out = "2s"
online_cpus = 1
[workload]
kind = "object"
phases = ["write", "idle"]
duration = "4s"
clean_wait = "60s"
[[failure]]
phase = "idle"
at = "500ms"
action = "kill"
osd = 2
"#;

/// A point on one CPU (the machine's others taken offline by CPU
/// hot-plug) whose idle phase times an OSD's recovery with no client
/// load: the CPUs were offline while it ran, checked with busy processes
/// before, and online again after; recovery pushed bytes and its rate is
/// the phase's. A sweep killed with SIGKILL mid-point leaves no CPU
/// offline: its guardian brings them back.
#[test]
fn cpus_go_offline_for_a_point_and_recovery_is_timed_with_no_load() {
    let _serial = common::serial();
    let machine = cpus_online();
    if machine < 2 {
        eprintln!("one CPU online: nothing to take offline, skipped");
        return;
    }
    let dir = common::test_dir("bench-sweep-cpus");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, ONE_CPU_PLAN).expect("write plan");
    let (out, data) = (dir.join("out"), dir.join("data"));
    let sweep_child = |out: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["bench", "sweep", "--plan"])
            .arg(&plan)
            .arg("--out")
            .arg(out)
            .arg("--data")
            .arg(&data)
            .args(["--base-port", "17600", "--json"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cairn bench sweep")
    };
    // Watched while it runs: the point's cluster up on fewer CPUs.
    let child = sweep_child(&out);
    let conf = data.join("point").join("cairn.toml");
    let mut fewest_with_cluster = machine;
    let started = std::time::Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if conf.exists() {
            fewest_with_cluster = fewest_with_cluster.min(cpus_online());
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the sweep took over 5 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let output = waiter.join().expect("waiter").expect("sweep output");
    let summary = common::ok_json(output, "bench sweep on one CPU");
    assert_eq!(fewest_with_cluster, 1, "the point ran on one CPU");
    assert_eq!(cpus_online(), machine, "every CPU online again");
    let check = summary["limits"][0]["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["limit"] == "online_cpus")
        .cloned()
        .expect("the hot-plug limit checked");
    assert_eq!(check["applied"], true, "{check}");
    assert!(
        check["mechanism"]
            .as_str()
            .is_some_and(|m| m.contains("CPU hot-plug")),
        "{check}"
    );
    let used: f64 = check["checked"]
        .as_str()
        .and_then(|c| c.split(" used ").nth(1))
        .and_then(|c| c.split(' ').next())
        .and_then(|c| c.parse().ok())
        .expect("a measured figure");
    assert!(
        used > 0.5 && used < 1.2,
        "two busy processes on one CPU: {check}"
    );
    let point = &summary["points"][0];
    assert_eq!(point["resources"]["cores"].as_f64(), Some(1.0), "{point}");
    let idle = &point["phases"][1];
    assert_eq!(idle["phase"], "idle", "{point}");
    let failures = &idle["failures"];
    assert!(
        failures["median_clean_secs"].as_f64() > Some(0.0),
        "clean again: {failures}"
    );
    let recovery = failures["median_recovery_mib_per_sec"]
        .as_f64()
        .expect("recovery timed");
    assert!(recovery > 0.0, "{failures}");
    assert_eq!(
        idle["median_mib_per_sec"].as_f64(),
        Some(recovery),
        "{idle}"
    );
    assert!(
        failures["median_before_mib_per_sec"].is_null(),
        "no clients, no series: {failures}"
    );
    let sample: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("points").join("p0000-r001.json")).expect("a sample"),
    )
    .expect("sample JSON");
    assert!(
        sample["timelines"]["idle"]["recovered_bytes"].as_u64() > Some(0),
        "{sample}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("recovery ÷ disk") && html.contains("CPU hot-plug"));

    // Killed with SIGKILL while its point runs on one CPU: the CPUs come
    // back online without it.
    std::fs::write(&plan, ONE_CPU_PLAN.replace("\"4s\"", "\"60s\"")).expect("write plan");
    let killed_out = dir.join("killed");
    let child = sweep_child(&killed_out);
    let started = std::time::Instant::now();
    while !(conf.exists() && cpus_online() == 1) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the point never started on one CPU"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    common::kill(child.id());
    drop(child.wait_with_output());
    let killed_at = std::time::Instant::now();
    // The guardian brings the CPUs online, then removes its marker.
    while cpus_online() < machine || Path::new("/var/tmp/cairn-offline-cpus").exists() {
        assert!(
            killed_at.elapsed() < std::time::Duration::from_secs(10),
            "the CPUs stayed offline after the sweep was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    common::ok(
        common::cairn(
            Path::new("/dev/null"),
            &["down", "--data", &data.join("point").display().to_string()],
        ),
        "down the killed sweep's cluster",
    );
    // The killed sweep's client, orphaned: it names the test's directory.
    for pid in processes_naming(&dir) {
        drop(
            std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status(),
        );
    }
    drop(std::fs::remove_dir_all(&dir));
}

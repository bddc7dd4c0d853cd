//! `cairn bench sweep --plan PLAN.toml --out DIR`: a matrix of cluster
//! settings, each point on a fresh `cairn up` cluster, repeated, with
//! medians and spread.
//!
//! A plan names its cluster's defaults, the settings it sweeps (`[matrix]`:
//! every combination is a point) and its workload. The whole plan is
//! checked before anything runs: an unknown key, an impossible point (more
//! copies or shards than OSDs) or a bad value is an error naming it.
//!
//! Each point and repeat runs on its own cluster: `cairn up` (its OSDs, no
//! MDS, no gateway), a pool `sweep` with the point's placement groups and
//! redundancy, the workload's phases (`cairn bench object`, its JSON kept
//! whole), then `cairn down` and the data removed. The page cache is
//! dropped before each read phase (as root). Every result is a file in
//! `DIR/points/`, written once its repeat ends, so a run interrupted and
//! started again with the same `--out` goes on from the first repeat not
//! done (the plan must be the same). The summary (`DIR/summary.json` and a
//! table) gives each point's median, minimum and maximum per phase.

mod apps;
mod ceph;
mod failure;
mod workload;

use crate::bench_emulate::{Group, LimitCheck, Limits};
use crate::output::{CliResult, fixed, print_json, table};
use crate::units::{parse_duration, parse_size};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most points a plan may have (its matrix's combinations).
const POINTS_MAX: usize = 1000;
/// The most repeats of a point.
const REPEATS_MAX: u32 = 100;
/// The settings a point has, as `[cluster]` and `[matrix]` name them.
const SETTINGS: [&str; 22] = [
    "hosts",
    "net_rate",
    "net_delay",
    "system",
    "osds",
    "clients",
    "redundancy",
    "pg_num",
    "size",
    "erasure",
    "stripe_unit",
    "object_size",
    "concurrency",
    "disk_bw",
    "disk_iops",
    "cpu",
    "cores",
    "online_cpus",
    "memory",
    "limits_per",
    "down_grace",
    "down_out",
];
/// How long a phase with failures waits, after its load, for the cluster
/// to be `active+clean` again, unless the workload says.
const CLEAN_WAIT_DEFAULT: &str = "120s";
/// How often a point's OSDs are looked for (a restarted OSD is a new
/// process) to put them in their emulated hardware's group.
const GROUP_WATCH_INTERVAL: Duration = Duration::from_millis(100);
/// The pool each point's cluster makes and measures.
const POOL: &str = "sweep";

/// Flags of `cairn bench sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The plan: TOML with `name`, `repeats`, `[cluster]` (defaults),
    /// `[matrix]` (settings swept) and `[workload]`. See docs/evaluation.md.
    #[arg(long)]
    plan: PathBuf,
    /// Where the run keeps the plan, every point's raw results and the
    /// summary. A run started again with the same directory goes on where
    /// it stopped.
    #[arg(long)]
    out: PathBuf,
    /// Where the points' clusters keep their data (a real disk, not
    /// tmpfs); each is removed when its point ends.
    #[arg(long, default_value = "/var/tmp/cairn-sweep")]
    data: PathBuf,
    /// The clusters' monitor port; OSD N listens on base-port + 1 + N.
    #[arg(long = "base-port", default_value_t = 17100)]
    base_port: u16,
    /// Print the summary as JSON (and no progress line).
    #[arg(long)]
    json: bool,
    /// Instead of the plan's repeats (a quick look: 1).
    #[arg(long)]
    repeats: Option<u32>,
    /// Instead of the plan's phase length (a quick look: 5s); failures
    /// keep their times, so they must fall within it.
    #[arg(long)]
    duration: Option<String>,
    /// The Ceph anchor's scripts (`deploy.sh`, `teardown.sh`), for points
    /// with `system = "ceph"` [default: ../shared/anchors/ceph].
    #[arg(long = "ceph-anchor")]
    ceph_anchor: Option<PathBuf>,
}

/// A plan as written.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Plan {
    name: String,
    /// The published experiment the plan mirrors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mirrors: Option<String>,
    #[serde(default = "one")]
    repeats: u32,
    /// Settings of every point unless the matrix sweeps them.
    #[serde(default)]
    cluster: BTreeMap<String, toml::Value>,
    /// Settings swept: every combination of their values is a point.
    #[serde(default)]
    matrix: BTreeMap<String, Vec<toml::Value>>,
    workload: Workload,
    /// Failures injected into the workload's phases (`[[failure]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failure: Vec<failure::Failure>,
}

fn one() -> u32 {
    1
}

fn cairn_system() -> String {
    "cairn".into()
}

fn is_cairn(system: &str) -> bool {
    system == "cairn"
}

fn duration_default() -> String {
    "30s".into()
}

/// What runs on each point.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Workload {
    /// `object` (`cairn bench object` on the pool), `s3` (`cairn bench
    /// s3` on the cluster's gateway), `fs` (`cairn bench fs` on a mount of
    /// its file system) or `io500` (`cairn bench io500` on the mount).
    kind: String,
    /// Its phases in order. object: `write`, then `seq` or `rand` reads of
    /// what was written; s3: `put`, `get`, `head`, `list`, `mixed`; fs:
    /// `ior-easy`, `ior-hard`, `mdtest-easy`, `mdtest-hard`; io500: none
    /// (IO500's own).
    #[serde(default)]
    phases: Vec<String>,
    /// Each timed phase's length (e.g. 10s); io500: the stonewall; fs and
    /// apps run a fixed amount of work instead.
    #[serde(default = "duration_default")]
    duration: String,
    /// fs: ior-easy's transfer sizes (e.g. ["4K", "4M"]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transfer_sizes: Option<Vec<String>>,
    /// fs: mdtest's files per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    files_per_proc: Option<u64>,
    /// fs: ior's bytes per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block_size_per_proc: Option<String>,
    /// io500: the most bytes the run may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_bytes: Option<String>,
    /// io500: `"fs"` (a mount of the point's file system, the default) or
    /// `"s3"` (IO500's S3 variant, `bench io500 --endpoint`, on the
    /// point's gateway; RGW on Ceph's points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    via: Option<String>,
    /// apps: the large file base64, grep and gzip read (default 256M).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    large_file: Option<String>,
    /// After a phase with failures, the longest wait for `active+clean`
    /// (default 120s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    clean_wait: Option<String>,
    /// object and s3 with `clients` above 1: what starts the client
    /// processes. `"mpirun"` (the default: Open MPI's, on this machine),
    /// `"direct"` (the sweep itself), or any launcher's command line with
    /// `{clients}` for the number of copies, e.g. `["srun", "-n",
    /// "{clients}"]`. Each copy takes its rank from the launcher's
    /// environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    launcher: Option<workload::LauncherSpec>,
}

impl Workload {
    /// Whether its clients speak S3 (to the point's gateway, or RGW).
    fn over_s3(&self) -> bool {
        self.kind == "s3" || (self.kind == "io500" && self.via.as_deref() == Some("s3"))
    }
}

/// One point's settings, every one resolved.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Point {
    /// `cairn`, or `ceph` (the anchor cluster of `../shared/anchors/ceph`).
    #[serde(default = "cairn_system", skip_serializing_if = "is_cairn")]
    system: String,
    osds: u32,
    pg_num: u32,
    /// Copies of a replicated pool (none with `erasure`).
    size: Option<u32>,
    /// `K+M` of an erasure-coded pool.
    erasure: Option<String>,
    stripe_unit: Option<String>,
    object_size: String,
    concurrency: u32,
    /// Client processes: object and S3 phases run this many at once; the
    /// file workloads' worker processes.
    #[serde(default = "one")]
    clients: u32,
    /// Emulated hardware of each OSD: disk bandwidth (per second, read and
    /// write each), disk IOPS, CPU time in cores, and memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disk_bw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disk_iops: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu: Option<f64>,
    /// The cores every OSD together may run on (the first N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cores: Option<u32>,
    /// The CPUs the whole machine keeps online while the point runs (CPU
    /// hot-plug): the OSDs, the monitor and the clients share them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    online_cpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<String>,
    /// `"osd"` (the default): each OSD has the limits above to itself;
    /// `"host"`: each emulated host has them, its OSDs sharing one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limits_per: Option<String>,
    /// Emulated hosts, each in a network namespace of its own (`cairn up
    /// --hosts N --netns`): OSD N on host N mod `hosts`, the pool's copies
    /// or shards on distinct hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hosts: Option<u32>,
    /// Each host link's rate and delay, each way (`1gbit`, `100us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    net_rate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    net_delay: Option<String>,
    /// The monitor's silence before down, and down time before out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    down_grace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    down_out: Option<String>,
}

impl Point {
    /// The point's emulated hardware per OSD; `slowed`: a failure slows a
    /// disk, so the OSDs need a disk group even with no disk limit.
    fn limits(&self, slowed: bool) -> Limits {
        let bytes = |s: &Option<String>| s.as_deref().and_then(|v| parse_size(v).ok());
        let disk = bytes(&self.disk_bw).or(slowed.then_some(0));
        Limits {
            disk_bytes_per_sec: disk,
            disk_iops: self.disk_iops.map(u64::from),
            cpu_cores: self.cpu,
            cores: self.cores,
            memory_bytes: bytes(&self.memory),
        }
    }

    /// The emulated hosts whose OSDs share their limits' groups (with
    /// `limits_per = "host"`).
    fn shared_by_hosts(&self) -> Option<u32> {
        self.hosts
            .filter(|_| self.limits_per.as_deref() == Some("host"))
    }

    /// The limits' groups: one per host with `limits_per = "host"`, else
    /// one per OSD.
    fn group_count(&self) -> u32 {
        self.shared_by_hosts().unwrap_or(self.osds)
    }

    /// The group of OSD `index` (`cairn up` puts OSD N on host N mod
    /// hosts).
    fn group_of(&self, index: u32) -> usize {
        match self.shared_by_hosts() {
            Some(hosts) => (index % hosts) as usize,
            None => index as usize,
        }
    }

    /// Group `g`'s name: `host.G` or `osd.G`.
    fn group_name(&self, g: usize) -> String {
        match self.shared_by_hosts() {
            Some(_) => format!("host.{g}"),
            None => format!("osd.{g}"),
        }
    }

    /// "osds=3 pg_num=64 size=3": the settings the matrix sweeps.
    fn label(&self, swept: &[String]) -> String {
        fn shown<T: std::fmt::Display>(v: &Option<T>) -> String {
            v.as_ref().map_or("-".into(), ToString::to_string)
        }
        let value = |name: &str| -> String {
            match name {
                "system" => self.system.clone(),
                "osds" => self.osds.to_string(),
                "pg_num" => self.pg_num.to_string(),
                "size" => self.size.map_or("-".into(), |s| s.to_string()),
                "erasure" => self.erasure.clone().unwrap_or_else(|| "-".into()),
                "stripe_unit" => self.stripe_unit.clone().unwrap_or_else(|| "-".into()),
                "object_size" => self.object_size.clone(),
                "concurrency" => self.concurrency.to_string(),
                "clients" => self.clients.to_string(),
                "redundancy" => match (&self.erasure, self.size) {
                    (Some(spec), _) => spec.clone(),
                    (None, size) => format!("{}x", size.unwrap_or(1)),
                },
                "disk_bw" => shown(&self.disk_bw),
                "disk_iops" => shown(&self.disk_iops),
                "cpu" => shown(&self.cpu),
                "cores" => shown(&self.cores),
                "online_cpus" => shown(&self.online_cpus),
                "limits_per" => shown(&self.limits_per),
                "memory" => shown(&self.memory),
                "down_grace" => shown(&self.down_grace),
                "hosts" => shown(&self.hosts),
                "net_rate" => shown(&self.net_rate),
                "net_delay" => shown(&self.net_delay),
                _ => shown(&self.down_out),
            }
        };
        if swept.is_empty() {
            // A plan with no matrix: one point.
            return "the point".to_owned();
        }
        swept
            .iter()
            .map(|name| format!("{name}={}", value(name)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A plan checked: its points, in the matrix's order.
struct Checked {
    plan: Plan,
    points: Vec<Point>,
    /// The settings the matrix sweeps, in its order.
    swept: Vec<String>,
    duration: Duration,
    /// The failures of each phase, in time order.
    failures: BTreeMap<String, Vec<(Duration, failure::Failure)>>,
    clean_wait: Duration,
    /// What starts an object or S3 phase's clients.
    launcher: workload::Launcher,
}

/// One repeat of one point, as kept in `DIR/points/`.
#[derive(Debug, Serialize, Deserialize)]
struct Sample {
    point: usize,
    repeat: u32,
    settings: Point,
    /// Each phase's `cairn bench … --json` output (its figures under
    /// `bandwidth_mib_per_sec`, `iops`, `latency_p99_secs`).
    phases: BTreeMap<String, serde_json::Value>,
    /// The phases in the order they ran.
    #[serde(default)]
    order: Vec<String>,
    /// The phases with failures: what the client and the cluster showed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    timelines: BTreeMap<String, failure::Timeline>,
    /// The OSDs in each emulated-hardware group (`osd.N`, or `host.N`
    /// with `limits_per = "host"`) at the end of the phases.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    groups: BTreeMap<String, Vec<String>>,
    secs: f64,
}

/// A point's phase over its repeats.
#[derive(Debug, Serialize)]
struct Spread {
    phase: String,
    /// MiB/s of every repeat, in order.
    mib_per_sec: Vec<f64>,
    median_mib_per_sec: f64,
    min_mib_per_sec: f64,
    max_mib_per_sec: f64,
    median_iops: f64,
    median_latency_p99_secs: f64,
    /// IO500's score (its phase `io500 score`).
    #[serde(skip_serializing_if = "Option::is_none")]
    median_score: Option<f64>,
    /// With failures in the phase: medians of the first failure to an OSD
    /// down in the map and to `active+clean`, and of the client's MiB/s
    /// before, during and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    failures: Option<FailureSpread>,
}

#[derive(Debug, Serialize)]
struct FailureSpread {
    median_detection_secs: Option<f64>,
    median_clean_secs: Option<f64>,
    /// Repeats that were not clean within the wait.
    not_clean: usize,
    /// None for a workload without per-second series (the file ones).
    median_before_mib_per_sec: Option<f64>,
    median_during_mib_per_sec: Option<f64>,
    median_after_mib_per_sec: Option<f64>,
    /// What recovery pushed per second of pushing.
    median_recovery_mib_per_sec: Option<f64>,
}

#[derive(Debug, Serialize)]
struct PointSummary {
    point: usize,
    label: String,
    settings: Point,
    /// What the point's OSDs had, in total: what `cairn sizing` fits.
    resources: Resources,
    phases: Vec<Spread>,
    /// Each repeat's phases with failures (the report's time series; the
    /// JSON keeps them in `points/`).
    #[serde(skip)]
    timelines: Vec<BTreeMap<String, failure::Timeline>>,
}

/// The hardware a point's OSDs had together.
#[derive(Debug, Serialize)]
struct Resources {
    osds: u32,
    /// Failure domains: the emulated hosts, else one OSD each.
    hosts: u32,
    /// CPU cores: the cores allowed, or the OSDs' quotas, or the machine's.
    cores: f64,
    /// Disk bandwidth: the OSDs' limits, or the machine's disk as fio
    /// measured it (unknown without fio).
    disk_mib_per_sec: Option<f64>,
    disk_iops: Option<f64>,
    memory_bytes: u64,
    /// The hosts' links together, each way; unknown (one machine's
    /// loopback) without emulated links.
    net_mib_per_sec: Option<f64>,
    /// Data per byte stored: 1/size, or k/(k+m).
    data_fraction: f64,
}

/// The limits of some points, and how each was checked before they ran.
#[derive(Debug, Serialize, Deserialize)]
struct LimitSet {
    /// The points with these limits.
    points: Vec<String>,
    checks: Vec<LimitCheck>,
}

/// What a run measured before its points (`--out`'s `checks.json`): a
/// run resumed on the same plan checks again only the points it has left
/// to run, and keeps these for the ones done.
#[derive(Debug, Serialize, Deserialize)]
struct Checks {
    disk_baseline_mib_per_sec: Option<f64>,
    limits: Vec<LimitSet>,
}

#[derive(Debug, Serialize)]
struct Summary {
    plan: Plan,
    machine: crate::bench_report::Machine,
    /// The machine's disk under `--data`: fio's direct 1 MiB writes.
    disk_baseline_mib_per_sec: Option<f64>,
    /// The emulated hardware in force, checked.
    limits: Vec<LimitSet>,
    /// Repeats run now, and found done from an earlier run.
    ran: usize,
    resumed: usize,
    points: Vec<PointSummary>,
}

pub fn run(args: &SweepArgs) -> CliResult {
    let text = std::fs::read_to_string(&args.plan)
        .map_err(|e| format!("--plan {}: {e}", args.plan.display()))?;
    let checked = toml::from_str::<Plan>(&text)
        .map_err(Into::into)
        .and_then(|mut plan| {
            if let Some(repeats) = args.repeats {
                plan.repeats = repeats;
            }
            if let Some(duration) = &args.duration {
                plan.workload.duration.clone_from(duration);
            }
            check_plan(plan)
        })
        .map_err(|e| format!("plan {}: {e}", args.plan.display()))?;
    std::fs::create_dir_all(&args.data)
        .map_err(|e| format!("--data {}: {e}", args.data.display()))?;
    if checked.points.iter().any(|p| p.hosts.is_some()) && !rustix::process::geteuid().is_root() {
        return Err(format!(
            "plan {}: emulated hosts run in network namespaces, which need root",
            args.plan.display()
        )
        .into());
    }
    // A directory holds one plan's run: going on with another would mix
    // their results.
    let kept = args.out.join("plan.json");
    let plan_json = serde_json::to_string_pretty(&checked.plan)?;
    let same_plan = match std::fs::read_to_string(&kept) {
        Ok(old) if old != plan_json => {
            return Err(format!(
                "--out {} holds the run of another plan; give another directory",
                args.out.display()
            )
            .into());
        }
        Ok(_) => true,
        Err(_) => false,
    };
    let points_dir = args.out.join("points");
    let checks_file = args.out.join("checks.json");
    let earlier: Option<Checks> = same_plan
        .then(|| std::fs::read(&checks_file).ok())
        .flatten()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    // The points with a repeat left (all of them without an earlier run's
    // checks).
    let pending: Vec<bool> = (0..checked.points.len())
        .map(|index| {
            earlier.is_none()
                || (1..=checked.plan.repeats)
                    .any(|repeat| !sample_file(&points_dir, index, repeat).exists())
        })
        .collect();
    // Every limit is set and measured before anything else: one the kernel
    // refuses stops the run here.
    let mut limits = check_limits(&checked, &args.data, &pending)?;
    if let Some(earlier) = &earlier {
        let done: Vec<String> = checked
            .points
            .iter()
            .zip(&pending)
            .filter(|(_, pending)| !**pending)
            .map(|(point, _)| point.label(&checked.swept))
            .collect();
        for set in &earlier.limits {
            let points: Vec<String> = set
                .points
                .iter()
                .filter(|p| done.contains(p))
                .cloned()
                .collect();
            if !points.is_empty() {
                limits.push(LimitSet {
                    points,
                    checks: set.checks.clone(),
                });
            }
        }
    }
    let mut anchor = if checked.points.iter().any(|p| p.system == "ceph") {
        let scripts = ceph::locate(args.ceph_anchor.as_deref())?;
        let rgw_port = args.base_port.saturating_add(workload::S3_PORT_OFFSET);
        Some(ceph::Anchor::new(scripts, &args.data, rgw_port))
    } else {
        None
    };
    let disk_baseline = match &earlier {
        Some(earlier) if !pending.contains(&true) => earlier.disk_baseline_mib_per_sec,
        _ => crate::bench_emulate::disk_baseline_mib_per_sec(&args.data),
    };
    std::fs::create_dir_all(&points_dir)
        .map_err(|e| format!("--out {}: {e}", args.out.display()))?;
    if !same_plan {
        std::fs::write(&kept, &plan_json)?;
    }
    let checks = Checks {
        disk_baseline_mib_per_sec: disk_baseline,
        limits,
    };
    std::fs::write(&checks_file, serde_json::to_vec_pretty(&checks)?)?;
    let Checks { limits, .. } = checks;
    let cairn = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let total = checked.points.len() * checked.plan.repeats as usize;
    let mut progress = Progress::new(total, !args.json);
    let (mut ran, mut resumed) = (0, 0);
    for (index, point) in checked.points.iter().enumerate() {
        for repeat in 1..=checked.plan.repeats {
            let file = sample_file(&points_dir, index, repeat);
            if file.exists() {
                resumed += 1;
                progress.skipped();
                continue;
            }
            let label = format!("{} r{repeat}", point.label(&checked.swept));
            progress.starting(&label);
            let started = Instant::now();
            let raw = Raw {
                points_dir: &points_dir,
                index,
                repeat,
            };
            // The machine's CPUs past online_cpus are offline for the
            // point, the cluster's start and end included.
            let measured = point
                .online_cpus
                .map(crate::hotplug::Offline::leave)
                .transpose()
                .map_err(Into::into)
                .and_then(|_offline| match (&point.system[..], anchor.as_mut()) {
                    ("ceph", Some(anchor)) => {
                        ceph_point(&cairn, args, &checked, point, &raw, anchor)
                    }
                    _ => run_point(&cairn, args, &checked, point, &raw),
                });
            let (phases, timelines, groups) =
                measured.map_err(|e| format!("point {index} ({label}): {e}"))?;
            let sample = Sample {
                point: index,
                repeat,
                settings: point.clone(),
                order: phases.iter().map(|(name, _)| name.clone()).collect(),
                phases: phases.into_iter().collect(),
                timelines,
                groups,
                secs: started.elapsed().as_secs_f64(),
            };
            // Written whole, then renamed: a run stopped mid-write leaves
            // no half a sample to resume from.
            let partial = file.with_extension("partial");
            std::fs::write(&partial, serde_json::to_vec_pretty(&sample)?)?;
            std::fs::rename(&partial, &file)?;
            ran += 1;
            progress.done(started.elapsed());
        }
    }
    progress.clear();
    let runs = Runs {
        ran,
        resumed,
        limits,
        disk_baseline,
    };
    let summary = summarize(&checked, &points_dir, runs)?;
    std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_vec_pretty(&summary)?,
    )?;
    let html = report(&summary, &checked)?;
    std::fs::write(args.out.join("report.html"), html)?;
    if args.json {
        return print_json(&summary);
    }
    print_summary(&summary);
    Ok(())
}

/// Where one repeat of one point keeps its raw files.
struct Raw<'a> {
    points_dir: &'a Path,
    index: usize,
    repeat: u32,
}

/// What a run adds to its samples in the summary.
struct Runs {
    ran: usize,
    resumed: usize,
    limits: Vec<LimitSet>,
    disk_baseline: Option<f64>,
}

/// Sets each distinct emulated hardware of the plan's `pending` points on
/// a probe group (and a probe link, and by hot-plug) and checks it took
/// effect.
fn check_limits(checked: &Checked, data: &Path, pending: &[bool]) -> CliResult<Vec<LimitSet>> {
    let slowed = slows_disks(checked);
    crate::hotplug::restore_leftovers();
    type Key = (Limits, Option<String>, Option<String>, Option<u32>);
    let mut sets: Vec<(Key, LimitSet)> = Vec::new();
    for (point, _) in checked.points.iter().zip(pending).filter(|(_, p)| **p) {
        let key = (
            point.limits(slowed),
            point.net_rate.clone(),
            point.net_delay.clone(),
            point.online_cpus,
        );
        if key.0.is_empty() && key.1.is_none() && key.2.is_none() && key.3.is_none() {
            continue;
        }
        let label = point.label(&checked.swept);
        if let Some((_, set)) = sets.iter_mut().find(|(k, _)| *k == key) {
            set.points.push(label);
            continue;
        }
        let mut checks = Vec::new();
        if !key.0.is_empty() {
            checks = crate::bench_emulate::check(&key.0, data)
                .map_err(|e| format!("emulated hardware of point {label}: {e}"))?;
        }
        checks.extend(
            check_network(point).map_err(|e| format!("emulated network of point {label}: {e}"))?,
        );
        if let Some(keep) = point.online_cpus {
            checks.push(
                crate::hotplug::check(keep)
                    .map_err(|e| format!("emulated CPUs of point {label}: {e}"))?,
            );
        }
        sets.push((
            key,
            LimitSet {
                points: vec![label],
                checks,
            },
        ));
    }
    Ok(sets.into_iter().map(|(_, set)| set).collect())
}

/// A host link as the point's would be, made for a moment and measured.
fn check_network(point: &Point) -> CliResult<Vec<LimitCheck>> {
    let rate_bits = match &point.net_rate {
        Some(rate) => Some(crate::netemu::parse_rate(rate)?),
        None => None,
    };
    let delay_us = match &point.net_delay {
        Some(delay) => Some(crate::netemu::parse_delay(delay)?),
        None => None,
    };
    if rate_bits.is_none() && delay_us.is_none() {
        return Ok(Vec::new());
    }
    if delay_us.is_some() {
        crate::netemu::probe_netem()?;
    }
    let probe = crate::netemu::Layout {
        hosts: 1,
        netns: true,
        tag: format!("cairnp{}", std::process::id() % 100_000),
        rate_bits,
        delay_us,
    };
    probe.create()?;
    let checks = probe.check();
    probe.destroy();
    Ok(checks?)
}

/// Whether a failure of the plan slows a disk.
fn slows_disks(checked: &Checked) -> bool {
    checked
        .failures
        .values()
        .flatten()
        .any(|(_, f)| f.action == "slow-disk")
}

fn sample_file(points_dir: &Path, index: usize, repeat: u32) -> PathBuf {
    points_dir.join(format!("p{index:04}-r{repeat:03}.json"))
}

/// Parses and checks a plan: every key known, every point possible.
#[cfg(test)]
fn check(text: &str) -> CliResult<Checked> {
    check_plan(toml::from_str(text)?)
}

/// Checks a plan: every point possible, every failure within its phase.
fn check_plan(plan: Plan) -> CliResult<Checked> {
    if plan.repeats == 0 || plan.repeats > REPEATS_MAX {
        return Err(format!("repeats must be 1 to {REPEATS_MAX}").into());
    }
    for name in plan.cluster.keys().chain(plan.matrix.keys()) {
        if !SETTINGS.contains(&name.as_str()) {
            return Err(
                format!("unknown setting {name:?} (known: {})", SETTINGS.join(", ")).into(),
            );
        }
    }
    workload::check_phases(&plan.workload.kind, &plan.workload.phases)?;
    let w = &plan.workload;
    if w.kind != "fs"
        && (w.transfer_sizes.is_some()
            || w.files_per_proc.is_some()
            || w.block_size_per_proc.is_some())
    {
        return Err(
            "workload transfer_sizes, files_per_proc and block_size_per_proc are for kind fs"
                .into(),
        );
    }
    if w.kind != "io500" && w.max_bytes.is_some() {
        return Err("workload max_bytes is for kind io500".into());
    }
    match (w.kind.as_str(), w.via.as_deref()) {
        (_, None) | ("io500", Some("fs" | "s3")) => {}
        ("io500", Some(other)) => {
            return Err(format!("workload via = {other:?}: \"fs\" (a mount) or \"s3\"").into());
        }
        (_, Some(_)) => return Err("workload via is for kind io500".into()),
    }
    if w.kind != "apps" && w.large_file.is_some() {
        return Err("workload large_file is for kind apps".into());
    }
    for size in w
        .transfer_sizes
        .iter()
        .flatten()
        .chain(&w.block_size_per_proc)
        .chain(&w.max_bytes)
        .chain(&w.large_file)
    {
        parse_size(size).map_err(|e| format!("workload size {size:?}: {e}"))?;
    }
    if is_file_kind(&w.kind) && plan.failure.iter().any(|f| f.phase.is_some()) {
        return Err(format!(
            "workload {}: its benchmark runs every phase in one process, so a failure's `at` counts from its start: give no phase",
            w.kind
        )
        .into());
    }
    let duration =
        parse_duration(&plan.workload.duration).map_err(|e| format!("workload duration: {e}"))?;
    if duration.is_zero() {
        return Err("workload duration must be more than 0".into());
    }
    let mut combinations: Vec<BTreeMap<String, toml::Value>> = vec![plan.cluster.clone()];
    for (name, values) in &plan.matrix {
        if values.is_empty() {
            return Err(format!("matrix {name}: no values").into());
        }
        if combinations.len().saturating_mul(values.len()) > POINTS_MAX {
            return Err(format!("the matrix has more than {POINTS_MAX} points").into());
        }
        combinations = combinations
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |value| {
                    let mut next = base.clone();
                    next.insert(name.clone(), value.clone());
                    next
                })
            })
            .collect();
    }
    let points = combinations
        .iter()
        .map(|settings| {
            point(settings).map_err(|e| {
                let shown: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("point {}: {e}", shown.join(" "))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A file workload's failures are timed from its start, as one phase.
    let failure_phases = if is_file_kind(&w.kind) {
        vec![w.kind.clone()]
    } else {
        w.phases.clone()
    };
    let failures = failure::by_phase(&plan.failure, &failure_phases, duration)?;
    for point in points.iter().filter(|p| p.system == "ceph") {
        let kind = if plan.workload.over_s3() {
            "s3"
        } else {
            plan.workload.kind.as_str()
        };
        ceph::check_point(point, kind).map_err(|e| format!("a point on Ceph: {e}"))?;
        if !failures.is_empty() {
            return Err("failures are injected into Cairn's points only, so far".into());
        }
    }
    for point in &points {
        for (_, f) in failures.values().flatten() {
            f.check_point(point)?;
        }
    }
    if w.kind == "object" && w.phases.iter().any(|p| p == "idle") && !failures.contains_key("idle")
    {
        return Err(
            "workload phase \"idle\" runs no clients: it times the recovery of a failure in it \
             (give a [[failure]] with phase = \"idle\")"
                .into(),
        );
    }
    let clean_wait = plan
        .workload
        .clean_wait
        .as_deref()
        .unwrap_or(CLEAN_WAIT_DEFAULT);
    let clean_wait = parse_duration(clean_wait).map_err(|e| format!("workload clean_wait: {e}"))?;
    let most_clients = points.iter().map(|p| p.clients).max().unwrap_or(1);
    let launcher = workload::Launcher::check(
        plan.workload.launcher.as_ref(),
        &plan.workload.kind,
        most_clients,
    )?;
    let swept = plan.matrix.keys().cloned().collect();
    Ok(Checked {
        plan,
        points,
        swept,
        duration,
        failures,
        clean_wait,
        launcher,
    })
}

/// Whether a workload runs a file benchmark (every phase in one process).
fn is_file_kind(kind: &str) -> bool {
    matches!(kind, "fs" | "io500" | "apps")
}

/// A point from its settings (defaults for those not given), checked.
fn point(settings: &BTreeMap<String, toml::Value>) -> Result<Point, String> {
    let int = |name: &str, default: u32| -> Result<u32, String> {
        match settings.get(name) {
            None => Ok(default),
            Some(toml::Value::Integer(n)) => {
                u32::try_from(*n).map_err(|_| format!("{name} = {n}: out of range"))
            }
            Some(other) => Err(format!("{name} = {other}: a whole number")),
        }
    };
    let text = |name: &str| -> Result<Option<String>, String> {
        match settings.get(name) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(format!("{name} = {other}: a string like \"4M\"")),
        }
    };
    let system = text("system")?.unwrap_or_else(cairn_system);
    if !ceph::SYSTEMS.contains(&system.as_str()) {
        return Err(format!(
            "system = {system:?}: one of {}",
            ceph::SYSTEMS.join(", ")
        ));
    }
    let osds = int("osds", 3)?;
    let pg_num = int("pg_num", 32)?;
    let concurrency = int("concurrency", 16)?;
    let clients = int("clients", 1)?;
    if clients == 0 || clients > workload::CLIENTS_MAX {
        return Err(format!(
            "clients = {clients}: 1 to {}",
            workload::CLIENTS_MAX
        ));
    }
    let mut erasure = text("erasure")?;
    let mut redundancy_size = None;
    if let Some(redundancy) = text("redundancy")? {
        if settings.contains_key("size") || erasure.is_some() {
            return Err("redundancy is size or erasure: give one of the three".into());
        }
        match redundancy.strip_suffix('x') {
            Some(copies) => {
                let copies = copies
                    .parse::<u32>()
                    .map_err(|_| format!("redundancy = {redundancy:?}: like \"3x\" or \"8+3\""))?;
                redundancy_size = Some(copies);
            }
            None => erasure = Some(redundancy),
        }
    }
    let size = if let Some(copies) = redundancy_size {
        Some(copies)
    } else if erasure.is_some() {
        if settings.contains_key("size") {
            return Err("size and erasure both given: a pool is one or the other".into());
        }
        None
    } else {
        Some(int("size", 3.min(osds.max(1)))?)
    };
    let stripe_unit = text("stripe_unit")?;
    if stripe_unit.is_some() && erasure.is_none() {
        return Err("stripe_unit is for erasure-coded pools".into());
    }
    let object_size = text("object_size")?.unwrap_or_else(|| "4M".into());
    parse_size(&object_size).map_err(|e| format!("object_size: {e}"))?;
    if osds == 0 || osds > 64 {
        return Err(format!("osds = {osds}: 1 to 64"));
    }
    if pg_num == 0 || pg_num > 65_536 {
        return Err(format!("pg_num = {pg_num}: 1 to 65536"));
    }
    if concurrency == 0 || concurrency > 4096 {
        return Err(format!("concurrency = {concurrency}: 1 to 4096"));
    }
    let width = match (&erasure, size) {
        (Some(spec), _) => {
            let (k, m) = spec
                .split_once('+')
                .and_then(|(k, m)| Some((k.parse::<u32>().ok()?, m.parse::<u32>().ok()?)))
                .filter(|(k, m)| *k > 0 && *m > 0)
                .ok_or_else(|| format!("erasure = {spec:?}: K+M, like \"4+2\""))?;
            k + m
        }
        (None, Some(size)) if size > 0 => size,
        _ => return Err("size must be at least 1".into()),
    };
    if width > osds {
        return Err(format!(
            "impossible: the pool puts {width} copies or shards on different OSDs, and there are {osds}"
        ));
    }
    let hosts = match settings.get("hosts") {
        None => None,
        Some(_) => Some(int("hosts", 0)?),
    };
    if let Some(hosts) = hosts {
        if hosts == 0 || hosts > osds.min(crate::netemu::HOSTS_MAX) {
            return Err(format!(
                "hosts = {hosts}: 1 to the OSDs ({osds}), each host holding one at least"
            ));
        }
        if width > hosts {
            return Err(format!(
                "impossible: the pool puts {width} copies or shards on different hosts, and there are {hosts}"
            ));
        }
    }
    let net_rate = text("net_rate")?;
    let net_delay = text("net_delay")?;
    if let Some(rate) = &net_rate {
        crate::netemu::parse_rate(rate).map_err(|e| format!("net_rate: {e}"))?;
    }
    if let Some(delay) = &net_delay {
        crate::netemu::parse_delay(delay).map_err(|e| format!("net_delay: {e}"))?;
    }
    if hosts.is_none() && (net_rate.is_some() || net_delay.is_some()) {
        return Err("net_rate and net_delay limit the links of emulated hosts: give hosts".into());
    }
    let optional_int = |name: &str| -> Result<Option<u32>, String> {
        match settings.contains_key(name) {
            false => Ok(None),
            true => match int(name, 0)? {
                0 => Err(format!("{name} must be more than 0")),
                n => Ok(Some(n)),
            },
        }
    };
    let size_of = |name: &str, least_bytes: u64| -> Result<Option<String>, String> {
        let Some(value) = text(name)? else {
            return Ok(None);
        };
        let bytes = parse_size(&value).map_err(|e| format!("{name}: {e}"))?;
        if bytes < least_bytes {
            return Err(format!("{name} = {value:?}: at least {least_bytes} bytes"));
        }
        Ok(Some(value))
    };
    let duration_of = |name: &str| -> Result<Option<String>, String> {
        let value = text(name)?;
        if let Some(v) = &value {
            parse_duration(v).map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(value)
    };
    let cpu = match settings.get("cpu") {
        None => None,
        Some(toml::Value::Integer(n)) => Some(*n as f64),
        Some(toml::Value::Float(f)) => Some(*f),
        Some(other) => return Err(format!("cpu = {other}: cores of CPU time, like 0.5")),
    };
    if let Some(cpu) = cpu
        && !(0.01..=1024.0).contains(&cpu)
    {
        return Err(format!("cpu = {cpu}: 0.01 to 1024 cores"));
    }
    let cores = optional_int("cores")?;
    let online_cpus = optional_int("online_cpus")?;
    let limits_per = text("limits_per")?;
    match (limits_per.as_deref(), hosts) {
        (None | Some("osd"), _) | (Some("host"), Some(_)) => {}
        (Some("host"), None) => {
            return Err("limits_per = \"host\": the limits of emulated hosts; give hosts".into());
        }
        (Some(other), _) => {
            return Err(format!("limits_per = {other:?}: \"osd\" or \"host\""));
        }
    }
    if let (Some(cores), Some(online)) = (cores, online_cpus)
        && cores > online
    {
        return Err(format!(
            "cores = {cores}: more than the CPUs online_cpus = {online} leaves online"
        ));
    }
    Ok(Point {
        system,
        osds,
        pg_num,
        size,
        erasure,
        stripe_unit,
        object_size,
        concurrency,
        clients,
        // 64 KiB/s: below that a throttled OSD cannot write a map.
        disk_bw: size_of("disk_bw", 65_536)?,
        disk_iops: optional_int("disk_iops")?,
        cpu,
        cores,
        online_cpus,
        limits_per,
        memory: size_of("memory", 64 << 20)?,
        hosts,
        net_rate,
        net_delay,
        down_grace: duration_of("down_grace")?,
        down_out: duration_of("down_out")?,
    })
}

/// The phases' JSON in the order they ran, and the timelines of those
/// with failures.
type Ran = (
    Vec<(String, serde_json::Value)>,
    BTreeMap<String, failure::Timeline>,
);

/// A repeat's phases and timelines, and the OSDs in each emulated-hardware
/// group.
type Measured = (
    Vec<(String, serde_json::Value)>,
    BTreeMap<String, failure::Timeline>,
    BTreeMap<String, Vec<String>>,
);

/// One repeat of a point on a fresh cluster.
fn run_point(
    cairn: &Path,
    args: &SweepArgs,
    checked: &Checked,
    point: &Point,
    raw: &Raw<'_>,
) -> CliResult<Measured> {
    let data = args.data.join("point");
    // Left by a run stopped mid-point (its mount too, dead or alive).
    drop(quiet(cairn, &["down", "--data", &path(&data)]));
    workload::unmount_left(&data.join("mnt"));
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| format!("removing {}: {e}", data.display()))?;
    }
    std::fs::create_dir_all(&args.data)?;
    let result = measure(cairn, args, checked, point, &data, raw);
    let down = quiet(cairn, &["down", "--data", &path(&data)]);
    let removed = std::fs::remove_dir_all(&data);
    let measured = result?;
    down?;
    removed.map_err(|e| format!("removing {}: {e}", data.display()))?;
    Ok(measured)
}

/// One repeat of a point on the Ceph anchor (deployed at the first):
/// a pool of its own, the workload's phases, the pool removed.
fn ceph_point(
    cairn: &Path,
    args: &SweepArgs,
    checked: &Checked,
    point: &Point,
    raw: &Raw<'_>,
    anchor: &mut ceph::Anchor,
) -> CliResult<Measured> {
    anchor.ensure_up()?;
    // Scratch for the application set, as a Cairn point's directory.
    let data = args.data.join("point");
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| format!("removing {}: {e}", data.display()))?;
    }
    std::fs::create_dir_all(&data)?;
    let over_s3 = checked.plan.workload.over_s3();
    let kind = if over_s3 {
        "s3"
    } else {
        checked.plan.workload.kind.as_str()
    };
    let pool = ceph::pool_name(raw.index, raw.repeat);
    let for_fs = matches!(kind, "fs" | "io500" | "apps");
    if kind != "s3" {
        anchor.make_pool(&pool, point, for_fs)?;
    }
    let target = workload::Target {
        cairn,
        conf: "",
        data: &data,
        base_port: args.base_port,
        point,
        duration: checked.duration,
        workload: &checked.plan.workload,
        launcher: &checked.launcher,
    };
    let result = match kind {
        "s3" => anchor.rgw().and_then(|(endpoint, access_key, secret_key)| {
            let access = workload::S3Access {
                endpoint,
                access_key,
                secret_key,
                region: None,
                bucket: pool.clone(),
            };
            if checked.plan.workload.kind == "io500" {
                workload::io500_s3_phases(&target, &access)
            } else {
                workload::s3_phases_on(&target, &access)
            }
        }),
        "fs" | "io500" | "apps" => anchor
            .fs_dir(&pool)
            .and_then(|dir| workload::fs_phases_in(&target, &dir)),
        _ => {
            let secs = checked.duration.as_secs_f64().ceil() as u64;
            let mut phases = Vec::new();
            let mut failed = None;
            for phase in &checked.plan.workload.phases {
                if phase != "write" {
                    crate::bench_cmd::drop_caches();
                }
                match anchor.rados_bench(&pool, phase, point, secs) {
                    Ok(value) => phases.push((phase.clone(), value)),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            failed.map_or(Ok(phases), Err)
        }
    };
    let removed = if kind == "s3" {
        Ok(())
    } else {
        anchor.remove_pool(&pool, for_fs)
    };
    drop(std::fs::remove_dir_all(&data));
    let phases = result?;
    removed?;
    Ok((phases, BTreeMap::new(), BTreeMap::new()))
}

/// `cairn up` with the point's OSDs and monitor timings, and its pool.
fn start_cluster(
    cairn: &Path,
    args: &SweepArgs,
    checked: &Checked,
    point: &Point,
    data: &Path,
) -> CliResult {
    let osds = point.osds.to_string();
    let port = args.base_port.to_string();
    let data_arg = path(data);
    let s3_port = workload::s3_port(checked.plan.workload.over_s3(), args.base_port).to_string();
    let mut up = vec![
        "up",
        "--detach",
        "--data",
        &data_arg,
        "--osds",
        &osds,
        "--base-port",
        &port,
        "--mds",
        "0",
        "--s3-port",
        &s3_port,
    ];
    if let Some(grace) = &point.down_grace {
        up.extend(["--down-grace", grace]);
    }
    if let Some(out) = &point.down_out {
        up.extend(["--down-out", out]);
    }
    let hosts = point.hosts.map(|h| h.to_string());
    if let Some(hosts) = &hosts {
        up.extend(["--hosts", hosts, "--netns"]);
        if let Some(rate) = &point.net_rate {
            up.extend(["--net-rate", rate]);
        }
        if let Some(delay) = &point.net_delay {
            up.extend(["--net-delay", delay]);
        }
    }
    quiet(cairn, &up)?;
    let conf = path(&data.join("cairn.toml"));
    let pg_num = point.pg_num.to_string();
    let mut create = vec!["pool", "create", POOL, "--conf", &conf, "--pg-num", &pg_num];
    if point.hosts.is_some() {
        create.extend(["--failure-domain", "host"]);
    }
    let size;
    match (&point.erasure, point.size) {
        (Some(spec), _) => {
            create.extend(["--erasure", spec]);
            if let Some(unit) = &point.stripe_unit {
                create.extend(["--stripe-unit", unit]);
            }
        }
        (None, size_copies) => {
            size = size_copies.unwrap_or(3).to_string();
            create.extend(["--size", &size]);
        }
    }
    quiet(cairn, &create).map(drop)
}

/// Keeps every OSD of the cluster in `data` in its group: a restarted OSD
/// is a new process. Stops when `stop` is set.
fn watch_groups(data: &Path, point: &Point, groups: &Mutex<Vec<Group>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(groups) = groups.lock()
            && !groups.is_empty()
        {
            for index in 0..point.osds {
                let Some(group) = groups.get(point.group_of(index)) else {
                    continue;
                };
                let Some(pid) = live_osd(data, index) else {
                    continue;
                };
                if !group.pids().contains(&pid) {
                    drop(group.add(pid));
                }
            }
        }
        std::thread::sleep(GROUP_WATCH_INTERVAL);
    }
}

/// The process of `osd.INDEX` of the cluster in `data`, if it runs.
fn live_osd(data: &Path, index: u32) -> Option<u32> {
    let pid_file = crate::up_cmd::daemon_pid_file(data, &format!("osd.{index}"));
    crate::up_cmd::read_pid(&pid_file)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| crate::up_cmd::is_live_cairn(*p as i32))
}

/// The OSDs in each emulated-hardware group now (`osd.N` or `host.N`):
/// what the sample keeps to show which limits each OSD ran under.
fn group_members(
    data: &Path,
    point: &Point,
    groups: &Mutex<Vec<Group>>,
) -> BTreeMap<String, Vec<String>> {
    let Ok(groups) = groups.lock() else {
        return BTreeMap::new();
    };
    let mut members = BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        let pids = group.pids();
        let osds = (0..point.osds)
            .filter(|i| live_osd(data, *i).is_some_and(|pid| pids.contains(&pid)))
            .map(|i| format!("osd.{i}"))
            .collect();
        members.insert(point.group_name(g), osds);
    }
    members
}

fn measure(
    cairn: &Path,
    args: &SweepArgs,
    checked: &Checked,
    point: &Point,
    data: &Path,
    raw: &Raw<'_>,
) -> CliResult<Measured> {
    let limits = point.limits(slows_disks(checked));
    let disk = if limits.is_empty() {
        None
    } else {
        Some(crate::bench_emulate::disk_of(&args.data)?)
    };
    let groups = Arc::new(Mutex::new(Vec::new()));
    if let Some(disk) = disk {
        let mut made = groups.lock().map_err(|_| "groups poisoned")?;
        for g in 0..point.group_count() {
            made.push(Group::new(&point.group_name(g as usize), &limits, disk)?.0);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (data, groups, stop) = (data.to_path_buf(), groups.clone(), stop.clone());
        let point = point.clone();
        std::thread::spawn(move || watch_groups(&data, &point, &groups, &stop))
    };
    let result = start_cluster(cairn, args, checked, point, data).and_then(|()| {
        // With emulated hosts, the clients run in the hub namespace, with
        // the monitor: this thread goes there for the point's phases, so
        // every process it starts does too, and comes back after.
        let _hub = InHub::enter(data)?;
        let cluster = failure::Cluster {
            cairn,
            data,
            conf: &path(&data.join("cairn.toml")),
            base_port: args.base_port,
            point,
            groups: &groups,
            disk,
            clean_wait: checked.clean_wait,
        };
        let (phases, timelines) = phases(&cluster, checked, raw)?;
        Ok((phases, timelines, group_members(data, point, &groups)))
    });
    stop.store(true, Ordering::Relaxed);
    drop(watcher.join());
    result
}

/// This thread in the hub namespace of a cluster with emulated hosts (or
/// where it was, without); back where it was on drop.
struct InHub(Option<std::fs::File>);

impl InHub {
    fn enter(data: &Path) -> CliResult<InHub> {
        let Some(hub) = crate::netemu::Layout::load(data)?.hub() else {
            return Ok(InHub(None));
        };
        let home = crate::netemu::current()?;
        crate::netemu::enter(&hub)?;
        Ok(InHub(Some(home)))
    }
}

impl Drop for InHub {
    fn drop(&mut self) {
        if let Some(home) = &self.0
            && let Err(error) = crate::netemu::enter_file(home)
        {
            // Nothing this thread starts later would reach its cluster.
            eprintln!("cannot leave the emulated hosts' namespace: {error}");
            std::process::exit(1);
        }
    }
}

/// The workload's phases on a running cluster.
fn phases(cluster: &failure::Cluster<'_>, checked: &Checked, raw: &Raw<'_>) -> CliResult<Ran> {
    let target = workload::Target {
        cairn: cluster.cairn,
        conf: cluster.conf,
        data: cluster.data,
        base_port: cluster.base_port,
        point: cluster.point,
        duration: checked.duration,
        workload: &checked.plan.workload,
        launcher: &checked.launcher,
    };
    let (mut phases, mut timelines) = (Vec::new(), BTreeMap::new());
    match checked.plan.workload.kind.as_str() {
        kind if is_file_kind(kind) => {
            let run = || -> CliResult<Vec<(String, serde_json::Value)>> {
                if checked.plan.workload.over_s3() {
                    workload::io500_s3_phases(&target, &workload::cairn_s3(&target)?)
                } else {
                    workload::fs_phases(&target)
                }
            };
            match checked.failures.get(kind) {
                None => phases = run()?,
                Some(failures) => {
                    let load = || run().map_err(|e| e.to_string());
                    let (ran, timeline) = failure::run(cluster, load, &[], failures)?;
                    // The failures hit the phase the benchmark ran first.
                    if let Some((first, _)) = ran.first() {
                        timelines.insert(first.clone(), timeline);
                    }
                    phases = ran;
                }
            }
        }
        kind => {
            // object: `bench object` on the pool; s3: `bench s3` on the
            // point's gateway. Both keep the same per-second series.
            let access = match kind {
                "s3" => Some(workload::cairn_s3(&target)?),
                _ => None,
            };
            for phase in &checked.plan.workload.phases {
                if phase != "write" && phase != "put" {
                    crate::bench_cmd::drop_caches();
                }
                if phase == "idle" {
                    // No clients: the failures' recovery alone (the plan
                    // gives the phase one at least).
                    let failures = checked.failures.get(phase).map_or(&[][..], Vec::as_slice);
                    let wait = || {
                        std::thread::sleep(checked.duration);
                        Ok(())
                    };
                    let ((), timeline) = failure::run(cluster, wait, &[], failures)?;
                    let value = serde_json::json!({
                        "workload": "idle",
                        "secs": checked.duration.as_secs_f64(),
                        "recovered_bytes": timeline.recovered_bytes,
                        // The phase's throughput is recovery's.
                        "bandwidth_mib_per_sec": timeline.recovery_mib_per_sec.unwrap_or(0.0),
                    });
                    timelines.insert(phase.clone(), timeline);
                    phases.push((phase.clone(), value));
                    continue;
                }
                let command = match &access {
                    Some(access) => workload::s3_command(&target, access, phase),
                    None => workload::object_command(&target, phase),
                };
                let value = match checked.failures.get(phase) {
                    None => {
                        let reports = cluster
                            .data
                            .join(format!("reports-{}-{phase}", phases.len()));
                        workload::clients(&target, &command, cluster.point.clients, &reports)?
                    }
                    Some(failures) => {
                        let count = cluster.point.clients;
                        let file = |client: Option<&str>| {
                            failure::series_file(
                                raw.points_dir,
                                raw.index,
                                raw.repeat,
                                phase,
                                client,
                            )
                        };
                        // One series per client, their figures added up.
                        let (series, argument) = if count <= 1 {
                            (vec![file(None)], file(None))
                        } else {
                            let each = (0..count).map(|r| file(Some(&r.to_string())));
                            (each.collect(), file(Some(crate::launch::RANK_PLACEHOLDER)))
                        };
                        let mut command = command.clone();
                        command.extend(["--series".to_owned(), path(&argument)]);
                        let reports = cluster
                            .data
                            .join(format!("reports-{}-{phase}", phases.len()));
                        let target = &target;
                        let load = || {
                            workload::clients(target, &command, count, &reports)
                                .map_err(|e| e.to_string())
                        };
                        let (value, timeline) = failure::run(cluster, load, &series, failures)?;
                        timelines.insert(phase.clone(), timeline);
                        value
                    }
                };
                phases.push((phase.clone(), value));
            }
        }
    }
    Ok((phases, timelines))
}

/// Runs `cairn ARGS`, its stdout kept; a failure is an error with its
/// stderr.
fn quiet(cairn: &Path, args: &[&str]) -> CliResult<Vec<u8>> {
    let out = Command::new(cairn)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cairn {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "cairn {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(out.stdout)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => f64::midpoint(sorted[n / 2 - 1], sorted[n / 2]),
    }
}

/// Every point's phases over its repeats, from the kept samples.
fn summarize(checked: &Checked, points_dir: &Path, runs: Runs) -> CliResult<Summary> {
    let machine = crate::bench_report::Machine::here();
    let mut points = Vec::with_capacity(checked.points.len());
    for (index, point) in checked.points.iter().enumerate() {
        let mut samples = Vec::new();
        for repeat in 1..=checked.plan.repeats {
            let file = sample_file(points_dir, index, repeat);
            let text = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let sample: Sample =
                serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", file.display()))?;
            samples.push(sample);
        }
        // The phases as the first repeat ran them (the file workloads name
        // theirs as they run).
        let names: Vec<String> = match samples.first() {
            Some(s) if !s.order.is_empty() => s.order.clone(),
            Some(s) => s.phases.keys().cloned().collect(),
            None => Vec::new(),
        };
        let phases = names
            .iter()
            .map(|phase| {
                let figure = |name: &str| -> Vec<f64> {
                    samples
                        .iter()
                        .map(|s| {
                            s.phases
                                .get(phase)
                                .and_then(|p| p[name].as_f64())
                                .unwrap_or(0.0)
                        })
                        .collect()
                };
                let mib = figure("bandwidth_mib_per_sec");
                let timelines: Vec<&failure::Timeline> = samples
                    .iter()
                    .filter_map(|s| s.timelines.get(phase))
                    .collect();
                Spread {
                    failures: failure_spread(&timelines),
                    phase: phase.clone(),
                    median_mib_per_sec: median(&mib),
                    min_mib_per_sec: mib.iter().copied().fold(f64::INFINITY, f64::min),
                    max_mib_per_sec: mib.iter().copied().fold(0.0, f64::max),
                    mib_per_sec: mib,
                    median_iops: median(&figure("iops")),
                    median_latency_p99_secs: median(&figure("latency_p99_secs")),
                    median_score: samples
                        .iter()
                        .any(|s| {
                            s.phases
                                .get(phase)
                                .is_some_and(|p| p.get("score").is_some())
                        })
                        .then(|| median(&figure("score"))),
                }
            })
            .collect();
        points.push(PointSummary {
            point: index,
            label: point.label(&checked.swept),
            settings: point.clone(),
            resources: resources(point, &machine, runs.disk_baseline),
            phases,
            timelines: samples.into_iter().map(|s| s.timelines).collect(),
        });
    }
    Ok(Summary {
        machine,
        plan: checked.plan.clone(),
        disk_baseline_mib_per_sec: runs.disk_baseline,
        limits: runs.limits,
        ran: runs.ran,
        resumed: runs.resumed,
        points,
    })
}

/// The medians of a phase's timelines over the repeats; `None` without
/// failures.
fn failure_spread(timelines: &[&failure::Timeline]) -> Option<FailureSpread> {
    if timelines.is_empty() {
        return None;
    }
    let some = |f: fn(&failure::Timeline) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = timelines.iter().filter_map(|t| f(t)).collect();
        (!values.is_empty()).then(|| median(&values))
    };
    Some(FailureSpread {
        median_detection_secs: some(|t| t.detection_secs),
        median_clean_secs: some(|t| t.clean_secs),
        not_clean: timelines.iter().filter(|t| t.clean_secs.is_none()).count(),
        median_before_mib_per_sec: some(|t| t.before_mib_per_sec),
        median_during_mib_per_sec: some(|t| t.during_mib_per_sec),
        median_after_mib_per_sec: some(|t| t.after_mib_per_sec),
        median_recovery_mib_per_sec: some(|t| t.recovery_mib_per_sec),
    })
}

/// What the point's OSDs had together, on `machine`.
fn resources(
    point: &Point,
    machine: &crate::bench_report::Machine,
    disk_mib: Option<f64>,
) -> Resources {
    // The groups the limits apply to: each OSD, or each host.
    let groups = f64::from(point.group_count());
    let limits = point.limits(false);
    let mut cores = machine.cpus as f64;
    if let Some(online) = point.online_cpus {
        cores = cores.min(f64::from(online));
    }
    if let Some(allowed) = limits.cores {
        cores = cores.min(f64::from(allowed));
    }
    if let Some(quota) = limits.cpu_cores {
        cores = cores.min(quota * groups);
    }
    let data_fraction = match (&point.erasure, point.size) {
        (Some(spec), _) => spec
            .split_once('+')
            .and_then(|(k, m)| {
                let (k, m): (f64, f64) = (k.parse().ok()?, m.parse().ok()?);
                Some(k / (k + m))
            })
            .unwrap_or(1.0),
        (None, size) => 1.0 / f64::from(size.unwrap_or(1).max(1)),
    };
    Resources {
        osds: point.osds,
        hosts: point.hosts.unwrap_or(point.osds),
        cores,
        disk_mib_per_sec: limits
            .disk_bytes_per_sec
            .map(|b| b as f64 * groups / 1_048_576.0)
            .or(disk_mib),
        disk_iops: limits.disk_iops.map(|n| n as f64 * groups),
        memory_bytes: limits.memory_bytes.map_or(machine.memory_bytes, |b| {
            b.saturating_mul(u64::from(point.group_count()))
        }),
        net_mib_per_sec: point
            .net_rate
            .as_deref()
            .and_then(|r| crate::netemu::parse_rate(r).ok())
            .zip(point.hosts)
            .map(|(bits, hosts)| bits as f64 / 8.0 * f64::from(hosts) / 1_048_576.0),
        data_fraction,
    }
}

/// The sweep's HTML page: per phase, every point's median MiB/s (with
/// its spread) and p99 latency, and the median against each setting the
/// matrix sweeps, one line per combination of the others.
fn report(summary: &Summary, checked: &Checked) -> CliResult<String> {
    use crate::bench_report::{Bar, Line, bar_chart, escape, html_table, line_chart, page};
    let mut body = String::new();
    if let Some(mirrors) = &summary.plan.mirrors {
        body.push_str(&format!("<p>Mirrors: {}</p>\n", escape(mirrors)));
    }
    body.push_str(&format!(
        "<p>{} points, {} repeats each, {} phases of {}; each repeat on a fresh cluster.</p>\n",
        summary.points.len(),
        summary.plan.repeats,
        summary.plan.workload.kind,
        escape(&summary.plan.workload.duration)
    ));
    let value_of = |point: &Point, setting: &str| -> String {
        point
            .label(&[setting.to_owned()])
            .split_once('=')
            .map(|(_, v)| v.to_owned())
            .unwrap_or_default()
    };
    let names: Vec<String> = summary
        .points
        .first()
        .map(|p| p.phases.iter().map(|s| s.phase.clone()).collect())
        .unwrap_or_default();
    for phase in &names {
        body.push_str(&format!("<h2>{}</h2>\n", escape(phase)));
        let shown: Vec<(&PointSummary, &Spread)> = summary
            .points
            .iter()
            .filter_map(|p| Some((p, p.phases.iter().find(|s| s.phase == *phase)?)))
            .collect();
        let figure = Figure::of(shown.iter().map(|(_, s)| *s));
        let bars: Vec<Bar<'_>> = shown
            .iter()
            .map(|(p, s)| {
                let (median, min, max) = figure.spread(s);
                Bar {
                    label: &p.label,
                    median,
                    min,
                    max,
                }
            })
            .collect();
        let title = format!("{phase}: median {} (whiskers: min to max)", figure.unit());
        body.push_str(&format!(
            "<figure>{}</figure>\n",
            bar_chart(&title, figure.unit(), &bars)?
        ));
        if shown.iter().any(|(_, s)| s.median_latency_p99_secs > 0.0) {
            let latency: Vec<Bar<'_>> = shown
                .iter()
                .map(|(p, s)| {
                    let ms = s.median_latency_p99_secs * 1000.0;
                    Bar {
                        label: &p.label,
                        median: ms,
                        min: ms,
                        max: ms,
                    }
                })
                .collect();
            let title = format!("{phase}: p99 latency");
            body.push_str(&format!(
                "<figure>{}</figure>\n",
                bar_chart(&title, "ms", &latency)?
            ));
        }
        // The phase the failures hit: named by the plan (object, s3), or
        // the first a file workload ran.
        let hit = summary
            .points
            .iter()
            .any(|p| p.timelines.iter().any(|t| t.contains_key(phase)));
        if hit {
            body.push_str(&failure_section(summary, phase)?);
        }
        for setting in &checked.swept {
            let ticks: Vec<String> = checked.plan.matrix[setting]
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect();
            if ticks.len() < 2 {
                continue;
            }
            let others: Vec<String> = checked
                .swept
                .iter()
                .filter(|s| *s != setting)
                .cloned()
                .collect();
            let mut lines: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
            for (p, s) in &shown {
                let at = ticks
                    .iter()
                    .position(|t| *t == value_of(&p.settings, setting));
                if let Some(at) = at {
                    lines
                        .entry(p.settings.label(&others))
                        .or_default()
                        .push((at, figure.spread(s).0));
                }
            }
            let lines: Vec<Line> = lines
                .into_iter()
                .map(|(name, mut points)| {
                    points.sort_by_key(|p| p.0);
                    Line { name, points }
                })
                .collect();
            let title = format!("{phase}: median {} against {setting}", figure.unit());
            let svg = line_chart(&title, (setting, &ticks), figure.unit(), &lines)?;
            body.push_str(&format!("<figure>{svg}</figure>\n"));
        }
    }
    body.push_str(&limits_section(summary));
    body.push_str("<h2>Every point</h2>\n");
    body.push_str(&html_table(&FIGURE_HEADERS, &figure_rows(summary)));
    Ok(page(&summary.plan.name, &body, &summary.machine))
}

/// What a phase's plots show: MiB/s, operations per second where no
/// bytes moved (metadata), or IO500's score.
enum Figure {
    Bandwidth,
    Operations,
    Score,
}

impl Figure {
    fn of<'a>(spreads: impl Iterator<Item = &'a Spread> + Clone) -> Figure {
        if spreads.clone().any(|s| s.median_score.is_some()) {
            Figure::Score
        } else if spreads.clone().all(|s| s.median_mib_per_sec == 0.0)
            && spreads.clone().any(|s| s.median_iops > 0.0)
        {
            Figure::Operations
        } else {
            Figure::Bandwidth
        }
    }

    fn unit(&self) -> &'static str {
        match self {
            Figure::Bandwidth => "MiB/s",
            Figure::Operations => "ops/s",
            Figure::Score => "IO500 score",
        }
    }

    /// Median, minimum and maximum (the spread is kept for MiB/s only).
    fn spread(&self, s: &Spread) -> (f64, f64, f64) {
        match self {
            Figure::Bandwidth => (s.median_mib_per_sec, s.min_mib_per_sec, s.max_mib_per_sec),
            Figure::Operations => (s.median_iops, s.median_iops, s.median_iops),
            Figure::Score => {
                let score = s.median_score.unwrap_or(0.0);
                (score, score, score)
            }
        }
    }
}

/// A phase with failures: each point's client MiB/s and latency against
/// time (every repeat, the first's events marked), and the times and
/// rates around the failures.
fn failure_section(summary: &Summary, phase: &str) -> CliResult<String> {
    use crate::bench_report::{Series, escape, html_table, series_chart};
    let mut html = String::new();
    let failures: Vec<String> = summary
        .plan
        .failure
        .iter()
        .map(|f| format!("{} at {}", f.describe(), f.at))
        .collect();
    html.push_str(&format!(
        "<p>Failures in {}: {}.{}</p>\n",
        escape(phase),
        escape(&failures.join("; ")),
        if phase == "idle" {
            " No client load in this phase: recovery alone, its MiB/s against the disk as fio \
             measured it."
        } else {
            ""
        }
    ));
    let mut rows = Vec::new();
    for p in &summary.points {
        let repeats: Vec<(usize, &failure::Timeline)> = p
            .timelines
            .iter()
            .enumerate()
            .filter_map(|(r, t)| t.get(phase).map(|t| (r + 1, t)))
            .collect();
        let marks: Vec<(String, f64)> = repeats
            .first()
            .map(|(_, t)| {
                t.events
                    .iter()
                    .map(|e| (e.what.clone(), e.at_secs))
                    .collect()
            })
            .unwrap_or_default();
        let line = |f: fn(&failure::Tick) -> f64| -> Vec<Series> {
            repeats
                .iter()
                .map(|(r, t)| Series {
                    name: format!("repeat {r}"),
                    points: t.ticks.iter().map(|k| (k.elapsed_secs, f(k))).collect(),
                })
                .collect()
        };
        if repeats.iter().any(|(_, t)| !t.ticks.is_empty()) {
            let title = format!("{}: {phase} MiB/s around the failures", p.label);
            html.push_str(&format!(
                "<figure>{}</figure>\n",
                series_chart(&title, "MiB/s", &line(|k| k.mib_per_sec), &marks)?
            ));
            let title = format!("{}: {phase} mean latency around the failures", p.label);
            html.push_str(&format!(
                "<figure>{}</figure>\n",
                series_chart(&title, "ms", &line(|k| k.latency_avg_secs * 1000.0), &marks)?
            ));
        } else if let Some((_, t)) = repeats.first() {
            // A file workload keeps no per-second series: the events.
            let events: Vec<String> = t
                .events
                .iter()
                .map(|e| format!("{} at {:.1} s", e.what, e.at_secs))
                .collect();
            html.push_str(&format!(
                "<p>{}: {}.</p>\n",
                escape(&p.label),
                escape(&events.join("; "))
            ));
        }
        if let Some(f) = p
            .phases
            .iter()
            .find(|s| s.phase == phase)
            .and_then(|s| s.failures.as_ref())
        {
            let secs = |v: Option<f64>| v.map_or("-".into(), |v| fixed(v, 1));
            let to_disk = f
                .median_recovery_mib_per_sec
                .zip(summary.disk_baseline_mib_per_sec)
                .map_or("-".into(), |(r, d)| fixed(r / d, 2));
            rows.push(vec![
                p.label.clone(),
                secs(f.median_detection_secs),
                secs(f.median_clean_secs),
                f.not_clean.to_string(),
                secs(f.median_before_mib_per_sec),
                secs(f.median_during_mib_per_sec),
                secs(f.median_after_mib_per_sec),
                secs(f.median_recovery_mib_per_sec),
                to_disk,
            ]);
        }
    }
    html.push_str(&html_table(
        &[
            "point",
            "to down, s",
            "to active+clean, s",
            "not clean",
            "MiB/s before",
            "during",
            "after",
            "recovery MiB/s",
            "recovery ÷ disk (fio)",
        ],
        &rows,
    ));
    Ok(html)
}

/// The emulated hardware in force and how each limit was checked.
fn limits_section(summary: &Summary) -> String {
    use crate::bench_report::{escape, html_table};
    let mut html = String::from("<h2>Hardware</h2>\n");
    match summary.disk_baseline_mib_per_sec {
        Some(mib) => html.push_str(&format!(
            "<p>The disk under the clusters, unthrottled: {} MiB/s (fio, direct 1 MiB writes).</p>\n",
            fixed(mib, 1)
        )),
        None => html.push_str("<p>The disk was not measured (no fio).</p>\n"),
    }
    if summary.limits.is_empty() {
        html.push_str("<p>No emulated limits: every OSD had the machine's own hardware.</p>\n");
        return html;
    }
    html.push_str(&format!(
        "<p>Emulated per OSD (cgroups), per host link (tc) or for the whole machine (CPU \
         hot-plug), each checked before any point ran. {}</p>\n",
        escape("Limits not listed were not applied.")
    ));
    let rows: Vec<Vec<String>> = summary
        .limits
        .iter()
        .flat_map(|set| {
            set.checks.iter().map(|c| {
                vec![
                    set.points.join(", "),
                    c.limit.clone(),
                    c.value.clone(),
                    c.mechanism.clone(),
                    c.checked.clone(),
                ]
            })
        })
        .collect();
    html.push_str(&html_table(
        &["points", "limit", "value", "how", "checked"],
        &rows,
    ));
    html
}

/// The columns of [`figure_rows`].
const FIGURE_HEADERS: [&str; 7] = [
    "point",
    "phase",
    "median MiB/s",
    "min",
    "max",
    "median IOPS",
    "p99 ms",
];

/// Every point's phases, a row each, for the report's table and the
/// printed one.
fn figure_rows(summary: &Summary) -> Vec<Vec<String>> {
    summary
        .points
        .iter()
        .flat_map(|p| {
            p.phases.iter().map(|s| {
                vec![
                    p.label.clone(),
                    match s.median_score {
                        Some(score) => format!("{} {}", s.phase, fixed(score, 2)),
                        None => s.phase.clone(),
                    },
                    fixed(s.median_mib_per_sec, 1),
                    fixed(s.min_mib_per_sec, 1),
                    fixed(s.max_mib_per_sec, 1),
                    fixed(s.median_iops, 0),
                    // rados bench and the file workloads report no p99.
                    if s.median_latency_p99_secs > 0.0 {
                        fixed(s.median_latency_p99_secs * 1000.0, 1)
                    } else {
                        "-".into()
                    },
                ]
            })
        })
        .collect()
}

fn print_summary(summary: &Summary) {
    println!("{}", summary.plan.name);
    println!("{}", table(&FIGURE_HEADERS, figure_rows(summary)));
    println!(
        "{} repeats run, {} found done from an earlier run",
        summary.ran, summary.resumed
    );
}

/// The progress line on stderr: the repeat running and the time left.
struct Progress {
    enabled: bool,
    total: usize,
    finished: usize,
    /// Time of the repeats run now (the estimate of those left).
    spent: Duration,
    ran: usize,
}

impl Progress {
    fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            enabled,
            total,
            finished: 0,
            spent: Duration::ZERO,
            ran: 0,
        }
    }

    fn skipped(&mut self) {
        self.finished += 1;
    }

    fn starting(&self, label: &str) {
        if !self.enabled {
            return;
        }
        let left = if self.ran == 0 {
            "time left unknown".to_owned()
        } else {
            let each = self.spent / u32::try_from(self.ran).unwrap_or(u32::MAX);
            let remaining = each * u32::try_from(self.total - self.finished).unwrap_or(u32::MAX);
            format!("about {} s left", remaining.as_secs())
        };
        let line = format!("[{}/{}] {label} ({left})", self.finished + 1, self.total);
        if std::io::stderr().is_terminal() {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    }

    fn done(&mut self, took: Duration) {
        self.finished += 1;
        self.ran += 1;
        self.spent += took;
    }

    fn clear(&self) {
        if self.enabled && std::io::stderr().is_terminal() {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
name = "pg count against OSD count"
repeats = 2
[cluster]
size = 1
[matrix]
pg_num = [8, 16]
osds = [1, 2]
[workload]
kind = "object"
phases = ["write", "rand"]
duration = "1s"
"#;

    #[test]
    fn a_matrix_is_every_combination_of_its_values() {
        let checked = check(PLAN).expect("a good plan");
        let labels: Vec<String> = checked
            .points
            .iter()
            .map(|p| p.label(&checked.swept))
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
        assert!(checked.points.iter().all(|p| p.size == Some(1)));
    }

    fn refused(plan: &str) -> String {
        match check(plan) {
            Ok(_) => panic!("accepted: {plan}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_plans_are_refused_with_what_is_wrong() {
        let unknown = refused(&PLAN.replace("size = 1", "sise = 1"));
        assert!(unknown.contains("\"sise\""), "{unknown}");
        let unknown_top = refused(&format!("colour = 1\n{PLAN}"));
        assert!(unknown_top.contains("colour"), "{unknown_top}");
        let impossible = refused(&PLAN.replace("size = 1", "size = 2"));
        assert!(
            impossible.contains("impossible") && impossible.contains("osds=1"),
            "{impossible}"
        );
        let wide = refused(&PLAN.replace("size = 1", "erasure = \"2+1\""));
        assert!(wide.contains("impossible"), "{wide}");
        let read_first = refused(&PLAN.replace("[\"write\", \"rand\"]", "[\"rand\"]"));
        assert!(read_first.contains("reads what a write"), "{read_first}");
        let empty = refused(&PLAN.replace("[1, 2]", "[]"));
        assert!(empty.contains("no values"), "{empty}");
        let kind = refused(&PLAN.replace("\"object\"", "\"tape\""));
        assert!(kind.contains("tape"), "{kind}");
        let via = refused(&PLAN.replace("duration = \"1s\"", "duration = \"1s\"\nvia = \"s3\""));
        assert!(via.contains("via is for kind io500"), "{via}");
        let hosts = refused(&PLAN.replace("size = 1", "size = 1\nhosts = 3"));
        assert!(
            hosts.contains("hosts = 3") && hosts.contains("osds=1"),
            "{hosts}"
        );
        let rate = refused(&PLAN.replace("size = 1", "size = 1\nnet_rate = \"1gbit\""));
        assert!(rate.contains("give hosts"), "{rate}");
        let no_cpu = refused(&PLAN.replace("size = 1", "size = 1\nonline_cpus = 0"));
        assert!(
            no_cpu.contains("online_cpus must be more than 0"),
            "{no_cpu}"
        );
        let cores = refused(&PLAN.replace("size = 1", "size = 1\nonline_cpus = 1\ncores = 2"));
        assert!(
            cores.contains("cores = 2") && cores.contains("online_cpus = 1"),
            "{cores}"
        );
        let idle = PLAN.replace("[\"write\", \"rand\"]", "[\"write\", \"idle\"]");
        let lonely = refused(&idle);
        assert!(
            lonely.contains("give a [[failure]] with phase = \"idle\""),
            "{lonely}"
        );
        let kill = "\n[[failure]]\nphase = \"idle\"\nat = \"0s\"\naction = \"kill\"\nosd = 0\n";
        assert!(check(&format!("{idle}{kill}")).is_ok());
        let first = refused(&format!(
            "{}{kill}",
            PLAN.replace("[\"write\", \"rand\"]", "[\"idle\"]")
        ));
        assert!(
            first.contains("recovery of what a write before it wrote"),
            "{first}"
        );
    }

    #[test]
    fn limits_per_host_make_one_group_per_host() {
        let plan = PLAN.replace("size = 1", "size = 1\nmemory = \"1G\"");
        let per_osd = check(&plan).expect("a good plan");
        let point = per_osd.points.last().expect("a point");
        assert_eq!((point.group_count(), point.group_of(1)), (2, 1));
        let hosts = plan
            .replace("osds = [1, 2]", "osds = [4]")
            .replace("size = 1", "size = 1\nhosts = 2\nlimits_per = \"host\"");
        let per_host = check(&hosts).expect("a good plan");
        let point = &per_host.points[0];
        assert_eq!(point.group_count(), 2);
        let groups: Vec<usize> = (0..4).map(|i| point.group_of(i)).collect();
        assert_eq!(groups, [0, 1, 0, 1], "OSD N on host N mod 2");
        let machine = crate::bench_report::Machine::here();
        let r = resources(point, &machine, None);
        assert_eq!(r.memory_bytes, 2 << 30, "two hosts' memory");
        let no_hosts = refused(&plan.replace("size = 1", "size = 1\nlimits_per = \"host\""));
        assert!(no_hosts.contains("give hosts"), "{no_hosts}");
        let rack = refused(&hosts.replace("\"host\"", "\"rack\""));
        assert!(rack.contains("\"osd\" or \"host\""), "{rack}");
    }

    #[test]
    fn every_shipped_plan_is_valid_and_says_what_it_mirrors() {
        // As cargo runs the test: a binary built in another clone reads
        // this one's plans.
        let dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
            .join("plans");
        let mut plans = 0;
        for entry in std::fs::read_dir(&dir).expect("plans/") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("a plan");
            let checked = check(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                checked
                    .plan
                    .mirrors
                    .as_deref()
                    .is_some_and(|m| m.len() > 40),
                "{}: mirrors",
                path.display()
            );
            plans += 1;
        }
        assert!(plans >= 7, "{plans} plans");
    }

    #[test]
    fn medians_take_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}

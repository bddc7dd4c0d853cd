//! Failures a plan injects into a phase under load, and what the client
//! and the cluster showed around them: the client's throughput and latency
//! each second (`cairn bench object --series`), the cluster's state every
//! half second (`cairn status --json`), the times of the actions and of
//! what followed (down, out, degraded, `active+clean`), and throughput
//! before, during and after.

use super::{Point, quiet};
use crate::bench_emulate::{Device, Group};
use crate::output::CliResult;
use crate::units::{parse_duration, parse_size};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A series line over less time than this is left out of the timeline
/// (the raw file keeps it).
const TICK_SECS_MIN: f64 = 0.5;
/// How often the cluster's state is read during a phase with failures.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The actions a failure may take.
pub(super) const ACTIONS: [&str; 9] = [
    "kill",
    "stop",
    "restart",
    "out",
    "in",
    "slow-disk",
    "restore-disk",
    "partition",
    "heal",
];

/// One failure of a plan (`[[failure]]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct Failure {
    /// The phase it happens in; the workload's first when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Time into the phase (e.g. "5s").
    pub at: String,
    /// `kill` (SIGKILL, held down), `stop` (SIGTERM, held down),
    /// `restart` (a held OSD runs again), `out`, `in`, `slow-disk` (its
    /// disk throttled to `bandwidth`), `restore-disk`; `partition` (a
    /// host's link cut: silence) and `heal` (joined again).
    pub action: String,
    /// The OSD: `cairn up`'s `osd.N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osd: Option<u32>,
    /// Or an emulated host (`hosts`): every OSD on it, or its link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<u32>,
    /// `slow-disk`'s bandwidth per second, read and write (e.g. "5M").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<String>,
}

impl Failure {
    /// Checks the failure against the workload; its time into the phase.
    pub(super) fn check(&self, phases: &[String], duration: Duration) -> Result<Duration, String> {
        if !ACTIONS.contains(&self.action.as_str()) {
            return Err(format!(
                "failure action {:?}: one of {}",
                self.action,
                ACTIONS.join(", ")
            ));
        }
        let of_links = matches!(self.action.as_str(), "partition" | "heal");
        let of_disks = matches!(self.action.as_str(), "slow-disk" | "restore-disk");
        match (self.osd, self.host) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(format!(
                    "failure {}: give osd or host, one of the two",
                    self.action
                ));
            }
            (Some(_), None) if of_links => {
                return Err(format!(
                    "failure {} cuts a host's link: give host (emulated hosts, network namespaces)",
                    self.action
                ));
            }
            (None, Some(_)) if of_disks => {
                return Err(format!(
                    "failure {} slows one OSD's disk: give osd",
                    self.action
                ));
            }
            _ => {}
        }
        if let Some(phase) = &self.phase
            && !phases.contains(phase)
        {
            return Err(format!("failure phase {phase:?} is not a workload phase"));
        }
        let at = parse_duration(&self.at).map_err(|e| format!("failure at: {e}"))?;
        if at >= duration {
            return Err(format!(
                "failure at {} is not within the phase ({} long)",
                self.at,
                humantime(duration)
            ));
        }
        match (&self.action[..], &self.bandwidth) {
            ("slow-disk", None) => return Err("failure slow-disk needs a bandwidth".into()),
            ("slow-disk", Some(b)) => {
                parse_size(b).map_err(|e| format!("failure bandwidth: {e}"))?;
            }
            (_, Some(_)) => return Err("failure bandwidth is for slow-disk".into()),
            _ => {}
        }
        Ok(at)
    }

    /// Checks the failure against a point's OSDs and hosts.
    pub(super) fn check_point(&self, point: &Point) -> Result<(), String> {
        if let Some(osd) = self.osd
            && osd >= point.osds
        {
            return Err(format!(
                "failure {} osd.{osd}: a point has only {} OSDs",
                self.action, point.osds
            ));
        }
        if let Some(host) = self.host {
            match point.hosts {
                None => {
                    return Err(format!(
                        "failure {} host{host}: a point has no emulated hosts (give hosts)",
                        self.action
                    ));
                }
                Some(hosts) if host >= hosts => {
                    return Err(format!(
                        "failure {} host{host}: a point has only {hosts} hosts",
                        self.action
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The `cairn up` OSD indices it acts on.
    fn osds(&self, point: &Point) -> Vec<u32> {
        match (self.osd, self.host, point.hosts) {
            (Some(osd), _, _) => vec![osd],
            (None, Some(host), Some(hosts)) => {
                (0..point.osds).filter(|i| i % hosts == host).collect()
            }
            _ => Vec::new(),
        }
    }

    pub(super) fn phase_or<'a>(&'a self, first: &'a str) -> &'a str {
        self.phase.as_deref().unwrap_or(first)
    }

    pub(super) fn describe(&self) -> String {
        let target = match (self.osd, self.host) {
            (Some(osd), _) => format!("osd.{osd}"),
            (None, Some(host)) => format!("host{host}"),
            (None, None) => "nothing".into(),
        };
        match &self.bandwidth {
            Some(b) => format!("{} {target} to {b}/s", self.action),
            None => format!("{} {target}", self.action),
        }
    }
}

fn humantime(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A moment of a phase: an action taken, or what the cluster showed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct Event {
    pub what: String,
    pub at_secs: f64,
}

/// The client's figures over one second.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct Tick {
    /// The end of the second (or shorter interval) it covers.
    pub elapsed_secs: f64,
    pub interval_secs: f64,
    pub mib_per_sec: f64,
    pub ops: u64,
    pub errors: u64,
    pub latency_avg_secs: f64,
}

/// The cluster's state at one poll.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct Poll {
    pub at_secs: f64,
    pub osds_up: u64,
    pub osds_in: u64,
    /// PGs in any state but `active+clean`.
    pub pgs_not_clean: u64,
    /// Objects some copy lacks.
    pub missing_objects: u64,
    pub clean: bool,
    /// Bytes the live OSDs' recovery has pushed, in total (their
    /// counters: one restarted starts again from 0).
    #[serde(default)]
    pub recovered_bytes: u64,
}

/// A phase with failures, as a sample keeps it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct Timeline {
    pub ticks: Vec<Tick>,
    pub polls: Vec<Poll>,
    /// The actions and what followed, in time order.
    pub events: Vec<Event>,
    /// First failure to the monitor showing an OSD down.
    pub detection_secs: Option<f64>,
    /// First failure to every PG `active+clean` again.
    pub clean_secs: Option<f64>,
    /// The clients' mean MiB/s before, during (to clean) and after; none
    /// for a workload that keeps no per-second series (the file ones).
    pub before_mib_per_sec: Option<f64>,
    pub during_mib_per_sec: Option<f64>,
    pub after_mib_per_sec: Option<f64>,
    /// Bytes recovery pushed from the first failure to clean, and over
    /// how long it pushed (the first poll that saw a push to the last,
    /// from the poll before it): recovery's MiB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_mib_per_sec: Option<f64>,
}

/// What a phase with failures runs on.
pub(super) struct Cluster<'a> {
    pub cairn: &'a Path,
    pub data: &'a Path,
    pub conf: &'a str,
    pub base_port: u16,
    pub point: &'a Point,
    /// Each OSD's group (emulated limits, a disk slowed).
    pub groups: &'a Arc<Mutex<Vec<Group>>>,
    pub disk: Option<Device>,
    /// How long to wait for `active+clean` after the workload.
    pub clean_wait: Duration,
}

/// How long the clients may take to start their clocks (a launcher
/// starting its copies, each connecting) before the failures' clock
/// starts anyway.
const START_WAIT: Duration = Duration::from_secs(60);

/// Runs `load` (the phase's clients, each writing a `--series` file of
/// `series` as its clock starts; a file workload keeps none, and its
/// clock is the load's start) while taking `failures` at their times from
/// that start and polling the cluster; what the load answered and the
/// timeline, with the clients' per-second figures added up.
pub(super) fn run<T: Send>(
    cluster: &Cluster<'_>,
    load: impl FnOnce() -> Result<T, String> + Send,
    series: &[PathBuf],
    failures: &[(Duration, Failure)],
) -> CliResult<(T, Timeline)> {
    for file in series {
        drop(std::fs::remove_file(file));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(Mutex::new(Vec::new()));
    let launched = Instant::now();
    let poller = {
        let (stop, polls) = (stop.clone(), polls.clone());
        let (cairn, conf) = (cluster.cairn.to_path_buf(), cluster.conf.to_owned());
        std::thread::spawn(move || poll_until(&cairn, &conf, launched, &stop, &polls))
    };
    let (report, events, acted, started) = std::thread::scope(|scope| {
        let load = scope.spawn(load);
        // The clients' clocks start once each made its series file.
        while !series.iter().all(|f| f.exists())
            && !load.is_finished()
            && launched.elapsed() < START_WAIT
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let started = Instant::now();
        let mut events = Vec::new();
        let mut acted = Ok(());
        for (at, failure) in failures {
            std::thread::sleep(at.saturating_sub(started.elapsed()));
            let at_secs = started.elapsed().as_secs_f64();
            acted = act(cluster, failure).map_err(|e| format!("{}: {e}", failure.describe()));
            if acted.is_err() {
                break;
            }
            events.push(Event {
                what: failure.describe(),
                at_secs,
            });
        }
        let report = load
            .join()
            .unwrap_or_else(|_| Err("the clients' thread panicked".into()));
        (report, events, acted, started)
    });
    let ended_secs = launched.elapsed().as_secs_f64();
    // The cluster is watched on after the load until it is clean again.
    let deadline = Instant::now() + cluster.clean_wait;
    while acted.is_ok() && Instant::now() < deadline && !settled(&polls, ended_secs) {
        std::thread::sleep(POLL_INTERVAL);
    }
    stop.store(true, Ordering::Relaxed);
    drop(poller.join());
    acted?;
    let report = report.map_err(|e| format!("the clients failed: {e}"))?;
    let mut per_client = Vec::with_capacity(series.len());
    for file in series {
        per_client.push(read_series(file)?);
    }
    // Polls on the clients' clock.
    let shift = started.duration_since(launched).as_secs_f64();
    let polls = polls
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|p| Poll {
            at_secs: p.at_secs - shift,
            ..p
        })
        .collect();
    Ok((report, timeline(add_series(per_client), polls, events)))
}

/// The clients' series added up, second by second (their clocks started
/// together): rates, operations and errors summed, latency averaged over
/// the operations.
fn add_series(mut per_client: Vec<Vec<Tick>>) -> Vec<Tick> {
    if per_client.len() <= 1 {
        return per_client.pop().unwrap_or_default();
    }
    let longest = per_client.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .map(|i| {
            let ticks: Vec<&Tick> = per_client.iter().filter_map(|c| c.get(i)).collect();
            let ops: u64 = ticks.iter().map(|t| t.ops).sum();
            let weighted: f64 = ticks
                .iter()
                .map(|t| t.latency_avg_secs * t.ops as f64)
                .sum();
            Tick {
                elapsed_secs: ticks.iter().map(|t| t.elapsed_secs).fold(0.0, f64::max),
                interval_secs: ticks.iter().map(|t| t.interval_secs).sum::<f64>()
                    / ticks.len() as f64,
                mib_per_sec: ticks.iter().map(|t| t.mib_per_sec).sum(),
                ops,
                errors: ticks.iter().map(|t| t.errors).sum(),
                latency_avg_secs: if ops == 0 { 0.0 } else { weighted / ops as f64 },
            }
        })
        .collect()
}

/// Whether a poll after `after_secs` found the cluster clean.
fn settled(polls: &Mutex<Vec<Poll>>, after_secs: f64) -> bool {
    polls
        .lock()
        .map(|p| p.iter().any(|p| p.at_secs >= after_secs && p.clean))
        .unwrap_or(true)
}

fn poll_until(
    cairn: &Path,
    conf: &str,
    started: Instant,
    stop: &AtomicBool,
    polls: &Mutex<Vec<Poll>>,
) {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let begin = started.elapsed().as_secs_f64();
        if let Ok(out) = quiet(cairn, &["status", "--json", "--conf", conf])
            && let Ok(status) = serde_json::from_slice::<serde_json::Value>(&out)
        {
            // The status describes the moment between asking and the answer.
            let at_secs = f64::midpoint(begin, started.elapsed().as_secs_f64());
            if let Ok(mut polls) = polls.lock() {
                polls.push(poll_of(&status, at_secs));
            }
        }
        next += POLL_INTERVAL;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next = next.max(Instant::now());
    }
}

/// One `cairn status --json` as a poll.
fn poll_of(status: &serde_json::Value, at_secs: f64) -> Poll {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let states = status["pgs_by_state"].as_object();
    let clean_pgs = states.and_then(|s| s.get("active+clean")).map_or(0, n);
    let pgs = n(&status["pg_count"]);
    let missing_objects = n(&status["recovery"]["missing_objects"]);
    let clean = pgs > 0
        && clean_pgs == pgs
        && states.is_some_and(|s| s.len() == 1)
        && n(&status["reported_epoch"]) >= n(&status["epoch"])
        && missing_objects == 0
        && n(&status["recovery"]["backfill_targets"]) == 0;
    Poll {
        at_secs,
        osds_up: n(&status["osds_up"]),
        osds_in: n(&status["osds_in"]),
        pgs_not_clean: pgs.saturating_sub(clean_pgs),
        missing_objects,
        clean,
        recovered_bytes: n(&status["recovery"]["recovered_bytes"]),
    }
}

/// Takes one action on the cluster.
fn act(cluster: &Cluster<'_>, failure: &Failure) -> CliResult {
    if let ("partition" | "heal", Some(host)) = (failure.action.as_str(), failure.host) {
        let layout = crate::netemu::Layout::load(cluster.data)?;
        return Ok(layout.cut(host, failure.action == "partition")?);
    }
    for osd in failure.osds(cluster.point) {
        act_on(cluster, failure, osd)?;
    }
    Ok(())
}

/// Takes one action on `osd.INDEX`.
fn act_on(cluster: &Cluster<'_>, failure: &Failure, index: u32) -> CliResult {
    let name = format!("osd.{index}");
    let data = cluster.data.display().to_string();
    match failure.action.as_str() {
        "kill" => quiet(
            cluster.cairn,
            &["daemon", "stop", "--kill", &name, "--data", &data],
        )
        .map(drop),
        "stop" => quiet(cluster.cairn, &["daemon", "stop", &name, "--data", &data]).map(drop),
        "restart" => quiet(cluster.cairn, &["daemon", "start", &name, "--data", &data]).map(drop),
        "out" | "in" => {
            let id = osd_id(cluster, index)?.to_string();
            quiet(
                cluster.cairn,
                &["osd", &failure.action, &id, "--conf", cluster.conf],
            )
            .map(drop)
        }
        "slow-disk" | "restore-disk" => {
            let disk = cluster.disk.ok_or("no disk to throttle")?;
            let bytes = match &failure.bandwidth {
                Some(b) => Some(parse_size(b)?),
                None => None,
            };
            let mut groups = cluster.groups.lock().map_err(|_| "groups poisoned")?;
            // The OSD's own group, or its host's (`limits_per = "host"`).
            let group = groups
                .get_mut(cluster.point.group_of(index))
                .ok_or_else(|| format!("no group for {name}"))?;
            group.set_disk(bytes, disk).map_err(Into::into)
        }
        other => Err(format!("unknown action {other:?}").into()),
    }
}

/// The monitor's id of `cairn up`'s `osd.INDEX`, by its port (ids follow
/// boot order, not the index).
fn osd_id(cluster: &Cluster<'_>, index: u32) -> CliResult<u64> {
    let out = quiet(
        cluster.cairn,
        &["osd", "tree", "--json", "--conf", cluster.conf],
    )?;
    let tree: serde_json::Value = serde_json::from_slice(&out)?;
    let port = u32::from(cluster.base_port) + 1 + index;
    let suffix = format!(":{port}");
    for rack in tree["racks"].as_array().into_iter().flatten() {
        for host in rack["hosts"].as_array().into_iter().flatten() {
            for osd in host["osds"].as_array().into_iter().flatten() {
                if osd["addr"].as_str().is_some_and(|a| a.ends_with(&suffix)) {
                    return osd["id"]
                        .as_u64()
                        .ok_or_else(|| "an OSD without an id".into());
                }
            }
        }
    }
    Err(format!(
        "osd.{index} is not in the map ({} OSDs)",
        cluster.point.osds
    )
    .into())
}

/// The bench's `--series` CSV.
fn read_series(path: &Path) -> CliResult<Vec<Tick>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let (elapsed, interval, mib, ops, errors, latency) = (
        column("elapsed_secs"),
        column("interval_secs"),
        column("mib_per_sec"),
        column("ops"),
        column("errors"),
        column("latency_avg_secs"),
    );
    let mut ticks = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let f = |at: Option<usize>| -> f64 {
            at.and_then(|i| fields.get(i))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        // The last line covers the moments after the phase while the last
        // operations finish: a few of them over a few milliseconds would
        // read as a burst the client never ran at.
        if f(interval) < TICK_SECS_MIN {
            continue;
        }
        ticks.push(Tick {
            elapsed_secs: f(elapsed),
            interval_secs: f(interval),
            mib_per_sec: f(mib),
            ops: f(ops) as u64,
            errors: f(errors) as u64,
            latency_avg_secs: f(latency),
        });
    }
    Ok(ticks)
}

/// The events the polls show after the actions, and the figures around
/// them.
fn timeline(ticks: Vec<Tick>, polls: Vec<Poll>, mut events: Vec<Event>) -> Timeline {
    let first = events.first().map_or(f64::INFINITY, |e| e.at_secs);
    let last = events.last().map_or(f64::INFINITY, |e| e.at_secs);
    let before: Vec<&Poll> = polls.iter().filter(|p| p.at_secs < first).collect();
    let up_before = before.iter().map(|p| p.osds_up).max().unwrap_or(0);
    let in_before = before.iter().map(|p| p.osds_in).max().unwrap_or(0);
    let after_first = || polls.iter().filter(|p| p.at_secs >= first);
    let down = after_first().find(|p| p.osds_up < up_before);
    let out = after_first().find(|p| p.osds_in < in_before);
    let degraded = after_first().find(|p| !p.clean);
    // Clean again: after the last action and after the cluster was seen
    // not clean (a failure it never noticed has no recovery to time).
    let clean = degraded.and_then(|d| {
        polls
            .iter()
            .find(|p| p.at_secs > d.at_secs && p.at_secs >= last && p.clean)
    });
    for (what, poll) in [
        ("down in the map", down),
        ("out of the map", out),
        ("degraded", degraded),
        ("active+clean", clean),
    ] {
        if let Some(p) = poll {
            events.push(Event {
                what: what.into(),
                at_secs: p.at_secs,
            });
        }
    }
    events.sort_by(|a, b| a.at_secs.total_cmp(&b.at_secs));
    let clean_at = clean.map(|p| p.at_secs);
    let mean = |from: f64, to: f64| -> f64 {
        // A tick counts where the middle of the interval it covers falls.
        let inside: Vec<f64> = ticks
            .iter()
            .map(|t| (t.elapsed_secs - t.interval_secs / 2.0, t))
            .filter(|(middle, _)| *middle > from && *middle <= to)
            .map(|(_, t)| t)
            .map(|t| t.mib_per_sec)
            .collect();
        if inside.is_empty() {
            0.0
        } else {
            inside.iter().sum::<f64>() / inside.len() as f64
        }
    };
    let end = ticks.last().map_or(0.0, |t| t.elapsed_secs);
    let series = !ticks.is_empty();
    let pushed = clean_at.and_then(|c| recovery_push(&polls, first, c));
    Timeline {
        recovered_bytes: pushed.map(|(bytes, _)| bytes),
        recovery_mib_per_sec: pushed.map(|(bytes, secs)| bytes as f64 / 1_048_576.0 / secs),
        before_mib_per_sec: series.then(|| mean(0.0, first.min(end))),
        during_mib_per_sec: series.then(|| mean(first, clean_at.unwrap_or(end))),
        after_mib_per_sec: series.then(|| clean_at.map_or(0.0, |c| mean(c, end))),
        detection_secs: down.map(|p| p.at_secs - first),
        clean_secs: clean_at.map(|c| c - first),
        ticks,
        polls,
        events,
    }
}

/// What recovery pushed from `from` (the first failure) to `clean`:
/// bytes, and the seconds from the last poll before the first push to the
/// poll that saw the last (half a second at least). The counters' growth
/// between polls is added up: a counter that falls (an OSD gone from the
/// sum, or restarted from 0) adds nothing. `None` if nothing was pushed.
fn recovery_push(polls: &[Poll], from: f64, clean: f64) -> Option<(u64, f64)> {
    // The poll before the failure is the base; the window ends at the
    // first poll that saw the cluster clean.
    let start = polls.iter().rposition(|p| p.at_secs < from)?;
    let end = polls.iter().position(|p| p.at_secs >= clean)?;
    if end <= start {
        return None;
    }
    let window = &polls[start..=end];
    let mut bytes = 0u64;
    let (mut first, mut last) = (None, None);
    for (i, pair) in window.windows(2).enumerate() {
        let grew = pair[1]
            .recovered_bytes
            .saturating_sub(pair[0].recovered_bytes);
        if grew > 0 {
            bytes += grew;
            first.get_or_insert(i);
            last = Some(i + 1);
        }
    }
    let (first, last) = (first?, last?);
    let secs = (window[last].at_secs - window[first].at_secs).max(0.5);
    Some((bytes, secs))
}

/// The raw series file of a phase of a sample; with several clients,
/// one per client (`-cRANK`, `{rank}` for the clients to fill in).
pub(super) fn series_file(
    points_dir: &Path,
    index: usize,
    repeat: u32,
    phase: &str,
    client: Option<&str>,
) -> PathBuf {
    match client {
        None => points_dir.join(format!("p{index:04}-r{repeat:03}-{phase}.csv")),
        Some(rank) => points_dir.join(format!("p{index:04}-r{repeat:03}-{phase}-c{rank}.csv")),
    }
}

/// Failures of the plan grouped by phase, with their times, in time order.
pub(super) fn by_phase(
    failures: &[Failure],
    phases: &[String],
    duration: Duration,
) -> Result<BTreeMap<String, Vec<(Duration, Failure)>>, String> {
    let first = phases.first().map(String::as_str).unwrap_or("write");
    let mut map: BTreeMap<String, Vec<(Duration, Failure)>> = BTreeMap::new();
    for failure in failures {
        let at = failure.check(phases, duration)?;
        map.entry(failure.phase_or(first).to_owned())
            .or_default()
            .push((at, failure.clone()));
    }
    for list in map.values_mut() {
        list.sort_by_key(|(at, _)| *at);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(at_secs: f64, osds_up: u64, clean: bool) -> Poll {
        Poll {
            at_secs,
            osds_up,
            osds_in: 3,
            pgs_not_clean: u64::from(!clean) * 4,
            missing_objects: 0,
            clean,
            recovered_bytes: 0,
        }
    }

    fn tick(elapsed_secs: f64, mib_per_sec: f64) -> Tick {
        Tick {
            elapsed_secs,
            interval_secs: 1.0,
            mib_per_sec,
            ops: 1,
            errors: 0,
            latency_avg_secs: 0.01,
        }
    }

    #[test]
    fn a_timeline_times_detection_and_recovery_from_the_first_failure() {
        let ticks = (1..=10)
            .map(|s| {
                tick(
                    f64::from(s),
                    if (4..=7).contains(&s) { 50.0 } else { 100.0 },
                )
            })
            .collect();
        let polls = vec![
            poll(1.0, 3, true),
            poll(2.0, 3, true),
            poll(3.0, 2, false),
            poll(4.0, 2, false),
            poll(5.0, 3, false),
            poll(6.5, 3, true),
            poll(9.0, 3, true),
        ];
        let events = vec![
            Event {
                what: "kill osd.1".into(),
                at_secs: 2.5,
            },
            Event {
                what: "restart osd.1".into(),
                at_secs: 4.5,
            },
        ];
        let t = timeline(ticks, polls, events);
        assert_eq!(t.detection_secs, Some(0.5));
        assert_eq!(t.clean_secs, Some(4.0));
        assert_eq!(t.before_mib_per_sec, Some(100.0));
        // Ticks whose seconds' middles fall from 2.5 to 6.5 s: 50 each.
        assert_eq!(t.during_mib_per_sec, Some(50.0));
        assert_eq!(t.after_mib_per_sec, Some(100.0));
        let whats: Vec<&str> = t.events.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "kill osd.1",
                "down in the map",
                "degraded",
                "restart osd.1",
                "active+clean"
            ]
        );
    }

    #[test]
    fn recovery_is_timed_over_the_polls_that_saw_it_push() {
        let at = |at_secs: f64, recovered_bytes: u64, clean: bool| Poll {
            recovered_bytes,
            ..poll(at_secs, 3, clean)
        };
        let mib = 1_048_576;
        let polls = vec![
            at(0.0, 5 * mib, true),
            // The failure at 1.0; the killed OSD's 5 MiB leave the sum.
            at(1.5, 0, false),
            at(2.0, 0, false),
            at(3.0, 10 * mib, false),
            at(4.0, 30 * mib, false),
            at(5.0, 40 * mib, false),
            at(6.0, 40 * mib, true),
            at(7.0, 45 * mib, true),
        ];
        // Pushed from 2.0 (the poll before the first growth) to 5.0.
        let (bytes, secs) = recovery_push(&polls, 1.0, 6.0).expect("pushed");
        assert_eq!(bytes, 40 * mib);
        assert_eq!(secs, 3.0);
        let events = vec![Event {
            what: "kill osd.1".into(),
            at_secs: 1.0,
        }];
        let t = timeline(Vec::new(), polls.clone(), events);
        assert_eq!(t.clean_secs, Some(5.0));
        assert_eq!(t.recovered_bytes, Some(40 * mib));
        assert!((t.recovery_mib_per_sec.expect("a rate") - 40.0 / 3.0).abs() < 1e-9);
        // Nothing pushed: no rate.
        let still: Vec<Poll> = polls.iter().map(|p| at(p.at_secs, 0, p.clean)).collect();
        assert_eq!(recovery_push(&still, 1.0, 6.0), None);
        // Never clean: no window.
        assert_eq!(recovery_push(&polls, 1.0, 99.0), None);
    }

    #[test]
    fn a_short_last_line_of_the_series_is_left_out() {
        let dir = std::env::temp_dir().join(format!("cairn-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("s.csv");
        std::fs::write(
            &file,
            "unix_time_secs,elapsed_secs,interval_secs,mib_per_sec,ops,errors,in_flight,latency_avg_secs\n\
             1.0,1.000,1.000,500.00,125,0,16,0.0300\n\
             1.1,1.060,0.060,3674.00,55,0,0,0.0400\n",
        )
        .expect("write");
        let ticks = read_series(&file).expect("read");
        drop(std::fs::remove_dir_all(&dir));
        assert_eq!(ticks.len(), 1);
        assert_eq!(ticks[0].mib_per_sec, 500.0);
    }

    #[test]
    fn a_failure_the_cluster_never_noticed_has_no_recovery() {
        let ticks = vec![tick(1.0, 10.0), tick(2.0, 10.0)];
        let polls = vec![poll(0.5, 3, true), poll(1.5, 3, true)];
        let events = vec![Event {
            what: "slow-disk osd.0 to 1M/s".into(),
            at_secs: 1.0,
        }];
        let t = timeline(ticks, polls, events);
        assert_eq!((t.detection_secs, t.clean_secs), (None, None));
        assert_eq!(t.events.len(), 1);
    }

    #[test]
    fn failures_are_checked_against_the_workload() {
        let phases = vec!["write".to_owned(), "rand".to_owned()];
        let f = |action: &str, at: &str, bandwidth: Option<&str>| Failure {
            phase: None,
            at: at.into(),
            action: action.into(),
            osd: Some(0),
            host: None,
            bandwidth: bandwidth.map(Into::into),
        };
        let ten = Duration::from_secs(10);
        assert_eq!(
            f("kill", "2s", None).check(&phases, ten),
            Ok(Duration::from_secs(2))
        );
        assert!(
            f("kill", "12s", None)
                .check(&phases, ten)
                .expect_err("refused")
                .contains("within")
        );
        assert!(
            f("explode", "1s", None)
                .check(&phases, ten)
                .expect_err("refused")
                .contains("explode")
        );
        assert!(
            f("partition", "1s", None)
                .check(&phases, ten)
                .expect_err("refused")
                .contains("give host")
        );
        let cut = Failure {
            osd: None,
            host: Some(1),
            ..f("partition", "1s", None)
        };
        assert!(cut.check(&phases, ten).is_ok());
        let both = Failure {
            osd: Some(0),
            ..cut.clone()
        };
        assert!(
            both.check(&phases, ten)
                .expect_err("refused")
                .contains("one of the two")
        );
        let host_disk = Failure {
            host: Some(0),
            osd: None,
            ..f("slow-disk", "1s", Some("5M"))
        };
        assert!(
            host_disk
                .check(&phases, ten)
                .expect_err("refused")
                .contains("give osd")
        );
        assert!(
            f("slow-disk", "1s", None)
                .check(&phases, ten)
                .expect_err("refused")
                .contains("bandwidth")
        );
        assert!(f("slow-disk", "1s", Some("5M")).check(&phases, ten).is_ok());
        let mut other = f("kill", "1s", None);
        other.phase = Some("seq".into());
        assert!(
            other
                .check(&phases, ten)
                .expect_err("refused")
                .contains("seq")
        );
    }
}

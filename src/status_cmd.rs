//! `cairn status`: the cluster at a glance, like `ceph -s`: health with its
//! reasons, the monitor and map epoch, OSDs up/in, pools, PGs by state,
//! space used and available, and client I/O rates. The map comes from the
//! monitor; space, rates and PG states from the statistics OSDs send with
//! their heartbeats.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json};
use crate::pool_cmd::{PoolSummary, pool_summaries};
use crate::reports::{STATS_STALE_MS, current_pgs};
use cairn_placement::ClusterMap;
use cairn_proto::mon::{OsdStatsReport, PgStat};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;

/// Flags of `cairn status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Print JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Health {
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    status: &'static str,
    /// Why, most severe first.
    checks: Vec<String>,
    /// Per-PG detail behind the checks (inconsistent objects, why a PG does
    /// not serve).
    detail: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
struct Usage {
    /// Summed over reporting OSDs (OSDs sharing a file system each count
    /// it, as in Ceph).
    total_bytes: u64,
    used_bytes: u64,
    available_bytes: u64,
    /// Object data held (every replica counts).
    stored_bytes: u64,
}

#[derive(Debug, Default, Serialize)]
struct ClientIo {
    read_bytes_per_s: f64,
    write_bytes_per_s: f64,
    read_ops_per_s: f64,
    write_ops_per_s: f64,
}

#[derive(Debug, Serialize)]
struct Status {
    health: Health,
    monitor: String,
    epoch: u64,
    osds_total: usize,
    osds_up: usize,
    osds_in: usize,
    pools: Vec<PoolSummary>,
    pg_count: u64,
    /// PG count by state; `unknown` for PGs no live primary reported.
    pgs_by_state: BTreeMap<String, u64>,
    recovery: Recovery,
    scrub: ScrubSummary,
    /// PG copies each reporting OSD holds (strays included).
    osd_pgs: BTreeMap<u32, u32>,
    /// The oldest map epoch among the reporting OSDs: PG states describe
    /// the map of `epoch` only once this has caught up with it.
    reported_epoch: u64,
    usage: Usage,
    client_io: ClientIo,
    /// File systems and their metadata servers.
    fs: Vec<FsSummary>,
}

/// One file system's MDS daemons and client sessions.
#[derive(Debug, Default, Serialize)]
struct FsSummary {
    name: String,
    /// The active MDS (name at address).
    active: Option<String>,
    standbys: usize,
    sessions: u64,
    /// Recalls sent to clients and not yet acknowledged.
    recalls_pending: u64,
    /// Sessions evicted (the MDS remembers the last ones): who and why.
    evicted: Vec<String>,
    /// The active MDS's cache use and slow requests.
    mds: Option<cairn_proto::mds::MdsStatus>,
    /// The active MDS could not be asked.
    error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
struct Recovery {
    /// Objects some copy still lacks, over all PGs.
    missing_objects: u64,
    /// Copies being filled by backfill.
    backfill_targets: u64,
    /// Objects and bytes the OSDs pushed for recovery and backfill since
    /// they started.
    recovered_objects: u64,
    recovered_bytes: u64,
    /// Pushes per second now (between the OSDs' last two reports).
    objects_per_s: f64,
    bytes_per_s: f64,
    /// Estimated bytes still to push: missing objects at the mean size
    /// pushed so far, plus the unscanned share of each backfilling PG at
    /// the mean PG copy size (`None`: nothing to estimate from yet).
    remaining_bytes_estimate: Option<u64>,
    /// `remaining_bytes_estimate` at the current rate.
    eta_secs_estimate: Option<u64>,
}

/// Scrub activity and findings over all PGs.
#[derive(Debug, Default, Serialize)]
struct ScrubSummary {
    scrubbing: u64,
    deep_scrubbing: u64,
    /// PGs with inconsistent objects, and those objects.
    inconsistent_pgs: u64,
    inconsistent_objects: u64,
}

/// Flags of `cairn health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// `detail`: also the PGs and objects behind each check.
    #[arg(value_parser = ["detail"])]
    detail: Option<String>,
    #[arg(long)]
    json: bool,
}

fn fetch_status(conf: &ConfArgs) -> CliResult<Status> {
    let monitor = conf.load()?.mon;
    let (map, reports, fs) = runtime()?.block_on(async {
        let client = connect(conf).await?;
        let map = client.refresh_map().await?;
        let reports = client.osd_stats().await?;
        let fs = fs_summaries(&client).await;
        CliResult::Ok((map, reports, fs))
    })?;
    let mut status = summarize(&map, &reports, monitor);
    fs_health(&fs, &mut status.health);
    status.fs = fs;
    Ok(status)
}

/// Each file system's daemons, and its active MDS's sessions.
async fn fs_summaries(client: &cairn_client::Client) -> Vec<FsSummary> {
    let Ok(list) = crate::fs_cmd::fs_list(client).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for fs in list {
        let mut summary = FsSummary {
            name: fs.name.clone(),
            active: fs
                .active
                .as_ref()
                .map(|a| format!("{} at {}", a.name, a.addr)),
            standbys: fs.standbys.len(),
            ..FsSummary::default()
        };
        if fs.active.is_some() {
            match crate::fs_cmd::sessions(client, &fs.name).await {
                Ok(sessions) => {
                    for s in sessions {
                        match &s.evicted {
                            Some(why) => summary.evicted.push(format!(
                                "session {:x} ({}) evicted {}s ago: {why}",
                                s.id,
                                s.name,
                                s.idle_ms / 1000
                            )),
                            None => {
                                summary.sessions += 1;
                                summary.recalls_pending += s.recalls_pending;
                            }
                        }
                    }
                }
                Err(e) => summary.error = Some(e.to_string()),
            }
            match crate::fs_cmd::mds_status(client, &fs.name).await {
                Ok(status) => summary.mds = Some(status),
                Err(e) => summary.error = Some(e.to_string()),
            }
        }
        out.push(summary);
    }
    out
}

/// File-system checks: no active MDS, an MDS that does not answer,
/// evicted clients.
fn fs_health(list: &[FsSummary], health: &mut Health) {
    let mut warnings = Vec::new();
    for fs in list {
        if fs.active.is_none() {
            warnings.push(format!("file system {} has no active MDS", fs.name));
        }
        if let Some(e) = &fs.error {
            warnings.push(format!(
                "file system {}: the active MDS did not answer ({e})",
                fs.name
            ));
        }
        if let Some(mds) = fs.mds.as_ref().filter(|m| m.slow_now > 0) {
            let oldest = mds.slow.first().map_or(0, |r| r.age_ms / 1000);
            warnings.push(format!(
                "file system {}: {} slow MDS request(s), the oldest {oldest}s (`cairn health detail`)",
                fs.name, mds.slow_now
            ));
            health.detail.extend(mds.slow.iter().map(|r| {
                format!(
                    "slow request on {}: {} from session {:x}, in flight {}s (past {}s)",
                    fs.name,
                    r.op,
                    r.session,
                    r.age_ms / 1000,
                    mds.complaint_ms / 1000
                )
            }));
        }
        if !fs.evicted.is_empty() {
            warnings.push(format!(
                "file system {}: {} client session(s) evicted (`cairn health detail`)",
                fs.name,
                fs.evicted.len()
            ));
            health.detail.extend(fs.evicted.iter().cloned());
        }
    }
    if !warnings.is_empty() && health.status == "HEALTH_OK" {
        health.status = "HEALTH_WARN";
    }
    health.checks.extend(warnings);
}

pub fn run_health(args: HealthArgs) -> CliResult {
    let mut health = fetch_status(&args.conf)?.health;
    if args.detail.is_none() {
        health.detail.clear();
    }
    if args.json {
        return print_json(&health);
    }
    println!("{}", health.status);
    for check in &health.checks {
        println!("    {check}");
    }
    for line in &health.detail {
        println!("  {line}");
    }
    Ok(())
}

pub fn run_status(args: StatusArgs) -> CliResult {
    let status = fetch_status(&args.conf)?;
    if args.json {
        return print_json(&status);
    }
    print_status(&status);
    Ok(())
}

fn summarize(map: &ClusterMap, reports: &[OsdStatsReport], monitor: String) -> Status {
    let up: BTreeMap<_, _> = map.osds.iter().map(|o| (o.id, o.up)).collect();
    let live: Vec<&OsdStatsReport> = reports
        .iter()
        .filter(|r| r.age_ms <= STATS_STALE_MS && up.get(&r.osd).copied().unwrap_or(false))
        .collect();
    let failed: Vec<&OsdStatsReport> = reports
        .iter()
        .filter(|r| r.age_ms <= STATS_STALE_MS && r.stats.store_error.is_some())
        .collect();
    let pg_count: u64 = map.pools.iter().map(|p| u64::from(p.pg_num)).sum();
    let mut pgs_by_state = BTreeMap::new();
    let mut recovery = Recovery::default();
    let mut scrub = ScrubSummary::default();
    let pgs = current_pgs(map, reports);
    let reported = pgs.len() as u64;
    // Unscanned shares of backfilling PGs, times their targets.
    let mut backfill_left = 0.0f64;
    for pg in &pgs {
        *pgs_by_state.entry(pg.state.clone()).or_insert(0) += 1;
        recovery.missing_objects += pg.missing_objects;
        recovery.backfill_targets += u64::from(pg.backfill_targets);
        if let Some(permille) = pg.backfill_permille {
            backfill_left += f64::from(1000u32.saturating_sub(permille)) / 1000.0
                * f64::from(pg.backfill_targets);
        }
        match pg.scrubbing.as_deref() {
            Some("deep-scrub") => scrub.deep_scrubbing += 1,
            Some(_) => scrub.scrubbing += 1,
            None => {}
        }
        if pg.inconsistent_objects > 0 {
            scrub.inconsistent_pgs += 1;
            scrub.inconsistent_objects += pg.inconsistent_objects;
        }
    }
    let mut usage = Usage::default();
    let mut io = ClientIo::default();
    for report in &live {
        recovery.recovered_objects += report.stats.recovered_objects;
        recovery.recovered_bytes += report.stats.recovered_bytes;
        usage.total_bytes += report.stats.total_bytes;
        usage.used_bytes += report.stats.used_bytes;
        usage.available_bytes += report.stats.available_bytes;
        usage.stored_bytes += report.stats.stored_bytes;
        io.read_bytes_per_s += report.rates.read_bytes_per_s;
        io.write_bytes_per_s += report.rates.write_bytes_per_s;
        io.read_ops_per_s += report.rates.read_ops_per_s;
        io.write_ops_per_s += report.rates.write_ops_per_s;
        recovery.objects_per_s += report.rates.recovery_objects_per_s;
        recovery.bytes_per_s += report.rates.recovery_bytes_per_s;
    }
    estimate_remaining(&mut recovery, &live, backfill_left);
    if pg_count > reported {
        pgs_by_state.insert("unknown".into(), pg_count - reported);
    }
    Status {
        health: health(map, &live, &failed, &pgs_by_state, &pgs),
        monitor,
        epoch: map.epoch.0,
        osds_total: map.osds.len(),
        osds_up: map.osds.iter().filter(|o| o.up).count(),
        osds_in: map.osds.iter().filter(|o| o.is_in).count(),
        pools: pool_summaries(map, reports),
        pg_count,
        pgs_by_state,
        recovery,
        scrub,
        osd_pgs: live.iter().map(|r| (r.osd.0, r.stats.pgs_held)).collect(),
        reported_epoch: live.iter().map(|r| r.stats.map_epoch).min().unwrap_or(0),
        usage,
        client_io: io,
        fs: Vec::new(),
    }
}

/// Fills in the remaining bytes and time of recovery, where the figures
/// allow an estimate.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
fn estimate_remaining(recovery: &mut Recovery, live: &[&OsdStatsReport], backfill_left: f64) {
    let mut remaining = 0.0f64;
    let mut known = true;
    if recovery.missing_objects > 0 {
        if recovery.recovered_objects > 0 {
            let mean_object = recovery.recovered_bytes as f64 / recovery.recovered_objects as f64;
            remaining += recovery.missing_objects as f64 * mean_object;
        } else {
            known = false;
        }
    }
    if backfill_left > 0.0 {
        let stored: u64 = live.iter().map(|r| r.stats.stored_bytes).sum();
        let copies: u64 = live.iter().map(|r| u64::from(r.stats.pgs_held)).sum();
        if copies > 0 {
            remaining += backfill_left * stored as f64 / copies as f64;
        } else {
            known = false;
        }
    }
    if recovery.missing_objects == 0 && backfill_left == 0.0 {
        return;
    }
    if known {
        recovery.remaining_bytes_estimate = Some(remaining as u64);
        if recovery.bytes_per_s > 0.0 {
            recovery.eta_secs_estimate = Some((remaining / recovery.bytes_per_s).ceil() as u64);
        }
    }
}

/// Health checks, errors first: full OSDs and inactive PGs stop I/O;
/// inconsistent PGs (scrub errors) are errors too; down OSDs, nearfull
/// OSDs and degraded or unknown PGs are warnings. Each check may carry detail lines (`cairn health detail`).
fn health(
    map: &ClusterMap,
    live: &[&OsdStatsReport],
    failed: &[&OsdStatsReport],
    pgs_by_state: &BTreeMap<String, u64>,
    pgs: &[PgStat],
) -> Health {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut detail = Vec::new();
    let names = |pick: &dyn Fn(&&&OsdStatsReport) -> bool| -> Vec<String> {
        live.iter()
            .filter(pick)
            .map(|r| r.osd.to_string())
            .collect()
    };
    // OSDs that refuse to serve a corrupt store: down, so not among the
    // live ones, but still reporting why.
    for report in failed {
        let why = report.stats.store_error.as_deref().unwrap_or_default();
        errors.push(format!(
            "{} has a corrupt store and serves nothing",
            report.osd
        ));
        detail.push(format!("{}: {why}", report.osd));
    }
    let full = names(&|r| r.stats.full);
    if !full.is_empty() {
        errors.push(format!(
            "{} full osd(s): {} (writes refused; removes still work)",
            full.len(),
            full.join(", ")
        ));
    }
    let pgs_in = |word: &str| -> u64 {
        pgs_by_state
            .iter()
            .filter(|(state, _)| state.split('+').any(|part| part == word))
            .map(|(_, count)| *count)
            .sum()
    };
    let inactive =
        pgs_in("inactive") + pgs_in("peering") + pgs_in("activating") + pgs_in("incomplete");
    if inactive > 0 {
        errors.push(format!(
            "{inactive} pgs inactive (not serving I/O; `cairn pg ls --state incomplete` says why)"
        ));
    }
    let down: Vec<String> = map
        .osds
        .iter()
        .filter(|o| !o.up && o.is_in)
        .map(|o| o.id.to_string())
        .collect();
    if !down.is_empty() {
        warnings.push(format!("{} osd(s) down: {}", down.len(), down.join(", ")));
    }
    let nearfull = names(&|r| r.stats.nearfull && !r.stats.full);
    if !nearfull.is_empty() {
        warnings.push(format!(
            "{} nearfull osd(s): {}",
            nearfull.len(),
            nearfull.join(", ")
        ));
    }
    let inconsistent: Vec<&PgStat> = pgs.iter().filter(|p| p.inconsistent_objects > 0).collect();
    if !inconsistent.is_empty() {
        let objects: u64 = inconsistent.iter().map(|p| p.inconsistent_objects).sum();
        errors.push(format!(
            "{} pgs inconsistent, {objects} scrub errors (`cairn health detail`; `cairn pg repair PGID`)",
            inconsistent.len()
        ));
        for pg in &inconsistent {
            detail.push(format!(
                "pg {} is {}, acting {:?}, {} inconsistent objects",
                pg.pg,
                pg.state,
                pg.acting.iter().map(|o| o.0).collect::<Vec<_>>(),
                pg.inconsistent_objects
            ));
            for object in &pg.inconsistent {
                detail.push(format!("    {object}"));
            }
        }
    }
    for pg in pgs.iter().filter(|p| p.blocked.is_some()) {
        detail.push(format!(
            "pg {} is {}: {}",
            pg.pg,
            pg.state,
            pg.blocked.as_deref().unwrap_or_default()
        ));
    }
    let degraded = pgs_in("degraded");
    if degraded > 0 {
        warnings.push(format!("{degraded} pgs degraded (fewer copies than size)"));
    }
    let unknown = pgs_in("unknown");
    if unknown > 0 {
        warnings.push(format!(
            "{unknown} pgs unknown (no live primary reported them)"
        ));
    }
    let status = match (errors.is_empty(), warnings.is_empty()) {
        (false, _) => "HEALTH_ERR",
        (true, false) => "HEALTH_WARN",
        (true, true) => "HEALTH_OK",
    };
    errors.extend(warnings);
    Health {
        status,
        checks: errors,
        detail,
    }
}

/// A duration in the largest sensible units (`2h05m`, `3m20s`, `45s`).
fn human_secs(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// Bytes in binary units with one decimal (`1.5 GiB`).
fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[allow(clippy::cast_precision_loss)]
fn print_status(s: &Status) {
    println!("  cluster:");
    println!("    health: {}", s.health.status);
    for check in &s.health.checks {
        println!("            {check}");
    }
    println!();
    println!("  services:");
    println!("    mon: 1 daemon at {}, map epoch {}", s.monitor, s.epoch);
    println!(
        "    osd: {} osds: {} up, {} in",
        s.osds_total, s.osds_up, s.osds_in
    );
    for fs in &s.fs {
        println!(
            "    mds: {}: {} active, {} standby, {} client sessions{}",
            fs.name,
            fs.active.as_deref().unwrap_or("none"),
            fs.standbys,
            fs.sessions,
            if fs.recalls_pending > 0 {
                format!(", {} recalls pending", fs.recalls_pending)
            } else {
                String::new()
            }
        );
        if let Some(m) = &fs.mds {
            println!(
                "         cache {} of {} ({} inodes, {} dirs), resident {}, {} requests in flight, {} slow ({} since start)",
                human_bytes(m.cache_bytes as f64),
                human_bytes(m.cache_budget_bytes as f64),
                m.cached_inodes,
                m.cached_dirs,
                human_bytes(m.resident_bytes as f64),
                m.in_flight,
                m.slow_now,
                m.slow_total
            );
            println!(
                "         purge queue: {}{} removed files' data to delete, {} deleted since start",
                m.purge_waiting,
                if m.purge_waiting_more { "+" } else { "" },
                m.purged_total
            );
        }
    }
    println!();
    println!("  data:");
    println!("    pools:   {} pools, {} pgs", s.pools.len(), s.pg_count);
    println!(
        "    usage:   {} used, {} / {} avail ({} of objects, all copies)",
        human_bytes(s.usage.used_bytes as f64),
        human_bytes(s.usage.available_bytes as f64),
        human_bytes(s.usage.total_bytes as f64),
        human_bytes(s.usage.stored_bytes as f64),
    );
    let mut first = true;
    for (state, count) in &s.pgs_by_state {
        let label = if first {
            "    pgs:     "
        } else {
            "             "
        };
        println!("{label}{count} {state}");
        first = false;
    }
    let r = &s.recovery;
    if r.missing_objects > 0 || r.backfill_targets > 0 {
        println!(
            "    recovery: {} objects to recover, {} copies backfilling ({} objects, {} pushed so far)",
            r.missing_objects,
            r.backfill_targets,
            r.recovered_objects,
            human_bytes(r.recovered_bytes as f64)
        );
        let left = r.remaining_bytes_estimate.map_or_else(
            || "remaining unknown yet".to_owned(),
            |b| format!("~{} left", human_bytes(b as f64)),
        );
        let eta = r
            .eta_secs_estimate
            .map_or_else(String::new, |secs| format!(", ~{} to go", human_secs(secs)));
        println!(
            "              {}/s, {:.0} objects/s, {left}{eta}",
            human_bytes(r.bytes_per_s),
            r.objects_per_s
        );
    }
    let sc = &s.scrub;
    if sc.scrubbing + sc.deep_scrubbing > 0 {
        println!(
            "    scrub:   {} pgs scrubbing, {} deep-scrubbing",
            sc.scrubbing, sc.deep_scrubbing
        );
    }
    println!();
    println!("  io:");
    let io = &s.client_io;
    println!(
        "    client:  {}/s rd, {}/s wr, {:.0} op/s rd, {:.0} op/s wr",
        human_bytes(io.read_bytes_per_s),
        human_bytes(io.write_bytes_per_s),
        io.read_ops_per_s,
        io.write_ops_per_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_the_unit() {
        assert_eq!(human_bytes(0.0), "0.0 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
    }

    #[test]
    fn human_secs_picks_the_unit() {
        assert_eq!(human_secs(45), "45s");
        assert_eq!(human_secs(200), "3m20s");
        assert_eq!(human_secs(7500), "2h05m");
    }
}

//! `cairn df`: capacity and pools: raw space on the OSDs, and per pool its
//! PGs, redundancy and an estimate of usable space.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, fixed, grouped, print_json, table};
use clap::Args;
use serde::Serialize;

/// Flags of `cairn df`.
#[derive(Debug, Args)]
pub struct DfArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One pool of `cairn df`: its layout, what its PGs hold (from the up
/// OSDs' latest reports) and an estimate of usable space: the raw capacity
/// of up and in OSDs times the space efficiency.
#[derive(Debug, Serialize)]
struct DfPool {
    name: String,
    id: u32,
    pg_num: u32,
    redundancy: String,
    /// The share of raw space that holds object data: 1 / size, or
    /// k / (k + m).
    space_efficiency: f64,
    /// Raw capacity of up+in OSDs times the space efficiency.
    usable_bytes_max: u64,
    #[serde(flatten)]
    usage: PoolUsage,
}

/// What one pool holds, summed over its PGs from the OSDs' reports of the
/// PG copies they hold ([`cairn_proto::mon::PgUsage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PoolUsage {
    /// Objects of each PG's first acting position (not the stashes an
    /// erasure-coded shard keeps for roll-back until the write is
    /// committed everywhere: those count in `raw_used_bytes` only).
    pub objects: u64,
    /// Bytes stored: the objects' sizes, from each PG's first acting copy
    /// (replication) or its data shards (erasure coding, whose shards
    /// round an object up to the code's block).
    pub stored_bytes: u64,
    /// Space every copy or shard of the pool takes on the OSDs, strays
    /// included: allocation units and bytes kept inline in metadata.
    pub raw_used_bytes: u64,
    /// `raw_used_bytes / stored_bytes`: what a stored byte costs (3 for
    /// size 3, 1.5 for 2+1 and 4+2 before allocation rounding); `None`
    /// while the pool is empty.
    pub raw_per_stored: Option<f64>,
}

/// Per-pool usage from the map and the OSDs' latest reports. Only OSDs the
/// map has up count (a down OSD's last report is stale). A PG whose first
/// position is not reported (its OSD down) is counted from the copies that
/// are: the largest replica, or the data shards reported scaled to `k`.
pub fn pool_usage(
    map: &cairn_placement::ClusterMap,
    reports: &[cairn_proto::mon::OsdStatsReport],
) -> std::collections::BTreeMap<u32, PoolUsage> {
    use cairn_placement::Redundancy;
    use std::collections::BTreeMap;
    let up = |osd: cairn_types::OsdId| map.osds.iter().any(|o| o.id == osd && o.up);
    // Per PG: (objects, bytes) by acting position.
    let mut copies: BTreeMap<cairn_types::PgId, BTreeMap<u32, (u64, u64)>> = BTreeMap::new();
    let mut out: BTreeMap<u32, PoolUsage> = BTreeMap::new();
    for report in reports.iter().filter(|r| up(r.osd)) {
        for copy in &report.stats.pg_usage {
            let Some(pool) = map.pools.iter().find(|p| p.id == copy.pg.pool) else {
                continue;
            };
            let usage = out.entry(pool.id.0).or_default();
            usage.raw_used_bytes = usage.raw_used_bytes.saturating_add(copy.allocated_bytes);
            if let Some(position) = copy.position {
                copies
                    .entry(copy.pg)
                    .or_default()
                    .insert(position, (copy.objects, copy.bytes));
            }
        }
    }
    for (pg, positions) in copies {
        let Some(pool) = map.pools.iter().find(|p| p.id == pg.pool) else {
            continue;
        };
        let usage = out.entry(pool.id.0).or_default();
        let first = positions.get(&0).copied();
        let (objects, bytes) = match pool.redundancy {
            Redundancy::Replicated { .. } => {
                first.unwrap_or_else(|| positions.values().copied().max().unwrap_or_default())
            }
            Redundancy::Erasure { k, .. } => {
                let data: Vec<u64> = positions.range(..k).map(|(_, &(_, bytes))| bytes).collect();
                let objects = first.map_or_else(
                    || positions.values().map(|&(o, _)| o).max().unwrap_or(0),
                    |(o, _)| o,
                );
                let bytes = if data.is_empty() {
                    // Parity shards only: each is as long as the longest
                    // data shard.
                    positions.values().map(|&(_, b)| b).max().unwrap_or(0) * u64::from(k)
                } else {
                    // Missing data shards are counted as the mean of those
                    // reported.
                    let sum: u64 = data.iter().sum();
                    let reported = data.len() as u64;
                    sum.saturating_mul(u64::from(k)) / reported
                };
                (objects, bytes)
            }
        };
        usage.objects = usage.objects.saturating_add(objects);
        usage.stored_bytes = usage.stored_bytes.saturating_add(bytes);
    }
    for usage in out.values_mut() {
        usage.raw_per_stored = (usage.stored_bytes > 0)
            .then(|| usage.raw_used_bytes as f64 / usage.stored_bytes as f64);
    }
    out
}

/// Bytes in the largest binary unit that keeps them at or above 1.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{} {}", fixed(value, 1), UNITS[unit])
    }
}

#[derive(Debug, Serialize)]
struct Df {
    /// Capacity the OSDs reported at boot, all of them.
    capacity_bytes_total: u64,
    /// Of that, on OSDs that are up and in.
    capacity_bytes_up_in: u64,
    osds_total: usize,
    osds_up_in: usize,
    /// From the OSDs' latest statistics: file-system space used and
    /// available, and object bytes held (every copy), summed over OSDs.
    raw_used_bytes: u64,
    raw_available_bytes: u64,
    stored_bytes: u64,
    pools: Vec<DfPool>,
}

fn df(
    map: &cairn_placement::ClusterMap,
    endpoints: &std::collections::BTreeMap<cairn_types::OsdId, cairn_proto::map::OsdEndpoint>,
    reports: &[cairn_proto::mon::OsdStatsReport],
) -> Df {
    let usage = pool_usage(map, reports);
    let capacity = |id: cairn_types::OsdId| endpoints.get(&id).map_or(0, |e| e.capacity_bytes);
    let up_in: Vec<_> = map.osds.iter().filter(|o| o.up && o.is_in).collect();
    let capacity_bytes_up_in: u64 = up_in.iter().map(|o| capacity(o.id)).sum();
    let pools = map
        .pools
        .iter()
        .map(|pool| {
            // The share of raw space that holds data: 1 / size, or k / (k + m).
            let (numerator, denominator) = pool.redundancy.usable_fraction();
            let usable = u128::from(capacity_bytes_up_in) * u128::from(numerator)
                / u128::from(denominator.max(1));
            DfPool {
                name: pool.name.clone(),
                id: pool.id.0,
                pg_num: pool.pg_num,
                redundancy: pool.redundancy.to_string(),
                space_efficiency: numerator as f64 / denominator.max(1) as f64,
                usable_bytes_max: u64::try_from(usable).unwrap_or(u64::MAX),
                usage: usage.get(&pool.id.0).copied().unwrap_or_default(),
            }
        })
        .collect();
    Df {
        capacity_bytes_total: map.osds.iter().map(|o| capacity(o.id)).sum(),
        capacity_bytes_up_in,
        osds_total: map.osds.len(),
        osds_up_in: up_in.len(),
        raw_used_bytes: 0,
        raw_available_bytes: 0,
        stored_bytes: 0,
        pools,
    }
}

fn gib(bytes: u64) -> String {
    fixed(bytes as f64 / (1u64 << 30) as f64, 1)
}

pub fn run_df(args: DfArgs) -> CliResult {
    let report = runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        let map = client.refresh_map().await?;
        let endpoints = client.endpoints().await?;
        let reports = client.osd_stats().await?;
        let mut report = df(&map, &endpoints, &reports);
        for stats in &reports {
            report.raw_used_bytes += stats.stats.used_bytes;
            report.raw_available_bytes += stats.stats.available_bytes;
            report.stored_bytes += stats.stats.stored_bytes;
        }
        CliResult::Ok(report)
    })?;
    if args.json {
        return print_json(&report);
    }
    println!(
        "capacity  {} GiB raw on {} OSDs, {} GiB on the {} up and in",
        gib(report.capacity_bytes_total),
        report.osds_total,
        gib(report.capacity_bytes_up_in),
        report.osds_up_in
    );
    println!(
        "raw       {} GiB used, {} GiB available; objects {} GiB (all copies)",
        gib(report.raw_used_bytes),
        gib(report.raw_available_bytes),
        gib(report.stored_bytes)
    );
    let rows = report
        .pools
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.id.to_string(),
                p.pg_num.to_string(),
                p.redundancy.clone(),
                grouped(p.usage.objects),
                human_bytes(p.usage.stored_bytes),
                human_bytes(p.usage.raw_used_bytes),
                p.usage
                    .raw_per_stored
                    .map_or_else(|| "-".to_owned(), |r| fixed(r, 2)),
                format!("{:.0}%", p.space_efficiency * 100.0),
                gib(p.usable_bytes_max),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "pool",
                "id",
                "pg_num",
                "redundancy",
                "objects",
                "stored",
                "raw used",
                "raw/stored",
                "space efficiency",
                "max avail GiB"
            ],
            rows
        )
    );
    Ok(())
}

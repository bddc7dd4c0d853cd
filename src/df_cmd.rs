//! `cairn df`: capacity and pools: raw space on the OSDs, and per pool its
//! PGs, redundancy and an estimate of usable space.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, fixed, print_json, table};
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

/// One pool of `cairn df`. Per-pool object counts and used bytes are not
/// reported by OSDs yet, so `df` shows placement and an estimate of usable
/// space: the raw capacity of up and in OSDs divided by the redundancy.
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
) -> Df {
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
        let mut report = df(&map, &endpoints);
        for stats in client.osd_stats().await? {
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
                format!("{:.0}%", p.space_efficiency * 100.0),
                "-".to_owned(),
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
                "space efficiency",
                "objects",
                "max avail GiB"
            ],
            rows
        )
    );
    Ok(())
}

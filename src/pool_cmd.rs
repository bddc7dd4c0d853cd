//! `cairn pool create|ls|set|rm|scrub`: the cluster's pools, changed
//! through the monitor; `scrub` asks each of the pool's PGs' primaries.

use crate::conn::{ConfArgs, connect, runtime};
use crate::df_cmd::{PoolUsage, human_bytes, pool_usage};
use crate::output::{CliResult, grouped, print_json, table};
use cairn_client::Client;
use cairn_proto::mon::{FailureDomainSpec, MonCommand, RedundancySpec};
use cairn_proto::osd::PgAction;
use cairn_types::PgId;
use clap::{Args, Subcommand};
use serde::Serialize;

/// `cairn pool ...`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool: replicated (`--size`, 3 by default) or erasure-coded
    /// (`--erasure K+M`).
    Create {
        name: String,
        /// Copies of each object.
        #[arg(long, conflicts_with = "erasure")]
        size: Option<u32>,
        /// Reed–Solomon with K data and M parity shards, e.g. `4+2`, each
        /// on a different failure domain (k + m of them are needed).
        #[arg(long)]
        erasure: Option<String>,
        /// Bytes of one stripe unit of an erasure-coded pool: a power of
        /// two from 4K to 1M (default 16K).
        #[arg(long = "stripe-unit", requires = "erasure", value_parser = crate::units::parse_size)]
        stripe_unit: Option<u64>,
        /// Copies (shards) that must be up to accept writes (default:
        /// size - 1, at least 1; erasure: k + 1).
        #[arg(long = "min-size")]
        min_size: Option<u32>,
        #[arg(long = "pg-num", default_value_t = 32)]
        pg_num: u32,
        /// osd, host or rack.
        #[arg(long = "failure-domain", default_value = "osd")]
        failure_domain: String,
    },
    /// List pools.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Delete a pool and all its objects.
    Rm {
        name: String,
        /// Required: deleting a pool cannot be undone.
        #[arg(long = "yes-i-really-mean-it")]
        confirmed: bool,
    },
    /// Change a pool's PG counts (they only grow) or its min_size.
    Set {
        name: String,
        #[arg(long = "pg-num")]
        pg_num: Option<u32>,
        #[arg(long = "pgp-num")]
        pgp_num: Option<u32>,
        #[arg(long = "min-size")]
        min_size: Option<u32>,
    },
    /// Scrub every PG of a pool (light; `--deep` reads all data).
    Scrub {
        name: String,
        #[arg(long)]
        deep: bool,
    },
}

#[derive(Debug, Serialize)]
pub struct PoolSummary {
    id: u32,
    name: String,
    redundancy: String,
    pg_num: u32,
    pgp_num: u32,
    failure_domain: String,
    /// The share of raw space that holds object data: 1 / size, or
    /// k / (k + m).
    space_efficiency: f64,
    /// What the pool holds, from the up OSDs' latest reports.
    #[serde(flatten)]
    usage: PoolUsage,
}

pub fn pool_summaries(
    map: &cairn_placement::ClusterMap,
    reports: &[cairn_proto::mon::OsdStatsReport],
) -> Vec<PoolSummary> {
    let usage = pool_usage(map, reports);
    map.pools
        .iter()
        .map(|p| PoolSummary {
            id: p.id.0,
            name: p.name.clone(),
            redundancy: p.redundancy.to_string(),
            pg_num: p.pg_num,
            pgp_num: p.pgp_num,
            failure_domain: p.failure_domain.to_string(),
            space_efficiency: {
                let (num, den) = p.redundancy.usable_fraction();
                num as f64 / den.max(1) as f64
            },
            usage: usage.get(&p.id.0).copied().unwrap_or_default(),
        })
        .collect()
}

/// `K+M` as in `--erasure 4+2`.
pub fn parse_k_plus_m(text: &str) -> CliResult<(u32, u32)> {
    text.split_once('+')
        .and_then(|(k, m)| Some((k.trim().parse().ok()?, m.trim().parse().ok()?)))
        .ok_or_else(|| format!("--erasure {text:?}: expected K+M, e.g. 4+2").into())
}

fn failure_domain(text: &str) -> CliResult<FailureDomainSpec> {
    match text {
        "osd" => Ok(FailureDomainSpec::Osd),
        "host" => Ok(FailureDomainSpec::Host),
        "rack" => Ok(FailureDomainSpec::Rack),
        other => Err(format!("{other:?} is not a failure domain (osd, host, rack)").into()),
    }
}

pub fn run_pool(args: PoolArgs) -> CliResult {
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        match args.command {
            PoolCommand::Create {
                name,
                size,
                erasure,
                stripe_unit,
                min_size,
                pg_num,
                failure_domain: domain,
            } => {
                let redundancy = match erasure {
                    Some(text) => {
                        let (k, m) = parse_k_plus_m(&text)?;
                        // Too large for the map: refused by the pool's check.
                        let stripe_unit = stripe_unit.map(|b| u32::try_from(b).unwrap_or(u32::MAX));
                        RedundancySpec::Erasure {
                            k,
                            m,
                            min_size,
                            stripe_unit,
                        }
                    }
                    None => {
                        let size = size.unwrap_or(3);
                        RedundancySpec::Replicated {
                            size,
                            min_size: min_size.unwrap_or_else(|| size.saturating_sub(1).max(1)),
                        }
                    }
                };
                let command = MonCommand::PoolCreate {
                    name: name.clone(),
                    pg_num,
                    redundancy,
                    failure_domain: failure_domain(&domain)?,
                    device_class: None,
                };
                client.mon_command(command).await?;
                let map = client.refresh_map().await?;
                match map.pool_by_name(&name) {
                    Some(pool) => println!("pool {name} created: {}", pool.redundancy),
                    None => println!("pool {name} created"),
                }
                Ok(())
            }
            PoolCommand::Rm { name, confirmed } => {
                if !confirmed {
                    return Err(format!(
                        "deleting pool {name} destroys its objects; repeat with --yes-i-really-mean-it"
                    )
                    .into());
                }
                client.mon_command(MonCommand::PoolDelete(name.clone())).await?;
                println!("pool {name} deleted");
                Ok(())
            }
            PoolCommand::Set {
                name,
                pg_num,
                pgp_num,
                min_size,
            } => {
                if pg_num.is_none() && pgp_num.is_none() && min_size.is_none() {
                    return Err("nothing to set: give --pg-num, --pgp-num or --min-size".into());
                }
                let before = client
                    .refresh_map()
                    .await?
                    .pool_by_name(&name)
                    .map(|p| (p.pg_num, p.pgp_num))
                    .ok_or_else(|| format!("pool {name:?} does not exist"))?;
                let command = MonCommand::PoolSet {
                    name: name.clone(),
                    pg_num,
                    pgp_num,
                    min_size,
                };
                client.mon_command(command).await?;
                // As in Ceph, pgp_num follows a pg_num increase unless set:
                // in a later epoch, so the PGs split where they are first,
                // then the new ones move (rebalancing like any remap).
                if let (Some(new), None) = (pg_num, pgp_num)
                    && new > before.0
                {
                    println!("pool {name}: pg_num {} -> {new} (PGs split in place)", before.0);
                    let follow = MonCommand::PoolSet {
                        name: name.clone(),
                        pg_num: None,
                        pgp_num: Some(new),
                        min_size: None,
                    };
                    client.mon_command(follow).await?;
                    println!(
                        "pool {name}: pgp_num {} -> {new} (new PGs move to their OSDs; `cairn status` shows the rebalance)",
                        before.1
                    );
                    return Ok(());
                }
                println!("pool {name} updated");
                Ok(())
            }
            PoolCommand::Scrub { name, deep } => {
                scrub_pool(&client, &name, deep).await
            }
            PoolCommand::Ls { json } => {
                let map = client.refresh_map().await?;
                let reports = client.osd_stats().await?;
                let pools = pool_summaries(&map, &reports);
                if json {
                    return print_json(&pools);
                }
                let rows = pools
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.id.to_string(),
                            p.pg_num.to_string(),
                            p.redundancy.clone(),
                            format!("{:.0}%", p.space_efficiency * 100.0),
                            p.failure_domain.clone(),
                            grouped(p.usage.objects),
                            human_bytes(p.usage.stored_bytes),
                            human_bytes(p.usage.raw_used_bytes),
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
                            "failure domain",
                            "objects",
                            "stored",
                            "raw used"
                        ],
                        rows
                    )
                );
                Ok(())
            }
        }
    })
}

/// `cairn pool scrub NAME [--deep]`: asks every PG's primary; PGs that
/// cannot scrub now (not clean, already scrubbing) are listed, not fatal.
async fn scrub_pool(client: &Client, name: &str, deep: bool) -> CliResult {
    let map = client.refresh_map().await?;
    let pool = map
        .pool_by_name(name)
        .ok_or_else(|| format!("pool {name:?} does not exist"))?;
    let action = if deep {
        PgAction::DeepScrub
    } else {
        PgAction::Scrub
    };
    let (mut started, mut declined) = (0u32, Vec::new());
    for seed in 0..pool.pg_num {
        let pg = PgId::new(pool.id, seed);
        match client.pg_command(pg, action).await {
            Ok(_) => started += 1,
            Err(error) => declined.push(format!("{pg}: {error}")),
        }
    }
    let kind = if deep { "deep scrubs" } else { "scrubs" };
    println!(
        "pool {name}: {started} of {} PG {kind} started",
        pool.pg_num
    );
    for line in &declined {
        println!("  not now: {line}");
    }
    Ok(())
}

//! `cairn placement …`: the placement simulator, balancer and object mapper.

use crate::output::{CliResult, fixed, grouped, print_json, table};
use cairn_placement::balance::{self, BalanceOptions, PoolBalance};
use cairn_placement::simulate::{self, Distribution, Movement, Stats, SyntheticSpec};
use cairn_placement::{ClusterMap, FailureDomain, Placement, Pool, Redundancy};
use cairn_types::PoolId;
use clap::{Args, Subcommand};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Subcommand)]
pub enum PlacementCommand {
    /// Map every PG of a pool and report PGs per OSD, host and rack, data
    /// moved by typical changes, and mapping speed.
    Simulate(SimulateArgs),
    /// Compute balancer remaps (pg_upmap_items) that even out PGs per OSD.
    Balance(BalanceArgs),
    /// Show the PG and OSDs of an object, like `ceph osd map`.
    Map(MapArgs),
}

/// Where the cluster map comes from: a file, or a synthetic cluster.
#[derive(Debug, Args)]
struct ClusterArgs {
    /// Read the map from FILE (TOML, JSON, or Cairn's binary map).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["racks", "hosts", "osds_per_host", "weights", "classes"])]
    map: Option<PathBuf>,
    /// Synthetic cluster: racks.
    #[arg(long, default_value_t = 1)]
    racks: u32,
    /// Synthetic cluster: hosts in all, spread over the racks.
    #[arg(long, default_value_t = 8)]
    hosts: u32,
    /// Synthetic cluster: OSDs in each host.
    #[arg(long, default_value_t = 4)]
    osds_per_host: u32,
    /// Synthetic cluster: OSD weights, cycled over hosts (e.g. `4,8,12` for
    /// three generations of disks).
    #[arg(long, value_delimiter = ',', default_value = "1.0")]
    weights: Vec<f64>,
    /// Synthetic cluster: device classes, cycled over the OSDs of each host
    /// (e.g. `hdd,hdd,hdd,ssd`).
    #[arg(long, value_delimiter = ',', default_value = "hdd")]
    classes: Vec<String>,
}

/// Which pool to place; any of the shape flags defines (or redefines) it.
#[derive(Debug, Args)]
struct PoolArgs {
    /// Pool name: one from the map, or the one the flags below define.
    #[arg(long)]
    pool: Option<String>,
    /// Placement groups.
    #[arg(long)]
    pg_num: Option<u32>,
    /// PGs placed independently (default: pg_num).
    #[arg(long)]
    pgp_num: Option<u32>,
    /// Replicas (replicated pool).
    #[arg(long, conflicts_with = "ec")]
    size: Option<u32>,
    /// Replicas needed to accept writes (default: size - size/2).
    #[arg(long, conflicts_with = "ec")]
    min_size: Option<u32>,
    /// Erasure coding as K+M, e.g. `4+2`.
    #[arg(long)]
    ec: Option<String>,
    /// osd, host or rack.
    #[arg(long)]
    failure_domain: Option<FailureDomain>,
    /// Place only on OSDs of this device class.
    #[arg(long)]
    device_class: Option<String>,
}

impl PoolArgs {
    fn defines_pool(&self) -> bool {
        self.pg_num.is_some()
            || self.pgp_num.is_some()
            || self.size.is_some()
            || self.min_size.is_some()
            || self.ec.is_some()
            || self.failure_domain.is_some()
            || self.device_class.is_some()
    }
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pool: PoolArgs,
    /// Skip the data-movement scenarios.
    #[arg(long)]
    no_movement: bool,
    /// Also run the balancer and report the distribution after it.
    #[arg(long)]
    balance: bool,
    /// Write the simulated map (with balancer remaps) to FILE (.toml, .json
    /// or binary).
    #[arg(long, value_name = "FILE")]
    dump_map: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct BalanceArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pool: PoolArgs,
    /// Target for the fullest OSD's PGs over its weighted mean.
    #[arg(long, default_value_t = 1.05)]
    max_over_mean: f64,
    /// Most remaps to propose.
    #[arg(long, default_value_t = 100_000)]
    max_moves: usize,
    /// Write the balanced map to FILE (.toml, .json or binary).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct MapArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pool: PoolArgs,
    /// Object name.
    object: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

pub fn run(command: PlacementCommand) -> CliResult {
    match command {
        PlacementCommand::Simulate(args) => simulate_cmd(&args),
        PlacementCommand::Balance(args) => balance_cmd(&args),
        PlacementCommand::Map(args) => map_cmd(&args),
    }
}

/// Loads or builds the map and resolves the pools to work on.
fn prepare(cluster: &ClusterArgs, pool: &PoolArgs) -> CliResult<(ClusterMap, Vec<PoolId>)> {
    let mut map = match &cluster.map {
        Some(path) => load_map(path)?,
        None => SyntheticSpec {
            racks: cluster.racks,
            hosts: cluster.hosts,
            osds_per_host: cluster.osds_per_host,
            weights: cluster.weights.clone(),
            classes: cluster.classes.clone(),
        }
        .build()?,
    };
    let pools = if pool.defines_pool() || map.pools.is_empty() {
        vec![define_pool(&mut map, pool)?]
    } else if let Some(name) = &pool.pool {
        let found = map
            .pool_by_name(name)
            .ok_or_else(|| format!("pool {name:?} is not in the map"))?;
        vec![found.id]
    } else {
        map.pools.iter().map(|p| p.id).collect()
    };
    map.validate()?;
    let placement = Placement::new(&map);
    for id in &pools {
        if let Some(p) = map.pool(*id) {
            placement.check_pool(p)?;
        }
    }
    Ok((map, pools))
}

fn define_pool(map: &mut ClusterMap, args: &PoolArgs) -> CliResult<PoolId> {
    let name = args.pool.clone().unwrap_or_else(|| "sim".to_owned());
    let redundancy = match &args.ec {
        Some(text) => {
            let (k, m) = crate::pool_cmd::parse_k_plus_m(text)?;
            Redundancy::erasure(k, m)
        }
        None => {
            let size = args.size.unwrap_or(3);
            Redundancy::Replicated {
                size,
                min_size: args.min_size.unwrap_or(size - size / 2),
            }
        }
    };
    let id = map
        .pool_by_name(&name)
        .map_or_else(|| map.next_pool_id(), |p| p.id);
    let pg_num = args.pg_num.unwrap_or(256);
    let pool = Pool {
        id,
        name,
        pg_num,
        pgp_num: args.pgp_num.unwrap_or(pg_num),
        redundancy,
        failure_domain: args.failure_domain.unwrap_or(FailureDomain::Host),
        device_class: args.device_class.clone(),
    };
    pool.validate()?;
    map.upsert_pool(pool);
    Ok(id)
}

fn load_map(path: &Path) -> CliResult<ClusterMap> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let map = if bytes.starts_with(&cairn_placement::map::MAP_MAGIC) {
        ClusterMap::decode(&bytes)
    } else {
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{}: neither a binary map nor UTF-8 text", path.display()))?;
        ClusterMap::from_text(&text)
    };
    Ok(map.map_err(|e| format!("{}: {e}", path.display()))?)
}

fn save_map(map: &ClusterMap, path: &Path) -> CliResult {
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => map.to_toml()?.into_bytes(),
        Some("json") => serde_json::to_vec_pretty(map)?,
        _ => map.encode()?,
    };
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

#[derive(Debug, Serialize)]
struct ClusterSummary {
    epoch: u64,
    osds: usize,
    osds_in: usize,
    osds_up: usize,
    hosts: usize,
    racks: usize,
    weight_total: f64,
}

fn summarize(map: &ClusterMap) -> ClusterSummary {
    let tree = cairn_placement::Hierarchy::of(map);
    ClusterSummary {
        epoch: map.epoch.0,
        osds: map.osds.len(),
        osds_in: map.osds.iter().filter(|o| o.is_in).count(),
        osds_up: map.osds.iter().filter(|o| o.up).count(),
        hosts: tree.host_count(),
        racks: tree.racks.len(),
        weight_total: tree.weight.as_f64(),
    }
}

#[derive(Debug, Serialize)]
struct PoolSummary {
    id: u32,
    name: String,
    pg_num: u32,
    pgp_num: u32,
    rule: String,
    size: u32,
    failure_domain: FailureDomain,
    device_class: Option<String>,
}

#[derive(Debug, Serialize)]
struct Throughput {
    /// PGs mapped (each to `size` OSDs) per timed pass.
    mappings: u64,
    passes: u32,
    seconds: f64,
    mappings_per_sec: f64,
    replicas_per_sec: f64,
}

#[derive(Debug, Serialize)]
struct PoolReport {
    pool: PoolSummary,
    distribution: Distribution,
    movement: Vec<Movement>,
    throughput: Throughput,
    #[serde(skip_serializing_if = "Option::is_none")]
    balance: Option<BalancedReport>,
}

#[derive(Debug, Serialize)]
struct BalancedReport {
    result: PoolBalance,
    distribution: Distribution,
}

#[derive(Debug, Serialize)]
struct SimulateReport {
    cluster: ClusterSummary,
    pools: Vec<PoolReport>,
}

fn simulate_cmd(args: &SimulateArgs) -> CliResult {
    let (mut map, pools) = prepare(&args.cluster, &args.pool)?;
    let placement = Placement::new(&map);
    let mut reports = Vec::new();
    for id in &pools {
        let pool = map.pool(*id).ok_or("pool vanished")?.clone();
        reports.push(PoolReport {
            distribution: simulate::distribution(&map, &placement, &pool),
            movement: if args.no_movement {
                Vec::new()
            } else {
                simulate::movement_scenarios(&map, pool.id)?
            },
            throughput: measure_throughput(&placement, &pool),
            pool: pool_summary(&pool),
            balance: None,
        });
    }
    if args.balance {
        let results = balance::balance(&mut map, &BalanceOptions::default());
        let placement = Placement::new(&map);
        for (report, result) in reports.iter_mut().zip(results) {
            let pool = map.pool(PoolId(report.pool.id)).ok_or("pool vanished")?;
            report.balance = Some(BalancedReport {
                distribution: simulate::distribution(&map, &placement, pool),
                result,
            });
        }
    }
    if let Some(path) = &args.dump_map {
        save_map(&map, path)?;
    }
    let report = SimulateReport {
        cluster: summarize(&map),
        pools: reports,
    };
    if args.json {
        return print_json(&report);
    }
    print_simulation(&report);
    Ok(())
}

fn pool_summary(pool: &Pool) -> PoolSummary {
    PoolSummary {
        id: pool.id.0,
        name: pool.name.clone(),
        pg_num: pool.pg_num,
        pgp_num: pool.pgp_num,
        rule: pool.redundancy.to_string(),
        size: pool.redundancy.shard_count(),
        failure_domain: pool.failure_domain,
        device_class: pool.device_class.clone(),
    }
}

/// Maps every PG of the pool on this thread, repeating whole passes until
/// at least a quarter second has passed so short runs are not all noise.
fn measure_throughput(placement: &Placement, pool: &Pool) -> Throughput {
    let minimum = Duration::from_millis(250);
    let started = Instant::now();
    let mut passes = 0u32;
    while passes == 0 || started.elapsed() < minimum {
        for pg in pool.pgs() {
            std::hint::black_box(placement.raw(pool, pg));
        }
        passes += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let mappings = u64::from(pool.pg_num);
    #[allow(clippy::cast_precision_loss)]
    let per_sec = (mappings * u64::from(passes)) as f64 / seconds;
    Throughput {
        mappings,
        passes,
        seconds: seconds / f64::from(passes),
        mappings_per_sec: per_sec,
        replicas_per_sec: per_sec * f64::from(pool.redundancy.shard_count()),
    }
}

fn stats_row(level: &str, s: &Stats) -> Vec<String> {
    vec![
        level.to_owned(),
        s.items.to_string(),
        s.min.to_string(),
        fixed(s.mean, 1),
        s.max.to_string(),
        fixed(s.stddev, 2),
        fixed(s.max_over_mean, 3),
        fixed(s.min_over_mean, 3),
    ]
}

fn distribution_table(d: &Distribution) -> comfy_table::Table {
    table(
        &[
            "level",
            "items",
            "min",
            "mean",
            "max",
            "stddev",
            "max÷mean",
            "min÷mean",
        ],
        vec![
            stats_row("osd", &d.per_osd),
            stats_row("host", &d.per_host),
            stats_row("rack", &d.per_rack),
        ],
    )
}

fn print_simulation(report: &SimulateReport) {
    let c = &report.cluster;
    println!(
        "cluster: {} OSDs ({} in, {} up) in {} hosts and {} racks, total weight {:.1}, epoch {}",
        c.osds, c.osds_in, c.osds_up, c.hosts, c.racks, c.weight_total, c.epoch
    );
    for r in &report.pools {
        let p = &r.pool;
        println!(
            "\npool {} (id {}): {}, pg_num {}, pgp_num {}, failure domain {}{}",
            p.name,
            p.id,
            p.rule,
            p.pg_num,
            p.pgp_num,
            p.failure_domain,
            p.device_class
                .as_ref()
                .map_or(String::new(), |c| format!(", device class {c}"))
        );
        println!(
            "\nPG replicas per OSD, host and rack ({} replicas, {} undersized PGs; ratios are to each item's weighted share):",
            grouped(r.distribution.pg_replicas),
            r.distribution.undersized_pgs
        );
        println!("{}", distribution_table(&r.distribution));
        let domains = match p.failure_domain {
            FailureDomain::Osd => r.distribution.per_osd.items,
            FailureDomain::Host => r.distribution.per_host.items,
            FailureDomain::Rack => r.distribution.per_rack.items,
        };
        if domains == p.size as usize {
            println!(
                "note: every PG spans all {domains} {}s, so their weights cannot be honoured; \
                 add {}s or use a smaller rule to spread by weight",
                p.failure_domain, p.failure_domain
            );
        }
        if !r.movement.is_empty() {
            println!(
                "\nData movement (replicas whose OSD changes; optimal = the least any placement must move):"
            );
            let rows = r
                .movement
                .iter()
                .map(|m| {
                    vec![
                        m.scenario.clone(),
                        grouped(m.moved_replicas),
                        format!("{:.3}%", m.moved_pct),
                        grouped(m.optimal_replicas),
                        m.ratio.map_or_else(|| "-".into(), |x| fixed(x, 3)),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &["change", "moved", "moved %", "optimal", "moved÷optimal"],
                    rows
                )
            );
        }
        let t = &r.throughput;
        println!(
            "\nMapping speed (one core): {} PGs × {} in {:.4} s per pass = {} PG mappings/s ({} replicas/s)",
            grouped(t.mappings),
            p.size,
            t.seconds,
            grouped(t.mappings_per_sec as u64),
            grouped(t.replicas_per_sec as u64)
        );
        if let Some(b) = &r.balance {
            print_balance(&b.result);
            println!("{}", distribution_table(&b.distribution));
        }
    }
}

fn print_balance(b: &PoolBalance) {
    println!(
        "\nBalancer for pool {}: max÷mean {:.3} -> {:.3} (target {:.3} reachable with whole PGs) with {} remaps (lower bound {})",
        b.pool,
        b.max_over_mean_before,
        b.max_over_mean_after,
        b.max_over_mean_reachable,
        b.moves,
        b.moves_lower_bound
    );
}

fn balance_cmd(args: &BalanceArgs) -> CliResult {
    if !(1.0..=10.0).contains(&args.max_over_mean) {
        return Err(format!(
            "--max-over-mean {} must be between 1.0 and 10.0",
            args.max_over_mean
        )
        .into());
    }
    let (mut map, pools) = prepare(&args.cluster, &args.pool)?;
    let options = BalanceOptions {
        max_over_mean: args.max_over_mean,
        moves_max: args.max_moves,
    };
    let results: Vec<PoolBalance> = balance::balance(&mut map, &options)
        .into_iter()
        .filter(|b| {
            pools
                .iter()
                .any(|id| map.pool(*id).is_some_and(|p| p.name == b.pool))
        })
        .collect();
    map.validate()?;
    if let Some(path) = &args.out {
        save_map(&map, path)?;
    }
    if args.json {
        return print_json(&results);
    }
    for b in &results {
        print_balance(b);
    }
    if let Some(path) = &args.out {
        println!("\nwrote the balanced map to {}", path.display());
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct ObjectMapping {
    object: String,
    pool: String,
    pg: String,
    raw: Vec<Option<u32>>,
    up: Vec<Option<u32>>,
    acting: Vec<Option<u32>>,
    primary: Option<u32>,
}

fn map_cmd(args: &MapArgs) -> CliResult {
    let (map, pools) = prepare(&args.cluster, &args.pool)?;
    let [pool_id] = pools[..] else {
        return Err("the map has several pools: choose one with --pool".into());
    };
    let pool = map.pool(pool_id).ok_or("pool vanished")?;
    let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, args.object.as_bytes());
    let mapping = Placement::new(&map).map_pg(pg)?;
    let ids = |shards: &[cairn_placement::Shard]| shards.iter().map(|s| s.map(|o| o.0)).collect();
    let result = ObjectMapping {
        object: args.object.clone(),
        pool: pool.name.clone(),
        pg: pg.to_string(),
        raw: ids(&mapping.raw),
        up: ids(&mapping.up),
        acting: ids(&mapping.acting),
        primary: mapping.primary.map(|o| o.0),
    };
    if args.json {
        return print_json(&result);
    }
    let show = |shards: &[Option<u32>]| {
        let items: Vec<String> = shards
            .iter()
            .map(|s| s.map_or_else(|| "NONE".into(), |o| o.to_string()))
            .collect();
        format!("[{}]", items.join(","))
    };
    println!(
        "pool '{}' object '{}' -> pg {} -> up {} acting {} primary {}",
        result.pool,
        result.object,
        result.pg,
        show(&result.up),
        show(&result.acting),
        result
            .primary
            .map_or_else(|| "none".into(), |o| format!("osd.{o}"))
    );
    Ok(())
}

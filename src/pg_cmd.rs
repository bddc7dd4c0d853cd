//! `cairn pg ls [--state S]` and `cairn pg query PGID`: placement groups as
//! their primaries report them (state, up and acting sets, version, what is
//! left to recover or backfill, and why a PG does not serve), like Ceph's
//! `pg ls` and `pg query`; `cairn pg scrub|deep-scrub|repair PGID` asks a
//! PG's primary to check (and repair) its copies now.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json};
use crate::reports::current_pgs;
use cairn_proto::mon::PgStat;
use cairn_proto::osd::PgAction;
use cairn_types::PgId;
use clap::{Args, Subcommand};

/// `cairn pg ...`.
#[derive(Debug, Subcommand)]
pub enum PgCommand {
    /// List PGs, optionally only those whose state has a word (`--state degraded`).
    Ls(PgLsArgs),
    /// One PG in detail.
    Query(PgQueryArgs),
    /// Compare the PG's copies now (objects, sizes, versions, metadata).
    Scrub(PgActionArgs),
    /// Compare the copies and re-read and checksum all their data.
    DeepScrub(PgActionArgs),
    /// Deep-scrub and repair what differs from healthy copies.
    Repair(PgActionArgs),
}

#[derive(Debug, Args)]
pub struct PgActionArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The PG, as `cairn pg ls` prints it (`1.1f`: pool 1, seed 0x1f).
    pgid: String,
}

#[derive(Debug, Args)]
pub struct PgLsArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Only PGs whose state includes this word (`active`, `degraded`, `peering`, ...).
    #[arg(long)]
    state: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PgQueryArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The PG, as `POOL.SEED` in hex (`1.1f`), as `cairn pg ls` prints it.
    pgid: String,
    #[arg(long)]
    json: bool,
}

pub fn run(command: PgCommand) -> CliResult {
    match command {
        PgCommand::Ls(args) => ls(args),
        PgCommand::Query(args) => query(args),
        PgCommand::Scrub(args) => act(&args, PgAction::Scrub),
        PgCommand::DeepScrub(args) => act(&args, PgAction::DeepScrub),
        PgCommand::Repair(args) => act(&args, PgAction::Repair),
    }
}

fn act(args: &PgActionArgs, action: PgAction) -> CliResult {
    let pg: PgId = args.pgid.parse().map_err(|_| {
        format!(
            "{:?} is not a PG id like 1.1f (pool, then seed in hex)",
            args.pgid
        )
    })?;
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        let map = client.refresh_map().await?;
        if !map
            .pools
            .iter()
            .any(|p| p.id == pg.pool && pg.seed < p.pg_num)
        {
            return Err(format!("no PG {pg} in the map (`cairn pg ls` lists them)").into());
        }
        println!("{}", client.pg_command(pg, action).await?);
        CliResult::Ok(())
    })
}

fn fetch(conf: &ConfArgs) -> CliResult<Vec<PgStat>> {
    runtime()?.block_on(async {
        let client = connect(conf).await?;
        let map = client.refresh_map().await?;
        let reports = client.osd_stats().await?;
        CliResult::Ok(current_pgs(&map, &reports))
    })
}

fn ls(args: PgLsArgs) -> CliResult {
    let mut pgs = fetch(&args.conf)?;
    if let Some(word) = &args.state {
        pgs.retain(|pg| pg.state.split('+').any(|part| part == word));
    }
    if args.json {
        return print_json(&pgs);
    }
    println!(
        "{:<8} {:<44} {:>10} {:>7} {:>8}  {:<12} {:<12}",
        "PG", "STATE", "VERSION", "LOG", "MISSING", "UP", "ACTING"
    );
    for pg in &pgs {
        println!(
            "{:<8} {:<44} {:>10} {:>7} {:>8}  {:<12} {:<12}",
            pg.pg.to_string(),
            pg.state,
            pg.last_update,
            pg.log_entries,
            pg.missing_objects,
            osds(&pg.up),
            osds(&pg.acting)
        );
    }
    Ok(())
}

fn osds(list: &[cairn_types::OsdId]) -> String {
    let ids: Vec<String> = list.iter().map(|o| o.0.to_string()).collect();
    format!("[{}]", ids.join(","))
}

fn query(args: PgQueryArgs) -> CliResult {
    let pgs = fetch(&args.conf)?;
    let Some(pg) = pgs.into_iter().find(|p| p.pg.to_string() == args.pgid) else {
        return Err(format!(
            "no report for PG {} (is its primary up? `cairn pg ls` lists the reported PGs)",
            args.pgid
        )
        .into());
    };
    if args.json {
        return print_json(&pg);
    }
    println!("pg {}", pg.pg);
    println!("  state:            {}", pg.state);
    println!("  up:               {}", osds(&pg.up));
    println!("  acting:           {}", osds(&pg.acting));
    let primary = pg.primary.map_or("none".to_owned(), |p| p.0.to_string());
    println!("  primary:          {primary}");
    println!("  interval since:   epoch {}", pg.interval_epoch);
    println!("  last update:      {}", pg.last_update);
    println!("  log entries:      {}", pg.log_entries);
    println!("  missing objects:  {}", pg.missing_objects);
    println!("  backfill targets: {}", pg.backfill_targets);
    if let Some(permille) = pg.backfill_permille {
        println!("  backfill scanned: {:.1}%", f64::from(permille) / 10.0);
    }
    if let Some(why) = &pg.blocked {
        println!("  blocked:          {why}");
    }
    if let Some(kind) = &pg.scrubbing {
        println!("  scrubbing:        {kind}");
    }
    println!("  last scrub:       {}", stamp(pg.last_scrub_secs));
    println!("  last deep scrub:  {}", stamp(pg.last_deep_scrub_secs));
    if pg.inconsistent_objects > 0 {
        println!("  inconsistent:     {} objects", pg.inconsistent_objects);
        for object in &pg.inconsistent {
            println!("    {object}");
        }
    }
    Ok(())
}

/// A scrub stamp as seconds ago.
fn stamp(secs: u64) -> String {
    if secs == 0 {
        return "never (on this primary)".into();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{} s ago", now.saturating_sub(secs))
}

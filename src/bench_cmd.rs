//! `cairn bench …`: benchmarks at production settings.

use crate::output::{CliResult, fixed, grouped, print_json, table};
use cairn_store::StoreConfig;
use cairn_store::bench::{self, BenchOptions, BenchReport};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The local object store on a directory: durable 4 MiB writes, 4 MiB
    /// reads after dropping the page cache, durable 4 KiB writes.
    Store(StoreArgs),
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Directory on the disk to measure (not tmpfs); a scratch store is
    /// created inside it and removed afterwards.
    #[arg(long)]
    dir: PathBuf,
    /// Bytes written and read in 4 MiB objects (e.g. 2G, 512M).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Concurrent writers and readers of 4 MiB objects.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Length of each 4 KiB write phase (e.g. 10s).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Writer counts of the 4 KiB phases.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    writers: Vec<usize>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

pub fn run(command: BenchCommand) -> CliResult {
    match command {
        BenchCommand::Store(args) => store(&args),
    }
}

fn store(args: &StoreArgs) -> CliResult {
    if !args.dir.is_dir() {
        return Err(format!("--dir {}: not a directory", args.dir.display()).into());
    }
    if args.concurrency == 0
        || args.concurrency > 256
        || args.writers.iter().any(|&w| w == 0 || w > 256)
    {
        return Err("--concurrency and --writers must be between 1 and 256".into());
    }
    let options = BenchOptions {
        dir: args.dir.clone(),
        large_total_bytes: args.size,
        large_concurrency: args.concurrency,
        small_duration: args.duration,
        small_writers: args.writers.clone(),
        config: StoreConfig::default(),
    };
    let report = bench::run(&options)?;
    if args.json {
        return print_json(&report);
    }
    print_report(&report);
    Ok(())
}

fn print_report(report: &BenchReport) {
    let rows = report
        .phases
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                grouped(p.ops),
                fixed(p.mib_per_sec, 1),
                grouped(p.ops_per_sec as u64),
                fixed(p.latency_us_avg, 0),
                fixed(p.latency_us_p50, 0),
                fixed(p.latency_us_p99, 0),
                p.write_amplification
                    .map_or_else(|| "-".into(), |w| fixed(w, 3)),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "phase",
                "ops",
                "MiB/s",
                "ops/s",
                "avg µs",
                "p50 µs",
                "p99 µs",
                "write amp"
            ],
            rows
        )
    );
    if !report.cache_dropped {
        println!("note: could not drop the page cache (needs root); the read phase may hit memory");
    }
    println!(
        "peak resident memory: {:.1} MiB (metadata cache {:.0} MiB)",
        report.peak_rss_bytes as f64 / 1048576.0,
        report.cache_bytes as f64 / 1048576.0
    );
}

/// `1G`, `512M`, `64K`, or bytes.
fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = text.trim().split_at(
        text.trim()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.trim().len()),
    );
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 1G or 512M"))?;
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    value
        .checked_mul(scale)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// `10s`, `500ms`, `2m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration like 10s, 500ms or 2m");
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let value: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        _ => Err(bad()),
    }
}

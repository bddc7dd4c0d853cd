//! `cairn bench io500`: IO500's twelve phases on any mounted directory,
//! in IO500's order and with its rules on time, and its score.
//!
//! The phases are `cairn bench fs`'s, run with IO500's shape: ior-easy (a
//! file per process, large transfers), ior-hard (one shared file,
//! 47,008-byte transfers), mdtest-easy (empty files, a directory per
//! process), mdtest-hard (3,901-byte files in one directory) and find.
//! Each write phase runs until its stonewall (IO500 asks 300 s), then the
//! processes behind catch up to the one furthest on, and the reads,
//! stats and deletes act on everything written.
//!
//! The score, as IO500 defines it: the geometric mean of the four
//! bandwidth phases in GiB/s, the geometric mean of the eight metadata
//! phases (find among them) in thousands of operations a second, and the
//! square root of their product.
//!
//! With `--endpoint` instead of `--dir` the same phases run against an S3
//! server ([`s3`]): objects for files, prefixes for directories.

mod s3;

use super::{
    BLOCK_SIZE_PER_PROC_MAX_BYTES, FILES_PER_PROC_MAX, Family, HARD_FILE_SIZE_BYTES,
    HARD_TRANSFER_SIZE_DEFAULT, PhaseReport, Settings, Shape, TRANSFER_SIZE_MAX_BYTES, execute,
    print_report, run_dirs,
};
use crate::output::{CliResult, fixed, print_json};
use crate::units::{parse_duration, parse_size};
use clap::{ArgGroup, Args};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// IO500's bandwidth phases, in its order (our names for its phases).
const BANDWIDTH_PHASES: [&str; 4] = [
    "ior-easy-write",
    "ior-easy-read",
    "ior-hard-write",
    "ior-hard-read",
];
/// IO500's metadata phases: mdtest's write, stat, read and delete (our
/// create, stat, read and unlink) and find.
const METADATA_PHASES: [&str; 8] = [
    "mdtest-easy-create",
    "mdtest-easy-stat",
    "mdtest-easy-unlink",
    "mdtest-hard-create",
    "mdtest-hard-stat",
    "mdtest-hard-read",
    "mdtest-hard-unlink",
    "find",
];
/// The stonewall IO500's rules ask of a run it ranks.
const RULES_STONEWALL: Duration = Duration::from_secs(300);
/// Share of the free space a run may fill when `--max-bytes` is not given.
const FREE_SPACE_SHARE: f64 = 0.4;
/// A file system block, as mdtest-hard's 3,901-byte files take at least.
const BLOCK_BYTES: u64 = 4096;
/// What an S3 run may hold without `--max-bytes` (a bucket has no free
/// space to take a share of).
const S3_MAX_BYTES_DEFAULT: u64 = 1 << 30;
/// `--bucket` and `--region` when not given.
const S3_BUCKET_DEFAULT: &str = "io500";
const S3_REGION_DEFAULT: &str = "us-east-1";

/// Flags of `cairn bench io500`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["dir", "endpoint"])))]
pub struct Io500Args {
    /// Directory to measure, on any file system (a Cairn mount, CephFS, a
    /// local disk); the run works in DIR/cairn-bench-<pid>.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Or an S3 server to measure, http://host:port (Cairn's gateway, Ceph
    /// RGW, MinIO): the same phases on objects, in --bucket under the
    /// prefix cairn-bench-<pid>/.
    #[arg(long)]
    endpoint: Option<String>,
    /// With --endpoint: the bucket, created if missing [default: io500].
    #[arg(long)]
    bucket: Option<String>,
    /// With --endpoint: the access key requests are signed with.
    #[arg(
        long = "access-key",
        env = "AWS_ACCESS_KEY_ID",
        required_unless_present = "dir"
    )]
    access_key: Option<String>,
    /// With --endpoint: its secret key.
    #[arg(
        long = "secret-key",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        required_unless_present = "dir"
    )]
    secret_key: Option<String>,
    /// With --endpoint: the region requests are signed for [default:
    /// us-east-1].
    #[arg(long)]
    region: Option<String>,
    /// Worker processes (not threads), as IO500's MPI ranks; with
    /// --endpoint, concurrent clients in this process, each with its own
    /// connection.
    #[arg(long = "procs", default_value_t = 1)]
    proc_count: usize,
    /// How long each write phase runs. IO500's rules ask 300 s; a shorter
    /// run is reported as not valid for IO500, for quick looks.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    stonewall: Duration,
    /// ior-easy's transfer size (IO500's default configuration: 2 MiB).
    #[arg(long = "easy-transfer-size", default_value = "2M", value_parser = parse_size)]
    easy_transfer_size_bytes: u64,
    /// Most bytes the run may hold on DIR's file system (default: 40% of
    /// its free space) or in the bucket (default: 1G). It bounds each
    /// write however long its stonewall: a write that reaches its share
    /// ends early.
    #[arg(long = "max-bytes", value_parser = parse_size)]
    max_bytes: Option<u64>,
    /// Sync and drop the page cache (needs root) before the first read.
    #[arg(long, conflicts_with = "endpoint")]
    drop_caches: bool,
    /// Print one JSON document (and no live line).
    #[arg(long)]
    json: bool,
    /// Keep DIR/cairn-bench-<pid> and its files, or the objects under the
    /// prefix cairn-bench-<pid>/ (those the run has not deleted).
    #[arg(long)]
    keep: bool,
}

/// The score and what it rests on.
#[derive(Debug, Serialize)]
pub(crate) struct Io500Score {
    /// Geometric mean of the bandwidth phases, GiB/s.
    bandwidth_gib_per_sec: f64,
    /// Geometric mean of the metadata phases, thousands of ops/s.
    metadata_kiops: f64,
    /// √(bandwidth × metadata).
    score: f64,
    stonewall_secs: f64,
    /// Whether the run kept IO500's rule on time (a 300 s stonewall).
    valid: bool,
    /// Each phase's figure in the score: GiB/s or kIOPS.
    phases: Vec<(String, f64)>,
}

pub fn run(args: &Io500Args) -> CliResult {
    let live = !args.json;
    let io500 = match (&args.dir, &args.endpoint) {
        (Some(dir), None) => {
            let mut report = execute(settings(args, dir)?, live)?;
            report.io500 = Some(score_of(&report.phases, args.stonewall)?);
            if args.json {
                return print_json(&report);
            }
            print_report(&report);
            report.io500
        }
        (None, Some(endpoint)) => {
            let mut report = s3::execute(args, endpoint, live)?;
            report.io500 = Some(score_of(&report.phases, args.stonewall)?);
            if args.json {
                return print_json(&report);
            }
            s3::print_report(&report);
            report.io500
        }
        // clap's group "target" asks for exactly one.
        _ => return Err("give --dir or --endpoint, not both".into()),
    };
    if let Some(io500) = &io500 {
        print_score(io500);
    }
    Ok(())
}

fn print_score(io500: &Io500Score) {
    println!(
        "IO500 score {} (bandwidth {} GiB/s, metadata {} kIOPS)",
        fixed(io500.score, 4),
        fixed(io500.bandwidth_gib_per_sec, 4),
        fixed(io500.metadata_kiops, 4)
    );
    if !io500.valid {
        println!(
            "not valid for IO500: a {} s stonewall (its rules ask {} s)",
            fixed(io500.stonewall_secs, 0),
            RULES_STONEWALL.as_secs()
        );
    }
}

/// `cairn bench fs`'s settings for an IO500 run on `dir`.
fn settings(args: &Io500Args, dir: &Path) -> CliResult<Settings> {
    // Checked here: clap 4.6's `requires = "endpoint"` let them through
    // with --dir.
    if args.bucket.is_some() || args.region.is_some() {
        return Err("--bucket and --region go with --endpoint, not --dir".into());
    }
    let (dir, bench_dir) = run_dirs(dir, args.proc_count)?;
    let allowed_bytes = match args.max_bytes {
        Some(bytes) => bytes,
        None => {
            let stat = rustix::fs::statvfs(&dir)
                .map_err(|e| format!("--dir {}: statvfs: {e}", dir.display()))?;
            (stat.f_bavail.saturating_mul(stat.f_frsize) as f64 * FREE_SPACE_SHARE) as u64
        }
    };
    Ok(Settings {
        bench_dir,
        dir,
        drop_caches: args.drop_caches,
        shape: shape(args, allowed_bytes, "--max-bytes, or 40% of the free space")?,
    })
}

/// An IO500 run's phases: every family, IO500's transfer and file sizes,
/// and counts bounded by `allowed_bytes` (`allowed_from` says where that
/// figure came from, for the error when it is too little).
fn shape(args: &Io500Args, allowed_bytes: u64, allowed_from: &str) -> CliResult<Shape> {
    if args.stonewall.is_zero() {
        return Err("--stonewall must be more than 0 s".into());
    }
    let hard_transfer: u64 = HARD_TRANSFER_SIZE_DEFAULT.parse()?;
    let easy_transfer = args.easy_transfer_size_bytes;
    if easy_transfer == 0 || easy_transfer > TRANSFER_SIZE_MAX_BYTES {
        return Err(format!(
            "--easy-transfer-size must be more than 0 and at most {TRANSFER_SIZE_MAX_BYTES} bytes"
        )
        .into());
    }
    let (block_bytes, files) = shares(allowed_bytes, args.proc_count as u64);
    if block_bytes < easy_transfer.max(hard_transfer) || files == 0 {
        return Err(format!(
            "{allowed_bytes} bytes allowed ({allowed_from}) is too little for {} processes",
            args.proc_count
        )
        .into());
    }
    Ok(Shape {
        proc_count: args.proc_count,
        files_per_proc: files,
        phases: vec![
            Family::IorEasy,
            Family::IorHard,
            Family::MdtestEasy,
            Family::MdtestHard,
            Family::Find,
        ],
        transfer_sizes_bytes: vec![easy_transfer],
        hard_transfer_sizes_bytes: vec![hard_transfer],
        block_size_per_proc_bytes: block_bytes,
        hard_file_size_bytes: HARD_FILE_SIZE_BYTES,
        keep: args.keep,
        stonewall_ms: Some(u64::try_from(args.stonewall.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// Each process's bytes in each IOR phase and files in each mdtest phase
/// for `allowed` bytes over `procs` processes: ior-easy's and ior-hard's
/// data and mdtest-hard's files all stand at once before the reads, so
/// 45% each to the IOR phases and 10% to mdtest-hard (a block a file).
fn shares(allowed: u64, procs: u64) -> (u64, u64) {
    let per_proc = allowed / procs.max(1);
    let block = (per_proc / 100 * 45).min(BLOCK_SIZE_PER_PROC_MAX_BYTES);
    let files = (per_proc / 10 / BLOCK_BYTES).min(FILES_PER_PROC_MAX);
    (block, files)
}

/// The IO500 score of a run's phases.
fn score_of(phases: &[PhaseReport], stonewall: Duration) -> CliResult<Io500Score> {
    let figure = |name: &str| -> CliResult<f64> {
        let phase = phases
            .iter()
            .find(|p| p.phase == name)
            .ok_or_else(|| format!("the run has no {name} phase"))?;
        Ok(if name.starts_with("ior") {
            phase.mib_per_sec / 1024.0
        } else {
            phase.ops_per_sec / 1000.0
        })
    };
    let mut figures = Vec::new();
    let bandwidth: Vec<f64> = BANDWIDTH_PHASES
        .iter()
        .map(|name| figure(name))
        .collect::<CliResult<_>>()?;
    let metadata: Vec<f64> = METADATA_PHASES
        .iter()
        .map(|name| figure(name))
        .collect::<CliResult<_>>()?;
    for (name, value) in BANDWIDTH_PHASES
        .iter()
        .chain(&METADATA_PHASES)
        .zip(bandwidth.iter().chain(&metadata))
    {
        figures.push(((*name).to_owned(), *value));
    }
    let (bandwidth_gib_per_sec, metadata_kiops, score) = score(&bandwidth, &metadata);
    Ok(Io500Score {
        bandwidth_gib_per_sec,
        metadata_kiops,
        score,
        stonewall_secs: stonewall.as_secs_f64(),
        valid: stonewall >= RULES_STONEWALL,
        phases: figures,
    })
}

/// IO500's score of bandwidth figures (GiB/s) and metadata figures
/// (kIOPS): their geometric means, and the square root of the product.
fn score(bandwidth: &[f64], metadata: &[f64]) -> (f64, f64, f64) {
    let bw = geometric_mean(bandwidth);
    let md = geometric_mean(metadata);
    (bw, md, (bw * md).sqrt())
}

/// The geometric mean (0 if any figure is 0 or there is none).
fn geometric_mean(values: &[f64]) -> f64 {
    if values.is_empty() || values.iter().any(|v| *v <= 0.0) {
        return 0.0;
    }
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_score_is_the_root_of_the_geometric_means_product() {
        // By hand: bandwidth 1, 2, 4 and 8 GiB/s multiply to 64, whose
        // fourth root is 2√2 = 2.828427…; metadata 1, 1, 1, 1, 10, 10,
        // 10 and 10 kIOPS multiply to 10^4, whose eighth root is √10 =
        // 3.162277…; the score is √(2√2 × √10) = √8.944271… = 2.990697….
        let (bw, md, score) = score(
            &[1.0, 2.0, 4.0, 8.0],
            &[1.0, 1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 10.0],
        );
        assert!(close(bw, 2.0 * 2f64.sqrt()), "{bw}");
        assert!(close(md, 10f64.sqrt()), "{md}");
        assert!(close(score, 2.990_697_562_442_441), "{score}");
    }

    #[test]
    fn a_phase_at_zero_makes_the_score_zero() {
        assert_eq!(score(&[1.0, 0.0, 1.0, 1.0], &[1.0; 8]).2, 0.0);
        assert_eq!(geometric_mean(&[]), 0.0);
    }

    #[test]
    fn space_is_shared_between_the_phases_that_stand_at_once() {
        // 10 GiB over 2 processes: 45% of 5 GiB each to an IOR phase, 10%
        // in 4 KiB files to mdtest-hard.
        let (block, files) = shares(10 << 30, 2);
        assert_eq!(block, (5u64 << 30) / 100 * 45);
        assert_eq!(files, (5u64 << 30) / 10 / 4096);
        assert!(2 * (2 * block + files * 4096) <= 10 << 30);
    }
}

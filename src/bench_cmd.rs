//! `cairn bench …`: benchmarks at production settings.

use crate::output::{CliResult, fixed, grouped, print_json, table};
use crate::units::{parse_duration, parse_size};
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
    /// A running cluster through the client library, like `rados bench`:
    /// timed writes, then sequential or random reads of what was written.
    Object(crate::bench_object::ObjectArgs),
    /// Any mounted directory (a Cairn FUSE mount, CephFS, a local disk)
    /// through plain file I/O, like IO500: IOR-style bandwidth (a file per
    /// process, one shared file) and mdtest-style metadata rates, from
    /// worker processes started together.
    Fs(crate::bench_fs::FsArgs),
    /// IO500's twelve phases on any mounted directory or S3 endpoint
    /// (ior-easy, ior-hard, mdtest-easy, mdtest-hard, find), in its order,
    /// with its stonewall (300 s; shorter for a quick look) and its score.
    Io500(crate::bench_fs::io500::Io500Args),
    /// A matrix of cluster settings (OSDs, placement groups, replication or
    /// erasure coding, object size, concurrency) from a TOML plan, each
    /// point on a fresh `cairn up` cluster, repeated, with medians and
    /// spread; resumable, every raw result kept.
    Sweep(crate::bench_sweep::SweepArgs),
    /// Two runs side by side with ratios: two sweeps' `--out` directories,
    /// or two `cairn bench io500`/`fs --json` reports.
    Compare(crate::bench_report::CompareArgs),
    /// Any S3 server (Cairn's gateway, Ceph RGW, MinIO) over HTTP, like
    /// MinIO's warp: timed PUT, GET, HEAD, LIST or mixed requests, or the
    /// DELETE of a prefix, with SigV4-signed requests.
    S3(crate::bench_s3::S3Args),
    /// Adds up the `--report` files of `cairn bench object` or `s3` copies
    /// a launcher started (`mpirun -np N cairn bench object ... --report
    /// 'out/r{rank}.json'`): bandwidth and operations summed, the worst
    /// p99.
    Gather(crate::launch::GatherArgs),
    /// The erasure code on one core, no I/O: encode, rebuild with m shards
    /// lost, and parity-delta updates, in GB/s of data.
    Ec(crate::bench_ec::EcArgs),
    /// One worker process of `cairn bench fs` (it starts them).
    #[command(hide = true)]
    FsWorker(crate::bench_fs::FsWorkerArgs),
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
    /// Writer counts of the small-object phases.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    writers: Vec<usize>,
    /// Size of the small objects (e.g. 4K, 2K).
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    small_size: u64,
    /// Also run fio's equivalents on the same directory first (direct I/O;
    /// 4 KiB with --fsync=1 at queue depth 1) and print the ratios.
    #[arg(long)]
    fio: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// fio's figures for the same workloads.
#[derive(Debug, serde::Serialize)]
struct FioBaseline {
    write_4m_mib_per_sec: f64,
    read_4m_mib_per_sec: f64,
    write_4k_fsync_qd1_iops: f64,
    write_4k_fsync_16_jobs_iops: f64,
}

#[derive(Debug, serde::Serialize)]
struct Combined<'a> {
    store: &'a BenchReport,
    fio: Option<FioBaseline>,
}

pub fn run(command: BenchCommand) -> CliResult {
    match command {
        BenchCommand::Store(args) => store(&args),
        BenchCommand::Object(args) => crate::bench_object::run(&args),
        BenchCommand::Fs(args) => crate::bench_fs::run(&args),
        BenchCommand::Io500(args) => crate::bench_fs::io500::run(&args),
        BenchCommand::Sweep(args) => crate::bench_sweep::run(&args),
        BenchCommand::Compare(args) => crate::bench_report::compare(&args),
        BenchCommand::S3(args) => crate::bench_s3::run(&args),
        BenchCommand::Ec(args) => crate::bench_ec::run(&args),
        BenchCommand::Gather(args) => crate::launch::gather(&args),
        BenchCommand::FsWorker(args) => crate::bench_fs::run_worker(&args),
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
        small_size_bytes: usize::try_from(args.small_size)
            .map_err(|_| "--small-size is too large")?,
        config: StoreConfig::default(),
    };
    let fio = if args.fio { Some(run_fio(args)?) } else { None };
    let report = bench::run(&options)?;
    if args.json {
        return print_json(&Combined {
            store: &report,
            fio,
        });
    }
    print_report(&report);
    if let Some(fio) = &fio {
        print_comparison(&report, fio);
    }
    Ok(())
}

/// One fio job on `dir`; returns (MiB/s, IOPS) of its read or write side.
pub(crate) fn fio_job(dir: &std::path::Path, name: &str, args: &[String]) -> CliResult<(f64, f64)> {
    fio_job_with(std::process::Command::new("fio"), dir, name, args)
}

/// As [`fio_job`], run by `command`: fio itself, or a wrapper that execs
/// fio with the arguments appended (say, in a cgroup).
pub(crate) fn fio_job_with(
    mut command: std::process::Command,
    dir: &std::path::Path,
    name: &str,
    args: &[String],
) -> CliResult<(f64, f64)> {
    let file = dir.join(format!("cairn-fio-{}-{name}", std::process::id()));
    let output = command
        .arg(format!("--name={name}"))
        .arg(format!("--filename={}", file.display()))
        .args([
            "--direct=1",
            "--ioengine=psync",
            "--group_reporting",
            "--output-format=json",
        ])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run fio ({e}); install it with apt-get install fio"))?;
    let _ = std::fs::remove_file(&file);
    if !output.status.success() {
        return Err(format!(
            "fio {name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let job = &json["jobs"][0];
    let side = if job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0 {
        &job["write"]
    } else {
        &job["read"]
    };
    let mib = side["bw_bytes"].as_f64().unwrap_or(0.0) / 1_048_576.0;
    Ok((mib, side["iops"].as_f64().unwrap_or(0.0)))
}

fn run_fio(args: &StoreArgs) -> CliResult<FioBaseline> {
    let size = format!("--size={}", args.size);
    let runtime = format!("--runtime={}", args.duration.as_secs().max(1));
    let sequential = |rw: &str| vec![format!("--rw={rw}"), "--bs=4M".to_owned(), size.clone()];
    let (write_4m, _) = fio_job(&args.dir, "seqwrite", &sequential("write"))?;
    // fio lays the file out before reading it; the read itself is direct
    // I/O, so the page cache is not involved (dropped anyway, as for ours).
    drop_caches();
    let (read_4m, _) = fio_job(&args.dir, "seqread", &sequential("read"))?;
    let random = |jobs: usize| {
        vec![
            "--rw=randwrite".to_owned(),
            "--bs=4k".to_owned(),
            "--size=256M".to_owned(),
            "--fsync=1".to_owned(),
            "--time_based".to_owned(),
            runtime.clone(),
            format!("--numjobs={jobs}"),
        ]
    };
    let (_, qd1) = fio_job(&args.dir, "randwrite1", &random(1))?;
    let (_, jobs16) = fio_job(&args.dir, "randwrite16", &random(16))?;
    Ok(FioBaseline {
        write_4m_mib_per_sec: write_4m,
        read_4m_mib_per_sec: read_4m,
        write_4k_fsync_qd1_iops: qd1,
        write_4k_fsync_16_jobs_iops: jobs16,
    })
}

/// Syncs, then drops the page cache, dentries and inodes; false when the
/// kernel refused (not root, or in a container).
pub(crate) fn drop_caches() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", b"3").is_ok()
}

fn print_comparison(report: &BenchReport, fio: &FioBaseline) {
    let phase = |name: &str| report.phases.iter().find(|p| p.name == name);
    let mib = |name: &str| phase(name).map_or(0.0, |p| p.mib_per_sec);
    let iops = |name: &str| phase(name).map_or(0.0, |p| p.ops_per_sec);
    let one = iops("write 4 KiB, 1 writer");
    let sixteen = iops("write 4 KiB, 16 writers");
    let row = |what: &str, baseline: String, ours: String, ratio: f64, goal: &str| {
        vec![
            what.to_owned(),
            baseline,
            ours,
            format!("{ratio:.2}"),
            goal.to_owned(),
        ]
    };
    let rows = vec![
        row(
            "4 MiB durable writes (MiB/s)",
            fixed(fio.write_4m_mib_per_sec, 0),
            fixed(mib("write 4 MiB"), 0),
            mib("write 4 MiB") / fio.write_4m_mib_per_sec,
            ">= 0.90",
        ),
        row(
            "4 MiB reads (MiB/s)",
            fixed(fio.read_4m_mib_per_sec, 0),
            fixed(mib("read 4 MiB"), 0),
            mib("read 4 MiB") / fio.read_4m_mib_per_sec,
            ">= 0.90",
        ),
        row(
            "4 KiB durable writes, 16 writers vs fio qd1 (IOPS)",
            fixed(fio.write_4k_fsync_qd1_iops, 0),
            fixed(sixteen, 0),
            sixteen / fio.write_4k_fsync_qd1_iops,
            ">= 5",
        ),
        row(
            "4 KiB durable writes, 16 writers vs fio 16 jobs (IOPS)",
            fixed(fio.write_4k_fsync_16_jobs_iops, 0),
            fixed(sixteen, 0),
            sixteen / fio.write_4k_fsync_16_jobs_iops,
            "-",
        ),
        row(
            "4 KiB durable writes, 16 writers vs our 1 writer (IOPS)",
            fixed(one, 0),
            fixed(sixteen, 0),
            sixteen / one.max(1.0),
            ">= 5",
        ),
    ];
    println!("\nNext to fio on the same directory (direct I/O; 4 KiB with --fsync=1):");
    println!(
        "{}",
        table(&["workload", "baseline", "Cairn", "ratio", "goal"], rows)
    );
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

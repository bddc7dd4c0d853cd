//! `cairn bench object`: a running cluster's object throughput and latency
//! through the client library, like `rados bench`. `write` writes objects
//! for a fixed time; `seq` reads them back in order (once each), `rand`
//! reads random ones for a fixed time.
//!
//! Where the written names live: rados keeps them in a metadata object; we
//! keep them in a local file, `bench-<pool>.txt` next to the client config
//! (or `--list FILE`), one `name size_bytes` line per acknowledged write.
//! `--cleanup` removes the objects (after the run) and the file.
//!
//! For measurements over time (a failure under load): `--objects N` makes
//! `write` cycle over N names, overwriting once all exist, so the pool
//! holds a fixed volume however long the run; `--series FILE` records each
//! second's throughput with its wall-clock time; SIGINT or SIGTERM ends the
//! run early (operations in flight finish; summary and list as usual).

use crate::conn::{ConfArgs, connect};
use crate::output::{CliResult, fixed, print_json};
use crate::units::{parse_duration, parse_size};
use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadRange};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// Most concurrent operations.
const CONCURRENCY_MAX: usize = 1024;
/// Largest object (the OSD's own limit may be lower).
const OBJECT_SIZE_MAX_BYTES: u64 = 64 << 20;
/// Latency samples kept; beyond it percentiles use the first ones.
const LATENCY_SAMPLES_MAX: usize = 1 << 20;
/// Interval of the live lines.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);
pub(crate) const MIB: f64 = 1_048_576.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Write,
    Seq,
    Rand,
}

/// Flags of `cairn bench object`.
#[derive(Debug, Args)]
pub struct ObjectArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Pool to write to or read from.
    #[arg(long)]
    pool: String,
    /// write: timed writes; seq: read what write wrote, in order, once;
    /// rand: random reads of what write wrote, timed.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Size of each written object (e.g. 4M, 64K); reads use the recorded size.
    #[arg(long = "object-size", default_value = "4M", value_parser = parse_size)]
    object_size_bytes: u64,
    /// Operations in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long to start new operations (e.g. 30s, 500ms).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Remove the benchmark's objects and their list after the run.
    #[arg(long)]
    cleanup: bool,
    /// File listing written objects (default: bench-<pool>.txt next to the
    /// config, bench-<pool>-{rank}.txt under a launcher). `{rank}` is
    /// replaced by the launcher's rank, which copies need.
    #[arg(long = "list", value_name = "FILE")]
    list_file: Option<PathBuf>,
    /// Also write the JSON summary to FILE (`{rank}` replaced), after
    /// waiting in its directory for the launcher's other copies to start
    /// together; `cairn bench gather` adds the copies' files up.
    #[arg(long = "report", value_name = "FILE")]
    report_file: Option<PathBuf>,
    /// Print the summary as JSON (and no live lines).
    #[arg(long)]
    json: bool,
    /// write: cycle over this many object names, overwriting once all
    /// exist, so the pool holds a fixed volume however long the run.
    #[arg(long = "objects", value_name = "N")]
    object_count: Option<u64>,
    /// Write one CSV line per second to FILE (also with --json): wall-clock
    /// time, MiB/s, operations and errors of that second. `{rank}` is
    /// replaced; the file is made as the timed run starts.
    #[arg(long = "series", value_name = "FILE")]
    series_file: Option<PathBuf>,
}

/// One object of the list: its name and size.
#[derive(Clone, Debug)]
struct Listed {
    name: String,
    size_bytes: u64,
}

/// Counters shared by the workers and the reporter (also those of
/// `cairn bench s3`).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) started: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) latency_ns_sum: AtomicU64,
    pub(crate) latency_ns_last: AtomicU64,
    pub(crate) latency_ns_max: AtomicU64,
    pub(crate) samples: Mutex<Vec<u64>>,
    /// Objects written (write mode), for the list.
    written: Mutex<Vec<Listed>>,
    pub(crate) first_error: Mutex<Option<String>>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the data consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Stats {
    pub(crate) fn record_ok(&self, latency: Duration, bytes: u64) {
        let ns = nanos(latency);
        self.finished.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.latency_ns_sum.fetch_add(ns, Ordering::Relaxed);
        self.latency_ns_last.store(ns, Ordering::Relaxed);
        self.latency_ns_max.fetch_max(ns, Ordering::Relaxed);
        let mut samples = lock(&self.samples);
        if samples.len() < LATENCY_SAMPLES_MAX {
            samples.push(ns);
        }
    }

    pub(crate) fn record_error(&self, what: String) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        self.errors.fetch_add(1, Ordering::Relaxed);
        lock(&self.first_error).get_or_insert(what);
    }
}

/// What a run measured.
#[derive(Debug, Serialize)]
struct Summary {
    mode: Mode,
    pool: String,
    concurrency: usize,
    object_size_bytes: u64,
    elapsed_secs: f64,
    ops: u64,
    errors: u64,
    bytes_total: u64,
    bandwidth_mib_per_sec: f64,
    iops: f64,
    latency_avg_secs: f64,
    latency_p50_secs: f64,
    latency_p99_secs: f64,
    latency_max_secs: f64,
    objects_removed: u64,
    /// Reads of an erasure-coded pool the data shards answered directly,
    /// and those the primary answered (docs/erasure-coding.md).
    direct_reads: u64,
    reads_via_primary: u64,
    /// Of the direct reads, those that decoded a missing data shard.
    direct_reads_decoded: u64,
    first_error: Option<String>,
}

pub fn run(args: &ObjectArgs) -> CliResult {
    if args.concurrency == 0 || args.concurrency > CONCURRENCY_MAX {
        return Err(format!("--concurrency must be 1 to {CONCURRENCY_MAX}").into());
    }
    if args.object_size_bytes > OBJECT_SIZE_MAX_BYTES {
        return Err(format!("--object-size must be at most {OBJECT_SIZE_MAX_BYTES} bytes").into());
    }
    if args.object_count == Some(0) {
        return Err("--objects must be at least 1".into());
    }
    if args.object_count.is_some() && args.mode != Mode::Write {
        return Err("--objects applies to --mode write only".into());
    }
    let rank = crate::launch::Rank::from_env()?;
    let series_path = crate::launch::expand_path("--series", args.series_file.as_deref(), rank)?;
    let list_path = match crate::launch::expand_path("--list", args.list_file.as_deref(), rank)? {
        Some(file) => file,
        None => {
            let conf = args.conf.path();
            let dir = conf.parent().map(PathBuf::from).unwrap_or_default();
            match rank {
                Some(rank) if rank.count > 1 => {
                    dir.join(format!("bench-{}-{}.txt", args.pool, rank.index))
                }
                _ => dir.join(format!("bench-{}.txt", args.pool)),
            }
        }
    };
    let report = crate::launch::report(args.report_file.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summary = runtime.block_on(async {
        let client = connect(&args.conf).await?;
        let map = client.refresh_map().await?;
        if map.pool_by_name(&args.pool).is_none() {
            return Err(ClientError::NoPool(args.pool.clone()).into());
        }
        let listed = match args.mode {
            Mode::Write => Vec::new(),
            Mode::Seq | Mode::Rand => read_list(&list_path)?,
        };
        if let Some(report) = &report {
            // The other copies a launcher started begin their clocks with ours.
            tokio::task::block_in_place(|| report.start_together())?;
        }
        // Made as the clock starts: a sweep times its failures from it.
        let series = match &series_path {
            Some(path) => Some(Series::create(path)?),
            None => None,
        };
        let (stats, elapsed, series_result) = run_workers(args, &client, &listed, series).await;
        series_result.map_err(|e| format!("--series: {e}"))?;
        let mut objects = Arc::try_unwrap(stats)
            .map_err(|_| "benchmark workers still running")?
            .into_summary(args, elapsed);
        let mut written = std::mem::take(&mut objects.1);
        // With --objects a name is written many times; list it once.
        let mut seen = HashSet::new();
        written.retain(|entry| seen.insert(entry.name.clone()));
        let mut summary = objects.0;
        let direct = client.direct_read_stats();
        summary.direct_reads = direct.direct;
        summary.reads_via_primary = direct.via_primary;
        summary.direct_reads_decoded = direct.decoded;
        if args.mode == Mode::Write {
            write_list(&list_path, &written)?;
        } else if let Some(first) = listed.first() {
            // Reads use the sizes write recorded, not --object-size.
            summary.object_size_bytes = first.size_bytes;
        }
        if args.cleanup {
            let all = if args.mode == Mode::Write {
                written
            } else {
                listed
            };
            summary.objects_removed = cleanup(&client, &args.pool, &all).await?;
            drop(std::fs::remove_file(&list_path));
        }
        CliResult::Ok(summary)
    })?;
    if let Some(report) = &report {
        report.write(&summary)?;
    }
    if args.json {
        return print_json(&summary);
    }
    print_summary(&summary, &list_path);
    Ok(())
}

/// Runs the workers, the live lines (unless `--json`) and the series file
/// (with `--series`); returns the counters, the time until the last
/// operation finished and whether the series was written.
async fn run_workers(
    args: &ObjectArgs,
    client: &Client,
    listed: &[Listed],
    series: Option<Series>,
) -> (Arc<Stats>, Duration, std::io::Result<()>) {
    let stats = Arc::new(Stats::default());
    let start = Instant::now();
    let deadline = start + args.duration;
    let stop = CancellationToken::new();
    let next_index = Arc::new(AtomicU64::new(0));
    let listed: Arc<[Listed]> = listed.into();
    let payload = Bytes::from(pattern(args.object_size_bytes));
    // A per-run prefix keeps two runs' objects apart.
    let prefix = format!("bench-{:016x}", client.id());
    let mut workers = tokio::task::JoinSet::new();
    for worker_index in 0..args.concurrency {
        let worker = Worker {
            client: client.clone(),
            pool: args.pool.clone(),
            mode: args.mode,
            stats: stats.clone(),
            next_index: next_index.clone(),
            listed: listed.clone(),
            payload: payload.clone(),
            prefix: prefix.clone(),
            deadline,
            stop: stop.clone(),
            object_count: args.object_count,
            rng: (0x9e37_79b9_7f4a_7c15 ^ (worker_index as u64 + 1) ^ client.id()) | 1,
        };
        workers.spawn(worker.run());
    }
    let live = (!args.json).then(|| {
        print_live_header();
        let stats = stats.clone();
        Box::new(move |second: u64, before: &Sample, now: &Sample| {
            print_live_line(&stats, start, second, before, now);
        }) as LiveLine
    });
    let (elapsed, series_result) = drive(workers, stop, stats.clone(), start, live, series).await;
    (stats, elapsed, series_result)
}

/// Waits for `workers` (spawned at `start`) to finish, with the live lines
/// and the series file meanwhile and SIGINT or SIGTERM cancelling `stop`;
/// returns the time until the last operation finished and whether the
/// series was written. Also drives `cairn bench s3`.
pub(crate) async fn drive(
    mut workers: tokio::task::JoinSet<()>,
    stop: CancellationToken,
    stats: Arc<Stats>,
    start: Instant,
    live: Option<LiveLine>,
    series: Option<Series>,
) -> (Duration, std::io::Result<()>) {
    let signals = tokio::spawn(stop_on_signal(stop));
    let done = CancellationToken::new();
    let reporter = tokio::spawn(report(stats, start, live, series, done.clone()));
    while workers.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    done.cancel();
    // The reporter writes the last, partial second and returns; awaiting it
    // also drops its handle on the counters.
    let series_result = reporter
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    signals.abort();
    drop(signals.await);
    (elapsed, series_result)
}

/// The first SIGINT or SIGTERM stops new operations (those in flight
/// finish, the summary follows); a second one exits at once, for a run
/// stuck on an unreachable cluster.
pub(crate) async fn stop_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    stop.cancel();
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    std::process::exit(130);
}

/// One of `--concurrency` loops, each with one operation in flight.
struct Worker {
    client: Client,
    pool: String,
    mode: Mode,
    stats: Arc<Stats>,
    next_index: Arc<AtomicU64>,
    listed: Arc<[Listed]>,
    payload: Bytes,
    prefix: String,
    deadline: Instant,
    /// Set by SIGINT or SIGTERM: start nothing new.
    stop: CancellationToken,
    /// `--objects`: write names cycle over this many.
    object_count: Option<u64>,
    rng: u64,
}

impl Worker {
    async fn run(mut self) {
        while Instant::now() < self.deadline && !self.stop.is_cancelled() {
            let Some((name, size_bytes)) = self.next_object() else {
                return;
            };
            self.stats.started.fetch_add(1, Ordering::Relaxed);
            let begin = Instant::now();
            let outcome = match self.mode {
                Mode::Write => self
                    .client
                    .write_full(&self.pool, name.as_bytes(), self.payload.clone())
                    .await
                    .map(|_| size_bytes),
                Mode::Seq | Mode::Rand => self
                    .client
                    .read(&self.pool, name.as_bytes(), ReadRange::default())
                    .await
                    .map(|data| data.len() as u64),
            };
            match outcome {
                Ok(bytes) if bytes == size_bytes => {
                    self.stats.record_ok(begin.elapsed(), bytes);
                    if self.mode == Mode::Write {
                        lock(&self.stats.written).push(Listed { name, size_bytes });
                    }
                }
                Ok(bytes) => self
                    .stats
                    .record_error(format!("{name}: {bytes} bytes, expected {size_bytes}")),
                Err(error) => self.stats.record_error(format!("{name}: {error}")),
            }
        }
    }

    /// The next object to write or read; `None` when `seq` has read all.
    fn next_object(&mut self) -> Option<(String, u64)> {
        match self.mode {
            Mode::Write => {
                let mut index = self.next_index.fetch_add(1, Ordering::Relaxed);
                if let Some(count) = self.object_count {
                    index %= count;
                }
                Some((
                    format!("{}-{index}", self.prefix),
                    self.payload.len() as u64,
                ))
            }
            Mode::Seq => {
                let index = self.next_index.fetch_add(1, Ordering::Relaxed);
                let entry = self.listed.get(usize::try_from(index).ok()?)?;
                Some((entry.name.clone(), entry.size_bytes))
            }
            Mode::Rand => {
                if self.listed.is_empty() {
                    return None;
                }
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let index = (self.rng % self.listed.len() as u64) as usize;
                let entry = &self.listed[index];
                Some((entry.name.clone(), entry.size_bytes))
            }
        }
    }
}

/// A recognisable, not all-zero payload.
fn pattern(size_bytes: u64) -> Vec<u8> {
    (0..size_bytes).map(|i| (i % 251) as u8).collect()
}

/// The `--series` CSV file, one line per reporting interval.
pub(crate) struct Series {
    file: std::io::BufWriter<std::fs::File>,
}

impl Series {
    const HEADER: &'static str = "unix_time_secs,elapsed_secs,interval_secs,mib_per_sec,ops,errors,in_flight,latency_avg_secs";

    pub(crate) fn create(path: &Path) -> CliResult<Series> {
        let file =
            std::fs::File::create(path).map_err(|e| format!("--series {}: {e}", path.display()))?;
        let mut series = Series {
            file: std::io::BufWriter::new(file),
        };
        series
            .line(Series::HEADER)
            .map_err(|e| format!("--series {}: {e}", path.display()))?;
        Ok(series)
    }

    /// Writes and flushes one line, so a reader following the file sees
    /// each second as it ends.
    fn line(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.file, "{text}")?;
        self.file.flush()
    }
}

/// Counter values at the end of one reporting interval.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sample {
    pub(crate) at: Option<Instant>,
    pub(crate) started: u64,
    pub(crate) finished: u64,
    pub(crate) errors: u64,
    pub(crate) bytes: u64,
    pub(crate) latency_ns_sum: u64,
}

impl Sample {
    fn take(stats: &Stats) -> Sample {
        Sample {
            at: Some(Instant::now()),
            started: stats.started.load(Ordering::Relaxed),
            finished: stats.finished.load(Ordering::Relaxed),
            errors: stats.errors.load(Ordering::Relaxed),
            bytes: stats.bytes.load(Ordering::Relaxed),
            latency_ns_sum: stats.latency_ns_sum.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn ok(&self) -> u64 {
        self.finished.saturating_sub(self.errors)
    }

    /// What happened from `before` to this sample; `None` without times.
    pub(crate) fn since(&self, before: &Sample) -> Option<Interval> {
        let (Some(from), Some(to)) = (before.at, self.at) else {
            return None;
        };
        let secs = to.saturating_duration_since(from).as_secs_f64().max(1e-9);
        let ok = self.ok().saturating_sub(before.ok());
        let latency_avg_secs = if ok == 0 {
            0.0
        } else {
            self.latency_ns_sum.saturating_sub(before.latency_ns_sum) as f64 / ok as f64 / 1e9
        };
        Some(Interval {
            secs,
            ok,
            mib_per_sec: self.bytes.saturating_sub(before.bytes) as f64 / MIB / secs,
            latency_avg_secs,
        })
    }
}

/// The operations between two samples.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    pub(crate) secs: f64,
    /// Operations that succeeded.
    pub(crate) ok: u64,
    pub(crate) mib_per_sec: f64,
    pub(crate) latency_avg_secs: f64,
}

/// Prints the live line of one second: its number, then the counters at
/// its start and at its end.
pub(crate) type LiveLine = Box<dyn FnMut(u64, &Sample, &Sample) + Send>;

/// The live lines (one per second, like rados bench; the caller prints
/// their header) and the series file, until `done`; then the series gets
/// the last, partial interval.
async fn report(
    stats: Arc<Stats>,
    start: Instant,
    mut live: Option<LiveLine>,
    mut series: Option<Series>,
    done: CancellationToken,
) -> std::io::Result<()> {
    let mut tick = tokio::time::interval(REPORT_INTERVAL);
    tick.tick().await;
    let mut before = Sample {
        at: Some(start),
        ..Sample::default()
    };
    let mut second = 0u64;
    loop {
        let is_last = tokio::select! {
            _ = tick.tick() => false,
            () = done.cancelled() => true,
        };
        let now = Sample::take(&stats);
        if !is_last && let Some(live) = &mut live {
            second += 1;
            live(second, &before, &now);
        }
        if let Some(series) = &mut series {
            series.line(&series_line(start, &before, &now))?;
        }
        if is_last {
            return Ok(());
        }
        before = now;
    }
}

fn print_live_header() {
    println!(
        "{:>5} {:>8} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11}",
        "sec",
        "cur ops",
        "started",
        "finished",
        "cur MiB/s",
        "avg MiB/s",
        "last lat s",
        "avg lat s"
    );
}

fn print_live_line(stats: &Stats, start: Instant, second: u64, before: &Sample, now: &Sample) {
    let ok = now.ok();
    let latency_avg = if ok == 0 {
        0.0
    } else {
        now.latency_ns_sum as f64 / ok as f64 / 1e9
    };
    println!(
        "{second:>5} {:>8} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11}",
        now.started.saturating_sub(now.finished),
        now.started,
        now.finished,
        fixed((now.bytes - before.bytes) as f64 / MIB, 2),
        fixed(now.bytes as f64 / MIB / start.elapsed().as_secs_f64(), 2),
        fixed(
            stats.latency_ns_last.load(Ordering::Relaxed) as f64 / 1e9,
            4
        ),
        fixed(latency_avg, 4),
    );
}

/// One CSV line: the interval between two samples, stamped with the
/// wall-clock time at its end (so it lines up with other tools' clocks).
fn series_line(start: Instant, before: &Sample, now: &Sample) -> String {
    let (Some(to), Some(interval)) = (now.at, now.since(before)) else {
        return String::new();
    };
    let unix_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    format!(
        "{},{},{},{},{},{},{},{}",
        fixed(unix_secs, 3),
        fixed(to.saturating_duration_since(start).as_secs_f64(), 3),
        fixed(interval.secs, 3),
        fixed(interval.mib_per_sec, 2),
        interval.ok,
        now.errors.saturating_sub(before.errors),
        now.started.saturating_sub(now.finished),
        fixed(interval.latency_avg_secs, 4),
    )
}

impl Stats {
    fn into_summary(self, args: &ObjectArgs, elapsed: Duration) -> (Summary, Vec<Listed>) {
        let mut samples = self
            .samples
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        samples.sort_unstable();
        let percentile = |p: f64| percentile_secs(&samples, p);
        let errors = self.errors.into_inner();
        let ops = self.finished.into_inner() - errors;
        let bytes_total = self.bytes.into_inner();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let summary = Summary {
            mode: args.mode,
            pool: args.pool.clone(),
            concurrency: args.concurrency,
            object_size_bytes: args.object_size_bytes,
            elapsed_secs: secs,
            ops,
            errors,
            bytes_total,
            bandwidth_mib_per_sec: bytes_total as f64 / MIB / secs,
            iops: ops as f64 / secs,
            latency_avg_secs: if ops == 0 {
                0.0
            } else {
                self.latency_ns_sum.into_inner() as f64 / ops as f64 / 1e9
            },
            latency_p50_secs: percentile(0.50),
            latency_p99_secs: percentile(0.99),
            latency_max_secs: self.latency_ns_max.into_inner() as f64 / 1e9,
            objects_removed: 0,
            direct_reads: 0,
            reads_via_primary: 0,
            direct_reads_decoded: 0,
            first_error: self
                .first_error
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
        };
        let written = self
            .written
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (summary, written)
    }
}

/// The latency at fraction `p` (0.5, 0.99) of sorted nanosecond samples,
/// in seconds; 0 without samples.
pub(crate) fn percentile_secs(sorted_ns: &[u64], p: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let rank = ((sorted_ns.len() - 1) as f64 * p).round() as usize;
    sorted_ns[rank.min(sorted_ns.len() - 1)] as f64 / 1e9
}

fn read_list(path: &PathBuf) -> CliResult<Vec<Listed>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e}; run `cairn bench object --mode write` first",
            path.display()
        )
    })?;
    let mut listed = Vec::new();
    for (line_index, line) in text.lines().enumerate() {
        let parsed = line
            .split_once(' ')
            .and_then(|(name, size)| Some((name, size.parse().ok()?)));
        let Some((name, size_bytes)) = parsed else {
            return Err(format!("{}:{}: not `name size`", path.display(), line_index + 1).into());
        };
        listed.push(Listed {
            name: name.to_owned(),
            size_bytes,
        });
    }
    if listed.is_empty() {
        return Err(format!("{}: no objects listed", path.display()).into());
    }
    Ok(listed)
}

/// Writes the list atomically (temp file, then rename).
fn write_list(path: &PathBuf, written: &[Listed]) -> CliResult {
    let mut text = String::new();
    for entry in written {
        text.push_str(&format!("{} {}\n", entry.name, entry.size_bytes));
    }
    let temp = path.with_extension("txt.tmp");
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, path)?;
    Ok(())
}

/// Removes `objects`; an object already gone counts as removed.
async fn cleanup(client: &Client, pool: &str, objects: &[Listed]) -> CliResult<u64> {
    let mut removed = 0u64;
    for entry in objects {
        match client.remove(pool, entry.name.as_bytes()).await {
            Ok(()) | Err(ClientError::NotFound) => removed += 1,
            Err(error) => return Err(format!("removing {}: {error}", entry.name).into()),
        }
    }
    Ok(removed)
}

fn print_summary(summary: &Summary, list_path: &std::path::Path) {
    println!(
        "Total time run:        {} s",
        fixed(summary.elapsed_secs, 3)
    );
    println!("Total ops:             {}", summary.ops);
    println!("Errors:                {}", summary.errors);
    println!("Object size:           {} bytes", summary.object_size_bytes);
    println!(
        "Bandwidth (MiB/s):     {}",
        fixed(summary.bandwidth_mib_per_sec, 3)
    );
    println!("IOPS:                  {}", fixed(summary.iops, 1));
    println!(
        "Latency avg/p50/p99/max (s): {} / {} / {} / {}",
        fixed(summary.latency_avg_secs, 4),
        fixed(summary.latency_p50_secs, 4),
        fixed(summary.latency_p99_secs, 4),
        fixed(summary.latency_max_secs, 4)
    );
    if summary.direct_reads + summary.reads_via_primary > 0 {
        println!(
            "Direct shard reads:    {} (decoded: {}; via the primary: {})",
            summary.direct_reads, summary.direct_reads_decoded, summary.reads_via_primary
        );
    }
    if let Some(error) = &summary.first_error {
        println!("First error:           {error}");
    }
    if summary.objects_removed > 0 {
        println!("Removed objects:       {}", summary.objects_removed);
    } else if summary.mode == Mode::Write {
        println!("Object list:           {}", list_path.display());
    }
}

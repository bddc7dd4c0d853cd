//! `cairn bench store`: the local store's speed at production settings
//! (durable commits, checksums on), with the process's and the device's
//! write counts for write amplification and the peak resident memory.
//!
//! Phases: durable 4 MiB object writes; the page cache dropped; 4 MiB
//! reads; durable 4 KiB writes with each requested number of writers.

use crate::{
    CollectionId, DiskStore, ObjectKey, ObjectStore, Op, ReadOptions, StoreConfig, StoreError,
    Transaction,
};
use bytes::Bytes;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BENCH_COLLECTION: CollectionId = CollectionId(u64::MAX - 1);
const LARGE_BYTES: usize = 4 << 20;
/// Distinct small objects each writer cycles through (overwrites after
/// that, as a busy PG would).
const SMALL_OBJECTS_PER_WRITER: u64 = 2000;

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub dir: PathBuf,
    /// Bytes written (and then read) in 4 MiB objects.
    pub large_total_bytes: u64,
    /// Concurrent writers and readers of 4 MiB objects.
    pub large_concurrency: usize,
    /// How long each 4 KiB phase runs.
    pub small_duration: Duration,
    /// Writer counts of the small-object phases.
    pub small_writers: Vec<usize>,
    /// Size of the small objects (4 KiB in the standard run).
    pub small_size_bytes: usize,
    pub config: StoreConfig,
}

/// One phase's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub name: String,
    pub concurrency: usize,
    pub ops: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_per_sec: f64,
    pub ops_per_sec: f64,
    pub latency_us_avg: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_max: f64,
    /// Bytes this process sent to storage (`/proc/self/io` write_bytes).
    pub process_write_bytes: u64,
    /// Bytes the device under `dir` wrote (`/sys/dev/block/*/stat`), all
    /// processes; `None` if unknown.
    pub device_write_bytes: Option<u64>,
    /// `process_write_bytes / bytes` for write phases.
    pub write_amplification: Option<f64>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub dir: PathBuf,
    pub phases: Vec<Phase>,
    pub cache_dropped: bool,
    pub peak_rss_bytes: u64,
    pub cache_bytes: u64,
}

/// Runs every phase on a fresh store in `options.dir`, removed afterwards.
///
/// # Errors
/// Any [`StoreError`] of the store under test.
pub fn run(options: &BenchOptions) -> Result<BenchReport, StoreError> {
    let dir = options
        .dir
        .join(format!("cairn-bench-store-{}", std::process::id()));
    let result = run_in(&dir, options);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(dir: &Path, options: &BenchOptions) -> Result<BenchReport, StoreError> {
    let store = Arc::new(DiskStore::open(dir, options.config.clone())?);
    store.apply(Transaction::new(BENCH_COLLECTION).with(Op::CreateCollection))?;
    let large_count = (options.large_total_bytes / LARGE_BYTES as u64).max(1);
    let concurrency = options.large_concurrency.max(1);
    let mut phases = Vec::new();
    // Payloads are made before timing: the store, not the generator, is
    // measured.
    let large: Vec<Bytes> = (0..concurrency)
        .map(|w| payload(LARGE_BYTES, w as u64))
        .collect();
    let small_bytes = options.small_size_bytes.max(1);
    let small: Vec<Bytes> = (0..64).map(|i| payload(small_bytes, 1000 + i)).collect();
    phases.push(measure("write 4 MiB", concurrency, dir, true, || {
        run_workers(concurrency, large_count, None, |worker, i| {
            let data = large[worker].clone();
            let txn = Transaction::new(BENCH_COLLECTION).with(Op::WriteFull {
                object: large_key(i),
                data: data.into(),
            });
            store.apply(txn).map(|()| LARGE_BYTES as u64)
        })
    })?);
    let cache_dropped = drop_page_cache();
    phases.push(measure("read 4 MiB", concurrency, dir, false, || {
        run_workers(concurrency, large_count, None, |_, i| {
            let bytes = store.read(BENCH_COLLECTION, &large_key(i), ReadOptions::default())?;
            Ok(bytes.len() as u64)
        })
    })?);
    for &writers in &options.small_writers {
        let writers = writers.max(1);
        let name = format!(
            "write 4 KiB, {writers} writer{}",
            if writers == 1 { "" } else { "s" }
        );
        phases.push(measure(&name, writers, dir, true, || {
            run_workers(
                writers,
                u64::MAX,
                Some(options.small_duration),
                |worker, i| {
                    let object = ObjectKey::new(Bytes::from(format!(
                        "small-{worker}-{}",
                        i % SMALL_OBJECTS_PER_WRITER
                    )));
                    let data = small[(i % 64) as usize].clone();
                    store.apply(Transaction::new(BENCH_COLLECTION).with(Op::WriteFull {
                        object,
                        data: data.into(),
                    }))?;
                    Ok(small_bytes as u64)
                },
            )
        })?);
    }
    Ok(BenchReport {
        dir: dir.to_path_buf(),
        phases,
        cache_dropped,
        peak_rss_bytes: peak_rss_bytes(),
        cache_bytes: options.config.cache_bytes,
    })
}

fn large_key(i: u64) -> ObjectKey {
    ObjectKey::new(Bytes::from(format!("large-{i:08}")))
}

/// Incompressible-looking bytes, different per seed.
fn payload(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    // As a large payload arrives from the network: in a pooled huge-page
    // buffer (the wire crate receives data segments so), which the store
    // writes with `O_DIRECT` without staging a copy. Small ones stay on the
    // heap, as the wire leaves segments under 64 KiB in its read buffer.
    if len >= 64 * 1024
        && let Ok(aligned) = cairn_iobuf::aligned_copy(&out)
    {
        return aligned;
    }
    Bytes::from(out)
}

/// Per-operation latencies and bytes from the workers.
struct Samples {
    latencies: Vec<Duration>,
    bytes: u64,
    elapsed: Duration,
}

/// Runs `op(worker, index)` on `workers` threads for `count` indexes or
/// until `duration` passes.
fn run_workers(
    workers: usize,
    count: u64,
    duration: Option<Duration>,
    op: impl Fn(usize, u64) -> Result<u64, StoreError> + Sync,
) -> Result<Samples, StoreError> {
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = duration.map(|d| started + d);
    let results: Vec<Result<(Vec<Duration>, u64), StoreError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (next, op) = (&next, &op);
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    let mut bytes = 0;
                    loop {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        let t = Instant::now();
                        bytes += op(worker, i)?;
                        latencies.push(t.elapsed());
                    }
                    Ok((latencies, bytes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(StoreError::Io("bench worker panicked".into())))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let mut samples = Samples {
        latencies: Vec::new(),
        bytes: 0,
        elapsed,
    };
    for result in results {
        let (latencies, bytes) = result?;
        samples.latencies.extend(latencies);
        samples.bytes += bytes;
    }
    Ok(samples)
}

fn measure(
    name: &str,
    concurrency: usize,
    dir: &Path,
    writes: bool,
    body: impl FnOnce() -> Result<Samples, StoreError>,
) -> Result<Phase, StoreError> {
    let process_before = process_write_bytes();
    let device_before = device_write_bytes(dir);
    let mut samples = body()?;
    let process = process_write_bytes().saturating_sub(process_before);
    let device = device_write_bytes(dir)
        .zip(device_before)
        .map(|(a, b)| a.saturating_sub(b));
    samples.latencies.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pick = |q: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((samples.latencies.len() as f64 - 1.0) * q).round() as usize;
        samples.latencies.get(i).copied().map_or(0.0, us)
    };
    let ops = samples.latencies.len() as u64;
    let seconds = samples.elapsed.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    Ok(Phase {
        name: name.to_owned(),
        concurrency,
        ops,
        bytes: samples.bytes,
        seconds,
        mib_per_sec: samples.bytes as f64 / seconds / (1024.0 * 1024.0),
        ops_per_sec: ops as f64 / seconds,
        latency_us_avg: samples.latencies.iter().map(|&d| us(d)).sum::<f64>() / (ops.max(1) as f64),
        latency_us_p50: pick(0.50),
        latency_us_p99: pick(0.99),
        latency_us_max: samples.latencies.last().copied().map_or(0.0, us),
        process_write_bytes: process,
        device_write_bytes: device,
        write_amplification: (writes && samples.bytes > 0)
            .then(|| process as f64 / samples.bytes as f64),
    })
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`; false without permission.
fn drop_page_cache() -> bool {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", b"3").is_ok()
}

fn process_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Sectors written by the block device holding `dir`, in bytes.
fn device_write_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::stat(dir).ok()?;
    let (major, minor) = (
        rustix::fs::major(stat.st_dev),
        rustix::fs::minor(stat.st_dev),
    );
    let text = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    let sectors: u64 = text.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// Peak resident memory of this process (`VmHWM`).
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

//! `cairn bench s3`: any S3 server's throughput and latency over HTTP
//! (Cairn's gateway, Ceph RGW, MinIO), like MinIO's `warp`. `put` writes
//! objects named `PREFIX/NNNNNNNN`; `get` and `head` read random ones of
//! those a ListObjectsV2 walk of the prefix finds; `list` walks the prefix
//! page by page, over and over; `delete` removes what is there, once;
//! `mixed` does GETs, PUTs, HEADs and DELETEs in set proportions.
//!
//! Each of `--concurrency` workers keeps one HTTP/1.1 connection and one
//! request in flight; requests are SigV4-signed ([`sigv4`]) with unsigned
//! bodies. The counters, live lines, series file and signal handling are
//! `cairn bench object`'s. An error the run cannot get past (a refused
//! key, a missing bucket) ends it at once with that error, not with a
//! summary of nothing but errors.

pub(crate) mod http;
pub(crate) mod sigv4;

use self::http::{Endpoint, ListedObject, S3Connection, S3Error, Target};
use self::sigv4::Credentials;
use crate::bench_object::{LiveLine, MIB, Sample, Series, Stats, drive, lock, percentile_secs};
use crate::output::{CliResult, fixed, print_json, table};
use crate::units::{parse_duration, parse_size};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Most requests in flight (each its own connection).
const CONCURRENCY_MAX: usize = 1024;
/// Largest object: S3's limit for one PUT.
const OBJECT_SIZE_MAX_BYTES: u64 = 5 << 30;
/// The chunk every request body repeats: what a PUT holds in memory,
/// whatever the object's size (shared by all workers).
const CHUNK_BYTES: usize = 1 << 20;
/// Most objects a listing collects for get, head, delete and mixed.
const DISCOVERED_OBJECTS_MAX: usize = 10_000_000;
/// S3's largest page.
const PAGE_KEYS_MAX: u32 = 1000;
/// The timed modes' length without `--duration`.
const DURATION_DEFAULT: Duration = Duration::from_secs(30);
/// The pause after a request found no server, so that a run against one
/// that is down (or restarting) does not spin.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Error codes no later request can get past, and what to check.
const FATAL_CODES: &[(&str, &str)] = &[
    ("InvalidAccessKeyId", "check --access-key"),
    ("SignatureDoesNotMatch", "check --secret-key and --region"),
    ("AuthorizationHeaderMalformed", "check --region"),
    ("RequestTimeTooSkewed", "check this machine's clock"),
    ("AccessDenied", "the key may not use this bucket"),
    // A HEAD answer has no body to name the code: a 403 is a refused key.
    ("Forbidden", "the server refused the key"),
    ("NoSuchBucket", "check --bucket, or run --mode put first"),
    ("InvalidBucketName", "check --bucket"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Put,
    Get,
    Head,
    List,
    Delete,
    Mixed,
}

/// The kinds of request, each with its own figures in `mixed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Put,
    Head,
    Delete,
    List,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::Head => "head",
            Op::Delete => "delete",
            Op::List => "list",
        }
    }
}

/// `mixed`'s relative weights of GET, PUT, HEAD and DELETE.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    weights: [u64; 4],
}

impl Mix {
    const OPS: [Op; 4] = [Op::Get, Op::Put, Op::Head, Op::Delete];
    /// warp's defaults.
    const DEFAULT: Mix = Mix {
        weights: [45, 15, 30, 10],
    };

    fn pick(&self, random: u64) -> Op {
        let total: u64 = self.weights.iter().sum();
        let mut point = random % total;
        for (op, weight) in Mix::OPS.iter().zip(self.weights) {
            if point < weight {
                return *op;
            }
            point -= weight;
        }
        Op::Get
    }
}

/// `get=60,put=30,delete=5,head=5`: any of the four, relative weights.
fn parse_mix(text: &str) -> Result<Mix, String> {
    let mut weights = [0u64; 4];
    for part in text.split(',') {
        let bad = || format!("{part:?}: not op=weight with op get, put, head or delete");
        let (name, weight) = part.trim().split_once('=').ok_or_else(bad)?;
        let index = Mix::OPS
            .iter()
            .position(|op| op.name() == name.trim())
            .ok_or_else(bad)?;
        weights[index] = weight.trim().parse().map_err(|_| bad())?;
    }
    if weights.iter().sum::<u64>() == 0 || weights.iter().any(|&w| w > 1_000_000) {
        return Err(format!(
            "{text:?}: give weights from 0 to 1000000, not all 0"
        ));
    }
    Ok(Mix { weights })
}

/// Flags of `cairn bench s3`.
#[derive(Clone, Debug, Args)]
pub struct S3Args {
    /// The server: http://host:port (path-style requests; no TLS).
    #[arg(long)]
    endpoint: String,
    /// The access key requests are signed with.
    #[arg(long = "access-key", env = "AWS_ACCESS_KEY_ID")]
    access_key: String,
    /// Its secret key.
    #[arg(
        long = "secret-key",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    secret_key: String,
    /// The region requests are signed for (and a new bucket is made in).
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// The bucket; put and mixed create it if missing.
    #[arg(long, default_value = "cairn-bench")]
    bucket: String,
    /// Objects are named PREFIX/NNNNNNNN. `{rank}` is replaced by a
    /// launcher's rank, which its copies need (each its own prefix).
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// put: timed PUTs; get, head: timed requests to random objects under
    /// the prefix; list: timed ListObjectsV2 walks of the prefix; delete:
    /// remove the objects under the prefix, once; mixed: see --mix.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Size of each PUT object (e.g. 4K, 1G; at most 5G); bodies are
    /// streamed, not held.
    #[arg(long = "object-size", default_value = "4M", value_parser = parse_size)]
    object_size_bytes: u64,
    /// put: cycle over this many names, overwriting once all exist.
    #[arg(long = "objects", value_name = "N")]
    object_count: Option<u64>,
    /// Stop after N operations (also before --duration ends).
    #[arg(long = "count", value_name = "N")]
    op_count: Option<u64>,
    /// Requests in flight, each on its own keep-alive connection.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long to start new requests (e.g. 30s, 2m); default 30s, and
    /// for delete until every object is gone.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// mixed: relative weights, e.g. get=60,put=30,delete=5,head=5
    /// [default: get=45,put=15,head=30,delete=10, as warp].
    #[arg(long, value_parser = parse_mix)]
    mix: Option<Mix>,
    /// Keys per ListObjectsV2 page (max-keys), 1 to 1000.
    #[arg(long = "page-keys", default_value_t = PAGE_KEYS_MAX)]
    page_keys: u32,
    /// A request without an answer by then fails (and its connection is
    /// replaced).
    #[arg(long = "request-timeout", default_value = "5m", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Delete every object under the prefix after the run.
    #[arg(long)]
    cleanup: bool,
    /// Print the summary as JSON (and no live lines).
    #[arg(long)]
    json: bool,
    /// Write one CSV line per second to FILE (also with --json): wall-clock
    /// time, MiB/s, operations and errors of that second. `{rank}` is
    /// replaced; the file is made as the timed run starts.
    #[arg(long = "series", value_name = "FILE")]
    series_file: Option<PathBuf>,
    /// Also write the JSON summary to FILE (`{rank}` replaced), after
    /// waiting in its directory for the launcher's other copies to start
    /// together; `cairn bench gather` adds the copies' files up.
    #[arg(long = "report", value_name = "FILE")]
    report_file: Option<PathBuf>,
}

impl S3Args {
    fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 || self.concurrency > CONCURRENCY_MAX {
            return Err(format!("--concurrency must be 1 to {CONCURRENCY_MAX}"));
        }
        if self.object_size_bytes > OBJECT_SIZE_MAX_BYTES {
            return Err(format!(
                "--object-size must be at most {OBJECT_SIZE_MAX_BYTES} bytes (one PUT)"
            ));
        }
        if self.object_count == Some(0) || self.op_count == Some(0) {
            return Err("--objects and --count must be at least 1".into());
        }
        if self.object_count.is_some() && self.mode != Mode::Put {
            return Err("--objects applies to --mode put only".into());
        }
        if self.mix.is_some() && self.mode != Mode::Mixed {
            return Err("--mix applies to --mode mixed only".into());
        }
        if self.page_keys == 0 || self.page_keys > PAGE_KEYS_MAX {
            return Err(format!("--page-keys must be 1 to {PAGE_KEYS_MAX}"));
        }
        if self.bucket.is_empty() || self.bucket.contains('/') {
            return Err("--bucket must be a bucket name".into());
        }
        if self.prefix.trim_matches('/').is_empty() || self.prefix.starts_with('/') {
            return Err("--prefix must be a key prefix like bench or runs/a".into());
        }
        Ok(())
    }

    /// The listing prefix: `PREFIX/`.
    fn key_prefix(&self) -> String {
        format!("{}/", self.prefix.trim_end_matches('/'))
    }
}

/// What the workers of one run share.
#[derive(Debug)]
struct Plan {
    mode: Mode,
    mix: Mix,
    key_prefix: String,
    object_size_bytes: u64,
    object_count: Option<u64>,
    op_count: Option<u64>,
    page_keys: u32,
    request_timeout: Duration,
    deadline: Option<Instant>,
    /// Set by SIGINT, SIGTERM or a fatal error: start nothing new.
    stop: CancellationToken,
    chunk: Bytes,
    /// Operations begun, against `--count`.
    claimed: AtomicU64,
    /// The number in the next PUT's name.
    next_name: AtomicU64,
    /// get, head: what to read; delete: what is left to remove; mixed:
    /// the objects that exist (PUTs add, DELETEs take).
    objects: Mutex<Vec<ListedObject>>,
    /// mixed: keys a DELETE took, so a read that lost the race to one is
    /// told from a real error.
    deleted: Mutex<HashSet<String>>,
    total: Arc<Stats>,
    by_op: [Stats; 5],
    keys_listed: AtomicU64,
    reads_lost_to_deletes: AtomicU64,
    errors_by_code: Mutex<BTreeMap<String, u64>>,
    fatal: Mutex<Option<String>>,
}

impl Plan {
    fn new(args: &S3Args, mode: Mode, objects: Vec<ListedObject>, chunk: Bytes) -> Plan {
        let key_prefix = args.key_prefix();
        // mixed PUTs new names, after those that exist.
        let next_name = objects
            .iter()
            .filter_map(|o| o.key.strip_prefix(&key_prefix)?.parse::<u64>().ok())
            .max()
            .map_or(0, |n| n + 1);
        let duration = match (args.duration, mode) {
            (Some(duration), _) => Some(duration),
            (None, Mode::Delete) => None,
            (None, _) => Some(DURATION_DEFAULT),
        };
        Plan {
            mode,
            mix: args.mix.unwrap_or(Mix::DEFAULT),
            key_prefix,
            object_size_bytes: args.object_size_bytes,
            object_count: args.object_count,
            op_count: args.op_count,
            page_keys: args.page_keys,
            request_timeout: args.request_timeout,
            deadline: duration.map(|d| Instant::now() + d),
            stop: CancellationToken::new(),
            chunk,
            claimed: AtomicU64::new(0),
            next_name: AtomicU64::new(if mode == Mode::Mixed { next_name } else { 0 }),
            objects: Mutex::new(objects),
            deleted: Mutex::default(),
            total: Arc::default(),
            by_op: Default::default(),
            keys_listed: AtomicU64::new(0),
            reads_lost_to_deletes: AtomicU64::new(0),
            errors_by_code: Mutex::default(),
            fatal: Mutex::default(),
        }
    }

    fn stats(&self, op: Op) -> &Stats {
        &self.by_op[op as usize]
    }

    fn next_key(&self) -> String {
        let mut index = self.next_name.fetch_add(1, Ordering::Relaxed);
        if let Some(count) = self.object_count {
            index %= count;
        }
        format!("{}{index:08}", self.key_prefix)
    }

    fn record(&self, operation: &Operation, latency: Duration, result: Result<u64, S3Error>) {
        let op = operation.op();
        match result {
            Ok(bytes) => {
                self.total.record_ok(latency, bytes);
                self.stats(op).record_ok(latency, bytes);
                if let (Mode::Mixed, Operation::Put(key)) = (self.mode, operation) {
                    lock(&self.objects).push(ListedObject {
                        key: key.clone(),
                        size_bytes: self.object_size_bytes,
                    });
                }
            }
            Err(error) if self.lost_to_delete(operation, &error) => {
                // Not a measurement: as if it had not been started.
                self.total.started.fetch_sub(1, Ordering::Relaxed);
                self.stats(op).started.fetch_sub(1, Ordering::Relaxed);
                self.reads_lost_to_deletes.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                let text = format!("{} {}: {error}", op.name(), operation.key());
                *lock(&self.errors_by_code)
                    .entry(error.code().to_owned())
                    .or_default() += 1;
                if let Some(hint) = fatal_hint(&error) {
                    lock(&self.fatal).get_or_insert_with(|| format!("{text} ({hint})"));
                    self.stop.cancel();
                }
                self.total.record_error(text.clone());
                self.stats(op).record_error(text);
            }
        }
    }

    /// A mixed GET or HEAD of an object a DELETE of this run removed
    /// while the read was on its way.
    fn lost_to_delete(&self, operation: &Operation, error: &S3Error) -> bool {
        let (Operation::Get(object) | Operation::Head(object)) = operation else {
            return false;
        };
        self.mode == Mode::Mixed
            && error.status() == Some(404)
            && lock(&self.deleted).contains(&object.key)
    }
}

/// What to check when `error` is one no later request can get past.
fn fatal_hint(error: &S3Error) -> Option<&'static str> {
    FATAL_CODES
        .iter()
        .find(|(code, _)| *code == error.code())
        .map(|(_, hint)| *hint)
}

/// `what`: `error`, with the hint when there is one.
pub(crate) fn describe(what: &str, error: &S3Error) -> String {
    match fatal_hint(error) {
        Some(hint) => format!("{what}: {error} ({hint})"),
        None => format!("{what}: {error}"),
    }
}

/// One request to make.
#[derive(Debug)]
enum Operation {
    Put(String),
    Get(ListedObject),
    Head(ListedObject),
    Delete(ListedObject),
    List,
}

impl Operation {
    fn op(&self) -> Op {
        match self {
            Operation::Put(_) => Op::Put,
            Operation::Get(_) => Op::Get,
            Operation::Head(_) => Op::Head,
            Operation::Delete(_) => Op::Delete,
            Operation::List => Op::List,
        }
    }

    fn key(&self) -> &str {
        match self {
            Operation::Put(key) => key,
            Operation::Get(object) | Operation::Head(object) | Operation::Delete(object) => {
                &object.key
            }
            Operation::List => "(page)",
        }
    }
}

/// A xorshift step: cheap, and good enough to pick objects.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One of `--concurrency` loops, each with one request in flight on its
/// own connection.
struct Worker {
    plan: Arc<Plan>,
    connection: S3Connection,
    rng: u64,
    /// list: where this worker's walk of the prefix is.
    list_token: Option<String>,
}

impl Worker {
    async fn run(mut self) {
        while let Some(operation) = self.next_operation() {
            let op = operation.op();
            self.plan.total.started.fetch_add(1, Ordering::Relaxed);
            self.plan.stats(op).started.fetch_add(1, Ordering::Relaxed);
            let begin = Instant::now();
            let timeout = self.plan.request_timeout;
            let result = match tokio::time::timeout(timeout, self.execute(&operation)).await {
                Ok(result) => result,
                Err(_) => {
                    // Whatever the connection was doing, it is not reusable.
                    self.connection.reset();
                    Err(S3Error::Transport(format!(
                        "no answer within {}",
                        fixed(timeout.as_secs_f64(), 1)
                    )))
                }
            };
            let transport_failed = matches!(result, Err(S3Error::Transport(_)));
            self.plan.record(&operation, begin.elapsed(), result);
            if transport_failed {
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
    }

    /// The next request; `None` when the run is over.
    fn next_operation(&mut self) -> Option<Operation> {
        let plan = &self.plan;
        if plan.stop.is_cancelled() || plan.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        if let Some(count) = plan.op_count
            && plan.claimed.fetch_add(1, Ordering::Relaxed) >= count
        {
            return None;
        }
        let op = match plan.mode {
            Mode::Put => return Some(Operation::Put(plan.next_key())),
            Mode::List => return Some(Operation::List),
            Mode::Delete => return lock(&plan.objects).pop().map(Operation::Delete),
            Mode::Get => Op::Get,
            Mode::Head => Op::Head,
            Mode::Mixed => plan.mix.pick(next_random(&mut self.rng)),
        };
        if op == Op::Put {
            return Some(Operation::Put(plan.next_key()));
        }
        let random = next_random(&mut self.rng);
        let mut objects = lock(&plan.objects);
        if objects.is_empty() {
            // mixed with nothing left to read or delete writes instead.
            return (plan.mode == Mode::Mixed).then(|| Operation::Put(plan.next_key()));
        }
        let index = usize::try_from(random % objects.len() as u64).unwrap_or(0);
        Some(match op {
            Op::Head => Operation::Head(objects[index].clone()),
            Op::Delete => {
                let object = objects.swap_remove(index);
                lock(&plan.deleted).insert(object.key.clone());
                Operation::Delete(object)
            }
            _ => Operation::Get(objects[index].clone()),
        })
    }

    /// Makes one request; returns the bytes it moved.
    async fn execute(&mut self, operation: &Operation) -> Result<u64, S3Error> {
        let plan = self.plan.clone();
        match operation {
            Operation::Put(key) => {
                self.connection
                    .put_object(key, &plan.chunk, plan.object_size_bytes)
                    .await
            }
            Operation::Get(object) => {
                let got = self.connection.get_object(&object.key).await?;
                expect_size("GET", object, got).map(|()| got)
            }
            Operation::Head(object) => {
                let length = self.connection.head_object(&object.key).await?;
                expect_size("HEAD", object, length).map(|()| 0)
            }
            Operation::Delete(object) => {
                self.connection.delete_object(&object.key).await.map(|()| 0)
            }
            Operation::List => {
                let page = self
                    .connection
                    .list_page(&plan.key_prefix, plan.page_keys, self.list_token.as_deref())
                    .await?;
                plan.keys_listed
                    .fetch_add(page.objects.len() as u64, Ordering::Relaxed);
                // At the end, the walk starts again.
                self.list_token = page.next_token;
                Ok(0)
            }
        }
    }
}

fn expect_size(what: &str, object: &ListedObject, got_bytes: u64) -> Result<(), S3Error> {
    if got_bytes == object.size_bytes {
        return Ok(());
    }
    Err(S3Error::Invalid(format!(
        "{what} gave {got_bytes} bytes; the listing said {}",
        object.size_bytes
    )))
}

/// One run's (or one kind of request's) figures.
#[derive(Debug, Serialize)]
struct Figures {
    ops: u64,
    errors: u64,
    bytes_total: u64,
    ops_per_sec: f64,
    mib_per_sec: f64,
    latency_avg_secs: f64,
    latency_p50_secs: f64,
    latency_p99_secs: f64,
    latency_p999_secs: f64,
    latency_max_secs: f64,
}

impl Figures {
    fn of(stats: &Stats, elapsed: Duration) -> Figures {
        let mut samples = lock(&stats.samples).clone();
        samples.sort_unstable();
        let errors = stats.errors.load(Ordering::Relaxed);
        let ops = stats.finished.load(Ordering::Relaxed) - errors;
        let bytes_total = stats.bytes.load(Ordering::Relaxed);
        let secs = elapsed.as_secs_f64().max(1e-9);
        Figures {
            ops,
            errors,
            bytes_total,
            ops_per_sec: ops as f64 / secs,
            mib_per_sec: bytes_total as f64 / MIB / secs,
            latency_avg_secs: if ops == 0 {
                0.0
            } else {
                stats.latency_ns_sum.load(Ordering::Relaxed) as f64 / ops as f64 / 1e9
            },
            latency_p50_secs: percentile_secs(&samples, 0.50),
            latency_p99_secs: percentile_secs(&samples, 0.99),
            latency_p999_secs: percentile_secs(&samples, 0.999),
            latency_max_secs: stats.latency_ns_max.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[derive(Debug, Serialize)]
struct OpFigures {
    operation: &'static str,
    #[serde(flatten)]
    figures: Figures,
}

/// What a run measured.
#[derive(Debug, Serialize)]
struct Summary {
    mode: Mode,
    endpoint: String,
    bucket: String,
    prefix: String,
    concurrency: usize,
    /// put, mixed: `--object-size`; get, head, delete: the first listed
    /// object's size.
    object_size_bytes: u64,
    /// Objects the listing before the run found (get, head, delete, mixed).
    objects_found: u64,
    elapsed_secs: f64,
    #[serde(flatten)]
    total: Figures,
    keys_listed: u64,
    keys_per_sec: f64,
    /// mixed: each kind of request on its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    operations: Vec<OpFigures>,
    /// mixed: reads of an object a DELETE removed meanwhile (not counted).
    reads_lost_to_deletes: u64,
    errors_by_code: BTreeMap<String, u64>,
    first_error: Option<String>,
    objects_removed: u64,
    cleanup_errors: u64,
}

impl Summary {
    /// `found`: how many objects the listing before the run found, and
    /// the first one's size.
    fn new(args: &S3Args, plan: &Plan, found: (u64, Option<u64>), elapsed: Duration) -> Summary {
        let operations = if plan.mode == Mode::Mixed {
            Mix::OPS
                .iter()
                .map(|&op| OpFigures {
                    operation: op.name(),
                    figures: Figures::of(plan.stats(op), elapsed),
                })
                .collect()
        } else {
            Vec::new()
        };
        let keys_listed = plan.keys_listed.load(Ordering::Relaxed);
        Summary {
            mode: args.mode,
            endpoint: args.endpoint.clone(),
            bucket: args.bucket.clone(),
            prefix: plan.key_prefix.clone(),
            concurrency: args.concurrency,
            object_size_bytes: match (args.mode, found.1) {
                (Mode::Get | Mode::Head | Mode::Delete, Some(first_size)) => first_size,
                _ => args.object_size_bytes,
            },
            objects_found: found.0,
            elapsed_secs: elapsed.as_secs_f64(),
            total: Figures::of(&plan.total, elapsed),
            keys_listed,
            keys_per_sec: keys_listed as f64 / elapsed.as_secs_f64().max(1e-9),
            operations,
            reads_lost_to_deletes: plan.reads_lost_to_deletes.load(Ordering::Relaxed),
            errors_by_code: lock(&plan.errors_by_code).clone(),
            first_error: lock(&plan.total.first_error).clone(),
            objects_removed: 0,
            cleanup_errors: 0,
        }
    }
}

pub fn run(args: &S3Args) -> CliResult {
    let rank = crate::launch::Rank::from_env()?;
    let prefix = crate::launch::expand("--prefix", &args.prefix, rank)?;
    let series_file = crate::launch::expand_path("--series", args.series_file.as_deref(), rank)?;
    let ranked = S3Args {
        prefix,
        series_file,
        ..args.clone()
    };
    let args = &ranked;
    args.validate()?;
    let target = Arc::new(Target {
        endpoint: Endpoint::parse(&args.endpoint)?,
        credentials: Credentials {
            access_key: args.access_key.clone(),
            secret_key: args.secret_key.clone(),
            region: args.region.clone(),
        },
        bucket: args.bucket.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = crate::launch::report(args.report_file.as_deref())?;
    let summary = runtime.block_on(run_async(args, target, report.as_ref()))?;
    if let Some(report) = &report {
        report.write(&summary)?;
    }
    if args.json {
        return print_json(&summary);
    }
    print_summary(&summary);
    Ok(())
}

async fn run_async(
    args: &S3Args,
    target: Arc<Target>,
    report: Option<&crate::launch::Report>,
) -> CliResult<Summary> {
    let mut connection = S3Connection::new(target.clone());
    let found = prepare(args, &mut connection).await?;
    let found_counts = (found.len() as u64, found.first().map(|o| o.size_bytes));
    let plan = Arc::new(Plan::new(args, args.mode, found, chunk()));
    if let Some(report) = report {
        // The other copies a launcher started begin their clocks with ours.
        tokio::task::block_in_place(|| report.start_together())?;
    }
    // Made as the clock starts: a sweep times its failures from it.
    let series = match &args.series_file {
        Some(path) => Some(Series::create(path)?),
        None => None,
    };
    let (elapsed, series_result) =
        run_workers(&plan, &target, args.concurrency, !args.json, series).await;
    series_result.map_err(|e| format!("--series: {e}"))?;
    if let Some(fatal) = lock(&plan.fatal).take() {
        return Err(fatal.into());
    }
    let mut summary = Summary::new(args, &plan, found_counts, elapsed);
    if args.cleanup {
        (summary.objects_removed, summary.cleanup_errors) =
            cleanup(args, &target, &mut connection).await?;
    }
    Ok(summary)
}

/// Before the clock starts: the bucket for put and mixed, the objects for
/// the other modes but list. Errors here (a refused key) end the run.
async fn prepare(args: &S3Args, connection: &mut S3Connection) -> CliResult<Vec<ListedObject>> {
    if matches!(args.mode, Mode::Put | Mode::Mixed) {
        within(args.request_timeout, connection.create_bucket())
            .await
            .map_err(|e| describe(&format!("creating bucket {}", args.bucket), &e))?;
    }
    if matches!(args.mode, Mode::Put | Mode::List) {
        return Ok(Vec::new());
    }
    let found = discover(args, connection).await?;
    if found.is_empty() && args.mode != Mode::Mixed {
        return Err(format!(
            "no objects under s3://{}/{}; write some with --mode put first",
            args.bucket,
            args.key_prefix()
        )
        .into());
    }
    Ok(found)
}

/// `future`, or a transport error after `timeout`.
pub(crate) async fn within<T>(
    timeout: Duration,
    future: impl Future<Output = Result<T, S3Error>>,
) -> Result<T, S3Error> {
    tokio::time::timeout(timeout, future)
        .await
        .unwrap_or_else(|_| Err(S3Error::Transport("no answer in time".into())))
}

/// Every object under the prefix (at most [`DISCOVERED_OBJECTS_MAX`]).
async fn discover(args: &S3Args, connection: &mut S3Connection) -> CliResult<Vec<ListedObject>> {
    let prefix = args.key_prefix();
    let mut found = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = within(
            args.request_timeout,
            connection.list_page(&prefix, args.page_keys, token.as_deref()),
        )
        .await
        .map_err(|e| describe(&format!("listing s3://{}/{prefix}", args.bucket), &e))?;
        found.extend(page.objects);
        if found.len() >= DISCOVERED_OBJECTS_MAX {
            found.truncate(DISCOVERED_OBJECTS_MAX);
            return Ok(found);
        }
        match page.next_token {
            Some(next) => token = Some(next),
            None => return Ok(found),
        }
    }
}

/// Runs the workers to the end; returns the time until the last request
/// finished and whether the series file was written.
async fn run_workers(
    plan: &Arc<Plan>,
    target: &Arc<Target>,
    concurrency: usize,
    live: bool,
    series: Option<Series>,
) -> (Duration, std::io::Result<()>) {
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker_index in 0..concurrency {
        let worker = Worker {
            plan: plan.clone(),
            connection: S3Connection::new(target.clone()),
            rng: (0x9e37_79b9_7f4a_7c15 ^ (worker_index as u64 + 1).wrapping_mul(0xff51_afd7)) | 1,
            list_token: None,
        };
        workers.spawn(worker.run());
    }
    let live = live.then(|| {
        print_live_header(plan.mode);
        let plan = plan.clone();
        let mut keys_before = 0u64;
        Box::new(move |second: u64, before: &Sample, now: &Sample| {
            print_live_line(&plan, &mut keys_before, second, before, now);
        }) as LiveLine
    });
    drive(
        workers,
        plan.stop.clone(),
        plan.total.clone(),
        start,
        live,
        series,
    )
    .await
}

/// Deletes every object under the prefix; returns how many went and how
/// many deletes failed.
async fn cleanup(
    args: &S3Args,
    target: &Arc<Target>,
    connection: &mut S3Connection,
) -> CliResult<(u64, u64)> {
    let found = discover(args, connection).await?;
    if found.is_empty() {
        return Ok((0, 0));
    }
    let mut plan = Plan::new(args, Mode::Delete, found, Bytes::new());
    plan.op_count = None;
    plan.deadline = None;
    let plan = Arc::new(plan);
    let _ = run_workers(&plan, target, args.concurrency, false, None).await;
    if let Some(fatal) = lock(&plan.fatal).take() {
        return Err(format!("cleanup: {fatal}").into());
    }
    let errors = plan.total.errors.load(Ordering::Relaxed);
    let removed = plan.total.finished.load(Ordering::Relaxed) - errors;
    Ok((removed, errors))
}

/// The chunk bodies repeat: pseudo-random, so nothing on the way can
/// compress it.
fn chunk() -> Bytes {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut data = Vec::with_capacity(CHUNK_BYTES);
    while data.len() < CHUNK_BYTES {
        data.extend_from_slice(&next_random(&mut state).to_le_bytes());
    }
    data.truncate(CHUNK_BYTES);
    Bytes::from(data)
}

fn print_live_header(mode: Mode) {
    let volume = if mode == Mode::List {
        "keys/s"
    } else {
        "MiB/s"
    };
    println!(
        "{:>5} {:>10} {:>10} {:>8} {:>9} {:>11}",
        "sec", "ops/s", volume, "errors", "in flight", "avg lat ms"
    );
}

/// One second: its rates and mean latency, and the errors so far.
fn print_live_line(plan: &Plan, keys_before: &mut u64, second: u64, before: &Sample, now: &Sample) {
    let Some(interval) = now.since(before) else {
        return;
    };
    let volume = if plan.mode == Mode::List {
        let keys = plan.keys_listed.load(Ordering::Relaxed);
        let rate = keys.saturating_sub(*keys_before) as f64 / interval.secs;
        *keys_before = keys;
        fixed(rate, 0)
    } else {
        fixed(interval.mib_per_sec, 2)
    };
    println!(
        "{second:>5} {:>10} {volume:>10} {:>8} {:>9} {:>11}",
        fixed(interval.ok as f64 / interval.secs, 1),
        now.errors,
        now.started.saturating_sub(now.finished),
        fixed(interval.latency_avg_secs * 1e3, 3),
    );
}

fn ms(secs: f64) -> String {
    fixed(secs * 1e3, 3)
}

fn print_summary(summary: &Summary) {
    let total = &summary.total;
    println!(
        "Target:                {} s3://{}/{}",
        summary.endpoint, summary.bucket, summary.prefix
    );
    println!(
        "Total time run:        {} s",
        fixed(summary.elapsed_secs, 3)
    );
    println!(
        "Operations:            {} ({} /s)",
        total.ops,
        fixed(total.ops_per_sec, 1)
    );
    println!("Errors:                {}", total.errors);
    match summary.mode {
        Mode::List => println!(
            "Keys listed:           {} ({} /s)",
            summary.keys_listed,
            fixed(summary.keys_per_sec, 0)
        ),
        Mode::Head | Mode::Delete => {
            println!("Object size:           {} bytes", summary.object_size_bytes);
        }
        Mode::Put | Mode::Get | Mode::Mixed => {
            println!("Object size:           {} bytes", summary.object_size_bytes);
            println!("Bandwidth (MiB/s):     {}", fixed(total.mib_per_sec, 3));
        }
    }
    println!(
        "Latency ms avg/p50/p99/p99.9/max: {} / {} / {} / {} / {}",
        ms(total.latency_avg_secs),
        ms(total.latency_p50_secs),
        ms(total.latency_p99_secs),
        ms(total.latency_p999_secs),
        ms(total.latency_max_secs)
    );
    if !summary.operations.is_empty() {
        let rows = summary
            .operations
            .iter()
            .map(|op| {
                let f = &op.figures;
                vec![
                    op.operation.to_owned(),
                    f.ops.to_string(),
                    fixed(f.ops_per_sec, 1),
                    fixed(f.mib_per_sec, 2),
                    f.errors.to_string(),
                    ms(f.latency_p50_secs),
                    ms(f.latency_p99_secs),
                    ms(f.latency_p999_secs),
                    ms(f.latency_max_secs),
                ]
            })
            .collect();
        let header = [
            "operation",
            "ops",
            "ops/s",
            "MiB/s",
            "errors",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
        ];
        println!("{}", table(&header, rows));
    }
    if summary.reads_lost_to_deletes > 0 {
        println!(
            "Reads lost to deletes: {} (not counted)",
            summary.reads_lost_to_deletes
        );
    }
    for (code, count) in &summary.errors_by_code {
        println!("Errors {code}: {count}");
    }
    if let Some(error) = &summary.first_error {
        println!("First error:           {error}");
    }
    if summary.objects_removed + summary.cleanup_errors > 0 {
        println!(
            "Removed objects:       {} ({} deletes failed)",
            summary.objects_removed, summary.cleanup_errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_pick_in_proportion() {
        let mix = parse_mix("get=60,put=30,delete=5,head=5").expect("valid");
        let mut counts = [0u64; 4];
        for random in 0..100 {
            let op = mix.pick(random);
            counts[Mix::OPS.iter().position(|o| *o == op).unwrap_or(0)] += 1;
        }
        assert_eq!(counts, [60, 30, 5, 5]);
        assert_eq!(parse_mix("put=1").expect("valid").pick(12345), Op::Put);
        assert!(parse_mix("get=0").is_err());
        assert!(parse_mix("copy=5").is_err());
        assert!(parse_mix("get:5").is_err());
    }

    #[test]
    fn the_chunk_does_not_repeat_early() {
        let chunk = chunk();
        assert_eq!(chunk.len(), CHUNK_BYTES);
        assert_ne!(chunk[..4096], chunk[4096..8192]);
    }
}

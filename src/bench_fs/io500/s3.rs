//! The S3 variant of `cairn bench io500` (`--endpoint` instead of
//! `--dir`): IO500's twelve phases, in its order, with its stonewall and
//! wear-out and its score, run against an S3 server. The plan, the
//! stonewall's catch-up and the checks of what each process did are
//! `cairn bench fs`'s ([`run_plan`]); only the operations differ:
//!
//! - ior-easy write, read: each process PUTs its own sequence of objects
//!   of `--easy-transfer-size` (2 MiB) under its own prefix
//!   (`ior-easy-SIZE/pP/NNNNNNNN`), then GETs its neighbour's;
//! - ior-hard write, read: 47,008-byte objects of every process in one
//!   shared prefix, object `transfer_index × procs + proc` as IOR-hard's
//!   offsets in its shared file (`ior-hard-47008/NNNNNNNNNN`);
//! - mdtest-easy create, stat, unlink: empty objects, a prefix per
//!   process (`mdtest-easy/pP/f.N`): PUT, HEAD, DELETE;
//! - mdtest-hard create, stat, read, unlink: 3,901-byte objects in one
//!   shared prefix (`mdtest-hard/f.P.N`): PUT, HEAD, GET, DELETE;
//! - find: ListObjectsV2 pages over the mdtest objects, each process its
//!   share (its mdtest-easy prefix and `mdtest-hard/f.P.`), counting those
//!   of 3,901 bytes whose name holds `01`; every object listed counts as
//!   an operation.
//!
//! The one design choice to know: a "process" here is a task of this
//! process with its own keep-alive HTTP connection, not a process of its
//! own. An S3 client keeps no mount, cache or lock that IO500's MPI ranks
//! would contend on, so tasks load the server as processes would.
//!
//! Every object carries `bench fs`'s stamp of who wrote it for which
//! offset; reads check it and its length, stats the length. The run works
//! in `--bucket` (created if missing) under `cairn-bench-<pid>/`, refuses
//! a prefix that already holds objects, and deletes what is left there at
//! the end, also after a failed phase or SIGINT/SIGTERM, unless `--keep`.

use super::super::{
    Backend, Family, Finished, HARD_FILE_SIZE_BYTES, HARD_FILE_STAMP_STRIDE_BYTES, Live,
    PhaseContext, PhaseReport, PlannedPhase, Shape, Stamp, Step, Tally, check_proc_count, fill,
    phase_report, print_phases, run_plan, verify,
};
use super::{
    Io500Args, Io500Score, S3_BUCKET_DEFAULT, S3_MAX_BYTES_DEFAULT, S3_REGION_DEFAULT, shape,
};
use crate::bench_object::{lock, stop_on_signal};
use crate::bench_s3::http::{Endpoint, S3Connection, S3Error, Target};
use crate::bench_s3::sigv4::Credentials;
use crate::bench_s3::{describe, within};
use crate::output::CliResult;
use bytes::Bytes;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A request without an answer by then fails the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// S3's largest ListObjectsV2 page.
const PAGE_KEYS_MAX: u32 = 1000;
/// Most objects the cleanup deletes in one run (a run writes far fewer:
/// its files per process are bounded).
const CLEANUP_OBJECTS_MAX: usize = 100_000_000;

/// The settings of an S3 run, as the JSON report shows them.
#[derive(Debug, Serialize)]
struct S3Settings {
    endpoint: String,
    bucket: String,
    /// Where the run's objects are: `cairn-bench-<pid>/`.
    prefix: String,
    /// What the run may hold in the bucket (`--max-bytes`, or 1 GiB).
    max_bytes: u64,
    #[serde(flatten)]
    shape: Shape,
}

/// The report of an S3 run: `cairn bench io500 --dir`'s phases and
/// score, so `cairn bench compare` and sweeps read it the same way.
#[derive(Debug, Serialize)]
pub(super) struct S3Report {
    /// What the run measured through: "s3" ("posix" for `--dir`).
    api: &'static str,
    settings: S3Settings,
    pub(super) phases: Vec<PhaseReport>,
    elapsed_secs: f64,
    /// Whether nothing of the run is left under its prefix.
    prefix_removed: bool,
    /// Objects the cleanup at the end deleted (IOR's; mdtest's objects
    /// are deleted by its unlink phases).
    objects_removed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) io500: Option<Io500Score>,
}

/// Runs IO500's phases against `endpoint`; the report without its score.
pub(super) fn execute(args: &Io500Args, endpoint: &str, live: bool) -> CliResult<S3Report> {
    check_proc_count(args.proc_count)?;
    let max_bytes = args.max_bytes.unwrap_or(S3_MAX_BYTES_DEFAULT);
    let shape = shape(args, max_bytes, "--max-bytes, or 1 GiB for an S3 run")?;
    let (Some(access_key), Some(secret_key)) = (&args.access_key, &args.secret_key) else {
        return Err("--endpoint needs --access-key and --secret-key \
                    (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            .into());
    };
    let bucket = args.bucket.as_deref().unwrap_or(S3_BUCKET_DEFAULT);
    if bucket.is_empty() || bucket.contains('/') {
        return Err("--bucket must be a bucket name".into());
    }
    let target = Arc::new(Target {
        endpoint: Endpoint::parse(endpoint)?,
        credentials: Credentials {
            access_key: access_key.clone(),
            secret_key: secret_key.clone(),
            region: args
                .region
                .clone()
                .unwrap_or_else(|| S3_REGION_DEFAULT.to_owned()),
        },
        bucket: bucket.to_owned(),
    });
    let prefix = format!("cairn-bench-{}/", std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let backend = S3Backend {
        connections: Mutex::new(
            (0..shape.proc_count)
                .map(|_| S3Connection::new(target.clone()))
                .collect(),
        ),
        target,
        prefix: prefix.clone(),
        stop: CancellationToken::new(),
        runtime,
    };
    backend.runtime.block_on(backend.begin())?;
    // The first signal stops the processes between requests and the run
    // deletes its objects before it exits; a second exits at once.
    backend.runtime.spawn(stop_on_signal(backend.stop.clone()));
    let started = Instant::now();
    let result = run_plan(&shape, &backend, live);
    let removal = if shape.keep {
        Ok(0)
    } else {
        backend.runtime.block_on(backend.remove_all())
    };
    if backend.stop.is_cancelled() {
        eprintln!("\ncairn bench io500: interrupted");
        std::process::exit(130);
    }
    // A phase's error first: it is the cause when both fail.
    let phases = result?;
    let objects_removed = removal?;
    Ok(S3Report {
        api: "s3",
        settings: S3Settings {
            endpoint: endpoint.to_owned(),
            bucket: bucket.to_owned(),
            prefix,
            max_bytes,
            shape,
        },
        phases,
        elapsed_secs: started.elapsed().as_secs_f64(),
        prefix_removed: !args.keep,
        objects_removed,
        io500: None,
    })
}

/// The phases' table, and where the objects are if kept.
pub(super) fn print_report(report: &S3Report) {
    print_phases(&report.phases, report.settings.shape.stonewall_ms.is_some());
    if !report.prefix_removed {
        println!(
            "kept: s3://{}/{}",
            report.settings.bucket, report.settings.prefix
        );
    }
}

/// A run's connections to the server, one per process, kept from phase
/// to phase as a process keeps its mount.
struct S3Backend {
    runtime: tokio::runtime::Runtime,
    target: Arc<Target>,
    /// `cairn-bench-<pid>/`.
    prefix: String,
    /// Taken by a phase's processes while it runs.
    connections: Mutex<Vec<S3Connection>>,
    /// Set by SIGINT or SIGTERM.
    stop: CancellationToken,
}

impl Backend for S3Backend {
    /// Nothing: a prefix needs no making.
    fn prepare(&self, _phase: &PlannedPhase) -> CliResult {
        Ok(())
    }

    fn run_phase(&self, context: &PhaseContext<'_>) -> CliResult<PhaseReport> {
        let mut connections = std::mem::take(&mut *lock(&self.connections));
        // After a failed phase the connections are gone with its tasks.
        connections.resize_with(context.shape.proc_count, || {
            S3Connection::new(self.target.clone())
        });
        let (result, connections) = self.runtime.block_on(self.run_procs(context, connections));
        *lock(&self.connections) = connections;
        result
    }

    /// Nothing: the IOR objects stay until the end, within `--max-bytes`
    /// (its shares count them all at once).
    fn tidy(&self, _phase: &PlannedPhase) -> CliResult {
        Ok(())
    }

    /// An S3 server's caches are not ours to drop.
    fn drop_caches(&self) -> Option<bool> {
        None
    }
}

impl S3Backend {
    /// Before the clock starts: the bucket, and a prefix with nothing in
    /// it (objects there would be read, found and counted as the run's).
    async fn begin(&self) -> CliResult {
        let mut connection = S3Connection::new(self.target.clone());
        let bucket = &self.target.bucket;
        within(REQUEST_TIMEOUT, connection.create_bucket())
            .await
            .map_err(|e| describe(&format!("creating bucket {bucket}"), &e))?;
        let page = within(REQUEST_TIMEOUT, connection.list_page(&self.prefix, 1, None))
            .await
            .map_err(|e| describe(&format!("listing s3://{bucket}/{}", self.prefix), &e))?;
        if !page.objects.is_empty() {
            return Err(format!(
                "s3://{bucket}/{} already holds objects (a run kept with --keep?); \
                 remove them first, e.g. with cairn bench s3 --mode delete --prefix {}",
                self.prefix,
                self.prefix.trim_end_matches('/')
            )
            .into());
        }
        Ok(())
    }

    /// Runs one phase's processes together; returns its report and the
    /// connections the processes gave back.
    async fn run_procs(
        &self,
        context: &PhaseContext<'_>,
        connections: Vec<S3Connection>,
    ) -> (CliResult<PhaseReport>, Vec<S3Connection>) {
        let proc_count = context.shape.proc_count;
        let progress: Arc<Vec<AtomicU64>> =
            Arc::new((0..proc_count).map(|_| AtomicU64::new(0)).collect());
        let start = Instant::now();
        let stonewall_at = context
            .stonewall
            .then(|| start + Duration::from_millis(context.shape.stonewall_ms.unwrap_or(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for (proc_index, connection) in connections.into_iter().enumerate() {
            let job = ProcJob {
                step: context.phase.step,
                proc_index: proc_index as u32,
                owner: if context.phase.step.is_write() {
                    proc_index as u32
                } else {
                    ((proc_index + 1) % proc_count) as u32
                },
                proc_count: proc_count as u32,
                first_op: context.first_op(proc_index),
                op_count: context.phase.op_count_per_proc,
                transfer_size_bytes: context.phase.transfer_size_bytes,
                prefix: self.prefix.clone(),
                stonewall_at,
                progress: progress.clone(),
                stop: self.stop.clone(),
            };
            tasks.spawn(job.run(connection));
        }
        let mut returned: Vec<Option<S3Connection>> = (0..proc_count).map(|_| None).collect();
        let result = collect(context, &mut tasks, &progress, &mut returned, start).await;
        // An early return left tasks running: stop them before the next
        // phase or the cleanup.
        tasks.shutdown().await;
        let connections = returned
            .into_iter()
            .map(|c| c.unwrap_or_else(|| S3Connection::new(self.target.clone())))
            .collect();
        (result, connections)
    }

    /// Deletes every object under the run's prefix (what a failed or
    /// interrupted run left, and IOR's objects); returns how many.
    async fn remove_all(&self) -> CliResult<u64> {
        let mut connection = S3Connection::new(self.target.clone());
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = within(
                REQUEST_TIMEOUT,
                connection.list_page(&self.prefix, PAGE_KEYS_MAX, token.as_deref()),
            )
            .await
            .map_err(|e| describe(&format!("cleanup: listing {}", self.prefix), &e))?;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            if keys.len() >= CLEANUP_OBJECTS_MAX {
                return Err(format!(
                    "cleanup: more than {CLEANUP_OBJECTS_MAX} objects under {}",
                    self.prefix
                )
                .into());
            }
            match page.next_token {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        let removed = keys.len() as u64;
        let keys = Arc::new(Mutex::new(keys));
        let mut tasks: tokio::task::JoinSet<Result<(), String>> = tokio::task::JoinSet::new();
        for _ in 0..lock(&self.connections).len().max(1) {
            let keys = keys.clone();
            let mut connection = S3Connection::new(self.target.clone());
            tasks.spawn(async move {
                loop {
                    let Some(key) = lock(&keys).pop() else {
                        return Ok(());
                    };
                    within(REQUEST_TIMEOUT, connection.delete_object(&key))
                        .await
                        .map_err(|e| describe(&format!("cleanup: DELETE {key}"), &e))?;
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.map_err(|e| format!("cleanup: {e}"))??;
        }
        Ok(removed)
    }
}

/// Waits for a phase's processes, with the live line; gives each
/// process's connection back in `returned`.
async fn collect(
    context: &PhaseContext<'_>,
    tasks: &mut tokio::task::JoinSet<ProcEnd>,
    progress: &[AtomicU64],
    returned: &mut [Option<S3Connection>],
    start: Instant,
) -> CliResult<PhaseReport> {
    let proc_count = context.shape.proc_count;
    let mut tally = Tally::new(proc_count, start);
    let mut live = Live::new(context, start);
    while tally.done_count < proc_count {
        let joined = tokio::select! {
            joined = tasks.join_next() => joined,
            () = tokio::time::sleep(live.interval) => {
                let done: u64 = progress.iter().map(|p| p.load(Ordering::Relaxed)).sum();
                live.update(done);
                continue;
            }
        };
        let Some(joined) = joined else {
            live.clear();
            return Err("processes vanished".into());
        };
        let end = joined.map_err(|e| format!("a process failed: {e}"))?;
        let p = end.proc_index as usize;
        returned[p] = Some(end.connection);
        match end.result {
            Ok((finished, ended_at)) => {
                tally.done[p] = Some(finished);
                tally.ops_done[p] = finished.0;
                tally.done_count += 1;
                tally.last_done_at = tally.last_done_at.max(ended_at);
            }
            Err(message) => {
                live.clear();
                return Err(format!("proc {p}: {message}").into());
            }
        }
    }
    let report = phase_report(context, &tally, start)?;
    live.finish(&report);
    Ok(report)
}

/// What a process hands back at its end.
struct ProcEnd {
    proc_index: u32,
    connection: S3Connection,
    /// Its figures and when it ended, or why it failed.
    result: Result<(Finished, Instant), String>,
}

/// One process of one phase: its objects, and how far it may go.
struct ProcJob {
    step: Step,
    proc_index: u32,
    /// The process whose objects a read, stat or delete acts on: the next
    /// one, as in `bench fs`, so no process reads back its own writes.
    owner: u32,
    proc_count: u32,
    first_op: u64,
    op_count: u64,
    transfer_size_bytes: u64,
    prefix: String,
    /// When a write stops (IO500's stonewall).
    stonewall_at: Option<Instant>,
    /// Each process's operations so far, for the live line.
    progress: Arc<Vec<AtomicU64>>,
    stop: CancellationToken,
}

impl ProcJob {
    async fn run(self, mut connection: S3Connection) -> ProcEnd {
        let started = Instant::now();
        let result = if self.step == Step::Find {
            self.find(&mut connection).await
        } else {
            self.operations(&mut connection).await
        };
        ProcEnd {
            proc_index: self.proc_index,
            connection,
            result: result.map(|(ops, bytes, found)| {
                let ended_at = Instant::now();
                let secs = ended_at.duration_since(started).as_secs_f64();
                ((ops, bytes, secs, found), ended_at)
            }),
        }
    }

    /// The step's operations on objects `first_op..op_count`, to the
    /// stonewall if any (never before the first); returns operations,
    /// bytes and no find count.
    async fn operations(
        &self,
        connection: &mut S3Connection,
    ) -> Result<(u64, u64, Option<u64>), String> {
        let mut ops = 0;
        let mut bytes = 0;
        for index in self.first_op..self.op_count {
            if self.stop.is_cancelled() {
                return Err("interrupted".into());
            }
            if ops > 0 && self.stonewall_at.is_some_and(|at| Instant::now() >= at) {
                break;
            }
            bytes += self.operation(connection, index).await?;
            ops += 1;
            self.progress[self.proc_index as usize].store(ops, Ordering::Relaxed);
        }
        Ok((ops, bytes, None))
    }

    /// One request on object `index` of the owner; returns the bytes of
    /// object data it moved.
    async fn operation(&self, connection: &mut S3Connection, index: u64) -> Result<u64, String> {
        let (key, size_bytes, stamp) = self.object(index);
        let failed = |what: &str| {
            let key = key.clone();
            let what = what.to_owned();
            move |e: S3Error| describe(&format!("{what} {key}"), &e)
        };
        match self.step {
            Step::IorEasyWrite
            | Step::IorHardWrite
            | Step::MdtestEasyCreate
            | Step::MdtestHardCreate => {
                let mut body = vec![0u8; size_bytes as usize];
                fill(&mut body, stamp);
                let body = Bytes::from(body);
                within(
                    REQUEST_TIMEOUT,
                    connection.put_object(&key, &body, size_bytes),
                )
                .await
                .map_err(failed("PUT"))
            }
            Step::IorEasyRead | Step::IorHardRead | Step::MdtestHardRead => {
                let got = within(
                    REQUEST_TIMEOUT,
                    connection.get_object_bytes(&key, size_bytes as usize),
                )
                .await
                .map_err(failed("GET"))?;
                if got.len() as u64 != size_bytes {
                    return Err(format!(
                        "GET {key}: {} bytes, expected {size_bytes}",
                        got.len()
                    ));
                }
                verify(&got, stamp).map_err(|mismatch| format!("verify {key}: {mismatch}"))?;
                Ok(size_bytes)
            }
            Step::MdtestEasyStat | Step::MdtestHardStat => {
                let found_bytes = within(REQUEST_TIMEOUT, connection.head_object(&key))
                    .await
                    .map_err(failed("HEAD"))?;
                if found_bytes != size_bytes {
                    return Err(format!(
                        "HEAD {key}: {found_bytes} bytes, expected {size_bytes}"
                    ));
                }
                Ok(0)
            }
            Step::MdtestEasyUnlink | Step::MdtestHardUnlink => {
                within(REQUEST_TIMEOUT, connection.delete_object(&key))
                    .await
                    .map_err(failed("DELETE"))?;
                Ok(0)
            }
            Step::Find => Err("find is not an operation on one object".into()),
        }
    }

    /// The key, size and stamp of object `index` of the owner, named as
    /// `bench fs` names its files.
    fn object(&self, index: u64) -> (String, u64, Stamp) {
        let (prefix, owner, transfer) = (&self.prefix, self.owner, self.transfer_size_bytes);
        match self.step.family() {
            Family::IorEasy => (
                format!("{prefix}ior-easy-{transfer}/p{owner}/{index:08}"),
                transfer,
                Stamp::new(owner, index * transfer),
            ),
            Family::IorHard => {
                // IOR-hard's offsets in its shared file, in objects.
                let object_index = index * u64::from(self.proc_count) + u64::from(owner);
                (
                    format!("{prefix}ior-hard-{transfer}/{object_index:010}"),
                    transfer,
                    Stamp::new(owner, object_index * transfer),
                )
            }
            Family::MdtestEasy => (
                format!("{prefix}mdtest-easy/p{owner}/f.{index}"),
                0,
                Stamp::new(owner, 0),
            ),
            Family::MdtestHard | Family::Find => (
                format!("{prefix}mdtest-hard/f.{owner}.{index}"),
                HARD_FILE_SIZE_BYTES,
                Stamp::new(owner, index * HARD_FILE_STAMP_STRIDE_BYTES),
            ),
        }
    }

    /// IO500's find (`-size 3901c -name '*01*'`) over this process's share
    /// of the mdtest objects, by listing: returns the objects listed, no
    /// bytes, and those that matched.
    async fn find(&self, connection: &mut S3Connection) -> Result<(u64, u64, Option<u64>), String> {
        let prefix = &self.prefix;
        let p = self.proc_index;
        let mut listed = 0;
        let mut found = 0;
        for share in [
            format!("{prefix}mdtest-easy/p{p}/"),
            format!("{prefix}mdtest-hard/f.{p}."),
        ] {
            let mut token: Option<String> = None;
            loop {
                if self.stop.is_cancelled() {
                    return Err("interrupted".into());
                }
                let page = within(
                    REQUEST_TIMEOUT,
                    connection.list_page(&share, PAGE_KEYS_MAX, token.as_deref()),
                )
                .await
                .map_err(|e| describe(&format!("listing {share}"), &e))?;
                for object in &page.objects {
                    let name = object.key.rsplit('/').next().unwrap_or(&object.key);
                    if object.size_bytes == HARD_FILE_SIZE_BYTES && name.contains("01") {
                        found += 1;
                    }
                }
                listed += page.objects.len() as u64;
                self.progress[p as usize].store(listed, Ordering::Relaxed);
                match page.next_token {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
        }
        Ok((listed, 0, Some(found)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(step: Step, proc_index: u32, owner: u32) -> ProcJob {
        ProcJob {
            step,
            proc_index,
            owner,
            proc_count: 3,
            first_op: 0,
            op_count: 10,
            transfer_size_bytes: 47008,
            prefix: "cairn-bench-1/".into(),
            stonewall_at: None,
            progress: Arc::new(Vec::new()),
            stop: CancellationToken::new(),
        }
    }

    #[test]
    fn ior_hard_objects_interleave_the_processes_as_its_shared_file() {
        // Transfer 2 of proc 1 of 3 is object 2 × 3 + 1 = 7, stamped for
        // offset 7 × 47,008, as in `bench fs`'s shared file.
        let (key, size, stamp) = job(Step::IorHardRead, 0, 1).object(2);
        assert_eq!(key, "cairn-bench-1/ior-hard-47008/0000000007");
        assert_eq!(size, 47008);
        assert_eq!(stamp, Stamp::new(1, 7 * 47008));
    }

    #[test]
    fn objects_are_named_as_bench_fs_names_files() {
        let (easy, _, _) = job(Step::IorEasyWrite, 2, 2).object(5);
        assert_eq!(easy, "cairn-bench-1/ior-easy-47008/p2/00000005");
        let (md_easy, size, _) = job(Step::MdtestEasyStat, 0, 1).object(12);
        assert_eq!(
            (md_easy.as_str(), size),
            ("cairn-bench-1/mdtest-easy/p1/f.12", 0)
        );
        let (md_hard, size, _) = job(Step::MdtestHardRead, 1, 2).object(3);
        assert_eq!(
            (md_hard.as_str(), size),
            ("cairn-bench-1/mdtest-hard/f.2.3", HARD_FILE_SIZE_BYTES)
        );
    }
}

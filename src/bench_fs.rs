//! `cairn bench fs`: a file-system benchmark for any mounted directory
//! (Cairn's FUSE mount, CephFS, a local disk), in the manner of IO500: IOR
//! phases (`ior-easy`: a file per process written sequentially;
//! `ior-hard`: one shared file written in interleaved 47,008-byte
//! transfers) and mdtest phases (`mdtest-easy`: empty files in a directory
//! per process; `mdtest-hard`: 3,901-byte files in one shared directory).
//! It uses plain `std::fs` calls and nothing of Cairn's client.
//!
//! The one design choice to know: the load comes from worker *processes*,
//! not threads, as IOR's MPI ranks do, so a per-process lock or cache in
//! the file system's client is exercised as it would be by real jobs. The
//! command re-executes itself (`cairn bench fs-worker`, hidden) once per
//! process and phase. A worker opens nothing until told to go: all of a
//! phase's workers share one pipe as stdin and each waits for one byte of
//! it, so one `write` of N bytes starts them together, and the phase's time
//! runs from that write to the last worker's report (wall time across all
//! processes, as IO500 takes it). Workers report JSON lines on stdout. They
//! die with the parent (`PR_SET_PDEATHSIG`), the parent kills them all when
//! one fails, and SIGINT or SIGTERM kills them and removes the directory.
//!
//! Every transfer carries a stamp of who wrote it for which offset, and the
//! read phases check it: a lost, torn or clobbered write (another process's
//! stamp where ours should be) fails the run with the path and offset.
//!
//! The plan, its stonewall and the checks of what each process did run on
//! a [`Backend`]: the worker processes here, or an S3 endpoint's
//! connections for `cairn bench io500 --endpoint` ([`io500`]).

pub mod io500;

use crate::output::{CliResult, fixed, grouped, print_json, table};
use crate::units::parse_size;
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal as _, Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most worker processes; a stamp keeps the process index in 16 bits.
const PROC_COUNT_MAX: usize = 1024;
/// Most files per process in an mdtest phase.
const FILES_PER_PROC_MAX: u64 = 10_000_000;
/// Largest transfer (one buffer of this size per worker).
const TRANSFER_SIZE_MAX_BYTES: u64 = 64 << 20;
/// Largest block per process; with [`PROC_COUNT_MAX`] the shared ior-hard
/// file stays under the 2^48 bytes a stamp's offset holds.
const BLOCK_SIZE_PER_PROC_MAX_BYTES: u64 = 64 << 30;
/// Size of each mdtest-hard file, written at create and read back (IO500).
const HARD_FILE_SIZE_BYTES: u64 = 3901;
/// IO500's ior-hard transfer size.
const HARD_TRANSFER_SIZE_DEFAULT: &str = "47008";
/// How long workers may take to start and report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a worker that closed its stdout may take to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a worker reports its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);
/// How often the live line is redrawn (on a terminal; elsewhere 1 s).
const LIVE_INTERVAL_TTY: Duration = Duration::from_millis(250);
const LIVE_INTERVAL_LOG: Duration = Duration::from_secs(1);
/// Worker lines in flight to the parent before readers block.
const EVENT_QUEUE_DEPTH: usize = 4096;
/// Version of the parent–worker protocol (arguments and JSON lines). Both
/// sides are the same executable, but the file may be replaced mid-run.
const PROTOCOL_VERSION: u32 = 1;
/// Bits of a stamp word that hold the byte offset; the rest hold the
/// writing process's index plus one, so all-zero bytes never verify.
const STAMP_OFFSET_BITS: u32 = 48;
const STAMP_OFFSET_MASK: u64 = (1 << STAMP_OFFSET_BITS) - 1;
/// Stride between mdtest-hard files' stamp offsets (above the file size).
const HARD_FILE_STAMP_STRIDE_BYTES: u64 = 1 << 20;
const MIB: f64 = 1_048_576.0;

/// A family of phases, as `--phases` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    IorEasy,
    IorHard,
    MdtestEasy,
    MdtestHard,
    /// IO500's find: every file of the mdtest phases examined (needs both).
    Find,
}

/// One timed phase, as a worker runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Step {
    IorEasyWrite,
    IorEasyRead,
    IorHardWrite,
    IorHardRead,
    MdtestEasyCreate,
    MdtestEasyStat,
    MdtestEasyUnlink,
    MdtestHardCreate,
    MdtestHardStat,
    MdtestHardRead,
    MdtestHardUnlink,
    Find,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::IorEasyWrite => "ior-easy-write",
            Step::IorEasyRead => "ior-easy-read",
            Step::IorHardWrite => "ior-hard-write",
            Step::IorHardRead => "ior-hard-read",
            Step::MdtestEasyCreate => "mdtest-easy-create",
            Step::MdtestEasyStat => "mdtest-easy-stat",
            Step::MdtestEasyUnlink => "mdtest-easy-unlink",
            Step::MdtestHardCreate => "mdtest-hard-create",
            Step::MdtestHardStat => "mdtest-hard-stat",
            Step::MdtestHardRead => "mdtest-hard-read",
            Step::MdtestHardUnlink => "mdtest-hard-unlink",
            Step::Find => "find",
        }
    }

    /// The family the step belongs to.
    fn family(self) -> Family {
        match self {
            Step::IorEasyWrite | Step::IorEasyRead => Family::IorEasy,
            Step::IorHardWrite | Step::IorHardRead => Family::IorHard,
            Step::MdtestEasyCreate | Step::MdtestEasyStat | Step::MdtestEasyUnlink => {
                Family::MdtestEasy
            }
            Step::MdtestHardCreate
            | Step::MdtestHardStat
            | Step::MdtestHardRead
            | Step::MdtestHardUnlink => Family::MdtestHard,
            Step::Find => Family::Find,
        }
    }

    fn is_ior(self) -> bool {
        matches!(
            self,
            Step::IorEasyWrite | Step::IorEasyRead | Step::IorHardWrite | Step::IorHardRead
        )
    }

    /// Whether the step makes data or files (the rest act on a neighbour's).
    fn is_write(self) -> bool {
        matches!(
            self,
            Step::IorEasyWrite
                | Step::IorHardWrite
                | Step::MdtestEasyCreate
                | Step::MdtestHardCreate
        )
    }
}

/// Flags of `cairn bench fs`.
#[derive(Debug, Args)]
pub struct FsArgs {
    /// Directory to measure, on any file system; the benchmark works in
    /// DIR/cairn-bench-<pid>, removed at the end unless --keep.
    #[arg(long)]
    dir: PathBuf,
    /// Worker processes (not threads), started together for each phase.
    #[arg(long = "procs", default_value_t = 1)]
    proc_count: usize,
    /// Files each process creates in each mdtest phase.
    #[arg(long, default_value_t = 10_000)]
    files_per_proc: u64,
    /// Phase families to run; they run in IO500's order (all writes and
    /// creates, then reads and stats, then deletes) whatever the order here.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ior-easy,ior-hard,mdtest-easy,mdtest-hard"
    )]
    phases: Vec<Family>,
    /// ior-easy transfer sizes; each gets a write and a read phase.
    #[arg(long = "transfer-sizes", value_delimiter = ',', default_value = "4K,47008,4M", value_parser = parse_size)]
    transfer_sizes_bytes: Vec<u64>,
    /// ior-hard transfer sizes (IO500 uses 47,008 bytes).
    #[arg(long = "hard-transfer-sizes", value_delimiter = ',', default_value = HARD_TRANSFER_SIZE_DEFAULT, value_parser = parse_size)]
    hard_transfer_sizes_bytes: Vec<u64>,
    /// Bytes each process writes in each IOR write phase, in whole transfers.
    #[arg(long = "block-size-per-proc", default_value = "256M", value_parser = parse_size)]
    block_size_per_proc_bytes: u64,
    /// Sync and drop the page cache (needs root) between the write and the
    /// read phases.
    #[arg(long)]
    drop_caches: bool,
    /// Print one JSON document (and no live line).
    #[arg(long)]
    json: bool,
    /// Keep DIR/cairn-bench-<pid> and its files.
    #[arg(long)]
    keep: bool,
}

/// Flags of the hidden `cairn bench fs-worker`: one process of one phase.
#[derive(Debug, Args)]
pub struct FsWorkerArgs {
    #[arg(long, value_enum)]
    step: Step,
    #[arg(long)]
    bench_dir: PathBuf,
    #[arg(long)]
    proc_index: u32,
    #[arg(long)]
    proc_count: u32,
    /// Transfers (IOR) or files (mdtest) of this process.
    #[arg(long)]
    op_count: u64,
    #[arg(long, default_value_t = 0)]
    transfer_size_bytes: u64,
    /// The first transfer or file of this process (a write resumed after
    /// a stonewall).
    #[arg(long, default_value_t = 0)]
    first_op: u64,
    /// A write stops after this many milliseconds (0: never), IO500's
    /// stonewall.
    #[arg(long, default_value_t = 0)]
    stonewall_ms: u64,
    /// The worker exits if its parent is not this process.
    #[arg(long)]
    parent_pid: i32,
    #[arg(long)]
    protocol: u32,
}

/// What a worker says on stdout, one JSON object a line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum WorkerLine {
    Ready {
        protocol: u32,
    },
    Progress {
        ops_done: u64,
    },
    Done {
        ops: u64,
        bytes: u64,
        secs: f64,
        /// Files a find matched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        found: Option<u64>,
    },
    Error {
        message: String,
    },
}

/// The settings of a run on a directory, as the JSON report shows them.
#[derive(Clone, Debug, Serialize)]
struct Settings {
    dir: PathBuf,
    bench_dir: PathBuf,
    drop_caches: bool,
    #[serde(flatten)]
    shape: Shape,
}

/// What a run does, whatever it runs on (a directory's worker processes
/// or an S3 endpoint's connections): the phases and their sizes.
#[derive(Clone, Debug, Serialize)]
struct Shape {
    proc_count: usize,
    files_per_proc: u64,
    phases: Vec<Family>,
    transfer_sizes_bytes: Vec<u64>,
    hard_transfer_sizes_bytes: Vec<u64>,
    block_size_per_proc_bytes: u64,
    hard_file_size_bytes: u64,
    keep: bool,
    /// IO500's stonewall: each write phase stops this long after its
    /// start, then the processes behind catch up to the one furthest on,
    /// and the phases after it act on what was written.
    stonewall_ms: Option<u64>,
}

/// One phase of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PlannedPhase {
    step: Step,
    /// Zero for mdtest.
    transfer_size_bytes: u64,
    op_count_per_proc: u64,
    bytes_per_op: u64,
}

/// What one phase measured.
#[derive(Debug, Serialize)]
struct PhaseReport {
    phase: &'static str,
    /// Whether the phase writes or creates.
    #[serde(skip)]
    write: bool,
    transfer_size_bytes: Option<u64>,
    procs: usize,
    ops: u64,
    bytes: u64,
    /// From the start signal to the last process's report.
    secs: f64,
    mib_per_sec: f64,
    ops_per_sec: f64,
    /// With --drop-caches, on the first read phase: whether it worked.
    caches_dropped: Option<bool>,
    /// Each process's transfers or files when it ended (counting those
    /// before its first of this run).
    proc_ops: Vec<u64>,
    /// Each process's own time, from its start to its end.
    proc_secs: Vec<f64>,
    /// A write under a stonewall: its operations when the stonewall hit,
    /// and when (the rest is the catch-up of the processes behind).
    #[serde(skip_serializing_if = "Option::is_none")]
    stonewall_ops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stonewall_secs: Option<f64>,
    /// A find: the files that matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// What the run measured through: "posix" here, "s3" for the S3
    /// variant of `cairn bench io500`.
    api: &'static str,
    settings: Settings,
    phases: Vec<PhaseReport>,
    elapsed_secs: f64,
    bench_dir_removed: bool,
    /// `cairn bench io500`: the score and what it rests on.
    #[serde(skip_serializing_if = "Option::is_none")]
    io500: Option<io500::Io500Score>,
}

pub fn run(args: &FsArgs) -> CliResult {
    let settings = settings(args)?;
    let report = execute(settings, !args.json)?;
    if args.json {
        return print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// Runs the phases of `settings` in DIR/cairn-bench-<pid> (removed
/// afterwards unless kept), with a live line on stderr if `live`.
fn execute(settings: Settings, live: bool) -> CliResult<Report> {
    std::fs::create_dir(&settings.bench_dir)
        .map_err(|e| format!("mkdir {}: {e}", settings.bench_dir.display()))?;
    let pids = WorkerPids::default();
    watch_signals(
        pids.clone(),
        settings.bench_dir.clone(),
        settings.shape.keep,
    );
    let started = Instant::now();
    let result = std::env::current_exe()
        .map_err(|e| format!("cannot find own executable: {e}").into())
        .and_then(|exe| {
            let processes = Processes {
                exe,
                settings: &settings,
                pids: &pids,
            };
            run_plan(&settings.shape, &processes, live)
        });
    if pids.stopping() {
        // The signal thread is removing the directory and will exit.
        loop {
            std::thread::park();
        }
    }
    let removed = !settings.shape.keep;
    let removal = if removed {
        std::fs::remove_dir_all(&settings.bench_dir)
            .map_err(|e| format!("removing {}: {e}", settings.bench_dir.display()))
    } else {
        Ok(())
    };
    // A phase's error first: it is the cause when both fail.
    let phases = result?;
    removal?;
    Ok(Report {
        api: "posix",
        io500: None,
        phases,
        elapsed_secs: started.elapsed().as_secs_f64(),
        bench_dir_removed: removed,
        settings,
    })
}

/// `--dir` made absolute (so that paths in reports and errors say where
/// they are) and the run's directory in it, after checking `--dir` and
/// `--procs`.
fn run_dirs(dir: &Path, proc_count: usize) -> CliResult<(PathBuf, PathBuf)> {
    if !dir.is_dir() {
        return Err(format!("--dir {}: not a directory", dir.display()).into());
    }
    check_proc_count(proc_count)?;
    let dir = std::fs::canonicalize(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
    let bench_dir = dir.join(format!("cairn-bench-{}", std::process::id()));
    Ok((dir, bench_dir))
}

/// `--procs` within what a stamp can name.
fn check_proc_count(proc_count: usize) -> CliResult {
    if proc_count == 0 || proc_count > PROC_COUNT_MAX {
        return Err(format!("--procs must be 1 to {PROC_COUNT_MAX}").into());
    }
    Ok(())
}

fn settings(args: &FsArgs) -> CliResult<Settings> {
    let (dir, bench_dir) = run_dirs(&args.dir, args.proc_count)?;
    if args.files_per_proc == 0 || args.files_per_proc > FILES_PER_PROC_MAX {
        return Err(format!("--files-per-proc must be 1 to {FILES_PER_PROC_MAX}").into());
    }
    if args.block_size_per_proc_bytes > BLOCK_SIZE_PER_PROC_MAX_BYTES {
        return Err(format!(
            "--block-size-per-proc must be at most {BLOCK_SIZE_PER_PROC_MAX_BYTES} bytes"
        )
        .into());
    }
    let sizes = args
        .transfer_sizes_bytes
        .iter()
        .chain(&args.hard_transfer_sizes_bytes);
    for &size in sizes {
        if size > TRANSFER_SIZE_MAX_BYTES || size > args.block_size_per_proc_bytes {
            return Err(format!(
                "transfer size {size}: must be at most {TRANSFER_SIZE_MAX_BYTES} bytes and at most --block-size-per-proc"
            )
            .into());
        }
    }
    // Each family or size once: a repeat would find its directory there.
    let phases = unique(&args.phases);
    if phases.contains(&Family::Find)
        && !(phases.contains(&Family::MdtestEasy) && phases.contains(&Family::MdtestHard))
    {
        return Err(
            "--phases find needs mdtest-easy and mdtest-hard (it finds their files)".into(),
        );
    }
    Ok(Settings {
        bench_dir,
        dir,
        drop_caches: args.drop_caches,
        shape: Shape {
            proc_count: args.proc_count,
            files_per_proc: args.files_per_proc,
            phases,
            transfer_sizes_bytes: unique(&args.transfer_sizes_bytes),
            hard_transfer_sizes_bytes: unique(&args.hard_transfer_sizes_bytes),
            block_size_per_proc_bytes: args.block_size_per_proc_bytes,
            hard_file_size_bytes: HARD_FILE_SIZE_BYTES,
            keep: args.keep,
            stonewall_ms: None,
        },
    })
}

/// `items` without repeats, in their first order.
fn unique<T: Copy + PartialEq>(items: &[T]) -> Vec<T> {
    let mut kept = Vec::with_capacity(items.len());
    for &item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// The phases in IO500's order: every write and create first, so that a
/// read comes as long after its write as the run allows; then reads and
/// stats; mdtest-easy's deletes before mdtest-hard's read, as IO500 has it.
fn plan(shape: &Shape) -> Vec<PlannedPhase> {
    let has = |family| shape.phases.contains(&family);
    let ior = |step, sizes: &[u64]| -> Vec<PlannedPhase> {
        sizes
            .iter()
            .map(|&size| PlannedPhase {
                step,
                transfer_size_bytes: size,
                op_count_per_proc: shape.block_size_per_proc_bytes / size,
                bytes_per_op: size,
            })
            .collect()
    };
    let mdtest = |step| {
        vec![PlannedPhase {
            step,
            transfer_size_bytes: 0,
            op_count_per_proc: shape.files_per_proc,
            bytes_per_op: match step {
                Step::MdtestHardCreate | Step::MdtestHardRead => HARD_FILE_SIZE_BYTES,
                _ => 0,
            },
        }]
    };
    let easy = &shape.transfer_sizes_bytes;
    let hard = &shape.hard_transfer_sizes_bytes;
    // Find examines both mdtest phases' files (the count is set when they
    // are known: see `run_plan`).
    let find = vec![PlannedPhase {
        step: Step::Find,
        transfer_size_bytes: 0,
        op_count_per_proc: 2 * shape.files_per_proc,
        bytes_per_op: 0,
    }];
    let order: [(Family, Vec<PlannedPhase>); 12] = [
        (Family::IorEasy, ior(Step::IorEasyWrite, easy)),
        (Family::MdtestEasy, mdtest(Step::MdtestEasyCreate)),
        (Family::IorHard, ior(Step::IorHardWrite, hard)),
        (Family::MdtestHard, mdtest(Step::MdtestHardCreate)),
        (Family::Find, find),
        (Family::IorEasy, ior(Step::IorEasyRead, easy)),
        (Family::MdtestEasy, mdtest(Step::MdtestEasyStat)),
        (Family::IorHard, ior(Step::IorHardRead, hard)),
        (Family::MdtestHard, mdtest(Step::MdtestHardStat)),
        (Family::MdtestEasy, mdtest(Step::MdtestEasyUnlink)),
        (Family::MdtestHard, mdtest(Step::MdtestHardRead)),
        (Family::MdtestHard, mdtest(Step::MdtestHardUnlink)),
    ];
    order
        .into_iter()
        .filter(|(family, _)| has(*family))
        .flat_map(|(_, phases)| phases)
        .collect()
}

/// Where a run's phases execute: worker processes on a directory
/// ([`Processes`]), or connections to an S3 endpoint (`io500::s3`). The
/// plan, its order, the stonewall's wear-out and the checks of what each
/// process did are [`run_plan`]'s, the same for both.
trait Backend {
    /// Untimed work before a phase (the directories a write needs).
    fn prepare(&self, phase: &PlannedPhase) -> CliResult;
    /// Runs one phase, its processes started together.
    fn run_phase(&self, context: &PhaseContext<'_>) -> CliResult<PhaseReport>;
    /// Untimed work after a phase (an IOR size's data removed once read).
    fn tidy(&self, phase: &PlannedPhase) -> CliResult;
    /// Called once before the first read phase: whether the caches were
    /// dropped, when the run was asked to drop them.
    fn drop_caches(&self) -> Option<bool>;
}

/// The worker processes of a run on a directory.
struct Processes<'a> {
    exe: PathBuf,
    settings: &'a Settings,
    pids: &'a WorkerPids,
}

impl Backend for Processes<'_> {
    fn prepare(&self, phase: &PlannedPhase) -> CliResult {
        prepare(self.settings, phase)
    }

    fn run_phase(&self, context: &PhaseContext<'_>) -> CliResult<PhaseReport> {
        run_phase(self, context)
    }

    fn tidy(&self, phase: &PlannedPhase) -> CliResult {
        tidy(self.settings, phase)
    }

    fn drop_caches(&self) -> Option<bool> {
        self.settings
            .drop_caches
            .then(crate::bench_cmd::drop_caches)
    }
}

/// Runs `shape`'s plan on `backend`; a live line on stderr if `live`.
fn run_plan(shape: &Shape, backend: &dyn Backend, live: bool) -> CliResult<Vec<PhaseReport>> {
    let plan = plan(shape);
    let mut reports = Vec::with_capacity(plan.len());
    let mut caches_dropped_once = false;
    // Transfers or files per process each write left, by family and size.
    let mut written: std::collections::HashMap<(Family, u64), u64> = Default::default();
    for planned in &plan {
        let mut phase = *planned;
        let key = (phase.step.family(), phase.transfer_size_bytes);
        if phase.step == Step::Find {
            phase.op_count_per_proc = [Family::MdtestEasy, Family::MdtestHard]
                .iter()
                .map(|f| written.get(&(*f, 0)).copied().unwrap_or(0))
                .sum();
        } else if !phase.step.is_write()
            && let Some(&count) = written.get(&key)
        {
            phase.op_count_per_proc = count;
        }
        let phase = &phase;
        backend.prepare(phase)?;
        let caches_dropped = if !phase.step.is_write() && !caches_dropped_once {
            caches_dropped_once = true;
            backend.drop_caches()
        } else {
            None
        };
        let stonewall = shape.stonewall_ms.is_some() && phase.step.is_write();
        let context = PhaseContext {
            backend,
            shape,
            phase,
            live,
            first_ops: Vec::new(),
            stonewall,
        };
        let label = || phase_label(phase);
        let mut report = backend
            .run_phase(&context)
            .map_err(|e| format!("{}: {e}", label()))?;
        if stonewall {
            report = wear_out(&context, report).map_err(|e| format!("{}: {e}", label()))?;
        }
        if phase.step.is_write() {
            written.insert(key, report.ops / shape.proc_count as u64);
        }
        report.caches_dropped = caches_dropped;
        reports.push(report);
        if !shape.keep {
            backend.tidy(phase)?;
        }
    }
    Ok(reports)
}

/// After a write's stonewall, the processes behind write on to where the
/// one furthest on stopped (IO500's wear-out), so every process has as
/// many transfers or files and the reads after act on all of them. The
/// phase's time and operations are both runs'.
fn wear_out(context: &PhaseContext<'_>, walled: PhaseReport) -> CliResult<PhaseReport> {
    let per_proc = walled.proc_ops.clone();
    let furthest = per_proc.iter().copied().max().unwrap_or(0);
    if furthest == 0 {
        return Err("no process wrote anything before the stonewall".into());
    }
    if per_proc
        .iter()
        .all(|&n| n == context.phase.op_count_per_proc)
    {
        // Every process wrote its whole share before the stonewall.
        return Ok(walled);
    }
    let mut phase = *context.phase;
    phase.op_count_per_proc = furthest;
    let caught = PhaseContext {
        phase: &phase,
        first_ops: per_proc,
        stonewall: false,
        ..*context
    };
    let rest = context.backend.run_phase(&caught)?;
    let secs = walled.secs + rest.secs;
    let ops = walled.ops + rest.ops;
    let bytes = walled.bytes + rest.bytes;
    Ok(PhaseReport {
        ops,
        bytes,
        secs,
        mib_per_sec: bytes as f64 / MIB / secs,
        ops_per_sec: ops as f64 / secs,
        proc_ops: vec![furthest; walled.procs],
        proc_secs: walled
            .proc_secs
            .iter()
            .zip(&rest.proc_secs)
            .map(|(a, b)| a + b)
            .collect(),
        stonewall_ops: Some(walled.ops),
        stonewall_secs: Some(walled.secs),
        ..walled
    })
}

/// Creates the directories a write phase's workers use (untimed, as
/// mdtest times directory creation apart from files).
fn prepare(settings: &Settings, phase: &PlannedPhase) -> CliResult {
    let bench = &settings.bench_dir;
    let mut dirs = Vec::new();
    match phase.step {
        Step::IorEasyWrite => dirs.push(ior_easy_dir(bench, phase.transfer_size_bytes)),
        Step::IorHardWrite => dirs.push(ior_hard_dir(bench, phase.transfer_size_bytes)),
        Step::MdtestEasyCreate => {
            dirs.push(bench.join("mdtest-easy"));
            for proc_index in 0..settings.shape.proc_count {
                dirs.push(mdtest_easy_dir(bench, proc_index as u32));
            }
        }
        Step::MdtestHardCreate => dirs.push(mdtest_hard_dir(bench)),
        _ => {}
    }
    for dir in dirs {
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Removes an IOR size's files once read back (untimed), so that a run
/// over several transfer sizes holds one size's data at a time on disk.
fn tidy(settings: &Settings, phase: &PlannedPhase) -> CliResult {
    let dir = match phase.step {
        Step::IorEasyRead => ior_easy_dir(&settings.bench_dir, phase.transfer_size_bytes),
        Step::IorHardRead => ior_hard_dir(&settings.bench_dir, phase.transfer_size_bytes),
        _ => return Ok(()),
    };
    std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()).into())
}

fn ior_easy_dir(bench: &Path, transfer_size_bytes: u64) -> PathBuf {
    bench.join(format!("ior-easy-{transfer_size_bytes}"))
}

fn ior_hard_dir(bench: &Path, transfer_size_bytes: u64) -> PathBuf {
    bench.join(format!("ior-hard-{transfer_size_bytes}"))
}

fn mdtest_easy_dir(bench: &Path, proc_index: u32) -> PathBuf {
    bench.join("mdtest-easy").join(format!("p{proc_index}"))
}

fn mdtest_hard_dir(bench: &Path) -> PathBuf {
    bench.join("mdtest-hard")
}

/// The pids of the running workers, for the signal thread; once it has
/// begun stopping, a newly started worker is killed at once.
#[derive(Clone, Debug, Default)]
struct WorkerPids {
    inner: Arc<Mutex<(bool, Vec<u32>)>>,
}

impl WorkerPids {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, Vec<u32>)> {
        // Every critical section leaves the data consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, pid: u32) {
        let mut inner = self.lock();
        if inner.0 {
            kill(pid);
        }
        inner.1.push(pid);
    }

    fn remove(&self, pid: u32) {
        self.lock().1.retain(|&p| p != pid);
    }

    fn stopping(&self) -> bool {
        self.lock().0
    }

    /// Marks the run as stopping and kills every worker; returns their pids.
    fn stop(&self) -> Vec<u32> {
        let mut inner = self.lock();
        inner.0 = true;
        for &pid in &inner.1 {
            kill(pid);
        }
        inner.1.clone()
    }
}

fn kill(pid: u32) {
    crate::up_cmd::signal(pid as i32, rustix::process::Signal::KILL);
}

/// On SIGINT or SIGTERM: kill the workers, remove the bench directory
/// (unless `keep`) and exit 130. A worker would die with us anyway (its
/// death signal), but after us, too late for the directory to go.
fn watch_signals(pids: WorkerPids, bench_dir: PathBuf, keep: bool) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let signalled = runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut interrupt), Ok(mut terminate)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return false;
            };
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            true
        });
        if !signalled {
            return;
        }
        let killed = pids.stop();
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while killed.iter().any(|&pid| is_running(pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !keep {
            drop(std::fs::remove_dir_all(&bench_dir));
        }
        eprintln!("\ncairn bench fs: interrupted");
        std::process::exit(130);
    });
}

/// Whether `pid` is alive (a zombie is not).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// What one phase needs from the run.
struct PhaseContext<'a> {
    backend: &'a dyn Backend,
    shape: &'a Shape,
    phase: &'a PlannedPhase,
    live: bool,
    /// Each process's first transfer or file (none: all from 0).
    first_ops: Vec<u64>,
    /// Whether the writes stop at the settings' stonewall.
    stonewall: bool,
}

impl PhaseContext<'_> {
    fn first_op(&self, proc_index: usize) -> u64 {
        self.first_ops.get(proc_index).copied().unwrap_or(0)
    }
}

/// A phase's worker processes; dropping it kills and reaps those still
/// running, so an early return leaves no orphan.
struct Workers<'a> {
    children: Vec<Child>,
    pids: &'a WorkerPids,
}

impl Workers<'_> {
    /// Waits (bounded) for worker `proc_index`, which closed its stdout.
    fn exit_status(&mut self, proc_index: usize) -> Option<ExitStatus> {
        let child = &mut self.children[proc_index];
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => return None,
            }
        }
    }
}

impl Drop for Workers<'_> {
    fn drop(&mut self) {
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                drop(child.kill());
            }
            drop(child.wait());
            self.pids.remove(child.id());
        }
    }
}

/// What the reader threads pass to the parent.
enum Event {
    Line(usize, WorkerLine),
    /// A line that is not a worker line (kept for the error message).
    Garbled(usize, String),
    /// The worker's stdout closed: it exited.
    Closed(usize),
}

fn worker_command(
    processes: &Processes<'_>,
    context: &PhaseContext<'_>,
    proc_index: usize,
) -> Command {
    let phase = context.phase;
    let mut command = Command::new(&processes.exe);
    command
        .args(["bench", "fs-worker", "--step", phase.step.name()])
        .arg("--bench-dir")
        .arg(&processes.settings.bench_dir)
        .args([
            "--proc-index".to_owned(),
            proc_index.to_string(),
            "--proc-count".to_owned(),
            context.shape.proc_count.to_string(),
            "--op-count".to_owned(),
            phase.op_count_per_proc.to_string(),
            "--first-op".to_owned(),
            context.first_op(proc_index).to_string(),
            "--stonewall-ms".to_owned(),
            if context.stonewall {
                context.shape.stonewall_ms.unwrap_or(0)
            } else {
                0
            }
            .to_string(),
            "--transfer-size-bytes".to_owned(),
            phase.transfer_size_bytes.to_string(),
            "--parent-pid".to_owned(),
            std::process::id().to_string(),
            "--protocol".to_owned(),
            PROTOCOL_VERSION.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// Starts the workers, lets them go together, and collects their reports.
fn run_phase(processes: &Processes<'_>, context: &PhaseContext<'_>) -> CliResult<PhaseReport> {
    let proc_count = context.shape.proc_count;
    let (barrier_reader, mut barrier_writer) = std::io::pipe()?;
    let (events, received) = std::sync::mpsc::sync_channel(EVENT_QUEUE_DEPTH);
    let mut workers = Workers {
        children: Vec::with_capacity(proc_count),
        pids: processes.pids,
    };
    for proc_index in 0..proc_count {
        let mut child = worker_command(processes, context, proc_index)
            .stdin(barrier_reader.try_clone()?)
            .spawn()
            .map_err(|e| format!("cannot start a worker process: {e}"))?;
        processes.pids.add(child.id());
        let stdout = child.stdout.take().ok_or("worker without stdout")?;
        workers.children.push(child);
        let events = events.clone();
        std::thread::spawn(move || read_worker(proc_index, stdout, &events));
    }
    // Only we hold the write end (pipes are close-on-exec): should we
    // return early or die before the go, every waiting worker reads
    // end-of-file and exits without starting.
    drop(barrier_reader);
    drop(events);
    wait_ready(&received, &mut workers)?;
    let start = Instant::now();
    barrier_writer.write_all(&vec![b'g'; proc_count])?;
    let report = collect(context, &received, &mut workers, start)?;
    for (proc_index, child) in workers.children.iter_mut().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("proc {proc_index} reported done but exited with {status}").into());
        }
    }
    Ok(report)
}

/// Forwards a worker's stdout lines to the parent as events.
fn read_worker(proc_index: usize, stdout: std::process::ChildStdout, events: &SyncSender<Event>) {
    use std::io::BufRead as _;
    for line in std::io::BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let event = match serde_json::from_str(&line) {
            Ok(parsed) => Event::Line(proc_index, parsed),
            Err(_) => Event::Garbled(proc_index, line),
        };
        if events.send(event).is_err() {
            return;
        }
    }
    drop(events.send(Event::Closed(proc_index)));
}

/// Describes how worker `proc_index` ended, for an error message.
fn exited(workers: &mut Workers<'_>, proc_index: usize) -> String {
    match workers.exit_status(proc_index) {
        Some(status) => format!("proc {proc_index} exited ({status}) before finishing"),
        None => format!("proc {proc_index} closed its output before finishing"),
    }
}

fn wait_ready(received: &Receiver<Event>, workers: &mut Workers<'_>) -> CliResult {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut ready_count = 0;
    while ready_count < workers.children.len() {
        let timeout = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(timeout) {
            Ok(Event::Line(_, WorkerLine::Ready { protocol })) if protocol == PROTOCOL_VERSION => {
                ready_count += 1
            }
            Ok(Event::Line(p, WorkerLine::Error { message })) => {
                return Err(format!("proc {p}: {message}").into());
            }
            Ok(Event::Line(p, line)) => {
                return Err(format!("proc {p}: unexpected {line:?} before the start").into());
            }
            Ok(Event::Garbled(p, line)) => return Err(format!("proc {p}: {line:?}").into()),
            Ok(Event::Closed(p)) => return Err(exited(workers, p).into()),
            Err(_) => {
                return Err(
                    format!("workers not ready after {} s", READY_TIMEOUT.as_secs()).into(),
                );
            }
        }
    }
    Ok(())
}

/// A process's report of its end: operations, bytes, seconds, and the
/// files a find matched.
type Finished = (u64, u64, f64, Option<u64>);

/// Per-phase state of the parent while the workers run.
struct Tally {
    ops_done: Vec<u64>,
    done: Vec<Option<Finished>>,
    done_count: usize,
    last_done_at: Instant,
}

impl Tally {
    /// Nothing done yet by `proc_count` processes started at `start`.
    fn new(proc_count: usize, start: Instant) -> Tally {
        Tally {
            ops_done: vec![0; proc_count],
            done: vec![None; proc_count],
            done_count: 0,
            last_done_at: start,
        }
    }
}

fn collect(
    context: &PhaseContext<'_>,
    received: &Receiver<Event>,
    workers: &mut Workers<'_>,
    start: Instant,
) -> CliResult<PhaseReport> {
    let proc_count = context.shape.proc_count;
    let mut tally = Tally::new(proc_count, start);
    let mut live = Live::new(context, start);
    while tally.done_count < proc_count {
        match received.recv_timeout(live.interval) {
            Ok(Event::Line(p, WorkerLine::Progress { ops_done })) => tally.ops_done[p] = ops_done,
            Ok(Event::Line(
                p,
                WorkerLine::Done {
                    ops,
                    bytes,
                    secs,
                    found,
                },
            )) => {
                if tally.done[p].is_none() {
                    tally.done_count += 1;
                }
                tally.done[p] = Some((ops, bytes, secs, found));
                tally.ops_done[p] = ops;
                tally.last_done_at = Instant::now();
            }
            Ok(Event::Line(p, WorkerLine::Error { message })) => {
                live.clear();
                return Err(format!("proc {p}: {message}").into());
            }
            Ok(Event::Line(p, line)) => {
                live.clear();
                return Err(format!("proc {p}: unexpected {line:?}").into());
            }
            Ok(Event::Garbled(p, line)) => {
                live.clear();
                return Err(format!("proc {p}: {line:?}").into());
            }
            Ok(Event::Closed(p)) if tally.done[p].is_none() => {
                live.clear();
                return Err(exited(workers, p).into());
            }
            Ok(Event::Closed(_)) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err("workers vanished".into()),
        }
        live.update(tally.ops_done.iter().sum());
    }
    let report = phase_report(context, &tally, start)?;
    live.finish(&report);
    Ok(report)
}

fn phase_report(
    context: &PhaseContext<'_>,
    tally: &Tally,
    start: Instant,
) -> CliResult<PhaseReport> {
    let phase = context.phase;
    let mut ops = 0;
    let mut bytes = 0;
    let mut found = None;
    let mut proc_secs = Vec::with_capacity(tally.done.len());
    let mut proc_ops_all = Vec::with_capacity(tally.done.len());
    for (p, done) in tally.done.iter().enumerate() {
        let (proc_ops, proc_bytes, secs, proc_found) = done.ok_or("a worker did not report")?;
        // A stonewalled write may stop short; anything else does it all.
        let expected = phase.op_count_per_proc - context.first_op(p).min(phase.op_count_per_proc);
        let ops_ok = if context.stonewall {
            proc_ops <= expected
        } else {
            proc_ops == expected
        };
        if !ops_ok || proc_bytes != proc_ops * phase.bytes_per_op {
            return Err(format!(
                "proc {p} reported {proc_ops} ops and {proc_bytes} bytes; expected {expected} ops of {} bytes",
                phase.bytes_per_op
            )
            .into());
        }
        ops += proc_ops;
        bytes += proc_bytes;
        proc_secs.push(secs);
        proc_ops_all.push(context.first_op(p) + proc_ops);
        if let Some(n) = proc_found {
            found = Some(found.unwrap_or(0) + n);
        }
    }
    let secs = tally
        .last_done_at
        .duration_since(start)
        .as_secs_f64()
        .max(1e-9);
    Ok(PhaseReport {
        phase: phase.step.name(),
        write: phase.step.is_write(),
        transfer_size_bytes: phase.step.is_ior().then_some(phase.transfer_size_bytes),
        procs: context.shape.proc_count,
        ops,
        bytes,
        secs,
        mib_per_sec: bytes as f64 / MIB / secs,
        ops_per_sec: ops as f64 / secs,
        caches_dropped: None,
        proc_ops: proc_ops_all,
        proc_secs,
        stonewall_ops: None,
        stonewall_secs: None,
        found,
    })
}

/// The live progress line on stderr: redrawn in place on a terminal, one
/// line a second elsewhere; none with `--json`.
struct Live {
    enabled: bool,
    tty: bool,
    interval: Duration,
    label: String,
    phase: PlannedPhase,
    total_ops: u64,
    last_at: Instant,
    last_ops: u64,
}

impl Live {
    fn new(context: &PhaseContext<'_>, start: Instant) -> Live {
        let tty = std::io::stderr().is_terminal();
        let phase = *context.phase;
        Live {
            enabled: context.live,
            tty,
            interval: if tty {
                LIVE_INTERVAL_TTY
            } else {
                LIVE_INTERVAL_LOG
            },
            label: phase_label(&phase),
            phase,
            total_ops: phase.op_count_per_proc * context.shape.proc_count as u64,
            last_at: start,
            last_ops: 0,
        }
    }

    fn rate(&self, ops: u64, secs: f64) -> String {
        let secs = secs.max(1e-9);
        if self.phase.step.is_ior() {
            format!(
                "{} MiB/s",
                fixed((ops * self.phase.bytes_per_op) as f64 / MIB / secs, 1)
            )
        } else {
            format!("{} ops/s", grouped((ops as f64 / secs) as u64))
        }
    }

    fn update(&mut self, ops_done: u64) {
        let now = Instant::now();
        if !self.enabled || now.duration_since(self.last_at) < self.interval {
            return;
        }
        let secs = now.duration_since(self.last_at).as_secs_f64();
        let rate = self.rate(ops_done - self.last_ops.min(ops_done), secs);
        let text = format!(
            "{:<28} {:>12}/{:<12} {rate:>14}",
            self.label,
            grouped(ops_done),
            grouped(self.total_ops)
        );
        if self.tty {
            eprint!("\r{text}\x1b[K");
        } else {
            eprintln!("{text}");
        }
        self.last_at = now;
        self.last_ops = ops_done;
    }

    fn clear(&self) {
        if self.enabled && self.tty {
            eprint!("\r\x1b[K");
        }
    }

    fn finish(&self, report: &PhaseReport) {
        if !self.enabled {
            return;
        }
        self.clear();
        eprintln!(
            "{:<28} {:>12} {:>8} s {:>14}",
            self.label,
            grouped(report.ops),
            fixed(report.secs, 2),
            self.rate(report.ops, report.secs)
        );
    }
}

/// "ior-easy-write 4 KiB", "mdtest-easy-stat".
fn phase_label(phase: &PlannedPhase) -> String {
    let size = size_label(phase);
    if size.is_empty() {
        phase.step.name().to_owned()
    } else {
        format!("{} {size}", phase.step.name())
    }
}

/// "4 KiB", "4 MiB", "47008 B"; empty for mdtest.
fn size_label(phase: &PlannedPhase) -> String {
    if phase.step.is_ior() {
        bytes_label(phase.transfer_size_bytes)
    } else {
        String::new()
    }
}

fn bytes_label(size_bytes: u64) -> String {
    if size_bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", size_bytes >> 20)
    } else if size_bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", size_bytes >> 10)
    } else {
        format!("{size_bytes} B")
    }
}

fn print_report(report: &Report) {
    print_phases(&report.phases, report.settings.shape.stonewall_ms.is_some());
    if !report.bench_dir_removed {
        println!("kept: {}", report.settings.bench_dir.display());
    }
}

/// The phases' table and notes (`stonewalled`: whether the writes ran
/// under a stonewall).
fn print_phases(phases: &[PhaseReport], stonewalled: bool) {
    let dash = || "-".to_owned();
    let rows = phases
        .iter()
        .map(|p| {
            let has_bytes = p.bytes > 0;
            vec![
                p.phase.to_owned(),
                p.transfer_size_bytes.map_or_else(dash, bytes_label),
                p.procs.to_string(),
                grouped(p.ops),
                if has_bytes {
                    fixed(p.bytes as f64 / MIB, 1)
                } else {
                    dash()
                },
                fixed(p.secs, 3),
                if has_bytes {
                    fixed(p.mib_per_sec, 1)
                } else {
                    dash()
                },
                grouped(p.ops_per_sec as u64),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "phase", "transfer", "procs", "ops", "MiB", "seconds", "MiB/s", "ops/s"
            ],
            rows
        )
    );
    for phase in phases {
        match phase.caches_dropped {
            Some(true) => println!("page cache dropped before {}", phase.phase),
            Some(false) => println!(
                "note: could not drop the page cache before {} (needs root); reads may hit memory",
                phase.phase
            ),
            None => {}
        }
    }
    for phase in phases {
        if let (Some(ops), Some(secs)) = (phase.stonewall_ops, phase.stonewall_secs) {
            println!(
                "{}: stonewall after {} s and {} ops; the processes behind then caught up",
                phase.phase,
                fixed(secs, 1),
                grouped(ops)
            );
        } else if stonewalled && phase.write {
            println!(
                "{}: every process wrote its whole share of the space allowed before the stonewall",
                phase.phase
            );
        }
        if let Some(found) = phase.found {
            println!("{}: {} files matched", phase.phase, grouped(found));
        }
    }
}

// ---------------------------------------------------------------------
// The worker process.
// ---------------------------------------------------------------------

/// `cairn bench fs-worker`: runs one phase for one process and reports on
/// stdout. Exits 1 after reporting an error line.
pub fn run_worker(args: &FsWorkerArgs) -> CliResult {
    if args.protocol != PROTOCOL_VERSION {
        return Err(format!(
            "worker protocol {} from the parent, {PROTOCOL_VERSION} here: the executable changed mid-run",
            args.protocol
        )
        .into());
    }
    check_worker_args(args)?;
    // Die with the parent (strictly: with the thread that started us, so
    // the parent starts workers from its main thread); if it died before
    // this line, we have been handed to another parent and must not start.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent = rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get());
    if parent != Some(args.parent_pid) {
        return Err("the parent process is gone".into());
    }
    let mut out = Reporter {
        stdout: std::io::stdout(),
        last_at: Instant::now(),
        ops_done: 0,
        stonewall_at: None,
        found: None,
    };
    out.send(&WorkerLine::Ready {
        protocol: PROTOCOL_VERSION,
    })?;
    if !wait_for_go()? {
        return Ok(());
    }
    let start = Instant::now();
    if args.stonewall_ms > 0 && args.step.is_write() {
        out.stonewall_at = Some(start + Duration::from_millis(args.stonewall_ms));
    }
    match run_step(args, &mut out) {
        Ok(bytes) => {
            let ops = out.ops_done;
            let found = out.found;
            out.send(&WorkerLine::Done {
                ops,
                bytes,
                secs: start.elapsed().as_secs_f64(),
                found,
            })?;
        }
        Err(error) => {
            drop(out.send(&WorkerLine::Error {
                message: error.to_string(),
            }));
            std::process::exit(1);
        }
    }
    Ok(())
}

/// The parent sends valid arguments; a hand-made call gets an error, not
/// a panic in [`Stamp::new`].
fn check_worker_args(args: &FsWorkerArgs) -> CliResult {
    if args.proc_count == 0
        || args.proc_index >= args.proc_count
        || args.proc_count as usize > PROC_COUNT_MAX
    {
        return Err("bad --proc-index or --proc-count".into());
    }
    if args.step.is_ior()
        && (args.transfer_size_bytes == 0 || args.transfer_size_bytes > TRANSFER_SIZE_MAX_BYTES)
    {
        return Err("bad --transfer-size-bytes".into());
    }
    // The largest stamp offset: the end of the shared file, or the last
    // mdtest-hard file's stride.
    let stride_bytes = args.transfer_size_bytes.max(HARD_FILE_STAMP_STRIDE_BYTES);
    let end_bytes = args
        .op_count
        .checked_mul(u64::from(args.proc_count))
        .and_then(|ops| ops.checked_mul(stride_bytes));
    if end_bytes.is_none_or(|end| end > STAMP_OFFSET_MASK) {
        return Err("--op-count too large".into());
    }
    Ok(())
}

/// Reads one byte of stdin, unbuffered (the pipe is shared with the other
/// workers: each must take exactly its own byte). False at end of file:
/// the parent gave up (or died) before the start.
fn wait_for_go() -> CliResult<bool> {
    let mut stdin = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut byte = [0u8; 1];
    loop {
        match stdin.read(&mut byte) {
            Ok(count) => return Ok(count == 1),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The worker's stdout: JSON lines, progress at most every
/// [`PROGRESS_INTERVAL`].
struct Reporter {
    stdout: std::io::Stdout,
    last_at: Instant,
    ops_done: u64,
    /// When a write stops (IO500's stonewall).
    stonewall_at: Option<Instant>,
    /// Files a find matched.
    found: Option<u64>,
}

impl Reporter {
    fn send(&mut self, line: &WorkerLine) -> std::io::Result<()> {
        let mut text = serde_json::to_string(line)?;
        text.push('\n');
        let mut stdout = self.stdout.lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()
    }

    /// Whether a write is past its stonewall and must stop (never before
    /// its first operation: every process writes something).
    fn stonewalled(&self) -> bool {
        self.ops_done > 0 && self.stonewall_at.is_some_and(|at| Instant::now() >= at)
    }

    /// Counts one finished operation.
    fn tick(&mut self) -> Result<(), FsError> {
        self.ops_done += 1;
        if self.last_at.elapsed() >= PROGRESS_INTERVAL {
            self.last_at = Instant::now();
            let line = WorkerLine::Progress {
                ops_done: self.ops_done,
            };
            self.send(&line).map_err(FsError::Report)?;
        }
        Ok(())
    }
}

/// A failed operation of a worker: what, on which path, and the errno.
#[derive(Debug)]
enum FsError {
    Io {
        op: &'static str,
        path: PathBuf,
        offset_bytes: Option<u64>,
        source: std::io::Error,
    },
    Verify {
        path: PathBuf,
        mismatch: Mismatch,
    },
    Size {
        path: PathBuf,
        expected_bytes: u64,
        found_bytes: u64,
    },
    Report(std::io::Error),
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::Io {
                op,
                path,
                offset_bytes: Some(offset),
                source,
            } => write!(f, "{op} {} at offset {offset}: {source}", path.display()),
            FsError::Io {
                op, path, source, ..
            } => write!(f, "{op} {}: {source}", path.display()),
            FsError::Verify { path, mismatch } => {
                write!(f, "verify {}: {mismatch}", path.display())
            }
            FsError::Size {
                path,
                expected_bytes,
                found_bytes,
            } => write!(
                f,
                "stat {}: {found_bytes} bytes, expected {expected_bytes}",
                path.display()
            ),
            FsError::Report(source) => write!(f, "reporting to the parent: {source}"),
        }
    }
}

/// Maps an I/O error to [`FsError::Io`] for `op` on `path`.
fn io_error(
    op: &'static str,
    path: &Path,
    offset_bytes: Option<u64>,
) -> impl FnOnce(std::io::Error) -> FsError {
    let path = path.to_owned();
    move |source| FsError::Io {
        op,
        path,
        offset_bytes,
        source,
    }
}

/// One worker's view of its phase.
struct Job<'a> {
    args: &'a FsWorkerArgs,
    /// The process whose data or files a read, stat or delete acts on: the
    /// next one, as IOR's -C and mdtest's -N 1 shift them, so no process
    /// reads back what it wrote itself.
    neighbour: u32,
}

/// Runs the step; returns the bytes moved.
fn run_step(args: &FsWorkerArgs, out: &mut Reporter) -> Result<u64, FsError> {
    let job = Job {
        args,
        neighbour: (args.proc_index + 1) % args.proc_count,
    };
    match args.step {
        Step::IorEasyWrite => job.ior_easy_write(out),
        Step::IorEasyRead => job.ior_easy_read(out),
        Step::IorHardWrite => job.ior_hard_write(out),
        Step::IorHardRead => job.ior_hard_read(out),
        Step::MdtestEasyCreate | Step::MdtestEasyStat | Step::MdtestEasyUnlink => {
            job.mdtest_easy(out).map(|()| 0)
        }
        Step::MdtestHardCreate
        | Step::MdtestHardStat
        | Step::MdtestHardRead
        | Step::MdtestHardUnlink => job.mdtest_hard(out),
        Step::Find => job.find(out).map(|()| 0),
    }
}

impl Job<'_> {
    fn transfer_buffer(&self) -> Vec<u8> {
        vec![0; self.args.transfer_size_bytes as usize]
    }

    fn ior_easy_path(&self, proc_index: u32) -> PathBuf {
        ior_easy_dir(&self.args.bench_dir, self.args.transfer_size_bytes)
            .join(format!("file.{proc_index}"))
    }

    fn ior_hard_path(&self) -> PathBuf {
        ior_hard_dir(&self.args.bench_dir, self.args.transfer_size_bytes).join("file")
    }

    /// Offset of transfer `transfer_index` of `proc_index` in the shared
    /// file: transfers of all processes interleave (IOR -s segments).
    fn hard_offset(&self, proc_index: u32, transfer_index: u64) -> u64 {
        (transfer_index * u64::from(self.args.proc_count) + u64::from(proc_index))
            * self.args.transfer_size_bytes
    }

    fn ior_easy_write(&self, out: &mut Reporter) -> Result<u64, FsError> {
        let path = self.ior_easy_path(self.args.proc_index);
        // The phase's directory is new; a write resumed after its
        // stonewall (IO500's wear-out) continues its own file.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error("create", &path, None))?;
        let mut buffer = self.transfer_buffer();
        let first_bytes = self.args.first_op * buffer.len() as u64;
        let mut offset_bytes = first_bytes;
        for _ in self.args.first_op..self.args.op_count {
            if out.stonewalled() {
                break;
            }
            fill(&mut buffer, Stamp::new(self.args.proc_index, offset_bytes));
            file.write_all_at(&buffer, offset_bytes).map_err(io_error(
                "write",
                &path,
                Some(offset_bytes),
            ))?;
            offset_bytes += buffer.len() as u64;
            out.tick()?;
        }
        file.sync_all().map_err(io_error("fsync", &path, None))?;
        // Dropping closes; a close error after a good fsync is not data loss.
        Ok(offset_bytes - first_bytes)
    }

    fn ior_easy_read(&self, out: &mut Reporter) -> Result<u64, FsError> {
        let path = self.ior_easy_path(self.neighbour);
        let mut file = File::open(&path).map_err(io_error("open", &path, None))?;
        let mut buffer = self.transfer_buffer();
        let mut offset_bytes = 0;
        for _ in 0..self.args.op_count {
            file.read_exact(&mut buffer)
                .map_err(io_error("read", &path, Some(offset_bytes)))?;
            verify(&buffer, Stamp::new(self.neighbour, offset_bytes)).map_err(|mismatch| {
                FsError::Verify {
                    path: path.clone(),
                    mismatch,
                }
            })?;
            offset_bytes += buffer.len() as u64;
            out.tick()?;
        }
        Ok(offset_bytes)
    }

    fn ior_hard_write(&self, out: &mut Reporter) -> Result<u64, FsError> {
        let path = self.ior_hard_path();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error("open", &path, None))?;
        let mut buffer = self.transfer_buffer();
        let mut written = 0;
        for transfer_index in self.args.first_op..self.args.op_count {
            if out.stonewalled() {
                break;
            }
            let offset_bytes = self.hard_offset(self.args.proc_index, transfer_index);
            fill(&mut buffer, Stamp::new(self.args.proc_index, offset_bytes));
            file.write_all_at(&buffer, offset_bytes).map_err(io_error(
                "write",
                &path,
                Some(offset_bytes),
            ))?;
            written += buffer.len() as u64;
            out.tick()?;
        }
        file.sync_all().map_err(io_error("fsync", &path, None))?;
        Ok(written)
    }

    fn ior_hard_read(&self, out: &mut Reporter) -> Result<u64, FsError> {
        let path = self.ior_hard_path();
        let file = File::open(&path).map_err(io_error("open", &path, None))?;
        let mut buffer = self.transfer_buffer();
        for transfer_index in 0..self.args.op_count {
            let offset_bytes = self.hard_offset(self.neighbour, transfer_index);
            file.read_exact_at(&mut buffer, offset_bytes)
                .map_err(io_error("read", &path, Some(offset_bytes)))?;
            verify(&buffer, Stamp::new(self.neighbour, offset_bytes)).map_err(|mismatch| {
                FsError::Verify {
                    path: path.clone(),
                    mismatch,
                }
            })?;
            out.tick()?;
        }
        Ok(self.args.op_count * buffer.len() as u64)
    }

    /// Empty files in a directory per process.
    fn mdtest_easy(&self, out: &mut Reporter) -> Result<(), FsError> {
        let owner = if self.args.step == Step::MdtestEasyCreate {
            self.args.proc_index
        } else {
            self.neighbour
        };
        let dir = mdtest_easy_dir(&self.args.bench_dir, owner);
        for file_index in self.args.first_op..self.args.op_count {
            if out.stonewalled() {
                break;
            }
            let path = dir.join(format!("f.{file_index}"));
            match self.args.step {
                Step::MdtestEasyCreate => {
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(io_error("create", &path, None))?;
                }
                Step::MdtestEasyStat => check_size(&path, 0)?,
                _ => std::fs::remove_file(&path).map_err(io_error("unlink", &path, None))?,
            }
            out.tick()?;
        }
        Ok(())
    }

    /// 3,901-byte files of every process in one directory; returns bytes.
    fn mdtest_hard(&self, out: &mut Reporter) -> Result<u64, FsError> {
        let step = self.args.step;
        let owner = if step == Step::MdtestHardCreate {
            self.args.proc_index
        } else {
            self.neighbour
        };
        let dir = mdtest_hard_dir(&self.args.bench_dir);
        let mut buffer = vec![0u8; HARD_FILE_SIZE_BYTES as usize];
        let mut bytes = 0;
        for file_index in self.args.first_op..self.args.op_count {
            if out.stonewalled() {
                break;
            }
            let path = dir.join(format!("f.{owner}.{file_index}"));
            let stamp = Stamp::new(owner, file_index * HARD_FILE_STAMP_STRIDE_BYTES);
            match step {
                Step::MdtestHardCreate => {
                    let mut file = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(io_error("create", &path, None))?;
                    fill(&mut buffer, stamp);
                    file.write_all(&buffer)
                        .map_err(io_error("write", &path, Some(0)))?;
                    bytes += HARD_FILE_SIZE_BYTES;
                }
                Step::MdtestHardStat => check_size(&path, HARD_FILE_SIZE_BYTES)?,
                Step::MdtestHardRead => {
                    let mut file = File::open(&path).map_err(io_error("open", &path, None))?;
                    file.read_exact(&mut buffer)
                        .map_err(io_error("read", &path, Some(0)))?;
                    verify(&buffer, stamp).map_err(|mismatch| FsError::Verify {
                        path: path.clone(),
                        mismatch,
                    })?;
                    bytes += HARD_FILE_SIZE_BYTES;
                }
                _ => std::fs::remove_file(&path).map_err(io_error("unlink", &path, None))?,
            }
            out.tick()?;
        }
        Ok(bytes)
    }
}

impl Job<'_> {
    /// IO500's find (`find -size 3901c -name '*01*'` over the mdtest
    /// files): this process examines (`lstat`s) its own share, the files
    /// of its mdtest-easy directory and its mdtest-hard files, and counts
    /// those that match. Every examined file counts as an operation.
    fn find(&self, out: &mut Reporter) -> Result<(), FsError> {
        let mine = format!("f.{}.", self.args.proc_index);
        let easy = mdtest_easy_dir(&self.args.bench_dir, self.args.proc_index);
        let hard = mdtest_hard_dir(&self.args.bench_dir);
        let mut found = 0;
        for (dir, only_mine) in [(easy, false), (hard, true)] {
            let entries = std::fs::read_dir(&dir).map_err(io_error("readdir", &dir, None))?;
            for entry in entries {
                let entry = entry.map_err(io_error("readdir", &dir, None))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if only_mine && !name.starts_with(&mine) {
                    continue;
                }
                let path = entry.path();
                let size = std::fs::symlink_metadata(&path)
                    .map_err(io_error("lstat", &path, None))?
                    .len();
                if size == HARD_FILE_SIZE_BYTES && name.contains("01") {
                    found += 1;
                }
                out.tick()?;
            }
        }
        out.found = Some(found);
        Ok(())
    }
}

/// `stat` of `path`, which must hold `expected_bytes`.
fn check_size(path: &Path, expected_bytes: u64) -> Result<(), FsError> {
    let found_bytes = std::fs::metadata(path)
        .map_err(io_error("stat", path, None))?
        .len();
    if found_bytes != expected_bytes {
        return Err(FsError::Size {
            path: path.to_owned(),
            expected_bytes,
            found_bytes,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------
// Stamps: the content of every transfer and file.
// ---------------------------------------------------------------------

/// Who wrote a buffer and for which offset (the file offset of its first
/// byte; mdtest-hard files get one offset per file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    proc_index: u32,
    offset_bytes: u64,
}

impl Stamp {
    fn new(proc_index: u32, offset_bytes: u64) -> Stamp {
        assert!((proc_index as usize) < PROC_COUNT_MAX);
        assert!(offset_bytes <= STAMP_OFFSET_MASK);
        Stamp {
            proc_index,
            offset_bytes,
        }
    }

    /// The 8-byte word at `index_bytes` into the buffer: the writer's
    /// index plus one, and the offset of the word itself, so a transfer
    /// landed at the wrong offset or by the wrong process does not verify.
    fn word(self, index_bytes: u64) -> u64 {
        ((u64::from(self.proc_index) + 1) << STAMP_OFFSET_BITS)
            | ((self.offset_bytes + index_bytes) & STAMP_OFFSET_MASK)
    }
}

/// Fills `buffer` with `stamp`'s words, little-endian; a tail shorter
/// than a word takes the word's first bytes.
pub(crate) fn fill(buffer: &mut [u8], stamp: Stamp) {
    let mut chunks = buffer.chunks_exact_mut(8);
    let mut index_bytes = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&stamp.word(index_bytes).to_le_bytes());
        index_bytes += 8;
    }
    let tail = chunks.into_remainder();
    let word = stamp.word(index_bytes).to_le_bytes();
    tail.copy_from_slice(&word[..tail.len()]);
}

/// The first place where read bytes differ from what their writer wrote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The file offset (stamp offset) of the first bad word.
    offset_bytes: u64,
    expected: Stamp,
    /// The bad word as it should be and as read (a short tail padded
    /// with zeros).
    expected_word: u64,
    found_word: u64,
    found: Found,
}

/// What a bad word holds instead.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Zeros: a hole, or a write that never landed.
    Zeros,
    /// Another writer's stamp: clobbered, or misplaced.
    Stamp(Stamp),
    Other,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bytes at offset {} are not proc {}'s: expected {:#018x}, found {:#018x}",
            self.offset_bytes, self.expected.proc_index, self.expected_word, self.found_word
        )?;
        match self.found {
            Found::Zeros => write!(f, " (zeros: a hole or a lost write)"),
            Found::Stamp(stamp) => write!(
                f,
                " (proc {}'s stamp for offset {})",
                stamp.proc_index, stamp.offset_bytes
            ),
            Found::Other => write!(f, " (not a stamp)"),
        }
    }
}

/// Checks that `buffer` holds exactly what [`fill`] wrote for `stamp`.
/// The whole buffer is compared first in one pass the compiler can
/// vectorise (reads would otherwise run at the speed of the check); the
/// word-by-word search runs only on a mismatch.
pub(crate) fn verify(buffer: &[u8], stamp: Stamp) -> Result<(), Mismatch> {
    let mut chunks = buffer.chunks_exact(8);
    let mut difference = 0u64;
    let mut index_bytes = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        difference |= u64::from_le_bytes(word) ^ stamp.word(index_bytes);
        index_bytes += 8;
    }
    let tail = chunks.remainder();
    if difference == 0 && tail == &stamp.word(index_bytes).to_le_bytes()[..tail.len()] {
        return Ok(());
    }
    Err(first_mismatch(buffer, stamp))
}

/// The first bad word of a buffer that does not verify.
fn first_mismatch(buffer: &[u8], stamp: Stamp) -> Mismatch {
    let (word_index, chunk) = buffer
        .chunks(8)
        .enumerate()
        .find(|(word_index, chunk)| {
            let expected = stamp.word(*word_index as u64 * 8).to_le_bytes();
            *chunk != &expected[..chunk.len()]
        })
        .unwrap_or((0, &[]));
    let index_bytes = word_index as u64 * 8;
    let mut bytes = [0u8; 8];
    bytes[..chunk.len()].copy_from_slice(chunk);
    let word = u64::from_le_bytes(bytes);
    let tag = word >> STAMP_OFFSET_BITS;
    let found = if word == 0 {
        Found::Zeros
    } else if chunk.len() == 8 && tag >= 1 && tag <= PROC_COUNT_MAX as u64 {
        Found::Stamp(Stamp {
            proc_index: (tag - 1) as u32,
            offset_bytes: word & STAMP_OFFSET_MASK,
        })
    } else {
        Found::Other
    };
    Mismatch {
        offset_bytes: stamp.offset_bytes + index_bytes,
        expected: stamp,
        expected_word: stamp.word(index_bytes),
        found_word: word,
        found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_verify_passes_for_any_length() {
        for length in [0, 1, 7, 8, 9, 3901, 47008, 4096] {
            let mut buffer = vec![0u8; length];
            let stamp = Stamp::new(3, 47008 * 5);
            fill(&mut buffer, stamp);
            assert_eq!(verify(&buffer, stamp), Ok(()), "length {length}");
        }
    }

    #[test]
    fn verify_catches_a_flipped_bit() {
        let mut buffer = vec![0u8; 4096];
        let stamp = Stamp::new(0, 8192);
        fill(&mut buffer, stamp);
        buffer[1000] ^= 0x10;
        let mismatch = verify(&buffer, stamp).expect_err("a flipped bit");
        assert_eq!(mismatch.offset_bytes, 8192 + 1000 / 8 * 8);
    }

    #[test]
    fn verify_names_the_process_that_clobbered_a_transfer() {
        // Proc 1's transfer written where proc 0's belongs, as an
        // interleaving bug in a shared file would leave it.
        let mut buffer = vec![0u8; 47008];
        fill(&mut buffer, Stamp::new(1, 47008));
        let mismatch = verify(&buffer, Stamp::new(0, 0)).expect_err("clobbered");
        assert_eq!(mismatch.offset_bytes, 0);
        assert_eq!(mismatch.found, Found::Stamp(Stamp::new(1, 47008)));
        let text = mismatch.to_string();
        assert!(text.contains("proc 1's stamp for offset 47008"), "{text}");
    }

    #[test]
    fn verify_catches_a_misplaced_transfer_of_the_same_process() {
        let mut buffer = vec![0u8; 4096];
        fill(&mut buffer, Stamp::new(2, 4096));
        assert!(verify(&buffer, Stamp::new(2, 8192)).is_err());
    }

    #[test]
    fn verify_reports_zeros_as_a_hole_and_checks_the_tail() {
        let buffer = vec![0u8; 3901];
        let mismatch = verify(&buffer, Stamp::new(0, 0)).expect_err("zeros");
        assert_eq!(mismatch.found, Found::Zeros);
        let mut buffer = vec![0u8; 3901];
        fill(&mut buffer, Stamp::new(0, 0));
        buffer[3900] ^= 1;
        let mismatch = verify(&buffer, Stamp::new(0, 0)).expect_err("tail");
        assert_eq!(mismatch.offset_bytes, 3896);
    }

    fn settings(phases: Vec<Family>) -> Shape {
        Shape {
            proc_count: 2,
            files_per_proc: 7,
            phases,
            transfer_sizes_bytes: vec![4096, 1 << 20],
            hard_transfer_sizes_bytes: vec![47008],
            block_size_per_proc_bytes: 1 << 20,
            hard_file_size_bytes: HARD_FILE_SIZE_BYTES,
            keep: false,
            stonewall_ms: None,
        }
    }

    #[test]
    fn plan_follows_io500_order_and_counts_whole_transfers() {
        let plan = plan(&settings(vec![
            Family::MdtestHard,
            Family::IorHard,
            Family::MdtestEasy,
            Family::IorEasy,
        ]));
        let steps: Vec<&str> = plan.iter().map(|p| p.step.name()).collect();
        assert_eq!(
            steps,
            [
                "ior-easy-write",
                "ior-easy-write",
                "mdtest-easy-create",
                "ior-hard-write",
                "mdtest-hard-create",
                "ior-easy-read",
                "ior-easy-read",
                "mdtest-easy-stat",
                "ior-hard-read",
                "mdtest-hard-stat",
                "mdtest-easy-unlink",
                "mdtest-hard-read",
                "mdtest-hard-unlink",
            ]
        );
        assert_eq!(plan[0].op_count_per_proc, 256);
        assert_eq!(plan[1].op_count_per_proc, 1);
        // 1 MiB holds 22 whole transfers of 47,008 bytes.
        assert_eq!(plan[3].op_count_per_proc, 22);
        assert_eq!(plan[4].bytes_per_op, HARD_FILE_SIZE_BYTES);
        assert_eq!(plan[10].bytes_per_op, 0);
    }

    #[test]
    fn plan_runs_only_the_families_asked_for() {
        let plan = plan(&settings(vec![Family::MdtestEasy]));
        let steps: Vec<&str> = plan.iter().map(|p| p.step.name()).collect();
        assert_eq!(
            steps,
            [
                "mdtest-easy-create",
                "mdtest-easy-stat",
                "mdtest-easy-unlink"
            ]
        );
    }

    #[test]
    fn step_names_are_the_worker_flag_values() {
        for step in Step::value_variants() {
            let value = step.to_possible_value().expect("not skipped");
            assert_eq!(value.get_name(), step.name());
        }
    }

    #[test]
    fn worker_lines_round_trip() {
        let text = serde_json::to_string(&WorkerLine::Done {
            ops: 3,
            bytes: 12,
            secs: 0.5,
            found: None,
        })
        .expect("serialise");
        assert_eq!(text, r#"{"event":"done","ops":3,"bytes":12,"secs":0.5}"#);
        let parsed: WorkerLine = serde_json::from_str(&text).expect("parse");
        assert!(matches!(parsed, WorkerLine::Done { ops: 3, .. }));
    }
}

//! `cairn bench fs` on a local directory under /var/tmp with 2 worker
//! processes: a full `--json` run reports every phase with positive rates
//! and removes its directory; the read phases' check catches a corrupted
//! byte, a transfer clobbered by the other process, and a missing file,
//! each with the path (and offset or errno); a worker killed mid-run fails
//! the run and its sibling is killed with it; killing the parent kills
//! its workers.

mod common;

use common::is_running;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a worker process may take to die after its parent or sibling.
const DEATH_WAIT: Duration = Duration::from_secs(10);

/// A scratch directory under /var/tmp (a real disk), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        Scratch(common::test_dir(name))
    }

    /// Entries left in the directory.
    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .expect("read scratch dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(std::fs::remove_dir_all(&self.0));
    }
}

fn bench(dir: &Path, extra: &[&str]) -> Output {
    let dir = dir.display().to_string();
    let mut args = vec!["bench", "fs", "--dir", &dir];
    args.extend_from_slice(extra);
    common::cairn(Path::new("/dev/null"), &args)
}

/// The standard small run: 2 processes, 200 files each, 1 MiB blocks.
const SMALL: &[&str] = &[
    "--procs",
    "2",
    "--files-per-proc",
    "200",
    "--block-size-per-proc",
    "1M",
    "--transfer-sizes",
    "4K,47008",
    "--json",
];

#[test]
fn two_procs_run_every_phase_with_positive_rates_and_clean_up() {
    let scratch = Scratch::new("bench-fs-full");
    let report = common::ok_json(bench(&scratch.0, SMALL), "bench fs");
    let names: Vec<&str> = report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["phase"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
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
        ],
        "{report}"
    );
    for phase in report["phases"].as_array().expect("phases") {
        let name = phase["phase"].as_str().expect("name");
        assert_eq!(phase["procs"], 2, "{phase}");
        assert!(phase["secs"].as_f64() > Some(0.0), "{phase}");
        assert!(phase["ops_per_sec"].as_f64() > Some(0.0), "{phase}");
        let proc_secs = phase["proc_secs"].as_array().expect("proc_secs");
        assert_eq!(proc_secs.len(), 2, "{phase}");
        assert!(proc_secs.iter().all(|s| s.as_f64() > Some(0.0)), "{phase}");
        let ops = phase["ops"].as_u64().expect("ops");
        let bytes = phase["bytes"].as_u64().expect("bytes");
        if name.starts_with("ior") {
            let transfer = phase["transfer_size_bytes"].as_u64().expect("transfer");
            assert_eq!(ops, 2 * ((1 << 20) / transfer), "whole transfers: {phase}");
            assert_eq!(bytes, ops * transfer, "{phase}");
            assert!(phase["mib_per_sec"].as_f64() > Some(0.0), "{phase}");
        } else {
            assert_eq!(ops, 400, "{phase}");
            let per_file = if name == "mdtest-hard-create" || name == "mdtest-hard-read" {
                3901
            } else {
                0
            };
            assert_eq!(bytes, ops * per_file, "{phase}");
        }
    }
    assert_eq!(report["settings"]["proc_count"], 2);
    assert_eq!(report["settings"]["hard_transfer_sizes_bytes"][0], 47008);
    assert_eq!(report["bench_dir_removed"], true);
    assert_eq!(scratch.entries(), Vec::<String>::new(), "bench dir removed");

    // The human form: a table on stdout, the phases' lines on stderr.
    let human = bench(
        &scratch.0,
        &["--phases", "mdtest-easy", "--files-per-proc", "50"],
    );
    let stdout = String::from_utf8_lossy(&common::ok(human.clone(), "human")).into_owned();
    assert!(
        stdout.contains("mdtest-easy-stat") && stdout.contains("ops/s"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(stderr.contains("mdtest-easy-unlink"), "{stderr}");
}

/// Runs one worker of a phase by hand, as the parent would, and lets it
/// go at once; returns its exit and its report lines.
fn worker(bench_dir: &Path, step: &str, proc_index: u32, op_count: u64, transfer: u64) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "fs-worker", "--step", step, "--bench-dir"])
        .arg(bench_dir)
        .args(["--proc-index", &proc_index.to_string(), "--proc-count", "2"])
        .args(["--op-count", &op_count.to_string()])
        .args(["--transfer-size-bytes", &transfer.to_string()])
        .args(["--parent-pid", &std::process::id().to_string()])
        .args(["--protocol", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn worker");
    let mut go = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut go, b"g").expect("go");
    drop(go);
    child.wait_with_output().expect("worker output")
}

fn worker_error(output: &Output) -> String {
    assert!(!output.status.success(), "the worker should fail");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().expect("an error line");
    let parsed: serde_json::Value = serde_json::from_str(line).expect("JSON line");
    assert_eq!(parsed["event"], "error", "{stdout}");
    parsed["message"].as_str().expect("message").to_owned()
}

#[test]
fn reads_catch_corruption_clobbering_and_missing_files() {
    let scratch = Scratch::new("bench-fs-verify");
    let report = common::ok_json(
        bench(
            &scratch.0,
            &[
                "--procs",
                "2",
                "--phases",
                "ior-easy,ior-hard",
                "--block-size-per-proc",
                "256K",
                "--transfer-sizes",
                "4K",
                "--keep",
                "--json",
            ],
        ),
        "bench fs --keep",
    );
    let bench_dir = PathBuf::from(report["settings"]["bench_dir"].as_str().expect("dir"));
    assert_eq!(report["bench_dir_removed"], false);

    // The kept files still verify: proc 0 reads proc 1's file.
    let clean = worker(&bench_dir, "ior-easy-read", 0, 64, 4096);
    assert!(clean.status.success(), "{clean:?}");
    assert!(String::from_utf8_lossy(&clean.stdout).contains(r#""event":"done""#));

    // One byte of proc 0's file changed: proc 1, its reader, reports it.
    let easy = bench_dir.join("ior-easy-4096/file.0");
    let mut bytes = std::fs::read(&easy).expect("read file.0");
    bytes[5003] ^= 0x40;
    std::fs::write(&easy, &bytes).expect("corrupt file.0");
    let message = worker_error(&worker(&bench_dir, "ior-easy-read", 1, 64, 4096));
    assert!(
        message.starts_with(&format!("verify {}: ", easy.display()))
            && message.contains("at offset 5000 are not proc 0's"),
        "{message}"
    );

    // Proc 1's first transfer copied over proc 0's in the shared file, as
    // a wrong interleaving would leave it.
    let hard = bench_dir.join("ior-hard-47008/file");
    let mut bytes = std::fs::read(&hard).expect("read shared file");
    bytes.copy_within(47008..2 * 47008, 0);
    std::fs::write(&hard, &bytes).expect("clobber shared file");
    let message = worker_error(&worker(&bench_dir, "ior-hard-read", 1, 5, 47008));
    assert!(
        message.contains("at offset 0 are not proc 0's")
            && message.contains("proc 1's stamp for offset 47008"),
        "{message}"
    );

    // A failing syscall names the path and the errno.
    let message = worker_error(&worker(&bench_dir, "mdtest-hard-stat", 0, 10, 0));
    let missing = bench_dir.join("mdtest-hard/f.1.0");
    assert_eq!(
        message,
        format!(
            "stat {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

/// The bench's worker pids: the children of `parent`'s main thread, once
/// there are `count` of them.
fn workers_of(parent: u32, count: usize) -> Vec<u32> {
    let deadline = Instant::now() + DEATH_WAIT;
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        let pids: Vec<u32> = children
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() == count {
            return pids;
        }
        assert!(Instant::now() < deadline, "no {count} workers: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + DEATH_WAIT;
    while pids.iter().any(|&pid| is_running(pid)) {
        assert!(Instant::now() < deadline, "workers left running: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A long run (2 processes writing 1 GiB each in 4 KiB transfers).
fn start_long_run(dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "fs", "--dir"])
        .arg(dir)
        .args([
            "--procs",
            "2",
            "--phases",
            "ior-easy",
            "--transfer-sizes",
            "4K",
        ])
        .args(["--block-size-per-proc", "1G", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bench fs")
}

fn kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn a_killed_worker_fails_the_run_and_takes_its_sibling() {
    let scratch = Scratch::new("bench-fs-kill-worker");
    let parent = start_long_run(&scratch.0);
    let pids = workers_of(parent.id(), 2);
    std::thread::sleep(Duration::from_millis(300));
    kill(pids[1]);
    let output = parent.wait_with_output().expect("parent");
    assert!(!output.status.success(), "the run should fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ior-easy-write 4 KiB: proc 1 exited") && stderr.contains("signal: 9"),
        "{stderr}"
    );
    wait_gone(&pids);
    assert_eq!(scratch.entries(), Vec::<String>::new(), "bench dir removed");
}

#[test]
fn killing_the_parent_kills_its_workers() {
    let scratch = Scratch::new("bench-fs-kill-parent");
    let mut parent = start_long_run(&scratch.0);
    let pids = workers_of(parent.id(), 2);
    std::thread::sleep(Duration::from_millis(300));
    kill(parent.id());
    drop(parent.wait());
    wait_gone(&pids);
}

/// `cairn bench io500` with a stonewall so short (1 ms) that every write
/// phase stops early and its processes catch up: the twelve phases in
/// IO500's order, every read, stat, delete and find acting on exactly
/// what the writes left, find matching the files its pattern names, the
/// score, and the directory gone.
#[test]
fn io500_runs_its_twelve_phases_under_a_stonewall_and_scores_them() {
    let scratch = Scratch::new("bench-io500");
    let dir = scratch.0.display().to_string();
    let args = [
        "bench",
        "io500",
        "--dir",
        &dir,
        "--procs",
        "2",
        "--stonewall",
        "1ms",
        "--easy-transfer-size",
        "64K",
        "--max-bytes",
        "256M",
        "--json",
    ];
    let report = common::ok_json(common::cairn(Path::new("/dev/null"), &args), "bench io500");
    assert_eq!(report["api"], "posix", "{report}");
    common::io500::check_report(&report, 2);
    for name in [
        "ior-easy-write",
        "ior-hard-write",
        "mdtest-easy-create",
        "mdtest-hard-create",
    ] {
        // Stopped by the stonewall, then caught up.
        let phase = common::io500::phase(&report, name);
        let walled = phase["stonewall_ops"].as_u64().expect("stonewalled");
        assert!(
            walled >= 2 && walled <= phase["ops"].as_u64().expect("ops"),
            "{phase}"
        );
    }
    assert_eq!(
        report["io500"]["valid"], false,
        "a 1 ms stonewall is not IO500's 300 s"
    );
    assert_eq!(scratch.entries(), Vec::<String>::new(), "bench dir removed");

    // Settings it cannot run with are refused before anything runs.
    for (flags, says) in [
        (&["--stonewall", "0s"][..], "--stonewall"),
        (&["--max-bytes", "1K"], "too little"),
        (&["--procs", "0"], "--procs"),
    ] {
        let mut bad = vec!["bench", "io500", "--dir", &dir];
        bad.extend_from_slice(flags);
        let out = common::cairn(Path::new("/dev/null"), &bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{flags:?}: {stderr}"
        );
        assert_eq!(
            scratch.entries(),
            Vec::<String>::new(),
            "{flags:?} made nothing"
        );
    }
}

/// `cairn bench io500` measures a directory or an S3 endpoint: both at
/// once, neither, or a flag of one with the other are refused before
/// anything runs, naming the flags, and the directory stays empty.
#[test]
fn io500_takes_a_directory_or_an_endpoint_not_both() {
    let scratch = Scratch::new("bench-io500-target");
    let dir = scratch.0.display().to_string();
    // Nothing listens there: a run that got past the flags would fail
    // differently (connecting), not with these messages.
    let endpoint = "http://127.0.0.1:9";
    for (flags, says) in [
        (
            &["--dir", &dir, "--endpoint", endpoint][..],
            "cannot be used with",
        ),
        (&["--stonewall", "1s"], "--dir"),
        (
            &["--dir", &dir, "--bucket", "b", "--max-bytes", "1K"],
            "--endpoint",
        ),
        (
            &[
                "--endpoint",
                endpoint,
                "--drop-caches",
                "--access-key",
                "k",
                "--secret-key",
                "s",
            ],
            "cannot be used with",
        ),
    ] {
        let mut args = vec!["bench", "io500"];
        args.extend_from_slice(flags);
        let out = common::cairn(Path::new("/dev/null"), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{flags:?}: {stderr}"
        );
        assert_eq!(scratch.entries(), Vec::<String>::new(), "{flags:?}");
    }
}

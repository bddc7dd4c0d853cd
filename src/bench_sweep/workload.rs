//! The workloads a sweep runs on each point's cluster, each through the
//! `cairn bench` command that measures it alone: `object` (`bench object`
//! on the pool), `s3` (`bench s3` on the cluster's gateway, the bucket in
//! the pool), `fs` (`bench fs` on a FUSE mount of the cluster's file
//! system: IOR- and mdtest-style families) and `io500` (`bench io500` on
//! the mount). With `clients` above 1, an object or S3 phase runs that
//! many client processes at once and adds up their figures; the file
//! workloads give it to their own `--procs`.
//!
//! Every phase's result is kept whole in the sample, under the keys the
//! summary reads: `bandwidth_mib_per_sec`, `iops`, `latency_p99_secs`
//! (and `score` for IO500's score).

use super::{POOL, Point, path, quiet};
use crate::launch::RANK_PLACEHOLDER as RANK;
use crate::output::CliResult;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workload kinds.
pub(super) const KINDS: [&str; 5] = ["object", "s3", "fs", "io500", "apps"];
/// `bench s3`'s modes a plan may run as phases.
const S3_PHASES: [&str; 5] = ["put", "get", "head", "list", "mixed"];
/// `bench fs`'s families a plan may run as phases.
const FS_PHASES: [&str; 4] = ["ior-easy", "ior-hard", "mdtest-easy", "mdtest-hard"];
/// Most client processes of a phase.
pub(super) const CLIENTS_MAX: u32 = 256;
/// Time a FUSE mount gets to appear.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(20);
/// The S3 gateway's port: past the OSDs' ports.
pub(super) const S3_PORT_OFFSET: u16 = 90;

/// Checks a workload's phases against its kind.
pub(super) fn check_phases(kind: &str, phases: &[String]) -> Result<(), String> {
    if !KINDS.contains(&kind) {
        return Err(format!(
            "workload kind {kind:?}: one of {}",
            KINDS.join(", ")
        ));
    }
    let known: &[&str] = match kind {
        // idle: no clients, a failure's recovery timed alone.
        "object" => &["write", "seq", "rand", "idle"],
        "s3" => &S3_PHASES,
        "fs" => &FS_PHASES,
        _ => &[],
    };
    if kind == "apps" {
        if phases.is_empty() {
            return Err(format!(
                "workload phases: at least one of {}",
                super::apps::PHASES.join(", ")
            ));
        }
        return super::apps::check(phases);
    }
    if kind == "io500" {
        if !phases.is_empty() {
            return Err("workload io500 runs IO500's twelve phases: give no phases".into());
        }
        return Ok(());
    }
    if phases.is_empty() {
        return Err(format!(
            "workload phases: at least one of {}",
            known.join(", ")
        ));
    }
    for (i, phase) in phases.iter().enumerate() {
        if !known.contains(&phase.as_str()) {
            return Err(format!(
                "workload phase {phase:?} of kind {kind}: one of {}",
                known.join(", ")
            ));
        }
        let reads = matches!(phase.as_str(), "seq" | "rand" | "get" | "head");
        let wrote = phases[..i].iter().any(|p| p == "write" || p == "put");
        if reads && !wrote {
            return Err(format!(
                "workload phase {phase:?} reads what a write before it wrote"
            ));
        }
        if phase == "idle" && !wrote {
            return Err(
                "workload phase \"idle\" times the recovery of what a write before it wrote".into(),
            );
        }
    }
    Ok(())
}

/// What a workload's phases run against.
pub(super) struct Target<'a> {
    pub cairn: &'a Path,
    pub conf: &'a str,
    pub data: &'a Path,
    pub base_port: u16,
    pub point: &'a Point,
    pub duration: Duration,
    pub workload: &'a super::Workload,
    pub launcher: &'a Launcher,
}

/// The gateway port of a point's cluster (0: none, for workloads that
/// do not speak S3).
pub(super) fn s3_port(over_s3: bool, base_port: u16) -> u16 {
    if over_s3 {
        base_port.saturating_add(S3_PORT_OFFSET)
    } else {
        0
    }
}

/// An object phase's command, `{rank}` in its list of names (each client
/// its own).
pub(super) fn object_command(target: &Target<'_>, phase: &str) -> Vec<String> {
    let list = target.data.join(format!("bench-{POOL}-c{RANK}.txt"));
    vec![
        "bench".to_owned(),
        "object".into(),
        "--conf".into(),
        target.conf.into(),
        "--pool".into(),
        POOL.into(),
        "--mode".into(),
        phase.into(),
        "--object-size".into(),
        target.point.object_size.clone(),
        "--concurrency".into(),
        target.point.concurrency.to_string(),
        "--duration".into(),
        format!("{}ms", target.duration.as_millis()),
        "--list".into(),
        path(&list),
        "--json".into(),
    ]
}

/// An S3 server a point's phases run against.
pub(super) struct S3Access {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    /// A location constraint for the bucket (Cairn's gateway places a
    /// bucket in the pool it names).
    pub region: Option<String>,
    pub bucket: String,
}

impl S3Access {
    /// The flags `bench s3` and `bench io500` take to reach it.
    fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--endpoint".to_owned(),
            self.endpoint.clone(),
            "--access-key".into(),
            self.access_key.clone(),
            "--secret-key".into(),
            self.secret_key.clone(),
            "--bucket".into(),
            self.bucket.clone(),
        ];
        if let Some(region) = &self.region {
            flags.extend(["--region".into(), region.clone()]);
        }
        flags
    }
}

/// The point's own gateway, its bucket in the swept pool.
pub(super) fn cairn_s3(target: &Target<'_>) -> CliResult<S3Access> {
    let keys: Value = serde_json::from_slice(
        &std::fs::read(target.data.join("s3-admin.json"))
            .map_err(|e| format!("the gateway's keys: {e}"))?,
    )?;
    let field = |name: &str| keys[name].as_str().unwrap_or_default().to_owned();
    Ok(S3Access {
        endpoint: format!("http://127.0.0.1:{}", s3_port(true, target.base_port)),
        access_key: field("access_key"),
        secret_key: field("secret_key"),
        region: Some(POOL.into()),
        bucket: "sweep".into(),
    })
}

/// An S3 phase's command, `{rank}` in its prefix (each client its own).
pub(super) fn s3_command(target: &Target<'_>, access: &S3Access, phase: &str) -> Vec<String> {
    let mut command = vec!["bench".to_owned(), "s3".into()];
    command.extend(access.flags());
    command.extend([
        "--prefix".into(),
        format!("c{RANK}"),
        "--mode".into(),
        phase.into(),
        "--object-size".into(),
        target.point.object_size.clone(),
        "--concurrency".into(),
        target.point.concurrency.to_string(),
        "--duration".into(),
        format!("{}ms", target.duration.as_millis()),
        "--json".into(),
    ]);
    command
}

/// How an object or S3 phase's client processes start, as a plan gives
/// it: `"mpirun"`, `"direct"`, or a launcher's command line with
/// `{clients}` for the number of copies (`["srun", "-n", "{clients}"]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub(super) enum LauncherSpec {
    Named(String),
    Command(Vec<String>),
}

/// A checked launcher.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Launcher {
    /// The sweep starts the copies itself, each with `CAIRN_RANK`.
    Direct,
    /// Open MPI's `mpirun` on this machine. As root it runs in a network
    /// namespace of its own (its control sockets listen on every address,
    /// which this machine's clusters never need), and the copies return to
    /// the sweep's namespace through `nsenter`.
    Mpirun,
    /// Any launcher that starts N copies with a rank in one of
    /// [`crate::launch::RANK_VARIABLES`].
    Command(Vec<String>),
}

/// The placeholder a launcher command gives the number of copies with.
const CLIENTS_PLACEHOLDER: &str = "{clients}";

impl Launcher {
    /// Checks a plan's launcher for a workload of `kind`, whose points
    /// run at most `most_clients` clients: the program must be installed
    /// if any point uses it.
    pub(super) fn check(
        spec: Option<&LauncherSpec>,
        kind: &str,
        most_clients: u32,
    ) -> Result<Launcher, String> {
        if spec.is_some() && !matches!(kind, "object" | "s3") {
            return Err(format!(
                "workload launcher is for kinds object and s3: {kind} starts its own worker processes"
            ));
        }
        let launcher = match spec {
            None => Launcher::Mpirun,
            Some(LauncherSpec::Named(name)) => match name.as_str() {
                "mpirun" => Launcher::Mpirun,
                "direct" => Launcher::Direct,
                other => {
                    return Err(format!(
                        "workload launcher {other:?}: \"mpirun\", \"direct\" or a command list like [\"srun\", \"-n\", \"{CLIENTS_PLACEHOLDER}\"]"
                    ));
                }
            },
            Some(LauncherSpec::Command(words)) => {
                if words.first().is_none_or(|w| w.trim().is_empty()) {
                    return Err("workload launcher: an empty command".into());
                }
                if !words.iter().any(|w| w.contains(CLIENTS_PLACEHOLDER)) {
                    return Err(format!(
                        "workload launcher {words:?}: give the number of copies as {CLIENTS_PLACEHOLDER}"
                    ));
                }
                Launcher::Command(words.clone())
            }
        };
        if most_clients > 1 && matches!(kind, "object" | "s3") {
            let program = match &launcher {
                Launcher::Direct => None,
                Launcher::Mpirun => Some("mpirun"),
                Launcher::Command(words) => words.first().map(String::as_str),
            };
            if let Some(program) = program
                && !crate::launch::program_in_path(program)
            {
                let hint = if program == "mpirun" {
                    " (apt-get install openmpi-bin, or launcher = \"direct\")"
                } else {
                    ""
                };
                return Err(format!(
                    "workload launcher: {program} is not installed{hint}"
                ));
            }
        }
        Ok(launcher)
    }

    /// The command that starts `count` copies of `cairn ARGS`.
    fn command(&self, cairn: &Path, args: &[String], count: u32) -> Command {
        let count_text = count.to_string();
        match self {
            Launcher::Direct => Command::new(cairn),
            Launcher::Mpirun => {
                let mpirun = ["mpirun", "--oversubscribe", "-np", &count_text];
                let mut command = if rustix::process::geteuid().is_root() {
                    let own_net = format!("--net=/proc/{}/ns/net", std::process::id());
                    let mut command = Command::new("unshare");
                    command
                        .args([
                            "--net",
                            "sh",
                            "-c",
                            "ip link set lo up && exec \"$@\"",
                            "sh",
                        ])
                        .args(mpirun)
                        .args(["nsenter", &own_net]);
                    command
                        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                    command
                } else {
                    let mut command = Command::new(mpirun[0]);
                    command.args(&mpirun[1..]);
                    command
                };
                command.arg(cairn).args(args);
                command
            }
            Launcher::Command(words) => {
                let words: Vec<String> = words
                    .iter()
                    .map(|w| w.replace(CLIENTS_PLACEHOLDER, &count_text))
                    .collect();
                let mut command = Command::new(&words[0]);
                command.args(&words[1..]).arg(cairn).args(args);
                command
            }
        }
    }
}

/// Runs `count` clients of `cairn ARGS` (`{rank}` in ARGS naming each
/// copy's own list or prefix) and adds up their reports: one client
/// directly, several through the launcher, each writing its report to
/// `reports/r{rank}.json` after the start barrier there.
pub(super) fn clients(
    target: &Target<'_>,
    args: &[String],
    count: u32,
    reports: &Path,
) -> CliResult<Value> {
    if count <= 1 {
        let args: Vec<String> = args.iter().map(|a| a.replace(RANK, "0")).collect();
        let out = Command::new(target.cairn)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("starting a client: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "a client failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        let report = serde_json::from_slice::<Value>(&out.stdout)
            .map_err(|e| format!("a client's report is not JSON: {e}"))?;
        return Ok(crate::launch::add_up(vec![report]));
    }
    std::fs::create_dir_all(reports)
        .map_err(|e| format!("client reports {}: {e}", reports.display()))?;
    let mut args = args.to_vec();
    args.extend([
        "--report".to_owned(),
        path(&reports.join(format!("r{RANK}.json"))),
    ]);
    let job = format!(
        "sweep{}-{}",
        std::process::id(),
        reports
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    let failed = |what: String| -> CliResult<Value> {
        Err(format!("{count} clients through {:?}: {what}", target.launcher).into())
    };
    if *target.launcher == Launcher::Direct {
        let children: Vec<Child> = (0..count)
            .map(|rank| {
                Command::new(target.cairn)
                    .args(&args)
                    .env("CAIRN_RANK", rank.to_string())
                    .env("CAIRN_RANKS", count.to_string())
                    .env("CAIRN_JOB", &job)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("starting a client: {e}"))?;
        let mut error = None;
        for child in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                error = Some(String::from_utf8_lossy(&out.stderr).trim().to_owned());
            }
        }
        if let Some(error) = error {
            return failed(format!("a client failed: {error}"));
        }
    } else {
        let out = target
            .launcher
            .command(target.cairn, &args, count)
            .env("CAIRN_JOB", &job)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("starting the launcher: {e}"))?;
        if !out.status.success() {
            return failed(format!(
                "the launcher failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let files: Vec<PathBuf> = (0..count)
        .map(|rank| reports.join(format!("r{rank}.json")))
        .collect();
    if let Some(missing) = files.iter().find(|f| !f.exists()) {
        return failed(format!(
            "{} was not written: did the launcher start {count} copies with a rank?",
            missing.display()
        ));
    }
    crate::launch::gather_files(&files)
}

/// The phases of an S3 workload on `access`, each with `clients`
/// processes.
pub(super) fn s3_phases_on(
    target: &Target<'_>,
    access: &S3Access,
) -> CliResult<Vec<(String, Value)>> {
    let mut results = Vec::new();
    for phase in &target.workload.phases {
        if phase != "put" {
            crate::bench_cmd::drop_caches();
        }
        let command = s3_command(target, access, phase);
        let reports = target
            .data
            .join(format!("reports-{}-{phase}", results.len()));
        let value = clients(target, &command, target.point.clients, &reports)?;
        results.push((phase.clone(), value));
    }
    Ok(results)
}

/// IO500's S3 variant (`bench io500 --endpoint`) on `access`, the
/// point's `clients` as its worker processes: each phase's figures and
/// the score, as on a mount.
pub(super) fn io500_s3_phases(
    target: &Target<'_>,
    access: &S3Access,
) -> CliResult<Vec<(String, Value)>> {
    let mut command: Vec<String> = vec!["bench".into(), "io500".into()];
    command.extend(access.flags());
    command.extend([
        "--procs".into(),
        target.point.clients.to_string(),
        "--stonewall".into(),
        format!("{}ms", target.duration.as_millis()),
        "--json".into(),
    ]);
    if let Some(max) = &target.workload.max_bytes {
        command.extend(["--max-bytes".into(), max.clone()]);
    }
    let borrowed: Vec<&str> = command.iter().map(String::as_str).collect();
    let report: Value = serde_json::from_slice(&quiet(target.cairn, &borrowed)?)
        .map_err(|e| format!("bench io500 over S3: not JSON: {e}"))?;
    Ok(fs_report_phases(&report))
}

/// The file system a point's file workloads measure: its data in the
/// swept pool.
const FS_NAME: &str = "sweepfs";

/// The point's file system, served by an MDS of its own and mounted on
/// `DATA/mnt` while it lives.
struct Mount {
    point: PathBuf,
    child: Child,
    /// Dropped after the mount.
    _mds: Mds,
}

/// An MDS child process, killed on drop.
struct Mds(Child);

impl Drop for Mds {
    fn drop(&mut self) {
        drop(self.0.kill());
        drop(self.0.wait());
    }
}

/// Makes the file system (metadata in its own replicated pool, data in
/// the swept pool) and starts its MDS; returns once it is active.
fn serve_fs(target: &Target<'_>) -> CliResult<Mds> {
    let size = target.point.osds.min(3).to_string();
    quiet(
        target.cairn,
        &[
            "fs",
            "create",
            FS_NAME,
            "--data-pool",
            POOL,
            "--size",
            &size,
            "--pg-num",
            "16",
            "--conf",
            target.conf,
        ],
    )?;
    let log = std::fs::File::create(target.data.join("logs").join("sweep-mds.log"))
        .or_else(|_| std::fs::File::create(target.data.join("sweep-mds.log")))?;
    let child = Command::new(target.cairn)
        .args(["mds", "--conf", target.conf, "--fs", FS_NAME, "--name", "a"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cairn mds: {e}"))?;
    let mds = Mds(child);
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    loop {
        let status = quiet(
            target.cairn,
            &["fs", "status", FS_NAME, "--json", "--conf", target.conf],
        )
        .ok()
        .and_then(|out| serde_json::from_slice::<Value>(&out).ok());
        if status.is_some_and(|s| !s["active"].is_null()) {
            return Ok(mds);
        }
        if Instant::now() > deadline {
            return Err(format!("the MDS of {FS_NAME} did not become active").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Mount {
    fn new(target: &Target<'_>) -> CliResult<Mount> {
        let mds = serve_fs(target)?;
        let point = target.data.join("mnt");
        std::fs::create_dir_all(&point)?;
        let log = std::fs::File::create(target.data.join("mount.log"))?;
        let child = Command::new(target.cairn)
            .args(["mount", "--conf", target.conf, "--fs", FS_NAME])
            .arg(&point)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cairn mount: {e}"))?;
        let mut mount = Mount {
            point,
            child,
            _mds: mds,
        };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !mounted(&mount.point) {
            if Instant::now() > deadline || mount.child.try_wait()?.is_some() {
                let log =
                    std::fs::read_to_string(target.data.join("mount.log")).unwrap_or_default();
                return Err(format!("cairn mount did not mount: {}", log.trim()).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(mount)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        unmount_left(&self.point);
        drop(self.child.kill());
        drop(self.child.wait());
    }
}

/// Unmounts whatever is mounted on `point`: at once if it can, else
/// lazily (a stopped run's FUSE process may be gone).
pub(super) fn unmount_left(point: &Path) {
    for flags in ["-u", "-uz"] {
        if mounted(point) {
            drop(
                Command::new("fusermount3")
                    .arg(flags)
                    .arg(point)
                    .stderr(Stdio::null())
                    .status(),
            );
        }
    }
    if mounted(point) {
        drop(Command::new("umount").arg("-l").arg(point).status());
    }
}

/// Whether a file system is mounted on `point`.
fn mounted(point: &Path) -> bool {
    let wanted = point.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(wanted.as_str()))
}

/// `bench fs` or `bench io500` on a mount of the cluster's file system:
/// each phase's figures, and IO500's score as a phase of its own.
pub(super) fn fs_phases(target: &Target<'_>) -> CliResult<Vec<(String, Value)>> {
    let mount = Mount::new(target)?;
    let result = fs_phases_in(target, &mount.point);
    drop(mount);
    result
}

/// `bench fs`, `bench io500` or the application set in `dir`, on any
/// mounted file system.
pub(super) fn fs_phases_in(target: &Target<'_>, dir: &Path) -> CliResult<Vec<(String, Value)>> {
    if target.workload.kind == "apps" {
        let large = target
            .workload
            .large_file
            .as_deref()
            .unwrap_or(super::apps::LARGE_DEFAULT);
        let http_port = target.base_port.saturating_add(S3_PORT_OFFSET + 1);
        let scratch = target.data.join("apps-local");
        return super::apps::run(dir, &scratch, &target.workload.phases, large, http_port);
    }
    let dir = path(dir);
    let procs = target.point.clients.to_string();
    let w = target.workload;
    let mut args: Vec<String> = Vec::new();
    let mut push = |a: &str, b: &str| {
        args.push(a.to_owned());
        args.push(b.to_owned());
    };
    if target.workload.kind == "io500" {
        push("--stonewall", &format!("{}ms", target.duration.as_millis()));
        if let Some(max) = &w.max_bytes {
            push("--max-bytes", max);
        }
    } else {
        push("--phases", &w.phases.join(","));
        if let Some(sizes) = &w.transfer_sizes {
            push("--transfer-sizes", &sizes.join(","));
        }
        if let Some(files) = w.files_per_proc {
            push("--files-per-proc", &files.to_string());
        }
        if let Some(block) = &w.block_size_per_proc {
            push("--block-size-per-proc", block);
        }
    }
    let mut command: Vec<String> = vec![
        "bench".into(),
        target.workload.kind.clone(),
        "--dir".into(),
        dir,
        "--procs".into(),
        procs,
        "--drop-caches".into(),
        "--json".into(),
    ];
    command.extend(args);
    let borrowed: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = quiet(target.cairn, &borrowed);
    let report: Value = serde_json::from_slice(&out?)
        .map_err(|e| format!("bench {}: not JSON: {e}", target.workload.kind))?;
    Ok(fs_report_phases(&report))
}

/// A `bench fs`/`io500` report as the sweep's phases.
pub(super) fn fs_report_phases(report: &Value) -> Vec<(String, Value)> {
    let mut phases = Vec::new();
    for phase in report["phases"].as_array().into_iter().flatten() {
        let name = phase["phase"].as_str().unwrap_or("phase");
        let name = match phase["transfer_size_bytes"].as_u64() {
            Some(size) => format!("{name} {}", size_text(size)),
            None => name.to_owned(),
        };
        let mut value = phase.clone();
        value["bandwidth_mib_per_sec"] = phase["mib_per_sec"].clone();
        value["iops"] = phase["ops_per_sec"].clone();
        value["latency_p99_secs"] = json!(0.0);
        phases.push((name, value));
    }
    if let Some(score) = report.get("io500").filter(|s| !s.is_null()) {
        let mut value = score.clone();
        value["bandwidth_mib_per_sec"] =
            json!(score["bandwidth_gib_per_sec"].as_f64().unwrap_or(0.0) * 1024.0);
        value["iops"] = json!(score["metadata_kiops"].as_f64().unwrap_or(0.0) * 1000.0);
        value["latency_p99_secs"] = json!(0.0);
        phases.push(("io500 score".to_owned(), value));
    }
    phases
}

/// "4K", "4M", "47008".
fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_must_fit_their_kind() {
        let v = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check_phases("object", &v(&["write", "rand"])).is_ok());
        assert!(check_phases("s3", &v(&["put", "get", "list"])).is_ok());
        assert!(check_phases("fs", &v(&["ior-easy", "mdtest-hard"])).is_ok());
        assert!(check_phases("io500", &[]).is_ok());
        assert!(check_phases("s3", &v(&["get"])).is_err_and(|e| e.contains("reads what")));
        assert!(check_phases("fs", &v(&["write"])).is_err_and(|e| e.contains("ior-easy")));
        assert!(check_phases("io500", &v(&["ior-easy"])).is_err_and(|e| e.contains("no phases")));
        assert!(check_phases("tape", &[]).is_err_and(|e| e.contains("tape")));
    }

    #[test]
    fn launchers_are_checked_before_anything_runs() {
        let named = |name: &str| LauncherSpec::Named(name.to_owned());
        let words = |w: &[&str]| LauncherSpec::Command(w.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(Launcher::check(None, "object", 1), Ok(Launcher::Mpirun));
        assert_eq!(
            Launcher::check(Some(&named("direct")), "s3", 4),
            Ok(Launcher::Direct)
        );
        assert!(
            Launcher::check(Some(&named("pdsh")), "object", 1)
                .is_err_and(|e| e.contains("\"mpirun\", \"direct\""))
        );
        assert!(
            Launcher::check(Some(&named("direct")), "fs", 1)
                .is_err_and(|e| e.contains("own worker processes"))
        );
        assert!(
            Launcher::check(Some(&words(&["sh", "-c"])), "object", 1)
                .is_err_and(|e| e.contains("{clients}"))
        );
        assert!(
            Launcher::check(
                Some(&words(&["no-such-launcher", "{clients}"])),
                "object",
                2
            )
            .is_err_and(|e| e.contains("no-such-launcher is not installed"))
        );
        // One client at every point needs no launcher installed.
        assert!(
            Launcher::check(
                Some(&words(&["no-such-launcher", "{clients}"])),
                "object",
                1
            )
            .is_ok()
        );
    }

    #[test]
    fn fs_reports_become_phases_named_with_their_transfer_size() {
        let report = json!({
            "phases": [
                {"phase": "ior-easy-write", "transfer_size_bytes": 4096, "mib_per_sec": 5.0, "ops_per_sec": 1280.0},
                {"phase": "mdtest-easy-write", "transfer_size_bytes": null, "mib_per_sec": 0.0, "ops_per_sec": 900.0}
            ],
            "io500": {"bandwidth_gib_per_sec": 0.5, "metadata_kiops": 20.0, "score": 3.16}
        });
        let phases = fs_report_phases(&report);
        let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["ior-easy-write 4K", "mdtest-easy-write", "io500 score"]
        );
        assert_eq!(phases[0].1["bandwidth_mib_per_sec"], 5.0);
        assert_eq!(phases[1].1["iops"], 900.0);
        assert_eq!(phases[2].1["score"], 3.16);
        assert_eq!(size_text(47_008), "47008");
        assert_eq!(size_text(4 << 20), "4M");
    }
}

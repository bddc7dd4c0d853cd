//! `cairn up` / `cairn down`: a whole local cluster (one monitor, N OSDs),
//! each daemon a child process of this binary, supervised and restarted
//! with backoff; `down` stops the supervisor, which stops its children.
//!
//! Layout under the data dir: `mon/`, `osd.N/`, `logs/*.log`, `run/*.pid`
//! (children), `run/NAME.hold` (`cairn daemon stop`: keep NAME down),
//! `run/NAME.start` (`cairn daemon start`: start NAME now), `up.pid` (the
//! supervisor), `up.daemons` (the roster: the daemons of this cluster, one
//! name a line), `run/roster.lock` (serialises roster changes), `up.ready`
//! (written once the cluster serves; holds the summary), `cairn.toml` (the
//! client config).
//!
//! The roster decides what runs: `up` merges `--osds` (a minimum) into the
//! roster an earlier run left, `cairn daemon add osd` appends to it, and
//! the supervisor re-reads it every tick and starts the daemons it does
//! not run yet. It outlives `down`, so the next `up` runs every OSD the
//! cluster has had, not only the first `--osds`.
//!
//! The supervisor and `cairn daemon` talk through those files only, so
//! `daemon stop|start|add` works on a detached supervisor without a socket.

use crate::netemu::Layout;
use crate::output::CliResult;
use cairn_client::{Client, ClientConfig, ClientError};
use cairn_proto::mon::MonCommand;
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use clap::Args;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Time for the cluster to come up (every OSD up in the map) before `up`
/// gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Time `up --detach` waits for the background supervisor to report ready
/// (the readiness timeout plus room to start processes).
const DETACH_TIMEOUT: Duration = Duration::from_secs(60);
/// Time children get to exit after SIGTERM before they are killed.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Time `down` gives the supervisor (which itself waits `STOP_TIMEOUT`).
const DOWN_TIMEOUT: Duration = Duration::from_secs(25);
/// First restart delay of a crashed child; doubles up to the maximum.
const RESTART_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A child that ran this long before dying restarts with the initial delay.
const RESTART_BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// How often the supervisor looks at its children.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Most OSDs one `cairn up` runs (`osd.0` to `osd.63`).
pub(crate) const OSDS_MAX: u16 = 64;
/// The pool created on first start.
const DEFAULT_POOL: &str = "data";
const DEFAULT_POOL_PG_NUM: u32 = 32;

/// Flags of `cairn up`.
#[derive(Debug, Args, Clone)]
pub struct UpArgs {
    /// Directory holding every daemon's data, logs and the client config.
    #[arg(long = "data", value_name = "DIR", default_value = "/var/tmp/cairn")]
    data_dir: PathBuf,
    /// Number of OSDs, at least: an earlier run's roster (`up.daemons`,
    /// with OSDs `cairn daemon add osd` added) may hold more, and all of
    /// those run.
    #[arg(long, default_value_t = 3)]
    osds: u16,
    /// Run the supervisor in the background; return once the cluster is ready.
    #[arg(long)]
    detach: bool,
    /// Leave a crashed daemon down instead of restarting it.
    #[arg(long = "no-restart")]
    no_restart: bool,
    /// Monitor port; OSD N listens on base-port + 1 + N.
    #[arg(long = "base-port", default_value_t = 6789)]
    base_port: u16,
    /// Silence after which the monitor marks an OSD down (e.g. 2s); the
    /// monitor's own default when absent.
    #[arg(long = "down-grace", value_name = "DURATION", value_parser = crate::mon_cmd::parse_duration)]
    down_grace: Option<Duration>,
    /// Time a down OSD stays in before the monitor marks it out and its
    /// data is re-replicated elsewhere (e.g. 10s); the monitor's default
    /// (600s) when absent.
    #[arg(long = "down-out", value_name = "DURATION", value_parser = crate::mon_cmd::parse_duration)]
    down_out: Option<Duration>,
    /// MDS daemons of the file system (the first active, the others
    /// standing by); 0 for none.
    #[arg(long, default_value_t = 1)]
    mds: u16,
    /// The file system `cairn up` creates and its MDS daemons serve.
    #[arg(long = "fs-name", default_value = "cairnfs")]
    fs_name: String,
    /// How long mounts may cache what the MDS answered (`cairn mds
    /// --lease`); the MDS's default when absent.
    #[arg(long = "mds-lease", value_name = "DURATION", value_parser = crate::mon_cmd::parse_duration)]
    mds_lease: Option<Duration>,
    /// A request the MDS has been answering this long is slow (`cairn mds
    /// --complaint-time`); the MDS's default (30s) when absent.
    #[arg(long = "mds-complaint-time", value_name = "DURATION", value_parser = crate::mon_cmd::parse_duration)]
    mds_complaint_time: Option<Duration>,
    /// Entries past which a directory fragment splits (`cairn mds
    /// --dir-split-size`); the MDS's default (10000) when absent.
    #[arg(long = "mds-dir-split-size", value_name = "ENTRIES")]
    mds_dir_split_size: Option<u64>,
    /// Files up to this size keep their data in the MDS (`cairn mds
    /// --inline-max`); the MDS's default (0: none) when absent.
    #[arg(long = "mds-inline-max", value_name = "BYTES")]
    mds_inline_max: Option<String>,
    /// Port of the S3 gateway (`cairn s3 serve`, on 127.0.0.1), with a
    /// user `admin` whose keys are printed and kept in DIR/s3-admin.json;
    /// 0 for none.
    #[arg(long = "s3-port", value_name = "PORT", default_value_t = DEFAULT_S3_PORT)]
    s3_port: u16,
    /// Emulated hosts: OSD N is on `host{N mod HOSTS}` in the map, so
    /// pools can spread copies over hosts (the default pool does once
    /// there are three). Kept in DIR/network.toml for later runs.
    #[arg(long, value_name = "HOSTS")]
    hosts: Option<u32>,
    /// Each emulated host in a network namespace of its own, joined to the
    /// monitor's and the clients' by a veth pair (needs root and
    /// iproute2). `cairn` commands with this cluster's config enter its
    /// namespace by themselves; `cairn down` removes the namespaces.
    #[arg(long, requires = "hosts")]
    netns: bool,
    /// Each host link's rate, each way, e.g. 1gbit or 10gbit (tc tbf).
    #[arg(long = "net-rate", value_name = "RATE", requires = "netns", value_parser = crate::netemu::parse_rate)]
    net_rate: Option<u64>,
    /// Each host link's delay, each way, e.g. 100us or 1ms (tc netem).
    #[arg(long = "net-delay", value_name = "DELAY", requires = "netns", value_parser = crate::netemu::parse_delay)]
    net_delay: Option<u64>,
    /// Where the hosts are: from the flags on a first run, else from
    /// DIR/network.toml.
    #[arg(skip)]
    layout: Layout,
    /// Internal: this process is the background supervisor of `--detach`.
    #[arg(long, hide = true)]
    supervise: bool,
}

/// The S3 gateway's port unless `--s3-port` says otherwise (MinIO's;
/// Ceph's RGW takes 7480).
pub const DEFAULT_S3_PORT: u16 = 9000;

/// The file `cairn up --s3-port` keeps the gateway's endpoint and the
/// `admin` user's keys in.
pub(crate) fn s3_admin_file(dir: &Path) -> PathBuf {
    dir.join("s3-admin.json")
}

/// Flags of `cairn down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The data dir `cairn up` ran with.
    #[arg(long = "data", value_name = "DIR", default_value = "/var/tmp/cairn")]
    data_dir: PathBuf,
}

impl UpArgs {
    fn mon_addr(&self) -> String {
        format!("{}:{}", self.layout.hub_ip(), self.base_port)
    }

    /// The S3 gateway's port, if it runs one.
    fn s3_port(&self) -> Option<u16> {
        (self.s3_port != 0).then_some(self.s3_port)
    }

    fn summary(&self, list: &[Daemon]) -> String {
        let mut text = format!(
            "cairn cluster up in {}\n  monitor  {}\n",
            self.data_dir.display(),
            self.mon_addr()
        );
        for daemon in list {
            if let Member::Osd(index) = daemon.member {
                let addr = osd_addr(&self.layout, self.base_port, index).unwrap_or_default();
                let host = self.layout.host_name(index);
                text.push_str(&format!("  {:<8} {addr} on {host}\n", daemon.name));
            }
        }
        text.push_str(&format!(
            "  pool     {DEFAULT_POOL}\n  config   {}\n  logs     {}\n",
            self.data_dir.join("cairn.toml").display(),
            self.data_dir.join("logs").display()
        ));
        if self.s3_port().is_some()
            && let Ok(kept) = std::fs::read_to_string(s3_admin_file(&self.data_dir))
            && let Ok(kept) = serde_json::from_str::<serde_json::Value>(&kept)
        {
            let field = |name: &str| kept[name].as_str().unwrap_or_default().to_owned();
            text.push_str(&format!(
                "  s3       {}  (user admin: AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={})\n",
                field("endpoint"),
                field("access_key"),
                field("secret_key")
            ));
        }
        if self.mds > 0 {
            text.push_str(&format!(
                "  fs       {} ({} MDS)\n  mount    mkdir -p /mnt/cairn && cairn mount --conf {} --fs {} /mnt/cairn &\n",
                self.fs_name,
                self.mds,
                self.data_dir.join("cairn.toml").display(),
                self.fs_name
            ));
        }
        text
    }
}

/// A daemon of the roster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Member {
    Mon,
    /// The OSD whose data is `osd.N/` (its map id is the monitor's choice,
    /// in boot order, and may differ from N).
    Osd(u16),
    /// MDS daemon N of the file system (not in the roster file: `--mds`
    /// says how many run).
    Mds(u16),
    /// The S3 gateway (not in the roster file: `--s3-port` says whether
    /// it runs).
    S3,
}

impl Member {
    pub(crate) fn parse(name: &str) -> Option<Member> {
        if name == "mon" {
            return Some(Member::Mon);
        }
        let index: u16 = name.strip_prefix("osd.")?.parse().ok()?;
        // One spelling per OSD: `osd.01` would be a second name for `osd.1`.
        (index.to_string() == name["osd.".len()..] && index < OSDS_MAX)
            .then_some(Member::Osd(index))
    }

    pub(crate) fn name(self) -> String {
        match self {
            Member::Mon => "mon".into(),
            Member::Osd(index) => format!("osd.{index}"),
            Member::Mds(index) => format!("mds.{index}"),
            Member::S3 => "s3".into(),
        }
    }
}

/// Where `cairn up` puts `osd.N`: its host's address, at the port after
/// the monitor's plus N; `None` past the last port.
pub(crate) fn osd_addr(layout: &Layout, base_port: u16, index: u16) -> Option<String> {
    let port = u16::try_from(u32::from(base_port) + 1 + u32::from(index)).ok()?;
    Some(format!("{}:{port}", layout.osd_ip(index)))
}

/// The roster in `dir`, sorted (the monitor first); `None` when there is
/// none yet. A line that names no daemon is an error, not skipped: the
/// file is written by `cairn` only, so it means damage or a hand edit.
pub(crate) fn read_roster(dir: &Path) -> Result<Option<Vec<Member>>, String> {
    let path = roster_file(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("reading {}: {error}", path.display())),
    };
    let mut members = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let member = Member::parse(line).ok_or_else(|| {
            format!(
                "{} names {line:?}, which is not `mon` or `osd.N` (N below {OSDS_MAX})",
                path.display()
            )
        })?;
        members.push(member);
    }
    members.sort_unstable();
    members.dedup();
    Ok(Some(members))
}

/// Replaces the roster whole (temporary file, then rename), so the
/// supervisor never reads half of it.
pub(crate) fn write_roster(dir: &Path, members: &[Member]) -> std::io::Result<()> {
    let names: String = members.iter().map(|m| format!("{}\n", m.name())).collect();
    let temp = dir.join("up.daemons.tmp");
    std::fs::write(&temp, names)?;
    std::fs::rename(&temp, roster_file(dir))
}

/// Holds the roster lock until the returned file is dropped: one roster
/// change (read, decide, write) at a time.
pub(crate) fn lock_roster(dir: &Path) -> std::io::Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("run").join("roster.lock"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(file)
}

/// The summary of a cluster that serves (its client config exists then).
pub(crate) fn ready_file(dir: &Path) -> PathBuf {
    dir.join("up.ready")
}

/// The supervisor's pid.
pub(crate) fn pid_file(dir: &Path) -> PathBuf {
    dir.join("up.pid")
}

/// The roster: the daemons of the cluster, one name a line.
pub(crate) fn roster_file(dir: &Path) -> PathBuf {
    dir.join("up.daemons")
}

/// Daemon `name`'s pid, while the supervisor runs it.
pub(crate) fn daemon_pid_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.pid"))
}

/// Present while `cairn daemon stop` holds `name` down.
pub(crate) fn hold_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.hold"))
}

/// A request from `cairn daemon start` to start `name` now if it is not
/// running (also under `--no-restart`, also during a restart backoff).
pub(crate) fn start_request_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.start"))
}

/// A pid from `path`, if the file holds one.
pub(crate) fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live (not zombie) `cairn` process; guards against
/// signalling a process that reused a stale pid.
pub(crate) fn is_live_cairn(pid: i32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let state_ok = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'));
    state_ok && String::from_utf8_lossy(&cmdline).contains("cairn")
}

pub(crate) fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        // ESRCH (already gone) is the outcome we want anyway.
        let _ = rustix::process::kill_process(pid, sig);
    }
}

pub fn run_up(mut args: UpArgs) -> CliResult {
    if args.osds == 0 || args.osds > OSDS_MAX {
        return Err(format!("--osds must be 1 to {OSDS_MAX}").into());
    }
    if u32::from(args.base_port) + u32::from(args.osds) > u32::from(u16::MAX) {
        return Err("--base-port too high for that many OSDs".into());
    }
    std::fs::create_dir_all(args.data_dir.join("logs"))?;
    std::fs::create_dir_all(args.data_dir.join("run"))?;
    args.layout = layout_for_up(&args)?;
    let running = read_pid(&pid_file(&args.data_dir)).filter(|p| is_live_cairn(*p));
    if let Some(pid) = running.filter(|_| !args.supervise) {
        let dir = args.data_dir.display();
        return Err(format!(
            "a cluster is already running in {dir} (supervisor pid {pid}); `cairn down --data {dir}` first"
        )
        .into());
    }
    drop(std::fs::remove_file(ready_file(&args.data_dir)));
    if !args.supervise {
        if let Some(hub) = args.layout.hub() {
            // Made once, by the `up` the operator ran; its supervisor and
            // every daemon start inside (this thread is the only one yet).
            args.layout.create()?;
            crate::netemu::enter(&hub)?;
        }
        args.layout.save(&args.data_dir)?;
    }
    // Checked here too, not only by the supervisor, so `--detach` reports
    // a bad roster itself instead of pointing at the supervisor's log.
    let members = roster_for_up(&args)?;
    check_ports(args.base_port, &members)?;
    if args.detach && !args.supervise {
        return detach(&args);
    }
    std::fs::write(
        pid_file(&args.data_dir),
        format!("{}\n", std::process::id()),
    )?;
    let result = supervise(&args);
    // The roster stays: the next `up` runs the same daemons.
    drop(std::fs::remove_file(pid_file(&args.data_dir)));
    drop(std::fs::remove_file(ready_file(&args.data_dir)));
    result
}

/// The hosts of this `up`: as the flags say on a cluster's first run (or
/// when they change it), else as the last run left them.
fn layout_for_up(args: &UpArgs) -> CliResult<Layout> {
    let kept = Layout::load(&args.data_dir)?;
    let Some(hosts) = args.hosts else {
        if args.netns || args.net_rate.is_some() || args.net_delay.is_some() {
            return Err("--netns, --net-rate and --net-delay need --hosts".into());
        }
        return Ok(kept);
    };
    if hosts == 0 || hosts > crate::netemu::HOSTS_MAX {
        return Err(format!("--hosts must be 1 to {}", crate::netemu::HOSTS_MAX).into());
    }
    if kept.hosts != 0 && kept.hosts != hosts {
        return Err(format!(
            "the cluster in {} has {} hosts; its OSDs cannot move to {hosts}",
            args.data_dir.display(),
            kept.hosts
        )
        .into());
    }
    Ok(Layout {
        hosts,
        netns: args.netns,
        tag: format!("cairn{}", args.base_port),
        rate_bits: args.net_rate,
        delay_us: args.net_delay,
    })
}

/// The daemons `up` runs: the monitor, `osd.0` to `osd.{osds - 1}`, and
/// every daemon of the roster an earlier run left.
fn roster_for_up(args: &UpArgs) -> CliResult<Vec<Member>> {
    let mut members = read_roster(&args.data_dir)?.unwrap_or_default();
    members.push(Member::Mon);
    members.extend((0..args.osds).map(Member::Osd));
    members.sort_unstable();
    members.dedup();
    Ok(members)
}

/// Fails unless every OSD of `members` has a port.
fn check_ports(base_port: u16, members: &[Member]) -> CliResult {
    for member in members {
        if let Member::Osd(index) = member
            && osd_addr(&Layout::default(), base_port, *index).is_none()
        {
            return Err(format!(
                "--base-port {base_port} too high: osd.{index} would listen past port {}",
                u16::MAX
            )
            .into());
        }
    }
    Ok(())
}

/// `FLAG 1234ms` for each duration given, in order.
fn duration_flags(flags: &[(&str, Option<Duration>)]) -> Vec<String> {
    flags
        .iter()
        .filter_map(|(flag, value)| {
            value.map(|d| [(*flag).to_owned(), format!("{}ms", d.as_millis())])
        })
        .flatten()
        .collect()
}

/// This program's path as it was at start: `current_exe` reads
/// `/proc/self/exe`, which names a replaced binary "PATH (deleted)", so a
/// supervisor whose `cairn` was upgraded (or rebuilt) could restart
/// nothing. Daemons restart from the file now at the path.
fn own_exe() -> std::io::Result<PathBuf> {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(path) = PATH.get() {
        return Ok(path.clone());
    }
    let path = std::env::current_exe()?;
    Ok(PATH.get_or_init(|| path).clone())
}

/// Starts the supervisor in the background and waits until it reports the
/// cluster ready (or dies).
fn detach(args: &UpArgs) -> CliResult {
    let log = args.data_dir.join("logs").join("up.log");
    let stderr = File::options().create(true).append(true).open(&log)?;
    let mut command = Command::new(own_exe()?);
    command
        .arg("up")
        .arg("--supervise")
        .arg("--data")
        .arg(&args.data_dir)
        .arg("--osds")
        .arg(args.osds.to_string())
        .arg("--base-port")
        .arg(args.base_port.to_string())
        .arg("--mds")
        .arg(args.mds.to_string())
        .arg("--fs-name")
        .arg(&args.fs_name);
    command.args(duration_flags(&[
        ("--mds-lease", args.mds_lease),
        ("--mds-complaint-time", args.mds_complaint_time),
        ("--down-grace", args.down_grace),
        ("--down-out", args.down_out),
    ]));
    if let Some(size) = args.mds_dir_split_size {
        command.arg("--mds-dir-split-size").arg(size.to_string());
    }
    if let Some(size) = &args.mds_inline_max {
        command.arg("--mds-inline-max").arg(size);
    }
    command.arg("--s3-port").arg(args.s3_port.to_string());
    if args.no_restart {
        command.arg("--no-restart");
    }
    // Its own process group: the terminal's Ctrl-C does not reach it.
    let mut child = command
        .stdin(Stdio::null())
        .stdout(stderr.try_clone()?)
        .stderr(stderr)
        .process_group(0)
        .spawn()?;
    let deadline = Instant::now() + DETACH_TIMEOUT;
    loop {
        if let Ok(summary) = std::fs::read_to_string(ready_file(&args.data_dir)) {
            print!("{summary}");
            println!("  supervisor pid {} (stop with `cairn down`)", child.id());
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!(
                "supervisor exited ({status}) before the cluster was ready; see {}",
                log.display()
            )
            .into());
        }
        if Instant::now() > deadline {
            signal(
                i32::try_from(child.id()).unwrap_or(0),
                rustix::process::Signal::TERM,
            );
            return Err(format!(
                "cluster not ready within {} s; see {}",
                DETACH_TIMEOUT.as_secs(),
                log.display()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One supervised child process.
#[derive(Debug)]
struct Daemon {
    member: Member,
    name: String,
    args: Vec<String>,
    child: Option<Child>,
    started_at: Instant,
    restart_at: Option<Instant>,
    backoff: Duration,
    restart_count: u32,
    /// Down because of a hold marker (not a crash): starts as soon as the
    /// marker goes, without backoff, also under `--no-restart`.
    held: bool,
    /// The emulated host's namespace it runs in, if not the supervisor's.
    netns: Option<String>,
}

impl Daemon {
    fn new(member: Member, args: Vec<String>) -> Daemon {
        Daemon {
            member,
            name: member.name(),
            args,
            child: None,
            started_at: Instant::now(),
            restart_at: None,
            backoff: RESTART_BACKOFF_INITIAL,
            restart_count: 0,
            held: false,
            netns: None,
        }
    }

    fn start(&mut self, dir: &Path) -> std::io::Result<()> {
        let log_path = dir.join("logs").join(format!("{}.log", self.name));
        let log = File::options().create(true).append(true).open(log_path)?;
        // Own process group: a Ctrl-C reaches the supervisor only, which
        // then stops the children in order.
        let mut command = Command::new(own_exe()?);
        if let Some(netns) = &self.netns {
            command.env(crate::netemu::NETNS_ENV, netns);
        }
        let child = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()?;
        std::fs::write(
            daemon_pid_file(dir, &self.name),
            format!("{}\n", child.id()),
        )?;
        tracing::info!(daemon = %self.name, pid = child.id(), "started");
        self.child = Some(child);
        self.started_at = Instant::now();
        self.restart_at = None;
        Ok(())
    }

    /// One supervisor tick: notices a dead child, honours the hold marker
    /// and start requests of `cairn daemon`, and schedules (or performs)
    /// restarts.
    fn poll(&mut self, dir: &Path, restart: bool) {
        let is_held = hold_file(dir, &self.name).exists();
        if self.child.is_some() {
            self.poll_child(dir, restart, is_held);
            return;
        }
        if is_held {
            self.held = true;
            self.restart_at = None;
            return;
        }
        let is_requested = std::fs::remove_file(start_request_file(dir, &self.name)).is_ok();
        if is_requested || std::mem::take(&mut self.held) {
            // Deliberate, not a crash: no backoff.
            self.backoff = RESTART_BACKOFF_INITIAL;
            self.restart_at = Some(Instant::now());
        }
        if self.restart_at.is_some_and(|at| Instant::now() >= at) {
            self.restart_count += 1;
            tracing::info!(daemon = %self.name, restarts = self.restart_count, "restarting");
            if let Err(error) = self.start(dir) {
                tracing::warn!(daemon = %self.name, %error, "restart failed");
                self.restart_at = Some(Instant::now() + self.backoff);
            }
        }
    }

    /// Checks the running child; once it has exited, either records it as
    /// held down (`cairn daemon stop` asked for that) or schedules a
    /// restart after the backoff.
    fn poll_child(&mut self, dir: &Path, restart: bool, is_held: bool) {
        let Some(child) = &mut self.child else {
            return;
        };
        let status = match child.try_wait() {
            Ok(None) => {
                // Already running: a start request is fulfilled.
                drop(std::fs::remove_file(start_request_file(dir, &self.name)));
                return;
            }
            Ok(Some(status)) => status.to_string(),
            Err(error) => format!("cannot wait: {error}"),
        };
        self.child = None;
        if is_held {
            tracing::info!(daemon = %self.name, %status, "held down");
            self.held = true;
            drop(std::fs::remove_file(daemon_pid_file(dir, &self.name)));
            return;
        }
        tracing::warn!(daemon = %self.name, %status, "exited unexpectedly");
        if !restart {
            return;
        }
        if self.started_at.elapsed() > RESTART_BACKOFF_RESET_AFTER {
            self.backoff = RESTART_BACKOFF_INITIAL;
        }
        self.restart_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(RESTART_BACKOFF_MAX);
    }
}

/// The daemon `member` of the cluster `args` describes; `None` for an
/// OSD without a port.
fn daemon(args: &UpArgs, member: Member) -> Option<Daemon> {
    let dir = &args.data_dir;
    let path = |p: PathBuf| p.display().to_string();
    let command = match member {
        Member::Mon => {
            let mut command = vec![
                "mon".into(),
                "--data".into(),
                path(dir.join("mon")),
                "--addr".into(),
                args.mon_addr(),
            ];
            command.extend(duration_flags(&[
                ("--down-grace", args.down_grace),
                ("--down-out", args.down_out),
            ]));
            command
        }
        Member::Mds(index) => {
            let mut command = vec![
                "mds".into(),
                "--mon".into(),
                args.mon_addr(),
                "--fs".into(),
                args.fs_name.clone(),
                "--name".into(),
                index.to_string(),
                "--addr".into(),
                format!("{}:0", args.layout.hub_ip()),
            ];
            command.extend(duration_flags(&[
                ("--lease", args.mds_lease),
                ("--complaint-time", args.mds_complaint_time),
            ]));
            if let Some(size) = args.mds_dir_split_size {
                command.extend(["--dir-split-size".into(), size.to_string()]);
            }
            if let Some(size) = &args.mds_inline_max {
                command.extend(["--inline-max".into(), size.clone()]);
            }
            command
        }
        Member::S3 => vec![
            "s3".into(),
            "serve".into(),
            "--mon".into(),
            args.mon_addr(),
            "--addr".into(),
            format!("{}:{}", args.layout.hub_ip(), args.s3_port()?),
        ],
        Member::Osd(index) => {
            let data = dir.join(member.name());
            let mut command = vec![
                "osd".into(),
                "--data".into(),
                path(data.clone()),
                "--mon".into(),
                args.mon_addr(),
                "--addr".into(),
                osd_addr(&args.layout, args.base_port, index)?,
                "--host".into(),
                args.layout.host_name(index),
            ];
            // A new OSD asks for the id its name says, so `osd.N` of
            // `cairn daemon stop osd.N` is `osd.N` of `cairn osd tree`
            // (OSDs booting at once would otherwise take ids in the order
            // they reach the monitor). One that booted keeps the id it
            // saved, whatever its name.
            if !data.join("osd_id").exists() {
                command.extend(["--id".into(), index.to_string()]);
            }
            command
        }
    };
    let mut daemon = Daemon::new(member, command);
    if let Member::Osd(index) = member {
        daemon.netns = args.layout.osd_netns(index);
    }
    Some(daemon)
}

fn supervise(args: &UpArgs) -> CliResult {
    // Taken now, while the path names this binary (see `own_exe`).
    own_exe()?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut list = start_roster(args)?;
    let mut result = Ok(());
    for daemon in &mut list {
        if let Err(error) = daemon.start(&args.data_dir) {
            result = Err(format!("cannot start {}: {error}", daemon.name).into());
            break;
        }
    }
    if result.is_ok() {
        result = runtime.block_on(supervise_loop(args, &mut list));
    }
    stop_all(&mut list, &args.data_dir);
    result
}

/// Merges `--osds` into the roster, writes it back, and clears the hold
/// markers and start requests of an earlier run, so a fresh `up` starts
/// everything.
fn start_roster(args: &UpArgs) -> CliResult<Vec<Daemon>> {
    let dir = &args.data_dir;
    let _lock = lock_roster(dir)?;
    let members = roster_for_up(args)?;
    check_ports(args.base_port, &members)?;
    for member in &members {
        drop(std::fs::remove_file(hold_file(dir, &member.name())));
        drop(std::fs::remove_file(start_request_file(
            dir,
            &member.name(),
        )));
    }
    write_roster(dir, &members)?;
    Ok(members
        .iter()
        .copied()
        .chain((0..args.mds).map(Member::Mds))
        .chain(args.s3_port().map(|_| Member::S3))
        .filter_map(|member| daemon(args, member))
        .collect())
}

/// Starts the daemons the roster gained (`cairn daemon add`) since the last
/// tick; returns whether there were any. Daemons are never dropped here:
/// the roster only grows while the cluster runs.
fn adopt_roster(args: &UpArgs, list: &mut Vec<Daemon>, last_error: &mut Option<String>) -> bool {
    let members = read_roster(&args.data_dir).and_then(|members| {
        let members = members.unwrap_or_default();
        check_ports(args.base_port, &members).map_err(|e| e.to_string())?;
        Ok(members)
    });
    let members = match members {
        Ok(members) => members,
        Err(error) => {
            // Once per distinct error: the next tick reads the file again.
            if last_error.as_ref() != Some(&error) {
                tracing::warn!(%error, "roster not usable; running the daemons already started");
                *last_error = Some(error);
            }
            return false;
        }
    };
    *last_error = None;
    let mut added = false;
    for member in members {
        if list.iter().any(|d| d.member == member) {
            continue;
        }
        // Every member has a port: checked above.
        let Some(mut daemon) = daemon(args, member) else {
            continue;
        };
        tracing::info!(daemon = %daemon.name, "added to the roster");
        if let Err(error) = daemon.start(&args.data_dir) {
            tracing::warn!(daemon = %daemon.name, %error, "start failed; retrying after the backoff");
            daemon.restart_at = Some(Instant::now() + daemon.backoff);
        }
        list.push(daemon);
        added = true;
    }
    added
}

async fn supervise_loop(args: &UpArgs, list: &mut Vec<Daemon>) -> CliResult {
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::mon_cmd::cancel_on_signal(shutdown.clone()));
    let osd_count = list
        .iter()
        .filter(|d| matches!(d.member, Member::Osd(_)))
        .count();
    let ready = wait_ready(args.clone(), osd_count);
    tokio::pin!(ready);
    let mut is_ready = false;
    let mut roster_error = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            outcome = &mut ready, if !is_ready => {
                outcome?;
                is_ready = true;
                let summary = args.summary(list);
                std::fs::write(ready_file(&args.data_dir), &summary)?;
                if !args.supervise {
                    print!("{summary}");
                    println!("  press Ctrl-C to stop");
                }
            }
            _ = tick.tick() => {
                // Before readiness too: an added daemon waits for nothing.
                if adopt_roster(args, list, &mut roster_error) && is_ready {
                    std::fs::write(ready_file(&args.data_dir), args.summary(list))?;
                }
                for daemon in list.iter_mut() {
                    daemon.poll(&args.data_dir, !args.no_restart);
                }
            }
        }
    }
}

/// Waits until every OSD is up, creates the default pool if missing and
/// writes the client config.
async fn wait_ready(args: UpArgs, osd_count: usize) -> CliResult {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mon_addr = args.mon_addr();
    let not_ready = |what: String| -> CliResult {
        Err(format!(
            "cluster not ready within {} s: {what}",
            READY_TIMEOUT.as_secs()
        )
        .into())
    };
    let client = loop {
        match Client::connect(&mon_addr).await {
            Ok(client) => break client,
            Err(error) if Instant::now() > deadline => return not_ready(error.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    check_own_monitor(&args, &mon_addr, deadline).await?;
    let want = osd_count;
    loop {
        let map = client.refresh_map().await?;
        let up = map.osds.iter().filter(|o| o.up).count();
        if up >= want {
            break;
        }
        if Instant::now() > deadline {
            return not_ready(format!("{up} of {want} OSDs up"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let map = client.refresh_map().await?;
    if map.pool_by_name(DEFAULT_POOL).is_none() {
        let size = u32::try_from(osd_count).unwrap_or(u32::MAX).min(3);
        let command = MonCommand::PoolCreate {
            name: DEFAULT_POOL.into(),
            pg_num: DEFAULT_POOL_PG_NUM,
            redundancy: RedundancySpec::Replicated {
                size,
                min_size: size.saturating_sub(1).max(1),
            },
            // Copies on distinct hosts once there are hosts enough.
            failure_domain: if args.layout.hosts >= size {
                FailureDomainSpec::Host
            } else {
                FailureDomainSpec::Osd
            },
            device_class: None,
        };
        match client.mon_command(command).await {
            Ok(_) | Err(ClientError::Mon(cairn_proto::mon::MonError::PoolExists(_))) => {}
            Err(error) => return Err(format!("creating pool {DEFAULT_POOL}: {error}").into()),
        }
    }
    if args.mds > 0 {
        let size = u32::try_from(osd_count).unwrap_or(u32::MAX).min(3);
        let list = crate::fs_cmd::fs_list(&client).await?;
        if !list.iter().any(|f| f.name == args.fs_name) {
            crate::fs_cmd::create(
                &client,
                &args.fs_name,
                (None, None),
                DEFAULT_POOL_PG_NUM,
                size,
            )
            .await
            .map_err(|e| format!("creating file system {}: {e}", args.fs_name))?;
        }
    }
    if let Some(port) = args.s3_port() {
        ensure_s3_admin(&client, &args.data_dir, port, osd_count)
            .await
            .map_err(|e| format!("preparing the S3 gateway: {e}"))?;
    }
    wait_pgs_reported(&client, deadline).await?;
    let config = ClientConfig {
        mon: mon_addr,
        netns: args.layout.hub(),
    };
    let path = args.data_dir.join("cairn.toml");
    let temp = args.data_dir.join("cairn.toml.tmp");
    std::fs::write(&temp, config.to_toml()?)?;
    std::fs::rename(&temp, &path)?;
    Ok(())
}

/// Makes the gateway's pool and the user `admin` (once: its keys are kept
/// in [`s3_admin_file`], and a user without that file is made again).
async fn ensure_s3_admin(client: &Client, dir: &Path, port: u16, osd_count: usize) -> CliResult {
    let size = u32::try_from(osd_count).unwrap_or(u32::MAX).clamp(1, 3);
    cairn_s3::prepare(client, 16, size).await?;
    let path = s3_admin_file(dir);
    let endpoint = format!("http://127.0.0.1:{port}");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(mut kept) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(access) = kept["access_key"].as_str()
        && cairn_s3::meta::key_record(client, access).await?.is_some()
    {
        kept["endpoint"] = serde_json::Value::String(endpoint);
        std::fs::write(&path, serde_json::to_vec_pretty(&kept)?)?;
        return Ok(());
    }
    if cairn_s3::meta::list_users(client)
        .await?
        .iter()
        .any(|u| u.name == "admin")
    {
        cairn_s3::meta::remove_user(client, "admin").await?;
    }
    let (access, secret) = cairn_s3::meta::create_user(client, "admin").await?;
    let kept = serde_json::json!({
        "endpoint": endpoint,
        "user": "admin",
        "access_key": access,
        "secret_key": secret,
    });
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, serde_json::to_vec_pretty(&kept)?)?;
    std::fs::rename(&temp, &path)?;
    Ok(())
}

/// Fails unless the monitor answering on `mon_addr` is this cluster's: the
/// fsid it serves is the one our monitor wrote once it listened. Another
/// cluster's monitor on the same port (ours then failed to bind) is said,
/// never used.
async fn check_own_monitor(args: &UpArgs, mon_addr: &str, deadline: Instant) -> CliResult {
    let path = args.data_dir.join("mon").join(cairn_mon::daemon::FSID_FILE);
    let served = match cairn_proto::mon::MonClient::connect(mon_addr)
        .await?
        .get_map(cairn_types::Epoch(0))
        .await?
    {
        cairn_proto::mon::MapFetch::Full { fsid, .. }
        | cairn_proto::mon::MapFetch::Incrementals { fsid, .. } => {
            format!("{fsid:032x}")
        }
    };
    loop {
        let ours = std::fs::read_to_string(&path).unwrap_or_default();
        if ours.trim() == served {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the monitor answering on {mon_addr} serves cluster {served}, not this one \
                 ({}: {:?}); is another cluster using the port? see {}",
                path.display(),
                ours.trim(),
                args.data_dir.join("logs").join("mon.log").display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the OSDs have reported every PG of every pool (with the
/// heartbeat after they created them), so `cairn status` right after `up`
/// shows real PG states. A fresh cluster's PGs are all active by then; a
/// restarted one's may be inactive until peering exists (issue 5), which
/// is said, not waited for.
async fn wait_pgs_reported(client: &Client, deadline: Instant) -> CliResult {
    loop {
        let map = client.refresh_map().await?;
        let total: u64 = map.pools.iter().map(|p| u64::from(p.pg_num)).sum();
        let mut reported = 0u64;
        let mut active = 0u64;
        for report in client.osd_stats().await? {
            for (state, count) in &report.stats.pg_states {
                reported += u64::from(*count);
                if state.split('+').any(|part| part == "active") {
                    active += u64::from(*count);
                }
            }
        }
        if reported >= total {
            if active < total {
                eprintln!(
                    "{} of {total} PGs inactive: data held before a restart is not served until peering exists",
                    total - active
                );
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "cluster not ready within {} s: {reported} of {total} PGs reported",
                READY_TIMEOUT.as_secs()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM to every child (OSDs first, the monitor last), then SIGKILL to
/// those still running after [`STOP_TIMEOUT`].
fn stop_all(list: &mut [Daemon], dir: &Path) {
    for daemon in list.iter_mut().rev() {
        if let Some(child) = &daemon.child {
            signal(
                i32::try_from(child.id()).unwrap_or(0),
                rustix::process::Signal::TERM,
            );
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for daemon in list.iter_mut().rev() {
        let Some(mut child) = daemon.child.take() else {
            continue;
        };
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    tracing::warn!(daemon = %daemon.name, "ignored SIGTERM; killing");
                    drop(child.kill());
                    drop(child.wait());
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        drop(std::fs::remove_file(daemon_pid_file(dir, &daemon.name)));
        tracing::info!(daemon = %daemon.name, "stopped");
    }
}

pub fn run_down(args: DownArgs) -> CliResult {
    let dir = &args.data_dir;
    match read_pid(&pid_file(dir)).filter(|p| is_live_cairn(*p)) {
        Some(pid) => {
            signal(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + DOWN_TIMEOUT;
            while is_live_cairn(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if is_live_cairn(pid) {
                eprintln!("supervisor {pid} ignored SIGTERM; killing it");
                signal(pid, rustix::process::Signal::KILL);
            }
            println!("cluster in {} stopped", dir.display());
        }
        None => println!("no cluster running in {}", dir.display()),
    }
    // Children the supervisor could not stop (it was killed): kill them by
    // the pids it recorded. Hold markers and start requests hold no pid
    // and go too: the next `up` starts every daemon.
    if let Ok(entries) = std::fs::read_dir(dir.join("run")) {
        for entry in entries.flatten() {
            if let Some(pid) = read_pid(&entry.path()).filter(|p| is_live_cairn(*p)) {
                eprintln!("killing leftover daemon pid {pid}");
                signal(pid, rustix::process::Signal::KILL);
            }
            drop(std::fs::remove_file(entry.path()));
        }
    }
    // The namespaces of emulated hosts go (the next `up` makes them again).
    match Layout::load(dir) {
        Ok(layout) if layout.netns => layout.destroy(),
        Ok(_) => {}
        Err(error) => eprintln!("{error}: its network namespaces, if any, stay"),
    }
    // The roster stays: `up` on this data dir runs the same daemons again.
    drop(std::fs::remove_file(pid_file(dir)));
    drop(std::fs::remove_file(ready_file(dir)));
    Ok(())
}

//! `cairn daemon stop|start NAME`: hold one daemon of a `cairn up` cluster
//! down on purpose, and let it run again; `cairn daemon add osd`: grow the
//! cluster by one OSD.
//!
//! Talks to the supervisor through files in the data dir only (layout in
//! `up_cmd`): `stop` writes `run/NAME.hold`, which the supervisor obeys by
//! not restarting NAME, then signals the daemon; `start` writes
//! `run/NAME.start` and removes the hold, and the supervisor starts NAME on
//! its next tick; `add` appends the next `osd.N` to the roster, which the
//! supervisor re-reads every tick, then waits for the monitor to see it up.

use crate::netemu::Layout;
use crate::output::CliResult;
use crate::up_cmd::{
    Member, OSDS_MAX, STOP_TIMEOUT, daemon_pid_file, hold_file, is_live_cairn, lock_roster,
    osd_addr, pid_file, read_pid, read_roster, ready_file, roster_file, signal, start_request_file,
    write_roster,
};
use cairn_client::{Client, ClientConfig};
use clap::{Args, Subcommand, ValueEnum};
use rustix::process::Signal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Time a SIGKILLed daemon gets to disappear before `stop` gives up.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// Time `start` waits for the supervisor to start the daemon (a few of its
/// 200 ms ticks plus process start).
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How often `stop` and `start` look at the pid file.
const WAIT_INTERVAL: Duration = Duration::from_millis(100);
/// Time `add` waits for the new OSD to be up in the map: process start,
/// store creation and boot, with room for a loaded machine.
const ADD_TIMEOUT: Duration = Duration::from_secs(30);

/// `cairn daemon ...`.
#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Stop a daemon and hold it down: the supervisor does not restart it
    /// until `cairn daemon start`.
    Stop(StopArgs),
    /// Start a daemon that is held down (or that crashed and stayed down).
    Start(DaemonArgs),
    /// Add a daemon to the running cluster: `add osd` creates the next
    /// `osd.N`, has the supervisor run it (and every later `cairn up` on
    /// this data dir), waits until it is up in the map and prints its id.
    Add(AddArgs),
}

/// What `cairn daemon add` can add.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DaemonKind {
    Osd,
}

/// Flags of `cairn daemon add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The kind of daemon (one monitor per `cairn up` cluster, so `osd`).
    kind: DaemonKind,
    /// The data dir `cairn up` runs with.
    #[arg(long = "data", value_name = "DIR", default_value = "/var/tmp/cairn")]
    data_dir: PathBuf,
}

/// Flags of `cairn daemon stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// SIGKILL it at once, as a crash or a power cut would stop it, rather
    /// than SIGTERM and a clean exit.
    #[arg(long)]
    kill: bool,
}

/// Flags of `cairn daemon stop|start`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// `mon` or `osd.N`.
    name: String,
    /// The data dir `cairn up` runs with.
    #[arg(long = "data", value_name = "DIR", default_value = "/var/tmp/cairn")]
    data_dir: PathBuf,
}

pub fn run(command: DaemonCommand) -> CliResult {
    match command {
        DaemonCommand::Stop(args) => {
            check_daemon(&args.daemon)?;
            let first = if args.kill {
                Signal::KILL
            } else {
                Signal::TERM
            };
            stop(&args.daemon.data_dir, &args.daemon.name, first)
        }
        DaemonCommand::Start(args) => {
            check_daemon(&args)?;
            start(&args.data_dir, &args.name)
        }
        DaemonCommand::Add(args) => match args.kind {
            DaemonKind::Osd => add_osd(&args.data_dir),
        },
    }
}

/// Fails unless a supervisor runs in `dir`.
fn check_running(dir: &Path) -> CliResult {
    if read_pid(&pid_file(dir))
        .filter(|p| is_live_cairn(*p))
        .is_none()
    {
        return Err(format!(
            "no cluster running in {} (start one with `cairn up --data {}`)",
            dir.display(),
            dir.display()
        )
        .into());
    }
    Ok(())
}

/// Fails unless a supervisor runs in the data dir and runs `args.name`.
fn check_daemon(args: &DaemonArgs) -> CliResult {
    let dir = &args.data_dir;
    check_running(dir)?;
    let roster = std::fs::read_to_string(roster_file(dir)).unwrap_or_default();
    if !roster.lines().any(|name| name == args.name) {
        let names: Vec<&str> = roster.lines().collect();
        return Err(format!(
            "no daemon {:?} in the cluster in {} (it runs: {})",
            args.name,
            dir.display(),
            names.join(", ")
        )
        .into());
    }
    Ok(())
}

/// The daemon's pid while it is alive.
fn live_pid(dir: &Path, name: &str) -> Option<i32> {
    read_pid(&daemon_pid_file(dir, name)).filter(|p| is_live_cairn(*p))
}

/// Holds `name` down, then sends it `first` (SIGTERM, or SIGKILL for a
/// crash; SIGKILL after [`STOP_TIMEOUT`]) and waits until it has exited
/// and the supervisor has noticed.
fn stop(dir: &Path, name: &str, first: Signal) -> CliResult {
    let hold = hold_file(dir, name);
    let was_held = hold.exists();
    // The hold goes first: the supervisor then treats the exit as
    // deliberate and does not restart the daemon.
    std::fs::write(&hold, "held down by `cairn daemon stop`\n")?;
    drop(std::fs::remove_file(start_request_file(dir, name)));
    let Some(first_pid) = live_pid(dir, name) else {
        if was_held {
            println!("{name} is already stopped (held down)");
        } else {
            println!("{name} was not running; now held down");
        }
        return Ok(());
    };
    let term_deadline = Instant::now() + STOP_TIMEOUT;
    let kill_deadline = term_deadline + KILL_TIMEOUT;
    let mut signalled_pid = None;
    // Done once the supervisor has seen the held daemon exit and removed
    // its pid file: a `daemon start` right after cannot then race the
    // supervisor into taking the exit for a crash. The pid is re-read
    // each time, as a restart racing with the hold may have put a new
    // one there.
    while daemon_pid_file(dir, name).exists() {
        let now = Instant::now();
        match live_pid(dir, name) {
            Some(pid) if now > kill_deadline => {
                return Err(format!("{name} (pid {pid}) did not exit after SIGKILL").into());
            }
            Some(pid) if now > term_deadline => signal(pid, Signal::KILL),
            Some(pid) if signalled_pid != Some(pid) => {
                signal(pid, first);
                signalled_pid = Some(pid);
            }
            // Exited, but the supervisor has not noticed for a long time:
            // the daemon is down and held all the same.
            None if now > term_deadline => break,
            Some(_) | None => {}
        }
        std::thread::sleep(WAIT_INTERVAL);
    }
    println!(
        "{name} stopped (pid {first_pid}) and held down; `cairn daemon start {name}` to start it"
    );
    Ok(())
}

/// Asks the supervisor to start `name` (removing its hold) and waits until
/// a live process of it is recorded.
fn start(dir: &Path, name: &str) -> CliResult {
    let hold = hold_file(dir, name);
    if !hold.exists()
        && let Some(pid) = live_pid(dir, name)
    {
        println!("{name} is already running (pid {pid})");
        return Ok(());
    }
    // The request goes first so that the daemon also starts when the
    // supervisor never noticed the hold (or it crashed under --no-restart).
    std::fs::write(
        start_request_file(dir, name),
        "requested by `cairn daemon start`\n",
    )?;
    match std::fs::remove_file(&hold) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("removing {}: {error}", hold.display()).into()),
    }
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(pid) = live_pid(dir, name) {
            println!("{name} started (pid {pid})");
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the supervisor did not start {name} within {} s; see {}",
                START_TIMEOUT.as_secs(),
                dir.join("logs").join("up.log").display()
            )
            .into());
        }
        std::thread::sleep(WAIT_INTERVAL);
    }
}

/// Registers the next `osd.N` in the roster (the supervisor starts it on
/// its next tick), then waits until the monitor has it up and prints the
/// id the monitor gave it.
fn add_osd(dir: &Path) -> CliResult {
    check_running(dir)?;
    if !ready_file(dir).exists() {
        return Err(format!(
            "the cluster in {} is still starting; add OSDs once `cairn up` has reported it ready",
            dir.display()
        )
        .into());
    }
    let config = ClientConfig::load(&dir.join("cairn.toml"))?;
    let layout = Layout::load(dir)?;
    let index = register_osd(dir, &config.mon)?;
    let name = Member::Osd(index).name();
    let addr = osd_addr(&layout, mon_port(&config.mon)?, index).unwrap_or_default();
    if let Some(hub) = &config.netns {
        // Where the monitor is reached (one thread yet: see `main`).
        crate::netemu::enter(hub)?;
    }
    let (id, epoch) = crate::conn::runtime()?.block_on(wait_osd_up(dir, &name, &config))?;
    println!("{name} added: OSD id {id}, serving on {addr}, up in the map at epoch {epoch}");
    Ok(())
}

/// The monitor's port, which `cairn up` makes the base of the OSD ports.
fn mon_port(mon: &str) -> CliResult<u16> {
    let addr: std::net::SocketAddr = mon
        .parse()
        .map_err(|e| format!("monitor address {mon:?} in the client config: {e}"))?;
    Ok(addr.port())
}

/// Picks the next OSD index (past every `osd.N` of the roster and every
/// `osd.N` directory, so an old OSD's data is never taken over), creates
/// its data dir and appends it to the roster, all under the roster lock.
fn register_osd(dir: &Path, mon: &str) -> CliResult<u16> {
    let _lock = lock_roster(dir)?;
    let Some(mut members) = read_roster(dir)? else {
        return Err(format!(
            "{} is missing: the supervisor in {} did not write its roster",
            roster_file(dir).display(),
            dir.display()
        )
        .into());
    };
    let mut used: Vec<u16> = members
        .iter()
        .filter_map(|m| match m {
            Member::Osd(index) => Some(*index),
            Member::Mon | Member::Mds(_) | Member::S3 => None,
        })
        .collect();
    for entry in std::fs::read_dir(dir)?.flatten() {
        if let Some(Member::Osd(index)) = entry.file_name().to_str().and_then(Member::parse) {
            used.push(index);
        }
    }
    let index = used.iter().max().map_or(0, |max| max + 1);
    if index >= OSDS_MAX {
        return Err(format!(
            "the cluster in {} has used every OSD name up to osd.{} (at most {OSDS_MAX})",
            dir.display(),
            OSDS_MAX - 1
        )
        .into());
    }
    if osd_addr(&Layout::default(), mon_port(mon)?, index).is_none() {
        return Err(format!("no port left for osd.{index} after the monitor's {mon}").into());
    }
    let member = Member::Osd(index);
    std::fs::create_dir(dir.join(member.name()))?;
    members.push(member);
    write_roster(dir, &members)?;
    Ok(index)
}

/// Waits until `name` has booted (its data dir holds the id the monitor
/// gave it) and the map has that OSD up; returns the id and the epoch.
async fn wait_osd_up(dir: &Path, name: &str, config: &ClientConfig) -> CliResult<(u32, u64)> {
    let deadline = Instant::now() + ADD_TIMEOUT;
    let client = Client::connect(&config.mon)
        .await
        .map_err(|e| format!("cannot reach the monitor at {}: {e}", config.mon))?;
    let id_path = dir.join(name).join("osd_id");
    loop {
        let id = std::fs::read_to_string(&id_path)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        if let Some(id) = id {
            let map = client.refresh_map().await?;
            if map.osds.iter().any(|o| o.id.0 == id && o.up) {
                return Ok((id, map.epoch.0));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} is in the roster but was not up in the map within {} s (the \
                 supervisor runs it like the others; `cairn daemon stop {name}` holds it \
                 down); see {}",
                ADD_TIMEOUT.as_secs(),
                dir.join("logs").join(format!("{name}.log")).display()
            )
            .into());
        }
        tokio::time::sleep(WAIT_INTERVAL).await;
    }
}

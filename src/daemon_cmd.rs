//! `cairn daemon stop|start NAME`: hold one daemon of a `cairn up` cluster
//! down on purpose, and let it run again.
//!
//! Talks to the supervisor through files in the data dir only (layout in
//! `up_cmd`): `stop` writes `run/NAME.hold`, which the supervisor obeys by
//! not restarting NAME, then signals the daemon; `start` writes
//! `run/NAME.start` and removes the hold, and the supervisor starts NAME on
//! its next tick.

use crate::output::CliResult;
use crate::up_cmd::{
    STOP_TIMEOUT, daemon_pid_file, hold_file, is_live_cairn, pid_file, read_pid, roster_file,
    signal, start_request_file,
};
use clap::{Args, Subcommand};
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

/// `cairn daemon ...`.
#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Stop a daemon and hold it down: the supervisor does not restart it
    /// until `cairn daemon start`.
    Stop(DaemonArgs),
    /// Start a daemon that is held down (or that crashed and stayed down).
    Start(DaemonArgs),
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
            check_daemon(&args)?;
            stop(&args.data_dir, &args.name)
        }
        DaemonCommand::Start(args) => {
            check_daemon(&args)?;
            start(&args.data_dir, &args.name)
        }
    }
}

/// Fails unless a supervisor runs in the data dir and runs `args.name`.
fn check_daemon(args: &DaemonArgs) -> CliResult {
    let dir = &args.data_dir;
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

/// Holds `name` down, then SIGTERMs it (SIGKILL after [`STOP_TIMEOUT`])
/// and waits until it has exited and the supervisor has noticed.
fn stop(dir: &Path, name: &str) -> CliResult {
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
                signal(pid, Signal::TERM);
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

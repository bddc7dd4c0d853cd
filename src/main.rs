//! `cairn`: the one binary of Cairn. It parses flags and calls into the
//! library crates; logic lives there, not here.

mod bench_cmd;
mod bench_ec;
mod bench_emulate;
mod bench_fs;
mod bench_object;
mod bench_report;
mod bench_s3;
mod bench_sweep;
mod config_cmd;
mod conn;
mod daemon_cmd;
mod df_cmd;
mod fs_cmd;
mod hotplug;
mod launch;
mod mon_cmd;
mod netemu;
mod object_cmd;
mod osd_admin_cmd;
mod osd_cmd;
mod output;
mod pg_cmd;
mod placement_cmd;
mod pool_cmd;
mod reports;
mod s3_cmd;
mod sizing;
mod status_cmd;
mod units;
mod up_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Cairn: distributed object, S3 and POSIX storage.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Placement: simulate PG distribution and data movement, balance, map objects.
    #[command(subcommand)]
    Placement(placement_cmd::PlacementCommand),
    /// Benchmarks: the local object store, a running cluster's objects, a
    /// mounted file system.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// The cheapest cluster (nodes × a catalog's node shape) that a
    /// bottleneck model fitted to `cairn bench sweep` runs predicts will
    /// meet a target (`--target "read=2GB/s,capacity=100TB,redundancy=8+3"`).
    Sizing(sizing::SizingArgs),
    /// Run a monitor in the foreground (until Ctrl-C or SIGTERM).
    Mon(mon_cmd::MonArgs),
    /// Run an OSD in the foreground (`cairn osd --data DIR ...`, until
    /// Ctrl-C or SIGTERM), or administer OSDs (`tree`, `out`, `in`).
    Osd(OsdTopArgs),
    /// Start a local cluster (a monitor and N OSDs), supervised.
    Up(up_cmd::UpArgs),
    /// Stop the cluster `cairn up` started.
    Down(up_cmd::DownArgs),
    /// Hold one daemon of a `cairn up` cluster down (`stop mon|osd.N`),
    /// start it again (`start`), or add an OSD to it (`add osd`).
    #[command(subcommand)]
    Daemon(daemon_cmd::DaemonCommand),
    /// Cluster summary: epoch, OSDs, pools, PGs.
    Status(status_cmd::StatusArgs),
    /// Health and its reasons; `cairn health detail` lists the PGs and
    /// objects behind them.
    Health(status_cmd::HealthArgs),
    /// Run-time settings: set, get, rm, ls (throttles, scrub schedule).
    Config(config_cmd::ConfigArgs),
    /// Capacity and pools: PGs, redundancy, estimated usable space.
    Df(df_cmd::DfArgs),
    /// Pools: create, list, set, rm.
    Pool(pool_cmd::PoolArgs),
    /// Objects: put, get, stat, rm.
    Object(object_cmd::ObjectArgs),
    /// Placement groups: list by state, query one, scrub, repair.
    #[command(subcommand)]
    Pg(pg_cmd::PgCommand),
    /// File systems: create, ls, status, rm.
    Fs(fs_cmd::FsArgs),
    /// Run a metadata server in the foreground (until Ctrl-C or SIGTERM).
    Mds(fs_cmd::MdsArgs),
    /// Mount a file system with FUSE (in the foreground, until unmounted).
    Mount(fs_cmd::MountArgs),
    /// S3: run a gateway (`serve`), manage its users (`user create|ls|rm`).
    S3(s3_cmd::S3Args),
}

/// `cairn osd`: either daemon flags or an admin subcommand.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct OsdTopArgs {
    #[command(subcommand)]
    admin: Option<osd_admin_cmd::OsdAdminCommand>,
    #[command(flatten)]
    daemon: Option<osd_cmd::OsdArgs>,
}

/// Enters the network namespace this process belongs in, before any
/// thread starts: the one `CAIRN_NETNS` names (an emulated host's OSD, as
/// `cairn up` starts it), else, for a command that talks to a cluster, the
/// one its client config names.
fn enter_netns(command: &Command) -> Result<(), String> {
    if let Some(name) = std::env::var_os(netemu::NETNS_ENV) {
        let name = name.to_string_lossy().into_owned();
        return netemu::enter(&name);
    }
    let reads_conf = match command {
        Command::Placement(_)
        | Command::Sizing(_)
        | Command::Mon(_)
        | Command::Mds(_)
        | Command::Up(_)
        | Command::Down(_)
        | Command::Daemon(_) => false,
        Command::Osd(top) => top.admin.is_some(),
        Command::S3(args) => !args.is_serve(),
        Command::Bench(command) => matches!(command, bench_cmd::BenchCommand::Object(_)),
        _ => true,
    };
    if reads_conf {
        conn::enter_conf_netns().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Makes every panic end the process at once (after the default hook has
/// printed it), in every thread. Without this, tokio catches a panic in a
/// task or `spawn_blocking` closure and the daemon goes on serving with
/// whatever state the panicking code left half-updated (a PG's log and its
/// store out of step, a lock poisoned). A daemon whose invariant broke must
/// stop; the supervisor of `cairn up` (or systemd) restarts it, and peering
/// rebuilds its PGs from what is durable. The release profile keeps
/// `panic = "unwind"` because `cargo test` must build the libraries with
/// unwinding for its harness; the hook gives daemons abort semantics anyway.
fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        eprintln!("cairn: a daemon invariant failed (panic above); aborting");
        std::process::abort();
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = enter_netns(&cli.command) {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    if matches!(
        cli.command,
        Command::Mon(_)
            | Command::Mds(_)
            | Command::Osd(OsdTopArgs {
                daemon: Some(_),
                ..
            })
    ) {
        abort_on_panic();
    }
    let result = match cli.command {
        Command::Placement(command) => placement_cmd::run(command),
        Command::Bench(command) => bench_cmd::run(command),
        Command::Sizing(args) => sizing::run(&args),
        Command::Mon(args) => mon_cmd::run(args),
        Command::Osd(OsdTopArgs {
            admin: Some(command),
            ..
        }) => osd_admin_cmd::run_osd_admin(command),
        Command::Osd(OsdTopArgs {
            daemon: Some(args), ..
        }) => osd_cmd::run(args),
        Command::Osd(_) => Err("cairn osd: give --data DIR to run an OSD, or tree/out/in".into()),
        Command::Up(args) => up_cmd::run_up(args),
        Command::Down(args) => up_cmd::run_down(args),
        Command::Daemon(command) => daemon_cmd::run(command),
        Command::Status(args) => status_cmd::run_status(args),
        Command::Health(args) => status_cmd::run_health(args),
        Command::Config(args) => config_cmd::run(args),
        Command::Df(args) => df_cmd::run_df(args),
        Command::Pool(args) => pool_cmd::run_pool(args),
        Command::Object(args) => object_cmd::run_object(args),
        Command::Pg(command) => pg_cmd::run(command),
        Command::Fs(args) => fs_cmd::run_fs(args),
        Command::Mds(args) => fs_cmd::run_mds(args),
        Command::Mount(args) => fs_cmd::run_mount(args),
        Command::S3(args) => s3_cmd::run_s3(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

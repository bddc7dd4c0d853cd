//! `cairn`: the one binary of Cairn. It parses flags and calls into the
//! library crates; logic lives there, not here.

mod bench_cmd;
mod client_cmd;
mod mon_cmd;
mod osd_cmd;
mod output;
mod placement_cmd;
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
    /// Benchmarks: the local object store (more to come).
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// Run a monitor in the foreground (until Ctrl-C or SIGTERM).
    Mon(mon_cmd::MonArgs),
    /// Run an OSD in the foreground (until Ctrl-C or SIGTERM).
    Osd(osd_cmd::OsdArgs),
    /// Start a local cluster (a monitor and N OSDs), supervised.
    Up(up_cmd::UpArgs),
    /// Stop the cluster `cairn up` started.
    Down(up_cmd::DownArgs),
    /// Cluster summary: epoch, OSDs, pools, PGs.
    Status(client_cmd::StatusArgs),
    /// Pools: create, list.
    Pool(client_cmd::PoolArgs),
    /// Objects: put, get, stat, rm.
    Object(client_cmd::ObjectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Placement(command) => placement_cmd::run(command),
        Command::Bench(command) => bench_cmd::run(command),
        Command::Mon(args) => mon_cmd::run(args),
        Command::Osd(args) => osd_cmd::run(args),
        Command::Up(args) => up_cmd::run_up(args),
        Command::Down(args) => up_cmd::run_down(args),
        Command::Status(args) => client_cmd::run_status(args),
        Command::Pool(args) => client_cmd::run_pool(args),
        Command::Object(args) => client_cmd::run_object(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

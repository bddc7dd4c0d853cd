//! `cairn mon`: runs a monitor in the foreground until Ctrl-C or SIGTERM.

use crate::output::CliResult;
use cairn_mon::{MonConfig, ServiceConfig};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Flags of `cairn mon`.
#[derive(Debug, Args)]
pub struct MonArgs {
    /// Directory of the monitor's database (created if missing).
    #[arg(long = "data", value_name = "DIR")]
    data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6789")]
    addr: SocketAddr,
    /// Silence after which an OSD is marked down (e.g. 20s, 500ms).
    #[arg(long = "down-grace", default_value = "20s", value_parser = parse_duration)]
    down_grace: Duration,
    /// Time down after which an OSD is marked out (e.g. 600s, 10m).
    #[arg(long = "down-out", default_value = "600s", value_parser = parse_duration)]
    down_out: Duration,
}

/// Parses `500ms`, `20s`, `10m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 500ms, 20s, 10m, 1h)");
    let (digits, unit_ms) = if let Some(d) = text.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = text.strip_suffix('s') {
        (d, 1_000)
    } else if let Some(d) = text.strip_suffix('m') {
        (d, 60_000)
    } else if let Some(d) = text.strip_suffix('h') {
        (d, 3_600_000)
    } else {
        (text, 1_000)
    };
    let value: u64 = digits.trim().parse().map_err(|_| bad())?;
    value
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(bad)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub fn run(args: MonArgs) -> CliResult {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = MonConfig {
        data_dir: args.data_dir,
        addr: args.addr,
        service: ServiceConfig {
            down_grace_ms: millis(args.down_grace),
            down_out_ms: millis(args.down_out),
            ..ServiceConfig::default()
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));
        cairn_mon::run_until(config, shutdown).await
    })?;
    Ok(())
}

pub async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM");
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
    }
}

//! How the client commands reach a cluster: through the client config
//! (`--conf FILE`, else `CAIRN_CONF`, else `/var/tmp/cairn/cairn.toml`), on a
//! runtime of their own, with one connected client.

use crate::output::CliResult;
use cairn_client::{Client, ClientConfig, config_path};
use clap::Args;
use std::path::PathBuf;

/// Where the client config is.
#[derive(Debug, Args)]
pub struct ConfArgs {
    /// Client config file (default: $CAIRN_CONF, else /var/tmp/cairn/cairn.toml).
    #[arg(long = "conf", value_name = "FILE", global = true)]
    conf: Option<PathBuf>,
}

impl ConfArgs {
    /// The config file these flags name.
    pub fn path(&self) -> PathBuf {
        config_path(self.conf.as_deref())
    }

    pub fn load(&self) -> CliResult<ClientConfig> {
        Ok(ClientConfig::load(&self.path())?)
    }
}

/// Enters the network namespace the client config names (a cluster of
/// emulated hosts, `cairn up --netns`), if it names one. Called first
/// thing, while the process has one thread, so every thread and child it
/// makes afterwards is there too. The config is the one `--conf`
/// (anywhere on the command line), `CAIRN_CONF` or the default names; one
/// that is missing or unreadable is left for the command to report.
pub fn enter_conf_netns() -> CliResult {
    let mut args = std::env::args_os().skip(1);
    let mut explicit = None;
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--conf" {
            explicit = args.next().map(PathBuf::from);
        } else if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--conf=")) {
            explicit = Some(PathBuf::from(path));
        }
    }
    let Ok(config) = ClientConfig::load(&config_path(explicit.as_deref())) else {
        return Ok(());
    };
    match config.netns {
        Some(name) => Ok(crate::netemu::enter(&name)?),
        None => Ok(()),
    }
}

pub fn runtime() -> CliResult<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub async fn connect(conf: &ConfArgs) -> CliResult<Client> {
    let config = conf.load()?;
    Client::connect(&config.mon)
        .await
        .map_err(|e| format!("cannot reach the monitor at {}: {e}", config.mon).into())
}

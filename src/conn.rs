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

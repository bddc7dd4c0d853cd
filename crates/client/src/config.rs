//! The client config file (`cairn.toml`) that `cairn up` writes and every
//! client command reads: where the monitor is.

use crate::error::ClientError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where clients look when neither `--conf` nor `CAIRN_CONF` is given.
pub const CONFIG_PATH_DEFAULT: &str = "/var/tmp/cairn/cairn.toml";

/// The environment variable naming the config file.
pub const CONFIG_ENV: &str = "CAIRN_CONF";

/// What a client needs to reach a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Monitor address, `host:port`.
    pub mon: String,
    /// The network namespace the cluster is reached from (`cairn up
    /// --netns` runs emulated hosts behind one): the `cairn` commands
    /// enter it before they connect. None: the caller's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

/// The config file to use: `explicit` (a `--conf` flag), else `CAIRN_CONF`,
/// else [`CONFIG_PATH_DEFAULT`].
#[must_use]
pub fn config_path(explicit: Option<&Path>) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    match std::env::var_os(CONFIG_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(CONFIG_PATH_DEFAULT),
    }
}

impl ClientConfig {
    /// Reads the config from `path`.
    ///
    /// # Errors
    /// [`ClientError::Config`] if the file cannot be read or parsed.
    pub fn load(path: &Path) -> Result<ClientConfig, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ClientError::Config(format!(
                "cannot read {} ({e}); is a cluster running (`cairn up`)?",
                path.display()
            ))
        })?;
        toml::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{} does not parse: {e}", path.display())))
    }

    /// The file's text.
    ///
    /// # Errors
    /// [`ClientError::Config`] if it does not serialize (it always does).
    pub fn to_toml(&self) -> Result<String, ClientError> {
        let body = toml::to_string(self).map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(format!(
            "# Written by `cairn up`: how clients reach this cluster.\n{body}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_and_explicit_path_wins() {
        let config = ClientConfig {
            mon: "127.0.0.1:6789".into(),
            netns: Some("cairn6789".into()),
        };
        let text = config.to_toml().expect("toml");
        assert_eq!(
            toml::from_str::<ClientConfig>(&text).expect("parse"),
            config
        );
        assert_eq!(
            config_path(Some(Path::new("/x/c.toml"))),
            PathBuf::from("/x/c.toml")
        );
    }
}

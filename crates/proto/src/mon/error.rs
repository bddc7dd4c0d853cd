//! The monitor's one error type. It crosses the wire (a command's reply), so
//! its variants carry plain strings and ids, never foreign error types.

use cairn_types::OsdId;
use serde::{Deserialize, Serialize};

/// Why a command, a request or the daemon failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MonError {
    #[error("{0} does not exist")]
    UnknownOsd(OsdId),
    #[error("pool {0:?} already exists")]
    PoolExists(String),
    #[error("pool {0:?} does not exist")]
    NoPool(String),
    #[error("invalid pool: {0}")]
    InvalidPool(String),
    #[error("pool cannot be placed: {0}")]
    Unsatisfiable(String),
    #[error("invalid map change: {0}")]
    InvalidMap(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("monitor store: {0}")]
    Store(String),
    #[error("network: {0}")]
    Wire(String),
    #[error("i/o: {0}")]
    Io(String),
    #[error("monitor is shutting down")]
    ShuttingDown,
    #[error("file system: {0}")]
    Fs(String),
}

impl From<cairn_wire::WireError> for MonError {
    fn from(error: cairn_wire::WireError) -> Self {
        MonError::Wire(error.to_string())
    }
}

impl From<std::io::Error> for MonError {
    fn from(error: std::io::Error) -> Self {
        MonError::Io(error.to_string())
    }
}

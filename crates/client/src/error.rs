//! The client's one error type.

use cairn_proto::osd::OpError;

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("object not found")]
    NotFound,
    /// Guard number `guard` (from 0, in the order added) did not hold;
    /// nothing was changed.
    #[error("compare failed: guard {guard}: {reason}")]
    CompareFailed { guard: u32, reason: String },
    /// An exclusive create found the object; nothing was changed.
    #[error("object exists")]
    Exists,
    /// The cluster is too full for writes; removes still work.
    #[error("cluster full: {0}")]
    Full(String),
    /// The request is malformed (a bad name, too large to send); checked
    /// before anything is sent.
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("pool {0:?} does not exist")]
    NoPool(String),
    /// The OSD refused the operation for a reason retrying cannot fix.
    #[error("OSD refused the operation: {0}")]
    Op(OpError),
    #[error("monitor: {0}")]
    Mon(#[from] cairn_proto::mon::MonError),
    #[error("gave up after {attempts} attempts in {elapsed_ms} ms; last error: {last}")]
    GaveUp {
        attempts: u32,
        elapsed_ms: u64,
        last: String,
    },
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    #[error("client config: {0}")]
    Config(String),
    /// A daemon declined an administrative request, and said why.
    #[error("{0}")]
    Refused(String),
}

//! The one error type of the wire layer.

use std::sync::Arc;

/// What went wrong moving a frame.
///
/// `Clone` because one dead connection fails every call in flight on it with
/// the same cause; I/O errors are shared behind an [`Arc`] for that.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WireError {
    #[error("i/o error: {0}")]
    Io(#[source] Arc<std::io::Error>),
    #[error("connection closed")]
    Closed,
    #[error("timed out after {after_ms} ms")]
    Timeout { after_ms: u64 },
    #[error("malformed frame: {reason}")]
    Malformed { reason: String },
    #[error("frame checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("frame protocol version {0} is not supported (this build speaks {supported})", supported = crate::PROTOCOL_VERSION)]
    Version(u16),
    #[error("frame {field} of {size_bytes} bytes exceeds the {limit_bytes}-byte limit")]
    TooLarge {
        field: &'static str,
        size_bytes: u64,
        limit_bytes: u64,
    },
    #[error("message kind {found} where {expected} was expected")]
    UnexpectedKind { expected: u16, found: u16 },
    #[error("message body does not decode: {0}")]
    Body(String),
    #[error("message body does not encode: {0}")]
    Encode(String),
}

impl From<std::io::Error> for WireError {
    fn from(error: std::io::Error) -> Self {
        WireError::Io(Arc::new(error))
    }
}

impl WireError {
    /// A malformed-frame error with a reason for the log.
    pub(crate) fn malformed(reason: impl Into<String>) -> Self {
        WireError::Malformed {
            reason: reason.into(),
        }
    }

    /// Whether this error means the peer sent bytes that break the protocol
    /// (as opposed to the connection failing or a call timing out).
    #[must_use]
    pub fn is_protocol_violation(&self) -> bool {
        matches!(
            self,
            WireError::Malformed { .. }
                | WireError::Checksum { .. }
                | WireError::Version(_)
                | WireError::TooLarge { .. }
        )
    }
}

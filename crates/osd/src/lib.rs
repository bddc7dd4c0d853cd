//! The OSD's placement-group logic: a replicated PG as a state machine that
//! admits client writes, orders them with versions and a PG log, replicates
//! them to the acting set and answers clients only when every acting OSD has
//! made a write durable.
//!
//! The [`daemon`] is the async shell around the PG cores (store, network,
//! monitor); [`proto`] holds the client and peer messages. Not here yet:
//! erasure-coded pools, and peering/recovery (issue 5). The PG log is kept (bounded, in
//! memory and in the PG collection's metadata keys) so peering can compare
//! histories; until then a write whose fate an interval change left open is
//! neither answered nor re-applied (`RetryReason::AwaitingPeering`).
//!
//! The one design choice to know: **sans-IO**. [`Pg::handle`] takes one
//! [`PgEvent`] and returns [`Effects`] — transactions to submit, messages to
//! send, replies to give — with no I/O, clock or async, so the daemon and the
//! deterministic simulator drive the same code.

pub mod daemon;
pub mod limits;
pub mod log;
pub mod pg;
pub mod proto;

pub use daemon::{OsdConfig, OsdError, run, run_until};
pub use limits::PgLimits;
pub use log::{LogEntry, LogKind, LogResult, PgLog, ReqId, Version};
pub use pg::{
    Effects, Guard, GuardCheck, Ignored, Interval, IntervalError, InvalidWrite, Pg, PgEvent, PgMsg,
    Reply, RetryReason, StoreWrite, SubWrite, SubWriteAck,
};

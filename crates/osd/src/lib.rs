//! The OSD's placement-group logic: a replicated PG as a state machine that
//! admits client writes, orders them with versions and a PG log, replicates
//! them to the acting set and answers clients only when every acting OSD has
//! made a write durable.
//!
//! The [`daemon`] is the async shell around the PG cores (store, network,
//! monitor); [`proto`] holds the client and peer messages. On every
//! interval change the primary peers ([`peering`]): it gathers the copies of
//! the OSDs that may hold the PG, picks the authoritative history, brings
//! every copy to it (log-based recovery, or a backfill by scan), and asks the
//! monitor for a temporary acting set while new copies fill. Erasure-coded
//! PGs run the same core behind the [`PgBackend`] seam ([`ec`], [`undo`]).
//!
//! The one design choice to know: **sans-IO**. [`Pg::handle`] takes one
//! [`PgEvent`] and returns [`Effects`] — transactions to submit, messages to
//! send, replies to give — with no I/O, clock or async, so the daemon and the
//! deterministic simulator drive the same code.

pub mod codec;
pub mod daemon;
pub mod ec;
pub mod hello;
pub mod lease;
pub mod limits;
pub mod log;
pub mod map_view;
pub mod peering;
pub mod pg;
pub mod scrub;
pub mod shell;
pub mod split;
pub mod throttle;
pub mod undo;

pub use daemon::{OsdConfig, OsdError, run, run_until};
pub use limits::PgLimits;
pub use log::{DupEntry, LogEntry, LogKind, LogResult, PgLog, ReqId, Version};
pub use peering::{PastInterval, PeerCopy, PgInfo};
pub use pg::{
    Activate, Effect, Effects, Guard, GuardCheck, Ignored, Interval, IntervalError, InvalidWrite,
    MapContext, Notify, ObjectState, Pg, PgBackend, PgEvent, PgMsg, Plan, Push, ReadAnswer, ReadId,
    ReplicatedBackend, Reply, RetryReason, StoreTag, StoreWrite, StoredPg, SubWrite, SubWriteAck,
};

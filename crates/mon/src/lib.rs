//! The Cairn monitor: keeps the authoritative cluster map, turns operator
//! commands, OSD boots, heartbeats and failure reports into new map epochs,
//! stores every epoch durably and hands maps (or the incrementals since a
//! client's epoch) to whoever asks, or, to subscribers (a long poll), as
//! soon as a newer epoch is committed.
//!
//! It is never on the data path and does not place data itself (that is
//! `cairn-placement`'s pure function, which it only calls to refuse pools the
//! cluster cannot hold). One monitor today; the Raft quorum comes later.
//!
//! The one design choice to know: every decision is made by [`MapService`],
//! a sans-IO state machine (`handle(event) -> Effects`) that reads no clock
//! and does no I/O, so `sim` can drive it with virtual time. The async shell
//! in [`daemon`] persists each `cairn_proto::map::Incremental` durably *before* it replies
//! or publishes the new epoch.

pub mod daemon;
pub mod fsmap;
pub mod limits;
pub mod service;
pub mod store;

pub use daemon::{MonConfig, run, run_until};
pub use service::{Effects, Event, MapService, ServiceConfig};
pub use store::MonStore;

//! The Cairn client library: gets the cluster map from a monitor, computes
//! each object's PG and primary itself with `cairn-placement`, and sends
//! operations straight to the primary OSD, retrying through map changes.
//! Everything that talks to a cluster (CLI, S3, file system, bench) is built
//! on it. It does not run daemons and keeps no data of its own.
//!
//! The one design choice to know: a request keeps one [`ReqId`]
//! (`client`, `tid`) across all of its retries, so an OSD that already
//! applied a write answers the retry from its PG log instead of applying it
//! twice. Retries are bounded by an attempt count and an overall deadline
//! ([`ClientOptions`]); when to retry is decided by the sans-IO
//! [`retry::Retrier`], which the simulator's clients run too.

pub mod config;
pub mod direct;
pub mod error;
pub mod limits;
pub mod retry;

mod client;
mod ops;

pub use client::{Client, DirectReadStats, ListCursor, ListPage, ReadRange, ReqId};
pub use config::{ClientConfig, config_path};
pub use error::ClientError;
pub use limits::ClientOptions;
pub use ops::{Guard, ObjectStat, ReadOp, ReadResult, WriteOp};
pub use retry::{Decision, Retrier, Setback};

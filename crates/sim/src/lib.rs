//! The deterministic simulator (test-only): runs the monitor's map service,
//! OSDs (their PG cores over in-memory stores) and clients in one thread
//! from one seed, with virtual time and injected faults, then heals the
//! cluster and checks what Cairn promises.
//!
//! Not here: the real network, disks or async runtime; the simulator drives
//! the same sans-IO cores the daemons drive, through a small synchronous
//! shell of its own.
//!
//! The one design choice to know: **everything comes from the seed**. One
//! [`rng::Rng`] feeds every random choice, time is virtual, and iteration
//! orders are deterministic, so a failing seed replays exactly.

pub mod checks;
pub mod client;
pub mod linearizability;
pub mod mon;
pub mod net;
pub mod osd;
pub mod rng;
pub mod world;

pub use world::{Report, Scenario, Stats, run};

//! The deterministic simulator (test-only): runs the monitor's map service,
//! OSDs (their PG cores over in-memory stores) and clients in one thread
//! from one seed, with virtual time and injected faults, then heals the
//! cluster and checks what Cairn promises. A third of the seeds use an
//! erasure-coded pool (the shell's shard reads, partial writes and shard
//! rebuilds in `osd/ec.rs`, as the daemon's), the rest a replicated one.
//!
//! Not here: the real network, disks or async runtime; the simulator drives
//! the same sans-IO cores the daemons drive, through a small synchronous
//! shell of its own.
//!
//! The one design choice to know: **everything comes from the seed**. One
//! [`rng::Rng`] feeds every random choice, time is virtual, and iteration
//! orders are deterministic, so a failing seed replays exactly.
//!
//! [`world`] runs a seed (scenario, chaos, heal, checks); [`osd`], [`mon`]
//! and [`client`] are the simulated processes, [`net`] the network,
//! [`checks`] what a healed cluster must show and [`linearizability`] the
//! history checker. `docs/reliability.md` describes faults, checks, how to
//! run more seeds and replay one, and the bugs found.

pub mod checks;
pub mod client;
pub mod linearizability;
pub mod mon;
pub mod net;
pub mod osd;
pub mod rng;
pub mod store;
pub mod wire;
pub mod world;

pub use world::{Report, Scenario, Stats, run};

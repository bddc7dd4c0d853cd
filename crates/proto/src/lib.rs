//! The Cairn wire protocol: every message that crosses a process boundary,
//! its kind, and the limits both ends enforce.
//!
//! Clients, gateways and daemons meet only here: a crate that speaks to a
//! monitor or an OSD depends on this crate and on `cairn-wire`, never on
//! the daemon. Kind ranges: `0x0100..=0x01ff` the monitor ([`mon`]),
//! `0x0200..=0x02ff` the OSD, client operations in [`osd`] and OSD ↔ OSD
//! messages in [`peer`], `0x0300..=0x03ff` the metadata server ([`mds`]). A kind, and the postcard layout of its body (field
//! and variant order), is frozen once a release speaks it;
//! `tests/golden.rs` holds the bytes of every message.
//!
//! [`map`] holds the map incrementals and [`map::MonState::apply`], which
//! the monitor, OSDs and clients all run to follow the map.
//!
//! This crate does no I/O of its own except [`mon::MonClient`], the typed
//! stub of the monitor protocol over a `cairn_wire::Connection`.

pub mod limits;
pub mod map;
pub mod mds;
pub mod mon;
pub mod osd;
pub mod peer;

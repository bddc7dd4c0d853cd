//! Cairn's POSIX file system: the metadata server ([`mds`], `cairn mds`)
//! and the FUSE client ([`mount`], `cairn mount`).
//!
//! The MDS owns the namespace: inodes in an inode table and directories
//! as omap objects of the file system's metadata pool, changed through a
//! journal kept in the same pool ([`format`]). File data never passes
//! through it: clients stripe it into objects of the data pool by the
//! file's layout ([`layout`]) and read and write them on the OSDs
//! directly, through `cairn-client`. This crate sees the cluster only
//! through `cairn-client` and the protocol (`cairn-proto`).
//!
//! The one design choice to know: the MDS answers a change as soon as it
//! is applied in its cache, and journals it with group commit; the client
//! keeps every change not yet durable and replays it to the next MDS after
//! a crash, so what a client saw succeed survives an MDS failure, and
//! `fsync` waits for the journal.

pub mod check;
pub mod format;
pub mod layout;
pub mod mds;
pub mod mount;

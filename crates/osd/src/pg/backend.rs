//! The backend seam: the data handling that differs between a replicated
//! PG and an erasure-coded one, behind [`PgBackend`]. The rest of the core
//! (versions, the log, peering, who lacks what, when to reply) is the same
//! for both and stays in [`Pg`](super::Pg).
//!
//! [`ReplicatedBackend`] is the one implementation today: every copy holds
//! the whole object, so a write's ops go to every copy as they are, a read
//! is served from the primary's own copy, a push carries the whole object
//! and scrub expects every copy to be equal.

use super::messages::Push;
use super::missing_key;
use super::write::check_ops;
use crate::log::LogEntry;
use crate::scrub::{Inconsistency, ScrubMap};
use bytes::Bytes;
use cairn_store::{CollectionId, ObjectKey, Op, StoreError, Transaction};
use cairn_types::OsdId;
use std::collections::{BTreeMap, BTreeSet};

/// How a PG's data becomes store transactions on each copy, how a read is
/// served, what recovery applies and what scrub compares.
///
/// Only what the core decides today goes through here; the shells' own
/// part of reads, pushes and scrub maps (reading the store) is not yet
/// behind the seam. What an erasure-coded backend will have to provide:
///
/// - **Writes** ([`local_write_ops`](PgBackend::local_write_ops),
///   [`sub_write_ops`](PgBackend::sub_write_ops)): split the object into
///   `k` data chunks, compute `m` parity chunks, and give each acting
///   position only its shard's ops; a partial overwrite becomes a
///   read-modify-write of the stripes it touches (or a parity-delta
///   update), which needs the old data: a step the core does not have yet.
///   The position of an OSD in the acting set, not only its id, will have
///   to reach these methods.
/// - **Validation** ([`check_sub_write_ops`](PgBackend::check_sub_write_ops)):
///   a shard's ops are chunk writes, not the client's ops.
/// - **Reads** ([`read_waits_for_recovery`](PgBackend::read_waits_for_recovery)):
///   a read needs any `k` shards, so the primary lacking its own shard need
///   not wait; the answer will grow into a read plan (which shards and
///   ranges to fetch), which the shells will then carry out.
/// - **Recovery** ([`push_txn`](PgBackend::push_txn)): a push carries one
///   shard, rebuilt from `k` others; recovery then pulls from several
///   sources, where the core picks one today.
/// - **Scrub** ([`compare_scrub_maps`](PgBackend::compare_scrub_maps)):
///   shards differ by design; compare each shard with its own checksum
///   and, in a deep scrub, the parity with the data.
pub trait PgBackend: std::fmt::Debug + Send + Sync {
    /// The store ops this copy applies for a client write whose ops are
    /// `ops` (checked to change only their object, the object's new
    /// version set; empty for a refused write), besides the log entry.
    fn local_write_ops(&self, ops: &[Op]) -> Vec<Op>;

    /// The ops the sub-write of that write to copy `to` carries.
    fn sub_write_ops(&self, to: OsdId, ops: &[Op]) -> Vec<Op>;

    /// Checks, on a copy, that a sub-write's `ops` are what the primary
    /// sends for a successful `entry` (refusals and log-only entries are
    /// checked before); the `Err` says what is wrong.
    ///
    /// # Errors
    /// The ops do not match the entry.
    fn check_sub_write_ops(&self, entry: &LogEntry, ops: &[Op]) -> Result<(), String>;

    /// Whether a read of `object` on this primary must wait for recovery,
    /// given the objects this copy lacks.
    fn read_waits_for_recovery(&self, local_missing: &BTreeSet<Bytes>, object: &[u8]) -> bool;

    /// The transaction that applies a pushed object to this copy.
    ///
    /// # Errors
    /// The pushed state does not make a valid transaction.
    fn push_txn(&self, collection: CollectionId, push: &Push) -> Result<Transaction, StoreError>;

    /// Compares the copies' scrub maps of one chunk (`primary`'s among
    /// them) and returns what is inconsistent.
    fn compare_scrub_maps(
        &self,
        maps: &BTreeMap<OsdId, ScrubMap>,
        primary: OsdId,
    ) -> Vec<Inconsistency>;
}

/// Replication: every copy holds the whole object.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicatedBackend;

impl PgBackend for ReplicatedBackend {
    /// The client's ops, as they are.
    fn local_write_ops(&self, ops: &[Op]) -> Vec<Op> {
        ops.to_vec()
    }

    /// The same ops as the primary's: every copy is whole.
    fn sub_write_ops(&self, _to: OsdId, ops: &[Op]) -> Vec<Op> {
        ops.to_vec()
    }

    /// The ops change only the entry's object, and end as the entry says
    /// (a write, or a removal).
    fn check_sub_write_ops(&self, entry: &LogEntry, ops: &[Op]) -> Result<(), String> {
        match check_ops(&entry.object, ops) {
            Ok(kind) if kind == entry.kind => Ok(()),
            Ok(kind) => Err(format!("kind {:?}, ops say {kind:?}", entry.kind)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The primary reads its own copy, so it waits while it lacks the
    /// object.
    fn read_waits_for_recovery(&self, local_missing: &BTreeSet<Bytes>, object: &[u8]) -> bool {
        local_missing.contains(object)
    }

    fn push_txn(&self, collection: CollectionId, push: &Push) -> Result<Transaction, StoreError> {
        push_txn(collection, push)
    }

    /// Every copy should be equal ([`crate::scrub::compare`]).
    fn compare_scrub_maps(
        &self,
        maps: &BTreeMap<OsdId, ScrubMap>,
        primary: OsdId,
    ) -> Vec<Inconsistency> {
        crate::scrub::compare(maps, primary)
    }
}

/// The transaction that makes an object exactly what a push carries,
/// whatever this copy holds of it (touch then remove is valid either way,
/// so a duplicate or reordered push never fails in the store).
///
/// # Errors
/// The pushed state does not make a valid transaction.
pub fn push_txn(collection: CollectionId, push: &Push) -> Result<Transaction, StoreError> {
    let key = ObjectKey::new(push.object.clone());
    let mut txn = Transaction::new(collection);
    txn.push(Op::Touch {
        object: key.clone(),
    });
    txn.push(Op::Remove {
        object: key.clone(),
    });
    if let Some(state) = &push.state {
        txn.push(Op::Touch {
            object: key.clone(),
        });
        if !state.data.is_empty() {
            txn.push(Op::WriteFull {
                object: key.clone(),
                data: state.data.clone().into(),
            });
        }
        if !state.xattrs.is_empty() {
            txn.push(Op::SetXattrs {
                object: key.clone(),
                xattrs: state.xattrs.clone(),
            });
        }
        if !state.omap.is_empty() {
            txn.push(Op::OmapSet {
                object: key.clone(),
                entries: state.omap.clone(),
            });
        }
        txn.push(Op::SetVersion {
            object: key,
            version: state.version,
        });
    }
    txn.push(Op::MetaRemove {
        key: missing_key(&push.object),
    });
    txn.validate()?;
    Ok(txn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogKind, LogResult, ReqId, Version};

    fn entry(kind: LogKind) -> LogEntry {
        LogEntry {
            version: Version::new(1, 1),
            object: Bytes::from_static(b"a"),
            kind,
            req: ReqId { client: 1, tid: 1 },
            result: LogResult::Ok { object_version: 1 },
        }
    }

    #[test]
    fn replication_sends_every_copy_the_clients_ops_and_checks_them() {
        let key = ObjectKey::new(Bytes::from_static(b"a"));
        let ops = vec![Op::Touch {
            object: key.clone(),
        }];
        let backend = ReplicatedBackend;
        assert_eq!(backend.local_write_ops(&ops), ops);
        assert_eq!(backend.sub_write_ops(OsdId(2), &ops), ops);
        assert_eq!(
            backend.check_sub_write_ops(&entry(LogKind::Write), &ops),
            Ok(())
        );
        assert!(
            backend
                .check_sub_write_ops(&entry(LogKind::Remove), &ops)
                .is_err(),
            "ops that do not end as the entry says are refused"
        );
        let other = vec![Op::Touch {
            object: ObjectKey::new(Bytes::from_static(b"b")),
        }];
        assert!(
            backend
                .check_sub_write_ops(&entry(LogKind::Write), &other)
                .is_err()
        );
    }

    #[test]
    fn a_replicated_primary_reads_only_what_it_holds() {
        let missing = BTreeSet::from([Bytes::from_static(b"a")]);
        assert!(ReplicatedBackend.read_waits_for_recovery(&missing, b"a"));
        assert!(!ReplicatedBackend.read_waits_for_recovery(&missing, b"b"));
    }
}

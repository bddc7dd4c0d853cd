//! The backend seam: the data handling that differs between a replicated
//! PG and an erasure-coded one, behind [`PgBackend`]. The rest of the core
//! (versions, the log, peering, who lacks what, when to reply) is the same
//! for both and stays in [`Pg`](super::Pg).
//!
//! [`ReplicatedBackend`]: every copy holds the whole object, so a write's
//! ops go to every copy as they are, a read is served from the primary's
//! own copy, a push carries the whole object and scrub expects every copy
//! to be equal. `crate::ec::EcBackend`: each position holds one shard, so
//! a write becomes one list of ops per position ([`ShardWrites`]), and a
//! push is taken only at its own shard's position.

use super::effects::InvalidWrite;
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
/// Only what the core decides goes through here; the shells' own part of
/// reads, pushes and scrub maps (reading the store, gathering shards) is
/// beside it (`crate::ec` for erasure coding). What the erasure-coded
/// backend still lacks (`docs/erasure-coding-plan.md`): partial writes
/// with their undo data, reads and pushes rebuilt from any `k` shards,
/// and a shard-aware scrub.
pub trait PgBackend: std::fmt::Debug + Send + Sync {
    /// What each copy applies for a client write whose ops are `ops`
    /// (checked to change only their object, the object's new version set;
    /// empty for a refused write), besides the log entry.
    ///
    /// # Errors
    /// Ops this backend does not serve.
    fn plan_write(&self, ops: Vec<Op>) -> Result<ShardWrites, InvalidWrite>;

    /// Erasure coding: the data shards any read or rebuild needs (`None`:
    /// replication, where one whole copy serves). Recovery then never
    /// pulls: the primary's shell rebuilds each lacking shard, its own
    /// included, from `k` others and pushes it.
    fn erasure_k(&self) -> Option<usize> {
        None
    }

    /// Checks, on a copy holding shard `shard` (`None`: replicated), that
    /// a sub-write's `ops` are what the primary sends for a successful
    /// `entry` (refusals and log-only entries are checked before); the
    /// `Err` says what is wrong.
    ///
    /// # Errors
    /// The ops do not match the entry.
    fn check_sub_write_ops(
        &self,
        entry: &LogEntry,
        shard: Option<u32>,
        ops: &[Op],
    ) -> Result<(), String>;

    /// Whether a read of `object` on this primary must wait for recovery,
    /// given the objects this copy lacks.
    fn read_waits_for_recovery(&self, local_missing: &BTreeSet<Bytes>, object: &[u8]) -> bool;

    /// The transaction that applies a pushed object to this copy, which
    /// holds shard `shard` (`None`: replicated).
    ///
    /// # Errors
    /// The pushed state does not make a valid transaction here.
    fn push_txn(
        &self,
        collection: CollectionId,
        shard: Option<u32>,
        push: &Push,
    ) -> Result<Transaction, StoreError>;

    /// Compares the copies' scrub maps of one chunk (`primary`'s among
    /// them) and returns what is inconsistent.
    fn compare_scrub_maps(
        &self,
        maps: &BTreeMap<OsdId, ScrubMap>,
        primary: OsdId,
    ) -> Vec<Inconsistency>;
}

/// The store ops of one write on each copy: the same for every copy
/// (replication), or one list per shard position (erasure coding).
#[derive(Clone, Debug, PartialEq)]
pub enum ShardWrites {
    Same(Vec<Op>),
    PerShard(Vec<Vec<Op>>),
}

impl ShardWrites {
    /// The ops of the copy holding shard `shard` (`None`: replicated; a
    /// position the write has no ops for gets none).
    #[must_use]
    pub fn for_shard(&self, shard: Option<u32>) -> Vec<Op> {
        match (self, shard) {
            (ShardWrites::Same(ops), _) => ops.clone(),
            (ShardWrites::PerShard(per), Some(shard)) => {
                per.get(shard as usize).cloned().unwrap_or_default()
            }
            (ShardWrites::PerShard(_), None) => Vec::new(),
        }
    }
}

/// Replication: every copy holds the whole object.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicatedBackend;

impl PgBackend for ReplicatedBackend {
    /// The client's ops, as they are, for every copy.
    fn plan_write(&self, ops: Vec<Op>) -> Result<ShardWrites, InvalidWrite> {
        Ok(ShardWrites::Same(ops))
    }

    /// The ops change only the entry's object, and end as the entry says
    /// (a write, or a removal).
    fn check_sub_write_ops(
        &self,
        entry: &LogEntry,
        _shard: Option<u32>,
        ops: &[Op],
    ) -> Result<(), String> {
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

    fn push_txn(
        &self,
        collection: CollectionId,
        _shard: Option<u32>,
        push: &Push,
    ) -> Result<Transaction, StoreError> {
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
        let writes = backend.plan_write(ops.clone()).expect("served");
        assert_eq!(writes.for_shard(None), ops);
        assert_eq!(writes.for_shard(Some(2)), ops);
        assert_eq!(
            backend.check_sub_write_ops(&entry(LogKind::Write), None, &ops),
            Ok(())
        );
        assert!(
            backend
                .check_sub_write_ops(&entry(LogKind::Remove), None, &ops)
                .is_err(),
            "ops that do not end as the entry says are refused"
        );
        let other = vec![Op::Touch {
            object: ObjectKey::new(Bytes::from_static(b"b")),
        }];
        assert!(
            backend
                .check_sub_write_ops(&entry(LogKind::Write), None, &other)
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

//! What happens to a PG: the events the shell feeds [`super::Pg::handle`],
//! the interval and map context they carry, and the guards a client write
//! is checked against.

use super::effects::StoreTag;
use super::messages::{PgMsg, SubWrite, SubWriteAck};
use crate::log::{ReqId, Version, err_code};
use crate::peering::PastInterval;
use crate::scrub::Inconsistency;
use bytes::Bytes;
use cairn_store::{ObjectKey, Op};
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};

/// A run of maps during which a PG's acting set and primary stay the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The first map epoch of the interval.
    pub epoch_started: Epoch,
    /// Where placement puts the PG (the up OSDs of its choice).
    pub up: Vec<OsdId>,
    /// The OSDs serving the PG, primary included; no duplicates. Differs
    /// from `up` while a temporary acting set (`pg_temp`) keeps complete
    /// copies serving during a backfill.
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// Fewest acting OSDs with which writes are accepted.
    pub min_size: u32,
    /// Copies the pool wants.
    pub size: u32,
    /// Erasure-coded pools: the code's shape and who holds which shard
    /// (`None`: replicated).
    pub ec: Option<EcShape>,
}

/// An erasure-coded PG's shape: `k` data and `m` parity shards of
/// `stripe_unit`, and the OSD at each position (shard `i` lives on the
/// OSD at position `i`; `None` is a hole, a position with no OSD). The
/// interval's flat `up` and `acting` are these without the holes, in
/// position order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcShape {
    pub k: u32,
    pub m: u32,
    pub stripe_unit: u64,
    pub acting: Vec<Option<OsdId>>,
    pub up: Vec<Option<OsdId>>,
}

/// An interval that cannot be a PG's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    #[error("min_size is 0 (a write must reach at least one OSD)")]
    MinSizeZero,
    #[error("{0} appears twice in the acting set")]
    DuplicateOsd(OsdId),
    #[error("primary {0} is not in the acting set")]
    PrimaryNotActing(OsdId),
    #[error("erasure-coded positions do not match the acting and up sets")]
    Positions,
    #[error("erasure-coded shape: {0}")]
    Shape(String),
}

impl Interval {
    /// Checks the interval's own consistency.
    ///
    /// # Errors
    /// The first [`IntervalError`] found.
    pub fn validate(&self) -> Result<(), IntervalError> {
        if self.min_size == 0 {
            return Err(IntervalError::MinSizeZero);
        }
        let mut seen = BTreeSet::new();
        if let Some(dup) = self.acting.iter().find(|osd| !seen.insert(**osd)) {
            return Err(IntervalError::DuplicateOsd(*dup));
        }
        if let Some(primary) = self.primary
            && !seen.contains(&primary)
        {
            return Err(IntervalError::PrimaryNotActing(primary));
        }
        if let Some(ec) = &self.ec {
            let flat = |v: &[Option<OsdId>]| v.iter().flatten().copied().collect::<Vec<_>>();
            let shards = (ec.k + ec.m) as usize;
            if ec.acting.len() != shards
                || ec.up.len() != shards
                || flat(&ec.acting) != self.acting
                || flat(&ec.up) != self.up
            {
                return Err(IntervalError::Positions);
            }
        }
        Ok(())
    }

    /// The shard `osd` holds or is to hold: its acting position, else its
    /// up position (a backfill target); `None` for a replicated PG or an
    /// OSD at no position.
    #[must_use]
    pub fn shard_of(&self, osd: OsdId) -> Option<u32> {
        let ec = self.ec.as_ref()?;
        let at = |v: &[Option<OsdId>]| v.iter().position(|o| *o == Some(osd));
        at(&ec.acting)
            .or_else(|| at(&ec.up))
            .and_then(|i| u32::try_from(i).ok())
    }

    /// The acting OSD holding shard `shard` (`None`: a hole, or not
    /// erasure-coded).
    #[must_use]
    pub fn osd_at(&self, shard: u32) -> Option<OsdId> {
        self.ec
            .as_ref()?
            .acting
            .get(shard as usize)
            .copied()
            .flatten()
    }
}

/// A condition on an object's state before a write: the write applies only
/// if it holds; otherwise it is refused (and logged as refused, so a retry
/// gets the same answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The object's version is this one (0: the object does not exist).
    Version(u64),
    /// The xattr `name` has this value (`None`: it is absent).
    Xattr { name: Bytes, value: Option<Bytes> },
    /// The object exists. Implied by ops that need it (removes of the
    /// object, an xattr or omap keys), so removing what is missing is
    /// answered "not found" from the log rather than failing in the store
    /// after logging.
    Exists,
    /// The object does not exist (implied by an exclusive create).
    NotExists,
    /// Omap `key` has this value (`None`: it is absent).
    OmapKey { key: Bytes, value: Option<Bytes> },
}

/// A write's guards with the state of its object as the shell read it from
/// the store, under the same lock as the event, so no write slips between.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardCheck {
    /// The request's own guards, in its order: all must hold.
    pub guards: Vec<Guard>,
    /// What the request's ops need of the object, checked after them.
    pub implied: Option<Guard>,
    /// The object's version, 0 if it does not exist.
    pub version: u64,
    /// The values of the xattrs the guards name, those that are set.
    pub xattrs: BTreeMap<Bytes, Bytes>,
    /// The values of the omap keys the guards name, those that are set.
    pub omap: BTreeMap<Bytes, Bytes>,
}

impl GuardCheck {
    /// Whether nothing needs checking.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.implied.is_none()
    }

    /// The refusal code of the first guard that does not hold: the
    /// request's own carry their index, an implied one none.
    #[must_use]
    pub fn failure(&self) -> Option<u32> {
        let explicit = self.guards.iter().enumerate().find_map(|(index, guard)| {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            self.fails(guard)
                .map(|code| err_code::of_guard(code, Some(index)))
        });
        explicit.or_else(|| self.implied.as_ref().and_then(|guard| self.fails(guard)))
    }

    fn fails(&self, guard: &Guard) -> Option<u32> {
        match guard {
            Guard::Version(expected) => {
                (*expected != self.version).then_some(err_code::VERSION_MISMATCH)
            }
            Guard::Xattr { name, value } => {
                (value.as_ref() != self.xattrs.get(name)).then_some(err_code::XATTR_MISMATCH)
            }
            Guard::Exists => (self.version == 0).then_some(err_code::NOT_FOUND),
            Guard::NotExists => (self.version != 0).then_some(err_code::EXISTS),
            Guard::OmapKey { key, value } => {
                (value.as_ref() != self.omap.get(key)).then_some(err_code::OMAP_MISMATCH)
            }
        }
    }
}

/// A write the shell planned per shard (see `PgEvent::ClientWrite`).
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedWrite {
    /// The object's version the write was planned on (0: absent).
    pub base: u64,
    /// Each shard's ops, its stash ops first (see [`crate::undo`]).
    pub writes: super::ShardWrites,
    /// Each shard's roll-back record, stored with its ops (empty: none).
    pub undo: Vec<crate::undo::UndoRecord>,
    /// Planned on bytes read from the other shards at `base`: admitted
    /// only while no earlier write to the object is unsettled (else only
    /// while the log's last write to it left it at `base`).
    pub read_shards: bool,
}

/// A client read, numbered by the shell (unique among its reads in
/// progress), so the core's answers find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadId(pub u64);

/// What happens to a PG.
#[derive(Clone, Debug, PartialEq)]
pub enum PgEvent {
    /// A client's write of one object (sent to the primary).
    ClientWrite {
        req: ReqId,
        client_epoch: Epoch,
        object: Bytes,
        ops: Vec<Op>,
        guard: Option<GuardCheck>,
        /// Erasure coding, a partial write: each shard's ops, planned by
        /// the shell from the object's bytes at version `base` (without
        /// the new version, which the core sets). Admitted only if the
        /// object is still at `base` with no write to it in flight
        /// (else `ObjectBusy`, and the client retries).
        prepared: Option<PreparedWrite>,
    },
    /// A client's read of `object` (empty: a listing) on the primary,
    /// after the shell checked that this OSD may serve it
    /// (`shell::servable`). The core answers with
    /// [`Effect::Read`](super::Effect::Read) (read the store now) or
    /// [`Effect::ReadAnswer`](super::Effect::ReadAnswer) (answer without
    /// reading), perhaps only after later events: a read waits while a
    /// write to its object is in flight.
    ClientRead {
        read: ReadId,
        object: Bytes,
    },
    /// The store read an [`Effect::Read`](super::Effect::Read) asked for
    /// ran; `corrupt`: it found the object's data corrupt (why). The core
    /// answers with [`Effect::ReadAnswer`](super::Effect::ReadAnswer).
    ReadDone {
        read: ReadId,
        corrupt: Option<String>,
    },
    /// A new map changed this PG's up set, acting set or primary.
    IntervalChange(Interval),
    /// What the map says around the PG: up OSDs and past intervals. Sent
    /// before each interval change and whenever OSDs go up or down.
    MapContext(MapContext),
    SubWrite(SubWrite),
    SubWriteAck(SubWriteAck),
    /// The store made this version's transaction durable.
    LocalCommitted {
        version: Version,
    },
    /// The store made a non-log transaction durable.
    Committed(StoreTag),
    /// A peering, recovery or backfill message from a peer.
    Peer(PgMsg),
    /// A page of this copy's objects for the backfill scan (`more`: the
    /// collection holds further objects).
    BackfillPage {
        keys: Vec<ObjectKey>,
        more: bool,
    },
    /// About a second passed: resend what may have been lost.
    Tick,
    /// Scrub the PG now (primary, clean PGs only): `deep` reads all data,
    /// `repair` fixes what differs from healthy copies. `now_secs` (since
    /// the Unix epoch) stamps it.
    Scrub {
        deep: bool,
        repair: bool,
        now_secs: u64,
    },
    /// A page of this copy's objects for the scrub (as `BackfillPage`).
    ScrubPage {
        keys: Vec<ObjectKey>,
        more: bool,
    },
    /// What re-encoding the objects of a deep scrub's chunk found
    /// (answering [`Effect::VerifyParity`](super::Effect::VerifyParity)).
    ParityChecked {
        chunk: u64,
        found: Vec<Inconsistency>,
    },
    /// This copy's store could not read `object` (a checksum mismatch):
    /// the primary recovers it from another copy.
    ReadError {
        object: Bytes,
        error: String,
    },
}

impl From<PgMsg> for PgEvent {
    fn from(msg: PgMsg) -> PgEvent {
        match msg {
            PgMsg::SubWrite(write) => PgEvent::SubWrite(write),
            PgMsg::SubWriteAck(ack) => PgEvent::SubWriteAck(ack),
            other => PgEvent::Peer(other),
        }
    }
}

/// The map around a PG, from the shell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapContext {
    /// OSDs up in the current map.
    pub up_osds: BTreeSet<OsdId>,
    /// The PG's intervals before the current one, as far back as known.
    pub past: Vec<PastInterval>,
    /// The first epoch of the map history behind `past` (1: complete).
    pub history_from: Epoch,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_validation_catches_inconsistent_maps() {
        let mut interval = Interval {
            epoch_started: Epoch(1),
            up: vec![OsdId(1), OsdId(2)],
            acting: vec![OsdId(1), OsdId(2)],
            primary: Some(OsdId(1)),
            min_size: 1,
            size: 2,
            ec: None,
        };
        assert_eq!(interval.validate(), Ok(()));
        interval.primary = Some(OsdId(3));
        assert_eq!(
            interval.validate(),
            Err(IntervalError::PrimaryNotActing(OsdId(3)))
        );
        interval.acting.push(OsdId(2));
        assert_eq!(
            interval.validate(),
            Err(IntervalError::DuplicateOsd(OsdId(2)))
        );
    }
}

//! Scrub: the primary compares its copies of a PG chunk by chunk and
//! repairs what differs from healthy copies. The decisions are pure
//! functions here; [`crate::pg`] drives them.
//!
//! A **light** scrub compares, per object, what every copy's metadata says:
//! existence, size, object version, and digests of the xattrs and the omap.
//! A **deep** scrub also reads every byte (the store verifies its block
//! checksums on the way) and compares a digest of the data. A copy whose
//! store cannot read the object reports the error instead of a digest.
//!
//! The primary scrubs one chunk of hash-ordered object keys at a time:
//! client writes to the chunk wait (`ObjectBusy`) from the moment it is
//! chosen until every copy's map of it has arrived, and the maps are asked
//! for only once no write to the chunk is in flight, so every copy's map
//! describes the same writes.

use crate::pg::PgMsg;
use bytes::Bytes;
use cairn_proto::limits::{NOTIFY_INCONSISTENT_MAX, SCRUB_ERROR_BYTES_MAX};
use cairn_proto::peer::InconsistencyRecord;
use cairn_store::{ObjectKey, Op};
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};

/// Meta key of a PG copy's scrub stamps.
pub const STAMPS_KEY: &[u8] = b"scrubinfo";

/// What one copy holds of one object, as a scrub compares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrubEntry {
    pub name: Bytes,
    pub size: u64,
    pub version: u64,
    pub xattrs_digest: u32,
    pub omap_digest: u32,
    /// crc32c of the data (deep scrub only).
    pub data_digest: Option<u32>,
    /// The store could not read the object (a checksum mismatch, say).
    pub error: Option<String>,
    /// An erasure-coded shard whose bytes matched the crc32c its write
    /// recorded (deep scrub only): a parity check trusts it.
    pub sealed: bool,
}

/// One copy's report on one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrubMap {
    pub from: OsdId,
    pub interval_epoch: Epoch,
    pub chunk: u64,
    pub entries: Vec<ScrubEntry>,
    /// The copy holds more objects in the range than it reported.
    pub truncated: bool,
}

/// What the shell must read for a scrub: the objects with keys in
/// `(after, through]` (`None`: unbounded), reported to `to` as a
/// [`ScrubMap`] of `chunk`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrubOrder {
    pub to: OsdId,
    pub interval_epoch: Epoch,
    pub chunk: u64,
    pub after: Option<ObjectKey>,
    pub through: Option<ObjectKey>,
    pub deep: bool,
}

/// When a PG copy was last scrubbed, in seconds since the Unix epoch (0:
/// never). Persisted under [`STAMPS_KEY`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubStamps {
    pub light_secs: u64,
    pub deep_secs: u64,
}

const STAMPS_FORMAT: u8 = 1;

impl ScrubStamps {
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(17);
        out.push(STAMPS_FORMAT);
        out.extend_from_slice(&self.light_secs.to_be_bytes());
        out.extend_from_slice(&self.deep_secs.to_be_bytes());
        Bytes::from(out)
    }

    /// # Errors
    /// A description of what is wrong with the bytes.
    pub fn decode(bytes: &[u8]) -> Result<ScrubStamps, String> {
        match bytes {
            [STAMPS_FORMAT, rest @ ..] if rest.len() == 16 => {
                let mut light = [0u8; 8];
                let mut deep = [0u8; 8];
                light.copy_from_slice(&rest[..8]);
                deep.copy_from_slice(&rest[8..]);
                Ok(ScrubStamps {
                    light_secs: u64::from_be_bytes(light),
                    deep_secs: u64::from_be_bytes(deep),
                })
            }
            [format, ..] => Err(format!("scrub stamps format {format} (this build reads 1)")),
            [] => Err("empty scrub stamps".into()),
        }
    }
}

/// An object whose copies disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistency {
    pub object: Bytes,
    /// Copies that differ from the authoritative one (or cannot be read).
    pub bad: BTreeSet<OsdId>,
    /// The copy to repair from (`None`: no healthy copy).
    pub auth: Option<OsdId>,
    pub reason: String,
}

/// Metadata key prefix of the inconsistencies a primary keeps, one key per
/// object (`scrubbad/NAME`): they stay reported across restarts and
/// interval changes until a repair or a later scrub clears them.
pub const INCONSISTENT_KEY_PREFIX: &[u8] = b"scrubbad/";

/// Format byte of a stored [`Inconsistency`].
const INCONSISTENT_FORMAT: u8 = 1;

impl Inconsistency {
    /// Its metadata key.
    #[must_use]
    pub fn key(&self) -> Bytes {
        let mut key = INCONSISTENT_KEY_PREFIX.to_vec();
        key.extend_from_slice(&self.object);
        Bytes::from(key)
    }

    #[must_use]
    pub fn record(&self) -> InconsistencyRecord {
        InconsistencyRecord {
            bad: self.bad.iter().copied().collect(),
            auth: self.auth,
            reason: self.reason.chars().take(SCRUB_ERROR_BYTES_MAX).collect(),
        }
    }

    #[must_use]
    pub fn from_record(object: Bytes, record: InconsistencyRecord) -> Inconsistency {
        Inconsistency {
            object,
            bad: record.bad.into_iter().collect(),
            auth: record.auth,
            reason: record.reason,
        }
    }

    /// The stored value.
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = vec![INCONSISTENT_FORMAT];
        // A record of a few ids and a bounded string always encodes.
        out.extend(postcard::to_allocvec(&self.record()).unwrap_or_default());
        Bytes::from(out)
    }

    /// Decodes the stored value of key `scrubbad/NAME` (`name` is NAME).
    ///
    /// # Errors
    /// A description of what is wrong with the bytes.
    pub fn decode(name: &[u8], bytes: &[u8]) -> Result<Inconsistency, String> {
        match bytes {
            [INCONSISTENT_FORMAT, rest @ ..] => {
                let record: InconsistencyRecord =
                    postcard::from_bytes(rest).map_err(|e| format!("inconsistency record: {e}"))?;
                Ok(Inconsistency::from_record(
                    Bytes::copy_from_slice(name),
                    record,
                ))
            }
            [format, ..] => Err(format!(
                "inconsistency format {format} (this build reads 1)"
            )),
            [] => Err("empty inconsistency record".into()),
        }
    }
}

/// What a copy holds of an object, compared across copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Absent,
    Present {
        version: u64,
        size: u64,
        xattrs: u32,
        omap: u32,
        data: Option<u32>,
    },
}

impl Shape {
    fn of(entry: Option<&ScrubEntry>) -> Shape {
        entry.map_or(Shape::Absent, |e| Shape::Present {
            version: e.version,
            size: e.size,
            xattrs: e.xattrs_digest,
            omap: e.omap_digest,
            data: e.data_digest,
        })
    }

    fn version(self) -> u64 {
        match self {
            Shape::Absent => 0,
            Shape::Present { version, .. } => version,
        }
    }
}

/// Compares the copies' maps of one chunk. The authoritative copy of an
/// object is a readable one: the primary's, unless more readable copies
/// agree on something else; among other shapes, the one most copies share,
/// then the newest version.
#[must_use]
pub fn compare(maps: &BTreeMap<OsdId, ScrubMap>, primary: OsdId) -> Vec<Inconsistency> {
    let mut names: BTreeSet<&Bytes> = BTreeSet::new();
    let by_osd: BTreeMap<OsdId, BTreeMap<&Bytes, &ScrubEntry>> = maps
        .iter()
        .map(|(osd, map)| {
            let entries: BTreeMap<&Bytes, &ScrubEntry> =
                map.entries.iter().map(|e| (&e.name, e)).collect();
            names.extend(entries.keys().copied());
            (*osd, entries)
        })
        .collect();
    let mut found = Vec::new();
    for name in names {
        let mut errors: BTreeMap<OsdId, &str> = BTreeMap::new();
        let mut shapes: BTreeMap<OsdId, Shape> = BTreeMap::new();
        for (osd, entries) in &by_osd {
            let entry = entries.get(name).copied();
            match entry.and_then(|e| e.error.as_deref()) {
                Some(error) => {
                    errors.insert(*osd, error);
                }
                None => {
                    shapes.insert(*osd, Shape::of(entry));
                }
            }
        }
        let Some(auth_shape) = authoritative(&shapes, primary) else {
            if !errors.is_empty() {
                found.push(Inconsistency {
                    object: name.clone(),
                    bad: errors.keys().copied().collect(),
                    auth: None,
                    reason: describe(&errors, &[]),
                });
            }
            continue;
        };
        let differing: Vec<(OsdId, String)> = shapes
            .iter()
            .filter(|(_, s)| **s != auth_shape)
            .map(|(osd, s)| (*osd, difference(*s, auth_shape)))
            .collect();
        if errors.is_empty() && differing.is_empty() {
            continue;
        }
        let auth = if shapes.get(&primary) == Some(&auth_shape) {
            primary
        } else {
            shapes
                .iter()
                .find(|(_, s)| **s == auth_shape)
                .map(|(osd, _)| *osd)
                .unwrap_or(primary)
        };
        found.push(Inconsistency {
            object: name.clone(),
            bad: errors
                .keys()
                .copied()
                .chain(differing.iter().map(|(osd, _)| *osd))
                .collect(),
            auth: Some(auth),
            reason: describe(&errors, &differing),
        });
    }
    found
}

fn authoritative(shapes: &BTreeMap<OsdId, Shape>, primary: OsdId) -> Option<Shape> {
    let mut counts: BTreeMap<Shape, usize> = BTreeMap::new();
    for shape in shapes.values() {
        *counts.entry(*shape).or_insert(0) += 1;
    }
    let best = counts.values().copied().max()?;
    if let Some(own) = shapes.get(&primary)
        && counts.get(own).copied() == Some(best)
    {
        return Some(*own);
    }
    counts
        .iter()
        .filter(|(_, n)| **n == best)
        .max_by_key(|(shape, _)| shape.version())
        .map(|(shape, _)| *shape)
}

fn difference(got: Shape, want: Shape) -> String {
    match (got, want) {
        (Shape::Absent, _) => "missing".into(),
        (_, Shape::Absent) => "should not exist".into(),
        (
            Shape::Present {
                version: v1,
                size: s1,
                xattrs: x1,
                omap: o1,
                data: d1,
            },
            Shape::Present {
                version: v2,
                size: s2,
                xattrs: x2,
                omap: o2,
                data: d2,
            },
        ) => {
            let mut parts = Vec::new();
            if v1 != v2 {
                parts.push(format!("version {v1} != {v2}"));
            }
            if s1 != s2 {
                parts.push(format!("size {s1} != {s2}"));
            }
            if x1 != x2 {
                parts.push("xattrs differ".to_owned());
            }
            if o1 != o2 {
                parts.push("omap differs".to_owned());
            }
            if d1 != d2 {
                parts.push("data digest differs".to_owned());
            }
            parts.join(", ")
        }
    }
}

fn describe(errors: &BTreeMap<OsdId, &str>, differing: &[(OsdId, String)]) -> String {
    errors
        .iter()
        .map(|(osd, error)| format!("osd.{}: read error: {error}", osd.0))
        .chain(
            differing
                .iter()
                .map(|(osd, why)| format!("osd.{}: {why}", osd.0)),
        )
        .collect::<Vec<_>>()
        .join("; ")
}

/// A digest of an ordered key/value map (xattrs, omap): crc32c over each
/// length-prefixed key and value in order.
#[must_use]
pub fn map_digest<'a>(entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> u32 {
    map_digest_append(0, entries)
}

/// [`map_digest`] continued over more entries (a map read in pages).
#[must_use]
pub fn map_digest_append<'a>(
    mut crc: u32,
    entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> u32 {
    for (key, value) in entries {
        for part in [key, value] {
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            crc = cairn_types::crc::crc32c_append(crc, &len.to_le_bytes());
            crc = cairn_types::crc::crc32c_append(crc, part);
        }
    }
    crc
}

/// A scrub under way on the primary.
#[derive(Debug)]
pub(crate) struct ScrubRun {
    pub deep: bool,
    pub repair: bool,
    /// When it started (seconds since the Unix epoch), for the stamps.
    pub started_secs: u64,
    /// Keys up to this one are scrubbed.
    pub cursor: Option<ObjectKey>,
    pub chunk: u64,
    pub stage: Stage,
    pub objects: u64,
    pub errors: u64,
}

#[derive(Debug)]
pub(crate) enum Stage {
    /// Waiting for the primary's own listing of the next chunk.
    Listing,
    /// The chunk is `(cursor, through]`; waits for writes to it to finish.
    Draining { through: Option<ObjectKey> },
    /// Maps asked for; waits for every copy's.
    Collecting {
        through: Option<ObjectKey>,
        waiting: BTreeSet<OsdId>,
        maps: BTreeMap<OsdId, ScrubMap>,
        ticks: u32,
    },
    /// An erasure-coded PG's deep scrub: the maps agreed on these
    /// objects, whose shards the shell re-encodes
    /// ([`Effect::VerifyParity`](crate::pg::Effect::VerifyParity));
    /// `found` is what the maps showed.
    Verifying {
        through: Option<ObjectKey>,
        found: Vec<Inconsistency>,
        ticks: u32,
    },
}

/// An object of an erasure-coded PG whose parity a deep scrub checks:
/// every shard is at `version`, and those at positions `sealed` matched
/// the crc32c their write recorded. The others changed by partial writes
/// since (or were never sealed), so only re-encoding tells whether they
/// still agree with the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityCheck {
    pub object: Bytes,
    pub version: u64,
    pub sealed: BTreeSet<u32>,
}

/// The objects of a deep scrub's chunk of an erasure-coded PG to check
/// by re-encoding: held with data at one version on every position
/// (`positions`: each acting OSD's), read without error, not already
/// found inconsistent, and not sealed on every shard.
#[must_use]
pub fn parity_checks(
    maps: &BTreeMap<OsdId, ScrubMap>,
    positions: &BTreeMap<OsdId, u32>,
    found: &[Inconsistency],
) -> Vec<ParityCheck> {
    if positions.is_empty() || positions.keys().any(|osd| !maps.contains_key(osd)) {
        return Vec::new();
    }
    let mut seen: BTreeMap<&Bytes, Vec<(u32, &ScrubEntry)>> = BTreeMap::new();
    for (osd, shard) in positions {
        for entry in maps.get(osd).map(|m| &m.entries[..]).unwrap_or_default() {
            seen.entry(&entry.name).or_default().push((*shard, entry));
        }
    }
    seen.into_iter()
        .filter(|(name, _)| !found.iter().any(|f| f.object == **name))
        .filter_map(|(name, entries)| {
            let (_, first) = entries.first()?;
            let agreed = entries.len() == positions.len()
                && entries.iter().all(|(_, e)| {
                    e.version == first.version && e.error.is_none() && e.data_digest.is_some()
                });
            let has_data = entries.iter().any(|(_, e)| e.size > 0);
            let unsealed = entries.iter().any(|(_, e)| !e.sealed);
            (agreed && has_data && unsealed).then(|| ParityCheck {
                object: name.clone(),
                version: first.version,
                sealed: entries
                    .iter()
                    .filter(|(_, e)| e.sealed)
                    .map(|(s, _)| *s)
                    .collect(),
            })
        })
        .collect()
}

impl ScrubRun {
    /// The chunk's upper bound once chosen: `Some(None)` is unbounded.
    fn through(&self) -> Option<Option<&ObjectKey>> {
        match &self.stage {
            Stage::Listing => None,
            Stage::Draining { through }
            | Stage::Collecting { through, .. }
            | Stage::Verifying { through, .. } => Some(through.as_ref()),
        }
    }

    /// Whether writes to `key` must wait: it is in the chunk being scrubbed.
    pub fn blocks(&self, key: &ObjectKey) -> bool {
        let Some(through) = self.through() else {
            return false;
        };
        self.cursor.as_ref().is_none_or(|c| key > c) && through.is_none_or(|t| key <= t)
    }

    /// The request that asks `osd`'s copy for its map of the chunk.
    pub fn order(&self, to: OsdId, interval_epoch: Epoch) -> Option<ScrubOrder> {
        let through = self.through()?;
        Some(ScrubOrder {
            to,
            interval_epoch,
            chunk: self.chunk,
            after: self.cursor.clone(),
            through: through.cloned(),
            deep: self.deep,
        })
    }
}

/// The scrub facts of a PG (primary's view).
#[derive(Debug, Default)]
pub(crate) struct Scrubber {
    pub stamps: ScrubStamps,
    pub run: Option<ScrubRun>,
    /// Objects whose copies disagreed, by name.
    pub inconsistent: BTreeMap<Bytes, Inconsistency>,
    /// Inconsistent objects beyond those kept.
    pub inconsistent_more: u64,
    /// Inconsistent objects handed to recovery.
    pub repairing: BTreeSet<Bytes>,
    pub next_chunk: u64,
}

impl Scrubber {
    /// Records an inconsistency (bounded); the write that keeps it, if it
    /// is kept.
    pub fn record(&mut self, found: Inconsistency) -> Option<Op> {
        if self.inconsistent.len() < NOTIFY_INCONSISTENT_MAX
            || self.inconsistent.contains_key(&found.object)
        {
            let op = Op::MetaSet {
                key: found.key(),
                value: found.encode(),
            };
            self.inconsistent.insert(found.object.clone(), found);
            Some(op)
        } else {
            self.inconsistent_more += 1;
            None
        }
    }

    /// Forgets `object`'s inconsistency (repaired, or found consistent);
    /// the write that removes it, if it was kept.
    pub fn forget(&mut self, object: &Bytes) -> Option<Op> {
        self.inconsistent
            .remove(object)
            .map(|gone| Op::MetaRemove { key: gone.key() })
    }

    /// An object's copies agree again (repaired); the write that removes
    /// its record.
    pub fn repaired(&mut self, object: &Bytes) -> Option<Op> {
        if self.repairing.remove(object) {
            return self.forget(object);
        }
        None
    }

    /// Forgets every inconsistency (this copy handed them to a new
    /// primary); the writes that remove their records.
    pub fn forget_all(&mut self) -> Vec<Op> {
        self.inconsistent_more = 0;
        self.repairing.clear();
        std::mem::take(&mut self.inconsistent)
            .into_values()
            .map(|gone| Op::MetaRemove { key: gone.key() })
            .collect()
    }

    pub fn inconsistent_count(&self) -> u64 {
        self.inconsistent.len() as u64 + self.inconsistent_more
    }
}

/// The request message for an order to another copy.
#[must_use]
pub fn request(from: OsdId, order: &ScrubOrder) -> PgMsg {
    PgMsg::ScrubRequest {
        from,
        interval_epoch: order.interval_epoch,
        chunk: order.chunk,
        after: order.after.clone(),
        through: order.through.clone(),
        deep: order.deep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &'static str, version: u64, data: Option<u32>) -> ScrubEntry {
        ScrubEntry {
            name: Bytes::from_static(name.as_bytes()),
            size: 10,
            version,
            xattrs_digest: 1,
            omap_digest: 2,
            data_digest: data,
            error: None,
            sealed: false,
        }
    }

    fn maps(copies: Vec<(u32, Vec<ScrubEntry>)>) -> BTreeMap<OsdId, ScrubMap> {
        copies
            .into_iter()
            .map(|(osd, entries)| {
                (
                    OsdId(osd),
                    ScrubMap {
                        from: OsdId(osd),
                        interval_epoch: Epoch(1),
                        chunk: 0,
                        entries,
                        truncated: false,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn agreeing_copies_are_consistent() {
        let m = maps(vec![
            (0, vec![entry("a", 3, Some(7)), entry("b", 1, Some(8))]),
            (1, vec![entry("a", 3, Some(7)), entry("b", 1, Some(8))]),
            (2, vec![entry("a", 3, Some(7)), entry("b", 1, Some(8))]),
        ]);
        assert!(compare(&m, OsdId(0)).is_empty());
    }

    #[test]
    fn a_read_error_is_repaired_from_the_primary() {
        let mut bad = entry("a", 3, None);
        bad.error = Some("corrupt data: block 0".into());
        let m = maps(vec![
            (0, vec![entry("a", 3, Some(7))]),
            (1, vec![bad]),
            (2, vec![entry("a", 3, Some(7))]),
        ]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].bad, BTreeSet::from([OsdId(1)]));
        assert_eq!(found[0].auth, Some(OsdId(0)));
        assert!(
            found[0].reason.contains("read error"),
            "{}",
            found[0].reason
        );
    }

    #[test]
    fn an_unreadable_primary_is_repaired_from_a_replica() {
        let mut bad = entry("a", 3, None);
        bad.error = Some("corrupt".into());
        let m = maps(vec![
            (0, vec![bad]),
            (1, vec![entry("a", 3, Some(7))]),
            (2, vec![entry("a", 3, Some(7))]),
        ]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found[0].bad, BTreeSet::from([OsdId(0)]));
        assert_eq!(found[0].auth, Some(OsdId(1)));
    }

    #[test]
    fn the_majority_outvotes_a_divergent_primary() {
        let m = maps(vec![
            (0, vec![entry("a", 3, Some(9))]),
            (1, vec![entry("a", 3, Some(7))]),
            (2, vec![entry("a", 3, Some(7))]),
        ]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found[0].bad, BTreeSet::from([OsdId(0)]));
        assert_eq!(found[0].auth, Some(OsdId(1)));
        assert!(
            found[0].reason.contains("data digest"),
            "{}",
            found[0].reason
        );
    }

    #[test]
    fn missing_and_extra_objects_follow_the_primary_on_a_tie() {
        // Two copies, one with an object the other lacks: the primary wins.
        let m = maps(vec![(0, vec![entry("a", 3, None)]), (1, vec![])]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found[0].bad, BTreeSet::from([OsdId(1)]));
        assert!(found[0].reason.contains("missing"));
        let m = maps(vec![(0, vec![]), (1, vec![entry("x", 3, None)])]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found[0].bad, BTreeSet::from([OsdId(1)]));
        assert!(found[0].reason.contains("should not exist"));
    }

    #[test]
    fn no_readable_copy_has_no_auth() {
        let mut bad = entry("a", 3, None);
        bad.error = Some("corrupt".into());
        let m = maps(vec![(0, vec![bad.clone()]), (1, vec![bad])]);
        let found = compare(&m, OsdId(0));
        assert_eq!(found[0].auth, None);
        assert_eq!(found[0].bad.len(), 2);
    }

    #[test]
    fn stamps_round_trip_and_junk_is_refused() {
        let stamps = ScrubStamps {
            light_secs: 5,
            deep_secs: 9,
        };
        assert_eq!(ScrubStamps::decode(&stamps.encode()), Ok(stamps));
        assert!(ScrubStamps::decode(&[]).is_err());
        assert!(ScrubStamps::decode(&[2; 17]).is_err());
        assert!(ScrubStamps::decode(&[1; 5]).is_err());
    }

    #[test]
    fn map_digest_sees_order_and_boundaries() {
        let a = map_digest([(&b"ab"[..], &b"c"[..])]);
        let b = map_digest([(&b"a"[..], &b"bc"[..])]);
        assert_ne!(a, b);
    }

    #[test]
    fn a_chunk_blocks_only_its_keys() {
        let mut run = ScrubRun {
            deep: false,
            repair: false,
            started_secs: 0,
            cursor: Some(ObjectKey {
                hash: 10,
                name: Bytes::from_static(b"c"),
            }),
            chunk: 0,
            stage: Stage::Listing,
            objects: 0,
            errors: 0,
        };
        let key = |hash| ObjectKey {
            hash,
            name: Bytes::from_static(b"k"),
        };
        assert!(!run.blocks(&key(15)), "nothing is blocked while listing");
        run.stage = Stage::Draining {
            through: Some(key(20)),
        };
        assert!(!run.blocks(&key(5)));
        assert!(run.blocks(&key(15)));
        assert!(run.blocks(&key(20)));
        assert!(!run.blocks(&key(21)));
        run.stage = Stage::Draining { through: None };
        assert!(run.blocks(&key(u32::MAX)));
    }
}

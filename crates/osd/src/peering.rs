//! Peering's pure decisions, apart from the PG state machine that uses
//! them: which copy's history is authoritative, what each copy lacks, which
//! OSDs should act, and whether the PG can be sure it holds every
//! acknowledged write (DESIGN.md "Failure and healing").

use crate::log::{LogEntry, LogKind, Version};
use bytes::Bytes;
use cairn_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};

/// What an OSD knows of its copy of a PG, as peering exchanges it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgInfo {
    /// The OSD holds the PG's collection.
    pub exists: bool,
    pub last_update: Version,
    /// The first epoch of the interval in which this copy last activated
    /// (0: never). Writes are acknowledged only in activated intervals.
    pub last_epoch_started: Epoch,
    /// A backfill into this copy began and has not finished: its objects
    /// are not to be trusted.
    pub backfilling: bool,
    /// Erasure coding: the shard this copy's objects are (its position in
    /// the acting set when it last activated); `None`: replication, or a
    /// copy from before shards were recorded.
    pub shard: Option<u32>,
}

/// Format byte of the stored [`PgInfo`]: 1 without a shard, 2 with one.
const INFO_FORMAT: u8 = 1;
const INFO_FORMAT_SHARD: u8 = 2;

impl PgInfo {
    /// The stored form (`exists` is implied by being stored).
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(26);
        out.push(if self.shard.is_some() {
            INFO_FORMAT_SHARD
        } else {
            INFO_FORMAT
        });
        out.extend_from_slice(&self.last_epoch_started.0.to_be_bytes());
        out.push(u8::from(self.backfilling));
        if let Some(shard) = self.shard {
            out.extend_from_slice(&shard.to_be_bytes());
        }
        Bytes::from(out)
    }

    /// Whether this copy may serve position `position` of an
    /// erasure-coded PG: it holds that shard, or its shard is not known.
    #[must_use]
    pub fn holds_shard(&self, position: u32) -> bool {
        self.shard.is_none_or(|s| s == position)
    }

    /// Reads the stored form into `self` (`last_update` comes from the log).
    ///
    /// # Errors
    /// A description of what is wrong with the bytes.
    pub fn decode_into(&mut self, bytes: &[u8]) -> Result<(), String> {
        match bytes {
            [format @ (INFO_FORMAT | INFO_FORMAT_SHARD), rest @ ..]
                if rest.len() == if *format == INFO_FORMAT { 9 } else { 13 } =>
            {
                let mut epoch = [0u8; 8];
                epoch.copy_from_slice(&rest[..8]);
                self.last_epoch_started = Epoch(u64::from_be_bytes(epoch));
                self.backfilling = match rest[8] {
                    0 => false,
                    1 => true,
                    other => return Err(format!("backfilling flag {other}")),
                };
                self.shard = match rest.get(9..13) {
                    Some(shard) => {
                        let mut be = [0u8; 4];
                        be.copy_from_slice(shard);
                        Some(u32::from_be_bytes(be))
                    }
                    None => None,
                };
                Ok(())
            }
            [format, ..] => Err(format!(
                "PG info format {format} (this build reads 1 and 2)"
            )),
            [] => Err("empty PG info".into()),
        }
    }

    /// Whether this copy may be the authoritative history: it exists and is
    /// not a half-finished backfill.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.exists && !self.backfilling
    }
}

/// A copy of the PG as a peer reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerCopy {
    pub info: PgInfo,
    pub log: Vec<LogEntry>,
    /// Objects this copy knows it lacks (recovery it has not finished).
    pub missing: BTreeSet<Bytes>,
}

/// A run of epochs with one acting set, before the current interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastInterval {
    pub first: Epoch,
    pub last: Epoch,
    pub acting: Vec<OsdId>,
    /// Enough OSDs acted to accept writes (`acting >= min_size`).
    pub maybe_rw: bool,
}

/// The sequence number before a log's oldest entry: a copy whose
/// `last_update` is older than this cannot be brought up to date from the
/// log (0 when the log reaches back to the PG's first write).
#[must_use]
pub fn log_tail_seq(log: &[LogEntry]) -> u64 {
    log.first().map_or(0, |e| e.version.seq.saturating_sub(1))
}

/// Why peering cannot be sure it has every acknowledged write, if it
/// cannot: a past interval that may have accepted writes, since the newest
/// activation any responder knows of, with none of its OSDs answering with
/// a complete copy.
///
/// An interval one of whose OSDs answers with a `last_epoch_started` older
/// than the interval's start accepted no write: a write is acknowledged
/// only once every OSD of the acting set made it durable, and an OSD
/// applies an interval's writes only after it activated in it, with its
/// `last_epoch_started` stored first (in the same ordered store). This is
/// what Ceph learns from `up_thru`; here the OSDs' own answers tell it, so
/// an interval whose primary never activated (it was cut off, or crashed
/// first) does not block peering while any of its OSDs answers. An OSD
/// with no copy answers with epoch 0: its copy, if it had one, was removed
/// only after a later interval went clean, which then covers this one.
///
/// An erasure-coded PG needs `need` (its `k`) of such an interval's OSDs
/// to answer with complete copies, not one (Ceph's `PriorSet` and its
/// recoverability check alike): a write that interval began may sit on
/// some of its shards only, and whether it reached `k` of them (to keep)
/// or fewer (to roll back, which the copies that lack it show by their
/// shorter logs) is known only from `k` of them. With fewer answering,
/// the answering copies could all hold a write too few shards hold, and
/// peering would keep it undecodable.
#[must_use]
pub fn blocked_by(
    past: &[PastInterval],
    history_from: Epoch,
    copies: &BTreeMap<OsdId, PeerCopy>,
    need: usize,
) -> Option<String> {
    let newest_start = copies
        .values()
        .filter(|c| c.info.complete())
        .map(|c| c.info.last_epoch_started)
        .max()
        .unwrap_or(Epoch(0));
    let any_data = copies
        .values()
        .any(|c| c.info.exists && c.info.last_update > Version::ZERO);
    if history_from > Epoch(1) && newest_start < history_from && any_data {
        return Some(format!(
            "map history before epoch {} is gone and no copy activated since",
            history_from.0
        ));
    }
    past.iter()
        .filter(|p| p.maybe_rw && p.last >= newest_start)
        .filter(|p| {
            !p.acting.iter().any(|osd| {
                copies
                    .get(osd)
                    .is_some_and(|c| c.info.last_epoch_started < p.first)
            })
        })
        .find(|p| {
            p.acting
                .iter()
                .filter(|osd| copies.get(osd).is_some_and(|c| c.info.complete()))
                .count()
                < need.max(1)
        })
        .map(|p| {
            let osds: Vec<String> = p.acting.iter().map(|o| o.to_string()).collect();
            let answered = if need > 1 {
                format!("fewer than {need} of those OSDs answered with complete copies")
            } else {
                "none of those OSDs answered with a complete copy".to_owned()
            };
            format!(
                "epochs {}-{} on [{}] may have accepted writes and {answered}",
                p.first.0,
                p.last.0,
                osds.join(",")
            )
        })
}

/// The authoritative copy: among complete copies, the one that activated
/// last, then the longest history; ties go to the lowest OSD id.
#[must_use]
pub fn choose_auth(copies: &BTreeMap<OsdId, PeerCopy>) -> Option<OsdId> {
    copies
        .iter()
        .filter(|(_, c)| c.info.complete())
        .max_by(|(a_id, a), (b_id, b)| {
            (a.info.last_epoch_started, a.info.last_update)
                .cmp(&(b.info.last_epoch_started, b.info.last_update))
                .then(b_id.cmp(a_id))
        })
        .map(|(id, _)| *id)
}

/// Erasure coding's authoritative copy: among complete copies that
/// activated in the newest interval any did, the one with the shortest
/// history (ties to the lowest OSD id). A write is acknowledged only once
/// every OSD of its acting set holds it, so this history holds every
/// acknowledged write; the entries some copies have beyond it were never
/// acknowledged, may sit on fewer than `k` shards (which cannot rebuild
/// the others), and are rolled back where they landed. Ceph chooses alike
/// for pools that roll back (`find_best_info`).
#[must_use]
pub fn choose_auth_rolling_back(copies: &BTreeMap<OsdId, PeerCopy>) -> Option<OsdId> {
    let newest = copies
        .values()
        .filter(|c| c.info.complete())
        .map(|c| c.info.last_epoch_started)
        .max()?;
    copies
        .iter()
        .filter(|(_, c)| c.info.complete() && c.info.last_epoch_started == newest)
        .min_by(|(a_id, a), (b_id, b)| {
            a.info
                .last_update
                .cmp(&b.info.last_update)
                .then(a_id.cmp(b_id))
        })
        .map(|(id, _)| *id)
}

/// Whether `copy` can be brought up to date from `auth_log` (otherwise it
/// needs a backfill).
#[must_use]
pub fn log_recoverable(copy: &PeerCopy, auth_log: &[LogEntry]) -> bool {
    !copy.info.backfilling && copy.info.last_update.seq >= log_tail_seq(auth_log)
}

/// The objects `copy` lacks or holds wrongly next to the authoritative log:
/// those the log changed after the copy's own history, those the copy
/// changed on a branch the log does not have (divergent), and those it
/// already knew it lacked.
#[must_use]
pub fn missing_objects(copy: &PeerCopy, auth_log: &[LogEntry]) -> BTreeSet<Bytes> {
    missing_objects_with(copy, auth_log, false)
}

/// As [`missing_objects`]; with `rolls_back` (an erasure-coded copy, which
/// undoes its divergent entries itself, `crate::undo`), the objects of
/// divergent entries are not missing for being divergent.
#[must_use]
pub fn missing_objects_with(
    copy: &PeerCopy,
    auth_log: &[LogEntry],
    rolls_back: bool,
) -> BTreeSet<Bytes> {
    let copy_versions: BTreeSet<Version> = copy.log.iter().map(|e| e.version).collect();
    let auth_versions: BTreeSet<Version> = auth_log.iter().map(|e| e.version).collect();
    let copy_tail = log_tail_seq(&copy.log);
    let auth_tail = log_tail_seq(auth_log);
    let mut missing = copy.missing.clone();
    // What the copy applied is every entry up to its last_update; entries
    // of the authoritative log after that, or not in its log, are missing.
    for entry in auth_log {
        let applied = copy_versions.contains(&entry.version)
            || (entry.version.seq <= copy_tail && entry.version <= copy.info.last_update);
        if !applied && entry.kind != LogKind::Refused {
            missing.insert(entry.object.clone());
        }
    }
    for entry in copy.log.iter().filter(|_| !rolls_back) {
        let divergent = !auth_versions.contains(&entry.version) && entry.version.seq > auth_tail;
        if divergent && entry.kind != LogKind::Refused {
            missing.insert(entry.object.clone());
        }
    }
    missing
}

/// The OSDs that should act: the up set's members that can be brought up
/// to date from the log, in up order, then other such responders (copies
/// from earlier intervals, so old copies keep serving until the new ones
/// are complete), up to `size`.
#[must_use]
pub fn want_acting(
    up: &[OsdId],
    acting: &[OsdId],
    size: usize,
    eligible: &BTreeSet<OsdId>,
) -> Vec<OsdId> {
    let mut want: Vec<OsdId> = up
        .iter()
        .filter(|o| eligible.contains(o))
        .copied()
        .collect();
    let others = acting
        .iter()
        .chain(eligible.iter())
        .filter(|o| !up.contains(o) && eligible.contains(o));
    for osd in others {
        if want.len() >= size {
            break;
        }
        if !want.contains(osd) {
            want.push(*osd);
        }
    }
    want.truncate(size.max(1));
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogResult, ReqId};

    fn entry(epoch: u64, seq: u64, object: &'static str) -> LogEntry {
        LogEntry {
            version: Version::new(epoch, seq),
            object: Bytes::from_static(object.as_bytes()),
            kind: LogKind::Write,
            req: ReqId {
                client: 1,
                tid: seq,
            },
            result: LogResult::Ok {
                object_version: seq,
            },
        }
    }

    fn copy(log: Vec<LogEntry>, les: u64) -> PeerCopy {
        PeerCopy {
            info: PgInfo {
                exists: true,
                last_update: log.last().map_or(Version::ZERO, |e| e.version),
                last_epoch_started: Epoch(les),
                backfilling: false,
                shard: None,
            },
            log,
            missing: BTreeSet::new(),
        }
    }

    fn names(set: &BTreeSet<Bytes>) -> Vec<&[u8]> {
        set.iter().map(|b| &b[..]).collect()
    }

    #[test]
    fn info_round_trips_and_rejects_junk() {
        let mut info = PgInfo {
            exists: true,
            last_update: Version::ZERO,
            last_epoch_started: Epoch(9),
            backfilling: true,
            shard: None,
        };
        let mut back = PgInfo {
            exists: true,
            ..PgInfo::default()
        };
        back.decode_into(&info.encode()).expect("decodes");
        assert_eq!(back, info);
        assert_eq!(info.encode()[0], 1, "without a shard: format 1, as before");
        info.shard = Some(3);
        back.decode_into(&info.encode())
            .expect("decodes with a shard");
        assert_eq!(back, info);
        assert!(back.holds_shard(3) && !back.holds_shard(2));
        assert!(back.decode_into(&[]).is_err());
        assert!(back.decode_into(&[2; 10]).is_err());
        assert!(back.decode_into(&[3; 14]).is_err());
        assert!(back.decode_into(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 7]).is_err());
    }

    #[test]
    fn behind_copy_misses_what_the_log_changed_after_it() {
        let auth = vec![entry(2, 1, "a"), entry(2, 2, "b"), entry(2, 3, "c")];
        let behind = copy(auth[..1].to_vec(), 2);
        assert_eq!(names(&missing_objects(&behind, &auth)), [&b"b"[..], b"c"]);
        let same = copy(auth.clone(), 2);
        assert!(missing_objects(&same, &auth).is_empty());
        let empty = PeerCopy::default();
        assert_eq!(missing_objects(&empty, &auth).len(), 3);
        assert!(log_recoverable(&empty, &auth));
    }

    #[test]
    fn divergent_entries_are_missing_too() {
        // The old primary applied 2'3 to "x"; the new interval wrote 5'3
        // to "y" instead.
        let auth = vec![entry(2, 1, "a"), entry(2, 2, "b"), entry(5, 3, "y")];
        let old = copy(
            vec![entry(2, 1, "a"), entry(2, 2, "b"), entry(2, 3, "x")],
            2,
        );
        assert_eq!(names(&missing_objects(&old, &auth)), [&b"x"[..], b"y"]);
        let copies: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), old), (OsdId(2), copy(auth.clone(), 5))].into();
        assert_eq!(choose_auth(&copies), Some(OsdId(2)));
    }

    #[test]
    fn erasure_coding_takes_the_shortest_history_of_the_newest_interval() {
        // The primary of interval 5 sent 5'4 to two of three shards and
        // died: the shard without it has the history that holds every
        // acknowledged write, and the others roll 5'4 back.
        let base = vec![entry(5, 1, "a"), entry(5, 2, "b"), entry(5, 3, "c")];
        let mut longer = base.clone();
        longer.push(entry(5, 4, "d"));
        let old = copy(vec![entry(2, 1, "a")], 2);
        let copies: BTreeMap<OsdId, PeerCopy> = [
            (OsdId(1), copy(longer.clone(), 5)),
            (OsdId(2), copy(longer.clone(), 5)),
            (OsdId(3), copy(base.clone(), 5)),
            (OsdId(4), old),
        ]
        .into();
        assert_eq!(choose_auth(&copies), Some(OsdId(1)));
        assert_eq!(choose_auth_rolling_back(&copies), Some(OsdId(3)));
        // The divergent entry is rolled back, not missing; what the copy
        // lacks of the authoritative log still is.
        let ahead = copy(longer, 5);
        assert_eq!(names(&missing_objects(&ahead, &base)), [&b"d"[..]]);
        assert!(missing_objects_with(&ahead, &base, true).is_empty());
        let behind = copy(base[..2].to_vec(), 5);
        assert_eq!(
            names(&missing_objects_with(&behind, &base, true)),
            [&b"c"[..]]
        );
        // An incomplete copy does not count.
        let mut partial = copy(base[..1].to_vec(), 5);
        partial.info.backfilling = true;
        let with_partial: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), copy(base, 5)), (OsdId(5), partial)].into();
        assert_eq!(choose_auth_rolling_back(&with_partial), Some(OsdId(1)));
    }

    #[test]
    fn trimmed_log_forces_backfill() {
        let auth = vec![entry(2, 10, "a"), entry(2, 11, "b")];
        assert_eq!(log_tail_seq(&auth), 9);
        let far = copy(vec![entry(2, 4, "a")], 2);
        assert!(!log_recoverable(&far, &auth));
        assert!(!log_recoverable(&PeerCopy::default(), &auth));
        let near = copy(vec![entry(2, 9, "a")], 2);
        assert!(log_recoverable(&near, &auth));
    }

    #[test]
    fn past_interval_with_no_complete_answer_blocks() {
        let past = vec![PastInterval {
            first: Epoch(3),
            last: Epoch(6),
            acting: vec![OsdId(2), OsdId(3)],
            maybe_rw: true,
        }];
        let only_one: BTreeMap<OsdId, PeerCopy> = [(OsdId(1), copy(vec![], 2))].into();
        assert!(blocked_by(&past, Epoch(1), &only_one, 1).is_some());
        let with_three: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), copy(vec![], 2)), (OsdId(3), copy(vec![], 3))].into();
        assert_eq!(blocked_by(&past, Epoch(1), &with_three, 1), None);
        // Erasure-coded with k = 2: one of the interval's two shards is
        // not enough to tell a write on one shard from one on both.
        assert!(blocked_by(&past, Epoch(1), &with_three, 2).is_some());
        let both: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(2), copy(vec![], 3)), (OsdId(3), copy(vec![], 3))].into();
        assert_eq!(blocked_by(&past, Epoch(1), &both, 2), None);
        // An activation after the interval ended covers it.
        let newer: BTreeMap<OsdId, PeerCopy> = [(OsdId(1), copy(vec![], 7))].into();
        assert_eq!(blocked_by(&past, Epoch(1), &newer, 1), None);
        let read_only = vec![PastInterval {
            maybe_rw: false,
            ..past[0].clone()
        }];
        assert_eq!(blocked_by(&read_only, Epoch(1), &only_one, 1), None);
    }

    #[test]
    fn an_interval_one_of_its_osds_never_activated_in_accepted_no_write() {
        let past = vec![PastInterval {
            first: Epoch(5),
            last: Epoch(6),
            acting: vec![OsdId(2), OsdId(3)],
            maybe_rw: true,
        }];
        let mut behind = copy(vec![entry(2, 1, "a")], 2);
        behind.info.backfilling = true;
        // osd.2 answers with an incomplete copy that last activated at
        // epoch 2, before the interval: osd.2 never applied a write of it,
        // so none was acknowledged.
        let answers: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), copy(vec![], 2)), (OsdId(2), behind.clone())].into();
        assert_eq!(blocked_by(&past, Epoch(1), &answers, 1), None);
        // No copy at all (epoch 0) proves the same.
        let absent: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), copy(vec![], 2)), (OsdId(3), PeerCopy::default())].into();
        assert_eq!(blocked_by(&past, Epoch(1), &absent, 1), None);
        // An incomplete copy that activated in the interval may hold
        // acknowledged writes only the silent primary has: blocked.
        behind.info.last_epoch_started = Epoch(5);
        let activated: BTreeMap<OsdId, PeerCopy> =
            [(OsdId(1), copy(vec![], 2)), (OsdId(2), behind)].into();
        assert!(blocked_by(&past, Epoch(1), &activated, 1).is_some());
    }

    #[test]
    fn want_acting_keeps_old_copies_until_new_ones_are_complete() {
        let osd = |ids: &[u32]| ids.iter().map(|i| OsdId(*i)).collect::<Vec<_>>();
        let eligible: BTreeSet<OsdId> = osd(&[1, 2, 3]).into_iter().collect();
        // osd.4 replaced osd.3 in the up set but has nothing yet.
        let want = want_acting(&osd(&[1, 2, 4]), &osd(&[1, 2, 4]), 3, &eligible);
        assert_eq!(want, osd(&[1, 2, 3]));
        // A new primary without data hands the primary role to a copy.
        let want = want_acting(&osd(&[4, 1, 2]), &osd(&[4, 1, 2]), 3, &eligible);
        assert_eq!(want, osd(&[1, 2, 3]));
        let all: BTreeSet<OsdId> = osd(&[1, 2, 3, 4]).into_iter().collect();
        assert_eq!(
            want_acting(&osd(&[4, 1, 2]), &osd(&[1, 2, 3]), 3, &all),
            osd(&[4, 1, 2])
        );
    }
}

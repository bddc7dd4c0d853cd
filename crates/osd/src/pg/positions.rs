//! Erasure coding: which OSD serves which position of a PG's acting set.
//!
//! Every copy of an erasure-coded PG holds the shard of the position it
//! last activated at ([`crate::PgInfo::shard`]). Placement may move an OSD
//! to another position (a failure domain taken by a redraw, an OSD marked
//! out or in, a split's children placed apart), but the OSD's objects stay
//! the old position's shard, so a copy serves only the position of its
//! shard (Ceph keeps a shard's identity alike, in `pg_shard_t`). Each OSD
//! keeps one copy of a PG, so a moved copy changes position in stages that
//! never give up a shard no other copy holds:
//!
//! 1. a temporary acting set keeps the moved copy at its shard's position
//!    while placement's OSD for that position is backfilled;
//! 2. once that OSD is complete it serves there, and the moved copy,
//!    now at a position whose shard it does not hold, is emptied and
//!    backfilled with its new position's shard;
//! 3. then the up set serves.
//!
//! Copies that placement moved onto each other's positions (a swap, or
//! any cycle: common when a pool has exactly `k + m` failure domains and
//! a split places its children, each a permutation of the parent's OSDs)
//! cannot take those stages, each waiting for another; nor do they need
//! to: the same OSDs hold the PG as placement wants, only numbered
//! otherwise. The temporary acting set keeps their order and the PG is
//! clean (see `Pg::remapped`), with no data moved.

use cairn_types::OsdId;
use std::collections::BTreeMap;

/// What one copy that can be brought up to date holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    /// Its shard (`None`: not recorded, as for a copy from before shards
    /// were recorded; such a copy may serve any position).
    pub shard: Option<u32>,
    /// It lacks no object: it needs no recovery.
    pub complete: bool,
}

/// Copies that can be brought up to date, and what each holds.
pub(super) type Holders = BTreeMap<OsdId, Holding>;

/// Whether `osd` can serve `position`: a holder whose shard is that
/// position's, or not recorded.
pub(super) fn holds(holders: &Holders, osd: OsdId, position: usize) -> bool {
    holders
        .get(&osd)
        .is_some_and(|h| h.shard.is_none_or(|s| s as usize == position))
}

/// The acting set peering wants, by position: each position's up OSD if it
/// can serve there, else the OSD acting there now if it can, else a holder
/// of the position's shard that placement moved elsewhere, else a hole.
/// Complete copies come first: a copy that lacks objects (a new OSD, one
/// that missed writes) takes a position only if no complete one can, so
/// a moved copy keeps its shard until placement's OSD for its position
/// holds every object, and its shards serve the recovery until then.
pub(super) fn want(
    up: &[Option<OsdId>],
    acting: &[Option<OsdId>],
    holders: &Holders,
) -> Vec<Option<OsdId>> {
    let n = up.len().max(acting.len());
    let at = |v: &[Option<OsdId>], p: usize| v.get(p).copied().flatten();
    let mut want: Vec<Option<OsdId>> = vec![None; n];
    for complete_only in [true, false] {
        let fits = |o: OsdId, p: usize, want: &[Option<OsdId>]| {
            holds(holders, o, p)
                && (!complete_only || holders[&o].complete)
                && !want.contains(&Some(o))
        };
        for p in 0..n {
            if want[p].is_none() {
                want[p] = [at(up, p), at(acting, p)]
                    .into_iter()
                    .flatten()
                    .find(|o| fits(*o, p, &want));
            }
        }
        // Positions still open take a moved copy holding their shard.
        for p in 0..n {
            if want[p].is_none() {
                want[p] = holders
                    .iter()
                    .find(|(o, h)| h.shard == u32::try_from(p).ok() && fits(**o, p, &want))
                    .map(|(o, _)| *o);
            }
        }
    }
    want
}

/// The temporary acting set that makes `want` act (`None`: the up set),
/// holes as [`cairn_placement::PG_TEMP_HOLE`].
pub(super) fn temp(want: &[Option<OsdId>], up: &[Option<OsdId>]) -> Option<Vec<OsdId>> {
    (want != up).then(|| {
        want.iter()
            .map(|o| o.unwrap_or(cairn_placement::PG_TEMP_HOLE))
            .collect()
    })
}

/// Positions of `acting` whose OSD can serve there: all of them, and
/// those whose OSD also lacks no object.
fn serving(acting: &[Option<OsdId>], holders: &Holders) -> (usize, usize) {
    let serves = acting
        .iter()
        .enumerate()
        .filter_map(|(p, o)| o.filter(|o| holds(holders, *o, p)));
    let complete = serves.clone().filter(|o| holders[o].complete).count();
    (complete, serves.count())
}

/// Whether `want` is worth a new interval over `acting`: it serves more
/// positions from complete copies (a copy that lacks objects is rebuilt
/// from the others, so it must not push out a whole one, which would be
/// emptied if placement moved it), or as many and more positions, or as
/// many and more of them where placement wants them (each stage of a
/// move is one of those).
pub(super) fn better(
    want: &[Option<OsdId>],
    acting: &[Option<OsdId>],
    up: &[Option<OsdId>],
    holders: &Holders,
) -> bool {
    let as_up = |v: &[Option<OsdId>]| {
        v.iter()
            .zip(up)
            .filter(|(a, u)| a.is_some() && a == u)
            .count()
    };
    let (complete_now, now) = serving(acting, holders);
    let (complete_then, then) = serving(want, holders);
    want != acting && (complete_then, then, as_up(want)) > (complete_now, now, as_up(acting))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn osds(v: &[Option<u32>]) -> Vec<Option<OsdId>> {
        v.iter().map(|o| o.map(OsdId)).collect()
    }

    fn holders(v: &[(u32, Option<u32>)]) -> Holders {
        v.iter()
            .map(|(o, s)| {
                let holding = Holding {
                    shard: *s,
                    complete: true,
                };
                (OsdId(*o), holding)
            })
            .collect()
    }

    #[test]
    fn a_moved_copy_serves_its_shard_until_its_position_is_filled() {
        // OSD 5 held shard 3; placement moved it to position 1 (whose OSD
        // 9 is gone) and put new OSD 7 at position 3.
        let up = osds(&[Some(1), Some(5), Some(2), Some(7)]);
        let h = holders(&[(1, Some(0)), (5, Some(3)), (2, Some(2))]);
        let w = want(&up, &up, &h);
        assert_eq!(w, osds(&[Some(1), None, Some(2), Some(5)]));
        assert!(better(&w, &up, &up, &h));
        // Stage 2: 7 holds shard 3 now; 5 leaves position 3.
        let h = holders(&[(1, Some(0)), (5, Some(3)), (2, Some(2)), (7, Some(3))]);
        let w2 = want(&up, &w, &h);
        assert_eq!(w2, osds(&[Some(1), None, Some(2), Some(7)]));
        assert!(better(&w2, &w, &up, &h));
        // Once there, that is where it stays (5 is backfilled as shard 1).
        assert_eq!(want(&up, &w2, &h), w2);
        assert!(!better(&w2, &w2, &up, &h));
        let h = holders(&[(1, Some(0)), (5, Some(1)), (2, Some(2)), (7, Some(3))]);
        assert_eq!(want(&up, &w2, &h), up);
    }

    #[test]
    fn an_old_holder_serves_while_the_moved_copy_is_backfilled() {
        let up = osds(&[Some(1), Some(5), Some(2), Some(7)]);
        // OSD 9 (out, still up) holds shard 1.
        let h = holders(&[
            (1, Some(0)),
            (5, Some(3)),
            (2, Some(2)),
            (7, Some(3)),
            (9, Some(1)),
        ]);
        let acting = osds(&[Some(1), None, Some(2), Some(7)]);
        let w = want(&up, &acting, &h);
        assert_eq!(w, osds(&[Some(1), Some(9), Some(2), Some(7)]));
        assert!(better(&w, &acting, &up, &h));
    }

    #[test]
    fn a_swap_keeps_its_order_and_moves_nothing() {
        // 5 and 6 swapped positions 1 and 3.
        let up = osds(&[Some(1), Some(5), Some(2), Some(6)]);
        let h = holders(&[(1, Some(0)), (5, Some(3)), (2, Some(2)), (6, Some(1))]);
        let w = want(&up, &up, &h);
        assert_eq!(w, osds(&[Some(1), Some(6), Some(2), Some(5)]));
        assert!(better(&w, &up, &up, &h));
        // The next interval keeps it: no ping-pong, nothing backfilled.
        assert_eq!(want(&up, &w, &h), w);
        assert!(!better(&w, &w, &up, &h));
    }

    #[test]
    fn a_moved_copy_stays_until_its_position_holds_every_object() {
        // 6 is new at position 2 and lacks objects; 5, moved to position
        // 1, holds shard 2 whole.
        let up = osds(&[Some(1), Some(5), Some(6)]);
        let mut h = holders(&[(1, Some(0)), (5, Some(2)), (6, Some(2))]);
        h.get_mut(&OsdId(6)).expect("6").complete = false;
        let w = want(&up, &up, &h);
        assert_eq!(w, osds(&[Some(1), None, Some(5)]));
        // Worth a temporary acting set: as is, 6 would serve position 2
        // lacking objects and 5, at position 1, would be emptied.
        assert!(better(&w, &up, &up, &h));
        // Lacking objects, 6 still serves where no complete copy can.
        h.remove(&OsdId(5));
        assert_eq!(want(&up, &up, &h), osds(&[Some(1), None, Some(6)]));
    }

    #[test]
    fn unrecorded_shards_and_new_copies_keep_the_old_rules() {
        let up = osds(&[Some(1), Some(2), Some(3)]);
        // 3 is new (not a holder: it must be backfilled).
        let h = holders(&[(1, None), (2, None)]);
        let w = want(&up, &up, &h);
        assert_eq!(w, osds(&[Some(1), Some(2), None]));
        assert!(!better(&w, &up, &up, &h), "served as it is, 3 backfilled");
    }
}

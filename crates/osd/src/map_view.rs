//! A PG's intervals from the map history: the pure part of following the
//! map, shared by the daemon and the simulator so both compute intervals
//! and past intervals the same way.
//!
//! Interval epochs must agree between primary and replicas, so the map is
//! replayed one incremental at a time from genesis (epoch 1) and a PG's
//! interval starts at the first epoch its acting set, up set, primary or
//! min_size took their current value. After a jump to a full map (the
//! monitor no longer held the incrementals) history before it is unknown.

use crate::peering::PastInterval;
use crate::pg::{EcShape, Interval, MapContext};
use cairn_placement::hash::stable_mod;
use cairn_placement::{ClusterMap, Placement, Redundancy};
use cairn_proto::map::{Incremental, MonState, OsdEndpoint};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use std::collections::{BTreeMap, BTreeSet};

/// The map as an OSD follows it, with every PG's interval.
/// The fields are public for reading; change them only through
/// [`MapView::advance`] and [`MapView::jump`], which keep them consistent.
#[derive(Debug)]
pub struct MapView {
    pub state: MonState,
    pub placement: Placement,
    pub intervals: BTreeMap<PgId, Interval>,
    /// Each PG's intervals before its current one, oldest first, at most
    /// [`crate::limits::PAST_INTERVALS_MAX`].
    pub past: BTreeMap<PgId, Vec<PastInterval>>,
    /// The epoch the history in `past` starts at (1: the whole history).
    pub history_from: Epoch,
    /// Each pool's `pg_num` at the last epoch applied.
    pg_nums: BTreeMap<PoolId, u32>,
}

impl MapView {
    /// The monitor's first map: empty, epoch 1.
    #[must_use]
    pub fn genesis() -> MapView {
        let state = MonState {
            map: ClusterMap {
                epoch: Epoch(1),
                ..ClusterMap::default()
            },
            ..MonState::default()
        };
        MapView {
            placement: Placement::new(&state.map),
            state,
            intervals: BTreeMap::new(),
            past: BTreeMap::new(),
            history_from: Epoch(1),
            pg_nums: BTreeMap::new(),
        }
    }

    /// The OSDs up in the current map.
    #[must_use]
    pub fn up_osds(&self) -> BTreeSet<OsdId> {
        self.state
            .map
            .osds
            .iter()
            .filter(|o| o.up)
            .map(|o| o.id)
            .collect()
    }

    /// What a PG core needs to know of the map around it.
    #[must_use]
    pub fn context(&self, pg: PgId) -> MapContext {
        let past = self.past.get(&pg).cloned().unwrap_or_default();
        // A PG whose kept history was cut short knows nothing before it.
        let history_from = match past.first() {
            Some(first) if past.len() >= crate::limits::PAST_INTERVALS_MAX => first.first,
            _ => self.history_from,
        };
        MapContext {
            up_osds: self.up_osds(),
            past,
            history_from,
        }
    }

    /// Whether a peering query of `pg` for the interval that started at
    /// `interval_epoch` asks about an interval this map says is over. Such
    /// a query is dropped, as Ceph drops peering messages from before its
    /// last peering reset: the querier is behind (it learns of the new
    /// interval from the monitor), and an answer could describe a copy
    /// split since, which that querier would read as its PG's history.
    /// Before a full-map jump the view cannot tell, and answers.
    #[must_use]
    pub fn query_is_stale(&self, pg: PgId, interval_epoch: Epoch) -> bool {
        interval_epoch >= self.history_from
            && self
                .intervals
                .get(&pg)
                .is_some_and(|now| interval_epoch < now.epoch_started)
    }

    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.state.map.epoch
    }

    /// Applies the next epoch's incremental; `false` if it is not the next.
    pub fn advance(&mut self, inc: &Incremental) -> bool {
        if inc.epoch != self.epoch().next() {
            return false;
        }
        self.state.apply(inc);
        self.recompute();
        true
    }

    /// Jumps to a full map (history unavailable).
    pub fn jump(&mut self, map: ClusterMap, endpoints: Vec<(OsdId, OsdEndpoint)>) {
        self.state = MonState {
            map,
            endpoints: endpoints.into_iter().collect(),
        };
        self.history_from = self.state.map.epoch;
        self.past.clear();
        self.recompute();
    }

    /// Recomputes intervals at the current epoch: an unchanged PG keeps its
    /// start, a changed or new one starts now. A `pg_num` change starts a
    /// new interval for every PG of the pool (they split), and a PG split
    /// off inherits its parent's past intervals: its objects were the
    /// parent's, on the parent's OSDs.
    fn recompute(&mut self) {
        self.placement = Placement::new(&self.state.map);
        let epoch = self.epoch();
        let mut intervals = BTreeMap::new();
        for pool in &self.state.map.pools {
            let min_size = pool.redundancy.min_size();
            let split_from = self
                .pg_nums
                .get(&pool.id)
                .copied()
                .filter(|&old| old != pool.pg_num);
            for seed in 0..pool.pg_num {
                let pg = PgId::new(pool.id, seed);
                let Ok(mapping) = self.placement.map_pg(pg) else {
                    continue;
                };
                let ec = match pool.redundancy {
                    Redundancy::Erasure {
                        k, m, stripe_unit, ..
                    } => Some(EcShape {
                        k,
                        m,
                        stripe_unit: u64::from(stripe_unit),
                        acting: mapping.acting.clone(),
                        up: mapping.up.clone(),
                    }),
                    Redundancy::Replicated { .. } => None,
                };
                let now = Interval {
                    epoch_started: epoch,
                    up: mapping.up.iter().flatten().copied().collect(),
                    acting: mapping.acting.iter().flatten().copied().collect(),
                    primary: mapping.primary,
                    min_size,
                    size: pool.redundancy.shard_count(),
                    ec,
                };
                // Positions are part of an erasure-coded interval: the
                // same OSDs in another order hold other shards.
                let interval = match self.intervals.get(&pg) {
                    Some(old)
                        if split_from.is_none()
                            && old.acting == now.acting
                            && old.up == now.up
                            && old.primary == now.primary
                            && old.min_size == now.min_size
                            && old.ec == now.ec =>
                    {
                        old.clone()
                    }
                    Some(old) => {
                        let past = self.past.entry(pg).or_default();
                        past.push(PastInterval {
                            first: old.epoch_started,
                            last: Epoch(epoch.0.saturating_sub(1)),
                            acting: old.acting.clone(),
                            maybe_rw: old.acting.len() >= old.min_size as usize,
                        });
                        if past.len() > crate::limits::PAST_INTERVALS_MAX {
                            past.remove(0);
                        }
                        now
                    }
                    None => {
                        if let Some(from) = split_from.filter(|&from| seed >= from) {
                            let parent = PgId::new(pool.id, stable_mod(seed, from));
                            if let Some(past) = self.past.get(&parent).cloned() {
                                self.past.insert(pg, past);
                            }
                        }
                        now
                    }
                };
                intervals.insert(pg, interval);
            }
        }
        self.past.retain(|pg, _| intervals.contains_key(pg));
        self.intervals = intervals;
        self.pg_nums = self
            .state
            .map
            .pools
            .iter()
            .map(|p| (p.id, p.pg_num))
            .collect();
    }

    /// Each pool's `pg_num` in the current map.
    #[must_use]
    pub fn pg_nums(&self) -> &BTreeMap<PoolId, u32> {
        &self.pg_nums
    }

    #[must_use]
    pub fn redundancy(&self, pool: PoolId) -> Option<Redundancy> {
        self.placement.pool(pool).map(|p| p.redundancy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_replay_takes_only_the_next_epoch() {
        let mut view = MapView::genesis();
        assert!(view.advance(&Incremental::new(Epoch(2))));
        assert!(!view.advance(&Incremental::new(Epoch(9))), "gaps refused");
        assert!(view.advance(&Incremental::new(Epoch(3))));
        assert_eq!(view.epoch(), Epoch(3));
        assert!(view.intervals.is_empty());
    }

    fn osd(id: u32, up: bool) -> cairn_placement::OsdInfo {
        cairn_placement::OsdInfo {
            id: OsdId(id),
            host: format!("h{id}"),
            rack: "r0".into(),
            weight: cairn_placement::Weight::ONE,
            device_class: "ssd".into(),
            up,
            is_in: true,
        }
    }

    fn pool(pg_num: u32, pgp_num: u32) -> cairn_placement::Pool {
        cairn_placement::Pool {
            id: PoolId(1),
            name: "p".into(),
            pg_num,
            pgp_num,
            redundancy: Redundancy::Replicated {
                size: 2,
                min_size: 1,
            },
            failure_domain: cairn_placement::FailureDomain::Osd,
            device_class: None,
        }
    }

    /// Epoch 2: four OSDs up and a pool of 2 PGs.
    fn four_osds_two_pgs() -> MapView {
        let mut view = MapView::genesis();
        let mut inc = Incremental::new(Epoch(2));
        inc.osd_upserts = (0..4).map(|i| osd(i, true)).collect();
        inc.pool_upserts = vec![pool(2, 2)];
        assert!(view.advance(&inc));
        view
    }

    /// A `pg_num` increase starts a new interval for every PG of the pool,
    /// and a new PG inherits its parent's past (its objects were there).
    #[test]
    fn a_split_starts_intervals_and_children_inherit_the_parents_past() {
        let mut view = four_osds_two_pgs();
        let mut inc = Incremental::new(Epoch(3));
        inc.osd_upserts = vec![osd(0, false)];
        assert!(view.advance(&inc));
        let before: BTreeMap<PgId, Interval> = view.intervals.clone();
        let mut inc = Incremental::new(Epoch(4));
        inc.pool_upserts = vec![pool(5, 2)];
        assert!(view.advance(&inc));
        assert_eq!(view.intervals.len(), 5);
        for (pg, interval) in &view.intervals {
            assert_eq!(interval.epoch_started, Epoch(4), "{pg}");
            let parent = PgId::new(PoolId(1), stable_mod(pg.seed, 2));
            // Placement still by pgp_num 2: children act where parents do.
            assert_eq!(interval.acting, before[&parent].acting, "{pg}");
            assert_eq!(view.past.get(pg), view.past.get(&parent), "{pg}");
            let past = &view.past[pg];
            let last = past.last().expect("the parent's interval is past");
            assert_eq!(
                (last.first, last.last),
                (before[&parent].epoch_started, Epoch(3))
            );
        }
        // An unrelated epoch changes nothing; pgp_num then moves children.
        assert!(view.advance(&Incremental::new(Epoch(5))));
        assert!(view.intervals.values().all(|i| i.epoch_started == Epoch(4)));
        let mut inc = Incremental::new(Epoch(6));
        inc.pool_upserts = vec![pool(5, 5)];
        assert!(view.advance(&inc));
        let parents_kept = (0..2)
            .all(|seed| view.intervals[&PgId::new(PoolId(1), seed)].epoch_started == Epoch(4));
        assert!(parents_kept, "pgp_num moves only the new PGs");
    }

    /// A query of an interval the map says is over is stale (seed 50863: a
    /// primary still before a split took a split copy's answer as its
    /// PG's history); one of the current interval, or of a newer map, is
    /// not; nor one from before a full-map jump, which the view cannot
    /// judge.
    #[test]
    fn a_query_of_an_interval_that_is_over_is_stale() {
        let mut view = four_osds_two_pgs();
        let mut inc = Incremental::new(Epoch(3));
        inc.pool_upserts = vec![pool(4, 2)];
        assert!(view.advance(&inc));
        let pg = PgId::new(PoolId(1), 1);
        assert!(view.query_is_stale(pg, Epoch(2)));
        assert!(!view.query_is_stale(pg, Epoch(3)));
        assert!(!view.query_is_stale(pg, Epoch(7)));
        let map = view.state.map.clone();
        view.jump(map, Vec::new());
        assert!(
            !view.query_is_stale(pg, Epoch(2)),
            "before the jump: unknown"
        );
    }
}

//! The upmap balancer: explicit per-PG remaps (`pg_upmap_items`) that even
//! out PGs per OSD, like Ceph's `upmap` balancer mode.
//!
//! Straw2 spreads PGs in proportion to weight only on average: with 12 PGs
//! per OSD the fullest OSD holds almost twice the mean. The balancer moves
//! single replicas, each from the OSD furthest over its share to the one
//! furthest under it that keeps the PG's failure domains distinct, until no
//! OSD is above `max(floor(expected × max_over_mean), ceil(expected))`. Each
//! move takes exactly one replica off an OSD above that bound, so the
//! number of moves equals the total excess (the least possible) unless
//! failure domains block a move.

use crate::limits;
use crate::map::{ClusterMap, Pool};
use crate::mapping::{Placement, Shard};
use cairn_types::{OsdId, PgId};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

/// What the balancer aims for.
#[derive(Clone, Copy, Debug)]
pub struct BalanceOptions {
    /// Target for the fullest OSD's PG count over its weighted mean.
    pub max_over_mean: f64,
    /// Most remaps to propose in one run.
    pub moves_max: usize,
}

impl Default for BalanceOptions {
    fn default() -> Self {
        BalanceOptions {
            max_over_mean: 1.05,
            moves_max: limits::BALANCE_MOVES_MAX,
        }
    }
}

/// The balancer's result for one pool.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PoolBalance {
    pub pool: String,
    pub max_over_mean_before: f64,
    pub max_over_mean_after: f64,
    /// The best reachable with whole PGs: `ceil(mean) / mean` for the
    /// most loaded OSD, or the target if higher.
    pub max_over_mean_reachable: f64,
    pub moves: usize,
    /// Replicas above their OSD's allowance before balancing: no balancer
    /// can reach the target with fewer moves.
    pub moves_lower_bound: usize,
}

/// Balances every pool of `map` in place, adding to `pg_upmap_items`.
#[must_use]
pub fn balance(map: &mut ClusterMap, options: &BalanceOptions) -> Vec<PoolBalance> {
    let pools = map.pools.clone();
    pools
        .iter()
        .map(|pool| balance_pool(map, pool, options))
        .collect()
}

/// One pool's working state: PG mappings and replica counts per OSD.
struct Ledger {
    osds: Vec<OsdId>,
    index_of: HashMap<OsdId, usize>,
    expected: Vec<f64>,
    allowed: Vec<u64>,
    count: Vec<u64>,
    domain: Vec<u32>,
    pgs: Vec<(PgId, Vec<Shard>)>,
    /// PG indexes holding a replica on each OSD.
    on_osd: Vec<BTreeSet<usize>>,
}

fn balance_pool(map: &mut ClusterMap, pool: &Pool, options: &BalanceOptions) -> PoolBalance {
    let placement = Placement::new(map);
    let mut ledger = Ledger::new(&placement, pool, options.max_over_mean);
    let before = ledger.max_over_mean();
    let moves_lower_bound = ledger.excess();
    let mut stuck = BTreeSet::new();
    let mut moves = 0;
    while moves < options.moves_max.min(limits::BALANCE_MOVES_MAX) {
        let Some(source) = ledger.most_over(&stuck) else {
            break;
        };
        match ledger.find_move(source) {
            Some((pg_index, target)) => {
                let pg = ledger.pgs[pg_index].0;
                let (from, to) = (ledger.osds[source], ledger.osds[target]);
                ledger.apply(pg_index, source, target);
                record_upmap(map, pg, from, to);
                moves += 1;
            }
            None => {
                stuck.insert(source);
            }
        }
    }
    PoolBalance {
        pool: pool.name.clone(),
        max_over_mean_before: before,
        max_over_mean_after: ledger.max_over_mean(),
        max_over_mean_reachable: ledger.reachable(options.max_over_mean),
        moves,
        moves_lower_bound,
    }
}

impl Ledger {
    fn new(placement: &Placement, pool: &Pool, max_over_mean: f64) -> Ledger {
        let eligible = placement.eligible_osds(pool);
        let osds: Vec<OsdId> = eligible.iter().map(|&(o, _)| o).collect();
        let index_of: HashMap<OsdId, usize> =
            osds.iter().enumerate().map(|(i, &o)| (o, i)).collect();
        let pgs: Vec<(PgId, Vec<Shard>)> =
            pool.pgs().map(|pg| (pg, placement.raw(pool, pg))).collect();
        let mut count = vec![0u64; osds.len()];
        let mut on_osd = vec![BTreeSet::new(); osds.len()];
        for (i, (_, shards)) in pgs.iter().enumerate() {
            for osd in shards.iter().flatten() {
                if let Some(&o) = index_of.get(osd) {
                    count[o] += 1;
                    on_osd[o].insert(i);
                }
            }
        }
        let total: u64 = count.iter().sum();
        let weight_total: f64 = eligible.iter().map(|(_, w)| w.as_f64()).sum();
        #[allow(clippy::cast_precision_loss)]
        let expected: Vec<f64> = eligible
            .iter()
            .map(|(_, w)| total as f64 * w.as_f64() / weight_total.max(f64::MIN_POSITIVE))
            .collect();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let allowed = expected
            .iter()
            .map(|&e| ((e * max_over_mean).floor() as u64).max(e.ceil() as u64))
            .collect();
        let fd = pool.failure_domain;
        let domain = osds
            .iter()
            .map(|&o| placement.domain_of(o, fd).unwrap_or(u32::MAX))
            .collect();
        Ledger {
            osds,
            index_of,
            expected,
            allowed,
            count,
            domain,
            pgs,
            on_osd,
        }
    }

    fn ratio(&self, i: usize) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let c = self.count[i] as f64;
        if self.expected[i] > 0.0 {
            c / self.expected[i]
        } else {
            0.0
        }
    }

    fn max_over_mean(&self) -> f64 {
        (0..self.osds.len())
            .map(|i| self.ratio(i))
            .fold(0.0, f64::max)
    }

    fn reachable(&self, target: f64) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        (0..self.osds.len())
            .map(|i| {
                let e = self.expected[i];
                if e > 0.0 {
                    (e.ceil() / e).max(target.min(self.allowed[i] as f64 / e))
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }

    fn excess(&self) -> usize {
        let excess: u64 = (0..self.osds.len())
            .map(|i| self.count[i].saturating_sub(self.allowed[i]))
            .sum();
        usize::try_from(excess).unwrap_or(usize::MAX)
    }

    /// The OSD furthest above its allowance, if any is above it.
    fn most_over(&self, stuck: &BTreeSet<usize>) -> Option<usize> {
        (0..self.osds.len())
            .filter(|i| self.count[*i] > self.allowed[*i] && !stuck.contains(i))
            .max_by(|&a, &b| self.ratio(a).total_cmp(&self.ratio(b)).then(b.cmp(&a)))
    }

    /// A PG on `source` and the least-loaded OSD that can take its replica.
    fn find_move(&self, source: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for &pg_index in &self.on_osd[source] {
            let shards = &self.pgs[pg_index].1;
            let others: Vec<u32> = shards
                .iter()
                .flatten()
                .filter_map(|o| self.index_of.get(o))
                .filter(|&&o| o != source)
                .map(|&o| self.domain[o])
                .collect();
            let members: Vec<usize> = shards
                .iter()
                .flatten()
                .filter_map(|o| self.index_of.get(o).copied())
                .collect();
            let candidate = (0..self.osds.len())
                .filter(|&t| {
                    self.count[t] < self.allowed[t]
                        && !members.contains(&t)
                        && !others.contains(&self.domain[t])
                })
                .min_by(|&a, &b| self.ratio(a).total_cmp(&self.ratio(b)).then(a.cmp(&b)));
            if let Some(target) = candidate {
                let better = best.is_none_or(|(_, t)| self.ratio(target) < self.ratio(t));
                if better {
                    best = Some((pg_index, target));
                }
            }
        }
        best
    }

    fn apply(&mut self, pg_index: usize, source: usize, target: usize) {
        let (from, to) = (self.osds[source], self.osds[target]);
        let shards = &mut self.pgs[pg_index].1;
        let slot = shards
            .iter_mut()
            .find(|s| **s == Some(from))
            .expect("the PG was found on the source OSD");
        *slot = Some(to);
        self.count[source] -= 1;
        self.count[target] += 1;
        self.on_osd[source].remove(&pg_index);
        self.on_osd[target].insert(pg_index);
    }
}

/// Records "replica of `pg` on `from` goes to `to`", folding into an
/// existing item `(origin, from)` so every item maps a computed OSD.
fn record_upmap(map: &mut ClusterMap, pg: PgId, from: OsdId, to: OsdId) {
    let items = map.pg_upmap_items.entry(pg).or_default();
    if let Some(at) = items.iter().position(|&(_, t)| t == from) {
        let origin = items[at].0;
        if origin == to {
            items.remove(at);
        } else {
            items[at].1 = to;
        }
    } else {
        items.push((from, to));
    }
    if items.is_empty() {
        map.pg_upmap_items.remove(&pg);
    }
}

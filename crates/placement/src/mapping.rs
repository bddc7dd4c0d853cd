//! PG → ordered OSDs: the placement function every client and daemon runs.
//!
//! [`Placement::new`] prepares a validated map once (interning hosts and
//! racks, building one straw2 race per device class); [`Placement::map_pg`]
//! is then a pure function of `(map, pg)`.
//!
//! Rules, as in `docs/placement.md`:
//! - The raw mapping races OSDs with weight > 0 of the pool's device class,
//!   `in` or `out` alike, and skips a candidate that is `out` or in a failure
//!   domain already used. Keeping `out` OSDs in the race (Ceph's
//!   reweight-to-zero) is what makes marking one out move exactly the
//!   replicas it held.
//! - Replicated pools rank every OSD once per PG (straw2 keys) and take them
//!   greedily in rank order: adding, removing, outing or reweighting one OSD
//!   changes each PG's set by at most that one OSD and its replacement.
//! - Erasure-coded pools fill position `i` with the winners of draws
//!   `i, i + n, i + 2n, …` (Ceph's `indep`), so a lost position does not
//!   shift the others.
//! - `pg_upmap_items` then swaps individual OSDs, if the swap is still valid.
//! - The up set drops `down` OSDs (replicated) or leaves a hole (erasure);
//!   a `pg_temp` entry replaces the up set as the acting set. The first OSD
//!   of the acting set is the primary.

use crate::hash;
use crate::limits;
use crate::map::{ClusterMap, FailureDomain, Pool, Weight};
use crate::straw2::Race;
use cairn_types::{OsdId, PgId, PoolId};
use std::collections::HashMap;

/// One OSD slot of a PG: an OSD, or a hole (an erasure-coded position with
/// no OSD). Replicated mappings never contain holes.
pub type Shard = Option<OsdId>;

/// Where one PG lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgMapping {
    pub pg: PgId,
    /// Placement's choice, with upmap items applied: where data belongs.
    pub raw: Vec<Shard>,
    /// `raw` without `down` OSDs.
    pub up: Vec<Shard>,
    /// The OSDs serving the PG: `pg_temp` if set, else `up`.
    pub acting: Vec<Shard>,
    /// First OSD of the acting set.
    pub primary: Option<OsdId>,
}

impl PgMapping {
    /// Shards the pool wants minus the OSDs acting: 0 when complete.
    #[must_use]
    pub fn missing_count(&self, shard_count: u32) -> u32 {
        let acting = self.acting.iter().flatten().count();
        shard_count.saturating_sub(u32::try_from(acting).unwrap_or(u32::MAX))
    }
}

/// Why a PG or pool cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("pool {0} does not exist")]
    NoPool(PoolId),
    #[error("PG {pg} does not exist: pool has {pg_num} PGs")]
    NoPg { pg: PgId, pg_num: u32 },
    #[error(
        "pool {pool:?} needs {needed} distinct {domain}s{class} with OSDs in, but the map has {available}"
    )]
    Unsatisfiable {
        pool: String,
        needed: u32,
        domain: FailureDomain,
        class: String,
        available: u32,
    },
}

/// What placement needs of one OSD, indexed densely.
#[derive(Clone, Debug)]
struct Leaf {
    osd: OsdId,
    is_in: bool,
    up: bool,
    host: u32,
    rack: u32,
    class: u32,
    weight: u32,
}

/// A prepared map: build once per epoch, then map any number of PGs.
#[derive(Clone, Debug)]
pub struct Placement {
    leaves: Vec<Leaf>,
    leaf_of: HashMap<OsdId, u32>,
    classes: Vec<String>,
    /// One race per device class, plus (last) one over every class.
    races: Vec<Race>,
    pools: HashMap<PoolId, Pool>,
    pg_temp: HashMap<PgId, Vec<OsdId>>,
    upmap: HashMap<PgId, Vec<(OsdId, OsdId)>>,
}

impl Placement {
    /// Prepares `map`, which must have passed [`ClusterMap::validate`]; an
    /// unvalidated map still never panics, but may place oddly.
    #[must_use]
    pub fn new(map: &ClusterMap) -> Placement {
        let mut hosts = Interner::default();
        let mut racks = Interner::default();
        let mut classes = Interner::default();
        let leaves: Vec<Leaf> = map
            .osds
            .iter()
            .map(|o| Leaf {
                osd: o.id,
                is_in: o.is_in,
                up: o.up,
                host: hosts.id(&o.host),
                rack: racks.id(&o.rack),
                class: classes.id(&o.device_class),
                weight: o.weight.0,
            })
            .collect();
        let class_count = classes.names.len();
        let races = (0..=class_count)
            .map(|class| {
                let any = class == class_count;
                Race::new(
                    leaves
                        .iter()
                        .enumerate()
                        .filter(|(_, leaf)| any || leaf.class as usize == class)
                        .map(|(i, leaf)| (index_u32(i), hash::osd_key(leaf.osd), leaf.weight)),
                )
            })
            .collect();
        Placement {
            leaf_of: leaves
                .iter()
                .enumerate()
                .map(|(i, l)| (l.osd, index_u32(i)))
                .collect(),
            leaves,
            classes: classes.names,
            races,
            pools: map.pools.iter().map(|p| (p.id, p.clone())).collect(),
            pg_temp: map.pg_temp.iter().map(|(k, v)| (*k, v.clone())).collect(),
            upmap: map
                .pg_upmap_items
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect(),
        }
    }

    /// The pool with this id.
    #[must_use]
    pub fn pool(&self, id: PoolId) -> Option<&Pool> {
        self.pools.get(&id)
    }

    /// Where PG `pg` lives.
    ///
    /// # Errors
    /// [`PlacementError::NoPool`] or [`PlacementError::NoPg`].
    pub fn map_pg(&self, pg: PgId) -> Result<PgMapping, PlacementError> {
        let pool = self
            .pools
            .get(&pg.pool)
            .ok_or(PlacementError::NoPool(pg.pool))?;
        if pg.seed >= pool.pg_num {
            return Err(PlacementError::NoPg {
                pg,
                pg_num: pool.pg_num,
            });
        }
        let raw = self.raw(pool, pg);
        let up = self.without_down(pool, &raw);
        let acting = match self.pg_temp.get(&pg) {
            Some(temp) => {
                let temp: Vec<Shard> = temp
                    .iter()
                    .map(|o| (*o != crate::map::PG_TEMP_HOLE).then_some(*o))
                    .collect();
                self.without_down(pool, &temp)
            }
            None => up.clone(),
        };
        let primary = acting.iter().flatten().next().copied();
        Ok(PgMapping {
            pg,
            raw,
            up,
            acting,
            primary,
        })
    }

    /// Placement's choice for a PG of `pool`, with upmap items applied.
    #[must_use]
    pub fn raw(&self, pool: &Pool, pg: PgId) -> Vec<Shard> {
        let race = self.race(pool);
        let seed = hash::placement_seed(pg, pool.pgp_num);
        let mut leaves = if pool.redundancy.is_positional() {
            self.draw_positions(race, pool, seed)
        } else {
            self.draw_ordered(race, pool, seed)
        };
        if let Some(items) = self.upmap.get(&pg) {
            self.apply_upmap(pool, &mut leaves, items);
        }
        leaves
            .into_iter()
            .map(|leaf| leaf.map(|l| self.leaves[l as usize].osd))
            .collect()
    }

    /// Replicated: OSDs in straw2 rank order, skipping `out` OSDs and
    /// failure domains already used, until `size` are taken. Ranks are
    /// computed for a prefix of the order, widened if the prefix runs out.
    fn draw_ordered(&self, race: &Race, pool: &Pool, seed: u64) -> Vec<Option<u32>> {
        let size = pool.redundancy.shard_count() as usize;
        let mut chosen: Vec<Option<u32>> = Vec::with_capacity(size);
        let mut domains: Vec<u32> = Vec::with_capacity(size);
        let draw = hash::draw_seed(seed, 0);
        let mut prefix = size + limits::RANK_PREFIX_EXTRA;
        loop {
            chosen.clear();
            domains.clear();
            let ranked = race.ranked(draw, prefix);
            for &leaf in &ranked {
                let domain = self.domain(leaf, pool.failure_domain);
                if self.leaves[leaf as usize].is_in && !domains.contains(&domain) {
                    chosen.push(Some(leaf));
                    domains.push(domain);
                    if chosen.len() == size {
                        return chosen;
                    }
                }
            }
            if ranked.len() < prefix {
                return chosen; // every OSD ranked: as many as the map allows
            }
            prefix = prefix.saturating_mul(4);
        }
    }

    /// Erasure-coded: position `i` takes draws `i + round * n` until one lands
    /// on an `in` OSD whose failure domain no filled position uses.
    fn draw_positions(&self, race: &Race, pool: &Pool, seed: u64) -> Vec<Option<u32>> {
        let n = pool.redundancy.shard_count();
        let mut positions: Vec<Option<u32>> = vec![None; n as usize];
        let mut domains: Vec<Option<u32>> = vec![None; n as usize];
        if race.is_empty() {
            return positions;
        }
        for round in 0..limits::EC_ROUNDS_MAX {
            let mut open = false;
            for position in 0..n {
                let p = position as usize;
                if positions[p].is_some() {
                    continue;
                }
                let Some(leaf) = race.winner(hash::draw_seed(seed, position + round * n)) else {
                    continue;
                };
                let domain = self.domain(leaf, pool.failure_domain);
                if self.leaves[leaf as usize].is_in && !domains.contains(&Some(domain)) {
                    positions[p] = Some(leaf);
                    domains[p] = Some(domain);
                } else {
                    open = true;
                }
            }
            if !open {
                break;
            }
        }
        positions
    }

    /// Applies balancer remaps: `(from, to)` replaces `from` when `to` is an
    /// `in` OSD of the pool's class, not yet in the PG, whose failure domain
    /// no other member uses. Invalid items (the map moved on) are ignored.
    fn apply_upmap(&self, pool: &Pool, leaves: &mut [Option<u32>], items: &[(OsdId, OsdId)]) {
        for &(from, to) in items {
            let (Some(&from), Some(&to)) = (self.leaf_of.get(&from), self.leaf_of.get(&to)) else {
                continue;
            };
            if !self.eligible(pool, to) || leaves.contains(&Some(to)) {
                continue;
            }
            let Some(at) = leaves.iter().position(|&l| l == Some(from)) else {
                continue;
            };
            let domain = self.domain(to, pool.failure_domain);
            let clash = leaves.iter().enumerate().any(|(i, l)| {
                i != at && l.is_some_and(|l| self.domain(l, pool.failure_domain) == domain)
            });
            if !clash {
                leaves[at] = Some(to);
            }
        }
    }

    fn without_down(&self, pool: &Pool, shards: &[Shard]) -> Vec<Shard> {
        let is_up = |osd: OsdId| {
            self.leaf_of
                .get(&osd)
                .is_some_and(|&l| self.leaves[l as usize].up)
        };
        if pool.redundancy.is_positional() {
            shards.iter().map(|s| s.filter(|&o| is_up(o))).collect()
        } else {
            shards
                .iter()
                .filter(|s| s.is_some_and(is_up))
                .copied()
                .collect()
        }
    }

    fn race(&self, pool: &Pool) -> &Race {
        let class = match &pool.device_class {
            Some(name) => self.classes.iter().position(|c| c == name),
            None => Some(self.classes.len()),
        };
        // A class no OSD has: the empty race at the end of the list.
        static EMPTY: Race = Race::empty();
        class.map_or(&EMPTY, |c| &self.races[c])
    }

    /// Whether `leaf` may hold data of `pool`.
    fn eligible(&self, pool: &Pool, leaf: u32) -> bool {
        let l = &self.leaves[leaf as usize];
        l.is_in
            && l.weight > 0
            && pool
                .device_class
                .as_ref()
                .is_none_or(|c| self.classes.get(l.class as usize) == Some(c))
    }

    fn domain(&self, leaf: u32, domain: FailureDomain) -> u32 {
        let l = &self.leaves[leaf as usize];
        match domain {
            FailureDomain::Osd => leaf,
            FailureDomain::Host => l.host,
            FailureDomain::Rack => l.rack,
        }
    }

    /// OSDs that may hold data of `pool` (`in`, weight > 0, its device
    /// class), with their weights, in id order.
    #[must_use]
    pub fn eligible_osds(&self, pool: &Pool) -> Vec<(OsdId, Weight)> {
        (0..self.leaves.len())
            .map(index_u32)
            .filter(|&l| self.eligible(pool, l))
            .map(|l| {
                let leaf = &self.leaves[l as usize];
                (leaf.osd, Weight(leaf.weight))
            })
            .collect()
    }

    /// The failure domain (as a dense index) of an OSD, for reports.
    #[must_use]
    pub fn domain_of(&self, osd: OsdId, domain: FailureDomain) -> Option<u32> {
        self.leaf_of.get(&osd).map(|&l| self.domain(l, domain))
    }

    /// Checks the cluster can give every PG of `pool` a full set of OSDs in
    /// distinct failure domains.
    ///
    /// # Errors
    /// [`PlacementError::Unsatisfiable`] naming what is missing.
    pub fn check_pool(&self, pool: &Pool) -> Result<(), PlacementError> {
        let mut domains: Vec<u32> = (0..self.leaves.len())
            .map(index_u32)
            .filter(|&l| self.eligible(pool, l))
            .map(|l| self.domain(l, pool.failure_domain))
            .collect();
        domains.sort_unstable();
        domains.dedup();
        let available = u32::try_from(domains.len()).unwrap_or(u32::MAX);
        let needed = pool.redundancy.shard_count();
        if available < needed {
            return Err(PlacementError::Unsatisfiable {
                pool: pool.name.clone(),
                needed,
                domain: pool.failure_domain,
                class: pool
                    .device_class
                    .as_ref()
                    .map_or(String::new(), |c| format!(" of class {c}")),
                available,
            });
        }
        Ok(())
    }
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("OSD count is bounded by OSD_COUNT_MAX")
}

/// Dense ids for host, rack and class names, in order of first appearance.
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = index_u32(self.names.len());
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        id
    }
}

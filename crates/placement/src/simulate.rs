//! The placement simulator: synthetic clusters, PG distribution statistics
//! and data movement under map changes, as `cairn placement simulate`
//! reports them. Timing is the caller's job; this module has no clock.

use crate::limits;
use crate::map::{ClusterMap, MapError, OsdInfo, Pool, Weight};
use crate::mapping::{Placement, Shard};
use cairn_types::{OsdId, PoolId};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A synthetic cluster: `hosts` hosts spread in contiguous blocks over
/// `racks` racks (host `h` is in rack `h * racks / hosts`), each with
/// `osds_per_host` OSDs numbered host by host. Host `h` takes weight
/// `weights[h % len]`; OSD `j` of a host takes class `classes[j % len]`.
#[derive(Clone, Debug)]
pub struct SyntheticSpec {
    pub racks: u32,
    pub hosts: u32,
    pub osds_per_host: u32,
    pub weights: Vec<f64>,
    pub classes: Vec<String>,
}

impl SyntheticSpec {
    /// Builds the map (epoch 1, no pools).
    ///
    /// # Errors
    /// [`MapError`] for zero or oversized counts, bad weights or class names.
    pub fn build(&self) -> Result<ClusterMap, MapError> {
        let fail = |why: String| {
            Err(MapError::Pool {
                pool: "synthetic cluster".into(),
                why,
            })
        };
        if self.racks == 0 || self.hosts == 0 || self.osds_per_host == 0 {
            return fail("racks, hosts and OSDs per host must be at least 1".into());
        }
        if self.racks > self.hosts {
            return fail(format!(
                "{} racks cannot each hold one of {} hosts",
                self.racks, self.hosts
            ));
        }
        let osd_count = u64::from(self.hosts) * u64::from(self.osds_per_host);
        if osd_count > limits::OSD_COUNT_MAX as u64 {
            return Err(MapError::TooManyOsds(
                usize::try_from(osd_count).unwrap_or(usize::MAX),
            ));
        }
        if self.weights.is_empty() || self.classes.is_empty() {
            return fail("give at least one weight and one device class".into());
        }
        let weights = self
            .weights
            .iter()
            .map(|&w| Weight::from_f64(w))
            .collect::<Result<Vec<_>, _>>()?;
        let mut map = ClusterMap {
            epoch: cairn_types::Epoch(1),
            ..ClusterMap::default()
        };
        let mut id = 0;
        for host in 0..self.hosts {
            let rack = u64::from(host) * u64::from(self.racks) / u64::from(self.hosts);
            for j in 0..self.osds_per_host {
                map.osds.push(OsdInfo {
                    id: OsdId(id),
                    host: format!("host{host}"),
                    rack: format!("rack{rack}"),
                    weight: weights[host as usize % weights.len()],
                    device_class: self.classes[j as usize % self.classes.len()].clone(),
                    up: true,
                    is_in: true,
                });
                id += 1;
            }
        }
        map.validate()?;
        Ok(map)
    }
}

/// Summary of counts over items (OSDs, hosts or racks), normalized by each
/// item's weight: `max_over_mean` is the largest `count / expected`, where
/// `expected = total × weight / total_weight`. With equal weights it is
/// plain max ÷ mean.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Stats {
    pub items: usize,
    pub min: u64,
    pub mean: f64,
    pub max: u64,
    pub stddev: f64,
    pub max_over_mean: f64,
    pub min_over_mean: f64,
}

impl Stats {
    /// Statistics of `(count, weight)` pairs. Empty input gives zeros.
    #[must_use]
    pub fn of(items: &[(u64, f64)]) -> Stats {
        if items.is_empty() {
            return Stats::default();
        }
        #[allow(clippy::cast_precision_loss)]
        let n = items.len() as f64;
        let total: u64 = items.iter().map(|&(c, _)| c).sum();
        let weight_total: f64 = items.iter().map(|&(_, w)| w).sum();
        #[allow(clippy::cast_precision_loss)]
        let mean = total as f64 / n;
        #[allow(clippy::cast_precision_loss)]
        let variance = items
            .iter()
            .map(|&(c, _)| (c as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        #[allow(clippy::cast_precision_loss)]
        let ratios = items.iter().map(|&(c, w)| {
            let expected = total as f64 * w / weight_total;
            if expected > 0.0 {
                c as f64 / expected
            } else {
                0.0
            }
        });
        let (lo, hi) = ratios.fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(r), hi.max(r))
        });
        Stats {
            items: items.len(),
            min: items.iter().map(|&(c, _)| c).min().unwrap_or(0),
            mean,
            max: items.iter().map(|&(c, _)| c).max().unwrap_or(0),
            stddev: variance.sqrt(),
            max_over_mean: hi,
            min_over_mean: if lo.is_finite() { lo } else { 0.0 },
        }
    }
}

/// How a pool's PG replicas spread over OSDs and failure domains.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Distribution {
    pub pg_replicas: u64,
    pub undersized_pgs: u64,
    pub per_osd: Stats,
    pub per_host: Stats,
    pub per_rack: Stats,
}

/// The raw mapping of every PG of `pool`, in PG order.
#[must_use]
pub fn map_pool(placement: &Placement, pool: &Pool) -> Vec<Vec<Shard>> {
    pool.pgs().map(|pg| placement.raw(pool, pg)).collect()
}

/// Counts replicas per OSD, host and rack over the OSDs eligible for `pool`.
#[must_use]
pub fn distribution(map: &ClusterMap, placement: &Placement, pool: &Pool) -> Distribution {
    let mappings = map_pool(placement, pool);
    let mut per_osd: HashMap<OsdId, u64> = HashMap::new();
    let mut undersized_pgs = 0;
    for shards in &mappings {
        let placed = shards.iter().flatten().count();
        if placed < pool.redundancy.shard_count() as usize {
            undersized_pgs += 1;
        }
        for osd in shards.iter().flatten() {
            *per_osd.entry(*osd).or_default() += 1;
        }
    }
    let mut osds = Vec::new();
    let mut hosts: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    let mut racks: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for (osd, weight) in placement.eligible_osds(pool) {
        let Some(info) = map.osd(osd) else { continue };
        let count = per_osd.get(&osd).copied().unwrap_or(0);
        osds.push((count, weight.as_f64()));
        for (bucket, name) in [(&mut hosts, &info.host), (&mut racks, &info.rack)] {
            let entry = bucket.entry(name).or_default();
            entry.0 += count;
            entry.1 += weight.as_f64();
        }
    }
    let collect = |b: BTreeMap<&str, (u64, f64)>| b.into_values().collect::<Vec<_>>();
    Distribution {
        pg_replicas: per_osd.values().sum(),
        undersized_pgs,
        per_osd: Stats::of(&osds),
        per_host: Stats::of(&collect(hosts)),
        per_rack: Stats::of(&collect(racks)),
    }
}

/// Data moved by one change to the map.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Movement {
    pub scenario: String,
    /// Shards whose OSD changed (replicated: OSDs new to the PG's set;
    /// erasure: positions given a different OSD).
    pub moved_replicas: u64,
    /// The least any placement must move: replicas on removed or outed OSDs,
    /// replicas landing on added ones, or the change in a reweighted OSD's
    /// count.
    pub optimal_replicas: u64,
    pub moved_pct: f64,
    /// `moved / optimal`; absent when nothing needed to move.
    pub ratio: Option<f64>,
}

/// Shards that changed between two mappings of the same PG.
#[must_use]
pub fn moved_shards(before: &[Shard], after: &[Shard], positional: bool) -> u64 {
    let moved = if positional {
        after
            .iter()
            .zip(before.iter().chain(std::iter::repeat(&None)))
            .filter(|(a, b)| a.is_some() && a != b)
            .count()
    } else {
        let old: HashSet<_> = before.iter().flatten().collect();
        after.iter().flatten().filter(|o| !old.contains(o)).count()
    };
    moved as u64
}

/// Runs the standard changes (out, add, remove, reweight of the first OSD,
/// its host and rack) against `pool` and reports the data each moves.
///
/// # Errors
/// [`MapError`] if the pool does not exist or the map has no OSDs.
pub fn movement_scenarios(map: &ClusterMap, pool_id: PoolId) -> Result<Vec<Movement>, MapError> {
    let pool = map
        .pool(pool_id)
        .ok_or_else(|| MapError::Pool {
            pool: pool_id.to_string(),
            why: "no such pool".into(),
        })?
        .clone();
    let Some(first) = map.osds.first().cloned() else {
        return Err(MapError::Pool {
            pool: pool.name.clone(),
            why: "the map has no OSDs".into(),
        });
    };
    let before = map_pool(&Placement::new(map), &pool);
    let host_osds: Vec<OsdInfo> = map
        .osds
        .iter()
        .filter(|o| o.host == first.host)
        .cloned()
        .collect();
    let next_id = map.osds.last().map_or(0, |o| o.id.0 + 1);
    let mut rows = Vec::new();
    let mut run = |name: String, change: &dyn Fn(&mut ClusterMap), optimal: Optimal| {
        let mut changed = map.clone();
        change(&mut changed);
        let after = map_pool(&Placement::new(&changed), &pool);
        rows.push(movement_row(name, &pool, &before, &after, &optimal));
    };
    let x = first.id;
    run(
        format!("mark {x} out"),
        &|m| m.osd_mut(x).into_iter().for_each(|o| o.is_in = false),
        Optimal::OnBefore(vec![x]),
    );
    let added = OsdInfo {
        id: OsdId(next_id),
        ..first.clone()
    };
    run(
        format!("add 1 osd to {}", first.host),
        &|m| m.upsert_osd(added.clone()),
        Optimal::OnAfter(vec![added.id]),
    );
    let new_host = unused_host_name(map);
    let new_osds: Vec<OsdInfo> = host_osds
        .iter()
        .zip(next_id..)
        .map(|(o, id)| OsdInfo {
            id: OsdId(id),
            host: new_host.clone(),
            ..o.clone()
        })
        .collect();
    run(
        format!("add host ({} osds) to {}", new_osds.len(), first.rack),
        &|m| new_osds.iter().for_each(|o| m.upsert_osd(o.clone())),
        Optimal::OnAfter(new_osds.iter().map(|o| o.id).collect()),
    );
    run(
        format!("remove {x}"),
        &|m| drop(m.remove_osd(x)),
        Optimal::OnBefore(vec![x]),
    );
    let host_ids: Vec<OsdId> = host_osds.iter().map(|o| o.id).collect();
    run(
        format!("remove {}", first.host),
        &|m| host_ids.iter().for_each(|&id| drop(m.remove_osd(id))),
        Optimal::OnBefore(host_ids.clone()),
    );
    run(
        format!("reweight {x} to 0.5x"),
        &|m| {
            if let Some(o) = m.osd_mut(x) {
                o.weight = Weight(o.weight.0 / 2);
            }
        },
        Optimal::CountChange(x),
    );
    Ok(rows)
}

enum Optimal {
    /// Every replica these OSDs held must move.
    OnBefore(Vec<OsdId>),
    /// Every replica these OSDs hold afterwards had to move there.
    OnAfter(Vec<OsdId>),
    /// The OSD's count changed by this much.
    CountChange(OsdId),
}

fn movement_row(
    scenario: String,
    pool: &Pool,
    before: &[Vec<Shard>],
    after: &[Vec<Shard>],
    optimal: &Optimal,
) -> Movement {
    let count = |mappings: &[Vec<Shard>], osds: &[OsdId]| -> u64 {
        mappings
            .iter()
            .flat_map(|m| m.iter().flatten())
            .filter(|o| osds.contains(o))
            .count() as u64
    };
    let optimal_replicas = match optimal {
        Optimal::OnBefore(osds) => count(before, osds),
        Optimal::OnAfter(osds) => count(after, osds),
        Optimal::CountChange(osd) => count(before, &[*osd]).abs_diff(count(after, &[*osd])),
    };
    let positional = pool.redundancy.is_positional();
    let moved_replicas: u64 = before
        .iter()
        .zip(after)
        .map(|(b, a)| moved_shards(b, a, positional))
        .sum();
    let total = u64::from(pool.pg_num) * u64::from(pool.redundancy.shard_count());
    #[allow(clippy::cast_precision_loss)]
    Movement {
        scenario,
        moved_replicas,
        optimal_replicas,
        moved_pct: 100.0 * moved_replicas as f64 / total.max(1) as f64,
        ratio: (optimal_replicas > 0).then(|| moved_replicas as f64 / optimal_replicas as f64),
    }
}

fn unused_host_name(map: &ClusterMap) -> String {
    let hosts: HashSet<&str> = map.osds.iter().map(|o| o.host.as_str()).collect();
    (hosts.len()..)
        .map(|i| format!("host{i}"))
        .find(|name| !hosts.contains(name.as_str()))
        .unwrap_or_else(|| "host-new".into())
}

//! Properties of placement on random clusters: determinism, distinct failure
//! domains, weight-proportional shares, minimal data movement on out / add /
//! remove / reweight, PG splitting, and the up/acting rules.

use cairn_placement::simulate::{SyntheticSpec, map_pool, moved_shards};
use cairn_placement::{
    ClusterMap, FailureDomain, OsdInfo, Placement, Pool, Redundancy, Shard, Weight,
};
use cairn_types::{OsdId, PgId, PoolId};
use proptest::prelude::*;
use std::collections::HashSet;

fn cluster(racks: u32, hosts: u32, osds_per_host: u32, weights: Vec<f64>) -> ClusterMap {
    SyntheticSpec {
        racks,
        hosts,
        osds_per_host,
        weights,
        classes: vec!["hdd".into()],
    }
    .build()
    .expect("valid synthetic cluster")
}

fn pool(redundancy: Redundancy, pg_num: u32, failure_domain: FailureDomain) -> Pool {
    Pool {
        id: PoolId(1),
        name: "p".into(),
        pg_num,
        pgp_num: pg_num,
        redundancy,
        failure_domain,
        device_class: None,
    }
}

fn with_pool(mut map: ClusterMap, pool: Pool) -> ClusterMap {
    map.upsert_pool(pool);
    map.validate().expect("valid map");
    map
}

fn redundancy() -> impl Strategy<Value = Redundancy> {
    prop_oneof![
        (1u32..=4).prop_map(|size| Redundancy::Replicated { size, min_size: 1 }),
        (1u32..=4, 1u32..=2).prop_map(|(k, m)| Redundancy::erasure(k, m)),
    ]
}

fn domain() -> impl Strategy<Value = FailureDomain> {
    prop_oneof![
        Just(FailureDomain::Osd),
        Just(FailureDomain::Host),
        Just(FailureDomain::Rack)
    ]
}

/// A random cluster with a pool it can satisfy: at least twice as many
/// failure domains as shards.
fn satisfiable() -> impl Strategy<Value = ClusterMap> {
    (
        1u32..=4,
        2u32..=12,
        1u32..=5,
        prop::collection::vec(prop_oneof![Just(1.0), Just(2.0), Just(0.5)], 1..3),
        redundancy(),
        domain(),
        64u32..=256,
    )
        .prop_filter_map(
            "too few failure domains",
            |(racks, hosts, per_host, weights, r, fd, pg_num)| {
                let racks = racks.min(hosts);
                let domains = match fd {
                    FailureDomain::Osd => hosts * per_host,
                    FailureDomain::Host => hosts,
                    FailureDomain::Rack => racks,
                };
                (domains >= 2 * r.shard_count()).then(|| {
                    with_pool(
                        cluster(racks, hosts, per_host, weights),
                        pool(r, pg_num, fd),
                    )
                })
            },
        )
}

fn the_pool(map: &ClusterMap) -> Pool {
    map.pools[0].clone()
}

fn domain_of(map: &ClusterMap, osd: OsdId, fd: FailureDomain) -> String {
    let o = map.osd(osd).expect("mapped OSD exists");
    match fd {
        FailureDomain::Osd => o.id.to_string(),
        FailureDomain::Host => o.host.clone(),
        FailureDomain::Rack => o.rack.clone(),
    }
}

fn largest_domain_share(map: &ClusterMap, fd: FailureDomain) -> f64 {
    let mut shares = std::collections::HashMap::new();
    for o in &map.osds {
        *shares.entry(domain_of(map, o.id, fd)).or_insert(0.0) += o.weight.as_f64();
    }
    let total: f64 = shares.values().sum();
    shares.values().fold(0.0f64, |a, &b| a.max(b)) / total
}

fn count_on(mappings: &[Vec<Shard>], osds: &[OsdId]) -> u64 {
    mappings
        .iter()
        .flatten()
        .flatten()
        .filter(|o| osds.contains(o))
        .count() as u64
}

fn total_moved(pool: &Pool, before: &[Vec<Shard>], after: &[Vec<Shard>]) -> u64 {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| moved_shards(b, a, pool.redundancy.is_positional()))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Same map, same answer: also after a binary round trip of the map.
    #[test]
    fn mapping_is_deterministic(map in satisfiable()) {
        let pool = the_pool(&map);
        let again = ClusterMap::decode(&map.encode().expect("encode")).expect("decode");
        let a = map_pool(&Placement::new(&map), &pool);
        let b = map_pool(&Placement::new(&again), &pool);
        prop_assert_eq!(a, b);
    }

    /// Every PG gets a full set of distinct, `in` OSDs in distinct failure
    /// domains.
    #[test]
    fn shards_are_in_distinct_failure_domains(map in satisfiable()) {
        let pool = the_pool(&map);
        for shards in map_pool(&Placement::new(&map), &pool) {
            let osds: Vec<OsdId> = shards.iter().flatten().copied().collect();
            prop_assert_eq!(osds.len() as u32, pool.redundancy.shard_count(), "undersized: {:?}", shards);
            let domains: HashSet<String> =
                osds.iter().map(|&o| domain_of(&map, o, pool.failure_domain)).collect();
            prop_assert_eq!(domains.len(), osds.len(), "shared failure domain: {:?}", shards);
            prop_assert!(osds.iter().all(|&o| map.osd(o).is_some_and(|i| i.is_in)));
        }
    }

    /// Marking an OSD out moves exactly the replicas it held: PGs without it
    /// do not change at all, and in replicated PGs only its own slot changes.
    #[test]
    fn out_moves_only_the_outed_osds_replicas(map in satisfiable(), pick in any::<prop::sample::Index>()) {
        let pool = the_pool(&map);
        let x = map.osds[pick.index(map.osds.len())].id;
        let before = map_pool(&Placement::new(&map), &pool);
        let mut changed = map.clone();
        changed.osd_mut(x).expect("osd").is_in = false;
        let after = map_pool(&Placement::new(&changed), &pool);
        for (b, a) in before.iter().zip(&after) {
            if !b.contains(&Some(x)) {
                prop_assert_eq!(b, a, "a PG without {} changed", x);
            } else if !pool.redundancy.is_positional() {
                prop_assert_eq!(moved_shards(b, a, false), 1, "{:?} -> {:?}", b, a);
                let kept: Vec<_> = b.iter().filter(|&&o| o != Some(x)).collect();
                let still: Vec<_> = a.iter().filter(|o| kept.contains(o)).collect();
                prop_assert_eq!(kept, still, "survivors reordered");
            }
        }
    }
}

/// Clusters large enough for movement to be measured, as in production.
fn large() -> impl Strategy<Value = ClusterMap> {
    (
        1u32..=5,
        prop_oneof![Just(60u32), Just(100)],
        prop_oneof![Just(4u32), Just(8)],
        prop_oneof![
            Just(Redundancy::Replicated {
                size: 3,
                min_size: 2
            }),
            Just(Redundancy::Replicated {
                size: 2,
                min_size: 1
            }),
            Just(Redundancy::erasure(4, 2))
        ],
        prop_oneof![
            Just(FailureDomain::Host),
            Just(FailureDomain::Osd),
            Just(FailureDomain::Rack)
        ],
        prop::collection::vec(prop_oneof![Just(1.0), Just(2.0), Just(4.0)], 1..3),
    )
        .prop_map(|(racks, hosts, per_host, r, fd, weights)| {
            // Rack domains need at least as many racks as shards.
            let racks = if fd == FailureDomain::Rack {
                racks.max(r.shard_count()) + 2
            } else {
                racks
            };
            with_pool(cluster(racks, hosts, per_host, weights), pool(r, 4096, fd))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Adding an OSD, adding a host, removing an OSD or reweighting one moves
    /// exactly the replicas the change requires in replicated pools (each PG
    /// swaps at most the changed OSD for one other). Erasure-coded positions
    /// are independent, as Ceph's `indep`, so a replaced shard can displace
    /// another shard whose failure domain it now takes: a cost that grows
    /// with the largest failure domain's share of the weight (about 10% with
    /// 100 equal hosts and 4+2, about 2× with 8 racks).
    #[test]
    fn growth_removal_and_reweight_move_the_optimum(map in large(), change in 0u8..5) {
        let pool = the_pool(&map);
        let before = map_pool(&Placement::new(&map), &pool);
        let mut changed = map.clone();
        let next = map.osds.last().expect("osds").id.0 + 1;
        let first = map.osds[0].clone();
        enum Need { After(Vec<OsdId>), Before(OsdId), Delta(OsdId) }
        let need = match change {
            0 => {
                changed.upsert_osd(OsdInfo { id: OsdId(next), ..first.clone() });
                Need::After(vec![OsdId(next)])
            }
            1 => {
                let ids: Vec<OsdId> = (next..next + 4).map(OsdId).collect();
                for &id in &ids {
                    changed.upsert_osd(OsdInfo { id, host: "newhost".into(), ..first.clone() });
                }
                Need::After(ids)
            }
            2 => {
                changed.osd_mut(first.id).expect("osd").weight = Weight(first.weight.0 * 2);
                Need::Delta(first.id)
            }
            3 => {
                changed.osd_mut(first.id).expect("osd").weight = Weight(first.weight.0 / 2);
                Need::Delta(first.id)
            }
            _ => {
                changed.remove_osd(first.id);
                Need::Before(first.id)
            }
        };
        let after = map_pool(&Placement::new(&changed), &pool);
        let optimal = match need {
            Need::After(ids) => count_on(&after, &ids),
            Need::Before(x) => count_on(&before, &[x]),
            Need::Delta(x) => count_on(&before, &[x]).abs_diff(count_on(&after, &[x])),
        };
        let moved = total_moved(&pool, &before, &after);
        if pool.redundancy.is_positional() {
            // A shard that lands in a failure domain another shard of the PG
            // already uses displaces it with probability about
            // (n - 1) × (that domain's weight share); allow twice that, plus
            // four standard deviations of a count that small.
            let n = f64::from(pool.redundancy.shard_count());
            let bound = 1.0 + 2.0 * (n - 1.0) * largest_domain_share(&map, pool.failure_domain);
            let slack = 4.0 * (optimal as f64).sqrt() + 3.0;
            prop_assert!(
                moved as f64 <= bound * optimal as f64 + slack,
                "change {change}: moved {moved}, optimal {optimal}, bound {bound:.3}"
            );
        } else {
            prop_assert_eq!(moved, optimal, "change {}", change);
        }
    }
}

/// A 2× weight OSD gets 2× the PGs. 30 OSDs of weight 1 and 30 of weight 2,
/// 60,000 single-replica PGs: the heavy group expects 40,000 and the light
/// 20,000; the heavy/light ratio has a standard deviation of about 0.025,
/// so 2 ± 0.1 is a 4σ bound. Per OSD, each count must be within 6σ of
/// its expectation (σ ≈ √expected).
#[test]
fn pg_share_follows_weight() {
    let mut map = cluster(1, 60, 1, vec![1.0, 2.0]);
    map = with_pool(
        map,
        pool(
            Redundancy::Replicated {
                size: 1,
                min_size: 1,
            },
            60_000,
            FailureDomain::Osd,
        ),
    );
    let pool = the_pool(&map);
    let mappings = map_pool(&Placement::new(&map), &pool);
    let mut light = 0.0;
    let mut heavy = 0.0;
    for osd in &map.osds {
        let count = count_on(&mappings, &[osd.id]) as f64;
        let weight = osd.weight.as_f64();
        let expected = 60_000.0 * weight / 90.0;
        assert!(
            (count - expected).abs() <= 6.0 * expected.sqrt(),
            "{} (weight {weight}) has {count}, expected {expected:.0}",
            osd.id
        );
        if weight > 1.5 {
            heavy += count;
        } else {
            light += count;
        }
    }
    let ratio = heavy / light;
    assert!((1.9..=2.1).contains(&ratio), "heavy/light = {ratio}");
}

/// Raising `pg_num` splits PGs: every object stays in its PG or moves to a
/// child of it; with `pgp_num` unchanged the children stay on the parent's
/// OSDs, and raising `pgp_num` then moves only children.
#[test]
fn pg_num_splits_and_pgp_num_moves_children() {
    let map = with_pool(
        cluster(1, 12, 2, vec![1.0]),
        pool(
            Redundancy::Replicated {
                size: 3,
                min_size: 2,
            },
            48,
            FailureDomain::Host,
        ),
    );
    let old = the_pool(&map);
    let mut split = old.clone();
    split.pg_num = 100;
    split.pgp_num = 48;
    let mut grown = map.clone();
    grown.upsert_pool(split.clone());
    let before = Placement::new(&map);
    let after = Placement::new(&grown);
    for i in 0..5000u32 {
        let name = format!("object-{i}");
        let p0 = cairn_placement::hash::object_pg(old.id, old.pg_num, name.as_bytes());
        let p1 = cairn_placement::hash::object_pg(old.id, split.pg_num, name.as_bytes());
        if p1 != p0 {
            assert!(
                p1.seed >= old.pg_num,
                "{name} moved from {p0} to non-child {p1}"
            );
            assert_eq!(
                cairn_placement::hash::stable_mod(p1.seed, old.pg_num),
                p0.seed,
                "{p1} is not a child of {p0}"
            );
        }
        // The object's OSDs do not change while pgp_num stays.
        assert_eq!(before.raw(&old, p0), after.raw(&split, p1), "{name}");
    }
    // Raising pgp_num moves only the children (seeds >= 48).
    let mut placed = grown.clone();
    let mut full = split.clone();
    full.pgp_num = 100;
    placed.upsert_pool(full.clone());
    let last = Placement::new(&placed);
    for seed in 0..old.pg_num {
        let pg = PgId::new(old.id, seed);
        assert_eq!(
            after.raw(&split, pg),
            last.raw(&full, pg),
            "parent {pg} moved"
        );
    }
}

/// Frozen mappings: if one changes, every cluster reshuffles.
#[test]
fn golden_mappings() {
    let replicated = with_pool(
        cluster(2, 6, 2, vec![1.0, 2.0]),
        pool(
            Redundancy::Replicated {
                size: 3,
                min_size: 2,
            },
            64,
            FailureDomain::Host,
        ),
    );
    let placement = Placement::new(&replicated);
    let shards = |pg: u32| -> Vec<u32> {
        placement
            .map_pg(PgId::new(PoolId(1), pg))
            .expect("pg")
            .raw
            .iter()
            .map(|s| s.expect("replicated has no holes").0)
            .collect()
    };
    assert_eq!(
        [shards(0), shards(1), shards(63)],
        [vec![11, 7, 2], vec![11, 0, 6], vec![7, 10, 4]]
    );
    let mut ec = replicated.clone();
    ec.upsert_pool(pool(Redundancy::erasure(2, 2), 64, FailureDomain::Osd));
    let placement = Placement::new(&ec);
    let positions = |pg: u32| -> Vec<u32> {
        placement
            .map_pg(PgId::new(PoolId(1), pg))
            .expect("pg")
            .raw
            .iter()
            .map(|s| s.map_or(u32::MAX, |o| o.0))
            .collect()
    };
    assert_eq!(
        [positions(0), positions(9)],
        [vec![11, 7, 2, 8], vec![2, 11, 0, 4]]
    );
}

/// Down OSDs leave the up set (replicated) or leave a hole (erasure);
/// pg_temp replaces the acting set; the primary is the first acting OSD.
#[test]
fn up_and_acting_sets() {
    let mut map = with_pool(
        cluster(1, 8, 1, vec![1.0]),
        pool(
            Redundancy::Replicated {
                size: 3,
                min_size: 2,
            },
            16,
            FailureDomain::Host,
        ),
    );
    let mut ec = pool(Redundancy::erasure(2, 1), 16, FailureDomain::Host);
    ec.id = PoolId(2);
    ec.name = "ec".into();
    map.upsert_pool(ec);
    let pg = PgId::new(PoolId(1), 3);
    let clean = Placement::new(&map).map_pg(pg).expect("pg");
    // An erasure-coded PG sharing no OSD with `pg`, so each test sees one
    // down OSD.
    let (ec_pg, ec_clean) = (0..16)
        .map(|seed| {
            let ec_pg = PgId::new(PoolId(2), seed);
            (ec_pg, Placement::new(&map).map_pg(ec_pg).expect("pg"))
        })
        .find(|(_, m)| m.raw.iter().all(|o| !clean.raw.contains(o)))
        .expect("a disjoint erasure-coded PG");
    let victim = clean.raw[0].expect("osd");
    let ec_victim = ec_clean.raw[1].expect("osd");
    map.osd_mut(victim).expect("osd").up = false;
    map.osd_mut(ec_victim).expect("osd").up = false;
    let placement = Placement::new(&map);
    let degraded = placement.map_pg(pg).expect("pg");
    assert_eq!(degraded.raw, clean.raw, "down does not move data");
    assert_eq!(degraded.up, clean.raw[1..].to_vec());
    assert_eq!(degraded.primary, clean.raw[1]);
    let ec_degraded = placement.map_pg(ec_pg).expect("pg");
    assert_eq!(
        ec_degraded.up[1], None,
        "erasure keeps the position as a hole"
    );
    assert_eq!(ec_degraded.up[0], ec_clean.raw[0]);
    assert_eq!(ec_degraded.up[2], ec_clean.raw[2]);

    let temp = vec![OsdId(7), OsdId(6)];
    map.pg_temp.insert(pg, temp.clone());
    map.validate().expect("valid pg_temp");
    let overridden = Placement::new(&map).map_pg(pg).expect("pg");
    assert_eq!(
        overridden.acting,
        temp.iter().copied().map(Some).collect::<Vec<_>>()
    );
    assert_eq!(overridden.primary, Some(OsdId(7)));
    assert_eq!(
        overridden.up, degraded.up,
        "pg_temp does not change the up set"
    );

    // An erasure-coded PG's temporary acting set may have holes: the
    // position serves no OSD, and the primary is the first that does.
    let a = ec_clean.raw[1].expect("osd");
    let b = ec_clean.raw[2].expect("osd");
    map.pg_temp
        .insert(ec_pg, vec![cairn_placement::PG_TEMP_HOLE, a, b]);
    map.osd_mut(ec_victim).expect("osd").up = true;
    map.validate().expect("a hole in an erasure-coded pg_temp");
    let holed = Placement::new(&map).map_pg(ec_pg).expect("pg");
    assert_eq!(holed.acting, vec![None, Some(a), Some(b)]);
    assert_eq!(holed.primary, Some(a));
    assert_eq!(holed.up, ec_clean.raw, "the up set keeps the position");
    // Not in a replicated PG's, nor holes alone.
    let mut bad = map.clone();
    bad.pg_temp
        .insert(pg, vec![OsdId(7), cairn_placement::PG_TEMP_HOLE]);
    assert!(bad.validate().is_err(), "a hole in a replicated pg_temp");
    let mut bad = map.clone();
    bad.pg_temp
        .insert(ec_pg, vec![cairn_placement::PG_TEMP_HOLE; 3]);
    assert!(bad.validate().is_err(), "an acting set of holes");
}

/// Size 3 across hosts on two hosts: the pool check names the problem, and
/// mapping still returns what it can without panicking.
#[test]
fn unsatisfiable_rule_is_reported_and_maps_undersized() {
    let map = with_pool(
        cluster(1, 2, 3, vec![1.0]),
        pool(
            Redundancy::Replicated {
                size: 3,
                min_size: 2,
            },
            32,
            FailureDomain::Host,
        ),
    );
    let pool = the_pool(&map);
    let placement = Placement::new(&map);
    let error = placement.check_pool(&pool).expect_err("unsatisfiable");
    assert_eq!(
        error.to_string(),
        "pool \"p\" needs 3 distinct hosts with OSDs in, but the map has 2"
    );
    for shards in map_pool(&placement, &pool) {
        assert_eq!(shards.len(), 2, "as many OSDs as the hierarchy allows");
    }
}

/// A pool restricted to a device class only lands on that class.
#[test]
fn device_class_is_honoured() {
    let mut map = SyntheticSpec {
        racks: 1,
        hosts: 10,
        osds_per_host: 4,
        weights: vec![1.0],
        classes: vec!["hdd".into(), "hdd".into(), "hdd".into(), "ssd".into()],
    }
    .build()
    .expect("map");
    let mut fast = pool(
        Redundancy::Replicated {
            size: 3,
            min_size: 2,
        },
        256,
        FailureDomain::Host,
    );
    fast.device_class = Some("ssd".into());
    map.upsert_pool(fast.clone());
    for shards in map_pool(&Placement::new(&map), &fast) {
        assert_eq!(shards.len(), 3);
        for osd in shards.iter().flatten() {
            assert_eq!(map.osd(*osd).expect("osd").device_class, "ssd");
        }
    }
    fast.device_class = Some("nvme".into());
    assert!(Placement::new(&map).check_pool(&fast).is_err());
}

/// The balancer's remaps, re-applied by a fresh `Placement`, give the
/// distribution it reports: max÷mean at the reachable target, with the
/// least possible number of moves, and every PG still in distinct failure
/// domains.
#[test]
fn balancer_reaches_its_target_with_the_fewest_moves() {
    use cairn_placement::balance::{BalanceOptions, balance};
    use cairn_placement::simulate::distribution;
    for (redundancy, fd, pg_num) in [
        (
            Redundancy::Replicated {
                size: 3,
                min_size: 2,
            },
            FailureDomain::Host,
            2048,
        ),
        (Redundancy::erasure(4, 2), FailureDomain::Host, 1024),
        (
            Redundancy::Replicated {
                size: 2,
                min_size: 1,
            },
            FailureDomain::Osd,
            512,
        ),
    ] {
        let mut map = with_pool(
            cluster(4, 40, 6, vec![1.0, 2.0]),
            pool(redundancy, pg_num, fd),
        );
        let before = distribution(&map, &Placement::new(&map), &the_pool(&map));
        let results = balance(&mut map, &BalanceOptions::default());
        map.validate().expect("balanced map is valid");
        let result = &results[0];
        let placement = Placement::new(&map);
        let pool = the_pool(&map);
        let after = distribution(&map, &placement, &pool);
        assert!((result.max_over_mean_before - before.per_osd.max_over_mean).abs() < 1e-9);
        assert!(
            (result.max_over_mean_after - after.per_osd.max_over_mean).abs() < 1e-9,
            "{result:?}"
        );
        assert!(
            after.per_osd.max_over_mean <= result.max_over_mean_reachable + 1e-9,
            "{result:?}"
        );
        assert!(after.per_osd.max_over_mean < before.per_osd.max_over_mean);
        assert_eq!(result.moves, result.moves_lower_bound, "{result:?}");
        assert_eq!(after.pg_replicas, before.pg_replicas);
        for shards in map_pool(&placement, &pool) {
            let osds: Vec<OsdId> = shards.iter().flatten().copied().collect();
            let domains: HashSet<String> = osds.iter().map(|&o| domain_of(&map, o, fd)).collect();
            assert_eq!(
                domains.len(),
                osds.len(),
                "balancer broke failure domains: {shards:?}"
            );
        }
    }
}

//! What a run must show after healing: every PG `active+clean` on the
//! monitor's newest map, the copies of each PG identical (erasure-coded:
//! every position holding its own shard of every object, the shards of one
//! version agreeing and forming one codeword), no stray copies left, and a
//! linearizable history.

use crate::client::History;
use crate::linearizability::{Limits, ObjectFailure, check_objects, describe};
use crate::osd::SimOsd;
use crate::store::SimStore;
use bytes::Bytes;
use cairn_ec::StripeLayout;
use cairn_osd::ObjectState;
use cairn_osd::daemon::read_object_state;
use cairn_osd::ec::{EC_META_XATTR, ShardMeta};
use cairn_placement::{ClusterMap, Placement, Redundancy};
use cairn_store::{CollectionId, ObjectKey, ObjectStore};
use cairn_types::{OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet};

/// Where placement puts one PG.
#[derive(Clone, Debug)]
pub struct PgPlacement {
    pub pg: PgId,
    pub acting: Vec<OsdId>,
    pub up: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// Erasure-coded: the layout, and the OSD at each position (`None`: a
    /// hole).
    pub ec: Option<(StripeLayout, Vec<Option<OsdId>>)>,
}

/// Every PG of the pools of `map`, placed.
#[must_use]
pub fn placements(map: &ClusterMap) -> Vec<PgPlacement> {
    let placement = Placement::new(map);
    let mut out = Vec::new();
    for pool in &map.pools {
        let layout = match pool.redundancy {
            Redundancy::Replicated { .. } => None,
            Redundancy::Erasure {
                k, m, stripe_unit, ..
            } => match StripeLayout::new(k, m, u64::from(stripe_unit)) {
                Ok(layout) => Some(layout),
                Err(_) => continue,
            },
        };
        for pg in pool.pgs() {
            let Ok(mapping) = placement.map_pg(pg) else {
                continue;
            };
            let flat =
                |shards: &[cairn_placement::Shard]| shards.iter().flatten().copied().collect();
            out.push(PgPlacement {
                pg,
                acting: flat(&mapping.acting),
                up: flat(&mapping.up),
                primary: mapping.primary,
                ec: layout.map(|layout| (layout, mapping.acting.clone())),
            });
        }
    }
    out
}

/// The PGs that are not `active+clean` on `map`, with why.
#[must_use]
pub fn unclean_pgs(map: &ClusterMap, osds: &BTreeMap<OsdId, SimOsd>) -> Vec<(PgId, String)> {
    let mut out = Vec::new();
    for PgPlacement {
        pg,
        acting,
        up,
        primary,
        ..
    } in placements(map)
    {
        let Some(primary) = primary else {
            out.push((pg, "no primary".into()));
            continue;
        };
        let Some(process) = osds.get(&primary).and_then(|o| o.process.as_ref()) else {
            out.push((pg, format!("primary {primary} is not running")));
            continue;
        };
        let Some(slot) = process.pgs.get(&pg) else {
            out.push((pg, format!("primary {primary} holds no copy")));
            continue;
        };
        let interval = slot.pg.interval();
        if interval.acting != acting || interval.up != up {
            out.push((
                pg,
                format!(
                    "{primary} at epoch {} sees acting {:?} up {:?}, the map says {acting:?} {up:?}",
                    process.view.epoch().0,
                    interval.acting,
                    interval.up
                ),
            ));
            continue;
        }
        let state = slot.pg.state_name();
        // A scheduled scrub may be running on a clean PG, as in Ceph.
        let settled = state
            .strip_suffix("+scrubbing+deep")
            .or_else(|| state.strip_suffix("+scrubbing"))
            .unwrap_or(&state);
        if settled != "active+clean" {
            let why = slot.pg.blocked_reason().unwrap_or_default();
            out.push((pg, format!("{state} on {primary} {why}")));
        }
    }
    out
}

/// Every object of a collection with its whole state.
fn dump(
    store: &SimStore,
    collection: CollectionId,
) -> Result<BTreeMap<Bytes, ObjectState>, String> {
    let mut objects = BTreeMap::new();
    let mut after: Option<ObjectKey> = None;
    loop {
        let page = cairn_osd::daemon::list_objects(store, collection, after.as_ref(), 256)
            .map_err(|e| e.to_string())?;
        for key in &page.keys {
            let state =
                read_object_state(store, collection, &key.name).map_err(|e| e.to_string())?;
            if let Some(state) = state {
                objects.insert(key.name.clone(), state);
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(objects),
        }
    }
}

/// Differences between the copies of each PG on its acting set, and copies
/// left on OSDs outside it.
#[must_use]
pub fn divergence(map: &ClusterMap, osds: &BTreeMap<OsdId, SimOsd>) -> Vec<String> {
    let mut failures = Vec::new();
    for PgPlacement {
        pg,
        acting,
        primary,
        ec,
        ..
    } in placements(map)
    {
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let Some(primary) = primary else { continue };
        if let Some((layout, positions)) = &ec {
            failures.extend(shard_divergence(pg, layout, positions, osds));
            failures.extend(lagging(pg, primary, &acting, osds));
            failures.extend(strays(pg, &acting, osds));
            failures.extend(not_rolled_forward(pg, &acting, osds));
            continue;
        }
        let Some(reference) = osds.get(&primary).map(|o| dump(&o.store, collection)) else {
            continue;
        };
        let reference = match reference {
            Ok(objects) => objects,
            Err(error) => {
                failures.push(format!(
                    "{pg}: primary {primary} cannot list its copy: {error}"
                ));
                continue;
            }
        };
        for osd in acting.iter().filter(|o| **o != primary) {
            let Some(sim_osd) = osds.get(osd) else {
                continue;
            };
            match dump(&sim_osd.store, collection) {
                Ok(objects) if objects == reference => {}
                Ok(objects) => failures.push(format!(
                    "{pg}: {osd}'s copy differs from primary {primary}'s: {}",
                    diff(&reference, &objects)
                )),
                Err(error) => failures.push(format!("{pg}: {osd} cannot list its copy: {error}")),
            }
        }
        failures.extend(lagging(pg, primary, &acting, osds));
        failures.extend(strays(pg, &acting, osds));
    }
    failures
}

/// The acting OSDs whose PG log ends elsewhere than the primary's.
fn lagging(
    pg: PgId,
    primary: OsdId,
    acting: &[OsdId],
    osds: &BTreeMap<OsdId, SimOsd>,
) -> Vec<String> {
    let last_update = |osd: OsdId| {
        osds.get(&osd)
            .and_then(|o| o.process.as_ref())
            .and_then(|p| p.pgs.get(&pg))
            .map(|slot| slot.pg.last_update())
    };
    acting
        .iter()
        .filter(|o| **o != primary && last_update(**o) != last_update(primary))
        .map(|osd| {
            format!(
                "{pg}: {osd} is at {:?}, primary {primary} at {:?}",
                last_update(*osd),
                last_update(primary)
            )
        })
        .collect()
}

/// Copies of `pg` left on OSDs outside its acting set.
/// Erasure coding: the roll-back records and stashes an acting OSD still
/// keeps. A PG idle for the check's quiet time has rolled every write
/// forward (its primary sends `RollForward` once idle), so none may be
/// left: they would take space for good.
fn not_rolled_forward(pg: PgId, acting: &[OsdId], osds: &BTreeMap<OsdId, SimOsd>) -> Vec<String> {
    let collection = CollectionId::pg(pg.pool.0, pg.seed);
    let mut failures = Vec::new();
    for osd in acting {
        let Some(sim_osd) = osds.get(osd) else {
            continue;
        };
        let records = sim_osd
            .store
            .meta_range(collection, None, 100_000)
            .map(|entries| {
                entries
                    .iter()
                    .filter(|(k, _)| k.starts_with(cairn_osd::undo::UNDO_KEY_PREFIX))
                    .count()
            })
            .unwrap_or(0);
        let mut stashes = 0;
        let mut after: Option<ObjectKey> = None;
        while let Ok(page) = sim_osd.store.list(collection, after.as_ref(), 256) {
            stashes += page
                .keys
                .iter()
                .filter(|k| cairn_osd::undo::is_internal(&k.name))
                .count();
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        if records > 0 || stashes > 0 {
            failures.push(format!(
                "{pg}: {osd} keeps {records} roll-back records and {stashes} stashes of writes \
                 long committed"
            ));
        }
    }
    failures
}

fn strays(pg: PgId, acting: &[OsdId], osds: &BTreeMap<OsdId, SimOsd>) -> Vec<String> {
    let collection = CollectionId::pg(pg.pool.0, pg.seed);
    osds.iter()
        .filter(|(id, sim_osd)| {
            !acting.contains(id)
                && sim_osd
                    .store
                    .collections()
                    .is_ok_and(|c| c.contains(&collection))
        })
        .map(|(id, _)| format!("{pg}: stray copy left on {id} (acting {acting:?})"))
        .collect()
}

/// One shard of an object as a position's OSD stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StoredShard {
    version: u64,
    meta: Option<ShardMeta>,
    /// The client's xattrs (the shard metadata apart).
    xattrs: BTreeMap<Bytes, Bytes>,
    data: Bytes,
}

/// Every object of one OSD's shard of a PG, each read with its checksums
/// verified.
fn dump_shards(
    store: &SimStore,
    collection: CollectionId,
) -> Result<BTreeMap<Bytes, StoredShard>, String> {
    let mut objects = BTreeMap::new();
    let mut after: Option<ObjectKey> = None;
    loop {
        let page = cairn_osd::daemon::list_objects(store, collection, after.as_ref(), 256)
            .map_err(|e| e.to_string())?;
        for key in &page.keys {
            let name = String::from_utf8_lossy(&key.name).into_owned();
            let stat = store
                .stat(collection, key)
                .map_err(|e| format!("{name}: {e}"))?;
            let mut xattrs = store
                .xattrs(collection, key)
                .map_err(|e| format!("{name}: {e}"))?;
            let meta = xattrs
                .remove(EC_META_XATTR)
                .map(|m| ShardMeta::decode(&m))
                .transpose()
                .map_err(|e| format!("{name}: shard metadata: {e}"))?;
            let data = store
                .read(collection, key, cairn_store::ReadOptions::default())
                .map_err(|e| format!("{name}: {e}"))?;
            let shard = StoredShard {
                version: stat.version,
                meta,
                xattrs,
                data,
            };
            objects.insert(key.name.clone(), shard);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(objects),
        }
    }
}

/// What is wrong with the shards of an erasure-coded PG: a position with
/// no OSD or an unreadable shard, objects some positions lack, and for
/// each object shards of other versions, xattrs, sizes or chunks, a shard
/// holding another position's bytes, of the wrong length or failing its
/// recorded crc32c, or parity that is not the code of the data shards.
fn shard_divergence(
    pg: PgId,
    layout: &StripeLayout,
    positions: &[Option<OsdId>],
    osds: &BTreeMap<OsdId, SimOsd>,
) -> Vec<String> {
    let collection = CollectionId::pg(pg.pool.0, pg.seed);
    let mut failures = Vec::new();
    let mut shards: Vec<BTreeMap<Bytes, StoredShard>> = Vec::with_capacity(positions.len());
    for (position, osd) in positions.iter().enumerate() {
        let Some(osd) = osd else {
            failures.push(format!("{pg}: position {position} has no OSD"));
            return failures;
        };
        let Some(sim_osd) = osds.get(osd) else {
            failures.push(format!("{pg}: position {position}: no {osd}"));
            return failures;
        };
        match dump_shards(&sim_osd.store, collection) {
            Ok(objects) => shards.push(objects),
            Err(error) => {
                failures.push(format!(
                    "{pg}: {osd} (position {position}) cannot read its shard: {error}"
                ));
                return failures;
            }
        }
    }
    let names: BTreeSet<&Bytes> = shards.iter().flat_map(BTreeMap::keys).collect();
    for name in names {
        let text = String::from_utf8_lossy(name);
        let of_object: Vec<Option<&StoredShard>> = shards.iter().map(|s| s.get(name)).collect();
        if let Some(lacking) = of_object.iter().position(Option::is_none) {
            failures.push(format!(
                "{pg}: {text}: position {lacking} ({:?}) lacks it, others hold {}",
                positions[lacking],
                describe_shards(&of_object)
            ));
            continue;
        }
        let of_object: Vec<&StoredShard> = of_object.into_iter().flatten().collect();
        if let Err(why) = one_codeword(layout, &of_object) {
            failures.push(format!(
                "{pg}: {text}: shards disagree: {why}; {}",
                describe_shards(&of_object.iter().map(|s| Some(*s)).collect::<Vec<_>>())
            ));
        }
    }
    failures
}

fn describe_shards(shards: &[Option<&StoredShard>]) -> String {
    let parts: Vec<String> = shards
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            None => format!("{i}: absent"),
            Some(s) => format!(
                "{i}: v{} {:?} {} bytes, {} xattrs",
                s.version,
                s.meta.map(|m| (m.shard, m.size, m.chunk)),
                s.data.len(),
                s.xattrs.len()
            ),
        })
        .collect();
    parts.join("; ")
}

/// Whether the shards of one object (in position order) are one version
/// of it: the same version, xattrs, size and chunk, each position's own
/// shard of the right length and recorded checksum, and the parity the
/// code makes of the data shards.
fn one_codeword(layout: &StripeLayout, shards: &[&StoredShard]) -> Result<(), String> {
    let first = shards.first().ok_or("no shards")?;
    for (i, shard) in shards.iter().enumerate() {
        if shard.version != first.version || shard.xattrs != first.xattrs {
            return Err(format!("position {i}: another version or xattrs"));
        }
        let same_shape =
            shard.meta.map(|m| (m.size, m.chunk)) == first.meta.map(|m| (m.size, m.chunk));
        if !same_shape {
            return Err(format!("position {i}: another size or chunk"));
        }
        if let Some(meta) = shard.meta {
            if meta.shard as usize != i {
                return Err(format!("position {i} holds shard {}", meta.shard));
            }
            let want = layout.shard_len(meta.chunk, meta.size, meta.shard);
            if shard.data.len() as u64 != want {
                return Err(format!(
                    "position {i}: {} bytes, its shard has {want}",
                    shard.data.len()
                ));
            }
            if let Some(crc) = meta.crc
                && cairn_types::crc::crc32c(&shard.data) != crc
            {
                return Err(format!("position {i}: bytes fail their recorded crc32c"));
            }
        } else if !shard.data.is_empty() {
            return Err(format!("position {i}: data without shard metadata"));
        }
    }
    let Some(meta) = first.meta else {
        return Ok(());
    };
    let codec = cairn_osd::ec::codec_for(layout.k, layout.m)?;
    let k = layout.k as usize;
    let mut rebuilt: Vec<Option<Vec<u8>>> = shards
        .iter()
        .enumerate()
        .map(|(i, s)| (i < k).then(|| s.data.to_vec()))
        .collect();
    cairn_ec::object::rebuild(layout, &*codec, meta.chunk, meta.size, &mut rebuilt)
        .map_err(|e| format!("parity not rebuilt from the data shards: {e}"))?;
    for (i, (shard, parity)) in shards.iter().zip(&rebuilt).enumerate().skip(k) {
        if parity.as_deref() != Some(&shard.data[..]) {
            return Err(format!(
                "position {i}: parity is not the code of the data shards"
            ));
        }
    }
    Ok(())
}

fn diff(a: &BTreeMap<Bytes, ObjectState>, b: &BTreeMap<Bytes, ObjectState>) -> String {
    let show = |s: Option<&ObjectState>| {
        s.map_or("absent".to_owned(), |s| {
            format!(
                "v{} {:?} xattrs {} omap {}",
                s.version,
                String::from_utf8_lossy(&s.data),
                s.xattrs.len(),
                s.omap.len()
            )
        })
    };
    let mut parts = Vec::new();
    for name in a.keys().chain(b.keys()) {
        if a.get(name) != b.get(name) && parts.len() < 6 {
            let part = format!(
                "{}: {} vs {}",
                String::from_utf8_lossy(name),
                show(a.get(name)),
                show(b.get(name))
            );
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
    }
    parts.join("; ")
}

/// The objects whose histories are not linearizable (or could not be
/// decided), each with an explanation.
#[must_use]
pub fn linearizability(history: &History, limits: &Limits) -> Vec<(Bytes, String)> {
    let by_object = history.by_object();
    let mut failures = Vec::new();
    for (object, failure) in check_objects(&by_object, limits) {
        let ops = &by_object[&object];
        let text = match failure {
            ObjectFailure::Undecided(error) => {
                if std::env::var_os("CAIRN_SIM_DUMP_UNDECIDED").is_some() {
                    for op in ops {
                        println!("HIST {}", describe(op));
                    }
                }
                format!("undecided: {error}")
            }
            ObjectFailure::NotLinearizable(why) => {
                let mut lines = vec![format!(
                    "not linearizable ({} operations); the longest legal prefix has {}, ending:",
                    ops.len(),
                    why.prefix.len()
                )];
                let tail = why.prefix.len().saturating_sub(8);
                for i in &why.prefix[tail..] {
                    lines.push(format!("    {}", describe(&ops[*i])));
                }
                lines.push(format!("  state after it: {}", why.states.join(" | ")));
                lines.push("  and none of these can come next:".into());
                for i in why.rest.iter().take(8) {
                    lines.push(format!("    {}", describe(&ops[*i])));
                }
                lines.join("\n")
            }
        };
        failures.push((object, text));
    }
    failures
}

/// What every OSD holds of `pg`, for failure reports: its PG info, log
/// head and tail, missing objects and objects with versions.
#[must_use]
pub fn describe_copies(pg: PgId, osds: &BTreeMap<OsdId, SimOsd>) -> Vec<String> {
    let collection = CollectionId::pg(pg.pool.0, pg.seed);
    let mut lines = Vec::new();
    for (id, osd) in osds {
        let holds = osd
            .store
            .collections()
            .is_ok_and(|c| c.contains(&collection));
        if !holds {
            continue;
        }
        let stored = match cairn_osd::daemon::load_pg(&osd.store, collection) {
            Ok(stored) => stored,
            Err(error) => {
                lines.push(format!("{id}: cannot load {pg}: {error}"));
                continue;
            }
        };
        let versions = |entries: &[cairn_osd::LogEntry]| -> Vec<String> {
            entries
                .iter()
                .map(|e| format!("{}:{}", e.version, String::from_utf8_lossy(&e.object)))
                .collect()
        };
        let tail_from = stored.log.len().saturating_sub(4);
        // By stat, not a verified read: a rotten copy still shows (a read
        // error here once made a full copy look empty).
        let mut objects: Vec<String> = Vec::new();
        if let Ok(page) = osd.store.list(collection, None, 1_024) {
            for key in &page.keys {
                if let Ok(stat) = osd.store.stat(collection, key) {
                    let rotten = if osd.store.is_rotten(collection, key) {
                        " (rotten)"
                    } else {
                        ""
                    };
                    objects.push(format!(
                        "{}@v{}{rotten}",
                        String::from_utf8_lossy(&key.name),
                        stat.version
                    ));
                }
            }
        }
        let missing: Vec<String> = stored
            .missing
            .iter()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect();
        let state = osd.process.as_ref().and_then(|p| p.pgs.get(&pg)).map_or(
            "no core".to_owned(),
            |slot| {
                format!(
                    "{} interval e{} acting {:?}",
                    slot.pg.state_name(),
                    slot.pg.interval().epoch_started.0,
                    slot.pg.interval().acting
                )
            },
        );
        lines.push(format!(
            "{id} holds {pg} ({state}): info {:?}, {} log entries, first {:?}, last {:?}, missing {missing:?}, objects {objects:?}",
            stored.info,
            stored.log.len(),
            versions(&stored.log[..stored.log.len().min(2)]),
            versions(&stored.log[tail_from..]),
        ));
    }
    lines
}

/// Data damage the simulator injected (bit flips, torn and misdirected
/// writes, PG copies lost to damaged metadata): by (object, the version
/// the damaged copy held then), the OSDs whose copy was damaged.
pub type Rotted = BTreeMap<(Bytes, u64), BTreeSet<OsdId>>;

/// An object a PG cannot recover, with the proof that a double fault (not
/// a bug) destroyed every copy of the version it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostObject {
    pub pg: PgId,
    pub object: Bytes,
    pub version: u64,
    pub proof: String,
}

/// Proves that every PG left unclean is so only because objects are
/// unfound, and that each unfound object was lost to a double fault: no
/// OSD holds a sound copy of the version the PG's log needs, and every
/// OSD whose store ever held that version durably and sound (recorded at
/// each sync, [`SimOsd::sound_held`]) had exactly that copy hit by
/// injected data damage (bit rot, a torn or misdirected write, or its PG
/// copy's metadata damaged and the copy reset). (If no OSD ever held it
/// sound, the write was applied
/// only to copies already rotten: a partial write onto rotten data, while
/// the PG's other copies were away: the rot and the other copies' absence
/// are the two faults.) A sound copy that vanished otherwise is a bug, and
/// the answer is `Err` with why.
///
/// # Errors
/// Why the unclean PGs are not explained by double faults.
pub fn lost_to_double_faults(
    map: &ClusterMap,
    osds: &BTreeMap<OsdId, SimOsd>,
    rotted: &Rotted,
) -> Result<Vec<LostObject>, String> {
    let mut lost = Vec::new();
    let unclean = unclean_pgs(map, osds);
    if unclean.is_empty() {
        return Err("every PG is clean: nothing to explain".into());
    }
    for (pg, why) in unclean {
        if !why.contains("unfound") {
            return Err(format!("{pg} is unclean without unfound objects: {why}"));
        }
        let primary = placements(map)
            .into_iter()
            .find(|p| p.pg == pg)
            .and_then(|p| p.primary)
            .ok_or_else(|| format!("{pg} has no primary"))?;
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let osd = osds
            .get(&primary)
            .ok_or_else(|| format!("{pg}: no {primary}"))?;
        let stored = cairn_osd::daemon::load_pg(&osd.store, collection)
            .map_err(|e| format!("{pg}: {primary} cannot load it: {e}"))?;
        let mut newest: BTreeMap<Bytes, (cairn_osd::LogKind, cairn_osd::Version)> = BTreeMap::new();
        let logged: BTreeSet<(Bytes, u64)> = stored
            .log
            .iter()
            .map(|e| (e.object.clone(), e.version.seq))
            .collect();
        for entry in &stored.log {
            if entry.kind != cairn_osd::LogKind::Refused {
                newest.insert(entry.object.clone(), (entry.kind, entry.version));
            }
        }
        // Each OSD's own view of its copy: a copy whose object has the
        // needed object version may still hold another write of it (a
        // divergent one, on a branch the log dropped, with the same
        // sequence): its copy then lists the object as missing.
        let views: BTreeMap<OsdId, cairn_osd::StoredPg> = osds
            .iter()
            .filter_map(|(id, sim)| {
                let stored = cairn_osd::daemon::load_pg(&sim.store, collection).ok()?;
                Some((*id, stored))
            })
            .collect();
        let mut in_pg = 0;
        for (object, (kind, write)) in newest {
            if kind != cairn_osd::LogKind::Write {
                continue;
            }
            let version = write.seq;
            let key = ObjectKey::new(object.clone());
            let holds = |(id, sim): (&OsdId, &SimOsd)| {
                sim.store
                    .stat(collection, &key)
                    .is_ok_and(|s| s.version == version)
                    && views.get(id).is_some_and(|v| !v.missing.contains(&object))
            };
            let sound_now = osds
                .iter()
                .any(|(id, sim)| holds((id, sim)) && !sim.store.is_rotten(collection, &key));
            if sound_now {
                continue;
            }
            let rotten_now: Vec<OsdId> = osds
                .iter()
                .filter(|(id, sim)| holds((id, sim)))
                .map(|(id, _)| *id)
                .collect();
            let unnamed = cairn_osd::Version {
                epoch: cairn_types::Epoch(0),
                seq: version,
            };
            let held: BTreeSet<OsdId> = osds
                .iter()
                .filter(|(_, sim)| {
                    sim.sound_held.contains(&(object.clone(), write))
                        || sim.sound_held.contains(&(object.clone(), unnamed))
                })
                .map(|(id, _)| *id)
                .collect();
            let hit = rotted
                .get(&(object.clone(), version))
                .cloned()
                .unwrap_or_default();
            let name = String::from_utf8_lossy(&object).into_owned();
            if rotten_now.is_empty() {
                return Err(format!(
                    "{pg}: {name} v{version} is on no OSD at all (not even rotten): a bug"
                ));
            }
            // A sound copy not hit by rot may have been overwritten by a
            // write the PG then rolled back (unacknowledged, divergent: its
            // version is newer and not in the log): Ceph loses the object
            // then too, replicated pools keep no rollback data.
            let mut overwritten = Vec::new();
            for survivor in held.difference(&hit) {
                let now = osds
                    .get(survivor)
                    .and_then(|sim| sim.store.stat(collection, &key).ok())
                    .map(|s| s.version);
                match now {
                    Some(later)
                        if later > version && !logged.contains(&(object.clone(), later)) =>
                    {
                        overwritten.push(format!("{survivor} (by v{later}, rolled back)"));
                    }
                    _ => {
                        return Err(format!(
                            "{pg}: {name} v{version} has no sound copy, but {survivor} held it \
                             sound, no injected damage hit that copy and no rolled-back write replaced \
                             it (it holds {now:?}): a bug"
                        ));
                    }
                }
            }
            let proof = if held.is_empty() {
                format!(
                    "{name} v{version} was only ever written onto rotten copies ({rotten_now:?}): \
                     its other copies were away when the PG took the write"
                )
            } else {
                format!(
                    "{name} v{version}: of the copies that held it sound ({held:?}), data damage \
                     hit {hit:?} and a write later rolled back replaced {overwritten:?}; \
                     rotten copies left on {rotten_now:?}"
                )
            };
            lost.push(LostObject {
                pg,
                object,
                version,
                proof,
            });
            in_pg += 1;
        }
        if in_pg == 0 {
            return Err(format!(
                "{pg} has unfound objects but every version its log needs has a sound copy: a bug"
            ));
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shards of `data` on a 2+1 code with 4 KiB stripe units, as the
    /// positions store them.
    fn stored(data: &[u8]) -> (StripeLayout, Vec<StoredShard>) {
        let layout = StripeLayout::new(2, 1, 4096).expect("a layout");
        let codec = cairn_osd::ec::codec_for(2, 1).expect("a codec");
        let split = cairn_ec::object::split(&layout, &*codec, data).expect("split");
        let shards = (0u32..)
            .zip(split.shards)
            .map(|(shard, bytes)| StoredShard {
                version: 7,
                meta: Some(ShardMeta {
                    shard,
                    size: split.size,
                    chunk: split.chunk,
                    crc: Some(cairn_types::crc::crc32c(&bytes)),
                }),
                xattrs: BTreeMap::new(),
                data: Bytes::from(bytes),
            })
            .collect();
        (layout, shards)
    }

    fn check(layout: &StripeLayout, shards: &[StoredShard]) -> Result<(), String> {
        one_codeword(layout, &shards.iter().collect::<Vec<_>>())
    }

    #[test]
    fn one_codeword_passes_sound_shards_and_fails_each_kind_of_disagreement() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (layout, sound) = stored(&data);
        assert_eq!(check(&layout, &sound), Ok(()));

        // Parity that is not the code of the data (its crc unknown, as
        // after a parity delta).
        let mut bad = sound.clone();
        let mut parity = bad[2].data.to_vec();
        parity[100] ^= 1;
        bad[2].data = Bytes::from(parity);
        bad[2].meta = bad[2].meta.map(|m| ShardMeta { crc: None, ..m });
        assert!(
            check(&layout, &bad)
                .expect_err("parity off")
                .contains("parity")
        );

        // A position holding another position's shard.
        let mut moved = sound.clone();
        moved[2] = sound[1].clone();
        assert!(
            check(&layout, &moved)
                .expect_err("moved")
                .contains("holds shard 1")
        );

        // Another version on one position.
        let mut stale = sound.clone();
        stale[1].version = 6;
        assert!(check(&layout, &stale).is_err());

        // Bytes that fail their recorded crc32c.
        let mut rotten = sound;
        let mut bytes = rotten[0].data.to_vec();
        bytes[0] ^= 1;
        rotten[0].data = Bytes::from(bytes);
        assert!(check(&layout, &rotten).expect_err("rot").contains("crc32c"));
    }
}

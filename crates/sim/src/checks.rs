//! What a run must show after healing: every PG `active+clean` on the
//! monitor's newest map, the copies of each PG identical, no stray copies
//! left, and a linearizable history.

use crate::client::History;
use crate::linearizability::{Limits, ObjectFailure, check_objects, describe};
use crate::osd::SimOsd;
use crate::store::SimStore;
use bytes::Bytes;
use cairn_osd::ObjectState;
use cairn_osd::daemon::read_object_state;
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
}

/// Every PG of the replicated pools of `map`, placed.
#[must_use]
pub fn placements(map: &ClusterMap) -> Vec<PgPlacement> {
    let placement = Placement::new(map);
    let mut out = Vec::new();
    for pool in &map.pools {
        if !matches!(pool.redundancy, Redundancy::Replicated { .. }) {
            continue;
        }
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
        ..
    } in placements(map)
    {
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let Some(primary) = primary else { continue };
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
        let last_update = |osd: OsdId| {
            osds.get(&osd)
                .and_then(|o| o.process.as_ref())
                .and_then(|p| p.pgs.get(&pg))
                .map(|slot| slot.pg.last_update())
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
            if last_update(*osd) != last_update(primary) {
                failures.push(format!(
                    "{pg}: {osd} is at {:?}, primary {primary} at {:?}",
                    last_update(*osd),
                    last_update(primary)
                ));
            }
        }
        for (id, sim_osd) in osds {
            let holds = sim_osd
                .store
                .collections()
                .is_ok_and(|c| c.contains(&collection));
            if holds && !acting.contains(id) {
                failures.push(format!("{pg}: stray copy left on {id} (acting {acting:?})"));
            }
        }
    }
    failures
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

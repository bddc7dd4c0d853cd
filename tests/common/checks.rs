//! Checks the fault tests end with beyond "every acknowledged write reads
//! back": a versioned overwrite workload whose readers may never see an
//! object older than its last acknowledged version, a deep scrub of every
//! pool that must find nothing, and, after shutdown, a comparison of every
//! PG's copies in the stores of its acting OSDs.

use super::{Cluster, ok, ok_json, pattern};
use bytes::Bytes;
use cairn_client::{Client, ClientError, ReadRange};
use cairn_store::{CollectionId, DiskStore, ObjectStore, ReadOptions, StoreConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Pool the versioned objects live in.
pub const POOL: &str = "data";

/// One object's write history, as the lane that owns it records it.
#[derive(Debug, Default)]
struct Versions {
    /// Highest version acknowledged.
    acked: AtomicU64,
    /// Highest version sent (acknowledged or not; an unacknowledged write
    /// may have applied).
    sent: AtomicU64,
}

/// `ver-{index}` holds its index and version in its first 16 bytes, then
/// a pattern both determine; sizes vary from 1 to 48 KiB.
pub fn versioned_payload(index: u64, version: u64) -> Bytes {
    let len = 1024 + usize::try_from((index * 7919 + version * 104_729) % (47 * 1024)).unwrap_or(0);
    let mut out = Vec::with_capacity(16 + len);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&pattern(index << 32 | version, len));
    Bytes::from(out)
}

/// The (index, version) a payload claims, if it is whole and sound.
fn decode(data: &[u8]) -> Option<(u64, u64)> {
    let index = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
    let version = u64::from_le_bytes(data.get(8..16)?.try_into().ok()?);
    (versioned_payload(index, version) == data).then_some((index, version))
}

fn name(index: u64) -> String {
    format!("ver-{index}")
}

/// What the lanes write: whole objects, or patches (partial overwrites).
#[derive(Clone, Copy, Debug)]
pub struct LoadShape {
    pub pool: &'static str,
    /// Each version after the first is a compound partial write: the
    /// 16-byte header (index, version) at 0 and a 5000-byte patch in slot
    /// `version % PATCH_SLOTS`, each slot in a stripe row of its own for a
    /// stripe width up to 8 KiB: an object is whole only if both landed.
    pub patches: bool,
}

impl LoadShape {
    /// Whole objects in the `data` pool.
    pub const WHOLE: LoadShape = LoadShape {
        pool: POOL,
        patches: false,
    };
}

const PATCH_SLOTS: u64 = 11;
const PATCH_BYTES: usize = 5000;
const PATCHED_SIZE: usize = 96 * 1024;

fn patch_offset(version: u64) -> u64 {
    4096 + (version % PATCH_SLOTS) * 8192
}

fn patch(index: u64, version: u64) -> Vec<u8> {
    pattern(index << 32 | version | 1 << 31, PATCH_BYTES)
}

/// `ver-{index}` at `version` under patches: its first version's bytes
/// with the header and, in every slot, the newest patch up to `version`.
pub fn patched_payload(index: u64, version: u64) -> Bytes {
    let mut out = pattern(index << 32, PATCHED_SIZE);
    out[..8].copy_from_slice(&index.to_le_bytes());
    out[8..16].copy_from_slice(&version.to_le_bytes());
    for slot in 0..PATCH_SLOTS {
        // The newest version >= 2 in this slot, not after `version`.
        let Some(below) = version.checked_sub(slot) else {
            continue;
        };
        let newest = slot + below / PATCH_SLOTS * PATCH_SLOTS;
        if newest >= 2 {
            let at = usize::try_from(patch_offset(newest)).unwrap_or(0);
            out[at..at + PATCH_BYTES].copy_from_slice(&patch(index, newest));
        }
    }
    Bytes::from(out)
}

impl LoadShape {
    /// The (index, version) the bytes claim, if they are exactly that.
    fn decode(&self, data: &[u8]) -> Option<(u64, u64)> {
        if !self.patches {
            return decode(data);
        }
        let index = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
        let version = u64::from_le_bytes(data.get(8..16)?.try_into().ok()?);
        (patched_payload(index, version) == data).then_some((index, version))
    }
}

/// Lanes that overwrite their own objects with rising versions and read
/// anyone's, checking each read against what was acknowledged before it
/// began. Lane `l` owns the objects `l, l + lanes, ...` below `objects`.
#[derive(Debug)]
pub struct VersionedLoad {
    shape: LoadShape,
    stop: Arc<AtomicBool>,
    versions: Arc<Vec<Versions>>,
    tasks: Vec<tokio::task::JoinHandle<LaneReport>>,
}

/// What one lane saw.
#[derive(Debug, Default)]
pub struct LaneReport {
    pub writes_acked: u64,
    pub writes_failed: u64,
    pub reads_checked: u64,
    pub read_errors: u64,
    /// Reads older than an acknowledged write, unknown versions, lost objects.
    pub violations: Vec<String>,
}

/// Everything the lanes saw, summed.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub writes_acked: u64,
    pub writes_failed: u64,
    pub reads_checked: u64,
    pub read_errors: u64,
    pub violations: Vec<String>,
}

impl VersionedLoad {
    pub fn start(client: &Client, lanes: u64, objects: u64) -> VersionedLoad {
        VersionedLoad::start_shaped(client, LoadShape::WHOLE, lanes, objects)
    }

    pub fn start_shaped(
        client: &Client,
        shape: LoadShape,
        lanes: u64,
        objects: u64,
    ) -> VersionedLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let versions: Arc<Vec<Versions>> =
            Arc::new((0..objects).map(|_| Versions::default()).collect());
        let tasks = (0..lanes)
            .map(|lane| {
                tokio::spawn(run_lane(
                    client.clone(),
                    shape,
                    lane,
                    lanes,
                    versions.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        VersionedLoad {
            shape,
            stop,
            versions,
            tasks,
        }
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> u64 {
        self.versions
            .iter()
            .map(|v| v.acked.load(Ordering::Relaxed))
            .sum()
    }

    /// Objects with at least one acknowledged write.
    pub fn acked_objects(&self) -> u64 {
        let acked = self
            .versions
            .iter()
            .filter(|v| v.acked.load(Ordering::Relaxed) > 0)
            .count();
        u64::try_from(acked).unwrap_or(u64::MAX)
    }

    /// Stops the lanes and sums their reports; the versions stay for
    /// [`VersionedLoad::verify`].
    pub async fn stop(&mut self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut report = LoadReport::default();
        for task in self.tasks.drain(..) {
            let lane = task.await.expect("lane");
            report.writes_acked += lane.writes_acked;
            report.writes_failed += lane.writes_failed;
            report.reads_checked += lane.reads_checked;
            report.read_errors += lane.read_errors;
            report.violations.extend(lane.violations);
        }
        report
    }

    /// After the lanes stopped and the cluster healed: every object holds
    /// its last acknowledged version, or the one write after it that was
    /// sent but not acknowledged. Returns the violations.
    pub async fn verify(&self, client: &Client) -> Vec<String> {
        let mut violations = Vec::new();
        for (index, v) in self.versions.iter().enumerate() {
            let index = index as u64;
            let (acked, sent) = (
                v.acked.load(Ordering::Relaxed),
                v.sent.load(Ordering::Relaxed),
            );
            if sent == 0 {
                continue;
            }
            match client
                .read(
                    self.shape.pool,
                    name(index).as_bytes(),
                    ReadRange::default(),
                )
                .await
            {
                Ok(data) => match self.shape.decode(&data) {
                    Some((i, version)) if i == index && version >= acked && version <= sent => {}
                    got => violations.push(format!(
                        "{}: holds {got:?}, acknowledged {acked}, sent up to {sent}",
                        name(index)
                    )),
                },
                Err(ClientError::NotFound) if acked == 0 => {}
                Err(error) => {
                    violations.push(format!("{}: {error} (acknowledged {acked})", name(index)))
                }
            }
        }
        violations
    }
}

async fn run_lane(
    client: Client,
    shape: LoadShape,
    lane: u64,
    lanes: u64,
    versions: Arc<Vec<Versions>>,
    stop: Arc<AtomicBool>,
) -> LaneReport {
    let objects = versions.len() as u64;
    let mine: Vec<u64> = (lane..objects)
        .step_by(usize::try_from(lanes).unwrap_or(1))
        .collect();
    let mut report = LaneReport::default();
    // Patched objects whose last write failed (it may or may not have
    // applied): their next write is whole.
    let mut unsure: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut step = lane.wrapping_mul(0x9e37_79b9) | 1;
    while !stop.load(Ordering::Relaxed) && !mine.is_empty() {
        step = step
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let index = mine[usize::try_from((step >> 33) % mine.len() as u64).unwrap_or(0)];
        let own = &versions[usize::try_from(index).unwrap_or(0)];
        let version = own.sent.load(Ordering::Relaxed) + 1;
        own.sent.store(version, Ordering::Relaxed);
        let object = name(index);
        let written = if !shape.patches {
            client
                .write_full(
                    shape.pool,
                    object.as_bytes(),
                    versioned_payload(index, version),
                )
                .await
        } else if version == 1 || unsure.contains(&index) {
            client
                .write_full(
                    shape.pool,
                    object.as_bytes(),
                    patched_payload(index, version),
                )
                .await
        } else {
            let head = patched_payload(index, version).slice(..16);
            let op = cairn_client::WriteOp::new()
                .write(0, head)
                .write(patch_offset(version), Bytes::from(patch(index, version)));
            client.operate(shape.pool, object.as_bytes(), op).await
        };
        match written {
            Ok(_) => {
                own.acked.fetch_max(version, Ordering::Relaxed);
                report.writes_acked += 1;
                unsure.remove(&index);
            }
            Err(_) => {
                report.writes_failed += 1;
                unsure.insert(index);
            }
        }
        // Read anyone's object and judge it by what was acknowledged
        // before the read began.
        let other = (step >> 17) % objects;
        let theirs = &versions[usize::try_from(other).unwrap_or(0)];
        let acked_before = theirs.acked.load(Ordering::Relaxed);
        let read = client
            .read(shape.pool, name(other).as_bytes(), ReadRange::default())
            .await;
        let sent_after = theirs.sent.load(Ordering::Relaxed);
        match read {
            Ok(data) => {
                report.reads_checked += 1;
                match shape.decode(&data) {
                    Some((i, v)) if i == other && v >= acked_before && v <= sent_after => {}
                    got => report.violations.push(format!(
                        "read of {} gave {got:?}; acknowledged {acked_before} before the read, sent up to {sent_after}",
                        name(other)
                    )),
                }
            }
            Err(ClientError::NotFound) if acked_before > 0 => report.violations.push(format!(
                "read of {} found nothing; version {acked_before} was acknowledged",
                name(other)
            )),
            Err(_) => report.read_errors += 1,
        }
    }
    report
}

/// Deep-scrubs every pool and waits until every PG has a deep scrub that
/// began after now; panics unless they found no inconsistent object.
pub fn deep_scrub_finds_nothing(cluster: &Cluster) {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    for pool in pools.as_array().into_iter().flatten() {
        let name = pool["name"].as_str().expect("pool name");
        ok(
            cluster.cairn(&["pool", "scrub", name, "--deep"]),
            "pool scrub --deep",
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
        let pgs = pgs.as_array().cloned().unwrap_or_default();
        let done = !pgs.is_empty()
            && pgs.iter().all(|p| {
                p["last_deep_scrub_secs"].as_u64().unwrap_or(0) >= since && p["scrubbing"].is_null()
            });
        if done {
            let bad: Vec<_> = pgs
                .iter()
                .filter(|p| p["inconsistent_objects"].as_u64() != Some(0))
                .collect();
            assert!(
                bad.is_empty(),
                "deep scrub found inconsistent copies: {bad:?}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "deep scrubs did not finish: {pgs:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The acting set of every PG, by PG id text (`1.1f`).
pub fn acting_sets(cluster: &Cluster) -> BTreeMap<String, Vec<u64>> {
    let pgs = ok_json(cluster.cairn(&["pg", "ls", "--json"]), "pg ls");
    pgs.as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let acting = p["acting"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_u64)
                .collect();
            (p["pg"].as_str().expect("pg id").to_owned(), acting)
        })
        .collect()
}

/// Checks an erasure-coded pool's shards, store by store, after shutdown:
/// for every PG (its acting OSDs in position order, none missing) and
/// every object, shard `i` is on the OSD at position `i` with metadata
/// naming `i`, every shard agrees on size, chunk, version and client
/// xattrs, each holds exactly its `shard_len` bytes, and the parity is
/// the code of the data. Returns each object's bytes decoded from its
/// data shards and the shard bytes stored in all.
#[allow(dead_code)]
pub fn shards_match(
    acting: &BTreeMap<String, Vec<u64>>,
    osd_dirs: &BTreeMap<u64, std::path::PathBuf>,
    layout: &cairn_ec::StripeLayout,
) -> (BTreeMap<String, Vec<u8>>, u64) {
    use cairn_osd::ec::{EC_META_XATTR, ShardMeta};
    let codec = cairn_ec::ReedSolomon::new(layout.k as usize, layout.m as usize).expect("codec");
    let stores = open_stores(osd_dirs);
    let mut objects = BTreeMap::new();
    let mut stored = 0u64;
    for (pg, osds) in acting {
        assert_eq!(osds.len(), layout.shards() as usize, "pg {pg}: a hole");
        let (pool, seed) = pg.split_once('.').expect("pg id");
        let collection = CollectionId::pg(
            pool.parse().expect("pool"),
            u32::from_str_radix(seed, 16).expect("seed"),
        );
        let copies: Vec<BTreeMap<Bytes, ObjectCopy>> = osds
            .iter()
            .map(|osd| copy_of(&stores[osd], collection))
            .collect();
        let names: Vec<&Bytes> = copies[0].keys().collect();
        for (i, copy) in copies.iter().enumerate() {
            assert_eq!(
                copy.keys().collect::<Vec<_>>(),
                names,
                "pg {pg}: shard {i} lists other objects"
            );
        }
        for name in names {
            let shown = String::from_utf8_lossy(name).into_owned();
            let mut shards: Vec<Vec<u8>> = Vec::new();
            let mut first: Option<(ShardMeta, u64, BTreeMap<Bytes, Bytes>)> = None;
            for (i, copy) in copies.iter().enumerate() {
                let shard = &copy[name];
                let mut client_xattrs = shard.xattrs.clone();
                let meta = client_xattrs
                    .remove(EC_META_XATTR)
                    .map(|m| ShardMeta::decode(&m).expect("shard metadata decodes"));
                let meta = meta.unwrap_or(ShardMeta {
                    shard: i as u32,
                    size: 0,
                    chunk: layout.chunk_for(0),
                    crc: None,
                });
                assert_eq!(meta.shard, i as u32, "{pg} {shown}: shard at position {i}");
                let want = layout.shard_len(meta.chunk, meta.size, i as u32);
                assert_eq!(
                    shard.data.len() as u64,
                    want,
                    "{pg} {shown}: shard {i}'s length"
                );
                if let Some(crc) = meta.crc {
                    assert_eq!(
                        cairn_types::crc::crc32c(&shard.data),
                        crc,
                        "{shown}: shard {i} crc"
                    );
                }
                match &first {
                    None => first = Some((meta, shard.version, client_xattrs)),
                    Some((m, version, xattrs)) => {
                        assert_eq!(
                            (m.size, m.chunk, *version, xattrs),
                            (meta.size, meta.chunk, shard.version, &client_xattrs),
                            "{pg} {shown}: shard {i} disagrees with shard 0"
                        );
                    }
                }
                stored += shard.data.len() as u64;
                shards.push(shard.data.to_vec());
            }
            let (meta, _, _) = first.expect("k + m shards");
            let data_shards: Vec<&[u8]> = shards[..layout.k as usize]
                .iter()
                .map(Vec::as_slice)
                .collect();
            let data = cairn_ec::object::join(layout, meta.chunk, meta.size, &data_shards)
                .unwrap_or_else(|e| panic!("{shown}: {e}"));
            let again = cairn_ec::object::split(layout, &codec, &data).expect("split");
            assert_eq!(again.chunk, meta.chunk, "{shown}: chunk");
            assert!(
                again.shards == shards,
                "{pg} {shown}: parity is not the code of the data"
            );
            objects.insert(shown, data);
        }
    }
    (objects, stored)
}

/// Each stopped OSD's store, by id, from its data dir.
fn open_stores(osd_dirs: &BTreeMap<u64, std::path::PathBuf>) -> BTreeMap<u64, DiskStore> {
    osd_dirs
        .iter()
        .map(|(id, dir)| {
            let store = DiskStore::open(&dir.join("store"), StoreConfig::default())
                .unwrap_or_else(|e| panic!("osd.{id}'s store at {}: {e}", dir.display()));
            (*id, store)
        })
        .collect()
}

/// Everything a copy holds of one object.
#[derive(Debug, PartialEq, Eq)]
struct ObjectCopy {
    version: u64,
    data: Bytes,
    xattrs: BTreeMap<Bytes, Bytes>,
    omap: Vec<(Bytes, Bytes)>,
}

fn copy_of(store: &DiskStore, collection: CollectionId) -> BTreeMap<Bytes, ObjectCopy> {
    let mut objects = BTreeMap::new();
    let mut after = None;
    loop {
        let page = store.list(collection, after.as_ref(), 1024).expect("list");
        // The OSD's own roll-back stashes are not copies of objects.
        for key in page
            .keys
            .iter()
            .filter(|k| !cairn_osd::undo::is_internal(&k.name))
        {
            let stat = store.stat(collection, key).expect("stat");
            let data = store
                .read(collection, key, ReadOptions::default())
                .unwrap_or_else(|e| panic!("copy unreadable: {e}"));
            let xattrs = store.xattrs(collection, key).expect("xattrs");
            let omap = store
                .omap_range(collection, key, None, usize::MAX)
                .expect("omap");
            objects.insert(
                key.name.clone(),
                ObjectCopy {
                    version: stat.version,
                    data,
                    xattrs,
                    omap,
                },
            );
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return objects,
        }
    }
}

/// After the cluster was stopped: every PG's copies on its acting OSDs
/// (`acting`, taken while it ran; `osd_dirs` maps a map id to its data
/// dir) hold the same objects, versions, bytes, xattrs and omap. Returns
/// the objects compared.
pub fn copies_match(
    acting: &BTreeMap<String, Vec<u64>>,
    osd_dirs: &BTreeMap<u64, std::path::PathBuf>,
) -> u64 {
    let stores = open_stores(osd_dirs);
    let mut compared = 0;
    for (pg, osds) in acting {
        let (pool, seed) = pg.split_once('.').expect("pg id");
        let collection = CollectionId::pg(
            pool.parse().expect("pool"),
            u32::from_str_radix(seed, 16).expect("seed"),
        );
        let mut first: Option<(u64, BTreeMap<Bytes, ObjectCopy>)> = None;
        for osd in osds {
            let store = stores
                .get(osd)
                .unwrap_or_else(|| panic!("no store for osd.{osd}"));
            let copy = copy_of(store, collection);
            match &first {
                None => first = Some((*osd, copy)),
                Some((first_osd, expected)) => {
                    let differ: Vec<_> = expected
                        .keys()
                        .chain(copy.keys())
                        .filter(|k| expected.get(*k) != copy.get(*k))
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .collect();
                    assert!(
                        differ.is_empty(),
                        "pg {pg}: osd.{osd} and osd.{first_osd} differ in {differ:?}"
                    );
                    compared += copy.len() as u64;
                }
            }
        }
    }
    compared
}

/// Map id → data dir of the OSDs of a `cairn up` cluster (osd.N serves on
/// base port + 1 + N).
pub fn osd_dirs(cluster: &Cluster, base_port: u16) -> BTreeMap<u64, std::path::PathBuf> {
    super::tree_osds(cluster)
        .iter()
        .filter_map(|o| {
            let id = o["id"].as_u64()?;
            let port: u16 = o["addr"].as_str()?.rsplit(':').next()?.parse().ok()?;
            let index = port.checked_sub(base_port + 1)?;
            Some((id, cluster.dir.join(format!("osd.{index}"))))
        })
        .collect()
}

//! The data paths of a real `cairn up` cluster (three OSDs, pool `data`,
//! size 3): objects of 0 B to 64 MiB round-trip byte-exact through the
//! client library and the CLI; ranged reads, writes at an offset, appends,
//! xattrs and paged omap ranges return what a local model predicts; eight
//! concurrent clients leave every replica's store byte-identical to what
//! clients read; and a client holding a stale map is redirected and
//! succeeds.
//!
//! Payloads are seeded xorshift streams, never repeating patterns, so a
//! block read from the wrong place cannot compare equal by accident.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientError, ClientOptions, ReadRange};
use cairn_placement::{ClusterMap, Placement};
use cairn_store::{CollectionId, DiskStore, ObjectKey, ObjectStore, ReadOptions, StoreConfig};
use cairn_types::{OsdId, PgId};
use common::{Cluster, is_running, mon_addr, ok, recorded_pids, runtime, serial};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

const POOL: &str = "data";
const OSD_COUNT: u16 = 3;
/// The store's checksum block: ranged reads are chosen to cross it.
const BLOCK_BYTES: u64 = 4096;
/// Longest wait for daemons to exit after `cairn down`.
const STOP_WAIT: Duration = Duration::from_secs(30);

fn pattern(seed: u64, len: usize) -> Bytes {
    Bytes::from(common::pattern(seed, len))
}

/// Asserts `got == want` without printing megabytes: on a mismatch it
/// names the lengths and the first differing offset.
fn assert_bytes(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: read {} bytes, expected {}; first differing byte at {first:?}",
        got.len(),
        want.len()
    );
}

async fn connect(cluster: &Cluster, options: ClientOptions) -> Client {
    Client::connect_with(&mon_addr(cluster), options)
        .await
        .expect("connect")
}

/// What [`ReadRange`] returns of `data` by the store's documented rule
/// (`ReadOptions::span`): the range clamped to the object, so a read that
/// starts at or past the end is empty, never an error.
fn expected_range(data: &[u8], range: ReadRange) -> &[u8] {
    let size = data.len() as u64;
    let start = range.offset_bytes.min(size);
    let end = range
        .length_bytes
        .map_or(size, |len| start.saturating_add(len).min(size));
    let start = usize::try_from(start).expect("small");
    let end = usize::try_from(end).expect("small");
    &data[start..end]
}

fn range(offset_bytes: u64, length_bytes: Option<u64>) -> ReadRange {
    ReadRange {
        offset_bytes,
        length_bytes,
    }
}

async fn read_all(client: &Client, name: &str) -> Bytes {
    client
        .read(POOL, name.as_bytes(), ReadRange::default())
        .await
        .unwrap_or_else(|e| panic!("read {name}: {e}"))
}

async fn size_of(client: &Client, name: &str) -> u64 {
    client
        .stat(POOL, name.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("stat {name}: {e}"))
        .size_bytes
}

/// Writes `data` at `offset` of `name` and applies the same write to the
/// local model (a gap reads as zeros).
async fn write_at(client: &Client, model: &mut Vec<u8>, name: &str, offset: usize, data: Bytes) {
    client
        .write(POOL, name.as_bytes(), offset as u64, data.clone())
        .await
        .unwrap_or_else(|e| panic!("write {name} at {offset}: {e}"));
    let end = offset + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[offset..end].copy_from_slice(&data);
}

const SIZES: [usize; 5] = [0, 1, 4096, 4 << 20, 64 << 20];

/// Whole-object round trips of every size, then ranged reads against the
/// model, including past-end ones.
async fn sizes_and_ranges(client: &Client) -> HashMap<usize, Bytes> {
    let mut objects = HashMap::new();
    for (seed, size) in SIZES.iter().enumerate() {
        let name = format!("size-{size}");
        let data = pattern(seed as u64, *size);
        client
            .write_full(POOL, name.as_bytes(), data.clone())
            .await
            .unwrap_or_else(|e| panic!("write {name}: {e}"));
        assert_bytes(&name, &read_all(client, &name).await, &data);
        assert_eq!(size_of(client, &name).await, *size as u64, "stat {name}");
        objects.insert(*size, data);
    }
    let big = &objects[&(4 << 20)];
    let size = big.len() as u64;
    let ranges = [
        range(0, Some(0)),
        range(0, Some(1)),
        range(1, Some(BLOCK_BYTES - 2)),
        range(BLOCK_BYTES - 1, Some(2)),
        range(4000, Some(2 * BLOCK_BYTES + 200)),
        range(2 * BLOCK_BYTES, Some(BLOCK_BYTES)),
        range(12_345, None),
        range(size - 10, None),
        range(size - 10, Some(100)),
        range(size, Some(10)),
        range(size, None),
        range(size + 1, Some(1)),
        range(size + 1_000_000, None),
        range(u64::MAX, Some(u64::MAX)),
    ];
    for r in ranges {
        let got = client
            .read(POOL, b"size-4194304", r)
            .await
            .unwrap_or_else(|e| panic!("read {r:?}: {e}"));
        assert_bytes(
            &format!("4 MiB object, {r:?}"),
            &got,
            expected_range(big, r),
        );
    }
    let huge = &objects[&(64 << 20)];
    for r in [range(33_554_000, Some(10_000)), range((64 << 20) - 5, None)] {
        let got = client
            .read(POOL, b"size-67108864", r)
            .await
            .unwrap_or_else(|e| panic!("read {r:?}: {e}"));
        assert_bytes(
            &format!("64 MiB object, {r:?}"),
            &got,
            expected_range(huge, r),
        );
    }
    for (size, r) in [
        (0, range(0, Some(10))),
        (0, range(5, None)),
        (1, range(0, Some(5))),
        (1, range(1, None)),
        (4096, range(4095, Some(10))),
    ] {
        let name = format!("size-{size}");
        let got = client
            .read(POOL, name.as_bytes(), r)
            .await
            .unwrap_or_else(|e| panic!("read {name} {r:?}: {e}"));
        assert_bytes(
            &format!("{name}, {r:?}"),
            &got,
            expected_range(&objects[&size], r),
        );
    }
    objects
}

/// Writes at offsets into an extent-backed object, an inline one and one
/// that does not exist yet; each must read back as the model says.
async fn offset_writes(client: &Client) {
    let mut model = pattern(100, 10_000).to_vec();
    client
        .write_full(POOL, b"overwrite", Bytes::from(model.clone()))
        .await
        .expect("write_full overwrite");
    // Across the 4 KiB and 8 KiB block boundaries, then past the end, then
    // leaving a gap that must read as zeros.
    write_at(client, &mut model, "overwrite", 4000, pattern(101, 5000)).await;
    write_at(client, &mut model, "overwrite", 9000, pattern(102, 3000)).await;
    write_at(client, &mut model, "overwrite", 20_000, pattern(103, 100)).await;
    assert_bytes("overwrite", &read_all(client, "overwrite").await, &model);
    assert_eq!(size_of(client, "overwrite").await, 20_100);
    let r = range(3990, Some(5020));
    let got = client.read(POOL, b"overwrite", r).await.expect("read");
    assert_bytes("overwrite, ranged", &got, expected_range(&model, r));

    // An inline object (under 2 KiB) that a write grows past the inline limit.
    let mut small = pattern(110, 100).to_vec();
    client
        .write_full(POOL, b"small", Bytes::from(small.clone()))
        .await
        .expect("write_full small");
    write_at(client, &mut small, "small", 50, pattern(111, 3000)).await;
    assert_bytes("small", &read_all(client, "small").await, &small);

    let mut fresh = Vec::new();
    write_at(client, &mut fresh, "fresh", 4096, pattern(120, 10)).await;
    assert_bytes("fresh", &read_all(client, "fresh").await, &fresh);
    assert_eq!(size_of(client, "fresh").await, 4106);
}

/// Appends of sizes that cross the inline limit, block boundaries and the
/// direct-write threshold; the 64 MiB object (one whole extent) too.
async fn appends(client: &Client, huge: &Bytes) {
    let mut model = Vec::new();
    for (seed, len) in [1usize, 2047, 1, 4095, 4097, 70_000, 3].iter().enumerate() {
        let piece = pattern(200 + seed as u64, *len);
        client
            .append(POOL, b"appended", piece.clone())
            .await
            .unwrap_or_else(|e| panic!("append {len}: {e}"));
        model.extend_from_slice(&piece);
        assert_eq!(size_of(client, "appended").await, model.len() as u64);
    }
    assert_bytes("appended", &read_all(client, "appended").await, &model);
    let r = range(2040, Some(8200));
    let got = client.read(POOL, b"appended", r).await.expect("read");
    assert_bytes("appended, ranged", &got, expected_range(&model, r));

    let tail = pattern(250, 100);
    client
        .append(POOL, b"size-67108864", tail.clone())
        .await
        .expect("append to 64 MiB");
    let r = range((64 << 20) - 200, None);
    let got = client.read(POOL, b"size-67108864", r).await.expect("read");
    let mut want = huge[huge.len() - 200..].to_vec();
    want.extend_from_slice(&tail);
    assert_bytes("64 MiB object's appended tail", &got, &want);
    assert_eq!(size_of(client, "size-67108864").await, (64 << 20) + 100);
}

async fn xattrs(client: &Client, data_4k: &Bytes) {
    let name = b"size-4096";
    let binary = pattern(300, 300);
    client
        .set_xattr(POOL, name, b"user.color", Bytes::from_static(b"blue"))
        .await
        .expect("set_xattr");
    client
        .set_xattr(POOL, name, b"user.bin", binary.clone())
        .await
        .expect("set_xattr");
    client
        .set_xattr(POOL, name, b"user.color", Bytes::from_static(b"green"))
        .await
        .expect("overwrite xattr");
    let want: BTreeMap<Bytes, Bytes> = [
        (Bytes::from_static(b"user.bin"), binary),
        (
            Bytes::from_static(b"user.color"),
            Bytes::from_static(b"green"),
        ),
    ]
    .into();
    assert_eq!(client.get_xattrs(POOL, name).await.expect("get"), want);
    assert_bytes(
        "data after xattrs",
        &read_all(client, "size-4096").await,
        data_4k,
    );

    client
        .set_xattr(POOL, b"xattr-only", b"k", Bytes::from_static(b"v"))
        .await
        .expect("set_xattr creates");
    assert_eq!(size_of(client, "xattr-only").await, 0);
    let only = client.get_xattrs(POOL, b"xattr-only").await.expect("get");
    assert_eq!(only.len(), 1);
    assert!(matches!(
        client.get_xattrs(POOL, b"no-such-object").await,
        Err(ClientError::NotFound)
    ));
}

/// Sets 35 omap entries in three calls (one overwrite) and pages through
/// them 8 at a time with `after`.
async fn omap_paging(client: &Client) {
    const PAGE: u32 = 8;
    let key = |i: usize| Bytes::from(format!("k{i:03}"));
    let mut model = BTreeMap::new();
    let batches = [(0..12, 0u64), (12..30, 1), (5..6, 2), (30..35, 3)];
    for (keys, seed) in batches {
        let entries: BTreeMap<Bytes, Bytes> = keys
            .map(|i| (key(i), pattern(400 + seed * 100 + i as u64, 10 + i)))
            .collect();
        client
            .omap_set(POOL, b"omap", &entries)
            .await
            .expect("omap_set");
        model.extend(entries);
    }
    assert_eq!(model.len(), 35);
    let mut seen = Vec::new();
    let mut after: Option<Bytes> = None;
    let mut pages = 0;
    loop {
        let page = client
            .omap_range(POOL, b"omap", after.as_deref(), PAGE)
            .await
            .expect("omap_range");
        pages += 1;
        assert!(page.len() <= PAGE as usize, "page of {}", page.len());
        assert!(pages <= 10, "paging does not end");
        let last_page = page.len() < PAGE as usize;
        after = page.last().map(|(k, _)| k.clone()).or(after);
        seen.extend(page);
        if last_page {
            break;
        }
    }
    assert_eq!(pages, 5, "35 entries in pages of 8");
    let want: Vec<(Bytes, Bytes)> = model.into_iter().collect();
    assert_eq!(seen, want, "paged omap equals what was set, in key order");
    let from_middle = client
        .omap_range(POOL, b"omap", Some(b"k0055"), 2)
        .await
        .expect("omap_range");
    assert_eq!(
        from_middle,
        want[6..8].to_vec(),
        "after a key between k005 and k006"
    );
    let beyond = client
        .omap_range(POOL, b"omap", Some(b"k999"), PAGE)
        .await
        .expect("omap_range");
    assert!(beyond.is_empty());
}

/// The CLI's put/get through stdin/stdout (`-`) and files, checked against
/// the library both ways.
async fn cli_round_trips(cluster: &Cluster, client: &Client) {
    let cli =
        |args: &[&str], stdin: Option<&[u8]>| common::cairn_with_input(&cluster.conf, args, stdin);
    let data = pattern(500, 4096);
    ok(
        cli(
            &["object", "put", "--pool", POOL, "cli-4k", "-"],
            Some(&data),
        ),
        "put 4 KiB from stdin",
    );
    let out = ok(
        cli(&["object", "get", "--pool", POOL, "cli-4k", "-"], None),
        "get 4 KiB to stdout",
    );
    assert_bytes("cli-4k via stdout", &out, &data);
    assert_bytes(
        "cli-4k via library",
        &read_all(client, "cli-4k").await,
        &data,
    );

    let empty_in = cluster.dir.join("empty.in");
    std::fs::write(&empty_in, b"").expect("write");
    let empty_in = empty_in.display().to_string();
    ok(
        cli(&["object", "put", "--pool", POOL, "cli-0", &empty_in], None),
        "put 0 B from a file",
    );
    let empty_out = cluster.dir.join("empty.out");
    std::fs::write(&empty_out, b"stale").expect("write");
    let empty_out_arg = empty_out.display().to_string();
    ok(
        cli(
            &["object", "get", "--pool", POOL, "cli-0", &empty_out_arg],
            None,
        ),
        "get 0 B to a file",
    );
    assert_eq!(std::fs::read(&empty_out).expect("read"), b"");
    let stat = common::ok_json(
        cli(&["object", "stat", "--pool", POOL, "cli-0", "--json"], None),
        "stat",
    );
    assert_eq!(stat["size_bytes"], 0, "{stat}");
    ok(
        cli(
            &["object", "put", "--pool", POOL, "cli-0-stdin", "-"],
            Some(b""),
        ),
        "put 0 B from stdin",
    );
    let out = ok(
        cli(&["object", "get", "--pool", POOL, "cli-0-stdin"], None),
        "get 0 B to stdout",
    );
    assert!(out.is_empty());

    let lib = pattern(501, 4096);
    client
        .write_full(POOL, b"lib-4k", lib.clone())
        .await
        .expect("write");
    let file = cluster.dir.join("lib-4k.out");
    let file_arg = file.display().to_string();
    ok(
        cli(
            &["object", "get", "--pool", POOL, "lib-4k", &file_arg],
            None,
        ),
        "get to a file",
    );
    assert_bytes("lib-4k via CLI", &std::fs::read(&file).expect("read"), &lib);
}

#[test]
fn objects_round_trip_with_ranges_offsets_appends_xattrs_and_omap() {
    let _serial = serial();
    let cluster = Cluster::up("data-paths-io", OSD_COUNT, 17700, &[]);
    runtime().block_on(async {
        let client = connect(&cluster, ClientOptions::default()).await;
        let objects = sizes_and_ranges(&client).await;
        offset_writes(&client).await;
        appends(&client, &objects[&(64 << 20)]).await;
        xattrs(&client, &objects[&4096]).await;
        omap_paging(&client).await;
        cli_round_trips(&cluster, &client).await;

        client.remove(POOL, b"size-1").await.expect("remove");
        assert!(matches!(
            client.read(POOL, b"size-1", ReadRange::default()).await,
            Err(ClientError::NotFound)
        ));
        assert!(matches!(
            client.stat(POOL, b"size-1").await,
            Err(ClientError::NotFound)
        ));
    });
    drop(cluster);
}

const WRITERS: u64 = 8;
const ROUNDS: u64 = 6;
const SHARED_OBJECTS: u64 = 3;
const CHUNK_BYTES: usize = 1500;
/// Sizes of each writer's own objects, by round: inline, around one block,
/// and past the 64 KiB direct-write threshold.
const OWN_SIZES: [usize; ROUNDS as usize] = [100, 3000, 4096, 9000, 70_000, 130_000];

fn own_name(writer: u64, round: u64) -> String {
    format!("w{writer}-r{round}")
}

fn shared_name(round: u64) -> String {
    format!("shared-{}", round % SHARED_OBJECTS)
}

fn own_payload(writer: u64, round: u64) -> Bytes {
    let size = OWN_SIZES[round as usize] + writer as usize * 13;
    pattern(1000 + writer * 100 + round, size)
}

/// Differs per writer in content and length, so a mix of two writers'
/// payloads matches neither.
fn shared_payload(writer: u64, round: u64) -> Bytes {
    pattern(2000 + writer * 100 + round, 6000 + writer as usize * 100)
}

fn chunk(writer: u64, round: u64) -> Bytes {
    pattern(3000 + writer * 100 + round, CHUNK_BYTES)
}

/// One writer: each round a write_full of its own object, of a shared
/// object, and an append to `log`. Every operation must be acknowledged.
async fn writer(client: Client, writer: u64) -> Result<(), String> {
    for round in 0..ROUNDS {
        let name = own_name(writer, round);
        client
            .write_full(POOL, name.as_bytes(), own_payload(writer, round))
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let name = shared_name(round);
        client
            .write_full(POOL, name.as_bytes(), shared_payload(writer, round))
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        client
            .append(POOL, b"log", chunk(writer, round))
            .await
            .map_err(|e| format!("append {writer}/{round}: {e}"))?;
    }
    Ok(())
}

/// Checks what a client reads after the writers finish; returns every
/// object's bytes by name.
async fn check_client_view(client: &Client) -> BTreeMap<String, Bytes> {
    let mut view = BTreeMap::new();
    for writer in 0..WRITERS {
        for round in 0..ROUNDS {
            let name = own_name(writer, round);
            let data = read_all(client, &name).await;
            assert_bytes(&name, &data, &own_payload(writer, round));
            view.insert(name, data);
        }
    }
    for object in 0..SHARED_OBJECTS {
        let name = shared_name(object);
        let data = read_all(client, &name).await;
        let candidates: Vec<(u64, u64)> = (0..WRITERS)
            .flat_map(|w| (0..ROUNDS).map(move |r| (w, r)))
            .filter(|(_, r)| shared_name(*r) == name)
            .collect();
        assert!(
            candidates
                .iter()
                .any(|(w, r)| shared_payload(*w, *r) == data),
            "{name} ({} bytes) is exactly one writer's payload",
            data.len()
        );
        view.insert(name, data);
    }
    let log = read_all(client, "log").await;
    let chunk_count = (WRITERS * ROUNDS) as usize;
    assert_eq!(
        log.len(),
        chunk_count * CHUNK_BYTES,
        "log holds every acknowledged append once"
    );
    let index: HashMap<Bytes, (u64, u64)> = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| (chunk(w, r), (w, r))))
        .collect();
    let mut next_round = vec![0u64; WRITERS as usize];
    for (position, piece) in log.chunks(CHUNK_BYTES).enumerate() {
        let Some(&(w, r)) = index.get(piece) else {
            panic!("log chunk {position} is no appended chunk (torn or misplaced)");
        };
        assert_eq!(
            r, next_round[w as usize],
            "writer {w}'s appends appear once each, in the order acknowledged"
        );
        next_round[w as usize] += 1;
    }
    view.insert("log".into(), log);
    view
}

/// Each object's PG and the OSDs acting for it, by the map `map`.
fn placements(map: &ClusterMap, names: &[&String]) -> Vec<(PgId, Vec<OsdId>)> {
    let pool = map.pool_by_name(POOL).expect("pool");
    let placement = Placement::new(map);
    names
        .iter()
        .map(|name| {
            let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, name.as_bytes());
            let mapping = placement.map_pg(pg).expect("mapping");
            (pg, mapping.acting.iter().flatten().copied().collect())
        })
        .collect()
}

/// Stops the cluster (`cairn down`) and waits until every daemon exited,
/// leaving the data directory for offline inspection.
fn stop(cluster: &Cluster) {
    let pids = recorded_pids(&cluster.dir);
    let data = cluster.dir.display().to_string();
    ok(cluster.cairn(&["down", "--data", &data]), "cairn down");
    let deadline = Instant::now() + STOP_WAIT;
    while pids.iter().any(|p| is_running(*p)) {
        assert!(Instant::now() < deadline, "daemons still running: {pids:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn open_store(dir: &Path) -> DiskStore {
    DiskStore::open(&dir.join("store"), StoreConfig::default())
        .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

#[test]
fn concurrent_clients_leave_every_replica_identical() {
    let _serial = serial();
    let base_port = 17750;
    let cluster = Cluster::up("data-paths-concurrent", OSD_COUNT, base_port, &[]);
    let (view, map, endpoints) = runtime().block_on(async {
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let client = connect(&cluster, ClientOptions::default()).await;
            tasks.push(tokio::spawn(writer(client, w)));
        }
        for (w, task) in tasks.into_iter().enumerate() {
            let result = task.await.expect("writer task");
            assert!(result.is_ok(), "writer {w}: {result:?}");
        }
        let reader = connect(&cluster, ClientOptions::default()).await;
        let view = check_client_view(&reader).await;
        let map = reader.refresh_map().await.expect("map");
        let endpoints = reader.endpoints().await.expect("endpoints");
        (view, map, endpoints)
    });
    assert_eq!(map.osds.iter().filter(|o| o.up && o.is_in).count(), 3);
    // `cairn up` serves osd.N on base_port + 1 + N.
    let dir_of: HashMap<OsdId, std::path::PathBuf> = endpoints
        .iter()
        .map(|(id, endpoint)| {
            let port: u16 = endpoint
                .addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .expect("port");
            let index = port - base_port - 1;
            (*id, cluster.dir.join(format!("osd.{index}")))
        })
        .collect();
    let names: Vec<&String> = view.keys().collect();
    let placed = placements(&map, &names);

    stop(&cluster);
    let stores: HashMap<OsdId, DiskStore> = dir_of
        .iter()
        .map(|(id, dir)| (*id, open_store(dir)))
        .collect();
    for (name, (pg, acting)) in names.iter().zip(&placed) {
        assert_eq!(acting.len(), 3, "{name}: PG {pg} acting {acting:?}");
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let key = ObjectKey::new(Bytes::copy_from_slice(name.as_bytes()));
        let mut versions = Vec::new();
        for osd in acting {
            let store = &stores[osd];
            let stored = store
                .read(collection, &key, ReadOptions::default())
                .unwrap_or_else(|e| panic!("{name} on {osd}: {e}"));
            assert_bytes(&format!("{name} on {osd}"), &stored, &view[*name]);
            versions.push(store.stat(collection, &key).expect("stat").version);
        }
        assert!(
            versions.windows(2).all(|v| v[0] == v[1]),
            "{name}: replicas agree on the object version: {versions:?}"
        );
    }
    drop(stores);
    drop(cluster);
}

#[test]
fn a_client_with_a_stale_map_is_redirected_and_succeeds() {
    let _serial = serial();
    let cluster = Cluster::up("data-paths-stale", OSD_COUNT, 17725, &[]);
    runtime().block_on(async {
        let fresh = connect(&cluster, ClientOptions::default()).await;
        let before = pattern(600, 5000);
        fresh
            .write_full(POOL, b"moving", before.clone())
            .await
            .expect("write");
        fresh
            .write_full(POOL, b"moving-read", before.clone())
            .await
            .expect("write");

        // Never refreshes on its own (no subscription, no age limit): only
        // a Retry from an OSD (or a missing primary) can make it fetch the
        // map again.
        let stale_options = ClientOptions {
            map_refresh_interval: Duration::from_secs(3600),
            follow_map: false,
            ..ClientOptions::default()
        };
        let writer = connect(&cluster, stale_options.clone()).await;
        let reader = connect(&cluster, stale_options).await;
        let old_map = writer.map().await.expect("map");
        assert_eq!(reader.map().await.expect("map").epoch, old_map.epoch);
        let primary_of = |map: &ClusterMap, name: &[u8]| {
            let pool = map.pool_by_name(POOL).expect("pool");
            let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, name);
            Placement::new(map).map_pg(pg).expect("mapping").primary
        };
        let old_primary = primary_of(&old_map, b"moving").expect("primary");

        let out = old_primary.to_string();
        ok(cluster.cairn(&["osd", "out", &out]), "osd out");
        let deadline = Instant::now() + Duration::from_secs(20);
        let new_map = loop {
            let map = fresh.refresh_map().await.expect("map");
            if map.epoch > old_map.epoch {
                break map;
            }
            assert!(Instant::now() < deadline, "osd out makes a new epoch");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let new_primary = primary_of(&new_map, b"moving").expect("primary");
        assert_ne!(new_primary, old_primary, "the object's primary moved");
        // OSDs poll the monitor every 500 ms; let them all reach the new
        // epoch so the old primary answers "not primary".
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            writer.map().await.expect("map").epoch,
            old_map.epoch,
            "the writer still holds the old map, naming {old_primary} primary"
        );

        let after = pattern(601, 7000);
        writer
            .write_full(POOL, b"moving", after.clone())
            .await
            .expect("a stale client's write is redirected and succeeds");
        let tail = pattern(602, 333);
        writer
            .append(POOL, b"moving", tail.clone())
            .await
            .expect("append");
        let writer_map = writer.map().await.expect("map");
        assert!(
            writer_map.epoch > old_map.epoch,
            "the writer fetched a newer map ({} -> {})",
            old_map.epoch,
            writer_map.epoch
        );
        assert_eq!(primary_of(&writer_map, b"moving"), Some(new_primary));
        let mut want = after.to_vec();
        want.extend_from_slice(&tail);
        assert_bytes(
            "moving via writer",
            &read_all(&writer, "moving").await,
            &want,
        );
        assert_bytes("moving via fresh", &read_all(&fresh, "moving").await, &want);

        let got = reader
            .read(POOL, b"moving-read", ReadRange::default())
            .await
            .expect("a stale client's read is redirected and succeeds");
        assert_bytes("moving-read", &got, &before);
        // With 3 OSDs and size 3 every PG lost an acting OSD, so every PG
        // began a new interval the reader's map does not know.
        assert!(
            reader.map().await.expect("map").epoch > old_map.epoch,
            "the reader fetched a newer map"
        );
    });
    drop(cluster);
}

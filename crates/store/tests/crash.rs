//! Crash safety with real processes: a child runs transactions and reports
//! each acknowledged one; the parent SIGKILLs it at random moments (and, on
//! the lossy file system, also drops everything not fsynced), reopens the
//! store and checks every acknowledged transaction is there, every object
//! is wholly the old or wholly the new version, and every read passes its
//! checksums.
//!
//! `CAIRN_CRASH_ROUNDS` (default 200) and `CAIRN_POWER_ROUNDS` (default 40)
//! set the number of kill points; `CAIRN_CRASH_SEED` replays a run.

use bytes::Bytes;
use cairn_store::{
    CollectionId, DiskStore, MemStore, ObjectKey, ObjectStore, Op, ReadOptions, StoreConfig,
    Transaction,
};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COLLECTION: CollectionId = CollectionId(7);
const THREADS: u64 = 4;
const OBJECTS_PER_THREAD: u64 = 4;

/// A small deterministic generator (xorshift64*), so the child and the
/// checker derive the same transactions from `(thread, seq)`.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn object(thread: u64, i: u64) -> ObjectKey {
    ObjectKey::new(Bytes::from(format!("t{thread}-o{i}")))
}

fn data(len: u64, seed: u64) -> Bytes {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len as usize);
    while (out.len() as u64) < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len as usize);
    // Half the payloads in block-aligned memory, as the wire delivers large
    // data segments: the store writes those without staging a copy.
    if seed % 2 == 1 {
        cairn_types::aligned::aligned_copy(&out).expect("mapped")
    } else {
        Bytes::from(out)
    }
}

/// Transaction number `seq` (from 1) of `thread`: changes to one to three
/// of the thread's objects, plus the thread's sequence key.
fn transaction(thread: u64, seq: u64) -> Transaction {
    let mut rng = Rng::new(thread << 32 | seq);
    let mut txn = Transaction::new(COLLECTION);
    for _ in 0..=rng.below(3) {
        let o = object(thread, rng.below(OBJECTS_PER_THREAD));
        // Alternate runs of 40 transactions that write only small payloads
        // (through the page cache, so only the batch's `fdatasync` of the
        // data file makes them durable; no direct write hides a missing one)
        // with runs of every size.
        let sizes: &[u64] = if (seq / 40).is_multiple_of(2) {
            &[0, 100, 5000, 16 * 1024, 40_000]
        } else {
            &[0, 100, 5000, 16 * 1024, 40_000, 300_000, 1 << 20]
        };
        let size = sizes[rng.below(sizes.len() as u64) as usize];
        let seed = rng.next();
        // Touch first, so no transaction fails on a missing object.
        txn.push(Op::Touch { object: o.clone() });
        txn.push(match rng.below(8) {
            0 | 1 => Op::WriteFull {
                object: o.clone(),
                data: data(size, seed).into(),
            },
            2 => Op::Write {
                object: o.clone(),
                offset: rng.below(200_000),
                data: data(size, seed).into(),
            },
            3 => Op::Append {
                object: o.clone(),
                data: data(size / 4, seed).into(),
            },
            4 => Op::Truncate {
                object: o.clone(),
                size: rng.below(100_000),
            },
            5 => Op::OmapSet {
                object: o.clone(),
                entries: BTreeMap::from([(
                    Bytes::from(format!("k{}", rng.below(20))),
                    data(30, seed),
                )]),
            },
            6 => Op::OmapRemoveRange {
                object: o.clone(),
                start: Bytes::from("k1"),
                end: Bytes::from("k5"),
            },
            _ => Op::Zero {
                object: o.clone(),
                offset: rng.below(100_000),
                length: rng.below(50_000),
            },
        });
        txn.push(Op::SetVersion {
            object: o.clone(),
            version: seq,
        });
        txn.push(Op::SetXattrs {
            object: o,
            xattrs: BTreeMap::from([(Bytes::from("seq"), Bytes::from(seq.to_string()))]),
        });
    }
    if rng.below(10) == 0 {
        // Occasionally remove an object (ignored if already gone).
        let o = object(thread, rng.below(OBJECTS_PER_THREAD));
        txn.push(Op::Touch { object: o.clone() });
        txn.push(Op::Remove { object: o });
    }
    txn.push(Op::MetaSet {
        key: seq_key(thread),
        value: Bytes::from(seq.to_string()),
    });
    txn
}

fn seq_key(thread: u64) -> Bytes {
    Bytes::from(format!("seq-{thread}"))
}

fn applied_seq(store: &dyn ObjectStore, thread: u64) -> u64 {
    // A child killed while it started may not have created the
    // collection yet: nothing was applied.
    let value = match store.meta_get(COLLECTION, &seq_key(thread)) {
        Err(cairn_store::StoreError::NoCollection(_)) => None,
        other => other.expect("sequence key readable"),
    };
    value.map_or(0, |v| {
        String::from_utf8_lossy(&v)
            .parse()
            .expect("sequence number")
    })
}

/// The child: runs until killed, printing `ACK thread seq` per durable
/// transaction.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var("CAIRN_CRASH_DIR") else {
        return;
    };
    let store = std::sync::Arc::new(
        DiskStore::open(Path::new(&dir), StoreConfig::default()).expect("child open"),
    );
    if store.collections().expect("collections").is_empty() {
        store
            .apply(Transaction::new(COLLECTION).with(Op::CreateCollection))
            .expect("create");
    }
    println!("READY");
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || {
                let mut seq = applied_seq(store.as_ref(), thread);
                loop {
                    seq += 1;
                    store
                        .apply(transaction(thread, seq))
                        .expect("child transaction");
                    println!("ACK {thread} {seq}");
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

/// Runs the child against `dir` until a random moment, kills it, and
/// returns the last acknowledged sequence number per thread.
fn run_child_and_kill(dir: &Path, rng: &mut Rng) -> BTreeMap<u64, u64> {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CAIRN_CRASH_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    // The child's own failures fail the test: a panic or an error it
    // printed before the kill is a bug, not a crash point.
    let stderr = child.stderr.take().expect("child stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acked = BTreeMap::new();
    let record = |line: String, acked: &mut BTreeMap<u64, u64>| {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["ACK", t, s] = parts[..] {
            acked.insert(t.parse().expect("thread"), s.parse().expect("seq"));
        }
    };
    if rng.below(4) == 0 {
        // One kill in four lands while the child starts: during the
        // store's open, its log replay and the checkpoint that follows.
        std::thread::sleep(Duration::from_millis(rng.below(40)));
    } else {
        // Otherwise wait for the child to open the store, then let it run.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.ends_with("READY") => break,
                Ok(line) => record(line, &mut acked),
                Err(_) => panic!("child did not open the store within 30 s"),
            }
        }
        std::thread::sleep(Duration::from_millis(10 + rng.below(250)));
    }
    child.kill().expect("SIGKILL child");
    let _ = child.wait();
    let _ = reader.join();
    while let Ok(line) = rx.try_recv() {
        record(line, &mut acked);
    }
    let errors = errors.join().unwrap_or_default();
    assert!(
        !errors.contains("panicked") && !errors.contains("FAILED"),
        "the child failed before it was killed:\n{errors}"
    );
    acked
}

/// The expected state of each thread's objects: the in-memory reference
/// with the thread's transactions applied up to `seq`.
struct Model {
    store: MemStore,
    seq: u64,
}

impl Model {
    fn new() -> Model {
        let store = MemStore::new();
        store
            .apply(Transaction::new(COLLECTION).with(Op::CreateCollection))
            .expect("create");
        Model { store, seq: 0 }
    }

    fn advance(&mut self, thread: u64, to: u64) {
        while self.seq < to {
            self.seq += 1;
            self.store
                .apply(transaction(thread, self.seq))
                .expect("every workload transaction is valid");
        }
    }
}

/// Reopens the store and checks it against the acknowledged transactions.
fn check(dir: &Path, acked: &BTreeMap<u64, u64>, models: &mut BTreeMap<u64, Model>) {
    let store = DiskStore::open(dir, StoreConfig::default()).expect("reopen after crash");
    for thread in 0..THREADS {
        let seq = applied_seq(&store, thread);
        let model = models.entry(thread).or_insert_with(Model::new);
        let floor = acked.get(&thread).copied().unwrap_or(model.seq);
        assert!(
            seq == floor || seq == floor + 1,
            "thread {thread}: store has transaction {seq}, acknowledged up to {floor}"
        );
        model.advance(thread, seq);
        let model = &model.store;
        for i in 0..OBJECTS_PER_THREAD {
            let o = object(thread, i);
            let expected = model.read(COLLECTION, &o, ReadOptions::default()).ok();
            let got = match store.read(COLLECTION, &o, ReadOptions::default()) {
                Ok(bytes) => Some(bytes),
                Err(cairn_store::StoreError::NotFound { .. }) => None,
                Err(e) => panic!("thread {thread} {o:?}: {e}"),
            };
            assert_eq!(
                expected.as_ref().map(Bytes::len),
                got.as_ref().map(Bytes::len),
                "{o:?} size at seq {seq}"
            );
            assert!(
                expected == got,
                "{o:?}: data differs from transaction {seq}'s result"
            );
            if expected.is_some() {
                assert_eq!(
                    model.stat(COLLECTION, &o).ok(),
                    store.stat(COLLECTION, &o).ok(),
                    "{o:?} version"
                );
                assert_eq!(
                    model.xattrs(COLLECTION, &o).ok(),
                    store.xattrs(COLLECTION, &o).ok(),
                    "{o:?} xattrs"
                );
                assert_eq!(
                    model.omap_range(COLLECTION, &o, None, 1000).ok(),
                    store.omap_range(COLLECTION, &o, None, 1000).ok(),
                    "{o:?} omap"
                );
            }
        }
    }
}

fn rounds(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("CAIRN_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_transaction() {
    let seed = seed();
    eprintln!("crash test seed {seed} (CAIRN_CRASH_SEED={seed} replays the kill timing)");
    let mut rng = Rng::new(seed);
    let dir = tempfile::Builder::new()
        .prefix("cairn-crash-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let mut models = BTreeMap::new();
    let rounds = rounds("CAIRN_CRASH_ROUNDS", 200);
    for round in 0..rounds {
        let acked = run_child_and_kill(dir.path(), &mut rng);
        check(dir.path(), &acked, &mut models);
        if round % 50 == 0 {
            eprintln!(
                "round {round}: {:?}",
                models.iter().map(|(t, m)| (*t, m.seq)).collect::<Vec<_>>()
            );
        }
    }
    let acked_total: u64 = models.values().map(|m| m.seq).sum();
    eprintln!("{rounds} kill points, {acked_total} transactions committed, none lost");
    assert!(
        acked_total > rounds,
        "the child made too little progress to test anything"
    );
    assert_every_thread_progressed(&models);
}

/// Each writer thread of the child committed something over the run: a
/// thread stuck from the start would leave its objects untested.
fn assert_every_thread_progressed(models: &BTreeMap<u64, Model>) {
    for thread in 0..THREADS {
        let seq = models.get(&thread).map_or(0, |m| m.seq);
        assert!(
            seq > 0,
            "thread {thread} committed nothing in the whole run"
        );
    }
}

/// The same workload on a file system that forgets everything not fsynced
/// when the power goes: after each SIGKILL the power is cut too (tearing
/// the last unsynced write), so a missing or misordered fsync would lose
/// an acknowledged transaction here even though SIGKILL alone cannot.
#[test]
fn power_loss_at_random_points_loses_no_acknowledged_transaction() {
    if !Path::new("/dev/fuse").exists() {
        // In CI a skip would pass unseen: the power-loss guarantee would
        // go untested. Only a developer's machine may lack FUSE.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "/dev/fuse is missing under CI=true: the power-loss test must run"
        );
        eprintln!("SKIPPED: /dev/fuse is missing, so the lossy file system cannot mount");
        return;
    }
    let seed = seed();
    eprintln!(
        "power-loss test seed {seed} (CAIRN_CRASH_SEED={seed} replays the kill timing and tears)"
    );
    let mut rng = Rng::new(seed);
    let backing = tempfile::Builder::new()
        .prefix("cairn-power-backing-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let mountpoint = tempfile::Builder::new()
        .prefix("cairn-power-mnt-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let fs =
        cairn_lossyfs::LossyFs::mount(backing.path(), mountpoint.path()).expect("mount lossyfs");
    let store_dir = mountpoint.path().join("store");
    let mut models = BTreeMap::new();
    let mut cuts_with_unsynced_data = 0;
    let rounds = rounds("CAIRN_POWER_ROUNDS", 40);
    for round in 0..rounds {
        let acked = run_child_and_kill(&store_dir, &mut rng);
        let dirty_bytes = fs.dirty_bytes();
        // Every other cut first writes back a random half of the unsynced
        // blocks, as a disk cache may: nothing may rely on unsynced writes
        // being lost together or in order.
        let torn = if round % 2 == 1 {
            fs.power_loss_keeping_some(rng.next())
        } else {
            fs.power_loss(rng.next())
        };
        if dirty_bytes > 0 {
            cuts_with_unsynced_data += 1;
        }
        if round % 10 == 0 {
            eprintln!("round {round}: power cut with {dirty_bytes} unsynced bytes: {torn}");
        }
        check(&store_dir, &acked, &mut models);
    }
    let applied: u64 = models.values().map(|m| m.seq).sum();
    eprintln!(
        "{rounds} power cuts ({cuts_with_unsynced_data} dropping unsynced data), {applied} transactions committed, none lost"
    );
    assert!(
        applied > rounds,
        "the child made too little progress to test anything"
    );
    // A cut that found nothing unsynced tests nothing an fsync guards:
    // most cuts must drop data, or the kills land only between batches.
    assert_every_thread_progressed(&models);
    assert!(
        cuts_with_unsynced_data * 2 >= rounds,
        "only {cuts_with_unsynced_data} of {rounds} power cuts dropped unsynced data"
    );
}

//! Shared by the tests that start a real cluster with `cairn up --detach`:
//! a guard that stops it (and kills every recorded pid) when the test
//! ends, also on panic, and a bounded way to run `cairn`; for the healing
//! tests, writer lanes that record every write, SIGKILL, and the checks
//! they end with (every PG `active+clean`, every acknowledged write
//! byte-exact).

#![allow(dead_code)] // each test binary uses a different subset

pub mod checks;
pub mod io500;

use bytes::Bytes;
use cairn_client::{Client, ClientError, ClientOptions, ReadRange};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest any one `cairn` command may run.
pub const COMMAND_WAIT: Duration = Duration::from_secs(120);

/// A cluster `cairn up --detach` started in `dir`; dropping it runs
/// `cairn down` and kills any recorded pid still alive.
#[derive(Debug)]
pub struct Cluster {
    pub dir: PathBuf,
    pub conf: PathBuf,
    /// The monitor's port; osd.N serves on base port + 1 + N.
    pub base_port: u16,
}

impl Cluster {
    /// Starts `osds` OSDs with the monitor on `base_port`; `extra` flags go
    /// to `cairn up`.
    pub fn up(name: &str, osds: u16, base_port: u16, extra: &[&str]) -> Cluster {
        Cluster::up_at(test_dir(name), osds, base_port, extra)
    }

    /// As [`Cluster::up`], in an existing directory `dir` (a mount point,
    /// say); it is emptied, not removed, at the end if it cannot be.
    pub fn up_at(dir: PathBuf, osds: u16, base_port: u16, extra: &[&str]) -> Cluster {
        Cluster::up_with_env(dir, osds, base_port, extra, &[])
    }

    /// As [`Cluster::up_at`], with environment variables for the daemons.
    pub fn up_with_env(
        dir: PathBuf,
        osds: u16,
        base_port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let cluster = Cluster {
            conf: dir.join("cairn.toml"),
            dir,
            base_port,
        };
        let data = cluster.dir.display().to_string();
        let osds = osds.to_string();
        let port = base_port.to_string();
        let mut args = vec![
            "up",
            "--detach",
            "--data",
            &data,
            "--osds",
            &osds,
            "--base-port",
            &port,
        ];
        args.extend_from_slice(extra);
        // Only the file-system tests run an MDS, only the S3 tests a
        // gateway.
        if !extra.contains(&"--mds") {
            args.extend_from_slice(&["--mds", "0"]);
        }
        if !extra.contains(&"--s3-port") {
            args.extend_from_slice(&["--s3-port", "0"]);
        }
        ok(cairn_with_env(&cluster.conf, &args, None, env), "cairn up");
        cluster
    }

    /// Runs `cairn ARGS` against this cluster, bounded by [`COMMAND_WAIT`].
    pub fn cairn(&self, args: &[&str]) -> Output {
        cairn(&self.conf, args)
    }

    /// Stops the cluster (`cairn down`, the data stays until the guard
    /// drops) and checks that every PG's copies on its acting OSDs are
    /// identical, store by store; returns the object copies compared.
    /// Call it with every PG `active+clean`.
    pub fn stop_and_compare_copies(&self) -> u64 {
        let acting = checks::acting_sets(self);
        let dirs = checks::osd_dirs(self, self.base_port);
        ok(
            self.cairn(&["down", "--data", &self.dir.display().to_string()]),
            "cairn down",
        );
        let compared = checks::copies_match(&acting, &dirs);
        eprintln!("{compared} object copies identical on their acting OSDs");
        compared
    }

    /// The pid `cairn up` recorded for daemon `name` (`mon`, `osd.1`).
    pub fn daemon_pid(&self, name: &str) -> u32 {
        let path = self.dir.join("run").join(format!("{name}.pid"));
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", path.display()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let pids = recorded_pids(&self.dir);
        drop(
            Command::new(env!("CARGO_BIN_EXE_cairn"))
                .arg("down")
                .arg("--data")
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status(),
        );
        for pid in pids {
            if is_running(pid) {
                drop(
                    Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status(),
                );
            }
        }
        // A failed test's data and logs stay for a look when asked for
        // (CAIRN_KEEP_FAILED=1).
        if std::thread::panicking() && std::env::var_os("CAIRN_KEEP_FAILED").is_some() {
            eprintln!("kept the failed cluster's data dir {}", self.dir.display());
            return;
        }
        drop(std::fs::remove_dir_all(&self.dir));
    }
}

/// The repository: cargo's `CARGO_MANIFEST_DIR` as it runs the test, so a
/// test binary cargo found fresh from a build in another clone (same
/// sources, same target directory) reads this clone's files.
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn test_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = PathBuf::from(format!(
        "/var/tmp/cairn-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// The supervisor's pid and every daemon's, as `cairn up` recorded them.
pub fn recorded_pids(dir: &Path) -> Vec<u32> {
    let mut files = vec![dir.join("up.pid")];
    if let Ok(entries) = std::fs::read_dir(dir.join("run")) {
        files.extend(entries.flatten().map(|e| e.path()));
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live process (zombies count as gone).
pub fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// Runs `cairn ARGS` with config `conf`, killed after [`COMMAND_WAIT`].
pub fn cairn(conf: &Path, args: &[&str]) -> Output {
    cairn_with_input(conf, args, None)
}

/// As [`cairn`], feeding `stdin` to the command when given.
pub fn cairn_with_input(conf: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    cairn_with_env(conf, args, stdin, &[])
}

/// As [`cairn_with_input`], with extra environment variables (inherited by
/// the daemons `cairn up` starts).
pub fn cairn_with_env(
    conf: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Output {
    cairn_wrapped(&[], conf, args, stdin, env)
}

/// As [`cairn_with_env`], run through `wrapper` (say `ip netns exec NS`).
pub fn cairn_wrapped(
    wrapper: &[&str],
    conf: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Output {
    let bin = env!("CARGO_BIN_EXE_cairn");
    let (program, rest): (&str, Vec<&str>) = match wrapper.split_first() {
        Some((first, more)) => (first, more.iter().copied().chain([bin]).collect()),
        None => (bin, Vec::new()),
    };
    let mut child = Command::new(program)
        .args(rest)
        .args(args)
        .env("CAIRN_CONF", conf)
        // The daemons `cairn up` starts inherit it: CAIRN_TEST_LOG=info
        // (or debug) makes a failed run's DATA/logs worth reading; a test
        // may set its own in `env`.
        .env(
            "RUST_LOG",
            std::env::var("CAIRN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut pipe, input).expect("write stdin");
    }
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + COMMAND_WAIT;
        while Instant::now() < deadline {
            if !is_running(pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status(),
        );
    });
    let output = child.wait_with_output().expect("wait");
    drop(watchdog.join());
    output
}

/// The command's stdout, after asserting it succeeded.
pub fn ok(output: Output, what: &str) -> Vec<u8> {
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The command's stdout parsed as JSON, after asserting it succeeded.
pub fn ok_json(output: Output, what: &str) -> serde_json::Value {
    let stdout = ok(output, what);
    serde_json::from_slice(&stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}",
            String::from_utf8_lossy(&stdout)
        )
    })
}

/// Every OSD row of `cairn osd tree --json`.
pub fn tree_osds(cluster: &Cluster) -> Vec<serde_json::Value> {
    let tree = ok_json(cluster.cairn(&["osd", "tree", "--json"]), "osd tree");
    tree["racks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["hosts"].as_array().into_iter().flatten())
        .flat_map(|h| h["osds"].as_array().into_iter().flatten())
        .cloned()
        .collect()
}

/// Flips one byte in every 4 KiB block of the data file of the OSD in
/// `osd.N/`, the way bit rot would (the OSD keeps running). Returns the
/// blocks changed.
#[allow(dead_code)]
pub fn rot(cluster: &Cluster, dir_index: u32) -> u64 {
    let path = cluster.dir.join(format!("osd.{dir_index}/store/data"));
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let len = file.metadata().expect("data file metadata").len();
    let mut blocks = 0;
    let mut offset = 100;
    while offset < len {
        let mut byte = [0u8];
        file.seek(SeekFrom::Start(offset)).expect("seek");
        file.read_exact(&mut byte).expect("read");
        byte[0] ^= 0x5a;
        file.seek(SeekFrom::Start(offset)).expect("seek");
        file.write_all(&byte).expect("write");
        blocks += 1;
        offset += 4096;
    }
    file.sync_all().expect("sync");
    blocks
}

/// `len` bytes of a xorshift stream seeded by `seed`: distinct per seed and
/// never periodic within an object, so misplaced blocks are caught.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = (seed ^ 0x5851_f42d_4c95_7f2d).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// A two-worker runtime for tests that drive the client library.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The monitor address `cairn up` wrote into the cluster's client config.
pub fn mon_addr(cluster: &Cluster) -> String {
    cairn_client::ClientConfig::load(&cluster.conf)
        .expect("client config")
        .mon
}

/// The clusters of one test file run one at a time: each test stays well
/// under a minute on two slow cores only if it has them to itself.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The pool `cairn up` creates (size 3, min_size 2 with 3 or more OSDs).
pub const POOL: &str = "data";
/// Longest healing may take in the small test clusters.
pub const CLEAN_WAIT: Duration = Duration::from_secs(90);

/// Object `index`'s bytes: distinct per index and sized 1 to 96 KiB.
pub fn payload(index: u64) -> Bytes {
    let len = 1024 + usize::try_from(index * 7919 % (95 * 1024)).unwrap_or(0);
    Bytes::from(pattern(index, len))
}

/// Client options of the healing tests: `op_deadline` across retries, and
/// map refreshes often enough to follow kills quickly.
pub fn client_options(op_deadline: Duration) -> ClientOptions {
    ClientOptions {
        op_deadline,
        map_refresh_interval: Duration::from_millis(300),
        ..ClientOptions::default()
    }
}

/// Waits until every PG of the cluster is reported `active+clean` by OSDs
/// that have all seen the newest map, then deep-scrubs every pool, which
/// must find no inconsistent copy; returns how long reaching clean took,
/// panics with the last status after [`CLEAN_WAIT`].
pub fn wait_clean(cluster: &Cluster) -> Duration {
    let started = Instant::now();
    let mut last = serde_json::Value::Null;
    while started.elapsed() < CLEAN_WAIT {
        let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
        let states = status["pgs_by_state"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let current = status["reported_epoch"] == status["epoch"];
        let clean = current && states.len() == 1 && states.contains_key("active+clean");
        if clean {
            let took = started.elapsed();
            // Clean must also mean equal: every copy read and compared.
            checks::deep_scrub_finds_nothing(cluster);
            return took;
        }
        last = status;
        std::thread::sleep(Duration::from_millis(500));
    }
    let pgs = cluster.cairn(&["pg", "ls"]);
    panic!(
        "PGs not active+clean within {CLEAN_WAIT:?}: {}\n{}",
        last["pgs_by_state"],
        String::from_utf8_lossy(&pgs.stdout)
    );
}

/// Reads `obj-{index}` of [`POOL`] for every index and compares it with
/// [`payload`].
pub async fn verify(client: &Client, indexes: &[u64]) {
    for index in indexes {
        let name = format!("obj-{index}");
        let data = client
            .read(POOL, name.as_bytes(), ReadRange::default())
            .await
            .unwrap_or_else(|e| panic!("read {name}: {e}"));
        assert!(data == payload(*index), "{name} reads back byte-exact");
    }
}

/// Writes `obj-{index}` for each index, one at a time, each acknowledged.
pub async fn write_each(client: &Client, indexes: impl IntoIterator<Item = u64>) {
    for index in indexes {
        let name = format!("obj-{index}");
        client
            .write_full(POOL, name.as_bytes(), payload(index))
            .await
            .unwrap_or_else(|e| panic!("write {name}: {e}"));
    }
}

/// One write of a writer lane: which object, when it was issued and when
/// the client returned, and the error if it was not acknowledged.
#[derive(Debug)]
pub struct Write {
    pub index: u64,
    pub started: Instant,
    pub finished: Instant,
    pub error: Option<ClientError>,
}

impl Write {
    pub fn is_acked(&self) -> bool {
        self.error.is_none()
    }

    pub fn latency(&self) -> Duration {
        self.finished - self.started
    }
}

/// Writes `obj-{index}` of [`POOL`] with [`payload`] for each index in
/// turn, one at a time, until `stop` (or the indexes run out); records
/// every write.
pub async fn writer(
    client: Client,
    indexes: impl Iterator<Item = u64>,
    stop: Arc<AtomicBool>,
) -> Vec<Write> {
    let mut writes = Vec::new();
    for index in indexes {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let name = format!("obj-{index}");
        let started = Instant::now();
        let outcome = client
            .write_full(POOL, name.as_bytes(), payload(index))
            .await;
        writes.push(Write {
            index,
            started,
            finished: Instant::now(),
            error: outcome.err(),
        });
    }
    writes
}

/// Writer lanes running on the caller's runtime until [`Writers::stop`].
#[derive(Debug)]
pub struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Write>>>,
}

impl Writers {
    /// `lanes` writers; lane `l` writes the indexes `l`, `l + lanes`, ...
    pub fn start(client: &Client, lanes: u64) -> Writers {
        Writers::start_filtered(client, lanes, |_| true)
    }

    /// As [`Writers::start`], skipping the indexes `keep` refuses (to aim
    /// the lanes at some PGs only).
    pub fn start_filtered(
        client: &Client,
        lanes: u64,
        keep: impl Fn(u64) -> bool + Clone + Send + 'static,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..lanes)
            .map(|lane| {
                let keep = keep.clone();
                let indexes = (lane..).step_by(usize::try_from(lanes).unwrap_or(1));
                tokio::spawn(writer(
                    client.clone(),
                    indexes.filter(move |i| keep(*i)),
                    stop.clone(),
                ))
            })
            .collect();
        Writers { stop, tasks }
    }

    /// Stops the lanes (each after its write in flight) and returns every
    /// write they made.
    pub async fn stop(self) -> Vec<Write> {
        self.stop.store(true, Ordering::Relaxed);
        let mut writes = Vec::new();
        for task in self.tasks {
            writes.extend(task.await.expect("writer lane"));
        }
        writes
    }
}

/// The acknowledged indexes and the errors of `writes`.
pub fn acked_and_errors(writes: &[Write]) -> (Vec<u64>, Vec<String>) {
    let acked = writes
        .iter()
        .filter(|w| w.is_acked())
        .map(|w| w.index)
        .collect();
    let errors = writes
        .iter()
        .filter_map(|w| Some(format!("obj-{}: {}", w.index, w.error.as_ref()?)))
        .collect();
    (acked, errors)
}

/// SIGKILLs `pid`, which must be running.
pub fn kill(pid: u32) {
    assert!(is_running(pid), "pid {pid} is not running");
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
}

/// PG copies OSD `osd` (map id) reports holding, strays included.
pub fn osd_pg_count(cluster: &Cluster, osd: u64) -> u64 {
    let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
    status["osd_pgs"][osd.to_string()]
        .as_u64()
        .unwrap_or_else(|| panic!("no PG count for osd.{osd}: {status}"))
}

/// Each OSD's data dir under `cluster_dir` made a lossyfs mount of its
/// own (`osd.N`), for power-cut tests: the backing dirs (drop them after
/// the mounts) and the mounts.
pub fn lossy_osd_dirs(
    cluster_dir: &Path,
    osds: u16,
    prefix: &str,
) -> (Vec<tempfile::TempDir>, Vec<cairn_lossyfs::LossyFs>) {
    let mut backings = Vec::new();
    let mut mounts = Vec::new();
    for osd in 0..osds {
        let backing = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/var/tmp")
            .expect("backing dir");
        let mountpoint = cluster_dir.join(format!("osd.{osd}"));
        std::fs::create_dir_all(&mountpoint).expect("mount point");
        mounts.push(
            cairn_lossyfs::LossyFs::mount(backing.path(), &mountpoint).expect("mount lossyfs"),
        );
        backings.push(backing);
    }
    (backings, mounts)
}

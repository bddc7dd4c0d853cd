//! A real network partition. The monitor and three OSDs run in one network
//! namespace, a fourth OSD in another; a veth pair joins them, with
//! loopback addresses (127.0.1.1 and 127.0.1.2, `route_localnet` on) so
//! every server still binds a 127.x address. Blackhole routes on both sides
//! cut the fourth OSD off silently (its TCP peers see no reset, only
//! silence), while writers keep going in the first namespace; then the
//! routes go and the OSD comes back. Afterwards every PG is `active+clean`
//! and every acknowledged write reads back byte-exact.
//!
//! Read leases, end to end: a client thread living in namespace B keeps
//! reading the objects whose primary is the cut-off OSD. It may read them
//! only until that OSD's lease runs out, which must be before any
//! overwrite of them is acknowledged on the other side, so every read it
//! gets returns the old value: no stale read after a newer write.
//!
//! Needs root and iproute2 (both are on the CI machines).

mod common;

use cairn_client::{Client, ClientOptions, ReadRange};
use cairn_placement::Placement;
use common::{is_running, ok, ok_json, test_dir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const A_ADDR: &str = "127.0.1.1";
const B_ADDR: &str = "127.0.1.2";
const PORT: u16 = 18800;
const POOL: &str = "part";
const WAIT: Duration = Duration::from_secs(120);

/// Runs `ip ARGS`, panicking with its stderr if it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair, removed on drop; and the daemons
/// started in them, killed on drop.
struct Net {
    a: String,
    b: String,
    dir: PathBuf,
    daemons: Vec<Child>,
}

impl Net {
    fn new(dir: PathBuf) -> Net {
        let tag = std::process::id();
        let net = Net {
            a: format!("cairn-pa-{tag}"),
            b: format!("cairn-pb-{tag}"),
            dir,
            daemons: Vec::new(),
        };
        let (va, vb) = (format!("cpa{tag}"), format!("cpb{tag}"));
        ip(&["netns", "add", &net.a]);
        ip(&["netns", "add", &net.b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        for (ns, dev, addr) in [(&net.a, &va, A_ADDR), (&net.b, &vb, B_ADDR)] {
            ip(&["link", "set", dev, "netns", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            for conf in ["all", dev.as_str()] {
                let key = format!("net.ipv4.conf.{conf}.route_localnet=1");
                ip(&["netns", "exec", ns, "sysctl", "-qw", &key]);
            }
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        net
    }

    /// Starts `cairn ARGS` as a daemon in namespace `ns`, logging to
    /// `DIR/NAME.log`.
    fn daemon(&mut self, ns: &str, name: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_cairn")])
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("CAIRN_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn daemon");
        self.daemons.push(child);
    }

    /// `cairn ARGS` as a client in namespace A.
    fn cairn(&self, args: &[&str]) -> Output {
        let conf = self.dir.join("cairn.toml");
        common::cairn_wrapped(&["ip", "netns", "exec", &self.a], &conf, args, None, &[])
    }

    fn put(&self, index: u64) -> Result<(), String> {
        let file = self.dir.join(format!("obj-{index}"));
        std::fs::write(&file, payload(index)).expect("write payload file");
        let name = format!("p-{index}");
        let path = file.display().to_string();
        let out = self.cairn(&["object", "put", "--pool", POOL, &name, &path]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Cuts (or heals) the link silently: blackhole routes to the other
    /// side on both sides.
    fn partition(&self, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        ip(&[
            "-n",
            &self.a,
            "route",
            verb,
            "blackhole",
            &format!("{B_ADDR}/32"),
        ]);
        ip(&[
            "-n",
            &self.b,
            "route",
            verb,
            "blackhole",
            &format!("{A_ADDR}/32"),
        ]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for child in &mut self.daemons {
            if is_running(child.id()) {
                drop(child.kill());
            }
            drop(child.wait());
        }
        drop(Command::new("ip").args(["netns", "del", &self.a]).status());
        drop(Command::new("ip").args(["netns", "del", &self.b]).status());
        if std::thread::panicking() && std::env::var_os("CAIRN_KEEP_FAILED").is_some() {
            eprintln!("kept {}", self.dir.display());
            return;
        }
        drop(std::fs::remove_dir_all(&self.dir));
    }
}

/// Object `index`: 8 to 72 KiB, distinct per index.
fn payload(index: u64) -> Vec<u8> {
    let len = 8192 + usize::try_from(index * 4099 % 65536).unwrap_or(0);
    common::pattern(index + 31_000, len)
}

/// The overwrite of object `index` during the partition.
fn payload2(index: u64) -> Vec<u8> {
    common::pattern(index + 77_000, 4096)
}

/// Moves the calling thread into network namespace `ns` (the namespace is
/// per thread: the sockets it opens afterwards are that namespace's).
fn enter_netns(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("netns file");
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&file),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .expect("setns");
}

/// What the client in namespace B saw: each successful read's time and
/// whether it returned the old value.
type Reads = Arc<Mutex<Vec<(Instant, bool)>>>;

/// A thread in namespace `ns` that reads `names` in a loop until `stop`.
fn reader_in(
    ns: String,
    mon: String,
    names: Vec<(String, u64)>,
    stop: Arc<AtomicBool>,
) -> (Reads, std::thread::JoinHandle<()>) {
    let reads: Reads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&reads);
    let handle = std::thread::spawn(move || {
        enter_netns(&ns);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let options = ClientOptions {
                op_deadline: Duration::from_millis(1500),
                ..ClientOptions::default()
            };
            let client = Client::connect_with(&mon, options)
                .await
                .expect("connect from B");
            while !stop.load(Ordering::Relaxed) {
                for (name, index) in &names {
                    // When the read began: one that began after an
                    // overwrite was acknowledged must not see the old
                    // value (one that began before may, however late its
                    // answer is noted on a busy machine).
                    let began = Instant::now();
                    let read = client.read(POOL, name.as_bytes(), ReadRange::default());
                    if let Ok(got) = read.await {
                        let old = got == payload(*index);
                        seen.lock().expect("reads").push((began, old));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    });
    (reads, handle)
}

/// The objects among `p-0..p-39` whose primary is OSD `osd`, by the map.
fn objects_led_by(ns: String, mon: String, osd: u32) -> Vec<(String, u64)> {
    std::thread::spawn(move || {
        enter_netns(&ns);
        let map = common::runtime().block_on(async {
            let client = Client::connect(&mon).await.expect("connect");
            client.refresh_map().await.expect("map")
        });
        let placement = Placement::new(&map);
        let pool = map.pool_by_name(POOL).expect("pool");
        (0..40u64)
            .filter_map(|index| {
                let name = format!("p-{index}");
                let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, name.as_bytes());
                let primary = placement.map_pg(pg).ok()?.primary?;
                (primary.0 == osd).then_some((name, index))
            })
            .collect()
    })
    .join()
    .expect("placement thread")
}

fn status(net: &Net) -> serde_json::Value {
    ok_json(net.cairn(&["status", "--json"]), "status")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    started.elapsed()
}

fn all_clean(status: &serde_json::Value) -> bool {
    let states = status["pgs_by_state"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    status["reported_epoch"] == status["epoch"]
        && states.len() == 1
        && states.contains_key("active+clean")
}

fn osd_dir(dir: &Path, n: u32) -> String {
    dir.join(format!("osd.{n}")).display().to_string()
}

#[test]
fn an_osd_cut_off_by_a_network_partition_heals_and_nothing_is_lost() {
    let dir = test_dir("partition");
    let mut net = Net::new(dir.clone());
    let (a, b) = (net.a.clone(), net.b.clone());
    let mon = format!("{A_ADDR}:{PORT}");
    std::fs::write(dir.join("cairn.toml"), format!("mon = \"{mon}\"\n")).expect("conf");
    let mon_data = dir.join("mon").display().to_string();
    net.daemon(
        &a,
        "mon",
        &[
            "mon",
            "--data",
            &mon_data,
            "--addr",
            &mon,
            "--down-grace",
            "3s",
        ],
    );
    for n in 0..4u32 {
        let (ns, addr, host) = if n < 3 {
            (a.as_str(), A_ADDR, format!("a{n}"))
        } else {
            (b.as_str(), B_ADDR, "b0".to_owned())
        };
        let listen = format!("{addr}:{}", PORT + 1 + u16::try_from(n).unwrap_or(0));
        let data = osd_dir(&dir, n);
        net.daemon(
            ns,
            &format!("osd.{n}"),
            &[
                "osd", "--data", &data, "--mon", &mon, "--addr", &listen, "--host", &host,
            ],
        );
    }
    wait_until("4 OSDs up", || {
        let out = net.cairn(&["status", "--json"]);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|s| s["osds_up"] == 4)
    });
    ok(
        net.cairn(&[
            "pool",
            "create",
            POOL,
            "--size",
            "3",
            "--min-size",
            "2",
            "--pg-num",
            "16",
            "--failure-domain",
            "host",
        ]),
        "pool create",
    );
    wait_until("the new pool clean", || all_clean(&status(&net)));
    for index in 0..40 {
        net.put(index)
            .unwrap_or_else(|e| panic!("put {index}: {e}"));
    }
    // The OSD in namespace B, and the objects it leads.
    let b_id: u32 = std::fs::read_to_string(dir.join("osd.3/osd_id"))
        .expect("osd id")
        .trim()
        .parse()
        .expect("osd id");
    let led_by_b = objects_led_by(a.clone(), mon.clone(), b_id);
    assert!(
        !led_by_b.is_empty(),
        "osd.{b_id} leads some of the 40 objects"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, reader) = reader_in(b.clone(), mon.clone(), led_by_b.clone(), Arc::clone(&stop));
    wait_until("the client in B reads", || {
        !reads.lock().expect("reads").is_empty()
    });

    net.partition(true);
    let cut_at = Instant::now();
    // Overwrites of the objects B led, from A: acknowledged only once a new
    // primary activated, which waits out B's read lease.
    let mut first_overwrite: Option<Instant> = None;
    for (name, index) in &led_by_b {
        let file = dir.join(format!("new-{index}"));
        std::fs::write(&file, payload2(*index)).expect("payload file");
        let path = file.display().to_string();
        ok(
            net.cairn(&["object", "put", "--pool", POOL, name, &path]),
            "overwrite under the partition",
        );
        first_overwrite.get_or_insert_with(Instant::now);
    }
    let first_overwrite = first_overwrite.expect("overwrites");
    // More writes from A; those to PGs with a copy in B wait until it is
    // marked down and the PGs re-peer without it.
    let mut acked = (0..40).collect::<Vec<u64>>();
    let mut failed = Vec::new();
    for index in 40..100 {
        match net.put(index) {
            Ok(()) => acked.push(index),
            Err(error) => failed.push(format!("p-{index}: {error}")),
        }
    }
    let down = status(&net);
    eprintln!(
        "partition: {} writes in {:?}, {} failed; osds up {}",
        60 - failed.len(),
        cut_at.elapsed(),
        failed.len(),
        down["osds_up"]
    );
    assert!(
        failed.is_empty(),
        "writes failed under the partition: {failed:?}"
    );
    assert_eq!(down["osds_up"], 3, "osd.{b_id} is marked down: {down}");
    let health = down["health"]["checks"].to_string();
    assert!(health.contains("down"), "{health}");

    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader thread");
    let reads = reads.lock().expect("reads").clone();
    let last_read = reads.iter().map(|(at, _)| *at).max().expect("reads");
    let after_cut = reads.iter().filter(|(at, _)| *at > cut_at).count();
    eprintln!(
        "B read {} times, {after_cut} after the cut, the last begun {:?} after it; \
         the first overwrite was acknowledged {:?} after it",
        reads.len(),
        last_read.saturating_duration_since(cut_at),
        first_overwrite - cut_at
    );
    assert!(
        reads.iter().all(|(_, old)| *old),
        "the cut-off side only ever read the old values"
    );
    assert!(
        last_read < first_overwrite,
        "no read begun after an overwrite was acknowledged was answered by the cut-off primary"
    );

    net.partition(false);
    let healed = wait_until("osd back up and every PG clean", || {
        let s = status(&net);
        s["osds_up"] == 4 && all_clean(&s)
    });
    eprintln!("healed: all PGs active+clean {healed:?} after the link came back");
    let recovered = status(&net)["recovery"]["recovered_objects"]
        .as_u64()
        .unwrap_or(0);
    assert!(recovered > 0, "the returning OSD caught up by recovery");
    for index in acked {
        let name = format!("p-{index}");
        let got = ok(
            net.cairn(&["object", "get", "--pool", POOL, &name, "-"]),
            "object get",
        );
        let overwritten = led_by_b.iter().any(|(_, i)| *i == index);
        let want = if overwritten {
            payload2(index)
        } else {
            payload(index)
        };
        assert!(got == want, "{name} differs after the partition");
    }
    drop(net);
}

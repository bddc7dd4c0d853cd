//! An OSD whose store is corrupt refuses to serve it (issue 19, item 1):
//! with its commit log's header damaged while it was stopped, the OSD
//! starts but serves nothing, goes down, and `cairn health detail` names
//! the OSD, the damage and the way out; the cluster keeps serving every
//! object from the other copies. `cairn osd --recreate-store` sets the
//! damaged store aside and starts empty under a new id, the old id goes
//! out, and recovery fills the new OSD until every PG is `active+clean`
//! and every object reads back byte-exact.

mod common;

use cairn_client::{Client, ClientConfig};
use common::{Cluster, is_running, ok, ok_json, runtime, tree_osds, verify, write_each};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OBJECTS: u64 = 60;
const WAIT: Duration = Duration::from_secs(60);

/// Kills the directly started OSD when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        drop(self.0.kill());
        drop(self.0.wait());
    }
}

fn health_detail(cluster: &Cluster) -> String {
    let out = cluster.cairn(&["health", "detail"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(what: &str, mut done: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        match done() {
            None => return,
            Some(state) => last = state,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{what} within {WAIT:?}; last seen:\n{last}");
}

#[test]
fn a_corrupt_store_is_refused_reported_and_recreated_from_peers() {
    let cluster = Cluster::up("corrupt-store", 3, 17690, &["--down-grace", "2s"]);
    let data = cluster.dir.display().to_string();
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let rt = runtime();
    rt.block_on(async {
        let client = Client::connect(&config.mon).await.expect("client");
        write_each(&client, 0..OBJECTS).await;
    });
    // osd.1 of `cairn up` serves on base port + 2.
    let osd_addr = "127.0.0.1:17692";
    let old_id = tree_osds(&cluster)
        .iter()
        .find(|o| o["addr"] == osd_addr)
        .and_then(|o| o["id"].as_u64())
        .expect("osd.1's id");
    ok(
        cluster.cairn(&["daemon", "stop", "osd.1", "--data", &data]),
        "daemon stop",
    );
    // Damage the commit log's header (its epoch, under the header's crc).
    let wal = cluster.dir.join("osd.1").join("store").join("wal");
    let mut bytes = std::fs::read(&wal).expect("the commit log");
    bytes[21] ^= 0x40;
    std::fs::write(&wal, &bytes).expect("damaged log written");
    ok(
        cluster.cairn(&["daemon", "start", "osd.1", "--data", &data]),
        "daemon start",
    );

    // It runs, serves nothing, is down, and health says why and what to do.
    wait_for("health names the corrupt store", || {
        let detail = health_detail(&cluster);
        let named = detail.starts_with("HEALTH_ERR")
            && detail.contains(&format!("osd.{old_id} has a corrupt store"))
            && detail.contains("commit log")
            && detail.contains("--recreate-store");
        (!named).then_some(detail)
    });
    wait_for("the OSD with the corrupt store is down", || {
        let osd = tree_osds(&cluster)
            .into_iter()
            .find(|o| o["id"] == old_id)?;
        (osd["up"] != false).then(|| osd.to_string())
    });
    let pid_path = cluster.dir.join("run").join("osd.1.pid");
    let pid: u32 = std::fs::read_to_string(&pid_path)
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(is_running(pid), "the OSD reports; it did not exit");
    assert!(
        std::net::TcpStream::connect(osd_addr).is_err(),
        "an OSD with a corrupt store listens on {osd_addr}"
    );
    rt.block_on(async {
        let client = Client::connect(&config.mon).await.expect("client");
        verify(&client, &(0..OBJECTS).collect::<Vec<_>>()).await;
    });

    // Recreate: the supervisor holds osd.1; run it by hand with the flag.
    ok(
        cluster.cairn(&["daemon", "stop", "osd.1", "--data", &data]),
        "daemon stop",
    );
    let log =
        std::fs::File::create(cluster.dir.join("logs").join("osd.1.recreate.log")).expect("log");
    let osd = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["osd", "--data"])
        .arg(cluster.dir.join("osd.1"))
        .args(["--mon", &config.mon, "--addr", osd_addr, "--recreate-store"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cairn osd --recreate-store");
    let _osd = Killed(osd);
    wait_for("a new OSD up on the old address, the old id out", || {
        let osds = tree_osds(&cluster);
        let new = osds
            .iter()
            .find(|o| o["addr"] == osd_addr && o["id"] != old_id && o["up"] == true);
        let old = osds.iter().find(|o| o["id"] == old_id);
        let old_out = old.is_some_and(|o| o["in"] == false);
        (new.is_none() || !old_out).then(|| format!("{osds:?}"))
    });
    common::wait_clean(&cluster);
    // The old id's last report goes stale 3 s after its process stopped.
    wait_for("health forgets the recreated store", || {
        let detail = health_detail(&cluster);
        detail.contains("corrupt store").then_some(detail)
    });
    let aside: Vec<_> = std::fs::read_dir(cluster.dir.join("osd.1"))
        .expect("osd.1 dir")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("store.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the damaged store is kept aside");
    rt.block_on(async {
        let client = Client::connect(&config.mon).await.expect("client");
        verify(&client, &(0..OBJECTS).collect::<Vec<_>>()).await;
    });
    let status = ok_json(cluster.cairn(&["status", "--json"]), "status");
    assert_eq!(status["health"]["status"], "HEALTH_OK", "{status}");

    // The old id on a new, empty disk is refused: it would answer for
    // intervals the old disk served with copies it never had.
    let fresh = cluster.dir.join("osd.reused-id");
    let reuse = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["osd", "--data"])
        .arg(&fresh)
        .args(["--mon", &config.mon, "--addr", "127.0.0.1:17699"])
        .args(["--id", &old_id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cairn osd --id");
    let mut reuse = Killed(reuse);
    let mut exit = None;
    wait_for("the reused id is refused", || {
        exit = reuse.0.try_wait().ok().flatten();
        exit.is_none().then(|| "still running".to_string())
    });
    assert!(exit.is_some_and(|e| !e.success()), "{exit:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut reuse.0.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(
        stderr.contains(&format!("osd.{old_id} is in the map")) && stderr.contains("drop --id"),
        "{stderr}"
    );
    let osds = tree_osds(&cluster);
    assert!(
        !osds.iter().any(|o| o["addr"] == "127.0.0.1:17699"),
        "the refused OSD booted: {osds:?}"
    );
}

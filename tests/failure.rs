//! A writer keeps writing distinct 64 KiB objects into a size-3, min_size-2
//! pool while one of three OSD processes is SIGKILLed: once the monitor
//! marks it down, writes are acknowledged again, and every acknowledged
//! object reads back byte-exact afterwards.
//!
//! A write in flight when the interval changes is answered `Retry`; the
//! client resends it, and peering settles it once (kept if a copy that
//! peering picks has it, answered from the log), so no writer sees an
//! error.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientConfig, ClientOptions, ReadRange};
use common::{Cluster, is_running};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const POOL: &str = "data";
const OBJECT_SIZE_BYTES: usize = 64 << 10;
/// Writing before the kill.
const BEFORE_KILL: Duration = Duration::from_secs(2);
/// Writing after the OSD is marked down.
const AFTER_DOWN: Duration = Duration::from_secs(5);
/// Longest the monitor may take to mark the killed OSD down (grace 3 s).
const MARK_DOWN_WAIT: Duration = Duration::from_secs(30);
/// One operation's deadline: longer than the down grace (a write to a PG
/// whose primary was killed waits for the mark-down), short enough that a
/// lane stuck on an `AwaitingPeering` write moves on.
const OP_DEADLINE: Duration = Duration::from_secs(8);
/// Concurrent writers; each writes its own objects one at a time.
const LANE_COUNT: u64 = 4;

/// Object `index`'s bytes: distinct per index (xorshift seeded by it).
fn payload(index: u64) -> Bytes {
    let mut state = index.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes = Vec::with_capacity(OBJECT_SIZE_BYTES);
    while bytes.len() < OBJECT_SIZE_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(OBJECT_SIZE_BYTES);
    Bytes::from(bytes)
}

/// One acknowledged write: the object index and when the ack came.
#[derive(Debug, Clone, Copy)]
struct Ack {
    index: u64,
    at: Instant,
}

/// Writes `obj-{lane}`, `obj-{lane + LANE_COUNT}`, ... one at a time
/// until `stop`; returns the acknowledged writes and the errors.
async fn writer(client: Client, lane: u64, stop: Arc<AtomicBool>) -> (Vec<Ack>, Vec<String>) {
    let mut acks = Vec::new();
    let mut errors = Vec::new();
    let mut index = lane;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("obj-{index}");
        match client
            .write_full(POOL, name.as_bytes(), payload(index))
            .await
        {
            Ok(_) => acks.push(Ack {
                index,
                at: Instant::now(),
            }),
            Err(error) => errors.push(format!("{name}: {error}")),
        }
        index += LANE_COUNT;
    }
    (acks, errors)
}

/// Waits until the OSD serving at `addr` is down in the map; returns when.
async fn wait_marked_down(client: &Client, addr: &str) -> Instant {
    let deadline = Instant::now() + MARK_DOWN_WAIT;
    loop {
        let map = client.refresh_map().await.expect("map");
        let endpoints = client.endpoints().await.expect("endpoints");
        let id = endpoints
            .iter()
            .find(|(_, e)| e.addr == addr)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("no OSD at {addr}: {endpoints:?}"));
        let osd = map.osds.iter().find(|o| o.id == id).expect("osd in map");
        if !osd.up {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "osd {id} not marked down within {MARK_DOWN_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn writes_continue_when_an_osd_is_killed() {
    let base_port = 17300;
    let cluster = Cluster::up(
        "failure",
        3,
        base_port,
        &["--no-restart", "--down-grace", "3s"],
    );
    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    let pool = status["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == POOL))
        .unwrap_or_else(|| panic!("no pool {POOL}: {status}"))
        .clone();
    assert_eq!(pool["failure_domain"], "osd", "{pool}");
    assert!(
        pool["redundancy"]
            .as_str()
            .is_some_and(|r| r == "replicated size 3 min_size 2"),
        "size 3, min_size 2: {pool}"
    );

    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let options = ClientOptions {
            op_deadline: OP_DEADLINE,
            map_refresh_interval: Duration::from_millis(500),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(&config.mon, options)
            .await
            .expect("connect");
        let stop = Arc::new(AtomicBool::new(false));
        let lanes: Vec<_> = (0..LANE_COUNT)
            .map(|lane| tokio::spawn(writer(client.clone(), lane, stop.clone())))
            .collect();

        tokio::time::sleep(BEFORE_KILL).await;
        let victim = cluster.daemon_pid("osd.1");
        let victim_addr = format!("127.0.0.1:{}", base_port + 2);
        assert!(is_running(victim));
        let killed = Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let killed_at = Instant::now();
        let down_at = wait_marked_down(&client, &victim_addr).await;
        eprintln!(
            "osd at {victim_addr} marked down {:?} after the kill",
            down_at - killed_at
        );
        tokio::time::sleep(AFTER_DOWN).await;
        stop.store(true, Ordering::Relaxed);
        let mut acks = Vec::new();
        let mut errors = Vec::new();
        for lane in lanes {
            let (lane_acks, lane_errors) = tokio::time::timeout(OP_DEADLINE * 2, lane)
                .await
                .expect("writer stops within its deadline")
                .expect("writer task");
            acks.extend(lane_acks);
            errors.extend(lane_errors);
        }

        let before_kill = acks.iter().filter(|a| a.at < killed_at).count();
        let after_down = acks.iter().filter(|a| a.at > down_at).count();
        eprintln!(
            "{} writes acknowledged: {before_kill} before the kill, {after_down} after mark-down; {} errors",
            acks.len(),
            errors.len()
        );
        assert!(before_kill > 0, "writes succeed before the kill");
        assert!(
            after_down > 0,
            "writes resume after the OSD is marked down; errors: {errors:?}"
        );
        assert!(errors.is_empty(), "no write fails: {errors:?}");

        let tree = common::ok_json(cluster.cairn(&["osd", "tree", "--json"]), "osd tree");
        let osds: Vec<&serde_json::Value> = tree["racks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["hosts"].as_array().into_iter().flatten())
            .flat_map(|h| h["osds"].as_array().into_iter().flatten())
            .collect();
        assert_eq!(osds.len(), 3, "{tree}");
        let victim_row = osds
            .iter()
            .find(|o| o["addr"] == victim_addr.as_str())
            .unwrap_or_else(|| panic!("no {victim_addr} in {tree}"));
        assert_eq!(victim_row["up"], false, "osd tree shows the kill: {tree}");
        assert_eq!(osds.iter().filter(|o| o["up"] == true).count(), 2);

        for ack in &acks {
            let name = format!("obj-{}", ack.index);
            let data = client
                .read(POOL, name.as_bytes(), ReadRange::default())
                .await
                .unwrap_or_else(|e| panic!("read {name}: {e}"));
            assert!(data == payload(ack.index), "{name} reads back byte-exact");
        }
    });
    drop(cluster);
}

/// Peer heartbeats: with the monitor's own heartbeat grace at 60 s, only
/// the surviving OSDs' failure reports (two distinct reporters) can mark a
/// SIGKILLed OSD down within the wait below.
#[test]
fn peers_report_a_killed_osd_long_before_the_monitor_grace() {
    let base_port = 17350;
    let cluster = Cluster::up(
        "peer-failure",
        3,
        base_port,
        &["--no-restart", "--down-grace", "60s"],
    );
    let config = ClientConfig::load(&cluster.conf).expect("client config");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = Client::connect(&config.mon).await.expect("connect");
        // Let every OSD learn its PGs and first answer its peers.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let victim = cluster.daemon_pid("osd.2");
        let victim_addr = format!("127.0.0.1:{}", base_port + 3);
        let killed = Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let killed_at = Instant::now();
        let down_at = wait_marked_down(&client, &victim_addr).await;
        let took = down_at - killed_at;
        eprintln!("marked down {took:?} after the kill, by peer reports");
        assert!(
            took < Duration::from_secs(20),
            "marked down after {took:?}: peer reports did not do it"
        );
    });
}

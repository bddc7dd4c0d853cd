//! Map distribution by long poll, against an in-process monitor daemon over
//! real TCP: a held `Subscribe` is answered with the new epoch's incremental
//! when another client creates a pool (and does not block other requests
//! on its connection), is answered "no change" when its wait runs out, is
//! answered at once when the subscriber is behind, and is released when the
//! monitor shuts down.

use cairn_mon::{MonConfig, ServiceConfig};
use cairn_placement::Weight;
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use cairn_proto::mon::{MapFetch, MonClient, MonCommand, MonError, Reply};
use cairn_types::Epoch;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The epoch after genesis (1) and three OSD boots.
const BOOTED_EPOCH: Epoch = Epoch(4);

/// How long a subscriber that expects an early answer offers to wait: far
/// longer than any answer should take, so "before the wait expired" is a
/// generous check.
const WAIT_LONG: Duration = Duration::from_secs(20);

/// A monitor daemon running on this test's runtime.
struct Mon {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), MonError>>,
    _dir: tempfile::TempDir,
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Starts a monitor, boots three OSDs on distinct hosts, returns it with a
/// client. The map is then at [`BOOTED_EPOCH`].
async fn start() -> (Mon, MonClient) {
    // Under /var/tmp: a tmpfs /tmp may lack fsync semantics.
    let dir = tempfile::Builder::new()
        .prefix("cairn-mon-subscribe-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let addr = free_addr();
    let config = MonConfig {
        data_dir: dir.path().to_path_buf(),
        addr,
        service: ServiceConfig {
            // No failure detection gets in the way of the epochs counted here.
            down_grace_ms: 600_000,
            ..ServiceConfig::default()
        },
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(cairn_mon::run_until(config, shutdown.clone()));
    let mon = Mon {
        addr,
        shutdown,
        task,
        _dir: dir,
    };
    let client = connect(addr).await;
    for host in 0..3 {
        let reply = client.command(boot(host)).await.expect("boot");
        assert!(matches!(reply, Reply::OsdBooted { .. }), "{reply:?}");
    }
    (mon, client)
}

async fn connect(addr: SocketAddr) -> MonClient {
    let deadline = Instant::now() + WAIT_LONG;
    loop {
        match MonClient::connect(addr).await {
            Ok(client) => return client,
            Err(error) if Instant::now() > deadline => panic!("monitor never came up: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn stop(mon: Mon) {
    mon.shutdown.cancel();
    let ended = tokio::time::timeout(WAIT_LONG, mon.task)
        .await
        .expect("monitor stops in time")
        .expect("monitor task");
    ended.expect("monitor stops cleanly");
}

fn boot(host: u32) -> MonCommand {
    MonCommand::OsdBoot {
        id: None,
        addr: format!("127.0.0.1:{}", 7200 + host),
        host: format!("h{host}"),
        rack: "r0".into(),
        device_class: "hdd".into(),
        weight: Weight::ONE,
        capacity_bytes: 1 << 30,
    }
}

fn pool_create(name: &str) -> MonCommand {
    MonCommand::PoolCreate {
        name: name.into(),
        pg_num: 8,
        redundancy: RedundancySpec::Replicated {
            size: 3,
            min_size: 2,
        },
        failure_domain: FailureDomainSpec::Host,
        device_class: None,
    }
}

/// The epochs of an `Incrementals` answer; panics on a full map.
fn incremental_epochs(fetch: &MapFetch) -> Vec<u64> {
    match fetch {
        MapFetch::Incrementals { incrementals, .. } => {
            incrementals.iter().map(|i| i.epoch.0).collect()
        }
        MapFetch::Full { .. } => panic!("expected incrementals, got a full map"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_subscription_is_answered_with_the_new_epoch() {
    let (mon, client) = start().await;
    let subscriber = connect(mon.addr).await;
    let held = {
        let subscriber = subscriber.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let fetched = subscriber.subscribe(BOOTED_EPOCH, WAIT_LONG).await;
            (fetched, started.elapsed())
        })
    };
    // Give the request time to reach the monitor; it must then be held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished(), "answered with no new epoch");

    // The same connection still serves other requests while one is held.
    let full = subscriber.get_map(Epoch(0)).await.expect("get_map");
    assert!(matches!(&full, MapFetch::Full { map, .. } if map.epoch == BOOTED_EPOCH));
    assert!(!held.is_finished(), "still held after an unrelated request");

    let reply = client.command(pool_create("data")).await.expect("pool");
    assert_eq!(reply, Reply::Done { epoch: Epoch(5) });

    let (fetched, elapsed) = tokio::time::timeout(WAIT_LONG, held)
        .await
        .expect("answered before the wait expired")
        .expect("subscriber task");
    let fetched = fetched.expect("subscribe");
    assert!(elapsed < WAIT_LONG, "answered after {elapsed:?}");
    assert_eq!(incremental_epochs(&fetched), vec![5]);
    let MapFetch::Incrementals { incrementals, .. } = &fetched else {
        unreachable!("checked above");
    };
    let names: Vec<&str> = incrementals[0]
        .pool_upserts
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, vec!["data"], "the incremental carries the new pool");
    stop(mon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_without_change_is_answered_empty_after_the_wait() {
    let (mon, client) = start().await;
    let MapFetch::Full { fsid, .. } = client.get_map(Epoch(0)).await.expect("map") else {
        panic!("have 0 gets a full map");
    };
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let fetched = client
        .subscribe(BOOTED_EPOCH, wait)
        .await
        .expect("subscribe");
    assert_eq!(
        fetched,
        MapFetch::Incrementals {
            fsid,
            incrementals: Vec::new(),
        },
        "no change is an empty list"
    );
    assert!(started.elapsed() >= wait, "held for the whole wait");
    // A subscriber ahead of the monitor is "no change" too, not an error.
    let fetched = client
        .subscribe(Epoch(BOOTED_EPOCH.0 + 10), Duration::ZERO)
        .await
        .expect("subscribe ahead");
    assert_eq!(incremental_epochs(&fetched), Vec::<u64>::new());
    stop(mon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_behind_gets_the_incrementals_at_once() {
    let (mon, client) = start().await;
    let started = Instant::now();
    let fetched = tokio::time::timeout(WAIT_LONG, client.subscribe(Epoch(2), WAIT_LONG))
        .await
        .expect("answered before the wait expired")
        .expect("subscribe");
    assert_eq!(incremental_epochs(&fetched), vec![3, 4]);
    // Epoch 0 (nothing held) gets the whole map, as from get_map.
    let fetched = tokio::time::timeout(WAIT_LONG, client.subscribe(Epoch(0), WAIT_LONG))
        .await
        .expect("answered before the wait expired")
        .expect("subscribe");
    match fetched {
        MapFetch::Full { map, endpoints, .. } => {
            assert_eq!(map.epoch, BOOTED_EPOCH);
            assert_eq!(endpoints.len(), 3);
        }
        other => panic!("expected a full map, got {other:?}"),
    }
    assert!(started.elapsed() < WAIT_LONG);
    stop(mon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_subscription_is_released_when_the_monitor_stops() {
    let (mon, _client) = start().await;
    let subscriber = connect(mon.addr).await;
    let held = tokio::spawn(async move { subscriber.subscribe(BOOTED_EPOCH, WAIT_LONG).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished(), "answered with no new epoch");
    mon.shutdown.cancel();
    let fetched = tokio::time::timeout(WAIT_LONG, held)
        .await
        .expect("released before the wait expired")
        .expect("subscriber task");
    // Answered by the monitor itself, not cut off by the connection drain.
    assert_eq!(fetched, Err(MonError::ShuttingDown));
    stop(mon).await;
}

/// A subscriber far behind, within the history, gets the incrementals in
/// pages, never a full map: an OSD that restarts in an older cluster still
/// learns the past intervals its peering needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_comes_in_pages_of_incrementals() {
    let (mon, client) = start().await;
    let page = cairn_proto::limits::INCREMENTALS_PER_REPLY_MAX;
    for n in 0..(page + 20) {
        client
            .command(pool_create(&format!("p{n}")))
            .await
            .expect("pool create");
    }
    let newest = BOOTED_EPOCH.0 + u64::try_from(page + 20).expect("small");
    let mut have = Epoch(1);
    let mut pages = 0;
    while have.0 < newest {
        let fetched = client.get_map(have).await.expect("get map");
        let epochs = incremental_epochs(&fetched);
        assert!(epochs.len() <= page, "a page holds at most {page}");
        assert_eq!(epochs.first(), Some(&(have.0 + 1)), "the next epoch first");
        have = Epoch(*epochs.last().expect("not empty"));
        pages += 1;
    }
    assert_eq!(pages, 2, "{newest} epochs in two pages");
    stop(mon).await;
}

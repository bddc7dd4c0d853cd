//! End to end: a real `cairn mon` process keeps its map across SIGKILL,
//! serves OSD boots, pool creation and map requests over the wire, survives
//! garbage bytes on its port, and exits cleanly on SIGTERM.

use cairn_placement::{ClusterMap, Weight};
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use cairn_proto::mon::{MapFetch, MonClient, MonCommand, Reply};
use cairn_types::{Epoch, OsdId};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// Kills the monitor if the test fails half-way.
struct Mon(Child);

impl Drop for Mon {
    fn drop(&mut self) {
        drop(self.0.kill());
        drop(self.0.wait());
    }
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

fn start(data: &Path, addr: SocketAddr) -> Mon {
    let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("mon")
        .arg("--data")
        .arg(data)
        .arg("--addr")
        .arg(addr.to_string())
        .args(["--down-grace", "60s", "--down-out", "600s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cairn mon");
    Mon(child)
}

async fn connect(addr: SocketAddr) -> MonClient {
    let deadline = Instant::now() + WAIT;
    loop {
        match MonClient::connect(addr).await {
            Ok(client) => return client,
            Err(error) if Instant::now() > deadline => panic!("monitor never came up: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn full_map(client: &MonClient) -> (u128, ClusterMap, usize) {
    let fetched = tokio::time::timeout(WAIT, client.get_map(Epoch(0)))
        .await
        .expect("get_map in time")
        .expect("get_map");
    match fetched {
        MapFetch::Full {
            fsid,
            map,
            endpoints,
        } => (fsid, map, endpoints.len()),
        other => panic!("expected a full map, got {other:?}"),
    }
}

fn boot(host: u32) -> MonCommand {
    MonCommand::OsdBoot {
        id: None,
        addr: format!("127.0.0.1:{}", 7100 + host),
        host: format!("h{host}"),
        rack: "r0".into(),
        device_class: "hdd".into(),
        weight: Weight::ONE,
        capacity_bytes: 1 << 30,
    }
}

/// Writes junk to the port and expects the monitor to close that connection.
fn send_garbage(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    stream
        .write_all(b"GET / HTTP/1.1\r\nthis is not a cairn frame at all\r\n\r\n")
        .expect("write");
    let mut buf = [0u8; 64];
    let read = stream.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "monitor should close a garbage connection, read {read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_survives_sigkill_and_garbage() {
    let dir = tempfile_dir();
    let addr = free_addr();
    let mon = start(&dir, addr);
    let client = connect(addr).await;
    for host in 0..3 {
        let reply = client.command(boot(host)).await.expect("boot");
        assert!(matches!(reply, Reply::OsdBooted { osd, .. } if osd == OsdId(host)));
    }
    let reply = client
        .command(MonCommand::PoolCreate {
            name: "data".into(),
            pg_num: 32,
            redundancy: RedundancySpec::Replicated {
                size: 3,
                min_size: 2,
            },
            failure_domain: FailureDomainSpec::Host,
            device_class: None,
        })
        .await
        .expect("pool create");
    assert_eq!(reply, Reply::Done { epoch: Epoch(5) });
    let duplicate = client.command(boot(9)).await.expect("boot 4th");
    assert!(matches!(duplicate, Reply::OsdBooted { .. }));
    assert!(matches!(
        client
            .heartbeat(OsdId(0), cairn_proto::mon::OsdStats::default())
            .await
            .expect("heartbeat"),
        Reply::Heartbeat { up: true, .. }
    ));
    match client.get_map(Epoch(4)).await.expect("incrementals") {
        MapFetch::Incrementals { incrementals, .. } => {
            let epochs: Vec<u64> = incrementals.iter().map(|i| i.epoch.0).collect();
            assert_eq!(epochs, vec![5, 6]);
        }
        other => panic!("expected incrementals, got {other:?}"),
    }
    let (fsid, before, endpoint_count) = full_map(&client).await;
    assert_eq!(before.epoch, Epoch(6));
    assert_eq!(endpoint_count, 4);

    send_garbage(addr);
    let (_, still, _) = full_map(&client).await;
    assert_eq!(still, before, "the monitor keeps serving after garbage");

    // SIGKILL: nothing is flushed at exit; every epoch must already be on disk.
    drop(mon);
    let addr = free_addr();
    let mut mon = start(&dir, addr);
    let client = connect(addr).await;
    let (fsid_after, after, endpoint_count) = full_map(&client).await;
    assert_eq!(fsid_after, fsid);
    assert_eq!(after, before);
    assert_eq!(endpoint_count, 4);
    assert_eq!(
        after.pool_by_name("data").expect("pool survives").pg_num,
        32
    );

    // SIGTERM: a clean exit.
    let status = Command::new("kill")
        .args(["-TERM", &mon.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + WAIT;
    let exit = loop {
        if let Some(exit) = mon.0.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "monitor ignored SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "SIGTERM exit: {exit:?}");
    drop(std::fs::remove_dir_all(&dir));
}

/// A fresh directory under /var/tmp (tmpfs /tmp may lack fsync semantics).
fn tempfile_dir() -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::path::PathBuf::from(format!(
        "/var/tmp/cairn-mon-e2e-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

//! End to end: one real `cairn mon` and three `cairn osd` processes serve a
//! replicated pool (size 3): objects of 0 B, 1 B, 4 KiB and 4 MiB written
//! through the PG primaries read back byte-exact, xattrs and omap work, an
//! OSD fed garbage keeps serving, and after the OSDs stop every object is in
//! all three OSDs' stores.

use bytes::Bytes;
use cairn_placement::{ClusterMap, Placement};
use cairn_proto::map::OsdEndpoint;
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use cairn_proto::mon::{MapFetch, MonClient, MonCommand};
use cairn_proto::osd::{ClientOp, ClientReply, OpError, OpKind, OpOutput, ReqIdWire};
use cairn_store::{CollectionId, DiskStore, ObjectKey, ObjectStore, ReadOptions, StoreConfig};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{ConnectOptions, Connection};
use serde_bytes::ByteBuf;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// Kills every child process by PID when the test ends, also on panic.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            drop(child.kill());
            drop(child.wait());
        }
    }
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

fn spawn(args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cairn")
}

fn test_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = PathBuf::from(format!(
        "/var/tmp/cairn-osd-e2e-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

async fn connect_mon(addr: SocketAddr) -> MonClient {
    let deadline = Instant::now() + WAIT;
    loop {
        match MonClient::connect(addr).await {
            Ok(client) => return client,
            Err(error) if Instant::now() > deadline => panic!("monitor never came up: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn full_map(mon: &MonClient) -> (ClusterMap, HashMap<OsdId, OsdEndpoint>) {
    let fetched = tokio::time::timeout(WAIT, mon.get_map(Epoch(0)))
        .await
        .expect("get_map in time")
        .expect("get_map");
    match fetched {
        MapFetch::Full { map, endpoints, .. } => (map, endpoints.into_iter().collect()),
        other => panic!("expected a full map, got {other:?}"),
    }
}

/// A minimal client: finds the primary from the map and retries on
/// Retry/Blocked/Busy with a fresh map, within [`WAIT`].
struct Client {
    mon: MonClient,
    pool: String,
    conns: HashMap<String, Connection>,
    tid: u64,
}

impl Client {
    async fn call(&mut self, object: &[u8], op: OpKind, data: Bytes) -> (ClientReply, Bytes) {
        self.tid += 1;
        let req = ReqIdWire {
            client: 42,
            tid: self.tid,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let (map, endpoints) = full_map(&self.mon).await;
            let pool = map.pool_by_name(&self.pool).expect("pool");
            let pg: PgId = cairn_placement::hash::object_pg(pool.id, pool.pg_num, object);
            let mapping = Placement::new(&map).map_pg(pg).expect("map pg");
            let primary = mapping.primary.expect("a primary");
            let addr = endpoints[&primary].addr.clone();
            let conn = match self.conns.get(&addr).filter(|c| !c.is_closed()) {
                Some(conn) => conn.clone(),
                None => {
                    let conn = Connection::connect(addr.as_str(), ConnectOptions::default())
                        .await
                        .expect("connect to OSD");
                    self.conns.insert(addr.clone(), conn.clone());
                    conn
                }
            };
            let request = ClientOp {
                pg,
                epoch: map.epoch,
                req,
                object: ByteBuf::from(object.to_vec()),
                guards: Vec::new(),
                ops: vec![op.clone()],
                full_try: false,
            };
            let (reply, data_back): (ClientReply, Bytes) =
                conn.call(&request, data.clone()).await.expect("OSD call");
            match &reply.result {
                Err(OpError::Retry { .. } | OpError::Blocked { .. } | OpError::Busy { .. })
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return (reply, data_back),
            }
        }
    }

    async fn write(&mut self, object: &[u8], data: Bytes) {
        let op = OpKind::WriteFull {
            len: data.len() as u64,
        };
        let (reply, _) = self.call(object, op, data).await;
        assert!(
            matches!(reply.result.as_deref(), Ok([OpOutput::Written { .. }])),
            "write of {}: {reply:?}",
            String::from_utf8_lossy(object)
        );
        assert!(reply.version.is_some(), "a write reports its PG version");
    }

    async fn read(&mut self, object: &[u8]) -> Bytes {
        let op = OpKind::Read {
            offset: 0,
            length: None,
        };
        let (reply, data) = self.call(object, op, Bytes::new()).await;
        let len = data.len() as u64;
        assert_eq!(
            reply.result,
            Ok(vec![OpOutput::Data { len }]),
            "read: {reply:?}"
        );
        data
    }
}

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap_or(0) ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

/// Writes junk to the port; the OSD must close that connection.
fn send_garbage(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    stream
        .write_all(b"\x00\x01garbage that is no cairn frame\r\n\r\n0123456789abcdef0123456789")
        .expect("write");
    let mut buf = [0u8; 64];
    let read = stream.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "OSD should close a garbage connection, read {read:?}"
    );
}

fn stop(child: &mut Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + WAIT;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "OSD ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_stored(data_dir: &Path, pg: PgId, object: &[u8]) -> Bytes {
    let store = DiskStore::open(&data_dir.join("store"), StoreConfig::default()).expect("open");
    store
        .read(
            CollectionId::pg(pg.pool.0, pg.seed),
            &ObjectKey::new(Bytes::copy_from_slice(object)),
            ReadOptions::default(),
        )
        .expect("object in the store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_osds_replicate_and_serve() {
    let dir = test_dir();
    let mon_addr = free_addr();
    let mut procs = Procs(Vec::new());
    procs.0.push(spawn(&[
        "mon".into(),
        "--data".into(),
        dir.join("mon").display().to_string(),
        "--addr".into(),
        mon_addr.to_string(),
    ]));
    let mon = connect_mon(mon_addr).await;
    let mut osd_addrs = Vec::new();
    let mut osd_dirs = Vec::new();
    for index in 0..3 {
        let addr = free_addr();
        let data = dir.join(format!("osd{index}"));
        procs.0.push(spawn(&[
            "osd".into(),
            "--data".into(),
            data.display().to_string(),
            "--mon".into(),
            mon_addr.to_string(),
            "--addr".into(),
            addr.to_string(),
            "--host".into(),
            format!("h{index}"),
        ]));
        osd_addrs.push(addr);
        osd_dirs.push(data);
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let (map, endpoints) = full_map(&mon).await;
        if map.osds.iter().filter(|o| o.up).count() == 3 && endpoints.len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "OSDs never booted: {map:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    mon.command(MonCommand::PoolCreate {
        name: "data".into(),
        pg_num: 8,
        redundancy: RedundancySpec::Replicated {
            size: 3,
            min_size: 2,
        },
        failure_domain: FailureDomainSpec::Osd,
        device_class: None,
    })
    .await
    .expect("pool create");

    let mut client = Client {
        mon: mon.clone(),
        pool: "data".into(),
        conns: HashMap::new(),
        tid: 0,
    };
    let objects: Vec<(Vec<u8>, Bytes)> = [0usize, 1, 4096, 4 << 20]
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let seed = u8::try_from(i).unwrap_or(0);
            (format!("obj-{size}").into_bytes(), pattern(*size, seed))
        })
        .collect();
    for (name, data) in &objects {
        client.write(name, data.clone()).await;
    }
    for (name, data) in &objects {
        assert_eq!(&client.read(name).await, data, "read back byte-exact");
    }
    let (stat, _) = client.call(b"obj-4096", OpKind::Stat, Bytes::new()).await;
    assert!(matches!(
        stat.result.as_deref(),
        Ok([OpOutput::Stat {
            size_bytes: 4096,
            ..
        }])
    ));
    let (missing, _) = client
        .call(b"never-written", OpKind::Stat, Bytes::new())
        .await;
    assert_eq!(missing.result, Err(OpError::NotFound));

    let name = ByteBuf::from(b"color".to_vec());
    let (set, _) = client
        .call(
            b"obj-1",
            OpKind::SetXattr {
                name,
                value: ByteBuf::from(b"blue".to_vec()),
            },
            Bytes::new(),
        )
        .await;
    assert!(
        matches!(set.result.as_deref(), Ok([OpOutput::Written { .. }])),
        "{set:?}"
    );
    let (xattrs, _) = client.call(b"obj-1", OpKind::GetXattrs, Bytes::new()).await;
    assert_eq!(
        xattrs.result,
        Ok(vec![OpOutput::Xattrs(vec![(
            ByteBuf::from(b"color".to_vec()),
            ByteBuf::from(b"blue".to_vec())
        )])])
    );
    let entries: Vec<(ByteBuf, ByteBuf)> = (0..5u8)
        .map(|i| (ByteBuf::from(vec![b'k', i]), ByteBuf::from(vec![i; 3])))
        .collect();
    let (omap, _) = client
        .call(
            b"index",
            OpKind::OmapSet {
                entries: entries.clone(),
            },
            Bytes::new(),
        )
        .await;
    assert!(
        matches!(omap.result.as_deref(), Ok([OpOutput::Written { .. }])),
        "{omap:?}"
    );
    let after = Some(ByteBuf::from(vec![b'k', 1]));
    let (range, _) = client
        .call(
            b"index",
            OpKind::OmapGetRange { after, limit: 2 },
            Bytes::new(),
        )
        .await;
    assert_eq!(
        range.result,
        Ok(vec![OpOutput::Omap(entries[2..4].to_vec())])
    );

    for addr in &osd_addrs {
        send_garbage(*addr);
    }
    for (name, data) in &objects {
        assert_eq!(
            &client.read(name).await,
            data,
            "still serving after garbage"
        );
    }

    let (map, _) = full_map(&mon).await;
    let pool = map.pool_by_name("data").expect("pool").clone();
    for child in procs.0.iter_mut().skip(1) {
        stop(child);
    }
    for (name, data) in &objects {
        let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, name);
        for osd_dir in &osd_dirs {
            assert_eq!(
                &read_stored(osd_dir, pg, name),
                data,
                "{} replicated to {}",
                String::from_utf8_lossy(name),
                osd_dir.display()
            );
        }
    }
    drop(procs);
    drop(std::fs::remove_dir_all(&dir));
}

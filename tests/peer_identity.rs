//! Peer identity comes from the connection, not from what a message says
//! (issue 19, item 3): against a real 3-OSD cluster, an OSD answers no peer
//! message or ping on a connection without a hello; refuses hellos whose
//! claim the map does not back (unknown OSD, wrong address, wrong source
//! host) or that try to rebind a connection; and on a connection bound to
//! osd.B refuses (and logs) messages claiming osd.C. The cluster serves on.

mod common;

use bytes::Bytes;
use cairn_osd::codec::encode_pg_msg;
use cairn_osd::pg::PgMsg;
use cairn_proto::peer::{HELLO_VERSION, PeerHello, PeerHelloReply};
use cairn_proto::peer::{PeerPing, PeerPong};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use cairn_wire::{ConnectOptions, Connection, WireError};
use common::{Cluster, ok, pattern, runtime, tree_osds};
use serde_bytes::ByteBuf;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long an answer may take; a refused request gets none.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

fn hello(osd: u64, addr: &str) -> PeerHello {
    PeerHello {
        version: HELLO_VERSION,
        osd: OsdId(u32::try_from(osd).expect("id")),
        addr: addr.to_owned(),
        epoch: Epoch(1),
        auth: ByteBuf::new(),
    }
}

async fn connect(addr: &str, bind_ip: Option<IpAddr>) -> Connection {
    let options = ConnectOptions {
        request_timeout: ANSWER_WAIT,
        bind_ip,
        ..ConnectOptions::default()
    };
    Connection::connect(addr, options).await.expect("connect")
}

async fn say_hello(conn: &Connection, hello: &PeerHello) -> Result<OsdId, String> {
    let (PeerHelloReply(reply), _) = conn
        .call::<PeerHello, PeerHelloReply>(hello, Bytes::new())
        .await
        .expect("a hello is always answered");
    reply
}

async fn ping(conn: &Connection, from: u64) -> Result<PeerPong, WireError> {
    let ping = PeerPing {
        from: OsdId(u32::try_from(from).expect("id")),
        epoch: Epoch(1),
    };
    conn.call::<PeerPing, PeerPong>(&ping, Bytes::new())
        .await
        .map(|(pong, _)| pong)
}

fn log_of(cluster: &Cluster, name: &str) -> String {
    std::fs::read_to_string(cluster.dir.join("logs").join(format!("{name}.log")))
        .unwrap_or_default()
}

/// Waits until `name`'s log holds `count` lines with `needle`.
fn wait_logged(cluster: &Cluster, name: &str, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while log_of(cluster, name).matches(needle).count() < count {
        assert!(
            Instant::now() < deadline,
            "{name} did not log {count}× {needle:?}:\n{}",
            log_of(cluster, name)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn peer_messages_are_judged_by_the_connection_they_arrive_on() {
    let cluster = Cluster::up("peer-identity", 3, 17670, &[]);
    // `cairn up` serves osd.N (directory name) on base port + 1 + N; ids
    // come from the map.
    let osds = tree_osds(&cluster);
    let by_addr = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let id = osds
            .iter()
            .find(|o| o["addr"] == addr.as_str())
            .and_then(|o| o["id"].as_u64())
            .expect("id of an OSD");
        (id, addr)
    };
    let (a, a_addr) = by_addr(17671);
    let (b, b_addr) = by_addr(17672);
    let (c, _) = by_addr(17673);
    let rt = runtime();
    rt.block_on(async {
        // No hello: a ping (a request) goes unanswered, and so would any
        // PG message.
        let conn = connect(&a_addr, None).await;
        assert!(
            matches!(ping(&conn, b).await, Err(WireError::Timeout { .. })),
            "a ping on a connection without a hello was answered"
        );

        // Claims the map does not back.
        let refused = say_hello(&conn, &hello(99, &b_addr)).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("osd.99 is not in the map")),
            "{refused:?}"
        );
        let refused = say_hello(&conn, &hello(b, "127.0.0.1:1")).await;
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("serves on")),
            "{refused:?}"
        );
        let mut future = hello(b, &b_addr);
        future.version = HELLO_VERSION + 1;
        assert!(
            say_hello(&conn, &future).await.is_err(),
            "an unknown hello version"
        );
        // The right claim from another host's address: osd.B serves on
        // 127.0.0.1, this connection comes from 127.0.0.2.
        let elsewhere = connect(&a_addr, Some("127.0.0.2".parse().expect("ip"))).await;
        let refused = say_hello(&elsewhere, &hello(b, &b_addr)).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("comes from 127.0.0.2")),
            "{refused:?}"
        );
        assert!(matches!(
            ping(&elsewhere, b).await,
            Err(WireError::Timeout { .. })
        ));

        // A claim the map backs binds the connection; the answer names A.
        assert_eq!(
            say_hello(&conn, &hello(b, &b_addr)).await,
            Ok(OsdId(a as u32))
        );
        let pong = ping(&conn, b).await.expect("a ping from the proven sender");
        assert_eq!(pong.from, OsdId(a as u32));
        // The connection is B's: claims of C on it are refused.
        assert!(
            matches!(ping(&conn, c).await, Err(WireError::Timeout { .. })),
            "a ping claiming another OSD was answered"
        );
        let rebind = say_hello(&conn, &hello(c, "127.0.0.1:17673")).await;
        assert!(
            rebind
                .as_ref()
                .is_err_and(|e| e.contains("already belongs")),
            "{rebind:?}"
        );
        let pg = PgId {
            pool: PoolId(1),
            seed: 0,
        };
        let forged = PgMsg::Query {
            from: OsdId(c as u32),
            interval_epoch: Epoch(1),
        };
        let (body, data) = encode_pg_msg(pg, &forged).expect("encodes");
        conn.send(&body, data).await.expect("sent");
    });
    // A's log names every refusal (the OSD directory serving on 17671 is osd.0).
    wait_logged(&cluster, "osd.0", "peer hello refused", 4);
    wait_logged(&cluster, "osd.0", "PG message refused", 1);
    wait_logged(&cluster, "osd.0", "ping refused", 3);
    // And the cluster serves on.
    let data = pattern(7, 10_000);
    ok(
        common::cairn_with_input(
            &cluster.conf,
            &["object", "put", "--pool", "data", "after", "-"],
            Some(&data),
        ),
        "put after the forgeries",
    );
    let got = ok(
        cluster.cairn(&["object", "get", "--pool", "data", "after", "-"]),
        "get after the forgeries",
    );
    assert_eq!(got, data);
}

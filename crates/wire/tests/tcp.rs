//! Real TCP on 127.0.0.1: many concurrent calls with mixed sizes on one
//! connection are matched to the right responses although they complete out
//! of order; a slow request times out alone; a call may carry its own,
//! longer timeout (a long poll); a dead server fails in-flight
//! calls promptly; garbage closes only the offending connection; shutdown
//! is graceful; one-way messages arrive in both directions.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_wire::{ConnectOptions, Connection, Frame, Message, ServeOptions, WireError, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Bounds every scenario so a hang fails the test instead of stalling CI.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Echo {
    index: u32,
    delay_ms: u32,
    pad: Vec<u8>,
}
impl Message for Echo {
    const KIND: u16 = 10;
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct EchoReply {
    index: u32,
    pad_size_bytes: u32,
}
impl Message for EchoReply {
    const KIND: u16 = 11;
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Note {
    text: String,
}
impl Message for Note {
    const KIND: u16 = 12;
}

/// What the test server observed, in order.
#[derive(Debug, Default)]
struct Seen {
    requests: AtomicUsize,
    completed: Mutex<Vec<u32>>,
    notes: Mutex<Vec<String>>,
}

/// Echo handler: sleeps `delay_ms`, then answers with the request's data.
async fn echo(seen: Arc<Seen>, frame: Frame) -> Option<Frame> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    if let Ok(note) = frame.decode_body::<Note>() {
        seen.notes.lock().ok()?.push(note.text);
        return None;
    }
    let req: Echo = frame.decode_body().ok()?;
    tokio::time::sleep(Duration::from_millis(u64::from(req.delay_ms))).await;
    seen.completed.lock().ok()?.push(req.index);
    let reply = EchoReply {
        index: req.index,
        pad_size_bytes: u32::try_from(req.pad.len()).ok()?,
    };
    Frame::response(frame.request_id, &reply, frame.data).ok()
}

struct TestServer {
    addr: SocketAddr,
    seen: Arc<Seen>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

async fn start_server() -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    let seen = Arc::new(Seen::default());
    let shutdown = CancellationToken::new();
    let options = ServeOptions {
        shutdown: shutdown.clone(),
        ..ServeOptions::default()
    };
    let handler_seen = seen.clone();
    let handler = move |frame, _session| echo(handler_seen.clone(), frame);
    let task = tokio::spawn(serve(listener, handler, options));
    TestServer {
        addr,
        seen,
        shutdown,
        task,
    }
}

async fn connect(addr: SocketAddr, request_timeout: Duration) -> Connection {
    let options = ConnectOptions {
        request_timeout,
        ..ConnectOptions::default()
    };
    Connection::connect(addr, options)
        .await
        .expect("connect to test server")
}

/// Deterministic data for call `index`, so the echo can be checked.
fn payload(index: u32, size_bytes: usize) -> Bytes {
    let seed = index.to_le_bytes();
    Bytes::from(
        (0..size_bytes)
            .map(|i| seed[i % 4] ^ (i as u8))
            .collect::<Vec<_>>(),
    )
}

fn data_size_bytes(index: u32) -> usize {
    const MIB: usize = 1024 * 1024;
    match index % 10 {
        0 => 4 * MIB,
        5 => (index as usize * 7919) % (4 * MIB),
        _ => (index as usize * 131) % (64 * 1024),
    }
}

async fn echo_call(conn: &Connection, index: u32, delay_ms: u32) -> Result<(), WireError> {
    let pad = vec![index as u8; (index as usize * 53) % 5000];
    let data = payload(
        index,
        if index.is_multiple_of(3) {
            0
        } else {
            data_size_bytes(index)
        },
    );
    let req = Echo {
        index,
        delay_ms,
        pad: pad.clone(),
    };
    let (reply, echoed): (EchoReply, Bytes) = conn.call(&req, data.clone()).await?;
    assert_eq!(
        reply,
        EchoReply {
            index,
            pad_size_bytes: pad.len() as u32
        }
    );
    assert!(
        echoed == data,
        "call {index}: data of {} bytes came back wrong",
        data.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_calls_match_their_responses() {
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_secs(30)).await;
    let scenario = async {
        let mut calls = tokio::task::JoinSet::new();
        for index in 0..200u32 {
            let conn = conn.clone();
            // Later calls finish sooner: completion order is scrambled.
            let delay_ms = (index * 37) % 50;
            calls.spawn(async move { echo_call(&conn, index, delay_ms).await });
        }
        while let Some(joined) = calls.join_next().await {
            joined.expect("call task").expect("call succeeds");
        }
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("in bounded time");
    let completed = server.seen.completed.lock().expect("lock").clone();
    assert_eq!(completed.len(), 200);
    assert!(
        completed.windows(2).any(|w| w[0] > w[1]),
        "responses were not out of order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_times_out_while_others_succeed() {
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_millis(500)).await;
    let scenario = async {
        let slow = {
            let conn = conn.clone();
            tokio::spawn(async move { echo_call(&conn, 1000, 1500).await })
        };
        let mut fast = tokio::task::JoinSet::new();
        for index in 0..20u32 {
            let conn = conn.clone();
            fast.spawn(async move { echo_call(&conn, index, 10).await });
        }
        while let Some(joined) = fast.join_next().await {
            joined.expect("call task").expect("fast call succeeds");
        }
        let slow = slow.await.expect("call task");
        assert!(
            matches!(slow, Err(WireError::Timeout { after_ms: 500 })),
            "{slow:?}"
        );
        // The late response arrives after its caller gave up: dropped, and
        // the connection carries on.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        echo_call(&conn, 7, 0)
            .await
            .expect("connection still healthy");
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("in bounded time");
    assert!(!conn.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_its_own_timeout_outlives_the_connection_timeout() {
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_millis(200)).await;
    let held = Echo {
        index: 1,
        delay_ms: 600,
        pad: Vec::new(),
    };
    let scenario = async {
        // A long poll held past `request_timeout` still gets its answer.
        let frame = Frame::request(&held, Bytes::new()).expect("encodes");
        let response = conn
            .call_frame_with_timeout(frame, Duration::from_secs(10))
            .await
            .expect("held call answered");
        let reply: EchoReply = response.decode_body().expect("reply");
        assert_eq!(reply.index, 1);
        // An explicit timeout shorter than the hold still times out.
        let frame = Frame::request(&held, Bytes::new()).expect("encodes");
        let early = conn
            .call_frame_with_timeout(frame, Duration::from_millis(100))
            .await;
        assert!(
            matches!(early, Err(WireError::Timeout { after_ms: 100 })),
            "{early:?}"
        );
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("in bounded time");
    assert!(!conn.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_fails_in_flight_calls_promptly() {
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_secs(120)).await;
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..20u32 {
        let conn = conn.clone();
        calls.spawn(async move { echo_call(&conn, index, 100_000).await });
    }
    let arrived = async {
        while server.seen.requests.load(Ordering::SeqCst) < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, arrived)
        .await
        .expect("requests reach the server");

    server.task.abort();
    let killed_at = Instant::now();
    let failures = async {
        while let Some(joined) = calls.join_next().await {
            let result = joined.expect("call task");
            assert!(
                matches!(result, Err(WireError::Closed | WireError::Io(_))),
                "{result:?}"
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(5), failures)
        .await
        .expect("calls fail promptly");
    assert!(killed_at.elapsed() < Duration::from_secs(5));
    assert!(conn.is_closed());
    let after = echo_call(&conn, 99, 0).await;
    assert!(
        matches!(after, Err(WireError::Closed | WireError::Io(_))),
        "{after:?}"
    );
}

/// Sends `bytes` on a raw socket; returns once the server has closed it.
async fn send_garbage(addr: SocketAddr, bytes: &[u8]) {
    let mut raw = TcpStream::connect(addr).await.expect("connect raw");
    raw.write_all(bytes).await.expect("write garbage");
    let mut sink = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut sink)).await;
    // A clean EOF or a reset both mean the server dropped the connection.
    assert!(closed.is_ok(), "server kept a connection that sent garbage");
    assert!(sink.is_empty(), "server answered garbage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_closes_only_that_connection() {
    let server = start_server().await;
    let scenario = async {
        let before = connect(server.addr, Duration::from_secs(10)).await;
        echo_call(&before, 1, 0).await.expect("call before garbage");

        send_garbage(
            server.addr,
            b"GET / HTTP/1.1\r\nHost: cairn\r\n\r\n padding padding",
        )
        .await;
        let mut bad_crc = Frame::request(&Note { text: "x".into() }, Bytes::from_static(b"abc"))
            .expect("encodes")
            .encode()
            .expect("encodes")
            .to_vec();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0x40;
        send_garbage(server.addr, &bad_crc).await;

        echo_call(&before, 2, 0)
            .await
            .expect("other connection unaffected");
        let after = connect(server.addr, Duration::from_secs(10)).await;
        echo_call(&after, 3, 0)
            .await
            .expect("server accepts new connections");
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("in bounded time");
    assert!(
        server.seen.notes.lock().expect("lock").is_empty(),
        "corrupt note reached handler"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_calls() {
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_secs(10)).await;
    let scenario = async {
        let in_flight = {
            let conn = conn.clone();
            tokio::spawn(async move { echo_call(&conn, 5, 300).await })
        };
        while server.seen.requests.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.shutdown.cancel();
        in_flight
            .await
            .expect("call task")
            .expect("in-flight call answered");
        server.task.await.expect("serve returns after draining");
        let after = echo_call(&conn, 6, 0).await;
        assert!(
            matches!(after, Err(WireError::Closed | WireError::Io(_))),
            "{after:?}"
        );
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("in bounded time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_messages_arrive_in_both_directions() {
    // Client to server through `serve`.
    let server = start_server().await;
    let conn = connect(server.addr, Duration::from_secs(10)).await;
    conn.send(
        &Note {
            text: "hello".into(),
        },
        Bytes::new(),
    )
    .await
    .expect("send");
    echo_call(&conn, 1, 0).await.expect("call after send");
    let wait = async {
        while server.seen.notes.lock().expect("lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, wait)
        .await
        .expect("note delivered");
    assert_eq!(
        *server.seen.notes.lock().expect("lock"),
        vec!["hello".to_string()]
    );

    // Server to client: a raw peer pushes one unsolicited frame.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let push = Frame::request(
        &Note {
            text: "map epoch 9".into(),
        },
        Bytes::from_static(b"map"),
    )
    .expect("encodes")
    .encode()
    .expect("encodes");
    let peer = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        stream.write_all(&push.to_vec()).await.expect("push");
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    });
    let (incoming, mut received) = mpsc::channel(4);
    let options = ConnectOptions {
        incoming: Some(incoming),
        ..ConnectOptions::default()
    };
    let client = Connection::connect(addr, options).await.expect("connect");
    let frame = tokio::time::timeout(SCENARIO_TIMEOUT, received.recv())
        .await
        .expect("in bounded time")
        .expect("a pushed frame");
    assert_eq!(
        frame.decode_body::<Note>().expect("note").text,
        "map epoch 9"
    );
    assert_eq!(&frame.data[..], b"map");
    client.close();
    peer.await.expect("peer task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_flushes_and_closes_the_socket() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let peer = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut received = Vec::new();
        stream
            .read_to_end(&mut received)
            .await
            .expect("read until EOF");
        received
    });
    let conn = connect(addr, Duration::from_secs(10)).await;
    let last_words = Note { text: "bye".into() };
    conn.send(&last_words, Bytes::new()).await.expect("send");
    drop(conn.clone());
    drop(conn);
    let received = tokio::time::timeout(SCENARIO_TIMEOUT, peer)
        .await
        .expect("the peer sees EOF once the handles are gone")
        .expect("peer task");
    let expected = Frame::request(&last_words, Bytes::new()).expect("encodes");
    assert_eq!(
        received,
        expected.encode().expect("encodes").to_vec(),
        "queued send was flushed"
    );
}

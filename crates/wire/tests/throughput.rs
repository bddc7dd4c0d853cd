//! Throughput smoke figure, not an assertion of speed: uploads 4 MiB data
//! frames over loopback with several calls in flight and prints MB/s. It
//! asserts only that every call succeeded. Run it with
//! `cargo test --release -p cairn-wire --test throughput -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_wire::{ConnectOptions, Connection, Frame, Message, ServeOptions, serve};
use tokio::net::TcpListener;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Put {
    index: u32,
}
impl Message for Put {
    const KIND: u16 = 20;
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PutReply {
    received_bytes: u32,
}
impl Message for PutReply {
    const KIND: u16 = 21;
}

const DATA_SIZE_BYTES: usize = 4 * 1024 * 1024;
const CALL_COUNT: u32 = 256;
const CALLS_IN_FLIGHT: u32 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints a throughput figure; run explicitly in release"]
async fn four_mib_frames_over_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handler = |frame: Frame, _session| async move {
        let reply = PutReply {
            received_bytes: u32::try_from(frame.data.len()).ok()?,
        };
        Frame::response(frame.request_id, &reply, Bytes::new()).ok()
    };
    tokio::spawn(serve(listener, handler, ServeOptions::default()));
    let options = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let conn = Connection::connect(addr, options).await.expect("connect");
    let data = Bytes::from(vec![0xa5u8; DATA_SIZE_BYTES]);

    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..CALLS_IN_FLIGHT {
        let (conn, data) = (conn.clone(), data.clone());
        workers.spawn(async move {
            for index in (worker..CALL_COUNT).step_by(CALLS_IN_FLIGHT as usize) {
                let (reply, _): (PutReply, Bytes) =
                    conn.call(&Put { index }, data.clone()).await.expect("call");
                assert_eq!(reply.received_bytes as usize, DATA_SIZE_BYTES);
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("worker");
    }
    let elapsed = started.elapsed();
    let total_bytes = DATA_SIZE_BYTES as f64 * f64::from(CALL_COUNT);
    println!(
        "{CALL_COUNT} x 4 MiB frames, {CALLS_IN_FLIGHT} in flight, loopback: {:.0} MB/s ({:.2} s)",
        total_bytes / elapsed.as_secs_f64() / 1e6,
        elapsed.as_secs_f64()
    );
}

/// The baseline for the figure above: the same bytes over a bare loopback
/// socket, written in 4 MiB chunks and read into one reused buffer, with no
/// framing, checksums or allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints a baseline figure; run explicitly in release"]
async fn bare_socket_baseline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let total_bytes = DATA_SIZE_BYTES * CALL_COUNT as usize;
    let reader = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; DATA_SIZE_BYTES];
        let mut received_bytes = 0;
        while received_bytes < total_bytes {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(n > 0, "early EOF");
            received_bytes += n;
        }
    });
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let data = vec![0xa5u8; DATA_SIZE_BYTES];
    let started = Instant::now();
    for _ in 0..CALL_COUNT {
        stream.write_all(&data).await.expect("write");
    }
    reader.await.expect("reader");
    let elapsed = started.elapsed();
    println!(
        "bare socket, same bytes: {:.0} MB/s ({:.2} s)",
        total_bytes as f64 / elapsed.as_secs_f64() / 1e6,
        elapsed.as_secs_f64()
    );
}

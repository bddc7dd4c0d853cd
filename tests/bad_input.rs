//! Bad input against a real `cairn up` cluster: every malformed CLI command
//! (missing pool, bad object or pool names, out-of-range pool parameters,
//! missing objects) exits non-zero with a message naming the problem and
//! changes nothing; garbage bytes and malformed frames sent to the monitor
//! and OSD ports close only that connection. After each, the cluster still
//! serves puts and gets, and no daemon restarted or panicked.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use cairn_client::{Client, ClientError, ClientOptions, ReadRange};
use cairn_proto::osd::{ClientReply, KIND_CLIENT_OP, KIND_PEER_MSG, OpError};
use cairn_wire::{Frame, FrameDecoder, MAGIC, PROTOCOL_VERSION};
use common::{Cluster, is_running, mon_addr, ok, pattern, serial};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Output;
use std::time::{Duration, Instant};

const POOL: &str = "data";
const OSD_COUNT: u16 = 3;
const DAEMONS: [&str; 4] = ["mon", "osd.0", "osd.1", "osd.2"];
/// Exit code of a command that ran and failed (`main` returns FAILURE).
const EXIT_FAILED: i32 = 1;
/// Exit code of a command clap refused to parse.
const EXIT_USAGE: i32 = 2;
/// Longest a server may take to answer or close a connection.
const SERVER_WAIT: Duration = Duration::from_secs(5);

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `cairn ARGS` and asserts it exits `code` with every fragment of
/// `wanted` on stderr.
fn fails(cluster: &Cluster, args: &[&str], stdin: Option<&[u8]>, code: i32, wanted: &[&str]) {
    let output = common::cairn_with_input(&cluster.conf, args, stdin);
    let text = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(code),
        "cairn {args:?} exits {code}; stderr: {text}"
    );
    for fragment in wanted {
        assert!(
            text.contains(fragment),
            "cairn {args:?}: stderr names the problem ({fragment:?}): {text}"
        );
    }
}

/// A CLI put and get of a fresh object, byte-exact.
fn still_serves(cluster: &Cluster, seed: u64) {
    let name = format!("health-{seed}");
    let data = pattern(seed, 5000);
    ok(
        common::cairn_with_input(
            &cluster.conf,
            &["object", "put", "--pool", POOL, &name, "-"],
            Some(&data),
        ),
        "health put",
    );
    let got = ok(
        cluster.cairn(&["object", "get", "--pool", POOL, &name, "-"]),
        "health get",
    );
    assert!(got == data, "{name} reads back byte-exact");
}

fn epoch(cluster: &Cluster) -> u64 {
    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    status["epoch"].as_u64().expect("epoch")
}

fn pids(cluster: &Cluster) -> Vec<u32> {
    DAEMONS.iter().map(|d| cluster.daemon_pid(d)).collect()
}

/// No daemon restarted (same pids, all alive) and none logged a panic
/// (a panic in a connection task would not end the process).
fn no_daemon_died(cluster: &Cluster, pids_before: &[u32]) {
    assert_eq!(pids(cluster), pids_before, "no daemon was restarted");
    assert!(pids_before.iter().all(|p| is_running(*p)));
    let logs = std::fs::read_dir(cluster.dir.join("logs")).expect("logs");
    for log in logs.flatten() {
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        assert!(
            !text.contains("panicked"),
            "{} records a panic:\n{text}",
            log.path().display()
        );
    }
}

/// One rejected command and what it must say.
struct Rejected<'a> {
    args: Vec<&'a str>,
    stdin: Option<&'a [u8]>,
    code: i32,
    wanted: Vec<&'a str>,
}

fn rejected<'a>(args: &[&'a str], wanted: &[&'a str]) -> Rejected<'a> {
    Rejected {
        args: args.to_vec(),
        stdin: None,
        code: EXIT_FAILED,
        wanted: wanted.to_vec(),
    }
}

#[test]
fn cli_rejects_bad_input_clearly_and_the_cluster_keeps_serving() {
    let _serial = serial();
    let cluster = Cluster::up("bad-input-cli", OSD_COUNT, 17800, &[]);
    let pids_before = pids(&cluster);
    let epoch_before = epoch(&cluster);
    let name_max = "n".repeat(2048);
    let name_long = "n".repeat(2049);
    let pool_long = "p".repeat(65);
    let put = |name: &'static str| ["object", "put", "--pool", POOL, name, "-"];
    let mut cases = vec![
        rejected(
            &["object", "put", "--pool", "nope", "obj", "-"],
            &["pool \"nope\" does not exist"],
        ),
        rejected(
            &["object", "get", "--pool", "nope", "obj"],
            &["pool \"nope\" does not exist"],
        ),
        rejected(&put(""), &["object name of 0 bytes (1 to 2048 allowed)"]),
        rejected(
            &["object", "put", "--pool", POOL, &name_long, "-"],
            &["object name of 2049 bytes (1 to 2048 allowed)"],
        ),
        rejected(
            &["object", "get", "--pool", POOL, "missing"],
            &["not found"],
        ),
        rejected(
            &["object", "stat", "--pool", POOL, "missing"],
            &["not found"],
        ),
        rejected(
            &["pool", "create", ""],
            &["invalid pool name \"\": it is empty"],
        ),
        rejected(
            &["pool", "create", "a b"],
            &["invalid pool name \"a b\"", "only ASCII letters"],
        ),
        rejected(
            &["pool", "create", "a/b"],
            &["invalid pool name \"a/b\"", "only ASCII letters"],
        ),
        rejected(&["pool", "create", ".hidden"], &["may not start with"]),
        rejected(
            &["pool", "create", &pool_long],
            &["invalid pool name", "longer than 64 bytes"],
        ),
        rejected(
            &["pool", "create", "x", "--pg-num", "0"],
            &["pg_num 0 must be between 1 and 4194304"],
        ),
        rejected(
            &["pool", "create", "x", "--pg-num", "4194305"],
            &["pg_num 4194305 must be between 1 and 4194304"],
        ),
        rejected(
            &["pool", "create", "x", "--size", "0"],
            &["size 0 must be between 1 and 32"],
        ),
        rejected(
            &["pool", "create", "x", "--size", "33"],
            &["size 33 must be between 1 and 32"],
        ),
        rejected(
            &["pool", "create", "x", "--size", "2", "--min-size", "3"],
            &["min_size 3 must be between 1 and size 2"],
        ),
        rejected(
            &["pool", "create", "x", "--size", "3", "--min-size", "0"],
            &["min_size 0 must be between 1 and size 3"],
        ),
        rejected(
            &["pool", "create", "x", "--size", "4"],
            &["pool cannot be placed"],
        ),
        rejected(
            &["pool", "create", "x", "--failure-domain", "planet"],
            &["\"planet\" is not a failure domain"],
        ),
        rejected(&["pool", "create", POOL], &["already exists"]),
        rejected(
            &["pool", "rm", "nope", "--yes-i-really-mean-it"],
            &["pool \"nope\" does not exist"],
        ),
        rejected(&["pool", "rm", POOL], &["--yes-i-really-mean-it"]),
        rejected(
            &["pool", "set", POOL, "--pg-num", "8"],
            &["pg_num only grows (32 -> 8)"],
        ),
        rejected(
            &["pool", "set", POOL, "--pg-num", "4194305"],
            &["pg_num 4194305 must be between 1 and 4194304"],
        ),
        rejected(
            &["pool", "set", POOL, "--min-size", "4"],
            &["min_size 4 must be between 1 and size 3"],
        ),
        rejected(&["pool", "set", POOL], &["nothing to set"]),
        rejected(
            &["pool", "set", "nope", "--min-size", "1"],
            &["pool \"nope\" does not exist"],
        ),
        rejected(&["osd", "out", "99"], &["osd.99 does not exist"]),
        rejected(&["osd", "out", "abc"], &["\"abc\" is not an OSD id"]),
    ];
    let usage_errors: [(&[&str], &str); 4] = [
        (
            &["pool", "create", "x", "--pg-num", "abc"],
            "invalid value 'abc' for '--pg-num <PG_NUM>'",
        ),
        (
            &["mds", "--inline-max", "1M"],
            "1048576 bytes is past the limit of 65536",
        ),
        (&["pool", "create", "x", "--pg-num", "-1"], "'-1'"),
        (
            &["object", "put", "--pool", POOL],
            "the following required arguments were not provided",
        ),
    ];
    for (args, wanted) in usage_errors {
        cases.push(Rejected {
            args: args.to_vec(),
            stdin: None,
            code: EXIT_USAGE,
            wanted: vec![wanted],
        });
    }
    for case in &mut cases {
        if case.args.first() == Some(&"object") && case.args.last() == Some(&"-") {
            case.stdin = Some(b"payload");
        }
    }
    for (index, case) in cases.iter().enumerate() {
        fails(&cluster, &case.args, case.stdin, case.code, &case.wanted);
        still_serves(&cluster, index as u64);
    }
    assert_eq!(
        epoch(&cluster),
        epoch_before,
        "no rejected command changed the map"
    );
    let pools = common::ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let names: Vec<&str> = pools
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, [POOL], "no pool was created or removed");
    assert_eq!(pools[0]["pg_num"], 32, "{pools}");
    assert_eq!(
        pools[0]["redundancy"], "replicated size 3 min_size 2",
        "{pools}"
    );

    // The limits themselves are accepted: a 2048-byte object name and a
    // 64-byte pool name.
    ok(
        common::cairn_with_input(
            &cluster.conf,
            &["object", "put", "--pool", POOL, &name_max, "-"],
            Some(b"longest name"),
        ),
        "put with a 2048-byte name",
    );
    let got = ok(
        cluster.cairn(&["object", "get", "--pool", POOL, &name_max]),
        "get",
    );
    assert_eq!(got, b"longest name");
    let pool_max = "p".repeat(64);
    ok(
        cluster.cairn(&["pool", "create", &pool_max, "--pg-num", "4"]),
        "create a pool with a 64-byte name",
    );
    no_daemon_died(&cluster, &pids_before);
    drop(cluster);
}

/// Bad requests through the client library: past the store's 4 GiB object
/// limit (without writing gigabytes: one byte at offset 4 GiB), an offset
/// that overflows, and oversized xattr names and omap keys. Each fails at
/// once with `Invalid`, and nothing is created.
#[test]
fn library_requests_past_the_limits_are_refused() {
    let _serial = serial();
    let cluster = Cluster::up("bad-input-limits", OSD_COUNT, 17825, &[]);
    let pids_before = pids(&cluster);
    let mon = mon_addr(&cluster);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = Client::connect(&mon).await.expect("connect");
        let invalid = |what: &str, result: Result<u64, ClientError>, fragment: &str| match result {
            Err(ClientError::Op(OpError::Invalid(why))) => {
                assert!(why.contains(fragment), "{what}: {why}");
            }
            other => panic!("{what}: expected Invalid, got {other:?}"),
        };
        let byte = Bytes::from_static(b"x");
        let started = Instant::now();
        invalid(
            "one byte at 4 GiB",
            client.write(POOL, b"huge", 1 << 32, byte.clone()).await,
            "passes the 4294967296-byte object limit",
        );
        invalid(
            "an offset that overflows",
            client
                .write(POOL, b"huge", u64::MAX - 5, byte.clone())
                .await,
            "object limit",
        );
        invalid(
            "a 257-byte xattr name",
            client
                .set_xattr(POOL, b"huge", &[b'x'; 257], byte.clone())
                .await,
            "xattr name of 257 bytes exceeds 256",
        );
        let key = Bytes::from(vec![b'k'; 4097]);
        invalid(
            "a 4097-byte omap key",
            client
                .omap_set(POOL, b"huge", &[(key, byte.clone())].into())
                .await,
            "omap key of 4097 bytes exceeds 4096",
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refusals are not retried: {:?}",
            started.elapsed()
        );
        assert!(matches!(
            client.stat(POOL, b"huge").await,
            Err(ClientError::NotFound)
        ));
        // The largest offset that fits is accepted (a sparse object; only
        // its last byte is read back).
        client
            .write(POOL, b"edge", (1 << 32) - 1, byte.clone())
            .await
            .expect("a write ending exactly at the limit");
        let tail = ReadRange {
            offset_bytes: (1 << 32) - 2,
            length_bytes: None,
        };
        assert_eq!(
            client.read(POOL, b"edge", tail).await.expect("read"),
            Bytes::from_static(b"\0x")
        );
    });
    still_serves(&cluster, 1);
    no_daemon_died(&cluster, &pids_before);
    drop(cluster);
}

/// A request whose object name is too large to frame (the body limit is
/// 1 MiB) fails at once with an error that says so, instead of being
/// retried until the operation deadline.
#[test]
fn an_unframeable_request_fails_fast() {
    let _serial = serial();
    let cluster = Cluster::up("bad-input-frame", OSD_COUNT, 17830, &[]);
    let mon = mon_addr(&cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let options = ClientOptions {
            op_deadline: Duration::from_secs(10),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(&mon, options).await.expect("connect");
        let name = vec![b'n'; 1 << 20];
        let started = Instant::now();
        let result = client
            .write_full(POOL, &name, Bytes::from_static(b"x"))
            .await;
        let elapsed = started.elapsed();
        let error = result.expect_err("a 1 MiB object name is refused");
        let text = error.to_string();
        assert!(
            elapsed < Duration::from_secs(5),
            "refused at once, not retried for {elapsed:?}: {text}"
        );
        assert!(
            text.contains("too large") || text.contains("object name"),
            "the error names the problem: {text}"
        );
    });
    drop(cluster);
}

/// `object put` of an input file that does not exist names the file.
#[test]
fn a_missing_input_file_is_named() {
    let _serial = serial();
    let cluster = Cluster::up("bad-input-file", OSD_COUNT, 17845, &[]);
    let missing = cluster.dir.join("no-such-input").display().to_string();
    fails(
        &cluster,
        &["object", "put", "--pool", POOL, "obj", &missing],
        None,
        EXIT_FAILED,
        &["No such file", &missing],
    );
    drop(cluster);
}

/// Removing an object that does not exist answers `NotFound` at once, and
/// the PG (the only one of its pool) still takes writes afterwards. Both
/// are checked before either is asserted, so a failure shows both.
#[test]
fn removing_a_missing_object_says_not_found_and_leaves_the_pg_writable() {
    let _serial = serial();
    let cluster = Cluster::up("bad-input-rm", OSD_COUNT, 17840, &[]);
    ok(
        cluster.cairn(&["pool", "create", "one", "--pg-num", "1"]),
        "pool create",
    );
    let mon = mon_addr(&cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let options = ClientOptions {
            op_deadline: Duration::from_secs(8),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(&mon, options).await.expect("connect");
        let data = Bytes::from_static(b"data");
        client
            .write_full("one", b"before", data.clone())
            .await
            .expect("write before the remove");
        let started = Instant::now();
        let removed = client.remove("one", b"missing").await;
        let remove_took = started.elapsed();
        let after = client.write_full("one", b"after", data.clone()).await;
        let removed_ok = matches!(removed, Err(ClientError::NotFound)) && remove_took < SERVER_WAIT;
        assert!(
            removed_ok && after.is_ok(),
            "removing a missing object: {removed:?} after {remove_took:?}; \
             then a write to the same PG: {after:?}"
        );
    });
    drop(cluster);
}

/// Sends `bytes` on a new connection; with `half_close`, then shuts down
/// the sending side. Returns what the server sent and whether it closed
/// the connection within [`SERVER_WAIT`].
fn poke(addr: &str, bytes: &[u8], half_close: bool) -> (Vec<u8>, bool) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // The server may close before it has read everything: a failed write
    // is part of what is being tested, not an error of the test.
    drop(stream.write_all(bytes));
    if half_close {
        drop(stream.shutdown(Shutdown::Write));
    }
    let mut received = Vec::new();
    let deadline = Instant::now() + SERVER_WAIT;
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (received, true),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if Instant::now() > deadline {
                    return (received, false);
                }
            }
            Err(_) => return (received, true),
        }
    }
}

/// A 32-byte CRN1 header with the given fields (crc as given, not computed).
fn header(version: u16, kind: u16, body_len: u32, data_len: u32, flags: u32, crc: u32) -> Vec<u8> {
    let mut head = BytesMut::with_capacity(32);
    head.put_slice(&MAGIC);
    head.put_u16_le(version);
    head.put_u16_le(kind);
    head.put_u64_le(1);
    head.put_u32_le(body_len);
    head.put_u32_le(data_len);
    head.put_u32_le(flags);
    head.put_u32_le(crc);
    head.to_vec()
}

/// A well-formed frame (correct checksum) whose body is `body`.
fn frame(kind: u16, request_id: u64, body: &[u8]) -> Vec<u8> {
    Frame {
        kind,
        request_id,
        is_response: false,
        body: Bytes::copy_from_slice(body),
        data: Bytes::from_static(b"some data").into(),
    }
    .encode()
    .expect("encode")
    .to_vec()
}

/// Malformed streams the server must answer by closing the connection,
/// each with whether the test half-closes after sending it.
fn malformed_streams(kind: u16) -> Vec<(&'static str, Vec<u8>, bool)> {
    let mut random = pattern(7, 64 << 10);
    random[0] = 0;
    let mut bad_crc = frame(kind, 3, &pattern(8, 40));
    bad_crc[28] ^= 0xff;
    let good = frame(kind, 4, &pattern(9, 40));
    let truncated = good[..good.len() / 2].to_vec();
    let mut partial_data = header(PROTOCOL_VERSION, kind, 10, 256 << 20, 0, 0);
    partial_data.extend(pattern(10, 1000));
    vec![
        ("random bytes", random, false),
        (
            "a huge body length",
            header(PROTOCOL_VERSION, kind, u32::MAX, 0, 0, 0),
            false,
        ),
        (
            "a huge data length",
            header(PROTOCOL_VERSION, kind, 0, u32::MAX, 0, 0),
            false,
        ),
        (
            "another protocol version",
            header(PROTOCOL_VERSION + 1, kind, 0, 0, 0, 0),
            false,
        ),
        (
            "unknown flags",
            header(PROTOCOL_VERSION, kind, 0, 0, 0x8000_0000, 0),
            false,
        ),
        ("a bad checksum", bad_crc, false),
        ("a truncated frame", truncated, true),
        ("256 MiB announced, 1000 bytes sent", partial_data, true),
    ]
}

/// Reads one frame from `stream`, within [`SERVER_WAIT`].
fn read_frame(stream: &mut TcpStream, what: &str) -> Frame {
    stream.set_read_timeout(Some(SERVER_WAIT)).expect("timeout");
    let mut decoder = FrameDecoder::new();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(frame) = decoder.decode(&mut buf).expect("a well-formed reply") {
            return frame;
        }
        let n = stream
            .read(&mut chunk)
            .unwrap_or_else(|e| panic!("{what}: no reply ({e})"));
        assert!(n > 0, "{what}: the server closed instead of replying");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Well-formed frames with undecodable bodies and an unknown kind: each
/// request gets an error reply on the same, still open, connection.
fn undecodable_requests(addr: &str, request_kind: u16, is_osd: bool) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let garbage = pattern(11, 300);
    if is_osd {
        // One-way peer message: no reply, and the connection stays open.
        stream
            .write_all(&frame(KIND_PEER_MSG, 0, &garbage))
            .expect("send");
    }
    for (request_id, kind) in [(21u64, request_kind), (22, 0x7777)] {
        stream
            .write_all(&frame(kind, request_id, &garbage))
            .expect("send on an open connection");
        let what = format!("{addr}, kind {kind:#06x}");
        let reply = read_frame(&mut stream, &what);
        assert!(reply.is_response, "{what}");
        assert_eq!(reply.request_id, request_id, "{what}");
        if is_osd {
            let reply: ClientReply = reply.decode_body().expect("a client reply");
            assert!(
                matches!(reply.result, Err(OpError::Invalid(_))),
                "{what}: {reply:?}"
            );
        } else {
            let cairn_proto::mon::MonReply(result) = reply.decode_body().expect("a mon reply");
            assert!(
                matches!(result, Err(cairn_proto::mon::MonError::BadRequest(_))),
                "{what}: {result:?}"
            );
        }
    }
}

#[test]
fn garbage_on_the_wire_closes_only_that_connection() {
    let _serial = serial();
    let base_port = 17850;
    let cluster = Cluster::up("bad-input-wire", OSD_COUNT, base_port, &[]);
    let pids_before = pids(&cluster);
    let targets: Vec<(String, u16, bool)> = (0..=OSD_COUNT)
        .map(|i| {
            let addr = format!("127.0.0.1:{}", base_port + i);
            if i == 0 {
                (addr, cairn_proto::mon::KIND_COMMAND, false)
            } else {
                (addr, KIND_CLIENT_OP, true)
            }
        })
        .collect();
    for (addr, kind, is_osd) in &targets {
        for (what, bytes, half_close) in malformed_streams(*kind) {
            let (received, closed) = poke(addr, &bytes, half_close);
            assert!(closed, "{addr} closes the connection after {what}");
            assert!(
                received.is_empty(),
                "{addr} sends nothing back after {what}: {} bytes",
                received.len()
            );
        }
        undecodable_requests(addr, *kind, *is_osd);
        still_serves(&cluster, u64::from(base_port));
    }

    // Connections that announced 256 MiB and stalled, held open while the
    // cluster is used: they tie up only themselves.
    let mut stalled = Vec::new();
    for (addr, kind, _) in &targets {
        for _ in 0..8 {
            let mut stream = TcpStream::connect(addr).expect("connect");
            let mut bytes = header(PROTOCOL_VERSION, *kind, 10, 256 << 20, 0, 0);
            bytes.extend(pattern(12, 4096));
            stream.write_all(&bytes).expect("send");
            stalled.push(stream);
        }
    }
    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    assert_eq!(status["osds_up"], 3, "{status}");
    still_serves(&cluster, 2);
    drop(stalled);

    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    assert_eq!(status["osds_up"], 3, "{status}");
    still_serves(&cluster, 3);
    no_daemon_died(&cluster, &pids_before);
    drop(cluster);
}

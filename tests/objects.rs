//! Proves the object API beyond put/get on a real `cairn up` cluster:
//! paged pool listing (`object ls` and the client), xattr and omap commands,
//! compare-and-set guards that lose no update under concurrent writers, and
//! a full OSD refusing writes with a clear `full` error while removes work.

mod common;

use bytes::Bytes;
use cairn_client::{Client, ClientError, Guard, ReadRange};
use common::{Cluster, mon_addr, ok, runtime};
use std::collections::BTreeSet;

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("utf-8 output")
}

/// `cairn status --json` once `done` holds of it (OSD statistics arrive
/// with heartbeats, once a second), or a panic after 20 s.
fn wait_status(cluster: &Cluster, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
        if done(&status) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status never got there: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
fn listing_xattrs_omap_and_guards() {
    let cluster = Cluster::up("objects", 3, 17900, &[]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");

    // Listing: 300 objects over 32 PGs, paged 7 at a time by the client,
    // and all at once by `object ls`.
    let written: BTreeSet<String> = (0..300).map(|i| format!("list-{i:03}")).collect();
    rt.block_on(async {
        for name in &written {
            client
                .write_full("data", name.as_bytes(), Bytes::from(name.clone()))
                .await
                .expect("put");
        }
    });
    let mut paged = Vec::new();
    let mut cursor = None;
    loop {
        let page = rt
            .block_on(client.list("data", cursor, 7))
            .expect("list page");
        assert!(page.names.len() <= 7, "page over its limit");
        paged.extend(page.names);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let paged_set: BTreeSet<String> = paged
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    assert_eq!(paged.len(), written.len(), "each object listed once");
    assert_eq!(paged_set, written);
    let listed = ok(cluster.cairn(&["object", "ls", "--pool", "data"]), "ls");
    let cli_set: BTreeSet<String> = text(listed).lines().map(str::to_owned).collect();
    assert_eq!(cli_set, written);
    let json = ok(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "ls --json",
    );
    let names: Vec<String> = serde_json::from_slice(&json).expect("json list");
    assert_eq!(names.len(), 300);
    let missing = cluster.cairn(&["object", "ls", "--pool", "nope"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));

    // Status: every PG active+clean, healthy, client writes seen.
    let status = wait_status(&cluster, |s| {
        s["pgs_by_state"]["active+clean"] == 32 && s["health"]["status"] == "HEALTH_OK"
    });
    assert_eq!(status["pgs_by_state"].as_object().map(|m| m.len()), Some(1));
    assert!(
        status["usage"]["total_bytes"].as_u64() > Some(0),
        "{status}"
    );

    // Xattrs and omap through the CLI.
    let run = |args: &[&str]| text(ok(cluster.cairn(args), &args.join(" ")));
    run(&[
        "object", "setxattr", "--pool", "data", "kv", "color", "blue",
    ]);
    run(&["object", "setxattr", "--pool", "data", "kv", "size", "xl"]);
    assert_eq!(
        run(&["object", "getxattr", "--pool", "data", "kv", "color"]),
        "blue"
    );
    run(&["object", "rmxattr", "--pool", "data", "kv", "size"]);
    assert_eq!(
        run(&["object", "listxattr", "--pool", "data", "kv"]),
        "color\tblue\n"
    );
    for (key, value) in [("b", "2"), ("a", "1"), ("c", "3")] {
        run(&["object", "setomapval", "--pool", "data", "kv", key, value]);
    }
    run(&["object", "rmomapkey", "--pool", "data", "kv", "b"]);
    assert_eq!(
        run(&["object", "getomapval", "--pool", "data", "kv", "c"]),
        "3"
    );
    assert_eq!(
        run(&["object", "listomapvals", "--pool", "data", "kv"]),
        "a\t1\nc\t3\n"
    );
    let absent = cluster.cairn(&["object", "getomapval", "--pool", "data", "kv", "b"]);
    assert!(!absent.status.success(), "removed key still there");

    // Guards: create-only, version compare, xattr compare-and-swap.
    let first = rt
        .block_on(client.write_full_if("data", b"cas", Guard::Version(0), Bytes::from("v1")))
        .expect("create when absent");
    let again = rt.block_on(client.write_full_if(
        "data",
        b"cas",
        Guard::Version(0),
        Bytes::from("v1 again"),
    ));
    assert!(
        matches!(again, Err(ClientError::CompareFailed { .. })),
        "{again:?}"
    );
    let stat = rt.block_on(client.stat("data", b"cas")).expect("stat");
    assert_eq!(
        stat.version, first,
        "stat shows the version the write returned"
    );
    rt.block_on(client.write_full_if("data", b"cas", Guard::Version(first), Bytes::from("v2")))
        .expect("matching version");
    let data = rt
        .block_on(client.read("data", b"cas", ReadRange::default()))
        .expect("read");
    assert_eq!(&data[..], b"v2", "the refused write changed nothing");
    let owner = |value: Option<&'static str>| Guard::Xattr {
        name: Bytes::from_static(b"owner"),
        value: value.map(|v: &'static str| Bytes::from_static(v.as_bytes())),
    };
    rt.block_on(client.set_xattr_if("data", b"cas", owner(None), b"owner", Bytes::from("a")))
        .expect("take the lock when free");
    let stolen =
        rt.block_on(client.set_xattr_if("data", b"cas", owner(None), b"owner", Bytes::from("b")));
    assert!(matches!(stolen, Err(ClientError::CompareFailed { .. })));
    rt.block_on(client.set_xattr_if("data", b"cas", owner(Some("a")), b"owner", Bytes::from("b")))
        .expect("hand over from a to b");
    let cli = cluster.cairn(&[
        "object",
        "put",
        "--pool",
        "data",
        "cas",
        "/dev/null",
        "--if-version",
        "1",
    ]);
    assert!(!cli.status.success());
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("compare failed"),
        "stderr: {}",
        String::from_utf8_lossy(&cli.stderr)
    );

    // Concurrent read-modify-write increments under a version guard: no
    // update is lost, none applied twice.
    let writers = 4u64;
    let increments = 15u64;
    rt.block_on(client.write_full("data", b"counter", Bytes::from("0")))
        .expect("init");
    let total: u64 = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..writers {
            let client = Client::connect(&mon_addr(&cluster)).await.expect("connect");
            tasks.push(tokio::spawn(async move {
                let mut done = 0;
                while done < increments {
                    let stat = client.stat("data", b"counter").await.expect("stat");
                    let value = client
                        .read("data", b"counter", ReadRange::default())
                        .await
                        .expect("read");
                    let n: u64 = std::str::from_utf8(&value)
                        .expect("utf8")
                        .parse()
                        .expect("number");
                    let next = Bytes::from((n + 1).to_string());
                    match client
                        .write_full_if("data", b"counter", Guard::Version(stat.version), next)
                        .await
                    {
                        Ok(_) => done += 1,
                        Err(ClientError::CompareFailed { .. }) => {}
                        Err(error) => panic!("increment: {error}"),
                    }
                }
                done
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.expect("writer");
        }
        total
    });
    let value = rt
        .block_on(client.read("data", b"counter", ReadRange::default()))
        .expect("read counter");
    assert_eq!(
        std::str::from_utf8(&value).expect("utf8"),
        total.to_string(),
        "every successful compare-and-set counted exactly once"
    );
    assert_eq!(total, writers * increments);
}

/// A tmpfs mounted for the test, unmounted (and its directory removed)
/// when dropped.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        drop(std::process::Command::new("umount").arg(&self.0).status());
        drop(std::fs::remove_dir_all(&self.0));
    }
}

#[test]
fn a_full_cluster_refuses_writes_clearly_and_still_removes() {
    let dir = common::test_dir("full");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=192m", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        mounted,
        "mounting a tmpfs needs root (the suite runs as root in CI)"
    );
    let _mount = Tmpfs(dir.clone());
    let cluster = Cluster::up_at(dir, 3, 17950, &[]);
    let rt = runtime();
    let client = rt
        .block_on(Client::connect(&mon_addr(&cluster)))
        .expect("connect");
    let object = Bytes::from(vec![0x5a; 1 << 20]);
    let mut written = Vec::new();
    let full = rt.block_on(async {
        for i in 0..400 {
            let name = format!("fill-{i}");
            match client
                .write_full("data", name.as_bytes(), object.clone())
                .await
            {
                Ok(_) => written.push(name),
                Err(error) => return error,
            }
        }
        panic!("192 MiB never filled with 3 copies of 400 MiB");
    });
    assert!(matches!(full, ClientError::Full(_)), "{full:?}");
    assert!(full.to_string().contains("full"), "{full}");
    assert!(written.len() > 20, "filled too early: {}", written.len());
    let cli = cluster.cairn(&["object", "put", "--pool", "data", "more", "/etc/hostname"]);
    assert!(!cli.status.success(), "a put on a full cluster succeeded");
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("full"),
        "stderr: {}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let status = wait_status(&cluster, |s| s["health"]["status"] == "HEALTH_ERR");
    let checks = status["health"]["checks"].to_string();
    assert!(checks.contains("full osd"), "{status}");
    assert!(status["usage"]["used_bytes"].as_u64() > Some(0), "{status}");
    let text = text(ok(cluster.cairn(&["status"]), "status"));
    assert!(
        text.contains("HEALTH_ERR") && text.contains("full"),
        "{text}"
    );
    // Everything acknowledged before the refusal reads back, and removes
    // free space until writes pass again.
    rt.block_on(async {
        for name in &written {
            let data = client
                .read("data", name.as_bytes(), ReadRange::default())
                .await
                .expect("read back");
            assert!(data == object, "{name} changed");
        }
        for name in written.iter().take(written.len() / 2) {
            client
                .remove("data", name.as_bytes())
                .await
                .expect("remove");
        }
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    rt.block_on(client.write_full("data", b"after", Bytes::from("ok")))
        .expect("writes pass again after removes");
}

//! `cairn up --hosts 3 --netns --net-rate 100mbit`: six OSDs on three
//! emulated hosts, each host a network namespace of its own behind a
//! rate-limited veth pair. The map shows three hosts of two OSDs each at
//! the hosts' addresses; the default pool spreads its copies over hosts;
//! the client config names the hub namespace, and plain `cairn` commands
//! with it (run from the caller's namespace) store and read an object
//! across the links; `tc` shows the rate on both ends of each link; `cairn
//! down` removes every namespace, and a second cluster on the same port
//! may not take them over meanwhile. Flags that make no sense together
//! are refused before anything starts.
//!
//! Needs root and iproute2 (both are on the CI machines).

mod common;

use common::{Cluster, ok, ok_json};
use std::process::Command;

const PORT: u16 = 21400;

fn namespaces() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn qdiscs(args: &[&str]) -> String {
    let out = Command::new("tc")
        .args(args)
        .output()
        .expect("tc qdisc show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn osds_run_on_emulated_hosts_behind_limited_links() {
    let _serial = common::serial();
    let cluster = Cluster::up(
        "emulated-hosts",
        6,
        PORT,
        &["--hosts", "3", "--netns", "--net-rate", "100mbit"],
    );
    let hub = format!("cairn{PORT}");
    let conf = std::fs::read_to_string(&cluster.conf).expect("client config");
    assert!(conf.contains(&format!("netns = \"{hub}\"")), "{conf}");
    let listed = namespaces();
    for ns in [
        hub.clone(),
        format!("{hub}-h0"),
        format!("{hub}-h1"),
        format!("{hub}-h2"),
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&ns)),
            "namespace {ns} in {listed}"
        );
    }

    let tree = ok_json(cluster.cairn(&["osd", "tree", "--json"]), "osd tree");
    let hosts: Vec<&serde_json::Value> = tree["racks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["hosts"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(hosts.len(), 3, "three hosts: {tree}");
    for host in &hosts {
        let name = host["name"].as_str().expect("host name");
        let index: u32 = name
            .strip_prefix("host")
            .and_then(|n| n.parse().ok())
            .expect("hostN");
        let osds = host["osds"].as_array().expect("osds");
        assert_eq!(osds.len(), 2, "two OSDs on {name}: {tree}");
        for osd in osds {
            let addr = osd["addr"].as_str().expect("addr");
            assert!(
                addr.starts_with(&format!("127.0.3.{}:", index + 1)),
                "{name}'s OSD listens on its host's address: {addr}"
            );
        }
    }
    let pools = ok_json(cluster.cairn(&["pool", "ls", "--json"]), "pool ls");
    let data = pools
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "data"))
        .expect("pool data");
    assert_eq!(data["failure_domain"], "host", "{data}");

    // Across the links, from the caller's namespace: the config's hub is
    // entered by the command itself.
    let body = common::pattern(21_400, 3 << 20);
    let file = cluster.dir.join("body");
    std::fs::write(&file, &body).expect("write body");
    let path = file.display().to_string();
    ok(
        cluster.cairn(&["object", "put", "--pool", "data", "across", &path]),
        "object put",
    );
    let back = cluster.dir.join("back");
    ok(
        cluster.cairn(&[
            "object",
            "get",
            "--pool",
            "data",
            "across",
            &back.display().to_string(),
        ]),
        "object get",
    );
    assert!(
        std::fs::read(&back).expect("read back") == body,
        "the bytes come back"
    );

    for host in 0..3 {
        let inner = qdiscs(&["-n", &format!("{hub}-h{host}"), "qdisc", "show"]);
        assert!(
            inner.contains("tbf") && inner.contains("100Mbit"),
            "host{host}: {inner}"
        );
    }
    let outer = qdiscs(&["-n", &hub, "qdisc", "show"]);
    assert_eq!(
        outer.matches("100Mbit").count(),
        3,
        "the hub's ends: {outer}"
    );

    // A second cluster on the same port would take these namespaces over:
    // refused while anything runs in them.
    let other = common::test_dir("emulated-hosts-other");
    let other_data = other.display().to_string();
    let port = PORT.to_string();
    let out = common::cairn(
        &other.join("cairn.toml"),
        &[
            "up",
            "--data",
            &other_data,
            "--base-port",
            &port,
            "--hosts",
            "3",
            "--netns",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("another cluster runs on this port"),
        "{stderr}"
    );
    drop(std::fs::remove_dir_all(&other));
    ok(
        cluster.cairn(&["down", "--data", &cluster.dir.display().to_string()]),
        "down",
    );
    let left = namespaces();
    assert!(
        !left.contains(&hub),
        "cairn down removes the namespaces: {left}"
    );
}

#[test]
fn emulated_network_flags_are_checked_before_anything_starts() {
    let dir = common::test_dir("emulated-hosts-flags");
    let data = dir.display().to_string();
    for (args, says) in [
        (vec!["--net-rate", "1gbit"], "--netns"),
        (vec!["--hosts", "2", "--net-rate", "1gbit"], "--netns"),
        (vec!["--hosts", "0"], "--hosts must be"),
        (
            vec!["--hosts", "2", "--netns", "--net-rate", "fast"],
            "link rate",
        ),
        (
            vec!["--hosts", "2", "--netns", "--net-delay", "5"],
            "link delay",
        ),
    ] {
        let mut all = vec!["up", "--data", &data, "--base-port", "21450"];
        all.extend(&args);
        let out = common::cairn(&dir.join("cairn.toml"), &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} refused");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(!namespaces().contains("cairn21450"), "nothing was made");
    drop(std::fs::remove_dir_all(&dir));
}

//! The S3 gateway with real processes and a real client: `cairn up`, two
//! users made with `cairn s3 user create`, `cairn s3 serve`, and boto3
//! (at its default settings, which send CRC32 checksum trailers) driving
//! `tests/s3/boto3_basic.py`: buckets, objects, ranges, checksums,
//! conditional writes raced by 32 threads, listings, presigned URLs and
//! the errors S3 answers.

mod common;

/// A script of `tests/s3/`.
fn s3_script(name: &str) -> PathBuf {
    common::repo().join("tests/s3").join(name)
}

use common::{Cluster, ok, ok_json};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the gateway when the test ends, passed or not.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Python with boto3: `$CAIRN_S3_PYTHON` (what `scripts/test.sh`
/// installs the clients into), else `python3`.
fn python() -> String {
    std::env::var("CAIRN_S3_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn user(cluster: &Cluster, name: &str) -> (String, String) {
    let made = ok_json(
        cluster.cairn(&["s3", "user", "create", name, "--json"]),
        "s3 user create",
    );
    (
        made["access_key"].as_str().expect("access key").to_owned(),
        made["secret_key"].as_str().expect("secret key").to_owned(),
    )
}

fn start_gateway(cluster: &Cluster, port: u16) -> Gateway {
    start_gateway_with(cluster, port, &[], &[])
}

/// A gateway with more environment (a crash point) and arguments.
fn start_gateway_with(
    cluster: &Cluster,
    port: u16,
    env: &[(&str, &str)],
    args: &[&str],
) -> Gateway {
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cluster.dir.join("s3.log"))
        .expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["s3", "serve", "--addr", &addr, "--conf"])
        .arg(&cluster.conf)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cairn s3 serve starts");
    let gateway = Gateway(child);
    wait_listening(port);
    gateway
}

/// Waits (at most 30 s) until something listens on `port`.
fn wait_listening(port: u16) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no gateway listens on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn boto3_drives_buckets_objects_listings_and_errors() {
    let _serial = common::serial();
    let base_port = 19700;
    let cluster = Cluster::up("s3-boto3", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let (key2, secret2) = user(&cluster, "bob");
    let users = ok_json(cluster.cairn(&["s3", "user", "ls", "--json"]), "s3 user ls");
    assert_eq!(users.as_array().map(Vec::len), Some(2), "{users}");
    let port = base_port + 50;
    let _gateway = start_gateway(&cluster, port);
    // Versioning first, in its own bucket: it leaves nothing behind.
    let versioning: PathBuf = s3_script("boto3_versioning.py");
    let out = Command::new(python())
        .arg(&versioning)
        .env("S3_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("S3_KEY", &key)
        .env("S3_SECRET", &secret)
        .output()
        .expect("python runs");
    let log = std::fs::read_to_string(cluster.dir.join("s3.log")).unwrap_or_default();
    let tail: String = log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success(),
        "{}{}\ngateway log (last lines, newest first):\n{tail}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all versioning checks passed"));
    let left = ok_json(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "object ls",
    );
    assert_eq!(
        left.as_array().map(Vec::len),
        Some(0),
        "versions left behind: {left}"
    );
    let script: PathBuf = s3_script("boto3_basic.py");
    let out = Command::new(python())
        .arg(&script)
        .env("S3_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("S3_KEY", &key)
        .env("S3_SECRET", &secret)
        .env("S3_KEY2", &key2)
        .env("S3_SECRET2", &secret2)
        .output()
        .expect("python runs");
    let log = std::fs::read_to_string(cluster.dir.join("s3.log")).unwrap_or_default();
    let tail: String = log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success(),
        "{}{}\ngateway log (last lines, newest first):\n{tail}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all S3 checks passed"));
    // The script deletes every object it made and ends every upload but
    // one 4 MiB object, kept whole in its head: nothing else may be left
    // in the data pool (refused bodies, replaced parts and copies
    // included), and that one has no piece.
    let left = ok_json(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "object ls",
    );
    let left: Vec<&str> = left
        .as_array()
        .expect("names")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert!(
        left.len() == 1 && left[0].ends_with("/exact4m"),
        "left behind: {left:?}"
    );

    // A second gateway on the same cluster, holding a bucket's record
    // while versioning is turned on through the first.
    let _second = start_gateway(&cluster, port + 1);
    let script: PathBuf = s3_script("two_gateways.py");
    let out = Command::new(python())
        .arg(&script)
        .env("S3_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("S3_ENDPOINT2", format!("http://127.0.0.1:{}", port + 1))
        .env("S3_KEY", &key)
        .env("S3_SECRET", &secret)
        .output()
        .expect("python runs");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("two gateways agree"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn user_commands_refuse_bad_input_clearly() {
    let _serial = common::serial();
    let cluster = Cluster::up("s3-users", 1, 19760, &[]);
    let bad = cluster.cairn(&["s3", "user", "create", "no spaces"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid user name"));
    user(&cluster, "carol");
    let again = cluster.cairn(&["s3", "user", "create", "carol"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    let gone = cluster.cairn(&["s3", "user", "rm", "nobody"]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no such user"));
    // A second key, the first removed: info shows the second only.
    let first = ok_json(
        cluster.cairn(&["s3", "user", "info", "carol", "--json"]),
        "s3 user info",
    )["access_keys"][0]
        .as_str()
        .expect("a key")
        .to_owned();
    let second = ok_json(
        cluster.cairn(&["s3", "key", "create", "carol", "--json"]),
        "s3 key create",
    );
    let second = second["access_key"].as_str().expect("a key").to_owned();
    ok_json(
        cluster.cairn(&["s3", "user", "info", "carol", "--json"]),
        "s3 user info",
    );
    let rm_key = cluster.cairn(&["s3", "key", "rm", &first]);
    assert!(
        rm_key.status.success(),
        "{}",
        String::from_utf8_lossy(&rm_key.stderr)
    );
    let info = ok_json(
        cluster.cairn(&["s3", "user", "info", "carol", "--json"]),
        "s3 user info",
    );
    assert_eq!(info["access_keys"], serde_json::json!([second]), "{info}");
    let again = cluster.cairn(&["s3", "key", "rm", &first]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("no such key"));
    let nobody = cluster.cairn(&["s3", "key", "create", "nobody"]);
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("no such user"));
    let info = cluster.cairn(&["s3", "user", "info", "nobody"]);
    assert!(!info.status.success());
    let rm = cluster.cairn(&["s3", "user", "rm", "carol"]);
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let users = ok_json(cluster.cairn(&["s3", "user", "ls", "--json"]), "s3 user ls");
    assert_eq!(users.as_array().map(Vec::len), Some(0), "{users}");
}

/// A tree of files for the AWS CLI: 40 small ones in three directories
/// and one of 20 MB, which `aws s3` uploads in parts.
fn make_tree(root: &std::path::Path) {
    for dir in ["", "sub", "sub/deeper"] {
        std::fs::create_dir_all(root.join(dir)).expect("mkdir");
    }
    for i in 0..40u64 {
        let dir = ["", "sub", "sub/deeper"][(i % 3) as usize];
        let bytes = common::pattern(i, 100 + (i as usize) * 997);
        std::fs::write(root.join(dir).join(format!("f{i}")), bytes).expect("write");
    }
    std::fs::write(root.join("sub/big"), common::pattern(999, 20_000_000)).expect("write");
}

fn same_trees(a: &std::path::Path, b: &std::path::Path) {
    let out = Command::new("diff")
        .arg("-r")
        .arg(a)
        .arg(b)
        .output()
        .expect("diff runs");
    assert!(
        out.status.success(),
        "trees differ: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_aws_cli_syncs_a_tree_up_and_down_and_removes_it() {
    let _serial = common::serial();
    let base_port = 19780;
    let cluster = Cluster::up("s3-awscli", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let port = base_port + 50;
    let _gateway = start_gateway(&cluster, port);
    let aws_bin = std::env::var("CAIRN_AWS_CLI").unwrap_or_else(|_| "aws".into());
    let endpoint = format!("http://127.0.0.1:{port}");
    let aws = |args: &[&str]| {
        let out = Command::new(&aws_bin)
            .arg("--endpoint-url")
            .arg(&endpoint)
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &key)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .output()
            .expect("the AWS CLI runs");
        assert!(
            out.status.success(),
            "aws {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let up = cluster.dir.join("tree-up");
    let down = cluster.dir.join("tree-down");
    make_tree(&up);
    aws(&["s3", "mb", "s3://tree"]);
    aws(&["s3", "sync", &up.display().to_string(), "s3://tree/t"]);
    let listed = aws(&["s3", "ls", "--recursive", "s3://tree"]);
    assert_eq!(listed.lines().count(), 41, "{listed}");
    // A second sync finds nothing to do.
    let again = aws(&["s3", "sync", &up.display().to_string(), "s3://tree/t"]);
    assert!(again.trim().is_empty(), "{again}");
    aws(&["s3", "sync", "s3://tree/t", &down.display().to_string()]);
    same_trees(&up, &down);
    aws(&[
        "s3",
        "cp",
        "s3://tree/t/sub/big",
        &cluster.dir.join("big").display().to_string(),
    ]);
    same_trees(&up.join("sub/big"), &cluster.dir.join("big"));
    aws(&["s3", "rm", "--recursive", "s3://tree/t"]);
    assert!(
        aws(&["s3", "ls", "--recursive", "s3://tree"])
            .trim()
            .is_empty()
    );
    aws(&["s3", "rb", "s3://tree"]);
}

#[test]
fn cairn_up_starts_a_gateway_and_prints_its_keys() {
    let _serial = common::serial();
    let base_port = 19830;
    let port = base_port + 50;
    let port_text = port.to_string();
    let cluster = Cluster::up("s3-up", 1, base_port, &["--s3-port", &port_text]);
    let kept: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cluster.dir.join("s3-admin.json")).expect("s3-admin.json"),
    )
    .expect("json");
    let key = kept["access_key"].as_str().expect("access key").to_owned();
    let secret = kept["secret_key"].as_str().expect("secret key").to_owned();
    assert_eq!(kept["endpoint"], format!("http://127.0.0.1:{port}"));
    let summary = std::fs::read_to_string(cluster.dir.join("up.ready")).unwrap_or_default();
    assert!(
        summary.contains(&format!("http://127.0.0.1:{port}")) && summary.contains(&key),
        "the summary names the endpoint and the key: {summary}"
    );
    wait_listening(port);
    let check = "import boto3, os\n\
        s3 = boto3.client('s3', endpoint_url=os.environ['E'], aws_access_key_id=os.environ['K'],\n\
            aws_secret_access_key=os.environ['S'], region_name='us-east-1')\n\
        s3.create_bucket(Bucket='quick')\n\
        s3.put_object(Bucket='quick', Key='hello', Body=b'world')\n\
        assert s3.get_object(Bucket='quick', Key='hello')['Body'].read() == b'world'\n\
        print('ok')\n";
    let out = Command::new(python())
        .args(["-c", check])
        .env("E", format!("http://127.0.0.1:{port}"))
        .env("K", &key)
        .env("S", &secret)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // rclone (Debian's) at the printed endpoint with the printed keys:
    // sync a tree up (the large file in 5 MiB parts), check it, sync it
    // down, purge it.
    let rclone = |args: &[&str]| {
        let out = Command::new("rclone")
            .args(args)
            .args(["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"])
            // rclone's AWS SDK cannot take a CA bundle over plain HTTP.
            .env_remove("AWS_CA_BUNDLE")
            .env("RCLONE_CONFIG", "/dev/null")
            .env("RCLONE_CONFIG_CAIRN_TYPE", "s3")
            .env("RCLONE_CONFIG_CAIRN_PROVIDER", "Other")
            .env(
                "RCLONE_CONFIG_CAIRN_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            )
            .env("RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID", &key)
            .env("RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY", &secret)
            .env("RCLONE_CONFIG_CAIRN_REGION", "us-east-1")
            .output()
            .expect("rclone runs (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "rclone {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let up = cluster.dir.join("rclone-up");
    let down = cluster.dir.join("rclone-down");
    make_tree(&up);
    let up_text = up.display().to_string();
    rclone(&["mkdir", "cairn:rtree"]);
    rclone(&["sync", &up_text, "cairn:rtree/t"]);
    rclone(&["check", &up_text, "cairn:rtree/t"]);
    let listed = rclone(&["lsf", "-R", "--files-only", "cairn:rtree"]);
    assert_eq!(listed.lines().count(), 41, "{listed}");
    rclone(&["sync", "cairn:rtree/t", &down.display().to_string()]);
    same_trees(&up, &down);
    rclone(&["purge", "cairn:rtree"]);
    let buckets = rclone(&["lsd", "cairn:"]);
    assert!(!buckets.contains("rtree"), "{buckets}");
}

/// What the benchmarks run against: a one-OSD cluster, a gateway on its
/// base port + 50, and a user's keys.
struct BenchTarget {
    // Fields drop in order: the gateway before its cluster.
    _gateway: Gateway,
    cluster: Cluster,
    endpoint: String,
    key: String,
    secret: String,
}

impl BenchTarget {
    fn up(name: &str, base_port: u16) -> BenchTarget {
        let cluster = Cluster::up(name, 1, base_port, &[]);
        let (key, secret) = user(&cluster, "bench");
        let port = base_port + 50;
        let gateway = start_gateway(&cluster, port);
        BenchTarget {
            _gateway: gateway,
            cluster,
            endpoint: format!("http://127.0.0.1:{port}"),
            key,
            secret,
        }
    }

    /// The keys in the environment, as the AWS tools take them.
    fn env(&self) -> [(&str, &str); 2] {
        [
            ("AWS_ACCESS_KEY_ID", self.key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.as_str()),
        ]
    }
}

/// `cairn bench s3` against the gateway, every mode through the real
/// binary: the counts and bytes its JSON reports match what was asked for
/// and what exists (a paged, restarting listing; mixed PUTs and DELETEs
/// accounted for by the delete of the prefix), bodies of many chunks
/// stream both ways, and a refused key ends the run at once, naming S3's
/// error code.
#[test]
fn bench_s3_runs_every_mode_against_the_gateway() {
    let _serial = common::serial();
    let target = BenchTarget::up("s3-bench", 19900);
    let (cluster, endpoint) = (&target.cluster, &target.endpoint);
    let env = target.env();
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "s3", "--endpoint", endpoint, "--json"];
        args.extend_from_slice(extra);
        common::cairn_with_env(&cluster.conf, &args, None, &env)
    };
    let bench = |extra: &[&str]| {
        let summary = ok_json(run(extra), &format!("bench s3 {extra:?}"));
        assert_eq!(summary["errors"], 0, "{extra:?}: {summary}");
        assert_eq!(summary["first_error"], serde_json::Value::Null, "{summary}");
        summary
    };
    let put = bench(&["--mode", "put", "--object-size", "4K", "--count", "50"]);
    assert_eq!(put["ops"], 50, "{put}");
    assert_eq!(put["bytes_total"], 50 * 4096, "{put}");
    let get = bench(&["--mode", "get", "--count", "200", "--concurrency", "4"]);
    assert_eq!(get["objects_found"], 50, "{get}");
    assert_eq!(get["ops"], 200, "{get}");
    assert_eq!(get["bytes_total"], 200 * 4096, "{get}");
    let head = bench(&["--mode", "head", "--count", "100"]);
    assert_eq!(head["ops"], 100, "{head}");
    // One walker, pages of 20: 20, 20, 10, then from the start again.
    let list = bench(&[
        "--mode",
        "list",
        "--page-keys",
        "20",
        "--count",
        "6",
        "--concurrency",
        "1",
    ]);
    assert_eq!(list["ops"], 6, "{list}");
    assert_eq!(list["keys_listed"], 100, "{list}");
    let mixed = bench(&[
        "--mode",
        "mixed",
        "--object-size",
        "4K",
        "--count",
        "300",
        "--mix",
        "get=50,put=20,head=20,delete=10",
    ]);
    let lost = mixed["reads_lost_to_deletes"].as_u64().expect("a count");
    assert_eq!(mixed["ops"].as_u64(), Some(300 - lost), "{mixed}");
    let ops_of = |name: &str| {
        let ops = mixed["operations"]
            .as_array()
            .and_then(|all| all.iter().find(|op| op["operation"] == name))
            .and_then(|op| op["ops"].as_u64())
            .unwrap_or_else(|| panic!("no {name} figures: {mixed}"));
        assert!(ops > 0, "no {name} ran: {mixed}");
        ops
    };
    let (puts, deletes) = (ops_of("put"), ops_of("delete"));
    ops_of("get");
    ops_of("head");
    // Every object the puts left is there to delete, and no more.
    let delete = bench(&["--mode", "delete"]);
    assert_eq!(
        delete["ops"].as_u64(),
        Some(50 + puts - deletes),
        "{delete}"
    );
    let none = run(&["--mode", "get", "--duration", "1s"]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no objects under"));
    // Objects of 20 chunks of the body pattern, read back and removed.
    let large = ["--prefix", "large"];
    let put = bench(
        &[
            &large[..],
            &["--mode", "put", "--object-size", "20M", "--count", "4"],
        ]
        .concat(),
    );
    assert_eq!(put["bytes_total"], 4 * (20 << 20), "{put}");
    let get = bench(&[&large[..], &["--mode", "get", "--count", "8", "--cleanup"]].concat());
    assert_eq!(get["bytes_total"], 8 * (20 << 20), "{get}");
    assert_eq!(get["objects_removed"], 4, "{get}");
    // Refused keys: a non-zero exit at once, naming the code.
    for (flag, value, code) in [
        ("--secret-key", "not-the-secret", "SignatureDoesNotMatch"),
        ("--access-key", "NOSUCHKEY", "InvalidAccessKeyId"),
    ] {
        let started = Instant::now();
        let refused = run(&["--mode", "put", "--duration", "30s", flag, value]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{flag} {value}: {stderr}");
        assert!(stderr.contains(code), "{flag} {value}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "{stderr}");
    }
}

/// `cairn bench io500 --endpoint` against the gateway with 2 processes
/// and a 1 s stonewall: IO500's twelve phases in its order, each with
/// operations and a rate, every read, stat, delete and find acting on
/// exactly what the writes left (reads verify every object's stamp), the
/// score the square root of the product of its parts' geometric means,
/// and nothing of the run left in the bucket.
#[test]
fn bench_io500_runs_its_twelve_phases_against_the_gateway() {
    let _serial = common::serial();
    let target = BenchTarget::up("s3-io500", 20100);
    let (cluster, endpoint) = (&target.cluster, &target.endpoint);
    let env = target.env();
    let args = [
        "bench",
        "io500",
        "--endpoint",
        endpoint,
        "--procs",
        "2",
        "--stonewall",
        "1s",
        "--max-bytes",
        "64M",
        "--json",
    ];
    let report = ok_json(
        common::cairn_with_env(&cluster.conf, &args, None, &env),
        "bench io500 --endpoint",
    );
    assert_eq!(report["api"], "s3", "{report}");
    common::io500::check_report(&report, 2);
    let bytes = |name: &str| common::io500::phase(&report, name)["bytes"].as_u64();
    let ops = |name: &str| common::io500::ops(&report, name);
    assert_eq!(
        bytes("ior-easy-read"),
        Some(ops("ior-easy-write") * (2 << 20))
    );
    assert_eq!(bytes("ior-hard-read"), Some(ops("ior-hard-write") * 47008));
    assert_eq!(
        bytes("mdtest-hard-read"),
        Some(ops("mdtest-hard-create") * 3901)
    );
    assert_eq!(
        report["io500"]["valid"], false,
        "a 1 s stonewall is not IO500's"
    );
    // Nothing of the run is left in the bucket.
    assert_eq!(report["prefix_removed"], true, "{report}");
    let prefix = report["settings"]["prefix"].as_str().expect("prefix");
    assert!(prefix.starts_with("cairn-bench-"), "{prefix}");
    let list = ok_json(
        common::cairn_with_env(
            &cluster.conf,
            &[
                "bench",
                "s3",
                "--endpoint",
                endpoint,
                "--bucket",
                "io500",
                "--prefix",
                prefix.trim_end_matches('/'),
                "--mode",
                "list",
                "--count",
                "1",
                "--concurrency",
                "1",
                "--json",
            ],
            None,
            &env,
        ),
        "bench s3 --mode list",
    );
    assert_eq!(list["ops"], 1, "{list}");
    assert_eq!(list["keys_listed"], 0, "{list}");
}

/// A gateway SIGKILLed while a 64 MiB PUT streams into it: with a new
/// gateway nothing of the cut object is visible (the stored object and
/// the upload in progress are), its intent and pieces stay until `cairn
/// s3 gc` recovers them, and once the rest is deleted and the upload
/// aborted by the collector, the data pool holds nothing.
#[test]
fn a_gateway_killed_mid_upload_leaves_nothing_visible_and_gc_reclaims_the_rest() {
    let _serial = common::serial();
    let base_port = 19960;
    let cluster = Cluster::up("s3-crash", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let port = base_port + 30;
    let script: PathBuf = s3_script("crash_upload.py");
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut gateway = start_gateway(&cluster, port);
    let mut stage = Command::new(python())
        .arg(&script)
        .arg("stage")
        .env("S3_ENDPOINT", &endpoint)
        .env("S3_KEY", &key)
        .env("S3_SECRET", &secret)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(stage.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("reads");
    assert_eq!(line.trim(), "SENT", "staging failed: {line}");
    let _ = gateway.0.kill();
    let _ = gateway.0.wait();
    let _ = stage.kill();
    let _ = stage.wait();
    let pieces = |cluster: &Cluster| -> Vec<String> {
        let listed = ok_json(
            cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
            "object ls",
        );
        listed
            .as_array()
            .expect("names")
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect()
    };
    let before = pieces(&cluster);
    assert!(
        before.iter().any(|n| n.contains(".t/")),
        "the cut PUT wrote no piece before the kill: {before:?}"
    );
    let _gateway = start_gateway(&cluster, port);
    let check = Command::new(python())
        .arg(&script)
        .arg("check")
        .env("S3_ENDPOINT", &endpoint)
        .env("S3_KEY", &key)
        .env("S3_SECRET", &secret)
        .output()
        .expect("python runs");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let gc = ok_json(
        cluster.cairn(&["s3", "gc", "--dead-after", "0s", "--json"]),
        "s3 gc",
    );
    assert!(gc["intents_recovered"].as_u64() >= Some(1), "{gc}");
    assert_eq!(gc["errors"], 0, "{gc}");
    let after = pieces(&cluster);
    assert!(
        !after.iter().any(|n| n.contains(".t/")),
        "the cut PUT's pieces survived the collector: {after:?}"
    );
    // The stored object and the upload's part stay until deleted and
    // aborted; then nothing is left.
    assert!(after.iter().any(|n| n.ends_with("/kept")), "{after:?}");
    assert!(after.iter().any(|n| n.contains(".mp/")), "{after:?}");
    let rm = Command::new(python())
        .args(["-c", "import boto3, os\n\
            s3 = boto3.client('s3', endpoint_url=os.environ['E'], aws_access_key_id=os.environ['K'],\n\
                aws_secret_access_key=os.environ['S'], region_name='us-east-1')\n\
            s3.delete_object(Bucket='crash', Key='kept')\n"])
        .env("E", &endpoint)
        .env("K", &key)
        .env("S", &secret)
        .output()
        .expect("python runs");
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let gc = ok_json(
        cluster.cairn(&[
            "s3",
            "gc",
            "--dead-after",
            "0s",
            "--abort-uploads-after",
            "0s",
            "--json",
        ]),
        "s3 gc",
    );
    assert_eq!(gc["uploads_aborted"], 1, "{gc}");
    let left = pieces(&cluster);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A versioned write cut at each step by a gateway that stops there
/// (`CAIRN_S3_CRASH_AT`, an abort as abrupt as SIGKILL): after `cairn s3
/// gc`, each key's versions are what the steps that landed say (the
/// older version indexed when the head moved past it, a copy of the head
/// dropped when it did not), every version reads back whole, and once
/// every version is deleted the data pool is empty (no archive or piece
/// leaked).
#[test]
fn versioned_writes_cut_at_every_step_recover_to_whole_versions() {
    let _serial = common::serial();
    let base_port = 19400;
    let cluster = Cluster::up("s3-vcrash", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let port = base_port + 30;
    let endpoint = format!("http://127.0.0.1:{port}");
    let script: PathBuf = s3_script("versioning_crash.py");
    let run = |args: &[&str]| {
        let out = Command::new(python())
            .arg(&script)
            .args(args)
            .env("S3_ENDPOINT", &endpoint)
            .env("S3_KEY", &key)
            .env("S3_SECRET", &secret)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for point in [
        "versioned-put-archived",
        "versioned-put-head-written",
        "version-delete-promoted",
    ] {
        let mut crashing = start_gateway_with(&cluster, port, &[("CAIRN_S3_CRASH_AT", point)], &[]);
        run(&["stage", point]);
        let status = crashing.0.wait().expect("the gateway ends");
        assert!(
            !status.success(),
            "{point}: the gateway did not stop: {status}"
        );
        let gc = ok_json(
            cluster.cairn(&["s3", "gc", "--dead-after", "0s", "--json"]),
            "s3 gc",
        );
        assert!(gc["intents_recovered"].as_u64() >= Some(1), "{point}: {gc}");
        assert_eq!(gc["errors"], 0, "{point}: {gc}");
        let _gateway = start_gateway(&cluster, port);
        run(&["check", point]);
    }
    let _gateway = start_gateway(&cluster, port);
    run(&["clean"]);
    let left = ok_json(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "object ls",
    );
    assert_eq!(
        left.as_array().map(Vec::len),
        Some(0),
        "left behind: {left}"
    );
}

/// Makes a self-signed certificate for 127.0.0.1 and localhost in `dir`:
/// `(cert, key)`.
fn self_signed(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// `cairn s3 serve --tls-cert --tls-key` serves HTTPS that boto3 checks
/// against the certificate; a plain-HTTP request to it fails without
/// harming it; a key that does not fit the certificate is refused at
/// start with a clear error.
#[test]
fn the_gateway_serves_https_with_a_given_certificate() {
    let _serial = common::serial();
    let base_port = 19460;
    let cluster = Cluster::up("s3-tls", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let (cert, cert_key) = self_signed(&cluster.dir, "gateway");
    let (_, other_key) = self_signed(&cluster.dir, "other");
    let port = base_port + 30;
    let refused = cluster.cairn(&[
        "s3",
        "serve",
        "--addr",
        &format!("127.0.0.1:{}", port + 1),
        "--tls-cert",
        cert.to_str().expect("utf-8"),
        "--tls-key",
        other_key.to_str().expect("utf-8"),
    ]);
    assert!(!refused.status.success(), "a mismatched key was taken");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("does not fit the certificate"), "{said}");
    let _gateway = start_gateway_with(
        &cluster,
        port,
        &[],
        &[
            "--tls-cert",
            cert.to_str().expect("utf-8"),
            "--tls-key",
            cert_key.to_str().expect("utf-8"),
        ],
    );
    let script: PathBuf = s3_script("tls.py");
    let out = Command::new(python())
        .arg(&script)
        .env("E", format!("https://127.0.0.1:{port}"))
        .env("K", &key)
        .env("S", &secret)
        .env("C", &cert)
        .output()
        .expect("python runs");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("https ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// s3cmd at its defaults (which sign for region `US` until the gateway
/// names the right one, as AWS does) and an s3fs mount used with
/// ordinary tools: `tests/s3/s3cmd_s3fs.sh`.
#[test]
fn s3cmd_and_an_s3fs_mount_work_on_the_gateway() {
    let _serial = common::serial();
    let base_port = 18870;
    let cluster = Cluster::up("s3-tools", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let port = base_port + 30;
    let _gateway = start_gateway(&cluster, port);
    let script: PathBuf = s3_script("s3cmd_s3fs.sh");
    let work = cluster.dir.join("tools");
    std::fs::create_dir_all(&work).expect("scratch dir");
    let out = Command::new("bash")
        .arg(&script)
        .env("PORT", port.to_string())
        .env("K", &key)
        .env("S", &secret)
        .env("WORK", &work)
        .output()
        .expect("bash runs");
    let s3fs_log = std::fs::read_to_string(work.join("s3fs.log")).unwrap_or_default();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("s3cmd and s3fs ok"),
        "{}{}\ns3fs log:\n{s3fs_log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let left = ok_json(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "object ls",
    );
    assert_eq!(
        left.as_array().map(Vec::len),
        Some(0),
        "left behind: {left}"
    );
}

/// `cairn s3 orphans` finds exactly the data objects nothing names (made
/// here with `cairn object put` in a live bucket's name space, and one of
/// a bucket that no longer exists), removes them with `--remove`, and
/// leaves everything live whole: versions in pieces, an archive, a
/// multipart object, an upload in progress, a native object and a head.
#[test]
fn the_orphan_scan_removes_only_what_nothing_names() {
    let _serial = common::serial();
    let base_port = 18900;
    let cluster = Cluster::up("s3-orphans", 3, base_port, &[]);
    let (key, secret) = user(&cluster, "alice");
    let port = base_port + 30;
    let _gateway = start_gateway(&cluster, port);
    let script: PathBuf = s3_script("orphans.py");
    let run = |args: &[&str]| -> String {
        let out = Command::new(python())
            .arg(&script)
            .args(args)
            .env("S3_ENDPOINT", format!("http://127.0.0.1:{port}"))
            .env("S3_KEY", &key)
            .env("S3_SECRET", &secret)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let state = run(&["stage"]);
    let record = cluster.cairn(&[
        "object",
        "getomapval",
        "--pool",
        "s3.meta",
        "buckets",
        "live",
    ]);
    assert!(
        record.status.success(),
        "{}",
        String::from_utf8_lossy(&record.stderr)
    );
    let record: serde_json::Value =
        serde_json::from_slice(&record.stdout).expect("the bucket record is JSON");
    let id = record["id"].as_str().expect("bucket id").to_owned();
    let junk = cluster.dir.join("junk");
    std::fs::write(&junk, b"nobody's bytes").expect("junk file");
    let junk = junk.to_str().expect("utf-8");
    let orphans = [
        format!("{id}.t/00000000deadbeef/00000"),
        format!("{id}.mp/0000/00001-beef/00000"),
        format!("{id}.v/0000deadbeef"),
    ];
    let stray = "fedcba9876543210.t/0123456789abcdef/00000".to_owned();
    let untouchable = [
        "my-native-object".to_owned(),
        format!("{id}/not-indexed-head"),
    ];
    for name in orphans.iter().chain([&stray]).chain(untouchable.iter()) {
        ok(
            cluster.cairn(&["object", "put", "--pool", "data", name, junk]),
            "object put",
        );
    }
    let found = ok_json(cluster.cairn(&["s3", "orphans", "--json"]), "s3 orphans");
    assert_eq!(found["orphans"], 3, "{found}");
    assert_eq!(found["strays"], 1, "{found}");
    assert_eq!(found["removed"], 0, "{found}");
    let mut examples: Vec<String> = found["examples"]
        .as_array()
        .expect("examples")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    examples.sort();
    let mut expected: Vec<String> = orphans.iter().chain([&stray]).cloned().collect();
    expected.sort();
    assert_eq!(examples, expected);
    let removed = ok_json(
        cluster.cairn(&["s3", "orphans", "--remove", "--json"]),
        "s3 orphans --remove",
    );
    assert_eq!(removed["removed"], 4, "{removed}");
    let again = ok_json(cluster.cairn(&["s3", "orphans", "--json"]), "s3 orphans");
    assert_eq!(
        (again["orphans"].as_u64(), again["strays"].as_u64()),
        (Some(0), Some(0)),
        "{again}"
    );
    let listed = ok_json(
        cluster.cairn(&["object", "ls", "--pool", "data", "--json"]),
        "object ls",
    );
    let names: Vec<&str> = listed
        .as_array()
        .expect("names")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    for name in &untouchable {
        assert!(
            names.contains(&name.as_str()),
            "{name} was removed: {names:?}"
        );
    }
    assert!(run(&["check", &state]).contains("live data whole"));
}

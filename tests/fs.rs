//! The POSIX file system end to end: `cairn up` with an MDS, real kernel
//! FUSE mounts (`cairn mount`), ordinary tools and syscalls. Proves that
//! a Cairn mount agrees with a local directory on the conformance suite
//! (`tests/fs/posix_suite.py`) and on random operations (`tests/fs/fsx.py`),
//! that two mounts see each other's changes through their kernels' caches
//! (leases recalled before a change is answered), that a mount which
//! stops answering recalls is evicted and comes back, that SIGKILL of the MDS
//! during a create and rename storm loses nothing a client saw succeed,
//! and that SIGKILL of an OSD under fsynced file writes loses no byte.

mod common;

use common::{Cluster, is_running};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Checks the suite runs but Cairn does not do yet; see docs/filesystem.md
/// ("Not yet").
const KNOWN_GAPS: &str = "open_tmpfile,open_trunc,utime_ns,perm_setuid_cleared,cwd_removed";

/// A `cairn mount` process; dropping it unmounts.
struct Mount {
    child: Child,
    path: PathBuf,
}

impl Mount {
    fn new(cluster: &Cluster, path: &Path) -> Mount {
        std::fs::create_dir_all(path).expect("mountpoint");
        let log = std::fs::File::create(cluster.dir.join(format!(
            "mount-{}.log",
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        )))
        .expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["mount", "--allow-other", "--conf"])
            .arg(&cluster.conf)
            .arg(path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cairn mount starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !is_fuse_mount(path) {
            assert!(
                Instant::now() < deadline,
                "{} never mounted",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Mount {
            child,
            path: path.to_owned(),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        drop(
            Command::new("kill")
                .arg(self.child.id().to_string())
                .status(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_running(self.child.id()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(self.child.kill());
        drop(self.child.wait());
        if is_fuse_mount(&self.path) {
            drop(Command::new("umount").arg("-l").arg(&self.path).status());
        }
    }
}

fn is_fuse_mount(path: &Path) -> bool {
    let target = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let mut parts = l.split_whitespace();
            parts.next();
            parts.next() == Some(target.to_string_lossy().as_ref())
                && parts.next().is_some_and(|t| t.starts_with("fuse"))
        })
}

fn python(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs")
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fs")
        .join(name)
        .display()
        .to_string()
}

fn up(name: &str, base_port: u16, extra: &[&str]) -> Cluster {
    let mut flags = vec!["--mds", "1"];
    flags.extend_from_slice(extra);
    let cluster = Cluster::up(name, 3, base_port, &flags);
    // Other users must reach the mount for the permission checks.
    drop(Command::new("chmod").arg("755").arg(&cluster.dir).status());
    cluster
}

#[test]
fn a_mount_agrees_with_a_local_directory() {
    let cluster = up("fs-posix", 19100, &[]);
    let mount = Mount::new(&cluster, &cluster.dir.join("mnt"));
    let reference = cluster.dir.join("reference");
    std::fs::create_dir_all(&reference).expect("reference dir");
    let (r, t) = (
        reference.display().to_string(),
        mount.path.display().to_string(),
    );
    let out = python(&[
        &script("posix_suite.py"),
        "--reference",
        &r,
        "--target",
        &t,
        "--skip",
        KNOWN_GAPS,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the conformance suite found differences"
    );
    assert!(text.contains(" ok,"), "the suite printed no summary");
    let out = python(&[
        &script("fsx.py"),
        "--reference",
        &r,
        "--target",
        &t,
        "--ops",
        "3000",
        "--seed",
        "21",
    ]);
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "fsx found a difference");
    assert_namespace_sound(&cluster);
}

/// `cairn fs check` finds no dangling entry, orphan or wrong link count;
/// returns its report.
fn assert_namespace_sound(cluster: &Cluster) -> serde_json::Value {
    let out = cluster.cairn(&["fs", "check", "cairnfs", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fs check: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check json");
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    report
}

/// Also: `fcntl` and `flock` locks hold across the two mounts
/// (`tests/fs/locks_two_mounts.py`).
#[test]
fn two_mounts_see_each_others_changes() {
    let cluster = up("fs-two", 19130, &[]);
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    let b = Mount::new(&cluster, &cluster.dir.join("b"));
    std::fs::create_dir(a.path.join("d")).expect("mkdir in a");
    std::fs::write(a.path.join("d/f"), b"from a").expect("write in a");
    assert_eq!(
        std::fs::read(b.path.join("d/f")).expect("read in b"),
        b"from a"
    );
    // Close-to-open: a rewrite in b is what a sees at its next open.
    std::fs::write(b.path.join("d/f"), b"from b, longer").expect("write in b");
    assert_eq!(
        std::fs::read(a.path.join("d/f")).expect("read in a"),
        b"from b, longer"
    );
    assert_eq!(
        std::fs::metadata(a.path.join("d/f")).expect("stat").len(),
        14
    );
    std::fs::rename(a.path.join("d/f"), a.path.join("g")).expect("rename in a");
    assert!(!b.path.join("d/f").exists(), "b still sees the old name");
    assert_eq!(
        std::fs::read(b.path.join("g")).expect("read renamed"),
        b"from b, longer"
    );
    std::fs::remove_file(b.path.join("g")).expect("unlink in b");
    assert!(!a.path.join("g").exists(), "a still sees the unlinked file");
    // What b's kernel caches (a missing name, a size, a mode, an entry)
    // is recalled before a's change is answered.
    let cached = b.path.join("d/cached");
    assert!(!cached.exists(), "b caches the name as missing");
    std::fs::write(a.path.join("d/cached"), b"12345").expect("create in a");
    assert_eq!(
        std::fs::metadata(&cached)
            .expect("b sees the new name")
            .len(),
        5
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(a.path.join("d/cached"))
        .expect("open in a");
    std::io::Write::write_all(&mut f, b"678").expect("append in a");
    drop(f);
    assert_eq!(std::fs::metadata(&cached).expect("stat in b").len(), 8);
    assert_eq!(std::fs::read(&cached).expect("read in b"), b"12345678");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        a.path.join("d/cached"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod in a");
    assert_eq!(
        std::fs::metadata(&cached)
            .expect("stat in b")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    std::fs::rename(a.path.join("d/cached"), a.path.join("d/moved")).expect("rename in a");
    assert!(!cached.exists(), "b still has the old name cached");
    std::fs::remove_file(a.path.join("d/moved")).expect("unlink in a");
    assert!(
        !b.path.join("d/moved").exists(),
        "b still has the unlinked name"
    );
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(a.path.join("big"), &big).expect("big write");
    assert!(
        std::fs::read(b.path.join("big")).expect("big read") == big,
        "big file differs in b"
    );
    let (pa, pb) = (a.path.display().to_string(), b.path.display().to_string());
    let out = python(&[&script("locks_two_mounts.py"), &pa, &pb]);
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "locks do not hold across mounts");
}

/// A mount that stops answering recalls (SIGSTOP) holds another mount's
/// change back only until the recall timeout; then it is evicted, with
/// the reason in `cairn fs session ls` and `cairn health detail`. Once
/// it runs again its calls fail until its cached leases have run out,
/// then it opens a new session and sees the change.
#[test]
fn a_mount_that_stops_answering_recalls_is_evicted_and_comes_back() {
    let cluster = up("fs-evict", 19220, &[]);
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    let b = Mount::new(&cluster, &cluster.dir.join("b"));
    std::fs::create_dir(a.path.join("d")).expect("mkdir");
    assert!(!b.path.join("d/new").exists(), "b leases d's entries");
    let stop = |signal: &str| {
        let done = Command::new("kill")
            .args([signal, &b.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(done.success());
    };
    stop("-STOP");
    let started = Instant::now();
    std::fs::write(a.path.join("d/new"), b"x").expect("create in a");
    let held = started.elapsed();
    // The default recall timeout is 10 s.
    assert!(
        held >= Duration::from_secs(8) && held < Duration::from_secs(30),
        "the create waited {held:?} for the stopped mount"
    );
    let sessions = common::ok_json(
        cluster.cairn(&["fs", "session", "ls", "--json"]),
        "session ls",
    );
    let list = sessions.as_array().expect("a list");
    let evicted: Vec<&serde_json::Value> =
        list.iter().filter(|s| s["evicted"].is_string()).collect();
    assert_eq!(evicted.len(), 1, "one session evicted: {sessions}");
    assert!(
        evicted[0]["evicted"]
            .as_str()
            .is_some_and(|why| why.contains("recall")),
        "{sessions}"
    );
    let health = String::from_utf8_lossy(&cluster.cairn(&["health", "detail"]).stdout).into_owned();
    assert!(
        health.contains("HEALTH_WARN") && health.contains("evicted"),
        "{health}"
    );
    stop("-CONT");
    // Fenced: its cache may be stale, so it refuses until its leases end.
    assert!(
        std::fs::read_dir(b.path.join("d")).is_err(),
        "an evicted mount still answers from its cache"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::fs::read(b.path.join("d/new")).is_ok_and(|v| v == b"x") {
            break;
        }
        assert!(Instant::now() < deadline, "b never came back");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::fs::write(b.path.join("d/from-b"), b"y").expect("b writes again");
    assert_eq!(
        std::fs::read(a.path.join("d/from-b")).expect("a reads"),
        b"y"
    );
}

#[test]
fn mds_sigkill_during_a_create_storm_loses_nothing_acknowledged() {
    let cluster = up("fs-mds-kill", 19160, &[]);
    let mount = Mount::new(&cluster, &cluster.dir.join("mnt"));
    let dir = mount.path.join("storm");
    std::fs::create_dir(&dir).expect("mkdir");
    let log = cluster.dir.join("acked.txt");
    // Creates and renames; a name is logged only after its call returned.
    let storm = format!(
        "import os,sys,time\nd={d:?}\nlog=open({l:?},'w')\nend=time.time()+12\ni=0\n\
         while time.time()<end:\n  p=os.path.join(d,'f%d'%i)\n  fd=os.open(p,os.O_CREAT|os.O_WRONLY,0o644)\n  \
         os.write(fd,b'%d'%i)\n  os.close(fd)\n  \
         if i%3==0:\n    os.rename(p,os.path.join(d,'r%d'%i)); log.write('r%d\\n'%i)\n  \
         else:\n    log.write('f%d\\n'%i)\n  log.flush()\n  i+=1\n",
        d = dir.display().to_string(),
        l = log.display().to_string()
    );
    let mut writer = Command::new("python3")
        .args(["-c", &storm])
        .spawn()
        .expect("storm");
    std::thread::sleep(Duration::from_secs(3));
    let pid = cluster.daemon_pid("mds.0");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let status = writer.wait().expect("storm ends");
    assert!(
        status.success(),
        "a create or rename failed across the MDS kill"
    );
    let acked: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(acked.len() > 20, "too few operations: {}", acked.len());
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for name in &acked {
        assert!(
            present.contains(name),
            "{name} was acknowledged and is gone"
        );
        let number = name[1..].to_owned();
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).expect("read"),
            number,
            "{name} content"
        );
    }
    // No renamed file left under its old name too.
    for name in &present {
        if let Some(n) = name.strip_prefix('f') {
            assert!(!present.contains(&format!("r{n}")), "{name} exists twice");
        }
    }
    let report = assert_namespace_sound(&cluster);
    // The root, the storm directory and every file the client saw made.
    let inodes = report["inodes"].as_u64().unwrap_or(0);
    assert!(
        inodes >= acked.len() as u64 + 2,
        "{inodes} inodes for {} files",
        acked.len()
    );
    let out = cluster.cairn(&["fs", "status", "cairnfs", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert!(
        status["generation"].as_u64().unwrap_or(0) >= 2,
        "no takeover: {status}"
    );
}

#[test]
fn osd_sigkill_under_fsynced_file_writes_loses_no_byte() {
    let cluster = up("fs-osd-kill", 19190, &[]);
    let mount = Mount::new(&cluster, &cluster.dir.join("mnt"));
    let dir = mount.path.join("w");
    std::fs::create_dir(&dir).expect("mkdir");
    let log = cluster.dir.join("synced.txt");
    // 1 MiB files of a pattern from their number, some grown by appends
    // and overwritten in the middle; a name is logged only after fsync.
    let writer = format!(
        "import os,time\nd={d:?}\nlog=open({l:?},'w')\nend=time.time()+10\ni=0\n\
         def body(i): return bytes((i*7+k)%251 for k in range(256))*4096\n\
         while time.time()<end:\n  p=os.path.join(d,'f%d'%i)\n  fd=os.open(p,os.O_CREAT|os.O_RDWR,0o644)\n  \
         os.write(fd,body(i))\n  os.pwrite(fd,b'M'*5000,300000)\n  os.fsync(fd)\n  os.close(fd)\n  \
         log.write('%d\\n'%i); log.flush()\n  i+=1\n",
        d = dir.display().to_string(),
        l = log.display().to_string()
    );
    let mut child = Command::new("python3")
        .args(["-c", &writer])
        .spawn()
        .expect("writer");
    std::thread::sleep(Duration::from_secs(3));
    let pid = cluster.daemon_pid("osd.1");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    assert!(
        child.wait().expect("writer ends").success(),
        "a write or fsync failed"
    );
    let synced: Vec<u64> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| l.parse().expect("number"))
        .collect();
    assert!(synced.len() > 5, "too few files: {}", synced.len());
    // Dropped caches: what is read comes from the OSDs.
    drop(std::fs::write("/proc/sys/vm/drop_caches", "3"));
    for i in &synced {
        let mut want: Vec<u8> = (0..256u64)
            .map(|k| ((i * 7 + k) % 251) as u8)
            .collect::<Vec<_>>()
            .repeat(4096);
        want[300_000..305_000].fill(b'M');
        let got = std::fs::read(dir.join(format!("f{i}"))).expect("read");
        assert!(got == want, "f{i} differs after the OSD kill");
    }
    assert_namespace_sound(&cluster);
}

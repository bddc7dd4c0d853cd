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
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Checks the suite runs but Cairn does not do yet; see docs/filesystem.md
/// ("Not yet").
const KNOWN_GAPS: &str = "open_tmpfile";

/// A helper process, killed when dropped (a failed assertion must not
/// leave it holding the test's output pipe open).
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.0.kill());
        drop(self.0.wait());
    }
}

/// A `cairn mount` process; dropping it unmounts.
struct Mount {
    child: Child,
    path: PathBuf,
}

impl Mount {
    fn new(cluster: &Cluster, path: &Path) -> Mount {
        Mount::with(cluster, path, &[])
    }

    /// A mount with `extra` flags.
    fn with(cluster: &Cluster, path: &Path, extra: &[&str]) -> Mount {
        std::fs::create_dir_all(path).expect("mountpoint");
        let log = std::fs::File::create(cluster.dir.join(format!(
            "mount-{}.log",
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        )))
        .expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["mount", "--allow-other"])
            .args(extra)
            .arg("--conf")
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

/// The eviction messages in the logs of the cluster's mounts.
fn evictions(cluster: &Cluster) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&cluster.dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("mount-") && name.ends_with(".log") {
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            found.extend(
                log.lines()
                    .filter(|l| l.contains("was evicted"))
                    .map(|l| format!("{name}: {l}")),
            );
        }
    }
    found
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
    common::repo()
        .join("tests/fs")
        .join(name)
        .display()
        .to_string()
}

fn up(name: &str, base_port: u16, extra: &[&str]) -> Cluster {
    let mut flags = if extra.contains(&"--mds") {
        Vec::new()
    } else {
        vec!["--mds", "1"]
    };
    flags.extend_from_slice(extra);
    let cluster = Cluster::up(name, 3, base_port, &flags);
    // Other users must reach the mount for the permission checks.
    drop(Command::new("chmod").arg("755").arg(&cluster.dir).status());
    cluster
}

/// Small files inline (`--mds-inline-max 4K`, not the default): the
/// suite and fsx then cover both homes of a file's data, and the moves
/// between them.
#[test]
fn a_mount_agrees_with_a_local_directory() {
    let cluster = up("fs-posix", 19100, &["--mds-inline-max", "4K"]);
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

/// `cairn fs check --data` finds no dangling entry, orphan inode, wrong
/// link count or data object of no file; returns its report.
fn assert_namespace_sound(cluster: &Cluster) -> serde_json::Value {
    let out = cluster.cairn(&["fs", "check", "cairnfs", "--json", "--data"]);
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
    // is recalled before a's change is answered; b's kernel drops it a
    // moment later (the recall is acknowledged once queued).
    let cached = b.path.join("d/cached");
    assert!(!cached.exists(), "b caches the name as missing");
    std::fs::write(a.path.join("d/cached"), b"12345").expect("create in a");
    eventually("b sees the new name", || {
        std::fs::metadata(&cached).is_ok_and(|m| m.len() == 5)
    });
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(a.path.join("d/cached"))
        .expect("open in a");
    std::io::Write::write_all(&mut f, b"678").expect("append in a");
    drop(f);
    eventually("b sees the new size", || {
        std::fs::metadata(&cached).is_ok_and(|m| m.len() == 8)
    });
    assert_eq!(std::fs::read(&cached).expect("read in b"), b"12345678");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        a.path.join("d/cached"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod in a");
    eventually("b sees the new mode", || {
        std::fs::metadata(&cached).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600)
    });
    std::fs::rename(a.path.join("d/cached"), a.path.join("d/moved")).expect("rename in a");
    eventually("b still has the old name cached", || !cached.exists());
    std::fs::remove_file(a.path.join("d/moved")).expect("unlink in a");
    eventually("b still has the unlinked name", || {
        !b.path.join("d/moved").exists()
    });
    // A directory a made is delegated to a: a answers its creates and
    // unlinks there itself and sends them in batches; b's first look
    // recalls the delegation, so b sees every one of them, with the
    // directory's times a saw.
    let dd = a.path.join("deleg");
    std::fs::create_dir(&dd).expect("mkdir deleg");
    for i in 0..300 {
        std::fs::write(dd.join(format!("f{i}")), format!("{i}")).expect("create in a");
    }
    for i in 0..100 {
        std::fs::remove_file(dd.join(format!("f{i}"))).expect("unlink in a");
    }
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .expect("stat")
            .modified()
            .expect("mtime")
    };
    let seen_by_a = mtime(&dd);
    let listed = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let mut expected: Vec<String> = (100..300).map(|i| format!("f{i}")).collect();
    expected.sort();
    assert_eq!(listed(&b.path.join("deleg")), expected, "b's listing");
    assert_eq!(
        mtime(&b.path.join("deleg")),
        seen_by_a,
        "the directory's mtime"
    );
    assert_eq!(
        std::fs::read_to_string(b.path.join("deleg/f299")).expect("read in b"),
        "299"
    );
    // After the recall both change it through the MDS, and see each other.
    std::fs::write(b.path.join("deleg/from-b"), b"b").expect("create in b");
    std::fs::write(dd.join("again"), b"a").expect("create in a after the recall");
    std::fs::remove_file(dd.join("f100")).expect("unlink in a after the recall");
    assert!(dd.join("from-b").exists(), "a does not see b's create");
    assert!(
        b.path.join("deleg/again").exists(),
        "b does not see a's create"
    );
    assert!(!b.path.join("deleg/f100").exists(), "b still sees f100");
    // a answers "no xattrs" for files it made itself (the kernel asks
    // before every write); an xattr b sets is then seen by a.
    std::fs::create_dir(a.path.join("deleg2")).expect("mkdir deleg2");
    for rel in ["made-by-a", "deleg2/made-by-a"] {
        std::fs::write(a.path.join(rel), b"x").expect("create in a");
        let xattr = |mount: &Mount, set: Option<&str>| -> String {
            let path = mount.path.join(rel).display().to_string();
            let code = match set {
                Some(v) => format!("import os\nos.setxattr({path:?},'user.k',b{v:?})\n"),
                None => format!(
                    "import os\ntry:\n  print(os.getxattr({path:?},'user.k').decode())\n\
                     except OSError as e:\n  print('errno', e.errno)\n"
                ),
            };
            let out = python(&["-c", &code]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        assert_eq!(xattr(&a, None), format!("errno {}", libc::ENODATA), "{rel}");
        xattr(&b, Some("from-b"));
        assert_eq!(xattr(&a, None), "from-b", "a sees b's xattr on {rel}");
    }
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
    // mdtest-hard from 4 processes of one mount: each stats and reads
    // files the others wrote and closed (data kept past close, sizes
    // merged); the benchmark checks every size and byte.
    let out = cluster.cairn(&[
        "bench",
        "fs",
        "--dir",
        &pa,
        "--procs",
        "4",
        "--files-per-proc",
        "300",
        "--phases",
        "mdtest-hard",
    ]);
    assert!(
        out.status.success(),
        "cairn bench fs on a mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A mount holds about its write buffer across files: 16 files of
    // 16 MiB written at once, each below its own buffer's size, through
    // a mount allowed 16 MiB, leave its peak memory far below the 256 MiB
    // they would take held; every byte arrives.
    let w = Mount::with(&cluster, &cluster.dir.join("w"), &["--write-buffer", "16M"]);
    let pid = w.child.id();
    let status = |key: &str| -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("a memory figure")
            * 1024
    };
    let before = status("VmRSS:");
    let write = "import os,sys\nd=sys.argv[1]\nfds=[os.open(os.path.join(d,'w%d'%i),os.O_CREAT|os.O_WRONLY,0o644) for i in range(16)]\n\
                 for step in range(16):\n  for i,fd in enumerate(fds):\n    os.write(fd,bytes([(i*16+step)%251])*(1<<20))\n\
                 for fd in fds:\n  os.fsync(fd)\n  os.close(fd)\n";
    let out = python(&["-c", write, &w.path.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = status("VmHWM:");
    eprintln!(
        "mount memory: {} MiB before, {} MiB peak",
        before >> 20,
        peak >> 20
    );
    assert!(
        peak.saturating_sub(before) < 128 << 20,
        "the mount held {} MiB more while writing",
        (peak - before) >> 20
    );
    for i in 0..16u32 {
        let got = std::fs::read(b.path.join(format!("w{i}"))).expect("read in b");
        assert_eq!(got.len(), 16 << 20);
        for step in 0..16u32 {
            let chunk = &got[(step as usize) << 20..((step as usize) + 1) << 20];
            let want = ((i * 16 + step) % 251) as u8;
            assert!(chunk.iter().all(|b| *b == want), "w{i} chunk {step}");
        }
    }
    // Sequential reads come from the mount's read-ahead (chunks fetched
    // ahead of the reader): they still show a write buffered meanwhile,
    // one sent to the OSDs meanwhile, and, at the next open, another
    // mount's. The kernel's cached pages are dropped before each pass so
    // the reads reach the mount.
    let run = |mount: &Mount, mode: &str| {
        let out = python(&[
            &script("readahead.py"),
            mode,
            &mount.path.join("ra").display().to_string(),
        ]);
        assert!(
            out.status.success(),
            "read-ahead {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&a, "write");
    run(&a, "same");
    run(&b, "other");
    run(&a, "reopened");
}

/// A mount that stops answering recalls (SIGSTOP) holds another mount's
/// change back only until the recall timeout; then it is evicted, with
/// the reason in `cairn fs session ls` and `cairn health detail`. Once
/// it runs again its calls fail until its cached leases have run out,
/// then it opens a new session and sees the change.
#[test]
fn a_mount_that_stops_answering_recalls_is_evicted_and_comes_back() {
    // Leases short (an evicted mount waits them out) but longer than the
    // recall timeout (10 s), or they would run out before it.
    // Requests in flight past 2 s count as slow.
    let cluster = up(
        "fs-evict",
        19220,
        &["--mds-lease", "20s", "--mds-complaint-time", "2s"],
    );
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
    let create = {
        let path = a.path.join("d/new");
        std::thread::spawn(move || std::fs::write(path, b"x"))
    };
    // While the create waits for the stopped mount, the MDS lists it as a
    // slow request, and health warns of it.
    std::thread::sleep(Duration::from_secs(4));
    let health = String::from_utf8_lossy(&cluster.cairn(&["health", "detail"]).stdout).into_owned();
    assert!(
        health.contains("HEALTH_WARN")
            && health.contains("slow MDS request")
            && health.contains("slow request on cairnfs: Create"),
        "{health}"
    );
    create
        .join()
        .expect("the create thread")
        .expect("create in a");
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
        health.contains("HEALTH_WARN")
            && health.contains("evicted")
            && !health.contains("slow MDS request"),
        "{health}"
    );
    let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
    let mds = &status["fs"][0]["mds"];
    assert!(
        mds["slow_total"].as_u64() >= Some(1)
            && mds["cache_bytes"].as_u64() > Some(0)
            && mds["cache_budget_bytes"].as_u64() == Some(256 << 20),
        "the MDS's cache and its slow request in status: {status}"
    );
    stop("-CONT");
    // Fenced: what reaches the mount fails until its leases end (what the
    // kernel cached runs out within them).
    let refused = std::fs::write(b.path.join("d/other"), b"z");
    assert_eq!(
        refused.as_ref().map_err(std::io::Error::raw_os_error),
        Err(Some(libc::EIO)),
        "an evicted mount still serves"
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

/// Two clients (two mounts) create, write and rename files in one
/// directory, and each creates, writes and unlinks files in a directory
/// of its own (delegated to it: answered by the mount itself, sent to the
/// MDS in batches), while the active MDS is SIGKILLed; the standby takes
/// over, both clients replay what the dead MDS had not made durable and
/// send what it never heard of, and the namespace holds exactly what they
/// saw succeed.
#[test]
fn mds_sigkill_during_a_create_storm_from_two_clients_loses_nothing_acknowledged() {
    // Small fragments: directories split (and merge) across the kill.
    let cluster = up(
        "fs-mds-kill",
        19160,
        &["--mds", "2", "--mds-dir-split-size", "200"],
    );
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    let b = Mount::new(&cluster, &cluster.dir.join("b"));
    std::fs::create_dir(a.path.join("storm")).expect("mkdir");
    // Creates and renames; a name is logged only after its call returned.
    let storm = |mount: &Mount, prefix: &str| -> (Child, PathBuf) {
        let log = cluster.dir.join(format!("acked-{prefix}.txt"));
        let script = format!(
            "import os,sys,time\nd={d:?}\nlog=open({l:?},'w')\nend=time.time()+12\ni=0\n\
             while time.time()<end:\n  p=os.path.join(d,'{prefix}f%d'%i)\n  \
             fd=os.open(p,os.O_CREAT|os.O_WRONLY,0o644)\n  \
             os.write(fd,b'%d'%i)\n  os.close(fd)\n  \
             if i%3==0:\n    os.rename(p,os.path.join(d,'{prefix}r%d'%i)); log.write('{prefix}r%d\\n'%i)\n  \
             else:\n    log.write('{prefix}f%d\\n'%i)\n  log.flush()\n  i+=1\n",
            d = mount.path.join("storm").display().to_string(),
            l = log.display().to_string()
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .spawn()
            .expect("storm");
        (child, log)
    };
    // Creates (and some unlinks) in a directory each mount made.
    let own = |mount: &Mount, prefix: &str| -> (Helper, PathBuf) {
        let dir = mount.path.join(format!("own-{prefix}"));
        std::fs::create_dir(&dir).expect("mkdir own");
        let log = cluster.dir.join(format!("own-{prefix}.txt"));
        let script = format!(
            "import os,time\nd={d:?}\nlog=open({l:?},'w')\nend=time.time()+12\ni=0\n\
             while time.time()<end:\n  p=os.path.join(d,'{prefix}f%d'%i)\n  \
             fd=os.open(p,os.O_CREAT|os.O_EXCL|os.O_WRONLY,0o644)\n  \
             os.write(fd,b'%d'%i)\n  os.close(fd)\n  log.write('+{prefix}f%d\\n'%i)\n  \
             if i%4==3:\n    os.unlink(os.path.join(d,'{prefix}f%d'%(i-1))); log.write('-{prefix}f%d\\n'%(i-1))\n  \
             log.flush()\n  i+=1\n",
            d = dir.display().to_string(),
            l = log.display().to_string()
        );
        let child = Command::new("python3")
            .args(["-c", &script])
            .spawn()
            .expect("own storm");
        (Helper(child), log)
    };
    // A process on mount a holds an fcntl lock and a flock across the
    // failover.
    // (Two files: the kernel does not tell a FUSE server an flock from an
    // fcntl lock, so on one file they conflict, as on NFS.)
    std::fs::write(a.path.join("held"), b"locked file").expect("write held");
    std::fs::write(a.path.join("held2"), b"flocked file").expect("write held2");
    let flag = cluster.dir.join("lock-flag");
    let holder_script = format!(
        "import fcntl,os,time\nfd=os.open({f:?},os.O_RDWR)\n\
         fcntl.lockf(fd,fcntl.LOCK_EX,100,0)\nfd2=os.open({f:?}+'2',os.O_RDWR)\n\
         fcntl.flock(fd2,fcntl.LOCK_EX)\nopen({g:?}+'.ready','w').close()\n\
         while not os.path.exists({g:?}+'.go'): time.sleep(0.05)\n\
         os.close(fd)\nos.close(fd2)\n",
        f = a.path.join("held").display().to_string(),
        g = flag.display().to_string()
    );
    let mut holder = Helper(
        Command::new("python3")
            .args(["-c", &holder_script])
            .spawn()
            .expect("lock holder"),
    );
    let ready = flag.with_extension("ready");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the holder never locked");
        std::thread::sleep(Duration::from_millis(50));
    }
    // "fcntl flock", each "locked" (refused) or "free".
    let try_locks = || -> String {
        let script = format!(
            "import fcntl,os\nr=[]\nfd=os.open({f:?},os.O_RDWR)\nfd2=os.open({f:?}+'2',os.O_RDWR)\n\
             for how in ('fcntl','flock'):\n  try:\n    \
             fcntl.lockf(fd,fcntl.LOCK_EX|fcntl.LOCK_NB,10,20) if how=='fcntl' else fcntl.flock(fd2,fcntl.LOCK_EX|fcntl.LOCK_NB)\n    \
             r.append('free')\n  except (BlockingIOError,PermissionError):\n    r.append('locked')\n\
             print(' '.join(r))\n",
            f = b.path.join("held").display().to_string()
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("try locks");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(try_locks(), "locked locked", "b sees a's locks");
    let (mut writer_a, log_a) = storm(&a, "a");
    let (mut writer_b, log_b) = storm(&b, "b");
    let (mut own_a, own_log_a) = own(&a, "a");
    let (mut own_b, own_log_b) = own(&b, "b");
    std::thread::sleep(Duration::from_secs(3));
    kill_active_mds(&cluster);
    for writer in [&mut writer_a, &mut writer_b, &mut own_a.0, &mut own_b.0] {
        let status = writer.wait().expect("storm ends");
        assert!(
            status.success(),
            "a create, rename or unlink failed across the MDS kill"
        );
    }
    // The new MDS holds the locks a took again at its reconnect: b is
    // still refused, until a's holder closes.
    assert_eq!(
        try_locks(),
        "locked locked",
        "a's locks survived the failover"
    );
    std::fs::write(flag.with_extension("go"), b"").expect("go");
    assert!(holder.0.wait().expect("holder").success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = try_locks();
        if seen == "free free" {
            break;
        }
        assert!(Instant::now() < deadline, "a's closes left {seen}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut acked: Vec<String> = Vec::new();
    for log in [&log_a, &log_b] {
        let lines = std::fs::read_to_string(log).expect("log");
        acked.extend(lines.lines().map(str::to_owned));
    }
    assert!(acked.len() > 40, "too few operations: {}", acked.len());
    // Each mount sees every name either made.
    for mount in [&a, &b] {
        let dir = mount.path.join("storm");
        let present: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        for name in &acked {
            assert!(
                present.contains(name),
                "{name} was acknowledged and is gone from {}",
                mount.path.display()
            );
            let number = name[2..].to_owned();
            assert_eq!(
                std::fs::read_to_string(dir.join(name)).expect("read"),
                number,
                "{name} content in {} (size {:?}; evictions: {:?})",
                mount.path.display(),
                std::fs::metadata(dir.join(name)).map(|m| m.len()),
                evictions(&cluster)
            );
        }
        // No renamed file left under its old name too, nothing unlogged
        // but a last call cut short.
        for name in &present {
            let (prefix, rest) = name.split_at(1);
            if let Some(n) = rest.strip_prefix('f') {
                assert!(
                    !present.contains(&format!("{prefix}r{n}")),
                    "{name} exists twice"
                );
            }
        }
    }
    // What each mount answered itself in its own directory: every file it
    // made and did not remove is there with its content, seen from both
    // mounts (the other's look recalls the delegation), and no removed one.
    let mut own_made = 0;
    for (prefix, log) in [("a", &own_log_a), ("b", &own_log_b)] {
        let mut kept = std::collections::BTreeSet::new();
        let mut removed = std::collections::BTreeSet::new();
        for line in std::fs::read_to_string(log).expect("own log").lines() {
            let (sign, name) = line.split_at(1);
            if sign == "+" {
                kept.insert(name.to_owned());
            } else {
                kept.remove(name);
                removed.insert(name.to_owned());
            }
        }
        assert!(
            kept.len() > 40,
            "too few creates in own-{prefix}: {}",
            kept.len()
        );
        own_made += kept.len();
        for mount in [&a, &b] {
            let dir = mount.path.join(format!("own-{prefix}"));
            let present: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
                .expect("list own")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            for name in &kept {
                assert!(
                    present.contains(name),
                    "{name} was made by its mount and is gone from {}",
                    dir.display()
                );
                assert_eq!(
                    std::fs::read_to_string(dir.join(name)).expect("read own"),
                    name[2..],
                    "{name} content"
                );
            }
            for name in &removed {
                assert!(!present.contains(name), "{name} was removed and is back");
            }
        }
    }
    drop(a);
    drop(b);
    // Busy, not dead: neither mount was evicted (an evicted mount's kept
    // data is not seen by others).
    let evicted = evictions(&cluster);
    assert!(evicted.is_empty(), "a mount was evicted: {evicted:?}");
    let report = assert_namespace_sound(&cluster);
    // The root, the storm directory and every file the clients saw made.
    let inodes = report["inodes"].as_u64().unwrap_or(0);
    assert!(
        inodes >= (acked.len() + own_made) as u64 + 4,
        "{inodes} inodes for {} files",
        acked.len() + own_made
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

/// fsync durability under a power cut. The OSDs' data dirs are lossyfs
/// mounts. A client writes files and fsyncs each file and its directory,
/// logging a name only after both returned, while another writes files it
/// never fsyncs; then every process (the cluster's and the mount) is
/// killed at once and every unsynced byte on the OSDs dropped. The cluster
/// started again from what was durable holds every fsynced file byte-exact,
/// and `cairn fs check` finds nothing wrong.
#[test]
fn fsynced_files_survive_a_power_cut_of_every_osd() {
    let base = 19250;
    let cluster_dir = common::test_dir("fs-power");
    // Declared first, dropped last: a backing dir outlives its mount.
    let (backings, lossy) = common::lossy_osd_dirs(&cluster_dir, 3, "cairn-fs-power-backing-");
    let cluster = Cluster::up_at(cluster_dir.clone(), 3, base, &["--mds", "1"]);
    let mount = Mount::new(&cluster, &cluster_dir.join("mnt"));
    let dir = mount.path.join("d");
    std::fs::create_dir(&dir).expect("mkdir");
    let log = cluster_dir.join("fsynced.txt");
    // File i holds its number in 8 digits, repeated (sizes vary to 200 KB).
    let synced = format!(
        "import os,time\nd={d:?}\nlog=open({l:?},'w')\ndfd=os.open(d,os.O_RDONLY)\n\
         end=time.time()+8\ni=0\n\
         while time.time()<end:\n  size=8*(1+(i*7919)%25000)\n  \
         fd=os.open(os.path.join(d,'f%d'%i),os.O_CREAT|os.O_WRONLY,0o644)\n  \
         os.write(fd,(b'%08d'%i)*(size//8))\n  os.fsync(fd)\n  os.close(fd)\n  os.fsync(dfd)\n  \
         log.write('%d %d\\n'%(i,size)); log.flush()\n  i+=1\n",
        d = dir.display().to_string(),
        l = log.display().to_string()
    );
    let unsynced = format!(
        "import os\nd={d:?}\ni=0\nwhile True:\n  \
         open(os.path.join(d,'u%d'%i),'wb').write(os.urandom(65536))\n  i+=1\n",
        d = dir.display().to_string()
    );
    let mut background = Command::new("python3")
        .args(["-c", &unsynced])
        .stderr(Stdio::null())
        .spawn()
        .expect("unsynced writer");
    let status = Command::new("python3")
        .args(["-c", &synced])
        .status()
        .expect("fsynced writer");
    assert!(status.success(), "an fsynced write failed");
    // The power goes: every process at once (the supervisor first, so it
    // restarts nothing), the client's too, then everything not fsynced.
    for pid in common::recorded_pids(&cluster.dir) {
        if is_running(pid) {
            drop(
                Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status(),
            );
        }
    }
    drop(
        Command::new("kill")
            .args(["-KILL", &mount.child.id().to_string()])
            .status(),
    );
    drop(background.kill());
    drop(background.wait());
    drop(mount);
    std::mem::forget(cluster);
    let mut dirty = 0;
    for (osd, fs) in lossy.iter().enumerate() {
        dirty += fs.dirty_bytes();
        let torn = fs.power_loss(0x0f5f_0000 + osd as u64);
        eprintln!("osd.{osd}: {torn}");
    }
    eprintln!("power cut with {dirty} unsynced bytes");
    assert!(dirty > 0, "the cut dropped nothing: it tests nothing");
    let up = common::cairn(
        &cluster_dir.join("cairn.toml"),
        &[
            "up",
            "--detach",
            "--data",
            &cluster_dir.display().to_string(),
            "--osds",
            "3",
            "--base-port",
            &base.to_string(),
            "--mds",
            "1",
            "--s3-port",
            "0",
        ],
    );
    assert!(
        up.status.success(),
        "cairn up after the power cut: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let cluster = Cluster {
        conf: cluster_dir.join("cairn.toml"),
        dir: cluster_dir.clone(),
        base_port: base,
    };
    let mount = Mount::new(&cluster, &cluster_dir.join("mnt"));
    let fsynced: Vec<(u64, usize)> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| {
            let (i, size) = l.split_once(' ').expect("two fields");
            (i.parse().expect("number"), size.parse().expect("size"))
        })
        .collect();
    assert!(
        fsynced.len() >= 20,
        "too few fsynced files: {}",
        fsynced.len()
    );
    for (i, size) in &fsynced {
        let path = mount.path.join(format!("d/f{i}"));
        let bytes =
            std::fs::read(&path).unwrap_or_else(|e| panic!("f{i} was fsynced and is gone: {e}"));
        let expected = format!("{i:08}").repeat(size / 8).into_bytes();
        assert!(
            bytes == expected,
            "f{i} differs after the power cut ({} bytes)",
            bytes.len()
        );
    }
    eprintln!("{} fsynced files intact", fsynced.len());
    drop(mount);
    assert_namespace_sound(&cluster);
    // Stopped (and every PG's copies compared) before its data dirs are
    // unmounted, which is before the guard removes the dir.
    common::wait_clean(&cluster);
    cluster.stop_and_compare_copies();
    drop(lossy);
    drop(cluster);
    drop(backings);
}

/// Directory quotas: inodes and bytes below a directory are counted and
/// a create, a write, a truncate or a rename that would go past a limit
/// fails with `EDQUOT`; the usage follows removals and renames, nested
/// quotas hold together, and `cairn fs df` counts the namespace.
#[test]
fn quotas_refuse_what_would_go_past_their_limits() {
    use std::os::unix::fs::FileExt;
    let cluster = up("fs-quota", 19280, &[]);
    let mount = Mount::new(&cluster, &cluster.dir.join("mnt"));
    let q = mount.path.join("q");
    std::fs::create_dir(&q).expect("mkdir");
    // What was there before the limit counts.
    std::fs::write(q.join("old"), vec![1u8; 1000]).expect("old file");
    let q_text = q.display().to_string();
    common::ok(
        cluster.cairn(&[
            "fs",
            "quota",
            "set",
            &q_text,
            "--max-files",
            "4",
            "--max-bytes",
            "100000",
        ]),
        "quota set",
    );
    let usage = |dir: &str| -> (u64, u64) {
        let v = common::ok_json(
            cluster.cairn(&["fs", "quota", "get", dir, "--json"]),
            "quota get",
        );
        (
            v["files"].as_u64().expect("files"),
            v["bytes"].as_u64().expect("bytes"),
        )
    };
    // The file's data may still sit in the mount (kept past close for up
    // to 2 s): its size reaches the MDS, and the count, soon after.
    let deadline = Instant::now() + Duration::from_secs(15);
    while usage(&q_text) != (1, 1000) {
        assert!(Instant::now() < deadline, "usage {:?}", usage(&q_text));
        std::thread::sleep(Duration::from_millis(200));
    }
    let edquot = |r: std::io::Result<()>, what: &str| match r {
        Err(e) if e.raw_os_error() == Some(libc::EDQUOT) => {}
        other => panic!("{what}: {other:?}, not EDQUOT"),
    };
    std::fs::create_dir(q.join("sub")).expect("a directory counts as one");
    std::fs::write(q.join("sub/a"), b"x").expect("third");
    std::fs::write(q.join("b"), b"y").expect("fourth");
    edquot(std::fs::write(q.join("c"), b"z"), "a fifth inode");
    edquot(
        std::fs::create_dir(q.join("d")),
        "a fifth inode as a directory",
    );
    assert_eq!(usage(&q_text), (4, 1002));
    // Bytes: a file may grow to the limit, not past it.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(q.join("b"))
        .expect("open");
    f.write_all_at(&vec![7u8; 90_000], 0)
        .expect("within the limit");
    f.sync_all().expect("fsync within the limit");
    let past = f
        .write_all_at(&vec![7u8; 20_000], 90_000)
        .and_then(|()| f.sync_all());
    edquot(past, "a write past the byte limit");
    drop(f);
    assert_eq!(std::fs::metadata(q.join("b")).expect("stat").len(), 90_000);
    edquot(
        std::fs::OpenOptions::new()
            .write(true)
            .open(q.join("b"))
            .and_then(|f| f.set_len(200_000)),
        "a truncate past the byte limit",
    );
    // A rename in from outside counts against it; out of it frees room.
    std::fs::write(mount.path.join("big"), vec![0u8; 50_000]).expect("outside");
    std::fs::remove_file(q.join("old")).expect("unlink frees an inode");
    edquot(
        std::fs::rename(mount.path.join("big"), q.join("big")),
        "a rename bringing bytes past the limit",
    );
    std::fs::rename(q.join("sub"), mount.path.join("sub")).expect("rename out");
    assert_eq!(usage(&q_text), (1, 90_000));
    std::fs::rename(mount.path.join("sub"), q.join("sub")).expect("rename back in");
    assert_eq!(usage(&q_text), (3, 90_001));
    // Nested: the inner limit and the outer one both hold.
    let inner = q.join("sub");
    let inner_text = inner.display().to_string();
    common::ok(
        cluster.cairn(&["fs", "quota", "set", &inner_text, "--max-bytes", "5000"]),
        "inner quota",
    );
    let synced = |path: PathBuf, data: &[u8]| -> std::io::Result<()> {
        let mut f = std::fs::File::create(path)?;
        std::io::Write::write_all(&mut f, data)?;
        f.sync_all()
    };
    edquot(
        synced(inner.join("c"), &[0u8; 6000]),
        "past the inner limit",
    );
    // Lifting the limits lets it grow again.
    common::ok(
        cluster.cairn(&[
            "fs",
            "quota",
            "set",
            &q_text,
            "--max-files",
            "0",
            "--max-bytes",
            "0",
        ]),
        "lift",
    );
    common::ok(
        cluster.cairn(&["fs", "quota", "set", &inner_text, "--max-bytes", "0"]),
        "lift inner",
    );
    std::fs::write(q.join("c"), vec![0u8; 200_000]).expect("no limit any more");
    // Only root sets limits; the usage xattrs are the MDS's.
    let as_nobody = |code: &str| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                code,
            ])
            .output()
            .expect("setpriv")
    };
    let open_dir = mount.path.join("open");
    std::fs::create_dir(&open_dir).expect("mkdir");
    drop(Command::new("chmod").arg("777").arg(&open_dir).status());
    let set = format!(
        "import os,sys\ntry:\n  os.setxattr({d:?},'cairn.quota.max_files',b'1')\nexcept PermissionError:\n  sys.exit(3)\n",
        d = open_dir.display().to_string()
    );
    assert_eq!(
        as_nobody(&set).status.code(),
        Some(3),
        "a non-root user set a quota"
    );
    let forge = format!(
        "import os,sys\ntry:\n  os.setxattr({d:?},'cairn.dir.rbytes',b'1')\nexcept PermissionError:\n  sys.exit(3)\n",
        d = q.display().to_string()
    );
    let forged = Command::new("python3")
        .args(["-c", &forge])
        .status()
        .expect("python3");
    assert_eq!(forged.code(), Some(3), "the usage xattrs were set by hand");
    // Data kept past close reaches the MDS within seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let df = common::ok_json(cluster.cairn(&["fs", "df", "--json"]), "fs df");
        let counted = df["inodes"].as_u64().unwrap_or(0) >= 6
            && df["file_bytes"].as_u64().unwrap_or(0) >= 290_000;
        if counted {
            break;
        }
        assert!(Instant::now() < deadline, "{df}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A file streamed past a limit, many write-back buffers long: the
    // buffers sent in the background are reported as the next one fills,
    // and the write that finds the limit passed fails; what stays is
    // within the limit. A file streamed without a limit reads back whole.
    let stream = mount.path.join("stream");
    std::fs::create_dir(&stream).expect("mkdir stream");
    let stream_text = stream.display().to_string();
    common::ok(
        cluster.cairn(&["fs", "quota", "set", &stream_text, "--max-bytes", "150M"]),
        "quota set",
    );
    let writer = |path: &Path, mib: u32| -> String {
        let script = format!(
            "import os\nfd=os.open({p:?},os.O_CREAT|os.O_WRONLY,0o644)\nerr=0\ni=0\n\
             try:\n  for i in range({mib}):\n    os.write(fd,bytes([i%251])*(1<<20))\n  os.fsync(fd)\n\
             except OSError as e:\n  err=e.errno\n\
             os.close(fd)\nprint(i,err)\n",
            p = path.display().to_string()
        );
        let out = python(&["-c", &script]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let refused = writer(&stream.join("past"), 400);
    assert!(
        refused.ends_with(&format!(" {}", libc::EDQUOT)),
        "streaming past 150 MiB: {refused}"
    );
    let kept = std::fs::metadata(stream.join("past")).expect("stat").len();
    assert!(kept <= 150 << 20, "{kept} bytes stayed past the limit");
    let whole = mount.path.join("whole");
    assert_eq!(writer(&whole, 200), "199 0");
    drop(std::fs::write("/proc/sys/vm/drop_caches", "3"));
    let data = std::fs::read(&whole).expect("read back");
    assert_eq!(data.len(), 200 << 20);
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        let want = u8::try_from(i % 251).unwrap_or(0);
        assert!(
            chunk.iter().all(|b| *b == want),
            "MiB {i} of the streamed file"
        );
    }
    drop(mount);
    assert_namespace_sound(&cluster);
}

/// A tmpfs the test mounts (a small disk to fill), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        drop(Command::new("umount").arg("-l").arg(&self.0).status());
        drop(std::fs::remove_dir_all(&self.0));
    }
}

/// A cluster on a 256 MiB tmpfs filled through a mount with fsynced 1 MiB
/// files: the write that does not fit fails with `ENOSPC`, every file
/// fsynced before reads back byte-exact, and the MDS's metadata writes
/// still pass the full OSDs (up to their failsafe ratio), so `mkdir` and
/// `rm` work; the removes free room and writes pass again. Small files
/// inline here: a nearly full cluster sends their data to the OSDs, which
/// refuse it, rather than into the journal.
#[test]
fn a_full_cluster_answers_enospc_and_still_removes_files() {
    let dir = common::test_dir("fs-full");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "mounting a tmpfs needs root");
    let _disk = Tmpfs(dir.clone());
    drop(Command::new("chmod").arg("755").arg(&dir).status());
    let cluster = Cluster::up_at(dir, 3, 19340, &["--mds", "1", "--mds-inline-max", "4K"]);
    let mount = Mount::new(&cluster, &cluster.dir.join("mnt"));
    let files = mount.path.join("fill");
    std::fs::create_dir(&files).expect("mkdir");
    // Writes files of 1 MiB, then 64 KiB, 4 KiB and 1 byte, each fsynced,
    // each size until a call fails: at the end not even a byte fits under
    // the full ratio, while the MDS's metadata writes still pass it. Prints
    // the files written (name and size) and each size's errno, as JSON.
    let fill = format!(
        "import os,json\nd={d:?}\nacked={{}}\nerrs=[]\nn=0\n\
         for size in (1<<20,1<<16,1<<12,1):\n  err=0\n  for _ in range(3000):\n    \
         name='f%d'%n\n    n+=1\n    \
         try:\n      fd=os.open(os.path.join(d,name),os.O_CREAT|os.O_WRONLY,0o644)\n      \
         os.write(fd,((b'%08d'%n)*(size//8+1))[:size])\n      os.fsync(fd)\n      os.close(fd)\n    \
         except OSError as e:\n      err=e.errno\n      break\n    \
         acked[name]=[n,size]\n  errs.append(err)\n\
         print(json.dumps({{'acked':acked,'errnos':errs}}))\n",
        d = files.display().to_string()
    );
    let out = python(&["-c", &fill]);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fill report");
    let enospc = serde_json::json!(libc::ENOSPC);
    assert_eq!(
        report["errnos"],
        serde_json::json!([enospc, enospc, enospc, enospc]),
        "each size filled up to ENOSPC"
    );
    let acked = report["acked"].as_object().expect("acked files");
    eprintln!("{} files written before the cluster filled", acked.len());
    assert!(acked.len() > 20, "filled too early: {}", acked.len());
    // The OSDs report their fullness with their next stats.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = String::from_utf8_lossy(&cluster.cairn(&["health"]).stdout).into_owned();
        if health.contains("full osd") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "health never said full: {health}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Metadata still changes on the full cluster.
    std::fs::create_dir(mount.path.join("made-when-full")).expect("mkdir when full");
    // Every file fsynced reads back, from the OSDs.
    drop(std::fs::write("/proc/sys/vm/drop_caches", "3"));
    for (name, meta) in acked {
        let (n, size) = (meta[0].as_u64().unwrap_or(0), meta[1].as_u64().unwrap_or(0));
        let mut want = format!("{n:08}").repeat(usize::try_from(size / 8 + 1).unwrap_or(0));
        want.truncate(usize::try_from(size).unwrap_or(0));
        let data = std::fs::read(files.join(name)).expect("read back");
        assert!(data == want.as_bytes(), "{name} changed");
    }
    // Removes pass, and free room until writes pass again.
    for name in acked.keys() {
        std::fs::remove_file(files.join(name)).expect("rm when full");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let again = std::fs::write(mount.path.join("after"), b"room again")
            .and_then(|()| std::fs::File::open(mount.path.join("after"))?.sync_all());
        if again.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no room after the removes: {again:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_namespace_sound(&cluster);
}

/// SIGKILLs the file system's active MDS (the standby or the restarted
/// daemon takes over).
fn kill_active_mds(cluster: &Cluster) {
    let out = cluster.cairn(&["fs", "status", "cairnfs", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let active = status["active"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("no active MDS: {status}"))
        .to_owned();
    let pid = cluster.daemon_pid(&format!("mds.{active}"));
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
}

/// Polls `check` every `pause` until it gives `Ok`; fails with its last
/// `Err` once `limit` has passed.
fn wait_for<T>(
    limit: Duration,
    pause: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(done) => return done,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(pause);
    }
}

/// Waits up to 2 s for `check` to hold: a recall is acknowledged once the
/// other mount has queued it, and its kernel drops what it names a moment
/// later (docs/filesystem.md, "Leases").
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    wait_for(Duration::from_secs(2), Duration::from_millis(20), || {
        if check() {
            Ok(())
        } else {
            Err(what.to_owned())
        }
    });
}

/// The names in directory `dir`, checking none is listed twice.
fn listing(dir: &Path) -> BTreeSet<String> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let set: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(set.len(), names.len(), "a name was listed twice");
    set
}

/// The metadata pool's objects holding directory `ino`'s fragments.
fn fragment_objects(cluster: &Cluster, ino: u64) -> Vec<String> {
    let out = cluster.cairn(&["object", "ls", "--pool", "cairnfs.meta"]);
    assert!(out.status.success(), "object ls");
    let whole = format!("dir.{ino:x}");
    let part = format!("dir.{ino:x}.");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|n| *n == whole || n.starts_with(&part))
        .map(str::to_owned)
        .collect()
}

/// A directory grown past the split size is stored as fragments, objects
/// of their own; it lists whole, once per name, through another mount and
/// through a new one after an MDS SIGKILL (loaded fragment by fragment);
/// emptied, its fragments merge back into one object.
#[test]
fn a_large_directory_splits_into_fragments_and_merges_back() {
    use std::os::unix::fs::MetadataExt;
    const FILES: usize = 3000;
    let cluster = up("fs-frag", 19370, &["--mds-dir-split-size", "64"]);
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    let big = a.path.join("big");
    std::fs::create_dir(&big).expect("mkdir");
    let ino = std::fs::metadata(&big).expect("stat").ino();
    let make = "import os,sys\nd=sys.argv[1]\nfor i in range(int(sys.argv[2])):\n  \
                os.close(os.open(os.path.join(d,'f%05d'%i),os.O_CREAT|os.O_EXCL|os.O_WRONLY,0o644))\n";
    let out = python(&["-c", make, &big.display().to_string(), &FILES.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: BTreeSet<String> = (0..FILES).map(|i| format!("f{i:05}")).collect();
    assert_eq!(listing(&big), want, "the creating mount's listing");
    let b = Mount::new(&cluster, &cluster.dir.join("b"));
    assert_eq!(
        listing(&b.path.join("big")),
        want,
        "another mount's listing"
    );
    // Written back (100 ms after the journal): fragments, no whole object.
    let pause = Duration::from_millis(200);
    let split = wait_for(Duration::from_secs(20), pause, || {
        let objects = fragment_objects(&cluster, ino);
        if objects.len() >= 8 && !objects.contains(&format!("dir.{ino:x}")) {
            Ok(objects)
        } else {
            Err(format!("the directory was not stored split: {objects:?}"))
        }
    });
    eprintln!("{} fragment objects", split.len());
    assert_namespace_sound(&cluster);
    // A new MDS loads the directory from its fragments.
    kill_active_mds(&cluster);
    let c = Mount::new(&cluster, &cluster.dir.join("c"));
    assert_eq!(
        listing(&c.path.join("big")),
        want,
        "a listing after the MDS restart"
    );
    // Emptied all but five: the fragments merge back.
    let remove = "import os,sys\nd=sys.argv[1]\nfor i in range(int(sys.argv[2])):\n  \
                  os.unlink(os.path.join(d,'f%05d'%i))\n";
    let out = python(&[
        "-c",
        remove,
        &c.path.join("big").display().to_string(),
        &(FILES - 5).to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: BTreeSet<String> = (FILES - 5..FILES).map(|i| format!("f{i:05}")).collect();
    assert_eq!(listing(&a.path.join("big")), left, "after the removes");
    wait_for(Duration::from_secs(20), pause, || {
        let objects = fragment_objects(&cluster, ino);
        if objects.iter().all(|o| *o == format!("dir.{ino:x}")) {
            Ok(())
        } else {
            Err(format!("the fragments did not merge: {objects:?}"))
        }
    });
    assert_namespace_sound(&cluster);
    // The last files get data, then go with the directory; the MDS is
    // SIGKILLed at once, and their data objects are deleted all the same
    // (by its write-back, or the new one's replay of the journal).
    let mut data_inos = Vec::new();
    for name in &left {
        let path = b.path.join("big").join(name);
        std::fs::write(&path, vec![7u8; 5 << 20]).expect("write");
        data_inos.push(std::fs::metadata(&path).expect("stat").ino());
    }
    let data_objects = || -> Vec<String> {
        let out = cluster.cairn(&["object", "ls", "--pool", "cairnfs.data"]);
        assert!(out.status.success(), "object ls");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|n| data_inos.iter().any(|i| n.starts_with(&format!("{i:x}."))))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(data_objects().len(), 2 * left.len(), "two objects a file");
    for name in &left {
        std::fs::remove_file(b.path.join("big").join(name)).expect("rm");
    }
    std::fs::remove_dir(b.path.join("big")).expect("rmdir");
    kill_active_mds(&cluster);
    assert!(!a.path.join("big").exists());
    wait_for(Duration::from_secs(30), pause, || {
        let objects = data_objects();
        if objects.is_empty() {
            Ok(())
        } else {
            Err(format!("removed files' data not purged: {objects:?}"))
        }
    });
    assert_namespace_sound(&cluster);
}

/// The data pool's objects of file `ino`.
fn data_objects(cluster: &Cluster, ino: u64) -> Vec<String> {
    let out = cluster.cairn(&["object", "ls", "--pool", "cairnfs.data"]);
    assert!(out.status.success(), "object ls");
    let prefix = format!("{ino:x}.");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// Small files keep their data in the MDS (inline data): written through
/// one mount they read back through another and after an MDS SIGKILL,
/// with no data object; two mounts writing disjoint bytes of one keep
/// both; grown past the limit, a file's data moves to objects whole and
/// stays there; removed, nothing is left.
#[test]
fn small_files_keep_their_data_in_the_mds() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::{FileExt, MetadataExt};
    let cluster = up(
        "fs-inline",
        19400,
        &["--mds", "2", "--mds-inline-max", "4K"],
    );
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    let b = Mount::new(&cluster, &cluster.dir.join("b"));
    let dir = a.path.join("small");
    std::fs::create_dir(&dir).expect("mkdir");
    // Many small files made under the directory's delegation (1.5 MB in
    // all: more than one request or write-back write may carry), one with
    // a hole, one empty.
    const FILES: usize = 500;
    let body = |i: usize| format!("file {i:04} ").repeat(200 + i % 200).into_bytes();
    for i in 0..FILES {
        std::fs::write(dir.join(format!("f{i}")), body(i)).expect("write");
    }
    let holed = dir.join("holed");
    let f = std::fs::File::create(&holed).expect("create");
    f.write_all_at(b"end", 3000).expect("write past a hole");
    drop(f);
    std::fs::File::create(dir.join("empty")).expect("create");
    // Through the writing mount: while it still keeps the data, and once
    // it has sent it in its batches (2 s after the close), sizes and bytes
    // stay right.
    for i in (0..FILES).step_by(5) {
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).expect("read"),
            body(i)
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..FILES {
        let path = dir.join(format!("f{i}"));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            body(i).len() as u64,
            "size of f{i} once sent"
        );
        if i % 3 == 0 {
            assert_eq!(
                std::fs::read(&path).expect("read"),
                body(i),
                "f{i} once sent"
            );
        }
    }
    let bdir = b.path.join("small");
    for i in (0..FILES).step_by(7) {
        assert_eq!(
            std::fs::read(bdir.join(format!("f{i}"))).expect("read"),
            body(i),
            "f{i} through the other mount"
        );
    }
    let mut want = vec![0u8; 3003];
    want[3000..].copy_from_slice(b"end");
    assert_eq!(std::fs::read(bdir.join("holed")).expect("read"), want);
    assert_eq!(std::fs::read(bdir.join("empty")).expect("read"), b"");
    let inos: Vec<u64> = (0..FILES)
        .map(|i| {
            std::fs::metadata(dir.join(format!("f{i}")))
                .expect("stat")
                .ino()
        })
        .collect();
    for ino in inos.iter().step_by(20) {
        assert_eq!(data_objects(&cluster, *ino), Vec::<String>::new());
    }

    // Two mounts write disjoint bytes of one small file, both open.
    let shared = a.path.join("shared");
    std::fs::write(&shared, vec![b'.'; 100]).expect("write");
    let fa = std::fs::OpenOptions::new()
        .write(true)
        .open(&shared)
        .expect("open a");
    let fb = std::fs::OpenOptions::new()
        .write(true)
        .open(b.path.join("shared"))
        .expect("open b");
    fa.write_all_at(b"AAAA", 10).expect("write a");
    fb.write_all_at(b"BBBB", 50).expect("write b");
    drop(fa);
    drop(fb);
    let mut want = vec![b'.'; 100];
    want[10..14].copy_from_slice(b"AAAA");
    want[50..54].copy_from_slice(b"BBBB");
    eventually("both writes in the shared file", || {
        std::fs::read(&shared).ok() == Some(want.clone())
    });

    // Appends past the limit: the data moves to objects, whole.
    let grown = a.path.join("grown");
    std::fs::write(&grown, b"head:").expect("write");
    let mut expected = b"head:".to_vec();
    let mut g = std::fs::OpenOptions::new()
        .append(true)
        .open(b.path.join("grown"))
        .expect("open");
    let chunk = vec![b'x'; 3000];
    for _ in 0..3 {
        g.write_all(&chunk).expect("append");
        g.sync_all().expect("fsync");
        expected.extend_from_slice(&chunk);
    }
    g.seek(SeekFrom::Start(0)).expect("seek");
    drop(g);
    assert_eq!(std::fs::read(&grown).expect("read"), expected);
    let grown_ino = std::fs::metadata(&grown).expect("stat").ino();
    assert!(
        !data_objects(&cluster, grown_ino).is_empty(),
        "a file past the limit has its data in objects"
    );
    // Cut back below the limit, it stays in objects and reads right.
    let cut = std::fs::OpenOptions::new()
        .write(true)
        .open(&grown)
        .expect("open");
    cut.set_len(10).expect("truncate");
    drop(cut);
    assert_eq!(
        std::fs::read(b.path.join("grown")).expect("read"),
        &expected[..10]
    );

    // Synced, the MDS killed: a new mount reads every byte from the
    // standby, and the namespace check finds nothing wrong.
    Command::new("sync").status().expect("sync");
    kill_active_mds(&cluster);
    let c = Mount::new(&cluster, &cluster.dir.join("c"));
    let cdir = c.path.join("small");
    for i in 0..FILES {
        assert_eq!(
            std::fs::read(cdir.join(format!("f{i}"))).expect("read"),
            body(i),
            "f{i} after the failover"
        );
    }
    assert_eq!(std::fs::read(c.path.join("shared")).expect("read"), want);
    let report = assert_namespace_sound(&cluster);
    assert!(
        report["inodes"].as_u64().unwrap_or(0) > FILES as u64,
        "{report}"
    );

    // Removed, they leave nothing behind.
    std::fs::remove_dir_all(&cdir).expect("rm -r");
    std::fs::remove_file(c.path.join("grown")).expect("rm");
    wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
        if data_objects(&cluster, grown_ino).is_empty() {
            Ok(())
        } else {
            Err("the removed file's objects were never purged".to_owned())
        }
    });
}

/// Removed files' data objects are deleted by the purge queue in the
/// background: an `rm` storm waits for no OSD delete, and what was queued
/// when the active MDS dies is purged by its successor.
#[test]
fn removed_files_are_purged_in_the_background_across_a_failover() {
    use std::os::unix::fs::MetadataExt;
    let cluster = up("fs-purge", 19440, &["--mds", "2"]);
    let a = Mount::new(&cluster, &cluster.dir.join("a"));
    // `cairn status` counts what the queue deleted and what waits.
    let first = a.path.join("first");
    std::fs::create_dir(&first).expect("mkdir");
    for i in 0..5 {
        let path = first.join(format!("f{i}"));
        std::fs::write(&path, vec![7u8; 100_000]).expect("write");
        std::fs::File::open(&path)
            .expect("open")
            .sync_all()
            .expect("fsync");
    }
    for i in 0..5 {
        std::fs::remove_file(first.join(format!("f{i}"))).expect("rm");
    }
    Command::new("sync").status().expect("sync");
    assert_eq!(purged_once_drained(&cluster, 5), 5);
    let human = String::from_utf8_lossy(&cluster.cairn(&["status"]).stdout).into_owned();
    assert!(
        human.contains("purge queue: 0 removed files' data to delete, 5 deleted since start"),
        "{human}"
    );
    let dir = a.path.join("big");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut inos = Vec::new();
    for i in 0..40 {
        let path = dir.join(format!("f{i}"));
        std::fs::write(&path, vec![u8::try_from(i).unwrap_or(0); 300_000]).expect("write");
        std::fs::File::open(&path)
            .expect("open")
            .sync_all()
            .expect("fsync");
        inos.push(std::fs::metadata(&path).expect("stat").ino());
    }
    for ino in &inos {
        assert_eq!(data_objects(&cluster, *ino).len(), 1, "inode {ino:x}");
    }
    for i in 0..40 {
        std::fs::remove_file(dir.join(format!("f{i}"))).expect("rm");
    }
    Command::new("sync").status().expect("sync");
    kill_active_mds(&cluster);
    wait_for(Duration::from_secs(60), Duration::from_millis(500), || {
        let left: Vec<u64> = inos
            .iter()
            .copied()
            .filter(|ino| !data_objects(&cluster, *ino).is_empty())
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "data objects of {} removed files never purged",
                left.len()
            ))
        }
    });
    assert_namespace_sound(&cluster);
}

/// What the active MDS's purge queue has deleted, once it shows nothing
/// waiting, from `cairn status --json`.
fn purged_once_drained(cluster: &Cluster, at_least: u64) -> u64 {
    wait_for(Duration::from_secs(30), Duration::from_millis(300), || {
        let status = common::ok_json(cluster.cairn(&["status", "--json"]), "status");
        let mds = &status["fs"][0]["mds"];
        match (mds["purge_waiting"].as_u64(), mds["purged_total"].as_u64()) {
            (Some(0), Some(n)) if n >= at_least => Ok(n),
            _ => Err(format!("the purge queue in status: {mds}")),
        }
    })
}

/// A mount whose cluster is gone still exits on SIGTERM: it tries to send
/// what closed files kept for a bounded time, logs what it could not, and
/// unmounts.
#[test]
fn a_mount_exits_on_sigterm_when_its_cluster_is_gone() {
    let cluster = up("fs-gone", 19470, &[]);
    let mut mount = Mount::new(&cluster, &cluster.dir.join("m"));
    std::fs::create_dir(mount.path.join("d")).expect("mkdir");
    // Kept past close under the buffer lease of a file this mount made.
    std::fs::write(mount.path.join("d/kept"), b"not sent yet").expect("write");
    let pids = common::recorded_pids(&cluster.dir);
    assert!(!pids.is_empty(), "no daemon pids recorded");
    for pid in pids {
        // The supervisor first, so nothing is restarted.
        drop(
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status(),
        );
    }
    let started = Instant::now();
    assert!(
        Command::new("kill")
            .arg(mount.child.id().to_string())
            .status()
            .expect("kill")
            .success()
    );
    let status = wait_for(Duration::from_secs(60), Duration::from_millis(100), || {
        mount
            .child
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the mount is still running 60 s after SIGTERM".to_owned())
    });
    eprintln!("the mount exited after {:?}: {status}", started.elapsed());
    assert!(!is_fuse_mount(&mount.path), "still mounted");
    let log = std::fs::read_to_string(cluster.dir.join("mount-m.log")).unwrap_or_default();
    assert!(
        log.contains("not sent yet") || log.contains("did not answer"),
        "the mount does not say what it could not send:\n{log}"
    );
}

/// A file system whose data pool is erasure-coded (2+1, 4 KiB stripe
/// unit): files written sequentially, overwritten in place at random
/// offsets, appended to, truncated and extended read back as the same
/// operations on a local file give, through another mount too; and a
/// metadata pool that is erasure-coded is refused with a clear message.
#[test]
fn a_file_system_keeps_its_data_on_an_erasure_coded_pool() {
    let cluster = Cluster::up("fs-ec", 3, 19490, &["--mds", "0"]);
    drop(Command::new("chmod").arg("755").arg(&cluster.dir).status());
    common::ok(
        cluster.cairn(&[
            "pool",
            "create",
            "ecdata",
            "--erasure",
            "2+1",
            "--stripe-unit",
            "4K",
            "--pg-num",
            "16",
        ]),
        "pool create --erasure",
    );
    let refused = cluster.cairn(&["fs", "create", "ecmeta", "--meta-pool", "ecdata"]);
    assert!(
        !refused.status.success(),
        "an erasure-coded metadata pool was taken"
    );
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("must be replicated"), "{why}");
    common::ok(
        cluster.cairn(&[
            "fs",
            "create",
            "ecfs",
            "--data-pool",
            "ecdata",
            "--pg-num",
            "16",
        ]),
        "fs create --data-pool",
    );
    let mds_log = std::fs::File::create(cluster.dir.join("mds-ec.log")).expect("log");
    let _mds = Helper(
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["mds", "--fs", "ecfs", "--conf"])
            .arg(&cluster.conf)
            .stdout(Stdio::null())
            .stderr(mds_log)
            .spawn()
            .expect("cairn mds starts"),
    );
    let a = Mount::with(&cluster, &cluster.dir.join("a"), &["--fs", "ecfs"]);
    let out = python(&[&script("ec_files.py"), &a.path.display().to_string()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let digests = String::from_utf8_lossy(&out.stdout).into_owned();
    drop(a);
    // Another mount reads the same bytes from the shards.
    let b = Mount::with(&cluster, &cluster.dir.join("b"), &["--fs", "ecfs"]);
    let out = python(&[
        &script("ec_files.py"),
        &b.path.display().to_string(),
        "--check",
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        digests,
        "another mount reads other bytes"
    );
    drop(b);
    let pools = String::from_utf8_lossy(&common::ok(cluster.cairn(&["pool", "ls"]), "pool ls"))
        .into_owned();
    assert!(
        pools.contains("ecdata") && pools.contains("erasure 2+1"),
        "{pools}"
    );
    // The files' data is in the erasure-coded pool: 9 MiB and more of
    // it, in the file system's 4 MiB objects.
    let listed = common::ok(
        cluster.cairn(&["object", "ls", "--pool", "ecdata"]),
        "object ls",
    );
    let objects = String::from_utf8_lossy(&listed).lines().count();
    assert!(objects >= 3, "{objects} objects in the data pool");
}

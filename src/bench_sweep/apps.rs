//! The application set: what people do to a file system with ordinary
//! tools, timed on a mount of the point's cluster. A tree of 12,000 small
//! text files (in 120 directories, 1 to 16 KiB each) and one large text
//! file are made on the local disk; then `cp -r` copies the tree in,
//! `find` walks it, `md5sum` reads every file, `base64`, `grep` and `gzip`
//! read the large file, `tar c`/`tar x` pack and unpack the tree, `cp -r`
//! copies it back out, and a web server (Python's `http.server`) serves
//! every file of the tree to a client fetching them one by one. The page
//! cache is dropped before each phase that reads.
//!
//! Each phase's figures: its time, the bytes it moved (MiB/s) and the
//! files it touched (files/s, as `iops`).

use crate::output::CliResult;
use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The phases, in the order they may run.
pub(super) const PHASES: [&str; 10] = [
    "cp-in", "find", "md5sum", "base64", "grep", "gzip", "tar-c", "tar-x", "cp-out", "http",
];
const TREE_DIRS: u32 = 120;
const TREE_FILES_PER_DIR: u32 = 100;
/// The large file's size unless the workload says.
pub(super) const LARGE_DEFAULT: &str = "256M";
/// Time the web server gets to listen.
const SERVER_START: Duration = Duration::from_secs(10);
/// Longest any one tool may run.
const TOOL_TIMEOUT_SECS: u32 = 3600;

/// Which phases need another before them.
pub(super) fn check(phases: &[String]) -> Result<(), String> {
    for (i, phase) in phases.iter().enumerate() {
        if !PHASES.contains(&phase.as_str()) {
            return Err(format!(
                "workload phase {phase:?} of kind apps: one of {}",
                PHASES.join(", ")
            ));
        }
        let before = &phases[..i];
        let needs = match phase.as_str() {
            "cp-in" => None,
            "tar-x" => Some("tar-c"),
            _ => Some("cp-in"),
        };
        if let Some(needed) = needs
            && !before.iter().any(|p| p == needed)
        {
            return Err(format!(
                "workload phase {phase:?} needs {needed:?} before it"
            ));
        }
    }
    Ok(())
}

/// The local source tree and its sizes.
struct Tree {
    root: PathBuf,
    files: u64,
    bytes: u64,
    large_bytes: u64,
}

/// Words the text files are made of (grep looks for the last).
const WORDS: [&str; 16] = [
    "placement",
    "group",
    "object",
    "replica",
    "shard",
    "monitor",
    "journal",
    "extent",
    "lease",
    "epoch",
    "peering",
    "scrub",
    "backfill",
    "stripe",
    "metadata",
    "cairn",
];

/// Text of `bytes` bytes, deterministic from `seed`.
fn text(bytes: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes as usize + 16);
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    while (out.len() as u64) < bytes {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let word = WORDS[(state >> 60) as usize];
        out.extend_from_slice(word.as_bytes());
        out.push(if (state >> 56) & 0x7 == 0 {
            b'\n'
        } else {
            b' '
        });
    }
    out.truncate(bytes as usize);
    out
}

/// Makes the tree under `root` (on the local disk).
fn make_tree(root: &Path, large_bytes: u64) -> CliResult<Tree> {
    let tree = root.join("tree");
    let mut files = 0;
    let mut bytes = 0;
    for d in 0..TREE_DIRS {
        let dir = tree.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..TREE_FILES_PER_DIR {
            let seed = u64::from(d * TREE_FILES_PER_DIR + f);
            let size = 1024 + (seed * 2_654_435_761 % 15) * 1024;
            std::fs::write(dir.join(format!("f{f:03}.txt")), text(size, seed))?;
            files += 1;
            bytes += size;
        }
    }
    let mut large = std::fs::File::create(tree.join("large.txt"))?;
    let chunk = 4 << 20;
    let mut written = 0;
    while written < large_bytes {
        let n = chunk.min(large_bytes - written);
        large.write_all(&text(n, written))?;
        written += n;
    }
    large.sync_all()?;
    Ok(Tree {
        root: tree,
        files: files + 1,
        bytes: bytes + large_bytes,
        large_bytes,
    })
}

/// Runs the apps phases: `mount` is the mounted file system, `scratch` a
/// local directory for the source tree and the copy back.
pub(super) fn run(
    mount: &Path,
    scratch: &Path,
    phases: &[String],
    large: &str,
    http_port: u16,
) -> CliResult<Vec<(String, Value)>> {
    let large_bytes = crate::units::parse_size(large)?;
    std::fs::create_dir_all(scratch)?;
    let tree = make_tree(scratch, large_bytes)?;
    let on_mount = mount.join("tree");
    let large_path = on_mount.join("large.txt");
    let mut results = Vec::new();
    for phase in phases {
        if phase != "cp-in" {
            crate::bench_cmd::drop_caches();
        }
        let started = Instant::now();
        let (bytes, files) = match phase.as_str() {
            "cp-in" => {
                shell(&format!("cp -r {} {}", q(&tree.root), q(mount)))?;
                (tree.bytes, tree.files)
            }
            "find" => {
                let out = shell(&format!("find {} -type f | wc -l", q(&on_mount)))?;
                let found: u64 = out.trim().parse().unwrap_or(0);
                if found != tree.files {
                    return Err(format!("find saw {found} files of {}", tree.files).into());
                }
                (0, found)
            }
            "md5sum" => {
                shell(&format!(
                    "find {} -type f -print0 | xargs -0 md5sum > /dev/null",
                    q(&on_mount)
                ))?;
                (tree.bytes, tree.files)
            }
            "base64" => {
                shell(&format!("base64 {} > /dev/null", q(&large_path)))?;
                (tree.large_bytes, 1)
            }
            "grep" => {
                // Exit 1 (no line matched) is an answer too.
                shell(&format!("grep -c cairn {} || true", q(&large_path)))?;
                (tree.large_bytes, 1)
            }
            "gzip" => {
                shell(&format!(
                    "gzip -1 -c {} > {}",
                    q(&large_path),
                    q(&mount.join("large.txt.gz"))
                ))?;
                (tree.large_bytes, 1)
            }
            "tar-c" => {
                shell(&format!(
                    "tar cf {} -C {} tree",
                    q(&mount.join("tree.tar")),
                    q(mount)
                ))?;
                (tree.bytes, tree.files)
            }
            "tar-x" => {
                let into = mount.join("untar");
                shell(&format!(
                    "mkdir -p {d} && tar xf {t} -C {d}",
                    d = q(&into),
                    t = q(&mount.join("tree.tar"))
                ))?;
                (tree.bytes, tree.files)
            }
            "cp-out" => {
                let out = scratch.join("out");
                drop(std::fs::remove_dir_all(&out));
                shell(&format!("cp -r {} {}", q(&on_mount), q(&out)))?;
                (tree.bytes, tree.files)
            }
            _ => serve_and_fetch(&on_mount, http_port)?,
        };
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        results.push((
            phase.clone(),
            json!({
                "secs": secs,
                "bytes": bytes,
                "files": files,
                "bandwidth_mib_per_sec": bytes as f64 / 1_048_576.0 / secs,
                "iops": files as f64 / secs,
                "latency_p99_secs": 0.0,
            }),
        ));
    }
    drop(std::fs::remove_dir_all(scratch));
    Ok(results)
}

/// A path quoted for `sh`.
fn q(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// Runs `script` with `sh -c` (bounded by `timeout`); its stdout.
fn shell(script: &str) -> CliResult<String> {
    let out = Command::new("timeout")
        .arg(TOOL_TIMEOUT_SECS.to_string())
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{script}: {}", String::from_utf8_lossy(&out.stderr).trim()).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Python's `http.server` on `root`; every file fetched once, in turn,
/// each response read whole. Bytes and files fetched.
fn serve_and_fetch(root: &Path, port: u16) -> CliResult<(u64, u64)> {
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("python3 -m http.server: {e}"))?;
    let result = fetch_all(root, port);
    drop(server.kill());
    drop(server.wait());
    result
}

fn fetch_all(root: &Path, port: u16) -> CliResult<(u64, u64)> {
    let deadline = Instant::now() + SERVER_START;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("the web server did not listen on 127.0.0.1:{port}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut paths = Vec::new();
    for dir in std::fs::read_dir(root)? {
        let dir = dir?;
        if dir.file_type()?.is_dir() {
            for file in std::fs::read_dir(dir.path())? {
                let file = file?;
                paths.push(format!(
                    "/{}/{}",
                    dir.file_name().to_string_lossy(),
                    file.file_name().to_string_lossy()
                ));
            }
        } else {
            paths.push(format!("/{}", dir.file_name().to_string_lossy()));
        }
    }
    let (mut bytes, mut files) = (0, 0);
    for path in &paths {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let head_end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("GET {path}: no HTTP header"))?;
        if !response.starts_with(b"HTTP/1.0 200") && !response.starts_with(b"HTTP/1.1 200") {
            let status = String::from_utf8_lossy(&response[..head_end.min(40)]).into_owned();
            return Err(format!("GET {path}: {status}").into());
        }
        bytes += (response.len() - head_end - 4) as u64;
        files += 1;
    }
    Ok((bytes, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_that_need_the_tree_come_after_it() {
        let v = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check(&v(&PHASES)).is_ok());
        assert!(check(&v(&["find"])).is_err_and(|e| e.contains("cp-in")));
        assert!(check(&v(&["cp-in", "tar-x"])).is_err_and(|e| e.contains("tar-c")));
        assert!(check(&v(&["cp-in", "rsync"])).is_err_and(|e| e.contains("rsync")));
    }

    #[test]
    fn text_is_words_of_the_size_asked() {
        let t = text(10_000, 7);
        assert_eq!(t.len(), 10_000);
        assert_eq!(t, text(10_000, 7), "deterministic");
        assert!(String::from_utf8_lossy(&t).contains("cairn"));
    }
}

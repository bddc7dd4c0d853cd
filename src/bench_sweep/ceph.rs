//! Points on Ceph, in the same run as Cairn's: the plan's `system =
//! "ceph"` (or `system = ["cairn", "ceph"]` in the matrix) runs its
//! workload on the Ceph cluster of `../shared/anchors/ceph` (`deploy.sh`:
//! one monitor, one manager, 3 BlueStore OSDs on loop devices, an MDS,
//! CephFS mounted with ceph-fuse, an RGW gateway), so a report shows
//! Cairn and Ceph side by side under the same settings and clients.
//!
//! The cluster is deployed once, at the first Ceph point, in `--data`, and
//! torn down (by `teardown.sh`, which stops only the daemons it recorded)
//! when the sweep ends. Each point gets a pool of its own with the point's
//! `pg_num` and replication or erasure code, removed after it:
//! - `object`: `rados bench` write, then seq or rand reads, on the pool;
//! - `fs`, `io500`, `apps`: the same `cairn bench` commands as Cairn's
//!   points, in a CephFS directory whose layout puts its files in the pool;
//! - `s3`: `cairn bench s3` against RGW, its buckets in RGW's default
//!   placement (replicated, size 3): pool settings are not applied there,
//!   and a plan that sets them for an s3 point on Ceph is refused.

use super::Point;
use crate::output::CliResult;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The systems a point may run on.
pub(super) const SYSTEMS: [&str; 2] = ["cairn", "ceph"];
/// The OSDs the anchor deploys.
pub(super) const ANCHOR_OSDS: u32 = 3;
/// The file system `deploy.sh` makes.
const CEPH_FS: &str = "cephfs";
/// How long a new pool gets to be active+clean.
const POOL_CLEAN_WAIT: Duration = Duration::from_secs(180);
/// RGW's keys, as `deploy.sh` writes them to `rgw.env`.
const RGW_ENV: &str = "rgw.env";

/// Where the anchor's scripts are: `--ceph-anchor`, else
/// `../shared/anchors/ceph` from the working directory. Checked before
/// anything runs.
pub(super) fn locate(given: Option<&Path>) -> CliResult<PathBuf> {
    let dir = given.map_or_else(
        || PathBuf::from("../shared/anchors/ceph"),
        Path::to_path_buf,
    );
    for script in ["deploy.sh", "teardown.sh"] {
        if !dir.join(script).is_file() {
            return Err(format!(
                "a point runs on Ceph, and {} has no {script} (give --ceph-anchor DIR)",
                dir.display()
            )
            .into());
        }
    }
    Ok(std::fs::canonicalize(&dir)?)
}

/// Checks a point that runs on Ceph: what the anchor can be and do.
pub(super) fn check_point(point: &Point, kind: &str) -> Result<(), String> {
    if point.osds != ANCHOR_OSDS {
        return Err(format!(
            "osds = {}: the Ceph anchor runs {ANCHOR_OSDS} OSDs",
            point.osds
        ));
    }
    let emulated = [
        ("disk_bw", point.disk_bw.is_some()),
        ("disk_iops", point.disk_iops.is_some()),
        ("cpu", point.cpu.is_some()),
        ("cores", point.cores.is_some()),
        ("memory", point.memory.is_some()),
        ("limits_per", point.limits_per.is_some()),
        ("down_grace", point.down_grace.is_some()),
        ("down_out", point.down_out.is_some()),
        ("stripe_unit", point.stripe_unit.is_some()),
        ("hosts", point.hosts.is_some()),
        ("net_rate", point.net_rate.is_some()),
        ("net_delay", point.net_delay.is_some()),
    ];
    if let Some((name, _)) = emulated.iter().find(|(_, set)| *set) {
        return Err(format!("{name} applies to Cairn's points, not Ceph's"));
    }
    if point.size == Some(1) {
        return Err("size = 1: Ceph refuses pools of one copy by default".into());
    }
    if kind == "object" && point.clients > 1 {
        return Err(
            "clients above 1 on Ceph: rados bench takes no launcher's rank; one client".into(),
        );
    }
    if kind == "s3" && (point.erasure.is_some() || point.size != Some(3)) {
        return Err(
            "s3 on Ceph writes to RGW's default placement (replicated, size 3): give size 3".into(),
        );
    }
    Ok(())
}

/// The anchor cluster while the sweep runs; torn down on drop.
pub(super) struct Anchor {
    scripts: PathBuf,
    /// `CEPH_DIR`: its configuration, keys, logs and disks' images.
    dir: PathBuf,
    /// Where CephFS is mounted.
    mnt: PathBuf,
    rgw_port: u16,
    up: bool,
}

impl Anchor {
    pub(super) fn new(scripts: PathBuf, data: &Path, rgw_port: u16) -> Anchor {
        Anchor {
            scripts,
            dir: data.join("ceph-anchor"),
            mnt: data.join("cephfs"),
            rgw_port,
            up: false,
        }
    }

    fn script(&self, name: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .arg(self.scripts.join(name))
            .env("CEPH_DIR", &self.dir)
            .env("MNT", &self.mnt)
            .env("RGW_PORT", self.rgw_port.to_string())
            .stdin(Stdio::null());
        command
    }

    /// Deploys the cluster unless it is up: first `teardown.sh` for what
    /// an interrupted run left, then `deploy.sh` (about a minute).
    pub(super) fn ensure_up(&mut self) -> CliResult {
        if self.up {
            return Ok(());
        }
        std::fs::create_dir_all(self.dir.parent().unwrap_or(Path::new("/")))?;
        drop(
            self.script("teardown.sh")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status(),
        );
        let log_path = self.dir.with_extension("deploy.log");
        let log = std::fs::File::create(&log_path)?;
        let status = self
            .script("deploy.sh")
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .map_err(|e| format!("deploy.sh: {e}"))?;
        self.up = true;
        if !status.success() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            return Err(format!(
                "deploying Ceph ({}) failed: {}",
                log_path.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
            .into());
        }
        Ok(())
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("ceph.conf")
    }

    /// `ceph ARGS` on the anchor; its stdout.
    fn ceph(&self, args: &[&str]) -> CliResult<String> {
        run_tool("ceph", &self.conf(), args)
    }

    /// The point's pool: its PG count and its copies or K+M, active+clean
    /// before the point starts; an `fs` pool becomes a data pool of
    /// CephFS.
    pub(super) fn make_pool(&self, name: &str, point: &Point, for_fs: bool) -> CliResult {
        let pg = point.pg_num.to_string();
        match (&point.erasure, point.size) {
            (Some(spec), _) => {
                let (k, m) = spec.split_once('+').unwrap_or((spec, "1"));
                let profile = format!("{name}-profile");
                self.ceph(&[
                    "osd",
                    "erasure-code-profile",
                    "set",
                    &profile,
                    &format!("k={k}"),
                    &format!("m={m}"),
                    "crush-failure-domain=osd",
                ])?;
                self.ceph(&["osd", "pool", "create", name, &pg, &pg, "erasure", &profile])?;
                if for_fs {
                    self.ceph(&["osd", "pool", "set", name, "allow_ec_overwrites", "true"])?;
                }
            }
            (None, size) => {
                let size = size.unwrap_or(3).to_string();
                self.ceph(&["osd", "pool", "create", name, &pg, &pg, "replicated"])?;
                self.ceph(&["osd", "pool", "set", name, "size", &size])?;
            }
        }
        if for_fs {
            self.ceph(&["fs", "add_data_pool", CEPH_FS, name])?;
        } else {
            self.ceph(&["osd", "pool", "application", "enable", name, "rados"])?;
        }
        self.wait_clean()
    }

    /// Waits until every PG of the cluster is active+clean.
    fn wait_clean(&self) -> CliResult {
        let deadline = Instant::now() + POOL_CLEAN_WAIT;
        loop {
            let reply: Value = serde_json::from_str(&self.ceph(&["pg", "stat", "-f", "json"])?)?;
            // Pacific puts the counts under `pg_summary`.
            let stat = reply.get("pg_summary").unwrap_or(&reply);
            let total = stat["num_pgs"].as_u64().unwrap_or(0);
            let clean: u64 = stat["num_pg_by_state"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["name"] == "active+clean")
                .filter_map(|s| s["num"].as_u64())
                .sum();
            if total > 0 && clean == total {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "Ceph's PGs not active+clean after {} s: {clean} of {total}",
                    POOL_CLEAN_WAIT.as_secs()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Removes the point's pool (and its directory and place in CephFS).
    pub(super) fn remove_pool(&self, name: &str, for_fs: bool) -> CliResult {
        if for_fs {
            let dir = self.mnt.join(name);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| format!("removing {}: {e}", dir.display()))?;
            }
            self.ceph(&["fs", "rm_data_pool", CEPH_FS, name])?;
        }
        self.ceph(&[
            "osd",
            "pool",
            "delete",
            name,
            name,
            "--yes-i-really-really-mean-it",
        ])?;
        drop(self.ceph(&[
            "osd",
            "erasure-code-profile",
            "rm",
            &format!("{name}-profile"),
        ]));
        Ok(())
    }

    /// A CephFS directory whose new files go to `pool`.
    pub(super) fn fs_dir(&self, pool: &str) -> CliResult<PathBuf> {
        let dir = self.mnt.join(pool);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        rustix::fs::setxattr(
            &dir,
            "ceph.dir.layout.pool",
            pool.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| format!("{}: setting its layout's pool: {e}", dir.display()))?;
        Ok(dir)
    }

    /// RGW's endpoint and the keys `deploy.sh` made.
    pub(super) fn rgw(&self) -> CliResult<(String, String, String)> {
        let text = std::fs::read_to_string(self.dir.join(RGW_ENV))
            .map_err(|e| format!("RGW's keys ({RGW_ENV}): {e}"))?;
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
                .ok_or_else(|| format!("{RGW_ENV} has no {name}"))
        };
        Ok((
            value("S3_ENDPOINT")?,
            value("AWS_ACCESS_KEY_ID")?,
            value("AWS_SECRET_ACCESS_KEY")?,
        ))
    }

    /// One `rados bench` phase on `pool`: `write` (objects kept for the
    /// reads), `seq` or `rand`.
    pub(super) fn rados_bench(
        &self,
        pool: &str,
        phase: &str,
        point: &Point,
        secs: u64,
    ) -> CliResult<Value> {
        let secs = secs.max(1).to_string();
        let concurrency = point.concurrency.to_string();
        let size = crate::units::parse_size(&point.object_size)?.to_string();
        let mut args = vec!["-p", pool, "bench", &secs, phase, "-t", &concurrency];
        if phase == "write" {
            args.extend(["-b", &size, "--no-cleanup"]);
        }
        args.extend(["--run-name", "sweep"]);
        let out = run_tool("rados", &self.conf(), &args)?;
        rados_report(&out, phase)
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        if self.up {
            drop(
                self.script("teardown.sh")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status(),
            );
        }
    }
}

/// Runs a Ceph tool with the anchor's configuration; its stdout, or its
/// stderr as the error.
fn run_tool(tool: &str, conf: &Path, args: &[&str]) -> CliResult<String> {
    let out = Command::new(tool)
        .arg("--conf")
        .arg(conf)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{tool}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `rados bench`'s closing lines as the sweep's figures. Its "MB/sec" is
/// MiB/s (bytes / 1,048,576); it reports the mean and the worst latency,
/// no percentiles.
pub(super) fn rados_report(text: &str, phase: &str) -> CliResult<Value> {
    let field = |label: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.trim().trim_start_matches(':').trim().parse().ok())
    };
    let bandwidth = field("Bandwidth (MB/sec)").ok_or_else(|| {
        format!(
            "rados bench {phase}: no bandwidth in its output: {}",
            text.trim()
        )
    })?;
    Ok(json!({
        "tool": "rados bench",
        "mode": phase,
        "bandwidth_mib_per_sec": bandwidth,
        "iops": field("Average IOPS").unwrap_or(0.0),
        "latency_avg_secs": field("Average Latency(s)").unwrap_or(0.0),
        "latency_max_secs": field("Max latency(s)").unwrap_or(0.0),
        "secs": field("Total time run").unwrap_or(0.0),
    }))
}

/// The point's pool on Ceph: one per point and repeat.
pub(super) fn pool_name(index: usize, repeat: u32) -> String {
    format!("sweep-p{index:04}-r{repeat:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rados_bench_output_becomes_figures() {
        let text = "\
Total time run:         10.0123
Total writes made:      1234
Write size:             4194304
Object size:            4194304
Bandwidth (MB/sec):     492.9
Stddev Bandwidth:       30.1
Max bandwidth (MB/sec): 540
Min bandwidth (MB/sec): 420
Average IOPS:           123
Stddev IOPS:            7.5
Max IOPS:               135
Min IOPS:               105
Average Latency(s):     0.129
Stddev Latency(s):      0.03
Max latency(s):         0.61
Min latency(s):         0.02
";
        let value = rados_report(text, "write").expect("figures");
        assert_eq!(value["bandwidth_mib_per_sec"], 492.9);
        assert_eq!(value["iops"], 123.0);
        assert_eq!(value["latency_max_secs"], 0.61);
        assert_eq!(value["secs"], 10.0123);
        let error = rados_report("error opening pool sweep", "rand")
            .expect_err("no figures")
            .to_string();
        assert!(error.contains("no bandwidth"), "{error}");
    }
}

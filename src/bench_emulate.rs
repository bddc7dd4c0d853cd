//! Emulated hardware for benchmark clusters: disk bandwidth and IOPS, a
//! CPU quota, the cores, and memory of each OSD process, through cgroups,
//! as the cost-optimal-sizing studies did without virtualisation.
//!
//! Each controller is used where the machine has it: in the unified (v2)
//! hierarchy when it lists the controller (`io.max`, `cpu.max`,
//! `cpuset.cpus`, `memory.max`), else in its v1 hierarchy
//! (`blkio.throttle.*`, `cpu.cfs_quota_us`, `cpuset.cpus`,
//! `memory.limit_in_bytes`). Every limit is checked once it is set: read
//! back from the kernel, the CPU quota and the cores measured on a busy
//! process in the group, and the disk limits measured with fio, so a limit
//! that did not take effect is an error before a benchmark runs on it.
//! CPU hot-plug, which takes CPUs from the whole machine rather than from
//! the OSDs alone, is `crate::hotplug`.

use crate::output::CliResult;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The cgroup period a CPU quota is a share of (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// How long a busy process runs in a CPU-limited group to measure it.
const CPU_CHECK: Duration = Duration::from_millis(1500);
/// How long fio measures a throttled disk.
const FIO_CHECK_SECS: u32 = 3;
/// A measured figure may exceed its limit by this much (bursts at the
/// start of a throttle's window, timer granularity).
const OVERSHOOT_MAX: f64 = 1.25;
/// Prefix of every group this module makes (leftovers of a killed run are
/// removed by the next).
const GROUP_PREFIX: &str = "cairn-emu-";

/// The hardware one OSD is given. Absent: the machine's own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Limits {
    /// Disk bandwidth, read and write each, bytes per second.
    pub disk_bytes_per_sec: Option<u64>,
    /// Disk operations per second, read and write each.
    pub disk_iops: Option<u64>,
    /// CPU time, in cores (0.5: half of one core's time).
    pub cpu_cores: Option<f64>,
    /// The cores it may run on: the first N of the machine.
    pub cores: Option<u32>,
    pub memory_bytes: Option<u64>,
}

impl Limits {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// One limit as the report shows it: what was asked, how the kernel was
/// told, and what a check measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct LimitCheck {
    pub limit: String,
    pub value: String,
    /// The cgroup files written (or why none could be).
    pub mechanism: String,
    /// How it was checked, with the measured figure.
    pub checked: String,
    pub applied: bool,
}

/// A controller's place on this machine.
#[derive(Clone, Debug)]
enum Hierarchy {
    /// The controller's own v1 mount.
    V1(PathBuf),
    /// The unified mount, which lists the controller.
    V2(PathBuf),
}

impl Hierarchy {
    fn root(&self) -> &Path {
        match self {
            Hierarchy::V1(p) | Hierarchy::V2(p) => p,
        }
    }

    fn version(&self) -> &'static str {
        match self {
            Hierarchy::V1(_) => "v1",
            Hierarchy::V2(_) => "v2",
        }
    }
}

/// The four controllers emulation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    Io,
    Cpu,
    Cpuset,
    Memory,
}

impl Controller {
    fn v1_name(self) -> &'static str {
        match self {
            Controller::Io => "blkio",
            Controller::Cpu => "cpu",
            Controller::Cpuset => "cpuset",
            Controller::Memory => "memory",
        }
    }

    fn v2_name(self) -> &'static str {
        match self {
            Controller::Io => "io",
            other => other.v1_name(),
        }
    }
}

/// Where each controller is mounted, from `/proc/self/mountinfo`.
fn hierarchy(controller: Controller) -> Option<Hierarchy> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        let Some((fields, tail)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount) = fields.split(' ').nth(4) else {
            continue;
        };
        let mut tail = tail.split(' ');
        let (fstype, options) = (tail.next(), tail.nth(1).unwrap_or_default());
        match fstype {
            Some("cgroup2") => {
                let listed = std::fs::read_to_string(Path::new(mount).join("cgroup.controllers"))
                    .unwrap_or_default();
                if listed.split_whitespace().any(|c| c == controller.v2_name()) {
                    v2 = Some(Hierarchy::V2(PathBuf::from(mount)));
                }
            }
            Some("cgroup") if options.split(',').any(|o| o == controller.v1_name()) => {
                v1 = Some(Hierarchy::V1(PathBuf::from(mount)));
            }
            _ => {}
        }
    }
    v2.or(v1)
}

/// A block device's numbers, as cgroup files name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Device {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// The whole disk under `dir` (throttles apply to disks, not partitions).
pub(crate) fn disk_of(dir: &Path) -> Result<Device, String> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .dev();
    let major = u32::try_from(((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff)).unwrap_or(0);
    let minor = u32::try_from(((dev >> 12) & 0xffff_ff00) | (dev & 0xff)).unwrap_or(0);
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if major == 0 || !sys.exists() {
        return Err(format!(
            "{} is not on a block device (tmpfs, overlay?): disk limits need one",
            dir.display()
        ));
    }
    if !sys.join("partition").exists() {
        return Ok(Device { major, minor });
    }
    let parent = std::fs::read_to_string(sys.join("..").join("dev"))
        .map_err(|e| format!("the disk holding partition {major}:{minor}: {e}"))?;
    let (major, minor) = parent
        .trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| format!("the disk holding partition {major}:{minor}: {parent:?}"))?;
    Ok(Device { major, minor })
}

/// One process group's limits in every controller they need; removed
/// (its processes moved back to the root) on drop.
pub(crate) struct Group {
    /// Each controller's directory of this group.
    dirs: Vec<(Controller, Hierarchy, PathBuf)>,
}

/// A file of a group: written, then read back.
fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        format!(
            "the kernel refused {} = {value:?}: {e}",
            dir.join(file).display()
        )
    })
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

impl Group {
    /// A group named `name` with `limits` (on `disk` for disk limits), each
    /// read back; the mechanisms used, as the report names them.
    pub(crate) fn new(
        name: &str,
        limits: &Limits,
        disk: Device,
    ) -> Result<(Group, Vec<String>), String> {
        remove_leftovers();
        let mut group = Group { dirs: Vec::new() };
        let mut used = Vec::new();
        let tag = format!("{GROUP_PREFIX}{}-{name}", std::process::id());
        let wanted = [
            (
                Controller::Io,
                limits.disk_bytes_per_sec.is_some() || limits.disk_iops.is_some(),
            ),
            (Controller::Cpu, limits.cpu_cores.is_some()),
            (Controller::Cpuset, limits.cores.is_some()),
            (Controller::Memory, limits.memory_bytes.is_some()),
        ];
        for (controller, needed) in wanted {
            if !needed {
                continue;
            }
            let place = hierarchy(controller).ok_or_else(|| {
                format!(
                    "this machine mounts no cgroup {} controller (v1 {:?} or v2 {:?})",
                    controller.v2_name(),
                    controller.v1_name(),
                    controller.v2_name()
                )
            })?;
            let dir = place.root().join(&tag);
            if let Hierarchy::V2(root) = &place {
                write(
                    root,
                    "cgroup.subtree_control",
                    &format!("+{}", controller.v2_name()),
                )?;
            }
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("making cgroup {}: {e}", dir.display()))?;
            group.dirs.push((controller, place.clone(), dir.clone()));
            used.push(set(controller, &place, &dir, limits, disk)?);
        }
        Ok((group, used))
    }

    /// Moves process `pid` (all its threads) into the group.
    pub(crate) fn add(&self, pid: u32) -> Result<(), String> {
        for (_, _, dir) in &self.dirs {
            write(dir, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Sets (or, with `None`, lifts) the disk bandwidth limit now: a disk
    /// slowed during a run. The group must have been made with a disk
    /// limit (`Some(0)`: in the io controller, not limited).
    pub(crate) fn set_disk(&self, bytes_per_sec: Option<u64>, disk: Device) -> Result<(), String> {
        let (_, place, dir) = self
            .dirs
            .iter()
            .find(|(c, _, _)| *c == Controller::Io)
            .ok_or("the OSD's group has no disk controller")?;
        let limits = Limits {
            disk_bytes_per_sec: Some(bytes_per_sec.unwrap_or(0)),
            ..Limits::default()
        };
        set(Controller::Io, place, dir, &limits, disk).map(drop)
    }

    /// The processes in the group.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.dirs
            .first()
            .map(|(_, _, dir)| {
                read(dir, "cgroup.procs")
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A command that starts `program` in the group: `sh` joins it, then
    /// becomes `program` (no instant outside it, so a measurement is all
    /// limited). Arguments added to it go to `program`.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(group_script(self.dirs.len()))
            .arg("sh")
            .args(self.dirs.iter().map(|(_, _, d)| d.join("cgroup.procs")))
            .arg(program)
            .stdin(Stdio::null());
        command
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for (_, place, dir) in &self.dirs {
            for pid in read(dir, "cgroup.procs").lines() {
                drop(std::fs::write(place.root().join("cgroup.procs"), pid));
            }
            drop(std::fs::remove_dir(dir));
        }
    }
}

/// Writes one controller's limits into `dir` and reads them back; the
/// mechanism, as the report names it.
fn set(
    controller: Controller,
    place: &Hierarchy,
    dir: &Path,
    limits: &Limits,
    disk: Device,
) -> Result<String, String> {
    let v = place.version();
    match (controller, place) {
        (Controller::Io, Hierarchy::V1(_)) => {
            let mut files = Vec::new();
            let pairs = [
                ("read_bps_device", limits.disk_bytes_per_sec),
                ("write_bps_device", limits.disk_bytes_per_sec),
                ("read_iops_device", limits.disk_iops),
                ("write_iops_device", limits.disk_iops),
            ];
            for (file, value) in pairs {
                let Some(value) = value else { continue };
                let file = format!("blkio.throttle.{file}");
                write(dir, &file, &format!("{disk} {value}"))?;
                let back = read(dir, &file);
                let expected = if value == 0 {
                    String::new()
                } else {
                    format!("{disk} {value}")
                };
                if back != expected {
                    return Err(format!(
                        "{file} reads {back:?} after {disk} {value} was written"
                    ));
                }
                files.push(file);
            }
            Ok(format!("cgroup {v} {} on {disk}", files.join(", ")))
        }
        (Controller::Io, Hierarchy::V2(_)) => {
            let or_max =
                |v: Option<u64>| v.filter(|n| *n > 0).map_or("max".into(), |n| n.to_string());
            let line = format!(
                "{disk} rbps={} wbps={} riops={} wiops={}",
                or_max(limits.disk_bytes_per_sec),
                or_max(limits.disk_bytes_per_sec),
                or_max(limits.disk_iops),
                or_max(limits.disk_iops)
            );
            write(dir, "io.max", &line)?;
            let back = read(dir, "io.max");
            let all_max = limits.disk_bytes_per_sec.unwrap_or(0) == 0 && limits.disk_iops.is_none();
            if !all_max && back != line {
                return Err(format!("io.max reads {back:?} after {line:?} was written"));
            }
            Ok(format!("cgroup {v} io.max {line}"))
        }
        (Controller::Cpu, _) => {
            let cores = limits.cpu_cores.unwrap_or(0.0);
            if !(cores > 0.0 && cores <= 1024.0) {
                return Err(format!("cpu = {cores}: more than 0 and at most 1024 cores"));
            }
            let quota = ((cores * CPU_PERIOD_US as f64).round() as u64).max(1000);
            match place {
                Hierarchy::V1(_) => {
                    write(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                    write(dir, "cpu.cfs_quota_us", &quota.to_string())?;
                    let back = read(dir, "cpu.cfs_quota_us");
                    if back != quota.to_string() {
                        return Err(format!("cpu.cfs_quota_us reads {back:?}, not {quota}"));
                    }
                    Ok(format!(
                        "cgroup {v} cpu.cfs_quota_us {quota} of {CPU_PERIOD_US}"
                    ))
                }
                Hierarchy::V2(_) => {
                    let line = format!("{quota} {CPU_PERIOD_US}");
                    write(dir, "cpu.max", &line)?;
                    let back = read(dir, "cpu.max");
                    if back != line {
                        return Err(format!("cpu.max reads {back:?}, not {line:?}"));
                    }
                    Ok(format!("cgroup {v} cpu.max {line}"))
                }
            }
        }
        (Controller::Cpuset, _) => {
            let cores = limits.cores.unwrap_or(0);
            if cores == 0 {
                return Err("cores = 0: at least one".into());
            }
            let cpus = if cores == 1 {
                "0".to_owned()
            } else {
                format!("0-{}", cores - 1)
            };
            if let Hierarchy::V1(root) = place {
                // A v1 cpuset takes no process until its memory nodes are set.
                write(dir, "cpuset.mems", &read(root, "cpuset.mems"))?;
            }
            write(dir, "cpuset.cpus", &cpus)?;
            let back = read(dir, "cpuset.cpus");
            if back != cpus {
                return Err(format!("cpuset.cpus reads {back:?}, not {cpus:?}"));
            }
            Ok(format!("cgroup {v} cpuset.cpus {cpus}"))
        }
        (Controller::Memory, _) => {
            let bytes = limits.memory_bytes.unwrap_or(0);
            let file = match place {
                Hierarchy::V1(_) => "memory.limit_in_bytes",
                Hierarchy::V2(_) => "memory.max",
            };
            write(dir, file, &bytes.to_string())?;
            let back: u64 = read(dir, file).parse().unwrap_or(0);
            // The kernel rounds down to its page size.
            if back > bytes || bytes - back >= 65_536 {
                return Err(format!("{file} reads {back} after {bytes} was written"));
            }
            Ok(format!("cgroup {v} {file} {back}"))
        }
    }
}

/// Removes groups of runs that are gone (a run killed before its drop).
fn remove_leftovers() {
    for controller in [
        Controller::Io,
        Controller::Cpu,
        Controller::Cpuset,
        Controller::Memory,
    ] {
        let Some(place) = hierarchy(controller) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(place.root()) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(GROUP_PREFIX) else {
                continue;
            };
            let owner = rest.split('-').next().unwrap_or_default();
            if !Path::new("/proc").join(owner).exists() {
                drop(std::fs::remove_dir(entry.path()));
            }
        }
    }
}

/// Sets `limits` on a probe group and checks each took effect: read back
/// (in [`Group::new`]), then measured: fio on `dir`'s disk, a busy process
/// for the CPU quota and the cores. One line per limit for the report.
pub(crate) fn check(limits: &Limits, dir: &Path) -> CliResult<Vec<LimitCheck>> {
    let disk = disk_of(dir)?;
    let (group, mechanisms) = Group::new("check", limits, disk)?;
    let mechanism = |word: &str| -> String {
        mechanisms
            .iter()
            .find(|m| m.contains(word))
            .cloned()
            .unwrap_or_default()
    };
    let mut checks = Vec::new();
    if let Some(bytes) = limits.disk_bytes_per_sec {
        let (mib, _) = fio(Some(&group), dir, "write", "1M")
            .map_err(|e| format!("checking the disk limit on {disk}: {e}"))?;
        let limit_mib = bytes as f64 / MIB;
        if mib > limit_mib * OVERSHOOT_MAX {
            return Err(format!(
                "the disk limit of {limit_mib:.1} MiB/s did not take effect: fio wrote {mib:.1} MiB/s in the group"
            )
            .into());
        }
        checks.push(LimitCheck {
            limit: "disk_bw".into(),
            value: format!("{limit_mib:.1} MiB/s read and write"),
            mechanism: mechanism("bps"),
            checked: format!("fio, direct 1 MiB writes for {FIO_CHECK_SECS} s: {mib:.1} MiB/s"),
            applied: true,
        });
    }
    if let Some(iops) = limits.disk_iops {
        let (_, measured_iops) = fio(Some(&group), dir, "randwrite", "4k")
            .map_err(|e| format!("checking the disk limit on {disk}: {e}"))?;
        if measured_iops > iops as f64 * OVERSHOOT_MAX {
            return Err(format!(
                "the disk limit of {iops} IOPS did not take effect: fio made {:.0} IOPS in the group",
                measured_iops
            )
            .into());
        }
        checks.push(LimitCheck {
            limit: "disk_iops".into(),
            value: format!("{iops} IOPS read and write"),
            mechanism: mechanism("iops"),
            checked: format!(
                "fio, direct 4 KiB random writes for {FIO_CHECK_SECS} s: {:.0} IOPS",
                measured_iops
            ),
            applied: true,
        });
    }
    if limits.cpu_cores.is_some() || limits.cores.is_some() {
        checks.extend(check_cpu(&group, limits, &mechanism)?);
    }
    if let Some(bytes) = limits.memory_bytes {
        checks.push(LimitCheck {
            limit: "memory".into(),
            value: format!("{:.0} MiB", bytes as f64 / MIB),
            mechanism: mechanism("memory"),
            checked: "read back from the kernel".into(),
            applied: true,
        });
    }
    drop(group);
    Ok(checks)
}

const MIB: f64 = 1_048_576.0;

/// The CPU quota and the cores, measured on `yes` spinning in the group.
fn check_cpu(
    group: &Group,
    limits: &Limits,
    mechanism: &dyn Fn(&str) -> String,
) -> CliResult<Vec<LimitCheck>> {
    let mut child = group
        .command("yes")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting a busy process to check the CPU limits: {e}"))?;
    std::thread::sleep(Duration::from_millis(100));
    let pid = child.id();
    let cpu_before = cpu_ns(pid);
    let started = Instant::now();
    std::thread::sleep(CPU_CHECK);
    let used = cpu_ns(pid).saturating_sub(cpu_before) as f64 / 1e9;
    let cores_used = used / started.elapsed().as_secs_f64();
    let allowed = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    drop(child.kill());
    drop(child.wait());
    let mut checks = Vec::new();
    if let Some(cores) = limits.cpu_cores {
        if cores_used > cores * OVERSHOOT_MAX + 0.02 {
            return Err(format!(
                "the CPU quota of {cores} cores did not take effect: a busy process used {cores_used:.2}"
            )
            .into());
        }
        checks.push(LimitCheck {
            limit: "cpu".into(),
            value: format!("{cores} cores of CPU time"),
            mechanism: mechanism("cpu."),
            checked: format!("a busy process used {cores_used:.2} cores"),
            applied: true,
        });
    }
    if let Some(cores) = limits.cores {
        let expected = if cores == 1 {
            "0".to_owned()
        } else {
            format!("0-{}", cores - 1)
        };
        if allowed != expected {
            return Err(format!(
                "the cores limit did not take effect: a process in the group may run on {allowed:?}, not {expected:?}"
            )
            .into());
        }
        checks.push(LimitCheck {
            limit: "cores".into(),
            value: format!("{cores} cores (CPUs {expected})"),
            mechanism: mechanism("cpuset"),
            checked: format!("a process in the group may run on CPUs {allowed}"),
            applied: true,
        });
    }
    Ok(checks)
}

/// `sh -c` text that joins the `n` groups given as arguments, then execs
/// the rest.
fn group_script(n: usize) -> String {
    let mut script = String::new();
    for i in 1..=n {
        script.push_str(&format!("echo $$ > \"${i}\" && "));
    }
    script.push_str(&format!("shift {n} && exec \"$@\""));
    script
}

/// CPU time process `pid` has used, from `/proc/PID/schedstat`.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// fio's direct `rw` of `block` blocks on `dir` for a few seconds, in
/// `group` or (none) on the bare machine: MiB/s and IOPS.
fn fio(group: Option<&Group>, dir: &Path, rw: &str, block: &str) -> CliResult<(f64, f64)> {
    let args = [
        "--size=256M".to_owned(),
        format!("--rw={rw}"),
        format!("--bs={block}"),
        "--time_based".to_owned(),
        format!("--runtime={FIO_CHECK_SECS}"),
    ];
    let name = if group.is_some() {
        "limit-check"
    } else {
        "disk-baseline"
    };
    match group {
        Some(group) => crate::bench_cmd::fio_job_with(group.command("fio"), dir, name, &args),
        None => crate::bench_cmd::fio_job(dir, name, &args),
    }
}

/// The machine's disk under `dir`, unthrottled: fio's direct 1 MiB
/// writes, MiB/s (the baseline a sweep's report and the sizing advisor
/// hold Cairn's figures against). `None` without fio.
pub(crate) fn disk_baseline_mib_per_sec(dir: &Path) -> Option<f64> {
    fio(None, dir, "write", "1M").ok().map(|(mib, _)| mib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_script_joins_every_group_then_becomes_the_program() {
        assert_eq!(
            group_script(2),
            "echo $$ > \"$1\" && echo $$ > \"$2\" && shift 2 && exec \"$@\""
        );
    }

    #[test]
    fn no_limits_is_empty() {
        assert!(Limits::default().is_empty());
        assert!(
            !Limits {
                cores: Some(1),
                ..Limits::default()
            }
            .is_empty()
        );
    }
}

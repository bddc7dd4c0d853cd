//! CPU hot-plug for benchmark points: the machine's CPUs past the first N
//! taken offline while a point runs, so the whole machine has N, as a
//! smaller server would (the OSDs, the monitor, the gateway and the
//! clients alike; `cores` in a plan instead confines the OSDs alone with
//! cpuset).
//!
//! CPUs taken offline come back online when the point ends, and also when
//! the sweep is killed: a guardian process, in a process group of its own
//! so a terminal's Ctrl-C spares it, brings them back once the sweep's
//! process is gone. A marker file names them too, for the next sweep to
//! bring back should the guardian have died as well.

use crate::bench_emulate::{LimitCheck, cpu_ns};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the kernel lists the CPUs.
const CPU_DIR: &str = "/sys/devices/system/cpu";
/// The CPUs this machine's sweeps took offline (one machine, one file).
const MARKER: &str = "/var/tmp/cairn-offline-cpus";
/// How long busy processes run to measure the CPUs left online.
const CHECK_FOR: Duration = Duration::from_millis(1500);
/// A measured figure may exceed the CPUs online by this much (timer
/// granularity, the accounting's tick).
const OVERSHOOT: f64 = 1.10;

/// CPUs taken offline; online again on drop.
pub(crate) struct Offline {
    cpus: Vec<u32>,
    guardian: Option<Child>,
}

/// A kernel CPU list ("0-3,6") as numbers.
pub(crate) fn parse_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("CPU list {text:?}: {s:?} is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a > b || b - a > 65_536 {
                    return Err(format!("CPU list {text:?}: range {part:?}"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(number(part)?),
        }
    }
    Ok(cpus)
}

/// The CPUs online now.
pub(crate) fn online() -> Result<Vec<u32>, String> {
    let file = Path::new(CPU_DIR).join("online");
    let text =
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    parse_list(&text)
}

fn online_file(cpu: u32) -> PathBuf {
    Path::new(CPU_DIR).join(format!("cpu{cpu}/online"))
}

fn set_online(cpu: u32, on: bool) -> Result<(), String> {
    let file = online_file(cpu);
    std::fs::write(&file, if on { "1" } else { "0" }).map_err(|e| {
        format!(
            "writing {} to {}: {e}",
            if on { 1 } else { 0 },
            file.display()
        )
    })
}

/// The CPUs to take offline to leave `keep` online, the highest-numbered
/// first: refused where the machine has fewer, or a CPU it would take has
/// no hot-plug switch.
fn to_take(online: &[u32], keep: u32, pluggable: impl Fn(u32) -> bool) -> Result<Vec<u32>, String> {
    if keep == 0 {
        return Err("online_cpus = 0: at least one".into());
    }
    let have = online.len();
    if keep as usize > have {
        return Err(format!(
            "online_cpus = {keep}: this machine has {have} CPUs online"
        ));
    }
    let mut sorted = online.to_vec();
    sorted.sort_unstable();
    let take: Vec<u32> = sorted[keep as usize..].iter().rev().copied().collect();
    if let Some(cpu) = take.iter().find(|c| !pluggable(**c)) {
        return Err(format!(
            "online_cpus = {keep}: cpu{cpu} cannot be taken offline here ({} is missing: the kernel \
             or the machine does not allow CPU hot-plug)",
            online_file(*cpu).display()
        ));
    }
    Ok(take)
}

impl Offline {
    /// Takes CPUs offline until `keep` are online.
    pub(crate) fn leave(keep: u32) -> Result<Offline, String> {
        restore_leftovers();
        let online_now = online()?;
        let take = to_take(&online_now, keep, |c| online_file(c).exists())?;
        let mut offline = Offline {
            cpus: Vec::new(),
            guardian: None,
        };
        if take.is_empty() {
            return Ok(offline);
        }
        let list = take
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        std::fs::write(MARKER, format!("{list}\n"))
            .map_err(|e| format!("writing {MARKER}: {e}"))?;
        offline.guardian = Some(guardian(&list)?);
        for cpu in take {
            // Dropping `offline` on an error brings back the ones taken.
            set_online(cpu, false)
                .map_err(|e| format!("online_cpus = {keep}: taking cpu{cpu} offline: {e}"))?;
            offline.cpus.push(cpu);
        }
        let now = online()?;
        if now.len() != keep as usize {
            return Err(format!(
                "online_cpus = {keep}: the kernel lists {} CPUs online after the hot-plug",
                now.len()
            ));
        }
        Ok(offline)
    }
}

impl Drop for Offline {
    fn drop(&mut self) {
        for cpu in &self.cpus {
            // The kernel may refuse for a moment while it settles.
            for _ in 0..20 {
                if set_online(*cpu, true).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if let Some(mut guardian) = self.guardian.take() {
            drop(guardian.kill());
            drop(guardian.wait());
        }
        drop(std::fs::remove_file(MARKER));
    }
}

/// A shell that waits for this process to end, then brings `list` online
/// and removes the marker.
fn guardian(list: &str) -> Result<Child, String> {
    use std::os::unix::process::CommandExt as _;
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         for c in {list}; do echo 1 > {CPU_DIR}/cpu$c/online; done; rm -f {MARKER}",
        pid = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the CPU hot-plug guardian: {e}"))
}

/// Brings back online the CPUs an interrupted sweep left offline.
pub(crate) fn restore_leftovers() {
    let Ok(text) = std::fs::read_to_string(MARKER) else {
        return;
    };
    let cpus: Vec<u32> = text
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect();
    let mut back = Vec::new();
    for cpu in cpus {
        let offline = std::fs::read_to_string(online_file(cpu)).is_ok_and(|s| s.trim() == "0");
        if offline && set_online(cpu, true).is_ok() {
            back.push(cpu.to_string());
        }
    }
    if !back.is_empty() {
        eprintln!(
            "cairn: CPUs {} back online (an interrupted sweep left them offline)",
            back.join(", ")
        );
    }
    drop(std::fs::remove_file(MARKER));
}

/// Takes CPUs offline to leave `keep`, measures busy processes (one more
/// than `keep`) on what is left, and brings them back: the report's line.
pub(crate) fn check(keep: u32) -> Result<LimitCheck, String> {
    let before = online()?;
    let offline = Offline::leave(keep)?;
    let during = online()?;
    let mut busy = Vec::new();
    for _ in 0..=keep {
        match Command::new("yes")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => busy.push(child),
            Err(e) => {
                stop(busy);
                return Err(format!("starting busy processes to check online_cpus: {e}"));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let used_before: u64 = busy.iter().map(|c| cpu_ns(c.id())).sum();
    let started = Instant::now();
    std::thread::sleep(CHECK_FOR);
    let used: u64 = busy.iter().map(|c| cpu_ns(c.id())).sum();
    let cpus_used = used.saturating_sub(used_before) as f64 / 1e9 / started.elapsed().as_secs_f64();
    stop(busy);
    drop(offline);
    let taken: Vec<String> = before
        .iter()
        .filter(|c| !during.contains(c))
        .map(|c| format!("cpu{c}"))
        .collect();
    if cpus_used > f64::from(keep) * OVERSHOOT + 0.05 {
        return Err(format!(
            "online_cpus = {keep} did not take effect: {} busy processes used {cpus_used:.2} CPUs",
            keep + 1
        ));
    }
    Ok(LimitCheck {
        limit: "online_cpus".into(),
        value: format!("{keep} of the machine's {} CPUs online", before.len()),
        mechanism: if taken.is_empty() {
            "none needed: no more CPUs online".into()
        } else {
            format!(
                "CPU hot-plug: {} offline ({CPU_DIR}/cpuN/online)",
                taken.join(", ")
            )
        },
        checked: format!(
            "{} busy processes used {cpus_used:.2} CPUs; the kernel listed CPUs {} online",
            keep + 1,
            list_text(&during)
        ),
        applied: true,
    })
}

fn stop(children: Vec<Child>) {
    for mut child in children {
        drop(child.kill());
        drop(child.wait());
    }
}

/// "0-1,3" for the report.
fn list_text(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_list("0-1\n").expect("valid"), vec![0, 1]);
        assert_eq!(parse_list("0,2-4,7").expect("valid"), vec![0, 2, 3, 4, 7]);
        assert_eq!(parse_list("0").expect("valid"), vec![0]);
        assert!(parse_list("0-x").is_err());
        assert!(parse_list("3-1").is_err());
        assert_eq!(list_text(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(list_text(&[3]), "3");
    }

    #[test]
    fn the_highest_cpus_go_offline_and_impossible_counts_are_refused() {
        let all = |_| true;
        assert_eq!(to_take(&[0, 1, 2, 3], 2, all).expect("valid"), vec![3, 2]);
        assert_eq!(to_take(&[0, 1], 2, all).expect("valid"), Vec::<u32>::new());
        assert!(to_take(&[0, 1], 3, all).is_err_and(|e| e.contains("2 CPUs online")));
        assert!(to_take(&[0, 1], 0, all).is_err_and(|e| e.contains("at least one")));
        // cpu0 has no switch on most kernels: never the one taken.
        let no_cpu0 = |c| c != 0;
        assert_eq!(to_take(&[0, 1, 2], 1, no_cpu0).expect("valid"), vec![2, 1]);
        let none = |_| false;
        assert!(
            to_take(&[0, 1], 1, none).is_err_and(|e| e.contains("does not allow CPU hot-plug"))
        );
    }
}

//! Running as one of N copies a launcher started: `mpirun` (Open MPI,
//! MPICH), `srun` (Slurm), or anything that gives each copy a rank.
//!
//! `cairn bench object` and `cairn bench s3` read their rank and the
//! number of copies from the launcher's environment ([`RANK_VARIABLES`]),
//! put `{rank}` in the names that must differ between copies (`--list`,
//! `--prefix`, `--report`), wait at a start barrier in `--report`'s
//! directory so every copy measures the same seconds, and write their
//! report to `--report`. `cairn bench gather` adds the copies' reports up:
//! bandwidth and operations summed, the worst p99 kept. No MPI library is
//! linked: a copy never calls `MPI_Init`, so any launcher that starts N
//! processes with a rank serves.

use crate::output::{CliResult, fixed, print_json};
use clap::Args;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The variables launchers set, as (rank, number of copies): Open MPI,
/// MPICH and Intel MPI's Hydra, Slurm, and Cairn's own for any other
/// launcher (the sweep's direct launch among them).
pub(crate) const RANK_VARIABLES: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("CAIRN_RANK", "CAIRN_RANKS"),
];
/// Variables naming the launch, so two launches' barriers never meet.
const JOB_VARIABLES: [&str; 4] = ["PMIX_NAMESPACE", "SLURM_JOB_ID", "PMI_JOBID", "CAIRN_JOB"];
/// The placeholder replaced by the rank.
pub(crate) const RANK_PLACEHOLDER: &str = "{rank}";
/// How long a copy waits at the start barrier for the others.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(120);
const BARRIER_POLL: Duration = Duration::from_millis(20);

/// This process's place among the copies a launcher started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    pub(crate) index: u32,
    pub(crate) count: u32,
}

impl Rank {
    /// The rank the launcher gave, if any; a variable that is set but not
    /// a rank below the count is an error.
    pub(crate) fn from_env() -> Result<Option<Rank>, String> {
        Rank::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Rank>, String> {
        for (rank_name, count_name) in RANK_VARIABLES {
            let Some(rank_text) = var(rank_name) else {
                continue;
            };
            let count_text = var(count_name)
                .ok_or_else(|| format!("{rank_name} is set but {count_name} is not"))?;
            let parse = |name: &str, text: &str| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{name}={text:?} is not a number"))
            };
            let rank = Rank {
                index: parse(rank_name, &rank_text)?,
                count: parse(count_name, &count_text)?,
            };
            if rank.index >= rank.count {
                return Err(format!(
                    "{rank_name}={} is not below {count_name}={}",
                    rank.index, rank.count
                ));
            }
            return Ok(Some(rank));
        }
        Ok(None)
    }
}

/// `text` with `{rank}` replaced by this copy's rank. Several copies need
/// it in `flag`'s value (they would share one file or prefix otherwise);
/// without a launcher it is an error to use it.
pub(crate) fn expand(flag: &str, text: &str, rank: Option<Rank>) -> Result<String, String> {
    let has_placeholder = text.contains(RANK_PLACEHOLDER);
    match rank {
        Some(rank) if has_placeholder => {
            Ok(text.replace(RANK_PLACEHOLDER, &rank.index.to_string()))
        }
        Some(rank) if rank.count > 1 => Err(format!(
            "{flag} {text}: {} copies would share it; put {RANK_PLACEHOLDER} in it",
            rank.count
        )),
        None if has_placeholder => Err(format!(
            "{flag} {text}: {RANK_PLACEHOLDER} needs a launcher's rank ({})",
            RANK_VARIABLES.map(|(rank, _)| rank).join(", ")
        )),
        _ => Ok(text.to_owned()),
    }
}

/// [`expand`] for a flag naming a file, if it was given.
pub(crate) fn expand_path(
    flag: &str,
    path: Option<&Path>,
    rank: Option<Rank>,
) -> Result<Option<PathBuf>, String> {
    path.map(|p| expand(flag, &p.to_string_lossy(), rank).map(PathBuf::from))
        .transpose()
}

/// Waits until every copy reached this point, through marker files in
/// `dir` (shared by all copies: one machine's disk, or a shared file system
/// across machines), so the copies start their timed work together.
pub(crate) fn barrier(dir: &Path, rank: Rank) -> CliResult {
    if rank.count <= 1 {
        return Ok(());
    }
    let job = JOB_VARIABLES
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .unwrap_or_else(|| "run".to_owned());
    let job: String = job
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let markers = dir.join(".cairn-barrier");
    std::fs::create_dir_all(&markers)
        .map_err(|e| format!("start barrier {}: {e}", markers.display()))?;
    let marker = |index: u32| markers.join(format!("{job}-{index}"));
    std::fs::write(marker(rank.index), b"")
        .map_err(|e| format!("start barrier {}: {e}", markers.display()))?;
    let deadline = Instant::now() + BARRIER_TIMEOUT;
    loop {
        let missing = (0..rank.count).filter(|&i| !marker(i).exists()).count();
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "start barrier: {missing} of {} copies did not arrive in {} s (in {})",
                rank.count,
                BARRIER_TIMEOUT.as_secs(),
                markers.display()
            )
            .into());
        }
        std::thread::sleep(BARRIER_POLL);
    }
}

/// A copy's `--report`: where it goes and the start barrier beside it.
#[derive(Debug)]
pub(crate) struct Report {
    path: PathBuf,
    dir: PathBuf,
    rank: Option<Rank>,
}

impl Report {
    /// Waits for the launcher's other copies: call it right before the
    /// timed work.
    pub(crate) fn start_together(&self) -> CliResult {
        match self.rank {
            Some(rank) => barrier(&self.dir, rank),
            None => Ok(()),
        }
    }

    /// Writes the copy's summary.
    pub(crate) fn write<T: serde::Serialize>(&self, summary: &T) -> CliResult {
        write_report(&self.path, summary)
    }
}

/// Where a copy's `--report` goes, `{rank}` replaced, its directory
/// checked before anything runs.
pub(crate) fn report(template: Option<&Path>) -> CliResult<Option<Report>> {
    let rank = Rank::from_env()?;
    let Some(template) = template else {
        return Ok(None);
    };
    let path = PathBuf::from(expand("--report", &template.to_string_lossy(), rank)?);
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "--report {}: no directory {}",
            path.display(),
            dir.display()
        )
        .into());
    }
    Ok(Some(Report { path, dir, rank }))
}

/// Writes `report` as JSON to `path` atomically (temp file, then rename),
/// so a gatherer never reads half of one.
pub(crate) fn write_report<T: serde::Serialize>(path: &Path, report: &T) -> CliResult {
    let text = serde_json::to_vec_pretty(report)?;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    std::fs::write(&temp, text).map_err(|e| format!("--report {}: {e}", temp.display()))?;
    std::fs::rename(&temp, path).map_err(|e| format!("--report {}: {e}", path.display()))?;
    Ok(())
}

/// A client's report with common keys: `bench object` has them; `bench
/// s3` says `mib_per_sec` and `ops_per_sec`, and for a LIST the keys
/// listed per second are its operations.
fn normalized(mut report: Value) -> Value {
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64);
    if number(&report, "bandwidth_mib_per_sec").is_none() {
        report["bandwidth_mib_per_sec"] = json!(number(&report, "mib_per_sec").unwrap_or(0.0));
    }
    if number(&report, "iops").is_none() {
        let ops = if report["mode"] == "list" {
            number(&report, "keys_per_sec")
        } else {
            number(&report, "ops_per_sec")
        };
        report["iops"] = json!(ops.unwrap_or(0.0));
    }
    report
}

/// One report of several clients': bandwidth and operations added, the
/// worst p99; each client's own kept under `clients`.
pub(crate) fn add_up(reports: Vec<Value>) -> Value {
    let mut reports: Vec<Value> = reports.into_iter().map(normalized).collect();
    if reports.len() == 1 {
        return reports.remove(0);
    }
    // A float sum starts from -0.0: an empty one is shown as 0.
    let sum =
        |key: &str| -> f64 { reports.iter().filter_map(|r| r[key].as_f64()).sum::<f64>() + 0.0 };
    let max = |key: &str| -> f64 {
        reports
            .iter()
            .filter_map(|r| r[key].as_f64())
            .fold(0.0, f64::max)
    };
    json!({
        "bandwidth_mib_per_sec": sum("bandwidth_mib_per_sec"),
        "iops": sum("iops"),
        "latency_p99_secs": max("latency_p99_secs"),
        "clients": reports,
    })
}

/// Reads the reports at `paths` and adds them up.
pub(crate) fn gather_files(paths: &[PathBuf]) -> CliResult<Value> {
    if paths.is_empty() {
        return Err("no reports to gather".into());
    }
    let mut reports = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read(path).map_err(|e| format!("report {}: {e}", path.display()))?;
        let report: Value = serde_json::from_slice(&text)
            .map_err(|e| format!("report {}: not JSON: {e}", path.display()))?;
        if !report.is_object() {
            return Err(format!("report {}: not a benchmark report", path.display()).into());
        }
        reports.push(report);
    }
    Ok(add_up(reports))
}

/// Whether `program` is an executable file in one of `PATH`'s
/// directories (or, with a `/`, at that path).
pub(crate) fn program_in_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(Path::new(program));
    }
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| executable(&dir.join(program)))
    })
}

/// Flags of `cairn bench gather`.
#[derive(Debug, Args)]
pub struct GatherArgs {
    /// The copies' `--report` files (`cairn bench object` or `s3`).
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// Print the sum as JSON, each copy's report under `clients`.
    #[arg(long)]
    json: bool,
}

pub fn gather(args: &GatherArgs) -> CliResult {
    let total = gather_files(&args.reports)?;
    if args.json {
        return print_json(&total);
    }
    let number = |key: &str| total[key].as_f64().unwrap_or(0.0);
    println!("Copies:            {}", args.reports.len());
    println!(
        "Bandwidth:         {} MiB/s",
        fixed(number("bandwidth_mib_per_sec"), 1)
    );
    println!("Operations:        {} /s", fixed(number("iops"), 1));
    println!(
        "Latency p99:       {} ms (the worst copy's)",
        fixed(number("latency_p99_secs") * 1000.0, 2)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn ranks_come_from_the_launchers_variables() {
        let open_mpi = vars(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        assert_eq!(
            Rank::from_vars(open_mpi),
            Ok(Some(Rank { index: 2, count: 4 }))
        );
        let slurm = vars(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8")]);
        assert_eq!(
            Rank::from_vars(slurm),
            Ok(Some(Rank { index: 0, count: 8 }))
        );
        assert_eq!(Rank::from_vars(vars(&[])), Ok(None));
        let past = vars(&[("CAIRN_RANK", "3"), ("CAIRN_RANKS", "3")]);
        assert!(
            Rank::from_vars(past)
                .expect_err("rank 3 of 3")
                .contains("not below")
        );
        let garbled = vars(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")]);
        assert!(
            Rank::from_vars(garbled)
                .expect_err("not a number")
                .contains("PMI_RANK")
        );
        let half = vars(&[("PMI_RANK", "1")]);
        assert!(
            Rank::from_vars(half)
                .expect_err("no size")
                .contains("PMI_SIZE")
        );
    }

    #[test]
    fn the_rank_placeholder_is_needed_by_many_copies_and_refused_without_one() {
        let two = Some(Rank { index: 1, count: 2 });
        let one = Some(Rank { index: 0, count: 1 });
        assert_eq!(
            expand("--list", "l-{rank}.txt", two).as_deref(),
            Ok("l-1.txt")
        );
        assert_eq!(expand("--list", "l.txt", one).as_deref(), Ok("l.txt"));
        assert_eq!(expand("--list", "l.txt", None).as_deref(), Ok("l.txt"));
        assert!(
            expand("--list", "l.txt", two)
                .expect_err("shared")
                .contains("would share")
        );
        assert!(
            expand("--prefix", "p{rank}", None)
                .expect_err("no launcher")
                .contains("OMPI_COMM_WORLD_RANK")
        );
    }

    #[test]
    fn the_barrier_opens_when_every_copy_arrived() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        let others: Vec<_> = (1..3)
            .map(|index| {
                let path = path.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(50 * u64::from(index)));
                    barrier(&path, Rank { index, count: 3 }).map_err(|e| e.to_string())
                })
            })
            .collect();
        let start = Instant::now();
        barrier(&path, Rank { index: 0, count: 3 }).expect("barrier");
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "rank 0 passed before rank 2 arrived"
        );
        for other in others {
            other.join().expect("thread").expect("barrier");
        }
    }

    #[test]
    fn gathered_reports_add_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        write_report(
            &a,
            &json!({"bandwidth_mib_per_sec": 100.0, "iops": 25.0, "latency_p99_secs": 0.2}),
        )
        .expect("write");
        write_report(
            &b,
            &json!({"mib_per_sec": 50.0, "ops_per_sec": 12.5, "latency_p99_secs": 0.5}),
        )
        .expect("write");
        let total = gather_files(&[a.clone(), b]).expect("gather");
        assert_eq!(total["bandwidth_mib_per_sec"], 150.0);
        assert_eq!(total["iops"], 37.5);
        assert_eq!(total["latency_p99_secs"], 0.5);
        assert_eq!(total["clients"].as_array().map(Vec::len), Some(2));
        std::fs::write(&a, b"{\"bandwidth").expect("write");
        let error = gather_files(&[a]).expect_err("torn report").to_string();
        assert!(error.contains("not JSON"), "{error}");
    }

    #[test]
    fn clients_add_up_bandwidth_and_operations_and_keep_the_worst_p99() {
        let one = json!({"bandwidth_mib_per_sec": 10.0, "iops": 100.0, "latency_p99_secs": 0.2});
        let two = json!({"bandwidth_mib_per_sec": 30.0, "iops": 50.0, "latency_p99_secs": 0.1});
        let sum = add_up(vec![one.clone(), two]);
        assert_eq!(sum["bandwidth_mib_per_sec"], 40.0);
        assert_eq!(sum["iops"], 150.0);
        assert_eq!(sum["latency_p99_secs"], 0.2);
        assert_eq!(sum["clients"].as_array().map(Vec::len), Some(2));
        assert_eq!(add_up(vec![one.clone()]), one);
        let s3_list =
            json!({"mode": "list", "mib_per_sec": 0.0, "ops_per_sec": 3.0, "keys_per_sec": 3000.0});
        let s3_put = json!({"mode": "put", "mib_per_sec": 8.0, "ops_per_sec": 2.0});
        assert_eq!(add_up(vec![s3_list])["iops"], 3000.0);
        let put = add_up(vec![s3_put.clone(), s3_put]);
        assert_eq!(
            (put["bandwidth_mib_per_sec"].as_f64(), put["iops"].as_f64()),
            (Some(16.0), Some(4.0))
        );
    }
}

//! `cairn sizing --from RUN... --target "read=2GB/s,capacity=100TB"`: the
//! cheapest cluster, built from a hardware catalog, that a model fitted to
//! `cairn bench sweep` runs predicts will meet a target.
//!
//! It runs and measures nothing itself: it reads each run's
//! `summary.json`, fits the model, and searches the catalog's node shapes
//! and node counts. The one design choice a reader must know: the model is
//! a bottleneck ("roofline") per measure, throughput = min over resources
//! r of a_r × R_r, where R_r is the cluster's total of r (OSDs, cores, disk
//! MiB/s or IOPS, NIC MiB/s). Each a_r is fitted from the points where r
//! was the one that bound; a resource the runs never showed binding gets a
//! lower bound, which only makes the prediction pessimistic. Everything
//! but reading files and printing is pure (`advise`), so the tests check
//! the answer against one computed by hand.

use crate::output::{CliResult, fixed, grouped, print_json, table};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// The most runs (`--from`) one sizing reads.
const RUNS_MAX: usize = 64;
/// The most points over all runs.
const POINTS_MAX: usize = 10_000;
/// The largest `summary.json` read.
const SUMMARY_BYTES_MAX: u64 = 64 << 20;
/// The largest `--catalog` file read.
const CATALOG_BYTES_MAX: u64 = 1 << 20;
/// The most options in any one list of a catalog.
const CATALOG_OPTIONS_MAX: usize = 32;
/// The most node shapes (combinations of a catalog's options) searched.
const SHAPES_MAX: usize = 100_000;
/// The most disks (OSDs) one node may hold.
const DISKS_PER_NODE_MAX: u32 = 128;
/// The most nodes a candidate cluster may have.
const NODES_MAX: u64 = 1000;
/// Builds (disk model × disks per node) shown after the chosen one.
const RUNNERS_UP_COUNT: usize = 5;
/// The share of the predicted peak a target may use, unless `headroom=`.
const HEADROOM_DEFAULT: f64 = 0.7;
/// The share of raw capacity usable before the cluster counts as full
/// (Ceph's `mon_osd_full_ratio` default).
const FULL_RATIO: f64 = 0.85;
/// Memory each OSD needs (Ceph's `osd_memory_target` default): a shape
/// with less per disk is not a candidate.
const OSD_MEMORY_MIN_BYTES: u64 = 4 << 30;
/// Resources whose caps are within this share of a point's prediction
/// bind there together.
const BINDING_TOLERANCE: f64 = 0.01;
/// A resource is shown to limit where its cap is this much below every
/// other one's: a smaller gap is within a sweep's noise.
const SHOWN_MARGIN: f64 = 0.05;
/// A resource whose amount spread over the points is under this share of
/// its largest did not vary.
const VARIED_MIN: f64 = 0.01;
/// Copies of a replicated pool, at most.
const REPLICAS_MAX: u32 = 10;
/// Shards (k+m) of an erasure-coded pool, at most.
const SHARDS_MAX: u32 = 32;
/// The largest number a target may give (in its unit).
const TARGET_VALUE_MAX: f64 = 1e18;
/// MiB/s of one Gbit/s.
const MIB_PER_SEC_PER_GBIT: f64 = 1e9 / 8.0 / 1_048_576.0;
const MIB: f64 = 1_048_576.0;

/// The built-in catalog: plausible 2026 street prices in US dollars, an
/// assumption stated in the output. `--catalog` replaces it; this text is
/// also the format's example (docs/evaluation.md).
const DEFAULT_CATALOG: &str = r#"
currency = "USD"

[node]
base_price = 3000.0            # chassis, board, power, boot disks
disks_per_node = [4, 8, 12, 24]

[[disk]]
name = "HDD 16TB"
mib_per_sec = 250.0
iops = 200.0
capacity_tb = 16.0
price = 350.0

[[disk]]
name = "SATA SSD 3.84TB"
mib_per_sec = 500.0
iops = 80000.0
capacity_tb = 3.84
price = 400.0

[[disk]]
name = "NVMe 7.68TB"
mib_per_sec = 2500.0
iops = 400000.0
capacity_tb = 7.68
price = 900.0

[[cpu]]
cores = 8
price = 600.0
[[cpu]]
cores = 16
price = 1300.0
[[cpu]]
cores = 32
price = 2800.0
[[cpu]]
cores = 64
price = 6000.0

[[memory]]
size_gib = 64
price = 450.0
[[memory]]
size_gib = 128
price = 900.0
[[memory]]
size_gib = 256
price = 1900.0
[[memory]]
size_gib = 512
price = 4000.0

[[nic]]
gbit_per_sec = 10.0
price = 150.0
[[nic]]
gbit_per_sec = 25.0
price = 350.0
[[nic]]
gbit_per_sec = 100.0
price = 1200.0
"#;

/// Flags of `cairn sizing`.
#[derive(Debug, Args)]
pub struct SizingArgs {
    /// A `cairn bench sweep --out` directory (its `summary.json`); give
    /// `--from` once per run, at least two points in all.
    #[arg(long = "from", required = true)]
    from: Vec<PathBuf>,
    /// What the cluster must do, comma-separated: read=2GB/s, write=1GB/s
    /// (GB/s, GiB/s, MB/s, MiB/s), iops=50000, md=20000 (metadata ops/s),
    /// capacity=100TB (GB, GiB, TB, TiB, PB, PiB), redundancy=3x or 8+3
    /// (default 3x), headroom=0.7 (the share of the predicted peak the
    /// target may use).
    #[arg(long)]
    target: String,
    /// Hardware and prices (TOML; see docs/evaluation.md) instead of the
    /// built-in 2026 catalog.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Why sizing could not answer.
#[derive(Debug, PartialEq)]
enum SizingError {
    /// A run's directory or `summary.json` is unreadable or malformed.
    Run { run: String, reason: String },
    /// A measure has fewer points than a fit needs.
    TooFewPoints { measure: Measure, count: usize },
    /// The target asks for a measure no run measured.
    Unmeasured { measure: Measure, reason: String },
    /// A `--target` key or value is wrong.
    Target { key: String, reason: String },
    /// The catalog is malformed or has no usable shape.
    Catalog { reason: String },
}

impl fmt::Display for SizingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizingError::Run { run, reason } => write!(f, "--from {run}: {reason}"),
            SizingError::TooFewPoints { measure, count } => write!(
                f,
                "{}: {count} point(s) measured it; a fit needs at least 2 (give more --from runs)",
                measure.name()
            ),
            SizingError::Unmeasured { measure, reason } => write!(
                f,
                "--target {}: cannot be checked: {reason}",
                measure.name()
            ),
            SizingError::Target { key, reason } => write!(f, "--target {key}: {reason}"),
            SizingError::Catalog { reason } => write!(f, "catalog: {reason}"),
        }
    }
}

impl std::error::Error for SizingError {}

// ---------------------------------------------------------------------
// Measures and resources
// ---------------------------------------------------------------------

/// What a target asks for and a sweep measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Measure {
    /// MiB/s of reads: the best of the `seq` and `rand` phases.
    Read,
    /// MiB/s of the `write` phase.
    Write,
    /// Operations per second of reads: the best `median_iops` of `seq`
    /// and `rand`.
    Iops,
    /// Metadata operations per second: the lower of `create` and `stat`.
    Md,
}

impl Measure {
    const ALL: [Measure; 4] = [Measure::Read, Measure::Write, Measure::Iops, Measure::Md];

    fn name(self) -> &'static str {
        match self {
            Measure::Read => "read",
            Measure::Write => "write",
            Measure::Iops => "iops",
            Measure::Md => "md",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Measure::Read | Measure::Write => "MiB/s",
            Measure::Iops | Measure::Md => "ops/s",
        }
    }

    /// The resources its roofline takes the minimum over. Bandwidth
    /// measures are bound by bytes (disk and NIC MiB/s), operation rates
    /// by device operations.
    fn resources(self) -> &'static [Resource] {
        match self {
            Measure::Read | Measure::Write => &[
                Resource::Osds,
                Resource::Cores,
                Resource::DiskMib,
                Resource::Net,
            ],
            Measure::Iops | Measure::Md => &[Resource::Osds, Resource::Cores, Resource::DiskIops],
        }
    }

    /// Its value in one point's phases; `None` when no phase measured it.
    fn in_phases(self, phases: &[InPhase]) -> Option<f64> {
        let figure = |names: &[&str], mib: bool| -> Vec<f64> {
            phases
                .iter()
                .filter(|p| names.contains(&p.phase.as_str()))
                .filter_map(|p| {
                    if mib {
                        p.median_mib_per_sec
                    } else {
                        p.median_iops
                    }
                })
                .collect()
        };
        let values = match self {
            Measure::Read => figure(&["seq", "rand"], true),
            Measure::Write => figure(&["write"], true),
            Measure::Iops => figure(&["seq", "rand"], false),
            Measure::Md => figure(&["create", "stat"], false),
        };
        let pick = if self == Measure::Md {
            f64::min
        } else {
            f64::max
        };
        values.into_iter().reduce(pick)
    }
}

/// A resource a point or a candidate cluster has a total of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum Resource {
    Osds,
    Cores,
    #[serde(rename = "disk_mib_per_sec")]
    DiskMib,
    DiskIops,
    #[serde(rename = "net_mib_per_sec")]
    Net,
}

impl Resource {
    fn name(self) -> &'static str {
        match self {
            Resource::Osds => "osds",
            Resource::Cores => "cores",
            Resource::DiskMib => "disk_mib_per_sec",
            Resource::DiskIops => "disk_iops",
            Resource::Net => "net_mib_per_sec",
        }
    }

    /// What one unit of it is, for a coefficient's unit.
    fn per(self) -> &'static str {
        match self {
            Resource::Osds => "OSD",
            Resource::Cores => "core",
            Resource::DiskMib => "disk MiB/s",
            Resource::DiskIops => "disk IOPS",
            Resource::Net => "NIC MiB/s",
        }
    }

    /// The coefficient of a device's rated speed when no run measured the
    /// resource: the device's line rate. OSDs and cores have none.
    fn line_rate(self) -> Option<f64> {
        match self {
            Resource::DiskMib | Resource::DiskIops | Resource::Net => Some(1.0),
            Resource::Osds | Resource::Cores => None,
        }
    }

    /// Every byte written lands on disks, and crosses hosts' NICs,
    /// 1/data_fraction times.
    fn scaled_for(self, measure: Measure) -> bool {
        measure == Measure::Write && matches!(self, Resource::DiskMib | Resource::Net)
    }
}

// ---------------------------------------------------------------------
// Runs: what `summary.json` holds, as far as sizing needs it
// ---------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct InSummary {
    #[serde(default)]
    plan: InPlan,
    #[serde(default)]
    machine: Option<InMachine>,
    points: Vec<InPoint>,
}

#[derive(Debug, Default, Deserialize)]
struct InPlan {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct InMachine {
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    cpus: u64,
}

#[derive(Debug, Deserialize)]
struct InPoint {
    #[serde(default)]
    point: u64,
    #[serde(default)]
    label: String,
    #[serde(default)]
    resources: Option<InResources>,
    #[serde(default)]
    phases: Vec<InPhase>,
    #[serde(default)]
    settings: InSettings,
}

/// What sizing reads of a point's settings: which system ran it (absent:
/// Cairn).
#[derive(Debug, Default, Deserialize)]
struct InSettings {
    #[serde(default)]
    system: Option<String>,
}

/// A point's totals; `null` (or absent) means not limited or not known.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InResources {
    osds: Option<f64>,
    cores: Option<f64>,
    disk_mib_per_sec: Option<f64>,
    disk_iops: Option<f64>,
    memory_bytes: Option<f64>,
    net_mib_per_sec: Option<f64>,
    data_fraction: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct InPhase {
    phase: String,
    #[serde(default)]
    median_mib_per_sec: Option<f64>,
    #[serde(default)]
    median_iops: Option<f64>,
}

/// One run as read: its name (the directory) and its summary.
#[derive(Debug)]
struct Run {
    name: String,
    summary: InSummary,
}

/// One point, checked: its resources and its measures.
#[derive(Debug, Clone)]
struct Sample {
    label: String,
    osds: f64,
    cores: Option<f64>,
    disk_mib_per_sec: Option<f64>,
    disk_iops: Option<f64>,
    net_mib_per_sec: Option<f64>,
    memory_bytes: Option<f64>,
    data_fraction: f64,
    /// Indexed like `Measure::ALL`.
    measures: [Option<f64>; 4],
}

impl Sample {
    /// The amount of `resource` the point had for `measure` (for writes,
    /// disk and NIC scaled by the data fraction); `None`: not limited.
    fn amount(&self, resource: Resource, measure: Measure) -> Option<f64> {
        let raw = match resource {
            Resource::Osds => Some(self.osds),
            Resource::Cores => self.cores,
            Resource::DiskMib => self.disk_mib_per_sec,
            Resource::DiskIops => self.disk_iops,
            Resource::Net => self.net_mib_per_sec,
        }?;
        Some(if resource.scaled_for(measure) {
            raw * self.data_fraction
        } else {
            raw
        })
    }

    fn measure(&self, measure: Measure) -> Option<f64> {
        self.measures[measure as usize]
    }
}

/// Every run's points, checked, and notes on measures left out.
fn samples(runs: &[Run]) -> Result<(Vec<Sample>, Vec<String>), SizingError> {
    let mut all = Vec::new();
    let mut notes = Vec::new();
    for run in runs {
        if run.summary.points.is_empty() {
            return Err(SizingError::Run {
                run: run.name.clone(),
                reason: "summary.json has no points".into(),
            });
        }
        let mut others = 0;
        for point in &run.summary.points {
            // Another system's points (a sweep's Ceph half) say nothing of
            // how Cairn scales.
            if point
                .settings
                .system
                .as_deref()
                .is_some_and(|s| s != "cairn")
            {
                others += 1;
                continue;
            }
            all.push(sample(run, point, &mut notes)?);
        }
        if others > 0 {
            notes.push(format!(
                "{}: {others} points of another system (Ceph) left out",
                run.name
            ));
        }
    }
    if all.len() > POINTS_MAX {
        return Err(SizingError::Run {
            run: runs
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reason: format!("{} points in all, more than {POINTS_MAX}", all.len()),
        });
    }
    Ok((all, notes))
}

/// One point checked: resources positive and finite, the data fraction in
/// (0, 1]; a measure that is not positive is left out with a note.
fn sample(run: &Run, point: &InPoint, notes: &mut Vec<String>) -> Result<Sample, SizingError> {
    let name = if point.label.is_empty() {
        format!("point {}", point.point)
    } else {
        point.label.clone()
    };
    let label = format!("{}: {name}", run.name);
    let bad = |reason: String| SizingError::Run {
        run: run.name.clone(),
        reason: format!("{name}: {reason}"),
    };
    let resources = point.resources.as_ref().ok_or_else(|| {
        bad(
            "no \"resources\" (a sweep from before cairn bench sweep recorded them; run it again)"
                .into(),
        )
    })?;
    let positive = |field: &str, value: Option<f64>| -> Result<Option<f64>, SizingError> {
        match value {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(bad(format!(
                "resources.{field} = {v}: must be a positive number or null"
            ))),
            other => Ok(other),
        }
    };
    let osds =
        positive("osds", resources.osds)?.ok_or_else(|| bad("resources.osds is missing".into()))?;
    let data_fraction = positive("data_fraction", resources.data_fraction)?
        .filter(|f| *f <= 1.0)
        .ok_or_else(|| bad("resources.data_fraction must be given, in (0, 1]".into()))?;
    let mut measures = [None; 4];
    for measure in Measure::ALL {
        match measure.in_phases(&point.phases) {
            Some(v) if v.is_finite() && v > 0.0 => measures[measure as usize] = Some(v),
            Some(v) => notes.push(format!(
                "{label}: {} = {v} is not a positive figure; left out of the {} fit",
                measure.name(),
                measure.name()
            )),
            None => {}
        }
    }
    Ok(Sample {
        osds,
        cores: positive("cores", resources.cores)?,
        disk_mib_per_sec: positive("disk_mib_per_sec", resources.disk_mib_per_sec)?,
        disk_iops: positive("disk_iops", resources.disk_iops)?,
        net_mib_per_sec: positive("net_mib_per_sec", resources.net_mib_per_sec)?,
        memory_bytes: positive("memory_bytes", resources.memory_bytes)?,
        data_fraction,
        measures,
        label,
    })
}

// ---------------------------------------------------------------------
// The fit
// ---------------------------------------------------------------------

/// Where a coefficient comes from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Source {
    /// Fitted from the points.
    Fitted,
    /// No point measured the resource: the device's line rate is assumed.
    AssumedLineRate,
    /// No point measured it and it has no line rate: not in the model.
    LeftOut,
}

/// One resource's term of a measure's roofline.
#[derive(Clone, Debug, Serialize)]
struct Term {
    resource: Resource,
    /// The measure's unit per unit of the resource; `None` if left out.
    coefficient: Option<f64>,
    unit: String,
    source: Source,
    /// The largest measured/amount over the points: every point must lie
    /// under it, so the coefficient can be no less.
    envelope: Option<f64>,
    /// The points where this resource bound (alone or with others).
    binds_at: Vec<String>,
    /// Its amount differed between points.
    varied: bool,
    /// It varied, and at some point it bound alone by a clear margin; if
    /// not, the coefficient is only a lower bound ("not shown to limit").
    shown_to_limit: bool,
}

/// One point's figure against the model's.
#[derive(Clone, Debug, Serialize)]
struct PointFit {
    label: String,
    measured: f64,
    predicted: f64,
    /// The resources that bound there.
    binding: Vec<Resource>,
}

/// A measure's fitted roofline.
#[derive(Clone, Debug, Serialize)]
struct Fit {
    measure: Measure,
    unit: &'static str,
    terms: Vec<Term>,
    points: Vec<PointFit>,
    /// |predicted − measured| / measured over the points.
    error_mean: f64,
    error_max: f64,
}

impl Fit {
    /// The model's figure for resource amounts given by `amount`, and the
    /// resource that binds (`None` if no term applies).
    fn predict(&self, amount: impl Fn(Resource) -> Option<f64>) -> (f64, Option<Resource>) {
        let mut best = (f64::INFINITY, None);
        for term in &self.terms {
            if let (Some(a), Some(r)) = (term.coefficient, amount(term.resource)) {
                let cap = a * r;
                if cap < best.0 {
                    best = (cap, Some(term.resource));
                }
            }
        }
        best
    }

    fn term(&self, resource: Resource) -> Option<&Term> {
        self.terms.iter().find(|t| t.resource == resource)
    }
}

/// A measure's roofline from the points that measured it.
///
/// Every point lies under every term (T ≤ a_r × R_r), and the binding one
/// gives equality, so the largest T/R_r over the points (the envelope) is
/// the tightest consistent a_r. One noisy point would set it alone, so
/// the coefficient is the median of T/R_r over the points where r binds
/// under the envelope: on exact data the two agree; on noisy data a
/// resource that binds at several points is not set by its luckiest one.
/// (An upper percentile over all points would instead drag a resource
/// that binds at few points below its true value.)
fn fit_measure(measure: Measure, samples: &[Sample]) -> Result<Fit, SizingError> {
    let rows: Vec<(&Sample, f64)> = samples
        .iter()
        .filter_map(|s| s.measure(measure).map(|t| (s, t)))
        .collect();
    if rows.len() < 2 {
        return Err(SizingError::TooFewPoints {
            measure,
            count: rows.len(),
        });
    }
    let mut terms: Vec<Term> = measure
        .resources()
        .iter()
        .map(|&r| envelope_term(measure, r, &rows))
        .collect();
    let envelope_binding = binding_sets(measure, &terms, &rows);
    for term in terms.iter_mut().filter(|t| t.source == Source::Fitted) {
        let ratios: Vec<f64> = rows
            .iter()
            .zip(&envelope_binding)
            .filter(|(_, binding)| binding.contains(&term.resource))
            .filter_map(|((s, t), _)| s.amount(term.resource, measure).map(|r| t / r))
            .collect();
        term.coefficient = Some(median(&ratios).unwrap_or(term.envelope.unwrap_or(0.0)));
    }
    let binding = binding_sets(measure, &terms, &rows);
    let coefficients = terms_copy(&terms);
    for term in &mut terms {
        term.binds_at = rows
            .iter()
            .zip(&binding)
            .filter(|(_, b)| b.contains(&term.resource))
            .map(|((s, _), _)| s.label.clone())
            .collect();
        term.shown_to_limit =
            term.varied && shown_alone(measure, term.resource, &coefficients, &rows);
    }
    Ok(finish_fit(measure, terms, &rows, binding))
}

fn terms_copy(terms: &[Term]) -> Vec<(Resource, Option<f64>)> {
    terms.iter().map(|t| (t.resource, t.coefficient)).collect()
}

/// A term with its envelope, before the robust coefficient.
fn envelope_term(measure: Measure, resource: Resource, rows: &[(&Sample, f64)]) -> Term {
    let known: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|(s, t)| s.amount(resource, measure).map(|r| (r, *t)))
        .collect();
    let unit = format!("{} per {}", measure.unit(), resource.per());
    let envelope = known.iter().map(|(r, t)| t / r).reduce(f64::max);
    let (source, coefficient) = match (envelope, resource.line_rate()) {
        (Some(e), _) => (Source::Fitted, Some(e)),
        (None, Some(rate)) => (Source::AssumedLineRate, Some(rate)),
        (None, None) => (Source::LeftOut, None),
    };
    let smallest = known.iter().map(|k| k.0).reduce(f64::min).unwrap_or(0.0);
    let largest = known.iter().map(|k| k.0).reduce(f64::max).unwrap_or(0.0);
    Term {
        resource,
        coefficient,
        unit,
        source,
        envelope,
        binds_at: Vec::new(),
        varied: largest > 0.0 && (largest - smallest) / largest > VARIED_MIN,
        shown_to_limit: false,
    }
}

/// Each resource's cap at a point: coefficient × amount, where both exist.
fn caps(
    measure: Measure,
    terms: &[(Resource, Option<f64>)],
    sample: &Sample,
) -> Vec<(Resource, f64)> {
    terms
        .iter()
        .filter_map(|&(r, a)| Some((r, a? * sample.amount(r, measure)?)))
        .collect()
}

/// At each point, the resources whose caps are within the tolerance of
/// the lowest.
fn binding_sets(measure: Measure, terms: &[Term], rows: &[(&Sample, f64)]) -> Vec<Vec<Resource>> {
    let coefficients = terms_copy(terms);
    rows.iter()
        .map(|(s, _)| {
            let caps = caps(measure, &coefficients, s);
            let lowest = caps.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
            caps.iter()
                .filter(|c| c.1 <= lowest * (1.0 + BINDING_TOLERANCE))
                .map(|c| c.0)
                .collect()
        })
        .collect()
}

/// Whether `resource` binds alone, every other cap at least
/// `SHOWN_MARGIN` above its own, at some point.
fn shown_alone(
    measure: Measure,
    resource: Resource,
    terms: &[(Resource, Option<f64>)],
    rows: &[(&Sample, f64)],
) -> bool {
    rows.iter().any(|(s, _)| {
        let caps = caps(measure, terms, s);
        let Some(own) = caps.iter().find(|c| c.0 == resource).map(|c| c.1) else {
            return false;
        };
        caps.iter()
            .filter(|c| c.0 != resource)
            .all(|c| c.1 >= own * (1.0 + SHOWN_MARGIN))
    })
}

/// The per-point figures and the fit error.
fn finish_fit(
    measure: Measure,
    terms: Vec<Term>,
    rows: &[(&Sample, f64)],
    binding: Vec<Vec<Resource>>,
) -> Fit {
    let coefficients = terms_copy(&terms);
    let points: Vec<PointFit> = rows
        .iter()
        .zip(binding)
        .map(|((s, t), binding)| {
            let predicted = caps(measure, &coefficients, s)
                .iter()
                .map(|c| c.1)
                .fold(f64::INFINITY, f64::min);
            PointFit {
                label: s.label.clone(),
                measured: *t,
                predicted,
                binding,
            }
        })
        .collect();
    let errors: Vec<f64> = points
        .iter()
        .map(|p| (p.predicted - p.measured).abs() / p.measured)
        .collect();
    Fit {
        measure,
        unit: measure.unit(),
        terms,
        error_mean: errors.iter().sum::<f64>() / errors.len().max(1) as f64,
        error_max: errors.iter().copied().fold(0.0, f64::max),
        points,
    }
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])),
    }
}

// ---------------------------------------------------------------------
// The target
// ---------------------------------------------------------------------

/// How the target's pool keeps its data.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Redundancy {
    Replicated { size: u32 },
    Erasure { k: u32, m: u32 },
}

impl Redundancy {
    /// Usable bytes per raw byte.
    fn data_fraction(self) -> f64 {
        match self {
            Redundancy::Replicated { size } => 1.0 / f64::from(size),
            Redundancy::Erasure { k, m } => f64::from(k) / f64::from(k + m),
        }
    }

    /// Nodes needed to put every copy or shard in its own failure domain.
    fn nodes_min(self) -> u64 {
        match self {
            Redundancy::Replicated { size } => u64::from(size),
            Redundancy::Erasure { k, m } => u64::from(k + m),
        }
    }
}

impl fmt::Display for Redundancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Redundancy::Replicated { size } => write!(f, "{size}x"),
            Redundancy::Erasure { k, m } => write!(f, "{k}+{m}"),
        }
    }
}

/// What the cluster must do: throughputs in MiB/s, rates in ops/s.
#[derive(Clone, Debug, PartialEq)]
struct Target {
    /// Indexed like `Measure::ALL`.
    measures: [Option<f64>; 4],
    capacity_bytes: Option<f64>,
    redundancy: Redundancy,
    headroom: f64,
}

impl Target {
    fn measure(&self, measure: Measure) -> Option<f64> {
        self.measures[measure as usize]
    }
}

/// Parses `read=2GB/s,capacity=100TB,redundancy=8+3,...`.
fn parse_target(text: &str) -> Result<Target, SizingError> {
    let mut target = Target {
        measures: [None; 4],
        capacity_bytes: None,
        redundancy: Redundancy::Replicated { size: 3 },
        headroom: HEADROOM_DEFAULT,
    };
    let mut seen: Vec<&str> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (key, value) = item.split_once('=').ok_or_else(|| SizingError::Target {
            key: item.to_owned(),
            reason: "expected key=value, like read=2GB/s".into(),
        })?;
        let (key, value) = (key.trim(), value.trim());
        let bad = |reason: String| SizingError::Target {
            key: format!("{key}={value}"),
            reason,
        };
        if seen.contains(&key) {
            return Err(bad(format!("{key} is given twice")));
        }
        seen.push(key);
        match key {
            "read" => {
                target.measures[Measure::Read as usize] = Some(throughput(value).map_err(bad)?)
            }
            "write" => {
                target.measures[Measure::Write as usize] = Some(throughput(value).map_err(bad)?)
            }
            "iops" => target.measures[Measure::Iops as usize] = Some(rate(value).map_err(bad)?),
            "md" => target.measures[Measure::Md as usize] = Some(rate(value).map_err(bad)?),
            "capacity" => target.capacity_bytes = Some(capacity(value).map_err(bad)?),
            "redundancy" => target.redundancy = redundancy(value).map_err(bad)?,
            "headroom" => target.headroom = headroom(value).map_err(bad)?,
            _ => {
                return Err(SizingError::Target {
                    key: key.to_owned(),
                    reason:
                        "unknown key (known: read, write, iops, md, capacity, redundancy, headroom)"
                            .into(),
                });
            }
        }
    }
    if target.measures.iter().all(Option::is_none) && target.capacity_bytes.is_none() {
        return Err(SizingError::Target {
            key: text.to_owned(),
            reason: "no goal: give at least one of read, write, iops, md, capacity".into(),
        });
    }
    Ok(target)
}

/// A number and the unit after it.
fn number_and_unit(value: &str) -> Result<(f64, &str), String> {
    let at = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(at);
    let number: f64 = digits
        .parse()
        .map_err(|_| format!("{value:?} does not start with a number"))?;
    if !(number.is_finite() && number > 0.0 && number <= TARGET_VALUE_MAX) {
        return Err(format!(
            "{value:?}: must be more than 0 and at most {TARGET_VALUE_MAX}"
        ));
    }
    Ok((number, unit.trim()))
}

/// MiB/s from `2GB/s`, `1.5GiB/s`, `800MB/s`, `500MiB/s`.
fn throughput(value: &str) -> Result<f64, String> {
    let (number, unit) = number_and_unit(value)?;
    let bytes = match unit {
        "GB/s" => 1e9,
        "GiB/s" => 1024.0 * MIB,
        "MB/s" => 1e6,
        "MiB/s" => MIB,
        _ => return Err(format!("unit {unit:?}: one of GB/s, GiB/s, MB/s, MiB/s")),
    };
    Ok(number * bytes / MIB)
}

/// Operations per second: a plain number.
fn rate(value: &str) -> Result<f64, String> {
    match number_and_unit(value)? {
        (number, "") => Ok(number),
        (_, unit) => Err(format!(
            "unit {unit:?}: give operations per second as a plain number, like 50000"
        )),
    }
}

/// Bytes from `100TB`, `1.5PiB`, ...
fn capacity(value: &str) -> Result<f64, String> {
    let (number, unit) = number_and_unit(value)?;
    let bytes = match unit {
        "GB" => 1e9,
        "GiB" => 2f64.powi(30),
        "TB" => 1e12,
        "TiB" => 2f64.powi(40),
        "PB" => 1e15,
        "PiB" => 2f64.powi(50),
        _ => return Err(format!("unit {unit:?}: one of GB, GiB, TB, TiB, PB, PiB")),
    };
    Ok(number * bytes)
}

/// `3x` (replicas) or `8+3` (erasure coding k+m).
fn redundancy(value: &str) -> Result<Redundancy, String> {
    let whole = |text: &str| text.trim().parse::<u32>().ok();
    if let Some(size) = value.strip_suffix('x').and_then(whole) {
        if (1..=REPLICAS_MAX).contains(&size) {
            return Ok(Redundancy::Replicated { size });
        }
        return Err(format!("{size} copies: 1 to {REPLICAS_MAX}"));
    }
    if let Some((k, m)) = value
        .split_once('+')
        .and_then(|(k, m)| Some((whole(k)?, whole(m)?)))
    {
        if k >= 1 && m >= 1 && k + m <= SHARDS_MAX {
            return Ok(Redundancy::Erasure { k, m });
        }
        return Err(format!(
            "{k}+{m}: k and m at least 1, k+m at most {SHARDS_MAX}"
        ));
    }
    Err("expected copies like 3x or erasure coding k+m like 8+3".into())
}

/// A share in (0, 1].
fn headroom(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(h) if h > 0.0 && h <= 1.0 => Ok(h),
        _ => Err("a share of the predicted peak, more than 0 and at most 1 (like 0.7)".into()),
    }
}

// ---------------------------------------------------------------------
// The catalog
// ---------------------------------------------------------------------

/// Hardware to build nodes from, and its prices. A node is the base, one
/// CPU, one memory and one NIC option, and `disks_per_node` disks of one
/// model, each disk one OSD.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Catalog {
    /// Only a label: prices are compared, never converted.
    #[serde(default = "usd")]
    currency: String,
    node: NodeBase,
    disk: Vec<DiskModel>,
    cpu: Vec<CpuOption>,
    memory: Vec<MemoryOption>,
    nic: Vec<NicOption>,
}

fn usd() -> String {
    "USD".into()
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NodeBase {
    /// Chassis, board, power, boot disks.
    base_price: f64,
    disks_per_node: Vec<u32>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct DiskModel {
    name: String,
    mib_per_sec: f64,
    iops: f64,
    /// Decimal terabytes, as disks are sold.
    capacity_tb: f64,
    price: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CpuOption {
    cores: u32,
    price: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct MemoryOption {
    size_gib: u32,
    price: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NicOption {
    gbit_per_sec: f64,
    price: f64,
}

/// A catalog from TOML, every key known and every value checked.
fn parse_catalog(text: &str) -> Result<Catalog, SizingError> {
    let catalog: Catalog = toml::from_str(text).map_err(|e| SizingError::Catalog {
        reason: e.to_string().trim().to_owned(),
    })?;
    check_catalog(&catalog).map_err(|reason| SizingError::Catalog { reason })?;
    Ok(catalog)
}

fn check_catalog(catalog: &Catalog) -> Result<(), String> {
    let positive = |what: String, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(format!("{what} = {v}: must be a number more than 0"))
        }
    };
    let price = |what: String, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(format!("{what} = {v}: a price of 0 or more"))
        }
    };
    let counts = [
        ("node.disks_per_node", catalog.node.disks_per_node.len()),
        ("disk", catalog.disk.len()),
        ("cpu", catalog.cpu.len()),
        ("memory", catalog.memory.len()),
        ("nic", catalog.nic.len()),
    ];
    for (list, count) in counts {
        if count == 0 || count > CATALOG_OPTIONS_MAX {
            return Err(format!(
                "{list}: {count} options; 1 to {CATALOG_OPTIONS_MAX}"
            ));
        }
    }
    price("node.base_price".into(), catalog.node.base_price)?;
    for &disks in &catalog.node.disks_per_node {
        if disks == 0 || disks > DISKS_PER_NODE_MAX {
            return Err(format!(
                "node.disks_per_node {disks}: 1 to {DISKS_PER_NODE_MAX}"
            ));
        }
    }
    for (i, d) in catalog.disk.iter().enumerate() {
        let at = |field: &str| format!("disk[{i}] ({:?}).{field}", d.name);
        if d.name.trim().is_empty() || catalog.disk[..i].iter().any(|o| o.name == d.name) {
            return Err(format!("disk[{i}].name {:?}: empty or given twice", d.name));
        }
        positive(at("mib_per_sec"), d.mib_per_sec)?;
        positive(at("iops"), d.iops)?;
        positive(at("capacity_tb"), d.capacity_tb)?;
        price(at("price"), d.price)?;
    }
    for (i, c) in catalog.cpu.iter().enumerate() {
        positive(format!("cpu[{i}].cores"), f64::from(c.cores))?;
        price(format!("cpu[{i}].price"), c.price)?;
    }
    for (i, m) in catalog.memory.iter().enumerate() {
        positive(format!("memory[{i}].size_gib"), f64::from(m.size_gib))?;
        price(format!("memory[{i}].price"), m.price)?;
    }
    for (i, n) in catalog.nic.iter().enumerate() {
        positive(format!("nic[{i}].gbit_per_sec"), n.gbit_per_sec)?;
        price(format!("nic[{i}].price"), n.price)?;
    }
    let shapes = counts.iter().map(|c| c.1).product::<usize>();
    if shapes > SHAPES_MAX {
        return Err(format!("{shapes} node shapes; at most {SHAPES_MAX}"));
    }
    Ok(())
}

/// One node's hardware, from a catalog.
#[derive(Clone, Debug, Serialize)]
struct Shape {
    disk: String,
    disks_per_node: u32,
    disk_mib_per_sec: f64,
    disk_iops: f64,
    disk_capacity_bytes: f64,
    cores_per_node: u32,
    memory_bytes_per_node: u64,
    nic_gbit_per_sec: f64,
    node_price: f64,
}

impl Shape {
    /// One node's amount of `resource` for `measure` in a pool keeping
    /// `data_fraction` of its raw bytes.
    fn amount(&self, resource: Resource, measure: Measure, data_fraction: f64) -> f64 {
        let disks = f64::from(self.disks_per_node);
        let raw = match resource {
            Resource::Osds => disks,
            Resource::Cores => f64::from(self.cores_per_node),
            Resource::DiskMib => disks * self.disk_mib_per_sec,
            Resource::DiskIops => disks * self.disk_iops,
            Resource::Net => self.nic_gbit_per_sec * MIB_PER_SEC_PER_GBIT,
        };
        if resource.scaled_for(measure) {
            raw * data_fraction
        } else {
            raw
        }
    }

    fn usable_bytes(&self, data_fraction: f64) -> f64 {
        f64::from(self.disks_per_node) * self.disk_capacity_bytes * data_fraction * FULL_RATIO
    }

    fn describe(&self) -> String {
        format!(
            "{} × {}, {} cores, {} GiB, {} Gbit/s",
            self.disks_per_node,
            self.disk,
            self.cores_per_node,
            self.memory_bytes_per_node >> 30,
            self.nic_gbit_per_sec
        )
    }
}

/// Every combination of the catalog's options, in its order.
fn shapes(catalog: &Catalog) -> Vec<Shape> {
    let mut all = Vec::new();
    for disk in &catalog.disk {
        for &disks in &catalog.node.disks_per_node {
            for cpu in &catalog.cpu {
                for memory in &catalog.memory {
                    for nic in &catalog.nic {
                        all.push(Shape {
                            disk: disk.name.clone(),
                            disks_per_node: disks,
                            disk_mib_per_sec: disk.mib_per_sec,
                            disk_iops: disk.iops,
                            disk_capacity_bytes: disk.capacity_tb * 1e12,
                            cores_per_node: cpu.cores,
                            memory_bytes_per_node: u64::from(memory.size_gib) << 30,
                            nic_gbit_per_sec: nic.gbit_per_sec,
                            node_price: catalog.node.base_price
                                + f64::from(disks) * disk.price
                                + cpu.price
                                + memory.price
                                + nic.price,
                        });
                    }
                }
            }
        }
    }
    all
}

// ---------------------------------------------------------------------
// Candidates and the answer
// ---------------------------------------------------------------------

/// One goal of the target against a candidate.
#[derive(Clone, Debug, Serialize)]
struct Figure {
    /// read, write, iops, md or capacity.
    measure: String,
    unit: &'static str,
    target: f64,
    /// The model's peak (throughputs) or the usable capacity.
    predicted: f64,
    /// What the target may use: headroom × peak, or the usable capacity.
    usable: f64,
    meets: bool,
    /// The resource that bounds the peak.
    limited_by: Option<Resource>,
    /// How sure that bound is: `shown` (the runs showed the resource
    /// limiting), `lower_bound` (they did not: the peak may be higher) or
    /// `assumed_line_rate` (no run measured it: the device's rated speed).
    limit_basis: Option<LimitBasis>,
}

/// How sure a candidate's bounding resource is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
enum LimitBasis {
    Shown,
    LowerBound,
    AssumedLineRate,
}

impl LimitBasis {
    fn of(term: &Term) -> LimitBasis {
        match (term.source, term.shown_to_limit) {
            (Source::Fitted, true) => LimitBasis::Shown,
            (Source::Fitted, false) => LimitBasis::LowerBound,
            _ => LimitBasis::AssumedLineRate,
        }
    }
}

/// A node shape at the fewest nodes that meet the target.
#[derive(Clone, Debug, Serialize)]
struct Candidate {
    nodes: u64,
    osds: u64,
    shape: Shape,
    price_total: f64,
    figures: Vec<Figure>,
}

/// A goal no shape reaches within `NODES_MAX` nodes.
#[derive(Clone, Debug, Serialize)]
struct Unmet {
    measure: String,
    unit: &'static str,
    target: f64,
    /// The most any shape offers at `NODES_MAX` nodes (usable share).
    best_usable: f64,
    best_shape: Option<String>,
}

/// What the search found.
#[derive(Debug)]
struct Search {
    chosen: Option<Candidate>,
    runners_up: Vec<Candidate>,
    unmet: Vec<Unmet>,
}

/// Each measure's fit, in `Measure::ALL` order; `None` when not fitted.
type Fits = [Option<Fit>; 4];

/// A shape's figures at `nodes` nodes for every goal of the target.
fn figures(fits: &Fits, target: &Target, shape: &Shape, nodes: u64) -> Vec<Figure> {
    let df = target.redundancy.data_fraction();
    let n = nodes as f64;
    let mut out = Vec::new();
    for measure in Measure::ALL {
        let (Some(goal), Some(fit)) = (target.measure(measure), &fits[measure as usize]) else {
            continue;
        };
        let (per_node, limited_by) = fit.predict(|r| Some(shape.amount(r, measure, df)));
        let predicted = per_node * n;
        out.push(Figure {
            measure: measure.name().into(),
            unit: measure.unit(),
            target: goal,
            predicted,
            usable: predicted * target.headroom,
            meets: predicted * target.headroom >= goal,
            limited_by,
            limit_basis: limited_by.and_then(|r| fit.term(r)).map(LimitBasis::of),
        });
    }
    if let Some(goal) = target.capacity_bytes {
        let usable = shape.usable_bytes(df) * n;
        out.push(Figure {
            measure: "capacity".into(),
            unit: "bytes",
            target: goal,
            predicted: usable,
            usable,
            meets: usable >= goal,
            limited_by: None,
            limit_basis: None,
        });
    }
    out
}

/// The fewest nodes (from the failure domains' minimum) at which `shape`
/// meets every goal, if at most `NODES_MAX`.
fn nodes_needed(fits: &Fits, target: &Target, shape: &Shape) -> Option<u64> {
    let one = figures(fits, target, shape, 1);
    let mut nodes = target.redundancy.nodes_min();
    for figure in &one {
        // Every figure grows in proportion to the node count.
        let per_node = figure.usable;
        if per_node <= 0.0 || !per_node.is_finite() {
            return None;
        }
        let need = (figure.target / per_node).ceil();
        if need > NODES_MAX as f64 {
            return None;
        }
        nodes = nodes.max(need as u64);
    }
    // The division above may round a hair low; step up until it holds.
    while nodes <= NODES_MAX {
        if figures(fits, target, shape, nodes).iter().all(|f| f.meets) {
            return Some(nodes);
        }
        nodes += 1;
    }
    None
}

/// The cheapest shape and node count meeting the target, a few runners
/// up, and, if none meets it, the goals out of reach.
fn search(fits: &Fits, target: &Target, shapes: &[Shape]) -> Search {
    let mut found: Vec<(usize, Candidate)> = Vec::new();
    for (index, shape) in shapes.iter().enumerate() {
        if let Some(nodes) = nodes_needed(fits, target, shape) {
            found.push((
                index,
                Candidate {
                    nodes,
                    osds: nodes * u64::from(shape.disks_per_node),
                    price_total: nodes as f64 * shape.node_price,
                    figures: figures(fits, target, shape, nodes),
                    shape: shape.clone(),
                },
            ));
        }
    }
    // Cheapest, then fewest nodes, then the catalog's order: the same
    // inputs always give the same answer.
    found.sort_by(|(ia, a), (ib, b)| {
        a.price_total
            .total_cmp(&b.price_total)
            .then(a.nodes.cmp(&b.nodes))
            .then(ia.cmp(ib))
    });
    let mut ranked = found.into_iter().map(|(_, c)| c);
    let chosen = ranked.next();
    // The runners-up are other builds (disk model × disks per node), each
    // at its cheapest: the same build with a bigger NIC says little.
    let mut builds: Vec<(String, u32)> = chosen
        .iter()
        .map(|c| (c.shape.disk.clone(), c.shape.disks_per_node))
        .collect();
    let mut runners_up = Vec::new();
    for candidate in ranked {
        let build = (candidate.shape.disk.clone(), candidate.shape.disks_per_node);
        if runners_up.len() == RUNNERS_UP_COUNT || builds.contains(&build) {
            continue;
        }
        builds.push(build);
        runners_up.push(candidate);
    }
    let unmet = if chosen.is_some() {
        Vec::new()
    } else {
        unmet(fits, target, shapes)
    };
    Search {
        chosen,
        runners_up,
        unmet,
    }
}

/// For each goal, the most any shape offers at `NODES_MAX` nodes; the
/// goals that offer falls short of come first.
fn unmet(fits: &Fits, target: &Target, shapes: &[Shape]) -> Vec<Unmet> {
    let mut best: Vec<Unmet> = Vec::new();
    for shape in shapes {
        for figure in figures(fits, target, shape, NODES_MAX) {
            match best.iter_mut().find(|u| u.measure == figure.measure) {
                Some(u) if u.best_usable >= figure.usable => {}
                Some(u) => {
                    u.best_usable = figure.usable;
                    u.best_shape = Some(shape.describe());
                }
                None => best.push(Unmet {
                    measure: figure.measure.clone(),
                    unit: figure.unit,
                    target: figure.target,
                    best_usable: figure.usable,
                    best_shape: Some(shape.describe()),
                }),
            }
        }
    }
    let short: Vec<Unmet> = best
        .iter()
        .filter(|u| u.best_usable < u.target)
        .cloned()
        .collect();
    // Each goal alone is reachable, but no one shape reaches them all.
    if short.is_empty() { best } else { short }
}

// ---------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------

/// The answer, printed as a table or as JSON.
#[derive(Debug, Serialize)]
struct Report {
    model: Vec<String>,
    runs: Vec<RunInfo>,
    target: TargetInfo,
    fits: Vec<Fit>,
    /// The cheapest configuration meeting every goal; `null` if none does.
    chosen: Option<Candidate>,
    runners_up: Vec<Candidate>,
    /// With no `chosen`: the goals out of reach and the best reached.
    unmet: Vec<Unmet>,
    assumptions: Vec<String>,
    notes: Vec<String>,
    currency: String,
    catalog: Catalog,
}

#[derive(Debug, Serialize)]
struct RunInfo {
    run: String,
    plan: String,
    hostname: String,
    cpus: u64,
    points: usize,
}

#[derive(Debug, Serialize)]
struct TargetInfo {
    read_mib_per_sec: Option<f64>,
    write_mib_per_sec: Option<f64>,
    iops: Option<f64>,
    md_ops_per_sec: Option<f64>,
    capacity_bytes: Option<f64>,
    redundancy: String,
    data_fraction: f64,
    nodes_min: u64,
    headroom: f64,
}

/// The model, as the output states it.
fn model_text() -> Vec<String> {
    vec![
        "Per measure, a bottleneck (roofline) model: throughput = min over resources r of a_r × R_r, \
         R_r the cluster's total of r (OSDs, cores, disk MiB/s or IOPS, NIC MiB/s)."
            .into(),
        "Writes: the disk and NIC terms use R × data_fraction, as every byte written lands \
         1/data_fraction times."
            .into(),
        "a_r ≥ T/R_r at every point, with equality where r binds: the envelope is max T/R_r; the \
         coefficient is the median of T/R_r over the points where r binds under the envelope."
            .into(),
        "A resource that never varied, or never bound alone by 5 %, is not shown to limit: its \
         coefficient is a lower bound, so predictions it bounds are pessimistic."
            .into(),
        "Fit error per point: |predicted − measured| / measured.".into(),
    ]
}

/// The answer from checked runs, a target and a catalog: pure.
fn advise(runs: &[Run], target: &Target, catalog: &Catalog) -> Result<Report, SizingError> {
    let (samples, mut notes) = samples(runs)?;
    if samples.len() < 2 {
        return Err(SizingError::Run {
            run: runs
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reason: format!("{} point(s) in all; sizing needs at least 2", samples.len()),
        });
    }
    let fits = fit_all(&samples, target, &mut notes)?;
    let shapes = shapes(catalog);
    let memory_ok: Vec<Shape> = shapes
        .into_iter()
        .filter(|s| s.memory_bytes_per_node >= u64::from(s.disks_per_node) * OSD_MEMORY_MIN_BYTES)
        .collect();
    if memory_ok.is_empty() {
        return Err(SizingError::Catalog {
            reason: format!(
                "no node shape has {} GiB of memory per disk (OSD)",
                OSD_MEMORY_MIN_BYTES >> 30
            ),
        });
    }
    let found = search(&fits, target, &memory_ok);
    notes.extend(limit_notes(&fits, found.chosen.as_ref()));
    Ok(Report {
        model: model_text(),
        runs: run_infos(runs),
        target: target_info(target),
        assumptions: assumptions(runs, &samples, &fits, target, catalog),
        fits: fits.into_iter().flatten().collect(),
        chosen: found.chosen,
        runners_up: found.runners_up,
        unmet: found.unmet,
        notes,
        currency: catalog.currency.clone(),
        catalog: catalog.clone(),
    })
}

/// Fits every measure the points have; a measure the target asks for
/// must fit, the others are shown when they do.
fn fit_all(
    samples: &[Sample],
    target: &Target,
    notes: &mut Vec<String>,
) -> Result<Fits, SizingError> {
    let mut fits: Fits = [None, None, None, None];
    for measure in Measure::ALL {
        let wanted = target.measure(measure).is_some();
        let count = samples
            .iter()
            .filter(|s| s.measure(measure).is_some())
            .count();
        if count == 0 && wanted {
            let reason = match measure {
                Measure::Md => "the runs have no create or stat phase (metadata operations); \
                                run a sweep with a metadata workload"
                    .into(),
                _ => format!("no point of the runs measured {}", measure.name()),
            };
            return Err(SizingError::Unmeasured { measure, reason });
        }
        match fit_measure(measure, samples) {
            Ok(fit) => fits[measure as usize] = Some(fit),
            Err(e) if wanted => return Err(e),
            Err(_) if count > 0 => notes.push(format!(
                "{}: only {count} point measured it; not fitted",
                measure.name()
            )),
            Err(_) => {}
        }
    }
    Ok(fits)
}

/// Warnings on the chosen configuration's limits and on fits.
fn limit_notes(fits: &Fits, chosen: Option<&Candidate>) -> Vec<String> {
    let mut notes = Vec::new();
    for fit in fits.iter().flatten() {
        for term in &fit.terms {
            if let (Some(rate), Some(a)) = (term.resource.line_rate(), term.coefficient)
                && term.source == Source::Fitted
                && a > rate * (1.0 + BINDING_TOLERANCE)
            {
                notes.push(format!(
                    "{}: {} coefficient {} is above the line rate: the runs beat the resource \
                     they recorded (page cache?), or recorded it too low",
                    fit.measure.name(),
                    term.resource.name(),
                    fixed(a, 3)
                ));
            }
        }
    }
    for figure in chosen.map(|c| c.figures.as_slice()).unwrap_or_default() {
        let Some(r) = figure.limited_by else { continue };
        match figure.limit_basis {
            Some(LimitBasis::LowerBound) => notes.push(format!(
                "{}: bounded by {}, which the runs never showed limiting: the figure is a lower \
                 bound; a sweep that varies {} would tighten it",
                figure.measure,
                r.name(),
                r.name()
            )),
            Some(LimitBasis::AssumedLineRate) => notes.push(format!(
                "{}: bounded by {} at the hardware's rated speed, which no run measured; a \
                 sweep that limits it would show what Cairn gets from it",
                figure.measure,
                r.name()
            )),
            _ => {}
        }
    }
    notes
}

fn run_infos(runs: &[Run]) -> Vec<RunInfo> {
    runs.iter()
        .map(|r| RunInfo {
            run: r.name.clone(),
            plan: r.summary.plan.name.clone(),
            hostname: r
                .summary
                .machine
                .as_ref()
                .map(|m| m.hostname.clone())
                .unwrap_or_default(),
            cpus: r.summary.machine.as_ref().map_or(0, |m| m.cpus),
            points: r.summary.points.len(),
        })
        .collect()
}

fn target_info(target: &Target) -> TargetInfo {
    TargetInfo {
        read_mib_per_sec: target.measure(Measure::Read),
        write_mib_per_sec: target.measure(Measure::Write),
        iops: target.measure(Measure::Iops),
        md_ops_per_sec: target.measure(Measure::Md),
        capacity_bytes: target.capacity_bytes,
        redundancy: target.redundancy.to_string(),
        data_fraction: target.redundancy.data_fraction(),
        nodes_min: target.redundancy.nodes_min(),
        headroom: target.headroom,
    }
}

/// Everything the answer takes for granted, in words.
fn assumptions(
    runs: &[Run],
    samples: &[Sample],
    fits: &Fits,
    target: &Target,
    catalog: &Catalog,
) -> Vec<String> {
    let mut hosts: Vec<String> = run_infos(runs)
        .iter()
        .map(|r| format!("{} ({} cpus)", r.hostname, r.cpus))
        .collect();
    hosts.sort();
    hosts.dedup();
    let memory_min = samples
        .iter()
        .filter_map(|s| s.memory_bytes.map(|m| m / s.osds))
        .reduce(f64::min);
    let mut out = vec![
        format!(
            "The coefficients measured on {} hold for the candidates' hardware: per OSD, per core \
             (as fast as the runs'), per disk and NIC MiB/s.",
            hosts.join(", ")
        ),
        "Each disk is one OSD; a node is one failure domain; throughput grows in proportion to \
         the node count (no switch, monitor or client limit is modelled)."
            .into(),
        format!(
            "Nodes: from {} (one per copy or shard of {}) to {NODES_MAX}.",
            target.redundancy.nodes_min(),
            target.redundancy
        ),
        format!(
            "Headroom: every throughput goal must be at most {} × the predicted peak.",
            target.headroom
        ),
        format!(
            "Usable capacity = raw × data fraction ({}) × {FULL_RATIO} (full ratio).",
            fixed(target.redundancy.data_fraction(), 4)
        ),
        format!(
            "Memory: each OSD needs {} GiB (Ceph's osd_memory_target); shapes with less are left \
             out.{}",
            OSD_MEMORY_MIN_BYTES >> 30,
            memory_min.map_or(String::new(), |m| format!(
                " The runs had as little as {} GiB per OSD.",
                fixed(m / f64::from(1u32 << 30), 2)
            ))
        ),
        format!(
            "Prices in {}, as the catalog gives them; node price = base + disks × disk + CPU + \
             memory + NIC; cost = nodes × node price.",
            catalog.currency
        ),
    ];
    for fit in fits.iter().flatten() {
        for term in fit.terms.iter().filter(|t| t.source != Source::Fitted) {
            out.push(match term.source {
                Source::AssumedLineRate => format!(
                    "{}: no run recorded {}; the device's line rate is assumed (coefficient 1.0).",
                    fit.measure.name(),
                    term.resource.name()
                ),
                _ => format!(
                    "{}: no run recorded {}; it is left out of the model.",
                    fit.measure.name(),
                    term.resource.name()
                ),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------
// The edge: files in, text out
// ---------------------------------------------------------------------

pub fn run(args: &SizingArgs) -> CliResult {
    let target = parse_target(&args.target)?;
    if args.from.len() > RUNS_MAX {
        return Err(format!("{} runs given; at most {RUNS_MAX}", args.from.len()).into());
    }
    let runs = args
        .from
        .iter()
        .map(|dir| read_run(dir))
        .collect::<Result<Vec<_>, _>>()?;
    let (catalog, source) = match &args.catalog {
        Some(path) => (read_catalog(path)?, path.display().to_string()),
        None => (
            parse_catalog(DEFAULT_CATALOG)?,
            "built-in (2026 prices, assumed)".into(),
        ),
    };
    let mut report = advise(&runs, &target, &catalog)?;
    report.assumptions.push(format!("Catalog: {source}."));
    if args.json {
        return print_json(&report);
    }
    print_report(&report);
    Ok(())
}

fn read_bounded(path: &Path, bytes_max: u64) -> Result<String, String> {
    let length = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if length > bytes_max {
        return Err(format!(
            "{}: {length} bytes; at most {bytes_max}",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_run(dir: &Path) -> Result<Run, SizingError> {
    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let fail = |reason: String| SizingError::Run {
        run: dir.display().to_string(),
        reason,
    };
    let text = read_bounded(&dir.join("summary.json"), SUMMARY_BYTES_MAX).map_err(fail)?;
    let summary: InSummary = serde_json::from_str(&text)
        .map_err(|e| fail(format!("summary.json is not a sweep's summary: {e}")))?;
    Ok(Run { name, summary })
}

fn read_catalog(path: &Path) -> Result<Catalog, SizingError> {
    let text =
        read_bounded(path, CATALOG_BYTES_MAX).map_err(|reason| SizingError::Catalog { reason })?;
    parse_catalog(&text).map_err(|e| match e {
        SizingError::Catalog { reason } => SizingError::Catalog {
            reason: format!("{}: {reason}", path.display()),
        },
        other => other,
    })
}

fn print_report(report: &Report) {
    println!("Model:");
    for line in &report.model {
        println!("  {line}");
    }
    let runs: Vec<String> = report
        .runs
        .iter()
        .map(|r| {
            format!(
                "{} ({:?}, {} points, {})",
                r.run, r.plan, r.points, r.hostname
            )
        })
        .collect();
    println!("Runs: {}\n", runs.join("; "));
    for fit in &report.fits {
        print_fit(fit);
    }
    print_target(&report.target);
    match &report.chosen {
        Some(chosen) => print_chosen(chosen, &report.runners_up, &report.currency),
        None => print_unmet(&report.unmet),
    }
    println!("\nAssumptions:");
    for line in &report.assumptions {
        println!("  - {line}");
    }
    if !report.notes.is_empty() {
        println!("\nNotes:");
        for line in &report.notes {
            println!("  - {line}");
        }
    }
}

fn print_fit(fit: &Fit) {
    println!(
        "Fit of {} ({}): {} points, error mean {} %, max {} %",
        fit.measure.name(),
        fit.unit,
        fit.points.len(),
        fixed(fit.error_mean * 100.0, 1),
        fixed(fit.error_max * 100.0, 1)
    );
    let rows = fit
        .terms
        .iter()
        .map(|t| {
            let shown = match (t.source, t.shown_to_limit) {
                (Source::Fitted, true) => "yes".to_owned(),
                (Source::Fitted, false) if !t.varied => "no (never varied): lower bound".into(),
                (Source::Fitted, false) => "no: lower bound".into(),
                (Source::AssumedLineRate, _) => "not measured: line rate assumed".into(),
                (Source::LeftOut, _) => "not measured: left out".into(),
            };
            vec![
                t.resource.name().to_owned(),
                t.coefficient.map_or("-".into(), |a| fixed(a, 3)),
                t.unit.clone(),
                shown,
                some_of(&t.binds_at),
            ]
        })
        .collect();
    println!(
        "{}\n",
        table(
            &[
                "resource",
                "coefficient",
                "unit",
                "shown to limit",
                "binds at"
            ],
            rows
        )
    );
}

/// The first few labels and how many more (the JSON has them all).
fn some_of(labels: &[String]) -> String {
    const SHOWN_COUNT: usize = 2;
    let mut text = labels
        .iter()
        .take(SHOWN_COUNT)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if labels.len() > SHOWN_COUNT {
        text.push_str(&format!(" (+{} more)", labels.len() - SHOWN_COUNT));
    }
    text
}

fn print_target(target: &TargetInfo) {
    let mut goals = Vec::new();
    let throughput = [
        ("read", target.read_mib_per_sec, "MiB/s"),
        ("write", target.write_mib_per_sec, "MiB/s"),
        ("iops", target.iops, "ops/s"),
        ("md", target.md_ops_per_sec, "ops/s"),
    ];
    for (name, value, unit) in throughput {
        if let Some(v) = value {
            goals.push(format!("{name} ≥ {} {unit}", fixed(v, 0)));
        }
    }
    if let Some(bytes) = target.capacity_bytes {
        goals.push(format!("capacity ≥ {} TB usable", fixed(bytes / 1e12, 1)));
    }
    println!(
        "Target: {}; redundancy {} (data fraction {}, at least {} nodes); headroom {}",
        goals.join(", "),
        target.redundancy,
        fixed(target.data_fraction, 4),
        target.nodes_min,
        target.headroom
    );
}

fn amount_text(unit: &str, value: f64) -> String {
    if unit == "bytes" {
        format!("{} TB", fixed(value / 1e12, 1))
    } else {
        format!("{} {unit}", grouped(value.round() as u64))
    }
}

fn print_chosen(chosen: &Candidate, runners_up: &[Candidate], currency: &str) {
    println!(
        "\nChosen: {} nodes × [{}] at {} {currency} each = {} {currency} ({} OSDs)",
        chosen.nodes,
        chosen.shape.describe(),
        grouped(chosen.shape.node_price.round() as u64),
        grouped(chosen.price_total.round() as u64),
        chosen.osds
    );
    let rows = chosen
        .figures
        .iter()
        .map(|f| {
            let limit = match (f.limited_by, f.limit_basis) {
                (Some(r), Some(LimitBasis::LowerBound)) => format!("{} (lower bound)", r.name()),
                (Some(r), Some(LimitBasis::AssumedLineRate)) => {
                    format!("{} (line rate, assumed)", r.name())
                }
                (Some(r), _) => r.name().to_owned(),
                (None, _) => "-".into(),
            };
            vec![
                f.measure.clone(),
                amount_text(f.unit, f.target),
                amount_text(f.unit, f.predicted),
                amount_text(f.unit, f.usable),
                limit,
                if f.meets { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    let header = [
        "goal",
        "target",
        "predicted",
        "usable",
        "limited by",
        "meets",
    ];
    println!("{}", table(&header, rows));
    if runners_up.is_empty() {
        return;
    }
    println!("Runners-up:");
    let rows = runners_up
        .iter()
        .map(|c| {
            vec![
                c.shape.describe(),
                c.nodes.to_string(),
                grouped(c.shape.node_price.round() as u64),
                grouped(c.price_total.round() as u64),
            ]
        })
        .collect();
    let header = ["shape", "nodes", "node price", "total"];
    println!("{}", table(&header, rows));
}

fn print_unmet(unmet: &[Unmet]) {
    println!("\nNo configuration of the catalog meets the target within {NODES_MAX} nodes.");
    if unmet.iter().all(|u| u.best_usable >= u.target) {
        println!("Each goal alone is within reach, but no one node shape reaches them all.");
    }
    let rows = unmet
        .iter()
        .map(|u| {
            vec![
                u.measure.clone(),
                amount_text(u.unit, u.target),
                amount_text(u.unit, u.best_usable),
                u.best_shape.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let header = [
        "goal",
        "target",
        &format!("best usable at {NODES_MAX} nodes"),
        "by shape",
    ];
    println!("{}", table(&header, rows));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point with its resources and phases.
    struct Synthetic {
        osds: f64,
        cores: f64,
        disk_mib_per_sec: f64,
        disk_iops: f64,
        data_fraction: f64,
    }

    /// The known rooflines the synthetic points follow:
    /// write = min(40/OSD, 0.5 × disk MiB/s × data fraction, 100/core),
    /// read = min(60/OSD, 0.8 × disk MiB/s, 200/core),
    /// rand IOPS = min(500/OSD, 0.5 × disk IOPS, 1000/core).
    fn point_of(label: &str, s: &Synthetic) -> InPoint {
        let write = (40.0 * s.osds)
            .min(0.5 * s.disk_mib_per_sec * s.data_fraction)
            .min(100.0 * s.cores);
        let read = (60.0 * s.osds)
            .min(0.8 * s.disk_mib_per_sec)
            .min(200.0 * s.cores);
        let iops = (500.0 * s.osds)
            .min(0.5 * s.disk_iops)
            .min(1000.0 * s.cores);
        let phase = |name: &str, mib: f64, iops: f64| InPhase {
            phase: name.into(),
            median_mib_per_sec: Some(mib),
            median_iops: Some(iops),
        };
        InPoint {
            point: 0,
            label: label.into(),
            resources: Some(InResources {
                osds: Some(s.osds),
                cores: Some(s.cores),
                disk_mib_per_sec: Some(s.disk_mib_per_sec),
                disk_iops: Some(s.disk_iops),
                memory_bytes: Some(s.osds * 4.0 * f64::from(1u32 << 30)),
                net_mib_per_sec: None,
                data_fraction: Some(s.data_fraction),
            }),
            phases: vec![
                phase("write", write, write / 4.0),
                phase("rand", read, iops),
            ],
            settings: InSettings::default(),
        }
    }

    fn run_of(name: &str, points: Vec<InPoint>) -> Run {
        Run {
            name: name.into(),
            summary: InSummary {
                plan: InPlan::default(),
                machine: None,
                points,
            },
        }
    }

    /// Two runs whose four points each bind a different resource of the
    /// write roofline (disk, OSDs, cores, OSDs).
    fn runs() -> Vec<Run> {
        let s = |osds, cores, disk_mib_per_sec, disk_iops, data_fraction| Synthetic {
            osds,
            cores,
            disk_mib_per_sec,
            disk_iops,
            data_fraction,
        };
        vec![
            run_of(
                "A",
                vec![
                    point_of("slow disk", &s(3.0, 8.0, 300.0, 2000.0, 1.0 / 3.0)),
                    point_of("fast disk", &s(3.0, 8.0, 3000.0, 30000.0, 1.0 / 3.0)),
                ],
            ),
            run_of(
                "B",
                vec![
                    point_of("one core", &s(6.0, 1.0, 6000.0, 60000.0, 1.0 / 3.0)),
                    point_of("size 2", &s(6.0, 8.0, 1200.0, 12000.0, 0.5)),
                ],
            ),
        ]
    }

    /// One disk model (300 MiB/s, 1 TB, 100), 2 or 4 disks, 2 or 4
    /// cores, 16 GiB, 10 Gbit/s, a 1000 base: four shapes priced 1500,
    /// 1700 (2 disks, 4 cores), 1700 (4 disks, 2 cores), 1900.
    const SMALL_CATALOG: &str = r#"
[node]
base_price = 1000.0
disks_per_node = [2, 4]
[[disk]]
name = "D"
mib_per_sec = 300.0
iops = 1000.0
capacity_tb = 1.0
price = 100.0
[[cpu]]
cores = 2
price = 100.0
[[cpu]]
cores = 4
price = 300.0
[[memory]]
size_gib = 16
price = 100.0
[[nic]]
gbit_per_sec = 10.0
price = 100.0
"#;

    fn coefficient(fit: &Fit, resource: Resource) -> f64 {
        fit.term(resource)
            .and_then(|t| t.coefficient)
            .expect("a coefficient")
    }

    fn close(value: f64, expected: f64) -> bool {
        (value - expected).abs() <= 0.01 * expected.abs()
    }

    fn fits_of(runs: &[Run]) -> Vec<Fit> {
        let (samples, _) = samples(runs).expect("good points");
        Measure::ALL
            .iter()
            .filter_map(|&m| fit_measure(m, &samples).ok())
            .collect()
    }

    #[test]
    fn the_fit_recovers_a_known_roofline_with_no_error() {
        let fits = fits_of(&runs());
        let write = &fits[1];
        assert_eq!(write.measure, Measure::Write);
        assert!(close(coefficient(write, Resource::Osds), 40.0));
        assert!(close(coefficient(write, Resource::DiskMib), 0.5));
        assert!(close(coefficient(write, Resource::Cores), 100.0));
        assert!(write.error_max < 1e-9, "{}", write.error_max);
        for r in [Resource::Osds, Resource::DiskMib, Resource::Cores] {
            let term = write.term(r).expect("a term");
            assert!(term.shown_to_limit, "{r:?} binds alone somewhere");
        }
        let disk = write.term(Resource::DiskMib).expect("disk");
        assert_eq!(disk.binds_at, ["A: slow disk"]);
        let net = write.term(Resource::Net).expect("net");
        assert_eq!(net.source, Source::AssumedLineRate);
        assert!(!net.shown_to_limit);
        let iops = &fits[2];
        assert!(close(coefficient(iops, Resource::Osds), 500.0));
        assert!(close(coefficient(iops, Resource::DiskIops), 0.5));
        assert!(close(coefficient(iops, Resource::Cores), 1000.0));
        assert!(iops.error_max < 1e-9);
    }

    #[test]
    fn another_systems_points_stay_out_of_the_fit() {
        let mut with_ceph = runs();
        let mut ceph = point_of(
            "system=ceph",
            &Synthetic {
                osds: 3.0,
                cores: 8.0,
                disk_mib_per_sec: 3000.0,
                disk_iops: 30000.0,
                data_fraction: 1.0 / 3.0,
            },
        );
        // Far off Cairn's roofline: it would move every coefficient.
        for phase in &mut ceph.phases {
            phase.median_mib_per_sec = Some(1.0);
        }
        ceph.settings.system = Some("ceph".into());
        with_ceph[0].summary.points.push(ceph);
        let (kept, notes) = samples(&with_ceph).expect("good points");
        assert_eq!(kept.len(), 4, "the Ceph point is left out");
        assert!(notes.iter().any(|n| n.contains("Ceph")), "{notes:?}");
        let write = &fits_of(&with_ceph)[1];
        assert!(close(coefficient(write, Resource::Osds), 40.0));
        assert!(write.error_max < 1e-9, "{}", write.error_max);
    }

    #[test]
    fn a_resource_that_never_binds_alone_gets_a_lower_bound() {
        let fits = fits_of(&runs());
        let read = &fits[0];
        assert_eq!(read.measure, Measure::Read);
        assert!(close(coefficient(read, Resource::Osds), 60.0));
        assert!(close(coefficient(read, Resource::Cores), 200.0));
        // The disk never limited reads (0.8 × disk was always above 60 per
        // OSD): only the tie at "slow disk" bounds it, at 180/300.
        let disk = read.term(Resource::DiskMib).expect("disk");
        assert!(close(disk.coefficient.expect("fitted"), 0.6));
        assert!(!disk.shown_to_limit);
        assert!(read.error_max < 1e-9);
    }

    #[test]
    fn one_noisy_point_does_not_set_a_coefficient_alone() {
        let mut runs = runs();
        let s = Synthetic {
            osds: 3.0,
            cores: 8.0,
            disk_mib_per_sec: 3000.0,
            disk_iops: 30000.0,
            data_fraction: 1.0 / 3.0,
        };
        let mut lucky = point_of("lucky", &s);
        lucky.phases[0].median_mib_per_sec = Some(126.0);
        runs[0].summary.points.push(lucky);
        runs[0].summary.points.push(point_of("again", &s));
        let fits = fits_of(&runs);
        let write = &fits[1];
        let osds = write.term(Resource::Osds).expect("osds");
        assert!(close(osds.envelope.expect("envelope"), 42.0));
        assert!(close(coefficient(write, Resource::Osds), 40.0));
        assert!(write.error_max > 0.04, "the lucky point stands out");
    }

    #[test]
    fn the_cheapest_configuration_is_the_one_computed_by_hand() {
        let catalog = parse_catalog(SMALL_CATALOG).expect("catalog");
        // Per node, 4 disks and 2 cores write min(160, 0.5 × 1200 / 3,
        // 200, 1192 / 3) = 160 MiB/s at 3x; 2 disks give 80. At headroom
        // 0.5, 1000 MiB/s needs a 2000 peak: 13 nodes of 1700 (22100)
        // against 25 of 1500 (37500).
        let target = parse_target("write=1000MiB/s,headroom=0.5").expect("target");
        let report = advise(&runs(), &target, &catalog).expect("an answer");
        let chosen = report.chosen.expect("a configuration");
        assert_eq!(
            (
                chosen.nodes,
                chosen.shape.disks_per_node,
                chosen.shape.cores_per_node
            ),
            (13, 4, 2)
        );
        assert!(close(chosen.price_total, 22_100.0));
        assert_eq!(chosen.figures[0].limited_by, Some(Resource::Osds));
        assert_eq!(chosen.figures[0].limit_basis, Some(LimitBasis::Shown));
        assert!(close(chosen.figures[0].predicted, 2080.0));
        // The one other build, 2 disks a node, at its cheapest (2 cores).
        assert_eq!(report.runners_up.len(), 1);
        assert_eq!(report.runners_up[0].shape.disks_per_node, 2);
        assert!(close(report.runners_up[0].price_total, 37_500.0));
        // 20 TB usable at 3x: 4 TB raw per node × 1/3 × 0.85 = 1.133 TB,
        // so 18 nodes: 30600, against 36 of the 2-disk shape.
        let target = parse_target("write=1000MiB/s,headroom=0.5,capacity=20TB").expect("target");
        let chosen = advise(&runs(), &target, &catalog)
            .expect("an answer")
            .chosen
            .expect("one");
        assert_eq!(
            (
                chosen.nodes,
                chosen.shape.disks_per_node,
                chosen.shape.cores_per_node
            ),
            (18, 4, 2)
        );
        assert!(close(chosen.price_total, 30_600.0));
    }

    #[test]
    fn failure_domains_set_the_fewest_nodes() {
        let catalog = parse_catalog(SMALL_CATALOG).expect("catalog");
        let target = parse_target("write=10MiB/s,redundancy=8+3").expect("target");
        let chosen = advise(&runs(), &target, &catalog)
            .expect("an answer")
            .chosen
            .expect("one");
        assert_eq!(chosen.nodes, 11);
        assert_eq!(chosen.shape.disks_per_node, 2);
    }

    #[test]
    fn an_unreachable_target_names_the_goal_and_the_best_reached() {
        let catalog = parse_catalog(SMALL_CATALOG).expect("catalog");
        let target = parse_target("write=1000000MiB/s,headroom=0.5").expect("target");
        let report = advise(&runs(), &target, &catalog).expect("an answer");
        assert!(report.chosen.is_none());
        assert_eq!(report.unmet.len(), 1);
        assert_eq!(report.unmet[0].measure, "write");
        // 1000 nodes × 160 MiB/s × 0.5.
        assert!(close(report.unmet[0].best_usable, 80_000.0));
    }

    #[test]
    fn targets_parse_with_their_units() {
        let t = parse_target(
            "read=2GB/s, write=1GiB/s,iops=50000,md=20000,capacity=100TB,redundancy=8+3,headroom=0.6",
        )
        .expect("a good target");
        assert!(close(t.measure(Measure::Read).expect("read"), 2e9 / MIB));
        assert!(close(t.measure(Measure::Write).expect("write"), 1024.0));
        assert_eq!(t.measure(Measure::Iops), Some(50_000.0));
        assert_eq!(t.measure(Measure::Md), Some(20_000.0));
        assert_eq!(t.capacity_bytes, Some(1e14));
        assert_eq!(t.redundancy, Redundancy::Erasure { k: 8, m: 3 });
        assert!(close(t.redundancy.data_fraction(), 8.0 / 11.0));
        assert_eq!(t.headroom, 0.6);
        let t = parse_target("capacity=1PiB").expect("capacity alone");
        assert_eq!(t.redundancy, Redundancy::Replicated { size: 3 });
        assert_eq!(t.headroom, HEADROOM_DEFAULT);
    }

    fn refused_target(text: &str) -> String {
        match parse_target(text) {
            Ok(t) => panic!("accepted {text:?}: {t:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_targets_are_refused_naming_the_key() {
        let unknown = refused_target("read=1GB/s,colour=blue");
        assert!(
            unknown.contains("colour") && unknown.contains("unknown key"),
            "{unknown}"
        );
        let unit = refused_target("read=2Gb/s");
        assert!(
            unit.contains("read=2Gb/s") && unit.contains("GiB/s"),
            "{unit}"
        );
        let twice = refused_target("read=1GB/s,read=2GB/s");
        assert!(twice.contains("twice"), "{twice}");
        let copies = refused_target("read=1GB/s,redundancy=0x");
        assert!(copies.contains("redundancy=0x"), "{copies}");
        let headroom = refused_target("read=1GB/s,headroom=1.5");
        assert!(headroom.contains("headroom"), "{headroom}");
        let negative = refused_target("iops=-5");
        assert!(negative.contains("iops"), "{negative}");
        let no_goal = refused_target("redundancy=3x");
        assert!(no_goal.contains("no goal"), "{no_goal}");
        let shape = refused_target("read");
        assert!(shape.contains("key=value"), "{shape}");
    }

    fn refused_catalog(text: &str) -> String {
        match parse_catalog(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_built_in_catalog_parses_and_bad_catalogs_are_refused() {
        let catalog = parse_catalog(DEFAULT_CATALOG).expect("the built-in catalog");
        assert_eq!(catalog.disk.len(), 3);
        let unknown =
            refused_catalog(&SMALL_CATALOG.replace("iops = 1000.0", "iops = 1000.0\ncolour = 1"));
        assert!(unknown.contains("colour"), "{unknown}");
        let negative =
            refused_catalog(&SMALL_CATALOG.replace("mib_per_sec = 300.0", "mib_per_sec = -3.0"));
        assert!(
            negative.contains("disk[0]") && negative.contains("mib_per_sec"),
            "{negative}"
        );
        let zero = refused_catalog(&SMALL_CATALOG.replace("[2, 4]", "[0, 4]"));
        assert!(zero.contains("disks_per_node"), "{zero}");
        let empty = refused_catalog(&SMALL_CATALOG.replace("[2, 4]", "[]"));
        assert!(empty.contains("disks_per_node"), "{empty}");
        let no_nic = refused_catalog(SMALL_CATALOG.split("[[nic]]").next().unwrap_or_default());
        assert!(no_nic.contains("nic"), "{no_nic}");
    }

    #[test]
    fn too_few_points_or_an_unmeasured_goal_are_refused() {
        let catalog = parse_catalog(SMALL_CATALOG).expect("catalog");
        let target = parse_target("write=100MiB/s").expect("target");
        let mut one = runs();
        one.truncate(1);
        one[0].summary.points.truncate(1);
        let error = advise(&one, &target, &catalog).expect_err("one point");
        assert!(error.to_string().contains("at least 2"), "{error}");
        let md = parse_target("md=20000").expect("target");
        let error = advise(&runs(), &md, &catalog).expect_err("no metadata phases");
        assert!(
            matches!(
                error,
                SizingError::Unmeasured {
                    measure: Measure::Md,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("create or stat"), "{error}");
        let mut bare = runs();
        bare[1].summary.points[0].resources = None;
        let error = advise(&bare, &target, &catalog).expect_err("no resources");
        assert!(
            error.to_string().contains("B") && error.to_string().contains("resources"),
            "{error}"
        );
    }

    #[test]
    fn metadata_is_the_lower_of_create_and_stat() {
        let phases =
            [("create", 300.0), ("stat", 900.0), ("write", 5.0)].map(|(name, iops)| InPhase {
                phase: name.into(),
                median_mib_per_sec: None,
                median_iops: Some(iops),
            });
        assert_eq!(Measure::Md.in_phases(&phases), Some(300.0));
        assert_eq!(Measure::Read.in_phases(&phases), None);
    }
}

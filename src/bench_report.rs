//! Reports of benchmark runs: a self-contained HTML page with SVG plots
//! (plotters) next to a run's JSON, and `cairn bench compare A B`.
//!
//! A sweep's page shows, for each phase, every point's median throughput
//! with its minimum and maximum over the repeats, its p99 latency, and,
//! for each setting the matrix sweeps, the median against that setting
//! (one line per combination of the others); then the numbers in a table
//! and the machine the run was on. The page needs nothing but itself: the
//! plots are inline SVG.

use crate::output::{CliResult, fixed, print_json, table};
use clap::Args;
use plotters::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Plot size in pixels.
const PLOT_SIZE: (u32, u32) = (760, 380);
/// Series colours, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// What the run was on, as its report records it.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub(crate) struct Machine {
    pub hostname: String,
    pub kernel: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    pub cairn_version: String,
}

impl Machine {
    /// This machine, now.
    pub(crate) fn here() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let memory_kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        Machine {
            hostname: read("/proc/sys/kernel/hostname").trim().to_owned(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            memory_bytes: memory_kib * 1024,
            cairn_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// One bar of a phase's plot: a point's median and spread.
pub(crate) struct Bar<'a> {
    pub label: &'a str,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One line of a plot against a swept setting: its name and its
/// `(setting value, median)` points, in the setting's order.
pub(crate) struct Line {
    pub name: String,
    pub points: Vec<(usize, f64)>,
}

/// An SVG bar chart of `bars` (median, with a min–max whisker).
pub(crate) fn bar_chart(title: &str, unit: &str, bars: &[Bar<'_>]) -> CliResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let top = bars.iter().map(|b| b.max.max(b.median)).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(70)
            .y_label_area_size(70)
            // An integer range's segments include its end: n bars, 0..n-1.
            .build_cartesian_2d((0..bars.len().saturating_sub(1)).into_segmented(), 0.0..top)?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.to_owned()).collect();
        let label_of = move |x: &SegmentValue<usize>| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1))
            .x_label_formatter(&label_of)
            .y_desc(unit)
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
            let mut rect = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), bar.median),
                ],
                PALETTE[0].mix(0.7).filled(),
            );
            rect.set_margin(0, 0, 8, 8);
            rect
        }))?;
        chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
            PathElement::new(
                vec![
                    (SegmentValue::CenterOf(i), bar.min),
                    (SegmentValue::CenterOf(i), bar.max),
                ],
                BLACK.stroke_width(2),
            )
        }))?;
        root.present()?;
    }
    Ok(svg)
}

/// An SVG line chart: `lines` against a setting whose values are
/// `ticks` (shown evenly spaced, in order).
pub(crate) fn line_chart(
    title: &str,
    (setting, ticks): (&str, &[String]),
    unit: &str,
    lines: &[Line],
) -> CliResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let top = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.1 } else { 1.0 };
        let last = ticks.len().saturating_sub(1).max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0usize..last, 0.0..top)?;
        let names = ticks.to_vec();
        let tick_of = move |x: &usize| names.get(*x).cloned().unwrap_or_default();
        chart
            .configure_mesh()
            .x_labels(ticks.len().max(2))
            .x_label_formatter(&tick_of)
            .x_desc(setting)
            .y_desc(unit)
            .draw()?;
        for (n, line) in lines.iter().enumerate() {
            let colour = PALETTE[n % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(line.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
            chart.draw_series(
                line.points
                    .iter()
                    .map(move |p| Circle::new(*p, 4, colour.filled())),
            )?;
        }
        if lines.len() > 1 || lines.first().is_some_and(|l| !l.name.is_empty()) {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One line of a time series: its name and `(seconds, value)` points.
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// An SVG chart of `lines` against time, with a labelled vertical mark at
/// each of `marks` (`(what, seconds)`): a failure and what followed.
pub(crate) fn series_chart(
    title: &str,
    unit: &str,
    lines: &[Series],
    marks: &[(String, f64)],
) -> CliResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let all = || lines.iter().flat_map(|l| l.points.iter());
        let top = all().map(|p| p.1).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.15 } else { 1.0 };
        let end = all()
            .map(|p| p.0)
            .chain(marks.iter().map(|m| m.1))
            .fold(1.0, f64::max)
            // Room for the last mark's label.
            * 1.12;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("seconds into the phase")
            .y_desc(unit)
            .draw()?;
        for (n, (what, at)) in marks.iter().enumerate() {
            let colour = BLACK.mix(0.6);
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(*at, 0.0), (*at, top)],
                colour.stroke_width(1),
            )))?;
            // Labels step down so marks close together stay readable.
            let y = top * (0.97 - 0.06 * (n % 5) as f64);
            chart.draw_series(std::iter::once(Text::new(
                what.clone(),
                (*at, y),
                ("sans-serif", 12).into_font(),
            )))?;
        }
        for (n, line) in lines.iter().enumerate() {
            let colour = PALETTE[n % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    colour.stroke_width(2),
                ))?
                .label(line.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
        }
        if !lines.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// Text for HTML.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A whole page: `title`, then `body` (HTML), and the machine.
pub(crate) fn page(title: &str, body: &str, machine: &Machine) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#f3f3f3}}td:first-child,th:first-child{{text-align:left}}\
         figure{{margin:1em 0}}</style></head><body>\n<h1>{t}</h1>\n{body}\n\
         <h2>Machine</h2><p>{host}: Linux {kernel}, {cpus} CPUs, {mem} GiB of memory; cairn {version}</p>\n\
         </body></html>\n",
        t = escape(title),
        host = escape(&machine.hostname),
        kernel = escape(&machine.kernel),
        cpus = machine.cpus,
        mem = fixed(machine.memory_bytes as f64 / f64::from(1u32 << 30), 1),
        version = escape(&machine.cairn_version),
    );
    html
}

/// An HTML table.
pub(crate) fn html_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// Flags of `cairn bench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first run: a sweep's `--out` directory (or its summary.json),
    /// or the JSON of `cairn bench io500`/`fs --json`.
    a: PathBuf,
    /// The second run, of the same kind.
    b: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// One figure of both runs.
#[derive(Debug, Serialize)]
struct Compared {
    what: String,
    unit: &'static str,
    a: f64,
    b: f64,
    /// b ÷ a.
    ratio: Option<f64>,
}

pub fn compare(args: &CompareArgs) -> CliResult {
    let a = figures(&args.a)?;
    let b = figures(&args.b)?;
    let mut rows = Vec::new();
    for (what, (unit, va)) in &a {
        if let Some((_, vb)) = b.get(what) {
            rows.push(Compared {
                what: what.clone(),
                unit,
                a: *va,
                b: *vb,
                ratio: (*va > 0.0).then(|| vb / va),
            });
        }
    }
    if rows.is_empty() {
        return Err(format!(
            "{} and {} have no figure in common (runs of different plans or kinds?)",
            args.a.display(),
            args.b.display()
        )
        .into());
    }
    if args.json {
        return print_json(&rows);
    }
    let shown = rows
        .iter()
        .map(|r| {
            vec![
                r.what.clone(),
                r.unit.to_owned(),
                fixed(r.a, 1),
                fixed(r.b, 1),
                r.ratio.map_or_else(|| "-".into(), |x| fixed(x, 2)),
            ]
        })
        .collect();
    println!("{}", table(&["figure", "unit", "A", "B", "B ÷ A"], shown));
    let only = |x: &BTreeMap<String, (&str, f64)>, y: &BTreeMap<String, (&str, f64)>| {
        x.keys().filter(|k| !y.contains_key(*k)).count()
    };
    let (only_a, only_b) = (only(&a, &b), only(&b, &a));
    if only_a + only_b > 0 {
        println!("{only_a} figures only in A, {only_b} only in B");
    }
    Ok(())
}

/// A run's figures by name: a sweep's medians per point and phase, or a
/// file-system run's phases (and its IO500 score).
fn figures(path: &Path) -> CliResult<BTreeMap<String, (&'static str, f64)>> {
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_owned()
    };
    let text = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    let mut out = BTreeMap::new();
    if let Some(points) = json["points"].as_array() {
        for point in points {
            let label = point["label"].as_str().unwrap_or("");
            for phase in point["phases"].as_array().into_iter().flatten() {
                let name = phase["phase"].as_str().unwrap_or("");
                let mib = phase["median_mib_per_sec"].as_f64().unwrap_or(0.0);
                let iops = phase["median_iops"].as_f64().unwrap_or(0.0);
                out.insert(format!("{label} {name}"), ("MiB/s", mib));
                out.insert(format!("{label} {name} IOPS"), ("ops/s", iops));
            }
        }
    } else if let Some(phases) = json["phases"].as_array() {
        for phase in phases {
            let name = phase["phase"].as_str().unwrap_or("");
            let size = phase["transfer_size_bytes"]
                .as_u64()
                .map(|s| format!(" {s}"))
                .unwrap_or_default();
            if phase["bytes"].as_u64().unwrap_or(0) > 0 {
                out.insert(
                    format!("{name}{size}"),
                    ("MiB/s", phase["mib_per_sec"].as_f64().unwrap_or(0.0)),
                );
            }
            out.insert(
                format!("{name}{size} ops"),
                ("ops/s", phase["ops_per_sec"].as_f64().unwrap_or(0.0)),
            );
        }
        if let Some(score) = json["io500"]["score"].as_f64() {
            out.insert("IO500 score".into(), ("score", score));
        }
    } else {
        return Err(format!(
            "{}: neither a sweep's summary nor a file-system run's report",
            file.display()
        )
        .into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_chart_draws_a_bar_and_a_whisker_per_point() {
        let bars = [
            Bar {
                label: "pg_num=8",
                median: 100.0,
                min: 90.0,
                max: 110.0,
            },
            Bar {
                label: "pg_num=16",
                median: 200.0,
                min: 180.0,
                max: 230.0,
            },
        ];
        let svg = bar_chart("write", "MiB/s", &bars).expect("drawn");
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("pg_num=16") && svg.contains("MiB/s"),
            "labels: {svg}"
        );
        assert!(svg.matches("<rect").count() >= 2, "bars: {svg}");
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "whiskers: {svg}"
        );
    }

    #[test]
    fn a_line_chart_draws_a_labelled_line_per_series() {
        let ticks = ["8".to_owned(), "16".to_owned(), "32".to_owned()];
        let lines = [
            Line {
                name: "osds=3".into(),
                points: vec![(0, 1.0), (1, 2.0), (2, 3.0)],
            },
            Line {
                name: "osds=6".into(),
                points: vec![(0, 2.0), (1, 4.0), (2, 6.0)],
            },
        ];
        let svg = line_chart("write", ("pg_num", &ticks), "MiB/s", &lines).expect("drawn");
        assert!(svg.contains("osds=6") && svg.contains("pg_num"), "{svg}");
        assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}

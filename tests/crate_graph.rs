//! The workspace's crate graph, from `cargo metadata`, against the
//! "Allowed dependencies" table of `docs/architecture.md`: no crate depends
//! on one its row does not allow, the table names every crate once, the
//! table itself allows no edge DESIGN.md forbids, and the client reaches
//! no daemon or store even indirectly.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Edges DESIGN.md forbids whatever the table says: clients speak only
/// the wire protocol, daemons meet only through the wire, and nothing
/// ships the test-only crates.
const FORBIDDEN: &[(&str, &str)] = &[
    ("cairn-client", "cairn-osd"),
    ("cairn-client", "cairn-mon"),
    ("cairn-client", "cairn-store"),
    ("cairn-fs", "cairn-osd"),
    ("cairn-fs", "cairn-mon"),
    ("cairn-fs", "cairn-store"),
    ("cairn-osd", "cairn-mon"),
    ("cairn-mon", "cairn-osd"),
    ("cairn-mon", "cairn-store"),
    ("cairn-types", "cairn-wire"),
    ("cairn-placement", "cairn-wire"),
];

/// Crates no other crate's normal dependencies may name.
const TEST_ONLY: &[&str] = &["cairn-sim", "cairn-lossyfs"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Normal,
    Dev,
}

type Edges = BTreeSet<(String, String, Kind)>;

/// The repository, as cargo names it when it runs the test (a binary
/// built in another clone of the same sources reads this one).
fn repo() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

/// The workspace's crates, and `(from, to, kind)` for every dependency of
/// one on another.
fn graph() -> (BTreeSet<String>, Edges) {
    let root = repo();
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("package name").to_string())
        .collect();
    let mut edges = BTreeSet::new();
    for package in packages {
        let from = package["name"].as_str().expect("package name");
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let to = dep["name"].as_str().expect("dependency name");
            if to == from || !names.contains(to) {
                continue;
            }
            let kind = match dep["kind"].as_str() {
                Some("dev") => Kind::Dev,
                _ => Kind::Normal,
            };
            edges.insert((from.to_string(), to.to_string(), kind));
        }
    }
    (names, edges)
}

/// The table: crate → (allowed dependencies, extra ones for its tests).
type Table = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

fn table() -> (Table, Vec<String>) {
    let path = repo().join("docs/architecture.md");
    let doc = std::fs::read_to_string(&path).expect("docs/architecture.md");
    let (_, section) = doc
        .split_once("### Allowed dependencies")
        .expect("docs/architecture.md has an \"Allowed dependencies\" section");
    let crates = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut table = Table::new();
    let mut rows = Vec::new();
    for line in section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(cells.len() >= 5, "a table row has three cells: {line}");
        let name = crates(cells[1])
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("a row without a crate: {line}"));
        rows.push(name.clone());
        table.insert(name, (crates(cells[2]), crates(cells[3])));
    }
    assert!(!table.is_empty(), "the allowed-dependencies table is empty");
    (table, rows)
}

#[test]
fn every_dependency_between_workspace_crates_is_allowed() {
    let (table, _) = table();
    let (_, edges) = graph();
    let mut bad = Vec::new();
    for (from, to, kind) in &edges {
        let Some((normal, dev)) = table.get(from) else {
            bad.push(format!("{from} has no row"));
            continue;
        };
        let allowed = normal.contains(to) || (*kind == Kind::Dev && dev.contains(to));
        if !allowed {
            bad.push(format!(
                "{from} → {to} ({kind:?}): not allowed by docs/architecture.md"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_table_names_every_crate_once() {
    let (table, rows) = table();
    let (packages, _) = graph();
    let mut seen = BTreeSet::new();
    for row in &rows {
        assert!(seen.insert(row), "{row} has two rows");
    }
    let listed: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(listed, packages, "the table's rows against the workspace");
    for (name, (normal, dev)) in &table {
        for cell in normal.iter().chain(dev) {
            assert!(
                packages.contains(cell),
                "{name}'s row names {cell}, no crate"
            );
        }
    }
}

#[test]
fn the_table_allows_no_edge_the_design_forbids() {
    let (table, _) = table();
    for (from, to) in FORBIDDEN {
        let (normal, dev) = table
            .get(*from)
            .expect("a forbidden edge's crate has a row");
        assert!(
            !normal.contains(*to) && !dev.contains(*to),
            "docs/architecture.md allows {from} → {to}, which DESIGN.md forbids"
        );
    }
    for (name, (normal, _)) in &table {
        for test_only in TEST_ONLY {
            assert!(
                !normal.contains(*test_only),
                "{name} may not depend on the test-only {test_only}"
            );
        }
    }
}

#[test]
fn the_client_reaches_no_daemon_or_store() {
    let edges: Vec<(String, String)> = graph()
        .1
        .into_iter()
        .filter(|(_, _, kind)| *kind == Kind::Normal)
        .map(|(from, to, _)| (from, to))
        .collect();
    let mut reached = BTreeSet::from(["cairn-client".to_string()]);
    loop {
        let more: Vec<String> = edges
            .iter()
            .filter(|(from, to)| reached.contains(from) && !reached.contains(to))
            .map(|(_, to)| to.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        reached.extend(more);
    }
    for daemon in ["cairn-osd", "cairn-mon", "cairn-store"] {
        assert!(
            !reached.contains(daemon),
            "cairn-client reaches {daemon} through {reached:?}"
        );
    }
}

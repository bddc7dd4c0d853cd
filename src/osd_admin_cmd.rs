//! `cairn osd tree|out|in|reweight`: the OSDs as the map has them, and the
//! monitor commands that change their state or weight (running an OSD is
//! `osd_cmd`).

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, fixed, print_json, table};
use cairn_proto::mon::MonCommand;
use clap::Subcommand;
use serde::Serialize;

/// `cairn osd tree|out|in` (the cluster-administration half of `cairn osd`).
#[derive(Debug, Subcommand)]
pub enum OsdAdminCommand {
    /// The hierarchy rack → host → OSD with weights, up/down and in/out.
    Tree {
        #[command(flatten)]
        conf: ConfArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Mark an OSD out: its data moves to the other OSDs.
    Out {
        #[command(flatten)]
        conf: ConfArgs,
        /// `osd.N` or `N`.
        id: String,
    },
    /// Mark an OSD in again.
    In {
        #[command(flatten)]
        conf: ConfArgs,
        /// `osd.N` or `N`.
        id: String,
    },
    /// Change an OSD's placement weight (its share of PGs; e.g. its size
    /// in TiB): only the data placement says must move moves.
    Reweight {
        #[command(flatten)]
        conf: ConfArgs,
        /// `osd.N` or `N`.
        id: String,
        /// The new weight, above 0 (e.g. 0.5, 2, 7.28).
        weight: f64,
    },
}

/// One OSD of `cairn osd tree`.
#[derive(Debug, Serialize)]
struct TreeOsd {
    id: u32,
    name: String,
    weight: f64,
    up: bool,
    #[serde(rename = "in")]
    is_in: bool,
    device_class: String,
    addr: Option<String>,
    capacity_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct TreeHost {
    name: String,
    weight: f64,
    osds: Vec<TreeOsd>,
}

#[derive(Debug, Serialize)]
struct TreeRack {
    name: String,
    weight: f64,
    hosts: Vec<TreeHost>,
}

#[derive(Debug, Serialize)]
struct Tree {
    epoch: u64,
    weight: f64,
    racks: Vec<TreeRack>,
}

fn tree(
    map: &cairn_placement::ClusterMap,
    endpoints: &std::collections::BTreeMap<cairn_types::OsdId, cairn_proto::map::OsdEndpoint>,
) -> Tree {
    let hierarchy = cairn_placement::Hierarchy::of(map);
    let osd = |id: cairn_types::OsdId| {
        let info = map.osd(id);
        let endpoint = endpoints.get(&id);
        TreeOsd {
            id: id.0,
            name: id.to_string(),
            weight: info.map_or(0.0, |o| o.weight.as_f64()),
            up: info.is_some_and(|o| o.up),
            is_in: info.is_some_and(|o| o.is_in),
            device_class: info.map(|o| o.device_class.clone()).unwrap_or_default(),
            addr: endpoint.map(|e| e.addr.clone()),
            capacity_bytes: endpoint.map(|e| e.capacity_bytes),
        }
    };
    Tree {
        epoch: map.epoch.0,
        weight: hierarchy.weight.as_f64(),
        racks: hierarchy
            .racks
            .iter()
            .map(|rack| TreeRack {
                name: rack.name.clone(),
                weight: rack.weight.as_f64(),
                hosts: rack
                    .hosts
                    .iter()
                    .map(|host| TreeHost {
                        name: host.name.clone(),
                        weight: host.weight.as_f64(),
                        osds: host.osds.iter().map(|id| osd(*id)).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn print_tree(tree: &Tree) {
    // A bucket row: name and weight, no status.
    let bucket =
        |label: String, weight: f64| vec![label, fixed(weight, 4), String::new(), String::new()];
    let mut rows = vec![bucket("root".to_owned(), tree.weight)];
    for rack in &tree.racks {
        rows.push(bucket(format!("  rack {}", rack.name), rack.weight));
        for host in &rack.hosts {
            rows.push(bucket(format!("    host {}", host.name), host.weight));
            for osd in &host.osds {
                rows.push(vec![
                    format!("      {}", osd.name),
                    fixed(osd.weight, 4),
                    if osd.up { "up" } else { "down" }.to_owned(),
                    if osd.is_in { "in" } else { "out" }.to_owned(),
                ]);
            }
        }
    }
    println!("{}", table(&["name", "weight", "status", "in/out"], rows));
}

fn parse_osd_id(text: &str) -> CliResult<cairn_types::OsdId> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an OSD id (osd.N or N)").into())
}

pub fn run_osd_admin(command: OsdAdminCommand) -> CliResult {
    runtime()?.block_on(async {
        match command {
            OsdAdminCommand::Tree { conf, json } => {
                let client = connect(&conf).await?;
                let map = client.refresh_map().await?;
                let endpoints = client.endpoints().await?;
                let tree = tree(&map, &endpoints);
                if json {
                    return print_json(&tree);
                }
                print_tree(&tree);
            }
            OsdAdminCommand::Out { conf, id } => {
                let id = parse_osd_id(&id)?;
                let client = connect(&conf).await?;
                client.mon_command(MonCommand::OsdOut(id)).await?;
                println!("marked {id} out");
            }
            OsdAdminCommand::In { conf, id } => {
                let id = parse_osd_id(&id)?;
                let client = connect(&conf).await?;
                client.mon_command(MonCommand::OsdIn(id)).await?;
                println!("marked {id} in");
            }
            OsdAdminCommand::Reweight { conf, id, weight } => {
                let id = parse_osd_id(&id)?;
                if !(weight.is_finite() && weight > 0.0) {
                    return Err(format!(
                        "weight {weight} must be above 0 (to stop placing data on an OSD, `cairn osd out`)"
                    )
                    .into());
                }
                let value = cairn_placement::Weight::from_f64(weight)
                    .map_err(|e| format!("weight {weight}: {e}"))?;
                let client = connect(&conf).await?;
                client
                    .mon_command(MonCommand::OsdReweight(id, value))
                    .await?;
                println!("reweighted {id} to {weight}");
            }
        }
        Ok(())
    })
}

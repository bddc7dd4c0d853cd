//! Client commands: `cairn status`, `cairn df`, `cairn osd tree|out|in`,
//! `cairn pool ...`, `cairn object ...`.
//! Each finds the cluster through the client config: `--conf FILE`, else
//! `CAIRN_CONF`, else `/var/tmp/cairn/cairn.toml`.

use crate::output::{CliResult, fixed, print_json, table};
use bytes::Bytes;
use cairn_client::{Client, ClientConfig, Guard, ReadRange, config_path};
use cairn_proto::mon::MonCommand;
use cairn_proto::mon::{FailureDomainSpec, RedundancySpec};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::PathBuf;

/// Where the client config is.
#[derive(Debug, Args)]
pub struct ConfArgs {
    /// Client config file (default: $CAIRN_CONF, else /var/tmp/cairn/cairn.toml).
    #[arg(long = "conf", value_name = "FILE", global = true)]
    conf: Option<PathBuf>,
}

impl ConfArgs {
    /// The config file these flags name.
    pub fn path(&self) -> PathBuf {
        config_path(self.conf.as_deref())
    }

    pub fn load(&self) -> CliResult<ClientConfig> {
        Ok(ClientConfig::load(&self.path())?)
    }
}

/// Flags of `cairn status`.
/// `cairn pool ...`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a replicated pool.
    Create {
        name: String,
        /// Copies of each object.
        #[arg(long, default_value_t = 3)]
        size: u32,
        /// Copies that must be up to accept writes (default: size - 1, at least 1).
        #[arg(long = "min-size")]
        min_size: Option<u32>,
        #[arg(long = "pg-num", default_value_t = 32)]
        pg_num: u32,
        /// osd, host or rack.
        #[arg(long = "failure-domain", default_value = "osd")]
        failure_domain: String,
    },
    /// List pools.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Delete a pool and all its objects.
    Rm {
        name: String,
        /// Required: deleting a pool cannot be undone.
        #[arg(long = "yes-i-really-mean-it")]
        confirmed: bool,
    },
    /// Change a pool's PG counts (they only grow) or its min_size.
    Set {
        name: String,
        #[arg(long = "pg-num")]
        pg_num: Option<u32>,
        #[arg(long = "pgp-num")]
        pgp_num: Option<u32>,
        #[arg(long = "min-size")]
        min_size: Option<u32>,
    },
    /// Scrub every PG of a pool (light; `--deep` reads all data).
    Scrub {
        name: String,
        #[arg(long)]
        deep: bool,
    },
}

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

/// Flags of `cairn df`.
#[derive(Debug, Args)]
pub struct DfArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `cairn object ...`.
#[derive(Debug, Args)]
pub struct ObjectArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[command(subcommand)]
    command: ObjectCommand,
}

#[derive(Debug, Subcommand)]
pub enum ObjectCommand {
    /// Store FILE (or stdin with `-`) as object NAME.
    Put {
        #[arg(long)]
        pool: String,
        name: String,
        file: PathBuf,
        /// Only if the object's version is V (0: only if it does not
        /// exist); fails "compare failed" otherwise, changing nothing.
        #[arg(long = "if-version", value_name = "V")]
        if_version: Option<u64>,
    },
    /// List the pool's object names (PG by PG, in hash order).
    Ls {
        #[arg(long)]
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Set xattr ATTR of object NAME to VALUE (creating the object).
    Setxattr {
        #[arg(long)]
        pool: String,
        name: String,
        attr: String,
        value: String,
    },
    /// Print the value of xattr ATTR of object NAME.
    Getxattr {
        #[arg(long)]
        pool: String,
        name: String,
        attr: String,
    },
    /// List the xattrs of object NAME with their values.
    Listxattr {
        #[arg(long)]
        pool: String,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove xattr ATTR of object NAME.
    Rmxattr {
        #[arg(long)]
        pool: String,
        name: String,
        attr: String,
    },
    /// Set omap KEY of object NAME to VALUE (creating the object).
    Setomapval {
        #[arg(long)]
        pool: String,
        name: String,
        key: String,
        value: String,
    },
    /// Print the value of omap KEY of object NAME.
    Getomapval {
        #[arg(long)]
        pool: String,
        name: String,
        key: String,
    },
    /// List the omap of object NAME, in key order.
    Listomapvals {
        #[arg(long)]
        pool: String,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove omap KEY of object NAME.
    Rmomapkey {
        #[arg(long)]
        pool: String,
        name: String,
        key: String,
    },
    /// Write object NAME to FILE (or stdout with `-` or no FILE).
    Get {
        #[arg(long)]
        pool: String,
        name: String,
        file: Option<PathBuf>,
    },
    /// Size and version of object NAME.
    Stat {
        #[arg(long)]
        pool: String,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove object NAME.
    Rm {
        #[arg(long)]
        pool: String,
        name: String,
    },
}

pub fn runtime() -> CliResult<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub async fn connect(conf: &ConfArgs) -> CliResult<Client> {
    let config = conf.load()?;
    Client::connect(&config.mon)
        .await
        .map_err(|e| format!("cannot reach the monitor at {}: {e}", config.mon).into())
}

#[derive(Debug, Serialize)]
pub struct PoolSummary {
    id: u32,
    name: String,
    redundancy: String,
    pg_num: u32,
    pgp_num: u32,
    failure_domain: String,
}

pub fn pool_summaries(map: &cairn_placement::ClusterMap) -> Vec<PoolSummary> {
    map.pools
        .iter()
        .map(|p| PoolSummary {
            id: p.id.0,
            name: p.name.clone(),
            redundancy: p.redundancy.to_string(),
            pg_num: p.pg_num,
            pgp_num: p.pgp_num,
            failure_domain: p.failure_domain.to_string(),
        })
        .collect()
}

fn failure_domain(text: &str) -> CliResult<FailureDomainSpec> {
    match text {
        "osd" => Ok(FailureDomainSpec::Osd),
        "host" => Ok(FailureDomainSpec::Host),
        "rack" => Ok(FailureDomainSpec::Rack),
        other => Err(format!("{other:?} is not a failure domain (osd, host, rack)").into()),
    }
}

pub fn run_pool(args: PoolArgs) -> CliResult {
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        match args.command {
            PoolCommand::Create {
                name,
                size,
                min_size,
                pg_num,
                failure_domain: domain,
            } => {
                let command = MonCommand::PoolCreate {
                    name: name.clone(),
                    pg_num,
                    redundancy: RedundancySpec::Replicated {
                        size,
                        min_size: min_size.unwrap_or_else(|| size.saturating_sub(1).max(1)),
                    },
                    failure_domain: failure_domain(&domain)?,
                    device_class: None,
                };
                client.mon_command(command).await?;
                println!("pool {name} created");
                Ok(())
            }
            PoolCommand::Rm { name, confirmed } => {
                if !confirmed {
                    return Err(format!(
                        "deleting pool {name} destroys its objects; repeat with --yes-i-really-mean-it"
                    )
                    .into());
                }
                client.mon_command(MonCommand::PoolDelete(name.clone())).await?;
                println!("pool {name} deleted");
                Ok(())
            }
            PoolCommand::Set {
                name,
                pg_num,
                pgp_num,
                min_size,
            } => {
                if pg_num.is_none() && pgp_num.is_none() && min_size.is_none() {
                    return Err("nothing to set: give --pg-num, --pgp-num or --min-size".into());
                }
                let before = client
                    .refresh_map()
                    .await?
                    .pool_by_name(&name)
                    .map(|p| (p.pg_num, p.pgp_num))
                    .ok_or_else(|| format!("pool {name:?} does not exist"))?;
                let command = MonCommand::PoolSet {
                    name: name.clone(),
                    pg_num,
                    pgp_num,
                    min_size,
                };
                client.mon_command(command).await?;
                // As in Ceph, pgp_num follows a pg_num increase unless set:
                // in a later epoch, so the PGs split where they are first,
                // then the new ones move (rebalancing like any remap).
                if let (Some(new), None) = (pg_num, pgp_num)
                    && new > before.0
                {
                    println!("pool {name}: pg_num {} -> {new} (PGs split in place)", before.0);
                    let follow = MonCommand::PoolSet {
                        name: name.clone(),
                        pg_num: None,
                        pgp_num: Some(new),
                        min_size: None,
                    };
                    client.mon_command(follow).await?;
                    println!(
                        "pool {name}: pgp_num {} -> {new} (new PGs move to their OSDs; `cairn status` shows the rebalance)",
                        before.1
                    );
                    return Ok(());
                }
                println!("pool {name} updated");
                Ok(())
            }
            PoolCommand::Scrub { name, deep } => {
                crate::pg_cmd::scrub_pool(&client, &name, deep).await
            }
            PoolCommand::Ls { json } => {
                let map = client.refresh_map().await?;
                let pools = pool_summaries(&map);
                if json {
                    return print_json(&pools);
                }
                let rows = pools
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.id.to_string(),
                            p.pg_num.to_string(),
                            p.redundancy.clone(),
                            p.failure_domain.clone(),
                        ]
                    })
                    .collect();
                println!(
                    "{}",
                    table(
                        &["pool", "id", "pg_num", "redundancy", "failure domain"],
                        rows
                    )
                );
                Ok(())
            }
        }
    })
}

fn read_input(file: &PathBuf) -> CliResult<Bytes> {
    if file.as_os_str() == "-" {
        let mut data = Vec::new();
        std::io::stdin().read_to_end(&mut data)?;
        return Ok(data.into());
    }
    let data = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    Ok(data.into())
}

fn write_output(file: Option<&PathBuf>, data: &[u8]) -> CliResult {
    match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => std::fs::write(path, data)?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(data)?;
            stdout.flush()?;
        }
    }
    Ok(())
}

pub fn run_object(args: ObjectArgs) -> CliResult {
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        match args.command {
            ObjectCommand::Put {
                pool,
                name,
                file,
                if_version,
            } => {
                let data = read_input(&file)?;
                let size = data.len();
                let version = match if_version {
                    Some(v) => {
                        let guard = Guard::Version(v);
                        client
                            .write_full_if(&pool, name.as_bytes(), guard, data)
                            .await?
                    }
                    None => client.write_full(&pool, name.as_bytes(), data).await?,
                };
                eprintln!("wrote {name}: {size} bytes, version {version}");
            }
            ObjectCommand::Ls { pool, json } => list_objects(&client, &pool, json).await?,
            ObjectCommand::Setxattr {
                pool,
                name,
                attr,
                value,
            } => {
                let value = Bytes::from(value.into_bytes());
                client
                    .set_xattr(&pool, name.as_bytes(), attr.as_bytes(), value)
                    .await?;
            }
            ObjectCommand::Getxattr { pool, name, attr } => {
                let xattrs = client.get_xattrs(&pool, name.as_bytes()).await?;
                let value = xattrs
                    .get(attr.as_bytes())
                    .ok_or_else(|| format!("object {name} has no xattr {attr:?}"))?;
                write_output(None, value)?;
            }
            ObjectCommand::Listxattr { pool, name, json } => {
                let xattrs = client.get_xattrs(&pool, name.as_bytes()).await?;
                print_pairs(xattrs, json)?;
            }
            ObjectCommand::Rmxattr { pool, name, attr } => {
                client
                    .remove_xattr(&pool, name.as_bytes(), attr.as_bytes())
                    .await?;
            }
            ObjectCommand::Setomapval {
                pool,
                name,
                key,
                value,
            } => {
                let entries = [(
                    Bytes::from(key.into_bytes()),
                    Bytes::from(value.into_bytes()),
                )];
                client
                    .omap_set(&pool, name.as_bytes(), &entries.into_iter().collect())
                    .await?;
            }
            ObjectCommand::Getomapval { pool, name, key } => {
                let wanted = [Bytes::from(key.clone().into_bytes())];
                let values = client.omap_get(&pool, name.as_bytes(), &wanted).await?;
                let value = values
                    .get(key.as_bytes())
                    .ok_or_else(|| format!("object {name} has no omap key {key:?}"))?;
                write_output(None, value)?;
            }
            ObjectCommand::Listomapvals { pool, name, json } => {
                let entries = all_omap(&client, &pool, name.as_bytes()).await?;
                print_pairs(entries, json)?;
            }
            ObjectCommand::Rmomapkey { pool, name, key } => {
                let keys = [Bytes::from(key.into_bytes())];
                client.omap_remove(&pool, name.as_bytes(), &keys).await?;
            }
            ObjectCommand::Get { pool, name, file } => {
                let range = ReadRange::default();
                let data = client.read(&pool, name.as_bytes(), range).await?;
                write_output(file.as_ref(), &data)?;
            }
            ObjectCommand::Stat { pool, name, json } => {
                let stat = client.stat(&pool, name.as_bytes()).await?;
                if json {
                    #[derive(Serialize)]
                    struct Out<'a> {
                        name: &'a str,
                        size_bytes: u64,
                        version: u64,
                    }
                    let out = Out {
                        name: &name,
                        size_bytes: stat.size_bytes,
                        version: stat.version,
                    };
                    return print_json(&out);
                }
                println!(
                    "{name}: {} bytes, version {}",
                    stat.size_bytes, stat.version
                );
            }
            ObjectCommand::Rm { pool, name } => {
                client.remove(&pool, name.as_bytes()).await?;
                eprintln!("removed {name}");
            }
        }
        Ok(())
    })
}

/// Names per listing request of `object ls`.
const LIST_PAGE_NAMES: u32 = 1000;
/// Omap entries per request of `object listomapvals`.
const OMAP_PAGE_ENTRIES: u32 = 1000;

async fn list_objects(client: &Client, pool: &str, json: bool) -> CliResult {
    let mut cursor = None;
    let mut names = Vec::new();
    loop {
        let page = client.list(pool, cursor, LIST_PAGE_NAMES).await?;
        for name in page.names {
            let name = String::from_utf8_lossy(&name).into_owned();
            if !json {
                println!("{name}");
            }
            names.push(name);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if json {
        print_json(&names)?;
    }
    Ok(())
}

async fn all_omap(
    client: &Client,
    pool: &str,
    object: &[u8],
) -> CliResult<std::collections::BTreeMap<Bytes, Bytes>> {
    let mut all = std::collections::BTreeMap::new();
    let mut after: Option<Bytes> = None;
    loop {
        let page = client
            .omap_range(pool, object, after.as_deref(), OMAP_PAGE_ENTRIES)
            .await?;
        let Some((last, _)) = page.last() else {
            return Ok(all);
        };
        after = Some(last.clone());
        all.extend(page);
    }
}

/// Prints name → value pairs (xattrs, omap) as `name<TAB>value` lines or a
/// JSON object; non-UTF-8 bytes are shown lossily.
fn print_pairs(pairs: std::collections::BTreeMap<Bytes, Bytes>, json: bool) -> CliResult {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    if json {
        let map: std::collections::BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| (text(k), text(v))).collect();
        return print_json(&map);
    }
    for (key, value) in &pairs {
        println!("{}\t{}", text(key), text(value));
    }
    Ok(())
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

/// One pool of `cairn df`. Per-pool object counts and used bytes are not
/// reported by OSDs yet, so `df` shows placement and an estimate of usable
/// space: the raw capacity of up and in OSDs divided by the redundancy.
#[derive(Debug, Serialize)]
struct DfPool {
    name: String,
    id: u32,
    pg_num: u32,
    redundancy: String,
    /// Raw capacity of up+in OSDs over the pool's raw-bytes-per-byte.
    usable_bytes_max: u64,
}

#[derive(Debug, Serialize)]
struct Df {
    /// Capacity the OSDs reported at boot, all of them.
    capacity_bytes_total: u64,
    /// Of that, on OSDs that are up and in.
    capacity_bytes_up_in: u64,
    osds_total: usize,
    osds_up_in: usize,
    /// From the OSDs' latest statistics: file-system space used and
    /// available, and object bytes held (every copy), summed over OSDs.
    raw_used_bytes: u64,
    raw_available_bytes: u64,
    stored_bytes: u64,
    pools: Vec<DfPool>,
}

fn df(
    map: &cairn_placement::ClusterMap,
    endpoints: &std::collections::BTreeMap<cairn_types::OsdId, cairn_proto::map::OsdEndpoint>,
) -> Df {
    let capacity = |id: cairn_types::OsdId| endpoints.get(&id).map_or(0, |e| e.capacity_bytes);
    let up_in: Vec<_> = map.osds.iter().filter(|o| o.up && o.is_in).collect();
    let capacity_bytes_up_in: u64 = up_in.iter().map(|o| capacity(o.id)).sum();
    let pools = map
        .pools
        .iter()
        .map(|pool| {
            // Raw bytes per stored byte: `size` copies, or (k + m) / k.
            let (numerator, denominator) = match pool.redundancy {
                cairn_placement::Redundancy::Replicated { size, .. } => (1, u64::from(size)),
                cairn_placement::Redundancy::Erasure { k, m } => {
                    (u64::from(k), u64::from(k) + u64::from(m))
                }
            };
            let usable = u128::from(capacity_bytes_up_in) * u128::from(numerator)
                / u128::from(denominator.max(1));
            DfPool {
                name: pool.name.clone(),
                id: pool.id.0,
                pg_num: pool.pg_num,
                redundancy: pool.redundancy.to_string(),
                usable_bytes_max: u64::try_from(usable).unwrap_or(u64::MAX),
            }
        })
        .collect();
    Df {
        capacity_bytes_total: map.osds.iter().map(|o| capacity(o.id)).sum(),
        capacity_bytes_up_in,
        osds_total: map.osds.len(),
        osds_up_in: up_in.len(),
        raw_used_bytes: 0,
        raw_available_bytes: 0,
        stored_bytes: 0,
        pools,
    }
}

fn gib(bytes: u64) -> String {
    fixed(bytes as f64 / (1u64 << 30) as f64, 1)
}

pub fn run_df(args: DfArgs) -> CliResult {
    let report = runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        let map = client.refresh_map().await?;
        let endpoints = client.endpoints().await?;
        let mut report = df(&map, &endpoints);
        for stats in client.osd_stats().await? {
            report.raw_used_bytes += stats.stats.used_bytes;
            report.raw_available_bytes += stats.stats.available_bytes;
            report.stored_bytes += stats.stats.stored_bytes;
        }
        CliResult::Ok(report)
    })?;
    if args.json {
        return print_json(&report);
    }
    println!(
        "capacity  {} GiB raw on {} OSDs, {} GiB on the {} up and in",
        gib(report.capacity_bytes_total),
        report.osds_total,
        gib(report.capacity_bytes_up_in),
        report.osds_up_in
    );
    println!(
        "raw       {} GiB used, {} GiB available; objects {} GiB (all copies)",
        gib(report.raw_used_bytes),
        gib(report.raw_available_bytes),
        gib(report.stored_bytes)
    );
    let rows = report
        .pools
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.id.to_string(),
                p.pg_num.to_string(),
                p.redundancy.clone(),
                "-".to_owned(),
                gib(p.usable_bytes_max),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "pool",
                "id",
                "pg_num",
                "redundancy",
                "objects",
                "max avail GiB"
            ],
            rows
        )
    );
    Ok(())
}

//! Client commands: `cairn status`, `cairn pool ...`, `cairn object ...`.
//! Each finds the cluster through the client config: `--conf FILE`, else
//! `CAIRN_CONF`, else `/var/tmp/cairn/cairn.toml`.

use crate::output::{CliResult, print_json, table};
use bytes::Bytes;
use cairn_client::{Client, ClientConfig, ReadRange, config_path};
use cairn_mon::MonCommand;
use cairn_mon::proto::{FailureDomainSpec, RedundancySpec};
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
    fn load(&self) -> CliResult<ClientConfig> {
        Ok(ClientConfig::load(&config_path(self.conf.as_deref()))?)
    }
}

/// Flags of `cairn status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Print JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

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

fn runtime() -> CliResult<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

async fn connect(conf: &ConfArgs) -> CliResult<Client> {
    let config = conf.load()?;
    Client::connect(&config.mon)
        .await
        .map_err(|e| format!("cannot reach the monitor at {}: {e}", config.mon).into())
}

#[derive(Debug, Serialize)]
struct PoolSummary {
    id: u32,
    name: String,
    redundancy: String,
    pg_num: u32,
    failure_domain: String,
}

#[derive(Debug, Serialize)]
struct Status {
    epoch: u64,
    osds_total: usize,
    osds_up: usize,
    osds_in: usize,
    pools: Vec<PoolSummary>,
    pg_count: u64,
}

fn pool_summaries(map: &cairn_placement::ClusterMap) -> Vec<PoolSummary> {
    map.pools
        .iter()
        .map(|p| PoolSummary {
            id: p.id.0,
            name: p.name.clone(),
            redundancy: p.redundancy.to_string(),
            pg_num: p.pg_num,
            failure_domain: p.failure_domain.to_string(),
        })
        .collect()
}

pub fn run_status(args: StatusArgs) -> CliResult {
    let map = runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        let map: CliResult<std::sync::Arc<cairn_placement::ClusterMap>> =
            Ok(client.refresh_map().await?);
        map
    })?;
    let status = Status {
        epoch: map.epoch.0,
        osds_total: map.osds.len(),
        osds_up: map.osds.iter().filter(|o| o.up).count(),
        osds_in: map.osds.iter().filter(|o| o.is_in).count(),
        pools: pool_summaries(&map),
        pg_count: map.pools.iter().map(|p| u64::from(p.pg_num)).sum(),
    };
    if args.json {
        return print_json(&status);
    }
    println!("epoch  {}", status.epoch);
    println!(
        "osds   {} total, {} up, {} in",
        status.osds_total, status.osds_up, status.osds_in
    );
    println!("pools  {} ({} PGs)", status.pools.len(), status.pg_count);
    Ok(())
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
    Ok(std::fs::read(file)?.into())
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
            ObjectCommand::Put { pool, name, file } => {
                let data = read_input(&file)?;
                let size = data.len();
                let version = client.write_full(&pool, name.as_bytes(), data).await?;
                eprintln!("wrote {name}: {size} bytes, version {version}");
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

//! `cairn object ...`: one pool's objects, their data, xattrs and omap,
//! read and written through the client library.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json};
use bytes::Bytes;
use cairn_client::{Client, Guard, ReadRange, WriteOp};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::PathBuf;

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
        /// Only if the object does not exist (an exclusive create); fails
        /// "object exists" otherwise, changing nothing.
        #[arg(long = "if-absent", conflicts_with = "if_version")]
        if_absent: bool,
        /// Also set xattr K to V, in the same atomic write (repeatable).
        #[arg(long = "xattr", value_name = "K=V")]
        xattrs: Vec<String>,
        /// Also set omap key K to V, in the same atomic write (repeatable).
        #[arg(long = "omap", value_name = "K=V")]
        omap: Vec<String>,
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

/// `K=V` of a repeatable `flag`, split at the first `=`.
fn key_value<'a>(pair: &'a str, flag: &str) -> CliResult<(&'a str, &'a str)> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k, v)),
        _ => Err(format!("{flag} wants KEY=VALUE, got {pair:?}").into()),
    }
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
                if_absent,
                xattrs,
                omap,
            } => {
                let data = read_input(&file)?;
                let size = data.len();
                // One request: the guard, the data and the metadata apply
                // together or not at all.
                let mut op = WriteOp::new();
                if let Some(v) = if_version {
                    op = op.guard(Guard::Version(v));
                }
                if if_absent {
                    op = op.create(true);
                }
                op = op.write_full(data);
                for pair in &xattrs {
                    let (k, v) = key_value(pair, "--xattr")?;
                    op = op.set_xattr(k.as_bytes(), v.as_bytes());
                }
                let entries = omap
                    .iter()
                    .map(|pair| key_value(pair, "--omap"))
                    .collect::<Result<Vec<_>, _>>()?;
                if !entries.is_empty() {
                    op = op.omap_set(entries.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())));
                }
                let version = client.operate(&pool, name.as_bytes(), op).await?;
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

//! `cairn config set|get|rm|ls`: the cluster's run-time settings, kept by
//! the monitor and applied by the daemons within a heartbeat (like `ceph
//! config set`). The settings and their bounds are `cairn_types::options`.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json};
use cairn_proto::mon::{MonCommand, Reply};
use cairn_types::options::{self, OPTIONS, Settings};
use clap::{Args, Subcommand};
use serde::Serialize;

/// `cairn config ...`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Set a setting for the whole cluster (daemons apply it live).
    Set { name: String, value: String },
    /// A setting's value (as set, or its default).
    Get { name: String },
    /// Return a setting to its default.
    Rm { name: String },
    /// Every setting: value, default, what it does.
    Ls {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Serialize)]
struct Row {
    name: &'static str,
    value: String,
    default: &'static str,
    set: bool,
    help: &'static str,
}

pub fn run(args: ConfigArgs) -> CliResult {
    // Checked here too, so a typo is caught before any connection.
    match &args.command {
        ConfigCommand::Set { name, value } => {
            options::validate(name, value)?;
        }
        ConfigCommand::Get { name } | ConfigCommand::Rm { name } => {
            if options::find(name).is_none() {
                return Err(
                    format!("unknown setting {name:?} (`cairn config ls` lists them)").into(),
                );
            }
        }
        ConfigCommand::Ls { .. } => {}
    }
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        match args.command {
            ConfigCommand::Set { name, value } => {
                let command = MonCommand::ConfigSet {
                    name: name.clone(),
                    value: Some(value),
                };
                client.mon_command(command).await?;
                let settings = fetch(&client).await?;
                println!("{name} = {}", settings.get(&name));
            }
            ConfigCommand::Rm { name } => {
                let command = MonCommand::ConfigSet {
                    name: name.clone(),
                    value: None,
                };
                client.mon_command(command).await?;
                let settings = fetch(&client).await?;
                println!("{name} = {} (default)", settings.get(&name));
            }
            ConfigCommand::Get { name } => {
                println!("{}", fetch(&client).await?.get(&name));
            }
            ConfigCommand::Ls { json } => {
                let settings = fetch(&client).await?;
                let rows: Vec<Row> = OPTIONS
                    .iter()
                    .map(|o| Row {
                        name: o.name,
                        value: settings.get(o.name).to_owned(),
                        default: o.default,
                        set: settings.explicit().contains_key(o.name),
                        help: o.help,
                    })
                    .collect();
                if json {
                    return print_json(&rows);
                }
                for row in rows {
                    let mark = if row.set { " (set)" } else { "" };
                    println!("{} = {}{mark}", row.name, row.value);
                    println!("    {} [default {}]", row.help, row.default);
                }
            }
        }
        CliResult::Ok(())
    })
}

async fn fetch(client: &cairn_client::Client) -> CliResult<Settings> {
    match client.mon_command(MonCommand::ConfigDump).await? {
        Reply::Config { entries, .. } => Ok(Settings::new(entries)),
        other => Err(format!("unexpected monitor answer {other:?}").into()),
    }
}

//! `cairn s3`: run an S3 gateway (`cairn s3 serve`), manage its users and
//! access keys (`cairn s3 user create|ls|rm|info`, `cairn s3 key
//! create|rm`), collect what dead gateways left (`cairn s3 gc`), and
//! find data objects nothing names (`cairn s3 orphans`).

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json};
use crate::units::parse_duration;
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct S3Args {
    #[command(subcommand)]
    command: S3Command,
}

impl S3Args {
    /// Whether it runs a gateway (a daemon, given `--mon`, not a client
    /// config).
    pub fn is_serve(&self) -> bool {
        matches!(self.command, S3Command::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum S3Command {
    /// Run an S3 gateway in the foreground (until Ctrl-C or SIGTERM).
    Serve(ServeArgs),
    /// Users of the gateways and their access keys.
    #[command(subcommand)]
    User(UserCommand),
    /// Access keys of the gateways' users.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Recover what gateways that died left half done (their operations'
    /// intents: stray pieces, index entries) and abort old multipart
    /// uploads. Every gateway also does this each minute.
    Gc(GcArgs),
    /// Find the gateway's data objects (pieces, parts, archived versions)
    /// that nothing names, in every bucket's pool; remove them with
    /// --remove. Safe while gateways serve.
    Orphans(OrphansArgs),
}

#[derive(Debug, Args)]
struct OrphansArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Remove what is found (default: only report it).
    #[arg(long)]
    remove: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct GcArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// A gateway silent this long is dead, and its operations this old
    /// are recovered (0s: every operation, for a cluster no gateway
    /// serves).
    #[arg(long = "dead-after", default_value = "60s", value_parser = parse_duration)]
    dead_after: Duration,
    /// Abort multipart uploads begun this long ago (e.g. 7d).
    #[arg(long = "abort-uploads-after", value_parser = parse_duration)]
    abort_uploads_after: Option<Duration>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The monitor's address (default: the client config's).
    #[arg(long)]
    mon: Option<String>,
    /// Address to listen on (HTTP).
    #[arg(long, default_value = "127.0.0.1:7480")]
    addr: SocketAddr,
    /// The pool of buckets made without a location constraint naming one.
    #[arg(long = "default-pool", default_value = "data")]
    default_pool: String,
    /// A domain for virtual-hosted addressing: a request to
    /// `BUCKET.DOMAIN` names its bucket in the host (repeatable;
    /// `localhost` always is one). Other hosts are path-style.
    #[arg(long = "domain")]
    domains: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long = "tls-cert", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long = "tls-key", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Make a user with one access key; prints the key and its secret.
    Create {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// List the users.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Remove a user and its keys (its buckets stay).
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
    },
    /// Show a user: creation time and access keys (secrets are shown
    /// only when a key is made).
    Info {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Give a user another access key; prints it and its secret.
    Create {
        #[command(flatten)]
        conf: ConfArgs,
        user: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove an access key (the gateways stop taking it within 10 s).
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        access_key: String,
    },
}

/// Pool settings of the gateway's records pool when it is made.
const META_PG_NUM: u32 = 16;
const META_SIZE: u32 = 3;

fn valid_user_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
}

pub fn run_s3(args: S3Args) -> CliResult {
    match args.command {
        S3Command::Serve(args) => serve(args),
        S3Command::User(command) => user(command),
        S3Command::Gc(args) => gc(&args),
        S3Command::Orphans(args) => orphans(&args),
        S3Command::Key(command) => key(command),
    }
}

fn orphans(args: &OrphansArgs) -> CliResult {
    let rt = runtime()?;
    rt.block_on(async {
        let client = connect(&args.conf).await?;
        let keys = cairn_s3::auth::Keys::new(client.clone());
        let gateway = cairn_s3::gateway::Gateway::new(client, keys, String::new());
        let report = gateway
            .scan_orphans(args.remove)
            .await
            .map_err(|e| format!("orphan scan: {e}"))?;
        if args.json {
            print_json(&report)?;
        } else {
            for name in &report.examples {
                println!("{name}");
            }
            println!(
                "{} objects in {} pools, {} buckets: {} orphans, {} of deleted buckets, {} removed, {} errors",
                report.objects_scanned,
                report.pools,
                report.buckets,
                report.orphans,
                report.strays,
                report.removed,
                report.errors
            );
        }
        if report.errors > 0 {
            return Err("some orphans could not be removed (see the log); run it again".into());
        }
        Ok(())
    })
}

fn gc(args: &GcArgs) -> CliResult {
    let rt = runtime()?;
    rt.block_on(async {
        let client = connect(&args.conf).await?;
        let keys = cairn_s3::auth::Keys::new(client.clone());
        let gateway = cairn_s3::gateway::Gateway::new(client, keys, String::new());
        let settings = cairn_s3::intent::GcSettings {
            dead_after: args.dead_after,
            abort_uploads_after: args.abort_uploads_after,
        };
        let report = gateway
            .collect(settings)
            .await
            .map_err(|e| format!("collector: {e}"))?;
        if args.json {
            return print_json(&report);
        }
        println!(
            "{} buckets, {} operations in flight or left, {} recovered, {} uploads aborted, {} errors",
            report.buckets,
            report.intents_seen,
            report.intents_recovered,
            report.uploads_aborted,
            report.errors
        );
        if report.errors > 0 {
            return Err("some recoveries failed (see the log); run it again".into());
        }
        Ok(())
    })
}

async fn meta_size(client: &cairn_client::Client) -> u32 {
    // One copy per OSD up to three: a one-OSD test cluster works too.
    let osds = client
        .map()
        .await
        .map_or(META_SIZE as usize, |m| m.osds.len())
        .max(1);
    META_SIZE.min(u32::try_from(osds).unwrap_or(META_SIZE))
}

fn serve(args: ServeArgs) -> CliResult {
    crate::fs_cmd::init_logging();
    let domains =
        cairn_s3::auth::Domains::new(&args.domains).map_err(|e| format!("--domain: {e}"))?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(cairn_s3::tls_config(cert, key)?),
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = match &args.mon {
            Some(mon) => cairn_client::Client::connect(mon)
                .await
                .map_err(|e| format!("cannot reach the monitor at {mon}: {e}"))?,
            None => connect(&args.conf).await?,
        };
        let size = meta_size(&client).await;
        cairn_s3::prepare(&client, META_PG_NUM, size)
            .await
            .map_err(|e| format!("cannot prepare the gateway's pool: {e}"))?;
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
        tracing::info!(addr = %args.addr, pool = %args.default_pool, tls = args.tls_cert.is_some(), "S3 gateway serving");
        tokio::select! {
            result = cairn_s3::serve(client, listener, args.default_pool, domains, tls) => {
                result.map_err(|e| e.to_string())?;
            }
            () = crate::fs_cmd::wait_for_signal() => {}
        }
        Ok(())
    })
}

fn user(command: UserCommand) -> CliResult {
    let rt = runtime()?;
    rt.block_on(async {
        match command {
            UserCommand::Create { conf, name, json } => {
                if !valid_user_name(&name) {
                    return Err(format!(
                        "invalid user name {name:?}: 1 to 64 letters, digits, '-', '_', '.', '@'"
                    )
                    .into());
                }
                let client = connect(&conf).await?;
                let size = meta_size(&client).await;
                cairn_s3::prepare(&client, META_PG_NUM, size).await?;
                let (access, secret) = cairn_s3::meta::create_user(&client, &name).await?;
                if json {
                    return print_json(&serde_json::json!({
                        "user": name,
                        "access_key": access,
                        "secret_key": secret,
                    }));
                }
                println!("user:       {name}");
                println!("access key: {access}");
                println!("secret key: {secret}");
                Ok(())
            }
            UserCommand::Ls { conf, json } => {
                let client = connect(&conf).await?;
                let users = cairn_s3::meta::list_users(&client).await?;
                if json {
                    return print_json(&users);
                }
                for user in users {
                    println!("{} ({} keys)", user.name, user.access_keys.len());
                }
                Ok(())
            }
            UserCommand::Rm { conf, name } => {
                let client = connect(&conf).await?;
                cairn_s3::meta::remove_user(&client, &name).await?;
                println!("removed user {name}");
                Ok(())
            }
            UserCommand::Info { conf, name, json } => {
                let client = connect(&conf).await?;
                let Some(user) = cairn_s3::meta::user_info(&client, &name).await? else {
                    return Err(format!("no such user {name}").into());
                };
                if json {
                    return print_json(&user);
                }
                println!("user:        {}", user.name);
                println!("created:     {} (Unix seconds)", user.created_secs);
                println!("access keys: {}", user.access_keys.join(" "));
                Ok(())
            }
        }
    })
}

fn key(command: KeyCommand) -> CliResult {
    let rt = runtime()?;
    rt.block_on(async {
        match command {
            KeyCommand::Create { conf, user, json } => {
                let client = connect(&conf).await?;
                let (access, secret) = cairn_s3::meta::add_key(&client, &user).await?;
                if json {
                    return print_json(&serde_json::json!({
                        "user": user,
                        "access_key": access,
                        "secret_key": secret,
                    }));
                }
                println!("user:       {user}");
                println!("access key: {access}");
                println!("secret key: {secret}");
                Ok(())
            }
            KeyCommand::Rm { conf, access_key } => {
                let client = connect(&conf).await?;
                let user = cairn_s3::meta::remove_key(&client, &access_key).await?;
                println!("removed access key {access_key} of user {user}");
                Ok(())
            }
        }
    })
}

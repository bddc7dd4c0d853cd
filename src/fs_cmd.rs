//! `cairn fs create|ls|status|rm`, `cairn mds` and `cairn mount`: the
//! POSIX file system's administration, its metadata server and its FUSE
//! client.

use crate::conn::{ConfArgs, connect, runtime};
use crate::output::{CliResult, print_json, table};
use cairn_client::Client;
use cairn_proto::mds::{MdsAnswer, MdsOp, MdsStatus, SessionInfo};
use cairn_proto::mon::{FailureDomainSpec, FsStatus, MonCommand, RedundancySpec, Reply};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// `cairn fs quota ...`.
#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Set (or with 0, lift) the limits of DIR, a directory on a Cairn
    /// mount (as root).
    Set {
        dir: PathBuf,
        /// Bytes of the regular files below DIR (suffixes K, M, G, T).
        #[arg(long = "max-bytes", value_parser = parse_limit)]
        max_bytes: Option<u64>,
        /// Inodes (files, directories, links) below DIR.
        #[arg(long = "max-files")]
        max_files: Option<u64>,
    },
    /// DIR's limits and what is below it.
    Get {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// A byte limit: a size with a unit suffix, or 0 (no limit).
fn parse_limit(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    crate::units::parse_size(text)
}

fn setxattr(path: &std::path::Path, name: &str, value: &[u8]) -> CliResult {
    rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty())
        .map_err(|e| format!("{name} on {}: {e}", path.display()).into())
}

/// A decimal xattr of `path`; `None` when it is not set.
fn getxattr_u64(path: &std::path::Path, name: &str) -> CliResult<Option<u64>> {
    let mut buf = [0u8; 32];
    match rustix::fs::getxattr(path, name, &mut buf[..]) {
        Ok(n) => {
            let text = std::str::from_utf8(&buf[..n]).unwrap_or_default();
            Ok(text.trim().parse().ok())
        }
        Err(rustix::io::Errno::NODATA) => Ok(None),
        Err(e) => Err(format!("{name} on {}: {e}", path.display()).into()),
    }
}

fn quota_get(dir: &std::path::Path, json: bool) -> CliResult {
    let get = |name| getxattr_u64(dir, name);
    let (max_bytes, max_files) = (get("cairn.quota.max_bytes")?, get("cairn.quota.max_files")?);
    let (bytes, files) = (get("cairn.dir.rbytes")?, get("cairn.dir.rfiles")?);
    if json {
        return print_json(&serde_json::json!({
            "dir": dir.display().to_string(),
            "max_bytes": max_bytes,
            "max_files": max_files,
            "bytes": bytes,
            "files": files,
        }));
    }
    let show = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    println!(
        "{}",
        table(
            &["dir", "bytes", "max bytes", "files", "max files"],
            vec![vec![
                dir.display().to_string(),
                show(bytes),
                show(max_bytes),
                show(files),
                show(max_files),
            ]],
        )
    );
    Ok(())
}

/// `cairn fs session ...`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Sessions (mounts) with their open files, leases, pending recalls
    /// and idle time; evicted ones with the reason.
    Ls {
        #[arg(default_value = "cairnfs")]
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Evict a session: its leases, opens and locks go; the mount's calls
    /// fail until its cached leases run out, then it opens a new session.
    Evict {
        /// The session id as `session ls` shows it (hexadecimal).
        id: String,
        #[arg(long, default_value = "cairnfs")]
        fs: String,
    },
}

/// The active MDS's address of file system `name`.
async fn active_mds(client: &Client, name: &str) -> CliResult<String> {
    let list = fs_list(client).await?;
    let Some(fs) = list.into_iter().find(|f| f.name == name) else {
        return Err(format!("file system {name:?} does not exist").into());
    };
    match fs.active {
        Some(active) => Ok(active.addr),
        None => Err(format!("file system {name:?} has no active MDS").into()),
    }
}

/// The sessions of file system `name`'s active MDS.
///
/// # Errors
/// No such file system, no active MDS, or it did not answer.
pub async fn sessions(client: &Client, name: &str) -> CliResult<Vec<SessionInfo>> {
    let addr = active_mds(client, name).await?;
    match cairn_fs::mds::ask(&addr, MdsOp::Sessions).await? {
        MdsAnswer::Sessions(list) => Ok(list),
        other => Err(format!("unexpected answer {other:?}").into()),
    }
}

/// The active MDS's cache use and slow requests.
pub async fn mds_status(client: &Client, name: &str) -> CliResult<MdsStatus> {
    let addr = active_mds(client, name).await?;
    match cairn_fs::mds::ask(&addr, MdsOp::Status).await? {
        MdsAnswer::Status(status) => Ok(status),
        other => Err(format!("unexpected answer {other:?}").into()),
    }
}

fn session_json(s: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "id": format!("{:x}", s.id),
        "name": s.name,
        "opens": s.opens,
        "leases": s.leases,
        "recalls_pending": s.recalls_pending,
        "idle_ms": s.idle_ms,
        "evicted": s.evicted,
    })
}

/// `cairn fs ...`.
#[derive(Debug, Args)]
pub struct FsArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[command(subcommand)]
    command: FsCommand,
}

#[derive(Debug, Subcommand)]
pub enum FsCommand {
    /// Create a file system; its pools (NAME.meta and NAME.data, replicated
    /// size 3, unless named) are created if missing.
    Create {
        name: String,
        #[arg(long = "meta-pool")]
        meta_pool: Option<String>,
        #[arg(long = "data-pool")]
        data_pool: Option<String>,
        /// PGs of a data pool created here.
        #[arg(long = "pg-num", default_value_t = 64)]
        pg_num: u32,
        /// Copies of each object in pools created here.
        #[arg(long, default_value_t = 3)]
        size: u32,
    },
    /// List file systems and their MDS daemons.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// One file system: its pools, active MDS and standbys.
    Status {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Check a file system's namespace as stored (journal included):
    /// dangling entries, orphan inodes, wrong link counts. Read-only; run it
    /// on a quiet file system. Fails if it finds anything.
    Check {
        name: String,
        #[arg(long)]
        json: bool,
        /// Also list the data pool and report data objects of no file
        /// (space leaked); reads every object name in the pool.
        #[arg(long)]
        data: bool,
    },
    /// Directory quotas, through a mounted directory: a limit on the bytes
    /// of the files below it and on the inodes below it (`EDQUOT` past
    /// either). Shown as the xattrs `cairn.quota.max_bytes`,
    /// `cairn.quota.max_files`, `cairn.dir.rbytes`, `cairn.dir.rfiles`.
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Space of a file system: its size and room (as `df` on a mount
    /// shows), and the bytes and inodes its namespace holds.
    Df {
        #[arg(default_value = "cairnfs")]
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Client sessions of a file system's active MDS.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Remove a file system (its pools and their objects stay).
    Rm {
        name: String,
        #[arg(long = "yes-i-really-mean-it")]
        confirmed: bool,
    },
}

async fn ensure_pool(client: &Client, name: &str, pg_num: u32, size: u32) -> CliResult {
    let map = client.refresh_map().await?;
    if map.pools.iter().any(|p| p.name == name) {
        return Ok(());
    }
    let command = MonCommand::PoolCreate {
        name: name.to_owned(),
        pg_num,
        redundancy: RedundancySpec::Replicated {
            size,
            min_size: size.saturating_sub(1).max(1),
        },
        failure_domain: FailureDomainSpec::Osd,
        device_class: None,
    };
    client.mon_command(command).await?;
    Ok(())
}

/// The file systems the monitor knows.
pub async fn fs_list(client: &Client) -> CliResult<Vec<FsStatus>> {
    match client.mon_command(MonCommand::FsLs).await? {
        Reply::FsMap(list) => Ok(list),
        other => Err(format!("unexpected reply {other:?}").into()),
    }
}

/// Creates file system `name` with pools `NAME.meta` and `NAME.data`
/// unless they are given.
pub async fn create(
    client: &Client,
    name: &str,
    pools: (Option<String>, Option<String>),
    pg_num: u32,
    size: u32,
) -> CliResult<FsStatus> {
    let meta = pools.0.unwrap_or_else(|| format!("{name}.meta"));
    let data = pools.1.unwrap_or_else(|| format!("{name}.data"));
    ensure_pool(client, &meta, 16, size).await?;
    ensure_pool(client, &data, pg_num, size).await?;
    let command = MonCommand::FsCreate {
        name: name.to_owned(),
        meta_pool: meta,
        data_pool: data,
    };
    match client.mon_command(command).await? {
        Reply::FsMap(mut list) if !list.is_empty() => Ok(list.remove(0)),
        other => Err(format!("unexpected reply {other:?}").into()),
    }
}

fn rows(list: &[FsStatus]) -> Vec<Vec<String>> {
    list.iter()
        .map(|f| {
            vec![
                f.name.clone(),
                f.meta_pool.clone(),
                f.data_pool.clone(),
                f.active
                    .as_ref()
                    .map_or_else(|| "none".into(), |a| format!("{} {}", a.name, a.addr)),
                f.standbys.len().to_string(),
                f.generation.to_string(),
            ]
        })
        .collect()
}

pub fn run_fs(args: FsArgs) -> CliResult {
    runtime()?.block_on(async {
        let client = connect(&args.conf).await?;
        match args.command {
            FsCommand::Create {
                name,
                meta_pool,
                data_pool,
                pg_num,
                size,
            } => {
                let status = create(&client, &name, (meta_pool, data_pool), pg_num, size).await?;
                println!(
                    "file system {} created (metadata pool {}, data pool {})",
                    status.name, status.meta_pool, status.data_pool
                );
                Ok(())
            }
            FsCommand::Ls { json } => {
                let list = fs_list(&client).await?;
                if json {
                    return print_json(&serde_json::to_value(format!("{list:?}"))?);
                }
                let header = ["name", "metadata pool", "data pool", "active MDS", "standbys", "generation"];
                println!("{}", table(&header, rows(&list)));
                Ok(())
            }
            FsCommand::Status { name, json } => {
                let list = fs_list(&client).await?;
                let Some(fs) = list.into_iter().find(|f| f.name == name) else {
                    return Err(format!("file system {name:?} does not exist").into());
                };
                if json {
                    return print_json(&status_json(&fs));
                }
                println!("{}", table(&["name", "metadata pool", "data pool", "active MDS", "standbys", "generation"], rows(std::slice::from_ref(&fs))));
                for s in &fs.standbys {
                    println!("standby: {} {} (beacon {} ms ago)", s.name, s.addr, s.beacon_age_ms);
                }
                Ok(())
            }
            FsCommand::Quota {
                command:
                    QuotaCommand::Set {
                        dir,
                        max_bytes,
                        max_files,
                    },
            } => {
                if max_bytes.is_none() && max_files.is_none() {
                    return Err("give --max-bytes, --max-files or both (0 lifts a limit)".into());
                }
                if let Some(v) = max_bytes {
                    setxattr(&dir, "cairn.quota.max_bytes", v.to_string().as_bytes())?;
                }
                if let Some(v) = max_files {
                    setxattr(&dir, "cairn.quota.max_files", v.to_string().as_bytes())?;
                }
                quota_get(&dir, false)
            }
            FsCommand::Quota {
                command: QuotaCommand::Get { dir, json },
            } => quota_get(&dir, json),
            FsCommand::Df { name, json } => {
                let addr = active_mds(&client, &name).await?;
                let stat = match cairn_fs::mds::ask(&addr, MdsOp::StatFs).await? {
                    MdsAnswer::StatFs(stat) => stat,
                    other => return Err(format!("unexpected answer {other:?}").into()),
                };
                let root_xattr = |name: &str| MdsOp::GetXattr {
                    ino: cairn_proto::mds::ROOT_INO,
                    name: serde_bytes::ByteBuf::from(name.as_bytes().to_vec()),
                };
                let bytes = match cairn_fs::mds::ask(&addr, root_xattr("cairn.dir.rbytes")).await? {
                    MdsAnswer::Value(v) => String::from_utf8_lossy(&v).trim().parse::<u64>().unwrap_or(0),
                    _ => 0,
                };
                if json {
                    return print_json(&serde_json::json!({
                        "name": name,
                        "size_bytes": stat.total_bytes,
                        "avail_bytes": stat.free_bytes,
                        "file_bytes": bytes,
                        "inodes": stat.files,
                    }));
                }
                let gib = |b: u64| format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30));
                println!(
                    "{}",
                    table(
                        &["file system", "size", "avail", "file bytes", "inodes"],
                        vec![vec![name, gib(stat.total_bytes), gib(stat.free_bytes), gib(bytes), stat.files.to_string()]],
                    )
                );
                Ok(())
            }
            FsCommand::Session {
                command: SessionCommand::Ls { name, json },
            } => {
                let list = sessions(&client, &name).await?;
                if json {
                    return print_json(&serde_json::Value::Array(
                        list.iter().map(session_json).collect(),
                    ));
                }
                let rows = list
                    .iter()
                    .map(|s| {
                        vec![
                            format!("{:x}", s.id),
                            s.name.clone(),
                            s.opens.to_string(),
                            s.leases.to_string(),
                            s.recalls_pending.to_string(),
                            format!("{:.1}", s.idle_ms as f64 / 1000.0),
                            s.evicted
                                .as_ref()
                                .map_or_else(|| "open".to_owned(), |why| format!("evicted: {why}")),
                        ]
                    })
                    .collect();
                let header = ["id", "client", "opens", "leases", "recalls", "idle s", "state"];
                println!("{}", table(&header, rows));
                Ok(())
            }
            FsCommand::Session {
                command: SessionCommand::Evict { id, fs },
            } => {
                let session = u64::from_str_radix(id.trim_start_matches("0x"), 16)
                    .map_err(|_| format!("session id {id:?} is not hexadecimal"))?;
                let addr = active_mds(&client, &fs).await?;
                cairn_fs::mds::ask(&addr, MdsOp::Evict { session }).await?;
                println!("session {session:x} evicted");
                Ok(())
            }
            FsCommand::Check { name, json, data } => {
                let list = fs_list(&client).await?;
                let Some(fs) = list.into_iter().find(|f| f.name == name) else {
                    return Err(format!("file system {name:?} does not exist").into());
                };
                let data_pool = data.then_some(fs.data_pool.as_str());
                let report = cairn_fs::check::check(&client, &fs.meta_pool, data_pool).await?;
                if json {
                    print_json(&serde_json::json!({
                        "inodes": report.inodes,
                        "dentries": report.dentries,
                        "directories": report.directories,
                        "journal_entries": report.journal_entries,
                        "problems": report.problems,
                    }))?;
                } else {
                    println!(
                        "{name}: {} inodes, {} directories, {} entries ({} journal entries not yet written back)",
                        report.inodes, report.directories, report.dentries, report.journal_entries
                    );
                    for p in &report.problems {
                        println!("  {p}");
                    }
                }
                if report.problems.is_empty() {
                    if !json {
                        println!("no problems found");
                    }
                    Ok(())
                } else {
                    Err(format!("{} problems found", report.problems.len()).into())
                }
            }
            FsCommand::Rm { name, confirmed } => {
                if !confirmed {
                    return Err(format!(
                        "removing file system {name} makes its files unreachable; repeat with --yes-i-really-mean-it"
                    )
                    .into());
                }
                client.mon_command(MonCommand::FsRemove(name.clone())).await?;
                println!("file system {name} removed (its pools remain)");
                Ok(())
            }
        }
    })
}

/// A file system's status as JSON.
pub fn status_json(fs: &FsStatus) -> serde_json::Value {
    let mds = |m: &cairn_proto::mon::MdsInfo| serde_json::json!({"name": m.name, "addr": m.addr, "beacon_age_ms": m.beacon_age_ms});
    serde_json::json!({
        "name": fs.name,
        "meta_pool": fs.meta_pool,
        "data_pool": fs.data_pool,
        "generation": fs.generation,
        "active": fs.active.as_ref().map(mds),
        "standbys": fs.standbys.iter().map(mds).collect::<Vec<_>>(),
    })
}

/// `cairn mds`: runs a metadata server in the foreground.
#[derive(Debug, Args)]
pub struct MdsArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The monitor's address (default: the client config's).
    #[arg(long)]
    mon: Option<String>,
    /// The file system to serve.
    #[arg(long, default_value = "cairnfs")]
    fs: String,
    /// This daemon's name, unique per file system.
    #[arg(long, default_value = "a")]
    name: String,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// After a takeover, how long only replays from clients are served.
    #[arg(long = "reconnect-window", default_value = "1500ms", value_parser = crate::mon_cmd::parse_duration)]
    reconnect_window: std::time::Duration,
    /// A client session silent this long is evicted.
    #[arg(long = "session-timeout", default_value = "60s", value_parser = crate::mon_cmd::parse_duration)]
    session_timeout: std::time::Duration,
    /// How long clients may cache attributes and entries (renewed by each
    /// answer; recalled before another client's change).
    #[arg(long = "lease", default_value = "120s", value_parser = crate::mon_cmd::parse_duration)]
    lease: std::time::Duration,
    /// A client that does not acknowledge a recall this long is evicted.
    #[arg(long = "recall-timeout", default_value = "10s", value_parser = crate::mon_cmd::parse_duration)]
    recall_timeout: std::time::Duration,
    /// The namespace cache's budget (suffixes K, M, G): the least recently
    /// used entries already written back are dropped past it.
    #[arg(long = "cache-memory", default_value = "256M", value_parser = crate::units::parse_size)]
    cache_memory: u64,
    /// A request in flight this long is slow: logged, listed by `cairn
    /// status`, warned of by `cairn health`.
    #[arg(long = "complaint-time", default_value = "30s", value_parser = crate::mon_cmd::parse_duration)]
    complaint_time: std::time::Duration,
    /// A directory fragment with more entries than this splits in eight
    /// (each its own object); eight siblings holding a quarter of it
    /// together merge again.
    #[arg(long = "dir-split-size", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(8..))]
    dir_split_size: u64,
    /// New regular files keep their data in the MDS (inline data: in the
    /// journal and the inode record, read with the open) until they
    /// outgrow this many bytes (suffixes K, M; at most 64K). 0, the
    /// default, keeps every file's data in the data pool: inline bytes
    /// live in the MDS cache, so size `--cache-memory` for them.
    #[arg(long = "inline-max", default_value = "0", value_parser = parse_inline_max)]
    inline_max: u64,
}

fn parse_inline_max(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    let bytes = crate::units::parse_size(text)?;
    let limit = cairn_fs::mds::limits::INLINE_MAX_LIMIT;
    if bytes > limit {
        return Err(format!(
            "{bytes} bytes is past the limit of {limit}: inline data lives in the MDS's memory and journal"
        ));
    }
    Ok(bytes)
}

pub(crate) fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

pub fn run_mds(args: MdsArgs) -> CliResult {
    init_logging();
    let mon = match args.mon {
        Some(mon) => mon,
        None => args.conf.load()?.mon,
    };
    let mut config = cairn_fs::mds::MdsConfig::new(&mon, &args.fs, &args.name, args.addr);
    config.reconnect_window_ms =
        u64::try_from(args.reconnect_window.as_millis()).unwrap_or(u64::MAX);
    config.session_timeout_ms = u64::try_from(args.session_timeout.as_millis()).unwrap_or(u64::MAX);
    config.lease_ms = u64::try_from(args.lease.as_millis()).unwrap_or(u64::MAX);
    config.recall_timeout_ms = u64::try_from(args.recall_timeout.as_millis()).unwrap_or(u64::MAX);
    config.cache_bytes_max = usize::try_from(args.cache_memory).unwrap_or(usize::MAX);
    config.complaint_ms = u64::try_from(args.complaint_time.as_millis()).unwrap_or(u64::MAX);
    config.dir_split_entries = usize::try_from(args.dir_split_size).unwrap_or(usize::MAX);
    config.inline_max = args.inline_max;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        tokio::select! {
            result = cairn_fs::mds::run(config) => result.map_err(|e| e.to_string()),
            () = wait_for_signal() => Ok(()),
        }
    })?;
    Ok(())
}

pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// `cairn mount MOUNTPOINT`: mounts a file system with FUSE and serves it
/// in the foreground until unmounted, Ctrl-C or SIGTERM.
#[derive(Debug, Args)]
pub struct MountArgs {
    #[command(flatten)]
    conf: ConfArgs,
    mountpoint: PathBuf,
    #[arg(long, default_value = "cairnfs")]
    fs: String,
    /// Let every user of this host use the mount (the kernel still checks
    /// permissions).
    #[arg(long = "allow-other")]
    allow_other: bool,
    /// Threads reading the kernel's requests.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Written data the mount may hold across files (buffered, kept past
    /// close, on its way to the OSDs; suffixes K, M, G); past it a writer
    /// sends its own data at once and waits for it.
    #[arg(long = "write-buffer", default_value = "256M", value_parser = crate::units::parse_size)]
    write_buffer: u64,
}

pub fn run_mount(args: MountArgs) -> CliResult {
    init_logging();
    let conf = args.conf.load()?;
    let config = cairn_fs::mount::MountConfig {
        mon_addr: conf.mon.clone(),
        fs: args.fs,
        mountpoint: args.mountpoint,
        allow_other: args.allow_other,
        threads: args.threads,
        write_buffer_bytes: args.write_buffer,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mounted = runtime.block_on(cairn_fs::mount::mount(&config, runtime.handle().clone()))?;
    eprintln!("mounted {} at {}", config.fs, config.mountpoint.display());
    runtime.block_on(async {
        let unmounted = wait_unmounted(config.mountpoint.clone());
        tokio::select! {
            () = wait_for_signal() => {}
            () = unmounted => {}
        }
    });
    // A second signal while the unmount sends what files kept (up to 30 s
    // against a cluster that does not answer) ends the process at once.
    runtime.spawn(async {
        wait_for_signal().await;
        eprintln!("a second signal: exiting without sending what files kept");
        std::process::exit(1);
    });
    // Whatever the mount still holds dirty is lost with an unmount by
    // another hand; a signal unmounts cleanly first.
    mounted.unmount();
    Ok(())
}

/// Returns once `mountpoint` is no longer a FUSE mount of ours (someone ran
/// `umount` or `fusermount -u`).
async fn wait_unmounted(mountpoint: PathBuf) {
    let target = mountpoint.canonicalize().unwrap_or(mountpoint);
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let ours = mounts.lines().any(|l| {
            let mut parts = l.split_whitespace();
            let _source = parts.next();
            parts.next() == Some(target.to_string_lossy().as_ref())
                && parts.next().is_some_and(|t| t.starts_with("fuse"))
        });
        if !ours {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_the_active_mds_or_none() {
        let fs = FsStatus {
            name: "a".into(),
            meta_pool: "a.meta".into(),
            data_pool: "a.data".into(),
            generation: 3,
            active: None,
            standbys: vec![],
        };
        assert_eq!(rows(&[fs])[0][3], "none");
    }
}

//! `cairn osd`: runs an OSD in the foreground until Ctrl-C or SIGTERM.

use crate::output::CliResult;
use cairn_osd::OsdConfig;
use cairn_placement::Weight;
use cairn_types::OsdId;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// Flags of `cairn osd`.
#[derive(Debug, Args)]
pub struct OsdArgs {
    /// Directory of the OSD's store and id (created if missing).
    #[arg(long = "data", value_name = "DIR")]
    data_dir: PathBuf,
    /// Monitor address.
    #[arg(long = "mon", value_name = "ADDR", default_value = "127.0.0.1:6789")]
    mon_addr: String,
    /// Address to serve on (told to the monitor, clients and peers).
    #[arg(long, default_value = "127.0.0.1:6800")]
    addr: SocketAddr,
    /// Host name in the placement hierarchy.
    #[arg(long, default_value = "localhost")]
    host: String,
    /// Rack name in the placement hierarchy.
    #[arg(long, default_value = "rack0")]
    rack: String,
    /// Device class (hdd, ssd, nvme, ...).
    #[arg(long = "class", default_value = "hdd")]
    device_class: String,
    /// Placement weight (1.0 per TiB is customary).
    #[arg(long, default_value_t = 1.0)]
    weight: f64,
    /// Boot as this OSD id (default: the one saved in the data dir, or new).
    #[arg(long)]
    id: Option<u32>,
    /// If the store is corrupt (the OSD then refuses to serve it), set it
    /// aside as `store.corrupt-SECS`, mark the old id out and start empty
    /// under a new id, so recovery fills it from the peers. A store that
    /// opens is left alone.
    #[arg(long = "recreate-store")]
    recreate_store: bool,
}

/// Threads for store reads (`spawn_blocking`); tokio's default of 512
/// only adds memory on a disk that serves a few dozen reads at once.
const OSD_BLOCKING_THREADS_MAX: usize = 64;

/// glibc's malloc gives each thread that allocates concurrently an arena
/// of its own (up to 8 per core); 4 MiB payloads freed on other threads
/// then sit in many fragmenting heaps, and OSD RSS reached 385-466 MiB in
/// the interleaved benchmark. Two arenas hold it at 195-217 MiB over a
/// whole round (`scripts/cluster-rss.sh`). A fixed 1 MiB mmap threshold
/// held it lower (91-103 MiB) but cost a page fault per 4 KiB of every
/// payload: 4 MiB writes fell by a quarter, so it is not used.
/// How often free heap pages are handed back to the kernel.
const MALLOC_TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

fn bound_malloc() {
    // SAFETY: mallopt only sets an allocator parameter; called before any
    // other thread exists.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // Freed 4 MiB payloads leave holes between long-lived small blocks (PG
    // log entries, memtables) that the heap cannot shrink past; trimming
    // returns the free pages inside the heap too (madvise), at the cost of
    // one walk of the arenas every interval.
    std::thread::Builder::new()
        .name("malloc-trim".into())
        .spawn(|| {
            loop {
                std::thread::sleep(MALLOC_TRIM_INTERVAL);
                // SAFETY: malloc_trim takes the allocator's own locks; it
                // only releases memory that is free.
                #[allow(unsafe_code)]
                unsafe {
                    libc::malloc_trim(0);
                }
            }
        })
        .ok();
}

pub fn run(args: OsdArgs) -> CliResult {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let weight = Weight::from_f64(args.weight)?;
    let config = OsdConfig {
        data_dir: args.data_dir,
        addr: args.addr,
        mon_addr: args.mon_addr,
        host: args.host,
        rack: args.rack,
        device_class: args.device_class,
        weight,
        id: args.id.map(OsdId),
        recreate_store: args.recreate_store,
    };
    bound_malloc();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(OSD_BLOCKING_THREADS_MAX)
        .build()?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(crate::mon_cmd::cancel_on_signal(shutdown.clone()));
        cairn_osd::run_until(config, shutdown).await
    })?;
    Ok(())
}

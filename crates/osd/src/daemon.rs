//! The OSD daemon: the async shell around the PG cores.
//!
//! It opens the local store, boots with the monitor (keeping the id it is
//! given in `DATA_DIR/osd_id`), heartbeats, follows the map epoch by epoch,
//! keeps a [`Pg`] for every PG of a replicated pool whose acting set holds
//! this OSD, and serves `cairn_proto` messages: client writes go through
//! the PG core, whose [`Effects`] this shell executes (store transactions on
//! two store threads, PG messages over one cached connection per peer,
//! replies to waiting clients); client reads are served from the store by
//! the primary of an active PG.
//!
//! Interval epochs must agree between primary and replicas, so the map is
//! replayed one incremental at a time from genesis (epoch 1) and a PG's
//! interval starts at the first epoch its acting set, primary or min_size
//! took their current value. If the monitor no longer holds the
//! incrementals, the full map is taken and changed PGs start their
//! interval at its epoch (they then agree again at the next change).
//!
//! Restarts: every PG collection the store holds is loaded (log, info,
//! missing objects) into a core, also where this OSD no longer acts, and
//! peering decides what is current (see `docs/reliability.md`). The shell
//! carries out what the cores ask beyond messages and transactions:
//! temporary acting sets from the monitor, object pushes (read from the
//! store within a per-OSD bound on recovery reads), backfill scans, the
//! emptying of a copy before its backfill, and the removal of stray copies.

use crate::PgLimits;
use crate::codec::{
    OMAP_HEADER_XATTR, client_xattr_name, decode_pg_msg, encode_pg_msg, plan_write,
};
use crate::ec;
use crate::hello::{check_hello, source_ip};
use crate::lease::{AliveStamp, Leases, restart_lease_bound_ms};
use crate::limits::{ALIVE_INTERVAL_MS, LEASE_MS};
use crate::limits::{BACKFILL_SCAN_KEYS, PARITY_CHECK_BUDGET, PG_TICK_INTERVAL};
use crate::limits::{
    BOOT_REPEAT_PAUSE, BOOT_RETRY_INTERVAL, MAP_PAGES_MAX, META_PAGE_KEYS, OMAP_PAGE_KEYS,
    PEER_SEND_ATTEMPTS, PG_STAT_INCONSISTENT_MAX, SCRUB_LIST_PAGE_KEYS, SCRUB_READ_BYTES,
    STORE_FAILED_REPORT_INTERVAL, STORE_PREPARE_THREADS, WIPE_BATCH_OBJECTS,
};
use crate::limits::{
    BOOT_TIMEOUT, CLIENT_WRITE_TIMEOUT, EC_READ_ATTEMPTS, FULL_RATIO, FULL_TRY_RATIO,
    HEARTBEAT_INTERVAL, LIST_NAMES_MAX, MAP_REFRESH_INTERVAL, MAP_SUBSCRIBE_WAIT, MON_CALL_TIMEOUT,
    NEARFULL_RATIO, OMAP_RANGE_BYTES_MAX, OMAP_RANGE_ENTRIES_MAX, PEER_GRACE,
    PEER_HEARTBEAT_PEERS_MAX, PEER_PING_INTERVAL, PEER_PING_TIMEOUT, READ_WAIT_SHELL_MAX,
    SHARD_READ_TIMEOUT,
};
use crate::log::{
    DUP_KEY_PREFIX, DupEntry, LOG_KEY_PREFIX, LogEntry, LogResult, ReqId, Version, err_code,
};
use crate::map_view::MapView;
use crate::peering::PgInfo;
use crate::pg::{
    Activate, Effect, Effects, Guard, GuardCheck, INFO_KEY, Interval, InvalidWrite,
    MISSING_KEY_PREFIX, MapContext, ObjectState, Pg, PgEvent, PgMsg, PreparedWrite, Push,
    ReadAnswer, ReadId, Reply, StoreTag, StoreWrite, StoredPg,
};
use crate::scrub::{self, Inconsistency, ScrubEntry, ScrubMap, ScrubOrder, ScrubStamps};
use crate::shell::{
    PeerAction, PeerContext, PgSync, ScrubSchedule, Turned, admit_direct_read, admit_peer_msg,
    admit_request, admit_shard_read, due_scrubs, new_copy_lease_bound_ms, plan_pg_sync,
    push_after_read, push_start, servable, splits_due,
};
use crate::throttle::{Priority, Throttle};
use bytes::Bytes;
use cairn_placement::Weight;
use cairn_proto::limits::{GUARDS_PER_OP_MAX, OPS_PER_REQUEST_MAX};
use cairn_proto::mon::MonCommand;
use cairn_proto::mon::{
    MapFetch, MonClient, MonError, OsdStats, PgStat, PgUsage, Reply as MonReply,
};
use cairn_proto::osd::{
    ClientOp, ClientReply, ClientShardRead, ClientShardReadReply, DirectPart, GuardWire,
    KIND_CLIENT_OP, KIND_CLIENT_SHARD_READ, KIND_PEER_HELLO, KIND_PEER_MSG, KIND_PEER_PING,
    KIND_PEER_SHARD_READ, KIND_PG_COMMAND, OpError, OpKind, OpOutput, PgAction, PgCommand,
    PgCommandReply,
};
use cairn_proto::peer::{
    HELLO_VERSION, PeerHello, PeerHelloReply, PeerMsg, PeerPing, PeerPong, ShardRead,
    ShardReadError, ShardReadOk, ShardReadReply,
};
use cairn_store::{
    CollectionId, DiskStore, ObjectKey, ObjectStore, Op, Prepared, ReadOptions, StoreConfig,
    StoreError, Transaction,
};
use cairn_types::checked::CheckedBytes;
use cairn_types::options::Settings;
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use cairn_wire::{ConnectOptions, Connection, Frame, ServeOptions, Session, WireError};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How an OSD runs.
#[derive(Clone, Debug)]
pub struct OsdConfig {
    /// Holds `store/` (the object store) and `osd_id`.
    pub data_dir: PathBuf,
    /// Address to serve on; also what the monitor tells clients and peers.
    pub addr: SocketAddr,
    pub mon_addr: String,
    pub host: String,
    pub rack: String,
    pub device_class: String,
    pub weight: Weight,
    /// The id to boot as; `None` takes the one saved in the data dir, or a
    /// new one from the monitor.
    pub id: Option<OsdId>,
    /// If the store is corrupt, set it aside and start empty as a new OSD
    /// (the old id is marked out), so recovery fills it from the peers. A
    /// store that opens is never touched.
    pub recreate_store: bool,
}

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("monitor: {0}")]
    Mon(#[from] MonError),
    #[error("I/O on {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

/// Runs the OSD until the process ends.
///
/// # Errors
/// Start-up failures: the store does not open, the address is taken, the
/// monitor cannot be reached to boot within [`BOOT_TIMEOUT`].
pub async fn run(config: OsdConfig) -> Result<(), OsdError> {
    run_until(config, CancellationToken::new()).await
}

/// Runs the OSD until `shutdown` is cancelled.
///
/// # Errors
/// As [`run`].
pub async fn run_until(config: OsdConfig, shutdown: CancellationToken) -> Result<(), OsdError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |error| OsdError::Io { path, error }
    };
    let pg_limits = PgLimits::from_env().map_err(OsdError::Config)?;
    std::fs::create_dir_all(&config.data_dir).map_err(io_err(&config.data_dir))?;
    let store = match open_store(&config.data_dir).await? {
        Ok(store) => store,
        Err(reason) if config.recreate_store => recreate_store(&config, &reason).await?,
        Err(reason) => return serve_failed_store(&config, reason, shutdown).await,
    };
    let store = Arc::new(store);
    let preexisting: HashSet<CollectionId> = store.collections()?.into_iter().collect();
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|error| OsdError::Io {
            path: PathBuf::from(config.addr.to_string()),
            error,
        })?;
    let mon = MonLink::new(config.mon_addr.clone());
    let whoami = boot(
        &mon,
        &config,
        store.capacity()?.total_bytes,
        preexisting.is_empty(),
    )
    .await?;
    tracing::info!(osd = whoami.0, addr = %config.addr, "booted");
    let lease_bound_ms = restart_lease_bound_from_file(&config.data_dir);
    // Record this instance alive before any PG exists: a promise made
    // before the first record would be bounded by the previous
    // instance's record, which may be long past. If it cannot be written,
    // do not start: the next start could not bound this instance's leases.
    open_alive_file(&config.data_dir)
        .and_then(|file| record_alive(&file))
        .map_err(|error| OsdError::Io {
            path: config.data_dir.join(ALIVE_FILE),
            error,
        })?;
    // Kept running from here on, so the record is never more than an
    // interval old while this instance may promise anything.
    let alive = tokio::spawn(alive_loop(config.data_dir.clone()));
    let (store_tx, commits) = start_store_threads(store.clone());
    let osd = Arc::new_cyclic(|this| Osd {
        this: this.clone(),
        whoami,
        pg_limits,
        config,
        store,
        store_tx,
        preexisting: Mutex::new(preexisting),
        mon,
        map: RwLock::new(MapView::genesis()),
        map_fetch: tokio::sync::Mutex::new(()),
        split_for: Mutex::new(HashMap::new()),
        collections_lock: tokio::sync::Mutex::new(()),
        pgs: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        reads: Mutex::new(HashMap::new()),
        next_read: AtomicU64::new(0),
        peers: Mutex::new(HashMap::new()),
        io: IoCounters::default(),
        heartbeat_peers: tokio::sync::Mutex::new(HashMap::new()),
        told_up: Mutex::new(BTreeSet::new()),
        recovery: Throttle::new(
            OsdSettings::default().recovery_max_active,
            OsdSettings::default().recovery_bytes_per_sec,
        ),
        settings: RwLock::new(OsdSettings::default()),
        config_digest: AtomicU64::new(0),
        client_idle: std::sync::atomic::AtomicBool::new(false),
        started_secs: unix_secs(),
        lease_bound_ms,
        recovered_objects: AtomicU64::new(0),
        recovered_bytes: AtomicU64::new(0),
    });
    // Serve from here on, before the first map refresh: the PGs it loads
    // talk to their peers at once, each connection opening with a hello
    // whose answer it awaits; peers still in their own first refresh must
    // be able to answer (refusing while their map is behind), or two
    // OSDs starting together wait out each other's hello timeouts.
    let handler_osd = osd.clone();
    let handler = move |frame: Frame, session: Arc<Session>| {
        let osd = handler_osd.clone();
        async move { osd.handle_frame(frame, session).await }
    };
    let options = ServeOptions {
        shutdown,
        ..ServeOptions::default()
    };
    let serving = tokio::spawn(cairn_wire::serve(listener, handler, options));
    if let Err(error) = osd.refresh_map().await {
        tracing::warn!(%error, "first map fetch failed; retrying in the background");
    }
    osd.fetch_settings().await;
    let tasks = [
        tokio::spawn(commit_loop(osd.clone(), commits)),
        tokio::spawn(heartbeat_loop(osd.clone())),
        tokio::spawn(map_loop(osd.clone())),
        tokio::spawn(peer_heartbeat_loop(osd.clone())),
        tokio::spawn(pg_tick_loop(osd.clone())),
        alive,
    ];
    inject_panic_once(&osd);
    if let Err(error) = serving.await {
        tracing::error!(%error, "the server task failed");
    }
    for task in tasks {
        task.abort();
    }
    tracing::info!(osd = whoami.0, "stopped");
    Ok(())
}

/// Opens the store; `Ok(Err(reason))` if it is corrupt (its commit log
/// damaged before later records, its metadata unreadable): then this OSD
/// must not serve it.
async fn open_store(data_dir: &Path) -> Result<Result<DiskStore, String>, OsdError> {
    let store_dir = data_dir.join("store");
    let opened =
        tokio::task::spawn_blocking(move || DiskStore::open(&store_dir, StoreConfig::default()))
            .await
            .map_err(|e| OsdError::Config(format!("store open task: {e}")))?;
    match opened {
        Ok(store) => Ok(Ok(store)),
        Err(StoreError::Corrupt(reason)) => Ok(Err(reason)),
        Err(error) => Err(error.into()),
    }
}

/// A peer address's connection, made by whoever first needs it.
type PeerSlot = Arc<tokio::sync::Mutex<Option<Connection>>>;

/// Runs an OSD whose store is corrupt: it serves nothing and never comes
/// up, and tells the monitor why with every heartbeat (`store_error`), so
/// `cairn status` and `cairn health detail` show it until an operator
/// recreates the store (`cairn osd --data DIR --recreate-store`). The
/// monitor takes such heartbeats for no sign of life: the OSD goes down
/// (at once by its peers' reports, or after the grace) and later out, and
/// recovery rebuilds its copies elsewhere, as for a dead disk.
async fn serve_failed_store(
    config: &OsdConfig,
    reason: String,
    shutdown: CancellationToken,
) -> Result<(), OsdError> {
    let Some(id) = load_id(&config.data_dir)?.or(config.id) else {
        return Err(OsdError::Store(StoreError::Corrupt(reason)));
    };
    let hint = format!(
        "store corrupt: {reason}; recreate it from its peers with `cairn osd --data {} --recreate-store`",
        config.data_dir.display()
    );
    tracing::error!(osd = id.0, "{hint}; not serving");
    let mon = MonLink::new(config.mon_addr.clone());
    let stats = OsdStats {
        store_error: Some(hint),
        ..OsdStats::default()
    };
    let mut tick = tokio::time::interval(STORE_FAILED_REPORT_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        if let Err(error) = mon.heartbeat(id, stats.clone()).await {
            tracing::warn!(%error, "cannot report the corrupt store to the monitor");
        }
    }
}

/// Sets the corrupt store aside (`store.corrupt-SECS`, kept for a look),
/// forgets this OSD's id and marks the old id out, then opens an empty
/// store: the OSD boots under a new id and recovery fills it. A new id,
/// not the old one: peering takes an OSD's empty answer for an interval it
/// was in as proof the interval took no writes, which a store recreated
/// under the same id would falsely give (Ceph needs `osd destroy` to say
/// the same).
async fn recreate_store(config: &OsdConfig, reason: &str) -> Result<DiskStore, OsdError> {
    if let Some(id) = config.id {
        return Err(OsdError::Config(format!(
            "--recreate-store starts the OSD under a new id; drop --id {}",
            id.0
        )));
    }
    let old_id = load_id(&config.data_dir)?;
    let store_dir = config.data_dir.join("store");
    let aside = config
        .data_dir
        .join(format!("store.corrupt-{}", unix_secs()));
    tracing::warn!(reason, aside = %aside.display(), old = ?old_id.map(|o| o.0), "recreating the corrupt store");
    if let Some(old) = old_id {
        let mon = MonLink::new(config.mon_addr.clone());
        match mon.command(MonCommand::OsdOut(old)).await {
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, osd = old.0, "cannot mark the old id out; the monitor will after its down-out interval")
            }
        }
    }
    std::fs::rename(&store_dir, &aside).map_err(|error| OsdError::Io {
        path: store_dir.clone(),
        error,
    })?;
    let path = id_path(&config.data_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(OsdError::Io { path, error }),
    }
    std::fs::File::open(&config.data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|error| OsdError::Io {
            path: config.data_dir.clone(),
            error,
        })?;
    match open_store(&config.data_dir).await? {
        Ok(store) => Ok(store),
        Err(reason) => Err(OsdError::Store(StoreError::Corrupt(format!(
            "a new store is corrupt at once: {reason}"
        )))),
    }
}

/// Fault injection for the abort-on-panic test (docs/reliability.md): the
/// one OSD that removes the file this names panics, once, in a task holding
/// a lock, half a second after start. Tokio would catch such a panic and
/// keep the daemon running; the binary's panic hook must abort it instead.
pub const DEBUG_PANIC_ONCE_ENV: &str = "CAIRN_DEBUG_PANIC_ONCE";

fn inject_panic_once(osd: &Arc<Osd>) {
    let Some(path) = std::env::var_os(DEBUG_PANIC_ONCE_ENV) else {
        return;
    };
    if std::fs::remove_file(&path).is_err() {
        return;
    }
    let osd = osd.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let _held = lock(&osd.pgs);
        panic!(
            "injected by {DEBUG_PANIC_ONCE_ENV} on osd.{} (pid {})",
            osd.whoami.0,
            std::process::id()
        );
    });
}

/// How many times an erasure-coded write refused `ObjectBusy` (an earlier
/// write to its object landed first) is planned again by the OSD, a
/// millisecond apart, before the client is told to retry.
const EC_WRITE_REPLANS: u32 = 20;

/// Fault injection for the write-hole test (docs/erasure-coding.md): the
/// one OSD that removes the file this names, as the primary of an
/// erasure-coded partial overwrite, sends that write's sub-write to one
/// shard only, drops every sub-write after it, and aborts two seconds
/// later (unless stopped first): a write cut short on fewer than `k`
/// shards, which peering must roll back where it landed.
pub const DEBUG_CUT_EC_WRITE_ENV: &str = "CAIRN_DEBUG_CUT_EC_WRITE";

/// 0: no cut armed; 1: the cut's one sub-write went out.
static EC_WRITE_CUT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether `msg` is to be dropped by the write-hole fault injection.
fn cut_ec_write(msg: &PgMsg) -> bool {
    static TRIGGER: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let PgMsg::SubWrite(write) = msg else {
        return false;
    };
    let Some(trigger) =
        TRIGGER.get_or_init(|| std::env::var_os(DEBUG_CUT_EC_WRITE_ENV).map(PathBuf::from))
    else {
        return false;
    };
    if EC_WRITE_CUT.load(Ordering::SeqCst) == 1 {
        return true;
    }
    let partial = write
        .ops
        .iter()
        .any(|op| matches!(op, Op::CloneRange { .. }));
    if partial && std::fs::remove_file(trigger).is_ok() {
        EC_WRITE_CUT.store(1, Ordering::SeqCst);
        tracing::warn!(
            version = %write.entry.version,
            "{DEBUG_CUT_EC_WRITE_ENV}: this sub-write goes out, no other, then the OSD aborts"
        );
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::process::abort();
        });
    }
    false
}

/// The id file: the monitor's id for this OSD, so a restart keeps it.
fn id_path(data_dir: &Path) -> PathBuf {
    data_dir.join("osd_id")
}

fn load_id(data_dir: &Path) -> Result<Option<OsdId>, OsdError> {
    let path = id_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map(|id| Some(OsdId(id)))
            .map_err(|_| OsdError::Config(format!("{} holds no OSD id", path.display()))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(OsdError::Io { path, error }),
    }
}

/// Writes the id durably (temp file, fsync, rename) so a crash leaves
/// either no id or the whole id.
fn save_id(data_dir: &Path, id: OsdId) -> Result<(), OsdError> {
    let path = id_path(data_dir);
    let tmp = data_dir.join("osd_id.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut file, format!("{}\n", id.0).as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    };
    write().map_err(|error| OsdError::Io { path, error })
}

/// Boots with the monitor, retrying until [`BOOT_TIMEOUT`]; persists the id.
async fn boot(
    mon: &MonLink,
    config: &OsdConfig,
    capacity_bytes: u64,
    store_empty: bool,
) -> Result<OsdId, OsdError> {
    let saved = load_id(&config.data_dir)?;
    if let (Some(saved), Some(asked)) = (saved, config.id)
        && saved != asked
    {
        return Err(OsdError::Config(format!(
            "data dir belongs to osd.{}, not osd.{}",
            saved.0, asked.0
        )));
    }
    let deadline = tokio::time::Instant::now() + BOOT_TIMEOUT;
    if let (None, Some(asked), true) = (saved, config.id, store_empty) {
        refuse_known_id_with_empty_store(mon, asked, deadline).await?;
    }
    let id = saved.or(config.id);
    let command = MonCommand::OsdBoot {
        id,
        addr: config.addr.to_string(),
        host: config.host.clone(),
        rack: config.rack.clone(),
        device_class: config.device_class.clone(),
        weight: config.weight,
        capacity_bytes,
    };
    let reply = loop {
        match mon.command(command.clone()).await {
            Ok(MonReply::Done { epoch }) => {
                // The map still had this OSD up (a restart before the
                // monitor noticed): it was marked down first; boot again.
                tracing::info!(%epoch, "marked down for the restart; booting again");
                tokio::time::sleep(BOOT_REPEAT_PAUSE).await;
            }
            Ok(reply) => break reply,
            Err(error @ MonError::Wire(_)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(%error, "monitor not reachable yet");
                tokio::time::sleep(BOOT_RETRY_INTERVAL).await;
            }
            Err(error) => return Err(error.into()),
        }
    };
    let MonReply::OsdBooted { osd, .. } = reply else {
        return Err(OsdError::Config(format!("unexpected boot reply {reply:?}")));
    };
    if id.is_some_and(|id| id != osd) {
        return Err(OsdError::Config(format!(
            "monitor booted us as osd.{}",
            osd.0
        )));
    }
    if saved != Some(osd) {
        save_id(&config.data_dir, osd)?;
    }
    Ok(osd)
}

/// Refuses to boot `id`, asked for on the command line by a data dir
/// that never booted and holds no PG copy, if the map knows that id
/// already: that OSD's disk was lost or replaced. Peering takes an OSD's
/// "no copy" answer for an interval it belonged to as proof the interval
/// accepted no writes; an empty store under the old id would give that
/// answer falsely and let peering pass over writes only the lost disk
/// held (Ceph requires `osd destroy` before an id is reused, for the same
/// reason). Without `--id` the OSD joins under a new id and recovery
/// fills it, as `--recreate-store` does.
async fn refuse_known_id_with_empty_store(
    mon: &MonLink,
    id: OsdId,
    deadline: tokio::time::Instant,
) -> Result<(), OsdError> {
    let map = loop {
        match mon.get_map(Epoch(0)).await {
            Ok(MapFetch::Full { map, .. }) => break map,
            Ok(MapFetch::Incrementals { .. }) => {
                return Err(OsdError::Config(
                    "monitor answered a request for the whole map with incrementals".into(),
                ));
            }
            Err(error @ MonError::Wire(_)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(%error, "monitor not reachable yet");
                tokio::time::sleep(BOOT_RETRY_INTERVAL).await;
            }
            Err(error) => return Err(error.into()),
        }
    };
    if map.osd(id).is_some() {
        return Err(OsdError::Config(format!(
            "osd.{} is in the map but this data dir is new and its store empty: booting it \
             under that id would answer for intervals osd.{} served with copies it never \
             had; drop --id to join under a new id (recovery fills it)",
            id.0, id.0
        )));
    }
    Ok(())
}

/// A monitor connection that reconnects after failures.
#[derive(Debug)]
struct MonLink {
    addr: String,
    client: tokio::sync::Mutex<Option<MonClient>>,
}

impl MonLink {
    fn new(addr: String) -> MonLink {
        MonLink {
            addr,
            client: tokio::sync::Mutex::new(None),
        }
    }

    async fn client(&self) -> Result<MonClient, MonError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let options = ConnectOptions {
            connect_timeout: MON_CALL_TIMEOUT,
            request_timeout: MON_CALL_TIMEOUT,
            ..ConnectOptions::default()
        };
        let client = MonClient::connect_with(self.addr.as_str(), options).await?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Forgets the connection after a transport error, so the next call
    /// reconnects.
    async fn check<T>(&self, result: Result<T, MonError>) -> Result<T, MonError> {
        if matches!(result, Err(MonError::Wire(_))) {
            *self.client.lock().await = None;
        }
        result
    }

    async fn command(&self, command: MonCommand) -> Result<MonReply, MonError> {
        let result = match self.client().await {
            Ok(client) => client.command(command).await,
            Err(e) => Err(e),
        };
        self.check(result).await
    }

    async fn heartbeat(&self, osd: OsdId, stats: OsdStats) -> Result<MonReply, MonError> {
        let result = match self.client().await {
            Ok(client) => client.heartbeat(osd, stats).await,
            Err(e) => Err(e),
        };
        self.check(result).await
    }

    async fn report_failure(&self, reporter: OsdId, target: OsdId) -> Result<MonReply, MonError> {
        let result = match self.client().await {
            Ok(client) => client.report_failure(reporter, target).await,
            Err(e) => Err(e),
        };
        self.check(result).await
    }

    async fn subscribe(&self, have: Epoch) -> Result<MapFetch, MonError> {
        let result = match self.client().await {
            Ok(client) => client.subscribe(have, MAP_SUBSCRIBE_WAIT).await,
            Err(e) => Err(e),
        };
        self.check(result).await
    }

    async fn get_map(&self, have: Epoch) -> Result<MapFetch, MonError> {
        let result = match self.client().await {
            Ok(client) => client.get_map(have).await,
            Err(e) => Err(e),
        };
        self.check(result).await
    }
}

/// One PG this OSD holds (public so the simulator's shell holds them the
/// same way).
#[derive(Debug)]
pub struct PgSlot {
    pub pg: Pg,
    /// The interval whose backfill emptied this copy (once per interval:
    /// a resent activation must not empty it again).
    pub wiped_in: Option<Epoch>,
}

/// Milliseconds of this process's monotonic clock, for read leases.
fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl PgSlot {
    fn handle(&mut self, event: PgEvent) -> Effects {
        self.handle_at(clock_ms(), event)
    }

    /// Handles `event` with the PG's clock (read leases) at `now_ms`: the
    /// daemon's monotonic clock, or the simulator's virtual one.
    pub fn handle_at(&mut self, now_ms: u64, event: PgEvent) -> Effects {
        self.pg.set_clock(now_ms);
        self.pg.handle(event)
    }
}

/// What the store threads report: a PG's transaction is durable, or failed.
type Committed = (PgId, StoreWrite, Result<(), StoreError>);

/// What the store threads take: a PG's transaction, or a barrier answered
/// once every transaction queued before it is durable.
enum StoreJob {
    Write(PgId, StoreWrite),
    Barrier(oneshot::Sender<()>),
    /// From a prepare thread: the transaction queued as number `.0`.
    Prepared(u64, Prepared),
}

/// What the submitter hands the waiter.
enum Submitted {
    Write(PgId, StoreWrite, cairn_store::Commit),
    Barrier(oneshot::Sender<()>),
}

/// A job the submitter holds until every job queued before it is handed
/// to the store.
enum Pending {
    /// `None` while a prepare thread works on it.
    Write(PgId, StoreWrite, Option<Prepared>),
    Barrier(oneshot::Sender<()>),
}

/// Starts the store's threads: a submitter that takes transactions in the
/// order they were queued (version order per PG), prepares them (large ones
/// on [`STORE_PREPARE_THREADS`] threads at once) and hands them to the store
/// in that same order; and a waiter that reports commits. The channels are
/// unbounded: what is in them is bounded by each PG's in-flight limit
/// (`PgLimits::inflight_max`), and a bounded queue here could block the PG
/// lock against the commit loop that drains it.
fn start_store_threads(
    store: Arc<DiskStore>,
) -> (
    mpsc::UnboundedSender<StoreJob>,
    mpsc::UnboundedReceiver<Committed>,
) {
    let (store_tx, mut store_rx) = mpsc::unbounded_channel::<StoreJob>();
    let (prepare_tx, prepare_rx) = std::sync::mpsc::channel::<(u64, Transaction)>();
    let prepare_rx = Arc::new(Mutex::new(prepare_rx));
    let (wait_tx, wait_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    for _ in 0..STORE_PREPARE_THREADS {
        let store = Arc::clone(&store);
        let jobs = Arc::clone(&prepare_rx);
        let results = store_tx.clone();
        std::thread::spawn(move || {
            loop {
                let next = lock(&jobs).recv();
                let Ok((seq, txn)) = next else { break };
                if results
                    .send(StoreJob::Prepared(seq, store.prepare(txn)))
                    .is_err()
                {
                    break;
                }
            }
        });
    }
    std::thread::spawn(move || {
        // Jobs not yet handed to the store, in queue order; the first is
        // number `first`.
        let mut pending = std::collections::VecDeque::<Pending>::new();
        let mut first = 0u64;
        while let Some(job) = store_rx.blocking_recv() {
            match job {
                StoreJob::Write(pg, mut write) => {
                    let collection = write.txn.collection;
                    let txn = std::mem::replace(&mut write.txn, Transaction::new(collection));
                    let prepared =
                        if txn.payload_bytes() < cairn_store::limits::DIRECT_WRITE_BYTES_MIN {
                            Some(store.prepare(txn))
                        } else {
                            let seq = first + pending.len() as u64;
                            if prepare_tx.send((seq, txn)).is_err() {
                                break;
                            }
                            None
                        };
                    pending.push_back(Pending::Write(pg, write, prepared));
                }
                StoreJob::Barrier(done) => pending.push_back(Pending::Barrier(done)),
                StoreJob::Prepared(seq, prepared) => {
                    let slot = seq
                        .checked_sub(first)
                        .and_then(|i| usize::try_from(i).ok())
                        .and_then(|i| pending.get_mut(i));
                    if let Some(Pending::Write(_, _, slot)) = slot {
                        *slot = Some(prepared);
                    }
                }
            }
            // Hand on every job at the front that is ready.
            while let Some(job) = pending.pop_front() {
                let submitted = match job {
                    Pending::Write(pg, write, Some(prepared)) => {
                        Submitted::Write(pg, write, store.submit_prepared(prepared))
                    }
                    Pending::Barrier(done) => Submitted::Barrier(done),
                    waiting @ Pending::Write(_, _, None) => {
                        pending.push_front(waiting);
                        break;
                    }
                };
                first += 1;
                if wait_tx.send(submitted).is_err() {
                    return;
                }
            }
        }
    });
    std::thread::spawn(move || {
        for submitted in wait_rx {
            match submitted {
                Submitted::Write(pg, write, commit) => {
                    if done_tx.send((pg, write, commit.wait())).is_err() {
                        break;
                    }
                }
                Submitted::Barrier(done) => drop(done.send(())),
            }
        }
    });
    (store_tx, done_rx)
}

/// Feeds durable versions to their PGs. A transaction the store refused
/// after its PG logged it means the PG's memory and its disk disagree
/// (the primary validates requests before logging, so this is an I/O
/// error, a store at its hard full limit, or a bug): the OSD stops at once,
/// as if killed, rather than serve from that state, and the supervisor or
/// the operator restarts it.
async fn commit_loop(osd: Arc<Osd>, mut commits: mpsc::UnboundedReceiver<Committed>) {
    while let Some((pg, write, result)) = commits.recv().await {
        let version = write.version;
        if let Err(error) = result {
            tracing::error!(%pg, %version, ?write.tag, %error, "store refused a PG transaction; stopping");
            std::process::exit(EXIT_STORE_FAILED);
        }
        let event = match write.tag {
            StoreTag::Entry => PgEvent::LocalCommitted { version },
            StoreTag::Part => continue,
            tag => PgEvent::Committed(tag),
        };
        osd.feed(pg, event).await;
    }
}

/// Exit status of an OSD that stopped because its store refused a write.
const EXIT_STORE_FAILED: i32 = 75;

async fn heartbeat_loop(osd: Arc<Osd>) {
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        tick.tick().await;
        match osd.mon.heartbeat(osd.whoami, osd.stats()).await {
            Ok(MonReply::Heartbeat { up: false, .. }) => {
                tracing::warn!(osd = osd.whoami.0, "marked down; booting again");
                let capacity = osd.store.capacity().map_or(0, |c| c.total_bytes);
                // Booted before, so its id is saved: no fresh-store check.
                if let Err(error) = boot(&osd.mon, &osd.config, capacity, false).await {
                    tracing::warn!(%error, "re-boot failed");
                }
            }
            Ok(MonReply::Heartbeat { config_digest, .. })
                if config_digest != osd.config_digest.load(Ordering::Relaxed) =>
            {
                osd.fetch_settings().await;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "heartbeat failed"),
        }
    }
}

/// Whether more of the map follows a fetch: a full page of incrementals,
/// or a full map (sent to an OSD behind the history: the oldest map the
/// monitor keeps, whose incrementals come next).
fn page_is_full(fetch: &MapFetch) -> bool {
    match fetch {
        MapFetch::Incrementals { incrementals, .. } => {
            incrementals.len() >= cairn_proto::limits::INCREMENTALS_PER_REPLY_MAX
        }
        MapFetch::Full { .. } => true,
    }
}

/// Follows the map by subscription: the monitor answers as soon as an
/// epoch after ours is committed. After a failed call it waits
/// [`MAP_REFRESH_INTERVAL`] and fetches the plain way before subscribing
/// again, so a monitor without subscriptions is still followed.
async fn map_loop(osd: Arc<Osd>) {
    loop {
        match osd.mon.subscribe(osd.map_epoch()).await {
            Ok(fetch) if page_is_full(&fetch) => {
                // Far behind: page through the rest before the PGs move.
                osd.apply_fetch(fetch, false).await;
                if let Err(error) = osd.refresh_map().await {
                    tracing::warn!(%error, "map refresh failed");
                }
            }
            Ok(fetch) => osd.apply_fetch(fetch, true).await,
            Err(error) => {
                tracing::warn!(%error, "map subscription failed");
                tokio::time::sleep(MAP_REFRESH_INTERVAL).await;
                if let Err(error) = osd.refresh_map().await {
                    tracing::warn!(%error, "map refresh failed");
                }
            }
        }
    }
}

/// Pings every peer this OSD shares a PG with, on connections of their
/// own, and reports to the monitor each peer silent for [`PEER_GRACE`]: the
/// monitor marks an OSD down as soon as enough distinct peers report it,
/// far sooner than its own heartbeat grace.
async fn peer_heartbeat_loop(osd: Arc<Osd>) {
    let mut tick = tokio::time::interval(PEER_PING_INTERVAL);
    let mut last_heard: HashMap<OsdId, tokio::time::Instant> = HashMap::new();
    loop {
        tick.tick().await;
        let peers = osd.heartbeat_targets();
        last_heard.retain(|id, _| peers.iter().any(|(peer, _)| peer == id));
        let mut pings = tokio::task::JoinSet::new();
        for (peer, addr) in peers {
            let osd = osd.clone();
            pings.spawn(async move { (peer, osd.ping(peer, &addr).await) });
        }
        while let Some(Ok((peer, alive))) = pings.join_next().await {
            let now = tokio::time::Instant::now();
            let heard = last_heard.entry(peer).or_insert(now);
            if alive {
                *heard = now;
            } else if now.duration_since(*heard) > PEER_GRACE {
                tracing::warn!(osd = peer.0, "peer silent past its grace; reporting it");
                if let Err(error) = osd.mon.report_failure(osd.whoami, peer).await {
                    tracing::warn!(%error, "failure report not delivered");
                }
            }
        }
    }
}

/// Ticks every PG about once a second, so lost peering, recovery and
/// backfill messages are sent again.
async fn pg_tick_loop(osd: Arc<Osd>) {
    let mut tick = tokio::time::interval(PG_TICK_INTERVAL);
    let mut client_ops_before = 0;
    loop {
        tick.tick().await;
        // Recovery gets more of the disk while clients leave it idle.
        let client_ops =
            osd.io.read_ops.load(Ordering::Relaxed) + osd.io.write_ops.load(Ordering::Relaxed);
        osd.apply_recovery_limits(client_ops == client_ops_before);
        client_ops_before = client_ops;
        let pgs: Vec<PgId> = lock(&osd.pgs).keys().copied().collect();
        for pg in pgs {
            osd.feed(pg, PgEvent::Tick).await;
        }
        osd.schedule_scrubs().await;
    }
}

/// File with the boot-clock moment this OSD was last known alive
/// ([`AliveStamp`]), rewritten every [`ALIVE_INTERVAL_MS`].
const ALIVE_FILE: &str = "alive";

/// Now on the boot clock, or `None` where the kernel does not say.
fn boot_clock_now() -> Option<AliveStamp> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds = uptime.split_whitespace().next()?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, "0"));
    let centis: u64 = format!("{fraction:0<2}").get(..2)?.parse().ok()?;
    let uptime_ms = whole.parse::<u64>().ok()?.checked_mul(1_000)? + centis * 10;
    Some(AliveStamp {
        boot_id: boot_id.trim().to_owned(),
        uptime_ms,
    })
}

/// How long read leases the previous instance of this OSD granted may
/// still run ([`restart_lease_bound_ms`]).
fn restart_lease_bound_from_file(data_dir: &Path) -> u64 {
    let last = std::fs::read_to_string(data_dir.join(ALIVE_FILE))
        .ok()
        .and_then(|text| AliveStamp::decode(&text));
    restart_lease_bound_ms(last.as_ref(), boot_clock_now().as_ref())
}

/// Records now as the moment this OSD was last alive, in place (see
/// [`alive_loop`]). Not synced: [`restart_lease_bound_ms`] trusts a record
/// only within the boot that wrote it, which the page cache outlives.
fn record_alive(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let stamp = boot_clock_now()
        .ok_or_else(|| std::io::Error::other("no boot clock (/proc/uptime, boot_id)"))?;
    file.write_all_at(stamp.encode().as_bytes(), 0)
}

fn open_alive_file(data_dir: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(data_dir.join(ALIVE_FILE))
}

/// Rewrites the alive file in place every [`ALIVE_INTERVAL_MS`]:
/// truncating it would free its block, and on a file system mounted with
/// `discard` that waits for a device discard (seen blocking a runtime
/// thread for milliseconds under load).
async fn alive_loop(data_dir: PathBuf) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(ALIVE_INTERVAL_MS));
    let mut file = None;
    loop {
        tick.tick().await;
        if file.is_none() {
            file = open_alive_file(&data_dir)
                .inspect_err(|error| tracing::warn!(%error, "cannot open the alive file"))
                .ok();
        }
        if let Some(f) = &file
            && let Err(error) = record_alive(f)
        {
            tracing::warn!(%error, "cannot record that this OSD is alive");
            file = None;
        }
    }
}

/// Seconds since the Unix epoch.
fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The settings an OSD applies (`cairn_types::options`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct OsdSettings {
    recovery_max_active: usize,
    recovery_max_active_idle: usize,
    recovery_bytes_per_sec: u64,
    scrub_interval_secs: u64,
    deep_scrub_interval_secs: u64,
    scrub_auto_repair: bool,
    scrub_chunk_objects: usize,
    max_scrubs: usize,
}

impl OsdSettings {
    fn from_settings(s: &Settings) -> OsdSettings {
        let size = |name| usize::try_from(s.u64(name)).unwrap_or(usize::MAX);
        OsdSettings {
            recovery_max_active: size("osd_recovery_max_active"),
            recovery_max_active_idle: size("osd_recovery_max_active_idle"),
            recovery_bytes_per_sec: s.u64("osd_recovery_max_bytes_per_sec"),
            scrub_interval_secs: s.u64("osd_scrub_interval"),
            deep_scrub_interval_secs: s.u64("osd_deep_scrub_interval"),
            scrub_auto_repair: s.bool("osd_scrub_auto_repair"),
            scrub_chunk_objects: size("osd_scrub_chunk_max"),
            max_scrubs: size("osd_max_scrubs"),
        }
    }
}

impl Default for OsdSettings {
    fn default() -> OsdSettings {
        OsdSettings::from_settings(&Settings::default())
    }
}

type Waiters = HashMap<ReqId, Vec<oneshot::Sender<Reply>>>;

/// What the core says of a client read: read the store now, or answer.
#[derive(Debug)]
enum ReadStep {
    Go,
    Answer(ReadAnswer),
}

/// The daemon's shared state.
#[derive(Debug)]
struct Osd {
    /// This OSD itself, for the tasks it spawns.
    this: std::sync::Weak<Osd>,
    whoami: OsdId,
    pg_limits: PgLimits,
    config: OsdConfig,
    store: Arc<DiskStore>,
    store_tx: mpsc::UnboundedSender<StoreJob>,
    /// Collections held at start (strays included), until purged: their PGs
    /// get a core even where this OSD does not act, so the primary learns
    /// of the copy and has it removed once clean.
    preexisting: Mutex<HashSet<CollectionId>>,
    mon: MonLink,
    map: RwLock<MapView>,
    /// One map fetch at a time.
    map_fetch: tokio::sync::Mutex<()>,
    /// Each pool's `pg_num` this OSD's copies were last split for.
    split_for: Mutex<HashMap<PoolId, u32>>,
    /// Held while collections are split or removed.
    collections_lock: tokio::sync::Mutex<()>,
    pgs: Mutex<HashMap<PgId, PgSlot>>,
    /// Clients waiting for a write's reply.
    pending: Mutex<Waiters>,
    /// Client reads waiting for the core's next step, by read number.
    reads: Mutex<HashMap<ReadId, oneshot::Sender<ReadStep>>>,
    /// The next read number.
    next_read: AtomicU64,
    /// One slot per peer address, each locked while its connection is
    /// made (connect and hello), so a slow peer holds up only the messages
    /// to itself.
    peers: Mutex<HashMap<String, PeerSlot>>,
    io: IoCounters,
    /// Heartbeat connections, one per peer address, apart from `peers`.
    heartbeat_peers: tokio::sync::Mutex<HashMap<String, Connection>>,
    /// The up OSDs the PGs were last told of.
    told_up: Mutex<BTreeSet<OsdId>>,
    /// Recovery and backfill pushes across all PGs: a bounded pool,
    /// degraded first, with a byte-rate limit (keeps healing from starving
    /// clients).
    recovery: Arc<Throttle>,
    /// The cluster's settings as last fetched from the monitor.
    settings: RwLock<OsdSettings>,
    /// Their digest (0: none fetched yet).
    config_digest: AtomicU64,
    /// No client op in the last tick: the idle recovery limit applies.
    client_idle: std::sync::atomic::AtomicBool,
    /// When this process started (seconds since the Unix epoch): PGs never
    /// scrubbed count from here, so a restart does not start every scrub.
    started_secs: u64,
    /// How long a read lease the previous instance granted may still run.
    lease_bound_ms: u64,
    recovered_objects: AtomicU64,
    recovered_bytes: AtomicU64,
}

/// Client operations served since start, for the monitor's I/O rates.
#[derive(Debug, Default)]
struct IoCounters {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
}

/// A poisoned lock means a thread panicked inside a critical section and
/// may have left its data half-updated: never go on with it. (The binary's
/// panic hook aborts the process at the panic itself, so this is reached
/// only where the OSD runs as a library without that hook.)
const POISONED: &str = "a thread panicked holding an OSD lock";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().expect(POISONED)
}

fn read<T>(rw: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    rw.read().expect(POISONED)
}

fn write<T>(rw: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    rw.write().expect(POISONED)
}

impl Osd {
    fn map_epoch(&self) -> Epoch {
        read(&self.map).epoch()
    }

    /// Fetches map changes, replays them, and brings the PGs up to date.
    async fn refresh_map(&self) -> Result<(), OsdError> {
        // The monitor pages long histories; fetch until caught up, so the
        // PGs see the past intervals (not a full map that forgets them),
        // and only then move the PGs: a PG started at an epoch long past
        // (after a restart) would peer and activate an interval that is
        // over.
        let mut result = Ok(());
        let mut synced = false;
        for _page in 0..MAP_PAGES_MAX {
            let have = self.map_epoch();
            let fetch = match tokio::time::timeout(MON_CALL_TIMEOUT, self.mon.get_map(have)).await {
                Ok(Ok(fetch)) => fetch,
                Ok(Err(error)) => {
                    result = Err(error.into());
                    break;
                }
                Err(_) => {
                    result = Err(MonError::Wire("map fetch timed out".into()).into());
                    break;
                }
            };
            let more = page_is_full(&fetch);
            self.apply_fetch(fetch, !more).await;
            if !more {
                synced = true;
                break;
            }
        }
        if !synced {
            // Not caught up (a failed fetch, or too many pages): the PGs
            // move as far as the map got.
            let _one = self.map_fetch.lock().await;
            self.sync_pgs().await;
        }
        result
    }

    /// Replays fetched map changes (skipping epochs already applied) and,
    /// if `sync`, brings the PGs up to date; one application at a time.
    async fn apply_fetch(&self, fetch: MapFetch, sync: bool) {
        let _one = self.map_fetch.lock().await;
        {
            let mut view = write(&self.map);
            match fetch {
                MapFetch::Incrementals { incrementals, .. } => {
                    for inc in &incrementals {
                        if inc.epoch > view.epoch() && !view.advance(inc) {
                            tracing::warn!(epoch = inc.epoch.0, "incremental out of order");
                            break;
                        }
                    }
                }
                MapFetch::Full { map, endpoints, .. } => {
                    if map.epoch > view.epoch() {
                        tracing::info!(epoch = map.epoch.0, "history gone: took the full map");
                        view.jump(map, endpoints);
                    }
                }
            }
        }
        if sync {
            self.sync_pgs().await;
        }
    }

    /// The up OSDs of the acting sets of this OSD's PGs, with addresses.
    fn heartbeat_targets(&self) -> Vec<(OsdId, String)> {
        let mut ids: Vec<OsdId> = {
            let pgs = lock(&self.pgs);
            let mut ids: Vec<OsdId> = pgs
                .values()
                .flat_map(|slot| {
                    let interval = slot.pg.interval();
                    interval.acting.iter().chain(interval.up.iter()).copied()
                })
                .filter(|id| *id != self.whoami)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        ids.truncate(PEER_HEARTBEAT_PEERS_MAX);
        let view = read(&self.map);
        ids.into_iter()
            .filter(|id| view.state.map.osd(*id).is_some_and(|o| o.up))
            .filter_map(|id| view.state.endpoints.get(&id).map(|e| (id, e.addr.clone())))
            .collect()
    }

    /// Whether `peer`, at `addr`, answers a ping within [`PEER_PING_TIMEOUT`].
    async fn ping(&self, peer: OsdId, addr: &str) -> bool {
        let cached = self
            .heartbeat_peers
            .lock()
            .await
            .get(addr)
            .filter(|c| !c.is_closed())
            .cloned();
        // Connect outside the lock: an unreachable peer must not hold up
        // the pings of the others for its connect timeout.
        let connection = match cached {
            Some(conn) => conn,
            None => {
                let options = ConnectOptions {
                    connect_timeout: PEER_PING_TIMEOUT,
                    request_timeout: PEER_PING_TIMEOUT,
                    ..ConnectOptions::default()
                };
                let connect = self.connect_peer(peer, addr, options);
                let Ok(Ok(conn)) = tokio::time::timeout(PEER_PING_TIMEOUT, connect).await else {
                    return false;
                };
                self.heartbeat_peers
                    .lock()
                    .await
                    .insert(addr.to_owned(), conn.clone());
                conn
            }
        };
        let ping = PeerPing {
            from: self.whoami,
            epoch: self.map_epoch(),
        };
        let call = connection.call::<PeerPing, PeerPong>(&ping, Bytes::new());
        match tokio::time::timeout(PEER_PING_TIMEOUT, call).await {
            Ok(Ok(_)) => true,
            _ => {
                self.heartbeat_peers.lock().await.remove(addr);
                false
            }
        }
    }

    /// What the heartbeat tells the monitor.
    fn stats(&self) -> OsdStats {
        let io = &self.io;
        let mut stats = OsdStats {
            client_read_ops: io.read_ops.load(Ordering::Relaxed),
            client_read_bytes: io.read_bytes.load(Ordering::Relaxed),
            client_write_ops: io.write_ops.load(Ordering::Relaxed),
            client_write_bytes: io.write_bytes.load(Ordering::Relaxed),
            ..OsdStats::default()
        };
        match self.store.capacity() {
            Ok(capacity) => {
                stats.total_bytes = capacity.total_bytes;
                stats.used_bytes = capacity.used_bytes;
                stats.available_bytes = capacity.available_bytes;
                stats.stored_bytes = capacity.stored_bytes;
                stats.full = capacity.used_ratio() >= FULL_RATIO;
                stats.nearfull = capacity.used_ratio() >= NEARFULL_RATIO;
            }
            Err(error) => tracing::warn!(%error, "cannot read store capacity"),
        }
        let pgs = self.pg_stats();
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for pg in &pgs {
            *counts.entry(pg.state.clone()).or_insert(0) += 1;
        }
        stats.pg_states = counts.into_iter().collect();
        stats.pgs = pgs;
        stats.pgs_held = u32::try_from(lock(&self.pgs).len()).unwrap_or(u32::MAX);
        stats.map_epoch = self.map_epoch().0;
        stats.recovered_objects = self.recovered_objects.load(Ordering::Relaxed);
        stats.recovered_bytes = self.recovered_bytes.load(Ordering::Relaxed);
        match self.store.collection_usage() {
            Ok(mut usage) => {
                let pgs = lock(&self.pgs);
                // Roll-back stashes are no client's objects: counted in the
                // space they take, not in the objects and bytes stored.
                for (pg, slot) in pgs.iter() {
                    let c = crate::split::collection_of(*pg);
                    for stash in slot.pg.stashes() {
                        if let (Ok(stat), Some(held)) =
                            (self.store.stat(c, &stash), usage.get_mut(&c))
                        {
                            held.subtract(&cairn_store::CollectionUsage::object(
                                stat.size_bytes,
                                0,
                            ));
                        }
                    }
                }
                let position = |pg: &PgId| {
                    let acting = &pgs.get(pg)?.pg.interval().acting;
                    let at = acting.iter().position(|o| *o == self.whoami)?;
                    u32::try_from(at).ok()
                };
                stats.pg_usage = pg_usage(&usage, position);
            }
            Err(error) => tracing::warn!(%error, "cannot read the store's usage"),
        }
        stats
    }

    /// The PGs this OSD is primary of, as the monitor shows them.
    fn pg_stats(&self) -> Vec<PgStat> {
        let pgs = lock(&self.pgs);
        let mut out: Vec<PgStat> = pgs
            .iter()
            .filter(|(_, slot)| slot.pg.interval().primary == Some(self.whoami))
            .map(|(pg, slot)| pg_stat(*pg, &slot.pg))
            .collect();
        out.sort_by_key(|p| p.pg);
        out
    }

    /// Creates the PGs this OSD newly acts for or holds, and tells existing
    /// ones of interval changes and of OSDs going up or down.
    async fn sync_pgs(&self) {
        let split = self.split_pgs().await;
        let up_osds = read(&self.map).up_osds();
        let up_changed = {
            let mut told = lock(&self.told_up);
            let changed = *told != up_osds;
            *told = up_osds;
            changed
        };
        // Copies first, so no two of the locks are held at once.
        let held: HashMap<PgId, Epoch> = lock(&self.pgs)
            .iter()
            .map(|(pg, slot)| (*pg, slot.pg.interval().epoch_started))
            .collect();
        let preexisting = lock(&self.preexisting).clone();
        let plan = plan_pg_sync(
            self.whoami,
            &read(&self.map),
            |pg| held.get(&pg).copied(),
            |pg| preexisting.contains(&CollectionId::pg(pg.pool.0, pg.seed)),
            up_changed,
        );
        for step in plan {
            match step {
                PgSync::NewInterval {
                    pg,
                    interval,
                    context,
                } => {
                    self.feed(pg, PgEvent::MapContext(context)).await;
                    self.feed(pg, PgEvent::IntervalChange(interval)).await;
                }
                PgSync::Context { pg, context } => {
                    self.feed(pg, PgEvent::MapContext(context)).await;
                }
                PgSync::Create {
                    pg,
                    interval,
                    context,
                } => {
                    // A copy just split may have promised a read lease as
                    // the core it replaces; one from before this process
                    // started, for as long as that one may run.
                    let collection = CollectionId::pg(pg.pool.0, pg.seed);
                    let lease_bound_ms = new_copy_lease_bound_ms(
                        split.contains(&collection),
                        lock(&self.preexisting).contains(&collection),
                        self.lease_bound_ms,
                    );
                    if let Err(error) = self.create_pg(pg, interval, context, lease_bound_ms).await
                    {
                        tracing::error!(%pg, %error, "cannot load PG");
                    }
                }
            }
        }
    }

    /// Splits this OSD's copies of the PGs of pools whose `pg_num` grew
    /// (see [`crate::split`]): the cores of those pools are retired (their
    /// waiting clients retry), their queued writes made durable, the
    /// collections split, and the copies then load again as held copies.
    /// Returns the collections split or retired. A store failure here stops
    /// the OSD, as a refused PG transaction does.
    async fn split_pgs(&self) -> HashSet<CollectionId> {
        let (epoch, due) = {
            let view = read(&self.map);
            let split_for = lock(&self.split_for);
            (
                view.epoch(),
                splits_due(&view, |pool| split_for.get(&pool).copied()),
            )
        };
        let mut changed = HashSet::new();
        if due.is_empty() {
            return changed;
        }
        let _collections = self.collections_lock.lock().await;
        let mut retired = Vec::new();
        {
            let mut pgs = lock(&self.pgs);
            for split in due.iter().filter(|split| split.retire) {
                let doomed: Vec<PgId> = pgs
                    .keys()
                    .filter(|pg| pg.pool == split.pool)
                    .copied()
                    .collect();
                for pg in doomed {
                    if let Some(mut slot) = pgs.remove(&pg) {
                        retired.push((pg, slot.pg.retire(epoch).plan().rest));
                        changed.insert(CollectionId::pg(pg.pool.0, pg.seed));
                    }
                }
            }
        }
        for (pg, effects) in retired {
            self.execute(pg, effects).await;
        }
        self.store_barrier().await;
        let store = self.store.clone();
        let work: Vec<(PoolId, u32)> = due.iter().map(|split| (split.pool, split.pg_num)).collect();
        let result = tokio::task::spawn_blocking(move || {
            let mut touched = HashSet::new();
            for (pool, pg_num) in work {
                let mut apply = |txn: Transaction| store.apply(txn);
                let split = crate::split::split_pool(&*store, pool, pg_num, &mut apply)?;
                if !split.is_empty() {
                    tracing::info!(
                        pool = pool.0,
                        pg_num,
                        collections = split.len(),
                        "PGs split"
                    );
                }
                touched.extend(split);
            }
            Ok::<_, StoreError>(touched)
        })
        .await;
        match result {
            Ok(Ok(touched)) => changed.extend(touched),
            Ok(Err(error)) => {
                tracing::error!(%error, "PG split failed in the store; stopping");
                std::process::exit(EXIT_STORE_FAILED);
            }
            Err(error) => {
                tracing::error!(%error, "PG split task failed; stopping");
                std::process::exit(EXIT_STORE_FAILED);
            }
        }
        lock(&self.preexisting).extend(changed.iter().copied());
        let mut split_for = lock(&self.split_for);
        for split in due {
            split_for.insert(split.pool, split.pg_num);
        }
        changed
    }

    /// Loads (or creates) a PG's collection and starts its core.
    /// `lease_bound_ms`: how long a read lease an earlier core of this copy
    /// promised may still run.
    async fn create_pg(
        &self,
        pg: PgId,
        interval: Interval,
        context: MapContext,
        lease_bound_ms: u64,
    ) -> Result<(), OsdError> {
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let pg_num = read(&self.map)
            .placement
            .pool(pg.pool)
            .map_or(0, |p| p.pg_num);
        let store = self.store.clone();
        let epoch = interval.epoch_started;
        let stored = tokio::task::spawn_blocking(move || {
            if store.collections()?.contains(&collection) {
                return match load_pg(&*store, collection) {
                    Err(StoreError::Corrupt(why)) => {
                        // A damaged record of this copy: rebuilt from its
                        // peers, as a copy that vouches for nothing.
                        tracing::error!(%pg, %why, "PG copy corrupt; emptied for a backfill");
                        let (txns, stored) = reset_corrupt_pg(&*store, collection, pg_num, epoch)?;
                        for txn in txns {
                            store.apply(txn)?;
                        }
                        Ok(stored)
                    }
                    loaded => loaded,
                };
            }
            store.apply(
                Transaction::new(collection)
                    .with(Op::CreateCollection)
                    .with(crate::split::pg_num_op(pg_num)),
            )?;
            Ok(StoredPg::default())
        })
        .await
        .map_err(|e| OsdError::Config(format!("load task: {e}")))??;
        let mut leases = Leases::default();
        leases.set_clock(clock_ms());
        leases.enable(LEASE_MS, lease_bound_ms);
        let (core, fx) = Pg::restore_leased(
            pg,
            self.whoami,
            interval,
            self.pg_limits,
            stored,
            context,
            leases,
        )
        .map_err(|e| OsdError::Config(format!("bad interval for {pg}: {e}")))?;
        let fx = {
            let mut pgs = lock(&self.pgs);
            if pgs.contains_key(&pg) {
                return Ok(());
            }
            pgs.insert(
                pg,
                PgSlot {
                    pg: core,
                    wiped_in: None,
                },
            );
            self.queue_store(pg, fx)
        };
        self.execute(pg, fx).await;
        Ok(())
    }

    /// Queues a PG's transactions and returns the rest of its effects in
    /// the order to carry them out ([`Effects::plan`]); called under the PG
    /// lock, so the store sees each PG's transactions in the order the core
    /// made them, before anything else the event caused.
    fn queue_store(&self, pg: PgId, fx: Effects) -> Vec<Effect> {
        let plan = fx.plan();
        for write in plan.store {
            if self.store_tx.send(StoreJob::Write(pg, write)).is_err() {
                tracing::error!(%pg, "store threads stopped");
            }
        }
        plan.rest
    }

    /// Feeds one event to a PG and executes its effects; `false` if this OSD
    /// holds no such PG.
    async fn feed(&self, pg: PgId, event: PgEvent) -> bool {
        self.feed_with(pg, |_| Ok::<_, std::convert::Infallible>(event))
            .await
            .is_some()
    }

    /// Like [`Osd::feed`], with the event made under the PG lock (so what
    /// `make` reads from the store cannot change before the PG sees it);
    /// `None` if this OSD holds no such PG, `Some(Err)` if `make` failed.
    async fn feed_with<E>(
        &self,
        pg: PgId,
        make: impl FnOnce(&PgSlot) -> Result<PgEvent, E>,
    ) -> Option<Result<(), E>> {
        let fx = {
            let mut pgs = lock(&self.pgs);
            let slot = pgs.get_mut(&pg)?;
            let event = match make(slot) {
                Ok(event) => event,
                Err(error) => return Some(Err(error)),
            };
            let fx = slot.handle(event);
            self.queue_store(pg, fx)
        };
        if !fx.is_empty() {
            self.execute(pg, fx).await;
        }
        Some(Ok(()))
    }

    /// Carries out a PG's effects other than store writes, in the order
    /// [`queue_store`](Osd::queue_store) returned them. Boxed: the tasks it
    /// spawns feed PGs, which execute effects again.
    fn execute(
        &self,
        pg: PgId,
        effects: Vec<Effect>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            for effect in effects {
                match effect {
                    Effect::Store(_) => unreachable!("the plan keeps store writes apart"),
                    Effect::Ignored(ignored) => {
                        tracing::debug!(%pg, %ignored, "PG ignored an input");
                    }
                    Effect::Note(note) => tracing::info!(%pg, "{note}"),
                    Effect::PgTempSet(acting) => self.ask_pg_temp(pg, Some(acting)),
                    Effect::PgTempClear => self.ask_pg_temp(pg, None),
                    Effect::Push {
                        object,
                        targets,
                        priority,
                    } => {
                        self.spawn(move |osd: Arc<Osd>| async move {
                            osd.push_object(pg, object, targets, None, priority).await;
                        });
                    }
                    Effect::Scan { after } => self.spawn(move |osd: Arc<Osd>| async move {
                        osd.list_page(pg, after, false).await;
                    }),
                    Effect::ScrubList { after } => self.spawn(move |osd: Arc<Osd>| async move {
                        osd.list_page(pg, after, true).await;
                    }),
                    Effect::ScrubMap(order) => {
                        self.spawn(
                            move |osd: Arc<Osd>| async move { osd.scrub_map(pg, order).await },
                        );
                    }
                    Effect::Purge { interval_epoch } => {
                        self.spawn(move |osd: Arc<Osd>| async move {
                            osd.purge(pg, interval_epoch).await;
                        });
                    }
                    Effect::VerifyParity { chunk, checks } => {
                        self.spawn(move |osd: Arc<Osd>| async move {
                            osd.verify_parity(pg, chunk, checks).await;
                        });
                    }
                    Effect::Reply { req, reply } => {
                        let waiters = lock(&self.pending).remove(&req).unwrap_or_default();
                        for waiter in waiters {
                            drop(waiter.send(reply.clone()));
                        }
                    }
                    Effect::Read { read } => self.step_read(read, ReadStep::Go),
                    Effect::ReadAnswer { read, answer } => {
                        self.step_read(read, ReadStep::Answer(answer));
                    }
                    Effect::Send { to, msg } => self.send_to_peer(to, pg, &msg).await,
                }
            }
        })
    }

    /// Asks the monitor to set (`Some`) or clear the PG's temporary acting
    /// set, in the background.
    fn ask_pg_temp(&self, pg: PgId, acting: Option<Vec<OsdId>>) {
        self.spawn(move |osd: Arc<Osd>| async move {
            let command = MonCommand::PgTemp { pg, acting };
            if let Err(error) = osd.mon.command(command).await {
                tracing::warn!(%pg, %error, "temporary acting set request failed");
            }
        });
    }

    /// Runs `task` on this OSD in the background.
    fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce(Arc<Osd>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if let Some(osd) = self.this.upgrade() {
            tokio::spawn(task(osd));
        }
    }

    /// Reads an object's whole state and pushes it to `targets`, within
    /// the OSD's bound on recovery reads. `interval_epoch` is the
    /// requester's interval for a pull, else the PG's current one.
    async fn push_object(
        &self,
        pg: PgId,
        object: Bytes,
        targets: Vec<OsdId>,
        interval_epoch: Option<Epoch>,
        priority: Priority,
    ) {
        let _permit = self.recovery.acquire(priority).await;
        let pulled = interval_epoch.is_some();
        let Some((start, interval, lacking)) = lock(&self.pgs).get(&pg).and_then(|slot| {
            push_start(&slot.pg, &targets, interval_epoch).map(|start| {
                let lacking = slot.pg.copies_lacking(&object);
                (start, slot.pg.interval().clone(), lacking)
            })
        }) else {
            tracing::debug!(%pg, "pull of an interval that is over dropped");
            return;
        };
        if interval.ec.is_some() {
            if !pulled {
                self.push_shards(pg, object, &targets, &lacking, start, &interval)
                    .await;
            }
            return;
        }
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = self.store.clone();
        let name = object.clone();
        let read = match tokio::task::spawn_blocking(move || {
            read_object_state(&*store, collection, &name)
        })
        .await
        {
            Ok(read) => read,
            Err(error) => {
                tracing::error!(%pg, %error, "recovery read task failed");
                return;
            }
        };
        if let Err(StoreError::Corrupt(why)) = &read {
            tracing::warn!(%pg, object = %String::from_utf8_lossy(&object), %why, "copy to push is corrupt");
        }
        let plan = match push_after_read(self.whoami, object.clone(), &targets, pulled, start, read)
        {
            Ok(plan) => plan,
            Err(error) => {
                tracing::error!(%pg, object = %String::from_utf8_lossy(&object), %error, "cannot read object to recover it");
                return;
            }
        };
        // A split or a new interval during the read: the state read may
        // belong to another PG now, and the push would be refused anyway.
        let stands = lock(&self.pgs)
            .get(&pg)
            .is_some_and(|slot| slot.pg.interval().epoch_started == start.0);
        if plan.feed.is_none() && !stands {
            tracing::debug!(%pg, "push overtaken by a new interval dropped");
            return;
        }
        self.recovery
            .pace(plan.bytes.saturating_mul(plan.sends.len() as u64))
            .await;
        for (target, msg) in &plan.sends {
            self.send_to_peer(*target, pg, msg).await;
            if matches!(msg, PgMsg::Push(_)) {
                self.recovered_objects.fetch_add(1, Ordering::Relaxed);
                self.recovered_bytes
                    .fetch_add(plan.bytes, Ordering::Relaxed);
            }
        }
        if let Some(event) = plan.feed {
            self.feed(pg, event).await;
        }
    }

    /// Erasure-coded recovery of `object` on `targets` (this primary
    /// among them, perhaps): whole shards read from `k` positions that
    /// hold the object (this OSD's own first, then data shards), the
    /// targets' shards rebuilt from them ([`ec::rebuild_for_push`]) and
    /// each pushed to its OSD, this one's fed to its own core. Under the
    /// recovery throttle, which counts the bytes read and pushed. A source
    /// that fails is replaced by another; one found corrupt is reported.
    /// With too few, nothing is pushed (the core retries the object).
    async fn push_shards(
        &self,
        pg: PgId,
        object: Bytes,
        targets: &[OsdId],
        lacking: &BTreeSet<OsdId>,
        (epoch, as_of): (Epoch, Version),
        interval: &Interval,
    ) {
        let Some(shape) = &interval.ec else { return };
        let (layout, codec) = match (ec::layout_of(shape), ec::codec_for(shape.k, shape.m)) {
            (Ok(layout), Ok(codec)) => (layout, codec),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(%pg, error = %e, "erasure-coded PG of a bad shape");
                return;
            }
        };
        let mut positions = Vec::with_capacity(targets.len());
        for target in targets {
            match interval.shard_of(*target) {
                Some(shard) => positions.push((*target, shard)),
                None => {
                    tracing::warn!(%pg, osd = target.0, "push target at no position");
                    return;
                }
            }
        }
        // Sources: every position's OSD and every stray the log says holds
        // the object, each read whole and counted as the shard its
        // metadata names (one that changed positions still holds its old
        // shard). Those known to hold the object first (positions not
        // lacking it, not being rebuilt or backfilled, this OSD's own
        // first, data before parity; then the strays); only the positions'
        // "not found" means the object is gone. Read in rounds until `k`
        // distinct shards of the version the log names.
        let (strays, need) = lock(&self.pgs)
            .get(&pg)
            .map(|slot| slot.pg.rebuild_hints(&object))
            .unwrap_or_default();
        let candidates = ec::rebuild_order(interval, &strays, self.whoami, |o| {
            !targets.contains(&o) && !lacking.contains(&o)
        });
        let trusted = |o: OsdId| !targets.contains(&o) && !lacking.contains(&o);
        let key = ObjectKey::new(object.clone());
        let mut sources: ec::Sources = BTreeMap::new();
        let mut next = candidates.into_iter();
        loop {
            let want = ec::reads_still_needed(layout.k as usize, &sources, need);
            if want == 0 {
                break;
            }
            let batch: BTreeMap<u32, Vec<(u64, u64)>> =
                next.by_ref().take(want).map(|s| (s, Vec::new())).collect();
            if batch.is_empty() {
                break;
            }
            let (got, failed) = self
                .fetch_shards(pg, interval, &key, 0, &batch, (true, &strays))
                .await;
            for (shard, served) in got {
                sources.insert(shard, Ok(served));
            }
            for (shard, error) in failed {
                let osd = interval.osd_at(shard);
                if let (ShardReadError::Corrupt(_), Some(osd)) = (&error, osd) {
                    self.report_unreadable(pg, epoch, osd, object.clone()).await;
                }
                let error = match error {
                    ShardReadError::NotFound if !osd.is_some_and(trusted) => {
                        ShardReadError::NotServing("lacks the object".into())
                    }
                    other => other,
                };
                sources.insert(shard, Err(error));
            }
        }
        let read_bytes: u64 = sources
            .values()
            .flatten()
            .flat_map(|s| s.parts.iter())
            .map(|p| p.len() as u64)
            .sum();
        let shards: Vec<u32> = positions.iter().map(|(_, s)| *s).collect();
        let rebuilt = match ec::rebuild_for_push(&layout, &*codec, &sources, &shards, need) {
            Ok(rebuilt) => rebuilt,
            Err(why) => {
                tracing::warn!(%pg, object = %String::from_utf8_lossy(&object), %why, "cannot rebuild shards yet");
                return;
            }
        };
        let stands = lock(&self.pgs)
            .get(&pg)
            .is_some_and(|slot| slot.pg.interval().epoch_started == epoch);
        if !stands {
            tracing::debug!(%pg, "push overtaken by a new interval dropped");
            return;
        }
        let states: Vec<(OsdId, Option<ObjectState>)> = match rebuilt {
            None => positions.iter().map(|(osd, _)| (*osd, None)).collect(),
            Some(states) => positions
                .iter()
                .map(|(osd, _)| *osd)
                .zip(states.into_iter().map(|(_, state)| Some(state)))
                .collect(),
        };
        let pushed: u64 = states
            .iter()
            .map(|(_, s)| s.as_ref().map_or(0, |s| s.data.len() as u64))
            .sum();
        self.recovery.pace(read_bytes.saturating_add(pushed)).await;
        for (target, state) in states {
            let bytes = state.as_ref().map_or(0, |s| s.data.len() as u64);
            let push = PgMsg::Push(Push {
                from: self.whoami,
                interval_epoch: epoch,
                object: object.clone(),
                state,
                as_of,
            });
            if target == self.whoami {
                self.feed(pg, PgEvent::Peer(push)).await;
            } else {
                self.send_to_peer(target, pg, &push).await;
            }
            self.recovered_objects.fetch_add(1, Ordering::Relaxed);
            self.recovered_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A deep scrub's parity check of an erasure-coded PG's chunk: each
    /// object's shards read window by window from every position at the
    /// version the scrub maps agreed on, re-encoded, and what disagrees
    /// reported to the core (which records it, and repairs it if asked).
    /// Under the recovery throttle; after [`PARITY_CHECK_BUDGET`] the
    /// objects not yet checked wait for the next deep scrub.
    async fn verify_parity(&self, pg: PgId, chunk: u64, checks: Vec<scrub::ParityCheck>) {
        let started = std::time::Instant::now();
        let mut found = Vec::new();
        let mut checked = 0usize;
        let total = checks.len();
        for check in checks {
            if started.elapsed() > PARITY_CHECK_BUDGET {
                break;
            }
            let Some(interval) = lock(&self.pgs).get(&pg).map(|s| s.pg.interval().clone()) else {
                return;
            };
            let Some(shape) = &interval.ec else { return };
            let (layout, codec) = match (ec::layout_of(shape), ec::codec_for(shape.k, shape.m)) {
                (Ok(layout), Ok(codec)) => (layout, codec),
                _ => return,
            };
            let _permit = self.recovery.acquire(Priority::Misplaced).await;
            let collection = CollectionId::pg(pg.pool.0, pg.seed);
            let key = ObjectKey::new(check.object.clone());
            let store = self.store.clone();
            let local_key = key.clone();
            let local_layout = layout;
            let local = tokio::task::spawn_blocking(move || {
                ec::local_object(&*store, collection, &local_key, &local_layout)
            })
            .await;
            let Ok(Ok(Some(local))) = local else { continue };
            if local.version != check.version {
                continue;
            }
            for window in ec::parity_windows(&layout, local.chunk, local.size) {
                let ranges: BTreeMap<u32, Vec<(u64, u64)>> = (0..layout.shards())
                    .map(|s| (s, vec![(window.start, window.end - window.start)]))
                    .collect();
                let (got, _failed) = self
                    .fetch_shards(pg, &interval, &key, check.version, &ranges, (false, &[]))
                    .await;
                self.recovery
                    .pace((window.end - window.start) * u64::from(layout.shards()))
                    .await;
                match ec::parity_verdict(
                    &layout,
                    &*codec,
                    &interval,
                    &check,
                    (local.chunk, local.size),
                    &window,
                    &got,
                ) {
                    Ok(None) => {}
                    Ok(Some(inconsistency)) => {
                        found.push(inconsistency);
                        break;
                    }
                    Err(why) => {
                        tracing::debug!(%pg, object = %String::from_utf8_lossy(&check.object), %why, "parity check skipped");
                        break;
                    }
                }
            }
            checked += 1;
        }
        if checked < total {
            tracing::info!(%pg, checked, total, "parity check of a scrub chunk cut short by its time budget");
        }
        self.feed(pg, PgEvent::ParityChecked { chunk, found }).await;
    }

    /// Sets the recovery throttle for a busy or an idle (no client op in
    /// the last tick) OSD.
    fn apply_recovery_limits(&self, idle: bool) {
        let settings = self.settings();
        let limit = if idle {
            settings
                .recovery_max_active_idle
                .max(settings.recovery_max_active)
        } else {
            settings.recovery_max_active
        };
        self.client_idle.store(idle, Ordering::Relaxed);
        self.recovery.set(limit, settings.recovery_bytes_per_sec);
    }

    fn settings(&self) -> OsdSettings {
        read(&self.settings).clone()
    }

    /// Fetches the cluster's settings and applies them (throttles at once,
    /// scrub settings from the next tick).
    async fn fetch_settings(&self) {
        let (digest, entries) = match self.mon.command(MonCommand::ConfigDump).await {
            Ok(MonReply::Config { digest, entries }) => (digest, entries),
            Ok(other) => {
                tracing::warn!(?other, "unexpected answer to a settings fetch");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "settings fetch failed");
                return;
            }
        };
        let settings = OsdSettings::from_settings(&Settings::new(entries));
        let changed = {
            let mut current = write(&self.settings);
            let changed = *current != settings;
            *current = settings.clone();
            changed
        };
        if changed {
            tracing::info!(?settings, "settings applied");
        }
        self.config_digest.store(digest, Ordering::Relaxed);
        self.apply_recovery_limits(self.client_idle.load(Ordering::Relaxed));
    }

    /// Starts the scrubs that are due, most overdue first, up to
    /// `osd_max_scrubs` at once on this OSD.
    async fn schedule_scrubs(&self) {
        let settings = self.settings();
        let now = unix_secs();
        let schedule = ScrubSchedule {
            light_interval_secs: settings.scrub_interval_secs,
            deep_interval_secs: settings.deep_scrub_interval_secs,
            max_scrubs: settings.max_scrubs,
        };
        let due = {
            let pgs = lock(&self.pgs);
            let cores = pgs.iter().map(|(pg, slot)| (*pg, &slot.pg));
            due_scrubs(cores, schedule, now, self.started_secs)
        };
        for (pg, deep) in due {
            let event = PgEvent::Scrub {
                deep,
                repair: settings.scrub_auto_repair,
                now_secs: now,
            };
            self.feed(pg, event).await;
        }
    }

    /// An operator's `cairn pg scrub|deep-scrub|repair`.
    async fn pg_command(&self, command: PgCommand) -> PgCommandReply {
        let settings = self.settings();
        let (deep, repair, verb) = match command.action {
            PgAction::Scrub => (false, settings.scrub_auto_repair, "scrub"),
            PgAction::DeepScrub => (true, settings.scrub_auto_repair, "deep-scrub"),
            PgAction::Repair => (true, true, "repair"),
        };
        let pg = command.pg;
        let event = PgEvent::Scrub {
            deep,
            repair,
            now_secs: unix_secs(),
        };
        let started = self
            .feed_with(pg, |slot| match slot.pg.scrub_refusal() {
                Some(why) => Err(why),
                None => Ok(event),
            })
            .await;
        PgCommandReply(match started {
            None => Err(format!("osd.{} holds no copy of PG {pg}", self.whoami.0)),
            Some(Err(why)) => Err(format!("PG {pg}: {why}")),
            Some(Ok(())) => Ok(format!(
                "instructed PG {pg} on osd.{} to {verb}",
                self.whoami.0
            )),
        })
    }

    /// Lists the next page of objects for a PG's backfill, or its scrub.
    async fn list_page(&self, pg: PgId, after: Option<ObjectKey>, scrub: bool) {
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = self.store.clone();
        let limit = if scrub {
            self.settings().scrub_chunk_objects
        } else {
            BACKFILL_SCAN_KEYS
        };
        let page = tokio::task::spawn_blocking(move || {
            list_objects(&*store, collection, after.as_ref(), limit)
        })
        .await;
        match page {
            Ok(Ok(page)) => {
                let more = page.next.is_some();
                let keys = page.keys;
                let event = if scrub {
                    PgEvent::ScrubPage { keys, more }
                } else {
                    PgEvent::BackfillPage { keys, more }
                };
                self.feed(pg, event).await;
            }
            Ok(Err(error)) => tracing::error!(%pg, %error, scrub, "object listing failed"),
            Err(error) => tracing::error!(%pg, %error, scrub, "object listing task failed"),
        }
    }

    /// Reads this copy's scrub map of a chunk and sends it where the order
    /// says (to this OSD's own PG core for the primary).
    async fn scrub_map(&self, pg: PgId, order: ScrubOrder) {
        let store = self.store.clone();
        let whoami = self.whoami;
        let to = order.to;
        let built =
            tokio::task::spawn_blocking(move || build_scrub_map(&*store, pg, whoami, &order)).await;
        let map = match built {
            Ok(Ok(built)) => built,
            Ok(Err(error)) => {
                tracing::error!(%pg, %error, "cannot list objects for a scrub");
                return;
            }
            Err(error) => {
                tracing::error!(%pg, %error, "scrub task failed");
                return;
            }
        };
        let map = PgMsg::ScrubMap(map);
        if to == self.whoami {
            self.feed(pg, map.into()).await;
        } else {
            self.send_to_peer(to, pg, &map).await;
        }
    }

    /// Removes a stray copy: the PG is clean on its acting set.
    async fn purge(&self, pg: PgId, epoch: Epoch) {
        let _collections = self.collections_lock.lock().await;
        {
            let mut pgs = lock(&self.pgs);
            // The copy may have joined a newer interval since it was told.
            if !pgs.get(&pg).is_some_and(|slot| slot.pg.purge_stands(epoch)) {
                tracing::debug!(%pg, epoch = epoch.0, "stray removal overtaken by a new interval");
                return;
            }
            pgs.remove(&pg);
        }
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        lock(&self.preexisting).remove(&collection);
        let store = self.store.clone();
        let result = tokio::task::spawn_blocking(move || {
            empty_collection(&*store, collection)?;
            store.apply(Transaction::new(collection).with(Op::RemoveCollection))
        })
        .await;
        match result {
            Ok(Ok(())) => tracing::info!(%pg, "stray copy removed"),
            Ok(Err(error)) => tracing::error!(%pg, %error, "stray copy removal failed"),
            Err(error) => tracing::error!(%pg, %error, "stray removal task failed"),
        }
    }

    /// Sends a PG message, reconnecting once if the cached connection died.
    /// A message that cannot be sent is dropped: the write it belongs to
    /// waits for the next interval (logged).
    async fn send_to_peer(&self, osd: OsdId, pg: PgId, msg: &PgMsg) {
        if cut_ec_write(msg) {
            return;
        }
        let addr = {
            let view = read(&self.map);
            view.state.endpoints.get(&osd).map(|e| e.addr.clone())
        };
        let Some(addr) = addr else {
            tracing::warn!(%pg, osd = osd.0, "no endpoint for peer");
            return;
        };
        let (body, data) = match encode_pg_msg(pg, msg) {
            Ok(encoded) => encoded,
            Err(error) => {
                tracing::error!(%pg, %error, "cannot encode PG message");
                return;
            }
        };
        let mut last_error = None;
        for _attempt in 0..PEER_SEND_ATTEMPTS {
            match self.peer(osd, &addr).await {
                Ok(conn) => match conn.send(&body, data.clone()).await {
                    Ok(()) => return,
                    Err(error) => {
                        lock(&self.peers).remove(&addr);
                        last_error = Some(error);
                    }
                },
                Err(error) => last_error = Some(error),
            }
        }
        if let Some(error) = last_error {
            tracing::warn!(%pg, osd = osd.0, %addr, %error, "PG message to peer lost");
        }
    }

    async fn peer(&self, osd: OsdId, addr: &str) -> Result<Connection, WireError> {
        let slot = lock(&self.peers)
            .entry(addr.to_owned())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let conn = self
            .connect_peer(osd, addr, ConnectOptions::default())
            .await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Connects to `osd` at `addr` from this OSD's serving IP and says
    /// hello ([`crate::hello`]); nothing else goes on the connection before
    /// the answer, and the answer must name `osd`.
    async fn connect_peer(
        &self,
        osd: OsdId,
        addr: &str,
        options: ConnectOptions,
    ) -> Result<Connection, WireError> {
        let options = ConnectOptions {
            bind_ip: source_ip(self.config.addr),
            ..options
        };
        let conn = Connection::connect(addr, options).await?;
        let hello = PeerHello {
            version: HELLO_VERSION,
            osd: self.whoami,
            addr: self.config.addr.to_string(),
            epoch: self.map_epoch(),
            auth: ByteBuf::new(),
        };
        let refused = |why: String| {
            conn.close();
            WireError::Io(std::sync::Arc::new(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("hello to osd.{} at {addr}: {why}", osd.0),
            )))
        };
        match conn
            .call::<PeerHello, PeerHelloReply>(&hello, Bytes::new())
            .await?
            .0
        {
            PeerHelloReply(Ok(answered)) if answered == osd => Ok(conn),
            PeerHelloReply(Ok(answered)) => Err(refused(format!("answered as osd.{}", answered.0))),
            PeerHelloReply(Err(why)) => Err(refused(why)),
        }
    }

    /// Judges a peer's hello and binds the connection to it
    /// ([`crate::hello`]). A claim the map does not back is checked again
    /// after a map refresh, as the peer may have booted since.
    async fn peer_hello(&self, hello: PeerHello, session: &Session) -> PeerHelloReply {
        let verdict = check_hello(
            &read(&self.map).state.endpoints,
            &hello,
            session.peer_addr(),
        );
        if verdict.as_ref().is_err_and(|r| r.map_may_be_stale())
            && let Some(osd) = self.this.upgrade()
        {
            // Refresh in the background, never here: a refresh moves PGs,
            // which send to peers, and the peer waiting for this answer may
            // be one they wait for (two OSDs restarting together deadlocked
            // so until the hello timed out). The sender resends after the
            // refusal, and the refreshed map judges it then.
            tokio::spawn(async move {
                if let Err(error) = osd.refresh_map().await {
                    tracing::debug!(%error, "map refresh for a peer's hello failed");
                }
            });
        }
        let verdict = verdict.map_err(|r| r.to_string()).and_then(|()| {
            session
                .bind_peer(u64::from(hello.osd.0))
                .map_err(|bound| format!("this connection already belongs to osd.{bound}"))
        });
        match verdict {
            Ok(()) => PeerHelloReply(Ok(self.whoami)),
            Err(why) => {
                tracing::warn!(peer = %session.peer_addr(), claimed = hello.osd.0, %why, "peer hello refused");
                PeerHelloReply(Err(why))
            }
        }
    }

    /// Whether a message naming `from` may be taken from `session`: only
    /// on a connection whose hello proved that OSD.
    fn sender_checks_out(session: &Session, from: OsdId, what: &str) -> bool {
        match session.peer() {
            Some(bound) if bound == u64::from(from.0) => true,
            bound => {
                tracing::warn!(
                    peer = %session.peer_addr(),
                    claimed = from.0,
                    bound = ?bound,
                    "{what} refused: its sender is not the OSD this connection's hello proved"
                );
                false
            }
        }
    }

    async fn handle_frame(&self, frame: Frame, session: Arc<Session>) -> Option<Frame> {
        match frame.kind {
            KIND_CLIENT_OP => {
                let (reply, data) = match frame.decode_body::<ClientOp>() {
                    Ok(op) => self.client_op(op, frame.data).await,
                    Err(error) => (
                        ClientReply::err(OpError::Invalid(error.to_string())),
                        Bytes::new(),
                    ),
                };
                Frame::response(frame.request_id, &reply, data).ok()
            }
            KIND_CLIENT_SHARD_READ => {
                let (reply, data) = match frame.decode_body::<ClientShardRead>() {
                    Ok(req) => self.client_shard_read(req).await,
                    Err(error) => (Err(format!("malformed direct read: {error}")), Bytes::new()),
                };
                Frame::response(frame.request_id, &ClientShardReadReply(reply), data).ok()
            }
            KIND_PEER_HELLO => {
                let reply = match frame.decode_body::<PeerHello>() {
                    Ok(hello) => self.peer_hello(hello, &session).await,
                    Err(error) => PeerHelloReply(Err(format!("malformed hello: {error}"))),
                };
                Frame::response(frame.request_id, &reply, Bytes::new()).ok()
            }
            KIND_PEER_MSG => {
                match frame.decode_body::<PeerMsg>() {
                    Ok(msg) => match decode_pg_msg(msg, &frame.data) {
                        Ok((pg, msg)) => {
                            if Self::sender_checks_out(&session, msg.from(), "PG message") {
                                self.peer_msg(pg, msg).await;
                            }
                        }
                        Err(error) => tracing::warn!(%error, "malformed peer message"),
                    },
                    Err(error) => tracing::warn!(%error, "malformed peer message"),
                }
                None
            }
            KIND_PEER_SHARD_READ => {
                let (reply, data) = match frame.decode_body::<ShardRead>() {
                    Ok(req) if Self::sender_checks_out(&session, req.from, "shard read") => {
                        self.serve_shard_read(req).await
                    }
                    Ok(_) => (
                        Err(ShardReadError::NotServing(
                            "sender is not who it says".into(),
                        )),
                        Bytes::new(),
                    ),
                    Err(error) => (
                        Err(ShardReadError::NotServing(format!(
                            "malformed shard read: {error}"
                        ))),
                        Bytes::new(),
                    ),
                };
                Frame::response(frame.request_id, &ShardReadReply(reply), data).ok()
            }
            KIND_PG_COMMAND => {
                let reply = match frame.decode_body::<PgCommand>() {
                    Ok(command) => self.pg_command(command).await,
                    Err(error) => PgCommandReply(Err(format!("malformed PG command: {error}"))),
                };
                Frame::response(frame.request_id, &reply, Bytes::new()).ok()
            }
            KIND_PEER_PING => {
                let ping = frame.decode_body::<PeerPing>().ok()?;
                if !Self::sender_checks_out(&session, ping.from, "ping") {
                    return None;
                }
                let pong = PeerPong {
                    from: self.whoami,
                    epoch: self.map_epoch(),
                };
                Frame::response(frame.request_id, &pong, Bytes::new()).ok()
            }
            kind => {
                tracing::warn!(kind, "unknown message kind");
                let reply = ClientReply::err(OpError::Invalid(format!("unknown kind {kind:#06x}")));
                (frame.request_id != 0)
                    .then(|| Frame::response(frame.request_id, &reply, Bytes::new()).ok())
                    .flatten()
            }
        }
    }

    async fn peer_msg(&self, pg: PgId, msg: PgMsg) {
        let epoch = msg.interval_epoch();
        let started = lock(&self.pgs)
            .get(&pg)
            .map(|s| s.pg.interval().epoch_started);
        if started.is_none_or(|s| s < epoch)
            && let Err(error) = self.refresh_map().await
        {
            tracing::warn!(%error, "map refresh for a newer peer message failed");
        }
        let action = {
            let view = read(&self.map);
            let ctx = PeerContext {
                whoami: self.whoami,
                pg,
                view: &view,
                loaded: lock(&self.pgs).contains_key(&pg),
            };
            admit_peer_msg(&msg, ctx)
        };
        match action {
            PeerAction::Feed => {}
            PeerAction::Drop(why) => {
                tracing::debug!(%pg, epoch = epoch.0, why, "peer message dropped");
                return;
            }
            PeerAction::Push { object, to, epoch } => {
                self.spawn(move |osd: Arc<Osd>| async move {
                    // A pull: the primary lacks the object.
                    osd.push_object(pg, object, vec![to], Some(epoch), Priority::Degraded)
                        .await;
                });
                return;
            }
            PeerAction::AnswerIfNoCopy { to, answer } => {
                if self.holds_no_copy(pg).await {
                    self.send_to_peer(to, pg, &answer).await;
                } else {
                    tracing::debug!(%pg, "query of a copy not loaded yet dropped");
                }
                return;
            }
            PeerAction::WipeThenFeed => {
                if let PgMsg::Activate(activate) = &msg
                    && let Err(error) = self.wipe_for_backfill(pg, activate).await
                {
                    tracing::error!(%pg, %error, "cannot empty the copy for its backfill");
                    return;
                }
            }
        }
        if !self.feed(pg, msg.into()).await {
            tracing::debug!(%pg, "message for a PG this OSD does not hold");
        }
    }

    /// Serves a shard read of an erasure-coded PG to its primary
    /// ([`admit_shard_read`], then [`ec::serve_shard_read`]): the reply
    /// and its data segment, each range's bytes in order.
    async fn serve_shard_read(
        &self,
        req: ShardRead,
    ) -> (Result<ShardReadOk, ShardReadError>, Bytes) {
        let pg = req.pg;
        let behind = lock(&self.pgs)
            .get(&pg)
            .is_none_or(|s| s.pg.interval().epoch_started < req.interval_epoch);
        if behind && let Err(error) = self.refresh_map().await {
            tracing::warn!(%error, "map refresh for a newer shard read failed");
        }
        let total = req
            .ranges
            .iter()
            .map(|r| r.1)
            .fold(0u64, u64::saturating_add);
        if req.ranges.len() > ec::SHARD_READ_RANGES_MAX
            || total > u64::from(cairn_wire::limits::DATA_SIZE_BYTES_MAX)
        {
            let why = format!("{} ranges of {total} bytes", req.ranges.len());
            return (Err(ShardReadError::NotServing(why)), Bytes::new());
        }
        let admitted = {
            let pgs = lock(&self.pgs);
            admit_shard_read(
                pgs.get(&pg).map(|s| &s.pg),
                req.from,
                req.interval_epoch,
                (req.shard, req.whole),
                &req.object,
            )
        };
        if let Err(why) = admitted {
            return (Err(ShardReadError::NotServing(why)), Bytes::new());
        }
        let store = self.store.clone();
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let key = ObjectKey::new(Bytes::from(req.object.into_vec()));
        let served = tokio::task::spawn_blocking(move || {
            ec::serve_shard_read(
                &*store,
                collection,
                &key,
                req.shard,
                req.version,
                &req.ranges,
                req.whole,
            )
        })
        .await
        .unwrap_or_else(|e| Err(ShardReadError::Store(format!("read task: {e}"))));
        ec::shard_read_reply(served)
    }

    /// Serves a client's direct read of one shard of an erasure-coded PG
    /// (docs/erasure-coding.md, "Direct shard reads"): only while
    /// [`Pg::serves_direct_read`] holds both before the store read and
    /// after it, so the part returned was committed and current when it
    /// was read. Any refusal sends the client to the primary.
    async fn client_shard_read(&self, req: ClientShardRead) -> (Result<DirectPart, String>, Bytes) {
        let pg = req.pg;
        let check = |osd: &Osd| {
            let view = read(&osd.map);
            let pgs = lock(&osd.pgs);
            admit_direct_read(pgs.get(&pg).map(|s| &s.pg), &view, &req, clock_ms())
        };
        let layout = match check(self) {
            Ok(layout) => layout,
            Err(why) => return (Err(why), Bytes::new()),
        };
        let store = self.store.clone();
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let key = ObjectKey::new(Bytes::copy_from_slice(&req.object));
        let range = (req.offset, req.length, req.rows);
        let shard = req.shard;
        let served = tokio::task::spawn_blocking(move || {
            ec::serve_direct_part(&*store, collection, &key, &layout, shard, range)
        })
        .await
        .unwrap_or_else(|e| Err(format!("read task: {e}")));
        let served = served.and_then(|part| check(self).map(|_| part));
        match served {
            Ok((part, data)) => {
                self.io.read_ops.fetch_add(1, Ordering::Relaxed);
                self.io
                    .read_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                (Ok(part), data)
            }
            Err(why) => (Err(why), Bytes::new()),
        }
    }

    /// Waits until every transaction queued so far is durable.
    async fn store_barrier(&self) {
        let (done, durable) = oneshot::channel();
        if self.store_tx.send(StoreJob::Barrier(done)).is_ok() {
            drop(durable.await);
        }
    }

    /// Whether this OSD has no copy of `pg`, in memory or in the store,
    /// once the map changes being applied (splits, loads) are done.
    async fn holds_no_copy(&self, pg: PgId) -> bool {
        let _applied = self.map_fetch.lock().await;
        let _collections = self.collections_lock.lock().await;
        if lock(&self.pgs).contains_key(&pg) {
            return false;
        }
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        matches!(
            self.store.meta_get(collection, crate::pg::INFO_KEY),
            Err(StoreError::NoCollection(_))
        )
    }

    /// Empties this copy's objects before a backfill into it, once per
    /// interval and only at the current primary's word.
    async fn wipe_for_backfill(&self, pg: PgId, activate: &Activate) -> Result<(), StoreError> {
        {
            let mut pgs = lock(&self.pgs);
            let Some(slot) = pgs.get_mut(&pg) else {
                return Ok(());
            };
            if slot.wiped_in == Some(activate.interval_epoch) {
                return Ok(());
            }
            // Marked first, in the PG's own store order: a copy emptied
            // part way is never taken for a complete one.
            let Some(mark) = slot
                .pg
                .mark_backfilling(activate.from, activate.interval_epoch)
            else {
                return Ok(());
            };
            if self.store_tx.send(StoreJob::Write(pg, mark)).is_err() {
                return Err(StoreError::Io("store threads stopped".into()));
            }
        }
        self.store_barrier().await;
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || empty_collection(&*store, collection))
            .await
            .map_err(|e| StoreError::Io(format!("wipe task: {e}")))??;
        if let Some(slot) = lock(&self.pgs).get_mut(&pg) {
            slot.wiped_in = Some(activate.interval_epoch);
        }
        tracing::info!(%pg, "copy emptied for a backfill");
        Ok(())
    }

    fn retry(&self, reason: impl Into<String>) -> (ClientReply, Bytes) {
        let error = OpError::Retry {
            epoch: self.map_epoch().0,
            reason: reason.into(),
        };
        (ClientReply::err(error), Bytes::new())
    }

    async fn client_op(&self, op: ClientOp, data: CheckedBytes) -> (ClientReply, Bytes) {
        if let Err(why) = check_request(&op) {
            return (ClientReply::err(OpError::Invalid(why)), Bytes::new());
        }
        if op.epoch > self.map_epoch()
            && let Err(error) = self.refresh_map().await
        {
            tracing::warn!(%error, "map refresh for a newer client failed");
        }
        let admitted = admit_request(&read(&self.map), op.pg, &op.object);
        match admitted {
            Ok(()) => {}
            Err(Turned::Retry(why)) => return self.retry(why),
            Err(Turned::NotSupported(why)) => {
                return (ClientReply::err(OpError::NotSupported(why)), Bytes::new());
            }
        }
        let write = op.is_write();
        if let Err(reason) = self.check_servable(op.pg, op.epoch, !write) {
            return self.retry(reason);
        }
        let bytes_in = u64::try_from(data.len()).unwrap_or(0);
        let (reply, out) = if write {
            (self.client_write(op, data).await, Bytes::new())
        } else {
            self.client_read(op).await
        };
        let (ops, bytes, count) = if write {
            (&self.io.write_ops, &self.io.write_bytes, bytes_in)
        } else {
            let bytes_out = u64::try_from(out.len()).unwrap_or(0);
            (&self.io.read_ops, &self.io.read_bytes, bytes_out)
        };
        ops.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(count, Ordering::Relaxed);
        (reply, out)
    }

    /// Whether this OSD may serve the PG now ([`servable`]); the `Err` is
    /// the retry reason.
    fn check_servable(&self, pg: PgId, client_epoch: Epoch, read: bool) -> Result<(), String> {
        let pgs = lock(&self.pgs);
        let core = pgs.get(&pg).map(|slot| &slot.pg);
        servable(self.whoami, pg, core, client_epoch, read, clock_ms())
    }

    async fn client_write(&self, op: ClientOp, data: CheckedBytes) -> ClientReply {
        let object = Bytes::from(op.object.into_vec());
        let data_len = data.len();
        let plan = match plan_write(&object, &op.ops, data) {
            Ok(plan) => plan,
            Err(why) => return ClientReply::err(OpError::Invalid(why)),
        };
        if !plan.frees_space
            && let Err(error) = self.check_not_full(data_len, op.full_try)
        {
            return ClientReply::err(error);
        }
        let req: ReqId = op.req.into();
        let guards: Vec<Guard> = op.guards.into_iter().map(Into::into).collect();
        // An erasure-coded write is planned on the object's state, and
        // refused (`ObjectBusy`) if an earlier write to the object lands
        // first; planned again here a few times, a millisecond apart, it
        // follows that write at once instead of after the client's backoff.
        let mut attempts = 0;
        loop {
            let prepared = match self.prepare_ec_write(op.pg, &object, req, &plan.ops).await {
                Ok(prepared) => prepared,
                // A plan made across an interval change (a split may have
                // moved the object) is the core's to refuse: it sends the
                // client to refetch the map.
                Err(_) if self.interval_after(op.pg, op.epoch) => None,
                Err(error) => return ClientReply::err(error),
            };
            let again = attempts < EC_WRITE_REPLANS;
            let reply = self
                .client_write_planned(
                    op.pg,
                    op.epoch,
                    req,
                    &object,
                    plan.ops.clone(),
                    guards.clone(),
                    plan.implied.clone(),
                    prepared,
                )
                .await;
            if again && matches!(reply.result, Err(OpError::ObjectBusy)) {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            }
            return reply;
        }
    }

    /// One attempt of a client write whose erasure-coded plan, if any, is
    /// `prepared`: the PG's core admits it (or not), and the reply is its
    /// outcome once durable on the acting set.
    #[allow(clippy::too_many_arguments)]
    async fn client_write_planned(
        &self,
        pg: PgId,
        client_epoch: Epoch,
        req: ReqId,
        object: &Bytes,
        ops: Vec<Op>,
        guards: Vec<Guard>,
        implied: Option<Guard>,
        prepared: Option<PreparedWrite>,
    ) -> ClientReply {
        let (waiter, reply) = oneshot::channel();
        lock(&self.pending).entry(req).or_default().push(waiter);
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = &self.store;
        let make = |slot: &PgSlot| -> Result<PgEvent, OpError> {
            // The PG's interval began after the client's map (a split
            // since the request came in, say): the core sends the client
            // to refetch it, before any plan.
            if slot.pg.interval().epoch_started > client_epoch {
                return Ok(PgEvent::ClientWrite {
                    req,
                    client_epoch,
                    object: object.clone(),
                    ops,
                    guard: None,
                    prepared: None,
                });
            }
            // An erasure-coded write of whole objects or xattrs is planned
            // here, on this shard's state read under the PG lock (its
            // roll-back records need the object's version and xattrs).
            let prepared = match (prepared, &slot.pg.interval().ec) {
                (None, Some(shape)) => Some(ec::plan_whole(
                    &**store, collection, shape, object, req, &ops,
                )?),
                (prepared, _) => prepared,
            };
            // A write planned on the object's bytes at one version: under
            // the PG lock, the object must still be at it (a resend of a
            // write the log knows is answered from the log instead).
            if let Some(prepared) = &prepared {
                let key = ObjectKey::new(object.clone());
                let version = match store.stat(collection, &key) {
                    Ok(stat) => stat.version,
                    Err(StoreError::NotFound { .. }) => 0,
                    Err(error) => return Err(op_error(error)),
                };
                if version != prepared.base && !slot.pg.knows_request(req) {
                    return Err(OpError::ObjectBusy);
                }
            }
            let guard = observe(&**store, collection, object, guards, implied)?;
            Ok(PgEvent::ClientWrite {
                req,
                client_epoch,
                object: object.clone(),
                ops,
                guard,
                prepared,
            })
        };
        match self.feed_with(pg, make).await {
            Some(Ok(())) => {}
            Some(Err(error)) => {
                self.forget_waiters(req);
                return ClientReply::err(error);
            }
            None => {
                self.forget_waiters(req);
                return self.retry(format!("PG {pg} is not held here")).0;
            }
        }
        match tokio::time::timeout(CLIENT_WRITE_TIMEOUT, reply).await {
            Ok(Ok(reply)) => self.to_client_reply(reply),
            _ => {
                self.forget_waiters(req);
                ClientReply::err(OpError::Timeout(format!(
                    "write not durable on the acting set within {CLIENT_WRITE_TIMEOUT:?}"
                )))
            }
        }
    }

    /// Whether PG `pg`'s interval here began after `epoch` (a client's
    /// map).
    fn interval_after(&self, pg: PgId, epoch: Epoch) -> bool {
        lock(&self.pgs)
            .get(&pg)
            .is_some_and(|slot| slot.pg.interval().epoch_started > epoch)
    }

    fn forget_waiters(&self, req: ReqId) {
        let mut pending = lock(&self.pending);
        if let Some(waiters) = pending.get_mut(&req) {
            waiters.retain(|w| !w.is_closed());
            if waiters.is_empty() {
                pending.remove(&req);
            }
        }
    }

    fn to_client_reply(&self, reply: Reply) -> ClientReply {
        client_reply(reply, self.map_epoch())
    }

    /// `Full` if writing `payload_bytes` would take the store's file system
    /// past [`FULL_RATIO`] (past [`FULL_TRY_RATIO`] for a `full_try`
    /// write). Read fresh for every write (one `statvfs`): a cached
    /// reading lets a fast writer overshoot the margin to the store's own
    /// hard limit.
    fn check_not_full(&self, payload_bytes: usize, full_try: bool) -> Result<(), OpError> {
        let ratio = if full_try { FULL_TRY_RATIO } else { FULL_RATIO };
        let capacity = self.store.capacity().map_err(op_error)?;
        let payload_bytes = u64::try_from(payload_bytes).unwrap_or(u64::MAX);
        #[allow(clippy::cast_precision_loss)]
        let after = capacity.used_bytes.saturating_add(payload_bytes) as f64;
        #[allow(clippy::cast_precision_loss)]
        let limit = capacity.total_bytes as f64 * ratio;
        if after <= limit {
            return Ok(());
        }
        Err(OpError::Full(format!(
            "osd.{}: {} of {} bytes used, over the full ratio {ratio}",
            self.whoami.0, capacity.used_bytes, capacity.total_bytes
        )))
    }

    /// Hands a read the core's next step (nobody waits for it if the shell
    /// gave up on the read).
    fn step_read(&self, read: ReadId, step: ReadStep) {
        if let Some(waiter) = lock(&self.reads).remove(&read) {
            drop(waiter.send(step));
        }
    }

    /// Feeds a read event to its PG and waits for the core's next step for
    /// the read; `None` if this OSD holds no such PG, `ObjectBusy` if the
    /// core does not answer within [`READ_WAIT_SHELL_MAX`] (it went away).
    /// The step usually comes with the event's own effects, taken straight
    /// from them; only a read the core holds (a write to its object is in
    /// flight) waits for a later event's.
    async fn read_step(&self, pg: PgId, read: ReadId, event: PgEvent) -> Option<ReadStep> {
        let (rest, step) = {
            let mut pgs = lock(&self.pgs);
            let slot = pgs.get_mut(&pg)?;
            let fx = slot.handle(event);
            let mut rest = self.queue_store(pg, fx);
            let step = match take_read_step(&mut rest, read) {
                Some(step) => Ok(step),
                None => {
                    // Under the PG lock: no event can step the read before
                    // its waiter is in place.
                    let (waiter, step) = oneshot::channel();
                    lock(&self.reads).insert(read, waiter);
                    Err(step)
                }
            };
            (rest, step)
        };
        if !rest.is_empty() {
            self.execute(pg, rest).await;
        }
        let waiting = match step {
            Ok(step) => return Some(step),
            Err(waiting) => waiting,
        };
        match tokio::time::timeout(READ_WAIT_SHELL_MAX, waiting).await {
            Ok(Ok(step)) => Some(step),
            _ => {
                lock(&self.reads).remove(&read);
                Some(ReadStep::Answer(ReadAnswer::Busy))
            }
        }
    }

    /// A client read: the core says when to read the store (`ClientRead`)
    /// and whether what was read may be returned (`ReadDone`); see
    /// `pg/read.rs`.
    async fn client_read(&self, op: ClientOp) -> (ClientReply, Bytes) {
        let pg = op.pg;
        let read = ReadId(self.next_read.fetch_add(1, Ordering::Relaxed));
        let object = Bytes::from(op.object.into_vec());
        let start = PgEvent::ClientRead {
            read,
            object: object.clone(),
        };
        match self.read_step(pg, read, start).await {
            None => return self.retry(format!("PG {pg} is not held here")),
            Some(ReadStep::Answer(answer)) => return read_reply(answer, None),
            Some(ReadStep::Go) => {}
        }
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let key = ObjectKey::new(object);
        let store = self.store.clone();
        let guards: Vec<Guard> = op.guards.into_iter().map(Into::into).collect();
        let ops = op.ops;
        let interval = lock(&self.pgs).get(&pg).map(|s| s.pg.interval().clone());
        let result = match interval {
            Some(interval) if interval.ec.is_some() => {
                self.ec_read(pg, &interval, key, guards, ops).await
            }
            _ => match tokio::task::spawn_blocking(move || {
                read_ops(&*store, collection, &key, guards, ops)
            })
            .await
            {
                Ok(result) => result,
                Err(error) => Err(OpError::Store(format!("read task: {error}"))),
            },
        };
        let done = read_done(read, &result);
        match self.read_step(pg, read, done).await {
            Some(ReadStep::Answer(answer)) => read_reply(answer, Some(result)),
            None | Some(ReadStep::Go) => read_reply(ReadAnswer::Busy, None),
        }
    }
}

impl Osd {
    /// A client read of an erasure-coded object: the local part on this
    /// primary's shard ([`ec::plan_read`]), then the shard ranges the read
    /// needs, from each shard's OSD at once (this one's own from its
    /// store), every answer at the version the primary's shard holds, then
    /// the data in object order ([`ec::assemble`]). Shards that lack the
    /// object, holes and shards that fail to answer are read around: the
    /// missing ranges are decoded from `k` others ([`ec::fetch_for`]); a
    /// shard found corrupt is reported to the core, which rebuilds it.
    async fn ec_read(
        &self,
        pg: PgId,
        interval: &Interval,
        key: ObjectKey,
        guards: Vec<Guard>,
        ops: Vec<OpKind>,
    ) -> ReadResult {
        let Some(shape) = &interval.ec else {
            return Err(OpError::Store("not an erasure-coded PG".into()));
        };
        let layout = ec::layout_of(shape).map_err(OpError::Store)?;
        let codec = ec::codec_for(shape.k, shape.m).map_err(OpError::Store)?;
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = self.store.clone();
        let local_key = key.clone();
        let plan = tokio::task::spawn_blocking(move || {
            ec::plan_read(&*store, collection, &local_key, &layout, guards, ops)
        })
        .await
        .map_err(|e| OpError::Store(format!("read task: {e}")))??;
        let lacking = lock(&self.pgs)
            .get(&pg)
            .map(|s| s.pg.copies_lacking(&key.name))
            .unwrap_or_default();
        let mut available: BTreeSet<u32> = (0..layout.shards())
            .filter(|s| interval.osd_at(*s).is_some_and(|o| !lacking.contains(&o)))
            .collect();
        for _attempt in 0..EC_READ_ATTEMPTS {
            let fetch = ec::fetch_for(&layout, &plan, &available)?;
            let (got, failed) = self
                .fetch_shards(
                    pg,
                    interval,
                    &key,
                    plan.version,
                    &fetch.ranges,
                    (false, &[]),
                )
                .await;
            if failed.is_empty() {
                let got = got
                    .into_iter()
                    .map(|(s, served)| (s, served.parts))
                    .collect();
                let parts = ec::parts_for(&*codec, layout.shards(), &plan, &fetch, got)?;
                return ec::assemble(&layout, plan, &parts);
            }
            for (shard, error) in failed {
                tracing::debug!(%pg, shard, ?error, "shard read failed; reading around it");
                available.remove(&shard);
                if let (ShardReadError::Corrupt(_), Some(osd)) = (&error, interval.osd_at(shard)) {
                    self.report_unreadable(pg, interval.epoch_started, osd, key.name.clone())
                        .await;
                }
            }
        }
        Err(OpError::ObjectBusy)
    }

    /// Plans a partial write of an erasure-coded object (`Ok(None)`: the
    /// PG is not erasure-coded or not held here, and the core answers):
    /// the object's size and chunk from this primary's shard, the stripes
    /// the write rewrites ([`ec::plan_partial`]), their old bytes read
    /// from the shards at one version, and each shard's ops
    /// ([`ec::partial_writes`]), to be admitted only while the object is
    /// at that version.
    async fn prepare_ec_write(
        &self,
        pg: PgId,
        object: &Bytes,
        req: ReqId,
        ops: &[Op],
    ) -> Result<Option<PreparedWrite>, OpError> {
        let Some(interval) = lock(&self.pgs).get(&pg).map(|s| s.pg.interval().clone()) else {
            return Ok(None);
        };
        let Some(shape) = &interval.ec else {
            return Ok(None);
        };
        if !ec::is_partial(ops) {
            // Planned under the PG lock (`ec::plan_whole`).
            return Ok(None);
        }
        let backend = ec::EcBackend::new(shape).map_err(OpError::Store)?;
        let layout = *backend.layout();
        let key = ObjectKey::new(object.clone());
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let store = self.store.clone();
        let local_key = key.clone();
        let local = tokio::task::spawn_blocking(move || {
            ec::local_object(&*store, collection, &local_key, &layout)
        })
        .await
        .map_err(|e| OpError::Store(format!("read task: {e}")))??;
        let (base, size, chunk) = local.as_ref().map_or((0, 0, layout.chunk_for(0)), |l| {
            (l.version, l.size, l.chunk)
        });
        let invalid = ec::invalid_write;
        // A small overwrite of a wide code: the old bytes it changes and
        // the parity over them, read at the planned version, and the
        // parity updated by the code's delta. A shard that cannot answer
        // (down, stale, moved) sends it the long way, below.
        if base != 0
            && let Some(delta) = ec::plan_delta(&layout, size, chunk, ops)
        {
            let reads = delta.reads(&layout);
            let (served, failed) = self
                .fetch_shards(pg, &interval, &key, base, &reads, (false, &[]))
                .await;
            if failed.is_empty() && served.len() == reads.len() {
                let old: BTreeMap<u32, Vec<Bytes>> =
                    served.into_iter().map(|(s, got)| (s, got.parts)).collect();
                if let Ok(writes) =
                    ec::delta_writes(&backend, &delta, size, &old, &key, ops.to_vec())
                {
                    let (writes, undo) =
                        ec::with_undo(&layout, object, req, local.as_ref(), None, ops, writes)
                            .map_err(invalid)?;
                    return Ok(Some(PreparedWrite {
                        base,
                        writes,
                        undo,
                        read_shards: true,
                    }));
                }
            }
        }
        let plan = ec::plan_partial(&layout, size, chunk, ops).map_err(invalid)?;
        let reads = plan.reads(&layout, size);
        let old = if reads.iter().any(|r| r.start < r.end) {
            let mut read_ops = vec![OpKind::Stat];
            read_ops.extend(reads.iter().map(|r| OpKind::Read {
                offset: r.start,
                length: Some(r.end - r.start),
            }));
            let read = self
                .ec_read(pg, &interval, key.clone(), Vec::new(), read_ops)
                .await;
            ec::old_bytes_of(read, base, size)?
        } else {
            reads.iter().map(|_| Bytes::new()).collect()
        };
        // Every position must hold its own shard of the object: a partial
        // write on bytes of another shard (an OSD that changed positions)
        // would mix the two. One found so is reported, and rebuilt before
        // the client's retry.
        if base != 0 {
            let probe: BTreeMap<u32, Vec<(u64, u64)>> =
                (0..layout.shards()).map(|s| (s, Vec::new())).collect();
            let (_, failed) = self
                .fetch_shards(pg, &interval, &key, 0, &probe, (false, &[]))
                .await;
            let mut mixed = false;
            for (shard, error) in failed {
                if let (ShardReadError::Corrupt(_), Some(osd)) = (&error, interval.osd_at(shard)) {
                    self.report_unreadable(pg, interval.epoch_started, osd, object.clone())
                        .await;
                    mixed = true;
                }
            }
            if mixed {
                return Err(OpError::ObjectBusy);
            }
        }
        let writes =
            ec::partial_writes(&backend, size, &plan, &old, &key, ops.to_vec()).map_err(invalid)?;
        let (writes, undo) = ec::with_undo(
            &layout,
            object,
            req,
            local.as_ref(),
            Some(&plan),
            ops,
            writes,
        )
        .map_err(invalid)?;
        Ok(Some(PreparedWrite {
            base,
            writes,
            undo,
            read_shards: true,
        }))
    }

    /// Tells the PG's core that `osd`'s shard of `object` is unreadable:
    /// it then counts as lacking it and is rebuilt.
    async fn report_unreadable(&self, pg: PgId, interval_epoch: Epoch, osd: OsdId, object: Bytes) {
        let unreadable = PgMsg::Unreadable {
            from: osd,
            interval_epoch,
            object,
        };
        self.feed(pg, PgEvent::Peer(unreadable)).await;
    }

    /// Reads shard ranges (`whole`: whole shards with their xattrs) of
    /// `key` at `version` (0: any) from the OSD at each position, all at
    /// once, this OSD's own from its store: what each served, and why the
    /// others did not.
    async fn fetch_shards(
        &self,
        pg: PgId,
        interval: &Interval,
        key: &ObjectKey,
        version: u64,
        ranges: &BTreeMap<u32, Vec<(u64, u64)>>,
        (whole, strays): (bool, &[OsdId]),
    ) -> (BTreeMap<u32, ec::Served>, Vec<(u32, ShardReadError)>) {
        let collection = CollectionId::pg(pg.pool.0, pg.seed);
        let mut tasks: tokio::task::JoinSet<(u32, Result<ec::Served, ShardReadError>)> =
            tokio::task::JoinSet::new();
        let mut failed = Vec::new();
        for (&at, ranges) in ranges {
            let ranges = ranges.clone();
            let source = ec::source_of(interval, strays, at);
            let (osd, shard) = (source.map(|s| s.0), source.map_or(at, |s| s.1));
            if osd == Some(self.whoami) {
                let store = self.store.clone();
                let key = key.clone();
                tasks.spawn_blocking(move || {
                    let served = ec::serve_shard_read(
                        &*store, collection, &key, shard, version, &ranges, whole,
                    );
                    (at, served)
                });
                continue;
            }
            let Some(osd) = osd else {
                failed.push((at, ShardReadError::NotServing("a hole".into())));
                continue;
            };
            let request = ShardRead {
                pg,
                from: self.whoami,
                interval_epoch: interval.epoch_started,
                object: ByteBuf::from(key.name.to_vec()),
                shard,
                version,
                ranges,
                whole,
            };
            match self.peer_at(osd).await {
                Ok(conn) => {
                    tasks.spawn(async move { (at, fetch_shard(&conn, &request).await) });
                }
                Err(error) => {
                    failed.push((at, ShardReadError::NotServing(error.to_string())));
                }
            }
        }
        let mut got = BTreeMap::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((shard, Ok(served))) => {
                    got.insert(shard, served);
                }
                Ok((shard, Err(error))) => failed.push((shard, error)),
                Err(error) => tracing::error!(%pg, %error, "shard read task failed"),
            }
        }
        (got, failed)
    }

    /// The peer connection to `osd`, by its address in the map.
    async fn peer_at(&self, osd: OsdId) -> Result<Connection, WireError> {
        let addr = {
            let view = read(&self.map);
            view.state.endpoints.get(&osd).map(|e| e.addr.clone())
        };
        let Some(addr) = addr else {
            return Err(WireError::Closed);
        };
        self.peer(osd, &addr).await
    }
}

/// One shard read over a peer connection: what the shard served, or why
/// not.
async fn fetch_shard(conn: &Connection, request: &ShardRead) -> Result<ec::Served, ShardReadError> {
    let lost = |why: String| ShardReadError::NotServing(why);
    let frame = Frame::request(request, Bytes::new()).map_err(|e| lost(e.to_string()))?;
    let reply = conn
        .call_frame_with_timeout(frame, SHARD_READ_TIMEOUT)
        .await
        .map_err(|e| lost(e.to_string()))?;
    let ShardReadReply(answer) = reply.decode_body().map_err(|e| lost(e.to_string()))?;
    let want_parts = if request.whole {
        1
    } else {
        request.ranges.len()
    };
    ec::served_of(
        request.version,
        want_parts,
        answer,
        &reply.data.into_bytes(),
    )
}

/// Takes read `read`'s step out of a PG's effects, if the core made one.
fn take_read_step(effects: &mut Vec<Effect>, read: ReadId) -> Option<ReadStep> {
    let index = effects.iter().position(|effect| {
        matches!(effect, Effect::Read { read: r } | Effect::ReadAnswer { read: r, .. } if *r == read)
    })?;
    match effects.remove(index) {
        Effect::Read { .. } => Some(ReadStep::Go),
        Effect::ReadAnswer { answer, .. } => Some(ReadStep::Answer(answer)),
        _ => None,
    }
}

/// What a store read gave a client read: its outputs and data, or why not.
pub type ReadResult = Result<(Vec<OpOutput>, Bytes), OpError>;

/// The event that reports read `read`'s store read to its core (public,
/// as [`read_reply`], so the simulator reports the same).
#[must_use]
pub fn read_done(read: ReadId, result: &ReadResult) -> PgEvent {
    let corrupt = match result {
        Err(OpError::Corrupt(why)) => Some(why.clone()),
        _ => None,
    };
    PgEvent::ReadDone { read, corrupt }
}

/// The client's reply to a read as the core answered it; `result`: what
/// the store read gave, if it ran (`Deliver` without one is `ObjectBusy`).
#[must_use]
pub fn read_reply(answer: ReadAnswer, result: Option<ReadResult>) -> (ClientReply, Bytes) {
    match (answer, result) {
        (ReadAnswer::Deliver, Some(Ok((output, data)))) => (
            ClientReply {
                result: Ok(output),
                version: None,
            },
            data,
        ),
        (ReadAnswer::Deliver, Some(Err(error))) => (ClientReply::err(error), Bytes::new()),
        (ReadAnswer::Corrupt(why), _) => (ClientReply::err(OpError::Corrupt(why)), Bytes::new()),
        (ReadAnswer::Busy | ReadAnswer::Deliver, _) => {
            (ClientReply::err(OpError::ObjectBusy), Bytes::new())
        }
    }
}

/// One PG as its primary reports it with each heartbeat (public so the
/// simulator's heartbeats carry the daemon's very report).
#[must_use]
pub fn pg_stat(pg: PgId, core: &Pg) -> PgStat {
    let interval = core.interval();
    let (missing, backfill) = core.healing_counts();
    let stamps = core.scrub_stamps();
    let (inconsistent_count, inconsistent) = core.inconsistent();
    PgStat {
        pg,
        state: core.state_name(),
        up: interval.up.clone(),
        acting: interval.acting.clone(),
        primary: interval.primary,
        interval_epoch: interval.epoch_started.0,
        last_update: core.last_update().to_string(),
        log_entries: core.log().len() as u64,
        missing_objects: missing as u64,
        backfill_targets: u32::try_from(backfill).unwrap_or(u32::MAX),
        backfill_permille: core.backfill_permille(),
        blocked: core.blocked_reason(),
        scrubbing: core
            .scrubbing()
            .map(|deep| if deep { "deep-scrub" } else { "scrub" }.to_owned()),
        last_scrub_secs: stamps.light_secs,
        last_deep_scrub_secs: stamps.deep_secs,
        inconsistent_objects: inconsistent_count,
        inconsistent: inconsistent
            .iter()
            .take(PG_STAT_INCONSISTENT_MAX)
            .map(|i| format!("{}: {}", String::from_utf8_lossy(&i.object), i.reason))
            .collect(),
    }
}

/// What each PG collection of a store holds, with the copy's position in
/// its PG's acting set (`position`; `None` for a copy outside it, or a
/// collection this OSD has no PG for, such as one being removed: its space
/// is used all the same).
pub fn pg_usage(
    usage: &BTreeMap<CollectionId, cairn_store::CollectionUsage>,
    position: impl Fn(&PgId) -> Option<u32>,
) -> Vec<PgUsage> {
    usage
        .iter()
        .map(|(c, u)| {
            let pg = crate::split::pg_of_collection(*c);
            PgUsage {
                pg,
                position: position(&pg),
                objects: u.objects,
                bytes: u.bytes,
                allocated_bytes: u.allocated_bytes,
            }
        })
        .collect()
}

/// A PG core's reply as the client gets it; `epoch` is this OSD's map
/// epoch, which a `Retry` names (public so the simulator answers alike).
#[must_use]
pub fn client_reply(reply: Reply, epoch: Epoch) -> ClientReply {
    let (result, version) = match reply {
        Reply::Done {
            version,
            result: LogResult::Ok { object_version },
        } => (
            Ok(vec![OpOutput::Written { object_version }]),
            Some(version.into()),
        ),
        Reply::Done {
            version,
            result: LogResult::Err { code },
        } => (Err(refusal_error(code)), Some(version.into())),
        Reply::ObjectBusy => (Err(OpError::ObjectBusy), None),
        Reply::Retry { reason } => (
            Err(OpError::Retry {
                epoch: epoch.0,
                reason: format!("{reason:?}"),
            }),
            None,
        ),
        Reply::Blocked {
            acting_count,
            min_size,
        } => (
            Err(OpError::Blocked {
                acting_count,
                min_size,
            }),
            None,
        ),
        Reply::Busy { inflight_max } => (
            Err(OpError::Busy {
                inflight_max: u32::try_from(inflight_max).unwrap_or(u32::MAX),
            }),
            None,
        ),
        Reply::Invalid {
            reason: InvalidWrite::NotSupported(why),
        } => (Err(OpError::NotSupported(why)), None),
        Reply::Invalid { reason } => (Err(OpError::Invalid(reason.to_string())), None),
    };
    ClientReply { result, version }
}

/// The transactions that reset a PG copy whose metadata is corrupt (a
/// damaged PG-log, info or missing record: `load_pg` answers
/// `StoreError::Corrupt`), and the copy they leave: empty, marked
/// `backfilling`, with the `last_epoch_started` its info record holds if
/// that record is sound, else `epoch`, the start of the interval it is
/// loaded in. Apply them in order.
///
/// What the copy held is lost, so it must neither vouch nor be silent:
/// marked backfilling it is never taken for a complete copy (not the
/// authoritative history, not a recovery source, no proof that an interval
/// kept its writes). Its `last_epoch_started` still tells which intervals
/// it never activated in, and those accepted no write whatever became of
/// its data; if the record is damaged too, an epoch no older than any
/// interval it was in passes none of them over (an answer of epoch 0
/// would pass them all), and a past interval only it could vouch for
/// keeps the PG incomplete, as Ceph's does until an operator marks the
/// OSD lost. So peering neither trusts it nor waits on it: the primary
/// backfills it if it acts, else purges it as a stray, as Ceph rebuilds a
/// PG copy an operator removed with `ceph-objectstore-tool`.
/// Objects go first, then one transaction drops the collection with its
/// metadata and creates it marked: a crash part-way leaves a copy that is
/// still corrupt (and reset again), never one that looks sound.
///
/// # Errors
/// The store cannot list the collection's objects.
pub fn reset_corrupt_pg(
    store: &dyn ObjectStore,
    collection: CollectionId,
    pg_num: u32,
    epoch: Epoch,
) -> Result<(Vec<Transaction>, StoredPg), StoreError> {
    let mut txns = Vec::new();
    let mut after: Option<ObjectKey> = None;
    loop {
        let page = store.list(collection, after.as_ref(), META_PAGE_KEYS)?;
        let mut txn = Transaction::new(collection);
        for object in &page.keys {
            txn.push(Op::Remove {
                object: object.clone(),
            });
        }
        if !txn.ops.is_empty() {
            txns.push(txn);
        }
        match page.next {
            Some(next) if !page.keys.is_empty() => after = Some(next),
            _ => break,
        }
    }
    let mut info = PgInfo::default();
    let sound = match store.meta_get(collection, crate::pg::INFO_KEY) {
        Ok(Some(value)) => info.decode_into(&value).is_ok(),
        _ => false,
    };
    let info = PgInfo {
        exists: true,
        last_update: Version::ZERO,
        last_epoch_started: if sound {
            info.last_epoch_started
        } else {
            epoch
        },
        backfilling: true,
        // Emptied: no shard until a backfill fills it.
        shard: None,
    };
    txns.push(
        Transaction::new(collection)
            .with(Op::RemoveCollection)
            .with(Op::CreateCollection)
            .with(crate::split::pg_num_op(pg_num))
            .with(Op::MetaSet {
                key: Bytes::from_static(crate::pg::INFO_KEY),
                value: info.encode(),
            }),
    );
    let stored = StoredPg {
        info: Some(info),
        ..StoredPg::default()
    };
    Ok((txns, stored))
}

/// The client objects of a collection after `after`, as
/// [`ObjectStore::list`] pages them, without the OSD's own stashes
/// (`crate::undo`): what listings, backfill scans and scrubs walk. `next`
/// is the last key returned, so a cursor is always a client name.
///
/// # Errors
/// The store cannot list the collection.
pub fn list_objects(
    store: &dyn ObjectStore,
    collection: CollectionId,
    after: Option<&ObjectKey>,
    limit: usize,
) -> Result<cairn_store::ObjectPage, StoreError> {
    let limit = limit.max(1);
    let mut cursor = after.cloned();
    let mut keys = Vec::new();
    loop {
        let page = store.list(collection, cursor.as_ref(), limit - keys.len())?;
        let done = page.next.is_none();
        cursor = page.keys.last().cloned();
        keys.extend(
            page.keys
                .into_iter()
                .filter(|k| !crate::undo::is_internal(&k.name)),
        );
        if done || cursor.is_none() {
            return Ok(cairn_store::ObjectPage { keys, next: None });
        }
        if keys.len() >= limit {
            let next = keys.last().cloned();
            return Ok(cairn_store::ObjectPage { keys, next });
        }
    }
}

/// Reads a PG copy's log, info and missing set from its collection.
pub fn load_pg(store: &dyn ObjectStore, collection: CollectionId) -> Result<StoredPg, StoreError> {
    let mut stored = StoredPg::default();
    let mut after: Option<Bytes> = None;
    loop {
        let page = store.meta_range(collection, after.as_deref(), META_PAGE_KEYS)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        for (key, value) in page {
            if let Some(name) = key.strip_prefix(MISSING_KEY_PREFIX) {
                stored.missing.insert(Bytes::copy_from_slice(name));
            } else if key.starts_with(LOG_KEY_PREFIX) {
                let entry = LogEntry::decode(&value)
                    .map_err(|e| StoreError::Corrupt(format!("{collection} log entry: {e}")))?;
                stored.log.push(entry);
            } else if let Some(version) = key.strip_prefix(crate::undo::UNDO_KEY_PREFIX) {
                let record = crate::undo::UndoRecord::decode(&value)
                    .map_err(|e| StoreError::Corrupt(format!("{collection} undo record: {e}")))?;
                let version = <[u8; 16]>::try_from(version)
                    .map(|v| Version::from_key_bytes(&v))
                    .map_err(|_| {
                        StoreError::Corrupt(format!("{collection} undo key of {} bytes", key.len()))
                    })?;
                stored.undo.push((version, record));
            } else if key.starts_with(DUP_KEY_PREFIX) {
                let dup = DupEntry::decode(&value)
                    .map_err(|e| StoreError::Corrupt(format!("{collection} dup entry: {e}")))?;
                stored.dups.push(dup);
            } else if key[..] == *scrub::STAMPS_KEY {
                stored.scrub = ScrubStamps::decode(&value)
                    .map_err(|e| StoreError::Corrupt(format!("{collection} scrub stamps: {e}")))?;
            } else if let Some(name) = key.strip_prefix(scrub::INCONSISTENT_KEY_PREFIX) {
                // An unreadable record still says the object was found
                // inconsistent: it stays reported until a scrub clears it.
                let found = Inconsistency::decode(name, &value).unwrap_or_else(|e| Inconsistency {
                    object: Bytes::copy_from_slice(name),
                    bad: BTreeSet::new(),
                    auth: None,
                    reason: format!("kept record unreadable: {e}"),
                });
                stored.inconsistent.push(found);
            } else if key[..] == *INFO_KEY {
                let mut info = PgInfo::default();
                info.decode_into(&value)
                    .map_err(|e| StoreError::Corrupt(format!("{collection} PG info: {e}")))?;
                stored.info = Some(info);
            }
        }
    }
    stored.log.sort_by_key(|e| e.version);
    Ok(stored)
}

/// Reads `whoami`'s scrub map of PG `pg` for `order`: the objects with
/// keys in `(after, through]` (`None`: unbounded), at most
/// [`cairn_proto::limits::SCRUB_MAP_ENTRIES_MAX`] of them (beyond: `truncated`). An object the
/// store cannot read is reported with its error; a deep scrub reads (and
/// so checksums) all data. The daemon and the simulator both build maps
/// here.
///
/// # Errors
/// The store cannot list the collection.
pub fn build_scrub_map(
    store: &dyn ObjectStore,
    pg: PgId,
    whoami: OsdId,
    order: &ScrubOrder,
) -> Result<ScrubMap, StoreError> {
    let collection = CollectionId::pg(pg.pool.0, pg.seed);
    let map = |entries, truncated| ScrubMap {
        from: whoami,
        interval_epoch: order.interval_epoch,
        chunk: order.chunk,
        entries,
        truncated,
    };
    let mut entries = Vec::new();
    let mut cursor = order.after.clone();
    loop {
        let page = list_objects(store, collection, cursor.as_ref(), SCRUB_LIST_PAGE_KEYS)?;
        for key in &page.keys {
            if order.through.as_ref().is_some_and(|t| key > t) {
                return Ok(map(entries, false));
            }
            if entries.len() == cairn_proto::limits::SCRUB_MAP_ENTRIES_MAX {
                return Ok(map(entries, true));
            }
            entries.push(scrub_entry(store, collection, key, order.deep));
        }
        match page.next {
            Some(_) => cursor = page.keys.last().cloned(),
            None => return Ok(map(entries, false)),
        }
    }
}

fn scrub_entry(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    deep: bool,
) -> ScrubEntry {
    let mut entry = ScrubEntry {
        name: key.name.clone(),
        size: 0,
        version: 0,
        xattrs_digest: 0,
        omap_digest: 0,
        data_digest: None,
        error: None,
        sealed: false,
    };
    let result = (|| -> Result<(), StoreError> {
        let stat = store.stat(collection, key)?;
        entry.size = stat.size_bytes;
        entry.version = stat.version;
        let xattrs = store.xattrs(collection, key)?;
        entry.xattrs_digest = scrub::map_digest(xattrs.iter().map(|(k, v)| (&k[..], &v[..])));
        let mut omap_crc = 0u32;
        let mut after: Option<Bytes> = None;
        loop {
            let page = store.omap_range(collection, key, after.as_deref(), OMAP_PAGE_KEYS)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(last.clone());
            omap_crc =
                scrub::map_digest_append(omap_crc, page.iter().map(|(k, v)| (&k[..], &v[..])));
        }
        entry.omap_digest = omap_crc;
        if deep {
            let mut crc = 0u32;
            let mut offset = 0u64;
            while offset < stat.size_bytes {
                let length = (stat.size_bytes - offset).min(SCRUB_READ_BYTES);
                let data = store.read(collection, key, ReadOptions::range(offset, length))?;
                crc = cairn_types::crc::crc32c_append(crc, &data);
                offset += length;
            }
            entry.data_digest = Some(crc);
            // An erasure-coded shard whose full write recorded its crc32c
            // must still have it: bytes changed under sound block checksums
            // (a misdirected or lost write) are found here.
            if let Some(meta) = xattrs.get(crate::ec::EC_META_XATTR) {
                let meta = crate::ec::ShardMeta::decode(meta)
                    .map_err(|e| StoreError::Corrupt(format!("shard metadata: {e}")))?;
                entry.sealed = meta.crc == Some(crc);
                if meta.crc.is_some_and(|want| want != crc) {
                    return Err(StoreError::Corrupt(format!(
                        "shard {} holds bytes whose crc32c {crc:08x} is not the {:08x} its write recorded",
                        meta.shard,
                        meta.crc.unwrap_or(0)
                    )));
                }
            }
        }
        Ok(())
    })();
    if let Err(error) = result {
        let mut text = error.to_string();
        if text.len() > cairn_proto::limits::SCRUB_ERROR_BYTES_MAX {
            let mut cut = cairn_proto::limits::SCRUB_ERROR_BYTES_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        entry.error = Some(text);
    }
    entry
}

/// Removes every object of a collection (its metadata keys stay).
fn empty_collection(store: &dyn ObjectStore, collection: CollectionId) -> Result<(), StoreError> {
    loop {
        let page = store.list(collection, None, WIPE_BATCH_OBJECTS)?;
        if page.keys.is_empty() {
            return Ok(());
        }
        let mut txn = Transaction::new(collection);
        for object in page.keys {
            txn.push(Op::Remove { object });
        }
        store.apply(txn)?;
    }
}

/// An object's whole state for a push (`None`: it does not exist).
pub fn read_object_state(
    store: &dyn ObjectStore,
    collection: CollectionId,
    name: &Bytes,
) -> Result<Option<ObjectState>, StoreError> {
    let key = ObjectKey::new(name.clone());
    let stat = match store.stat(collection, &key) {
        Ok(stat) => stat,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let data = store.read(collection, &key, ReadOptions::default())?;
    let xattrs = store.xattrs(collection, &key)?;
    let mut omap = BTreeMap::new();
    let mut after: Option<Bytes> = None;
    loop {
        let page = store.omap_range(collection, &key, after.as_deref(), OMAP_PAGE_KEYS)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        omap.extend(page);
    }
    Ok(Some(ObjectState {
        data,
        xattrs,
        omap,
        version: stat.version,
    }))
}

fn to_bufs(entries: impl IntoIterator<Item = (Bytes, Bytes)>) -> Vec<(ByteBuf, ByteBuf)> {
    entries
        .into_iter()
        .map(|(k, v)| (ByteBuf::from(k.to_vec()), ByteBuf::from(v.to_vec())))
        .collect()
}

/// Serves a read request from the store: its guards, then each op in
/// order, the data of `Read`s concatenated in the returned bytes.
///
/// # Errors
/// A guard that fails, or the store's error, as the client's error.
pub fn read_ops(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    guards: Vec<Guard>,
    ops: Vec<OpKind>,
) -> Result<(Vec<OpOutput>, Bytes), OpError> {
    if !guards.is_empty() {
        let check = observe(store, collection, &key.name, guards, None)?;
        if let Some(code) = check.and_then(|check| check.failure()) {
            return Err(refusal_error(code));
        }
    }
    let mut outputs = Vec::with_capacity(ops.len());
    let mut data: Vec<Bytes> = Vec::new();
    for op in ops {
        let (output, bytes) = read_op(store, collection, key, op)?;
        if !bytes.is_empty() {
            data.push(bytes);
        }
        outputs.push(output);
    }
    Ok((outputs, crate::ec::concat(data)))
}

/// Serves one read-only op from the store.
pub(crate) fn read_op(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    kind: OpKind,
) -> Result<(OpOutput, Bytes), OpError> {
    let output = match kind {
        OpKind::Read { offset, length } => {
            let options = ReadOptions {
                offset_bytes: offset,
                length_bytes: length,
                verify_checksum: true,
            };
            let data = store.read(collection, key, options).map_err(op_error)?;
            let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
            return Ok((OpOutput::Data { len }, data));
        }
        OpKind::Stat => {
            let stat = store.stat(collection, key).map_err(op_error)?;
            OpOutput::Stat {
                size_bytes: stat.size_bytes,
                version: stat.version,
            }
        }
        OpKind::GetXattrs => {
            let xattrs = store.xattrs(collection, key).map_err(op_error)?;
            OpOutput::Xattrs(to_bufs(
                xattrs
                    .into_iter()
                    .filter(|(name, _)| client_xattr_name(name)),
            ))
        }
        OpKind::GetXattr { name } => {
            let mut xattrs = store.xattrs(collection, key).map_err(op_error)?;
            OpOutput::Value(xattrs.remove(&name[..]).map(|v| ByteBuf::from(v.to_vec())))
        }
        OpKind::OmapGetHeader => {
            let mut xattrs = store.xattrs(collection, key).map_err(op_error)?;
            OpOutput::Value(
                xattrs
                    .remove(OMAP_HEADER_XATTR)
                    .map(|v| ByteBuf::from(v.to_vec())),
            )
        }
        OpKind::OmapGetRange { after, limit } => {
            let limit = usize::try_from(limit.min(OMAP_RANGE_ENTRIES_MAX)).unwrap_or(usize::MAX);
            let mut entries = store
                .omap_range(collection, key, after.as_deref().map(|a| &a[..]), limit)
                .map_err(op_error)?;
            let mut bytes = 0;
            let fit = entries
                .iter()
                .take_while(|(k, v)| {
                    bytes += k.len() + v.len();
                    bytes <= OMAP_RANGE_BYTES_MAX
                })
                .count()
                .max(1);
            entries.truncate(fit);
            OpOutput::Omap(to_bufs(entries))
        }
        OpKind::OmapGet { keys } => {
            let keys: Vec<Bytes> = keys
                .into_iter()
                .map(|k| Bytes::from(k.into_vec()))
                .collect();
            let entries = store.omap_get(collection, key, &keys).map_err(op_error)?;
            OpOutput::Omap(to_bufs(entries))
        }
        OpKind::List { after, limit } => {
            let limit = usize::try_from(limit.clamp(1, LIST_NAMES_MAX)).unwrap_or(1);
            let after = after.map(|a| ObjectKey::new(Bytes::from(a.into_vec())));
            let page = list_objects(store, collection, after.as_ref(), limit).map_err(op_error)?;
            OpOutput::List {
                names: page
                    .keys
                    .into_iter()
                    .map(|k| ByteBuf::from(k.name.to_vec()))
                    .collect(),
                next: page.next.map(|k| ByteBuf::from(k.name.to_vec())),
            }
        }
        write => return Err(OpError::Invalid(format!("{write:?} is not a read"))),
    };
    Ok((output, Bytes::new()))
}

/// Checks the shape of a request from the network before anything reads
/// the store: object names (whose key encoding assumes the name limit) of
/// 1 to `OBJECT_NAME_BYTES_MAX` bytes, or empty for a listing (whose
/// cursor is a name too, and which is a request's only op); 1 to
/// `OPS_PER_REQUEST_MAX` ops, all reads or all writes; at most
/// `GUARDS_PER_OP_MAX` guards, with client xattr names.
///
/// # Errors
/// Why the request is malformed.
pub fn check_request(op: &ClientOp) -> Result<(), String> {
    let max = cairn_proto::limits::OBJECT_NAME_BYTES_MAX;
    let bad = |what: &str, len: usize| Err(format!("{what} of {len} bytes (1 to {max} allowed)"));
    if op.ops.is_empty() || op.ops.len() > OPS_PER_REQUEST_MAX {
        return Err(format!(
            "{} ops (1 to {OPS_PER_REQUEST_MAX} allowed)",
            op.ops.len()
        ));
    }
    if op.guards.len() > GUARDS_PER_OP_MAX {
        return Err(format!(
            "{} guards (at most {GUARDS_PER_OP_MAX})",
            op.guards.len()
        ));
    }
    let write = op.is_write();
    if op.ops.iter().any(|o| o.is_write() != write) {
        return Err("a request is all reads or all writes".into());
    }
    let names = op.guards.iter().filter_map(|g| match g {
        GuardWire::Xattr { name, .. } => Some(name),
        _ => None,
    });
    let reads = op.ops.iter().filter_map(|o| match o {
        OpKind::GetXattr { name } => Some(name),
        _ => None,
    });
    if names.chain(reads).any(|name| !client_xattr_name(name)) {
        return Err("xattr names are 1 or more bytes, not starting with a zero byte".into());
    }
    let listing = op.ops.iter().find_map(|o| match o {
        OpKind::List { after, .. } => Some(after),
        _ => None,
    });
    match listing {
        Some(_) if op.ops.len() > 1 || !op.guards.is_empty() => {
            Err("a listing is a request of its own".into())
        }
        Some(_) if !op.object.is_empty() => Err("a listing names no object".into()),
        Some(Some(a)) if a.is_empty() || a.len() > max => bad("listing cursor", a.len()),
        Some(_) => Ok(()),
        None if op.object.is_empty() || op.object.len() > max => {
            bad("object name", op.object.len())
        }
        None if crate::undo::is_internal(&op.object) => Err(format!(
            "object names beginning with {:?} are the OSD's own",
            String::from_utf8_lossy(crate::undo::STASH_NAME_PREFIX)
        )),
        None => Ok(()),
    }
}

/// The client's error for a logged refusal: its own guard's failure, or
/// what its ops needed of the object.
#[must_use]
pub fn refusal_error(code: u32) -> OpError {
    match err_code::split(code) {
        (_, Some(guard)) => OpError::CompareFailed {
            guard,
            reason: err_code::describe(code).into(),
        },
        (err_code::NOT_FOUND, None) => OpError::NotFound,
        (err_code::EXISTS, None) => OpError::Exists,
        (_, None) => OpError::CompareFailed {
            guard: 0,
            reason: err_code::describe(code).into(),
        },
    }
}

/// Reads what a write's guards compare, with what its ops imply: the
/// object's version (0 if absent) and the xattrs and omap keys they name.
///
/// # Errors
/// The store's, as the client's error.
pub fn observe(
    store: &dyn ObjectStore,
    collection: CollectionId,
    object: &Bytes,
    guards: Vec<Guard>,
    implied: Option<Guard>,
) -> Result<Option<GuardCheck>, OpError> {
    if guards.is_empty() && implied.is_none() {
        return Ok(None);
    }
    let key = ObjectKey::new(object.clone());
    let version = match store.stat(collection, &key) {
        Ok(stat) => stat.version,
        Err(StoreError::NotFound { .. }) => 0,
        Err(error) => return Err(op_error(error)),
    };
    let mut check = GuardCheck {
        guards,
        implied,
        version,
        ..GuardCheck::default()
    };
    if version == 0 {
        return Ok(Some(check));
    }
    let xattr_names: Vec<&Bytes> = check
        .guards
        .iter()
        .filter_map(|g| match g {
            Guard::Xattr { name, .. } => Some(name),
            _ => None,
        })
        .collect();
    if !xattr_names.is_empty() {
        let mut xattrs = store.xattrs(collection, &key).map_err(op_error)?;
        check.xattrs = xattr_names
            .into_iter()
            .filter_map(|name| xattrs.remove_entry(name))
            .collect();
    }
    let omap_keys: Vec<Bytes> = check
        .guards
        .iter()
        .filter_map(|g| match g {
            Guard::OmapKey { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    if !omap_keys.is_empty() {
        check.omap = store
            .omap_get(collection, &key, &omap_keys)
            .map_err(op_error)?
            .into_iter()
            .collect();
    }
    Ok(Some(check))
}

pub(crate) fn op_error(error: StoreError) -> OpError {
    match error {
        StoreError::NotFound { .. } => OpError::NotFound,
        StoreError::Invalid(why) => OpError::Invalid(why),
        full @ StoreError::Full { .. } => OpError::Full(full.to_string()),
        StoreError::Corrupt(why) => OpError::Corrupt(why),
        other => OpError::Store(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::PoolId;

    #[test]
    fn id_file_round_trips_and_rejects_junk() {
        let dir = std::env::temp_dir().join(format!("cairn-osd-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert!(matches!(load_id(&dir), Ok(None)));
        save_id(&dir, OsdId(7)).expect("save");
        assert!(matches!(load_id(&dir), Ok(Some(OsdId(7)))));
        std::fs::write(id_path(&dir), "seven").expect("write");
        assert!(matches!(load_id(&dir), Err(OsdError::Config(_))));
        drop(std::fs::remove_dir_all(&dir));
    }

    /// A PG copy whose metadata is corrupt is emptied and marked for a
    /// backfill, keeping the `last_epoch_started` of a sound info record
    /// (the intervals it never activated in still accepted no write), or
    /// taking the interval it is loaded in when that record is the damage
    /// (so it passes no interval over); either way it vouches for nothing.
    #[test]
    fn a_corrupt_pg_copy_is_reset_to_a_backfill_target() {
        let c = CollectionId::pg(1, 0);
        let info = PgInfo {
            exists: true,
            last_update: Version::ZERO,
            last_epoch_started: Epoch(7),
            backfilling: false,
            shard: None,
        };
        for info_sound in [true, false] {
            let store = cairn_store::MemStore::new();
            let info_value = if info_sound {
                info.encode()
            } else {
                Bytes::from_static(b"\x01torn")
            };
            let entry_value = if info_sound {
                Bytes::from_static(b"not a log entry")
            } else {
                Bytes::new()
            };
            let object = ObjectKey::new(Bytes::from_static(b"obj"));
            let mut txn = Transaction::new(c)
                .with(Op::CreateCollection)
                .with(Op::WriteFull {
                    object: object.clone(),
                    data: Bytes::from_static(b"data").into(),
                })
                .with(Op::MetaSet {
                    key: Bytes::from_static(crate::pg::INFO_KEY),
                    value: info_value,
                });
            if info_sound {
                txn.push(Op::MetaSet {
                    key: Version::new(5, 1).log_key(),
                    value: entry_value,
                });
            }
            store.apply(txn).expect("setup");
            assert!(
                matches!(load_pg(&store, c), Err(StoreError::Corrupt(_))),
                "the copy reads as corrupt"
            );
            let (txns, stored) = reset_corrupt_pg(&store, c, 4, Epoch(9)).expect("reset");
            for txn in txns {
                store.apply(txn).expect("reset applies");
            }
            let loaded = load_pg(&store, c).expect("loads after the reset");
            let want = if info_sound { Epoch(7) } else { Epoch(9) };
            for info in [loaded.info.expect("info"), stored.info.expect("info")] {
                assert!(info.backfilling && !info.complete(), "vouches for nothing");
                assert_eq!(info.last_epoch_started, want);
            }
            assert!(loaded.log.is_empty());
            assert!(store.list(c, None, 10).expect("list").keys.is_empty());
            assert!(matches!(
                store.stat(c, &object),
                Err(StoreError::NotFound { .. })
            ));
        }
    }

    #[test]
    fn requests_from_the_network_are_checked_before_the_store() {
        let op = |object: &[u8], kind: OpKind| ClientOp {
            pg: PgId::new(PoolId(1), 0),
            epoch: Epoch(1),
            req: cairn_proto::osd::ReqIdWire { client: 1, tid: 1 },
            object: ByteBuf::from(object.to_vec()),
            guards: Vec::new(),
            ops: vec![kind],
            full_try: false,
        };
        let max = cairn_proto::limits::OBJECT_NAME_BYTES_MAX;
        assert!(check_request(&op(b"a", OpKind::Stat)).is_ok());
        assert!(check_request(&op(&vec![b'n'; max], OpKind::Stat)).is_ok());
        assert!(check_request(&op(&vec![b'n'; 70_000], OpKind::Stat)).is_err());
        assert!(check_request(&op(b"", OpKind::Remove)).is_err());
        let stash = crate::undo::stash_key(&Bytes::from_static(b"a"), ReqId { client: 1, tid: 2 });
        assert!(check_request(&op(&stash.name, OpKind::Stat)).is_err());
        let list = |after: Option<Vec<u8>>| OpKind::List {
            after: after.map(ByteBuf::from),
            limit: 10,
        };
        assert!(check_request(&op(b"", list(None))).is_ok());
        assert!(check_request(&op(b"", list(Some(vec![b'n'; 70_000])))).is_err());
        assert!(check_request(&op(b"x", list(None))).is_err());
    }
}

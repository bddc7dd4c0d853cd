//! The monitor daemon: the async shell around [`MapService`].
//!
//! One actor thread owns the service and the store and handles events one
//! at a time, so each epoch is persisted (fsynced) before its reply leaves
//! and before the next event is decided. Connections (via
//! [`cairn_wire::serve`]) and a 500 ms ticker only feed it events.
//!
//! The actor publishes each committed epoch on a `watch` channel. Held
//! `Subscribe` requests (long polls) wait on it in their own handler tasks,
//! never in the actor: the wire server runs a connection's requests
//! concurrently, so a held subscription does not delay other requests on
//! the same connection, and the actor stays free to decide.
//!
//! OSD statistics (space, client I/O counters) ride on heartbeats and are
//! kept here in the shell, in memory: they are observations, not map state,
//! so they need no consensus and are not persisted (like Ceph's mgr).

use crate::limits::{EVENT_QUEUE_MAX, TICK_MS};
use crate::service::{Event, MapService, ServiceConfig};
use crate::store::MonStore;
use bytes::Bytes;
use cairn_proto::limits::{INCREMENTALS_PER_REPLY_MAX, SUBSCRIBE_WAIT_MS_MAX};
use cairn_proto::mon::{
    CommandRequest, FailureReport, GetMap, Heartbeat, IoRates, KIND_COMMAND, KIND_FAILURE_REPORT,
    KIND_GET_MAP, KIND_GET_STATS, KIND_HEARTBEAT, KIND_SUBSCRIBE, MapReply, MapUpdate, MonReply,
    OsdStats, OsdStatsReport, Reply, StatsReply, Subscribe,
};
use cairn_proto::mon::{MonCommand, MonError};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{Frame, ServeOptions};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// How to run a monitor.
#[derive(Clone, Debug)]
pub struct MonConfig {
    /// Directory of the monitor's database; created if missing.
    pub data_dir: PathBuf,
    /// Address to serve on.
    pub addr: SocketAddr,
    pub service: ServiceConfig,
}

enum Request {
    Event {
        event: Event,
        reply: Option<oneshot::Sender<Result<Reply, MonError>>>,
    },
    GetMap {
        have_epoch: Epoch,
        reply: oneshot::Sender<Result<(MapReply, Bytes), MonError>>,
    },
}

/// What every request handler shares: the way to the actor, the daemon's
/// clock, the newest committed epoch and the shutdown signal.
#[derive(Clone)]
struct Shell {
    events: mpsc::Sender<Request>,
    started: Instant,
    /// The newest epoch the actor has persisted; held subscriptions wait on
    /// it. Closed when the actor ends.
    published: watch::Receiver<Epoch>,
    /// Cancelled when the daemon stops; held subscriptions then answer at
    /// once rather than hold up the connection drain.
    shutdown: CancellationToken,
    /// The latest statistics of each OSD (not map state: in memory only).
    stats: Arc<Mutex<BTreeMap<OsdId, StatsSlot>>>,
}

/// One OSD's last report, when it came, and the rates since the one before.
#[derive(Clone, Debug)]
struct StatsSlot {
    stats: OsdStats,
    at: Instant,
    rates: IoRates,
}

impl StatsSlot {
    /// The slot after `stats` arrived at `at`; rates are zero after an OSD
    /// restart (counters went back) or without an earlier report.
    fn next(previous: Option<&StatsSlot>, stats: OsdStats, at: Instant) -> StatsSlot {
        let rates = previous
            .filter(|p| at > p.at && stats.client_write_ops >= p.stats.client_write_ops)
            .filter(|p| stats.client_read_ops >= p.stats.client_read_ops)
            .map_or_else(IoRates::default, |p| {
                let seconds = (at - p.at).as_secs_f64();
                #[allow(clippy::cast_precision_loss)]
                let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
                IoRates {
                    read_ops_per_s: per_s(stats.client_read_ops, p.stats.client_read_ops),
                    read_bytes_per_s: per_s(stats.client_read_bytes, p.stats.client_read_bytes),
                    write_ops_per_s: per_s(stats.client_write_ops, p.stats.client_write_ops),
                    write_bytes_per_s: per_s(stats.client_write_bytes, p.stats.client_write_bytes),
                    recovery_objects_per_s: per_s(
                        stats.recovered_objects,
                        p.stats.recovered_objects,
                    ),
                    recovery_bytes_per_s: per_s(stats.recovered_bytes, p.stats.recovered_bytes),
                }
            });
        StatsSlot { stats, at, rates }
    }
}

/// Runs the monitor until the process ends.
///
/// # Errors
/// If the store cannot be opened, the address cannot be bound, or an epoch
/// cannot be persisted (the monitor stops rather than serve a map it may
/// lose).
pub async fn run(config: MonConfig) -> Result<(), MonError> {
    run_until(config, CancellationToken::new()).await
}

/// File in the monitor's data dir holding its cluster's fsid (hex), written
/// once the monitor listens.
pub const FSID_FILE: &str = "fsid";

/// Runs the monitor until `shutdown` is cancelled, then drains connections
/// and returns.
///
/// # Errors
/// As for [`run`].
pub async fn run_until(config: MonConfig, shutdown: CancellationToken) -> Result<(), MonError> {
    let data_dir = config.data_dir.clone();
    let (store, loaded) = tokio::task::spawn_blocking(move || MonStore::open(&data_dir))
        .await
        .map_err(|e| MonError::Store(e.to_string()))??;
    let mut service = MapService::new(config.service.clone(), loaded.base, loaded.history);
    service.load_settings(loaded.config);
    service.load_auto_out(loaded.auto_out);
    service.load_fs(loaded.fs);
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    // Who serves here: `cairn up` checks that the monitor answering on its
    // port is this one, not another cluster's.
    let fsid_path = config.data_dir.join(FSID_FILE);
    std::fs::write(&fsid_path, format!("{:032x}\n", store.fsid()))?;
    tracing::info!(
        addr = %listener.local_addr()?,
        epoch = %service.epoch(),
        fsid = format_args!("{:032x}", store.fsid()),
        "monitor serving"
    );
    let (events, queue) = mpsc::channel(EVENT_QUEUE_MAX);
    let (published, published_epochs) = watch::channel(service.epoch());
    let actor = tokio::task::spawn_blocking(move || run_actor(service, store, queue, published));
    let started = Instant::now();
    let ticker = tokio::spawn(run_ticker(events.clone(), started, shutdown.clone()));
    let shell = Shell {
        events,
        started,
        published: published_epochs,
        shutdown: shutdown.clone(),
        stats: Arc::new(Mutex::new(BTreeMap::new())),
    };
    let handler = move |frame: Frame, _session| {
        let shell = shell.clone();
        async move { Some(handle_frame(frame, &shell).await) }
    };
    let options = ServeOptions {
        shutdown: shutdown.clone(),
        ..ServeOptions::default()
    };
    // The actor ends only when every sender is gone, or on a store failure,
    // which must stop the daemon too.
    let serving = cairn_wire::serve(listener, handler, options);
    tokio::pin!(actor);
    let result = tokio::select! {
        () = serving => {
            ticker.abort();
            actor.await
        }
        ended = &mut actor => {
            shutdown.cancel();
            ticker.abort();
            ended
        }
    };
    let result = result.map_err(|e| MonError::Store(format!("monitor actor failed: {e}")))?;
    if let Err(error) = &result {
        tracing::error!(%error, "monitor stopped");
    } else {
        tracing::info!("monitor stopped");
    }
    result
}

fn now_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

async fn run_ticker(events: mpsc::Sender<Request>, started: Instant, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(Duration::from_millis(TICK_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let event = Event::Tick {
            now_ms: now_ms(started),
        };
        if events
            .send(Request::Event { event, reply: None })
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The actor: decides, persists, then answers. Returns on the first store
/// failure, since the in-memory epoch would then be ahead of the disk.
fn run_actor(
    mut service: MapService,
    store: MonStore,
    mut queue: mpsc::Receiver<Request>,
    published: watch::Sender<Epoch>,
) -> Result<(), MonError> {
    while let Some(request) = queue.blocking_recv() {
        match request {
            Request::Event { event, reply } => {
                let effects = service.handle(event);
                if let Some((epoch, inc)) = &effects.persist {
                    store.persist(inc, service.state(), service.history_from())?;
                    tracing::debug!(%epoch, "epoch committed");
                }
                if let Some(entries) = &effects.persist_config {
                    store.persist_config(entries)?;
                    tracing::info!(?entries, "settings changed");
                }
                if let Some(ids) = &effects.persist_auto_out {
                    store.persist_auto_out(ids)?;
                }
                if let Some(defs) = &effects.persist_fs {
                    store.persist_fs(defs)?;
                }
                if let (Some(reply), Some(result)) = (reply, effects.reply) {
                    drop(reply.send(result));
                }
                if let Some(epoch) = effects.publish {
                    tracing::info!(%epoch, "new map epoch");
                    published.send_replace(epoch);
                }
            }
            Request::GetMap { have_epoch, reply } => {
                drop(reply.send(map_reply(&service, store.fsid(), have_epoch)));
            }
        }
    }
    Ok(())
}

fn map_reply(
    service: &MapService,
    fsid: u128,
    have_epoch: Epoch,
) -> Result<(MapReply, Bytes), MonError> {
    let epoch = service.epoch();
    // Far behind but within the history: the next page of incrementals
    // (the subscriber asks again), never a full map that would lose the
    // past intervals an OSD's peering needs.
    if have_epoch.0 > 0
        && let Some(mut incrementals) = service.incrementals_since(have_epoch)
    {
        incrementals.truncate(INCREMENTALS_PER_REPLY_MAX);
        let reply = MapReply {
            fsid,
            epoch,
            update: MapUpdate::Incrementals(incrementals),
        };
        return Ok((reply, Bytes::new()));
    }
    // Behind the history (an OSD starting from the first epoch): the oldest
    // map kept, whose incrementals follow, so its PGs learn the past
    // intervals peering needs. A client starting out (epoch 0): the map.
    let state = if have_epoch.0 > 0 {
        service.base()
    } else {
        service.state()
    };
    let bytes = state
        .map
        .encode()
        .map_err(|e| MonError::Store(e.to_string()))?;
    let endpoints = state
        .endpoints
        .iter()
        .map(|(id, e)| (*id, e.clone()))
        .collect();
    let reply = MapReply {
        fsid,
        epoch,
        update: MapUpdate::Full { endpoints },
    };
    Ok((reply, Bytes::from(bytes)))
}

/// Answers one request frame; malformed or unknown requests get a
/// `BadRequest` reply rather than silence.
async fn handle_frame(frame: Frame, shell: &Shell) -> Frame {
    let (events, started) = (&shell.events, shell.started);
    let answer = match frame.kind {
        KIND_GET_MAP => match frame.decode_body::<GetMap>() {
            Ok(request) => return get_map(request.have_epoch, events).await,
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_SUBSCRIBE => match frame.decode_body::<Subscribe>() {
            Ok(request) => return subscribe(request, shell).await,
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_COMMAND => match frame.decode_body::<CommandRequest>() {
            Ok(CommandRequest(MonCommand::MdsBeacon { fs, name, addr })) => {
                let event = Event::MdsBeacon {
                    fs,
                    name,
                    addr,
                    now_ms: now_ms(started),
                };
                submit(events, event).await
            }
            Ok(CommandRequest(command)) => submit(events, Event::Command(command)).await,
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_HEARTBEAT => match frame.decode_body::<Heartbeat>() {
            Ok(Heartbeat { osd, stats }) => {
                let reports = clean_pgs(&stats);
                if !reports.is_empty() {
                    let request = Request::Event {
                        event: Event::PgsClean { reports },
                        reply: None,
                    };
                    if events.send(request).await.is_err() {
                        return respond(&MonReply(Err(MonError::ShuttingDown)), Bytes::new());
                    }
                }
                let store_failed = stats.store_error.is_some();
                shell.record_stats(osd, stats);
                if store_failed {
                    // Kept for `cairn status`, but no sign of life: the OSD
                    // serves nothing and must go down.
                    return respond(
                        &MonReply(Ok(Reply::Heartbeat {
                            epoch: Epoch(0),
                            up: false,
                            config_digest: 0,
                        })),
                        Bytes::new(),
                    );
                }
                let event = Event::Heartbeat {
                    osd,
                    now_ms: now_ms(started),
                };
                submit(events, event).await
            }
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_FAILURE_REPORT => match frame.decode_body::<FailureReport>() {
            Ok(FailureReport { reporter, target }) => {
                let event = Event::FailureReport {
                    reporter,
                    target,
                    now_ms: now_ms(started),
                };
                submit(events, event).await
            }
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_GET_STATS => {
            let reply = StatsReply(Ok(shell.stats_reports()));
            return respond(&reply, Bytes::new());
        }
        other => Err(MonError::BadRequest(format!(
            "message kind {other:#06x} is not a monitor request"
        ))),
    };
    respond(&MonReply(answer), Bytes::new())
}

impl Shell {
    fn record_stats(&self, osd: OsdId, stats: OsdStats) {
        let mut all = self
            .stats
            .lock()
            .expect("a thread panicked holding the PG stats");
        let slot = StatsSlot::next(all.get(&osd), stats, Instant::now());
        all.insert(osd, slot);
    }

    fn stats_reports(&self) -> Vec<OsdStatsReport> {
        let all = self
            .stats
            .lock()
            .expect("a thread panicked holding the PG stats");
        all.iter()
            .map(|(osd, slot)| OsdStatsReport {
                osd: *osd,
                stats: slot.stats.clone(),
                age_ms: u64::try_from(slot.at.elapsed().as_millis()).unwrap_or(u64::MAX),
                rates: slot.rates,
            })
            .collect()
    }
}

/// The PGs an OSD's heartbeat shows clean, with their interval's first
/// epoch.
pub fn clean_pgs(stats: &OsdStats) -> Vec<(PgId, Epoch)> {
    stats
        .pgs
        .iter()
        .filter(|p| p.state.split('+').any(|part| part == "clean"))
        .map(|p| (p.pg, Epoch(p.interval_epoch)))
        .collect()
}

async fn submit(events: &mpsc::Sender<Request>, event: Event) -> Result<Reply, MonError> {
    let (reply, answer) = oneshot::channel();
    let request = Request::Event {
        event,
        reply: Some(reply),
    };
    events
        .send(request)
        .await
        .map_err(|_| MonError::ShuttingDown)?;
    answer.await.map_err(|_| MonError::ShuttingDown)?
}

async fn get_map(have_epoch: Epoch, events: &mpsc::Sender<Request>) -> Frame {
    let (reply, answer) = oneshot::channel();
    let sent = events.send(Request::GetMap { have_epoch, reply }).await;
    let result = match sent {
        Ok(()) => answer.await.unwrap_or(Err(MonError::ShuttingDown)),
        Err(_) => Err(MonError::ShuttingDown),
    };
    match result {
        Ok((reply, data)) => respond(&reply, data),
        Err(error) => respond(&MonReply(Err(error)), Bytes::new()),
    }
}

/// Holds a subscription until an epoch after `have_epoch` is published or
/// `wait_ms` passes, then answers as `GetMap` does at that moment (so a
/// timeout yields no incrementals, unless an epoch raced in).
async fn subscribe(request: Subscribe, shell: &Shell) -> Frame {
    let Subscribe {
        have_epoch,
        wait_ms,
    } = request;
    let wait = Duration::from_millis(u64::from(wait_ms.min(SUBSCRIBE_WAIT_MS_MAX)));
    let mut published = shell.published.clone();
    // `wait_for` checks the current epoch first, so a subscriber behind is
    // answered at once. Its guard is dropped here, inside: held across the
    // actor round trip below it would block the actor's next publish.
    let newer = async move {
        published
            .wait_for(|epoch| *epoch > have_epoch)
            .await
            .map(drop)
    };
    tokio::select! {
        // A new epoch, time up, or the actor gone (then `get_map` says
        // `ShuttingDown`): in each case the answer is what `GetMap` gives.
        _ = tokio::time::timeout(wait, newer) => get_map(have_epoch, &shell.events).await,
        () = shell.shutdown.cancelled() => respond(&MonReply(Err(MonError::ShuttingDown)), Bytes::new()),
    }
}

fn respond<M: cairn_wire::Message>(msg: &M, data: Bytes) -> Frame {
    match Frame::response(0, msg, data) {
        Ok(frame) => frame,
        Err(error) => {
            // Only an oversize reply fails to encode; say so in a small one.
            let fallback = MonReply(Err(MonError::Wire(error.to_string())));
            Frame::response(0, &fallback, Bytes::new()).expect("a small error reply encodes")
        }
    }
}

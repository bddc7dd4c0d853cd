//! The monitor daemon: the async shell around [`MapService`].
//!
//! One actor thread owns the service and the store and handles events one
//! at a time, so each epoch is persisted (fsynced) before its reply leaves
//! and before the next event is decided. Connections (via
//! [`cairn_wire::serve`]) and a 500 ms ticker only feed it events.

use crate::error::MonError;
use crate::limits::{EVENT_QUEUE_MAX, INCREMENTALS_PER_REPLY_MAX, TICK_MS};
use crate::proto::{
    CommandRequest, FailureReport, GetMap, Heartbeat, KIND_COMMAND, KIND_FAILURE_REPORT,
    KIND_GET_MAP, KIND_HEARTBEAT, MapReply, MapUpdate, MonReply, Reply,
};
use crate::service::{Event, MapService, ServiceConfig};
use crate::store::MonStore;
use bytes::Bytes;
use cairn_types::Epoch;
use cairn_wire::{Frame, ServeOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
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

/// Runs the monitor until the process ends.
///
/// # Errors
/// If the store cannot be opened, the address cannot be bound, or an epoch
/// cannot be persisted (the monitor stops rather than serve a map it may
/// lose).
pub async fn run(config: MonConfig) -> Result<(), MonError> {
    run_until(config, CancellationToken::new()).await
}

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
    let service = MapService::new(config.service.clone(), loaded.state, loaded.history);
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        epoch = %service.epoch(),
        fsid = format_args!("{:032x}", store.fsid()),
        "monitor serving"
    );
    let (events, queue) = mpsc::channel(EVENT_QUEUE_MAX);
    let (published, _) = watch::channel(service.epoch());
    let actor = tokio::task::spawn_blocking(move || run_actor(service, store, queue, published));
    let started = Instant::now();
    let ticker = tokio::spawn(run_ticker(events.clone(), started, shutdown.clone()));
    let handler_events = events.clone();
    let handler = move |frame: Frame| {
        let events = handler_events.clone();
        async move { Some(handle_frame(frame, &events, started).await) }
    };
    drop(events);
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
                    store.persist(inc, service.state())?;
                    tracing::debug!(%epoch, "epoch committed");
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
    if have_epoch.0 > 0
        && let Some(incrementals) = service.incrementals_since(have_epoch)
        && incrementals.len() <= INCREMENTALS_PER_REPLY_MAX
    {
        let reply = MapReply {
            fsid,
            epoch,
            update: MapUpdate::Incrementals(incrementals),
        };
        return Ok((reply, Bytes::new()));
    }
    let state = service.state();
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
async fn handle_frame(frame: Frame, events: &mpsc::Sender<Request>, started: Instant) -> Frame {
    let answer = match frame.kind {
        KIND_GET_MAP => match frame.decode_body::<GetMap>() {
            Ok(request) => return get_map(request, events).await,
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_COMMAND => match frame.decode_body::<CommandRequest>() {
            Ok(CommandRequest(command)) => submit(events, Event::Command(command)).await,
            Err(error) => Err(MonError::BadRequest(error.to_string())),
        },
        KIND_HEARTBEAT => match frame.decode_body::<Heartbeat>() {
            Ok(Heartbeat { osd }) => {
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
        other => Err(MonError::BadRequest(format!(
            "message kind {other:#06x} is not a monitor request"
        ))),
    };
    respond(&MonReply(answer), Bytes::new())
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

async fn get_map(request: GetMap, events: &mpsc::Sender<Request>) -> Frame {
    let (reply, answer) = oneshot::channel();
    let sent = events
        .send(Request::GetMap {
            have_epoch: request.have_epoch,
            reply,
        })
        .await;
    let result = match sent {
        Ok(()) => answer.await.unwrap_or(Err(MonError::ShuttingDown)),
        Err(_) => Err(MonError::ShuttingDown),
    };
    match result {
        Ok((reply, data)) => respond(&reply, data),
        Err(error) => respond(&MonReply(Err(error)), Bytes::new()),
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

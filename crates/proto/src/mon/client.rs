//! [`MonClient`]: a typed connection to one monitor.

use super::MonError;
use super::{
    CommandRequest, FailureReport, GetMap, GetStats, Heartbeat, KIND_MAP_REPLY, KIND_MON_REPLY,
    MapFetch, MapReply, MapUpdate, MonCommand, MonReply, OsdStats, OsdStatsReport, Reply,
    StatsReply, Subscribe,
};
use crate::limits::{SUBSCRIBE_REPLY_MARGIN_MS, SUBSCRIBE_WAIT_MS_MAX};
use bytes::Bytes;
use cairn_placement::ClusterMap;
use cairn_types::{Epoch, OsdId};
use cairn_wire::{ConnectOptions, Connection, Frame};
use std::time::Duration;
use tokio::net::ToSocketAddrs;

/// A connection to a monitor; clone it freely.
#[derive(Debug, Clone)]
pub struct MonClient {
    connection: Connection,
}

impl MonClient {
    /// Connects with the wire layer's default timeouts.
    ///
    /// # Errors
    /// [`MonError::Wire`] if the monitor cannot be reached.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<MonClient, MonError> {
        MonClient::connect_with(addr, ConnectOptions::default()).await
    }

    /// Connects with explicit options.
    ///
    /// # Errors
    /// [`MonError::Wire`] if the monitor cannot be reached.
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        options: ConnectOptions,
    ) -> Result<MonClient, MonError> {
        let connection = Connection::connect(addr, options).await?;
        Ok(MonClient { connection })
    }

    /// The map changes after `have_epoch` (`Epoch(0)`: the whole map).
    ///
    /// # Errors
    /// [`MonError::Wire`] on transport failure, the monitor's error, or
    /// [`MonError::BadRequest`] if the reply does not decode.
    pub async fn get_map(&self, have_epoch: Epoch) -> Result<MapFetch, MonError> {
        let request = Frame::request(&GetMap { have_epoch }, Bytes::new())?;
        let response = self.connection.call_frame(request).await?;
        decode_map_response(&response, "GetMap")
    }

    /// The map changes after `have_epoch`, waiting up to `wait` (clamped to
    /// [`SUBSCRIBE_WAIT_MS_MAX`]) for one: a long poll. Answered at once
    /// if the monitor is already past `have_epoch` (as by
    /// [`MonClient::get_map`]: incrementals, or a full map if they are gone
    /// or `have_epoch` is 0), else as soon as a new epoch is committed. If
    /// none is, it returns `Incrementals` with an empty list after `wait`.
    /// Call it again in a loop with the epoch reached to follow the map.
    ///
    /// The call's own timeout is `wait` plus [`SUBSCRIBE_REPLY_MARGIN_MS`],
    /// whatever the connection's `request_timeout`. Other calls on this
    /// connection proceed while it is held.
    ///
    /// # Errors
    /// As for [`MonClient::get_map`]; [`MonError::ShuttingDown`] if the
    /// monitor stops while holding it.
    pub async fn subscribe(&self, have_epoch: Epoch, wait: Duration) -> Result<MapFetch, MonError> {
        let wait_ms = u32::try_from(wait.as_millis())
            .unwrap_or(u32::MAX)
            .min(SUBSCRIBE_WAIT_MS_MAX);
        let request = Frame::request(
            &Subscribe {
                have_epoch,
                wait_ms,
            },
            Bytes::new(),
        )?;
        let timeout = Duration::from_millis(u64::from(wait_ms + SUBSCRIBE_REPLY_MARGIN_MS));
        let response = self
            .connection
            .call_frame_with_timeout(request, timeout)
            .await?;
        decode_map_response(&response, "Subscribe")
    }

    /// Runs a command.
    ///
    /// # Errors
    /// The command's error, or a transport error.
    pub async fn command(&self, command: MonCommand) -> Result<Reply, MonError> {
        let (MonReply(result), _) = self
            .connection
            .call(&CommandRequest(command), Bytes::new())
            .await?;
        result
    }

    /// Tells the monitor `osd` is alive, with its statistics.
    ///
    /// # Errors
    /// [`MonError::UnknownOsd`], or a transport error.
    pub async fn heartbeat(&self, osd: OsdId, stats: OsdStats) -> Result<Reply, MonError> {
        let (MonReply(result), _) = self
            .connection
            .call(&Heartbeat { osd, stats }, Bytes::new())
            .await?;
        result
    }

    /// The latest statistics every OSD reported, in OSD order.
    ///
    /// # Errors
    /// A transport error, or the monitor shutting down.
    pub async fn stats(&self) -> Result<Vec<OsdStatsReport>, MonError> {
        let (StatsReply(result), _) = self.connection.call(&GetStats, Bytes::new()).await?;
        result
    }

    /// Reports that `reporter` cannot reach `target`.
    ///
    /// # Errors
    /// [`MonError::UnknownOsd`], or a transport error.
    pub async fn report_failure(&self, reporter: OsdId, target: OsdId) -> Result<Reply, MonError> {
        let (MonReply(result), _) = self
            .connection
            .call(&FailureReport { reporter, target }, Bytes::new())
            .await?;
        result
    }
}

/// Decodes the answer to a map request (`request` names it in errors): a
/// [`MapReply`], or the monitor's error in a [`MonReply`]. Public so the
/// simulator decodes the maps it carries with the client's own decoder.
///
/// # Errors
/// The monitor's error, or [`MonError::BadRequest`] for a reply that does
/// not decode.
pub fn decode_map_response(response: &Frame, request: &str) -> Result<MapFetch, MonError> {
    if response.kind == KIND_MON_REPLY {
        let MonReply(result) = response.decode_body()?;
        result?;
        return Err(MonError::BadRequest(format!(
            "monitor answered {request} with no map"
        )));
    }
    if response.kind != KIND_MAP_REPLY {
        return Err(MonError::BadRequest(format!(
            "unexpected reply kind {:#06x}",
            response.kind
        )));
    }
    let reply: MapReply = response.decode_body()?;
    Ok(match reply.update {
        MapUpdate::Full { endpoints } => {
            let map = ClusterMap::decode(&response.data)
                .map_err(|e| MonError::BadRequest(format!("map does not decode: {e}")))?;
            MapFetch::Full {
                fsid: reply.fsid,
                map,
                endpoints,
            }
        }
        MapUpdate::Incrementals(incrementals) => MapFetch::Incrementals {
            fsid: reply.fsid,
            incrementals,
        },
    })
}

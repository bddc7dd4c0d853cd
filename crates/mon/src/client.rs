//! [`MonClient`]: a typed connection to one monitor.

use crate::error::MonError;
use crate::proto::{
    CommandRequest, FailureReport, GetMap, Heartbeat, KIND_MAP_REPLY, KIND_MON_REPLY, MapFetch,
    MapReply, MapUpdate, MonCommand, MonReply, Reply,
};
use bytes::Bytes;
use cairn_placement::ClusterMap;
use cairn_types::{Epoch, OsdId};
use cairn_wire::{ConnectOptions, Connection, Frame};
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
        if response.kind == KIND_MON_REPLY {
            let MonReply(result) = response.decode_body()?;
            result?;
            return Err(MonError::BadRequest(
                "monitor answered GetMap with no map".into(),
            ));
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

    /// Tells the monitor `osd` is alive.
    ///
    /// # Errors
    /// [`MonError::UnknownOsd`], or a transport error.
    pub async fn heartbeat(&self, osd: OsdId) -> Result<Reply, MonError> {
        let (MonReply(result), _) = self
            .connection
            .call(&Heartbeat { osd }, Bytes::new())
            .await?;
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

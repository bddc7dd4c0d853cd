//! The simulated wire: every [`Msg`] crosses the network as the bytes of
//! one real frame, made and read by the code the processes use: the
//! OSD's PG codec (`cairn_osd::codec::{encode_pg_msg, decode_pg_msg}`),
//! the protocol's message types, the map's binary encoding and the
//! client's map decoder, in `cairn_wire`'s frames (header, crc32c, postcard
//! body, data segment) and its incremental frame decoder.
//!
//! So a message the real encoder cannot express, or that does not decode
//! to what was meant, fails here as it would between real processes. As in
//! the daemons, a frame that does not decode, and a peer message or ping
//! naming another sender than the one its connection proved, is dropped
//! (the caller logs it); the simulator counts each as an anomaly, since
//! nothing it sends should be refused.

use crate::net::{MapUpdate, Msg, Node};
use bytes::{Bytes, BytesMut};
use cairn_osd::codec::{decode_pg_msg, encode_pg_msg};
use cairn_proto::mon::{
    CommandRequest, FailureReport, GetMap, Heartbeat, KIND_COMMAND, KIND_FAILURE_REPORT,
    KIND_GET_MAP, KIND_HEARTBEAT, KIND_MAP_REPLY, KIND_MON_REPLY, MapFetch, MapReply, MonReply,
    decode_map_response,
};
use cairn_proto::osd::{
    ClientOp, ClientReply, ClientShardRead, ClientShardReadReply, KIND_CLIENT_OP,
    KIND_CLIENT_REPLY, KIND_CLIENT_SHARD_READ, KIND_CLIENT_SHARD_READ_REPLY, KIND_PEER_MSG,
    KIND_PEER_PING, KIND_PEER_PONG, KIND_PEER_SHARD_READ, KIND_PEER_SHARD_READ_REPLY,
};
use cairn_proto::peer::{PeerMsg, PeerPing, PeerPong, ShardRead, ShardReadReply};
use cairn_types::{Epoch, OsdId};
use cairn_wire::{Frame, FrameDecoder};

/// The cluster id the simulated monitor puts in its map replies.
pub const SIM_FSID: u128 = 0x5117;

/// Encodes `msg`, sent by `from`, into the bytes of one frame.
///
/// # Errors
/// Why the real encoders refuse it (the daemon logs and drops such a
/// message).
pub fn encode(from: Node, msg: &Msg) -> Result<Bytes, String> {
    let frame = frame_of(from, msg)?;
    let encoded = frame.encode().map_err(|e| e.to_string())?;
    Ok(Bytes::from(encoded.to_vec()))
}

fn frame_of(from: Node, msg: &Msg) -> Result<Frame, String> {
    let osd = || match from {
        Node::Osd(osd) => Ok(osd),
        other => Err(format!("{other} sends an OSD's message")),
    };
    let empty = Bytes::new;
    let frame = match msg {
        Msg::Pg { pg, msg } => {
            let (body, data) = encode_pg_msg(*pg, msg).map_err(|e| e.to_string())?;
            Frame::request(&body, data)
        }
        Msg::Ping { epoch } => {
            let ping = PeerPing {
                from: osd()?,
                epoch: *epoch,
            };
            Frame::request(&ping, empty())
        }
        Msg::Pong { epoch } => {
            let pong = PeerPong {
                from: osd()?,
                epoch: *epoch,
            };
            Frame::response(0, &pong, empty())
        }
        Msg::Command(command) => Frame::request(&CommandRequest(command.clone()), empty()),
        Msg::MonReply(result) => Frame::response(0, &MonReply(result.clone()), empty()),
        Msg::Heartbeat(heartbeat) => Frame::request(heartbeat, empty()),
        Msg::FailureReport(report) => Frame::request(report, empty()),
        Msg::GetMap { have } => Frame::request(&GetMap { have_epoch: *have }, empty()),
        Msg::Map(update) => return map_frame(update),
        Msg::Op {
            request_id,
            op,
            data,
        } => Frame::request(op, data.clone()).map(|mut frame| {
            frame.request_id = *request_id;
            frame
        }),
        Msg::OpReply {
            request_id,
            reply,
            data,
        } => Frame::response(*request_id, reply, data.clone()),
        Msg::DirectRead { request_id, read } => Frame::request(read, empty()).map(|mut frame| {
            frame.request_id = *request_id;
            frame
        }),
        Msg::DirectReadReply {
            request_id,
            reply,
            data,
        } => Frame::response(
            *request_id,
            &ClientShardReadReply(reply.clone()),
            data.clone(),
        ),
        Msg::ShardRead { request_id, read } => Frame::request(read, empty()).map(|mut frame| {
            frame.request_id = *request_id;
            frame
        }),
        Msg::ShardReadReply {
            request_id,
            reply,
            data,
        } => Frame::response(*request_id, &ShardReadReply(reply.clone()), data.clone()),
    };
    frame.map_err(|e| e.to_string())
}

/// A map reply as the monitor daemon builds it: incrementals in the body,
/// or the endpoints in the body and the map's binary form as the data.
fn map_frame(update: &MapUpdate) -> Result<Frame, String> {
    let (epoch, update, data) = match update {
        MapUpdate::Incrementals(incrementals) => (
            incrementals.last().map_or(Epoch(0), |i| i.epoch),
            cairn_proto::mon::MapUpdate::Incrementals(incrementals.clone()),
            Bytes::new(),
        ),
        MapUpdate::Full { map, endpoints } => {
            let bytes = map.encode().map_err(|e| e.to_string())?;
            let update = cairn_proto::mon::MapUpdate::Full {
                endpoints: endpoints.clone(),
            };
            (map.epoch, update, Bytes::from(bytes))
        }
    };
    let reply = MapReply {
        fsid: SIM_FSID,
        epoch,
        update,
    };
    Frame::response(0, &reply, data).map_err(|e| e.to_string())
}

/// Decodes the bytes of one frame that `from` sent, as its receiver's
/// daemon (or client) would.
///
/// # Errors
/// Why the receiver drops it: a frame, body or PG message that does not
/// decode, trailing bytes, or a sender other than the one the connection
/// proved.
pub fn decode(from: Node, bytes: &[u8]) -> Result<Msg, String> {
    let mut buf = BytesMut::from(bytes);
    let frame = match FrameDecoder::new().decode_eof(&mut buf) {
        Ok(Some(frame)) if buf.is_empty() => frame,
        Ok(Some(_)) => return Err(format!("{} bytes after the frame", buf.len())),
        Ok(None) => return Err("no frame".into()),
        Err(error) => return Err(format!("malformed frame: {error}")),
    };
    let body = |e: cairn_wire::WireError| format!("malformed body: {e}");
    Ok(match frame.kind {
        KIND_PEER_MSG => {
            let peer = frame.decode_body::<PeerMsg>().map_err(body)?;
            let (pg, msg) = decode_pg_msg(peer, &frame.data)
                .map_err(|e| format!("malformed peer message: {e}"))?;
            sender_checks_out(from, msg.from(), "PG message")?;
            Msg::Pg { pg, msg }
        }
        KIND_PEER_PING => {
            let ping = frame.decode_body::<PeerPing>().map_err(body)?;
            sender_checks_out(from, ping.from, "ping")?;
            Msg::Ping { epoch: ping.epoch }
        }
        KIND_PEER_PONG => {
            let pong = frame.decode_body::<PeerPong>().map_err(body)?;
            Msg::Pong { epoch: pong.epoch }
        }
        KIND_COMMAND => {
            let CommandRequest(command) = frame.decode_body().map_err(body)?;
            Msg::Command(command)
        }
        KIND_MON_REPLY => {
            let MonReply(result) = frame.decode_body().map_err(body)?;
            Msg::MonReply(result)
        }
        KIND_HEARTBEAT => Msg::Heartbeat(frame.decode_body::<Heartbeat>().map_err(body)?),
        KIND_FAILURE_REPORT => {
            Msg::FailureReport(frame.decode_body::<FailureReport>().map_err(body)?)
        }
        KIND_GET_MAP => {
            let GetMap { have_epoch } = frame.decode_body().map_err(body)?;
            Msg::GetMap { have: have_epoch }
        }
        KIND_MAP_REPLY => match decode_map_response(&frame, "GetMap") {
            Ok(MapFetch::Full { map, endpoints, .. }) => {
                Msg::Map(MapUpdate::Full { map, endpoints })
            }
            Ok(MapFetch::Incrementals { incrementals, .. }) => {
                Msg::Map(MapUpdate::Incrementals(incrementals))
            }
            Err(error) => return Err(format!("map reply: {error}")),
        },
        KIND_CLIENT_OP => Msg::Op {
            request_id: frame.request_id,
            op: frame.decode_body::<ClientOp>().map_err(body)?,
            data: frame.data.clone(),
        },
        KIND_CLIENT_REPLY => Msg::OpReply {
            request_id: frame.request_id,
            reply: frame.decode_body::<ClientReply>().map_err(body)?,
            data: frame.data.bytes().clone(),
        },
        KIND_CLIENT_SHARD_READ => Msg::DirectRead {
            request_id: frame.request_id,
            read: frame.decode_body::<ClientShardRead>().map_err(body)?,
        },
        KIND_CLIENT_SHARD_READ_REPLY => {
            let ClientShardReadReply(reply) = frame.decode_body().map_err(body)?;
            Msg::DirectReadReply {
                request_id: frame.request_id,
                reply,
                data: frame.data.bytes().clone(),
            }
        }
        KIND_PEER_SHARD_READ => {
            let read = frame.decode_body::<ShardRead>().map_err(body)?;
            sender_checks_out(from, read.from, "shard read")?;
            Msg::ShardRead {
                request_id: frame.request_id,
                read,
            }
        }
        KIND_PEER_SHARD_READ_REPLY => {
            let ShardReadReply(reply) = frame.decode_body().map_err(body)?;
            Msg::ShardReadReply {
                request_id: frame.request_id,
                reply,
                data: frame.data.bytes().clone(),
            }
        }
        kind => return Err(format!("unknown message kind {kind:#06x}")),
    })
}

/// The daemon's check on a message naming its sender: only the OSD the
/// connection's hello proved (here: the sending node) may be named.
fn sender_checks_out(from: Node, named: OsdId, what: &str) -> Result<(), String> {
    if from == Node::Osd(named) {
        return Ok(());
    }
    Err(format!(
        "{what} refused: it names {named}, but its sender is {from}"
    ))
}

//! The OSD's side of the wire: turns its PG messages into
//! [`cairn_proto::peer::PeerMsg`] bodies and data segments and back
//! (checking every length and name on the way in), converts between the
//! protocol's request ids, versions and guards and the OSD's own, and maps
//! a client operation onto store operations. The message types themselves,
//! and their kinds, are in `cairn-proto`.

use crate::log::{DupEntry, LogEntry, ReqId, Version};
use crate::peering::{PeerCopy, PgInfo};
use crate::pg::{Activate, Guard, Notify, ObjectState, PgMsg, Push, SubWrite, SubWriteAck};
use crate::scrub::{Inconsistency, ScrubEntry, ScrubMap};
use bytes::{Bytes, BytesMut};
use cairn_proto::limits::{
    NOTIFY_INCONSISTENT_MAX, OPS_PER_REQUEST_MAX, SCRUB_ERROR_BYTES_MAX, SCRUB_MAP_ENTRIES_MAX,
};
use cairn_proto::osd::{GuardWire, OpKind, ReqIdWire, VersionWire};
use cairn_proto::peer::{KeyWire, ObjectSignalKind, OpWire, PeerMsg, ScrubEntryWire, SignalKind};
use cairn_store::{ObjectKey, Op};
use cairn_types::checked::CheckedBytes;
use cairn_types::{Epoch, OsdId, PgId};
use serde_bytes::ByteBuf;
use std::collections::BTreeMap;

impl From<ReqId> for ReqIdWire {
    fn from(r: ReqId) -> ReqIdWire {
        ReqIdWire {
            client: r.client,
            tid: r.tid,
        }
    }
}

impl From<ReqIdWire> for ReqId {
    fn from(r: ReqIdWire) -> ReqId {
        ReqId {
            client: r.client,
            tid: r.tid,
        }
    }
}

impl From<Version> for VersionWire {
    fn from(v: Version) -> VersionWire {
        VersionWire {
            epoch: v.epoch.0,
            seq: v.seq,
        }
    }
}

impl From<VersionWire> for Version {
    fn from(v: VersionWire) -> Version {
        Version::new(v.epoch, v.seq)
    }
}

impl From<GuardWire> for Guard {
    fn from(g: GuardWire) -> Guard {
        match g {
            GuardWire::Version(v) => Guard::Version(v),
            GuardWire::Xattr { name, value } => Guard::Xattr {
                name: unbuf(name),
                value: value.map(unbuf),
            },
            GuardWire::Exists => Guard::Exists,
            GuardWire::NotExists => Guard::NotExists,
            GuardWire::OmapKey { key, value } => Guard::OmapKey {
                key: unbuf(key),
                value: value.map(unbuf),
            },
        }
    }
}

/// The xattr that holds an object's omap header. Client xattr names may
/// not start with a zero byte, so it never collides with one, and listings
/// leave it out; recovery, backfill and scrub carry it like any xattr.
pub const OMAP_HEADER_XATTR: &[u8] = b"\0omap-header";

/// Whether a client may name this xattr (internal ones start with 0).
#[must_use]
pub fn client_xattr_name(name: &[u8]) -> bool {
    !name.is_empty() && name[0] != 0
}

/// A client write request as the PG applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePlan {
    /// The store operations, in request order, all on the object.
    pub ops: Vec<Op>,
    /// What the ops need of the object's existence before the request
    /// (`Exists` when an op needing the object comes before anything
    /// creates it, `NotExists` for an exclusive create), checked with the
    /// request's guards and after them.
    pub implied: Option<Guard>,
    /// Every op only shrinks what is stored, so it passes on a full OSD.
    pub frees_space: bool,
}

/// Turns a write request's ops and payload into store operations on
/// `object`, checking that the payload lengths add up and that the ops
/// make sense in sequence (nothing needs the object after it is removed,
/// an exclusive create comes before any other write).
///
/// # Errors
/// Why the request is invalid (answered `Invalid`, nothing logged).
pub fn plan_write(object: &Bytes, ops: &[OpKind], data: CheckedBytes) -> Result<WritePlan, String> {
    /// The object's existence at a point of the request, as far as the
    /// ops before it decide it.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Known {
        Unknown,
        Exists,
        Absent,
    }
    if ops.is_empty() || ops.len() > OPS_PER_REQUEST_MAX {
        return Err(format!(
            "{} ops (1 to {OPS_PER_REQUEST_MAX} allowed)",
            ops.len()
        ));
    }
    let payload = ops
        .iter()
        .try_fold(0u64, |sum, op| sum.checked_add(op.payload_len()));
    if payload.is_none() || u64::try_from(data.len()).ok() != payload {
        return Err(format!(
            "ops take {payload:?} payload bytes, the request carries {}",
            data.len()
        ));
    }
    let key = ObjectKey::new(object.clone());
    let mut known = Known::Unknown;
    let mut implied = None;
    let mut at = 0usize;
    let mut out = Vec::with_capacity(ops.len() + 1);
    let mut take = |len: u64| {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let part = data.slice(at..at + len);
        at += len;
        part
    };
    let xattr = |name: &ByteBuf| -> Result<Bytes, String> {
        if client_xattr_name(name) {
            Ok(Bytes::from(name.to_vec()))
        } else {
            Err("xattr names are 1 or more bytes, not starting with a zero byte".into())
        }
    };
    for (index, op) in ops.iter().enumerate() {
        let object = key.clone();
        let needs_object = matches!(
            op,
            OpKind::Remove
                | OpKind::RemoveXattr { .. }
                | OpKind::OmapRemove { .. }
                | OpKind::OmapClear
        );
        if needs_object {
            match known {
                Known::Unknown => {
                    implied = Some(Guard::Exists);
                }
                Known::Absent => {
                    return Err(format!(
                        "op {index} ({op:?}) needs the object the request removed"
                    ));
                }
                Known::Exists => {}
            }
        }
        let mut store_op = |o: Op| out.push(o);
        match op {
            OpKind::Create { exclusive } => {
                if *exclusive {
                    match known {
                        Known::Unknown => implied = Some(Guard::NotExists),
                        Known::Exists => {
                            return Err(format!(
                                "op {index}: an exclusive create after writes to the object"
                            ));
                        }
                        Known::Absent => {}
                    }
                }
                store_op(Op::Touch { object });
            }
            OpKind::WriteFull { len } => store_op(Op::WriteFull {
                object,
                data: take(*len),
            }),
            OpKind::Write { offset, len } => {
                offset
                    .checked_add(*len)
                    .ok_or_else(|| format!("op {index}: write past the largest offset"))?;
                store_op(Op::Write {
                    object,
                    offset: *offset,
                    data: take(*len),
                });
            }
            OpKind::Append { len } => store_op(Op::Append {
                object,
                data: take(*len),
            }),
            OpKind::Truncate { size } => store_op(Op::Truncate {
                object,
                size: *size,
            }),
            OpKind::Zero { offset, length } => {
                store_op(Op::Touch {
                    object: object.clone(),
                });
                store_op(Op::Zero {
                    object,
                    offset: *offset,
                    length: *length,
                });
            }
            OpKind::Remove => store_op(Op::Remove { object }),
            OpKind::SetXattr { name, value } => {
                let xattrs = BTreeMap::from([(xattr(name)?, Bytes::from(value.to_vec()))]);
                store_op(Op::Touch {
                    object: object.clone(),
                });
                store_op(Op::SetXattrs { object, xattrs });
            }
            OpKind::RemoveXattr { name } => store_op(Op::RemoveXattr {
                object,
                name: xattr(name)?,
            }),
            OpKind::OmapSet { entries } => {
                let entries = entries
                    .iter()
                    .map(|(k, v)| (Bytes::from(k.to_vec()), Bytes::from(v.to_vec())))
                    .collect();
                store_op(Op::Touch {
                    object: object.clone(),
                });
                store_op(Op::OmapSet { object, entries });
            }
            OpKind::OmapRemove { keys } => store_op(Op::OmapRemove {
                object,
                keys: keys.iter().map(|k| Bytes::from(k.to_vec())).collect(),
            }),
            OpKind::OmapClear => store_op(Op::OmapClear { object }),
            OpKind::OmapSetHeader { header } => {
                let xattrs = BTreeMap::from([(
                    Bytes::from_static(OMAP_HEADER_XATTR),
                    Bytes::from(header.to_vec()),
                )]);
                store_op(Op::Touch {
                    object: object.clone(),
                });
                store_op(Op::SetXattrs { object, xattrs });
            }
            read => {
                return Err(format!(
                    "op {index} ({read:?}) is a read in a write request"
                ));
            }
        }
        known = if matches!(op, OpKind::Remove) {
            Known::Absent
        } else {
            Known::Exists
        };
    }
    let frees_space = ops.iter().all(|op| {
        matches!(
            op,
            OpKind::Remove
                | OpKind::RemoveXattr { .. }
                | OpKind::OmapRemove { .. }
                | OpKind::OmapClear
        )
    });
    Ok(WritePlan {
        ops: out,
        implied,
        frees_space,
    })
}

fn key_wire(key: &ObjectKey) -> KeyWire {
    KeyWire {
        hash: key.hash,
        name: buf(&key.name),
    }
}

fn key_unwire(key: KeyWire) -> Result<ObjectKey, PeerDecodeError> {
    let name = unbuf(key.name);
    if !crate::pg::valid_name(&name) {
        return Err(PeerDecodeError::Malformed(format!(
            "object name of {} bytes",
            name.len()
        )));
    }
    Ok(ObjectKey {
        hash: key.hash,
        name,
    })
}

/// A peer message that does not decode into a PG message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerDecodeError {
    #[error("bad log entry: {0}")]
    Entry(String),
    #[error("payload lengths do not match the {0}-byte data segment")]
    DataLength(usize),
    #[error("op {0} cannot travel in a sub-write")]
    Unsupported(String),
    #[error("malformed: {0}")]
    Malformed(String),
}

fn bufs(map: &BTreeMap<Bytes, Bytes>) -> Vec<(ByteBuf, ByteBuf)> {
    map.iter()
        .map(|(k, v)| (ByteBuf::from(k.to_vec()), ByteBuf::from(v.to_vec())))
        .collect()
}

fn unbufs(entries: Vec<(ByteBuf, ByteBuf)>) -> BTreeMap<Bytes, Bytes> {
    entries
        .into_iter()
        .map(|(k, v)| (Bytes::from(k.into_vec()), Bytes::from(v.into_vec())))
        .collect()
}

fn buf(b: &Bytes) -> ByteBuf {
    ByteBuf::from(b.to_vec())
}

fn unbuf(b: ByteBuf) -> Bytes {
    Bytes::from(b.into_vec())
}

/// Encodes a PG message for `pg`; returns the body and the data segment.
///
/// # Errors
/// An op a client write never produces (collection or metadata ops).
pub fn encode_pg_msg(pg: PgId, msg: &PgMsg) -> Result<(PeerMsg, CheckedBytes), PeerDecodeError> {
    let signal = |from: OsdId, interval_epoch: Epoch, signal: SignalKind| PeerMsg::Signal {
        pg,
        from,
        interval_epoch,
        signal,
    };
    let write = match msg {
        PgMsg::RollForward {
            from,
            interval_epoch,
            committed_to,
        } => {
            let body = PeerMsg::RollForward {
                pg,
                from: *from,
                interval_epoch: *interval_epoch,
                committed_to: (*committed_to).into(),
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::SubWriteAck(ack) => {
            let body = PeerMsg::SubWriteAck {
                pg,
                from: ack.from,
                version: ack.version.into(),
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::SubWrite(write) => write,
        PgMsg::Query {
            from,
            interval_epoch,
        } => {
            return Ok((
                signal(*from, *interval_epoch, SignalKind::Query),
                Bytes::new().into(),
            ));
        }
        PgMsg::Activated {
            from,
            interval_epoch,
        } => {
            let body = signal(*from, *interval_epoch, SignalKind::Activated);
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::BackfillDone {
            from,
            interval_epoch,
        } => {
            let body = signal(*from, *interval_epoch, SignalKind::BackfillDone);
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::BackfillDoneAck {
            from,
            interval_epoch,
        } => {
            let body = signal(*from, *interval_epoch, SignalKind::BackfillDoneAck);
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::Purge {
            from,
            interval_epoch,
        } => {
            return Ok((
                signal(*from, *interval_epoch, SignalKind::Purge),
                Bytes::new().into(),
            ));
        }
        PgMsg::PushAck {
            from,
            interval_epoch,
            object,
        }
        | PgMsg::Pull {
            from,
            interval_epoch,
            object,
        }
        | PgMsg::Unreadable {
            from,
            interval_epoch,
            object,
        } => {
            let kind = match msg {
                PgMsg::Pull { .. } => ObjectSignalKind::Pull,
                PgMsg::Unreadable { .. } => ObjectSignalKind::Unreadable,
                _ => ObjectSignalKind::PushAck,
            };
            let body = PeerMsg::ObjectSignal {
                pg,
                from: *from,
                interval_epoch: *interval_epoch,
                object: buf(object),
                kind,
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::Notify(notify) => {
            let copy = &notify.copy;
            let (data, entries, missing) = records(&copy.log, copy.missing.iter());
            let body = PeerMsg::Notify {
                pg,
                from: notify.from,
                interval_epoch: notify.interval_epoch,
                exists: copy.info.exists,
                last_update: copy.info.last_update.into(),
                last_epoch_started: copy.info.last_epoch_started,
                backfilling: copy.info.backfilling,
                entries,
                missing,
                lease: notify.lease,
                inconsistent: notify
                    .inconsistent
                    .iter()
                    .take(NOTIFY_INCONSISTENT_MAX)
                    .map(|i| (buf(&i.object), i.record()))
                    .collect(),
                shard: copy.info.shard,
            };
            return Ok((body, data.into()));
        }
        PgMsg::Activate(activate) => {
            let (data, entries, missing) =
                records_with_dups(&activate.entries, activate.missing.iter(), &activate.dups);
            let dups = u32::try_from(activate.dups.len()).unwrap_or(u32::MAX);
            let body = PeerMsg::Activate {
                pg,
                from: activate.from,
                interval_epoch: activate.interval_epoch,
                keep_through: activate.keep_through.into(),
                last_update: activate.last_update.into(),
                committed_to: activate.committed_to.into(),
                backfill: activate.backfill,
                entries,
                missing,
                dups,
            };
            return Ok((body, data.into()));
        }
        PgMsg::LeaseRenew {
            from,
            interval_epoch,
            seq,
            delegate,
        } => {
            let body = PeerMsg::Lease {
                pg,
                from: *from,
                interval_epoch: *interval_epoch,
                seq: *seq,
                ack: false,
                delegate: *delegate,
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::LeaseAck {
            from,
            interval_epoch,
            seq,
        } => {
            let body = PeerMsg::Lease {
                pg,
                from: *from,
                interval_epoch: *interval_epoch,
                seq: *seq,
                ack: true,
                delegate: None,
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::ScrubRequest {
            from,
            interval_epoch,
            chunk,
            after,
            through,
            deep,
        } => {
            let body = PeerMsg::ScrubRequest {
                pg,
                from: *from,
                interval_epoch: *interval_epoch,
                chunk: *chunk,
                after: after.as_ref().map(key_wire),
                through: through.as_ref().map(key_wire),
                deep: *deep,
            };
            return Ok((body, Bytes::new().into()));
        }
        PgMsg::ScrubMap(map) => {
            let (data, _, _) = records(&[], map.entries.iter().map(|e| &e.name));
            let entries = map
                .entries
                .iter()
                .map(|e| ScrubEntryWire {
                    size: e.size,
                    version: e.version,
                    xattrs_digest: e.xattrs_digest,
                    omap_digest: e.omap_digest,
                    data_digest: e.data_digest,
                    error: e.error.clone(),
                    sealed: e.sealed,
                })
                .collect();
            let body = PeerMsg::ScrubMap {
                pg,
                from: map.from,
                interval_epoch: map.interval_epoch,
                chunk: map.chunk,
                entries,
                truncated: map.truncated,
            };
            return Ok((body, data.into()));
        }
        PgMsg::Push(push) => {
            let state = push.state.clone().unwrap_or_default();
            let body = PeerMsg::Push {
                pg,
                from: push.from,
                interval_epoch: push.interval_epoch,
                object: buf(&push.object),
                exists: push.state.is_some(),
                version: state.version,
                xattrs: bufs(&state.xattrs),
                data_bytes: state.data.len() as u64,
                omap_entries: u32::try_from(state.omap.len()).unwrap_or(u32::MAX),
                as_of: push.as_of.into(),
            };
            if state.omap.is_empty() {
                return Ok((body, state.data.into()));
            }
            // The omap after the data (objects with an omap are metadata:
            // their data is small, so the copy is too).
            let (omap, _, _) = records(&[], state.omap.iter().flat_map(|(k, v)| [k, v]));
            let mut segment = BytesMut::with_capacity(state.data.len() + omap.len());
            segment.extend_from_slice(&state.data);
            segment.extend_from_slice(&omap);
            return Ok((body, segment.freeze().into()));
        }
    };
    let mut payloads: Vec<CheckedBytes> = Vec::new();
    let mut ops = Vec::with_capacity(write.ops.len());
    let stash = crate::undo::stash_key(&write.entry.object, write.entry.req);
    let undo_key = crate::undo::undo_key(write.entry.version);
    for op in &write.ops {
        let len = |data: &CheckedBytes| data.len() as u64;
        ops.push(match op {
            Op::CloneRange {
                to,
                offset,
                length,
                to_offset,
                ..
            } if *to == stash => OpWire::StashRange {
                offset: *offset,
                length: *length,
                to_offset: *to_offset,
            },
            Op::Rename { to, .. } if *to == stash => OpWire::StashRename,
            Op::MetaSet { key, value } if *key == undo_key => OpWire::Undo(buf(value)),
            Op::WriteFull { data, .. } => {
                payloads.push(data.clone());
                OpWire::WriteFull { len: len(data) }
            }
            Op::Write { offset, data, .. } => {
                payloads.push(data.clone());
                OpWire::Write {
                    offset: *offset,
                    len: len(data),
                }
            }
            Op::Append { data, .. } => {
                payloads.push(data.clone());
                OpWire::Append { len: len(data) }
            }
            Op::Truncate { size, .. } => OpWire::Truncate { size: *size },
            Op::Zero { offset, length, .. } => OpWire::Zero {
                offset: *offset,
                length: *length,
            },
            Op::Touch { .. } => OpWire::Touch,
            Op::Remove { .. } => OpWire::Remove,
            Op::SetVersion { version, .. } => OpWire::SetVersion { version: *version },
            Op::SetXattrs { xattrs, .. } => OpWire::SetXattrs(bufs(xattrs)),
            Op::RemoveXattr { name, .. } => OpWire::RemoveXattr(buf(name)),
            Op::OmapSet { entries, .. } => OpWire::OmapSet(bufs(entries)),
            Op::OmapRemove { keys, .. } => OpWire::OmapRemove(keys.iter().map(buf).collect()),
            Op::OmapRemoveRange { start, end, .. } => OpWire::OmapRemoveRange {
                start: buf(start),
                end: buf(end),
            },
            Op::OmapClear { .. } => OpWire::OmapClear,
            other => return Err(PeerDecodeError::Unsupported(format!("{other:?}"))),
        });
    }
    // One payload (the usual case) travels without a copy.
    let data = match payloads.len() {
        0 => CheckedBytes::default(),
        1 => payloads.swap_remove(0),
        _ => {
            let mut all = BytesMut::new();
            for p in &payloads {
                all.extend_from_slice(p);
            }
            all.freeze().into()
        }
    };
    let body = PeerMsg::SubWrite {
        pg,
        from: write.from,
        interval_epoch: write.interval_epoch,
        entry: ByteBuf::from(write.entry.encode().to_vec()),
        ops,
        prior: write.prior.into(),
        committed_to: write.committed_to.into(),
        log_only: write.log_only,
    };
    Ok((body, data))
}

/// The data segment of `Notify` and `Activate`: each log entry, then each
/// name, as a u32 little-endian length and the bytes; with their counts.
fn records<'a>(entries: &[LogEntry], names: impl Iterator<Item = &'a Bytes>) -> (Bytes, u32, u32) {
    records_with_dups(entries, names, &[])
}

/// As [`records`], then each dup entry the same way (the count is the
/// caller's to send).
fn records_with_dups<'a>(
    entries: &[LogEntry],
    names: impl Iterator<Item = &'a Bytes>,
    dups: &[DupEntry],
) -> (Bytes, u32, u32) {
    let mut out = BytesMut::new();
    let mut put = |bytes: &[u8]| {
        let len = u32::try_from(bytes.len()).expect("records are bounded by the store's limits");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(bytes);
    };
    for entry in entries {
        put(&entry.encode());
    }
    let mut count = 0u32;
    for name in names {
        put(name);
        count += 1;
    }
    for dup in dups {
        put(&dup.encode());
    }
    let entries = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    (out.freeze(), entries, count)
}

/// Reads what [`records`] wrote.
fn unrecords(
    data: &Bytes,
    entries: u32,
    names: u32,
) -> Result<(Vec<LogEntry>, Vec<Bytes>), PeerDecodeError> {
    let (log, names, _) = unrecords_with_dups(data, entries, names, 0)?;
    Ok((log, names))
}

/// Log entries, names and dup entries, as [`records_with_dups`] wrote them.
type Records = (Vec<LogEntry>, Vec<Bytes>, Vec<DupEntry>);

/// Reads what [`records_with_dups`] wrote.
fn unrecords_with_dups(
    data: &Bytes,
    entries: u32,
    names: u32,
    dups: u32,
) -> Result<Records, PeerDecodeError> {
    let bad = || PeerDecodeError::DataLength(data.len());
    let mut at = 0usize;
    let mut next = || -> Result<Bytes, PeerDecodeError> {
        let len_end = at
            .checked_add(4)
            .filter(|e| *e <= data.len())
            .ok_or_else(bad)?;
        let mut len = [0u8; 4];
        len.copy_from_slice(&data[at..len_end]);
        let len = usize::try_from(u32::from_le_bytes(len)).map_err(|_| bad())?;
        let end = len_end
            .checked_add(len)
            .filter(|e| *e <= data.len())
            .ok_or_else(bad)?;
        at = end;
        Ok(data.slice(len_end..end))
    };
    // Counts come from the network: never allocate by them up front.
    let mut log = Vec::new();
    for _ in 0..entries {
        let bytes = next()?;
        log.push(LogEntry::decode(&bytes).map_err(|e| PeerDecodeError::Entry(e.to_string()))?);
    }
    let mut out = Vec::new();
    for _ in 0..names {
        out.push(next()?);
    }
    let mut dup_entries = Vec::new();
    for _ in 0..dups {
        let bytes = next()?;
        dup_entries
            .push(DupEntry::decode(&bytes).map_err(|e| PeerDecodeError::Entry(e.to_string()))?);
    }
    if at != data.len() {
        return Err(bad());
    }
    Ok((log, out, dup_entries))
}

/// Decodes a peer message and its data segment into the PG it is for and
/// the PG message. Validates lengths; the PG core validates the rest.
///
/// # Errors
/// [`PeerDecodeError`] for a malformed entry or mismatched payloads.
pub fn decode_pg_msg(msg: PeerMsg, data: &CheckedBytes) -> Result<(PgId, PgMsg), PeerDecodeError> {
    let (pg, from, interval_epoch, entry, wire_ops, prior, committed_to, log_only) = match msg {
        PeerMsg::SubWriteAck { pg, from, version } => {
            let ack = SubWriteAck {
                from,
                version: version.into(),
            };
            return Ok((pg, PgMsg::SubWriteAck(ack)));
        }
        PeerMsg::SubWrite {
            pg,
            from,
            interval_epoch,
            entry,
            ops,
            prior,
            committed_to,
            log_only,
        } => (
            pg,
            from,
            interval_epoch,
            entry,
            ops,
            prior,
            committed_to,
            log_only,
        ),
        other => return decode_peering(other, data.bytes()),
    };
    let entry = LogEntry::decode(&entry).map_err(|e| PeerDecodeError::Entry(e.to_string()))?;
    let object = ObjectKey::new(entry.object.clone());
    let mut at = 0usize;
    let mut take = |len: u64| -> Result<CheckedBytes, PeerDecodeError> {
        let bad = || PeerDecodeError::DataLength(data.len());
        let len = usize::try_from(len).map_err(|_| bad())?;
        let end = at
            .checked_add(len)
            .filter(|e| *e <= data.len())
            .ok_or_else(bad)?;
        let slice = data.slice(at..end);
        at = end;
        Ok(slice)
    };
    let mut ops = Vec::with_capacity(wire_ops.len());
    for op in wire_ops {
        let object = object.clone();
        ops.push(match op {
            OpWire::WriteFull { len } => Op::WriteFull {
                object,
                data: take(len)?,
            },
            OpWire::Write { offset, len } => Op::Write {
                object,
                offset,
                data: take(len)?,
            },
            OpWire::Append { len } => Op::Append {
                object,
                data: take(len)?,
            },
            OpWire::Truncate { size } => Op::Truncate { object, size },
            OpWire::Zero { offset, length } => Op::Zero {
                object,
                offset,
                length,
            },
            OpWire::Touch => Op::Touch { object },
            OpWire::Remove => Op::Remove { object },
            OpWire::SetVersion { version } => Op::SetVersion { object, version },
            OpWire::SetXattrs(x) => Op::SetXattrs {
                object,
                xattrs: unbufs(x),
            },
            OpWire::RemoveXattr(name) => Op::RemoveXattr {
                object,
                name: unbuf(name),
            },
            OpWire::OmapSet(e) => Op::OmapSet {
                object,
                entries: unbufs(e),
            },
            OpWire::OmapRemove(keys) => Op::OmapRemove {
                object,
                keys: keys.into_iter().map(unbuf).collect(),
            },
            OpWire::OmapRemoveRange { start, end } => Op::OmapRemoveRange {
                object,
                start: unbuf(start),
                end: unbuf(end),
            },
            OpWire::OmapClear => Op::OmapClear { object },
            OpWire::StashRange {
                offset,
                length,
                to_offset,
            } => Op::CloneRange {
                from: object,
                to: crate::undo::stash_key(&entry.object, entry.req),
                offset,
                length,
                to_offset,
            },
            OpWire::StashRename => Op::Rename {
                from: object,
                to: crate::undo::stash_key(&entry.object, entry.req),
            },
            OpWire::Undo(record) => Op::MetaSet {
                key: crate::undo::undo_key(entry.version),
                value: unbuf(record),
            },
        });
    }
    if at != data.len() {
        return Err(PeerDecodeError::DataLength(data.len()));
    }
    let write = SubWrite {
        from,
        interval_epoch,
        entry,
        ops,
        prior: prior.into(),
        committed_to: committed_to.into(),
        log_only,
    };
    Ok((pg, PgMsg::SubWrite(write)))
}

/// Decodes the peering, recovery and backfill messages.
fn decode_peering(msg: PeerMsg, data: &Bytes) -> Result<(PgId, PgMsg), PeerDecodeError> {
    let no_data = || {
        if data.is_empty() {
            Ok(())
        } else {
            Err(PeerDecodeError::DataLength(data.len()))
        }
    };
    Ok(match msg {
        PeerMsg::RollForward {
            pg,
            from,
            interval_epoch,
            committed_to,
        } => {
            no_data()?;
            let msg = PgMsg::RollForward {
                from,
                interval_epoch,
                committed_to: committed_to.into(),
            };
            (pg, msg)
        }
        PeerMsg::Signal {
            pg,
            from,
            interval_epoch,
            signal,
        } => {
            no_data()?;
            let msg = match signal {
                SignalKind::Query => PgMsg::Query {
                    from,
                    interval_epoch,
                },
                SignalKind::Activated => PgMsg::Activated {
                    from,
                    interval_epoch,
                },
                SignalKind::BackfillDone => PgMsg::BackfillDone {
                    from,
                    interval_epoch,
                },
                SignalKind::BackfillDoneAck => PgMsg::BackfillDoneAck {
                    from,
                    interval_epoch,
                },
                SignalKind::Purge => PgMsg::Purge {
                    from,
                    interval_epoch,
                },
            };
            (pg, msg)
        }
        PeerMsg::ObjectSignal {
            pg,
            from,
            interval_epoch,
            object,
            kind,
        } => {
            no_data()?;
            let object = unbuf(object);
            let msg = match kind {
                ObjectSignalKind::Pull => PgMsg::Pull {
                    from,
                    interval_epoch,
                    object,
                },
                ObjectSignalKind::Unreadable => PgMsg::Unreadable {
                    from,
                    interval_epoch,
                    object,
                },
                ObjectSignalKind::PushAck => PgMsg::PushAck {
                    from,
                    interval_epoch,
                    object,
                },
            };
            (pg, msg)
        }
        PeerMsg::Notify {
            pg,
            from,
            interval_epoch,
            exists,
            last_update,
            last_epoch_started,
            backfilling,
            entries,
            missing,
            lease,
            inconsistent,
            shard,
        } => {
            let (log, missing) = unrecords(data, entries, missing)?;
            let inconsistent = inconsistent
                .into_iter()
                .take(NOTIFY_INCONSISTENT_MAX)
                .map(|(object, record)| Inconsistency::from_record(unbuf(object), record))
                .collect();
            let copy = PeerCopy {
                info: PgInfo {
                    exists,
                    last_update: last_update.into(),
                    last_epoch_started,
                    backfilling,
                    shard,
                },
                log,
                missing: missing.into_iter().collect(),
            };
            let notify = Notify {
                from,
                interval_epoch,
                copy,
                lease,
                inconsistent,
            };
            (pg, PgMsg::Notify(notify))
        }
        PeerMsg::Activate {
            pg,
            from,
            interval_epoch,
            keep_through,
            last_update,
            committed_to,
            backfill,
            entries,
            missing,
            dups,
        } => {
            let (entries, missing, dups) = unrecords_with_dups(data, entries, missing, dups)?;
            let activate = Activate {
                from,
                interval_epoch,
                keep_through: keep_through.into(),
                entries,
                last_update: last_update.into(),
                committed_to: committed_to.into(),
                missing,
                backfill,
                dups,
            };
            (pg, PgMsg::Activate(activate))
        }
        PeerMsg::Push {
            pg,
            from,
            interval_epoch,
            object,
            exists,
            version,
            xattrs,
            data_bytes,
            omap_entries,
            as_of,
        } => {
            let bad = || PeerDecodeError::DataLength(data.len());
            let data_len = usize::try_from(data_bytes)
                .ok()
                .filter(|n| *n <= data.len())
                .ok_or_else(bad)?;
            let names = omap_entries.checked_mul(2).ok_or_else(bad)?;
            let (_, items, _) = unrecords_with_dups(&data.slice(data_len..), 0, names, 0)?;
            let omap = items
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            let state = exists.then(|| ObjectState {
                data: data.slice(..data_len),
                xattrs: unbufs(xattrs),
                omap,
                version,
            });
            if !exists {
                no_data()?;
            }
            let push = Push {
                from,
                interval_epoch,
                object: unbuf(object),
                state,
                as_of: as_of.into(),
            };
            (pg, PgMsg::Push(push))
        }
        PeerMsg::Lease {
            pg,
            from,
            interval_epoch,
            seq,
            ack,
            delegate,
        } => {
            no_data()?;
            let msg = if ack {
                PgMsg::LeaseAck {
                    from,
                    interval_epoch,
                    seq,
                }
            } else {
                PgMsg::LeaseRenew {
                    from,
                    interval_epoch,
                    seq,
                    delegate,
                }
            };
            (pg, msg)
        }
        PeerMsg::ScrubRequest {
            pg,
            from,
            interval_epoch,
            chunk,
            after,
            through,
            deep,
        } => {
            no_data()?;
            let msg = PgMsg::ScrubRequest {
                from,
                interval_epoch,
                chunk,
                after: after.map(key_unwire).transpose()?,
                through: through.map(key_unwire).transpose()?,
                deep,
            };
            (pg, msg)
        }
        PeerMsg::ScrubMap {
            pg,
            from,
            interval_epoch,
            chunk,
            entries,
            truncated,
        } => {
            if entries.len() > SCRUB_MAP_ENTRIES_MAX {
                return Err(PeerDecodeError::Malformed(format!(
                    "scrub map of {} entries",
                    entries.len()
                )));
            }
            let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
            let (_, names) = unrecords(data, 0, count)?;
            let mut out = Vec::with_capacity(entries.len());
            for (name, e) in names.into_iter().zip(entries) {
                if !crate::pg::valid_name(&name)
                    || e.error
                        .as_ref()
                        .is_some_and(|t| t.len() > SCRUB_ERROR_BYTES_MAX)
                {
                    return Err(PeerDecodeError::Malformed("scrub map entry".into()));
                }
                out.push(ScrubEntry {
                    name,
                    size: e.size,
                    version: e.version,
                    xattrs_digest: e.xattrs_digest,
                    omap_digest: e.omap_digest,
                    data_digest: e.data_digest,
                    error: e.error,
                    sealed: e.sealed,
                });
            }
            let map = ScrubMap {
                from,
                interval_epoch,
                chunk,
                entries: out,
                truncated,
            };
            (pg, PgMsg::ScrubMap(map))
        }
        PeerMsg::SubWrite { .. } | PeerMsg::SubWriteAck { .. } => {
            return Err(PeerDecodeError::Unsupported(
                "sub-write routed as peering".into(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogKind, LogResult};
    use cairn_types::PoolId;

    /// An object's omap travels in the data segment: an inode table of
    /// kilobyte records is far past a body's 1 MiB.
    #[test]
    fn a_push_carries_a_large_omap_outside_the_body() {
        let pg = PgId::new(PoolId(2), 1);
        let omap: BTreeMap<Bytes, Bytes> = (0..1000u32)
            .map(|i| {
                (
                    Bytes::from(i.to_be_bytes().to_vec()),
                    Bytes::from(vec![u8::try_from(i % 251).unwrap_or(0); 4000]),
                )
            })
            .collect();
        for (data, omap) in [
            (Bytes::from_static(b"head"), omap.clone()),
            (Bytes::from(vec![9u8; 5000]), BTreeMap::new()),
        ] {
            let push = Push {
                from: OsdId(1),
                interval_epoch: Epoch(4),
                object: Bytes::from_static(b"inode.0"),
                state: Some(ObjectState {
                    data,
                    xattrs: BTreeMap::new(),
                    omap,
                    version: 7,
                }),
                as_of: Version::new(4, 2),
            };
            let (body, segment) = encode_pg_msg(pg, &PgMsg::Push(push.clone())).expect("encodes");
            let body_bytes = postcard::to_allocvec(&body).expect("body").len();
            assert!(body_bytes < 1024, "{body_bytes}-byte body");
            let (back_pg, back) = decode_pg_msg(body, &segment).expect("decodes");
            assert_eq!(back_pg, pg);
            assert_eq!(back, PgMsg::Push(push));
        }
        // A data length past the segment is refused, not trusted.
        let bad = PeerMsg::Push {
            pg,
            from: OsdId(1),
            interval_epoch: Epoch(4),
            object: ByteBuf::from(b"o".to_vec()),
            exists: true,
            version: 1,
            xattrs: Vec::new(),
            data_bytes: 100,
            omap_entries: 1,
            as_of: Version::new(4, 2).into(),
        };
        assert!(decode_pg_msg(bad, &Bytes::from_static(b"short").into()).is_err());
    }

    #[test]
    fn sub_write_round_trips_with_data_outside_the_body() {
        let pg = PgId::new(PoolId(3), 5);
        let object = Bytes::from_static(b"obj");
        let payload = Bytes::from(vec![7u8; 4096]);
        let request = [
            OpKind::WriteFull { len: 4096 },
            OpKind::SetXattr {
                name: ByteBuf::from(b"k".to_vec()),
                value: ByteBuf::from(b"v".to_vec()),
            },
        ];
        let ops = plan_write(&object, &request, payload.clone().into())
            .expect("a write")
            .ops;
        let write = SubWrite {
            from: OsdId(1),
            interval_epoch: Epoch(9),
            entry: LogEntry {
                version: Version::new(9, 4),
                object: object.clone(),
                kind: LogKind::Write,
                req: ReqId { client: 1, tid: 2 },
                result: LogResult::Ok { object_version: 4 },
            },
            ops,
            prior: Version::new(9, 3),
            committed_to: Version::new(9, 2),
            log_only: false,
        };
        let msg = PgMsg::SubWrite(write);
        let (body, data) = encode_pg_msg(pg, &msg).expect("encodes");
        assert_eq!(*data, payload, "the payload is the data segment, uncopied");
        let bytes = postcard::to_allocvec(&body).expect("postcard");
        assert!(bytes.len() < 200, "payload kept out of the body");
        let back: PeerMsg = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(decode_pg_msg(back.clone(), &data), Ok((pg, msg)));
        let short = data.slice(..100);
        assert!(matches!(
            decode_pg_msg(back, &short),
            Err(PeerDecodeError::DataLength(100))
        ));
    }

    #[test]
    fn a_backfill_activation_carries_the_dups_and_a_cut_one_is_refused() {
        let pg = PgId::new(PoolId(3), 5);
        let entry = |seq: u64| LogEntry {
            version: Version::new(9, seq),
            object: Bytes::from_static(b"obj"),
            kind: LogKind::Write,
            req: ReqId {
                client: 1,
                tid: seq,
            },
            result: LogResult::Ok {
                object_version: seq,
            },
        };
        let msg = PgMsg::Activate(Activate {
            from: OsdId(1),
            interval_epoch: Epoch(9),
            keep_through: Version::ZERO,
            entries: vec![entry(3), entry(4)],
            last_update: Version::new(9, 4),
            committed_to: Version::new(9, 4),
            missing: Vec::new(),
            backfill: true,
            dups: vec![
                DupEntry::of(&entry(1)),
                DupEntry {
                    result: LogResult::Err { code: 3 },
                    ..DupEntry::of(&entry(2))
                },
            ],
        });
        let (body, data) = encode_pg_msg(pg, &msg).expect("encodes");
        let bytes = postcard::to_allocvec(&body).expect("postcard");
        let back: PeerMsg = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(decode_pg_msg(back.clone(), &data), Ok((pg, msg)));
        let short = data.slice(..data.len() - 1);
        assert!(matches!(
            decode_pg_msg(back, &short),
            Err(PeerDecodeError::DataLength(_))
        ));
    }

    #[test]
    fn a_notify_carries_the_copys_kept_inconsistencies() {
        let pg = PgId::new(PoolId(3), 5);
        let found = Inconsistency {
            object: Bytes::from_static(b"obj"),
            bad: [OsdId(2), OsdId(4)].into_iter().collect(),
            auth: Some(OsdId(1)),
            reason: "osd.2: data digest 0x1 != 0x2".into(),
        };
        let msg = PgMsg::Notify(Notify {
            from: OsdId(1),
            interval_epoch: Epoch(9),
            copy: crate::peering::PeerCopy::default(),
            lease: cairn_proto::peer::LeaseReport::default(),
            inconsistent: vec![found.clone()],
        });
        let (body, data) = encode_pg_msg(pg, &msg).expect("encodes");
        let bytes = postcard::to_allocvec(&body).expect("postcard");
        let back: PeerMsg = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(decode_pg_msg(back, &data), Ok((pg, msg)));
        let stored = Inconsistency::decode(b"obj", &found.encode()).expect("decodes");
        assert_eq!(stored, found, "the stored form round-trips too");
        assert!(
            Inconsistency::decode(b"obj", &[9, 1]).is_err(),
            "unknown format"
        );
    }

    #[test]
    fn scrub_messages_round_trip_and_bad_ones_are_refused() {
        let pg = PgId::new(PoolId(2), 1);
        let key = |name: &'static [u8]| ObjectKey::new(Bytes::from_static(name));
        let request = PgMsg::ScrubRequest {
            from: OsdId(1),
            interval_epoch: Epoch(4),
            chunk: 3,
            after: Some(key(b"a")),
            through: None,
            deep: true,
        };
        let map = PgMsg::ScrubMap(ScrubMap {
            from: OsdId(2),
            interval_epoch: Epoch(4),
            chunk: 3,
            entries: vec![ScrubEntry {
                name: Bytes::from_static(b"b"),
                size: 9,
                version: 2,
                xattrs_digest: 1,
                omap_digest: 2,
                data_digest: None,
                error: Some("corrupt".into()),
                sealed: true,
            }],
            truncated: false,
        });
        for msg in [request, map.clone()] {
            let (body, data) = encode_pg_msg(pg, &msg).expect("encodes");
            let bytes = postcard::to_allocvec(&body).expect("postcard");
            let back: PeerMsg = postcard::from_bytes(&bytes).expect("decodes");
            assert_eq!(decode_pg_msg(back, &data), Ok((pg, msg)));
        }
        // Names missing from the data segment, and oversized error texts.
        let (body, data) = encode_pg_msg(pg, &map).expect("encodes");
        assert!(decode_pg_msg(body.clone(), &data.slice(..2)).is_err());
        let PeerMsg::ScrubMap {
            pg,
            from,
            interval_epoch,
            chunk,
            mut entries,
            truncated,
        } = body
        else {
            panic!("a scrub map");
        };
        entries[0].error = Some("x".repeat(SCRUB_ERROR_BYTES_MAX + 1));
        let long = PeerMsg::ScrubMap {
            pg,
            from,
            interval_epoch,
            chunk,
            entries,
            truncated,
        };
        assert!(matches!(
            decode_pg_msg(long, &data),
            Err(PeerDecodeError::Malformed(_))
        ));
    }

    fn b(s: &str) -> ByteBuf {
        ByteBuf::from(s.as_bytes().to_vec())
    }

    fn plan(ops: &[OpKind], data: &'static [u8]) -> Result<WritePlan, String> {
        plan_write(
            &Bytes::from_static(b"o"),
            ops,
            Bytes::from_static(data).into(),
        )
    }

    #[test]
    fn a_compound_write_takes_its_payloads_in_op_order() {
        let ops = [
            OpKind::WriteFull { len: 3 },
            OpKind::Append { len: 2 },
            OpKind::Write { offset: 9, len: 1 },
        ];
        let plan = plan(&ops, b"abcdez").expect("valid");
        let data: Vec<&[u8]> = plan
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::WriteFull { data, .. } | Op::Append { data, .. } | Op::Write { data, .. } => {
                    Some(&data[..])
                }
                _ => None,
            })
            .collect();
        assert_eq!(data, [&b"abc"[..], b"de", b"z"]);
        assert_eq!(plan.implied, None);
        assert!(!plan.frees_space);
    }

    #[test]
    fn payload_lengths_must_add_up_without_overflow() {
        assert!(plan(&[OpKind::WriteFull { len: 4 }], b"abc").is_err());
        assert!(plan(&[OpKind::WriteFull { len: 2 }], b"abc").is_err());
        let huge = [OpKind::Append { len: u64::MAX }, OpKind::Append { len: 4 }];
        assert!(plan(&huge, b"abc").is_err(), "a wrapped sum is refused");
        let past = [OpKind::Write {
            offset: u64::MAX,
            len: 3,
        }];
        assert!(plan(&past, b"abc").is_err());
        assert!(plan(&[], b"").is_err());
        let many = vec![OpKind::Create { exclusive: false }; OPS_PER_REQUEST_MAX + 1];
        assert!(plan(&many, b"").is_err());
    }

    #[test]
    fn what_ops_need_of_the_object_becomes_an_implied_guard() {
        let remove = plan(&[OpKind::Remove], b"").expect("valid");
        assert_eq!(remove.implied, Some(Guard::Exists));
        assert!(remove.frees_space);
        let create = plan(
            &[OpKind::Create { exclusive: true }, OpKind::OmapClear],
            b"",
        )
        .expect("valid");
        assert_eq!(create.implied, Some(Guard::NotExists));
        assert!(!create.frees_space);
        // Written first, then cleared: the clear needs nothing of the
        // state before.
        let written = plan(
            &[
                OpKind::OmapSet {
                    entries: vec![(b("k"), b("v"))],
                },
                OpKind::OmapClear,
            ],
            b"",
        )
        .expect("valid");
        assert_eq!(written.implied, None);
        // Removed and written again is a replace.
        let replace = plan(&[OpKind::Remove, OpKind::WriteFull { len: 1 }], b"x").expect("valid");
        assert_eq!(replace.implied, Some(Guard::Exists));
        assert!(matches!(
            replace.ops[..],
            [Op::Remove { .. }, Op::WriteFull { .. }]
        ));
    }

    #[test]
    fn op_sequences_that_cannot_apply_are_refused_before_logging() {
        let after_remove = [OpKind::Remove, OpKind::RemoveXattr { name: b("a") }];
        assert!(plan(&after_remove, b"").is_err());
        let exclusive_late = [
            OpKind::Truncate { size: 0 },
            OpKind::Create { exclusive: true },
        ];
        assert!(plan(&exclusive_late, b"").is_err());
        let exclusive_after_remove = [OpKind::Remove, OpKind::Create { exclusive: true }];
        assert!(plan(&exclusive_after_remove, b"").is_ok());
        assert!(plan(&[OpKind::Stat], b"").is_err(), "reads are not writes");
        let hidden = OpKind::SetXattr {
            name: ByteBuf::from(OMAP_HEADER_XATTR.to_vec()),
            value: b("x"),
        };
        assert!(
            plan(&[hidden], b"").is_err(),
            "internal xattrs are not the client's"
        );
        let empty = OpKind::RemoveXattr { name: b("") };
        assert!(plan(&[empty], b"").is_err());
    }

    #[test]
    fn the_omap_header_is_an_internal_xattr() {
        let header = plan(&[OpKind::OmapSetHeader { header: b("h") }], b"").expect("valid");
        assert!(header.ops.iter().any(|op| matches!(
            op,
            Op::SetXattrs { xattrs, .. } if xattrs.contains_key(OMAP_HEADER_XATTR)
        )));
        assert!(!client_xattr_name(OMAP_HEADER_XATTR));
        assert!(client_xattr_name(b"user.a"));
    }
}

//! Erasure-coded PGs: the backend that cuts a write into the shards each
//! position stores ([`EcBackend`]), the metadata every shard keeps beside
//! its bytes ([`ShardMeta`]), and the pure parts of a read that gathers
//! byte ranges from the shards ([`plan_read`], [`serve_shard_read`],
//! [`assemble`]). Shared by the daemon and the simulator, like
//! `daemon::read_ops`.
//!
//! Shard `i` of an object lives under the object's own key on the OSD at
//! position `i` of the acting set, holding exactly
//! [`StripeLayout::shard_len`] bytes (never padded to a stripe). Every
//! shard holds every object, so a shard's listing is the PG's. See
//! `docs/erasure-coding.md`.

use crate::daemon::{observe, op_error, read_op, refusal_error};
use crate::limits::PARITY_CHECK_WINDOW_BYTES;
use crate::log::{LogEntry, ReqId};
use crate::pg::{InvalidWrite, PgBackend, Push, ShardWrites, check_ops};
use crate::scrub::{Inconsistency, ParityCheck, ScrubMap};
use crate::undo::{Keep, UndoRecord};
use bytes::{Bytes, BytesMut};
use cairn_ec::{Codec, ReedSolomon, StripeLayout};
use cairn_proto::osd::{OpError, OpKind, OpOutput};
use cairn_proto::peer::{ShardReadError, ShardReadOk};
use cairn_store::{CollectionId, ObjectKey, ObjectStore, Op, ReadOptions, StoreError, Transaction};
use cairn_types::OsdId;
use cairn_types::checked::CheckedBytes;
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

use crate::pg::{EcShape, Guard};

/// The internal xattr holding a shard's [`ShardMeta`] (hidden from
/// clients, as every name starting with a zero byte).
pub const EC_META_XATTR: &[u8] = b"\0ec";

const META_FORMAT: u8 = 1;
const META_LEN: usize = 23;

/// What a shard records of its object: which shard it is, the object's
/// size and chunk (so any shard can plan a read), and the crc32c of this
/// shard's bytes when a full write set it. An object without it is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardMeta {
    pub shard: u32,
    pub size: u64,
    pub chunk: u64,
    pub crc: Option<u32>,
}

impl ShardMeta {
    /// `[1, shard u8, size u64, chunk u64, crc_known u8, crc u32]`, little
    /// endian.
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(META_LEN);
        out.push(META_FORMAT);
        out.push(u8::try_from(self.shard).unwrap_or(u8::MAX));
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.chunk.to_le_bytes());
        out.push(u8::from(self.crc.is_some()));
        out.extend_from_slice(&self.crc.unwrap_or(0).to_le_bytes());
        Bytes::from(out)
    }

    /// # Errors
    /// A wrong length, format or flag.
    pub fn decode(bytes: &[u8]) -> Result<ShardMeta, String> {
        if bytes.len() != META_LEN || bytes[0] != META_FORMAT {
            return Err(format!(
                "shard metadata of {} bytes, format {:?}",
                bytes.len(),
                bytes.first()
            ));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[19..23]);
        let crc = match bytes[18] {
            0 => None,
            1 => Some(u32::from_le_bytes(crc)),
            flag => return Err(format!("shard metadata crc flag {flag}")),
        };
        // Metadata also arrives from peers (a push's xattrs): a chunk no
        // layout makes would divide by zero or overflow in the layout's
        // arithmetic.
        let chunk = u64_at(10);
        if chunk == 0
            || chunk > cairn_ec::layout::STRIPE_UNIT_MAX
            || chunk % cairn_ec::CHUNK_ALIGN != 0
        {
            return Err(format!("shard metadata chunk of {chunk} bytes"));
        }
        Ok(ShardMeta {
            shard: u32::from(bytes[1]),
            size: u64_at(2),
            chunk,
            crc,
        })
    }
}

/// The layout of an erasure-coded interval.
///
/// # Errors
/// A shape the codec or layout refuses (the map validated it already).
pub fn layout_of(shape: &EcShape) -> Result<StripeLayout, String> {
    StripeLayout::new(shape.k, shape.m, shape.stripe_unit).map_err(|e| e.to_string())
}

/// The codec of a `k`+`m` code, shared by every PG and read of that
/// shape in the process (its working space is the costly part).
///
/// # Errors
/// A shape the codec refuses.
pub fn codec_for(k: u32, m: u32) -> Result<Arc<ReedSolomon>, String> {
    type Codecs = std::sync::Mutex<BTreeMap<(u32, u32), Arc<ReedSolomon>>>;
    static CODECS: std::sync::OnceLock<Codecs> = std::sync::OnceLock::new();
    let mut codecs = CODECS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(codec) = codecs.get(&(k, m)) {
        return Ok(codec.clone());
    }
    let codec = Arc::new(ReedSolomon::new(k as usize, m as usize).map_err(|e| e.to_string())?);
    codecs.insert((k, m), codec.clone());
    Ok(codec)
}

/// Erasure coding: each position holds one shard of every object.
pub struct EcBackend {
    layout: StripeLayout,
    codec: Arc<ReedSolomon>,
}

impl std::fmt::Debug for EcBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EcBackend({}+{}, unit {})",
            self.layout.k, self.layout.m, self.layout.stripe_unit
        )
    }
}

impl EcBackend {
    /// # Errors
    /// A shape the codec or layout refuses.
    pub fn new(shape: &EcShape) -> Result<EcBackend, String> {
        // The process's codec of the shape: making one (its tables, the
        // XOR probe) costs more than coding a small object, and whole
        // writes make a backend each.
        Ok(EcBackend {
            layout: layout_of(shape)?,
            codec: codec_for(shape.k, shape.m)?,
        })
    }

    #[must_use]
    pub fn layout(&self) -> &StripeLayout {
        &self.layout
    }

    fn shards(&self) -> usize {
        self.layout.shards() as usize
    }
}

fn not_supported(why: &str) -> InvalidWrite {
    InvalidWrite::NotSupported(why.to_owned())
}

impl PgBackend for EcBackend {
    /// Cuts the client's ops (checked by `check_ops`, ending with the new
    /// version for a write) into each shard's: a full write becomes each
    /// shard's slice and parity with its [`ShardMeta`]; creates, removes
    /// and xattrs go to every shard as they are. Partial writes and omap
    /// are refused.
    fn plan_write(&self, ops: Vec<Op>) -> Result<ShardWrites, InvalidWrite> {
        if ops.is_empty() {
            return Ok(ShardWrites::Same(ops));
        }
        let n = self.shards();
        let mut per: Vec<Vec<Op>> = vec![Vec::with_capacity(ops.len() + 1); n];
        let every = |per: &mut Vec<Vec<Op>>, op: &Op| {
            for shard in per.iter_mut() {
                shard.push(op.clone());
            }
        };
        for op in ops {
            match op {
                Op::Touch { .. }
                | Op::Remove { .. }
                | Op::SetXattrs { .. }
                | Op::RemoveXattr { .. } => every(&mut per, &op),
                Op::WriteFull { object, data } => {
                    let shards = cairn_ec::object::split(&self.layout, &*self.codec, data.bytes())
                        .map_err(|e| InvalidWrite::Store(StoreError::Invalid(e.to_string())))?;
                    for (i, (bytes, ops)) in shards.shards.into_iter().zip(&mut per).enumerate() {
                        let bytes = CheckedBytes::summed(Bytes::from(bytes));
                        let crc = bytes
                            .blocks()
                            .and_then(|b| cairn_types::crc::crc32c_of_blocks(b, bytes.len()));
                        let meta = ShardMeta {
                            shard: u32::try_from(i).unwrap_or(u32::MAX),
                            size: shards.size,
                            chunk: shards.chunk,
                            crc,
                        };
                        ops.push(Op::Touch {
                            object: object.clone(),
                        });
                        if bytes.is_empty() {
                            ops.push(Op::Truncate {
                                object: object.clone(),
                                size: 0,
                            });
                        } else {
                            ops.push(Op::WriteFull {
                                object: object.clone(),
                                data: bytes,
                            });
                        }
                        ops.push(Op::SetXattrs {
                            object: object.clone(),
                            xattrs: BTreeMap::from([(
                                Bytes::from_static(EC_META_XATTR),
                                meta.encode(),
                            )]),
                        });
                    }
                }
                Op::Truncate { object, size: 0 } => {
                    for ops in &mut per {
                        ops.push(Op::Touch {
                            object: object.clone(),
                        });
                        ops.push(Op::Truncate {
                            object: object.clone(),
                            size: 0,
                        });
                        ops.push(Op::RemoveXattr {
                            object: object.clone(),
                            name: Bytes::from_static(EC_META_XATTR),
                        });
                    }
                }
                Op::SetVersion { .. } => every(&mut per, &op),
                Op::Write { .. } | Op::Append { .. } | Op::Truncate { .. } | Op::Zero { .. } => {
                    return Err(not_supported(
                        "partial writes (write at an offset, append, truncate, zero) \
                         to erasure-coded pools are not served yet; write whole objects",
                    ));
                }
                Op::OmapSet { .. }
                | Op::OmapRemove { .. }
                | Op::OmapRemoveRange { .. }
                | Op::OmapClear { .. } => {
                    return Err(not_supported("erasure-coded pools have no omap"));
                }
                other => {
                    return Err(InvalidWrite::Store(StoreError::Invalid(format!(
                        "{other:?} in a client write"
                    ))));
                }
            }
        }
        Ok(ShardWrites::PerShard(per))
    }

    fn erasure_k(&self) -> Option<usize> {
        Some(self.layout.k as usize)
    }

    /// The ops change only the entry's object and end as it says, with no
    /// omap, and any shard metadata names this copy's shard.
    fn check_sub_write_ops(
        &self,
        entry: &LogEntry,
        shard: Option<u32>,
        ops: &[Op],
    ) -> Result<(), String> {
        let Some(shard) = shard else {
            return Err("a sub-write to an OSD at no position".into());
        };
        // The roll-back ops (see `crate::undo`) name the entry's stash and
        // record; the rest change the object alone.
        let stash = crate::undo::stash_key(&entry.object, entry.req);
        let key = ObjectKey::new(entry.object.clone());
        let undo_key = crate::undo::undo_key(entry.version);
        let mut own = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Rename { from, to } | Op::CloneRange { from, to, .. }
                    if *from == key && *to == stash => {}
                Op::MetaSet { key: k, value } if *k == undo_key => {
                    let record = crate::undo::UndoRecord::decode(value)?;
                    if record.object != entry.object || record.req != entry.req {
                        return Err("a roll-back record of another write".into());
                    }
                }
                other => own.push(other.clone()),
            }
        }
        let ops = &own[..];
        match check_ops(&entry.object, ops) {
            Ok(kind) if kind == entry.kind => {}
            Ok(kind) => return Err(format!("kind {:?}, ops say {kind:?}", entry.kind)),
            Err(e) => return Err(e.to_string()),
        }
        for op in ops {
            match op {
                Op::SetXattrs { xattrs, .. } => {
                    if let Some(meta) = xattrs.get(EC_META_XATTR) {
                        let meta = ShardMeta::decode(meta)?;
                        if meta.shard != shard {
                            return Err(format!("shard {} sent to position {shard}", meta.shard));
                        }
                    }
                }
                Op::OmapSet { .. }
                | Op::OmapRemove { .. }
                | Op::OmapRemoveRange { .. }
                | Op::OmapClear { .. } => return Err("omap op on an erasure-coded pool".into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// The primary reads its own shard's metadata first, so it waits
    /// while it lacks the object (until degraded reads come).
    fn read_waits_for_recovery(&self, local_missing: &BTreeSet<Bytes>, object: &[u8]) -> bool {
        local_missing.contains(object)
    }

    /// A pushed shard is applied only at its own position: a push of
    /// another shard's bytes (a recovery that copied instead of
    /// rebuilding) is refused rather than stored.
    fn push_txn(
        &self,
        collection: CollectionId,
        shard: Option<u32>,
        push: &Push,
    ) -> Result<Transaction, StoreError> {
        if let Some(state) = &push.state {
            let meta = state
                .xattrs
                .get(EC_META_XATTR)
                .map(|m| ShardMeta::decode(m))
                .transpose()
                .map_err(StoreError::Invalid)?;
            let fits = match meta {
                Some(meta) => {
                    Some(meta.shard) == shard
                        && u64::try_from(state.data.len()).ok()
                            == Some(self.layout.shard_len(meta.chunk, meta.size, meta.shard))
                }
                None => state.data.is_empty(),
            };
            if !fits || !state.omap.is_empty() {
                return Err(StoreError::Invalid(format!(
                    "pushed shard ({:?}) does not fit position {shard:?}",
                    meta.map(|m| m.shard)
                )));
            }
        }
        crate::pg::push_txn(collection, push)
    }

    /// Shards differ by design: until shard-aware scrub, compares what
    /// every shard shares (presence, version, omap) with the data, size
    /// and xattr digests set aside.
    fn compare_scrub_maps(
        &self,
        maps: &BTreeMap<OsdId, ScrubMap>,
        primary: OsdId,
    ) -> Vec<Inconsistency> {
        let shared: BTreeMap<OsdId, ScrubMap> = maps
            .iter()
            .map(|(osd, map)| {
                let mut map = map.clone();
                for entry in &mut map.entries {
                    entry.size = 0;
                    entry.xattrs_digest = 0;
                    entry.data_digest = entry.data_digest.map(|_| 0);
                }
                (*osd, map)
            })
            .collect();
        crate::scrub::compare(&shared, primary)
    }
}

/// Whether a write's ops change part of an object (a write at an offset,
/// an append, zeroing, a truncate to other than zero): such a write needs
/// the old bytes of the stripes it touches, which the primary's shell
/// reads first ([`plan_partial`], [`partial_writes`]).
#[must_use]
pub fn is_partial(ops: &[Op]) -> bool {
    ops.iter().any(|op| match op {
        Op::Write { .. } | Op::Append { .. } | Op::Zero { .. } => true,
        Op::Truncate { size, .. } => *size != 0,
        _ => false,
    })
}

/// What a partial write reads of the object before it is planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartialRead {
    /// The whole object (it is small, or changes its chunk size): it is
    /// rewritten whole.
    Whole,
    /// These stripes (row indices, sorted, disjoint), rewritten whole:
    /// their old bytes below the old size are read.
    Rows(Vec<Range<u64>>),
}

impl PartialRead {
    /// The object byte ranges to read, below `old_size`.
    #[must_use]
    pub fn reads(&self, layout: &StripeLayout, old_size: u64) -> Vec<Range<u64>> {
        match self {
            PartialRead::Whole => std::iter::once(0..old_size).collect(),
            PartialRead::Rows(rows) => {
                let width = layout.stripe_width();
                rows.iter()
                    .map(|r| (r.start * width).min(old_size)..(r.end * width).min(old_size))
                    .collect()
            }
        }
    }
}

/// The object's size after `ops` from `old_size`, the lowest size it
/// passes through, and the byte ranges whose content the ops change.
fn partial_effect(old_size: u64, ops: &[Op]) -> Result<(u64, u64, Vec<Range<u64>>), InvalidWrite> {
    let mut size = old_size;
    let mut lowest = old_size;
    let mut touched = Vec::new();
    let len_of = |d: &CheckedBytes| d.len() as u64;
    for op in ops {
        match op {
            Op::Write { offset, data, .. } => {
                let end = offset.saturating_add(len_of(data));
                touched.push(*offset..end);
                size = size.max(end);
            }
            Op::Append { data, .. } => {
                let end = size.saturating_add(len_of(data));
                touched.push(size..end);
                size = end;
            }
            Op::Zero { offset, length, .. } => {
                let end = offset.saturating_add(*length).min(size);
                if *offset < end {
                    touched.push(*offset..end);
                }
            }
            Op::Truncate { size: to, .. } => {
                lowest = lowest.min(*to);
                size = *to;
            }
            Op::WriteFull { data, .. } => {
                lowest = 0;
                touched.push(0..len_of(data));
                size = len_of(data);
            }
            Op::Remove { .. } => {
                return Err(not_supported(
                    "a remove among partial writes of an erasure-coded object",
                ));
            }
            Op::OmapSet { .. }
            | Op::OmapRemove { .. }
            | Op::OmapRemoveRange { .. }
            | Op::OmapClear { .. } => {
                return Err(not_supported("erasure-coded pools have no omap"));
            }
            _ => {}
        }
    }
    Ok((size, lowest, touched))
}

/// Which stripes a partial write of an object of `old_size` bytes striped
/// with `old_chunk` rewrites: those its ops change, those whose old bytes a
/// truncate turned to zeros, and the one the new end cuts. A small object
/// (striped with a chunk below the stripe unit), one that must be striped
/// again, or a write that replaces everything is rewritten whole.
///
/// # Errors
/// Ops an erasure-coded object does not take (omap, a remove among
/// them).
pub fn plan_partial(
    layout: &StripeLayout,
    old_size: u64,
    old_chunk: u64,
    ops: &[Op],
) -> Result<PartialRead, InvalidWrite> {
    let (size, lowest, mut touched) = partial_effect(old_size, ops)?;
    let whole = old_chunk != layout.stripe_unit
        || !layout.fits(old_chunk, size)
        || ops.iter().any(|op| matches!(op, Op::WriteFull { .. }));
    if whole {
        return Ok(PartialRead::Whole);
    }
    let width = layout.stripe_width();
    if lowest < size.min(old_size) {
        touched.push(lowest..size.min(old_size));
    }
    if size < old_size && size % width != 0 {
        touched.push(size..size + 1);
    }
    let last_row = size.div_ceil(width);
    let mut rows: Vec<Range<u64>> = touched
        .into_iter()
        .filter(|r| r.start < r.end)
        .map(|r| r.start / width..((r.end - 1) / width + 1).min(last_row))
        .filter(|r| r.start < r.end)
        .collect();
    rows.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(rows.len());
    for r in rows {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    Ok(PartialRead::Rows(merged))
}

/// A partial overwrite done by parity delta: for each stripe row it
/// changes, the span of each data chunk it changes and the parity span
/// covering them, within the chunk, aligned to the code's 64-byte blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaPlan {
    pub rows: Vec<RowDelta>,
}

/// One stripe row of a [`DeltaPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowDelta {
    pub row: u64,
    /// `(data shard, start, end)` within the chunk.
    pub chunks: Vec<(u32, u64, u64)>,
    pub parity: (u64, u64),
}

impl DeltaPlan {
    /// The shard ranges `(offset, length)` to read, per shard, in the
    /// order [`delta_writes`] takes their bytes: the old bytes of every
    /// changed span and of the parity over it.
    #[must_use]
    pub fn reads(&self, layout: &StripeLayout) -> BTreeMap<u32, Vec<(u64, u64)>> {
        let su = layout.stripe_unit;
        let mut out: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for row in &self.rows {
            let base = row.row * su;
            for &(shard, a, b) in &row.chunks {
                out.entry(shard).or_default().push((base + a, b - a));
            }
            for p in layout.k..layout.shards() {
                let (a, b) = row.parity;
                out.entry(p).or_default().push((base + a, b - a));
            }
        }
        out
    }
}

/// The parity-delta plan of a partial write, if one applies and costs
/// fewer device reads than rewriting whole stripes (the writes are the
/// same: the changed data chunks and the parity). It applies to writes
/// and zeroings inside whole stripe rows of an object striped with the
/// stripe unit, changing no size. A delta reads each changed span and the
/// parity over it, `t + m` per row for `t` changed chunks; a rewrite reads
/// every data chunk of the row it does not overwrite whole.
#[must_use]
pub fn plan_delta(
    layout: &StripeLayout,
    old_size: u64,
    old_chunk: u64,
    ops: &[Op],
) -> Option<DeltaPlan> {
    let su = layout.stripe_unit;
    let width = layout.stripe_width();
    if old_chunk != su {
        return None;
    }
    let whole_rows = old_size / width;
    let mut touched: Vec<Range<u64>> = Vec::new();
    for op in ops {
        match op {
            Op::Write { offset, data, .. } => {
                touched.push(*offset..offset.checked_add(data.len() as u64)?);
            }
            Op::Zero { offset, length, .. } => {
                let end = offset.saturating_add(*length).min(old_size);
                if *offset < end {
                    touched.push(*offset..end);
                }
            }
            Op::SetXattrs { .. } | Op::RemoveXattr { .. } | Op::Touch { .. } => {}
            _ => return None,
        }
    }
    touched.retain(|r| r.start < r.end);
    if touched.is_empty() || touched.iter().any(|r| r.end > whole_rows * width) {
        return None;
    }
    // Per (row, chunk): the changed span, and whether it is written whole.
    let mut spans: BTreeMap<(u64, u32), (u64, u64, u64)> = BTreeMap::new();
    for r in touched {
        let mut at = r.start;
        while at < r.end {
            let row = at / width;
            let chunk = u32::try_from((at % width) / su).ok()?;
            let chunk_start = row * width + u64::from(chunk) * su;
            let end = r.end.min(chunk_start + su);
            let span = spans.entry((row, chunk)).or_insert((su, 0, 0));
            span.0 = span.0.min(at - chunk_start);
            span.1 = span.1.max(end - chunk_start);
            span.2 += end - at;
            at = end;
        }
    }
    let block = cairn_ec::CODE_BLOCK_BYTES as u64;
    let mut rows: BTreeMap<u64, RowDelta> = BTreeMap::new();
    let mut covered: BTreeMap<u64, u64> = BTreeMap::new();
    for ((row, chunk), (a, b, written)) in spans {
        let (a, b) = (
            a / block * block,
            b.div_ceil(block).saturating_mul(block).min(su),
        );
        let entry = rows.entry(row).or_insert(RowDelta {
            row,
            chunks: Vec::new(),
            parity: (a, b),
        });
        entry.chunks.push((chunk, a, b));
        entry.parity = (entry.parity.0.min(a), entry.parity.1.max(b));
        if written >= su {
            *covered.entry(row).or_default() += 1;
        }
    }
    let (k, m) = (u64::from(layout.k), u64::from(layout.m));
    let delta_reads: u64 = rows.values().map(|r| r.chunks.len() as u64 + m).sum();
    let rewrite_reads: u64 = rows
        .keys()
        .map(|row| k - covered.get(row).copied().unwrap_or(0))
        .sum();
    (delta_reads < rewrite_reads).then(|| DeltaPlan {
        rows: rows.into_values().collect(),
    })
}

/// Each shard's ops for a partial write planned by [`plan_delta`], from
/// the old bytes of the plan's reads (per shard, in order): the changed
/// data spans and the parity spans updated by the code's delta, written in
/// place; the shards that change get their metadata's crc cleared, the
/// others only the write's other ops (xattrs) and, from the core, its
/// version.
///
/// # Errors
/// Old bytes that do not match the plan.
pub fn delta_writes(
    backend: &EcBackend,
    plan: &DeltaPlan,
    old_size: u64,
    old: &BTreeMap<u32, Vec<Bytes>>,
    object: &ObjectKey,
    ops: Vec<Op>,
) -> Result<ShardWrites, InvalidWrite> {
    let layout = &backend.layout;
    let invalid = |why: String| InvalidWrite::Store(StoreError::Invalid(why));
    let (su, width) = (layout.stripe_unit, layout.stripe_width());
    let k = layout.k as usize;
    let n = layout.shards() as usize;
    let mut taken: BTreeMap<u32, usize> = BTreeMap::new();
    let mut take = |shard: u32, len: u64| -> Result<Bytes, InvalidWrite> {
        let at = taken.entry(shard).or_default();
        let bytes = old
            .get(&shard)
            .and_then(|parts| parts.get(*at))
            .filter(|b| b.len() as u64 == len)
            .cloned()
            .ok_or_else(|| invalid(format!("old bytes of shard {shard} do not match the plan")))?;
        *at += 1;
        Ok(bytes)
    };
    let (writes, others): (Vec<Op>, Vec<Op>) = ops
        .into_iter()
        .partition(|op| matches!(op, Op::Write { .. } | Op::Zero { .. }));
    let mut per: Vec<Vec<Op>> = vec![Vec::new(); n];
    for row in &plan.rows {
        let base = row.row * su;
        let (pa, pb) = row.parity;
        let parity_len = usize::try_from(pb - pa).unwrap_or(0);
        let mut parity: Vec<Vec<u8>> = Vec::with_capacity(n - k);
        for p in layout.k..layout.shards() {
            parity.push(take(p, pb - pa)?.to_vec());
        }
        for &(shard, a, b) in &row.chunks {
            let old_bytes = take(shard, b - a)?;
            // The span's new bytes: the old ones with the ops applied.
            let first = row.row * width + u64::from(shard) * su + a;
            let mut window = [(first, old_bytes.to_vec())];
            for op in &writes {
                match op {
                    Op::Write { offset, data, .. } => window_write(&mut window, *offset, data),
                    Op::Zero { offset, length, .. } => window_zero(
                        &mut window,
                        *offset..offset.saturating_add(*length).min(old_size),
                    ),
                    _ => {}
                }
            }
            let [(_, new_bytes)] = window;
            let mut delta = vec![0u8; parity_len];
            let at = usize::try_from(a - pa).unwrap_or(0);
            for (d, (o, x)) in delta[at..].iter_mut().zip(old_bytes.iter().zip(&new_bytes)) {
                *d = o ^ x;
            }
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            backend
                .codec
                .parity_delta(shard as usize, &delta, &mut outs)
                .map_err(|e| invalid(e.to_string()))?;
            per[shard as usize].push(Op::Write {
                object: object.clone(),
                offset: base + a,
                data: CheckedBytes::summed(Bytes::from(new_bytes)),
            });
        }
        for (p, bytes) in parity.into_iter().enumerate() {
            per[k + p].push(Op::Write {
                object: object.clone(),
                offset: base + pa,
                data: CheckedBytes::summed(Bytes::from(bytes)),
            });
        }
    }
    for (i, ops) in per.iter_mut().enumerate() {
        if !ops.is_empty() {
            let meta = ShardMeta {
                shard: u32::try_from(i).unwrap_or(u32::MAX),
                size: old_size,
                chunk: su,
                crc: None,
            };
            ops.push(Op::SetXattrs {
                object: object.clone(),
                xattrs: BTreeMap::from([(Bytes::from_static(EC_META_XATTR), meta.encode())]),
            });
        }
        ops.extend(others.iter().cloned());
    }
    Ok(ShardWrites::PerShard(per))
}

/// Copies `data` (object bytes from `at`) into the windows it overlaps;
/// each window is `(first object byte, bytes)`.
fn window_write(windows: &mut [(u64, Vec<u8>)], at: u64, data: &[u8]) {
    let end = at + data.len() as u64;
    for (start, bytes) in windows.iter_mut() {
        let w_end = *start + bytes.len() as u64;
        let (from, to) = (at.max(*start), end.min(w_end));
        if from < to {
            let src = usize::try_from(from - at).unwrap_or(0);
            let dst = usize::try_from(from - *start).unwrap_or(0);
            let n = usize::try_from(to - from).unwrap_or(0);
            bytes[dst..dst + n].copy_from_slice(&data[src..src + n]);
        }
    }
}

fn window_zero(windows: &mut [(u64, Vec<u8>)], range: Range<u64>) {
    for (start, bytes) in windows.iter_mut() {
        let w_end = *start + bytes.len() as u64;
        let (from, to) = (range.start.max(*start), range.end.min(w_end));
        if from < to {
            let dst = usize::try_from(from - *start).unwrap_or(0);
            let n = usize::try_from(to - from).unwrap_or(0);
            bytes[dst..dst + n].fill(0);
        }
    }
}

/// Each shard's ops for a partial write planned by [`plan_partial`], from
/// the old bytes of each of the plan's reads (in order): the rewritten
/// stripes' data and parity written in place, every shard cut or extended
/// to its new length, its metadata (size, chunk; the crc unknown from
/// here on), and the write's other ops (creates, xattrs) on every shard.
/// Without the object's version, which the core sets.
///
/// # Errors
/// Old bytes that do not match the plan, or ops the pool does not take.
pub fn partial_writes(
    backend: &EcBackend,
    old_size: u64,
    plan: &PartialRead,
    old: &[Bytes],
    object: &ObjectKey,
    ops: Vec<Op>,
) -> Result<ShardWrites, InvalidWrite> {
    let layout = &backend.layout;
    let invalid = |why: String| InvalidWrite::Store(StoreError::Invalid(why));
    let reads = plan.reads(layout, old_size);
    if old.len() != reads.len()
        || old
            .iter()
            .zip(&reads)
            .any(|(b, r)| b.len() as u64 != r.end - r.start)
    {
        return Err(invalid(
            "old bytes do not match the partial write's reads".into(),
        ));
    }
    let rows = match plan {
        PartialRead::Whole => {
            // Apply the ops to the whole object, then write it in full.
            let mut data = old.first().map(|b| b.to_vec()).unwrap_or_default();
            let mut others = Vec::new();
            for op in ops {
                match op {
                    Op::Write {
                        offset, data: d, ..
                    } => {
                        let at = usize::try_from(offset).map_err(|e| invalid(e.to_string()))?;
                        let end = at + d.len();
                        if data.len() < end {
                            data.resize(end, 0);
                        }
                        data[at..end].copy_from_slice(d.bytes());
                    }
                    Op::Append { data: d, .. } => data.extend_from_slice(d.bytes()),
                    Op::Zero { offset, length, .. } => {
                        let at = usize::try_from(offset)
                            .unwrap_or(usize::MAX)
                            .min(data.len());
                        let end = usize::try_from(offset.saturating_add(length))
                            .unwrap_or(usize::MAX)
                            .min(data.len());
                        data[at..end.max(at)].fill(0);
                    }
                    Op::Truncate { size, .. } => {
                        data.resize(
                            usize::try_from(size).map_err(|e| invalid(e.to_string()))?,
                            0,
                        );
                    }
                    Op::WriteFull { data: d, .. } => data = d.bytes().to_vec(),
                    other => others.push(other),
                }
            }
            let mut full = vec![Op::WriteFull {
                object: object.clone(),
                data: CheckedBytes::summed(Bytes::from(data)),
            }];
            full.extend(others);
            return backend.plan_write(full);
        }
        PartialRead::Rows(rows) => rows,
    };
    let su = layout.stripe_unit;
    let width = layout.stripe_width();
    let mut windows: Vec<(u64, Vec<u8>)> = rows
        .iter()
        .map(|r| {
            (
                r.start * width,
                vec![0u8; usize::try_from((r.end - r.start) * width).unwrap_or(0)],
            )
        })
        .collect();
    for ((_, bytes), old) in windows.iter_mut().zip(old) {
        bytes[..old.len()].copy_from_slice(old);
    }
    // The windows as they were (zeros past the old end), to leave data
    // chunks the write does not change unwritten.
    let before: Vec<Vec<u8>> = windows.iter().map(|(_, bytes)| bytes.clone()).collect();
    let mut size = old_size;
    let mut others = Vec::new();
    for op in ops {
        match op {
            Op::Write { offset, data, .. } => {
                window_write(&mut windows, offset, data.bytes());
                size = size.max(offset + data.len() as u64);
            }
            Op::Append { data, .. } => {
                window_write(&mut windows, size, data.bytes());
                size += data.len() as u64;
            }
            Op::Zero { offset, length, .. } => {
                window_zero(
                    &mut windows,
                    offset..offset.saturating_add(length).min(size),
                );
            }
            Op::Truncate { size: to, .. } => {
                if to < size {
                    window_zero(&mut windows, to..size);
                }
                size = to;
            }
            other => others.push(other),
        }
    }
    let n = layout.shards() as usize;
    let k = layout.k as usize;
    let mut per: Vec<Vec<Op>> = vec![Vec::new(); n];
    for ((start, bytes), old) in windows.iter().zip(&before) {
        let first_row = start / width;
        let rows_here = bytes.len() / usize::try_from(width).unwrap_or(1);
        let su_len = usize::try_from(su).unwrap_or(0);
        // Shard i's bytes of these rows, one chunk per row, and which rows
        // of it change (parity: all of them).
        let mut shard_bytes: Vec<Vec<u8>> = vec![Vec::with_capacity(rows_here * su_len); n];
        let mut changed: Vec<Vec<bool>> = Vec::with_capacity(rows_here);
        for row in 0..rows_here {
            let mut row_changed = vec![true; n];
            let span = row * k * su_len..(row + 1) * k * su_len;
            let data: Vec<&[u8]> = bytes[span.clone()].chunks(su_len).collect();
            let was: Vec<&[u8]> = old[span].chunks(su_len).collect();
            let mut parity = vec![vec![0u8; su_len]; n - k];
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            backend
                .codec
                .encode(&data, &mut outs)
                .map_err(|e| invalid(e.to_string()))?;
            for (i, chunk) in data.iter().enumerate() {
                shard_bytes[i].extend_from_slice(chunk);
                row_changed[i] = *chunk != was[i];
            }
            for (p, chunk) in parity.iter().enumerate() {
                shard_bytes[k + p].extend_from_slice(chunk);
            }
            changed.push(row_changed);
        }
        let offset = first_row * su;
        for (i, bytes) in shard_bytes.into_iter().enumerate() {
            let shard = u32::try_from(i).unwrap_or(u32::MAX);
            let keep = layout.shard_len(su, size, shard).saturating_sub(offset);
            let keep = usize::try_from(keep).unwrap_or(0).min(bytes.len());
            // Each run of changed rows, cut at the shard's new end (rows
            // unchanged past the old end are the zeros its new length
            // gives).
            let mut row = 0;
            while row < rows_here {
                if !changed[row][i] {
                    row += 1;
                    continue;
                }
                let first = row;
                while row < rows_here && changed[row][i] {
                    row += 1;
                }
                let from = (first * su_len).min(keep);
                let to = (row * su_len).min(keep);
                if from < to {
                    per[i].push(Op::Write {
                        object: object.clone(),
                        offset: offset + from as u64,
                        data: CheckedBytes::summed(Bytes::copy_from_slice(&bytes[from..to])),
                    });
                }
            }
        }
    }
    for (i, ops) in per.iter_mut().enumerate() {
        let shard = u32::try_from(i).unwrap_or(u32::MAX);
        if size != old_size {
            ops.push(Op::Truncate {
                object: object.clone(),
                size: layout.shard_len(su, size, shard),
            });
        }
        let meta = ShardMeta {
            shard,
            size,
            chunk: su,
            crc: None,
        };
        ops.push(Op::SetXattrs {
            object: object.clone(),
            xattrs: BTreeMap::from([(Bytes::from_static(EC_META_XATTR), meta.encode())]),
        });
        ops.extend(others.iter().cloned());
    }
    Ok(ShardWrites::PerShard(per))
}

/// A client read on an erasure-coded PG, after its local part: every op's
/// output in order (a `Read`'s data still to gather), and the shard byte
/// ranges to fetch, per shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcReadPlan {
    /// The object's version on the primary's shard: every shard's answer
    /// must show it.
    pub version: u64,
    pub outputs: Vec<OpOutput>,
    /// The object ranges of the `Read`s, in order, with the chunk.
    pub reads: Vec<Range<u64>>,
    pub chunk: u64,
    /// Per data shard, the shard ranges to fetch, `(offset, len)`.
    pub fetch: BTreeMap<u32, Vec<(u64, u64)>>,
}

fn shard_meta(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
) -> Result<Option<ShardMeta>, StoreError> {
    let xattrs = store.xattrs(collection, key)?;
    xattrs
        .get(EC_META_XATTR)
        .map(|m| ShardMeta::decode(m).map_err(StoreError::Corrupt))
        .transpose()
}

/// An object as one shard records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalObject {
    pub version: u64,
    pub size: u64,
    pub chunk: u64,
    /// Every xattr of the shard (the client's are the same on all shards).
    pub xattrs: BTreeMap<Bytes, Bytes>,
}

/// The object as this OSD's shard records it (`None`: no such object).
///
/// # Errors
/// The store's error, or unreadable shard metadata.
pub fn local_object(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    layout: &StripeLayout,
) -> Result<Option<LocalObject>, OpError> {
    let stat = match store.stat(collection, key) {
        Ok(stat) => stat,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(op_error(e)),
    };
    let xattrs = store.xattrs(collection, key).map_err(op_error)?;
    let meta = xattrs
        .get(EC_META_XATTR)
        .map(|m| ShardMeta::decode(m).map_err(|e| op_error(StoreError::Corrupt(e))))
        .transpose()?;
    let (size, chunk) = meta.map_or((0, layout.chunk_for(0)), |m| (m.size, m.chunk));
    Ok(Some(LocalObject {
        version: stat.version,
        size,
        chunk,
        xattrs,
    }))
}

/// Each shard's write with what undoing it takes (see [`crate::undo`]):
/// the stash ops put before the shard's ops, and the shard's roll-back
/// record. `local` is the object before the write (`None`: absent), as
/// every shard holds it when it applies the write (shards apply in log
/// order); `plan` the partial write's plan, if it is one.
///
/// # Errors
/// Writes not planned per shard, or ops a partial write does not take.
pub fn with_undo(
    layout: &StripeLayout,
    object: &Bytes,
    req: ReqId,
    local: Option<&LocalObject>,
    plan: Option<&PartialRead>,
    ops: &[Op],
    writes: ShardWrites,
) -> Result<(ShardWrites, Vec<UndoRecord>), InvalidWrite> {
    let ShardWrites::PerShard(mut per) = writes else {
        return Err(not_supported(
            "an erasure-coded write not planned per shard",
        ));
    };
    let Some(local) = local else {
        let created = UndoRecord::created(object.clone(), req);
        let records = vec![created; per.len()];
        return Ok((ShardWrites::PerShard(per), records));
    };
    let key = ObjectKey::new(object.clone());
    let client_old: BTreeMap<Bytes, Bytes> = local
        .xattrs
        .iter()
        .filter(|(name, _)| crate::codec::client_xattr_name(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let whole = matches!(plan, Some(PartialRead::Whole))
        || ops.iter().any(|op| {
            matches!(
                op,
                Op::WriteFull { .. } | Op::Remove { .. } | Op::Truncate { size: 0, .. }
            )
        });
    if whole {
        // The old shard moves aside whole; the new one starts with the
        // client's xattrs, which a rewrite keeps.
        let record = UndoRecord {
            keep: Keep::Whole,
            ..UndoRecord::created(object.clone(), req)
        };
        for shard_ops in &mut per {
            let mut prefix = record.stash_ops();
            prefix.push(Op::Touch {
                object: key.clone(),
            });
            if !client_old.is_empty() {
                prefix.push(Op::SetXattrs {
                    object: key.clone(),
                    xattrs: client_old.clone(),
                });
            }
            shard_ops.splice(0..0, prefix);
        }
        let records = vec![record; per.len()];
        return Ok((ShardWrites::PerShard(per), records));
    }
    let mut records = Vec::with_capacity(per.len());
    for (i, shard_ops) in per.iter_mut().enumerate() {
        let shard = u32::try_from(i).unwrap_or(u32::MAX);
        let len = layout.shard_len(local.chunk, local.size, shard);
        // What this shard's own ops change: the bytes they write or cut
        // off, and the xattrs they set or remove.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut changed: BTreeSet<Bytes> = BTreeSet::new();
        for op in shard_ops.iter() {
            match op {
                Op::Write { offset, data, .. } => {
                    spans.push((*offset, offset.saturating_add(data.len() as u64)));
                }
                Op::Zero { offset, length, .. } => {
                    spans.push((*offset, offset.saturating_add(*length)));
                }
                Op::Truncate { size, .. } => spans.push((*size, len)),
                Op::Append { .. } => {}
                Op::SetXattrs { xattrs, .. } => changed.extend(xattrs.keys().cloned()),
                Op::RemoveXattr { name, .. } => {
                    changed.insert(name.clone());
                }
                _ => {}
            }
        }
        let ranges = merge_spans(spans, len);
        let xattrs = changed
            .iter()
            .map(|name| {
                let old = if &name[..] == EC_META_XATTR {
                    local.xattrs.get(name).map(|_| {
                        ShardMeta {
                            shard,
                            size: local.size,
                            chunk: local.chunk,
                            crc: None,
                        }
                        .encode()
                    })
                } else {
                    client_old.get(name).cloned()
                };
                (name.clone(), old)
            })
            .collect();
        let record = UndoRecord {
            object: object.clone(),
            req,
            keep: Keep::Ranges(ranges),
            version: local.version,
            len,
            xattrs,
        };
        shard_ops.splice(0..0, record.stash_ops());
        records.push(record);
    }
    Ok((ShardWrites::PerShard(per), records))
}

/// Spans `(start, end)` cut to `[0, limit)`, sorted and merged, as
/// `(offset, length)` ranges.
fn merge_spans(mut spans: Vec<(u64, u64)>, limit: u64) -> Vec<(u64, u64)> {
    spans.retain_mut(|(start, end)| {
        *end = (*end).min(limit);
        start < end
    });
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
        .into_iter()
        .map(|(start, end)| (start, end - start))
        .collect()
}

/// The local part of a client read on the primary's shard: the guards,
/// the object's version and size, every op but the data of `Read`s (which
/// [`assemble`] fills in from the shards' answers).
///
/// # Errors
/// A guard that fails, an omap op, or the store's error.
pub fn plan_read(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    layout: &StripeLayout,
    guards: Vec<Guard>,
    ops: Vec<OpKind>,
) -> Result<EcReadPlan, OpError> {
    if !guards.is_empty() {
        let check = observe(store, collection, &key.name, guards, None)?;
        if let Some(code) = check.and_then(|check| check.failure()) {
            return Err(refusal_error(code));
        }
    }
    let mut plan = EcReadPlan {
        version: 0,
        outputs: Vec::with_capacity(ops.len()),
        reads: Vec::new(),
        chunk: 0,
        fetch: BTreeMap::new(),
    };
    let mut object: Option<(u64, ShardMeta)> = None;
    for op in ops {
        let needs_object = matches!(op, OpKind::Read { .. } | OpKind::Stat);
        if needs_object && object.is_none() {
            let stat = store.stat(collection, key).map_err(op_error)?;
            let meta = shard_meta(store, collection, key).map_err(op_error)?;
            let meta = meta.unwrap_or(ShardMeta {
                shard: 0,
                size: 0,
                chunk: layout.chunk_for(0),
                crc: None,
            });
            plan.version = stat.version;
            plan.chunk = meta.chunk;
            object = Some((stat.version, meta));
        }
        match op {
            OpKind::Read { offset, length } => {
                let Some((_, meta)) = object else {
                    unreachable!("loaded above")
                };
                let start = offset.min(meta.size);
                let end = length.map_or(meta.size, |l| offset.saturating_add(l).min(meta.size));
                let range = start..end.max(start);
                for (shard, r) in layout.shard_ranges(meta.chunk, range.clone()) {
                    let ranges = plan.fetch.entry(shard).or_default();
                    ranges.push((r.start, r.end - r.start));
                }
                plan.outputs.push(OpOutput::Data {
                    len: range.end - range.start,
                });
                plan.reads.push(range);
            }
            OpKind::Stat => {
                let Some((version, meta)) = object else {
                    unreachable!("loaded above")
                };
                plan.outputs.push(OpOutput::Stat {
                    size_bytes: meta.size,
                    version,
                });
            }
            OpKind::OmapGetHeader | OpKind::OmapGetRange { .. } | OpKind::OmapGet { .. } => {
                return Err(OpError::NotSupported(
                    "erasure-coded pools have no omap".into(),
                ));
            }
            other => {
                let (output, _) = read_op(store, collection, key, other)?;
                plan.outputs.push(output);
            }
        }
    }
    if let Some(ranges) = plan
        .fetch
        .values()
        .find(|r| r.len() > SHARD_READ_RANGES_MAX)
    {
        return Err(OpError::Invalid(format!(
            "{} ranges of one shard in a request ({SHARD_READ_RANGES_MAX} allowed)",
            ranges.len()
        )));
    }
    Ok(plan)
}

pub use cairn_proto::limits::SHARD_READ_RANGES_MAX;

/// What a shard read got from one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub version: u64,
    /// Each range's bytes, cut where the shard ends (a whole read: one,
    /// the shard).
    pub parts: Vec<Bytes>,
    /// Every xattr of the shard (whole reads only).
    pub xattrs: BTreeMap<Bytes, Bytes>,
}

/// Serves shard byte ranges `(offset, len)` of `key` from this OSD's
/// store (`whole`: the whole shard and its xattrs), if the object is at
/// `version` (0: any) before and after the reads, so an answer is never
/// torn by a write between them, and if what is stored is shard `shard`
/// (an OSD that changed positions holds another shard's bytes).
///
/// # Errors
/// The object is missing or at another version, or the store's error;
/// `Corrupt`: a checksum mismatch, or the object holds another shard.
pub fn serve_shard_read(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    shard: u32,
    version: u64,
    ranges: &[(u64, u64)],
    whole: bool,
) -> Result<Served, ShardReadError> {
    let stat_version = || -> Result<u64, ShardReadError> {
        match store.stat(collection, key) {
            Ok(stat) if version != 0 && stat.version != version => Err(ShardReadError::Stale {
                version: stat.version,
            }),
            Ok(stat) => Ok(stat.version),
            Err(e) => Err(store_error(e)),
        }
    };
    let before = stat_version()?;
    let xattrs = store.xattrs(collection, key).map_err(store_error)?;
    let mut known_crc = None;
    if let Some(meta) = xattrs.get(EC_META_XATTR) {
        let meta = ShardMeta::decode(meta).map_err(ShardReadError::Corrupt)?;
        known_crc = meta.crc;
        let held = meta.shard;
        // A whole read (a rebuild's source) takes any shard: the caller
        // reads which one from the metadata returned with it.
        if held != shard && !whole {
            return Err(ShardReadError::Corrupt(format!(
                "holds shard {held}, not shard {shard}"
            )));
        }
    }
    let mut parts = Vec::with_capacity(ranges.len().max(1));
    if whole {
        // A rebuild's source: a shard whose bytes fail the crc32c its full
        // write recorded must not seed other shards.
        let data = store
            .read(collection, key, ReadOptions::default())
            .map_err(store_error)?;
        if let Some(want) = known_crc
            && cairn_types::crc::crc32c(&data) != want
        {
            return Err(ShardReadError::Corrupt(format!(
                "shard bytes fail their recorded crc32c {want:08x}"
            )));
        }
        // A stray's shard counts as the shard its metadata names; one
        // without names none, and serves only as an empty object's.
        if shard == ANY_SHARD && !xattrs.contains_key(EC_META_XATTR) && !data.is_empty() {
            return Err(ShardReadError::NotServing(
                "data without shard metadata".into(),
            ));
        }
        parts.push(data);
    } else {
        for &(offset, len) in ranges {
            let data = store
                .read(collection, key, ReadOptions::range(offset, len))
                .map_err(store_error)?;
            parts.push(data);
        }
    }
    let after = stat_version()?;
    if after != before {
        return Err(ShardReadError::Stale { version: after });
    }
    Ok(Served {
        version: before,
        parts,
        xattrs: if whole { xattrs } else { BTreeMap::new() },
    })
}

/// Serves a client's direct read (`cairn_proto::osd::ClientShardRead`)
/// from this OSD's shard `shard` of `key`: the part of object bytes
/// `offset..offset + length` (`None`: to the end) that lives on this
/// shard (`rows`: this shard's bytes of every stripe the range touches,
/// for a client decoding a missing data shard), with the object's
/// version, size and chunk, so the client can assemble the parts of all
/// data shards once they agree. The object is
/// checked at one version before and after the read, so the part is
/// never torn by a write between them; the caller checks afterwards that
/// this version is committed (`Pg::serves_direct_read`).
///
/// # Errors
/// Why the read is not served directly (the client asks the primary).
pub fn serve_direct_part(
    store: &dyn ObjectStore,
    collection: CollectionId,
    key: &ObjectKey,
    layout: &StripeLayout,
    shard: u32,
    (offset, length, rows): (u64, Option<u64>, bool),
) -> Result<(cairn_proto::osd::DirectPart, Bytes), String> {
    use cairn_proto::osd::DirectPart;
    let version = || match store.stat(collection, key) {
        Ok(stat) => Ok(Some(stat.version)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    };
    let Some(before) = version()? else {
        return Ok((DirectPart::Absent, Bytes::new()));
    };
    let meta = shard_meta(store, collection, key)
        .map_err(|e| e.to_string())?
        .unwrap_or(ShardMeta {
            shard,
            size: 0,
            chunk: layout.chunk_for(0),
            crc: None,
        });
    if meta.shard != shard {
        return Err(format!("holds shard {}, not shard {shard}", meta.shard));
    }
    let start = offset.min(meta.size);
    let end = length.map_or(meta.size, |l| offset.saturating_add(l).min(meta.size));
    let range = start..end.max(start);
    let part = if rows {
        let stripes = layout.stripes(meta.chunk, range);
        let len = layout.shard_len(meta.chunk, meta.size, shard);
        (!stripes.is_empty())
            .then(|| (stripes.start * meta.chunk).min(len)..(stripes.end * meta.chunk).min(len))
    } else {
        layout
            .shard_ranges(meta.chunk, range)
            .into_iter()
            .find(|(s, _)| *s == shard)
            .map(|(_, r)| r)
    };
    let (shard_offset, data) = match part {
        Some(r) if r.end - r.start > u64::from(cairn_wire::limits::DATA_SIZE_BYTES_MAX) => {
            return Err(format!("a part of {} bytes", r.end - r.start));
        }
        Some(r) if r.is_empty() => (r.start, Bytes::new()),
        Some(r) => {
            let data = store
                .read(
                    collection,
                    key,
                    ReadOptions::range(r.start, r.end - r.start),
                )
                .map_err(|e| e.to_string())?;
            (r.start, data)
        }
        None => (0, Bytes::new()),
    };
    if version()? != Some(before) {
        return Err("the object changed while it was read".into());
    }
    let found = DirectPart::Found {
        version: before,
        size: meta.size,
        chunk: meta.chunk,
        shard_offset,
    };
    Ok((found, data))
}

fn store_error(e: StoreError) -> ShardReadError {
    match e {
        StoreError::NotFound { .. } => ShardReadError::NotFound,
        StoreError::Corrupt(why) => ShardReadError::Corrupt(why),
        other => ShardReadError::Store(other.to_string()),
    }
}

/// The read's outputs and data from the shards' answers: for each data
/// shard fetched, the bytes of its ranges in the order of
/// [`EcReadPlan::fetch`].
///
/// # Errors
/// An answer missing or short of what the plan needs (`ObjectBusy`: the
/// client retries).
pub fn assemble(
    layout: &StripeLayout,
    plan: EcReadPlan,
    fetched: &BTreeMap<u32, Vec<Bytes>>,
) -> Result<(Vec<OpOutput>, Bytes), OpError> {
    let mut pieces: Vec<(u32, Range<u64>, &[u8])> = Vec::new();
    for (shard, ranges) in &plan.fetch {
        let Some(bytes) = fetched.get(shard) else {
            return Err(OpError::ObjectBusy);
        };
        for (&(offset, len), data) in ranges.iter().zip(bytes) {
            pieces.push((*shard, offset..offset + len, &data[..]));
        }
    }
    let total: u64 = plan.reads.iter().map(|r| r.end - r.start).sum();
    let mut data = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for range in &plan.reads {
        let part =
            cairn_ec::object::gather(layout, plan.chunk, range.clone(), &pieces).map_err(|e| {
                tracing::warn!(error = %e, "erasure-coded read short of its shards");
                OpError::ObjectBusy
            })?;
        data.extend_from_slice(&part);
    }
    Ok((plan.outputs, data.freeze()))
}

/// Which shard a whole read found: the one its metadata names (an OSD
/// that changed positions still holds its old shard, a good source for
/// it), else (an empty object) the position's.
fn shard_held(position: u32, served: &Served) -> Result<u32, String> {
    match served.xattrs.get(EC_META_XATTR) {
        Some(meta) => Ok(ShardMeta::decode(meta)?.shard),
        None => Ok(position),
    }
}

/// A plan's refusal as the client gets it.
#[must_use]
pub fn invalid_write(e: InvalidWrite) -> OpError {
    match e {
        InvalidWrite::NotSupported(why) => OpError::NotSupported(why),
        other => OpError::Invalid(other.to_string()),
    }
}

/// An erasure-coded write that is not partial (whole objects, creates,
/// removes, xattrs), planned on this shard's state of the object: each
/// shard's ops with their roll-back records (`crate::undo`). The daemon
/// and the simulator plan it under the PG's lock.
///
/// # Errors
/// The store's, reading the shard; the plan's refusal.
pub fn plan_whole(
    store: &dyn ObjectStore,
    collection: CollectionId,
    shape: &crate::pg::EcShape,
    object: &Bytes,
    req: ReqId,
    ops: &[Op],
) -> Result<crate::pg::PreparedWrite, OpError> {
    let backend = EcBackend::new(shape).map_err(OpError::Store)?;
    let layout = *backend.layout();
    let key = ObjectKey::new(object.clone());
    let local = local_object(store, collection, &key, &layout)?;
    let writes = PgBackend::plan_write(&backend, ops.to_vec()).map_err(invalid_write)?;
    let (writes, undo) = with_undo(&layout, object, req, local.as_ref(), None, ops, writes)
        .map_err(invalid_write)?;
    Ok(crate::pg::PreparedWrite {
        base: local.map_or(0, |l| l.version),
        writes,
        undo,
        read_shards: false,
    })
}

/// A served shard read as its reply frame carries it: the reply, and
/// the parts one after another as its data segment.
pub fn shard_read_reply(
    served: Result<Served, ShardReadError>,
) -> (Result<ShardReadOk, ShardReadError>, Bytes) {
    match served {
        Ok(served) => {
            let ok = ShardReadOk {
                version: served.version,
                lens: served.parts.iter().map(|p| p.len() as u64).collect(),
                xattrs: served
                    .xattrs
                    .into_iter()
                    .map(|(k, v)| (ByteBuf::from(k.to_vec()), ByteBuf::from(v.to_vec())))
                    .collect(),
            };
            (Ok(ok), concat(served.parts))
        }
        Err(error) => (Err(error), Bytes::new()),
    }
}

/// The parts one after another, without a copy when there is one.
pub(crate) fn concat(mut parts: Vec<Bytes>) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
            for part in parts {
                all.extend_from_slice(&part);
            }
            all.freeze()
        }
    }
}

/// A shard read's reply as the reading primary takes it: at `version`
/// (0: any) and with `want_parts` parts (one for a whole read), cut from
/// `data` by the reply's lengths. Bytes from the network: a reply whose
/// lengths overrun its data is refused, never sliced past its end.
///
/// # Errors
/// The reply's own error; `Stale` for another version or part count;
/// `NotServing` for lengths past the data.
pub fn served_of(
    version: u64,
    want_parts: usize,
    reply: Result<ShardReadOk, ShardReadError>,
    data: &Bytes,
) -> Result<Served, ShardReadError> {
    let ok = reply?;
    if (version != 0 && ok.version != version) || ok.lens.len() != want_parts {
        return Err(ShardReadError::Stale {
            version: ok.version,
        });
    }
    let mut parts = Vec::with_capacity(ok.lens.len());
    let mut at = 0usize;
    for len in ok.lens {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let Some(end) = at.checked_add(len).filter(|end| *end <= data.len()) else {
            return Err(ShardReadError::NotServing(
                "reply shorter than its lengths".into(),
            ));
        };
        parts.push(data.slice(at..end));
        at = end;
    }
    let xattrs = ok
        .xattrs
        .into_iter()
        .map(|(k, v)| (Bytes::from(k.into_vec()), Bytes::from(v.into_vec())))
        .collect();
    Ok(Served {
        version: ok.version,
        parts,
        xattrs,
    })
}

/// The old bytes of a partial write's ranges from the read that fetched
/// them (a stat, then one data output per range): `ObjectBusy` unless the
/// object is still at `base` and `size` and every range came back whole.
/// A read that found the object gone also means it changed under the plan
/// (a removal since): `ObjectBusy`, planned again, never the client's
/// `NotFound` (a write creates what does not exist).
///
/// # Errors
/// `ObjectBusy`: the object changed, or the answer is not the read's; the
/// read's other errors.
pub fn old_bytes_of(
    read: Result<(Vec<OpOutput>, Bytes), OpError>,
    base: u64,
    size: u64,
) -> Result<Vec<Bytes>, OpError> {
    let (outputs, data) = match read {
        Ok(read) => read,
        Err(OpError::NotFound) => return Err(OpError::ObjectBusy),
        Err(error) => return Err(error),
    };
    match outputs.first() {
        Some(OpOutput::Stat {
            size_bytes,
            version,
        }) if *version == base && *size_bytes == size => {}
        _ => return Err(OpError::ObjectBusy),
    }
    let mut old = Vec::with_capacity(outputs.len().saturating_sub(1));
    let mut at = 0usize;
    for output in &outputs[1..] {
        let OpOutput::Data { len } = output else {
            return Err(OpError::ObjectBusy);
        };
        let len = usize::try_from(*len).unwrap_or(usize::MAX);
        let Some(end) = at.checked_add(len).filter(|e| *e <= data.len()) else {
            return Err(OpError::ObjectBusy);
        };
        old.push(data.slice(at..end));
        at = end;
    }
    Ok(old)
}

/// The shard a stray is asked for in a rebuild's whole read: whichever
/// it holds (its metadata names it).
pub const ANY_SHARD: u32 = u32::MAX;

/// Where a rebuild reads its source `key` ([`Sources`]): the acting OSD
/// of that position, asked for the position's shard; past the positions,
/// a stray of `strays`, asked for [`ANY_SHARD`]. `None`: a hole.
#[must_use]
pub fn source_of(interval: &crate::Interval, strays: &[OsdId], key: u32) -> Option<(OsdId, u32)> {
    let shards = interval.ec.as_ref().map_or(0, |s| s.k + s.m);
    if key < shards {
        return interval.osd_at(key).map(|osd| (osd, key));
    }
    let index = usize::try_from(key - shards).ok()?;
    strays.get(index).map(|osd| (*osd, ANY_SHARD))
}

/// The order in which a rebuild reads its sources ([`source_of`] keys):
/// the positions whose OSD is `trusted` (known to hold the object; this
/// OSD, `whoami`, first, then data before parity), then the strays, then
/// the other positions (which may hold an older shard, or the object at a
/// position they moved from).
#[must_use]
pub fn rebuild_order(
    interval: &crate::Interval,
    strays: &[OsdId],
    whoami: OsdId,
    trusted: impl Fn(OsdId) -> bool,
) -> Vec<u32> {
    let shards = interval.ec.as_ref().map_or(0, |s| s.k + s.m);
    let mut keys: Vec<u32> = (0..shards)
        .filter(|s| interval.osd_at(*s).is_some())
        .chain((0..strays.len()).filter_map(|i| u32::try_from(i).ok().map(|i| shards + i)))
        .collect();
    keys.sort_by_key(|key| {
        let osd = source_of(interval, strays, *key).map(|s| s.0);
        let rank = if *key >= shards {
            1
        } else if osd.is_some_and(&trusted) {
            0
        } else {
            2
        };
        (rank, osd != Some(whoami), *key)
    });
    keys
}

/// Whole reads of an object's shards, keyed by the position read (or,
/// for a stray's, by a key past every position: such a read counts only
/// as the shard its metadata names).
pub type Sources = BTreeMap<u32, Result<Served, ShardReadError>>;

/// Of whole reads of an object's shards, the newest version that `k`
/// distinct shards hold (only `need`, when given), with those shards
/// (`None`: no such version is held by `k`).
fn usable_version(
    k: usize,
    sources: &Sources,
    need: Option<u64>,
) -> Option<(u64, BTreeMap<u32, &Served>)> {
    let mut by_version: BTreeMap<u64, BTreeMap<u32, &Served>> = BTreeMap::new();
    for (position, result) in sources {
        let Ok(served) = result else { continue };
        if need.is_some_and(|need| need != served.version) {
            continue;
        }
        let Ok(shard) = shard_held(*position, served) else {
            continue;
        };

        by_version
            .entry(served.version)
            .or_default()
            .entry(shard)
            .or_insert(served);
    }
    by_version
        .into_iter()
        .rev()
        .find(|(_, shards)| shards.len() >= k)
}

fn absent(sources: &Sources) -> usize {
    sources
        .values()
        .filter(|r| matches!(r, Err(ShardReadError::NotFound)))
        .count()
}

/// How many more whole reads a rebuild needs: none once `k` distinct
/// shards at one version (`need`, when given) were read, or `k` sources
/// known to hold the object said it is gone.
#[must_use]
pub fn reads_still_needed(k: usize, sources: &Sources, need: Option<u64>) -> usize {
    if need == Some(0) || usable_version(k, sources, need).is_some() || absent(sources) >= k {
        return 0;
    }
    let mut per_version: BTreeMap<u64, usize> = BTreeMap::new();
    for served in sources.values().flatten() {
        if need.is_some_and(|need| need != served.version) {
            continue;
        }
        *per_version.entry(served.version).or_default() += 1;
    }
    let best = per_version.into_values().max().unwrap_or(0);
    k.saturating_sub(best.max(absent(sources))).max(1)
}

/// The shards to push to each target (the position it is to hold),
/// rebuilt from whole reads of other shards (each counts as the shard its
/// metadata names, so an OSD that changed positions is still a source
/// for its old shard): the newest version `k` distinct shards hold, or
/// exactly `need` when the log names the version to rebuild. Each
/// target's state is its shard's bytes, the object's client xattrs and
/// its own shard metadata. `None`: the object does not exist (`k`
/// sources said so; the caller passes "not found" only from sources known
/// to hold the object), and the targets remove theirs.
///
/// # Errors
/// No version held by `k` shards, shards of one version that disagree
/// (size, chunk, xattrs), or shards of the wrong length.
pub fn rebuild_for_push(
    layout: &StripeLayout,
    codec: &dyn cairn_ec::Codec,
    sources: &Sources,
    targets: &[u32],
    need: Option<u64>,
) -> Result<Option<Vec<(u32, crate::pg::ObjectState)>>, String> {
    let k = layout.k as usize;
    // The log's newest change removed it (versions start at 1), or `k`
    // sources that hold the object's current state found it gone: any
    // copy read elsewhere is an older one.
    if need == Some(0) || absent(sources) >= k {
        return Ok(None);
    }
    let Some((version, found)) = usable_version(k, sources, need) else {
        let read = sources.values().filter(|r| r.is_ok()).count();
        let which = need.map_or_else(|| "no version".to_owned(), |v| format!("version {v}"));
        return Err(format!(
            "{which} of the object is not held by {k} shards ({read} read, {} absent)",
            absent(sources)
        ));
    };
    let split = |served: &Served| -> Result<(Option<ShardMeta>, BTreeMap<Bytes, Bytes>), String> {
        let mut xattrs = served.xattrs.clone();
        let meta = xattrs
            .remove(EC_META_XATTR)
            .map(|m| ShardMeta::decode(&m))
            .transpose()?;
        Ok((meta, xattrs))
    };
    let mut shards: Vec<Option<Vec<u8>>> = vec![None; layout.shards() as usize];
    let mut first: Option<(Option<ShardMeta>, BTreeMap<Bytes, Bytes>)> = None;
    for (shard, served) in found.iter().take(k) {
        let (meta, xattrs) = split(served)?;
        match &first {
            None => first = Some((meta, xattrs)),
            Some((m0, x0)) => {
                let same = m0.map(|m| (m.size, m.chunk)) == meta.map(|m| (m.size, m.chunk));
                if !same || *x0 != xattrs {
                    return Err(format!(
                        "shards of version {version} disagree (shard {shard})"
                    ));
                }
            }
        }
        let data = served.parts.first().cloned().unwrap_or_default();
        if meta.is_none() {
            // An object without shard metadata holds no data: every shard
            // is empty, and any source serves as any.
            if !data.is_empty() {
                return Err(format!("shard {shard} holds data without shard metadata"));
            }
            continue;
        }
        let Some(slot) = shards.get_mut(*shard as usize) else {
            return Err(format!("no shard {shard}"));
        };
        *slot = Some(data.to_vec());
    }
    let (meta, client_xattrs) = first.unwrap_or_default();
    let (size, chunk) = meta.map_or((0, layout.chunk_for(0)), |m| (m.size, m.chunk));
    if meta.is_some() {
        cairn_ec::object::rebuild(layout, codec, chunk, size, &mut shards)
            .map_err(|e| e.to_string())?;
    } else {
        shards.fill(Some(Vec::new()));
    }
    let mut out = Vec::with_capacity(targets.len());
    for &target in targets {
        let Some(Some(data)) = shards.get(target as usize) else {
            return Err(format!("no position {target}"));
        };
        let mut xattrs = client_xattrs.clone();
        if meta.is_some() {
            let shard_meta = ShardMeta {
                shard: target,
                size,
                chunk,
                crc: Some(cairn_types::crc::crc32c(data)),
            };
            xattrs.insert(Bytes::from_static(EC_META_XATTR), shard_meta.encode());
        }
        out.push((
            target,
            crate::pg::ObjectState {
                data: Bytes::from(data.clone()),
                xattrs,
                omap: BTreeMap::new(),
                version,
            },
        ));
    }
    Ok(Some(out))
}

/// What a read fetches from which shard: the planned ranges when every
/// data shard they are on is available; else one span (covering them
/// all) from `k` available shards, data shards first, and the unavailable
/// data shards to decode over that span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    pub ranges: BTreeMap<u32, Vec<(u64, u64)>>,
    pub decode: Option<(Range<u64>, Vec<u32>)>,
}

/// The windows of shard bytes (whole stripe rows, from the start) a
/// deep scrub's parity check of an object of `size` bytes striped with
/// `chunk` reads one after the other: all `k + m` shards' bytes of a
/// window together at most [`PARITY_CHECK_WINDOW_BYTES`] (at least a row).
#[must_use]
pub fn parity_windows(layout: &StripeLayout, chunk: u64, size: u64) -> Vec<Range<u64>> {
    let end = layout.parity_len(chunk, size);
    let chunk = chunk.max(1);
    let rows = (PARITY_CHECK_WINDOW_BYTES / u64::from(layout.shards()) / chunk).max(1);
    let step = rows * chunk;
    (0..end.div_ceil(step))
        .map(|i| i * step..((i + 1) * step).min(end))
        .collect()
}

/// What re-encoding one window of an object's shards found: `Ok(None)`,
/// they agree; `Ok(Some(_))`, the inconsistency to record (repairable
/// when the wrong shards could be told); `Err`, the window could not be
/// checked (a shard not read, or not of the object's shape).
///
/// # Errors
/// As above: the object is left for the next deep scrub.
pub fn parity_verdict(
    layout: &StripeLayout,
    codec: &dyn Codec,
    interval: &crate::Interval,
    check: &ParityCheck,
    (chunk, size): (u64, u64),
    window: &Range<u64>,
    got: &BTreeMap<u32, Served>,
) -> Result<Option<Inconsistency>, String> {
    let n = layout.shards();
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(n as usize);
    for shard in 0..n {
        let Some(served) = got.get(&shard) else {
            return Err(format!("shard {shard} was not read"));
        };
        if served.version != check.version {
            return Err(format!("shard {shard} is at version {}", served.version));
        }
        pieces.push(served.parts.first().map_or(&[][..], |p| &p[..]));
    }
    let trusted: Vec<bool> = (0..n).map(|s| check.sealed.contains(&s)).collect();
    let parity = cairn_ec::object::check(
        layout,
        codec,
        (chunk, size),
        window.start,
        &pieces,
        &trusted,
    )
    .map_err(|e| e.to_string())?;
    let osds = |shards: &mut dyn Iterator<Item = u32>| -> BTreeSet<OsdId> {
        shards.filter_map(|s| interval.osd_at(s)).collect()
    };
    Ok(match parity {
        cairn_ec::Parity::Consistent => None,
        cairn_ec::Parity::Bad(bad) => {
            let auth = (0..n)
                .find(|s| !bad.contains(s))
                .and_then(|s| interval.osd_at(s));
            let named: Vec<String> = bad
                .iter()
                .map(|s| match interval.osd_at(*s) {
                    Some(osd) => format!("shard {s} on osd.{}", osd.0),
                    None => format!("shard {s}"),
                })
                .collect();
            Some(Inconsistency {
                object: check.object.clone(),
                bad: osds(&mut bad.iter().copied()),
                auth,
                reason: format!(
                    "{} disagree{} with the code of the others (bytes {}..{} of each shard)",
                    named.join(", "),
                    if named.len() == 1 { "s" } else { "" },
                    window.start,
                    window.end
                ),
            })
        }
        cairn_ec::Parity::Unlocated => Some(Inconsistency {
            object: check.object.clone(),
            bad: osds(&mut (0..n).filter(|s| !check.sealed.contains(s))),
            auth: None,
            reason: format!(
                "parity does not match the data (bytes {}..{} of each shard), and which of the \
                 unsealed shards is wrong cannot be told",
                window.start, window.end
            ),
        }),
    })
}

/// How to fetch `plan`'s ranges from the `available` shards.
///
/// # Errors
/// Fewer than `k` shards available for a read that needs a missing one
/// (`ObjectBusy`: recovery or a returning OSD changes that).
pub fn fetch_for(
    layout: &StripeLayout,
    plan: &EcReadPlan,
    available: &BTreeSet<u32>,
) -> Result<Fetch, OpError> {
    let missing: Vec<u32> = plan
        .fetch
        .keys()
        .filter(|s| !available.contains(s))
        .copied()
        .collect();
    if missing.is_empty() {
        return Ok(Fetch {
            ranges: plan.fetch.clone(),
            decode: None,
        });
    }
    // The span starts and ends on the code's block boundaries: decoding
    // from elsewhere would not match how the shards were coded.
    let block = cairn_ec::CODE_BLOCK_BYTES as u64;
    let ranges = || plan.fetch.values().flatten();
    let start = ranges().map(|r| r.0).min().unwrap_or(0) / block * block;
    let end = ranges()
        .map(|r| r.0 + r.1)
        .max()
        .unwrap_or(0)
        .div_ceil(block)
        * block;
    let readers: Vec<u32> = available
        .iter()
        .copied()
        .filter(|s| *s < layout.shards())
        .take(layout.k as usize)
        .collect();
    if readers.len() < layout.k as usize {
        return Err(OpError::ObjectBusy);
    }
    Ok(Fetch {
        ranges: readers
            .into_iter()
            .map(|s| (s, vec![(start, end - start)]))
            .collect(),
        decode: Some((start..end, missing)),
    })
}

/// The plan's ranges of each shard it needs, from what [`fetch_for`]
/// fetched: as fetched, or cut from the span of every shard after
/// decoding the missing ones.
///
/// # Errors
/// A decode that fails (too few or uneven shards): `ObjectBusy`.
pub fn parts_for(
    codec: &dyn cairn_ec::Codec,
    shards: u32,
    plan: &EcReadPlan,
    fetch: &Fetch,
    got: BTreeMap<u32, Vec<Bytes>>,
) -> Result<BTreeMap<u32, Vec<Bytes>>, OpError> {
    let Some((span, missing)) = &fetch.decode else {
        return Ok(got);
    };
    let len = usize::try_from(span.end - span.start).unwrap_or(0);
    let mut chunks: Vec<Option<Vec<u8>>> = vec![None; shards as usize];
    for (shard, parts) in &got {
        // A data shard shorter than the span is zeros past its end.
        let mut bytes = parts.first().map(|b| b.to_vec()).unwrap_or_default();
        bytes.resize(len, 0);
        chunks[*shard as usize] = Some(bytes);
    }
    if len > 0 {
        codec.reconstruct(&mut chunks).map_err(|e| {
            tracing::warn!(error = %e, "degraded read cannot decode");
            OpError::ObjectBusy
        })?;
    }
    let mut out = BTreeMap::new();
    for (shard, ranges) in &plan.fetch {
        let whole = chunks[*shard as usize].as_deref().unwrap_or(&[]);
        let cut = ranges
            .iter()
            .map(|&(offset, n)| {
                let from = usize::try_from(offset - span.start)
                    .unwrap_or(0)
                    .min(whole.len());
                let to = from
                    .saturating_add(usize::try_from(n).unwrap_or(0))
                    .min(whole.len());
                Bytes::copy_from_slice(&whole[from..to])
            })
            .collect();
        out.insert(*shard, cut);
    }
    debug_assert!(missing.iter().all(|m| out.contains_key(m)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogKind, LogResult, ReqId, Version};
    use cairn_store::MemStore;

    fn shape(k: u32, m: u32) -> EcShape {
        EcShape {
            k,
            m,
            stripe_unit: 4096,
            acting: (0..k + m).map(|i| Some(OsdId(i))).collect(),
            up: (0..k + m).map(|i| Some(OsdId(i))).collect(),
        }
    }

    fn key() -> ObjectKey {
        ObjectKey::new(Bytes::from_static(b"obj"))
    }

    #[test]
    fn shard_meta_round_trips_and_refuses_junk() {
        for crc in [None, Some(0xdead_beef)] {
            let meta = ShardMeta {
                shard: 5,
                size: 1 << 40,
                chunk: 4096,
                crc,
            };
            assert_eq!(ShardMeta::decode(&meta.encode()), Ok(meta));
        }
        assert!(ShardMeta::decode(b"").is_err());
        let mut bad = ShardMeta {
            shard: 0,
            size: 1,
            chunk: 16,
            crc: None,
        }
        .encode()
        .to_vec();
        bad[18] = 7;
        assert!(ShardMeta::decode(&bad).is_err());
        for chunk in [0u64, 100, 1 << 30] {
            let mut odd = ShardMeta {
                shard: 0,
                size: 1,
                chunk: 64,
                crc: None,
            }
            .encode()
            .to_vec();
            odd[10..18].copy_from_slice(&chunk.to_le_bytes());
            assert!(ShardMeta::decode(&odd).is_err(), "chunk {chunk} taken");
        }
        bad[0] = 9;
        assert!(ShardMeta::decode(&bad).is_err());
    }

    /// Applies shard `i`'s ops to store `i`, as the PG would.
    fn apply(stores: &[MemStore], writes: &ShardWrites) {
        let coll = CollectionId::pg(1, 0);
        for (i, store) in stores.iter().enumerate() {
            let mut txn = Transaction::new(coll);
            txn.ops = writes.for_shard(Some(u32::try_from(i).expect("small")));
            if !txn.ops.is_empty() {
                store.apply(txn).expect("shard transaction applies");
            }
        }
    }

    /// Every store's deep scrub map of the whole of PG 1.0, by OSD
    /// (store `i` is `osd.i`).
    fn deep_scrub_maps(stores: &[MemStore]) -> BTreeMap<OsdId, ScrubMap> {
        let pg = cairn_types::PgId::new(cairn_types::PoolId(1), 0);
        let order = crate::scrub::ScrubOrder {
            to: OsdId(0),
            interval_epoch: cairn_types::Epoch(1),
            chunk: 0,
            after: None,
            through: None,
            deep: true,
        };
        (0u32..)
            .zip(stores)
            .map(|(i, store)| {
                let map =
                    crate::daemon::build_scrub_map(store, pg, OsdId(i), &order).expect("scrub map");
                (OsdId(i), map)
            })
            .collect()
    }

    fn stores(n: u32) -> Vec<MemStore> {
        (0..n)
            .map(|_| {
                let store = MemStore::new();
                let mut txn = Transaction::new(CollectionId::pg(1, 0));
                txn.push(Op::CreateCollection);
                store.apply(txn).expect("collection");
                store
            })
            .collect()
    }

    fn write_full(data: &[u8], version: u64) -> Vec<Op> {
        vec![
            Op::WriteFull {
                object: key(),
                data: CheckedBytes::summed(Bytes::copy_from_slice(data)),
            },
            Op::SetXattrs {
                object: key(),
                xattrs: BTreeMap::from([(Bytes::from_static(b"user.a"), Bytes::from_static(b"1"))]),
            },
            Op::SetVersion {
                object: key(),
                version,
            },
        ]
    }

    /// Reads through plan, shard reads and assembly, shard `i` served by
    /// store `i` unless it is `lost`, the primary being store 0.
    fn read_without(
        backend: &EcBackend,
        stores: &[MemStore],
        ops: Vec<OpKind>,
        lost: &BTreeSet<u32>,
    ) -> Result<(Vec<OpOutput>, Bytes), OpError> {
        let coll = CollectionId::pg(1, 0);
        let plan = plan_read(&stores[0], coll, &key(), backend.layout(), Vec::new(), ops)?;
        let available: BTreeSet<u32> = (0..backend.layout().shards())
            .filter(|s| !lost.contains(s))
            .collect();
        let fetch = fetch_for(backend.layout(), &plan, &available)?;
        let mut got = BTreeMap::new();
        for (shard, ranges) in &fetch.ranges {
            assert!(!lost.contains(shard), "read from a lost shard");
            let served = serve_shard_read(
                &stores[*shard as usize],
                coll,
                &key(),
                *shard,
                plan.version,
                ranges,
                false,
            )
            .map_err(|e| OpError::Store(format!("{e:?}")))?;
            assert_eq!(served.version, plan.version);
            got.insert(*shard, served.parts);
        }
        let parts = parts_for(
            &*backend.codec,
            backend.layout().shards(),
            &plan,
            &fetch,
            got,
        )?;
        assemble(backend.layout(), plan, &parts)
    }

    fn read(
        backend: &EcBackend,
        stores: &[MemStore],
        ops: Vec<OpKind>,
    ) -> Result<(Vec<OpOutput>, Bytes), OpError> {
        read_without(backend, stores, ops, &BTreeSet::new())
    }

    #[test]
    fn full_writes_store_each_shard_and_reads_gather_any_range() {
        for (k, m) in [(2, 1), (4, 2), (8, 3)] {
            let backend = EcBackend::new(&shape(k, m)).expect("shape");
            for len in [0usize, 1, 100, 4096, 4096 * 9 + 17, 200_000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let stores = stores(k + m);
                let writes = backend.plan_write(write_full(&data, 3)).expect("plan");
                apply(&stores, &writes);
                let coll = CollectionId::pg(1, 0);
                let mut total = 0;
                for (i, store) in stores.iter().enumerate() {
                    let i = u32::try_from(i).expect("small");
                    let stat = store.stat(coll, &key()).expect("every shard holds it");
                    assert_eq!(stat.version, 3);
                    let meta = shard_meta(store, coll, &key())
                        .expect("readable")
                        .expect("meta");
                    assert_eq!((meta.shard, meta.size), (i, len as u64));
                    let want = backend.layout().shard_len(meta.chunk, meta.size, i);
                    assert_eq!(stat.size_bytes, want, "shard {i} of {len} bytes on {k}+{m}");
                    total += stat.size_bytes;
                }
                assert_eq!(total, backend.layout().stored_bytes(len as u64));
                let (out, bytes) = read(
                    &backend,
                    &stores,
                    vec![OpKind::Read {
                        offset: 0,
                        length: None,
                    }],
                )
                .expect("read");
                assert_eq!(&bytes[..], &data[..], "{k}+{m}, {len} bytes");
                assert_eq!(out, vec![OpOutput::Data { len: len as u64 }]);
                if len > 10 {
                    let (a, b) = (len / 3, len / 3 + len / 2);
                    let (_, bytes) = read(
                        &backend,
                        &stores,
                        vec![
                            OpKind::Stat,
                            OpKind::Read {
                                offset: a as u64,
                                length: Some((b - a) as u64),
                            },
                            OpKind::Read {
                                offset: 1,
                                length: Some(5),
                            },
                        ],
                    )
                    .expect("ranges");
                    let mut want = data[a..b].to_vec();
                    want.extend_from_slice(&data[1..6]);
                    assert_eq!(&bytes[..], &want[..]);
                }
            }
        }
    }

    #[test]
    fn a_small_read_fetches_one_shard_and_partial_writes_are_refused() {
        let backend = EcBackend::new(&shape(4, 2)).expect("shape");
        let stores = stores(6);
        let data = vec![9u8; 64 * 1024];
        apply(
            &stores,
            &backend.plan_write(write_full(&data, 1)).expect("plan"),
        );
        let plan = plan_read(
            &stores[0],
            CollectionId::pg(1, 0),
            &key(),
            backend.layout(),
            Vec::new(),
            vec![OpKind::Read {
                offset: 5000,
                length: Some(100),
            }],
        )
        .expect("plan");
        assert_eq!(plan.fetch.len(), 1, "100 bytes lie in one chunk");
        assert_eq!(plan.fetch[&1], vec![(5000 - 4096, 100)]);
        let partial = vec![Op::Write {
            object: key(),
            offset: 0,
            data: CheckedBytes::summed(Bytes::from_static(b"x")),
        }];
        assert!(matches!(
            backend.plan_write(partial),
            Err(InvalidWrite::NotSupported(_))
        ));
        let omap = vec![Op::OmapClear { object: key() }];
        assert!(matches!(
            backend.plan_write(omap),
            Err(InvalidWrite::NotSupported(_))
        ));
    }

    #[test]
    fn a_shard_refuses_another_shards_ops_and_pushes() {
        let backend = EcBackend::new(&shape(2, 1)).expect("shape");
        let writes = backend
            .plan_write(write_full(b"hello world", 2))
            .expect("plan");
        let entry = LogEntry {
            version: Version::new(1, 2),
            object: key().name,
            kind: LogKind::Write,
            req: ReqId { client: 1, tid: 1 },
            result: LogResult::Ok { object_version: 2 },
        };
        let ops1 = writes.for_shard(Some(1));
        assert_eq!(backend.check_sub_write_ops(&entry, Some(1), &ops1), Ok(()));
        assert!(backend.check_sub_write_ops(&entry, Some(2), &ops1).is_err());
        assert!(backend.check_sub_write_ops(&entry, None, &ops1).is_err());
        // A push of shard 1's state is taken at position 1 only.
        let stores = stores(3);
        apply(&stores, &writes);
        let coll = CollectionId::pg(1, 0);
        let state =
            crate::daemon::read_object_state(&stores[1], coll, &key().name).expect("readable");
        let push = Push {
            from: OsdId(0),
            interval_epoch: cairn_types::Epoch(1),
            object: key().name,
            state,
            as_of: Version::ZERO,
        };
        assert!(backend.push_txn(coll, Some(1), &push).is_ok());
        assert!(backend.push_txn(coll, Some(0), &push).is_err());
    }

    #[test]
    fn a_stale_or_missing_shard_is_not_served() {
        let backend = EcBackend::new(&shape(2, 1)).expect("shape");
        let stores = stores(3);
        let coll = CollectionId::pg(1, 0);
        assert_eq!(
            serve_shard_read(&stores[1], coll, &key(), 1, 0, &[(0, 1)], false),
            Err(ShardReadError::NotFound)
        );
        apply(
            &stores,
            &backend.plan_write(write_full(b"abc", 4)).expect("plan"),
        );
        assert_eq!(
            serve_shard_read(&stores[1], coll, &key(), 1, 3, &[(0, 1)], false),
            Err(ShardReadError::Stale { version: 4 })
        );
        assert!(serve_shard_read(&stores[1], coll, &key(), 1, 4, &[(0, 1)], false).is_ok());
        // An OSD asked for another position's shard than it holds.
        assert!(matches!(
            serve_shard_read(&stores[1], coll, &key(), 2, 4, &[(0, 1)], false),
            Err(ShardReadError::Corrupt(why)) if why.contains("holds shard 1")
        ));
    }

    /// Every pattern of up to `m` lost shards (the primary's own aside:
    /// its metadata plans the read) reads any range back byte-exact.
    #[test]
    fn reads_decode_around_any_m_lost_shards() {
        for (k, m) in [(2u32, 1u32), (4, 2), (8, 3)] {
            let backend = EcBackend::new(&shape(k, m)).expect("shape");
            let n = k + m;
            for len in [1usize, 5000, 4096 * k as usize * 3 + 123] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                let stores = stores(n);
                apply(
                    &stores,
                    &backend.plan_write(write_full(&data, 2)).expect("plan"),
                );
                for lost_mask in 0u32..(1 << n) {
                    let lost: BTreeSet<u32> =
                        (0..n).filter(|i| lost_mask & (1 << i) != 0).collect();
                    if lost.len() > m as usize || lost.contains(&0) {
                        continue;
                    }
                    let (a, b) = (len / 5, len - len / 7);
                    let (_, bytes) = read_without(
                        &backend,
                        &stores,
                        vec![
                            OpKind::Read {
                                offset: 0,
                                length: None,
                            },
                            OpKind::Read {
                                offset: a as u64,
                                length: Some((b - a) as u64),
                            },
                        ],
                        &lost,
                    )
                    .unwrap_or_else(|e| panic!("{k}+{m}, {len} B, lost {lost:?}: {e}"));
                    let mut want = data.clone();
                    want.extend_from_slice(&data[a..b]);
                    assert!(bytes[..] == want[..], "{k}+{m}, {len} B, lost {lost:?}");
                }
                // Past m lost, a read that needs a lost shard cannot be
                // answered (one that needs only shard 0 still can).
                let too_many: BTreeSet<u32> = (1..=m + 1).collect();
                assert!(
                    len < 4096 * k as usize
                        || matches!(
                            read_without(
                                &backend,
                                &stores,
                                vec![OpKind::Read {
                                    offset: 0,
                                    length: None
                                }],
                                &too_many
                            ),
                            Err(OpError::ObjectBusy)
                        )
                );
            }
        }
    }

    /// Any `m` lost shards are rebuilt from whole reads of the others,
    /// each with its own metadata, equal to what the full write stored;
    /// sources that disagree or are too few rebuild nothing.
    #[test]
    fn lost_shards_are_rebuilt_for_their_positions() {
        let backend = EcBackend::new(&shape(4, 2)).expect("shape");
        let coll = CollectionId::pg(1, 0);
        let data: Vec<u8> = (0..70_000).map(|i| (i % 251) as u8).collect();
        let stores = stores(6);
        apply(
            &stores,
            &backend.plan_write(write_full(&data, 5)).expect("plan"),
        );
        let whole = |i: u32| serve_shard_read(&stores[i as usize], coll, &key(), i, 0, &[], true);
        for lost in [[0u32, 1], [2, 5], [4, 5], [1, 3]] {
            let sources: BTreeMap<u32, Result<Served, ShardReadError>> = (0..6)
                .filter(|i| !lost.contains(i))
                .map(|i| (i, whole(i)))
                .collect();
            let rebuilt =
                rebuild_for_push(backend.layout(), &*backend.codec, &sources, &lost, None)
                    .expect("rebuilt")
                    .expect("the object exists");
            for (shard, state) in rebuilt {
                let stored =
                    crate::daemon::read_object_state(&stores[shard as usize], coll, &key().name)
                        .expect("readable")
                        .expect("present");
                assert_eq!(state, stored, "shard {shard} rebuilt as stored");
            }
        }
        // Too few, or a disagreeing version: nothing.
        let few: BTreeMap<u32, Result<Served, ShardReadError>> =
            (0..3).map(|i| (i, whole(i))).collect();
        assert!(rebuild_for_push(backend.layout(), &*backend.codec, &few, &[4], None).is_err());
        let mut odd: BTreeMap<u32, Result<Served, ShardReadError>> =
            (0..4).map(|i| (i, whole(i))).collect();
        for i in [2, 3] {
            if let Some(Ok(served)) = odd.get_mut(&i) {
                served.version = 4;
            }
        }
        assert!(
            rebuild_for_push(backend.layout(), &*backend.codec, &odd, &[4], None).is_err(),
            "two shards at each of two versions: no version has four"
        );
        // A source read at another position than its shard's (an OSD that
        // moved) still counts as its own shard.
        let moved: BTreeMap<u32, Result<Served, ShardReadError>> = [(0, 0), (1, 1), (2, 5), (5, 3)]
            .into_iter()
            .map(|(at, i)| (at, whole(i)))
            .collect();
        let rebuilt = rebuild_for_push(backend.layout(), &*backend.codec, &moved, &[2], None)
            .expect("rebuilt")
            .expect("exists");
        let stored = crate::daemon::read_object_state(&stores[2], coll, &key().name)
            .expect("readable")
            .expect("present");
        assert_eq!(
            rebuilt[0].1, stored,
            "shard 2 rebuilt from shards 0, 1, 3 and 5"
        );
        assert_eq!(reads_still_needed(4, &moved, None), 0);
        assert_eq!(reads_still_needed(4, &few, None), 1);
        // The version the log names, and no other: four shards of version
        // 5 rebuild version 5, not a version 6 the log says was written.
        assert!(rebuild_for_push(backend.layout(), &*backend.codec, &moved, &[2], Some(5)).is_ok());
        assert!(
            rebuild_for_push(backend.layout(), &*backend.codec, &moved, &[2], Some(6)).is_err(),
            "shards of an older version than the log's never seed a rebuild"
        );
        assert_eq!(reads_still_needed(4, &moved, Some(6)), 4);
        // A stray's read, keyed past every position, counts as its shard.
        let with_stray: BTreeMap<u32, Result<Served, ShardReadError>> =
            [(0, 0), (1, 1), (6, 3), (7, 5)]
                .into_iter()
                .map(|(at, i)| (at, whole(i)))
                .collect();
        let rebuilt = rebuild_for_push(
            backend.layout(),
            &*backend.codec,
            &with_stray,
            &[2],
            Some(5),
        )
        .expect("rebuilt")
        .expect("exists");
        assert_eq!(
            rebuilt[0].1, stored,
            "shard 2 rebuilt with two strays' shards"
        );

        // Gone everywhere: the targets remove theirs.
        let gone: BTreeMap<u32, Result<Served, ShardReadError>> =
            (0..4).map(|i| (i, Err(ShardReadError::NotFound))).collect();
        assert_eq!(
            rebuild_for_push(backend.layout(), &*backend.codec, &gone, &[4], None),
            Ok(None)
        );
    }

    /// The shards in `stores` hold exactly `model`: each data shard its
    /// bytes at its length, the parity the code of the data, the metadata
    /// the model's size on every shard, at one version.
    fn assert_shards_hold(backend: &EcBackend, stores: &[MemStore], model: &[u8], what: &str) {
        let coll = CollectionId::pg(1, 0);
        let layout = backend.layout();
        let mut shards: Vec<Option<Vec<u8>>> = Vec::new();
        let mut chunk = None;
        let mut version = None;
        for (i, store) in stores.iter().enumerate() {
            let i = u32::try_from(i).expect("small");
            let stat = store.stat(coll, &key()).expect("shard present");
            let meta = shard_meta(store, coll, &key()).expect("meta readable");
            let (size, c) = meta.map_or((0, layout.chunk_for(0)), |m| (m.size, m.chunk));
            assert_eq!(size, model.len() as u64, "{what}: shard {i}'s size");
            assert!(chunk.is_none_or(|x| x == c), "{what}: chunks differ");
            assert!(
                version.is_none_or(|v| v == stat.version),
                "{what}: versions differ"
            );
            chunk = Some(c);
            version = Some(stat.version);
            assert_eq!(
                stat.size_bytes,
                layout.shard_len(c, size, i),
                "{what}: shard {i}'s length"
            );
            let data = store
                .read(coll, &key(), ReadOptions::default())
                .expect("readable");
            shards.push(Some(data.to_vec()));
        }
        let chunk = chunk.expect("shards");
        let data: Vec<&[u8]> = shards[..layout.k as usize]
            .iter()
            .map(|s| s.as_deref().unwrap_or(&[]))
            .collect();
        let joined =
            cairn_ec::object::join(layout, chunk, model.len() as u64, &data).expect("joins");
        assert!(
            joined == model,
            "{what}: the data shards are not the object"
        );
        let mut rebuilt: Vec<Option<Vec<u8>>> = shards.clone();
        for parity in &mut rebuilt[layout.k as usize..] {
            *parity = None;
        }
        cairn_ec::object::rebuild(
            layout,
            &*backend.codec,
            chunk,
            model.len() as u64,
            &mut rebuilt,
        )
        .expect("parity rebuilds");
        if rebuilt != shards {
            let mut first = Vec::new();
            for (i, (a, b)) in rebuilt.iter().zip(&shards).enumerate() {
                let (a, b) = (a.as_deref().unwrap_or(&[]), b.as_deref().unwrap_or(&[]));
                if let Some(at) = a.iter().zip(b).position(|(x, y)| x != y) {
                    first.push(format!(
                        "shard {i} at {at} (len {} vs {})",
                        a.len(),
                        b.len()
                    ));
                } else if a.len() != b.len() {
                    first.push(format!("shard {i} len {} vs {}", a.len(), b.len()));
                }
            }
            panic!(
                "{what}: the parity is not the code of the data (size {}, chunk {chunk}): {first:?}",
                model.len()
            );
        }
    }

    /// Random partial writes (at offsets, appends, truncates up and down,
    /// zeroing, several in one request) on small and multi-stripe objects
    /// leave every shard exactly what the same operations on a plain byte
    /// vector give, for 2+1, 3+2 and 4+2.
    #[test]
    fn partial_writes_leave_the_shards_of_the_same_ops_on_a_vector() {
        let coll = CollectionId::pg(1, 0);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |below: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % below.max(1)
        };
        for (k, m) in [(2u32, 1u32), (3, 2), (4, 2)] {
            let backend = EcBackend::new(&shape(k, m)).expect("shape");
            let layout = *backend.layout();
            for case in 0..24 {
                let stores = stores(k + m);
                let initial = [0usize, 100, 5000, 40_000, 100_003][case % 5];
                let mut model: Vec<u8> = (0..initial).map(|i| (i * 13 + case) as u8).collect();
                apply(
                    &stores,
                    &backend.plan_write(write_full(&model, 1)).expect("plan"),
                );
                for (version, step) in (2..).zip(0..8) {
                    let mut ops = Vec::new();
                    for _ in 0..=next(2) {
                        let len = model.len() as u64;
                        let fill = u8::try_from(next(255) + 1).expect("a byte");
                        let op = match next(4) {
                            0 => {
                                let offset = next(len + 20_000);
                                let n = next(20_000) + 1;
                                let data = vec![fill; usize::try_from(n).expect("small")];
                                let end = usize::try_from(offset + n).expect("small");
                                if model.len() < end {
                                    model.resize(end, 0);
                                }
                                model[usize::try_from(offset).expect("small")..end]
                                    .copy_from_slice(&data);
                                Op::Write {
                                    object: key(),
                                    offset,
                                    data: CheckedBytes::summed(Bytes::from(data)),
                                }
                            }
                            1 => {
                                let data =
                                    vec![fill; usize::try_from(next(10_000) + 1).expect("small")];
                                model.extend_from_slice(&data);
                                Op::Append {
                                    object: key(),
                                    data: CheckedBytes::summed(Bytes::from(data)),
                                }
                            }
                            2 => {
                                let size = next(len + 20_000);
                                model.resize(usize::try_from(size).expect("small"), 0);
                                Op::Truncate {
                                    object: key(),
                                    size,
                                }
                            }
                            _ => {
                                let offset = next(len + 100);
                                let length = next(30_000);
                                let end = usize::try_from(offset + length)
                                    .expect("small")
                                    .min(model.len());
                                let from = usize::try_from(offset).expect("small").min(end);
                                model[from..end].fill(0);
                                Op::Zero {
                                    object: key(),
                                    offset,
                                    length,
                                }
                            }
                        };
                        ops.push(op);
                    }
                    let shown: Vec<String> = ops
                        .iter()
                        .map(|op| match op {
                            Op::Write { offset, data, .. } => {
                                format!("write {offset}+{}", data.len())
                            }
                            Op::Append { data, .. } => format!("append {}", data.len()),
                            other => format!("{other:?}"),
                        })
                        .collect();
                    let what = format!("{k}+{m} case {case} step {step}: {shown:?}");
                    let local = local_object(&stores[0], coll, &key(), &layout).expect("readable");
                    let (size, chunk) = local
                        .as_ref()
                        .map_or((0, layout.chunk_for(0)), |l| (l.size, l.chunk));
                    let plan = plan_partial(&layout, size, chunk, &ops).expect("plans");
                    let what = format!("{what} from {size} (chunk {chunk}): {plan:?}");
                    let old: Vec<Bytes> = plan
                        .reads(&layout, size)
                        .into_iter()
                        .map(|r| {
                            read(
                                &backend,
                                &stores,
                                vec![OpKind::Read {
                                    offset: r.start,
                                    length: Some(r.end - r.start),
                                }],
                            )
                            .expect("old bytes read")
                            .1
                        })
                        .collect();
                    let writes = partial_writes(&backend, size, &plan, &old, &key(), ops.clone())
                        .expect("planned");
                    let req = ReqId {
                        client: 1,
                        tid: version,
                    };
                    let (writes, undo) = with_undo(
                        &layout,
                        &key().name,
                        req,
                        local.as_ref(),
                        Some(&plan),
                        &ops,
                        writes,
                    )
                    .expect("undo planned");
                    let ShardWrites::PerShard(mut per) = writes else {
                        panic!("{what}: not per shard")
                    };
                    for shard in &mut per {
                        shard.push(Op::SetVersion {
                            object: key(),
                            version,
                        });
                    }
                    let writes = ShardWrites::PerShard(per);
                    write_undo_redo(&backend, &stores, &writes, &undo, &model, &what);
                }
            }
        }
    }

    /// Every pattern of up to `m` corrupt shards, for 2+1, 4+2 and 8+3, on
    /// objects of several sizes: a deep scrub finds exactly the corrupt
    /// shards (bit rot fails the store's block checksums; bytes rewritten
    /// under sound block checksums fail the crc32c their full write
    /// recorded), a corrupt shard refuses to seed a rebuild, and shards
    /// rebuilt from the others are what the full write stored.
    #[test]
    fn every_pattern_of_up_to_m_corrupt_shards_is_found_by_deep_scrub_and_rebuilt() {
        let coll = CollectionId::pg(1, 0);
        let mut checked = 0;
        for (k, m) in [(2u32, 1u32), (4, 2), (8, 3)] {
            let backend = EcBackend::new(&shape(k, m)).expect("shape");
            let n = k + m;
            let mut patterns: Vec<Vec<u32>> = vec![Vec::new()];
            for _ in 0..m {
                let longer: Vec<Vec<u32>> = patterns
                    .iter()
                    .flat_map(|p| {
                        let from = p.last().map_or(0, |l| l + 1);
                        (from..n).map(move |i| {
                            let mut q = p.clone();
                            q.push(i);
                            q
                        })
                    })
                    .collect();
                patterns.extend(longer);
            }
            patterns.retain(|p| !p.is_empty());
            patterns.sort();
            patterns.dedup();
            for (case, pattern) in patterns.iter().enumerate() {
                let size = [5000usize, 70_001, 300_000][case % 3];
                let data: Vec<u8> = (0..size).map(|i| (i * 31 + case) as u8).collect();
                let stores = stores(n);
                apply(
                    &stores,
                    &backend.plan_write(write_full(&data, 3)).expect("plan"),
                );
                let state = |i: u32| {
                    crate::daemon::read_object_state(&stores[i as usize], coll, &key().name)
                        .expect("readable")
                        .expect("present")
                };
                let before: Vec<_> = (0..n).map(state).collect();
                for (j, &i) in pattern.iter().enumerate() {
                    let store = &stores[i as usize];
                    let len = before[i as usize].data.len();
                    if (case + j) % 2 == 0 {
                        assert!(store.rot(coll, &key(), len / 2), "rot shard {i}");
                    } else {
                        // Other bytes, written properly: sound checksums.
                        let cut = len.min(64);
                        let garbage: Vec<u8> = before[i as usize].data[..cut]
                            .iter()
                            .map(|b| b ^ 0x5a)
                            .collect();
                        let txn = Transaction::new(coll).with(Op::Write {
                            object: key(),
                            offset: 0,
                            data: CheckedBytes::summed(Bytes::from(garbage)),
                        });
                        store.apply(txn).expect("rewrite");
                    }
                }
                let maps = deep_scrub_maps(&stores);
                let found = backend.compare_scrub_maps(&maps, OsdId(0));
                let bad: BTreeSet<OsdId> = pattern.iter().map(|i| OsdId(*i)).collect();
                let what = format!("{k}+{m}, {size} bytes, corrupt {pattern:?}");
                assert_eq!(found.len(), 1, "{what}: {found:?}");
                assert_eq!(found[0].bad, bad, "{what}");
                assert!(found[0].auth.is_some_and(|a| !bad.contains(&a)), "{what}");
                let whole =
                    |i: u32| serve_shard_read(&stores[i as usize], coll, &key(), i, 0, &[], true);
                for &i in pattern {
                    assert!(
                        matches!(whole(i), Err(ShardReadError::Corrupt(_))),
                        "{what}: shard {i} served"
                    );
                }
                let sources: BTreeMap<u32, Result<Served, ShardReadError>> =
                    (0..n).map(|i| (i, whole(i))).collect();
                let rebuilt =
                    rebuild_for_push(backend.layout(), &*backend.codec, &sources, pattern, None)
                        .expect("rebuilt")
                        .expect("the object exists");
                assert_eq!(rebuilt.len(), pattern.len(), "{what}");
                for (shard, rebuilt) in rebuilt {
                    assert_eq!(rebuilt, before[shard as usize], "{what}: shard {shard}");
                }
                checked += 1;
            }
        }
        // 3 + 21 + 231 patterns.
        assert_eq!(checked, 255);
    }

    /// A deep scrub re-encodes an object whose shards a partial write left
    /// unsealed (their crc32c unknown): bytes rewritten under sound block
    /// checksums on such a shard pass every per-shard check, and only the
    /// parity check finds them. With 4+2 and 8+3 one such shard is named
    /// and rebuilt exactly; with 2+1 (one parity shard) the mismatch is
    /// reported without guessing which shard is wrong.
    #[test]
    fn a_deep_scrub_re_encodes_partially_written_objects_and_finds_silent_damage() {
        let coll = CollectionId::pg(1, 0);
        for (k, m) in [(2u32, 1u32), (4, 2), (8, 3)] {
            let shape = shape(k, m);
            let backend = EcBackend::new(&shape).expect("shape");
            let layout = *backend.layout();
            let interval = crate::Interval {
                epoch_started: cairn_types::Epoch(1),
                up: (0..k + m).map(OsdId).collect(),
                acting: (0..k + m).map(OsdId).collect(),
                primary: Some(OsdId(0)),
                min_size: k + 1,
                size: k + m,
                ec: Some(shape.clone()),
            };
            let n = k + m;
            // Big enough for several parity-check windows.
            let size = 3 * PARITY_CHECK_WINDOW_BYTES * u64::from(k) / u64::from(n) + 20_777;
            let data: Vec<u8> = (0..size).map(|i| (i * 13 + u64::from(k)) as u8).collect();
            for victim in 0..n {
                let stores = stores(n);
                apply(
                    &stores,
                    &backend.plan_write(write_full(&data, 1)).expect("plan"),
                );
                // A partial write of data shard 1 and the parity (its
                // bytes unchanged: only the seals matter here), as
                // `delta_writes` and `partial_writes` leave them.
                let touched: BTreeSet<u32> = std::iter::once(1).chain(k..n).collect();
                for &i in &touched {
                    let store = &stores[i as usize];
                    let xattrs = store.xattrs(coll, &key()).expect("xattrs");
                    let mut meta =
                        ShardMeta::decode(&xattrs[EC_META_XATTR]).expect("shard metadata");
                    meta.crc = None;
                    let txn = Transaction::new(coll)
                        .with(Op::SetXattrs {
                            object: key(),
                            xattrs: BTreeMap::from([(
                                Bytes::from_static(EC_META_XATTR),
                                meta.encode(),
                            )]),
                        })
                        .with(Op::SetVersion {
                            object: key(),
                            version: 2,
                        });
                    store.apply(txn).expect("unseal");
                }
                for i in (0..n).filter(|i| !touched.contains(i)) {
                    let txn = Transaction::new(coll).with(Op::SetVersion {
                        object: key(),
                        version: 2,
                    });
                    stores[i as usize].apply(txn).expect("version");
                }
                let before: Vec<_> = (0..n)
                    .map(|i| {
                        crate::daemon::read_object_state(&stores[i as usize], coll, &key().name)
                            .expect("readable")
                            .expect("present")
                    })
                    .collect();
                // Silent damage: other bytes, written properly, in the
                // middle window.
                let len = before[victim as usize].data.len();
                let at = len / 2;
                let garbage: Vec<u8> = before[victim as usize].data[at..at + 64]
                    .iter()
                    .map(|b| b ^ 0xa5)
                    .collect();
                let txn = Transaction::new(coll).with(Op::Write {
                    object: key(),
                    offset: at as u64,
                    data: CheckedBytes::summed(Bytes::from(garbage)),
                });
                stores[victim as usize].apply(txn).expect("rewrite");
                let what = format!("{k}+{m}, damage on shard {victim}");

                let maps = deep_scrub_maps(&stores);
                let found = backend.compare_scrub_maps(&maps, OsdId(0));
                let positions: BTreeMap<OsdId, u32> = (0..n).map(|i| (OsdId(i), i)).collect();
                let checks = crate::scrub::parity_checks(&maps, &positions, &found);
                if !touched.contains(&victim) {
                    // A sealed shard: its own crc32c gives it away, and
                    // the object is not re-encoded (it is already found).
                    assert_eq!(found.len(), 1, "{what}: {found:?}");
                    assert_eq!(found[0].bad, BTreeSet::from([OsdId(victim)]), "{what}");
                    assert!(checks.is_empty(), "{what}: {checks:?}");
                    continue;
                }
                assert!(found.is_empty(), "{what}: the maps see nothing: {found:?}");
                assert_eq!(checks.len(), 1, "{what}");
                let sealed: BTreeSet<u32> = (0..n).filter(|i| !touched.contains(i)).collect();
                assert_eq!(checks[0].sealed, sealed, "{what}");
                let local = local_object(&stores[0], coll, &key(), &layout)
                    .expect("readable")
                    .expect("present");
                let windows = parity_windows(&layout, local.chunk, local.size);
                assert!(windows.len() >= 3, "{what}: {windows:?}");
                let mut verdicts = Vec::new();
                for window in &windows {
                    let got: BTreeMap<u32, Served> = (0..n)
                        .map(|i| {
                            let ranges = [(window.start, window.end - window.start)];
                            let served = serve_shard_read(
                                &stores[i as usize],
                                coll,
                                &key(),
                                i,
                                2,
                                &ranges,
                                false,
                            )
                            .expect("served");
                            (i, served)
                        })
                        .collect();
                    let verdict = parity_verdict(
                        &layout,
                        &*backend.codec,
                        &interval,
                        &checks[0],
                        (local.chunk, local.size),
                        window,
                        &got,
                    )
                    .expect("checked");
                    verdicts.push(verdict);
                }
                let found: Vec<&Inconsistency> = verdicts.iter().flatten().collect();
                assert_eq!(found.len(), 1, "{what}: one window holds the damage");
                if m == 1 {
                    let unsealed: BTreeSet<OsdId> = touched.iter().map(|i| OsdId(*i)).collect();
                    assert_eq!(found[0].bad, unsealed, "{what}");
                    assert_eq!(found[0].auth, None, "{what}: no guess");
                    continue;
                }
                assert_eq!(found[0].bad, BTreeSet::from([OsdId(victim)]), "{what}");
                let auth = found[0].auth.expect("repairable");
                assert_ne!(auth, OsdId(victim), "{what}");
                let whole =
                    |i: u32| serve_shard_read(&stores[i as usize], coll, &key(), i, 0, &[], true);
                // Repair reads the others (the scrub marked the victim lacking).
                let sources: Sources = (0..n)
                    .filter(|i| *i != victim)
                    .map(|i| (i, whole(i)))
                    .collect();
                let rebuilt =
                    rebuild_for_push(&layout, &*backend.codec, &sources, &[victim], Some(2))
                        .expect("rebuilt")
                        .expect("the object exists");
                assert_eq!(
                    rebuilt[0].1.data, before[victim as usize].data,
                    "{what}: rebuilt as written"
                );
            }
        }
    }

    /// Small overwrites of wide codes go by parity delta: random writes and
    /// zeroings inside whole stripe rows of 4+2 and 8+3 objects leave every
    /// shard what the same ops on a byte vector give, write only the data
    /// shards they change (and the parity), and undo exactly; 2+1, where a
    /// delta reads as much as a rewrite, and writes past whole rows, take
    /// the rewrite.
    #[test]
    fn small_overwrites_of_wide_codes_update_parity_by_delta() {
        let coll = CollectionId::pg(1, 0);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |below: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % below.max(1)
        };
        let layout21 = StripeLayout::new(2, 1, 4096).expect("layout");
        let one = |offset: u64| {
            vec![Op::Write {
                object: key(),
                offset,
                data: CheckedBytes::summed(Bytes::from(vec![7u8; 100])),
            }]
        };
        let w21 = layout21.stripe_width();
        assert_eq!(plan_delta(&layout21, 10 * w21, 4096, &one(5000)), None);
        for (k, m) in [(4u32, 2u32), (8, 3)] {
            let backend = EcBackend::new(&shape(k, m)).expect("shape");
            let layout = *backend.layout();
            let width = layout.stripe_width();
            assert!(plan_delta(&layout, 10 * width, 4096, &one(5000)).is_some());
            assert_eq!(
                plan_delta(&layout, 10 * width + 5, 4096, &one(10 * width)),
                None
            );
            assert_eq!(plan_delta(&layout, 10 * width, 1024, &one(5000)), None);
            let truncate = vec![Op::Truncate {
                object: key(),
                size: 5,
            }];
            assert_eq!(plan_delta(&layout, 10 * width, 4096, &truncate), None);
            let whole_row = vec![Op::Write {
                object: key(),
                offset: 0,
                data: CheckedBytes::summed(Bytes::from(vec![1u8; width as usize])),
            }];
            assert_eq!(plan_delta(&layout, 10 * width, 4096, &whole_row), None);
            for case in 0..12u64 {
                let stores = stores(k + m);
                let size = (6 + case % 3) * width + [0, 700][case as usize % 2];
                let mut model: Vec<u8> = (0..size).map(|i| (i * 7 + case) as u8).collect();
                apply(
                    &stores,
                    &backend.plan_write(write_full(&model, 1)).expect("plan"),
                );
                let whole = size / width * width;
                for (version, step) in (2..).zip(0..6) {
                    let mut ops = Vec::new();
                    // Within one chunk each (4+2: one op, so a delta's
                    // 1 + 2 reads beat a rewrite's 4; 8+3: up to two).
                    let count = if k == 4 { 1 } else { 1 + next(2) };
                    for _ in 0..count {
                        let n = next(500) + 1;
                        let offset = next(whole / 4096) * 4096 + next(4096 - n);
                        let fill = u8::try_from(next(255) + 1).expect("a byte");
                        let (from, to) = (offset as usize, (offset + n) as usize);
                        if next(4) == 0 {
                            model[from..to].fill(0);
                            ops.push(Op::Zero {
                                object: key(),
                                offset,
                                length: n,
                            });
                        } else {
                            model[from..to].fill(fill);
                            ops.push(Op::Write {
                                object: key(),
                                offset,
                                data: CheckedBytes::summed(Bytes::from(vec![fill; n as usize])),
                            });
                        }
                    }
                    let what = format!("{k}+{m} case {case} step {step}: {ops:?}");
                    let local = local_object(&stores[0], coll, &key(), &layout)
                        .expect("readable")
                        .expect("present");
                    let Some(plan) = plan_delta(&layout, local.size, local.chunk, &ops) else {
                        panic!("{what}: no delta plan");
                    };
                    let old: BTreeMap<u32, Vec<Bytes>> = plan
                        .reads(&layout)
                        .into_iter()
                        .map(|(shard, ranges)| {
                            let got = serve_shard_read(
                                &stores[shard as usize],
                                coll,
                                &key(),
                                shard,
                                local.version,
                                &ranges,
                                false,
                            )
                            .expect("old bytes");
                            (shard, got.parts)
                        })
                        .collect();
                    let writes =
                        delta_writes(&backend, &plan, local.size, &old, &key(), ops.clone())
                            .expect("planned");
                    let changed: BTreeSet<u32> = plan
                        .rows
                        .iter()
                        .flat_map(|r| r.chunks.iter().map(|c| c.0))
                        .chain(k..k + m)
                        .collect();
                    let req = ReqId {
                        client: 2,
                        tid: version,
                    };
                    let (writes, undo) =
                        with_undo(&layout, &key().name, req, Some(&local), None, &ops, writes)
                            .expect("undo planned");
                    let ShardWrites::PerShard(mut per) = writes else {
                        panic!("{what}: not per shard")
                    };
                    for (i, shard) in per.iter_mut().enumerate() {
                        let writes_data = shard.iter().any(|op| matches!(op, Op::Write { .. }));
                        assert_eq!(
                            writes_data,
                            changed.contains(&(i as u32)),
                            "{what}: shard {i}"
                        );
                        shard.push(Op::SetVersion {
                            object: key(),
                            version,
                        });
                    }
                    let writes = ShardWrites::PerShard(per);
                    write_undo_redo(&backend, &stores, &writes, &undo, &model, &what);
                }
            }
        }
    }

    /// Applies `writes` (the shards then hold `model`), undoes them on
    /// every shard (the shards are as before), applies them again and
    /// rolls them forward (the shards hold `model`, no stash is left).
    fn write_undo_redo(
        backend: &EcBackend,
        stores: &[MemStore],
        writes: &ShardWrites,
        undo: &[UndoRecord],
        model: &[u8],
        what: &str,
    ) {
        let before: Vec<_> = stores.iter().map(shard_state).collect();
        apply(stores, writes);
        assert_shards_hold(backend, stores, model, what);
        let undo_all = ShardWrites::PerShard(undo.iter().map(UndoRecord::undo_ops).collect());
        apply(stores, &undo_all);
        let after: Vec<_> = stores.iter().map(shard_state).collect();
        assert_eq!(after, before, "{what}: undone");
        apply(stores, writes);
        let forward = ShardWrites::PerShard(undo.iter().map(UndoRecord::forward_ops).collect());
        apply(stores, &forward);
        assert_shards_hold(backend, stores, model, what);
        for store in stores {
            let left = store
                .list(CollectionId::pg(1, 0), None, 10)
                .expect("list")
                .keys;
            assert_eq!(left, vec![key()], "{what}: a stash is left");
        }
    }

    /// A shard's object as a roll-back must restore it: data, version,
    /// xattrs (the shard metadata's crc aside, which a roll-back of a
    /// partial write leaves unknown).
    fn shard_state(store: &MemStore) -> Option<(Bytes, u64, BTreeMap<Bytes, Bytes>)> {
        let coll = CollectionId::pg(1, 0);
        let stat = store.stat(coll, &key()).ok()?;
        let data = store
            .read(coll, &key(), ReadOptions::default())
            .expect("readable");
        let mut xattrs = store.xattrs(coll, &key()).expect("xattrs");
        if let Some(meta) = xattrs.get_mut(EC_META_XATTR) {
            let mut m = ShardMeta::decode(meta).expect("meta");
            m.crc = None;
            *meta = m.encode();
        }
        Some((data, stat.version, xattrs))
    }

    /// The stripes a partial write rewrites: only those it changes, the
    /// one a truncate cuts, none past the new end; small objects whole.
    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn a_partial_write_rewrites_only_the_stripes_it_changes() {
        let layout = StripeLayout::new(4, 2, 4096).expect("layout");
        let w = layout.stripe_width();
        let su = layout.stripe_unit;
        let data = |n: usize| CheckedBytes::summed(Bytes::from(vec![1u8; n]));
        let write = |offset: u64, n: usize| Op::Write {
            object: key(),
            offset,
            data: data(n),
        };
        let big = 100 * w;
        assert_eq!(
            plan_partial(&layout, big, su, &[write(5 * w + 10, 4096)]),
            Ok(PartialRead::Rows(vec![5..6]))
        );
        assert_eq!(
            plan_partial(&layout, big, su, &[write(5 * w - 10, 20)]),
            Ok(PartialRead::Rows(vec![4..6]))
        );
        let append = Op::Append {
            object: key(),
            data: data(10),
        };
        assert_eq!(
            plan_partial(&layout, big + 5, su, &[append]),
            Ok(PartialRead::Rows(vec![100..101]))
        );
        let cut = Op::Truncate {
            object: key(),
            size: 50 * w + 7,
        };
        assert_eq!(
            plan_partial(&layout, big, su, &[cut]),
            Ok(PartialRead::Rows(vec![50..51]))
        );
        let grow = Op::Truncate {
            object: key(),
            size: 200 * w,
        };
        assert_eq!(
            plan_partial(&layout, big, su, &[grow]),
            Ok(PartialRead::Rows(vec![])),
            "zeros past the end need no stripe rewritten"
        );
        assert_eq!(
            plan_partial(&layout, 3000, layout.chunk_for(3000), &[write(0, 1)]),
            Ok(PartialRead::Whole)
        );
        assert_eq!(
            PartialRead::Rows(vec![5..6]).reads(&layout, big),
            vec![5 * w..6 * w]
        );
    }
}

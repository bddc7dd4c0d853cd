//! Compound operations: [`WriteOp`] and [`ReadOp`], built up and then run
//! on one object in one round trip by [`crate::Client::operate`] and
//! [`crate::Client::operate_read`] (like librados' `ObjectWriteOperation`
//! and `ObjectReadOperation`).
//!
//! A write's guards are checked against the object's state before it, then
//! its ops apply in order, atomically (one PG log entry, on every copy or
//! none); a failed guard is named by its index and changes nothing. A
//! read's ops see one state of the object.

use bytes::Bytes;
use cairn_proto::osd::{GuardWire, OpKind, OpOutput};
use serde_bytes::ByteBuf;
use std::collections::BTreeMap;

/// A condition on an object's state before an operation; a guarded
/// operation fails [`crate::ClientError::CompareFailed`] if it does not
/// hold, and changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The object's version is this one (0: the object does not exist).
    Version(u64),
    /// Xattr `name` has this value (`None`: it is absent).
    Xattr { name: Bytes, value: Option<Bytes> },
    /// The object exists.
    Exists,
    /// The object does not exist.
    NotExists,
    /// Omap `key` has this value (`None`: it is absent).
    OmapKey { key: Bytes, value: Option<Bytes> },
}

fn buf(b: &[u8]) -> ByteBuf {
    ByteBuf::from(b.to_vec())
}

impl From<Guard> for GuardWire {
    fn from(guard: Guard) -> GuardWire {
        match guard {
            Guard::Version(v) => GuardWire::Version(v),
            Guard::Xattr { name, value } => GuardWire::Xattr {
                name: buf(&name),
                value: value.as_deref().map(buf),
            },
            Guard::Exists => GuardWire::Exists,
            Guard::NotExists => GuardWire::NotExists,
            Guard::OmapKey { key, value } => GuardWire::OmapKey {
                key: buf(&key),
                value: value.as_deref().map(buf),
            },
        }
    }
}

/// Guards and writes to apply to one object atomically. Build it, then
/// pass it to [`crate::Client::operate`].
#[derive(Clone, Debug, Default)]
pub struct WriteOp {
    pub(crate) guards: Vec<GuardWire>,
    pub(crate) ops: Vec<OpKind>,
    pub(crate) payloads: Vec<Bytes>,
}

impl WriteOp {
    #[must_use]
    pub fn new() -> WriteOp {
        WriteOp::default()
    }

    /// Adds a guard (checked before any op, in the order added).
    #[must_use]
    pub fn guard(mut self, guard: Guard) -> WriteOp {
        self.guards.push(guard.into());
        self
    }

    fn op(mut self, op: OpKind) -> WriteOp {
        self.ops.push(op);
        self
    }

    fn payload_op(mut self, op: OpKind, data: Bytes) -> WriteOp {
        if !data.is_empty() {
            self.payloads.push(data);
        }
        self.op(op)
    }

    /// Creates the object empty if it is missing; `exclusive`: fails
    /// [`crate::ClientError::Exists`] if it is there.
    #[must_use]
    pub fn create(self, exclusive: bool) -> WriteOp {
        self.op(OpKind::Create { exclusive })
    }

    /// Replaces the object's data.
    #[must_use]
    pub fn write_full(self, data: Bytes) -> WriteOp {
        let len = data.len() as u64;
        self.payload_op(OpKind::WriteFull { len }, data)
    }

    /// Writes `data` at `offset` (a gap reads as zeros).
    #[must_use]
    pub fn write(self, offset: u64, data: Bytes) -> WriteOp {
        let len = data.len() as u64;
        self.payload_op(OpKind::Write { offset, len }, data)
    }

    #[must_use]
    pub fn append(self, data: Bytes) -> WriteOp {
        let len = data.len() as u64;
        self.payload_op(OpKind::Append { len }, data)
    }

    /// Sets the size, cutting or extending with zeros.
    #[must_use]
    pub fn truncate(self, size: u64) -> WriteOp {
        self.op(OpKind::Truncate { size })
    }

    /// Zeros the part of the range within the object.
    #[must_use]
    pub fn zero(self, offset: u64, length: u64) -> WriteOp {
        self.op(OpKind::Zero { offset, length })
    }

    /// Removes the object (it must exist at that point).
    #[must_use]
    pub fn remove(self) -> WriteOp {
        self.op(OpKind::Remove)
    }

    #[must_use]
    pub fn set_xattr(self, name: &[u8], value: &[u8]) -> WriteOp {
        self.op(OpKind::SetXattr {
            name: buf(name),
            value: buf(value),
        })
    }

    /// Removes xattr `name` (the object must exist).
    #[must_use]
    pub fn remove_xattr(self, name: &[u8]) -> WriteOp {
        self.op(OpKind::RemoveXattr { name: buf(name) })
    }

    #[must_use]
    pub fn omap_set<'a>(self, entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> WriteOp {
        let entries = entries.into_iter().map(|(k, v)| (buf(k), buf(v))).collect();
        self.op(OpKind::OmapSet { entries })
    }

    /// Removes omap keys (the object must exist; absent keys are fine).
    #[must_use]
    pub fn omap_remove<'a>(self, keys: impl IntoIterator<Item = &'a [u8]>) -> WriteOp {
        let keys = keys.into_iter().map(buf).collect();
        self.op(OpKind::OmapRemove { keys })
    }

    /// Removes every omap entry (the object must exist).
    #[must_use]
    pub fn omap_clear(self) -> WriteOp {
        self.op(OpKind::OmapClear)
    }

    #[must_use]
    pub fn omap_set_header(self, header: &[u8]) -> WriteOp {
        self.op(OpKind::OmapSetHeader {
            header: buf(header),
        })
    }

    /// The payload as one data segment: the single payload as it is, or
    /// several concatenated (in op order, as the ops' lengths say).
    pub(crate) fn data(&self) -> Bytes {
        match self.payloads.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = Vec::with_capacity(many.iter().map(Bytes::len).sum());
                for part in many {
                    all.extend_from_slice(part);
                }
                Bytes::from(all)
            }
        }
    }
}

/// Reads of one object, answered together from one state of it. Build it,
/// then pass it to [`crate::Client::operate_read`].
#[derive(Clone, Debug, Default)]
pub struct ReadOp {
    pub(crate) guards: Vec<GuardWire>,
    pub(crate) ops: Vec<OpKind>,
}

impl ReadOp {
    #[must_use]
    pub fn new() -> ReadOp {
        ReadOp::default()
    }

    /// Adds a guard: the reads are answered only if it holds.
    #[must_use]
    pub fn guard(mut self, guard: Guard) -> ReadOp {
        self.guards.push(guard.into());
        self
    }

    fn op(mut self, op: OpKind) -> ReadOp {
        self.ops.push(op);
        self
    }

    /// Answered by [`ReadResult::Stat`].
    #[must_use]
    pub fn stat(self) -> ReadOp {
        self.op(OpKind::Stat)
    }

    /// `length` bytes (`None`: to the end) from `offset`; answered by
    /// [`ReadResult::Data`].
    #[must_use]
    pub fn read(self, offset: u64, length: Option<u64>) -> ReadOp {
        self.op(OpKind::Read { offset, length })
    }

    /// Every xattr; answered by [`ReadResult::Xattrs`].
    #[must_use]
    pub fn xattrs(self) -> ReadOp {
        self.op(OpKind::GetXattrs)
    }

    /// One xattr; answered by [`ReadResult::Value`].
    #[must_use]
    pub fn xattr(self, name: &[u8]) -> ReadOp {
        self.op(OpKind::GetXattr { name: buf(name) })
    }

    /// At most `limit` omap entries with keys after `after`, in key order;
    /// answered by [`ReadResult::Omap`].
    #[must_use]
    pub fn omap_range(self, after: Option<&[u8]>, limit: u32) -> ReadOp {
        self.op(OpKind::OmapGetRange {
            after: after.map(buf),
            limit,
        })
    }

    /// The values of those of `keys` the omap holds; answered by
    /// [`ReadResult::Omap`].
    #[must_use]
    pub fn omap_get<'a>(self, keys: impl IntoIterator<Item = &'a [u8]>) -> ReadOp {
        let keys = keys.into_iter().map(buf).collect();
        self.op(OpKind::OmapGet { keys })
    }

    /// The omap header; answered by [`ReadResult::Value`].
    #[must_use]
    pub fn omap_header(self) -> ReadOp {
        self.op(OpKind::OmapGetHeader)
    }
}

/// What an object's size and version are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectStat {
    pub size_bytes: u64,
    pub version: u64,
}

/// One read's answer, in the order of the [`ReadOp`]'s ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    Stat(ObjectStat),
    Data(Bytes),
    Xattrs(BTreeMap<Bytes, Bytes>),
    Omap(Vec<(Bytes, Bytes)>),
    /// An xattr or the omap header; `None`: absent.
    Value(Option<Bytes>),
}

fn unbuf(b: ByteBuf) -> Bytes {
    Bytes::from(b.into_vec())
}

/// Pairs a read reply's outputs with its data segment.
///
/// # Errors
/// Why the reply does not fit the request.
pub(crate) fn read_results(
    outputs: Vec<OpOutput>,
    data: &Bytes,
    ops: usize,
) -> Result<Vec<ReadResult>, String> {
    if outputs.len() != ops {
        return Err(format!("{} outputs for {ops} reads", outputs.len()));
    }
    let mut at = 0usize;
    let mut results = Vec::with_capacity(outputs.len());
    for output in outputs {
        results.push(match output {
            OpOutput::Stat {
                size_bytes,
                version,
            } => ReadResult::Stat(ObjectStat {
                size_bytes,
                version,
            }),
            OpOutput::Data { len } => {
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| at.checked_add(len))
                    .filter(|end| *end <= data.len())
                    .ok_or_else(|| format!("{len} data bytes past the reply's {}", data.len()))?;
                let part = data.slice(at..end);
                at = end;
                ReadResult::Data(part)
            }
            OpOutput::Xattrs(entries) => ReadResult::Xattrs(
                entries
                    .into_iter()
                    .map(|(k, v)| (unbuf(k), unbuf(v)))
                    .collect(),
            ),
            OpOutput::Omap(entries) => ReadResult::Omap(
                entries
                    .into_iter()
                    .map(|(k, v)| (unbuf(k), unbuf(v)))
                    .collect(),
            ),
            OpOutput::Value(value) => ReadResult::Value(value.map(unbuf)),
            other => return Err(format!("{other:?} for a read")),
        });
    }
    if at != data.len() {
        return Err(format!("{} data bytes, {at} claimed", data.len()));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_join_in_op_order_and_lengths_match() {
        let op = WriteOp::new()
            .write_full(Bytes::from_static(b"abc"))
            .set_xattr(b"k", b"v")
            .append(Bytes::from_static(b"de"))
            .write(10, Bytes::new());
        assert_eq!(op.data(), Bytes::from_static(b"abcde"));
        let lens: u64 = op.ops.iter().map(OpKind::payload_len).sum();
        assert_eq!(lens, 5);
        let single = WriteOp::new().write_full(Bytes::from_static(b"x"));
        assert_eq!(single.data(), Bytes::from_static(b"x"));
    }

    #[test]
    fn read_results_split_the_data_segment_and_refuse_misfits() {
        let data = Bytes::from_static(b"helloworld");
        let outputs = vec![
            OpOutput::Data { len: 5 },
            OpOutput::Value(None),
            OpOutput::Data { len: 5 },
        ];
        let results = read_results(outputs.clone(), &data, 3).expect("fits");
        assert_eq!(results[0], ReadResult::Data(Bytes::from_static(b"hello")));
        assert_eq!(results[1], ReadResult::Value(None));
        assert_eq!(results[2], ReadResult::Data(Bytes::from_static(b"world")));
        assert!(read_results(outputs.clone(), &data, 2).is_err());
        assert!(read_results(outputs, &Bytes::from_static(b"short"), 3).is_err());
        let past = vec![OpOutput::Data { len: u64::MAX }];
        assert!(read_results(past, &data, 1).is_err());
        let written = vec![OpOutput::Written { object_version: 1 }];
        assert!(read_results(written, &Bytes::new(), 1).is_err());
    }
}

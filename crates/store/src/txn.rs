//! Transactions: ordered operations on the objects and metadata keys of one
//! collection, applied atomically.

use crate::limits;
use crate::{CollectionId, ObjectKey, StoreError};
use bytes::Bytes;
use cairn_types::checked::CheckedBytes;
use std::collections::BTreeMap;

/// One operation. Operations that write data, xattrs, omap entries or a
/// version create the object if it is missing; `Remove`, `Clone` (source),
/// `RemoveXattr` and the omap removals need it to exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates the transaction's collection; it must not exist.
    CreateCollection,
    /// Removes the transaction's collection and its metadata keys; it must
    /// hold no objects.
    RemoveCollection,
    /// Moves the objects whose `hash & (2^bits - 1) == value` to `to`,
    /// creating it if needed (a PG split).
    SplitCollection {
        to: CollectionId,
        bits: u8,
        value: u32,
    },
    /// Writes `data` at `offset`, extending the object if needed (a gap
    /// reads as zeros).
    Write {
        object: ObjectKey,
        offset: u64,
        data: CheckedBytes,
    },
    /// Replaces the object's data.
    WriteFull {
        object: ObjectKey,
        data: CheckedBytes,
    },
    /// Writes at the object's end.
    Append {
        object: ObjectKey,
        data: CheckedBytes,
    },
    /// Sets the size, cutting or extending with zeros.
    Truncate {
        object: ObjectKey,
        size: u64,
    },
    /// Zeros the part of a range that lies within the object (the size does
    /// not change; a missing object is created empty).
    Zero {
        object: ObjectKey,
        offset: u64,
        length: u64,
    },
    /// Creates the object empty if it is missing.
    Touch {
        object: ObjectKey,
    },
    /// Removes the object with its xattrs and omap.
    Remove {
        object: ObjectKey,
    },
    /// Makes `to` a copy of `from` (data, xattrs, omap, version).
    Clone {
        from: ObjectKey,
        to: ObjectKey,
    },
    /// Writes the bytes of `from` in `[offset, offset + length)` that lie
    /// within its size at `to_offset` of `to`, as a `Write` of them would
    /// (`to` is created if missing; its xattrs, omap and version stay).
    CloneRange {
        from: ObjectKey,
        to: ObjectKey,
        offset: u64,
        length: u64,
        to_offset: u64,
    },
    /// Moves `from` (data, xattrs, omap, version) to `to`, replacing
    /// anything there; `from` no longer exists. Only metadata moves.
    Rename {
        from: ObjectKey,
        to: ObjectKey,
    },
    SetVersion {
        object: ObjectKey,
        version: u64,
    },
    SetXattrs {
        object: ObjectKey,
        xattrs: BTreeMap<Bytes, Bytes>,
    },
    RemoveXattr {
        object: ObjectKey,
        name: Bytes,
    },
    OmapSet {
        object: ObjectKey,
        entries: BTreeMap<Bytes, Bytes>,
    },
    OmapRemove {
        object: ObjectKey,
        keys: Vec<Bytes>,
    },
    /// Removes omap keys in `[start, end)`.
    OmapRemoveRange {
        object: ObjectKey,
        start: Bytes,
        end: Bytes,
    },
    OmapClear {
        object: ObjectKey,
    },
    /// Sets a key of the collection's own key space.
    MetaSet {
        key: Bytes,
        value: Bytes,
    },
    MetaRemove {
        key: Bytes,
    },
}

impl Op {
    /// The object the operation changes, if any.
    #[must_use]
    pub fn object(&self) -> Option<&ObjectKey> {
        match self {
            Op::Write { object, .. }
            | Op::WriteFull { object, .. }
            | Op::Append { object, .. }
            | Op::Truncate { object, .. }
            | Op::Zero { object, .. }
            | Op::Touch { object }
            | Op::Remove { object }
            | Op::SetVersion { object, .. }
            | Op::SetXattrs { object, .. }
            | Op::RemoveXattr { object, .. }
            | Op::OmapSet { object, .. }
            | Op::OmapRemove { object, .. }
            | Op::OmapRemoveRange { object, .. }
            | Op::OmapClear { object } => Some(object),
            Op::Clone { to, .. } | Op::CloneRange { to, .. } | Op::Rename { to, .. } => Some(to),
            Op::CreateCollection
            | Op::RemoveCollection
            | Op::SplitCollection { .. }
            | Op::MetaSet { .. }
            | Op::MetaRemove { .. } => None,
        }
    }

    /// Payload bytes the operation brings (data, xattrs, omap, metadata).
    #[must_use]
    pub fn payload_bytes(&self) -> u64 {
        let map =
            |m: &BTreeMap<Bytes, Bytes>| m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        match self {
            Op::Write { data, .. } | Op::WriteFull { data, .. } | Op::Append { data, .. } => {
                data.len() as u64
            }
            Op::SetXattrs { xattrs, .. } => map(xattrs),
            Op::OmapSet { entries, .. } => map(entries),
            Op::MetaSet { key, value } => (key.len() + value.len()) as u64,
            _ => 0,
        }
    }

    /// Whether the operation can only shrink what is stored, so it is
    /// allowed on a full store.
    #[must_use]
    pub fn frees_space(&self) -> bool {
        matches!(
            self,
            Op::Remove { .. }
                | Op::RemoveCollection
                | Op::Truncate { size: 0, .. }
                | Op::RemoveXattr { .. }
                | Op::OmapRemove { .. }
                | Op::OmapRemoveRange { .. }
                | Op::OmapClear { .. }
                | Op::MetaRemove { .. }
        )
    }
}

/// Operations on one collection, applied all or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    pub collection: CollectionId,
    pub ops: Vec<Op>,
}

impl Transaction {
    #[must_use]
    pub fn new(collection: CollectionId) -> Transaction {
        Transaction {
            collection,
            ops: Vec::new(),
        }
    }

    /// Appends an operation (builder style).
    #[must_use]
    pub fn with(mut self, op: Op) -> Transaction {
        self.ops.push(op);
        self
    }

    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Payload bytes of all operations.
    #[must_use]
    pub fn payload_bytes(&self) -> u64 {
        self.ops.iter().map(Op::payload_bytes).sum()
    }

    /// Whether every operation only frees space.
    #[must_use]
    pub fn only_frees_space(&self) -> bool {
        self.ops.iter().all(Op::frees_space)
    }

    /// Checks sizes and names against the limits, before anything is
    /// written.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming the first bad field.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |why: String| Err(StoreError::Invalid(why));
        if self.ops.is_empty() {
            return bad("empty transaction".into());
        }
        if self.ops.len() > limits::TXN_OPS_MAX {
            return bad(format!(
                "{} operations, limit {}",
                self.ops.len(),
                limits::TXN_OPS_MAX
            ));
        }
        for op in &self.ops {
            if let Some(object) = op.object() {
                check_name(object)?;
            }
            validate_op(op)?;
        }
        Ok(())
    }
}

fn check_name(object: &ObjectKey) -> Result<(), StoreError> {
    if object.name.is_empty() || object.name.len() > limits::OBJECT_NAME_BYTES_MAX {
        return Err(StoreError::Invalid(format!(
            "object name of {} bytes (1 to {} allowed)",
            object.name.len(),
            limits::OBJECT_NAME_BYTES_MAX
        )));
    }
    Ok(())
}

fn check_end(offset: u64, length: u64) -> Result<(), StoreError> {
    match offset.checked_add(length) {
        Some(end) if end <= limits::OBJECT_SIZE_BYTES_MAX => Ok(()),
        _ => Err(StoreError::Invalid(format!(
            "range at {offset} of {length} bytes passes the {}-byte object limit",
            limits::OBJECT_SIZE_BYTES_MAX
        ))),
    }
}

fn check_len(what: &str, len: usize, max: usize) -> Result<(), StoreError> {
    if len > max {
        return Err(StoreError::Invalid(format!(
            "{what} of {len} bytes exceeds {max}"
        )));
    }
    Ok(())
}

fn validate_op(op: &Op) -> Result<(), StoreError> {
    match op {
        Op::Write { offset, data, .. } => check_end(*offset, data.len() as u64),
        Op::WriteFull { data, .. } | Op::Append { data, .. } => check_end(0, data.len() as u64),
        Op::Truncate { size, .. } => check_end(0, *size),
        Op::Zero { offset, length, .. } => check_end(*offset, *length),
        Op::SplitCollection { bits, .. } if *bits > 32 => Err(StoreError::Invalid(format!(
            "split by {bits} bits (at most 32)"
        ))),
        Op::Clone { from, .. } | Op::Rename { from, .. } => check_name(from),
        Op::CloneRange {
            from,
            offset,
            length,
            to_offset,
            ..
        } => {
            check_name(from)?;
            check_end(*offset, *length)?;
            check_end(*to_offset, *length)
        }
        Op::SetXattrs { xattrs, .. } => xattrs.iter().try_for_each(|(k, v)| {
            check_len("xattr name", k.len(), limits::XATTR_NAME_BYTES_MAX)?;
            check_len("xattr value", v.len(), limits::XATTR_VALUE_BYTES_MAX)
        }),
        Op::RemoveXattr { name, .. } => {
            check_len("xattr name", name.len(), limits::XATTR_NAME_BYTES_MAX)
        }
        Op::OmapSet { entries, .. } => entries.iter().try_for_each(|(k, v)| {
            check_len("omap key", k.len(), limits::OMAP_KEY_BYTES_MAX)?;
            check_len("omap value", v.len(), limits::OMAP_VALUE_BYTES_MAX)
        }),
        Op::OmapRemove { keys, .. } => keys
            .iter()
            .try_for_each(|k| check_len("omap key", k.len(), limits::OMAP_KEY_BYTES_MAX)),
        Op::OmapRemoveRange { start, end, .. } => {
            check_len("omap key", start.len(), limits::OMAP_KEY_BYTES_MAX)?;
            check_len("omap key", end.len(), limits::OMAP_KEY_BYTES_MAX)
        }
        Op::MetaSet { key, value } => {
            check_len("metadata key", key.len(), limits::META_KEY_BYTES_MAX)?;
            check_len("metadata value", value.len(), limits::META_VALUE_BYTES_MAX)
        }
        Op::MetaRemove { key } => check_len("metadata key", key.len(), limits::META_KEY_BYTES_MAX),
        _ => Ok(()),
    }
}

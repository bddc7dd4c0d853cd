//! Roll-back records of erasure-coded writes: how a shard undoes a log
//! entry that peering finds on too few shards (docs/erasure-coding.md,
//! "No write hole").
//!
//! A shard of an erasure-coded object cannot be repaired from its peers
//! when fewer than `k` shards hold the version it is at, so a write cut
//! short by a crash (on some shards, not others) must be undone where it
//! landed. Every erasure-coded sub-write therefore keeps, in the same
//! transaction as the change, what undoing it takes:
//!
//! - a create keeps nothing (undo: remove the object);
//! - a write that replaces the whole shard (a full write, a truncate to
//!   zero, a remove) first renames the old shard to a *stash* object, which
//!   moves metadata only (undo: rename it back);
//! - a partial write copies the old bytes of the shard ranges it changes
//!   into the stash (undo: copy them back, cut the shard to its old length,
//!   restore the xattrs and the version it changed).
//!
//! The record ([`UndoRecord`]) sits under the entry's [`undo_key`] in the
//! PG collection's metadata. Once the entry is committed (durable on the
//! whole acting set, or adopted by an activation) the stash and the record
//! are dropped with the next transaction ([`forward_ops`]). Everything here
//! is pure: the PG core turns records into store ops.

use crate::log::{ReqId, Version};
use bytes::Bytes;
use cairn_store::{ObjectKey, Op};
use std::collections::BTreeMap;

/// Prefix of the roll-back records' metadata keys, followed by the
/// entry's version (epoch and sequence big-endian).
pub const UNDO_KEY_PREFIX: &[u8] = b"pgundo/";

/// Prefix of stash object names. Client object names may not begin with
/// it ([`crate::pg::valid_name`]), and listings, scans and scrubs skip it.
pub const STASH_NAME_PREFIX: &[u8] = b"\0cairn-stash/";

/// Format byte of an encoded [`UndoRecord`].
const UNDO_FORMAT: u8 = 1;

/// The metadata key of the roll-back record of the entry at `version`.
#[must_use]
pub fn undo_key(version: Version) -> Bytes {
    let mut key = Vec::with_capacity(UNDO_KEY_PREFIX.len() + 16);
    key.extend_from_slice(UNDO_KEY_PREFIX);
    key.extend_from_slice(&version.epoch.0.to_be_bytes());
    key.extend_from_slice(&version.seq.to_be_bytes());
    Bytes::from(key)
}

/// Whether an object name is the OSD's own (a stash), not a client's.
#[must_use]
pub fn is_internal(name: &[u8]) -> bool {
    name.starts_with(STASH_NAME_PREFIX)
}

/// The stash of request `req`'s write to `object`: named by the request
/// (unique among live writes, and known to every shard from the log
/// entry), hashed as the object is, so a PG split moves it with the object.
#[must_use]
pub fn stash_key(object: &Bytes, req: ReqId) -> ObjectKey {
    let mut name = Vec::with_capacity(STASH_NAME_PREFIX.len() + 16);
    name.extend_from_slice(STASH_NAME_PREFIX);
    name.extend_from_slice(&req.client.to_be_bytes());
    name.extend_from_slice(&req.tid.to_be_bytes());
    ObjectKey {
        hash: cairn_types::object_hash32(object),
        name: Bytes::from(name),
    }
}

/// What a shard kept of its old state before a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The object did not exist: undo removes it.
    Nothing,
    /// The whole old shard was renamed to the stash.
    Whole,
    /// The old bytes of these shard ranges `(offset, length)` were copied
    /// into the stash, one after another; the rest of the undo is in the
    /// record's `version`, `len` and `xattrs`.
    Ranges(Vec<(u64, u64)>),
}

/// How one shard undoes one erasure-coded log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndoRecord {
    pub object: Bytes,
    pub req: ReqId,
    pub keep: Keep,
    /// The object's version before the write (`Keep::Ranges`).
    pub version: u64,
    /// The shard's length before the write (`Keep::Ranges`).
    pub len: u64,
    /// The old value of every xattr the write changes (`None`: it did not
    /// exist), for `Keep::Ranges`.
    pub xattrs: BTreeMap<Bytes, Option<Bytes>>,
}

impl UndoRecord {
    /// The record of a write that created its object.
    #[must_use]
    pub fn created(object: Bytes, req: ReqId) -> UndoRecord {
        UndoRecord {
            object,
            req,
            keep: Keep::Nothing,
            version: 0,
            len: 0,
            xattrs: BTreeMap::new(),
        }
    }

    #[must_use]
    pub fn stash(&self) -> ObjectKey {
        stash_key(&self.object, self.req)
    }

    fn key(&self) -> ObjectKey {
        ObjectKey::new(self.object.clone())
    }

    /// Whether a stash object exists while the record does.
    pub fn has_stash(&self) -> bool {
        match &self.keep {
            Keep::Nothing => false,
            Keep::Whole => true,
            Keep::Ranges(ranges) => ranges.iter().any(|(_, len)| *len > 0),
        }
    }

    /// The ops that keep the old state, to run before the write's own.
    #[must_use]
    pub fn stash_ops(&self) -> Vec<Op> {
        let (key, stash) = (self.key(), self.stash());
        match &self.keep {
            Keep::Nothing => Vec::new(),
            Keep::Whole => vec![Op::Rename {
                from: key,
                to: stash,
            }],
            Keep::Ranges(ranges) => {
                let mut at = 0;
                let mut ops = Vec::with_capacity(ranges.len());
                for &(offset, length) in ranges.iter().filter(|(_, len)| *len > 0) {
                    ops.push(Op::CloneRange {
                        from: key.clone(),
                        to: stash.clone(),
                        offset,
                        length,
                        to_offset: at,
                    });
                    at += length;
                }
                ops
            }
        }
    }

    /// The ops that undo the write on this shard and drop what it kept,
    /// applied to the state the write left, in one transaction with the
    /// removal of the entry and its record (so a roll-back is never cut
    /// short, nor run twice).
    #[must_use]
    pub fn undo_ops(&self) -> Vec<Op> {
        let (key, stash) = (self.key(), self.stash());
        let mut ops = vec![Op::Touch {
            object: key.clone(),
        }];
        match &self.keep {
            Keep::Nothing => ops.push(Op::Remove { object: key }),
            Keep::Whole => {
                ops.push(Op::Remove {
                    object: key.clone(),
                });
                ops.push(Op::Rename {
                    from: stash,
                    to: key,
                });
            }
            Keep::Ranges(ranges) => {
                let mut at = 0;
                for &(offset, length) in ranges.iter().filter(|(_, len)| *len > 0) {
                    ops.push(Op::CloneRange {
                        from: stash.clone(),
                        to: key.clone(),
                        offset: at,
                        length,
                        to_offset: offset,
                    });
                    at += length;
                }
                ops.push(Op::Truncate {
                    object: key.clone(),
                    size: self.len,
                });
                let set: BTreeMap<Bytes, Bytes> = self
                    .xattrs
                    .iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone())))
                    .collect();
                if !set.is_empty() {
                    ops.push(Op::SetXattrs {
                        object: key.clone(),
                        xattrs: set,
                    });
                }
                for (name, _) in self.xattrs.iter().filter(|(_, v)| v.is_none()) {
                    ops.push(Op::RemoveXattr {
                        object: key.clone(),
                        name: name.clone(),
                    });
                }
                ops.push(Op::SetVersion {
                    object: key,
                    version: self.version,
                });
                if self.has_stash() {
                    ops.extend(drop_stash(stash));
                }
            }
        }
        ops
    }

    /// The ops that drop what the write kept, once it is committed.
    #[must_use]
    pub fn forward_ops(&self) -> Vec<Op> {
        if self.has_stash() {
            drop_stash(self.stash())
        } else {
            Vec::new()
        }
    }

    /// The stored form.
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(64 + self.object.len());
        out.push(UNDO_FORMAT);
        put_bytes(&mut out, &self.object);
        out.extend_from_slice(&self.req.client.to_le_bytes());
        out.extend_from_slice(&self.req.tid.to_le_bytes());
        match &self.keep {
            Keep::Nothing => out.push(0),
            Keep::Whole => out.push(1),
            Keep::Ranges(ranges) => {
                out.push(2);
                put_len(&mut out, ranges.len());
                for (offset, length) in ranges {
                    out.extend_from_slice(&offset.to_le_bytes());
                    out.extend_from_slice(&length.to_le_bytes());
                }
            }
        }
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        put_len(&mut out, self.xattrs.len());
        for (name, value) in &self.xattrs {
            put_bytes(&mut out, name);
            match value {
                Some(value) => {
                    out.push(1);
                    put_bytes(&mut out, value);
                }
                None => out.push(0),
            }
        }
        Bytes::from(out)
    }

    /// # Errors
    /// A description of what is wrong with the bytes.
    pub fn decode(bytes: &[u8]) -> Result<UndoRecord, String> {
        let mut r = Reader { bytes, at: 0 };
        match r.u8()? {
            UNDO_FORMAT => {}
            other => return Err(format!("undo record format {other} (this build reads 1)")),
        }
        let object = r.bytes()?;
        let req = ReqId {
            client: r.u64()?,
            tid: r.u64()?,
        };
        let keep = match r.u8()? {
            0 => Keep::Nothing,
            1 => Keep::Whole,
            2 => {
                let count = r.u32()?;
                let mut ranges = Vec::new();
                for _ in 0..count {
                    let offset = r.u64()?;
                    let length = r.u64()?;
                    if offset.checked_add(length).is_none() {
                        return Err(format!("range at {offset} of {length} bytes"));
                    }
                    ranges.push((offset, length));
                }
                Keep::Ranges(ranges)
            }
            other => return Err(format!("undo kind {other}")),
        };
        let version = r.u64()?;
        let len = r.u64()?;
        let count = r.u32()?;
        let mut xattrs = BTreeMap::new();
        for _ in 0..count {
            let name = r.bytes()?;
            let value = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?),
                other => return Err(format!("xattr flag {other}")),
            };
            xattrs.insert(name, value);
        }
        if r.at != bytes.len() {
            return Err(format!("{} bytes after the record", bytes.len() - r.at));
        }
        if object.is_empty() {
            return Err("undo record of an unnamed object".into());
        }
        Ok(UndoRecord {
            object,
            req,
            keep,
            version,
            len,
            xattrs,
        })
    }
}

/// Removes a stash if it is there.
fn drop_stash(stash: ObjectKey) -> Vec<Op> {
    vec![
        Op::Touch {
            object: stash.clone(),
        },
        Op::Remove { object: stash },
    ]
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("undo records are bounded by the store's limits");
    out.extend_from_slice(&len.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| format!("undo record cut short at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn bytes(&mut self) -> Result<Bytes, String> {
        let len = usize::try_from(self.u32()?).map_err(|e| e.to_string())?;
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::{CollectionId, MemStore, ObjectStore, ReadOptions, Transaction};
    use cairn_types::checked::CheckedBytes;

    const C: CollectionId = CollectionId(7);

    fn req() -> ReqId {
        ReqId { client: 3, tid: 9 }
    }

    fn name() -> Bytes {
        Bytes::from_static(b"obj")
    }

    fn submit(store: &MemStore, ops: Vec<Op>) {
        let mut txn = Transaction::new(C);
        txn.ops = ops;
        if !txn.ops.is_empty() {
            store.apply(txn).expect("applies");
        }
    }

    /// Everything a shard holds of the object: data, xattrs, version, and
    /// whether a stash is left.
    fn state(store: &MemStore) -> Option<(Bytes, BTreeMap<Bytes, Bytes>, u64)> {
        let key = ObjectKey::new(name());
        let stat = store.stat(C, &key).ok()?;
        let data = store.read(C, &key, ReadOptions::default()).expect("read");
        let xattrs = store.xattrs(C, &key).expect("xattrs");
        Some((data, xattrs, stat.version))
    }

    fn fresh(data: &[u8]) -> MemStore {
        let store = MemStore::new();
        store
            .apply(Transaction::new(C).with(Op::CreateCollection))
            .expect("collection");
        let key = ObjectKey::new(name());
        submit(
            &store,
            vec![
                Op::WriteFull {
                    object: key.clone(),
                    data: CheckedBytes::summed(Bytes::copy_from_slice(data)),
                },
                Op::SetXattrs {
                    object: key.clone(),
                    xattrs: BTreeMap::from([(
                        Bytes::from_static(b"user.a"),
                        Bytes::from_static(b"old"),
                    )]),
                },
                Op::SetVersion {
                    object: key,
                    version: 4,
                },
            ],
        );
        store
    }

    fn stash_left(store: &MemStore, record: &UndoRecord) -> bool {
        store.stat(C, &record.stash()).is_ok()
    }

    /// Applies `record`'s stash ops and `write`, then undoes, and checks the shard is as before with
    /// no stash left; then the same write rolled forward leaves no stash.
    fn round_trip(record: &UndoRecord, write: &[Op], before: &MemStore) {
        let old = state(before);
        let mut ops = record.stash_ops();
        ops.extend(write.iter().cloned());
        submit(before, ops);
        submit(before, record.undo_ops());
        assert_eq!(state(before), old, "{:?}", record.keep);
        assert!(!stash_left(before, record));
        let mut ops = record.stash_ops();
        ops.extend(write.iter().cloned());
        submit(before, ops);
        assert_ne!(state(before), old);
        submit(before, record.forward_ops());
        assert!(!stash_left(before, record));
    }

    #[test]
    fn every_kind_of_write_is_undone_exactly() {
        let key = ObjectKey::new(name());
        let data = |b: &'static [u8]| CheckedBytes::summed(Bytes::from_static(b));
        // A create.
        let store = MemStore::new();
        store
            .apply(Transaction::new(C).with(Op::CreateCollection))
            .expect("collection");
        let create = vec![Op::WriteFull {
            object: key.clone(),
            data: data(b"new"),
        }];
        round_trip(&UndoRecord::created(name(), req()), &create, &store);
        // A whole rewrite and a remove.
        let whole = UndoRecord {
            keep: Keep::Whole,
            ..UndoRecord::created(name(), req())
        };
        let rewrite = vec![
            Op::Touch {
                object: key.clone(),
            },
            Op::WriteFull {
                object: key.clone(),
                data: data(b"entirely new"),
            },
            Op::SetVersion {
                object: key.clone(),
                version: 9,
            },
        ];
        round_trip(&whole, &rewrite, &fresh(b"0123456789"));
        let remove = vec![
            Op::Touch {
                object: key.clone(),
            },
            Op::Remove {
                object: key.clone(),
            },
        ];
        round_trip(&whole, &remove, &fresh(b"0123456789"));
        // A partial write that changes bytes, extends the shard and sets an
        // xattr, and one that cuts it short.
        let ranges = UndoRecord {
            keep: Keep::Ranges(vec![(2, 3), (8, 2)]),
            version: 4,
            len: 10,
            xattrs: BTreeMap::from([
                (
                    Bytes::from_static(b"user.a"),
                    Some(Bytes::from_static(b"old")),
                ),
                (Bytes::from_static(b"user.b"), None),
            ]),
            ..UndoRecord::created(name(), req())
        };
        let partial = vec![
            Op::Write {
                object: key.clone(),
                offset: 2,
                data: data(b"xyz"),
            },
            Op::Write {
                object: key.clone(),
                offset: 8,
                data: data(b"tail beyond"),
            },
            Op::SetXattrs {
                object: key.clone(),
                xattrs: BTreeMap::from([
                    (Bytes::from_static(b"user.a"), Bytes::from_static(b"new")),
                    (Bytes::from_static(b"user.b"), Bytes::from_static(b"new")),
                ]),
            },
            Op::SetVersion {
                object: key.clone(),
                version: 9,
            },
        ];
        round_trip(&ranges, &partial, &fresh(b"0123456789"));
        let cut = UndoRecord {
            keep: Keep::Ranges(vec![(3, 7)]),
            xattrs: BTreeMap::new(),
            ..ranges.clone()
        };
        let truncate = vec![
            Op::Truncate {
                object: key.clone(),
                size: 3,
            },
            Op::SetVersion {
                object: key,
                version: 9,
            },
        ];
        round_trip(&cut, &truncate, &fresh(b"0123456789"));
    }

    #[test]
    fn records_round_trip_and_refuse_junk() {
        let record = UndoRecord {
            keep: Keep::Ranges(vec![(0, 4096), (65536, 10)]),
            version: 12,
            len: 70000,
            xattrs: BTreeMap::from([
                (Bytes::from_static(b"\0ec"), Some(Bytes::from_static(b"m"))),
                (Bytes::from_static(b"user.x"), None),
            ]),
            ..UndoRecord::created(name(), req())
        };
        for r in [
            record.clone(),
            UndoRecord::created(name(), req()),
            UndoRecord {
                keep: Keep::Whole,
                ..record.clone()
            },
        ] {
            assert_eq!(UndoRecord::decode(&r.encode()), Ok(r));
        }
        let bytes = record.encode();
        for cut in 0..bytes.len() {
            assert!(UndoRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(UndoRecord::decode(&longer).is_err());
        let mut format = bytes.to_vec();
        format[0] = 9;
        assert!(UndoRecord::decode(&format).is_err());
    }

    #[test]
    fn stashes_are_internal_and_follow_their_object() {
        let stash = stash_key(&name(), req());
        assert!(is_internal(&stash.name));
        assert!(!is_internal(b"obj"));
        assert_eq!(stash.hash, ObjectKey::new(name()).hash);
        assert_ne!(stash, stash_key(&name(), ReqId { client: 3, tid: 10 }));
        assert!(undo_key(Version::new(1, 2)) < undo_key(Version::new(1, 3)));
    }
}

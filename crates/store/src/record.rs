//! The on-disk metadata of [`crate::DiskStore`]: key layouts and checksummed,
//! versioned values, byte for byte as `docs/store-format.md` describes.
//!
//! Every value is `[format u8][crc32c u32 LE][body]`, the crc taken over the
//! key followed by the body, so a damaged value and a value under the wrong
//! key both read as [`StoreError::Corrupt`].

use crate::{CollectionId, ObjectKey, StoreError, limits};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format byte of every value written by this version.
pub const VALUE_FORMAT: u8 = 1;
const VALUE_HEADER_BYTES: usize = 5;

/// Wraps `body` for storing under `key`.
pub fn seal(key: &[u8], body: &[u8]) -> Vec<u8> {
    let crc = cairn_types::crc::crc32c_append(cairn_types::crc::crc32c(key), body);
    let mut out = Vec::with_capacity(VALUE_HEADER_BYTES + body.len());
    out.push(VALUE_FORMAT);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
    debug_assert_eq!(
        open(key, &out, "self-check").map(<[u8]>::len),
        Ok(body.len())
    );
    out
}

/// Checks a stored value against its key and returns the body.
///
/// # Errors
/// [`StoreError::Corrupt`] naming `what`.
pub fn open<'a>(key: &[u8], value: &'a [u8], what: &str) -> Result<&'a [u8], StoreError> {
    let corrupt = |why: &str| Err(StoreError::Corrupt(format!("{what}: {why}")));
    if value.len() < VALUE_HEADER_BYTES {
        return corrupt("metadata value truncated");
    }
    if value[0] != VALUE_FORMAT {
        return corrupt("unknown metadata value format");
    }
    let stored = u32::from_le_bytes([value[1], value[2], value[3], value[4]]);
    let body = &value[VALUE_HEADER_BYTES..];
    if cairn_types::crc::crc32c_append(cairn_types::crc::crc32c(key), body) != stored {
        return corrupt("metadata checksum mismatch");
    }
    Ok(body)
}

/// `objects` key: collection (u64 BE) ‖ hash (u32 BE) ‖ name. Sorts by
/// collection, then `(hash, name)`.
pub fn object_key(c: CollectionId, o: &ObjectKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(12 + o.name.len());
    key.extend_from_slice(&c.0.to_be_bytes());
    key.extend_from_slice(&o.hash.to_be_bytes());
    key.extend_from_slice(&o.name);
    key
}

/// The object identity in an `objects` key.
pub fn parse_object_key(key: &[u8]) -> Option<(CollectionId, ObjectKey)> {
    let c = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let hash = u32::from_be_bytes(key.get(8..12)?.try_into().ok()?);
    let name = Bytes::copy_from_slice(key.get(12..)?);
    Some((CollectionId(c), ObjectKey { hash, name }))
}

/// Prefix of every key of a collection in `objects` and `meta`.
pub fn collection_prefix(c: CollectionId) -> [u8; 8] {
    c.0.to_be_bytes()
}

/// `omap` key prefix of an object: collection ‖ hash ‖ name length (u16 BE)
/// ‖ name. The length keeps one object's prefix from matching another's.
pub fn omap_prefix(c: CollectionId, o: &ObjectKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(14 + o.name.len());
    key.extend_from_slice(&c.0.to_be_bytes());
    key.extend_from_slice(&o.hash.to_be_bytes());
    // Names are at most OBJECT_NAME_BYTES_MAX (2 KiB), so u16 holds the length.
    debug_assert!(o.name.len() <= limits::OBJECT_NAME_BYTES_MAX);
    #[allow(clippy::cast_possible_truncation)]
    key.extend_from_slice(&(o.name.len() as u16).to_be_bytes());
    key.extend_from_slice(&o.name);
    key
}

/// `meta` key: collection ‖ user key.
pub fn meta_key(c: CollectionId, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&c.0.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The smallest key greater than every key starting with `prefix`, or
/// `None` if there is none (all bytes 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// One run of bytes written once to the data file, with a crc32c per
/// [`limits::CSUM_BLOCK_BYTES`] block (the last block may be partial).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub offset: u64,
    pub length: u64,
    pub csums: Vec<u32>,
}

impl Extent {
    /// Space the extent occupies in the data file.
    pub fn allocated_bytes(&self) -> u64 {
        self.length.div_ceil(limits::ALLOC_UNIT_BYTES) * limits::ALLOC_UNIT_BYTES
    }
}

/// Object bytes `[logical, logical + length)` are extent `extent`'s bytes
/// from `offset` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub logical: u64,
    pub length: u64,
    pub extent: u32,
    pub offset: u64,
}

impl Piece {
    pub fn end(&self) -> u64 {
        self.logical + self.length
    }
}

/// Where an object's data lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Data {
    /// In the record itself (objects up to [`limits::INLINE_SIZE_BYTES_MAX`]).
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    /// In data-file extents; bytes covered by no piece read as zeros.
    Extents {
        extents: Vec<Extent>,
        pieces: Vec<Piece>,
    },
}

/// An object's metadata record, body format 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub version: u64,
    pub size: u64,
    pub data: Data,
    #[serde(with = "byte_map")]
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A map of byte strings, each encoded as one length-prefixed run (the
/// same bytes postcard writes for a sequence of `u8`, but one copy instead
/// of one call per byte).
mod byte_map {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_bytes::{ByteBuf, Bytes};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(
        map: &BTreeMap<Vec<u8>, Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(map.iter().map(|(k, v)| (Bytes::new(k), Bytes::new(v))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, D::Error> {
        let map = BTreeMap::<ByteBuf, ByteBuf>::deserialize(d)?;
        Ok(map
            .into_iter()
            .map(|(k, v)| (k.into_vec(), v.into_vec()))
            .collect())
    }
}

impl ObjectRecord {
    /// What this object adds to its collection's usage.
    pub fn usage(&self) -> crate::CollectionUsage {
        let allocated = match &self.data {
            Data::Inline(bytes) => bytes.len() as u64,
            Data::Extents { extents, .. } => extents.iter().map(Extent::allocated_bytes).sum(),
        };
        crate::CollectionUsage::object(self.size, allocated)
    }

    pub fn empty() -> ObjectRecord {
        ObjectRecord {
            version: 0,
            size: 0,
            data: Data::Inline(Vec::new()),
            xattrs: BTreeMap::new(),
        }
    }

    pub fn encode(&self, key: &[u8]) -> Vec<u8> {
        // Records are plain data: postcard cannot fail on them.
        let body = postcard::to_allocvec(self).expect("object record encodes");
        seal(key, &body)
    }

    /// `what` names the record in an error; it is only called on one.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming `what`.
    pub fn decode(
        key: &[u8],
        value: &[u8],
        what: &dyn Fn() -> String,
    ) -> Result<ObjectRecord, StoreError> {
        let body = open(key, value, "object record")
            .map_err(|e| StoreError::Corrupt(format!("{}: {e}", what())))?;
        let record: ObjectRecord = postcard::from_bytes(body)
            .map_err(|e| StoreError::Corrupt(format!("{}: undecodable record: {e}", what())))?;
        record.check(what)?;
        Ok(record)
    }

    /// Structural checks a checksum cannot give: pieces in order, inside
    /// their extents and the object; extents' checksum counts right.
    fn check(&self, what: &dyn Fn() -> String) -> Result<(), StoreError> {
        let bad = |why: &str| Err(StoreError::Corrupt(format!("{}: {why}", what())));
        if self.size > limits::OBJECT_SIZE_BYTES_MAX {
            return bad("size beyond the object limit");
        }
        match &self.data {
            Data::Inline(bytes) => {
                if bytes.len() as u64 != self.size {
                    return bad("inline data length differs from size");
                }
            }
            Data::Extents { extents, pieces } => {
                for e in extents {
                    if e.csums.len() as u64 != e.length.div_ceil(limits::CSUM_BLOCK_BYTES)
                        || e.length > limits::EXTENT_SIZE_BYTES_MAX
                        || e.offset % limits::ALLOC_UNIT_BYTES != 0
                    {
                        return bad("malformed extent");
                    }
                }
                let mut last_end = 0;
                for p in pieces {
                    let Some(e) = extents.get(p.extent as usize) else {
                        return bad("piece names a missing extent");
                    };
                    let inside = p
                        .offset
                        .checked_add(p.length)
                        .is_some_and(|end| end <= e.length);
                    if p.logical < last_end || p.length == 0 || !inside || p.end() > self.size {
                        return bad("malformed piece");
                    }
                    last_end = p.end();
                }
            }
        }
        Ok(())
    }
}

/// The store's superblock, under key `superblock` of keyspace `super`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superblock {
    pub magic: [u8; 8],
    pub format_version: u32,
    pub csum_block_bytes: u64,
    pub alloc_unit_bytes: u64,
}

pub const SUPERBLOCK_KEY: &[u8] = b"superblock";
pub const STORE_MAGIC: [u8; 8] = *b"CAIRNOSD";
/// 2 added the commit log (`wal`); 1 is upgraded at open.
pub const STORE_FORMAT_VERSION: u32 = 2;

impl Superblock {
    pub fn current() -> Superblock {
        Superblock {
            magic: STORE_MAGIC,
            format_version: STORE_FORMAT_VERSION,
            csum_block_bytes: limits::CSUM_BLOCK_BYTES,
            alloc_unit_bytes: limits::ALLOC_UNIT_BYTES,
        }
    }
}

/// crc32c of each [`limits::CSUM_BLOCK_BYTES`] block of `data`.
pub fn block_csums(data: &[u8]) -> Vec<u32> {
    cairn_types::crc::block_crc32c(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Format 1 of a sealed value and an object record, frozen.
    #[test]
    fn golden_bytes_v1() {
        let sealed = seal(b"k", b"body");
        assert_eq!(sealed[0], 1);
        assert_eq!(&sealed[5..], b"body");
        let record = ObjectRecord {
            version: 3,
            size: 5000,
            data: Data::Extents {
                extents: vec![Extent {
                    offset: 8192,
                    length: 5000,
                    csums: vec![1, 2],
                }],
                pieces: vec![Piece {
                    logical: 0,
                    length: 5000,
                    extent: 0,
                    offset: 0,
                }],
            },
            xattrs: BTreeMap::from([(b"a".to_vec(), b"b".to_vec())]),
        };
        let body = postcard::to_allocvec(&record).expect("encode");
        assert_eq!(
            body,
            [
                3, 0x88, 0x27, 1, 1, 0x80, 0x40, 0x88, 0x27, 2, 1, 2, 1, 0, 0x88, 0x27, 0, 0, 1, 1,
                b'a', 1, b'b'
            ]
        );
        let value = record.encode(b"key");
        assert_eq!(
            ObjectRecord::decode(b"key", &value, &|| "test".into()),
            Ok(record)
        );
    }

    #[test]
    fn damaged_or_misplaced_values_are_corrupt() {
        let value = ObjectRecord::empty().encode(b"key");
        assert!(matches!(
            ObjectRecord::decode(b"other", &value, &|| "x".into()),
            Err(StoreError::Corrupt(_))
        ));
        for i in 0..value.len() {
            let mut bad = value.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(
                    ObjectRecord::decode(b"key", &bad, &|| "x".into()),
                    Err(StoreError::Corrupt(_))
                ),
                "byte {i}"
            );
        }
        assert!(matches!(
            open(b"k", &[1, 2], "x"),
            Err(StoreError::Corrupt(_))
        ));
    }

    /// A record whose checksum is right but whose sizes are impossible is
    /// still refused, before anything is sized by it.
    #[test]
    fn impossible_sizes_are_corrupt() {
        let mut record = ObjectRecord::empty();
        record.size = limits::OBJECT_SIZE_BYTES_MAX + 1;
        record.data = Data::Extents {
            extents: Vec::new(),
            pieces: Vec::new(),
        };
        let value = record.encode(b"k");
        assert!(matches!(
            ObjectRecord::decode(b"k", &value, &|| "x".into()),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn key_layouts_sort_and_parse() {
        let c = CollectionId::pg(1, 2);
        let a = ObjectKey {
            hash: 1,
            name: Bytes::from_static(b"zz"),
        };
        let b = ObjectKey {
            hash: 2,
            name: Bytes::from_static(b"a"),
        };
        assert!(object_key(c, &a) < object_key(c, &b), "hash order first");
        assert_eq!(parse_object_key(&object_key(c, &b)), Some((c, b.clone())));
        let short = ObjectKey {
            hash: 1,
            name: Bytes::from_static(b"ab"),
        };
        let long = ObjectKey {
            hash: 1,
            name: Bytes::from_static(b"abc"),
        };
        assert!(!omap_prefix(c, &long).starts_with(&omap_prefix(c, &short)));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }
}

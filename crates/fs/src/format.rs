//! The namespace as objects of the metadata pool, and the journal's
//! records. Every value carries a format version; layouts are postcard
//! (little-endian varints) behind that byte. `docs/filesystem.md` is the
//! byte-level description.
//!
//! | object | holds |
//! |---|---|
//! | `mds.head` | xattr `head`: [`Head`] (first live journal segment, inode numbers reserved) |
//! | `mds.journal.<seq:016x>` | appended journal batches ([`encode_batch`]); xattr `gen`: the generation of the MDS allowed to append |
//! | `dir.<ino:x>` | omap: entry name → [`Dentry`] |
//! | `inode.<ino >> 12:x>` | omap: inode number (8 bytes, big-endian) → [`InodeRec`] |

use cairn_proto::mds::{Attr, Layout};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

pub const HEAD_OBJECT: &str = "mds.head";
pub const HEAD_XATTR: &[u8] = b"head";
pub const GEN_XATTR: &[u8] = b"gen";

/// Inodes per inode-table object.
pub const INODES_PER_OBJECT_SHIFT: u32 = 12;

const VERSION: u8 = 1;

/// Why stored bytes could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FormatError {
    #[error("unknown format version {0}")]
    Version(u8),
    #[error("empty record")]
    Empty,
    #[error("damaged record: {0}")]
    Damaged(String),
    #[error("journal batch checksum mismatch")]
    Checksum,
}

#[must_use]
pub fn segment_object(seq: u64) -> String {
    format!("mds.journal.{seq:016x}")
}

#[must_use]
pub fn dir_object(ino: u64) -> String {
    format!("dir.{ino:x}")
}

#[must_use]
pub fn inode_object(ino: u64) -> String {
    format!("inode.{:x}", ino >> INODES_PER_OBJECT_SHIFT)
}

#[must_use]
pub fn inode_key(ino: u64) -> [u8; 8] {
    ino.to_be_bytes()
}

/// An inode as stored: attributes, xattrs, a symlink's target, and (for a
/// directory, which has one link) its parent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeRec {
    pub attr: Attr,
    pub parent: u64,
    pub xattrs: Vec<(ByteBuf, ByteBuf)>,
    pub target: Option<ByteBuf>,
}

/// A directory entry as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dentry {
    pub ino: u64,
    /// `S_IFMT` bits of the inode.
    pub kind: u32,
}

/// Where the journal starts and which inode numbers are spoken for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The oldest segment not yet written back and removed.
    pub first_segment: u64,
    /// Inode numbers below this may have been handed out.
    pub ino_reserved: u64,
    /// The journal sequence reached when the head was written.
    pub seq: u64,
}

/// One change to the stored namespace. Each holds the whole new value,
/// so applying a delta twice is the same as once (replay is idempotent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Delta {
    PutInode(InodeRec),
    DropInode(u64),
    PutDentry {
        dir: u64,
        name: ByteBuf,
        dentry: Dentry,
    },
    DropDentry {
        dir: u64,
        name: ByteBuf,
    },
    /// A removed directory's entry object.
    DropDir(u64),
    /// Remove the data objects of a file of at most `size` bytes.
    Purge {
        ino: u64,
        size: u64,
        layout: Layout,
    },
    /// Inode numbers below this may be handed out.
    InoReserved(u64),
    /// An inode record again, with only its quota usage changed (stored
    /// as `PutInode`; no cached attribute changes, so nothing is
    /// recalled).
    PutUsage(InodeRec),
}

/// One client request's changes, journaled together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub session: u64,
    pub tid: u64,
    pub deltas: Vec<Delta>,
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing owned plain data into a Vec cannot fail.
    let body = postcard::to_allocvec(value).expect("postcard encodes into a Vec");
    let mut out = Vec::with_capacity(body.len() + 1);
    out.push(VERSION);
    out.extend_from_slice(&body);
    out
}

/// Reads a versioned record.
///
/// # Errors
/// [`FormatError`] for any bytes that are not a record of this version.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, FormatError> {
    match bytes.split_first() {
        None => Err(FormatError::Empty),
        Some((&VERSION, body)) => {
            postcard::from_bytes(body).map_err(|e| FormatError::Damaged(e.to_string()))
        }
        Some((&v, _)) => Err(FormatError::Version(v)),
    }
}

/// Bytes a batch's frame adds before its body.
const BATCH_HEADER_BYTES: usize = 9;

/// A journal batch as appended to a segment: version byte, body length
/// (u32 LE), crc32c of the body (u32 LE), then the postcard body.
#[must_use]
pub fn encode_batch(entries: &[Entry]) -> Vec<u8> {
    let body = postcard::to_allocvec(entries).expect("postcard encodes into a Vec");
    let length = u32::try_from(body.len()).expect("a batch stays far below 4 GiB");
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + body.len());
    out.push(VERSION);
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Every batch of a segment, in order. A torn last batch cannot exist
/// (each append is atomic in the object store), so any damage is an error.
///
/// # Errors
/// [`FormatError`] for a damaged segment.
pub fn decode_segment(mut bytes: &[u8]) -> Result<Vec<Entry>, FormatError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(FormatError::Damaged("short batch header".into()));
        }
        if bytes[0] != VERSION {
            return Err(FormatError::Version(bytes[0]));
        }
        let length = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let crc = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        let rest = &bytes[BATCH_HEADER_BYTES..];
        if rest.len() < length {
            return Err(FormatError::Damaged("batch runs past the segment".into()));
        }
        let body = &rest[..length];
        if crc32c::crc32c(body) != crc {
            return Err(FormatError::Checksum);
        }
        let entries: Vec<Entry> =
            postcard::from_bytes(body).map_err(|e| FormatError::Damaged(e.to_string()))?;
        out.extend(entries);
        bytes = &rest[length..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_damage_is_found() {
        let entry = Entry {
            seq: 7,
            session: 1,
            tid: 2,
            deltas: vec![
                Delta::PutDentry {
                    dir: 1,
                    name: ByteBuf::from(b"a".to_vec()),
                    dentry: Dentry {
                        ino: 9,
                        kind: 0o100_000,
                    },
                },
                Delta::InoReserved(4096),
            ],
        };
        let mut segment = encode_batch(std::slice::from_ref(&entry));
        segment.extend(encode_batch(&[entry.clone(), entry.clone()]));
        assert_eq!(decode_segment(&segment).expect("decodes").len(), 3);
        let last = segment.len() - 1;
        segment[last] ^= 1;
        assert!(matches!(
            decode_segment(&segment),
            Err(FormatError::Checksum)
        ));
        assert!(decode_segment(&segment[..5]).is_err());
    }

    #[test]
    fn records_carry_their_version() {
        let head = Head {
            first_segment: 3,
            ino_reserved: 8192,
            seq: 10,
        };
        let bytes = encode(&head);
        assert_eq!(bytes[0], 1);
        assert_eq!(decode::<Head>(&bytes).expect("decodes"), head);
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(matches!(
            decode::<Head>(&other),
            Err(FormatError::Version(9))
        ));
        assert!(decode::<Head>(&[]).is_err());
    }
}

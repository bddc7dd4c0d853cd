//! The namespace as objects of the metadata pool, and the journal's
//! records. Every value carries a format version; layouts are postcard
//! (little-endian varints) behind that byte. `docs/filesystem.md` is the
//! byte-level description.
//!
//! | object | holds |
//! |---|---|
//! | `mds.head` | xattr `head`: [`Head`] (first live journal segment, inode numbers reserved) |
//! | `mds.journal.<seq:016x>` | appended journal batches ([`encode_batch`]); xattr `gen`: the generation of the MDS allowed to append |
//! | `dir.<ino:x>` | omap: entry name → [`Dentry`] (a directory of one fragment) |
//! | `dir.<ino:x>.<bits>.<value:x>` | omap: the entries of one [`Frag`] of a fragmented directory |
//! | `inode.<ino >> 12:x>` | omap: inode number (8 bytes, big-endian) → [`InodeRec`] |
//! | `mds.purge` | omap: inode number (8 bytes, big-endian) → [`PurgeRec`]: removed files whose data objects are still to delete |

use cairn_proto::mds::{Attr, Layout};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

pub const HEAD_OBJECT: &str = "mds.head";
/// The purge queue's object.
pub const PURGE_OBJECT: &str = "mds.purge";
pub const HEAD_XATTR: &[u8] = b"head";
pub const GEN_XATTR: &[u8] = b"gen";

/// Inodes per inode-table object.
pub const INODES_PER_OBJECT_SHIFT: u32 = 12;

/// 2: directories carry their fragment tree ([`InodeRec::frags`]) and
/// entry deltas name their fragment. 3: small files keep their data in
/// their record ([`InodeRec::inline`]).
const VERSION: u8 = 3;

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

/// The object holding fragment `frag` of directory `ino`.
#[must_use]
pub fn dir_object(ino: u64, frag: Frag) -> String {
    if frag.bits == 0 {
        format!("dir.{ino:x}")
    } else {
        format!("dir.{ino:x}.{}.{:x}", frag.bits, frag.value)
    }
}

/// The directory and fragment an object name holds, if it is a directory
/// object.
#[must_use]
pub fn parse_dir_object(name: &str) -> Option<(u64, Frag)> {
    let rest = name.strip_prefix("dir.")?;
    let mut parts = rest.split('.');
    let ino = u64::from_str_radix(parts.next()?, 16).ok()?;
    let frag = match (parts.next(), parts.next(), parts.next()) {
        (None, ..) => Frag::WHOLE,
        (Some(bits), Some(value), None) => Frag {
            bits: bits.parse().ok()?,
            value: u32::from_str_radix(value, 16).ok()?,
        },
        _ => return None,
    };
    frag.is_valid().then_some((ino, frag))
}

/// The hash that places a name in a fragment (and, shifted, orders a
/// directory's entries for `readdir`).
#[must_use]
pub fn name_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name)
}

/// A fragment of a directory, as CephFS's `frag_t`: the entries whose name
/// hash has `value` in its top `bits` bits. A directory starts as one
/// fragment and splits as it grows, so a directory of millions of entries
/// is many omap objects, loaded and cached one at a time.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Frag {
    pub bits: u8,
    pub value: u32,
}

impl Frag {
    /// The whole hash space: a directory not split.
    pub const WHOLE: Frag = Frag { bits: 0, value: 0 };

    /// Bits a fragment may have at most.
    pub const BITS_MAX: u8 = 30;

    #[must_use]
    pub fn is_valid(self) -> bool {
        self.bits <= Frag::BITS_MAX && u64::from(self.value) >> self.bits == 0
    }

    /// Whether a name of hash `hash` belongs here.
    #[must_use]
    pub fn contains(self, hash: u64) -> bool {
        self.bits == 0 || hash.checked_shr(self.shift()) == Some(u64::from(self.value))
    }

    /// How far a hash is shifted to leave its top `bits` (checked shifts
    /// below: a fragment read from a damaged record must not panic).
    fn shift(self) -> u32 {
        64u32.saturating_sub(u32::from(self.bits))
    }

    /// The lowest hash this fragment holds.
    #[must_use]
    pub fn first_hash(self) -> u64 {
        if self.bits == 0 {
            0
        } else {
            u64::from(self.value).checked_shl(self.shift()).unwrap_or(0)
        }
    }

    /// The highest hash this fragment holds.
    #[must_use]
    pub fn last_hash(self) -> u64 {
        if self.bits == 0 {
            u64::MAX
        } else {
            self.first_hash() | u64::MAX.checked_shr(u32::from(self.bits)).unwrap_or(0)
        }
    }

    /// The `2^by` fragments this one splits into, in hash order.
    #[must_use]
    pub fn split(self, by: u8) -> Vec<Frag> {
        (0..1u32 << by)
            .map(|i| Frag {
                bits: self.bits + by,
                value: (self.value << by) | i,
            })
            .collect()
    }

    /// The fragment `by` bits up that holds this one.
    #[must_use]
    pub fn parent(self, by: u8) -> Frag {
        let by = by.min(self.bits);
        Frag {
            bits: self.bits - by,
            value: self.value >> by,
        }
    }
}

/// The fragment of `frags` (a directory's fragment tree, empty for one not
/// split) that holds a name of hash `hash`. A tree that does not cover the
/// hash space is refused when read ([`valid_tree`]), so the fallback is
/// never taken.
#[must_use]
pub fn frag_of(frags: &[Frag], hash: u64) -> Frag {
    frags
        .iter()
        .copied()
        .find(|f| f.contains(hash))
        .unwrap_or(Frag::WHOLE)
}

/// Whether `frags` (sorted by first hash) covers the hash space exactly
/// once; empty is a directory of one fragment.
#[must_use]
pub fn valid_tree(frags: &[Frag]) -> bool {
    if frags.is_empty() {
        return true;
    }
    let mut next = 0u64;
    for (i, f) in frags.iter().enumerate() {
        if !f.is_valid() || f.first_hash() != next {
            return false;
        }
        if f.last_hash() == u64::MAX {
            return i + 1 == frags.len();
        }
        next = f.last_hash() + 1;
    }
    false
}

#[must_use]
pub fn inode_object(ino: u64) -> String {
    format!("inode.{:x}", ino >> INODES_PER_OBJECT_SHIFT)
}

#[must_use]
pub fn inode_key(ino: u64) -> [u8; 8] {
    ino.to_be_bytes()
}

/// The inode number an [`inode_key`] (of an inode or purge-queue entry)
/// holds; `None` for a key of another length.
#[must_use]
pub fn ino_of_key(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// An inode as stored: attributes, xattrs, a symlink's target, its
/// parent (for a directory, which has one link, the only one), a
/// directory's fragments, and a small file's data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeRec {
    pub attr: Attr,
    pub parent: u64,
    pub xattrs: Vec<(ByteBuf, ByteBuf)>,
    pub target: Option<ByteBuf>,
    /// A directory's fragments in hash order; empty while it is one.
    pub frags: Vec<Frag>,
    /// A regular file's data while the MDS keeps it (inline data: its
    /// length is the file's size, and the file has no data objects);
    /// `None` once it is in data objects. Files start inline when the MDS
    /// keeps small files, and leave for good when they outgrow the limit.
    pub inline: Option<ByteBuf>,
}

/// A removed file whose data objects the purge queue deletes: those of a
/// file of at most `size` bytes laid out as `layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeRec {
    pub size: u64,
    pub layout: Layout,
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
        frag: Frag,
        name: ByteBuf,
        dentry: Dentry,
    },
    DropDentry {
        dir: u64,
        frag: Frag,
        name: ByteBuf,
    },
    /// A removed directory's fragment objects.
    DropDir {
        ino: u64,
        frags: Vec<Frag>,
    },
    /// Directory `dir`'s fragments `from` became `to` (a split or a
    /// merge): `entries` are every entry they hold, now stored in `to`
    /// by name hash, and the objects of `from` are removed. The
    /// directory's record with the new tree is journaled beside it.
    Refrag {
        dir: u64,
        from: Vec<Frag>,
        to: Vec<Frag>,
        entries: Vec<(ByteBuf, Dentry)>,
    },
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

impl Delta {
    /// About how many bytes the delta takes encoded (for sizing journal
    /// batches).
    #[must_use]
    pub fn approx_bytes(&self) -> usize {
        let names = |v: &[(ByteBuf, Dentry)]| v.iter().map(|(n, _)| n.len() + 24).sum::<usize>();
        match self {
            Delta::PutInode(rec) | Delta::PutUsage(rec) => {
                96 + rec
                    .xattrs
                    .iter()
                    .map(|(n, v)| n.len() + v.len())
                    .sum::<usize>()
                    + rec.target.as_ref().map_or(0, |t| t.len())
                    + rec.inline.as_ref().map_or(0, |d| d.len())
                    + rec.frags.len() * 8
            }
            Delta::PutDentry { name, .. } | Delta::DropDentry { name, .. } => 48 + name.len(),
            Delta::Refrag { entries, .. } => 96 + names(entries),
            _ => 96,
        }
    }
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
                    frag: Frag::WHOLE,
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
        assert_eq!(bytes[0], VERSION);
        assert_eq!(decode::<Head>(&bytes).expect("decodes"), head);
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(matches!(
            decode::<Head>(&other),
            Err(FormatError::Version(9))
        ));
        assert!(decode::<Head>(&[]).is_err());
    }

    #[test]
    fn fragments_split_cover_and_name_their_objects() {
        let whole = Frag::WHOLE;
        assert!(whole.contains(0) && whole.contains(u64::MAX));
        let eight = whole.split(3);
        assert!(valid_tree(&eight));
        let mut tree: Vec<Frag> = eight[..7].to_vec();
        tree.extend(eight[7].split(3));
        assert!(valid_tree(&tree));
        assert!(!valid_tree(&eight[1..]));
        assert!(!valid_tree(&[eight[0], eight[0]]));
        for hash in [0, 1, u64::MAX / 3, u64::MAX - 1, u64::MAX] {
            let f = frag_of(&tree, hash);
            assert!(f.contains(hash) && f.first_hash() <= hash && hash <= f.last_hash());
            assert_eq!(tree.iter().filter(|g| g.contains(hash)).count(), 1);
        }
        assert_eq!(tree[9].parent(3), eight[7]);
        for f in [whole, tree[3], tree[12]] {
            assert_eq!(parse_dir_object(&dir_object(0x2a, f)), Some((0x2a, f)));
        }
        assert_eq!(parse_dir_object("dir.2a.3.9"), None);
        assert_eq!(parse_dir_object("dir.2a.x"), None);
        assert_eq!(parse_dir_object("inode.2a"), None);
    }
}

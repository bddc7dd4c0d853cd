//! The PG log: the ordered, bounded history of the writes a PG applied, kept
//! in memory and in the PG collection's metadata keys. It answers retried
//! requests (dedup) and is what peering (issue 5) will compare between OSDs.

use bytes::Bytes;
use cairn_types::Epoch;
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// A PG version: the epoch of the interval whose primary assigned it, then a
/// sequence number that grows by one per write over the PG's whole life.
/// Ordered by epoch, then sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub epoch: Epoch,
    pub seq: u64,
}

impl Version {
    /// The version before any write.
    pub const ZERO: Version = Version {
        epoch: Epoch(0),
        seq: 0,
    };

    #[must_use]
    pub fn new(epoch: u64, seq: u64) -> Version {
        Version {
            epoch: Epoch(epoch),
            seq,
        }
    }

    /// The metadata key of the log entry of this version: a prefix, then
    /// epoch and sequence big-endian so keys sort in version order.
    #[must_use]
    pub fn log_key(self) -> Bytes {
        let mut key = Vec::with_capacity(LOG_KEY_PREFIX.len() + 16);
        key.extend_from_slice(LOG_KEY_PREFIX);
        key.extend_from_slice(&self.epoch.0.to_be_bytes());
        key.extend_from_slice(&self.seq.to_be_bytes());
        Bytes::from(key)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'{}", self.epoch.0, self.seq)
    }
}

/// Prefix of the PG log's keys in the collection's metadata key space.
pub const LOG_KEY_PREFIX: &[u8] = b"pglog/";

/// A client request's identity; a resent request keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId {
    pub client: u64,
    pub tid: u64,
}

/// What an entry did to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// Created or changed the object.
    Write,
    /// Removed the object.
    Remove,
    /// Changed nothing: the request was refused (a compare-and-set guard
    /// failed, or it removes from a missing object) and is logged only so
    /// a retry gets the same answer.
    Refused,
}

/// [`LogResult::Err`] codes. Frozen: they are stored in PG logs.
pub mod err_code {
    /// The object's version was not the one the request expected.
    pub const VERSION_MISMATCH: u32 = 1;
    /// An xattr's value was not the one the request expected.
    pub const XATTR_MISMATCH: u32 = 2;
    /// The object to remove from (or remove) does not exist.
    pub const NOT_FOUND: u32 = 3;

    /// What a code means, for the client's error message.
    #[must_use]
    pub fn describe(code: u32) -> &'static str {
        match code {
            VERSION_MISMATCH => "object version differs from the expected one",
            XATTR_MISMATCH => "xattr value differs from the expected one",
            NOT_FOUND => "object not found",
            _ => "unknown error code",
        }
    }
}

/// The recorded result of a logged request, returned again to a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogResult {
    /// Applied; the object's version is now `object_version` (the entry's
    /// sequence number, which only grows within a PG).
    Ok { object_version: u64 },
    /// Refused with this error code; nothing was changed.
    Err { code: u32 },
}

/// One PG log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub version: Version,
    pub object: Bytes,
    pub kind: LogKind,
    pub req: ReqId,
    pub result: LogResult,
}

/// A log entry's bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogDecodeError {
    #[error("log entry format version {0} is unknown (this build reads 1)")]
    UnknownFormat(u8),
    #[error("log entry truncated at byte {0}")]
    Truncated(usize),
    #[error("log entry has unknown {what} tag {tag}")]
    BadTag { what: &'static str, tag: u8 },
    #[error("log entry has {0} trailing bytes")]
    Trailing(usize),
}

const LOG_ENTRY_FORMAT: u8 = 1;

impl LogEntry {
    /// The entry as stored under [`Version::log_key`]: format version 1,
    /// then little-endian fields: epoch u64, seq u64, client u64, tid u64,
    /// kind u8 (0 write, 1 remove, 2 refused), result u8 (0 ok, 1 err) and u64 object
    /// version or u32 code, object name length u32 and the name.
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(48 + self.object.len());
        out.push(LOG_ENTRY_FORMAT);
        for word in [
            self.version.epoch.0,
            self.version.seq,
            self.req.client,
            self.req.tid,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.push(match self.kind {
            LogKind::Write => 0,
            LogKind::Remove => 1,
            LogKind::Refused => 2,
        });
        match self.result {
            LogResult::Ok { object_version } => {
                out.push(0);
                out.extend_from_slice(&object_version.to_le_bytes());
            }
            LogResult::Err { code } => {
                out.push(1);
                out.extend_from_slice(&code.to_le_bytes());
            }
        }
        let name_len = u32::try_from(self.object.len()).expect("object name bounded by store");
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(&self.object);
        Bytes::from(out)
    }

    /// Decodes what [`LogEntry::encode`] wrote, validating every field.
    ///
    /// # Errors
    /// [`LogDecodeError`] for unknown formats, tags, short or long input.
    pub fn decode(bytes: &[u8]) -> Result<LogEntry, LogDecodeError> {
        let mut reader = Reader { bytes, at: 0 };
        let format = reader.u8()?;
        if format != LOG_ENTRY_FORMAT {
            return Err(LogDecodeError::UnknownFormat(format));
        }
        let version = Version::new(reader.u64()?, reader.u64()?);
        let req = ReqId {
            client: reader.u64()?,
            tid: reader.u64()?,
        };
        let kind = match reader.u8()? {
            0 => LogKind::Write,
            1 => LogKind::Remove,
            2 => LogKind::Refused,
            tag => return Err(LogDecodeError::BadTag { what: "kind", tag }),
        };
        let result = match reader.u8()? {
            0 => LogResult::Ok {
                object_version: reader.u64()?,
            },
            1 => LogResult::Err {
                code: u32::from_le_bytes(reader.array()?),
            },
            tag => {
                return Err(LogDecodeError::BadTag {
                    what: "result",
                    tag,
                });
            }
        };
        let name_len = u32::from_le_bytes(reader.array()?) as usize;
        let object = Bytes::copy_from_slice(reader.take(name_len)?);
        if reader.at != bytes.len() {
            return Err(LogDecodeError::Trailing(bytes.len() - reader.at));
        }
        Ok(LogEntry {
            version,
            object,
            kind,
            req,
            result,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], LogDecodeError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(LogDecodeError::Truncated(self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], LogDecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, LogDecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, LogDecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// The in-memory PG log: entries in increasing version order, at most
/// `entries_max`, with an index from request id to version for dedup.
#[derive(Debug)]
pub struct PgLog {
    entries: VecDeque<LogEntry>,
    by_req: HashMap<ReqId, Version>,
    entries_max: usize,
}

impl PgLog {
    #[must_use]
    pub fn new(entries_max: usize) -> PgLog {
        assert!(entries_max > 0, "a PG log must hold at least one entry");
        PgLog {
            entries: VecDeque::new(),
            by_req: HashMap::new(),
            entries_max,
        }
    }

    /// Appends `entry` (whose version must exceed every logged one) and
    /// returns the versions trimmed to stay within the bound.
    pub fn append(&mut self, entry: LogEntry) -> Vec<Version> {
        if let Some(last) = self.entries.back() {
            assert!(
                entry.version > last.version,
                "log entry {} not after {}",
                entry.version,
                last.version
            );
        }
        self.by_req.insert(entry.req, entry.version);
        self.entries.push_back(entry);
        let mut trimmed = Vec::new();
        while self.entries.len() > self.entries_max {
            let old = self
                .entries
                .pop_front()
                .expect("log is longer than its bound");
            if self.by_req.get(&old.req) == Some(&old.version) {
                self.by_req.remove(&old.req);
            }
            trimmed.push(old.version);
        }
        trimmed
    }

    /// The entry that recorded request `req`, if still in the log.
    #[must_use]
    pub fn find_req(&self, req: ReqId) -> Option<&LogEntry> {
        let version = *self.by_req.get(&req)?;
        self.get(version)
    }

    /// The entry of `version`, if still in the log.
    #[must_use]
    pub fn get(&self, version: Version) -> Option<&LogEntry> {
        let index = self
            .entries
            .binary_search_by(|entry| entry.version.cmp(&version))
            .ok()?;
        self.entries.get(index)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &LogEntry> {
        self.entries.iter()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> LogEntry {
        LogEntry {
            version: Version::new(3, seq),
            object: Bytes::from_static(b"obj"),
            kind: LogKind::Write,
            req: ReqId {
                client: 7,
                tid: seq,
            },
            result: LogResult::Ok {
                object_version: seq,
            },
        }
    }

    #[test]
    fn log_keys_sort_in_version_order() {
        let versions = [
            Version::new(1, 1),
            Version::new(1, 256),
            Version::new(2, 2),
            Version::new(256, 3),
        ];
        for pair in versions.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(pair[0].log_key() < pair[1].log_key());
        }
    }

    #[test]
    fn log_entry_golden_bytes_round_trip() {
        let entry = LogEntry {
            version: Version::new(2, 5),
            object: Bytes::from_static(b"ab"),
            kind: LogKind::Remove,
            req: ReqId { client: 1, tid: 9 },
            result: LogResult::Ok { object_version: 5 },
        };
        let bytes = entry.encode();
        let mut golden = vec![1u8];
        for word in [2u64, 5, 1, 9] {
            golden.extend_from_slice(&word.to_le_bytes());
        }
        golden.extend_from_slice(&[1, 0]);
        golden.extend_from_slice(&5u64.to_le_bytes());
        golden.extend_from_slice(&[2, 0, 0, 0, b'a', b'b']);
        assert_eq!(bytes.as_ref(), golden.as_slice());
        assert_eq!(LogEntry::decode(&bytes), Ok(entry));
    }

    #[test]
    fn refused_entry_golden_bytes_round_trip() {
        let entry = LogEntry {
            version: Version::new(2, 6),
            object: Bytes::from_static(b"c"),
            kind: LogKind::Refused,
            req: ReqId { client: 1, tid: 10 },
            result: LogResult::Err {
                code: err_code::XATTR_MISMATCH,
            },
        };
        let bytes = entry.encode();
        let mut golden = vec![1u8];
        for word in [2u64, 6, 1, 10] {
            golden.extend_from_slice(&word.to_le_bytes());
        }
        golden.extend_from_slice(&[2, 1, 2, 0, 0, 0]);
        golden.extend_from_slice(&[1, 0, 0, 0, b'c']);
        assert_eq!(bytes.as_ref(), golden.as_slice());
        assert_eq!(LogEntry::decode(&bytes), Ok(entry));
    }

    #[test]
    fn log_entry_decode_rejects_bad_bytes() {
        let bytes = entry(1).encode();
        assert_eq!(
            LogEntry::decode(&bytes[..bytes.len() - 1]),
            Err(LogDecodeError::Truncated(bytes.len() - 3))
        );
        let mut bad = bytes.to_vec();
        bad[0] = 9;
        assert_eq!(
            LogEntry::decode(&bad),
            Err(LogDecodeError::UnknownFormat(9))
        );
        let mut long = bytes.to_vec();
        long.push(0);
        assert_eq!(LogEntry::decode(&long), Err(LogDecodeError::Trailing(1)));
    }

    #[test]
    fn log_trims_oldest_and_forgets_their_requests() {
        let mut log = PgLog::new(2);
        assert!(log.append(entry(1)).is_empty());
        assert!(log.append(entry(2)).is_empty());
        assert_eq!(log.append(entry(3)), vec![Version::new(3, 1)]);
        assert_eq!(log.len(), 2);
        assert!(log.find_req(ReqId { client: 7, tid: 1 }).is_none());
        assert_eq!(
            log.find_req(ReqId { client: 7, tid: 3 }).map(|e| e.version),
            Some(Version::new(3, 3))
        );
    }
}

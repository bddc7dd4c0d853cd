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
        self.key_under(LOG_KEY_PREFIX)
    }

    /// The metadata key of the dup of this version (see [`DupEntry`]).
    #[must_use]
    pub fn dup_key(self) -> Bytes {
        self.key_under(DUP_KEY_PREFIX)
    }

    /// The version whose key suffix (epoch and sequence big-endian, as
    /// [`Version::log_key`] writes them) is `bytes`.
    #[must_use]
    pub fn from_key_bytes(bytes: &[u8; 16]) -> Version {
        let mut epoch = [0u8; 8];
        let mut seq = [0u8; 8];
        epoch.copy_from_slice(&bytes[..8]);
        seq.copy_from_slice(&bytes[8..]);
        Version::new(u64::from_be_bytes(epoch), u64::from_be_bytes(seq))
    }

    fn key_under(self, prefix: &[u8]) -> Bytes {
        let mut key = Vec::with_capacity(prefix.len() + 16);
        key.extend_from_slice(prefix);
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

/// Prefix of the dup entries' keys (requests trimmed from the log, kept for
/// retries), also followed by the big-endian version.
pub const DUP_KEY_PREFIX: &[u8] = b"pgdup/";

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

/// [`LogResult::Err`] codes. Frozen: they are stored in PG logs. The low
/// byte says what failed; above it, a failure of the request's own guard
/// number `i` carries `i + 1` (0: a condition the request's ops imply).
pub mod err_code {
    /// The object's version was not the one the request expected.
    pub const VERSION_MISMATCH: u32 = 1;
    /// An xattr's value was not the one the request expected.
    pub const XATTR_MISMATCH: u32 = 2;
    /// The object to remove from (or remove) does not exist.
    pub const NOT_FOUND: u32 = 3;
    /// The object to create exclusively exists.
    pub const EXISTS: u32 = 4;
    /// An omap value was not the one the request expected.
    pub const OMAP_MISMATCH: u32 = 5;

    /// `code` of the request's guard `guard` (`None`: implied by its ops).
    #[must_use]
    pub fn of_guard(code: u32, guard: Option<u32>) -> u32 {
        match guard {
            Some(index) if index < 0x00ff_fffe => code | ((index + 1) << 8),
            _ => code,
        }
    }

    /// What failed, and the index of the request's guard that did.
    #[must_use]
    pub fn split(code: u32) -> (u32, Option<u32>) {
        let guard = code >> 8;
        (code & 0xff, guard.checked_sub(1))
    }

    /// What a code means, for the client's error message.
    #[must_use]
    pub fn describe(code: u32) -> &'static str {
        match split(code).0 {
            VERSION_MISMATCH => "object version differs from the expected one",
            XATTR_MISMATCH => "xattr value differs from the expected one",
            NOT_FOUND => "object not found",
            EXISTS => "object exists",
            OMAP_MISMATCH => "omap value differs from the expected one",
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
        encode_head(&mut out, LOG_ENTRY_FORMAT, self.version, self.req);
        out.push(match self.kind {
            LogKind::Write => 0,
            LogKind::Remove => 1,
            LogKind::Refused => 2,
        });
        encode_result(&mut out, self.result);
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
        let (version, req) = decode_head(&mut reader, LOG_ENTRY_FORMAT)?;
        let kind = match reader.u8()? {
            0 => LogKind::Write,
            1 => LogKind::Remove,
            2 => LogKind::Refused,
            tag => return Err(LogDecodeError::BadTag { what: "kind", tag }),
        };
        let result = decode_result(&mut reader)?;
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

/// The start both entry encodings share: the format byte, then epoch, seq,
/// client and tid as little-endian u64s.
fn encode_head(out: &mut Vec<u8>, format: u8, version: Version, req: ReqId) {
    out.push(format);
    for word in [version.epoch.0, version.seq, req.client, req.tid] {
        out.extend_from_slice(&word.to_le_bytes());
    }
}

fn decode_head(reader: &mut Reader<'_>, format: u8) -> Result<(Version, ReqId), LogDecodeError> {
    let found = reader.u8()?;
    if found != format {
        return Err(LogDecodeError::UnknownFormat(found));
    }
    let version = Version::new(reader.u64()?, reader.u64()?);
    let req = ReqId {
        client: reader.u64()?,
        tid: reader.u64()?,
    };
    Ok((version, req))
}

/// A result as both entry encodings store it: tag u8 (0 ok, 1 err), then
/// the u64 object version or the u32 error code, little-endian.
fn encode_result(out: &mut Vec<u8>, result: LogResult) {
    match result {
        LogResult::Ok { object_version } => {
            out.push(0);
            out.extend_from_slice(&object_version.to_le_bytes());
        }
        LogResult::Err { code } => {
            out.push(1);
            out.extend_from_slice(&code.to_le_bytes());
        }
    }
}

fn decode_result(reader: &mut Reader<'_>) -> Result<LogResult, LogDecodeError> {
    match reader.u8()? {
        0 => Ok(LogResult::Ok {
            object_version: reader.u64()?,
        }),
        1 => Ok(LogResult::Err {
            code: u32::from_le_bytes(reader.array()?),
        }),
        tag => Err(LogDecodeError::BadTag {
            what: "result",
            tag,
        }),
    }
}

/// A request trimmed from the log, kept (like Ceph's pg log "dups") so a
/// client that retries it after more writes to the PG than the log holds
/// still gets its answer instead of having it applied twice. Only the
/// request, its version and its result: no object name, so thousands fit
/// in a peering message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DupEntry {
    pub version: Version,
    pub req: ReqId,
    pub result: LogResult,
}

const DUP_ENTRY_FORMAT: u8 = 1;

impl DupEntry {
    #[must_use]
    pub fn of(entry: &LogEntry) -> DupEntry {
        DupEntry {
            version: entry.version,
            req: entry.req,
            result: entry.result,
        }
    }

    /// Its metadata key: [`DUP_KEY_PREFIX`], then epoch and sequence
    /// big-endian, so keys sort in version order.
    #[must_use]
    pub fn key(&self) -> Bytes {
        self.version.dup_key()
    }

    /// Format version 1, then little-endian epoch u64, seq u64, client u64,
    /// tid u64, and the result as in [`LogEntry::encode`].
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(42);
        encode_head(&mut out, DUP_ENTRY_FORMAT, self.version, self.req);
        encode_result(&mut out, self.result);
        Bytes::from(out)
    }

    /// Decodes what [`DupEntry::encode`] wrote, validating every field.
    ///
    /// # Errors
    /// [`LogDecodeError`] for unknown formats, tags, short or long input.
    pub fn decode(bytes: &[u8]) -> Result<DupEntry, LogDecodeError> {
        let mut reader = Reader { bytes, at: 0 };
        let (version, req) = decode_head(&mut reader, DUP_ENTRY_FORMAT)?;
        let result = decode_result(&mut reader)?;
        if reader.at != bytes.len() {
            return Err(LogDecodeError::Trailing(bytes.len() - reader.at));
        }
        Ok(DupEntry {
            version,
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
/// `entries_max`, then (older) the dups of trimmed entries, at most
/// `dups_max`, with an index from request id to version for dedup.
#[derive(Debug)]
pub struct PgLog {
    entries: VecDeque<LogEntry>,
    dups: VecDeque<DupEntry>,
    by_req: HashMap<ReqId, Version>,
    /// Each object's newest entry that changed it (not a refusal).
    by_object: HashMap<Bytes, Version>,
    entries_max: usize,
    dups_max: usize,
}

/// What an append pushed out: entries that left the log for the dups, and
/// the versions of dups forgotten for good.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub to_dups: Vec<DupEntry>,
    pub forgotten: Vec<Version>,
}

impl PgLog {
    #[must_use]
    pub fn new(entries_max: usize, dups_max: usize) -> PgLog {
        assert!(entries_max > 0, "a PG log must hold at least one entry");
        PgLog {
            entries: VecDeque::new(),
            dups: VecDeque::new(),
            by_req: HashMap::new(),
            by_object: HashMap::new(),
            entries_max,
            dups_max,
        }
    }

    /// Appends `entry` (whose version must exceed every logged one) and
    /// returns what was trimmed to stay within the bounds.
    pub fn append(&mut self, entry: LogEntry) -> Trimmed {
        if let Some(last) = self.entries.back() {
            assert!(
                entry.version > last.version,
                "log entry {} not after {}",
                entry.version,
                last.version
            );
        }
        self.by_req.insert(entry.req, entry.version);
        if entry.kind != LogKind::Refused {
            self.by_object.insert(entry.object.clone(), entry.version);
        }
        self.entries.push_back(entry);
        let mut trimmed = Trimmed::default();
        while self.entries.len() > self.entries_max {
            let old = self
                .entries
                .pop_front()
                .expect("log is longer than its bound");
            if self.by_object.get(&old.object) == Some(&old.version) {
                self.by_object.remove(&old.object);
            }
            let dup = DupEntry::of(&old);
            trimmed.to_dups.push(dup);
            trimmed.forgotten.extend(self.push_dup(dup));
        }
        trimmed
    }

    /// Adds `dup`, older than every entry and newer than every dup, and
    /// returns the version of the dup forgotten to stay within the bound.
    fn push_dup(&mut self, dup: DupEntry) -> Option<Version> {
        if self.dups_max == 0 {
            self.forget(dup.req, dup.version);
            return Some(dup.version);
        }
        self.dups.push_back(dup);
        if self.dups.len() <= self.dups_max {
            return None;
        }
        let old = self.dups.pop_front()?;
        self.forget(old.req, old.version);
        Some(old.version)
    }

    fn forget(&mut self, req: ReqId, version: Version) {
        if self.by_req.get(&req) == Some(&version) {
            self.by_req.remove(&req);
        }
    }

    /// Takes back stored dups (any order; an empty log only): the newest
    /// `dups_max` are kept.
    pub fn restore_dups(&mut self, mut dups: Vec<DupEntry>) {
        assert!(self.entries.is_empty(), "dups restored under a log");
        dups.sort_by_key(|d| d.version);
        dups.dedup_by_key(|d| d.version);
        let skip = dups.len().saturating_sub(self.dups_max);
        for dup in dups.into_iter().skip(skip) {
            if self
                .dups
                .back()
                .is_some_and(|last| last.version >= dup.version)
            {
                continue;
            }
            self.by_req.insert(dup.req, dup.version);
            self.dups.push_back(dup);
        }
    }

    /// The request `req` as logged, if its entry or its dup is still kept.
    #[must_use]
    pub fn find_req(&self, req: ReqId) -> Option<DupEntry> {
        let version = *self.by_req.get(&req)?;
        if let Some(entry) = self.get(version) {
            return Some(DupEntry::of(entry));
        }
        let index = self
            .dups
            .binary_search_by(|dup| dup.version.cmp(&version))
            .ok()?;
        self.dups.get(index).copied()
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

    /// The newest entry that changed `object` (not a refusal), if the log
    /// holds one.
    #[must_use]
    pub fn newest_change(&self, object: &[u8]) -> Option<&LogEntry> {
        self.get(*self.by_object.get(object)?)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &LogEntry> {
        self.entries.iter()
    }

    /// The dups, oldest first.
    pub fn dups(&self) -> impl DoubleEndedIterator<Item = &DupEntry> {
        self.dups.iter()
    }

    /// What appending one more entry would trim: the oldest entry (to the
    /// dups) and the dup that would then be forgotten. For writing the
    /// same change to the store in the append's transaction.
    #[must_use]
    pub fn next_trim(&self) -> (Option<&LogEntry>, Option<&DupEntry>) {
        if self.entries.len() < self.entries_max {
            return (None, None);
        }
        let oldest = self.entries.front();
        let forgotten = if self.dups_max == 0 {
            None
        } else if self.dups.len() >= self.dups_max {
            self.dups.front()
        } else {
            None
        };
        (oldest, forgotten)
    }

    #[must_use]
    pub fn dups_max(&self) -> usize {
        self.dups_max
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
    fn the_newest_change_of_an_object_is_found_until_trimmed() {
        let mut log = PgLog::new(3, 10);
        let on = |seq: u64, object: &'static [u8], kind: LogKind| LogEntry {
            object: Bytes::from_static(object),
            kind,
            ..entry(seq)
        };
        log.append(on(1, b"a", LogKind::Write));
        log.append(on(2, b"b", LogKind::Write));
        log.append(on(3, b"a", LogKind::Refused));
        assert_eq!(log.newest_change(b"a").map(|e| e.version.seq), Some(1));
        log.append(on(4, b"a", LogKind::Remove));
        assert_eq!(log.newest_change(b"a").map(|e| e.version.seq), Some(4));
        assert_eq!(log.newest_change(b"b").map(|e| e.version.seq), Some(2));
        log.append(on(5, b"c", LogKind::Write));
        log.append(on(6, b"c", LogKind::Write));
        assert_eq!(log.newest_change(b"b"), None, "trimmed");
        assert_eq!(log.newest_change(b"c").map(|e| e.version.seq), Some(6));
        assert_eq!(log.newest_change(b"zzz"), None);
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
    fn log_trims_oldest_into_dups_then_forgets_them() {
        let mut log = PgLog::new(2, 2);
        assert_eq!(log.append(entry(1)), Trimmed::default());
        assert_eq!(log.append(entry(2)), Trimmed::default());
        assert_eq!(
            log.next_trim().0.map(|e| e.version),
            Some(Version::new(3, 1))
        );
        let trimmed = log.append(entry(3));
        assert_eq!(trimmed.to_dups, vec![DupEntry::of(&entry(1))]);
        assert!(trimmed.forgotten.is_empty());
        assert_eq!(log.len(), 2);
        // A retry of a trimmed request still finds its answer.
        let dup = log
            .find_req(ReqId { client: 7, tid: 1 })
            .expect("kept as a dup");
        assert_eq!(dup.version, Version::new(3, 1));
        assert_eq!(dup.result, LogResult::Ok { object_version: 1 });
        assert!(
            log.get(Version::new(3, 1)).is_none(),
            "no longer a log entry"
        );
        log.append(entry(4));
        assert_eq!(
            log.next_trim().1.map(|d| d.version),
            Some(Version::new(3, 1))
        );
        let trimmed = log.append(entry(5));
        assert_eq!(trimmed.forgotten, vec![Version::new(3, 1)]);
        assert!(log.find_req(ReqId { client: 7, tid: 1 }).is_none());
        assert_eq!(
            log.find_req(ReqId { client: 7, tid: 2 }).map(|d| d.version),
            Some(Version::new(3, 2))
        );
        assert_eq!(
            log.find_req(ReqId { client: 7, tid: 5 }).map(|e| e.version),
            Some(Version::new(3, 5))
        );
        assert_eq!(log.dups().count(), 2);
    }

    #[test]
    fn restored_dups_answer_retries_and_keep_the_newest() {
        let mut log = PgLog::new(4, 2);
        log.restore_dups(vec![
            DupEntry::of(&entry(3)),
            DupEntry::of(&entry(1)),
            DupEntry::of(&entry(2)),
        ]);
        assert!(log.find_req(ReqId { client: 7, tid: 1 }).is_none());
        assert!(log.find_req(ReqId { client: 7, tid: 2 }).is_some());
        assert!(log.find_req(ReqId { client: 7, tid: 3 }).is_some());
        log.append(entry(4));
        assert_eq!(log.dups().count(), 2);
    }

    #[test]
    fn dup_entry_golden_bytes_round_trip() {
        let dup = DupEntry {
            version: Version::new(2, 5),
            req: ReqId { client: 1, tid: 9 },
            result: LogResult::Err { code: 3 },
        };
        let bytes = dup.encode();
        let mut golden = vec![1u8];
        for word in [2u64, 5, 1, 9] {
            golden.extend_from_slice(&word.to_le_bytes());
        }
        golden.extend_from_slice(&[1, 3, 0, 0, 0]);
        assert_eq!(bytes.as_ref(), golden.as_slice());
        assert_eq!(DupEntry::decode(&bytes), Ok(dup));
        assert_eq!(
            DupEntry::decode(&bytes[..bytes.len() - 1]),
            Err(LogDecodeError::Truncated(golden.len() - 4))
        );
        assert!(dup.key().starts_with(DUP_KEY_PREFIX));
        assert!(DupEntry::of(&entry(1)).key() < DupEntry::of(&entry(2)).key());
    }
}

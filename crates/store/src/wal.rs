//! The commit log: one flush makes a batch of small writes durable.
//!
//! Without it a batch needs two flushes in a row: `fdatasync` of the data
//! file (small payloads went there through the page cache) and then the
//! metadata database's journal. Each costs a device cache flush plus, when
//! the write landed in newly allocated blocks, a file-system metadata write
//! (measured here: 12 adjacent 4 KiB writes and `fdatasync` into written
//! blocks 160–190 µs, into fresh or preallocated blocks 250–350 µs).
//!
//! So each batch writes one record here instead: every metadata change of
//! the batch (as whole key images: set or removed) and the bytes of its
//! small extents (under [`limits::DIRECT_WRITE_BYTES_MIN`]), followed by one
//! `fdatasync`. The log is a ring of fixed capacity, written with zeros
//! when it is created and then rewritten in place, so its flushes never
//! allocate blocks or convert preallocated ones.
//! Large payloads are still written once, to their extents, and the data
//! file is flushed before the record (write once: only small data is
//! written twice, as the design allows).
//!
//! The metadata database and the data file are made durable only at a
//! *checkpoint*: `fdatasync` of the data file, a journal flush of the
//! database, then the header here moves past every record they now hold.
//! At open, the records after the header's position are replayed (their
//! small data written back, their key images applied), which is idempotent
//! because they carry images, not deltas.
//!
//! Layout (all integers little-endian):
//!
//! - bytes `[0, 4096)`: the header, `"CAIRNWAL"`, format `u32` = 1, the
//!   ring's capacity `u64` (the file is preallocated to it), the epoch
//!   `u64`, the sequence number `u64` of the first record to replay, its
//!   offset `u64`, then a crc32c of those 44 bytes.
//! - records from offset 4096, each starting on a 4 KiB boundary and padded
//!   to whole 4 KiB blocks (whole-page writes never read a page first):
//!   magic `u32` = `0x4c52_4357` ("WCRL"), epoch `u64`, sequence `u64`,
//!   body length `u32`, crc32c `u32` of the epoch, sequence, length and
//!   body, then the body
//!   (postcard [`WalBody`]). A record that does not fit before the end of
//!   the ring starts again at 4096.
//!
//! Replay reads records while each is whole and carries the header's epoch
//! and the next sequence number; a record that fails a test ends the log (a
//! torn last write, or stale bytes from an earlier lap, whose numbers are
//! lower) unless the record after it is whole: records are appended one at
//! a time, each once the one before is durable, so only the last can be
//! torn, and a damaged record followed by a whole one is corruption of
//! acknowledged transactions, an error naming the record and its offset
//! (the store answers `Corrupt`, and the OSD refuses to serve it). Every
//! open starts a new epoch, so records past a torn one, which replay
//! stopped before, can never be taken for new ones later.

use crate::failpoint::SyncSite;
use crate::limits;
use cairn_types::crc::crc32c;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

const HEADER_BYTES: u64 = 4096;
const HEADER_MAGIC: &[u8; 8] = b"CAIRNWAL";
const WAL_FORMAT_VERSION: u32 = 1;
const RECORD_MAGIC: u32 = 0x4c52_4357;
const RECORD_HEADER_BYTES: usize = 28;
const BLOCK: u64 = 4096;

/// The keyspace a change is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Space {
    Collections,
    Objects,
    Omap,
    Meta,
}

/// One key's new image: its sealed value, or `None` when removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Change {
    pub space: Space,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub value: Option<serde_bytes::ByteBuf>,
}

/// Bytes of one small extent, at its data-file offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DataWrite {
    pub offset: u64,
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// What one batch changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WalBody {
    pub changes: Vec<Change>,
    pub data: Vec<DataWrite>,
}

/// The open log, positioned after its last record.
#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    /// The file opened with `O_DIRECT | O_DSYNC`, and an aligned buffer
    /// for it: a record is then one write the device completes durably
    /// (measured 135–175 µs for 40 KiB, against 165–230 µs for a buffered
    /// write and `fdatasync`). `None` where the file system refuses.
    direct: Option<(File, cairn_iobuf::IoBuffer)>,
    capacity: u64,
    /// Records of this epoch only are read back.
    epoch: u64,
    /// Sequence number and offset of the next record.
    next_seq: u64,
    pos: u64,
    /// Ring bytes taken since the header's position (records and skipped
    /// tails), which no record may overwrite.
    since_checkpoint: u64,
}

impl Wal {
    /// Opens the log in `dir`, or creates one of `capacity` ring bytes
    /// (an existing log keeps the capacity its header records), and returns
    /// it with the records to replay, oldest first. The log then appends
    /// after the last of them in a new epoch; the caller replays them,
    /// makes their effects durable and calls [`Wal::checkpoint`] before
    /// appending.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<(Wal, Vec<WalBody>)> {
        let path = dir.join("wal");
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let capacity = capacity.max(4 * limits::WAL_RECORD_BYTES_MAX) / BLOCK * BLOCK;
        let direct = {
            use std::os::unix::fs::OpenOptionsExt;
            let flags = if crate::failpoint::skip(SyncSite::WalAppend) {
                rustix::fs::OFlags::DIRECT
            } else {
                rustix::fs::OFlags::DIRECT | rustix::fs::OFlags::DSYNC
            };
            let buffer = usize::try_from(limits::WAL_RECORD_BYTES_MAX).unwrap_or(usize::MAX);
            OpenOptions::new()
                .write(true)
                .custom_flags(flags.bits().cast_signed())
                .open(&path)
                .ok()
                .zip(cairn_iobuf::IoBuffer::new(buffer).ok())
        };
        let mut wal = Wal {
            file,
            direct,
            capacity,
            epoch: 1,
            next_seq: 1,
            pos: HEADER_BYTES,
            since_checkpoint: 0,
        };
        if !existed || wal.file.metadata()?.len() == 0 || wal.header_never_written()? {
            // Reserved up front, so a full disk cannot refuse a commit, and
            // written with zeros: a record written into preallocated
            // (unwritten) blocks makes its flush also write the file's
            // extent blocks and inode, synchronously, on every commit of
            // the first lap. Zeros read as no record. The fallocate is best
            // effort (not every file system can preallocate) and keeps the
            // ring contiguous.
            let _ =
                rustix::fs::fallocate(&wal.file, rustix::fs::FallocateFlags::empty(), 0, capacity);
            let zeros = vec![0u8; 1 << 20];
            let mut offset = 0;
            while offset < capacity {
                let n = (capacity - offset).min(zeros.len() as u64);
                wal.file
                    .write_all_at(&zeros[..usize::try_from(n).unwrap_or(0)], offset)?;
                offset += n;
            }
            wal.write_header()?;
            // Its name becomes durable with the fsync of `dir` that ends
            // the store's creation (`DiskStore::open`).
            if !crate::failpoint::skip(SyncSite::WalCreate) {
                wal.file.sync_all()?;
            }
            return Ok((wal, Vec::new()));
        }
        let (capacity, epoch, seq, pos) = wal.read_header()?;
        wal.capacity = capacity;
        wal.epoch = epoch;
        wal.next_seq = seq;
        wal.pos = pos;
        let mut bodies = Vec::new();
        while let Some((body, taken)) = wal.read_next()? {
            bodies.push(body);
            wal.since_checkpoint += taken;
        }
        wal.epoch += 1;
        if bodies.is_empty() {
            wal.checkpoint()?;
        }
        Ok((wal, bodies))
    }

    /// Ring bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes taken in the ring since the last checkpoint.
    pub fn since_checkpoint(&self) -> u64 {
        self.since_checkpoint
    }

    /// Whether a record of `body_len` bytes can be appended without
    /// overwriting a record the last checkpoint does not cover.
    pub fn fits(&self, body_len: usize) -> bool {
        let size = record_size(body_len);
        let waste = if self.pos + size > self.capacity {
            self.capacity - self.pos
        } else {
            0
        };
        size <= limits::WAL_RECORD_BYTES_MAX
            && self.since_checkpoint + waste + size <= self.capacity - HEADER_BYTES
    }

    /// Appends one record and makes it durable. The caller has checked
    /// [`Wal::fits`].
    pub fn append(&mut self, body: &[u8]) -> io::Result<()> {
        let size = record_size(body.len());
        if self.pos + size > self.capacity {
            self.since_checkpoint += self.capacity - self.pos;
            self.pos = HEADER_BYTES;
            crate::failpoint::crash_point(crate::failpoint::CrashPoint::WalWrap);
        }
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(usize::MAX));
        let len = u32::try_from(body.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "log record too large"))?;
        buf.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        buf.extend_from_slice(&self.epoch.to_le_bytes());
        buf.extend_from_slice(&self.next_seq.to_le_bytes());
        buf.extend_from_slice(&len.to_le_bytes());
        let crc = record_crc(&buf[4..24], body);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf.extend_from_slice(body);
        buf.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
        self.write_durably(&buf)?;
        self.pos += size;
        self.next_seq += 1;
        self.since_checkpoint += size;
        Ok(())
    }

    /// Writes whole blocks at the current position and waits until they
    /// are durable.
    fn write_durably(&mut self, record: &[u8]) -> io::Result<()> {
        if let Some((file, buffer)) = &mut self.direct
            && record.len() <= buffer.len()
        {
            let staged = &mut buffer.as_mut_slice()[..record.len()];
            staged.copy_from_slice(record);
            match file.write_all_at(staged, self.pos) {
                Ok(()) => return Ok(()),
                // Refused (a file system without O_DIRECT for this file):
                // buffered from now on.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    self.direct = None;
                }
                Err(e) => return Err(e),
            }
        }
        self.file.write_all_at(record, self.pos)?;
        if crate::failpoint::skip(SyncSite::WalAppend) {
            return Ok(());
        }
        self.file.sync_data()
    }

    /// Moves the replay start past every record so far. The caller has made
    /// their effects durable first.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        let mark = self.mark();
        self.header()?.write(&mark)?;
        self.checkpointed(&mark);
        Ok(())
    }

    /// The position after the last record, for a checkpoint taken in the
    /// background while records go on being appended.
    pub fn mark(&self) -> Mark {
        Mark {
            next_seq: self.next_seq,
            pos: self.pos,
            since_checkpoint: self.since_checkpoint,
        }
    }

    /// A handle that writes the header, for another thread.
    pub fn header(&self) -> io::Result<Header> {
        Ok(Header {
            file: self.file.try_clone()?,
            capacity: self.capacity,
            epoch: self.epoch,
        })
    }

    /// Records that the header now starts at `mark`: the ring before it is
    /// free again.
    pub fn checkpointed(&mut self, mark: &Mark) {
        self.since_checkpoint = self.since_checkpoint.saturating_sub(mark.since_checkpoint);
    }

    fn write_header(&self) -> io::Result<()> {
        self.header()?.write_only(&self.mark())
    }

    /// A log created by an open that stopped before its header was
    /// written (and so before any record) reads as zeros there.
    fn header_never_written(&self) -> io::Result<bool> {
        let mut header = [0u8; 48];
        Ok(read_fully(&self.file, &mut header, 0)? && header.iter().all(|&b| b == 0))
    }

    fn read_header(&self) -> io::Result<(u64, u64, u64, u64)> {
        let mut header = [0u8; 48];
        self.file
            .read_exact_at(&mut header, 0)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("log header: {e}")))?;
        let corrupt = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if &header[..8] != HEADER_MAGIC {
            return Err(corrupt("log header: bad magic"));
        }
        if le_u32(&header[44..48]) != crc32c(&header[..44]) {
            return Err(corrupt("log header: checksum mismatch"));
        }
        let version = le_u32(&header[8..12]);
        if version != WAL_FORMAT_VERSION {
            return Err(corrupt(&format!("log header: format {version} unknown")));
        }
        let capacity = le_u64(&header[12..20]);
        let epoch = le_u64(&header[20..28]);
        let seq = le_u64(&header[28..36]);
        let pos = le_u64(&header[36..44]);
        if !capacity.is_multiple_of(BLOCK) || capacity < 4 * limits::WAL_RECORD_BYTES_MAX {
            return Err(corrupt(&format!("log header: capacity {capacity}")));
        }
        if pos < HEADER_BYTES || !pos.is_multiple_of(BLOCK) || pos > capacity {
            return Err(corrupt(&format!(
                "log header: offset {pos} outside the ring"
            )));
        }
        Ok((capacity, epoch, seq, pos))
    }

    /// The record at the current position (or, failing that, at the start
    /// of the ring) if it is whole and carries the next number; advances
    /// past it. Returns the ring bytes it took.
    fn read_next(&mut self) -> io::Result<Option<(WalBody, u64)>> {
        if let Some((body, size)) = self.read_at(self.pos)? {
            self.pos += size;
            self.next_seq += 1;
            return Ok(Some((body, size)));
        }
        if self.pos != HEADER_BYTES
            && let Some((body, size)) = self.read_at(HEADER_BYTES)?
        {
            let taken = self.capacity - self.pos + size;
            self.pos = HEADER_BYTES + size;
            self.next_seq += 1;
            return Ok(Some((body, taken)));
        }
        self.check_end()?;
        Ok(None)
    }

    /// The log seems to end at `self.pos` (no whole record `next_seq`
    /// there, nor at the ring's start). Records are appended one at a
    /// time, each after the one before it is durable, so only the last
    /// one can be torn by a crash: if record `next_seq + 1` is whole, the
    /// missing one was written and then damaged, and the records from it
    /// on were acknowledged. That is an error, never a shorter history.
    /// The successor starts within one record of the missing one, which
    /// lies at `self.pos` or, wrapped, at the ring's start.
    fn check_end(&self) -> io::Result<()> {
        let successor = self.next_seq + 1;
        let windows = [self.pos, HEADER_BYTES];
        for start in windows {
            let mut at = start + BLOCK;
            while at <= start + limits::WAL_RECORD_BYTES_MAX && at + BLOCK <= self.capacity {
                if self.read_record(at, successor)?.is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "log record {} (epoch {}) at offset {} is damaged, but record {successor} \
                             after it, at offset {at}, is whole: the records from {} on were \
                             acknowledged, and replay will not drop them",
                            self.next_seq, self.epoch, self.pos, self.next_seq
                        ),
                    ));
                }
                at += BLOCK;
            }
        }
        Ok(())
    }

    fn read_at(&self, pos: u64) -> io::Result<Option<(WalBody, u64)>> {
        self.read_record(pos, self.next_seq)
    }

    /// Record `seq` of this epoch at `pos`, if it is there whole.
    fn read_record(&self, pos: u64, seq: u64) -> io::Result<Option<(WalBody, u64)>> {
        if pos + BLOCK > self.capacity {
            return Ok(None);
        }
        let mut head = [0u8; RECORD_HEADER_BYTES];
        if !read_fully(&self.file, &mut head, pos)? {
            return Ok(None);
        }
        if le_u32(&head[0..4]) != RECORD_MAGIC
            || le_u64(&head[4..12]) != self.epoch
            || le_u64(&head[12..20]) != seq
        {
            return Ok(None);
        }
        let len = u64::from(le_u32(&head[20..24]));
        let size = record_size(usize::try_from(len).unwrap_or(usize::MAX));
        if size > limits::WAL_RECORD_BYTES_MAX || pos + size > self.capacity {
            return Ok(None);
        }
        let mut body = vec![0u8; usize::try_from(len).unwrap_or(0)];
        if !read_fully(&self.file, &mut body, pos + RECORD_HEADER_BYTES as u64)? {
            return Ok(None);
        }
        if record_crc(&head[4..24], &body) != le_u32(&head[24..28]) {
            return Ok(None);
        }
        // A record whose checksum holds but whose body does not decode was
        // written by a broken build: stop there rather than guess.
        match postcard::from_bytes::<WalBody>(&body) {
            Ok(decoded) => Ok(Some((decoded, size))),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log record {seq} at {pos}: {e}"),
            )),
        }
    }
}

/// A position in the log: where replay would start after a checkpoint
/// there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    next_seq: u64,
    pos: u64,
    since_checkpoint: u64,
}

/// Writes the log's header.
#[derive(Debug)]
pub(crate) struct Header {
    file: File,
    capacity: u64,
    epoch: u64,
}

impl Header {
    /// Durably moves the replay start to `mark`.
    pub fn write(&self, mark: &Mark) -> io::Result<()> {
        self.write_only(mark)?;
        if !crate::failpoint::skip(SyncSite::WalHeader) {
            self.file.sync_data()?;
        }
        crate::failpoint::crash_point(crate::failpoint::CrashPoint::CheckpointDone);
        Ok(())
    }

    fn write_only(&self, mark: &Mark) -> io::Result<()> {
        let mut header = Vec::with_capacity(48);
        header.extend_from_slice(HEADER_MAGIC);
        header.extend_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&self.capacity.to_le_bytes());
        header.extend_from_slice(&self.epoch.to_le_bytes());
        header.extend_from_slice(&mark.next_seq.to_le_bytes());
        header.extend_from_slice(&mark.pos.to_le_bytes());
        let crc = crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        header.resize(usize::try_from(HEADER_BYTES).unwrap_or(4096), 0);
        self.file.write_all_at(&header, 0)
    }
}

/// Encodes a batch's record body.
pub(crate) fn encode(body: &WalBody) -> Vec<u8> {
    // Plain data: postcard cannot fail on it.
    postcard::to_allocvec(body).unwrap_or_default()
}

fn record_size(body_len: usize) -> u64 {
    (RECORD_HEADER_BYTES as u64 + body_len as u64).div_ceil(BLOCK) * BLOCK
}

fn record_crc(head: &[u8], body: &[u8]) -> u32 {
    cairn_types::crc::crc32c_append(crc32c(head), body)
}

/// Reads `buf.len()` bytes at `offset`; `false` if the file ends first.
fn read_fully(file: &File, buf: &mut [u8], offset: u64) -> io::Result<bool> {
    match file.read_exact_at(buf, offset) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().unwrap_or([0; 4]))
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(i: u64, data_len: usize) -> WalBody {
        WalBody {
            changes: vec![Change {
                space: Space::Objects,
                key: i.to_be_bytes().to_vec(),
                value: (!i.is_multiple_of(3))
                    .then(|| serde_bytes::ByteBuf::from(vec![i as u8; 10])),
            }],
            data: vec![DataWrite {
                offset: i * 4096,
                bytes: vec![i as u8; data_len],
            }],
        }
    }

    #[test]
    fn records_after_the_checkpoint_are_replayed_across_wraps() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let capacity = 4 * limits::WAL_RECORD_BYTES_MAX;
        let (mut wal, replay) = Wal::open(dir.path(), capacity)?;
        assert!(replay.is_empty());
        let big = usize::try_from(limits::WAL_RECORD_BYTES_MAX / 3).unwrap_or(0);
        let mut written = Vec::new();
        // Several laps, checkpointing whenever the next record would not fit.
        for i in 0..40u64 {
            let b = body(i, if i % 4 == 0 { big } else { 5000 });
            let encoded = encode(&b);
            if !wal.fits(encoded.len()) {
                wal.checkpoint()?;
                written.clear();
            }
            wal.append(&encoded)?;
            written.push(b);
        }
        drop(wal);
        let (wal, replay) = Wal::open(dir.path(), capacity)?;
        assert_eq!(replay, written, "exactly the records since the checkpoint");
        assert!(wal.since_checkpoint() > 0);
        Ok(())
    }

    #[test]
    fn a_torn_last_record_ends_the_log() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let capacity = 4 * limits::WAL_RECORD_BYTES_MAX;
        let (mut wal, _) = Wal::open(dir.path(), capacity)?;
        for i in 0..5 {
            wal.append(&encode(&body(i, 100)))?;
        }
        drop(wal);
        // Tear the last record (each takes one block): the crash hit it.
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join("wal"))?;
        file.write_all_at(&[0xff], HEADER_BYTES + 4 * BLOCK + 40)?;
        let (mut wal, replay) = Wal::open(dir.path(), capacity)?;
        assert_eq!(replay, (0..4).map(|i| body(i, 100)).collect::<Vec<_>>());
        // Replayed and checkpointed (as the store does), then a new record
        // of the same size lands where the torn one was: the intact
        // older record behind it must not come back with it.
        wal.checkpoint()?;
        wal.append(&encode(&body(9, 100)))?;
        drop(wal);
        let (_, replay) = Wal::open(dir.path(), capacity)?;
        assert_eq!(replay, vec![body(9, 100)]);
        Ok(())
    }

    #[test]
    fn a_damaged_record_before_a_whole_one_is_an_error_naming_it() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let capacity = 4 * limits::WAL_RECORD_BYTES_MAX;
        let (mut wal, _) = Wal::open(dir.path(), capacity)?;
        // Records of one block, then one of three blocks, then more.
        for i in 0..3 {
            wal.append(&encode(&body(i, 100)))?;
        }
        wal.append(&encode(&body(3, 10_000)))?;
        wal.append(&encode(&body(4, 100)))?;
        drop(wal);
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join("wal"))?;
        let wal_path = dir.path().join("wal");
        let pristine = std::fs::read(&wal_path)?;
        // Damage in the body of record 2, then in the header of record 4
        // (its length unreadable): both are followed by a whole record.
        // Records are numbered from 1: the damaged ones are 3 and 4.
        for (record_start, damage, seq) in [
            (HEADER_BYTES + 2 * BLOCK, 40, 3),
            (HEADER_BYTES + 3 * BLOCK, 2, 4),
        ] {
            std::fs::write(&wal_path, &pristine)?;
            file.write_all_at(&[0xa5], record_start + damage)?;
            let Err(error) = Wal::open(dir.path(), capacity) else {
                panic!("a damaged record before a whole one is refused");
            };
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            let text = error.to_string();
            assert!(
                text.contains(&format!("log record {seq} "))
                    && text.contains(&format!("at offset {record_start} is damaged")),
                "{text}"
            );
        }
        // Undamaged, it replays whole.
        std::fs::write(&wal_path, &pristine)?;
        assert_eq!(Wal::open(dir.path(), capacity)?.1.len(), 5);
        Ok(())
    }

    #[test]
    fn a_log_whose_creation_stopped_before_its_header_starts_afresh() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = File::create(dir.path().join("wal"))?;
        file.set_len(1 << 20)?;
        let (mut wal, replay) = Wal::open(dir.path(), 0)?;
        assert!(replay.is_empty());
        wal.append(&encode(&body(1, 10)))?;
        drop(wal);
        let (_, replay) = Wal::open(dir.path(), 0)?;
        assert_eq!(replay, vec![body(1, 10)]);
        Ok(())
    }

    #[test]
    fn a_damaged_header_is_an_error() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        drop(Wal::open(dir.path(), 0)?);
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join("wal"))?;
        file.write_all_at(&[0x55], 14)?;
        let err = Wal::open(dir.path(), 0).err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::InvalidData));
        Ok(())
    }
}

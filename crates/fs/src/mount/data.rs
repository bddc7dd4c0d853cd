//! File data on the OSDs: striped reads and writes with many object
//! operations in flight, a write-back buffer with byte-range dirty
//! tracking (so writers of disjoint ranges of one file never overwrite
//! each other's bytes), readahead, and truncation.

use crate::layout::{self, ObjectExtent};
use crate::mount::limits::{DATA_OPS_IN_FLIGHT, READAHEAD_BYTES, READAHEAD_CHUNK_BYTES};
use bytes::Bytes;
use cairn_client::{Client, ClientError, Guard, ReadRange, WriteOp};
use cairn_proto::mds::{Errno, Layout};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An OSD error as the caller's errno.
#[must_use]
pub fn errno_of(error: &ClientError) -> Errno {
    match error {
        ClientError::Full(_) => libc::ENOSPC,
        ClientError::NotFound => libc::ENOENT,
        other => {
            tracing::warn!(error = %other, "data I/O failed");
            libc::EIO
        }
    }
}

/// Where a file's objects are.
#[derive(Clone, Debug)]
pub struct DataPath {
    pub client: Client,
    pub pool: String,
    /// When an OSD last refused a write of this path for a full cluster
    /// (milliseconds since the Unix epoch; 0: never).
    pub full_at_ms: Arc<AtomicU64>,
}

/// How long after an OSD refused a write for a full cluster the cluster
/// counts as full here.
const FULL_REMEMBERED_MS: u64 = 10_000;

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl DataPath {
    #[must_use]
    pub fn new(client: Client, pool: String) -> DataPath {
        DataPath {
            client,
            pool,
            full_at_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Whether an OSD refused a write for a full cluster moments ago.
    #[must_use]
    pub fn recently_full(&self) -> bool {
        let at = self.full_at_ms.load(Ordering::Relaxed);
        at != 0 && unix_ms().saturating_sub(at) < FULL_REMEMBERED_MS
    }

    fn note(&self, errno: Errno) -> Errno {
        if errno == libc::ENOSPC {
            self.full_at_ms.store(unix_ms(), Ordering::Relaxed);
        }
        errno
    }

    /// Writes `data` at file offset `offset_bytes`, every object piece in
    /// parallel (bounded).
    ///
    /// # Errors
    /// `ENOSPC` for a full cluster, `EIO` otherwise.
    pub async fn write(
        &self,
        ino: u64,
        layout: &Layout,
        offset_bytes: u64,
        data: Bytes,
    ) -> Result<(), Errno> {
        let pieces = layout::extents(layout, offset_bytes, data.len() as u64);
        let mut tasks = tokio::task::JoinSet::new();
        for piece in pieces {
            while tasks.len() >= DATA_OPS_IN_FLIGHT {
                join_one(&mut tasks).await?;
            }
            let start = usize::try_from(piece.range_offset_bytes).unwrap_or(usize::MAX);
            let end = start + usize::try_from(piece.length_bytes).unwrap_or(0);
            let bytes = data.slice(start..end);
            let path = self.clone();
            tasks.spawn(async move {
                let name = layout::object_name(ino, piece.object_index);
                path.client
                    .write(
                        &path.pool,
                        name.as_bytes(),
                        piece.object_offset_bytes,
                        bytes,
                    )
                    .await
                    .map(drop)
                    .map_err(|e| path.note(errno_of(&e)))
            });
        }
        while !tasks.is_empty() {
            join_one(&mut tasks).await?;
        }
        Ok(())
    }

    /// Reads `[offset_bytes, offset_bytes + length_bytes)` (the caller
    /// clamps it to the file size); holes read as zeros.
    ///
    /// # Errors
    /// `EIO`.
    pub async fn read(
        &self,
        ino: u64,
        layout: &Layout,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Bytes, Errno> {
        let pieces = layout::extents(layout, offset_bytes, length_bytes);
        if let [piece] = pieces.as_slice() {
            // One object's bytes (a read-ahead chunk of a default layout):
            // handed on as the client got them, unless short (a hole).
            let name = layout::object_name(ino, piece.object_index);
            let range = ReadRange {
                offset_bytes: piece.object_offset_bytes,
                length_bytes: Some(piece.length_bytes),
            };
            let bytes = match self.client.read(&self.pool, name.as_bytes(), range).await {
                Ok(bytes) => bytes,
                Err(ClientError::NotFound) => Bytes::new(),
                Err(e) => return Err(errno_of(&e)),
            };
            if bytes.len() as u64 == length_bytes {
                return Ok(bytes);
            }
            let mut out = vec![0u8; usize::try_from(length_bytes).unwrap_or(0)];
            place(&mut out, Some((*piece, bytes)));
            return Ok(Bytes::from(out));
        }
        let mut out = vec![0u8; usize::try_from(length_bytes).unwrap_or(0)];
        let mut tasks = tokio::task::JoinSet::new();
        for piece in pieces {
            let path = self.clone();
            tasks.spawn(async move {
                let name = layout::object_name(ino, piece.object_index);
                let range = ReadRange {
                    offset_bytes: piece.object_offset_bytes,
                    length_bytes: Some(piece.length_bytes),
                };
                match path.client.read(&path.pool, name.as_bytes(), range).await {
                    Ok(bytes) => Ok((piece, bytes)),
                    Err(ClientError::NotFound) => Ok((piece, Bytes::new())),
                    Err(e) => Err(errno_of(&e)),
                }
            });
            while tasks.len() >= DATA_OPS_IN_FLIGHT {
                place(&mut out, join_read(&mut tasks).await?);
            }
        }
        while !tasks.is_empty() {
            place(&mut out, join_read(&mut tasks).await?);
        }
        Ok(Bytes::from(out))
    }

    /// Cuts the file's objects to `new_size` from `old_size`: objects past
    /// the end are removed, the one holding the new end is truncated.
    ///
    /// # Errors
    /// `EIO`.
    pub async fn truncate(
        &self,
        ino: u64,
        layout: &Layout,
        old_size: u64,
        new_size: u64,
    ) -> Result<(), Errno> {
        if new_size >= old_size {
            return Ok(());
        }
        let first =
            layout::object_count(layout, new_size).saturating_sub(u64::from(layout.stripe_count));
        let last = layout::object_count(layout, old_size);
        let mut tasks = tokio::task::JoinSet::new();
        for index in first..last {
            let kept = layout::object_bytes_below(layout, index, new_size);
            let path = self.clone();
            tasks.spawn(async move {
                let name = layout::object_name(ino, index);
                let result = if kept == 0 {
                    path.client.remove(&path.pool, name.as_bytes()).await
                } else {
                    let op = WriteOp::new().guard(Guard::Exists).truncate(kept);
                    path.client
                        .operate(&path.pool, name.as_bytes(), op)
                        .await
                        .map(drop)
                };
                match result {
                    Ok(()) | Err(ClientError::NotFound | ClientError::CompareFailed { .. }) => {
                        Ok(())
                    }
                    Err(e) => Err(errno_of(&e)),
                }
            });
            while tasks.len() >= DATA_OPS_IN_FLIGHT {
                join_one(&mut tasks).await?;
            }
        }
        while !tasks.is_empty() {
            join_one(&mut tasks).await?;
        }
        Ok(())
    }

    /// Zeroes `[offset_bytes, offset_bytes + length_bytes)` inside the
    /// file (a punched hole).
    ///
    /// # Errors
    /// `EIO`.
    pub async fn zero(
        &self,
        ino: u64,
        layout: &Layout,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<(), Errno> {
        for piece in layout::extents(layout, offset_bytes, length_bytes) {
            let name = layout::object_name(ino, piece.object_index);
            let op = WriteOp::new()
                .guard(Guard::Exists)
                .zero(piece.object_offset_bytes, piece.length_bytes);
            match self.client.operate(&self.pool, name.as_bytes(), op).await {
                Ok(_) | Err(ClientError::NotFound | ClientError::CompareFailed { .. }) => {}
                Err(e) => return Err(errno_of(&e)),
            }
        }
        Ok(())
    }
}

async fn join_one(tasks: &mut tokio::task::JoinSet<Result<(), Errno>>) -> Result<(), Errno> {
    match tasks.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(_)) => Err(libc::EIO),
        None => Ok(()),
    }
}

type ReadPiece = (ObjectExtent, Bytes);

async fn join_read(
    tasks: &mut tokio::task::JoinSet<Result<ReadPiece, Errno>>,
) -> Result<Option<ReadPiece>, Errno> {
    match tasks.join_next().await {
        Some(Ok(r)) => r.map(Some),
        Some(Err(_)) => Err(libc::EIO),
        None => Ok(None),
    }
}

fn place(out: &mut [u8], piece: Option<ReadPiece>) {
    let Some((piece, bytes)) = piece else { return };
    let start = usize::try_from(piece.range_offset_bytes).unwrap_or(usize::MAX);
    let n = bytes
        .len()
        .min(usize::try_from(piece.length_bytes).unwrap_or(0));
    if let Some(dst) = out.get_mut(start..start + n) {
        dst.copy_from_slice(&bytes[..n]);
    }
}

/// Bytes written but not yet sent to the OSDs, as disjoint ranges.
#[derive(Debug, Default)]
pub struct Dirty {
    ranges: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
}

impl Dirty {
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The end of the highest dirty range.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.ranges
            .iter()
            .next_back()
            .map_or(0, |(o, d)| o + d.len() as u64)
    }

    /// Records `data` at `offset`, over anything dirty there.
    pub fn insert(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        // The common case: a sequential write right after the last range.
        let nothing_after = self.ranges.range(offset..end).next().is_none();
        if nothing_after
            && let Some((o, d)) = self.ranges.range_mut(..=offset).next_back()
            && *o + d.len() as u64 == offset
        {
            d.extend_from_slice(data);
            self.bytes += data.len() as u64;
            return;
        }
        let touching: Vec<u64> = self
            .ranges
            .range(..=end)
            .filter(|(o, d)| *o + d.len() as u64 >= offset)
            .map(|(o, _)| *o)
            .collect();
        let mut start = offset;
        let mut stop = end;
        for o in &touching {
            start = start.min(*o);
            stop = stop.max(*o + self.ranges[o].len() as u64);
        }
        let mut merged = vec![0u8; usize::try_from(stop - start).unwrap_or(0)];
        for o in touching {
            if let Some(d) = self.ranges.remove(&o) {
                self.bytes -= d.len() as u64;
                let at = usize::try_from(o - start).unwrap_or(0);
                merged[at..at + d.len()].copy_from_slice(&d);
            }
        }
        let at = usize::try_from(offset - start).unwrap_or(0);
        merged[at..at + data.len()].copy_from_slice(data);
        self.bytes += merged.len() as u64;
        self.ranges.insert(start, merged);
    }

    /// Copies dirty bytes over `buf`, which holds file range
    /// `[offset, offset + buf.len())`.
    pub fn overlay(&self, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        for (o, d) in self.ranges.range(..end) {
            let d_end = o + d.len() as u64;
            if d_end <= offset {
                continue;
            }
            let from = offset.max(*o);
            let to = end.min(d_end);
            let src =
                &d[usize::try_from(from - o).unwrap_or(0)..usize::try_from(to - o).unwrap_or(0)];
            let dst_at = usize::try_from(from - offset).unwrap_or(0);
            buf[dst_at..dst_at + src.len()].copy_from_slice(src);
        }
    }

    /// Forgets dirty bytes at or past `size`.
    pub fn cut(&mut self, size: u64) {
        let past: Vec<u64> = self
            .ranges
            .range(..)
            .filter(|(o, d)| *o + d.len() as u64 > size)
            .map(|(o, _)| *o)
            .collect();
        for o in past {
            if let Some(mut d) = self.ranges.remove(&o) {
                self.bytes -= d.len() as u64;
                if o < size {
                    d.truncate(usize::try_from(size - o).unwrap_or(0));
                    self.bytes += d.len() as u64;
                    self.ranges.insert(o, d);
                }
            }
        }
    }

    /// Takes every dirty range.
    pub fn take(&mut self) -> Vec<(u64, Bytes)> {
        self.bytes = 0;
        std::mem::take(&mut self.ranges)
            .into_iter()
            .map(|(o, d)| (o, Bytes::from(d)))
            .collect()
    }
}

/// File bytes read ahead: whole chunks of [`READAHEAD_CHUNK_BYTES`], each
/// fetched once, in the background, by whichever of the prefetch task and
/// a reader that needs it first gets there (the others wait for it), so
/// the kernel's concurrent read requests of one window (which arrive in
/// any order) never fetch the same bytes twice, and the next chunks are
/// on their way while the current ones are copied out.
#[derive(Debug, Default)]
pub struct Readahead {
    /// By their first byte (a multiple of the chunk size), with the bytes
    /// of each served so far: a chunk served whole is forgotten.
    chunks: BTreeMap<u64, (Chunk, u64)>,
    last_end: u64,
    /// Reads in a row that started where the one before ended.
    streak: u32,
    /// The furthest end of a read since reads ran sequentially; chunks
    /// more than [`READAHEAD_BYTES`] behind it are forgotten.
    high: u64,
    /// Bumped by every [`clear`](Self::clear): bytes fetched before a
    /// write or truncate are not kept.
    cleared: u64,
}

/// One chunk read ahead: its file range and its bytes once fetched.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub offset: u64,
    pub length: u64,
    pub bytes: Arc<tokio::sync::OnceCell<Result<Bytes, Errno>>>,
    _charge: Arc<Charge>,
}

/// Bytes read ahead across a mount's files (held, or on their way), and
/// the most there may be: past it, reads fetch only what they need.
#[derive(Debug)]
pub struct ReadaheadBudget {
    used: AtomicU64,
    max: u64,
}

impl ReadaheadBudget {
    #[must_use]
    pub fn new(max: u64) -> Arc<ReadaheadBudget> {
        Arc::new(ReadaheadBudget {
            used: AtomicU64::new(0),
            max,
        })
    }

    #[must_use]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn charge(self: &Arc<Self>, bytes: u64) -> Arc<Charge> {
        self.used.fetch_add(bytes, Ordering::Relaxed);
        Arc::new(Charge {
            budget: Arc::clone(self),
            bytes,
        })
    }
}

/// A chunk's bytes, counted in the budget until the last holder of the
/// chunk (the file's window, its fetch, its readers) lets go.
#[derive(Debug)]
struct Charge {
    budget: Arc<ReadaheadBudget>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What a read does about read-ahead: the chunks it reads from (empty:
/// fetch just the bytes asked, the reads are not sequential) and the
/// chunks to start fetching.
#[derive(Debug, Default)]
pub struct ReadPlan {
    pub covering: Vec<Chunk>,
    pub start: Vec<Chunk>,
}

/// A first read of a file at its start at least this large (a kernel
/// read-ahead request, not a small random read) starts read-ahead.
const READAHEAD_FIRST_READ_BYTES: u64 = 1 << 20;

impl Readahead {
    fn chunk_start(offset: u64) -> u64 {
        offset - offset % READAHEAD_CHUNK_BYTES
    }

    /// Whether `offset` falls among the chunks held (or in the chunk just
    /// before them: a request of the kernel's arriving late).
    fn in_window(&self, offset: u64) -> bool {
        let (Some((lo, _)), Some((hi, (last, _)))) =
            (self.chunks.first_key_value(), self.chunks.last_key_value())
        else {
            return false;
        };
        offset.saturating_add(READAHEAD_CHUNK_BYTES) >= *lo && offset < hi + last.length
    }

    /// Plans a read of `[offset, offset + length)` of a file of
    /// `file_size` bytes. Reads run sequentially when two in a row start
    /// where the one before ended (one, if large: a kernel read-ahead
    /// request), or when one falls among the chunks read ahead (the
    /// kernel's requests of one window come in any order); then the
    /// chunks from the read's up to [`READAHEAD_BYTES`] past its end are
    /// kept or started. Random reads start nothing.
    pub fn plan(
        &mut self,
        offset: u64,
        length: u64,
        file_size: u64,
        budget: &Arc<ReadaheadBudget>,
    ) -> ReadPlan {
        let end = offset + length;
        let large = length >= READAHEAD_FIRST_READ_BYTES;
        let contiguous = offset == self.last_end && (offset > 0 || large);
        let in_window = self.in_window(offset);
        if contiguous {
            self.streak = self.streak.saturating_add(1);
        } else if !in_window {
            self.streak = 0;
        }
        let sequential = in_window || (contiguous && (large || self.streak >= 2));
        self.last_end = end;
        if !sequential || length == 0 {
            self.high = end;
            return ReadPlan::default();
        }
        self.high = self.high.max(end);
        let behind = Self::chunk_start(self.high.saturating_sub(READAHEAD_BYTES));
        self.chunks = self.chunks.split_off(&behind);
        let ahead = end.saturating_add(READAHEAD_BYTES).min(file_size);
        let mut plan = ReadPlan::default();
        let mut at = Self::chunk_start(offset);
        while at < ahead.max(end) {
            let chunk = match self.chunks.get(&at) {
                Some((chunk, _)) => chunk.clone(),
                None => {
                    let length = READAHEAD_CHUNK_BYTES.min(file_size.saturating_sub(at));
                    if at >= end && budget.used() + length > budget.max {
                        // The mount reads ahead as much as it may.
                        break;
                    }
                    let chunk = Chunk {
                        offset: at,
                        length,
                        bytes: Arc::default(),
                        _charge: budget.charge(length),
                    };
                    self.chunks.insert(at, (chunk.clone(), 0));
                    plan.start.push(chunk.clone());
                    chunk
                }
            };
            if at < end {
                plan.covering.push(chunk);
            }
            at += READAHEAD_CHUNK_BYTES;
        }
        plan
    }

    /// Counts `[offset, offset + length)` served from the chunks (under
    /// the ticket they were planned with); a chunk served whole is
    /// forgotten (the kernel keeps those pages now).
    pub fn served(&mut self, offset: u64, length: u64) {
        let end = offset + length;
        let from = Self::chunk_start(offset);
        let mut done = Vec::new();
        for (at, (chunk, served)) in self.chunks.range_mut(from..end) {
            let a = offset.max(*at);
            let b = end.min(at + chunk.length);
            *served += b.saturating_sub(a);
            if *served >= chunk.length {
                done.push(*at);
            }
        }
        for at in done {
            self.chunks.remove(&at);
        }
    }

    /// Forgets `chunk` (its fetch failed), unless already replaced.
    pub fn forget(&mut self, chunk: &Chunk) {
        if self
            .chunks
            .get(&chunk.offset)
            .is_some_and(|(c, _)| Arc::ptr_eq(&c.bytes, &chunk.bytes))
        {
            self.chunks.remove(&chunk.offset);
        }
    }

    /// What bytes fetched now must show to be kept.
    #[must_use]
    pub fn ticket(&self) -> u64 {
        self.cleared
    }

    /// Bytes held or on their way.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.chunks.values().map(|(c, _)| c.length).sum()
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
        self.high = 0;
        self.streak = 0;
        self.cleared += 1;
    }
}

/// The bytes of `[offset, offset + length)` from `chunks` (in order,
/// covering the range), or `None` when one of them failed or holds fewer
/// bytes than the range needs (the file grew since it was fetched).
/// Within one chunk the bytes are not copied.
#[must_use]
pub fn assemble(chunks: &[(Chunk, Bytes)], offset: u64, length: u64) -> Option<Bytes> {
    let end = offset + length;
    if let [(chunk, bytes)] = chunks {
        let from = usize::try_from(offset.checked_sub(chunk.offset)?).ok()?;
        let to = usize::try_from(end - chunk.offset).ok()?;
        return (to <= bytes.len()).then(|| bytes.slice(from..to));
    }
    let mut out = Vec::with_capacity(usize::try_from(length).ok()?);
    for (chunk, bytes) in chunks {
        let from = offset.max(chunk.offset);
        let to = end.min(chunk.offset + READAHEAD_CHUNK_BYTES);
        if from >= to {
            continue;
        }
        let a = usize::try_from(from - chunk.offset).ok()?;
        let b = usize::try_from(to - chunk.offset).ok()?;
        out.extend_from_slice(bytes.get(a..b)?);
    }
    (out.len() as u64 == length).then(|| Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_ranges_merge_and_overlay_in_write_order() {
        let mut d = Dirty::default();
        d.insert(10, b"aaaa");
        d.insert(14, b"bb");
        d.insert(0, b"cc");
        d.insert(12, b"XXXXXXX");
        let mut buf = vec![b'.'; 22];
        d.overlay(0, &mut buf);
        assert_eq!(&buf, b"cc........aaXXXXXXX...");
        assert_eq!(d.bytes(), 2 + 9);
        d.cut(15);
        let mut buf = vec![b'.'; 22];
        d.overlay(0, &mut buf);
        assert_eq!(&buf, b"cc........aaXXX.......");
        assert_eq!(d.end(), 15);
        let taken = d.take();
        assert_eq!(taken.len(), 2);
        assert!(d.is_empty());
    }

    fn unbounded() -> Arc<ReadaheadBudget> {
        ReadaheadBudget::new(u64::MAX)
    }

    fn fetched(plan: &ReadPlan, fill: u8) {
        for chunk in &plan.start {
            let bytes = vec![fill; usize::try_from(chunk.length).expect("chunk length")];
            chunk
                .bytes
                .set(Ok(Bytes::from(bytes)))
                .expect("fetched once");
        }
    }

    fn got(plan: &ReadPlan, offset: u64, length: u64) -> Option<Bytes> {
        let chunks: Vec<(Chunk, Bytes)> = plan
            .covering
            .iter()
            .map(|c| {
                (
                    c.clone(),
                    c.bytes.get().expect("fetched").clone().expect("fetch ok"),
                )
            })
            .collect();
        assemble(&chunks, offset, length)
    }

    #[test]
    fn readahead_starts_on_sequential_reads_and_fetches_each_chunk_once() {
        const C: u64 = READAHEAD_CHUNK_BYTES;
        let size = 100 * C + 7;
        let mut r = Readahead::default();
        // A small first read of a file, and a random one, read ahead
        // nothing.
        assert!(r.plan(0, 4096, size, &unbounded()).covering.is_empty());
        assert!(r.plan(50 * C, 4096, size, &unbounded()).covering.is_empty());
        // Two small reads in a row where the last ended start the window.
        assert!(
            r.plan(50 * C + 4096, 4096, size, &unbounded())
                .covering
                .is_empty()
        );
        let plan = r.plan(50 * C + 8192, 4096, size, &unbounded());
        assert_eq!(plan.covering.len(), 1);
        let window = usize::try_from(READAHEAD_BYTES / C).expect("window") + 1;
        assert_eq!(plan.start.len(), window);
        fetched(&plan, 1);
        assert_eq!(got(&plan, 50 * C + 8192, 4096).expect("served").len(), 4096);
        // Reads arriving out of order inside the window start only the
        // chunks past it, and a read across two chunks gets both.
        let plan = r.plan(52 * C, C, size, &unbounded());
        assert_eq!(plan.start.len(), 2);
        assert_eq!(plan.start[0].offset, 50 * C + window as u64 * C);
        fetched(&plan, 2);
        let plan = r.plan(51 * C + 10, C, size, &unbounded());
        assert!(plan.start.is_empty());
        assert_eq!(plan.covering.len(), 2);
        assert_eq!(got(&plan, 51 * C + 10, C).expect("served").len() as u64, C);
        // A chunk served whole is forgotten.
        r.served(51 * C + 10, C);
        assert!(r.chunks.contains_key(&(51 * C)));
        r.served(51 * C, 10);
        assert!(!r.chunks.contains_key(&(51 * C)));
        assert!(r.chunks.contains_key(&(52 * C)));
        // Far from the window a read starts again; chunks far behind the
        // furthest read are forgotten, the window stops at the file's end
        // (whose chunk is short), and a request arriving late, behind the
        // window, still reads from read-ahead.
        assert!(r.plan(97 * C, 10, size, &unbounded()).covering.is_empty());
        let plan = r.plan(
            97 * C + 10,
            2 * READAHEAD_FIRST_READ_BYTES,
            size,
            &unbounded(),
        );
        fetched(&plan, 3);
        assert_eq!(r.chunks.keys().next(), Some(&(97 * C)));
        assert_eq!(r.chunks.values().last().expect("a chunk").0.length, 7);
        assert!(got(&plan, 97 * C + 10, 2 * READAHEAD_FIRST_READ_BYTES).is_some());
        let late = r.plan(96 * C, C, size, &unbounded());
        assert_eq!(late.covering.len(), 1);
        assert_eq!(late.start.len(), 1);
        assert!(r.bytes() <= READAHEAD_BYTES + 3 * C);
        // A large first read at the start of a file starts read-ahead.
        let mut fresh = Readahead::default();
        assert!(!fresh.plan(0, C, size, &unbounded()).covering.is_empty());
        // Bytes fetched before a write (which clears) are not kept.
        let ticket = r.ticket();
        r.clear();
        assert_ne!(r.ticket(), ticket);
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn read_ahead_stays_within_the_mounts_budget() {
        const C: u64 = READAHEAD_CHUNK_BYTES;
        let budget = ReadaheadBudget::new(3 * C);
        let mut a = Readahead::default();
        let plan = a.plan(0, C, 100 * C, &budget);
        assert_eq!(plan.start.len(), 3);
        assert_eq!(budget.used(), 3 * C);
        // Another file's read still gets the chunk it needs, nothing more.
        let mut b = Readahead::default();
        let other = b.plan(0, C, 100 * C, &budget);
        assert_eq!(other.covering.len(), 1);
        assert_eq!(other.start.len(), 1);
        assert_eq!(budget.used(), 4 * C);
        // Chunks let go of give their bytes back.
        drop((plan, other));
        a.clear();
        b.clear();
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn random_reads_read_nothing_ahead() {
        const C: u64 = READAHEAD_CHUNK_BYTES;
        let size = 256 * C;
        let mut r = Readahead::default();
        let mut at = 12_345_u64;
        for i in 0..10_000_u64 {
            // 4 KiB reads at scattered offsets, now and then two in a row.
            at = at.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1) % (size - 8192);
            let offset = at - at % 4096;
            assert!(r.plan(offset, 4096, size, &unbounded()).start.is_empty());
            if i % 100 == 0 {
                assert!(
                    r.plan(offset + 4096, 4096, size, &unbounded())
                        .start
                        .is_empty()
                );
            }
        }
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn a_short_or_failed_chunk_is_not_served() {
        const C: u64 = READAHEAD_CHUNK_BYTES;
        let mut r = Readahead::default();
        r.plan(0, 10, 2 * C, &unbounded());
        r.plan(10, 10, 2 * C, &unbounded());
        let plan = r.plan(20, 10, 2 * C, &unbounded());
        // A chunk fetched while the file was shorter.
        for chunk in &plan.start {
            chunk
                .bytes
                .set(Ok(Bytes::from_static(b"short")))
                .expect("fetched once");
        }
        assert!(got(&plan, 20, 10).is_none());
        r.forget(&plan.covering[0]);
        let again = r.plan(30, 10, 2 * C, &unbounded());
        assert_eq!(again.start.len(), 1);
        assert_eq!(again.start[0].offset, 0);
    }
}

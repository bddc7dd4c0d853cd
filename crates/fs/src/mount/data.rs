//! File data on the OSDs: striped reads and writes with many object
//! operations in flight, a write-back buffer with byte-range dirty
//! tracking (so writers of disjoint ranges of one file never overwrite
//! each other's bytes), readahead, and truncation.

use crate::layout::{self, ObjectExtent};
use crate::mount::limits::{DATA_OPS_IN_FLIGHT, READAHEAD_BYTES};
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
    ) -> Result<Vec<u8>, Errno> {
        let pieces = layout::extents(layout, offset_bytes, length_bytes);
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
        Ok(out)
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

/// A window of file bytes read ahead.
#[derive(Debug, Default)]
pub struct Readahead {
    window: Option<(u64, Bytes)>,
    last_end: u64,
    /// Bumped by every [`clear`](Self::clear): bytes fetched before a
    /// write or truncate are not kept.
    cleared: u64,
}

impl Readahead {
    /// The bytes of `[offset, offset + length)` if the window holds them.
    #[must_use]
    pub fn get(&self, offset: u64, length: u64) -> Option<Bytes> {
        let (start, bytes) = self.window.as_ref()?;
        let end = start + bytes.len() as u64;
        (offset >= *start && offset + length <= end).then(|| {
            let at = usize::try_from(offset - start).unwrap_or(0);
            bytes.slice(at..at + usize::try_from(length).unwrap_or(0))
        })
    }

    /// How much to fetch for a read at `offset` of `length`: more than
    /// asked when reads run sequentially.
    #[must_use]
    pub fn fetch_length(&self, offset: u64, length: u64) -> u64 {
        if offset == self.last_end && offset > 0 {
            length.max(READAHEAD_BYTES)
        } else {
            length
        }
    }

    /// What bytes fetched now must show to be kept.
    #[must_use]
    pub fn ticket(&self) -> u64 {
        self.cleared
    }

    /// Keeps `bytes` from `offset`, fetched under `ticket`, unless the file
    /// was written or cut since.
    pub fn keep(&mut self, ticket: u64, offset: u64, bytes: Bytes) {
        if ticket == self.cleared {
            self.window = Some((offset, bytes));
        }
    }

    pub fn read_to(&mut self, end: u64) {
        self.last_end = end;
    }

    pub fn clear(&mut self) {
        self.window = None;
        self.cleared += 1;
    }
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

    #[test]
    fn readahead_serves_only_what_it_holds() {
        let mut r = Readahead::default();
        r.keep(r.ticket(), 100, Bytes::from_static(b"0123456789"));
        assert_eq!(r.get(102, 3).as_deref(), Some(&b"234"[..]));
        assert!(r.get(105, 10).is_none());
        r.read_to(4096);
        assert_eq!(r.fetch_length(4096, 4096), READAHEAD_BYTES);
        assert_eq!(r.fetch_length(0, 4096), 4096);
        // Bytes fetched before a write (which clears) are not kept.
        let ticket = r.ticket();
        r.clear();
        r.keep(ticket, 0, Bytes::from_static(b"old"));
        assert!(r.get(0, 3).is_none());
    }
}

//! The volatile part of one file: dirty byte ranges and size over a durable base.
//!
//! Pure data structure, no I/O: `read` takes the durable bytes from the
//! caller, `sync_plan` tells the caller what to write. Only dirty ranges live
//! in memory, so a sparse multi-GiB file costs nothing until written.

use std::collections::BTreeMap;

use crate::limits::EXTENT_MERGE_BYTES_MAX;

/// One dirty range of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Extent {
    /// Bytes written since the last sync.
    Data(Vec<u8>),
    /// A range that reads as zeros (punched hole or zeroed range), this long.
    Zero(u64),
}

impl Extent {
    fn len_bytes(&self) -> u64 {
        match self {
            Extent::Data(bytes) => bytes.len() as u64,
            Extent::Zero(len_bytes) => *len_bytes,
        }
    }
}

/// The most recent write to this file that is not yet synced, kept whole so
/// that a power loss can tear it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastWrite {
    /// Global write order, to find the most recent write across files.
    pub(crate) write_seq: u64,
    pub(crate) offset_bytes: u64,
    pub(crate) bytes: Vec<u8>,
}

/// What a sync must do to the durable file, in this order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SyncPlan<'a> {
    /// Cut the durable file to this length first (a shrink since the last sync).
    pub(crate) truncate_to_bytes: Option<u64>,
    /// Then set the length to the visible size.
    pub(crate) size_bytes: u64,
    /// Then zero these `(offset, len)` ranges.
    pub(crate) zero_ranges: Vec<(u64, u64)>,
    /// Then write these `(offset, bytes)`.
    pub(crate) writes: Vec<(u64, &'a [u8])>,
}

/// Dirty state of one file over its durable content.
///
/// Invariant: extents do not overlap and all end at or before `size_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overlay {
    /// Visible size.
    size_bytes: u64,
    /// Size of the durable file the overlay sits on.
    durable_size_bytes: u64,
    /// Durable bytes at or past this offset are hidden (read as zeros): the
    /// file was shrunk to here since the last sync, then maybe grown again.
    durable_cutoff_bytes: u64,
    extents: BTreeMap<u64, Extent>,
    /// Whether anything (data, size, attributes) changed since the last sync.
    dirty: bool,
    last_write: Option<LastWrite>,
}

impl Overlay {
    /// A clean overlay over a durable file of this size.
    pub(crate) fn new(durable_size_bytes: u64) -> Overlay {
        Overlay {
            size_bytes: durable_size_bytes,
            durable_size_bytes,
            durable_cutoff_bytes: u64::MAX,
            extents: BTreeMap::new(),
            dirty: false,
            last_write: None,
        }
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Marks an attribute change (mode, owner, times) as needing a sync.
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    pub(crate) fn last_write(&self) -> Option<&LastWrite> {
        self.last_write.as_ref()
    }

    /// Bytes of written data held in memory.
    pub(crate) fn dirty_data_bytes(&self) -> u64 {
        self.extents
            .values()
            .map(|extent| match extent {
                Extent::Data(bytes) => bytes.len() as u64,
                Extent::Zero(_) => 0,
            })
            .sum()
    }

    /// Forgets the data of a file nobody can read any more (unlinked and
    /// closed), keeping `last_write` so a power loss can still tear it into
    /// the durable file, as a real disk might have.
    pub(crate) fn drop_data(&mut self) {
        self.extents.clear();
    }

    /// The durable range `[0, len)` a read must fetch before applying extents.
    pub(crate) fn durable_visible_bytes(&self) -> u64 {
        self.durable_size_bytes
            .min(self.durable_cutoff_bytes)
            .min(self.size_bytes)
    }

    /// Records a write of `bytes` at `offset_bytes`.
    pub(crate) fn write(&mut self, offset_bytes: u64, bytes: &[u8], write_seq: u64) {
        if bytes.is_empty() {
            return;
        }
        self.dirty = true;
        self.last_write = Some(LastWrite {
            write_seq,
            offset_bytes,
            bytes: bytes.to_vec(),
        });
        let end_bytes = offset_bytes + bytes.len() as u64;
        self.size_bytes = self.size_bytes.max(end_bytes);
        if self.overwrite_in_place(offset_bytes, bytes) {
            return;
        }
        self.clear_range(offset_bytes, end_bytes);
        if let Some((&start, Extent::Data(prev))) =
            self.extents.range_mut(..offset_bytes).next_back()
            && start + prev.len() as u64 == offset_bytes
            && prev.len() + bytes.len() <= EXTENT_MERGE_BYTES_MAX
        {
            prev.extend_from_slice(bytes);
            return;
        }
        self.extents
            .insert(offset_bytes, Extent::Data(bytes.to_vec()));
    }

    /// Fast path: the write falls inside one existing data extent.
    fn overwrite_in_place(&mut self, offset_bytes: u64, bytes: &[u8]) -> bool {
        let Some((&start, Extent::Data(data))) =
            self.extents.range_mut(..=offset_bytes).next_back()
        else {
            return false;
        };
        let from = (offset_bytes - start) as usize;
        if from + bytes.len() > data.len() {
            return false;
        }
        data[from..from + bytes.len()].copy_from_slice(bytes);
        true
    }

    /// Makes `[offset, offset + len)` read as zeros, clipped to the size
    /// unless `extend` (then the size grows to cover the range).
    pub(crate) fn zero(&mut self, offset_bytes: u64, len_bytes: u64, extend: bool) {
        self.dirty = true;
        let mut end_bytes = offset_bytes.saturating_add(len_bytes);
        if extend {
            self.size_bytes = self.size_bytes.max(end_bytes);
        } else {
            end_bytes = end_bytes.min(self.size_bytes);
        }
        if offset_bytes >= end_bytes {
            return;
        }
        self.clear_range(offset_bytes, end_bytes);
        self.extents
            .insert(offset_bytes, Extent::Zero(end_bytes - offset_bytes));
    }

    /// Sets the visible size (truncate or extend).
    pub(crate) fn set_size(&mut self, size_bytes: u64) {
        self.dirty = true;
        if size_bytes < self.size_bytes {
            self.clear_range(size_bytes, self.size_bytes);
            self.durable_cutoff_bytes = self.durable_cutoff_bytes.min(size_bytes);
        }
        self.size_bytes = size_bytes;
    }

    /// Removes extents, or parts of them, inside `[start, end)`.
    fn clear_range(&mut self, start_bytes: u64, end_bytes: u64) {
        let overlapping: Vec<u64> = self
            .extents
            .range(..end_bytes)
            .rev()
            .take_while(|(start, extent)| *start + extent.len_bytes() > start_bytes)
            .map(|(start, _)| *start)
            .collect();
        for start in overlapping {
            let Some(extent) = self.extents.remove(&start) else {
                continue;
            };
            let extent_end = start + extent.len_bytes();
            let (left, right) = split_extent(extent, start, start_bytes, end_bytes);
            if let Some(left) = left {
                self.extents.insert(start, left);
            }
            if let Some(right) = right {
                assert!(extent_end > end_bytes);
                self.extents.insert(end_bytes, right);
            }
        }
    }

    /// Copies the dirty ranges over `buf`, which holds the file's bytes at
    /// `[offset, offset + buf.len())` as seen through the durable file.
    pub(crate) fn apply_to(&self, offset_bytes: u64, buf: &mut [u8]) {
        let end_bytes = offset_bytes + buf.len() as u64;
        let first = self
            .extents
            .range(..=offset_bytes)
            .next_back()
            .map_or(offset_bytes, |(start, _)| *start);
        for (&start, extent) in self.extents.range(first..end_bytes) {
            let from = start.max(offset_bytes);
            let to = (start + extent.len_bytes()).min(end_bytes);
            if from >= to {
                continue;
            }
            let dst = &mut buf[(from - offset_bytes) as usize..(to - offset_bytes) as usize];
            match extent {
                Extent::Data(bytes) => {
                    dst.copy_from_slice(&bytes[(from - start) as usize..(to - start) as usize]);
                }
                Extent::Zero(_) => dst.fill(0),
            }
        }
    }

    /// What a sync must do to make the durable file equal the visible one.
    pub(crate) fn sync_plan(&self) -> SyncPlan<'_> {
        let truncate_to_bytes = (self.durable_cutoff_bytes < self.durable_size_bytes)
            .then_some(self.durable_cutoff_bytes);
        let mut zero_ranges = Vec::new();
        let mut writes = Vec::new();
        for (&start, extent) in &self.extents {
            match extent {
                Extent::Data(bytes) => writes.push((start, bytes.as_slice())),
                Extent::Zero(len_bytes) => zero_ranges.push((start, *len_bytes)),
            }
        }
        SyncPlan {
            truncate_to_bytes,
            size_bytes: self.size_bytes,
            zero_ranges,
            writes,
        }
    }

    /// Whether the file was shrunk since its last sync (the durable file
    /// still holds bytes the visible one has cut).
    pub(crate) fn shrunk_since_sync(&self) -> bool {
        self.durable_cutoff_bytes != u64::MAX
    }

    /// After the write `write_seq` ending at `end_bytes` was made durable on
    /// its own (an `O_DSYNC` write): the durable file is at least that
    /// long, and a power loss can no longer tear that write.
    pub(crate) fn wrote_through(&mut self, end_bytes: u64, write_seq: u64) {
        self.durable_size_bytes = self.durable_size_bytes.max(end_bytes);
        if self
            .last_write
            .as_ref()
            .is_some_and(|w| w.write_seq == write_seq)
        {
            self.last_write = None;
        }
    }

    /// Size of the durable file under the overlay.
    pub(crate) fn durable_size_bytes(&self) -> u64 {
        self.durable_size_bytes
    }

    /// After a sync: the durable file now equals the visible one.
    pub(crate) fn synced(&mut self) {
        *self = Overlay::new(self.size_bytes);
    }
}

/// Splits `extent` (starting at `start`) around the removed range
/// `[cut_start, cut_end)` into what survives on the left and on the right.
fn split_extent(
    extent: Extent,
    start: u64,
    cut_start: u64,
    cut_end: u64,
) -> (Option<Extent>, Option<Extent>) {
    let end = start + extent.len_bytes();
    let left_len = cut_start.saturating_sub(start).min(extent.len_bytes());
    let right_from = cut_end.max(start).min(end);
    match extent {
        Extent::Data(mut bytes) => {
            let right = (right_from < end).then(|| bytes.split_off((right_from - start) as usize));
            bytes.truncate(left_len as usize);
            let left = (left_len > 0).then_some(bytes);
            (left.map(Extent::Data), right.map(Extent::Data))
        }
        Extent::Zero(_) => (
            (left_len > 0).then_some(Extent::Zero(left_len)),
            (right_from < end).then_some(Extent::Zero(end - right_from)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `[offset, offset + len)` through the overlay over `durable`.
    fn read(overlay: &Overlay, durable: &[u8], offset: u64, len: usize) -> Vec<u8> {
        let visible_end = (offset + len as u64).min(overlay.size_bytes());
        if offset >= visible_end {
            return Vec::new();
        }
        let mut buf = vec![0u8; (visible_end - offset) as usize];
        let durable_end = overlay.durable_visible_bytes().min(durable.len() as u64);
        for (i, byte) in buf.iter_mut().enumerate() {
            let at = offset + i as u64;
            if at < durable_end {
                *byte = durable[at as usize];
            }
        }
        overlay.apply_to(offset, &mut buf);
        buf
    }

    #[test]
    fn writes_overlay_durable_bytes() {
        let durable = b"aaaaaaaaaa".to_vec();
        let mut overlay = Overlay::new(10);
        overlay.write(2, b"bbb", 1);
        overlay.write(4, b"cc", 2);
        overlay.write(12, b"d", 3);
        assert_eq!(overlay.size_bytes(), 13);
        assert_eq!(
            read(&overlay, &durable, 0, 100),
            b"aabbccaaaa\0\0d".to_vec()
        );
        assert_eq!(overlay.dirty_data_bytes(), 5);
        assert_eq!(overlay.last_write().map(|w| w.write_seq), Some(3));
    }

    #[test]
    fn appends_merge_and_inner_overwrite_splits() {
        let mut overlay = Overlay::new(0);
        for i in 0..10u8 {
            overlay.write(u64::from(i), &[i], u64::from(i));
        }
        assert_eq!(overlay.extents.len(), 1);
        overlay.zero(3, 2, false);
        assert_eq!(
            read(&overlay, &[], 0, 10),
            vec![0, 1, 2, 0, 0, 5, 6, 7, 8, 9]
        );
        assert_eq!(overlay.extents.len(), 3);
    }

    #[test]
    fn shrink_then_grow_hides_durable_tail() {
        let durable = b"0123456789".to_vec();
        let mut overlay = Overlay::new(10);
        overlay.set_size(4);
        overlay.set_size(8);
        assert_eq!(read(&overlay, &durable, 0, 10), b"0123\0\0\0\0".to_vec());
        let plan = overlay.sync_plan();
        assert_eq!(plan.truncate_to_bytes, Some(4));
        assert_eq!(plan.size_bytes, 8);
    }

    #[test]
    fn punch_clips_to_size_and_plans_zeroing() {
        let mut overlay = Overlay::new(1 << 31);
        overlay.write(4096, &[7u8; 4096], 1);
        overlay.zero(0, 1 << 40, false);
        assert_eq!(overlay.dirty_data_bytes(), 0);
        let plan = overlay.sync_plan();
        assert_eq!(plan.zero_ranges, vec![(0, 1 << 31)]);
        assert!(plan.writes.is_empty());
        assert_eq!(plan.truncate_to_bytes, None);
    }

    #[test]
    fn synced_overlay_is_clean() {
        let mut overlay = Overlay::new(0);
        overlay.write(0, b"abc", 1);
        assert!(overlay.is_dirty());
        overlay.synced();
        assert!(!overlay.is_dirty());
        assert_eq!(overlay.size_bytes(), 3);
        assert_eq!(overlay.durable_visible_bytes(), 3);
        assert!(overlay.last_write().is_none());
    }
}

//! Space in the data file: free runs rebuilt at open from the extents the
//! object records name (so they are never persisted and never disagree with
//! them), and deferred frees that wait for readers.
//!
//! Two ways to take space:
//! - [`Allocator::allocate`], for payloads written with `O_DIRECT`: the
//!   smallest free run that fits (best fit, found through a by-size index),
//!   else the end of the file.
//! - [`Allocator::allocate_small`], for payloads written through the page
//!   cache: cut in order from a *zone*, a run of up to
//!   [`limits::SMALL_ZONE_BYTES`]. A batch's small extents so lie side by
//!   side and its `fdatasync` writes them back as a few large requests;
//!   scattered over reused 4 KiB holes they were one request each
//!   (measured here: twelve adjacent 4 KiB writes plus `fdatasync` take
//!   260–290 µs, twelve scattered ones 640–940 µs).
//!
//! A freed extent may still be read by a reader that fetched the old record
//! just before the commit that freed it. So frees carry the commit
//! generation, readers register the generation they started in, and space
//! returns to the allocator only when no reader from that generation or
//! before is left. Reused too early, the reader would see another object's
//! bytes (caught by checksums, but reported as corruption).

use crate::limits;
use crate::record::Extent;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Free runs of the data file and its logical end.
#[derive(Debug, Default)]
pub struct Allocator {
    /// offset → length of free runs, merged with neighbours.
    free: BTreeMap<u64, u64>,
    /// The same runs as (length, offset), for best fit and the largest run.
    by_size: BTreeSet<(u64, u64)>,
    /// Sum of the free runs' lengths (below `end`).
    free_bytes: u64,
    /// Everything at or past `end` is free.
    end: u64,
    /// Bytes held by extents.
    allocated_bytes: u64,
    /// `[next, end)`: the rest of the zone small extents are cut from; held
    /// apart from `free` (neither free nor allocated) until used up.
    zone: Option<(u64, u64)>,
}

impl Allocator {
    /// An allocator with the given extents in use and every gap free.
    pub fn rebuild(used: impl IntoIterator<Item = (u64, u64)>) -> Allocator {
        let mut runs: Vec<(u64, u64)> = used.into_iter().collect();
        runs.sort_unstable();
        let mut alloc = Allocator::default();
        for (offset, length) in runs {
            if offset > alloc.end {
                let gap = offset - alloc.end;
                alloc.insert_run(alloc.end, gap);
            }
            alloc.end = alloc.end.max(offset + length);
            alloc.allocated_bytes += length;
        }
        alloc
    }

    /// Where the file's allocated space ends (everything past it is free).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Whether any byte of `[offset, offset + length)` is free (in a free
    /// run, the small zone's unused rest, or past the end).
    pub fn any_free(&self, offset: u64, length: u64) -> bool {
        let end = offset + length;
        if end > self.end {
            return true;
        }
        if let Some((next, zone_end)) = self.zone
            && offset < zone_end
            && next < end
        {
            return true;
        }
        self.free
            .range(..end)
            .next_back()
            .is_some_and(|(&run, &len)| run + len > offset)
    }

    /// Free runs below the end, for punching at open.
    pub fn free_runs(&self) -> Vec<(u64, u64)> {
        self.free.iter().map(|(&o, &l)| (o, l)).collect()
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }

    /// Reserves `length` bytes rounded up to the allocation unit: the
    /// smallest free run that fits, else at the end (growing the file).
    pub fn allocate(&mut self, length: u64) -> u64 {
        let size = round_up(length.max(1));
        let fit = self.by_size.range((size, 0)..).next().copied();
        let offset = match fit {
            Some((run, offset)) => {
                self.remove_run(offset, run);
                if run > size {
                    self.insert_run(offset + size, run - size);
                }
                offset
            }
            None => {
                let offset = self.end;
                self.end += size;
                offset
            }
        };
        self.allocated_bytes += size;
        debug_assert_eq!(offset % limits::ALLOC_UNIT_BYTES, 0);
        offset
    }

    /// Reserves space for a payload written through the page cache: right
    /// after the previous one, in the current zone. A new zone is the
    /// largest free run if it holds at least [`limits::SMALL_ZONE_BYTES_MIN`],
    /// else fresh space at the end, unless the free runs below the end
    /// already hold more than [`limits::SMALL_ZONE_SLACK_BYTES`] and a
    /// quarter of the allocated bytes: then the holes are reused (best fit)
    /// rather than grow the file, which bounds the space zones can waste.
    pub fn allocate_small(&mut self, length: u64) -> u64 {
        let size = round_up(length.max(1));
        if size > limits::SMALL_ZONE_BYTES {
            return self.allocate(length);
        }
        if let Some((next, end)) = self.zone
            && end - next >= size
        {
            self.zone = (next + size < end).then_some((next + size, end));
            self.allocated_bytes += size;
            return next;
        }
        if let Some((next, end)) = self.zone.take() {
            self.free_space(next, end - next);
        }
        let largest = self.by_size.iter().next_back().copied();
        let zone_start = match largest {
            Some((run, offset)) if run >= limits::SMALL_ZONE_BYTES_MIN.max(size) => {
                let taken = run.min(limits::SMALL_ZONE_BYTES);
                self.remove_run(offset, run);
                if run > taken {
                    self.insert_run(offset + taken, run - taken);
                }
                Some((offset, offset + taken))
            }
            _ if self.free_bytes
                <= limits::SMALL_ZONE_SLACK_BYTES.max(self.allocated_bytes / 4) =>
            {
                let offset = self.end;
                self.end += limits::SMALL_ZONE_BYTES;
                Some((offset, self.end))
            }
            _ => None,
        };
        match zone_start {
            Some((start, end)) => {
                self.zone = (start + size < end).then_some((start + size, end));
                self.allocated_bytes += size;
                start
            }
            None => self.allocate(length),
        }
    }

    /// Returns an extent's space.
    pub fn release(&mut self, offset: u64, length: u64) {
        let size = round_up(length.max(1));
        self.allocated_bytes = self.allocated_bytes.saturating_sub(size);
        self.free_space(offset, size);
    }

    /// Adds `[offset, offset + size)` to the free runs, merged with its
    /// neighbours; a run reaching the end moves the end back.
    fn free_space(&mut self, offset: u64, size: u64) {
        let mut start = offset;
        let mut size = size;
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            assert!(prev + prev_len <= start, "double free at {offset}");
            if prev + prev_len == start {
                self.remove_run(prev, prev_len);
                start = prev;
                size += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + size)) {
            self.remove_run(start + size, next_len);
            size += next_len;
        }
        if start + size == self.end {
            self.end = start;
        } else {
            self.insert_run(start, size);
        }
    }

    fn insert_run(&mut self, offset: u64, length: u64) {
        self.free.insert(offset, length);
        self.by_size.insert((length, offset));
        self.free_bytes += length;
    }

    fn remove_run(&mut self, offset: u64, length: u64) {
        self.free.remove(&offset);
        self.by_size.remove(&(length, offset));
        self.free_bytes -= length;
    }
}

fn round_up(length: u64) -> u64 {
    length.div_ceil(limits::ALLOC_UNIT_BYTES) * limits::ALLOC_UNIT_BYTES
}

/// Frees waiting for readers, and the readers' generations.
#[derive(Debug, Default)]
struct Deferred {
    generation: u64,
    readers: BTreeMap<u64, usize>,
    pending: Vec<(u64, Extent)>,
}

/// The allocator shared by submitters (allocate), the committer (free) and
/// readers (register).
#[derive(Debug, Clone, Default)]
pub struct Space {
    alloc: Arc<Mutex<Allocator>>,
    deferred: Arc<Mutex<Deferred>>,
}

/// Held by a reader from before it fetches a record until it has read the
/// extents the record names.
#[derive(Debug)]
pub struct ReadGuard {
    deferred: Arc<Mutex<Deferred>>,
    generation: u64,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        let mut d = lock(&self.deferred);
        if let Some(count) = d.readers.get_mut(&self.generation) {
            *count -= 1;
            if *count == 0 {
                d.readers.remove(&self.generation);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state under these locks is updated in single statements, so a
    // panic elsewhere cannot leave it half-changed.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Space {
    pub fn new(alloc: Allocator) -> Space {
        Space {
            alloc: Arc::new(Mutex::new(alloc)),
            deferred: Arc::default(),
        }
    }

    pub fn allocator(&self) -> MutexGuard<'_, Allocator> {
        lock(&self.alloc)
    }

    pub fn reader(&self) -> ReadGuard {
        let mut d = lock(&self.deferred);
        let generation = d.generation;
        *d.readers.entry(generation).or_default() += 1;
        ReadGuard {
            deferred: Arc::clone(&self.deferred),
            generation,
        }
    }

    /// Called after a commit that dropped `freed` became visible and
    /// durable: starts a new generation and queues the frees behind the
    /// readers of the old one.
    pub fn defer(&self, freed: Vec<Extent>) {
        let mut d = lock(&self.deferred);
        let generation = d.generation;
        d.generation += 1;
        d.pending.extend(freed.into_iter().map(|e| (generation, e)));
    }

    /// Extents no reader can still be looking at, removed from the queue.
    /// The caller punches them and then [`Space::release`]s them.
    pub fn reclaimable(&self) -> Vec<Extent> {
        let mut d = lock(&self.deferred);
        let oldest_reader = d.readers.keys().next().copied().unwrap_or(u64::MAX);
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut d.pending)
            .into_iter()
            .partition(|(generation, _)| *generation < oldest_reader);
        d.pending = waiting;
        ready.into_iter().map(|(_, e)| e).collect()
    }

    /// Bytes of freed extents waiting for their readers before reuse.
    pub fn pending_bytes(&self) -> u64 {
        lock(&self.deferred)
            .pending
            .iter()
            .map(|(_, e)| e.allocated_bytes())
            .sum()
    }

    pub fn release(&self, extents: &[Extent]) {
        let mut alloc = lock(&self.alloc);
        for e in extents {
            alloc.release(e.offset, e.length);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_release_merges_and_shrinks() {
        let mut a = Allocator::default();
        let x = a.allocate(1);
        let y = a.allocate(5000);
        let z = a.allocate(4096);
        assert_eq!((x, y, z), (0, 4096, 12288));
        a.release(y, 5000);
        assert_eq!(a.allocate(4096), 4096, "best fit reuses the hole");
        a.release(4096, 4096);
        a.release(z, 4096);
        a.release(x, 1);
        assert_eq!(a.free_runs(), vec![], "all free runs merged into the end");
        assert_eq!(a.allocated_bytes(), 0);
        assert_eq!(a.allocate(10), 0);
    }

    #[test]
    fn best_fit_takes_the_smallest_hole() {
        let mut a = Allocator::rebuild([(0, 4096), (12288, 4096), (20480, 4096)]);
        assert_eq!(a.free_runs(), vec![(4096, 8192), (16384, 4096)]);
        assert_eq!(a.allocate(4096), 16384, "the one-block hole, not the first");
        assert_eq!(a.allocate(8192), 4096);
        assert_eq!(a.allocate(4096), 24576, "no hole left: the end");
    }

    #[test]
    fn small_extents_are_cut_side_by_side() {
        // Holes of one block between live extents, as overwrites leave them.
        let used: Vec<(u64, u64)> = (0..64).map(|i| (i * 8192, 4096)).collect();
        let mut a = Allocator::rebuild(used);
        let end = 64 * 8192 - 4096;
        let offsets: Vec<u64> = (0..12).map(|_| a.allocate_small(4096)).collect();
        let expected: Vec<u64> = (0..12).map(|i| end + i * 4096).collect();
        assert_eq!(offsets, expected, "a zone at the end, not the holes");
        // A large free run becomes the next zone once this one is used up.
        let mut a = Allocator::rebuild([(0, 4096), (1 << 20, 4096)]);
        assert_eq!(a.allocate_small(8192), 4096);
        assert_eq!(a.allocate_small(4096), 12288);
        assert_eq!(
            a.allocate_small(limits::SMALL_ZONE_BYTES * 2),
            (1 << 20) + 4096
        );
    }

    #[test]
    fn small_extents_fill_holes_past_the_slack() {
        // Free holes of one block, more than the slack in all: no new zone.
        let count = limits::SMALL_ZONE_SLACK_BYTES / 4096 + 8;
        let used: Vec<(u64, u64)> = (0..count).map(|i| (i * 8192, 4096)).collect();
        let mut a = Allocator::rebuild(used);
        let offset = a.allocate_small(4096);
        assert!(offset < count * 8192, "reused a hole at {offset}");
        assert_eq!(offset % 8192, 4096);
    }

    proptest::proptest! {
        /// Whatever the mix of allocations and frees, extents never overlap
        /// one another or the free runs, and free, allocated and zone
        /// bytes add up to the end.
        #[test]
        fn allocations_never_overlap(
            ops in proptest::collection::vec((0u8..4, 1u64..300_000, 0usize..64), 1..400)
        ) {
            let mut a = Allocator::default();
            let mut live: BTreeMap<u64, u64> = BTreeMap::new();
            for (kind, length, pick) in ops {
                match kind {
                    0 => { live.insert(a.allocate(length), round_up(length)); }
                    1 | 2 => { live.insert(a.allocate_small(length), round_up(length)); }
                    _ => {
                        if let Some((&offset, &size)) = live.iter().nth(pick % live.len().max(1)) {
                            live.remove(&offset);
                            a.release(offset, size);
                        }
                    }
                }
                let mut ranges: Vec<(u64, u64)> = live.iter().map(|(&o, &l)| (o, l)).collect();
                ranges.extend(a.free_runs());
                if let Some((next, end)) = a.zone {
                    ranges.push((next, end - next));
                }
                ranges.sort_unstable();
                for pair in ranges.windows(2) {
                    proptest::prop_assert!(pair[0].0 + pair[0].1 <= pair[1].0, "overlap: {:?}", pair);
                }
                let total: u64 = ranges.iter().map(|r| r.1).sum();
                proptest::prop_assert!(total <= a.end);
                proptest::prop_assert_eq!(a.allocated_bytes(), live.values().sum::<u64>());
                proptest::prop_assert_eq!(a.free_bytes, a.free_runs().iter().map(|r| r.1).sum::<u64>());
                proptest::prop_assert_eq!(a.by_size.len(), a.free.len());
            }
        }
    }

    #[test]
    fn rebuild_finds_gaps() {
        let a = Allocator::rebuild([(8192, 4096), (0, 4096)]);
        assert_eq!(a.free_runs(), vec![(4096, 4096)]);
        assert_eq!(a.allocated_bytes(), 8192);
    }

    #[test]
    fn frees_wait_for_older_readers() {
        let space = Space::new(Allocator::default());
        let extent = Extent {
            offset: 0,
            length: 4096,
            csums: vec![0],
        };
        let old_reader = space.reader();
        space.defer(vec![extent.clone()]);
        let new_reader = space.reader();
        assert!(
            space.reclaimable().is_empty(),
            "a reader from before the free is active"
        );
        drop(old_reader);
        assert_eq!(
            space.reclaimable(),
            vec![extent],
            "only newer readers remain"
        );
        drop(new_reader);
    }
}

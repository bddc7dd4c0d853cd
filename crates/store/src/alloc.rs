//! Space in the data file: a first-fit allocator over free runs, rebuilt at
//! open from the extents the object records name (so it is never persisted
//! and never disagrees with them), and deferred frees that wait for readers.
//!
//! A freed extent may still be read by a reader that fetched the old record
//! just before the commit that freed it. So frees carry the commit
//! generation, readers register the generation they started in, and space
//! returns to the allocator only when no reader from that generation or
//! before is left. Reused too early, the reader would see another object's
//! bytes (caught by checksums, but reported as corruption).

use crate::limits;
use crate::record::Extent;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Free runs of the data file and its logical end.
#[derive(Debug, Default)]
pub struct Allocator {
    /// offset → length of free runs, merged with neighbours.
    free: BTreeMap<u64, u64>,
    /// Everything at or past `end` is free.
    end: u64,
    /// Bytes held by extents.
    allocated_bytes: u64,
}

impl Allocator {
    /// An allocator with the given extents in use and every gap free.
    pub fn rebuild(used: impl IntoIterator<Item = (u64, u64)>) -> Allocator {
        let mut runs: Vec<(u64, u64)> = used.into_iter().collect();
        runs.sort_unstable();
        let mut alloc = Allocator::default();
        for (offset, length) in runs {
            if offset > alloc.end {
                alloc.free.insert(alloc.end, offset - alloc.end);
            }
            alloc.end = alloc.end.max(offset + length);
            alloc.allocated_bytes += length;
        }
        alloc
    }

    /// Free runs below the end, for punching at open.
    pub fn free_runs(&self) -> Vec<(u64, u64)> {
        self.free.iter().map(|(&o, &l)| (o, l)).collect()
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }

    /// Reserves `length` bytes rounded up to the allocation unit: the first
    /// free run that fits, else at the end (growing the file).
    pub fn allocate(&mut self, length: u64) -> u64 {
        let size = round_up(length.max(1));
        let found = self
            .free
            .iter()
            .find(|&(_, &l)| l >= size)
            .map(|(&o, &l)| (o, l));
        let offset = match found {
            Some((offset, run)) => {
                self.free.remove(&offset);
                if run > size {
                    self.free.insert(offset + size, run - size);
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

    /// Returns an extent's space.
    pub fn release(&mut self, offset: u64, length: u64) {
        let mut start = offset;
        let mut size = round_up(length.max(1));
        self.allocated_bytes = self.allocated_bytes.saturating_sub(size);
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            assert!(prev + prev_len <= start, "double free at {offset}");
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                size += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + size)) {
            self.free.remove(&(start + size));
            size += next_len;
        }
        if start + size == self.end {
            self.end = start;
        } else {
            self.free.insert(start, size);
        }
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
        assert_eq!(a.allocate(4096), 4096, "first fit reuses the hole");
        a.release(4096, 4096);
        a.release(z, 4096);
        a.release(x, 1);
        assert_eq!(a.free_runs(), vec![], "all free runs merged into the end");
        assert_eq!(a.allocated_bytes(), 0);
        assert_eq!(a.allocate(10), 0);
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

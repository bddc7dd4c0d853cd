//! Aligned, pooled I/O buffers shared by the wire and the store: memory
//! for direct I/O, block-aligned, huge-page backed and pooled, so bulk data
//! can travel from the socket to the disk without a copy.
//!
//! It maps, advises and pools memory; it does no file or network I/O and
//! knows nothing of frames or extents. It is its own crate so that
//! `cairn-types` stays pure data while both `cairn-wire` and `cairn-store`
//! draw on one process-wide pool ([`shared`]).
//!
//! `O_DIRECT` reads and writes need memory aligned to the device's block
//! (512 bytes or 4 KiB); an ordinary allocation is not. And a direct request
//! reaches the device as one segment per physically contiguous run of its
//! memory, while a virtio disk takes at most a few hundred segments per
//! request (`max_segments`, 254 on the development VM): a 4 MiB buffer in
//! scattered 4 KiB pages, which is what a long-running process's heap gives,
//! becomes several device requests, and was read and written at half the
//! speed of the same 4 MiB in two huge pages (1.2-1.3 GB/s against 2.1-2.8
//! GB/s). Writing straight from fresh heap buffers the wire had received
//! into lost to staging a copy into huge pages, in the cluster (349-398
//! against 505-509 MiB/s of 4 MiB writes).
//!
//! The one design choice to know: an [`IoBuffer`] is its own anonymous
//! mapping: page-aligned always, and when it is a huge page or larger,
//! aligned to one and advised to be backed by huge pages *before* anything
//! touches it (advice given to memory the heap already faulted in as small
//! pages would only take effect when the kernel's background collapser gets
//! to it). Buffers are reused through a [`BufferPool`]: a fresh
//! multi-megabyte mapping costs a page fault (and zeroing) per page, more
//! than a copy. The wire receives large data segments into buffers of the
//! process-wide pool ([`shared`]), and the store writes such payloads as
//! they are and stages others in the same pool.

pub mod limits;

use std::ptr::NonNull;
use std::sync::Mutex;

use bytes::Bytes;

use crate::limits::{ALIGN_BYTES, HUGE_PAGE_BYTES, SHARED_BUFFER_BYTES_MAX, SHARED_KEPT_MAX};

/// A zeroed, aligned, fixed-size buffer in its own memory mapping.
pub struct IoBuffer {
    /// Start of the mapping.
    map: NonNull<u8>,
    map_len: usize,
    /// Offset of the aligned window in the mapping, and its length.
    shift: usize,
    len: usize,
}

// SAFETY: an `IoBuffer` exclusively owns its mapping, like a `Vec<u8>` owns
// its allocation; shared access only reads it.
#[allow(unsafe_code)]
unsafe impl Send for IoBuffer {}
#[allow(unsafe_code)]
unsafe impl Sync for IoBuffer {}

impl std::fmt::Debug for IoBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuffer").field("len", &self.len).finish()
    }
}

impl IoBuffer {
    /// A buffer of `len` bytes (at least one page is mapped).
    ///
    /// # Errors
    /// The kernel refused the mapping (out of memory or address space).
    pub fn new(len: usize) -> std::io::Result<IoBuffer> {
        let align = if len >= HUGE_PAGE_BYTES {
            HUGE_PAGE_BYTES
        } else {
            1
        };
        // Mapped over-long by the alignment, so an aligned window fits;
        // the slack is never touched and so never backed by memory.
        let map_len = len.max(1) + align - 1;
        // SAFETY: a fresh private anonymous mapping aliases nothing; the
        // pointer is checked for null and owned by the result from here on.
        #[allow(unsafe_code)]
        let raw = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )?
        };
        let map = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null mapping"))?;
        let shift = map.as_ptr().align_offset(align);
        let buffer = IoBuffer {
            map,
            map_len,
            shift,
            len,
        };
        if align > 1 {
            // SAFETY: the range lies inside the mapping, which lives as long
            // as `buffer`; MADV_HUGEPAGE changes only how the kernel backs
            // the pages. A refusal (huge pages disabled) leaves small pages,
            // which are slower, not wrong.
            #[allow(unsafe_code)]
            let _ = unsafe {
                rustix::mm::madvise(
                    buffer.map.as_ptr().add(shift).cast(),
                    len / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
        Ok(buffer)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `shift + len <= map_len` inside a live, writable mapping
        // that only this buffer refers to; `&mut self` makes the borrow
        // exclusive.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr().add(self.shift), self.len)
        }
    }
}

impl AsRef<[u8]> for IoBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as for `as_mut_slice`; shared borrows only read.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.shift), self.len)
        }
    }
}

impl Drop for IoBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new` with this length and nothing
        // borrows it any more.
        #[allow(unsafe_code)]
        let _ = unsafe { rustix::mm::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

/// Reusable [`IoBuffer`]s, bounded in count and size.
#[derive(Debug)]
pub struct BufferPool {
    idle: Mutex<Vec<IoBuffer>>,
    kept_max: usize,
    buffer_bytes_max: usize,
}

impl BufferPool {
    /// A pool keeping up to `kept_max` idle buffers of at most
    /// `buffer_bytes_max` bytes each.
    #[must_use]
    pub const fn new(kept_max: usize, buffer_bytes_max: usize) -> BufferPool {
        BufferPool {
            idle: Mutex::new(Vec::new()),
            kept_max,
            buffer_bytes_max,
        }
    }

    /// A buffer of at least `len` bytes (its contents are whatever its last
    /// user left).
    ///
    /// # Errors
    /// A new buffer was needed and the kernel refused the mapping.
    pub fn take(&self, len: usize) -> std::io::Result<IoBuffer> {
        let reused = {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // The smallest that fits, so small requests leave the large
            // buffers to large ones.
            (0..idle.len())
                .filter(|&i| idle[i].len() >= len)
                .min_by_key(|&i| idle[i].len())
                .map(|i| idle.swap_remove(i))
        };
        match reused {
            Some(buffer) => Ok(buffer),
            None => IoBuffer::new(len),
        }
    }

    /// Returns a buffer for reuse (or unmaps it, beyond the bounds).
    pub fn give_back(&self, buffer: IoBuffer) {
        if buffer.len() > self.buffer_bytes_max {
            return;
        }
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < self.kept_max {
            idle.push(buffer);
        }
    }

    /// The first `len` bytes of `buffer` as `Bytes`, without a copy; the
    /// buffer comes back to this pool when the last clone is dropped.
    #[must_use]
    pub fn lend(&'static self, buffer: IoBuffer, len: usize) -> Bytes {
        let len = len.min(buffer.len());
        Bytes::from_owner(Lent {
            buffer: Some(buffer),
            pool: self,
        })
        .slice(..len)
    }
}

/// A pooled buffer lent out as `Bytes`.
struct Lent {
    buffer: Option<IoBuffer>,
    pool: &'static BufferPool,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref().map_or(&[], IoBuffer::as_ref)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.give_back(buffer);
        }
    }
}

static SHARED: BufferPool = BufferPool::new(SHARED_KEPT_MAX, SHARED_BUFFER_BYTES_MAX);

/// The process-wide pool: the wire's large data segments and the store's
/// staging and read buffers.
#[must_use]
pub fn shared() -> &'static BufferPool {
    &SHARED
}

/// A copy of `data` in a buffer of the process-wide pool.
///
/// # Errors
/// The kernel refused a new mapping.
pub fn aligned_copy(data: &[u8]) -> std::io::Result<Bytes> {
    let mut buffer = SHARED.take(data.len())?;
    buffer.as_mut_slice()[..data.len()].copy_from_slice(data);
    Ok(SHARED.lend(buffer, data.len()))
}

/// Whether `data` starts on an [`ALIGN_BYTES`] boundary.
#[must_use]
pub fn is_aligned(data: &[u8]) -> bool {
    data.as_ptr().align_offset(ALIGN_BYTES) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_writable() {
        for len in [
            0,
            1,
            4096,
            65_536,
            HUGE_PAGE_BYTES,
            4 * HUGE_PAGE_BYTES + 4096,
        ] {
            let mut buffer = IoBuffer::new(len).expect("mapped");
            assert_eq!(buffer.len(), len);
            assert!(buffer.as_ref().iter().all(|&b| b == 0));
            let align = if len >= HUGE_PAGE_BYTES {
                HUGE_PAGE_BYTES
            } else {
                ALIGN_BYTES
            };
            assert_eq!(buffer.as_ref().as_ptr().align_offset(align), 0, "len {len}");
            buffer.as_mut_slice().fill(0xa5);
            assert!(buffer.as_ref().iter().all(|&b| b == 0xa5));
        }
    }

    #[test]
    fn buffers_move_between_threads() {
        let mut buffer = IoBuffer::new(8192).expect("mapped");
        buffer.as_mut_slice()[8191] = 7;
        let last = std::thread::spawn(move || buffer.as_ref()[8191])
            .join()
            .expect("thread ran");
        assert_eq!(last, 7);
    }

    #[test]
    fn copies_are_aligned_and_hold_what_was_copied() {
        for len in [0, 1, 511, 4096, 4097, 1 << 20] {
            let bytes = aligned_copy(&vec![7u8; len]).expect("mapped");
            assert_eq!(bytes.len(), len);
            assert!(is_aligned(&bytes), "len {len}");
            assert!(bytes.iter().all(|&b| b == 7));
        }
    }

    #[test]
    fn a_lent_buffer_returns_to_its_pool_when_the_last_clone_goes() {
        static POOL: BufferPool = BufferPool::new(2, 1 << 20);
        let buffer = POOL.take(100_000).expect("mapped");
        let start = buffer.as_ref().as_ptr();
        let bytes = POOL.lend(buffer, 70_000);
        assert_eq!(bytes.len(), 70_000);
        let clone = bytes.slice(10..);
        drop(bytes);
        assert!(POOL.idle.lock().expect("lock").is_empty(), "still lent");
        drop(clone);
        let again = POOL.take(50_000).expect("reused");
        assert_eq!(again.as_ref().as_ptr(), start, "the same buffer, reused");
        POOL.give_back(IoBuffer::new(2 << 20).expect("mapped"));
        assert!(
            POOL.idle.lock().expect("lock").is_empty(),
            "too large to keep"
        );
    }

    #[test]
    fn an_ordinary_offset_slice_is_not_aligned() {
        let bytes = aligned_copy(&[1u8; 8192]).expect("mapped");
        assert!(!is_aligned(&bytes[1..]));
        assert!(is_aligned(&bytes[4096..]));
    }
}

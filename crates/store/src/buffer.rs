//! Memory for direct I/O, mapped by the store itself.
//!
//! A direct request reaches the device as one segment per physically
//! contiguous run of its memory, and a virtio disk takes at most a few
//! hundred segments per request (`max_segments`, 254 here). A 4 MiB buffer
//! in scattered 4 KiB pages, which is what a long-running process's heap
//! gives, becomes several device requests and was read at half the speed of
//! the same 4 MiB in two huge pages (1.2-1.3 GB/s against 2.1-2.8 GB/s on
//! the development VM).
//!
//! So an [`IoBuffer`] is its own anonymous mapping: page-aligned always, and
//! when it is a huge page or larger, aligned to one and advised to be backed
//! by huge pages *before* anything touches it (advice given to memory the
//! heap already faulted in as small pages would only take effect when the
//! kernel's background collapser gets to it). Its pages are zero until
//! written, and are faulted in on first use.

use std::ptr::NonNull;

use crate::limits;

/// A zeroed, aligned, fixed-size buffer in its own memory mapping.
pub(crate) struct IoBuffer {
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
    pub(crate) fn new(len: usize) -> std::io::Result<IoBuffer> {
        let huge = usize::try_from(limits::HUGE_PAGE_BYTES).unwrap_or(usize::MAX);
        let align = if len >= huge { huge } else { 1 };
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
                    len / huge * huge,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
        Ok(buffer)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_writable() {
        let huge = usize::try_from(limits::HUGE_PAGE_BYTES).expect("fits");
        for len in [0, 1, 4096, 65_536, huge, 4 * huge + 4096] {
            let mut buffer = IoBuffer::new(len).expect("mapped");
            assert_eq!(buffer.len(), len);
            assert!(buffer.as_ref().iter().all(|&b| b == 0));
            let align = if len >= huge { huge } else { 4096 };
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
}

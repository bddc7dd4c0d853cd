//! Block-aligned byte buffers, so bulk data can travel from the socket to
//! the disk without a copy.
//!
//! `O_DIRECT` reads and writes need memory aligned to the device's block
//! (512 bytes or 4 KiB); an ordinary allocation is not. A payload received
//! into an [`aligned_vec`] buffer can be handed to the store, which then
//! writes it straight from that memory instead of copying it into an aligned
//! staging buffer first (for a 4 MiB object, a 4 MiB copy per replica).

use bytes::Bytes;

/// The alignment this module guarantees: the largest block a Linux device
/// asks of `O_DIRECT` memory, and the page size.
pub const ALIGN_BYTES: usize = 4096;

/// An empty buffer with room for `len` bytes whose first byte will be
/// [`ALIGN_BYTES`]-aligned, and where that first byte is: fill it by
/// appending (`extend_from_slice`, or `read_buf` into its spare capacity,
/// which needs no zeroing), then share `[shift..]` of it.
#[must_use]
pub fn aligned_vec(len: usize) -> (Vec<u8>, usize) {
    let mut buffer: Vec<u8> = Vec::with_capacity(len + ALIGN_BYTES);
    let shift = buffer.as_ptr().align_offset(ALIGN_BYTES);
    buffer.resize(shift, 0);
    (buffer, shift)
}

/// A copy of `data` in aligned memory.
#[must_use]
pub fn aligned_copy(data: &[u8]) -> Bytes {
    let (mut buffer, shift) = aligned_vec(data.len());
    buffer.extend_from_slice(data);
    Bytes::from(buffer).slice(shift..)
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
    fn buffers_are_aligned_and_hold_what_was_filled() {
        for len in [0, 1, 511, 4096, 4097, 1 << 20] {
            let bytes = aligned_copy(&vec![7u8; len]);
            assert_eq!(bytes.len(), len);
            assert!(is_aligned(&bytes), "len {len}");
            assert!(bytes.iter().all(|&b| b == 7));
        }
    }

    #[test]
    fn an_aligned_vec_keeps_its_alignment_while_filled() {
        let (mut buffer, shift) = aligned_vec(10_000);
        let start = buffer.as_ptr();
        buffer.extend_from_slice(&[3u8; 10_000]);
        assert_eq!(buffer.as_ptr(), start, "no reallocation");
        assert!(is_aligned(&buffer[shift..]));
        assert_eq!(buffer.len() - shift, 10_000);
    }

    #[test]
    fn an_ordinary_offset_slice_is_not_aligned() {
        let bytes = aligned_copy(&[1u8; 8192]);
        assert!(!is_aligned(&bytes[1..]));
        assert!(is_aligned(&bytes[4096..]));
    }
}

//! Bytes that may carry their block checksums.
//!
//! A data segment is checksummed once where it enters a process: the wire
//! decoder computes the crc32c of each 4 KiB block while it verifies the
//! frame (the frame checksum is those block checksums combined), and hands
//! them on with the bytes. The store then keeps them as the object's block
//! checksums, and a frame that forwards the bytes derives its checksum from
//! them, instead of each stage reading every byte again. The client's
//! checksum so reaches the disk (DESIGN: end-to-end checksums).

use bytes::Bytes;
use std::ops::{Bound, Deref, RangeBounds};
use std::sync::Arc;

use crate::crc::{BLOCK_BYTES, block_crc32c};

/// `Bytes`, plus the crc32c of each [`BLOCK_BYTES`] block when whoever
/// produced them has it. Compares and prints as its bytes.
#[derive(Clone, Default)]
pub struct CheckedBytes {
    bytes: Bytes,
    /// Exactly `bytes.len().div_ceil(BLOCK_BYTES)` checksums, of `bytes`.
    blocks: Option<Arc<[u32]>>,
}

impl CheckedBytes {
    /// `bytes` with checksums computed now (one pass over them).
    #[must_use]
    pub fn summed(bytes: Bytes) -> CheckedBytes {
        let blocks = Some(block_crc32c(&bytes).into());
        CheckedBytes { bytes, blocks }
    }

    /// `bytes` with the block checksums the caller computed over these very
    /// bytes (the wire decoder, while verifying them). Checksums whose count
    /// does not fit the length are dropped.
    #[must_use]
    pub fn with_blocks(bytes: Bytes, blocks: Arc<[u32]>) -> CheckedBytes {
        let fits = blocks.len() == bytes.len().div_ceil(BLOCK_BYTES);
        CheckedBytes {
            bytes,
            blocks: fits.then_some(blocks),
        }
    }

    /// The crc32c of each block, if known.
    #[must_use]
    pub fn blocks(&self) -> Option<&[u32]> {
        self.blocks.as_deref()
    }

    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// A sub-range; it keeps the checksums when it starts on a block
    /// boundary and ends on one or at the end.
    ///
    /// # Panics
    /// As `Bytes::slice`, if the range is out of bounds.
    #[must_use]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> CheckedBytes {
        let start = match range.start_bound() {
            Bound::Included(&n) => n,
            Bound::Excluded(&n) => n + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&n) => n + 1,
            Bound::Excluded(&n) => n,
            Bound::Unbounded => self.bytes.len(),
        };
        let bytes = self.bytes.slice(start..end);
        let aligned = start % BLOCK_BYTES == 0
            && (end % BLOCK_BYTES == 0 || end == self.bytes.len())
            && start <= end;
        let blocks = self
            .blocks
            .as_ref()
            .filter(|_| aligned)
            .map(|b| b[start / BLOCK_BYTES..end.div_ceil(BLOCK_BYTES)].into());
        CheckedBytes { bytes, blocks }
    }
}

impl Deref for CheckedBytes {
    type Target = Bytes;
    fn deref(&self) -> &Bytes {
        &self.bytes
    }
}

impl From<Bytes> for CheckedBytes {
    fn from(bytes: Bytes) -> CheckedBytes {
        CheckedBytes {
            bytes,
            blocks: None,
        }
    }
}

impl From<CheckedBytes> for Bytes {
    fn from(checked: CheckedBytes) -> Bytes {
        checked.bytes
    }
}

impl From<Vec<u8>> for CheckedBytes {
    fn from(bytes: Vec<u8>) -> CheckedBytes {
        Bytes::from(bytes).into()
    }
}

impl PartialEq for CheckedBytes {
    fn eq(&self, other: &CheckedBytes) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for CheckedBytes {}

impl std::fmt::Debug for CheckedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.bytes.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_keep_checksums_only_on_block_boundaries() {
        let data: Vec<u8> = (0..3 * BLOCK_BYTES + 100).map(|i| (i * 7) as u8).collect();
        let whole = CheckedBytes::summed(Bytes::from(data.clone()));
        let tail = whole.slice(BLOCK_BYTES..);
        assert_eq!(tail.blocks(), Some(&block_crc32c(&data[BLOCK_BYTES..])[..]));
        let middle = whole.slice(BLOCK_BYTES..2 * BLOCK_BYTES);
        assert_eq!(
            middle.blocks(),
            Some(&block_crc32c(&data[BLOCK_BYTES..2 * BLOCK_BYTES])[..])
        );
        assert_eq!(whole.slice(1..BLOCK_BYTES).blocks(), None);
        assert_eq!(whole.slice(0..BLOCK_BYTES + 1).blocks(), None);
        assert_eq!(whole.slice(0..0).blocks(), Some(&[][..]));
        assert_eq!(&whole.slice(5..9)[..], &data[5..9]);
    }

    #[test]
    fn checksums_that_do_not_fit_the_length_are_dropped() {
        let bytes = Bytes::from(vec![1u8; BLOCK_BYTES + 1]);
        assert!(
            CheckedBytes::with_blocks(bytes.clone(), Arc::from(vec![0u32]))
                .blocks()
                .is_none()
        );
        let right = block_crc32c(&bytes);
        assert!(
            CheckedBytes::with_blocks(bytes, right.into())
                .blocks()
                .is_some()
        );
    }
}

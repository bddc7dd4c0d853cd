//! Where an object's bytes go: chunk `j` of stripe `s` (bytes
//! `(s * k + j) * c ..` of the object, `c` the object's chunk size) is
//! bytes `s * c ..` of data shard `j`; parity shard `k + p` holds, at the
//! same shard offsets, parity `p` of the stripe's `k` chunks (a data shard
//! shorter than the first counts as zeros there). No shard is padded past
//! the bytes it holds.

use crate::codec::SHARDS_MAX;
use std::ops::Range;

/// A small object's chunk size is a multiple of this.
pub const CHUNK_ALIGN: u64 = 64;

/// Stripe units a pool may choose.
pub const STRIPE_UNIT_MIN: u64 = 4 << 10;
pub const STRIPE_UNIT_MAX: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("an erasure code needs k >= 1 and m >= 1 (got {k}+{m})")]
    Zero { k: u32, m: u32 },
    #[error("k + m = {total} is more than {max} shards")]
    TooWide { total: u64, max: usize },
    #[error("stripe unit {0} is not a power of two from 4K to 1M")]
    StripeUnit(u64),
}

/// One EC pool's shape: `k` data shards, `m` parity shards, and the
/// stripe unit (the chunk size of objects of a stripe or more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    pub k: u32,
    pub m: u32,
    pub stripe_unit: u64,
}

/// A piece of an object's byte range that lies in one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Data shard (`0..k`).
    pub shard: u32,
    pub shard_offset: u64,
    pub object_offset: u64,
    pub len: u64,
}

impl StripeLayout {
    /// # Errors
    /// `k` or `m` zero, too many shards, or a stripe unit that is not a
    /// power of two from 4K to 1M.
    pub fn new(k: u32, m: u32, stripe_unit: u64) -> Result<StripeLayout, LayoutError> {
        if k == 0 || m == 0 {
            return Err(LayoutError::Zero { k, m });
        }
        let total = u64::from(k) + u64::from(m);
        if total > SHARDS_MAX as u64 {
            return Err(LayoutError::TooWide {
                total,
                max: SHARDS_MAX,
            });
        }
        if !stripe_unit.is_power_of_two()
            || !(STRIPE_UNIT_MIN..=STRIPE_UNIT_MAX).contains(&stripe_unit)
        {
            return Err(LayoutError::StripeUnit(stripe_unit));
        }
        Ok(StripeLayout { k, m, stripe_unit })
    }

    #[must_use]
    pub fn shards(&self) -> u32 {
        self.k + self.m
    }

    /// Bytes of data in a whole stripe of the pool.
    #[must_use]
    pub fn stripe_width(&self) -> u64 {
        u64::from(self.k) * self.stripe_unit
    }

    /// The chunk size for an object of `size` bytes: the stripe unit from
    /// one stripe up, else the size over `k` rounded up to
    /// [`CHUNK_ALIGN`] (a small object is split across every data shard,
    /// not padded to a stripe).
    #[must_use]
    pub fn chunk_for(&self, size: u64) -> u64 {
        if size >= self.stripe_width() {
            return self.stripe_unit;
        }
        let per_shard = size.div_ceil(u64::from(self.k)).max(1);
        per_shard
            .div_ceil(CHUNK_ALIGN)
            .saturating_mul(CHUNK_ALIGN)
            .min(self.stripe_unit)
    }

    /// Whether an object striped with `chunk` can hold `size` bytes
    /// without being striped again: with the stripe unit always, with a
    /// smaller chunk up to one stripe of it.
    #[must_use]
    pub fn fits(&self, chunk: u64, size: u64) -> bool {
        chunk == self.stripe_unit || size <= u64::from(self.k) * chunk
    }

    /// Bytes data shard `shard` (`0..k`) holds of an object of `size`
    /// bytes striped with `chunk`; a parity shard holds as many as data
    /// shard 0 (see [`parity_len`](Self::parity_len)).
    #[must_use]
    pub fn data_len(&self, chunk: u64, size: u64, shard: u32) -> u64 {
        if chunk == 0 {
            return 0;
        }
        let width = u64::from(self.k) * chunk;
        let full = size / width;
        let rest = size % width;
        let start = u64::from(shard) * chunk;
        full * chunk + rest.saturating_sub(start).min(chunk)
    }

    /// Bytes each parity shard holds of an object of `size` bytes.
    #[must_use]
    pub fn parity_len(&self, chunk: u64, size: u64) -> u64 {
        self.data_len(chunk, size, 0)
    }

    /// Bytes shard `shard` (`0..k + m`) holds.
    #[must_use]
    pub fn shard_len(&self, chunk: u64, size: u64, shard: u32) -> u64 {
        if shard < self.k {
            self.data_len(chunk, size, shard)
        } else {
            self.parity_len(chunk, size)
        }
    }

    /// Bytes all shards of an object of `size` hold together (striped
    /// with the chunk [`chunk_for`](Self::chunk_for) gives).
    #[must_use]
    pub fn stored_bytes(&self, size: u64) -> u64 {
        let chunk = self.chunk_for(size);
        (0..self.shards())
            .map(|s| self.shard_len(chunk, size, s))
            .sum()
    }

    /// The pieces of object bytes `range`, in object order, each within
    /// one chunk.
    #[must_use]
    pub fn extents(&self, chunk: u64, range: Range<u64>) -> Vec<Extent> {
        let mut out = Vec::new();
        if chunk == 0 {
            return out;
        }
        let width = u64::from(self.k) * chunk;
        let mut at = range.start;
        while at < range.end {
            let stripe = at / width;
            let within = at % width;
            let shard = within / chunk;
            let in_chunk = within % chunk;
            let len = (chunk - in_chunk).min(range.end - at);
            out.push(Extent {
                shard: u32::try_from(shard).unwrap_or(u32::MAX),
                shard_offset: stripe * chunk + in_chunk,
                object_offset: at,
                len,
            });
            at += len;
        }
        out
    }

    /// Per data shard touched by object bytes `range`, the one contiguous
    /// range of that shard's bytes holding them: what a read fetches.
    #[must_use]
    pub fn shard_ranges(&self, chunk: u64, range: Range<u64>) -> Vec<(u32, Range<u64>)> {
        let mut per: Vec<Option<Range<u64>>> = vec![None; self.k as usize];
        for e in self.extents(chunk, range) {
            let r = e.shard_offset..e.shard_offset + e.len;
            let slot = &mut per[e.shard as usize];
            *slot = Some(match slot.take() {
                Some(have) => have.start.min(r.start)..have.end.max(r.end),
                None => r,
            });
        }
        per.into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (u32::try_from(i).unwrap_or(u32::MAX), r)))
            .collect()
    }

    /// The stripes object bytes `range` touches.
    #[must_use]
    pub fn stripes(&self, chunk: u64, range: Range<u64>) -> Range<u64> {
        if chunk == 0 || range.is_empty() {
            return 0..0;
        }
        let width = u64::from(self.k) * chunk;
        range.start / width..range.end.div_ceil(width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shapes_are_validated() {
        assert_eq!(
            StripeLayout::new(0, 1, 4096),
            Err(LayoutError::Zero { k: 0, m: 1 })
        );
        assert!(matches!(
            StripeLayout::new(4, 2, 3 << 12),
            Err(LayoutError::StripeUnit(_))
        ));
        assert!(StripeLayout::new(4, 2, 2048).is_err());
        assert!(StripeLayout::new(4, 2, 2 << 20).is_err());
        assert!(StripeLayout::new(250, 7, 4096).is_err());
        assert!(StripeLayout::new(8, 3, 1 << 20).is_ok());
    }

    #[test]
    fn a_small_object_costs_its_size_times_k_plus_m_over_k() {
        let l = StripeLayout::new(2, 1, 64 << 10).expect("layout");
        // 4 KiB on 2+1: two 2 KiB data chunks and one 2 KiB parity chunk.
        assert_eq!(l.chunk_for(4096), 2048);
        assert_eq!(l.stored_bytes(4096), 6144);
        let l = StripeLayout::new(4, 2, 64 << 10).expect("layout");
        assert_eq!(l.stored_bytes(4096), 6144);
        // A stripe or more: whole stripe units, the last stripe partial
        // and unpadded.
        assert_eq!(l.chunk_for(4 << 20), 64 << 10);
        assert_eq!(l.stored_bytes(4 << 20), (4 << 20) / 4 * 6);
        let size = (256 << 10) + 100;
        assert_eq!(l.chunk_for(size), 64 << 10);
        assert_eq!(l.data_len(64 << 10, size, 0), (64 << 10) + 100);
        assert_eq!(l.data_len(64 << 10, size, 1), 64 << 10);
        assert_eq!(l.parity_len(64 << 10, size), (64 << 10) + 100);
    }

    #[test]
    fn a_read_fetches_only_the_shards_holding_its_bytes() {
        let l = StripeLayout::new(4, 2, 4096).expect("layout");
        // 100 bytes inside chunk 1 of stripe 3.
        let off = 3 * 4 * 4096 + 4096 + 10;
        assert_eq!(
            l.shard_ranges(4096, off..off + 100),
            vec![(1, 3 * 4096 + 10..3 * 4096 + 110)]
        );
        // Two whole stripes: every data shard, two chunks each.
        assert_eq!(
            l.shard_ranges(4096, 0..2 * 4 * 4096),
            (0..4).map(|s| (s, 0..8192)).collect::<Vec<_>>()
        );
        assert_eq!(l.stripes(4096, off..off + 100), 3..4);
    }

    proptest! {
        /// Every byte of a range lands in exactly one extent, in order, at
        /// the shard and offset the layout's formula gives, and within
        /// the shard's length.
        #[test]
        fn extents_cover_each_byte_once(
            shape in prop::sample::select(vec![(1u32, 1u32), (2, 1), (4, 2), (8, 3)]),
            unit_shift in 12u32..=14,
            size in 0u64..200_000,
            a in 0u64..200_000,
            b in 0u64..200_000,
        ) {
            let (k, m) = shape;
            let l = StripeLayout::new(k, m, 1 << unit_shift).expect("layout");
            let chunk = l.chunk_for(size);
            prop_assert!(l.fits(chunk, size));
            let (start, end) = (a.min(b).min(size), a.max(b).min(size));
            let extents = l.extents(chunk, start..end);
            let mut at = start;
            for e in &extents {
                prop_assert_eq!(e.object_offset, at);
                prop_assert!(e.len > 0);
                let width = u64::from(k) * chunk;
                prop_assert_eq!(u64::from(e.shard), at % width / chunk);
                prop_assert!(e.shard_offset + e.len <= l.data_len(chunk, size, e.shard));
                at += e.len;
            }
            prop_assert_eq!(at, end);
            let data: u64 = (0..k).map(|s| l.data_len(chunk, size, s)).sum();
            prop_assert_eq!(data, size);
        }
    }
}

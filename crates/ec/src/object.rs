//! Whole objects to shards and back: the bytes a full write stores on
//! each of the `k + m` shards ([`split`]), the object from its data shards
//! ([`join`]), the missing shards from any `k` ([`rebuild`]), and a byte
//! range of the object from the shard ranges [`StripeLayout::shard_ranges`]
//! names ([`gather`]).
//!
//! Every shard is exactly [`StripeLayout::shard_len`] bytes: a data shard
//! holds its chunks of each stripe, the last one cut where the object
//! ends, never padded; a parity shard is as long as data shard 0, its
//! bytes at offset `x` the code of the data shards' bytes at `x` (a data
//! shard shorter than that counts as zeros there).

use crate::codec::{Codec, CodecError};
use crate::layout::StripeLayout;
use std::ops::Range;

/// An object cut into its shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shards {
    /// The chunk size it is striped with ([`StripeLayout::chunk_for`]).
    pub chunk: u64,
    /// The object's size in bytes.
    pub size: u64,
    /// Data shards `0..k`, then parity shards `k..k + m`.
    pub shards: Vec<Vec<u8>>,
}

/// Why shards do not make an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("{0}")]
    Codec(#[from] CodecError),
    #[error("the codec is {codec_k}+{codec_m}, the layout {k}+{m}")]
    Mismatch {
        codec_k: usize,
        codec_m: usize,
        k: u32,
        m: u32,
    },
    #[error("{got} shards given, the layout has {want}")]
    ShardCount { got: usize, want: usize },
    #[error("shard {shard} holds {got} bytes, {want} expected")]
    ShardLength { shard: u32, got: u64, want: u64 },
    #[error("bytes {start}..{end} are not all in the shard pieces given")]
    Uncovered { start: u64, end: u64 },
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn check_codec(layout: &StripeLayout, codec: &dyn Codec) -> Result<(), ObjectError> {
    if codec.k() != layout.k as usize || codec.m() != layout.m as usize {
        return Err(ObjectError::Mismatch {
            codec_k: codec.k(),
            codec_m: codec.m(),
            k: layout.k,
            m: layout.m,
        });
    }
    Ok(())
}

/// The parity shards of `data` (the `k` data shards of an object striped
/// with `chunk`, each its own length), each `parity_len` bytes.
fn parity_of(
    codec: &dyn Codec,
    data: &[&[u8]],
    parity_len: usize,
    m: usize,
) -> Result<Vec<Vec<u8>>, CodecError> {
    let extended: Vec<std::borrow::Cow<'_, [u8]>> = data
        .iter()
        .map(|d| {
            if d.len() == parity_len {
                std::borrow::Cow::Borrowed(*d)
            } else {
                let mut v = d.to_vec();
                v.resize(parity_len, 0);
                std::borrow::Cow::Owned(v)
            }
        })
        .collect();
    let refs: Vec<&[u8]> = extended.iter().map(AsRef::as_ref).collect();
    let mut parity = vec![vec![0u8; parity_len]; m];
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    codec.encode(&refs, &mut outs)?;
    Ok(parity)
}

/// Cuts `data` (a whole object) into its `k + m` shards.
///
/// # Errors
/// A codec of another shape than the layout, or the codec's refusal.
pub fn split(layout: &StripeLayout, codec: &dyn Codec, data: &[u8]) -> Result<Shards, ObjectError> {
    check_codec(layout, codec)?;
    let size = data.len() as u64;
    let chunk = layout.chunk_for(size);
    let mut shards: Vec<Vec<u8>> = (0..layout.k)
        .map(|j| Vec::with_capacity(usize_of(layout.data_len(chunk, size, j))))
        .collect();
    // In object order each data shard's pieces come in its own order.
    for e in layout.extents(chunk, 0..size) {
        let from = usize_of(e.object_offset);
        shards[e.shard as usize].extend_from_slice(&data[from..from + usize_of(e.len)]);
    }
    let parity_len = usize_of(layout.parity_len(chunk, size));
    let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
    let parity = parity_of(codec, &refs, parity_len, layout.m as usize)?;
    shards.extend(parity);
    Ok(Shards {
        chunk,
        size,
        shards,
    })
}

/// The object of `size` bytes striped with `chunk` from its `k` data
/// shards (each at least its [`StripeLayout::data_len`]).
///
/// # Errors
/// Not `k` shards, or one too short.
pub fn join(
    layout: &StripeLayout,
    chunk: u64,
    size: u64,
    data: &[&[u8]],
) -> Result<Vec<u8>, ObjectError> {
    if data.len() != layout.k as usize {
        return Err(ObjectError::ShardCount {
            got: data.len(),
            want: layout.k as usize,
        });
    }
    for (j, d) in (0u32..).zip(data) {
        let want = layout.data_len(chunk, size, j);
        if (d.len() as u64) < want {
            return Err(ObjectError::ShardLength {
                shard: j,
                got: d.len() as u64,
                want,
            });
        }
    }
    let mut out = Vec::with_capacity(usize_of(size));
    for e in layout.extents(chunk, 0..size) {
        let at = usize_of(e.shard_offset);
        out.extend_from_slice(&data[e.shard as usize][at..at + usize_of(e.len)]);
    }
    Ok(out)
}

/// Rebuilds every missing shard (`None`) of an object of `size` bytes
/// striped with `chunk` from any `k` present ones, each exactly its
/// [`StripeLayout::shard_len`].
///
/// # Errors
/// Fewer than `k` present, a present shard of the wrong length, or a
/// codec of another shape.
pub fn rebuild(
    layout: &StripeLayout,
    codec: &dyn Codec,
    chunk: u64,
    size: u64,
    shards: &mut [Option<Vec<u8>>],
) -> Result<(), ObjectError> {
    check_codec(layout, codec)?;
    let n = layout.shards() as usize;
    if shards.len() != n {
        return Err(ObjectError::ShardCount {
            got: shards.len(),
            want: n,
        });
    }
    for (i, s) in (0u32..).zip(shards.iter()) {
        let want = layout.shard_len(chunk, size, i);
        if let Some(s) = s
            && s.len() as u64 != want
        {
            return Err(ObjectError::ShardLength {
                shard: i,
                got: s.len() as u64,
                want,
            });
        }
    }
    // The code works on chunks of one length: data shards shorter than the
    // parity are zeros up to it, then cut back.
    let parity_len = usize_of(layout.parity_len(chunk, size));
    for s in shards.iter_mut().flatten() {
        s.resize(parity_len, 0);
    }
    codec.reconstruct(shards)?;
    for (i, s) in (0u32..).zip(shards.iter_mut()) {
        if let Some(s) = s {
            s.truncate(usize_of(layout.shard_len(chunk, size, i)));
        }
    }
    Ok(())
}

/// Object bytes `range` of an object striped with `chunk`, from pieces of
/// its data shards: `(shard, shard byte range, bytes)`, as
/// [`StripeLayout::shard_ranges`] names them (a piece may hold more).
///
/// # Errors
/// A byte of `range` in no piece.
pub fn gather(
    layout: &StripeLayout,
    chunk: u64,
    range: Range<u64>,
    pieces: &[(u32, Range<u64>, &[u8])],
) -> Result<Vec<u8>, ObjectError> {
    let mut out = Vec::with_capacity(usize_of(range.end.saturating_sub(range.start)));
    for e in layout.extents(chunk, range.clone()) {
        let end = e.shard_offset + e.len;
        let piece = pieces.iter().find(|(shard, r, bytes)| {
            *shard == e.shard
                && r.start <= e.shard_offset
                && end <= r.end
                && (r.start + bytes.len() as u64) >= end
        });
        let Some((_, r, bytes)) = piece else {
            return Err(ObjectError::Uncovered {
                start: e.object_offset,
                end: e.object_offset + e.len,
            });
        };
        let at = usize_of(e.shard_offset - r.start);
        out.extend_from_slice(&bytes[at..at + usize_of(e.len)]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReedSolomon;
    use proptest::prelude::*;

    fn object(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn a_small_object_is_split_across_the_data_shards_not_padded() {
        let layout = StripeLayout::new(4, 2, 16 << 10).expect("layout");
        let codec = ReedSolomon::new(4, 2).expect("codec");
        let data = object(4096, 7);
        let s = split(&layout, &codec, &data).expect("split");
        assert_eq!(s.chunk, 1024);
        let lens: Vec<usize> = s.shards.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![1024; 6]);
        assert_eq!(&s.shards[1][..], &data[1024..2048]);
        let data_refs: Vec<&[u8]> = s.shards[..4].iter().map(Vec::as_slice).collect();
        assert_eq!(
            join(&layout, s.chunk, s.size, &data_refs).expect("join"),
            data
        );
    }

    #[test]
    fn an_empty_object_has_empty_shards() {
        let layout = StripeLayout::new(2, 1, 4096).expect("layout");
        let codec = ReedSolomon::new(2, 1).expect("codec");
        let s = split(&layout, &codec, &[]).expect("split");
        assert!(s.shards.iter().all(Vec::is_empty));
        assert_eq!(join(&layout, s.chunk, 0, &[&[], &[]]).expect("join"), b"");
    }

    #[test]
    fn wrong_shapes_and_lengths_are_refused() {
        let layout = StripeLayout::new(4, 2, 4096).expect("layout");
        let other = ReedSolomon::new(2, 1).expect("codec");
        assert!(matches!(
            split(&layout, &other, b"x"),
            Err(ObjectError::Mismatch { .. })
        ));
        let codec = ReedSolomon::new(4, 2).expect("codec");
        let s = split(&layout, &codec, &object(20_000, 1)).expect("split");
        let mut shards: Vec<Option<Vec<u8>>> = s.shards.into_iter().map(Some).collect();
        shards[0] = None;
        shards[1].as_mut().expect("shard 1").pop();
        assert!(matches!(
            rebuild(&layout, &codec, s.chunk, s.size, &mut shards),
            Err(ObjectError::ShardLength { shard: 1, .. })
        ));
        let pieces = [(0u32, 0..10, &[0u8; 10][..])];
        assert!(matches!(
            gather(&layout, s.chunk, 0..20, &pieces),
            Err(ObjectError::Uncovered { .. })
        ));
    }

    fn shapes() -> impl Strategy<Value = (u32, u32, u64)> {
        prop_oneof![Just((2u32, 1u32)), Just((4, 2)), Just((8, 3))]
            .prop_flat_map(|(k, m)| (Just(k), Just(m), prop_oneof![Just(4096u64), Just(16 << 10)]))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Every shard has the length the layout gives, the data shards
        /// join back to the object, any m of the shards lost are rebuilt
        /// byte-exact, and any byte range gathers from the shard ranges a
        /// read would fetch.
        #[test]
        fn shards_join_rebuild_and_gather_to_the_object(
            (k, m, unit) in shapes(),
            len in prop_oneof![0usize..200, 0usize..70_000, 190_000usize..200_000],
            seed in any::<u8>(),
            lost in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
            range in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
        ) {
            let layout = StripeLayout::new(k, m, unit).expect("layout");
            let codec = ReedSolomon::new(k as usize, m as usize).expect("codec");
            let data = object(len, seed);
            let s = split(&layout, &codec, &data).expect("split");
            let n = (k + m) as usize;
            prop_assert_eq!(s.shards.len(), n);
            for (i, shard) in (0u32..).zip(&s.shards) {
                prop_assert_eq!(shard.len() as u64, layout.shard_len(s.chunk, s.size, i));
            }
            let stored: u64 = s.shards.iter().map(|x| x.len() as u64).sum();
            prop_assert_eq!(stored, layout.stored_bytes(s.size));
            let data_refs: Vec<&[u8]> = s.shards[..k as usize].iter().map(Vec::as_slice).collect();
            prop_assert_eq!(&join(&layout, s.chunk, s.size, &data_refs).expect("join"), &data);

            let mut shards: Vec<Option<Vec<u8>>> = s.shards.iter().cloned().map(Some).collect();
            for index in lost.iter().take(m as usize) {
                shards[index.index(n)] = None;
            }
            rebuild(&layout, &codec, s.chunk, s.size, &mut shards).expect("rebuild");
            for (i, shard) in shards.iter().enumerate() {
                prop_assert_eq!(shard.as_deref(), Some(&s.shards[i][..]), "shard {}", i);
            }

            let (a, b) = (range.0.index(len + 1) as u64, range.1.index(len + 1) as u64);
            let wanted = a.min(b)..a.max(b);
            let fetched: Vec<(u32, Range<u64>, Vec<u8>)> = layout
                .shard_ranges(s.chunk, wanted.clone())
                .into_iter()
                .map(|(shard, r)| {
                    let bytes = s.shards[shard as usize][usize_of(r.start)..usize_of(r.end)].to_vec();
                    (shard, r, bytes)
                })
                .collect();
            let pieces: Vec<(u32, Range<u64>, &[u8])> =
                fetched.iter().map(|(s, r, b)| (*s, r.clone(), b.as_slice())).collect();
            let got = gather(&layout, s.chunk, wanted.clone(), &pieces).expect("gather");
            prop_assert_eq!(&got[..], &data[usize_of(wanted.start)..usize_of(wanted.end)]);
        }
    }
}

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

/// What re-encoding an object's shards found ([`check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parity {
    /// The parity shards are the code of the data shards.
    Consistent,
    /// These shards (at most `m`) disagree with what the others agree on:
    /// rebuilding them from the others makes the object consistent.
    Bad(std::collections::BTreeSet<u32>),
    /// The shards disagree, and which are wrong cannot be told (more
    /// wrong shards than the code can locate).
    Unlocated,
}

/// Checks that the parity of an object of `size` bytes striped with
/// `chunk` is the code of its data over a window of its stripe rows, and
/// if not, which shards are wrong. `pieces[i]` is shard `i`'s bytes from
/// `start` (a multiple of `chunk`) to the window's end (`start` plus the
/// length of the parity pieces), cut where the shard ends. `trusted[i]`:
/// shard `i`'s bytes are known good (they matched a checksum recorded
/// when they were written).
///
/// With `k` trusted shards, the others are rebuilt from them and those
/// that differ are the bad ones. Otherwise each stripe row is decoded on
/// its own: a row's wrong shards are located when they are at most
/// `m / 2` (the code's distance is `m + 1`, so that many are pinned down
/// uniquely), among the untrusted shards.
///
/// # Errors
/// Not `k + m` pieces, one of the wrong length, a window that does not
/// start a row, or a codec of another shape.
pub fn check(
    layout: &StripeLayout,
    codec: &dyn Codec,
    (chunk, size): (u64, u64),
    start: u64,
    pieces: &[&[u8]],
    trusted: &[bool],
) -> Result<Parity, ObjectError> {
    check_codec(layout, codec)?;
    let (k, m, n) = (
        layout.k as usize,
        layout.m as usize,
        layout.shards() as usize,
    );
    if pieces.len() != n || trusted.len() != n {
        return Err(ObjectError::ShardCount {
            got: pieces.len().min(trusted.len()),
            want: n,
        });
    }
    let width = pieces[k].len() as u64;
    let end = start.saturating_add(width);
    if chunk == 0 || !start.is_multiple_of(chunk) || end > layout.parity_len(chunk, size) {
        return Err(ObjectError::Uncovered { start, end });
    }
    for (i, piece) in (0u32..).zip(pieces) {
        let want = end
            .min(layout.shard_len(chunk, size, i))
            .saturating_sub(start);
        if piece.len() as u64 != want {
            return Err(ObjectError::ShardLength {
                shard: i,
                got: piece.len() as u64,
                want,
            });
        }
    }
    let width = usize_of(width);
    let parity = parity_of(codec, &pieces[..k], width, m)?;
    if parity.iter().zip(&pieces[k..]).all(|(a, b)| a == b) {
        return Ok(Parity::Consistent);
    }
    // Every piece as long as the parity (data shards end in zeros).
    let full: Vec<Vec<u8>> = pieces
        .iter()
        .map(|s| {
            let mut s = s.to_vec();
            s.resize(width, 0);
            s
        })
        .collect();
    let good: Vec<usize> = (0..n).filter(|i| trusted[*i]).collect();
    let mut bad = std::collections::BTreeSet::new();
    if good.len() >= k {
        let rebuilt = decode_from(codec, &full, &good[..k])?;
        bad.extend((0..n).filter(|i| rebuilt[*i] != full[*i]).map(|i| i as u32));
    } else {
        let untrusted: Vec<usize> = (0..n).filter(|i| !trusted[*i]).collect();
        for at in (0..width).step_by(usize_of(chunk)) {
            let to = (at + usize_of(chunk)).min(width);
            let row: Vec<Vec<u8>> = full.iter().map(|s| s[at..to].to_vec()).collect();
            match locate_in_row(codec, &row, &untrusted, m / 2)? {
                Some(wrong) => bad.extend(wrong.iter().map(|i| *i as u32)),
                None => return Ok(Parity::Unlocated),
            }
        }
    }
    if bad.is_empty() || bad.len() > m {
        return Ok(Parity::Unlocated);
    }
    Ok(Parity::Bad(bad))
}

/// Every shard (each of one length) as the code gives it from the shards
/// at positions `basis` (`k` of them).
fn decode_from(
    codec: &dyn Codec,
    shards: &[Vec<u8>],
    basis: &[usize],
) -> Result<Vec<Vec<u8>>, ObjectError> {
    let mut slots: Vec<Option<Vec<u8>>> = (0..shards.len())
        .map(|i| basis.contains(&i).then(|| shards[i].clone()))
        .collect();
    codec.reconstruct(&mut slots)?;
    Ok(slots.into_iter().map(Option::unwrap_or_default).collect())
}

/// The shards of one stripe row that are wrong: none if the row is a
/// codeword, else the one set of at most `most` shards among `candidates`
/// whose removal leaves a codeword (`None`: no such set, or several).
fn locate_in_row(
    codec: &dyn Codec,
    row: &[Vec<u8>],
    candidates: &[usize],
    most: usize,
) -> Result<Option<Vec<usize>>, ObjectError> {
    let (k, n) = (codec.k(), row.len());
    let consistent_without = |left_out: &[usize]| -> Result<bool, ObjectError> {
        let basis: Vec<usize> = (0..n).filter(|i| !left_out.contains(i)).take(k).collect();
        let rebuilt = decode_from(codec, row, &basis)?;
        Ok((0..n)
            .filter(|i| !left_out.contains(i))
            .all(|i| rebuilt[i] == row[i]))
    };
    if consistent_without(&[])? {
        return Ok(Some(Vec::new()));
    }
    for size in 1..=most {
        let mut found: Vec<Vec<usize>> = Vec::new();
        for set in subsets(candidates, size) {
            if consistent_without(&set)? {
                found.push(set);
            }
        }
        match found.len() {
            0 => {}
            1 => return Ok(found.pop()),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// Every subset of `items` with `size` elements, in order.
fn subsets(items: &[usize], size: usize) -> Vec<Vec<usize>> {
    if size == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        for mut rest in subsets(&items[i + 1..], size - 1) {
            rest.insert(0, *first);
            out.push(rest);
        }
    }
    out
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
    use std::collections::BTreeSet;

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

    /// Re-encoding finds the shards that disagree: any `m / 2` of them
    /// with nothing trusted, any `m` of the others with `k` trusted, and
    /// says so rather than guess when it cannot tell (2+1, nothing
    /// trusted).
    #[test]
    fn re_encoding_locates_the_wrong_shards_it_can_and_no_more() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |below: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            usize::try_from(rng % below as u64).expect("small")
        };
        let mut checked = 0;
        for (k, m) in [(2u32, 1u32), (4, 2), (8, 3)] {
            let layout = StripeLayout::new(k, m, 4096).expect("layout");
            let codec = ReedSolomon::new(k as usize, m as usize).expect("codec");
            let n = (k + m) as usize;
            for case in 0..60 {
                let len = [300, 5000, 70_001, 200_000][case % 4];
                let s = split(&layout, &codec, &object(len, case as u8)).expect("split");
                let none = vec![false; n];
                let check = |shards: &[Vec<u8>], trusted: &[bool]| {
                    let whole: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
                    super::check(&layout, &codec, (s.chunk, s.size), 0, &whole, trusted)
                        .expect("check")
                };
                // Rows 1 and 2 only.
                let (from, to) = (s.chunk, 3 * s.chunk);
                let windowed = layout.parity_len(s.chunk, s.size) >= to;
                let check_window = |shards: &[Vec<u8>], trusted: &[bool]| {
                    let window: Vec<&[u8]> = shards
                        .iter()
                        .map(|x| &x[usize_of(from).min(x.len())..usize_of(to).min(x.len())])
                        .collect();
                    super::check(&layout, &codec, (s.chunk, s.size), from, &window, trusted)
                        .expect("check a window")
                };
                assert_eq!(check(&s.shards, &none), Parity::Consistent);
                // Some shards trusted (the first k of a shuffled order) or
                // none; then as many wrong shards as can be located.
                let mut order: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    order.swap(i, next(i + 1));
                }
                let with_trust = case % 2 == 0;
                let mut trusted = vec![false; n];
                let (wrong_max, pool) = if with_trust {
                    for &i in &order[..k as usize] {
                        trusted[i] = true;
                    }
                    (m as usize, &order[k as usize..])
                } else {
                    (m as usize / 2, &order[..])
                };
                let count = if wrong_max == 0 {
                    1
                } else {
                    1 + next(wrong_max)
                };
                let wrong: BTreeSet<usize> = pool
                    .iter()
                    .filter(|i| !s.shards[**i].is_empty())
                    .take(count)
                    .copied()
                    .collect();
                let mut shards = s.shards.clone();
                let mut inside = 0;
                for &i in &wrong {
                    let at = next(shards[i].len());
                    shards[i][at] ^= 1 + next(255) as u8;
                    inside += usize::from((usize_of(from)..usize_of(to)).contains(&at));
                }
                let found = check(&shards, &trusted);
                let what = format!("{k}+{m}, {len} bytes, wrong {wrong:?}, trusted {trusted:?}");
                if windowed && inside == 0 {
                    assert_eq!(
                        check_window(&shards, &trusted),
                        Parity::Consistent,
                        "{what}"
                    );
                } else if windowed && inside == wrong.len() {
                    assert_eq!(check_window(&shards, &trusted), found, "{what}: window");
                }
                if wrong_max == 0 {
                    assert_eq!(found, Parity::Unlocated, "{what}");
                } else {
                    let want: BTreeSet<u32> = wrong.iter().map(|i| *i as u32).collect();
                    assert_eq!(found, Parity::Bad(want.clone()), "{what}");
                    let mut slots: Vec<Option<Vec<u8>>> = shards.into_iter().map(Some).collect();
                    for i in &want {
                        slots[*i as usize] = None;
                    }
                    rebuild(&layout, &codec, s.chunk, s.size, &mut slots).expect("rebuild");
                    let rebuilt: Vec<Vec<u8>> = slots.into_iter().flatten().collect();
                    assert_eq!(rebuilt, s.shards, "{what}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 180);
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

//! Direct shard reads of erasure-coded objects (docs/erasure-coding.md,
//! "Direct shard reads"): which data shards to ask, and the object bytes
//! from their parts. Pure, so the simulator's clients run the same rules.

use crate::error::ClientError;
use bytes::Bytes;
use cairn_ec::layout::StripeLayout;
use cairn_proto::osd::DirectPart;

/// Whom a direct read asks, and for what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The data shards' parts of the range (`subset`: only those a
    /// stripe-unit chunk puts it on; see [`first_shards`]).
    Parts { shards: Vec<u32>, subset: bool },
    /// A data position has no OSD: the stripes the range touches from `k`
    /// positions that have one, to decode the missing data.
    Rows { shards: Vec<u32> },
}

/// The plan of round `round` (0, then 1 when the object's chunks turned
/// out smaller than the stripe unit) of a direct read of bytes
/// `offset..offset + length`, with `live[i]` whether position `i` of the
/// acting set has an OSD; `None`: fewer than `k` have one.
#[must_use]
pub fn plan(
    layout: &StripeLayout,
    live: &[bool],
    (offset, length): (u64, Option<u64>),
    round: u32,
) -> Option<Plan> {
    let k = layout.k as usize;
    if live.len() != layout.shards() as usize {
        return None;
    }
    if live[..k].iter().all(|l| *l) {
        let first = (round == 0)
            .then(|| first_shards(layout, offset, length))
            .flatten();
        return Some(match first {
            Some(shards) => Plan::Parts {
                shards,
                subset: true,
            },
            None => Plan::Parts {
                shards: (0..layout.k).collect(),
                subset: false,
            },
        });
    }
    let shards: Vec<u32> = (0..layout.shards())
        .filter(|i| live[*i as usize])
        .take(k)
        .collect();
    (shards.len() == k).then_some(Plan::Rows { shards })
}

/// The data shards to ask first for bytes `offset..offset + length`: for
/// a ranged read, those holding the range if the object's chunks are the
/// stripe unit (an object of a stripe or more), when fewer than every
/// data shard (`None`: ask every data shard).
#[must_use]
pub fn first_shards(layout: &StripeLayout, offset: u64, length: Option<u64>) -> Option<Vec<u32>> {
    let range = offset..offset.saturating_add(length?);
    let touched: Vec<u32> = layout
        .shard_ranges(layout.stripe_unit, range)
        .into_iter()
        .map(|(shard, _)| shard)
        .collect();
    (!touched.is_empty() && touched.len() < layout.k as usize).then_some(touched)
}

/// What direct parts came to.
#[derive(Debug)]
pub enum Assembled {
    Done(Result<Bytes, ClientError>),
    /// Parts of only the shards a stripe-unit chunk puts the range on,
    /// from an object with smaller chunks: ask every data shard.
    SmallerChunk,
    /// Parts that disagree or do not fit together: ask the primary.
    Refused,
}

/// The bytes `offset..offset + length` (`None`: to the end) of an
/// erasure-coded object from its data shards' direct parts (`some`: of
/// only the shards holding the range if chunks are the stripe unit, else
/// of every data shard), if every part is of one version, size and chunk
/// (`NotFound` if none found the object). Bytes from the network: never
/// trusted to index or to size a buffer.
pub fn assemble_direct(
    layout: &StripeLayout,
    (offset, length): (u64, Option<u64>),
    parts: &[(u32, DirectPart, Bytes)],
    some: bool,
) -> Assembled {
    if parts.is_empty() || (!some && parts.len() != layout.k as usize) {
        return Assembled::Refused;
    }
    let (size, chunk) = match agreed_shape(parts) {
        Ok(shape) => shape,
        Err(answer) => return answer,
    };
    let mut pieces = Vec::with_capacity(parts.len());
    for (shard, part, data) in parts {
        let DirectPart::Found { shard_offset, .. } = *part else {
            return Assembled::Refused;
        };
        let Some(end) = shard_offset.checked_add(data.len() as u64) else {
            return Assembled::Refused;
        };
        pieces.push((*shard, shard_offset..end, &data[..]));
    }
    if some && chunk != layout.stripe_unit {
        return Assembled::SmallerChunk;
    }
    let Some(std::ops::Range { start, end }) = read_range(layout, chunk, size, (offset, length))
    else {
        return Assembled::Refused;
    };
    // The shards' parts cut the range exactly.
    let received: u64 = pieces.iter().map(|(_, r, _)| r.end - r.start).sum();
    if received != end - start {
        return Assembled::Refused;
    }
    match cairn_ec::object::gather(layout, chunk, start..end, &pieces) {
        Ok(bytes) => Assembled::Done(Ok(Bytes::from(bytes))),
        Err(_) => Assembled::Refused,
    }
}

/// The bytes `offset..offset + length` (`None`: to the end) of an
/// erasure-coded object from the rows ([`Plan::Rows`]) of `k` of its
/// shards, the missing data decoded with `codec`, if every part is of one
/// version, size and chunk (`NotFound` if none found the object). Bytes
/// from the network: every length is checked against the layout before it
/// sizes anything.
pub fn assemble_rows(
    layout: &StripeLayout,
    codec: &dyn cairn_ec::Codec,
    (offset, length): (u64, Option<u64>),
    parts: &[(u32, DirectPart, Bytes)],
) -> Assembled {
    if parts.len() != layout.k as usize {
        return Assembled::Refused;
    }
    let (size, chunk) = match agreed_shape(parts) {
        Ok(shape) => shape,
        Err(answer) => return answer,
    };
    let Some(std::ops::Range { start, end }) = read_range(layout, chunk, size, (offset, length))
    else {
        return Assembled::Refused;
    };
    let rows = layout.stripes(chunk, start..end);
    if rows.is_empty() {
        return Assembled::Done(Ok(Bytes::new()));
    }
    // The rows are an object of their own, striped alike.
    let width = u64::from(layout.k) * chunk;
    let base = rows.start * width;
    let rows_size = (rows.end * width).min(size) - base;
    let mut shards: Vec<Option<Vec<u8>>> = vec![None; layout.shards() as usize];
    for (shard, part, data) in parts {
        let Some(slot) = shards.get_mut(*shard as usize) else {
            return Assembled::Refused;
        };
        let at_rows = matches!(part, DirectPart::Found { shard_offset, .. }
            if *shard_offset == rows.start * chunk);
        if !at_rows
            || slot.is_some()
            || data.len() as u64 != layout.shard_len(chunk, rows_size, *shard)
        {
            return Assembled::Refused;
        }
        *slot = Some(data.to_vec());
    }
    if cairn_ec::object::rebuild(layout, codec, chunk, rows_size, &mut shards).is_err() {
        return Assembled::Refused;
    }
    let pieces: Vec<(u32, std::ops::Range<u64>, &[u8])> = (0..layout.k)
        .zip(&shards)
        .filter_map(|(j, s)| s.as_deref().map(|s| (j, 0..s.len() as u64, s)))
        .collect();
    match cairn_ec::object::gather(layout, chunk, start - base..end - base, &pieces) {
        Ok(bytes) => Assembled::Done(Ok(Bytes::from(bytes))),
        Err(_) => Assembled::Refused,
    }
}

/// The size and chunk every part shows, all at one version; `Err`: the
/// answer when they do not (`NotFound` if no part found the object).
fn agreed_shape(parts: &[(u32, DirectPart, Bytes)]) -> Result<(u64, u64), Assembled> {
    if parts.iter().all(|(_, part, _)| *part == DirectPart::Absent) {
        return Err(Assembled::Done(Err(ClientError::NotFound)));
    }
    let mut shape = None;
    for (_, part, _) in parts {
        let DirectPart::Found {
            version,
            size,
            chunk,
            ..
        } = *part
        else {
            return Err(Assembled::Refused);
        };
        if *shape.get_or_insert((version, size, chunk)) != (version, size, chunk) {
            return Err(Assembled::Refused);
        }
    }
    shape
        .map(|(_, size, chunk)| (size, chunk))
        .ok_or(Assembled::Refused)
}

/// The object bytes a read of `offset..offset + length` (`None`: to the
/// end) covers in an object of `size` bytes striped with `chunk`; `None`
/// for a chunk or size no layout makes (bytes from the network).
fn read_range(
    layout: &StripeLayout,
    chunk: u64,
    size: u64,
    (offset, length): (u64, Option<u64>),
) -> Option<std::ops::Range<u64>> {
    if chunk == 0
        || chunk > layout.stripe_unit
        || !chunk.is_multiple_of(cairn_ec::CHUNK_ALIGN)
        || !layout.fits(chunk, size)
    {
        return None;
    }
    let start = offset.min(size);
    let end = length
        .map_or(size, |l| offset.saturating_add(l).min(size))
        .max(start);
    Some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_parts_assemble_only_when_they_agree_and_fit() {
        let layout = StripeLayout::new(2, 1, 4096).expect("layout");
        let object: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let found = |version, shard_offset| DirectPart::Found {
            version,
            size: 4096,
            chunk: 2048,
            shard_offset,
        };
        let part = |shard: u32, part, range: std::ops::Range<usize>| {
            (shard, part, Bytes::copy_from_slice(&object[range]))
        };
        let whole = [
            part(0, found(5, 0), 0..2048),
            part(1, found(5, 0), 2048..4096),
        ];
        let Assembled::Done(Ok(bytes)) = assemble_direct(&layout, (0, None), &whole, false) else {
            panic!("agreeing parts assemble");
        };
        assert_eq!(&bytes[..], &object[..]);
        let Assembled::Done(Ok(bytes)) = assemble_direct(
            &layout,
            (2000, Some(100)),
            &[
                part(0, found(5, 2000), 2000..2048),
                part(1, found(5, 0), 2048..2100),
            ],
            false,
        ) else {
            panic!("a range across both shards assembles");
        };
        assert_eq!(&bytes[..], &object[2000..2100]);
        // Another version on one shard: a write came between.
        let torn = [
            part(0, found(5, 0), 0..2048),
            part(1, found(6, 0), 2048..4096),
        ];
        assert!(matches!(
            assemble_direct(&layout, (0, None), &torn, false),
            Assembled::Refused
        ));
        // One shard missing, short, or lying about where its bytes are.
        assert!(matches!(
            assemble_direct(&layout, (0, None), &whole[..1], false),
            Assembled::Refused
        ));
        let short = [
            part(0, found(5, 0), 0..2048),
            part(1, found(5, 0), 2048..4000),
        ];
        assert!(matches!(
            assemble_direct(&layout, (0, None), &short, false),
            Assembled::Refused
        ));
        let lying = [
            part(0, found(5, u64::MAX - 10), 0..2048),
            part(1, found(5, 0), 2048..4096),
        ];
        assert!(matches!(
            assemble_direct(&layout, (0, None), &lying, false),
            Assembled::Refused
        ));
        let huge = DirectPart::Found {
            version: 5,
            size: u64::MAX / 2,
            chunk: 4096,
            shard_offset: 0,
        };
        assert!(matches!(
            assemble_direct(
                &layout,
                (0, None),
                &[(0, huge.clone(), Bytes::new()), (1, huge, Bytes::new())],
                false
            ),
            Assembled::Refused
        ));
        // Absent everywhere: not found; absent on one shard only: ask the
        // primary.
        let absent = [
            (0, DirectPart::Absent, Bytes::new()),
            (1, DirectPart::Absent, Bytes::new()),
        ];
        assert!(matches!(
            assemble_direct(&layout, (0, None), &absent, false),
            Assembled::Done(Err(ClientError::NotFound))
        ));
        assert!(matches!(
            assemble_direct(
                &layout,
                (0, None),
                &[whole[0].clone(), absent[1].clone()],
                false
            ),
            Assembled::Refused
        ));
        // Only the shard a stripe-unit chunk puts the range on, but the
        // object is smaller: every data shard is asked next.
        assert!(matches!(
            assemble_direct(
                &layout,
                (0, Some(100)),
                &[part(0, found(5, 0), 0..100)],
                true
            ),
            Assembled::SmallerChunk
        ));
        let big = DirectPart::Found {
            version: 5,
            size: 1 << 20,
            chunk: 4096,
            // Object byte 8192 + 10 is in the second stripe's first chunk.
            shard_offset: 4096 + 10,
        };
        let Assembled::Done(Ok(bytes)) = assemble_direct(
            &layout,
            (8192 + 10, Some(100)),
            &[(0, big, Bytes::copy_from_slice(&object[10..110]))],
            true,
        ) else {
            panic!("one shard's part of a large object assembles");
        };
        assert_eq!(&bytes[..], &object[10..110]);
    }

    #[test]
    fn a_missing_data_shard_is_decoded_from_the_rows_of_k_others() {
        let layout = StripeLayout::new(2, 1, 4096).expect("layout");
        let codec = cairn_ec::ReedSolomon::new(2, 1).expect("codec");
        let all_live = [true, true, true];
        assert!(matches!(
            plan(&layout, &all_live, (0, None), 0),
            Some(Plan::Parts { subset: false, .. })
        ));
        assert_eq!(
            plan(&layout, &[false, true, true], (0, None), 0),
            Some(Plan::Rows { shards: vec![1, 2] })
        );
        assert_eq!(
            plan(&layout, &[true, true, false], (0, Some(100)), 0),
            Some(Plan::Parts {
                shards: vec![0],
                subset: true
            }),
            "a parity hole costs nothing"
        );
        assert_eq!(plan(&layout, &[false, true, false], (0, None), 0), None);
        for size in [1usize, 100, 4096, 8192, 70_001] {
            let object: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            let shards = cairn_ec::object::split(&layout, &codec, &object).expect("split");
            for (offset, length) in [
                (0u64, None),
                (10, Some(100)),
                (8190, Some(5000)),
                (60_000, None),
            ] {
                let start = usize::try_from(offset).expect("small").min(size);
                let end = length
                    .map_or(size, |l| {
                        usize::try_from(offset + l).expect("small").min(size)
                    })
                    .max(start);
                let rows = layout.stripes(shards.chunk, start as u64..end as u64);
                // Data shard 0 is missing: shard 1 and the parity answer.
                let parts: Vec<(u32, DirectPart, Bytes)> = [1u32, 2]
                    .iter()
                    .map(|&shard| {
                        let bytes = &shards.shards[shard as usize];
                        let from = usize::try_from(rows.start * shards.chunk)
                            .expect("small")
                            .min(bytes.len());
                        let to = usize::try_from(rows.end * shards.chunk)
                            .expect("small")
                            .min(bytes.len());
                        let part = DirectPart::Found {
                            version: 3,
                            size: size as u64,
                            chunk: shards.chunk,
                            shard_offset: rows.start * shards.chunk,
                        };
                        (shard, part, Bytes::copy_from_slice(&bytes[from..to]))
                    })
                    .collect();
                let got = assemble_rows(&layout, &codec, (offset, length), &parts);
                let Assembled::Done(Ok(bytes)) = got else {
                    panic!("size {size} range {offset}+{length:?}: {got:?}");
                };
                assert_eq!(
                    &bytes[..],
                    &object[start..end],
                    "size {size} {offset}+{length:?}"
                );
                // A part one byte short, or of another version: refused.
                if parts[0].2.len() > 1 {
                    let mut short = parts.clone();
                    short[0].2 = short[0].2.slice(1..);
                    assert!(matches!(
                        assemble_rows(&layout, &codec, (offset, length), &short),
                        Assembled::Refused
                    ));
                }
                let mut torn = parts.clone();
                if let DirectPart::Found { version, .. } = &mut torn[1].1 {
                    *version = 4;
                }
                assert!(matches!(
                    assemble_rows(&layout, &codec, (offset, length), &torn),
                    Assembled::Refused
                ));
            }
        }
    }

    #[test]
    fn a_ranged_read_asks_first_only_the_shards_holding_its_range() {
        let layout = StripeLayout::new(4, 2, 4096).expect("layout");
        assert_eq!(
            first_shards(&layout, 0, None),
            None,
            "to the end: every shard"
        );
        assert_eq!(first_shards(&layout, 100, Some(200)), Some(vec![0]));
        assert_eq!(first_shards(&layout, 4095, Some(2)), Some(vec![0, 1]));
        assert_eq!(
            first_shards(&layout, 5 * 4096 + 1, Some(3)),
            Some(vec![1]),
            "the second stripe's second chunk"
        );
        assert_eq!(
            first_shards(&layout, 0, Some(16_384)),
            None,
            "a whole stripe"
        );
    }
}

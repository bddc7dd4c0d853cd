//! Weighted straw2 selection over a flat set of OSDs.
//!
//! Each OSD `i` with weight `w_i` draws a straw `u_i` (uniform, from
//! [`crate::hash::straw`]); the winner is the OSD with the smallest
//! `-ln(u_i) / w_i`, an exponential race in which OSD `i` wins with
//! probability `w_i / Σw`. Because every OSD's straw depends only on the
//! draw and that OSD, adding, removing or reweighting one OSD changes the
//! winner only of the draws that OSD wins or loses: movement is minimal.
//!
//! Ceph applies straw2 at each level of its hierarchy, which is faster but
//! moves up to about twice the optimal data when an OSD joins an existing
//! host (the host's own straw changes, pulling PGs onto its old disks). Here
//! the race is flat over OSDs and the hierarchy only rejects draws that
//! repeat a failure domain. To keep a flat race fast, OSDs of equal weight
//! form a group in which the smallest `-ln(u)/w` is simply the largest `u`:
//! the inner loop is a hash and a compare, with no logarithm, and the
//! logarithm is taken once per group per draw.
//!
//! The logarithm is fixed point (`Q32`, from a table built at compile time
//! with integer arithmetic only), so every machine computes the same winner.

use crate::hash::straw;

/// The candidates of one straw2 race: OSDs grouped by equal weight.
#[derive(Clone, Debug, Default)]
pub struct Race {
    groups: Vec<Group>,
}

#[derive(Clone, Debug)]
struct Group {
    /// 16.16 fixed-point weight shared by the group, > 0.
    weight: u32,
    /// [`crate::hash::osd_key`] of each member.
    keys: Vec<u32>,
    /// The caller's index of each member.
    members: Vec<u32>,
}

/// Members are examined this many at a time, so the hashing loop has a
/// fixed trip count the compiler can vectorize.
const CHUNK_SIZE: usize = 16;

impl Race {
    /// Builds a race from `(member, key, weight)` triples. Zero-weight
    /// members can never win and are left out. Groups are ordered by weight,
    /// members by the order given, so ties break the same way everywhere.
    #[must_use]
    pub fn new(candidates: impl IntoIterator<Item = (u32, u32, u32)>) -> Race {
        let mut groups: Vec<Group> = Vec::new();
        for (member, key, weight) in candidates {
            if weight == 0 {
                continue;
            }
            let at = match groups.binary_search_by_key(&weight, |g| g.weight) {
                Ok(at) => at,
                Err(at) => {
                    groups.insert(
                        at,
                        Group {
                            weight,
                            keys: Vec::new(),
                            members: Vec::new(),
                        },
                    );
                    at
                }
            };
            groups[at].keys.push(key);
            groups[at].members.push(member);
        }
        Race { groups }
    }

    /// A race nobody can win (a device class with no OSDs).
    #[must_use]
    pub const fn empty() -> Race {
        Race { groups: Vec::new() }
    }

    /// True when no member can win.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Members in the race.
    #[must_use]
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.members.len()).sum()
    }

    /// The `count` best members of the race seeded `draw_seed`, best first:
    /// the order of `-ln(u)/w` over all members (fewer if the race is
    /// smaller). Taking members greedily in this order is weighted sampling
    /// without replacement, and inserting, removing or reweighting one member
    /// only moves that member within the order.
    #[must_use]
    pub fn ranked(&self, draw_seed: u32, count: usize) -> Vec<u32> {
        let mut candidates: Vec<(u64, u32, u32)> = Vec::with_capacity(count * self.groups.len());
        let mut top = Vec::with_capacity(count + 1);
        for group in &self.groups {
            group_top(draw_seed, &group.keys, count, &mut top);
            candidates.extend(top.iter().map(|&(straw, index)| {
                (
                    neg_log2_q32(straw),
                    group.weight,
                    group.members[index as usize],
                )
            }));
        }
        // Stable sort by cost / weight, compared exactly: ties keep group
        // order, then the group's own order (first index first).
        candidates.sort_by(|&(ca, wa, _), &(cb, wb, _)| {
            (u128::from(ca) * u128::from(wb)).cmp(&(u128::from(cb) * u128::from(wa)))
        });
        candidates.truncate(count);
        candidates
            .into_iter()
            .map(|(_, _, member)| member)
            .collect()
    }

    /// The winner of the draw seeded `draw_seed`, or `None` for an empty race.
    #[must_use]
    pub fn winner(&self, draw_seed: u32) -> Option<u32> {
        let mut best: Option<(u64, u32, u32)> = None; // (-log2 u in Q32, weight, member)
        for group in &self.groups {
            let (index, straw_max) = group_max(draw_seed, &group.keys);
            let cost = neg_log2_q32(straw_max);
            let better = match best {
                None => true,
                // cost / weight < best_cost / best_weight, exactly.
                Some((best_cost, best_weight, _)) => {
                    u128::from(cost) * u128::from(best_weight)
                        < u128::from(best_cost) * u128::from(group.weight)
                }
            };
            if better {
                best = Some((cost, group.weight, group.members[index]));
            }
        }
        best.map(|(_, _, member)| member)
    }
}

/// Index and value of the largest straw in a non-empty group; the first
/// index wins a tie. Uses AVX2 when the CPU has it: the same integer
/// arithmetic, eight OSDs per instruction, so the winner is identical.
#[inline]
fn group_max(draw_seed: u32, keys: &[u32]) -> (usize, u32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, as checked just above; that is the
        // only requirement of a `target_feature(enable = "avx2")` function.
        #[allow(unsafe_code)]
        return unsafe { group_max_avx2(draw_seed, keys) };
    }
    group_max_portable(draw_seed, keys)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn group_max_avx2(draw_seed: u32, keys: &[u32]) -> (usize, u32) {
    group_max_portable(draw_seed, keys)
}

/// Hashes whole chunks into a fixed-size array (which the compiler turns
/// into vector code), then finds the chunk's maximum.
#[inline(always)]
fn group_max_portable(draw_seed: u32, keys: &[u32]) -> (usize, u32) {
    debug_assert!(!keys.is_empty());
    let mut best_index = 0;
    let mut best_straw = straw(draw_seed, keys[0]);
    let chunks = keys.chunks_exact(CHUNK_SIZE);
    let remainder = chunks.remainder();
    for (chunk_index, chunk) in chunks.enumerate() {
        let mut straws = [0u32; CHUNK_SIZE];
        for (s, &key) in straws.iter_mut().zip(chunk) {
            *s = straw(draw_seed, key);
        }
        let chunk_max = straws.iter().fold(0, |a, &b| a.max(b));
        if chunk_max > best_straw {
            let offset = straws.iter().position(|&s| s == chunk_max).unwrap_or(0);
            best_index = chunk_index * CHUNK_SIZE + offset;
            best_straw = chunk_max;
        }
    }
    let base = keys.len() - remainder.len();
    for (i, &key) in remainder.iter().enumerate() {
        let s = straw(draw_seed, key);
        if s > best_straw {
            best_index = base + i;
            best_straw = s;
        }
    }
    (best_index, best_straw)
}

/// The `count` largest straws of a group as `(straw, index)`, largest
/// first, the first index first among equals. Uses AVX2 when available.
#[inline]
fn group_top(draw_seed: u32, keys: &[u32], count: usize, top: &mut Vec<(u32, u32)>) {
    top.clear();
    if count == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, as checked just above.
        #[allow(unsafe_code)]
        return unsafe { group_top_avx2(draw_seed, keys, count, top) };
    }
    group_top_portable(draw_seed, keys, count, top);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn group_top_avx2(draw_seed: u32, keys: &[u32], count: usize, top: &mut Vec<(u32, u32)>) {
    group_top_portable(draw_seed, keys, count, top);
}

/// Straws are uniform, so the `count` largest of `n` almost surely lie
/// above `2^32 - (2^32 / n) * (2 * count + 4)`: collect everything above
/// that threshold in one vectorized pass (a chunk is examined only when its
/// maximum clears it), widen it fourfold if too few were found, then sort
/// the few collected. The result does not depend on the threshold.
#[inline(always)]
fn group_top_portable(draw_seed: u32, keys: &[u32], count: usize, top: &mut Vec<(u32, u32)>) {
    const SPAN: u64 = 1 << 32;
    let want = count.min(keys.len());
    let expected = 2 * count as u64 + 4;
    let mut gap = (SPAN / keys.len().max(1) as u64).saturating_mul(expected);
    loop {
        // Keep straws >= threshold; 0 keeps everything, so the loop ends.
        #[allow(clippy::cast_possible_truncation)]
        let threshold = SPAN.saturating_sub(gap) as u32;
        top.clear();
        let chunks = keys.chunks_exact(CHUNK_SIZE);
        let remainder = chunks.remainder();
        for (chunk_index, chunk) in chunks.enumerate() {
            let mut straws = [0u32; CHUNK_SIZE];
            for (s, &key) in straws.iter_mut().zip(chunk) {
                *s = straw(draw_seed, key);
            }
            let chunk_max = straws.iter().fold(0, |a, &b| a.max(b));
            if chunk_max >= threshold {
                for (offset, &s) in straws.iter().enumerate() {
                    if s >= threshold {
                        top.push((s, index_u32(chunk_index * CHUNK_SIZE + offset)));
                    }
                }
            }
        }
        let base = keys.len() - remainder.len();
        for (i, &key) in remainder.iter().enumerate() {
            let s = straw(draw_seed, key);
            if s >= threshold {
                top.push((s, index_u32(base + i)));
            }
        }
        if top.len() >= want || threshold == 0 {
            break;
        }
        gap = gap.saturating_mul(4);
    }
    // Largest straw first; among equals, the first index.
    top.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    top.truncate(count);
}

#[allow(clippy::cast_possible_truncation)]
fn index_u32(i: usize) -> u32 {
    i as u32
}

/// The obvious scalar loop, for tests to compare the fast paths with.
#[cfg(test)]
fn group_max_reference(draw_seed: u32, keys: &[u32]) -> (usize, u32) {
    let mut best = (0, straw(draw_seed, keys[0]));
    for (i, &key) in keys.iter().enumerate() {
        let s = straw(draw_seed, key);
        if s > best.1 {
            best = (i, s);
        }
    }
    best
}

/// `-log2((straw + 1) / 2^32)` in Q32 fixed point: 0 for the largest straw,
/// 32 (× 2^32) for the smallest.
#[must_use]
pub fn neg_log2_q32(straw: u32) -> u64 {
    (32u64 << 32) - log2_q32(u64::from(straw) + 1)
}

/// Table resolution: `log2(1 + i / 2^LOG2_TABLE_BITS)` for every `i`.
const LOG2_TABLE_BITS: u32 = 12;
const LOG2_TABLE_SIZE: usize = (1 << LOG2_TABLE_BITS) + 1;
static LOG2_TABLE: [u64; LOG2_TABLE_SIZE] = build_log2_table();

/// `log2(v)` in Q32 for `1 <= v <= 2^32`: exponent from the leading bit, the
/// mantissa's log from the table, linearly interpolated on the next 32 bits
/// (error below 2^-26).
#[must_use]
pub fn log2_q32(v: u64) -> u64 {
    debug_assert!(v >= 1);
    let exponent = 63 - u64::from(v.leading_zeros());
    let normalized = v << (63 - exponent); // leading 1 at bit 63
    let index = ((normalized >> (63 - LOG2_TABLE_BITS)) & ((1 << LOG2_TABLE_BITS) - 1)) as usize;
    let fraction = (normalized >> (63 - LOG2_TABLE_BITS - 32)) & 0xffff_ffff;
    let low = LOG2_TABLE[index];
    let high = LOG2_TABLE[index + 1];
    (exponent << 32) + low + (((high - low) * fraction) >> 32)
}

const fn build_log2_table() -> [u64; LOG2_TABLE_SIZE] {
    let mut table = [0u64; LOG2_TABLE_SIZE];
    let mut i = 0;
    while i < LOG2_TABLE_SIZE {
        // 1 + i / 4096 in Q62.
        let x = (1u128 << 62) + ((i as u128) << (62 - LOG2_TABLE_BITS));
        table[i] = log2_fraction_q32(x);
        i += 1;
    }
    table
}

/// `log2(x)` for `x` in `[1, 2]` given in Q62, by repeated squaring: each
/// square doubles the log, and a result of 2 or more yields a 1 bit.
const fn log2_fraction_q32(mut x: u128) -> u64 {
    let two = 2u128 << 62;
    if x >= two {
        return 1 << 32;
    }
    let mut result = 0u64;
    let mut bit = 1u64 << 31;
    while bit > 0 {
        x = (x * x) >> 62;
        if x >= two {
            x >>= 1;
            result |= bit;
        }
        bit >>= 1;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_is_exact_at_powers_and_close_elsewhere() {
        assert_eq!(log2_q32(1), 0);
        assert_eq!(log2_q32(2), 1 << 32);
        assert_eq!(log2_q32(1 << 20), 20 << 32);
        assert_eq!(log2_q32(1 << 32), 32 << 32);
        for v in [3u64, 5, 1000, 65_535, 123_456_789, (1 << 32) - 1] {
            #[allow(clippy::cast_precision_loss)]
            let expected = (v as f64).log2() * 4_294_967_296.0;
            #[allow(clippy::cast_precision_loss)]
            let got = log2_q32(v) as f64;
            assert!((got - expected).abs() < 128.0, "v={v}: {got} vs {expected}");
        }
    }

    #[test]
    fn log2_is_monotonic() {
        let mut last = 0;
        for v in (1u64..=1 << 32).step_by(9_973) {
            let now = log2_q32(v);
            assert!(now >= last, "log2 decreased at {v}");
            last = now;
        }
    }

    #[test]
    fn fast_paths_pick_the_same_winner_as_the_plain_loop() {
        for len in [1usize, 2, 15, 16, 17, 33, 100, 1000] {
            let keys: Vec<u32> = (0..len as u32)
                .map(|i| crate::hash::fmix32(i ^ 0x5bd1))
                .collect();
            for seed in 0..200u32 {
                let seed = crate::hash::fmix32(seed);
                let expected = group_max_reference(seed, &keys);
                assert_eq!(group_max(seed, &keys), expected, "len {len} seed {seed}");
                assert_eq!(
                    group_max_portable(seed, &keys),
                    expected,
                    "len {len} seed {seed}"
                );
            }
        }
        // Ties go to the first index, in every path.
        let keys = [7u32, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7];
        assert_eq!(group_max(1, &keys).0, 0);
    }

    #[test]
    fn ranked_is_a_prefix_of_the_full_order() {
        let race = Race::new(
            (0..300u32).map(|i| (i, crate::hash::fmix32(i * 7 + 1), 0x1_0000 * (1 + i % 3))),
        );
        for seed in 0..50u32 {
            let full = race.ranked(seed, 300);
            assert_eq!(full.len(), 300);
            let mut sorted = full.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..300).collect::<Vec<_>>(), "a permutation");
            for count in [1usize, 3, 7, 40] {
                assert_eq!(race.ranked(seed, count), full[..count].to_vec());
            }
            assert_eq!(race.ranked(seed, 1)[0], race.winner(seed).expect("winner"));
        }
    }

    #[test]
    fn empty_and_zero_weight_races_have_no_winner() {
        assert_eq!(Race::new([]).winner(1), None);
        assert_eq!(Race::new([(0, 1, 0), (1, 2, 0)]).winner(1), None);
    }

    #[test]
    fn heavier_member_wins_in_proportion() {
        let race = Race::new([(0, 11, 0x1_0000), (1, 22, 0x3_0000)]);
        let wins = (0..40_000u32)
            .filter(|&d| race.winner(crate::hash::fmix32(d)) == Some(1))
            .count();
        // Expected 30,000; the standard deviation is about 87.
        assert!((29_500..=30_500).contains(&wins), "heavy member won {wins}");
    }
}

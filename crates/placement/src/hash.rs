//! The frozen hash functions of placement. Changing any of them moves data in
//! every cluster, so each is pinned by test vectors below and described in
//! `docs/placement.md`.
//!
//! - object name → 64 bits: XXH3-64 (seed 0) of the name's bytes;
//!   the PG seed uses its low 32 bits.
//! - PG seed → PG: Ceph's stable modulo, so raising `pg_num` splits PGs.
//! - PG → placement seed: XXH3-64 of `pool_id (u32 LE) ‖ stable_mod(seed, pgp_num) (u32 LE)`.
//! - draw `r` of a PG: low 32 bits of XXH3-64, seeded with `r`, of the
//!   placement seed (u64 LE).
//! - OSD key: low 32 bits of XXH3-64 of `"osd" ‖ id (u32 LE)`.
//! - straw of an OSD in a draw: the murmur3 32-bit finalizer of
//!   `draw ^ key`.

use cairn_types::{OsdId, PgId, PoolId};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

pub use cairn_types::{object_hash, object_hash32};

/// Ceph's `ceph_stable_mod`: `x mod b`, arranged so that growing `b` by one
/// moves only the inputs of one PG, to its new child.
///
/// With `mask = next_power_of_two(b) - 1`, `x & mask` is used when below `b`,
/// else `x & (mask >> 1)`. For `b` a power of two it is plain `x mod b`.
#[must_use]
pub fn stable_mod(x: u32, b: u32) -> u32 {
    debug_assert!(b > 0, "stable_mod by zero");
    let mask = b.checked_next_power_of_two().map_or(u32::MAX, |p| p - 1);
    if x & mask < b {
        x & mask
    } else {
        x & (mask >> 1)
    }
}

/// The PG of an object in a pool with `pg_num` PGs.
#[must_use]
pub fn object_pg(pool: PoolId, pg_num: u32, name: &[u8]) -> PgId {
    // Low 32 bits of the object hash: the same bits Ceph's `ps` carries.
    PgId::new(pool, stable_mod(object_hash32(name), pg_num))
}

/// The PGs PG `parent` splits into when its pool's `pg_num` grows from
/// `from` to `to`: every new seed whose objects were `parent`'s. Growing
/// in one step or several ends with the same objects in the same PGs,
/// because `stable_mod(stable_mod(h, to), from) == stable_mod(h, from)`.
#[must_use]
pub fn split_children(parent: u32, from: u32, to: u32) -> Vec<u32> {
    if from == 0 {
        return Vec::new();
    }
    (from..to)
        .filter(|&c| stable_mod(c, from) == parent)
        .collect()
}

/// The hash bits selecting PG `child`'s objects when the pool has `pg_num`
/// PGs: `(bits, value)` with `stable_mod(h, pg_num) == child` exactly when
/// `h & (2^bits - 1) == value` (the form the store splits collections by).
#[must_use]
pub fn split_rule(child: u32, pg_num: u32) -> (u8, u32) {
    let span = u64::from(pg_num).next_power_of_two();
    #[allow(clippy::cast_possible_truncation)]
    let bits = span.trailing_zeros() as u8;
    let half = span / 2;
    let child_wide = u64::from(child);
    if child_wide < half && child_wide + half >= u64::from(pg_num) {
        (bits - 1, child)
    } else {
        (bits, child)
    }
}

/// The seed a PG's placement draws derive from. PGs that agree on
/// `stable_mod(seed, pgp_num)` share it and so share their OSDs.
#[must_use]
pub fn placement_seed(pg: PgId, pgp_num: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pg.pool.0.to_le_bytes());
    bytes[4..].copy_from_slice(&stable_mod(pg.seed, pgp_num).to_le_bytes());
    xxh3_64(&bytes)
}

/// The seed of draw number `r` of a PG.
#[must_use]
pub fn draw_seed(placement_seed: u64, r: u32) -> u32 {
    #[allow(clippy::cast_possible_truncation)]
    let seed = xxh3_64_with_seed(&placement_seed.to_le_bytes(), u64::from(r)) as u32;
    seed
}

/// The fixed key of an OSD, mixed into each of its straws.
#[must_use]
pub fn osd_key(osd: OsdId) -> u32 {
    let mut bytes = [0u8; 7];
    bytes[..3].copy_from_slice(b"osd");
    bytes[3..].copy_from_slice(&osd.0.to_le_bytes());
    #[allow(clippy::cast_possible_truncation)]
    let key = xxh3_64(&bytes) as u32;
    key
}

/// The straw of one OSD in one draw: uniform over `u32` as the draw varies.
#[inline(always)]
#[must_use]
pub fn straw(draw_seed: u32, osd_key: u32) -> u32 {
    fmix32(draw_seed ^ osd_key)
}

/// MurmurHash3's 32-bit finalizer: a bijection with full avalanche.
#[inline(always)]
#[must_use]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frozen vectors: if one of these changes, every cluster reshuffles.
    #[test]
    fn golden_vectors() {
        assert_eq!(object_hash(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(object_hash(b"hello"), 0x9555_e855_5c62_dcfd);
        let pg = object_pg(PoolId(1), 100, b"hello");
        assert_eq!(pg, PgId::new(PoolId(1), 0x3d));
        assert_eq!(
            placement_seed(PgId::new(PoolId(1), 7), 64),
            0x81a8_a993_914e_196a
        );
        assert_eq!(draw_seed(0x0123_4567_89ab_cdef, 2), 0x7e26_e475);
        assert_eq!(osd_key(OsdId(42)), 0xeb9e_6178);
        assert_eq!(fmix32(1), 0x514e_28b7);
        assert_eq!(straw(0xdead_beef, 0x1234_5678), 0xedb2_2d38);
    }

    #[test]
    fn a_split_moves_exactly_the_objects_its_rule_selects() {
        let mask = |bits: u8| {
            if bits >= 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            }
        };
        for to in 1..70u32 {
            for from in 1..=to {
                let mut seen = vec![0u32; to as usize];
                for parent in 0..from {
                    for child in split_children(parent, from, to) {
                        seen[child as usize] += 1;
                    }
                }
                for (child, n) in seen.iter().enumerate() {
                    let expect = u32::from(child as u32 >= from);
                    assert_eq!(*n, expect, "{from}->{to}: child {child}");
                }
            }
            for h in (0..4096u32).chain([u32::MAX, u32::MAX - 7, 1 << 31]) {
                let pg = stable_mod(h, to);
                for from in 1..=to {
                    assert_eq!(
                        stable_mod(pg, from),
                        stable_mod(h, from),
                        "h {h} {from}->{to}"
                    );
                }
                for child in 0..to {
                    let (bits, value) = split_rule(child, to);
                    assert_eq!(
                        h & mask(bits) == value,
                        pg == child,
                        "h {h} child {child}/{to}"
                    );
                }
            }
        }
    }

    #[test]
    fn stable_mod_matches_ceph() {
        // Worked examples of ceph_stable_mod(x, b, bmask).
        assert_eq!(stable_mod(5, 8), 5);
        assert_eq!(stable_mod(13, 8), 5);
        assert_eq!(stable_mod(13, 12), 5); // 13 & 15 = 13 >= 12, so 13 & 7
        assert_eq!(stable_mod(11, 12), 11);
        assert_eq!(stable_mod(u32::MAX, 1), 0);
        assert_eq!(stable_mod(u32::MAX, u32::MAX), u32::MAX >> 1);
        for b in 1..200 {
            for x in 0..1000 {
                assert!(stable_mod(x, b) < b);
            }
        }
    }
}

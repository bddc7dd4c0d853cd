//! Identifiers, epochs and the versioned binary envelope shared by every Cairn
//! crate.
//!
//! This crate holds only data that several crates must agree on byte for byte:
//! OSD, pool and placement-group ids, map epochs, and [`envelope`], the framing
//! (magic, format version, length, crc32c) around every record Cairn writes to
//! disk or sends as a standalone blob. It does no I/O and keeps no state.
//!
//! The one design choice to know: ids are plain fixed-width integers with
//! explicit little-endian encodings, never `usize`, so a record written on one
//! machine decodes identically on every other.

pub mod checked;
pub mod crc;
pub mod envelope;
pub mod options;

/// The 64-bit hash of an object name: XXH3-64 with seed 0. Frozen: placement
/// (object → PG) and the store's object order both derive from it.
#[must_use]
pub fn object_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name)
}

/// The low 32 bits of [`object_hash`]: what PG seeds and collection splits
/// use.
#[must_use]
pub fn object_hash32(name: &[u8]) -> u32 {
    #[allow(clippy::cast_possible_truncation)]
    let low = object_hash(name) as u32;
    low
}

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A cluster-map epoch. Every change to the map makes a new, larger epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one.
    #[must_use]
    pub fn next(self) -> Epoch {
        Epoch(self.0.checked_add(1).expect("epoch counter overflow"))
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// The id of one OSD (one daemon, one disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OsdId(pub u32);

impl fmt::Display for OsdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "osd.{}", self.0)
    }
}

impl FromStr for OsdId {
    type Err = ParseIdError;

    /// Accepts `osd.7` or `7`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let digits = text.strip_prefix("osd.").unwrap_or(text);
        digits
            .parse::<u32>()
            .map(OsdId)
            .map_err(|_| ParseIdError::Osd(text.to_owned()))
    }
}

/// The id of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PoolId(pub u32);

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A placement group: `seed` in `0..pg_num` of pool `pool`.
///
/// Written `POOL.SEEDHEX` (Ceph's notation, e.g. `3.1f`). In human-readable
/// formats (TOML, JSON) it serializes as that string so it can be a map key;
/// in binary formats as two integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgId {
    pub pool: PoolId,
    pub seed: u32,
}

impl PgId {
    #[must_use]
    pub fn new(pool: PoolId, seed: u32) -> PgId {
        PgId { pool, seed }
    }
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool.0, self.seed)
    }
}

impl FromStr for PgId {
    type Err = ParseIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || ParseIdError::Pg(text.to_owned());
        let (pool, seed) = text.split_once('.').ok_or_else(bad)?;
        let pool = pool.parse::<u32>().map_err(|_| bad())?;
        let seed = u32::from_str_radix(seed, 16).map_err(|_| bad())?;
        Ok(PgId::new(PoolId(pool), seed))
    }
}

#[derive(Serialize, Deserialize)]
struct PgIdBinary {
    pool: PoolId,
    seed: u32,
}

impl Serialize for PgId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            PgIdBinary {
                pool: self.pool,
                seed: self.seed,
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for PgId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            let binary = PgIdBinary::deserialize(deserializer)?;
            Ok(PgId::new(binary.pool, binary.seed))
        }
    }
}

/// A string that should have been an id was not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseIdError {
    #[error("'{0}' is not an OSD id (expected `osd.N` or `N`)")]
    Osd(String),
    #[error("'{0}' is not a placement group id (expected `POOL.SEEDHEX`, e.g. `1.2f`)")]
    Pg(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_id_text_round_trips() {
        let pg = PgId::new(PoolId(3), 0x1f);
        assert_eq!(pg.to_string(), "3.1f");
        assert_eq!("3.1f".parse::<PgId>(), Ok(pg));
        assert!("3".parse::<PgId>().is_err());
        assert!("x.1".parse::<PgId>().is_err());
        assert!("1.zz".parse::<PgId>().is_err());
    }

    #[test]
    fn osd_id_parses_both_spellings() {
        assert_eq!("osd.12".parse::<OsdId>(), Ok(OsdId(12)));
        assert_eq!("12".parse::<OsdId>(), Ok(OsdId(12)));
        assert!("osd.".parse::<OsdId>().is_err());
        assert!("-1".parse::<OsdId>().is_err());
    }

    #[test]
    fn pg_id_is_two_integers_in_postcard() {
        let pg = PgId::new(PoolId(1), 0x2a);
        let bytes = postcard::to_allocvec(&pg).expect("encode");
        assert_eq!(bytes, vec![1, 0x2a]);
        let back: PgId = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, pg);
    }
}

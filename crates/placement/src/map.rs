//! The cluster map: OSDs, pools and per-PG overrides at one epoch, with its
//! validation and its two encodings (binary envelope, human TOML/JSON).

use crate::limits;
use cairn_types::envelope::{self, EnvelopeError};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// Envelope kind of an encoded cluster map.
pub const MAP_MAGIC: [u8; 4] = *b"CMAP";
/// Current binary format version of the cluster map.
pub const MAP_FORMAT_VERSION: u16 = 2;

/// An OSD weight in 16.16 fixed point, as Ceph's CRUSH weights are: 1.0 is
/// conventionally 1 TiB of capacity. Fixed point keeps placement exact and
/// identical on every machine; the human forms show it as a decimal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(pub u32);

impl Weight {
    pub const ZERO: Weight = Weight(0);
    pub const ONE: Weight = Weight(0x1_0000);

    /// Converts a decimal weight, rounding to the nearest 1/65536.
    ///
    /// # Errors
    /// [`MapError::Weight`] for NaN, negative or too-large values.
    pub fn from_f64(value: f64) -> Result<Weight, MapError> {
        if !(0.0..=limits::WEIGHT_MAX).contains(&value) {
            return Err(MapError::Weight(value.to_string()));
        }
        // In range and finite, so the cast cannot saturate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Weight((value * 65536.0).round() as u32))
    }

    #[must_use]
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 65536.0
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.4}", self.as_f64())
    }
}

impl Serialize for Weight {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_f64(self.as_f64())
        } else {
            serializer.serialize_u32(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let value = f64::deserialize(deserializer)?;
            Weight::from_f64(value).map_err(serde::de::Error::custom)
        } else {
            u32::deserialize(deserializer).map(Weight)
        }
    }
}

/// One OSD as the map knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdInfo {
    pub id: OsdId,
    /// Host the OSD's disk is in; a failure domain.
    pub host: String,
    /// Rack the host is in; a failure domain. Every OSD of a host names the
    /// same rack.
    #[serde(default = "default_rack")]
    pub rack: String,
    /// Share of data this OSD should hold, relative to the others.
    #[serde(default = "default_weight")]
    pub weight: Weight,
    /// `hdd`, `ssd`, `nvme` or any operator-chosen label; pools may require one.
    #[serde(default = "default_device_class")]
    pub device_class: String,
    /// Running and reachable. A `down` OSD keeps its place in the mapping but
    /// leaves the up set.
    #[serde(default = "default_true")]
    pub up: bool,
    /// Holds data. Marking an OSD `out` moves its data elsewhere.
    #[serde(default = "default_true", rename = "in")]
    pub is_in: bool,
}

fn default_rack() -> String {
    "default".to_owned()
}
fn default_weight() -> Weight {
    Weight::ONE
}
fn default_device_class() -> String {
    "hdd".to_owned()
}
fn default_true() -> bool {
    true
}

/// How a pool protects its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Redundancy {
    /// `size` full copies; writes need `min_size` of them up.
    Replicated { size: u32, min_size: u32 },
    /// Reed–Solomon: `k` data shards plus `m` parity shards; objects are
    /// cut into stripes of `k` units of `stripe_unit` bytes (a power of
    /// two, 4 KiB to 1 MiB); writes need `min_size` shards up (`k` to
    /// `k + m`; 0 in the human form means the default, `k + 1`).
    Erasure {
        k: u32,
        m: u32,
        #[serde(default)]
        min_size: u32,
        #[serde(default = "default_stripe_unit")]
        stripe_unit: u32,
    },
}

/// The stripe unit of an erasure-coded pool that names none: a 4 KiB read
/// touches one shard, a 4 MiB object of a 4+2 pool is 64 full stripes.
pub const DEFAULT_STRIPE_UNIT_BYTES: u32 = 16 << 10;

fn default_stripe_unit() -> u32 {
    DEFAULT_STRIPE_UNIT_BYTES
}

impl Redundancy {
    /// OSDs one PG of this pool spans.
    #[must_use]
    pub fn shard_count(self) -> u32 {
        match self {
            Redundancy::Replicated { size, .. } => size,
            Redundancy::Erasure { k, m, .. } => k + m,
        }
    }

    /// Fewest up shards with which the PG accepts writes (erasure: `k + 1`
    /// unless the pool says otherwise, so one more failure still loses
    /// nothing acknowledged).
    #[must_use]
    pub fn min_size(self) -> u32 {
        match self {
            Redundancy::Replicated { min_size, .. } => min_size,
            Redundancy::Erasure {
                k, m, min_size: 0, ..
            } => (k + 1).min(k + m),
            Redundancy::Erasure { min_size, .. } => min_size,
        }
    }

    /// An erasure-coded pool: `k` data shards and `m` parity shards, the
    /// default `min_size` and stripe unit.
    #[must_use]
    pub fn erasure(k: u32, m: u32) -> Redundancy {
        Redundancy::Erasure {
            k,
            m,
            min_size: (k + 1).min(k.saturating_add(m)),
            stripe_unit: DEFAULT_STRIPE_UNIT_BYTES,
        }
    }

    /// The share of raw capacity that holds object data, as `(numerator,
    /// denominator)`: `1 / size` for replication, `k / (k + m)` for
    /// erasure coding (the pool's space efficiency).
    #[must_use]
    pub fn usable_fraction(self) -> (u64, u64) {
        match self {
            Redundancy::Replicated { size, .. } => (1, u64::from(size.max(1))),
            Redundancy::Erasure { k, m, .. } => (u64::from(k), u64::from(k) + u64::from(m)),
        }
    }

    /// Erasure-coded pools keep shard positions (a down OSD leaves a hole);
    /// replicated pools keep only an order (a down OSD is removed).
    #[must_use]
    pub fn is_positional(self) -> bool {
        matches!(self, Redundancy::Erasure { .. })
    }
}

impl fmt::Display for Redundancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Redundancy::Replicated { size, min_size } => {
                write!(f, "replicated size {size} min_size {min_size}")
            }
            Redundancy::Erasure {
                k, m, stripe_unit, ..
            } => write!(
                f,
                "erasure {k}+{m} min_size {} stripe_unit {}K",
                self.min_size(),
                stripe_unit >> 10
            ),
        }
    }
}

/// The level of the hierarchy whose members must all differ within a PG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureDomain {
    Osd,
    Host,
    Rack,
}

impl FailureDomain {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FailureDomain::Osd => "osd",
            FailureDomain::Host => "host",
            FailureDomain::Rack => "rack",
        }
    }
}

impl fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FailureDomain {
    type Err = MapError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "osd" => Ok(FailureDomain::Osd),
            "host" => Ok(FailureDomain::Host),
            "rack" => Ok(FailureDomain::Rack),
            other => Err(MapError::FailureDomain(other.to_owned())),
        }
    }
}

/// A pool: a namespace of objects with one redundancy rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub id: PoolId,
    pub name: String,
    /// Placement groups the pool's objects hash into. Only grows.
    pub pg_num: u32,
    /// PGs that place independently. Below `pg_num`, split children stay on
    /// their parent's OSDs; raising it to `pg_num` moves them (Ceph's
    /// `pgp_num`). Defaults to `pg_num`.
    #[serde(default)]
    pub pgp_num: u32,
    pub redundancy: Redundancy,
    #[serde(default = "default_failure_domain")]
    pub failure_domain: FailureDomain,
    /// Only OSDs of this device class hold the pool's data.
    #[serde(default)]
    pub device_class: Option<String>,
}

fn default_failure_domain() -> FailureDomain {
    FailureDomain::Host
}

impl Pool {
    /// The PG ids of this pool, in order.
    pub fn pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        (0..self.pg_num).map(|seed| PgId::new(self.id, seed))
    }
}

/// The authoritative description of the cluster at one epoch.
///
/// A hole in an erasure-coded PG's `pg_temp`: no OSD acts at that position
/// (Ceph's `CRUSH_ITEM_NONE`), while the up OSD there is backfilled.
pub const PG_TEMP_HOLE: OsdId = OsdId(u32::MAX);

/// OSDs and pools are kept sorted by id. `pg_temp` (temporary acting sets
/// published while a PG backfills) and `pg_upmap_items` (the balancer's
/// explicit remaps) are overlays on top of the computed placement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterMap {
    #[serde(default)]
    pub epoch: Epoch,
    #[serde(default)]
    pub osds: Vec<OsdInfo>,
    #[serde(default)]
    pub pools: Vec<Pool>,
    /// Temporary acting set per PG, overriding the up set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pg_temp: BTreeMap<PgId, Vec<OsdId>>,
    /// Balancer remaps per PG: each `(from, to)` replaces `from` with `to`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pg_upmap_items: BTreeMap<PgId, Vec<(OsdId, OsdId)>>,
}

/// Why a map, a pool or a name is not acceptable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapError {
    #[error("weight {0} is out of range (0 to {max})", max = limits::WEIGHT_MAX)]
    Weight(String),
    #[error("'{0}' is not a failure domain (expected osd, host or rack)")]
    FailureDomain(String),
    #[error("invalid {what} name {name:?}: {why}")]
    Name {
        what: &'static str,
        name: String,
        why: &'static str,
    },
    #[error("{0} appears more than once")]
    DuplicateOsd(OsdId),
    #[error("host {host} is in rack {first} and in rack {second}; a host is in one rack")]
    HostInTwoRacks {
        host: String,
        first: String,
        second: String,
    },
    #[error("pool id {0} appears more than once")]
    DuplicatePoolId(PoolId),
    #[error("pool name {0:?} appears more than once")]
    DuplicatePoolName(String),
    #[error("pool {pool:?}: {why}")]
    Pool { pool: String, why: String },
    #[error("{what} for PG {pg}: {why}")]
    Override {
        what: &'static str,
        pg: PgId,
        why: String,
    },
    #[error("map has {0} OSDs, more than the limit of {max}", max = limits::OSD_COUNT_MAX)]
    TooManyOsds(usize),
    #[error("map has {0} pools, more than the limit of {max}", max = limits::POOL_COUNT_MAX)]
    TooManyPools(usize),
    #[error("cannot read map: {0}")]
    Envelope(#[from] EnvelopeError),
    #[error("cannot parse map: {0}")]
    Text(String),
}

/// Checks a pool, host, rack or device-class name: 1 to 64 bytes of ASCII
/// letters, digits, `.`, `_` and `-`, not starting with `.` or `-`.
///
/// # Errors
/// [`MapError::Name`] saying which rule the name breaks.
pub fn validate_name(what: &'static str, name: &str) -> Result<(), MapError> {
    let fail = |why| {
        Err(MapError::Name {
            what,
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > limits::NAME_SIZE_BYTES_MAX {
        return fail("it is longer than 64 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return fail("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    if name.starts_with(['.', '-']) {
        return fail("it may not start with '.' or '-'");
    }
    Ok(())
}

impl Pool {
    /// Checks the pool's own fields (not whether the cluster can place it;
    /// see [`crate::Placement::check_pool`]).
    ///
    /// # Errors
    /// [`MapError::Name`] or [`MapError::Pool`] naming the bad field.
    pub fn validate(&self) -> Result<(), MapError> {
        validate_name("pool", &self.name)?;
        let fail = |why: String| {
            Err(MapError::Pool {
                pool: self.name.clone(),
                why,
            })
        };
        if self.pg_num == 0 || self.pg_num > limits::PG_NUM_MAX {
            return fail(format!(
                "pg_num {} must be between 1 and {}",
                self.pg_num,
                limits::PG_NUM_MAX
            ));
        }
        if self.pgp_num == 0 || self.pgp_num > self.pg_num {
            return fail(format!(
                "pgp_num {} must be between 1 and pg_num {}",
                self.pgp_num, self.pg_num
            ));
        }
        match self.redundancy {
            Redundancy::Replicated { size, min_size } => {
                if size == 0 || size > limits::SHARD_COUNT_MAX {
                    return fail(format!(
                        "size {size} must be between 1 and {}",
                        limits::SHARD_COUNT_MAX
                    ));
                }
                if min_size == 0 || min_size > size {
                    return fail(format!(
                        "min_size {min_size} must be between 1 and size {size}"
                    ));
                }
            }
            Redundancy::Erasure {
                k,
                m,
                min_size,
                stripe_unit,
            } => {
                if k == 0 || m == 0 || k.saturating_add(m) > limits::SHARD_COUNT_MAX {
                    return fail(format!(
                        "erasure k={k} m={m}: need k >= 1, m >= 1 and k + m <= {}",
                        limits::SHARD_COUNT_MAX
                    ));
                }
                if min_size != 0 && (min_size < k || min_size > k + m) {
                    return fail(format!(
                        "erasure {k}+{m}: min_size {min_size} must be between k ({k}) and k + m ({})",
                        k + m
                    ));
                }
                if let Err(e) = cairn_ec::StripeLayout::new(k, m, u64::from(stripe_unit)) {
                    return fail(format!("erasure {k}+{m}: {e}"));
                }
            }
        }
        if let Some(class) = &self.device_class {
            validate_name("device class", class)?;
        }
        Ok(())
    }
}

impl ClusterMap {
    /// The OSD with this id.
    #[must_use]
    pub fn osd(&self, id: OsdId) -> Option<&OsdInfo> {
        self.osds
            .binary_search_by_key(&id, |o| o.id)
            .ok()
            .map(|i| &self.osds[i])
    }

    /// The OSD with this id, mutably.
    pub fn osd_mut(&mut self, id: OsdId) -> Option<&mut OsdInfo> {
        self.osds
            .binary_search_by_key(&id, |o| o.id)
            .ok()
            .map(|i| &mut self.osds[i])
    }

    /// The pool with this id.
    #[must_use]
    pub fn pool(&self, id: PoolId) -> Option<&Pool> {
        self.pools
            .binary_search_by_key(&id, |p| p.id)
            .ok()
            .map(|i| &self.pools[i])
    }

    /// The pool with this name.
    #[must_use]
    pub fn pool_by_name(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// Adds or replaces an OSD, keeping the list sorted.
    pub fn upsert_osd(&mut self, osd: OsdInfo) {
        match self.osds.binary_search_by_key(&osd.id, |o| o.id) {
            Ok(i) => self.osds[i] = osd,
            Err(i) => self.osds.insert(i, osd),
        }
    }

    /// Removes an OSD and every override that names it.
    pub fn remove_osd(&mut self, id: OsdId) -> Option<OsdInfo> {
        let i = self.osds.binary_search_by_key(&id, |o| o.id).ok()?;
        self.pg_temp.retain(|_, osds| !osds.contains(&id));
        for items in self.pg_upmap_items.values_mut() {
            items.retain(|&(from, to)| from != id && to != id);
        }
        self.pg_upmap_items.retain(|_, items| !items.is_empty());
        Some(self.osds.remove(i))
    }

    /// Adds or replaces a pool, keeping the list sorted.
    pub fn upsert_pool(&mut self, pool: Pool) {
        match self.pools.binary_search_by_key(&pool.id, |p| p.id) {
            Ok(i) => self.pools[i] = pool,
            Err(i) => self.pools.insert(i, pool),
        }
    }

    /// The smallest pool id not in use.
    #[must_use]
    pub fn next_pool_id(&self) -> PoolId {
        PoolId(self.pools.last().map_or(1, |p| p.id.0 + 1))
    }

    /// Fills in defaults a human form may leave out (`pgp_num = 0` means
    /// "same as `pg_num`") and sorts OSDs and pools by id.
    pub fn normalize(&mut self) {
        for pool in &mut self.pools {
            if pool.pgp_num == 0 {
                pool.pgp_num = pool.pg_num;
            }
            if let Redundancy::Erasure { k, m, min_size, .. } = &mut pool.redundancy
                && *min_size == 0
            {
                *min_size = (*k + 1).min(k.saturating_add(*m));
            }
        }
        self.osds.sort_by_key(|o| o.id);
        self.pools.sort_by_key(|p| p.id);
    }

    /// Checks every structural rule of the map. A map that passes can be
    /// handed to [`crate::Placement`], which never panics on it.
    ///
    /// # Errors
    /// The first [`MapError`] found.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.osds.len() > limits::OSD_COUNT_MAX {
            return Err(MapError::TooManyOsds(self.osds.len()));
        }
        if self.pools.len() > limits::POOL_COUNT_MAX {
            return Err(MapError::TooManyPools(self.pools.len()));
        }
        self.validate_osds()?;
        self.validate_pools()?;
        self.validate_overrides()
    }

    fn validate_osds(&self) -> Result<(), MapError> {
        let mut rack_of_host: HashMap<&str, &str> = HashMap::new();
        for (i, osd) in self.osds.iter().enumerate() {
            if i > 0 && self.osds[i - 1].id >= osd.id {
                return Err(MapError::DuplicateOsd(osd.id));
            }
            validate_name("host", &osd.host)?;
            validate_name("rack", &osd.rack)?;
            validate_name("device class", &osd.device_class)?;
            let rack = *rack_of_host.entry(&osd.host).or_insert(&osd.rack);
            if rack != osd.rack {
                return Err(MapError::HostInTwoRacks {
                    host: osd.host.clone(),
                    first: rack.to_owned(),
                    second: osd.rack.clone(),
                });
            }
        }
        Ok(())
    }

    fn validate_pools(&self) -> Result<(), MapError> {
        let mut names = BTreeSet::new();
        for (i, pool) in self.pools.iter().enumerate() {
            if i > 0 && self.pools[i - 1].id >= pool.id {
                return Err(MapError::DuplicatePoolId(pool.id));
            }
            pool.validate()?;
            if !names.insert(pool.name.as_str()) {
                return Err(MapError::DuplicatePoolName(pool.name.clone()));
            }
        }
        Ok(())
    }

    fn validate_overrides(&self) -> Result<(), MapError> {
        for (pg, osds) in &self.pg_temp {
            let fail = |why: &str| {
                Err(MapError::Override {
                    what: "pg_temp",
                    pg: *pg,
                    why: why.into(),
                })
            };
            let holes = osds.iter().filter(|o| **o == PG_TEMP_HOLE).count();
            let positional = self
                .pool(pg.pool)
                .is_some_and(|p| p.redundancy.is_positional());
            if holes > 0 && !positional {
                return fail("only an erasure-coded PG's acting set has holes");
            }
            let osds_named = osds.iter().copied().filter(|o| *o != PG_TEMP_HOLE);
            self.validate_override_target("pg_temp", *pg, osds_named)?;
            if osds.len() == holes {
                return fail("the acting set is empty");
            }
        }
        for (pg, items) in &self.pg_upmap_items {
            let all = items.iter().flat_map(|&(from, to)| [from, to]);
            self.validate_override_target("pg_upmap_items", *pg, all)?;
            if items.len() > limits::UPMAP_ITEMS_PER_PG_MAX {
                return Err(MapError::Override {
                    what: "pg_upmap_items",
                    pg: *pg,
                    why: format!("more than {} items", limits::UPMAP_ITEMS_PER_PG_MAX),
                });
            }
        }
        Ok(())
    }

    fn validate_override_target(
        &self,
        what: &'static str,
        pg: PgId,
        osds: impl Iterator<Item = OsdId>,
    ) -> Result<(), MapError> {
        let fail = |why: String| Err(MapError::Override { what, pg, why });
        let Some(pool) = self.pool(pg.pool) else {
            return fail(format!("pool {} does not exist", pg.pool));
        };
        if pg.seed >= pool.pg_num {
            return fail(format!("pool {} has only {} PGs", pool.name, pool.pg_num));
        }
        let mut count = 0usize;
        for osd in osds {
            count += 1;
            if self.osd(osd).is_none() {
                return fail(format!("{osd} does not exist"));
            }
        }
        if count > 2 * limits::SHARD_COUNT_MAX as usize * limits::UPMAP_ITEMS_PER_PG_MAX {
            return fail("too many OSDs".into());
        }
        Ok(())
    }

    /// The binary form: a `CMAP` envelope, format version 2, or version 1
    /// when every pool has a v1 form (no erasure-coded pool with its own
    /// `min_size` or stripe unit), so such a cluster's maps stay readable
    /// by daemons that know only version 1.
    ///
    /// # Errors
    /// [`MapError::Envelope`] if the map is too large to encode.
    pub fn encode(&self) -> Result<Vec<u8>, MapError> {
        Ok(match v1::MapBin::of(self) {
            Some(old) => envelope::encode(MAP_MAGIC, 1, &old)?,
            None => envelope::encode(
                MAP_MAGIC,
                MAP_FORMAT_VERSION,
                &v1::MapBin::<v1::PoolV2>::from(self),
            )?,
        })
    }

    /// Reads the binary form (format version 1 or 2) and validates the map.
    ///
    /// # Errors
    /// [`MapError::Envelope`] for damaged bytes, or any validation error.
    pub fn decode(bytes: &[u8]) -> Result<ClusterMap, MapError> {
        let (header, body) = envelope::check(bytes, MAP_MAGIC, &[1, MAP_FORMAT_VERSION])?;
        let map = if header.version == 1 {
            ClusterMap::from(envelope::decode_body::<v1::MapBin<v1::PoolV1>>(body)?)
        } else {
            ClusterMap::from(envelope::decode_body::<v1::MapBin<v1::PoolV2>>(body)?)
        };
        map.validate()?;
        Ok(map)
    }

    /// Reads the human form: TOML, or JSON if the text starts with `{`.
    /// Fills defaults, sorts and validates.
    ///
    /// # Errors
    /// [`MapError::Text`] with the parser's message, or a validation error.
    pub fn from_text(text: &str) -> Result<ClusterMap, MapError> {
        let mut map: ClusterMap = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| MapError::Text(e.to_string()))?
        } else {
            toml::from_str(text).map_err(|e| MapError::Text(e.to_string()))?
        };
        map.normalize();
        map.validate()?;
        Ok(map)
    }

    /// The human form as TOML.
    ///
    /// # Errors
    /// [`MapError::Text`] if serialization fails.
    pub fn to_toml(&self) -> Result<String, MapError> {
        toml::to_string(self).map_err(|e| MapError::Text(e.to_string()))
    }
}

/// Binary formats of the cluster map and of its OSD and pool records,
/// field by field. Kept apart from the in-memory types so the serde
/// attributes of the human form (defaults, an internally tagged enum that
/// postcard cannot read, skipped fields) can never change the bytes;
/// golden tests freeze them. Other binary records that carry OSDs or pools
/// (the monitor's incrementals) use these same types. Version 2 (written
/// now) differs from version 1 (still read) only in the redundancy rule:
/// an erasure-coded pool carries its `min_size` and stripe unit. See
/// `docs/placement.md`.
pub mod v1 {
    use super::{
        ClusterMap, DEFAULT_STRIPE_UNIT_BYTES, FailureDomain, OsdInfo, Pool, Redundancy, Weight,
    };
    use cairn_types::{Epoch, OsdId, PgId, PoolId};
    use serde::{Deserialize, Serialize};

    /// The map, binary, with pools of form `P`.
    #[derive(Serialize, Deserialize)]
    pub(super) struct MapBin<P> {
        epoch: u64,
        osds: Vec<OsdV1>,
        pools: Vec<P>,
        pg_temp: Vec<(PgId, Vec<u32>)>,
        pg_upmap_items: Vec<(PgId, Vec<(u32, u32)>)>,
    }

    /// One OSD, binary v1 (and v2).
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct OsdV1 {
        pub id: u32,
        pub host: String,
        pub rack: String,
        pub weight: u32,
        pub device_class: String,
        pub up: bool,
        pub is_in: bool,
    }

    /// One pool, binary, with a redundancy rule of form `R`.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct PoolBin<R> {
        pub id: u32,
        pub name: String,
        pub pg_num: u32,
        pub pgp_num: u32,
        pub redundancy: R,
        pub failure_domain: FailureDomainV1,
        pub device_class: Option<String>,
    }

    /// One pool, binary v1 (read only).
    pub type PoolV1 = PoolBin<RedundancyV1>;
    /// One pool, binary v2.
    pub type PoolV2 = PoolBin<RedundancyV2>;

    /// A redundancy rule, binary v1 (externally tagged): an erasure-coded
    /// pool reads back with the default `min_size` and stripe unit.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub enum RedundancyV1 {
        Replicated { size: u32, min_size: u32 },
        Erasure { k: u32, m: u32 },
    }

    /// A redundancy rule, binary v2 (externally tagged).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub enum RedundancyV2 {
        Replicated {
            size: u32,
            min_size: u32,
        },
        Erasure {
            k: u32,
            m: u32,
            min_size: u32,
            stripe_unit: u32,
        },
    }

    /// A failure domain, binary v1 (and v2).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub enum FailureDomainV1 {
        Osd,
        Host,
        Rack,
    }

    impl From<RedundancyV1> for Redundancy {
        fn from(r: RedundancyV1) -> Redundancy {
            match r {
                RedundancyV1::Replicated { size, min_size } => {
                    Redundancy::Replicated { size, min_size }
                }
                RedundancyV1::Erasure { k, m } => Redundancy::erasure(k, m),
            }
        }
    }

    impl From<RedundancyV2> for Redundancy {
        fn from(r: RedundancyV2) -> Redundancy {
            match r {
                RedundancyV2::Replicated { size, min_size } => {
                    Redundancy::Replicated { size, min_size }
                }
                RedundancyV2::Erasure {
                    k,
                    m,
                    min_size,
                    stripe_unit,
                } => Redundancy::Erasure {
                    k,
                    m,
                    min_size,
                    stripe_unit,
                },
            }
        }
    }

    impl From<Redundancy> for RedundancyV2 {
        fn from(r: Redundancy) -> RedundancyV2 {
            match r {
                Redundancy::Replicated { size, min_size } => {
                    RedundancyV2::Replicated { size, min_size }
                }
                Redundancy::Erasure {
                    k, m, stripe_unit, ..
                } => RedundancyV2::Erasure {
                    k,
                    m,
                    min_size: r.min_size(),
                    stripe_unit,
                },
            }
        }
    }

    impl From<&OsdInfo> for OsdV1 {
        fn from(o: &OsdInfo) -> OsdV1 {
            OsdV1 {
                id: o.id.0,
                host: o.host.clone(),
                rack: o.rack.clone(),
                weight: o.weight.0,
                device_class: o.device_class.clone(),
                up: o.up,
                is_in: o.is_in,
            }
        }
    }

    impl From<OsdV1> for OsdInfo {
        fn from(o: OsdV1) -> OsdInfo {
            OsdInfo {
                id: OsdId(o.id),
                host: o.host,
                rack: o.rack,
                weight: Weight(o.weight),
                device_class: o.device_class,
                up: o.up,
                is_in: o.is_in,
            }
        }
    }

    impl<R: Into<Redundancy>> From<PoolBin<R>> for Pool {
        fn from(p: PoolBin<R>) -> Pool {
            Pool {
                id: PoolId(p.id),
                name: p.name,
                pg_num: p.pg_num,
                pgp_num: p.pgp_num,
                redundancy: p.redundancy.into(),
                failure_domain: match p.failure_domain {
                    FailureDomainV1::Osd => FailureDomain::Osd,
                    FailureDomainV1::Host => FailureDomain::Host,
                    FailureDomainV1::Rack => FailureDomain::Rack,
                },
                device_class: p.device_class,
            }
        }
    }

    /// The v1 form of a rule, if it has one: replication, or erasure
    /// coding with the default `min_size` and stripe unit.
    #[must_use]
    pub fn redundancy_v1(r: Redundancy) -> Option<RedundancyV1> {
        match r {
            Redundancy::Replicated { size, min_size } => {
                Some(RedundancyV1::Replicated { size, min_size })
            }
            Redundancy::Erasure {
                k, m, stripe_unit, ..
            } => (r.min_size() == Redundancy::erasure(k, m).min_size()
                && stripe_unit == DEFAULT_STRIPE_UNIT_BYTES)
                .then_some(RedundancyV1::Erasure { k, m }),
        }
    }

    /// A pool in binary form with its rule as `redundancy`.
    fn pool_bin<R>(p: &Pool, redundancy: R) -> PoolBin<R> {
        PoolBin {
            id: p.id.0,
            name: p.name.clone(),
            pg_num: p.pg_num,
            pgp_num: p.pgp_num,
            redundancy,
            failure_domain: match p.failure_domain {
                FailureDomain::Osd => FailureDomainV1::Osd,
                FailureDomain::Host => FailureDomainV1::Host,
                FailureDomain::Rack => FailureDomainV1::Rack,
            },
            device_class: p.device_class.clone(),
        }
    }

    impl From<&Pool> for PoolV2 {
        fn from(p: &Pool) -> PoolV2 {
            pool_bin(p, p.redundancy.into())
        }
    }

    /// The v1 form of a pool, if its rule has one ([`redundancy_v1`]):
    /// such pools are written as version 1, so the bytes of a cluster
    /// without customised erasure-coded pools stay those older daemons
    /// read.
    #[must_use]
    pub fn pool_v1(p: &Pool) -> Option<PoolV1> {
        redundancy_v1(p.redundancy).map(|r| pool_bin(p, r))
    }

    impl MapBin<PoolV1> {
        /// The map as version 1, if every pool has a v1 form.
        pub(super) fn of(map: &ClusterMap) -> Option<MapBin<PoolV1>> {
            let pools = map.pools.iter().map(pool_v1).collect::<Option<Vec<_>>>()?;
            Some(map_bin(map, pools))
        }
    }

    impl From<&ClusterMap> for MapBin<PoolV2> {
        fn from(map: &ClusterMap) -> MapBin<PoolV2> {
            map_bin(map, map.pools.iter().map(PoolV2::from).collect())
        }
    }

    fn map_bin<P>(map: &ClusterMap, pools: Vec<P>) -> MapBin<P> {
        MapBin {
            epoch: map.epoch.0,
            osds: map.osds.iter().map(OsdV1::from).collect(),
            pools,
            pg_temp: map
                .pg_temp
                .iter()
                .map(|(pg, osds)| (*pg, osds.iter().map(|o| o.0).collect()))
                .collect(),
            pg_upmap_items: map
                .pg_upmap_items
                .iter()
                .map(|(pg, items)| (*pg, items.iter().map(|(f, t)| (f.0, t.0)).collect()))
                .collect(),
        }
    }

    impl<P: Into<Pool>> From<MapBin<P>> for ClusterMap {
        fn from(m: MapBin<P>) -> ClusterMap {
            ClusterMap {
                epoch: Epoch(m.epoch),
                osds: m.osds.into_iter().map(OsdInfo::from).collect(),
                pools: m.pools.into_iter().map(Into::into).collect(),
                pg_temp: m
                    .pg_temp
                    .into_iter()
                    .map(|(pg, osds)| (pg, osds.into_iter().map(OsdId).collect()))
                    .collect(),
                pg_upmap_items: m
                    .pg_upmap_items
                    .into_iter()
                    .map(|(pg, items)| {
                        (
                            pg,
                            items
                                .into_iter()
                                .map(|(f, t)| (OsdId(f), OsdId(t)))
                                .collect(),
                        )
                    })
                    .collect(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tiny() -> ClusterMap {
        let mut map = ClusterMap {
            epoch: Epoch(7),
            ..ClusterMap::default()
        };
        map.upsert_osd(OsdInfo {
            id: OsdId(0),
            host: "h0".into(),
            rack: "r0".into(),
            weight: Weight::ONE,
            device_class: "ssd".into(),
            up: true,
            is_in: true,
        });
        map.upsert_osd(OsdInfo {
            id: OsdId(1),
            host: "h1".into(),
            rack: "r0".into(),
            weight: Weight(0x2_8000),
            device_class: "hdd".into(),
            up: false,
            is_in: true,
        });
        map.upsert_pool(Pool {
            id: PoolId(1),
            name: "rbd".into(),
            pg_num: 8,
            pgp_num: 8,
            redundancy: Redundancy::erasure(1, 1),
            failure_domain: FailureDomain::Host,
            device_class: None,
        });
        map.pg_temp
            .insert(PgId::new(PoolId(1), 3), vec![OsdId(1), OsdId(0)]);
        map.pg_upmap_items
            .insert(PgId::new(PoolId(1), 5), vec![(OsdId(0), OsdId(1))]);
        map.validate().expect("valid");
        map
    }

    /// Format version 1, frozen: a map whose pools all have a v1 form is
    /// still written so (an erasure-coded pool with the default `min_size`
    /// and stripe unit reads back with them).
    #[test]
    fn golden_bytes_v1() {
        let bytes = tiny().encode().expect("encode");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "434d4150010000003b0000007bb9324a0702000268300272308080040373736401010102683102723080800a03686464000101010372626408080101010100010103020100010105010001"
        );
        assert_eq!(ClusterMap::decode(&bytes).expect("decode"), tiny());
    }

    /// Format version 2, frozen: a change here breaks every stored map.
    #[test]
    fn golden_bytes_v2() {
        let mut map = tiny();
        map.pools[0].redundancy = Redundancy::Erasure {
            k: 1,
            m: 1,
            min_size: 1,
            stripe_unit: 64 << 10,
        };
        let bytes = map.encode().expect("encode");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "434d4150020000003f0000000e7225110702000268300272308080040373736401010102683102723080800a0368646400010101037262640808010101018080040100010103020100010105010001"
        );
        assert_eq!(ClusterMap::decode(&bytes).expect("decode"), map);
    }

    #[test]
    fn text_forms_round_trip() {
        let map = tiny();
        let json = serde_json::to_string(&map).expect("json");
        assert!(
            json.contains("\"1.3\""),
            "PG ids are strings in JSON: {json}"
        );
        assert_eq!(ClusterMap::from_text(&json).expect("from json"), map);
        let mut no_temp = map.clone();
        no_temp.pg_temp.clear();
        let toml = no_temp.to_toml().expect("toml");
        assert_eq!(ClusterMap::from_text(&toml).expect("from toml"), no_temp);
    }

    /// The documented minimal TOML: defaults fill everything else.
    #[test]
    fn minimal_toml_gets_defaults() {
        let text = r#"
            [[osds]]
            id = 0
            host = "a"
            [[osds]]
            id = 1
            host = "b"
            weight = 2.5
            [[pools]]
            id = 1
            name = "data"
            pg_num = 32
            redundancy = { type = "replicated", size = 2, min_size = 1 }
        "#;
        let map = ClusterMap::from_text(text).expect("parse");
        assert_eq!(map.pools[0].pgp_num, 32);
        assert_eq!(map.pools[0].failure_domain, FailureDomain::Host);
        assert_eq!(map.osds[1].weight, Weight(0x2_8000));
        assert!(map.osds[0].up && map.osds[0].is_in);
        assert_eq!(map.osds[0].device_class, "hdd");
    }

    #[test]
    fn bad_maps_are_named_errors() {
        let cases = [
            ("[[osds]]\nid = 0\nhost = \"\"", "invalid host name"),
            ("[[osds]]\nid = 0\nhost = \"a\"\nweight = -1.0", "weight -1"),
            (
                "[[osds]]\nid = 0\nhost = \"a\"\n[[osds]]\nid = 0\nhost = \"b\"",
                "osd.0 appears more than once",
            ),
            (
                "[[osds]]\nid = 0\nhost = \"a\"\nrack = \"x\"\n[[osds]]\nid = 1\nhost = \"a\"\nrack = \"y\"",
                "in rack x and in rack y",
            ),
            (
                "[[pools]]\nid = 1\nname = \"p\"\npg_num = 0\nredundancy = { type = \"replicated\", size = 3, min_size = 2 }",
                "pg_num 0",
            ),
            (
                "[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nredundancy = { type = \"replicated\", size = 3, min_size = 4 }",
                "min_size 4",
            ),
            (
                "[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nredundancy = { type = \"erasure\", k = 0, m = 2 }",
                "k=0",
            ),
            (
                "[[pools]]\nid = 1\nname = \"bad name\"\npg_num = 8\nredundancy = { type = \"erasure\", k = 2, m = 1 }",
                "invalid pool name",
            ),
            ("osds = 3", "cannot parse map"),
            ("{ not json", "cannot parse map"),
        ];
        for (text, expected) in cases {
            let error = ClusterMap::from_text(text).expect_err(text).to_string();
            assert!(
                error.contains(expected),
                "{text:?}: {error:?} lacks {expected:?}"
            );
        }
    }

    proptest! {
        /// Damaged binary maps are errors, never panics.
        #[test]
        fn damaged_binary_maps_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let mut bytes = tiny().encode().expect("encode");
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let _ = ClusterMap::decode(&bytes);
        }

        /// Arbitrary text is an error or a valid map, never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,200}") {
            if let Ok(map) = ClusterMap::from_text(&text) {
                prop_assert!(map.validate().is_ok());
            }
        }
    }
}

//! [`Incremental`]: the change from epoch `e - 1` to epoch `e`, and
//! [`MonState`]: the map plus the monitor-only OSD endpoints it applies to.

use cairn_placement::map::v1::{OsdV1, PoolV1, PoolV2, pool_v1};
use cairn_placement::{ClusterMap, OsdInfo, Pool};
use cairn_types::envelope::{self, EnvelopeError};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Envelope kind of a stored incremental.
pub const INCREMENTAL_MAGIC: [u8; 4] = *b"CINC";
/// Current binary format version of an incremental.
pub const INCREMENTAL_FORMAT_VERSION: u16 = 2;

/// Where an OSD listens and how much it holds. Kept by the monitor beside
/// the cluster map (not inside it, whose binary format is frozen).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdEndpoint {
    /// `ip:port` the OSD serves on.
    pub addr: String,
    /// Capacity the OSD reported at boot.
    pub capacity_bytes: u64,
}

impl OsdEndpoint {
    /// An endpoint from its binary v1 record `(osd, addr, capacity_bytes)`.
    pub fn from_v1((id, addr, capacity_bytes): (u32, String, u64)) -> (OsdId, OsdEndpoint) {
        (
            OsdId(id),
            OsdEndpoint {
                addr,
                capacity_bytes,
            },
        )
    }
}

/// A PG's balancer remaps: each `(from, to)` replaces `from` with `to`.
pub type UpmapItems = Vec<(OsdId, OsdId)>;

/// Everything that changes from `epoch - 1` to `epoch`.
///
/// Serialized (postcard, in a `CINC` envelope on disk) through a version-1
/// mirror, so the human-form attributes of placement's types never reach
/// these bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "IncrementalV2", from = "IncrementalV2")]
pub struct Incremental {
    /// The epoch this incremental produces.
    pub epoch: Epoch,
    /// New or changed OSDs, whole.
    pub osd_upserts: Vec<OsdInfo>,
    pub osd_removals: Vec<OsdId>,
    pub endpoint_upserts: Vec<(OsdId, OsdEndpoint)>,
    /// New or changed pools, whole.
    pub pool_upserts: Vec<Pool>,
    /// Removed pools; their PG overrides go with them.
    pub pool_removals: Vec<PoolId>,
    /// `Some` sets a PG's temporary acting set, `None` clears it.
    pub pg_temp: Vec<(PgId, Option<Vec<OsdId>>)>,
    /// `Some` sets a PG's upmap items, `None` clears them.
    pub pg_upmap_items: Vec<(PgId, Option<UpmapItems>)>,
}

impl Incremental {
    /// An empty change to `epoch`.
    #[must_use]
    pub fn new(epoch: Epoch) -> Incremental {
        Incremental {
            epoch,
            ..Incremental::default()
        }
    }

    /// Whether it changes nothing but the epoch.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.osd_upserts.is_empty()
            && self.osd_removals.is_empty()
            && self.endpoint_upserts.is_empty()
            && self.pool_upserts.is_empty()
            && self.pool_removals.is_empty()
            && self.pg_temp.is_empty()
            && self.pg_upmap_items.is_empty()
    }

    /// The on-disk form: a `CINC` envelope, format version 2, or version 1
    /// when every pool it carries has a v1 form (as the map's).
    ///
    /// # Errors
    /// If the incremental is too large for an envelope.
    pub fn encode(&self) -> Result<Vec<u8>, EnvelopeError> {
        match self
            .pool_upserts
            .iter()
            .map(pool_v1)
            .collect::<Option<Vec<_>>>()
        {
            Some(pools) => {
                envelope::encode(INCREMENTAL_MAGIC, 1, &incremental_bin(self.clone(), pools))
            }
            None => envelope::encode(INCREMENTAL_MAGIC, INCREMENTAL_FORMAT_VERSION, self),
        }
    }

    /// Reads the on-disk form, format version 1 or 2.
    ///
    /// # Errors
    /// [`EnvelopeError`] for damaged bytes.
    pub fn decode(bytes: &[u8]) -> Result<Incremental, EnvelopeError> {
        let (header, body) =
            envelope::check(bytes, INCREMENTAL_MAGIC, &[1, INCREMENTAL_FORMAT_VERSION])?;
        if header.version == 1 {
            Ok(envelope::decode_body::<IncrementalV1>(body)?.into())
        } else {
            envelope::decode_body(body)
        }
    }
}

/// What the monitor serves: the cluster map and each OSD's endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MonState {
    pub map: ClusterMap,
    pub endpoints: BTreeMap<OsdId, OsdEndpoint>,
}

impl MonState {
    /// Applies `inc`, which must be the next epoch's.
    ///
    /// # Panics
    /// If `inc.epoch` is not `self.map.epoch + 1`: replaying out of order is
    /// a bug of the monitor, not bad input.
    pub fn apply(&mut self, inc: &Incremental) {
        assert_eq!(inc.epoch, self.map.epoch.next(), "incremental out of order");
        for osd in &inc.osd_upserts {
            self.map.upsert_osd(osd.clone());
        }
        for id in &inc.osd_removals {
            self.map.remove_osd(*id);
            self.endpoints.remove(id);
        }
        for (id, endpoint) in &inc.endpoint_upserts {
            self.endpoints.insert(*id, endpoint.clone());
        }
        for pool in &inc.pool_upserts {
            self.map.upsert_pool(pool.clone());
        }
        for id in &inc.pool_removals {
            self.map.pools.retain(|p| p.id != *id);
            self.map.pg_temp.retain(|pg, _| pg.pool != *id);
            self.map.pg_upmap_items.retain(|pg, _| pg.pool != *id);
        }
        for (pg, set) in &inc.pg_temp {
            match set {
                Some(osds) => self.map.pg_temp.insert(*pg, osds.clone()),
                None => self.map.pg_temp.remove(pg),
            };
        }
        for (pg, items) in &inc.pg_upmap_items {
            match items {
                Some(items) => self.map.pg_upmap_items.insert(*pg, items.clone()),
                None => self.map.pg_upmap_items.remove(pg),
            };
        }
        self.map.epoch = inc.epoch;
        assert_eq!(self.map.epoch, inc.epoch);
    }
}

type PgTempV1 = Vec<(PgId, Option<Vec<u32>>)>;
type UpmapV1 = Vec<(PgId, Option<Vec<(u32, u32)>>)>;

/// Binary formats of [`Incremental`], with pools of form `P`: version 1
/// (read only) and version 2 (an erasure-coded pool carries its `min_size`
/// and stripe unit).
#[derive(Clone, Serialize, Deserialize)]
struct IncrementalBin<P> {
    epoch: u64,
    osd_upserts: Vec<OsdV1>,
    osd_removals: Vec<u32>,
    endpoint_upserts: Vec<(u32, String, u64)>,
    pool_upserts: Vec<P>,
    pool_removals: Vec<u32>,
    pg_temp: PgTempV1,
    pg_upmap_items: UpmapV1,
}

type IncrementalV1 = IncrementalBin<PoolV1>;
type IncrementalV2 = IncrementalBin<PoolV2>;

impl From<Incremental> for IncrementalV2 {
    fn from(i: Incremental) -> IncrementalV2 {
        let pools = i.pool_upserts.iter().map(PoolV2::from).collect();
        incremental_bin(i, pools)
    }
}

/// `i` in binary form, with its pool upserts as `pools`.
fn incremental_bin<P>(i: Incremental, pools: Vec<P>) -> IncrementalBin<P> {
    IncrementalBin {
        epoch: i.epoch.0,
        osd_upserts: i.osd_upserts.iter().map(OsdV1::from).collect(),
        osd_removals: i.osd_removals.iter().map(|o| o.0).collect(),
        endpoint_upserts: i
            .endpoint_upserts
            .into_iter()
            .map(|(id, e)| (id.0, e.addr, e.capacity_bytes))
            .collect(),
        pool_upserts: pools,
        pool_removals: i.pool_removals.iter().map(|p| p.0).collect(),
        pg_temp: i
            .pg_temp
            .into_iter()
            .map(|(pg, set)| (pg, set.map(|s| s.iter().map(|o| o.0).collect())))
            .collect(),
        pg_upmap_items: i
            .pg_upmap_items
            .into_iter()
            .map(|(pg, items)| {
                (
                    pg,
                    items.map(|s| s.iter().map(|(f, t)| (f.0, t.0)).collect()),
                )
            })
            .collect(),
    }
}

impl<P: Into<Pool>> From<IncrementalBin<P>> for Incremental {
    fn from(i: IncrementalBin<P>) -> Incremental {
        Incremental {
            epoch: Epoch(i.epoch),
            osd_upserts: i.osd_upserts.into_iter().map(OsdInfo::from).collect(),
            osd_removals: i.osd_removals.into_iter().map(OsdId).collect(),
            endpoint_upserts: i
                .endpoint_upserts
                .into_iter()
                .map(OsdEndpoint::from_v1)
                .collect(),
            pool_upserts: i.pool_upserts.into_iter().map(Into::into).collect(),
            pool_removals: i.pool_removals.into_iter().map(PoolId).collect(),
            pg_temp: i
                .pg_temp
                .into_iter()
                .map(|(pg, set)| (pg, set.map(|s| s.into_iter().map(OsdId).collect())))
                .collect(),
            pg_upmap_items: i
                .pg_upmap_items
                .into_iter()
                .map(|(pg, items)| {
                    (
                        pg,
                        items.map(|s| s.into_iter().map(|(f, t)| (OsdId(f), OsdId(t))).collect()),
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_placement::{FailureDomain, Redundancy, Weight};

    fn sample() -> Incremental {
        Incremental {
            epoch: Epoch(2),
            osd_upserts: vec![OsdInfo {
                id: OsdId(0),
                host: "h0".into(),
                rack: "r0".into(),
                weight: Weight::ONE,
                device_class: "ssd".into(),
                up: true,
                is_in: true,
            }],
            osd_removals: vec![],
            endpoint_upserts: vec![(
                OsdId(0),
                OsdEndpoint {
                    addr: "127.0.0.1:7000".into(),
                    capacity_bytes: 1 << 30,
                },
            )],
            pool_upserts: vec![Pool {
                id: PoolId(1),
                name: "p".into(),
                pg_num: 4,
                pgp_num: 4,
                redundancy: Redundancy::erasure(2, 1),
                failure_domain: FailureDomain::Osd,
                device_class: None,
            }],
            pool_removals: vec![PoolId(3)],
            pg_temp: vec![(PgId::new(PoolId(1), 2), None)],
            pg_upmap_items: vec![],
        }
    }

    /// Format version 1, frozen: an incremental whose pools all have a v1
    /// form is still written so.
    #[test]
    fn golden_bytes_v1() {
        let bytes = sample().encode().expect("encode");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "43494e43010000003b000000c44c6a190201000268300272308080040373736401010001000e\
3132372e302e302e313a373030308080808004010101700404010201000001030101020000"
        );
        assert_eq!(Incremental::decode(&bytes).expect("decode"), sample());
    }

    /// Format version 2, frozen: a change here breaks every stored monitor.
    #[test]
    fn golden_bytes_v2() {
        let mut sample = sample();
        sample.pool_upserts[0].redundancy = Redundancy::Erasure {
            k: 2,
            m: 1,
            min_size: 3,
            stripe_unit: 64 << 10,
        };
        let bytes = sample.encode().expect("encode");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "43494e43020000003f00000072f5d2260201000268300272308080040373736401010001000e\
3132372e302e302e313a37303030808080800401010170040401020103808004000001030101020000"
        );
        assert_eq!(Incremental::decode(&bytes).expect("decode"), sample);
    }
}

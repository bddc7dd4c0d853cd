//! The failure-domain tree root → rack → host → OSD, derived from the map's
//! OSDs (each names its host and rack), with weights summed upwards. It is
//! a view for people and reports (`cairn osd tree`, per-domain statistics);
//! placement itself only needs each OSD's host and rack.

use crate::map::{ClusterMap, Weight};
use cairn_types::OsdId;
use serde::Serialize;

/// The whole tree, racks in name order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hierarchy {
    pub weight: Weight,
    pub racks: Vec<RackNode>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RackNode {
    pub name: String,
    pub weight: Weight,
    pub hosts: Vec<HostNode>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostNode {
    pub name: String,
    pub weight: Weight,
    pub osds: Vec<OsdId>,
}

impl Hierarchy {
    /// Builds the tree of `map`. Weights add as 16.16 fixed point and
    /// saturate rather than overflow.
    #[must_use]
    pub fn of(map: &ClusterMap) -> Hierarchy {
        let mut racks: Vec<RackNode> = Vec::new();
        for osd in &map.osds {
            let rack = match racks.binary_search_by(|r| r.name.as_str().cmp(&osd.rack)) {
                Ok(i) => &mut racks[i],
                Err(i) => {
                    racks.insert(
                        i,
                        RackNode {
                            name: osd.rack.clone(),
                            weight: Weight::ZERO,
                            hosts: Vec::new(),
                        },
                    );
                    &mut racks[i]
                }
            };
            let host = match rack
                .hosts
                .binary_search_by(|h| h.name.as_str().cmp(&osd.host))
            {
                Ok(i) => &mut rack.hosts[i],
                Err(i) => {
                    rack.hosts.insert(
                        i,
                        HostNode {
                            name: osd.host.clone(),
                            weight: Weight::ZERO,
                            osds: Vec::new(),
                        },
                    );
                    &mut rack.hosts[i]
                }
            };
            host.osds.push(osd.id);
            host.weight = Weight(host.weight.0.saturating_add(osd.weight.0));
            rack.weight = Weight(rack.weight.0.saturating_add(osd.weight.0));
        }
        let weight = Weight(racks.iter().fold(0u32, |w, r| w.saturating_add(r.weight.0)));
        Hierarchy { weight, racks }
    }

    /// Hosts in all racks.
    #[must_use]
    pub fn host_count(&self) -> usize {
        self.racks.iter().map(|r| r.hosts.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::SyntheticSpec;

    #[test]
    fn tree_follows_hosts_and_racks_and_sums_weights() {
        let map = SyntheticSpec {
            racks: 2,
            hosts: 4,
            osds_per_host: 3,
            weights: vec![1.0, 2.0],
            classes: vec!["hdd".into()],
        }
        .build()
        .expect("map");
        let tree = Hierarchy::of(&map);
        assert_eq!(tree.racks.len(), 2);
        assert_eq!(tree.host_count(), 4);
        let rack0 = &tree.racks[0];
        assert_eq!(rack0.name, "rack0");
        assert_eq!(
            rack0
                .hosts
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>(),
            ["host0", "host1"]
        );
        assert_eq!(rack0.hosts[0].osds, [OsdId(0), OsdId(1), OsdId(2)]);
        assert_eq!(rack0.hosts[1].weight, Weight::from_f64(6.0).expect("w"));
        assert_eq!(rack0.weight, Weight::from_f64(9.0).expect("w"));
        assert_eq!(tree.weight, Weight::from_f64(18.0).expect("w"));
    }
}

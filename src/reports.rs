//! What the OSDs' statistics reports (from the monitor) say, as more than
//! one command reads them: which reports are fresh, and each PG's current
//! report.

use cairn_placement::ClusterMap;
use cairn_proto::mon::{OsdStatsReport, PgStat};
use std::collections::BTreeMap;

/// A report older than this (three missed 1 s heartbeats) is from an OSD
/// that stopped; its space, rates and PGs are not counted (its PGs show as
/// `unknown` until the monitor marks it down and they move).
pub const STATS_STALE_MS: u64 = 3_000;

/// Each PG as its current primary reports it: of several reports (an old
/// primary's last one may linger), the one of the newest interval.
pub fn current_pgs(map: &ClusterMap, reports: &[OsdStatsReport]) -> Vec<PgStat> {
    let up: BTreeMap<_, _> = map.osds.iter().map(|o| (o.id, o.up)).collect();
    let mut pgs: BTreeMap<cairn_types::PgId, PgStat> = BTreeMap::new();
    for report in reports {
        if report.age_ms > STATS_STALE_MS || !up.get(&report.osd).copied().unwrap_or(false) {
            continue;
        }
        for pg in &report.stats.pgs {
            let newer = pgs
                .get(&pg.pg)
                .is_none_or(|old| old.interval_epoch < pg.interval_epoch);
            let exists = map
                .pools
                .iter()
                .any(|p| p.id == pg.pg.pool && pg.pg.seed < p.pg_num);
            if newer && exists {
                pgs.insert(pg.pg, pg.clone());
            }
        }
    }
    pgs.into_values().collect()
}

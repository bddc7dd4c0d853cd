//! Decisions the OSD's shells make around the PG cores, written once: the
//! daemon (`daemon.rs`, real store and network) and the simulator's OSD
//! shell (`cairn-sim`, `MemStore` and a simulated network) both call these,
//! so no rule exists twice. Each is a pure function of what the shell knows
//! (its map view, the PG it holds, its clock); the shell carries out the
//! answer with its own I/O.
//!
//! - [`admit_peer_msg`]: what to do with a PG message from a peer before
//!   (or instead of) feeding it to the PG's core;
//! - [`servable`]: whether a client request may be served by this OSD now;
//! - [`new_copy_lease_bound_ms`]: how long a PG copy loaded or created now
//!   must assume read-lease promises made before it may still run;
//! - [`admit_request`]: the checks on a request that need only the map
//!   (the read path's own decisions are the core's: `PgEvent::ClientRead`);
//! - [`due_scrubs`]: which PGs start a scheduled scrub now;
//! - [`splits_due`]: after a new map, which pools' copies are split;
//! - [`plan_pg_sync`]: after a new map, which PG cores learn of a new
//!   interval or of OSDs going up or down, and which copies are created or
//!   loaded.

use crate::limits::LEASE_MS;
use crate::map_view::MapView;
use crate::pg::{Interval, MapContext, Notify, Pg, PgMsg};
use bytes::Bytes;
use cairn_placement::Redundancy;
use cairn_proto::peer::LeaseReport;
use cairn_types::{Epoch, OsdId, PgId, PoolId};

/// What a shell does with a PG message from a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAction {
    /// Feed it to the PG's core.
    Feed,
    /// Drop it; why, for the log.
    Drop(&'static str),
    /// A pull: read `object` from the local store and push it to `to`
    /// (for its interval starting at `epoch`). The core is not involved.
    Push {
        object: Bytes,
        to: OsdId,
        epoch: Epoch,
    },
    /// A query of a PG with no copy loaded here: if the store holds no
    /// copy either (not one being split or loaded), send `answer` (an
    /// empty copy) to `to`, so peering need not wait for one; else drop.
    AnswerIfNoCopy { to: OsdId, answer: PgMsg },
    /// An activation that backfills this copy: empty it first (once per
    /// interval), then feed it.
    WipeThenFeed,
}

/// What the shell knows when a peer's PG message arrives.
#[derive(Clone, Copy, Debug)]
pub struct PeerContext<'a> {
    pub whoami: OsdId,
    pub pg: PgId,
    pub view: &'a MapView,
    /// Whether a core for the PG is loaded here.
    pub loaded: bool,
}

/// The rule for a peer's PG message. A copy answers only a query of an
/// interval its map has reached: before, it may not have split for a
/// `pg_num` increase yet, and its answer would describe the wrong objects
/// (the primary asks again). A query of an interval already over is
/// dropped too ([`MapView::query_is_stale`]). An empty answer for a copy
/// not held is proof to peering that this OSD never activated the PG
/// (`peering::blocked_by`), so the shell sends it only after checking its
/// store.
#[must_use]
pub fn admit_peer_msg(msg: &PgMsg, ctx: PeerContext<'_>) -> PeerAction {
    match msg {
        PgMsg::Pull { object, .. }
        | PgMsg::PushAck { object, .. }
        | PgMsg::Unreadable { object, .. }
            if !crate::pg::valid_name(object) =>
        {
            PeerAction::Drop("peer message with a bad object name")
        }
        PgMsg::Pull {
            from,
            interval_epoch,
            object,
        } => PeerAction::Push {
            object: object.clone(),
            to: *from,
            epoch: *interval_epoch,
        },
        PgMsg::Query { interval_epoch, .. } if *interval_epoch > ctx.view.epoch() => {
            PeerAction::Drop("query of a newer map")
        }
        PgMsg::Query { interval_epoch, .. } if ctx.view.query_is_stale(ctx.pg, *interval_epoch) => {
            PeerAction::Drop("query of an interval that is over")
        }
        PgMsg::Query {
            from,
            interval_epoch,
        } if !ctx.loaded => PeerAction::AnswerIfNoCopy {
            to: *from,
            answer: PgMsg::Notify(Notify {
                from: ctx.whoami,
                interval_epoch: *interval_epoch,
                copy: crate::peering::PeerCopy::default(),
                lease: LeaseReport::default(),
                inconsistent: Vec::new(),
            }),
        },
        PgMsg::Activate(activate) if activate.backfill => PeerAction::WipeThenFeed,
        _ => PeerAction::Feed,
    }
}

/// Whether this OSD may serve a client request for a PG now; the `Err` is
/// the retry reason. Any request needs a core here, and an active one if
/// this OSD is the PG's primary. Reads also need this OSD to be primary of
/// an interval the client's map knows, holding a read lease from every
/// replica; writes leave those checks to the core, which logs them.
///
/// # Errors
/// Why not, for the client's retry.
pub fn servable(
    whoami: OsdId,
    pg: PgId,
    core: Option<&Pg>,
    client_epoch: Epoch,
    read: bool,
    now_ms: u64,
) -> Result<(), String> {
    let Some(core) = core else {
        return Err(format!("PG {pg} is not held by osd.{}", whoami.0));
    };
    let interval = core.interval();
    let primary = interval.primary == Some(whoami);
    if primary && !core.is_active_primary() {
        let why = core.blocked_reason().unwrap_or_default();
        return Err(format!("PG {pg} is {} ({why})", core.state_name()));
    }
    if !read {
        return Ok(());
    }
    if !primary {
        return Err(format!("osd.{} is not primary of {pg}", whoami.0));
    }
    if !core.may_serve_reads(now_ms) {
        return Err(format!(
            "PG {pg}: osd.{} holds no read lease from every replica now",
            whoami.0
        ));
    }
    if interval.epoch_started > client_epoch {
        return Err(format!(
            "PG {pg} interval started at {}, after the client's {client_epoch}",
            interval.epoch_started
        ));
    }
    Ok(())
}

/// Why a client request is turned away before any PG looks at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Turned {
    /// Refetch the map and resend: the pool is not in this OSD's map, or
    /// the object belongs to another PG (the client's map predates a
    /// split).
    Retry(String),
    /// The pool's kind is not served.
    NotSupported(String),
}

/// The checks on a request that need only the map: its pool is known and
/// replicated, and its object (if it names one) hashes to the PG it was
/// sent for.
///
/// # Errors
/// [`Turned`], with the reason.
pub fn admit_request(view: &MapView, pg: PgId, object: &[u8]) -> Result<(), Turned> {
    match view.redundancy(pg.pool) {
        None => Err(Turned::Retry(format!(
            "pool {} not in this OSD's map",
            pg.pool.0
        ))),
        Some(Redundancy::Erasure { .. }) => Err(Turned::NotSupported(
            "erasure-coded pools are not served yet".into(),
        )),
        Some(Redundancy::Replicated { .. }) => {
            let pg_num = view.placement.pool(pg.pool).map_or(0, |p| p.pg_num);
            if object.is_empty() || pg_num == 0 {
                return Ok(());
            }
            let home = cairn_placement::hash::object_pg(pg.pool, pg_num, object);
            if home == pg {
                Ok(())
            } else {
                Err(Turned::Retry(format!(
                    "object belongs to PG {home}, not {pg}"
                )))
            }
        }
    }
}

/// How long a PG copy loaded or created now must assume that read-lease
/// promises made before it still run: a copy just split from a parent
/// core, as long as that core's promise (a lease); a copy this process
/// found in its store at start, as long as its predecessor's promises may
/// run (`restart_bound_ms`, from `lease::restart_lease_bound_ms`); a new
/// copy, none.
#[must_use]
pub fn new_copy_lease_bound_ms(split_now: bool, preexisting: bool, restart_bound_ms: u64) -> u64 {
    if split_now {
        LEASE_MS
    } else if preexisting {
        restart_bound_ms
    } else {
        0
    }
}

/// The settings scheduled scrubs follow (`osd_scrub_interval`,
/// `osd_deep_scrub_interval`, `osd_max_scrubs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubSchedule {
    pub light_interval_secs: u64,
    pub deep_interval_secs: u64,
    /// Scrubs this OSD runs at once, as primary.
    pub max_scrubs: usize,
}

/// The PGs whose scheduled scrub is due now, most overdue first, as many
/// as `max_scrubs` leaves room for beside the scrubs running; `true`: a
/// deep one (due when the deep interval passed, whatever the light one
/// says). A PG's stamps count from `started_secs` at the earliest (this
/// process's start), so a restart does not start every overdue scrub at
/// once. PGs that refuse a scrub now (not an active primary, recovering)
/// are skipped.
pub fn due_scrubs<'a>(
    pgs: impl Iterator<Item = (PgId, &'a Pg)>,
    schedule: ScrubSchedule,
    now_secs: u64,
    started_secs: u64,
) -> Vec<(PgId, bool)> {
    let mut running = 0usize;
    let mut due: Vec<(u64, PgId, bool)> = Vec::new();
    for (pg, core) in pgs {
        if core.scrubbing().is_some() {
            running += 1;
        }
        if core.scrub_refusal().is_some() {
            continue;
        }
        let stamps = core.scrub_stamps();
        let since = |stamp: u64| now_secs.saturating_sub(stamp.max(started_secs));
        let deep_over = since(stamps.deep_secs).checked_sub(schedule.deep_interval_secs);
        let light_over = since(stamps.light_secs).checked_sub(schedule.light_interval_secs);
        match (deep_over, light_over) {
            (Some(over), _) => due.push((over, pg, true)),
            (None, Some(over)) => due.push((over, pg, false)),
            (None, None) => {}
        }
    }
    due.sort_by_key(|d| std::cmp::Reverse(d.0));
    due.truncate(schedule.max_scrubs.saturating_sub(running));
    due.into_iter().map(|(_, pg, deep)| (pg, deep)).collect()
}

/// A pool whose copies this OSD must split now: its `pg_num` in the map
/// differs from the one its copies were last split for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitDue {
    pub pool: PoolId,
    pub pg_num: u32,
    /// Whether the pool's cores are retired first: not on the first map
    /// this process sees of the pool (its copies load after the split).
    pub retire: bool,
}

/// The pools whose copies are split after a new map, in pool order;
/// `split_for`: the `pg_num` this OSD last split a pool's copies for.
pub fn splits_due(view: &MapView, split_for: impl Fn(PoolId) -> Option<u32>) -> Vec<SplitDue> {
    view.pg_nums()
        .iter()
        .filter_map(|(&pool, &pg_num)| {
            let old = split_for(pool);
            (old != Some(pg_num)).then_some(SplitDue {
                pool,
                pg_num,
                retire: old.is_some(),
            })
        })
        .collect()
}

/// What a shell does for one PG after applying a new map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgSync {
    /// Feed the core the map context, then the new interval.
    NewInterval {
        pg: PgId,
        interval: Interval,
        context: MapContext,
    },
    /// Feed the core the map context (OSDs went up or down).
    Context { pg: PgId, context: MapContext },
    /// Load the copy from the store, or create it, and start a core.
    Create {
        pg: PgId,
        interval: Interval,
        context: MapContext,
    },
}

/// The PG work a new map brings, in PG order: a held PG whose interval
/// began after its core's learns of it; every held PG hears of OSDs going
/// up or down (`up_changed`); a PG not held gets a core if this OSD is in
/// its up or acting set, or holds a copy found in the store at start
/// (`preexisting`: a stray that may be needed for peering or purged).
pub fn plan_pg_sync(
    whoami: OsdId,
    view: &MapView,
    held: impl Fn(PgId) -> Option<Epoch>,
    preexisting: impl Fn(PgId) -> bool,
    up_changed: bool,
) -> Vec<PgSync> {
    let mut plan = Vec::new();
    for (pg, interval) in &view.intervals {
        let pg = *pg;
        match held(pg) {
            Some(started) if interval.epoch_started > started => plan.push(PgSync::NewInterval {
                pg,
                interval: interval.clone(),
                context: view.context(pg),
            }),
            Some(_) if up_changed => plan.push(PgSync::Context {
                pg,
                context: view.context(pg),
            }),
            Some(_) => {}
            None if interval.acting.contains(&whoami)
                || interval.up.contains(&whoami)
                || preexisting(pg) =>
            {
                plan.push(PgSync::Create {
                    pg,
                    interval: interval.clone(),
                    context: view.context(pg),
                });
            }
            None => {}
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_copy_waits_out_only_promises_that_may_exist() {
        assert_eq!(new_copy_lease_bound_ms(true, true, 10), LEASE_MS);
        assert_eq!(new_copy_lease_bound_ms(false, true, 10), 10);
        assert_eq!(new_copy_lease_bound_ms(false, false, 10), 0);
    }
}

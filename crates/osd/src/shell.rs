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
//! - [`push_start`] and [`push_after_read`]: a recovery push (or the
//!   answer to a pull) around the store read of its object;
//! - [`due_scrubs`]: which PGs start a scheduled scrub now;
//! - [`splits_due`]: after a new map, which pools' copies are split;
//! - [`plan_pg_sync`]: after a new map, which PG cores learn of a new
//!   interval or of OSDs going up or down, and which copies are created or
//!   loaded.

use crate::limits::LEASE_MS;
use crate::log::Version;
use crate::map_view::MapView;
use crate::pg::{Interval, MapContext, Notify, ObjectState, Pg, PgEvent, PgMsg, Push};
use bytes::Bytes;
use cairn_placement::Redundancy;
use cairn_proto::peer::LeaseReport;
use cairn_store::StoreError;
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

/// The checks on a request that need only the map: its pool is known,
/// its object (if it names one) hashes to the PG it was sent for, and on
/// an erasure-coded pool does not start with a zero byte (names kept for
/// the OSDs' own objects).
///
/// # Errors
/// [`Turned`], with the reason.
pub fn admit_request(view: &MapView, pg: PgId, object: &[u8]) -> Result<(), Turned> {
    let Some(redundancy) = view.redundancy(pg.pool) else {
        return Err(Turned::Retry(format!(
            "pool {} not in this OSD's map",
            pg.pool.0
        )));
    };
    if matches!(redundancy, Redundancy::Erasure { .. }) && object.first() == Some(&0) {
        return Err(Turned::NotSupported(
            "object names starting with a zero byte are reserved on erasure-coded pools".into(),
        ));
    }
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

/// Whether this OSD serves a client's direct shard read now
/// ([`Pg::serves_direct_read`], after the request's own checks: a valid
/// name of this PG, and a client map no newer than this OSD's, which may
/// not know of a split or interval the client does); the PG's stripe
/// layout if so. The daemon and the simulator ask before and after the
/// store read.
///
/// # Errors
/// Why not, for the client, which then asks the primary.
pub fn admit_direct_read(
    core: Option<&Pg>,
    view: &MapView,
    req: &cairn_proto::osd::ClientShardRead,
    now_ms: u64,
) -> Result<cairn_ec::layout::StripeLayout, String> {
    let object = &req.object[..];
    if object.is_empty() || object.len() > cairn_proto::limits::OBJECT_NAME_BYTES_MAX {
        return Err("invalid object name".into());
    }
    if req.epoch > view.epoch() {
        return Err("this OSD's map is behind the client's".into());
    }
    if let Err(Turned::Retry(why) | Turned::NotSupported(why)) = admit_request(view, req.pg, object)
    {
        return Err(why);
    }
    let core = core.ok_or("PG not held here")?;
    core.serves_direct_read(req.shard, object, now_ms)?;
    let shape = core.interval().ec.as_ref().ok_or("not erasure-coded")?;
    crate::ec::layout_of(shape)
}

/// Whether this copy serves a shard read of `object` from `from` for the
/// interval that started at `interval_epoch`: it is an activated copy of
/// that very interval, whose primary is `from`, at position `shard`, and
/// it does not lack the object. A read served by the bytes of another
/// interval, primary or shard would mix what the primary assembles.
/// Or, for a rebuild (`whole`, [`crate::ec::ANY_SHARD`]): it is a stray of
/// that interval, whose whole shard the primary takes as the shard its
/// metadata names, at the version the primary's log names.
///
/// # Errors
/// Why not, for the primary's log.
pub fn admit_shard_read(
    core: Option<&Pg>,
    from: OsdId,
    interval_epoch: Epoch,
    (shard, whole): (u32, bool),
    object: &[u8],
) -> Result<(), String> {
    let Some(core) = core else {
        return Err("PG not held here".into());
    };
    let interval = core.interval();
    if interval.epoch_started != interval_epoch || interval.primary != Some(from) {
        return Err(format!(
            "interval {} with primary {:?}, asked for {interval_epoch} by {from}",
            interval.epoch_started, interval.primary
        ));
    }
    if shard == crate::ec::ANY_SHARD {
        // A copy outside the interval's service: a stray, or an up OSD
        // that peering kept out of it as a recovery source.
        let serving = core.is_activated_replica() || interval.primary == Some(core.whoami());
        return if whole && !serving {
            Ok(())
        } else {
            Err("any shard is served only whole, by a copy not serving the interval".into())
        };
    }
    if !core.is_activated_replica() {
        return Err("copy not activated".into());
    }
    let own = interval.shard_of(core.whoami());
    if own != Some(shard) || interval.osd_at(shard) != Some(core.whoami()) {
        return Err(format!("this copy holds shard {own:?}, not {shard}"));
    }
    if core.lacks(object) {
        return Err("this copy lacks the object".into());
    }
    Ok(())
}

/// Where a push of `object` to `targets` begins (a recovery push, or the
/// answer to a pull when `pull_epoch` names the puller's interval): the
/// interval it is sent in and the PG's last update before the read (what
/// the push is as of). `None`: a pull of an interval that is over, dropped
/// (a pull is answered only to the primary of this copy's interval).
#[must_use]
pub fn push_start(
    core: &Pg,
    targets: &[OsdId],
    pull_epoch: Option<Epoch>,
) -> Option<(Epoch, Version)> {
    let stands = pull_epoch.is_none_or(|e| targets.iter().all(|t| core.answers_pull(*t, e)));
    stands.then(|| (core.interval().epoch_started, core.last_update()))
}

/// What a push does once its object is read.
#[derive(Clone, Debug, PartialEq)]
pub struct PushPlan {
    /// Messages to peers, in order.
    pub sends: Vec<(OsdId, PgMsg)>,
    /// An event for the PG's core, after the sends.
    pub feed: Option<PgEvent>,
    /// Object bytes pushed to each target (for the recovery byte rate).
    pub bytes: u64,
}

/// The push after the store read of its object, begun as [`push_start`]
/// said: the object's state (or its absence) to every target; or, if this
/// copy rotted, `Unreadable` to the puller (so it pulls from another copy
/// and repairs this one) and a `ReadError` for the core (as primary, it
/// recovers this copy from another first, and pushes again from there).
///
/// # Errors
/// Any other store error, for the shell to report; nothing is sent.
pub fn push_after_read(
    whoami: OsdId,
    object: Bytes,
    targets: &[OsdId],
    pulled: bool,
    (epoch, as_of): (Epoch, Version),
    read: Result<Option<ObjectState>, StoreError>,
) -> Result<PushPlan, StoreError> {
    match read {
        Ok(state) => {
            let bytes = state.as_ref().map_or(0, |s| s.data.len() as u64);
            let push = PgMsg::Push(Push {
                from: whoami,
                interval_epoch: epoch,
                object,
                state,
                as_of,
            });
            Ok(PushPlan {
                sends: targets.iter().map(|t| (*t, push.clone())).collect(),
                feed: None,
                bytes,
            })
        }
        Err(StoreError::Corrupt(why)) => {
            let mut sends = Vec::new();
            if pulled {
                let unreadable = PgMsg::Unreadable {
                    from: whoami,
                    interval_epoch: epoch,
                    object: object.clone(),
                };
                sends = targets.iter().map(|t| (*t, unreadable.clone())).collect();
            }
            Ok(PushPlan {
                sends,
                feed: Some(PgEvent::ReadError { object, error: why }),
                bytes: 0,
            })
        }
        Err(error) => Err(error),
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
    fn a_push_of_a_rotten_copy_tells_the_puller_and_the_core_and_sends_no_data() {
        let start = (Epoch(7), Version::new(7, 3));
        let targets = [OsdId(2), OsdId(3)];
        let object = Bytes::from_static(b"obj");
        let corrupt = || Err(StoreError::Corrupt("checksum".into()));
        let pulled = push_after_read(
            OsdId(1),
            object.clone(),
            &targets[..1],
            true,
            start,
            corrupt(),
        )
        .expect("a plan");
        assert!(matches!(
            pulled.sends.as_slice(),
            [(
                OsdId(2),
                PgMsg::Unreadable {
                    from: OsdId(1),
                    interval_epoch: Epoch(7),
                    ..
                }
            )]
        ));
        assert!(matches!(pulled.feed, Some(PgEvent::ReadError { .. })));
        let pushed = push_after_read(OsdId(1), object.clone(), &targets, false, start, corrupt())
            .expect("a plan");
        assert!(pushed.sends.is_empty(), "no puller to tell");
        assert!(matches!(pushed.feed, Some(PgEvent::ReadError { .. })));

        let absent = push_after_read(OsdId(1), object.clone(), &targets, false, start, Ok(None))
            .expect("a plan");
        assert_eq!(absent.sends.len(), 2);
        assert!(absent.sends.iter().all(|(_, msg)| matches!(
            msg,
            PgMsg::Push(Push { state: None, as_of, interval_epoch: Epoch(7), .. }) if *as_of == start.1
        )));
        assert!(absent.feed.is_none());
        let failed = push_after_read(
            OsdId(1),
            object,
            &targets,
            false,
            start,
            Err(StoreError::Io("disk".into())),
        );
        assert!(failed.is_err(), "nothing sent on another store error");
    }

    #[test]
    fn a_new_copy_waits_out_only_promises_that_may_exist() {
        assert_eq!(new_copy_lease_bound_ms(true, true, 10), LEASE_MS);
        assert_eq!(new_copy_lease_bound_ms(false, true, 10), 10);
        assert_eq!(new_copy_lease_bound_ms(false, false, 10), 0);
    }
}

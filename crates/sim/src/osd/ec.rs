//! The simulated OSD shell's erasure-coded paths, as the daemon's: writes
//! planned per shard with their roll-back records (whole writes at once,
//! partial ones after reading the old bytes from the shards), client
//! reads gathered from the shards, shard reads served to the primary, and
//! recovery pushes of shards rebuilt from `k` others.
//!
//! The decisions are the daemon's pure helpers (`cairn_osd::ec`); only the
//! orchestration differs: where the daemon awaits shard reads from its
//! peers, the shell sends them as messages, arms a timer of the daemon's
//! shard read timeout, and carries on when every answer came or the timer
//! fired ([`Fetching`]).

use super::{Asker, Delay, OsdTimer, Outbox, SimOsd, collection_of};
use crate::net::{Msg, Node};
use bytes::Bytes;
use cairn_osd::daemon::{client_reply, observe, read_done};
use cairn_osd::ec::{self, DeltaPlan, EcBackend, EcReadPlan, LocalObject, PartialRead, Served};
use cairn_osd::limits::{EC_READ_ATTEMPTS, SHARD_READ_TIMEOUT};
use cairn_osd::pg::{EcShape, PreparedWrite};
use cairn_osd::scrub::{Inconsistency, ParityCheck};
use cairn_osd::shell::{admit_direct_read, admit_shard_read};
use cairn_osd::{Guard, Interval, ObjectState, PgEvent, PgMsg, Push, ReadId, ReqId, Version};
use cairn_proto::osd::{ClientReply, ClientShardRead, OpError, OpKind, OpOutput};
use cairn_proto::peer::{ShardRead, ShardReadError, ShardReadOk};
use cairn_store::{ObjectKey, Op, StoreError};
use cairn_types::{Epoch, OsdId, PgId};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, BTreeSet};

/// How many times a write refused `ObjectBusy` is planned again, a
/// millisecond apart, before the client is told (the daemon's
/// `EC_WRITE_REPLANS`).
const EC_WRITE_REPLANS: u32 = 20;
const REPLAN_DELAY_MS: u64 = 1;

/// What the erasure-coded paths of one OSD did, across its restarts (for
/// the report; a sweep must show each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EcCounts {
    /// Writes planned whole (whole objects, creates, removes, xattrs).
    pub whole_writes: u64,
    /// Partial writes planned as a parity delta.
    pub delta_writes: u64,
    /// Partial writes planned by rewriting their stripes.
    pub stripe_writes: u64,
    /// Reads that decoded a missing shard's bytes.
    pub degraded_reads: u64,
    /// Shards rebuilt and pushed by recovery.
    pub shard_pushes: u64,
    /// Writes rolled back on this OSD's shards by peering.
    pub rollbacks: u64,
    /// Parts of direct shard reads served to clients, and of them the
    /// stripes sent to a client decoding a missing data shard.
    pub direct_parts: u64,
    pub direct_rows: u64,
    /// Objects a deep scrub re-encoded, and inconsistencies that found.
    pub parity_checks: u64,
    pub parity_findings: u64,
}

/// The erasure-coded work of a process in progress.
#[derive(Debug, Default)]
pub struct EcState {
    /// Fetch numbers start at the process's incarnation (shifted), so a
    /// peer's late answer to a shard read of an earlier process (whose
    /// connections the daemon's restart would have reset) matches none.
    next_fetch: u64,
    fetches: BTreeMap<u64, Fetching>,
    /// Client writes to erasure-coded PGs being planned or in the core,
    /// kept to plan them again after an `ObjectBusy`.
    writes: BTreeMap<ReqId, EcWrite>,
}

/// A client write of an erasure-coded PG (the daemon's `client_write`
/// loop): what planning it again needs.
#[derive(Debug)]
struct EcWrite {
    pg: PgId,
    client_epoch: Epoch,
    object: Bytes,
    ops: Vec<Op>,
    guards: Vec<Guard>,
    implied: Option<Guard>,
    attempts: u32,
}

/// Shard reads sent to the OSD at each position (the daemon's
/// `fetch_shards`), answered or not yet.
#[derive(Debug)]
struct Fetching {
    pg: PgId,
    version: u64,
    whole: bool,
    /// The ranges asked of each shard still waited for.
    waiting: BTreeMap<u32, usize>,
    got: BTreeMap<u32, Served>,
    failed: Vec<(u32, ShardReadError)>,
    then: Then,
}

/// What a fetch was for.
#[derive(Debug)]
enum Then {
    Read(Box<ReadJob>),
    Delta(Box<PartialJob>, DeltaPlan),
    Probe(Box<PartialJob>, PartialRead, Vec<Bytes>),
    Push(Box<PushJob>),
    Verify(Box<VerifyJob>),
}

/// A deep scrub's parity check of a chunk (the daemon's `verify_parity`):
/// object after object, window after window.
#[derive(Debug)]
struct VerifyJob {
    chunk: u64,
    interval: Interval,
    /// The objects still to check, the current one first.
    checks: std::collections::VecDeque<ParityCheck>,
    /// The current object's chunk and size, and its windows still to read.
    shape: (u64, u64),
    windows: std::collections::VecDeque<std::ops::Range<u64>>,
    found: Vec<Inconsistency>,
}

/// An erasure-coded read (the daemon's `ec_read`).
#[derive(Debug)]
struct ReadJob {
    interval: Interval,
    key: ObjectKey,
    plan: EcReadPlan,
    fetch: ec::Fetch,
    available: BTreeSet<u32>,
    attempt: usize,
    purpose: Purpose,
}

/// Whose read it is.
#[derive(Debug)]
enum Purpose {
    Client(ReadId),
    /// The old bytes of a partial write's stripes.
    Partial(Box<PartialJob>, PartialRead),
}

/// A partial write being planned (the daemon's `prepare_ec_write`).
#[derive(Debug)]
struct PartialJob {
    req: ReqId,
    interval: Interval,
    shape: EcShape,
    key: ObjectKey,
    local: Option<LocalObject>,
    base: u64,
    size: u64,
    chunk: u64,
}

/// An erasure-coded recovery push (the daemon's `push_shards`).
#[derive(Debug)]
struct PushJob {
    object: Bytes,
    interval: Interval,
    /// The push's interval and what it is as of.
    start: (Epoch, Version),
    /// Each target with the position it is to hold.
    positions: Vec<(OsdId, u32)>,
    trusted: BTreeSet<u32>,
    candidates: Vec<u32>,
    sources: ec::Sources,
    /// The core's `rebuild_hints`: strays to read, the version to rebuild.
    strays: Vec<OsdId>,
    need: Option<u64>,
}

/// One shard's read of fetch `fetch`.
struct ShardAsk<'a> {
    fetch: u64,
    interval: &'a Interval,
    /// A rebuild's strays ([`ec::source_of`]).
    strays: &'a [OsdId],
    key: &'a ObjectKey,
    shard: u32,
    ranges: &'a [(u64, u64)],
}

/// The frame id of shard `shard`'s read of fetch `fetch`.
fn request_id(fetch: u64, shard: u32) -> u64 {
    (fetch << 8) | u64::from(shard & 0xff)
}

impl EcState {
    /// The state of a process started as `incarnation`.
    pub fn new(incarnation: u64) -> EcState {
        EcState {
            next_fetch: incarnation << 32,
            ..EcState::default()
        }
    }
}

impl SimOsd {
    fn ec(&mut self) -> &mut EcState {
        &mut self.proc_mut().ec
    }

    /// The interval of `pg` if this OSD holds it and it is erasure-coded.
    fn ec_interval(&self, pg: PgId) -> Option<Interval> {
        let interval = self.proc().pgs.get(&pg)?.pg.interval();
        interval.ec.is_some().then(|| interval.clone())
    }

    /// Whether `pg` is an erasure-coded PG this OSD holds.
    pub(super) fn is_ec(&self, pg: PgId) -> bool {
        self.ec_interval(pg).is_some()
    }

    // ---- writes ----

    /// The daemon's `client_write` for an erasure-coded PG: planned (and
    /// planned again after an `ObjectBusy`), then handed to the core.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ec_client_write(
        &mut self,
        asker: Asker,
        pg: PgId,
        client_epoch: Epoch,
        req: ReqId,
        object: Bytes,
        ops: Vec<Op>,
        guards: Vec<Guard>,
        implied: Option<Guard>,
        out: &mut Outbox,
    ) {
        self.proc_mut().waiters.entry(req).or_default().push(asker);
        if self.ec().writes.contains_key(&req) {
            // A resend while the first is planned or in the core: that one
            // answers every asker.
            return;
        }
        let write = EcWrite {
            pg,
            client_epoch,
            object,
            ops,
            guards,
            implied,
            attempts: 0,
        };
        self.ec().writes.insert(req, write);
        self.ec_plan(req, out);
    }

    /// Plans write `req` (again): a partial one after reading the shards,
    /// any other at once.
    pub(super) fn ec_plan(&mut self, req: ReqId, out: &mut Outbox) {
        let Some(write) = self.proc().ec.writes.get(&req) else {
            return;
        };
        let pg = write.pg;
        let Some(interval) = self.ec_interval(pg) else {
            // Not held here (or no longer erasure-coded): the core answers.
            let reply = ClientReply::err(OpError::Retry {
                epoch: self.proc().view.epoch().0,
                reason: format!("PG {pg} is not held here"),
            });
            return self.ec_write_answer(req, reply, out);
        };
        if !ec::is_partial(&write.ops) {
            let Some(shape) = interval.ec.as_ref() else {
                return;
            };
            let planned = ec::plan_whole(
                &self.store,
                collection_of(pg),
                shape,
                &write.object,
                req,
                &write.ops,
            );
            self.ec_counts.whole_writes += u64::from(planned.is_ok());
            return self.ec_submit(req, planned, out);
        }
        match self.partial_start(req, interval, out) {
            Ok(()) => {}
            Err(error) => self.ec_submit(req, Err(error), out),
        }
    }

    /// The start of the daemon's `prepare_ec_write`: the object as this
    /// shard records it, then a parity delta's reads, or the long way.
    fn partial_start(
        &mut self,
        req: ReqId,
        interval: Interval,
        out: &mut Outbox,
    ) -> Result<(), OpError> {
        let Some(write) = self.proc().ec.writes.get(&req) else {
            return Ok(());
        };
        let Some(shape) = interval.ec.clone() else {
            return Ok(());
        };
        let pg = write.pg;
        let key = ObjectKey::new(write.object.clone());
        let ops = write.ops.clone();
        let layout = ec::layout_of(&shape).map_err(OpError::Store)?;
        let local = ec::local_object(&self.store, collection_of(pg), &key, &layout)?;
        let (base, size, chunk) = local.as_ref().map_or((0, 0, layout.chunk_for(0)), |l| {
            (l.version, l.size, l.chunk)
        });
        let job = Box::new(PartialJob {
            req,
            interval,
            shape,
            key,
            local,
            base,
            size,
            chunk,
        });
        if base != 0
            && let Some(delta) = ec::plan_delta(&layout, size, chunk, &ops)
        {
            let reads = delta.reads(&layout);
            let interval = job.interval.clone();
            let then = Then::Delta(job, delta);
            self.fetch(pg, &interval, base, &reads, (false, &[]), then, out);
            return Ok(());
        }
        self.partial_long(job, out)
    }

    /// The long way of a partial write: the stripes it rewrites, their
    /// old bytes read through the shards at the planned version.
    fn partial_long(&mut self, job: Box<PartialJob>, out: &mut Outbox) -> Result<(), OpError> {
        let Some(ops) = self.proc().ec.writes.get(&job.req).map(|w| w.ops.clone()) else {
            return Ok(());
        };
        let layout = ec::layout_of(&job.shape).map_err(OpError::Store)?;
        let plan =
            ec::plan_partial(&layout, job.size, job.chunk, &ops).map_err(ec::invalid_write)?;
        let reads = plan.reads(&layout, job.size);
        if !reads.iter().any(|r| r.start < r.end) {
            let old = reads.iter().map(|_| Bytes::new()).collect();
            return self.partial_probe(job, plan, old, out);
        }
        let mut read_ops = vec![OpKind::Stat];
        read_ops.extend(reads.iter().map(|r| OpKind::Read {
            offset: r.start,
            length: Some(r.end - r.start),
        }));
        let pg = self
            .proc()
            .ec
            .writes
            .get(&job.req)
            .map(|w| w.pg)
            .ok_or(OpError::ObjectBusy)?;
        let interval = job.interval.clone();
        let key = job.key.clone();
        let purpose = Purpose::Partial(job, plan);
        self.ec_read(pg, interval, key, Vec::new(), read_ops, purpose, out);
        Ok(())
    }

    /// A partial write's old bytes came (or not).
    fn partial_read_done(
        &mut self,
        job: Box<PartialJob>,
        plan: PartialRead,
        result: Result<(Vec<OpOutput>, Bytes), OpError>,
        out: &mut Outbox,
    ) -> Result<(), OpError> {
        let old = ec::old_bytes_of(result, job.base, job.size)?;
        self.partial_probe(job, plan, old, out)
    }

    /// Every position must hold its own shard of the object before a
    /// partial write mixes their bytes: probed, unless the object is new.
    fn partial_probe(
        &mut self,
        job: Box<PartialJob>,
        plan: PartialRead,
        old: Vec<Bytes>,
        out: &mut Outbox,
    ) -> Result<(), OpError> {
        if job.base == 0 {
            return self.partial_finish(&job, &plan, &old, out);
        }
        let pg = self
            .proc()
            .ec
            .writes
            .get(&job.req)
            .map(|w| w.pg)
            .ok_or(OpError::ObjectBusy)?;
        let layout = ec::layout_of(&job.shape).map_err(OpError::Store)?;
        let probe: BTreeMap<u32, Vec<(u64, u64)>> =
            (0..layout.shards()).map(|s| (s, Vec::new())).collect();
        let interval = job.interval.clone();
        self.fetch(
            pg,
            &interval,
            0,
            &probe,
            (false, &[]),
            Then::Probe(job, plan, old),
            out,
        );
        Ok(())
    }

    /// Each shard's ops of the partial write, with their roll-back
    /// records, handed to the core.
    fn partial_finish(
        &mut self,
        job: &PartialJob,
        plan: &PartialRead,
        old: &[Bytes],
        out: &mut Outbox,
    ) -> Result<(), OpError> {
        let Some(write) = self.proc().ec.writes.get(&job.req) else {
            return Ok(());
        };
        let (object, ops) = (write.object.clone(), write.ops.clone());
        let backend = EcBackend::new(&job.shape).map_err(OpError::Store)?;
        let layout = *backend.layout();
        let writes = ec::partial_writes(&backend, job.size, plan, old, &job.key, ops.clone())
            .map_err(ec::invalid_write)?;
        let (writes, undo) = ec::with_undo(
            &layout,
            &object,
            job.req,
            job.local.as_ref(),
            Some(plan),
            &ops,
            writes,
        )
        .map_err(ec::invalid_write)?;
        let prepared = PreparedWrite {
            base: job.base,
            writes,
            undo,
            read_shards: true,
        };
        self.ec_counts.stripe_writes += 1;
        self.ec_submit(job.req, Ok(prepared), out);
        Ok(())
    }

    /// The parity delta's old bytes came: the delta's writes, or the long
    /// way if a shard could not answer.
    fn delta_done(
        &mut self,
        job: Box<PartialJob>,
        delta: &DeltaPlan,
        got: BTreeMap<u32, Served>,
        complete: bool,
        out: &mut Outbox,
    ) -> Result<(), OpError> {
        let Some(ops) = self.proc().ec.writes.get(&job.req).map(|w| w.ops.clone()) else {
            return Ok(());
        };
        if complete {
            let backend = EcBackend::new(&job.shape).map_err(OpError::Store)?;
            let layout = *backend.layout();
            let old: BTreeMap<u32, Vec<Bytes>> = got
                .into_iter()
                .map(|(s, served)| (s, served.parts))
                .collect();
            if let Ok(writes) =
                ec::delta_writes(&backend, delta, job.size, &old, &job.key, ops.clone())
            {
                let object = job.key.name.clone();
                let (writes, undo) = ec::with_undo(
                    &layout,
                    &object,
                    job.req,
                    job.local.as_ref(),
                    None,
                    &ops,
                    writes,
                )
                .map_err(ec::invalid_write)?;
                let prepared = PreparedWrite {
                    base: job.base,
                    writes,
                    undo,
                    read_shards: true,
                };
                self.ec_counts.delta_writes += 1;
                self.ec_submit(job.req, Ok(prepared), out);
                return Ok(());
            }
        }
        self.partial_long(job, out)
    }

    /// The daemon's `client_write_planned`: the planned write admitted only
    /// while the object is at the version it was planned on, its guards
    /// observed, and the write fed to the core.
    fn ec_submit(
        &mut self,
        req: ReqId,
        prepared: Result<PreparedWrite, OpError>,
        out: &mut Outbox,
    ) {
        let made = self.ec_make(req, prepared);
        let event = match made {
            Ok(Some((pg, event))) => (pg, event),
            Ok(None) => return,
            Err(error) => return self.ec_write_answer(req, ClientReply::err(error), out),
        };
        if !self.feed(event.0, event.1, out) {
            let reply = ClientReply::err(OpError::Retry {
                epoch: self.proc().view.epoch().0,
                reason: format!("PG {} is not held here", event.0),
            });
            self.ec_write_answer(req, reply, out);
        }
    }

    fn ec_make(
        &self,
        req: ReqId,
        prepared: Result<PreparedWrite, OpError>,
    ) -> Result<Option<(PgId, PgEvent)>, OpError> {
        let Some(write) = self.proc().ec.writes.get(&req) else {
            return Ok(None);
        };
        if !self.proc().pgs.contains_key(&write.pg) {
            // The daemon's `feed_with` finds no PG before it plans: the
            // client is told to retry.
            return Err(OpError::Retry {
                epoch: self.proc().view.epoch().0,
                reason: format!("PG {} is not held here", write.pg),
            });
        }
        // The PG's interval began after the client's map (a split since
        // the request came in, say, which may have moved the object): the
        // core sends the client to refetch it, whatever the plan found.
        let newer = self
            .proc()
            .pgs
            .get(&write.pg)
            .is_some_and(|slot| slot.pg.interval().epoch_started > write.client_epoch);
        if newer {
            let event = PgEvent::ClientWrite {
                req,
                client_epoch: write.client_epoch,
                object: write.object.clone(),
                ops: write.ops.clone(),
                guard: None,
                prepared: None,
            };
            return Ok(Some((write.pg, event)));
        }
        let prepared = prepared?;
        let collection = collection_of(write.pg);
        let key = ObjectKey::new(write.object.clone());
        let version = match cairn_store::ObjectStore::stat(&self.store, collection, &key) {
            Ok(stat) => stat.version,
            Err(StoreError::NotFound { .. }) => 0,
            Err(error) => return Err(OpError::Store(error.to_string())),
        };
        let known = self
            .proc()
            .pgs
            .get(&write.pg)
            .is_some_and(|slot| slot.pg.knows_request(req));
        if version != prepared.base && !known {
            return Err(OpError::ObjectBusy);
        }
        let guard = observe(
            &self.store,
            collection,
            &write.object,
            write.guards.clone(),
            write.implied.clone(),
        )?;
        let event = PgEvent::ClientWrite {
            req,
            client_epoch: write.client_epoch,
            object: write.object.clone(),
            ops: write.ops.clone(),
            guard,
            prepared: Some(prepared),
        };
        Ok(Some((write.pg, event)))
    }

    /// Whether `req` is an erasure-coded write this shell plans.
    pub(super) fn is_ec_write(&self, req: ReqId) -> bool {
        self.proc().ec.writes.contains_key(&req)
    }

    /// The outcome of write `req`: planned again after an `ObjectBusy` (a
    /// few times), else answered to every asker.
    pub(super) fn ec_write_answer(&mut self, req: ReqId, reply: ClientReply, out: &mut Outbox) {
        if matches!(reply.result, Err(OpError::ObjectBusy))
            && let Some(write) = self.ec().writes.get_mut(&req)
            && write.attempts < EC_WRITE_REPLANS
        {
            write.attempts += 1;
            out.timers
                .push((Delay::Ms(REPLAN_DELAY_MS), OsdTimer::EcReplan { req }));
            return;
        }
        self.ec().writes.remove(&req);
        for asker in self.proc_mut().waiters.remove(&req).unwrap_or_default() {
            Self::reply(out, asker, reply.clone(), Bytes::new());
        }
    }

    /// The core's reply to an erasure-coded write.
    pub(super) fn ec_core_reply(&mut self, req: ReqId, reply: cairn_osd::Reply, out: &mut Outbox) {
        let epoch = self.proc().view.epoch();
        self.ec_write_answer(req, client_reply(reply, epoch), out);
    }

    // ---- reads ----

    /// A client read of an erasure-coded PG, after the core said go.
    pub(super) fn ec_client_read(
        &mut self,
        pg: PgId,
        read: ReadId,
        key: ObjectKey,
        guards: Vec<Guard>,
        ops: Vec<OpKind>,
        out: &mut Outbox,
    ) {
        let Some(interval) = self.ec_interval(pg) else {
            return self.ec_read_finish(pg, Purpose::Client(read), Err(OpError::ObjectBusy), out);
        };
        self.ec_read(pg, interval, key, guards, ops, Purpose::Client(read), out);
    }

    /// The daemon's `ec_read`: the local part on this shard, then the
    /// shard ranges from the positions, around those that fail.
    #[allow(clippy::too_many_arguments)]
    fn ec_read(
        &mut self,
        pg: PgId,
        interval: Interval,
        key: ObjectKey,
        guards: Vec<Guard>,
        ops: Vec<OpKind>,
        purpose: Purpose,
        out: &mut Outbox,
    ) {
        let planned = (|| {
            let shape = interval
                .ec
                .as_ref()
                .ok_or_else(|| OpError::Store("not an erasure-coded PG".into()))?;
            let layout = ec::layout_of(shape).map_err(OpError::Store)?;
            let plan = ec::plan_read(&self.store, collection_of(pg), &key, &layout, guards, ops)?;
            let lacking = self
                .proc()
                .pgs
                .get(&pg)
                .map(|s| s.pg.copies_lacking(&key.name))
                .unwrap_or_default();
            let available: BTreeSet<u32> = (0..layout.shards())
                .filter(|s| interval.osd_at(*s).is_some_and(|o| !lacking.contains(&o)))
                .collect();
            let fetch = ec::fetch_for(&layout, &plan, &available)?;
            Ok((plan, available, fetch))
        })();
        let (plan, available, fetch) = match planned {
            Ok(planned) => planned,
            Err(error) => return self.ec_read_finish(pg, purpose, Err(error), out),
        };
        let job = ReadJob {
            interval,
            key,
            plan,
            fetch,
            available,
            attempt: 0,
            purpose,
        };
        self.read_attempt(pg, Box::new(job), out);
    }

    fn read_attempt(&mut self, pg: PgId, job: Box<ReadJob>, out: &mut Outbox) {
        let interval = job.interval.clone();
        let ranges = job.fetch.ranges.clone();
        let version = job.plan.version;
        self.fetch(
            pg,
            &interval,
            version,
            &ranges,
            (false, &[]),
            Then::Read(job),
            out,
        );
    }

    /// One attempt of a read is answered: assembled, or tried again around
    /// the shards that failed.
    fn read_fetched(
        &mut self,
        pg: PgId,
        mut job: Box<ReadJob>,
        got: BTreeMap<u32, Served>,
        failed: Vec<(u32, ShardReadError)>,
        out: &mut Outbox,
    ) {
        let shape = job.interval.ec.clone();
        let Some(shape) = shape else { return };
        if failed.is_empty() {
            let result = (|| {
                let layout = ec::layout_of(&shape).map_err(OpError::Store)?;
                let codec = ec::codec_for(shape.k, shape.m).map_err(OpError::Store)?;
                let got = got
                    .into_iter()
                    .map(|(s, served)| (s, served.parts))
                    .collect();
                let parts = ec::parts_for(&*codec, layout.shards(), &job.plan, &job.fetch, got)?;
                ec::assemble(&layout, job.plan.clone(), &parts)
            })();
            let decoded = job.fetch.decode.is_some() && result.is_ok();
            self.ec_counts.degraded_reads += u64::from(decoded);
            return self.ec_read_finish(pg, job.purpose, result, out);
        }
        for (shard, error) in failed {
            out.trace.push(format!(
                "{} {pg}: shard {shard} read failed ({error:?}); reading around it",
                self.id
            ));
            job.available.remove(&shard);
            if let (ShardReadError::Corrupt(_), Some(osd)) = (&error, job.interval.osd_at(shard)) {
                let epoch = job.interval.epoch_started;
                self.report_unreadable(pg, epoch, osd, job.key.name.clone(), out);
            }
        }
        job.attempt += 1;
        if job.attempt >= EC_READ_ATTEMPTS {
            return self.ec_read_finish(pg, job.purpose, Err(OpError::ObjectBusy), out);
        }
        let refetch = ec::layout_of(&shape)
            .map_err(OpError::Store)
            .and_then(|layout| ec::fetch_for(&layout, &job.plan, &job.available));
        match refetch {
            Ok(fetch) => {
                job.fetch = fetch;
                self.read_attempt(pg, job, out);
            }
            Err(error) => self.ec_read_finish(pg, job.purpose, Err(error), out),
        }
    }

    fn ec_read_finish(
        &mut self,
        pg: PgId,
        purpose: Purpose,
        result: Result<(Vec<OpOutput>, Bytes), OpError>,
        out: &mut Outbox,
    ) {
        match purpose {
            Purpose::Client(read) => {
                let done = read_done(read, &result);
                if let Some(pending) = self.proc_mut().reads.get_mut(&read) {
                    pending.result = Some(result);
                }
                if !self.feed(pg, done, out) {
                    self.answer_read(read, cairn_osd::ReadAnswer::Busy, out);
                }
            }
            Purpose::Partial(job, plan) => {
                let req = job.req;
                if let Err(error) = self.partial_read_done(job, plan, result, out) {
                    // Through the core's interval check, as the daemon's
                    // failed plans go.
                    self.ec_submit(req, Err(error), out);
                }
            }
        }
    }

    /// Tells the core that `osd`'s shard of `object` is unreadable: it
    /// then counts as lacking it and is rebuilt.
    fn report_unreadable(
        &mut self,
        pg: PgId,
        interval_epoch: Epoch,
        osd: OsdId,
        object: Bytes,
        out: &mut Outbox,
    ) {
        let unreadable = PgMsg::Unreadable {
            from: osd,
            interval_epoch,
            object,
        };
        self.feed(pg, PgEvent::Peer(unreadable), out);
    }

    // ---- recovery ----

    /// The daemon's `push_shards`: whole shards read from `k` positions
    /// that hold the object, the targets' shards rebuilt from them and
    /// pushed.
    pub(super) fn push_shards(
        &mut self,
        pg: PgId,
        object: Bytes,
        targets: &[OsdId],
        start: (Epoch, Version),
        out: &mut Outbox,
    ) {
        let Some(slot) = self.proc().pgs.get(&pg) else {
            return;
        };
        let lacking = slot.pg.copies_lacking(&object);
        let interval = slot.pg.interval().clone();
        let Some(shape) = interval.ec.clone() else {
            return;
        };
        let Ok(layout) = ec::layout_of(&shape) else {
            out.anomalies
                .push(format!("{} {pg}: erasure-coded PG of a bad shape", self.id));
            return;
        };
        let mut positions = Vec::with_capacity(targets.len());
        for target in targets {
            match interval.shard_of(*target) {
                Some(shard) => positions.push((*target, shard)),
                None => {
                    out.trace.push(format!(
                        "{} {pg}: push target {target} at no position",
                        self.id
                    ));
                    return;
                }
            }
        }
        let (strays, need) = slot.pg.rebuild_hints(&object);
        let trusted_osd = |o: OsdId| !targets.contains(&o) && !lacking.contains(&o);
        let mut candidates = ec::rebuild_order(&interval, &strays, self.id, trusted_osd);
        let trusted = candidates
            .iter()
            .copied()
            .filter(|s| *s < layout.shards() && interval.osd_at(*s).is_some_and(trusted_osd))
            .collect();
        candidates.reverse();
        let job = PushJob {
            object,
            interval,
            start,
            positions,
            trusted,
            candidates,
            sources: BTreeMap::new(),
            strays,
            need,
        };
        self.push_round(pg, Box::new(job), out);
    }

    /// Reads the next batch of sources, or rebuilds and pushes once there
    /// are enough (or no more to read).
    fn push_round(&mut self, pg: PgId, mut job: Box<PushJob>, out: &mut Outbox) {
        let Some(shape) = job.interval.ec.clone() else {
            return;
        };
        let want = ec::reads_still_needed(shape.k as usize, &job.sources, job.need);
        let mut batch: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        while batch.len() < want {
            let Some(shard) = job.candidates.pop() else {
                break;
            };
            batch.insert(shard, Vec::new());
        }
        if batch.is_empty() {
            return self.push_rebuilt(pg, &job, out);
        }
        let (interval, strays) = (job.interval.clone(), job.strays.clone());
        self.fetch(
            pg,
            &interval,
            0,
            &batch,
            (true, &strays),
            Then::Push(job),
            out,
        );
    }

    fn push_fetched(
        &mut self,
        pg: PgId,
        mut job: Box<PushJob>,
        got: BTreeMap<u32, Served>,
        failed: Vec<(u32, ShardReadError)>,
        out: &mut Outbox,
    ) {
        for (shard, served) in got {
            job.sources.insert(shard, Ok(served));
        }
        for (shard, error) in failed {
            let osd = job.interval.osd_at(shard);
            if let (ShardReadError::Corrupt(_), Some(osd)) = (&error, osd) {
                self.report_unreadable(pg, job.start.0, osd, job.object.clone(), out);
            }
            let error = match error {
                ShardReadError::NotFound if !job.trusted.contains(&shard) => {
                    ShardReadError::NotServing("lacks the object".into())
                }
                other => other,
            };
            job.sources.insert(shard, Err(error));
        }
        self.push_round(pg, job, out);
    }

    fn push_rebuilt(&mut self, pg: PgId, job: &PushJob, out: &mut Outbox) {
        let Some(shape) = &job.interval.ec else {
            return;
        };
        let (layout, codec) = match (ec::layout_of(shape), ec::codec_for(shape.k, shape.m)) {
            (Ok(layout), Ok(codec)) => (layout, codec),
            _ => return,
        };
        let shards: Vec<u32> = job.positions.iter().map(|(_, s)| *s).collect();
        let rebuilt = match ec::rebuild_for_push(&layout, &*codec, &job.sources, &shards, job.need)
        {
            Ok(rebuilt) => rebuilt,
            Err(why) => {
                out.trace.push(format!(
                    "{} {pg}: cannot rebuild {} yet: {why}",
                    self.id,
                    String::from_utf8_lossy(&job.object)
                ));
                return;
            }
        };
        let (epoch, as_of) = job.start;
        let stands = self
            .proc()
            .pgs
            .get(&pg)
            .is_some_and(|slot| slot.pg.interval().epoch_started == epoch);
        if !stands {
            out.trace.push(format!(
                "{} {pg}: push overtaken by a new interval dropped",
                self.id
            ));
            return;
        }
        let states: Vec<(OsdId, Option<ObjectState>)> = match rebuilt {
            None => job.positions.iter().map(|(osd, _)| (*osd, None)).collect(),
            Some(states) => job
                .positions
                .iter()
                .map(|(osd, _)| *osd)
                .zip(states.into_iter().map(|(_, state)| Some(state)))
                .collect(),
        };
        for (target, state) in states {
            self.ec_counts.shard_pushes += u64::from(state.is_some());
            let push = PgMsg::Push(Push {
                from: self.id,
                interval_epoch: epoch,
                object: job.object.clone(),
                state,
                as_of,
            });
            if target == self.id {
                self.feed(pg, PgEvent::Peer(push), out);
                if self.process.is_none() {
                    return;
                }
            } else {
                out.sends
                    .push((Node::Osd(target), Msg::Pg { pg, msg: push }));
            }
        }
    }

    // ---- parity checks ----

    /// The daemon's `verify_parity`: each object's shards read window by
    /// window at its agreed version, re-encoded, and what disagrees
    /// reported to the core.
    pub(super) fn verify_parity(
        &mut self,
        pg: PgId,
        chunk: u64,
        checks: Vec<ParityCheck>,
        out: &mut Outbox,
    ) {
        let Some(interval) = self.ec_interval(pg) else {
            return;
        };
        let job = VerifyJob {
            chunk,
            interval,
            checks: checks.into(),
            shape: (0, 0),
            windows: std::collections::VecDeque::new(),
            found: Vec::new(),
        };
        self.verify_next(pg, Box::new(job), out);
    }

    /// Reads the current object's next window, or starts the next object,
    /// or reports once none is left.
    fn verify_next(&mut self, pg: PgId, mut job: Box<VerifyJob>, out: &mut Outbox) {
        let Some(shape) = job.interval.ec.clone() else {
            return;
        };
        let Ok(layout) = ec::layout_of(&shape) else {
            return;
        };
        loop {
            if let Some(window) = job.windows.front().cloned() {
                let Some(check) = job.checks.front() else {
                    return;
                };
                let version = check.version;
                let ranges: BTreeMap<u32, Vec<(u64, u64)>> = (0..layout.shards())
                    .map(|s| (s, vec![(window.start, window.end - window.start)]))
                    .collect();
                let interval = job.interval.clone();
                return self.fetch(
                    pg,
                    &interval,
                    version,
                    &ranges,
                    (false, &[]),
                    Then::Verify(job),
                    out,
                );
            }
            // The object just checked (if any) is done.
            if job.shape != (0, 0) {
                job.checks.pop_front();
                job.shape = (0, 0);
            }
            let Some(check) = job.checks.front() else {
                let (chunk, found) = (job.chunk, std::mem::take(&mut job.found));
                self.ec_counts.parity_findings += found.len() as u64;
                self.feed(pg, PgEvent::ParityChecked { chunk, found }, out);
                return;
            };
            let key = ObjectKey::new(check.object.clone());
            match ec::local_object(&self.store, collection_of(pg), &key, &layout) {
                Ok(Some(local)) if local.version == check.version => {
                    self.ec_counts.parity_checks += 1;
                    job.shape = (local.chunk, local.size);
                    job.windows = ec::parity_windows(&layout, local.chunk, local.size).into();
                    if job.windows.is_empty() {
                        job.shape = (1, 0);
                    }
                }
                _ => {
                    job.checks.pop_front();
                }
            }
        }
    }

    fn verify_fetched(
        &mut self,
        pg: PgId,
        mut job: Box<VerifyJob>,
        got: &BTreeMap<u32, Served>,
        out: &mut Outbox,
    ) {
        let (Some(shape), Some(check), Some(window)) = (
            job.interval.ec.clone(),
            job.checks.front(),
            job.windows.pop_front(),
        ) else {
            return;
        };
        let (layout, codec) = match (ec::layout_of(&shape), ec::codec_for(shape.k, shape.m)) {
            (Ok(layout), Ok(codec)) => (layout, codec),
            _ => return,
        };
        let verdict = ec::parity_verdict(
            &layout,
            &*codec,
            &job.interval,
            check,
            job.shape,
            &window,
            got,
        );
        match verdict {
            Ok(None) => {}
            Ok(Some(inconsistency)) => {
                job.found.push(inconsistency);
                job.windows.clear();
            }
            Err(why) => {
                out.trace.push(format!(
                    "{} {pg}: parity check of {} skipped: {why}",
                    self.id,
                    String::from_utf8_lossy(&check.object)
                ));
                job.windows.clear();
            }
        }
        self.verify_next(pg, job, out);
    }

    // ---- shard reads ----

    /// Starts shard reads of `key` at `version` (0: any) from each
    /// position's OSD, this one's own from its store, and carries on with
    /// `then` once all are answered or the daemon's timeout passed.
    #[allow(clippy::too_many_arguments)]
    fn fetch(
        &mut self,
        pg: PgId,
        interval: &Interval,
        version: u64,
        ranges: &BTreeMap<u32, Vec<(u64, u64)>>,
        (whole, strays): (bool, &[OsdId]),
        then: Then,
        out: &mut Outbox,
    ) {
        let ec_state = self.ec();
        let id = ec_state.next_fetch;
        ec_state.next_fetch += 1;
        let mut fetching = Fetching {
            pg,
            version,
            whole,
            waiting: BTreeMap::new(),
            got: BTreeMap::new(),
            failed: Vec::new(),
            then,
        };
        let up = self.proc().view.up_osds();
        let key = ObjectKey::new(fetching_key(&fetching.then));
        for (&shard, shard_ranges) in ranges {
            let asked = ShardAsk {
                fetch: id,
                interval,
                strays,
                key: &key,
                shard,
                ranges: shard_ranges,
            };
            self.ask_shard(&asked, &up, &mut fetching, out);
        }
        let done = fetching.waiting.is_empty();
        self.ec().fetches.insert(id, fetching);
        if done {
            self.fetch_done(id, out);
        } else {
            let timeout_ms = u64::try_from(SHARD_READ_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
            out.timers.push((
                Delay::Ms(timeout_ms),
                OsdTimer::ShardReadTimeout { fetch: id },
            ));
        }
    }

    /// One shard's read of a fetch: served from this OSD's store, failed
    /// at once (a hole, an OSD down), or asked of its OSD.
    fn ask_shard(
        &self,
        ask: &ShardAsk<'_>,
        up: &BTreeSet<OsdId>,
        fetching: &mut Fetching,
        out: &mut Outbox,
    ) {
        let (pg, shard) = (fetching.pg, ask.shard);
        let (version, whole) = (fetching.version, fetching.whole);
        let source = ec::source_of(ask.interval, ask.strays, shard);
        let (osd, asked) = (source.map(|s| s.0), source.map_or(shard, |s| s.1));
        if osd == Some(self.id) {
            let collection = collection_of(pg);
            let served = ec::serve_shard_read(
                &self.store,
                collection,
                ask.key,
                asked,
                version,
                ask.ranges,
                whole,
            );
            match served {
                Ok(served) => {
                    fetching.got.insert(shard, served);
                }
                Err(error) => fetching.failed.push((shard, error)),
            }
            return;
        }
        let Some(osd) = osd else {
            let error = ShardReadError::NotServing("a hole".into());
            fetching.failed.push((shard, error));
            return;
        };
        if !up.contains(&osd) {
            // The daemon's connection to a stopped OSD is refused.
            let error = ShardReadError::NotServing(format!("{osd} is down"));
            fetching.failed.push((shard, error));
            return;
        }
        let read = ShardRead {
            pg,
            from: self.id,
            interval_epoch: ask.interval.epoch_started,
            object: ByteBuf::from(ask.key.name.to_vec()),
            shard: asked,
            version,
            ranges: ask.ranges.to_vec(),
            whole,
        };
        let parts = if whole { 1 } else { ask.ranges.len() };
        fetching.waiting.insert(shard, parts);
        let request_id = request_id(ask.fetch, shard);
        out.sends
            .push((Node::Osd(osd), Msg::ShardRead { request_id, read }));
    }

    /// A peer's answer to one shard read.
    pub(super) fn shard_read_reply(
        &mut self,
        request_id: u64,
        reply: Result<ShardReadOk, ShardReadError>,
        data: &Bytes,
        out: &mut Outbox,
    ) {
        let (id, shard) = (
            request_id >> 8,
            u32::try_from(request_id & 0xff).unwrap_or(0),
        );
        let Some(fetching) = self.ec().fetches.get_mut(&id) else {
            return;
        };
        let Some(parts) = fetching.waiting.remove(&shard) else {
            return;
        };
        let want_parts = if fetching.whole { 1 } else { parts };
        match ec::served_of(fetching.version, want_parts, reply, data) {
            Ok(served) => {
                fetching.got.insert(shard, served);
            }
            Err(error) => fetching.failed.push((shard, error)),
        }
        if fetching.waiting.is_empty() {
            self.fetch_done(id, out);
        }
    }

    /// The daemon's shard read timeout passed: the reads not answered
    /// failed.
    pub(super) fn shard_read_timeout(&mut self, id: u64, out: &mut Outbox) {
        let Some(fetching) = self.ec().fetches.get_mut(&id) else {
            return;
        };
        let late = std::mem::take(&mut fetching.waiting);
        for shard in late.into_keys() {
            let error = ShardReadError::NotServing("timed out".into());
            fetching.failed.push((shard, error));
        }
        self.fetch_done(id, out);
    }

    fn fetch_done(&mut self, id: u64, out: &mut Outbox) {
        let Some(fetching) = self.ec().fetches.remove(&id) else {
            return;
        };
        let Fetching {
            pg,
            got,
            failed,
            then,
            ..
        } = fetching;
        match then {
            Then::Read(job) => self.read_fetched(pg, job, got, failed, out),
            Then::Delta(job, delta) => {
                let req = job.req;
                let reads = ec::layout_of(&job.shape)
                    .map(|layout| delta.reads(&layout).len())
                    .unwrap_or(usize::MAX);
                let complete = failed.is_empty() && got.len() == reads;
                if let Err(error) = self.delta_done(job, &delta, got, complete, out) {
                    self.ec_submit(req, Err(error), out);
                }
            }
            Then::Probe(job, plan, old) => {
                let mut mixed = false;
                for (shard, error) in failed {
                    if let (ShardReadError::Corrupt(_), Some(osd)) =
                        (&error, job.interval.osd_at(shard))
                    {
                        let epoch = job.interval.epoch_started;
                        self.report_unreadable(pg, epoch, osd, job.key.name.clone(), out);
                        mixed = true;
                    }
                }
                let outcome = if mixed {
                    Err(OpError::ObjectBusy)
                } else {
                    self.partial_finish(&job, &plan, &old, out)
                };
                if let Err(error) = outcome {
                    self.ec_submit(job.req, Err(error), out);
                }
            }
            Then::Push(job) => self.push_fetched(pg, job, got, failed, out),
            Then::Verify(job) => self.verify_fetched(pg, job, &got, out),
        }
    }

    /// The daemon's `serve_shard_read`: a primary's read of this OSD's
    /// shard, if this copy serves it.
    pub(super) fn serve_shard_read(
        &mut self,
        from: Node,
        request_id: u64,
        read: &ShardRead,
        out: &mut Outbox,
    ) {
        let answer = |reply, data| Msg::ShardReadReply {
            request_id,
            reply,
            data,
        };
        let total = read
            .ranges
            .iter()
            .map(|r| r.1)
            .fold(0u64, u64::saturating_add);
        if read.ranges.len() > ec::SHARD_READ_RANGES_MAX
            || total > u64::from(cairn_wire::limits::DATA_SIZE_BYTES_MAX)
        {
            let why = format!("{} ranges of {total} bytes", read.ranges.len());
            let reply = Err(ShardReadError::NotServing(why));
            out.sends.push((from, answer(reply, Bytes::new())));
            return;
        }
        let pg = read.pg;
        let admitted = admit_shard_read(
            self.proc().pgs.get(&pg).map(|s| &s.pg),
            read.from,
            read.interval_epoch,
            (read.shard, read.whole),
            &read.object,
        );
        if let Err(why) = admitted {
            let reply = Err(ShardReadError::NotServing(why));
            out.sends.push((from, answer(reply, Bytes::new())));
            return;
        }
        let key = ObjectKey::new(Bytes::copy_from_slice(&read.object));
        let served = ec::serve_shard_read(
            &self.store,
            collection_of(pg),
            &key,
            read.shard,
            read.version,
            &read.ranges,
            read.whole,
        );
        let (reply, data) = ec::shard_read_reply(served);
        out.sends.push((from, answer(reply, data)));
    }
}

impl SimOsd {
    /// A client's direct shard read, as the daemon's `client_shard_read`
    /// serves it: admitted before and after the store read.
    pub(super) fn serve_direct_read(
        &mut self,
        from: Node,
        request_id: u64,
        read: &ClientShardRead,
        out: &mut Outbox,
    ) {
        let now_ms = self.now_ms;
        let admit = |osd: &SimOsd| {
            let process = osd.proc();
            let core = process.pgs.get(&read.pg).map(|s| &s.pg);
            admit_direct_read(core, &process.view, read, now_ms)
        };
        let served = admit(self).and_then(|layout| {
            let key = ObjectKey::new(Bytes::copy_from_slice(&read.object));
            ec::serve_direct_part(
                &self.store,
                collection_of(read.pg),
                &key,
                &layout,
                read.shard,
                (read.offset, read.length, read.rows),
            )
        });
        let served = served.and_then(|part| admit(self).map(|_| part));
        if let Err(why) = &served {
            out.trace.push(format!(
                "{} declines a direct read of {} shard {}: {why}",
                self.id,
                String::from_utf8_lossy(&read.object),
                read.shard
            ));
        }
        let (reply, data) = match served {
            Ok((part, data)) => {
                self.ec_counts.direct_parts += 1;
                self.ec_counts.direct_rows += u64::from(read.rows);
                (Ok(part), data)
            }
            Err(why) => (Err(why), Bytes::new()),
        };
        let reply = Msg::DirectReadReply {
            request_id,
            reply,
            data,
        };
        out.sends.push((from, reply));
    }
}

/// The object a fetch reads.
fn fetching_key(then: &Then) -> Bytes {
    match then {
        Then::Read(job) => job.key.name.clone(),
        Then::Delta(job, _) | Then::Probe(job, ..) => job.key.name.clone(),
        Then::Push(job) => job.object.clone(),
        Then::Verify(job) => job
            .checks
            .front()
            .map(|c| c.object.clone())
            .unwrap_or_default(),
    }
}

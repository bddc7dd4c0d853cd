//! Simulated clients: each runs one operation at a time against the
//! primary its map computes, with `cairn-client`'s own retry policy
//! ([`cairn_client::retry::Retrier`]: same request id across attempts, so
//! OSDs deduplicate; map refetch on `Retry` and when the primary is
//! unreachable; doubling backoff, quick retries on a busy object; an
//! attempt limit and a deadline, after which the outcome is unknown), and
//! records every operation's invocation and outcome in the history.

use crate::linearizability::{
    ObjInput, ObjOutput, ObjectOp, Operation, Refusal, Snapshot, show_input, show_output,
};
use crate::net::{MapUpdate, Msg, Node};
use crate::rng::Rng;
use bytes::Bytes;
use cairn_client::ClientError;
use cairn_client::direct::{Assembled, Plan, assemble_direct, assemble_rows, plan};
use cairn_client::limits::ClientOptions;
use cairn_client::retry::{Decision, Retrier, Setback};
use cairn_osd::ReqId;
use cairn_osd::limits::OMAP_RANGE_ENTRIES_MAX;
use cairn_osd::map_view::MapView;
use cairn_proto::osd::{
    ClientOp, ClientReply, ClientShardRead, DirectPart, GuardWire, OpKind, OpOutput, ReqIdWire,
};
use cairn_types::Epoch;
use serde_bytes::ByteBuf;
use std::collections::BTreeMap;
use std::time::Duration;

/// The pool every client uses.
pub const POOL_NAME: &str = "sim";
/// How long one attempt waits for an answer before it is sent again (the
/// real client notices a broken connection; a lost message here is one).
pub const ATTEMPT_TIMEOUT_MS: u64 = 2_000;

/// One recorded operation, with the object it is on and wall times.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub object: Bytes,
    pub op: ObjectOp,
    pub call_ms: u64,
    pub ret_ms: Option<u64>,
}

/// Every client operation of a run, in invocation order. Times in the
/// operations are a logical clock that orders every invocation and return.
#[derive(Debug, Default)]
pub struct History {
    pub ops: Vec<Recorded>,
    clock: u64,
}

impl History {
    fn stamp(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Records an invocation; returns its index.
    pub fn invoke(&mut self, client: u32, object: Bytes, input: ObjInput, now_ms: u64) -> usize {
        let call = self.stamp();
        self.ops.push(Recorded {
            object,
            op: Operation {
                client: u64::from(client),
                input,
                output: ObjOutput::Unknown,
                call,
                ret: None,
            },
            call_ms: now_ms,
            ret_ms: None,
        });
        self.ops.len() - 1
    }

    /// Records the outcome of an operation (`Unknown`: it never returned).
    pub fn complete(&mut self, index: usize, output: ObjOutput, now_ms: u64) {
        let ret = match output {
            ObjOutput::Unknown => None,
            _ => Some(self.stamp()),
        };
        let recorded = &mut self.ops[index];
        recorded.op.output = output;
        recorded.op.ret = ret;
        recorded.ret_ms = ret.map(|_| now_ms);
    }

    /// The operations on each object.
    #[must_use]
    pub fn by_object(&self) -> BTreeMap<Bytes, Vec<ObjectOp>> {
        let mut out: BTreeMap<Bytes, Vec<ObjectOp>> = BTreeMap::new();
        for recorded in &self.ops {
            out.entry(recorded.object.clone())
                .or_default()
                .push(recorded.op.clone());
        }
        out
    }
}

/// What a client's timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientTimer {
    /// Start the next operation.
    Next,
    /// Send (or resend) the current operation.
    Send { attempt: u32 },
    /// The attempt got no answer in time.
    Timeout { attempt: u32 },
}

/// How clients behave in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub objects: Vec<Bytes>,
    /// Pause between one operation's end and the next one's start.
    pub think_ms_max: u64,
    /// Time one operation may take across its retries.
    pub op_deadline_ms: u64,
    /// The pool is erasure-coded: no omap (such pools have none), partial
    /// overwrites, and objects that span stripes.
    pub erasure_coded: bool,
}

#[derive(Debug)]
struct Current {
    index: usize,
    object: Bytes,
    input: ObjInput,
    request: Request,
    req: ReqId,
    started_ms: u64,
    /// When to try again: `cairn-client`'s policy, in virtual time.
    retrier: Retrier,
    attempt: u32,
    /// A data read of an erasure-coded object tried straight from the
    /// data shards, before the primary.
    direct: Option<Direct>,
}

/// A direct read in progress: its round (0: only the shards a ranged read
/// touches, if chunks are the stripe unit; 1: every data shard), the
/// shards still to answer and the parts so far.
#[derive(Debug)]
struct Direct {
    round: u32,
    plan: Plan,
    layout: cairn_ec::layout::StripeLayout,
    waiting: Vec<u32>,
    parts: Vec<(u32, DirectPart, Bytes)>,
}

/// One client.
#[derive(Debug)]
pub struct SimClient {
    pub id: u32,
    pub view: MapView,
    /// Issues new operations (off once the heal phase starts).
    pub active: bool,
    current: Option<Current>,
    next_tid: u64,
    /// The object versions this client last saw, for compare-and-set.
    seen_versions: BTreeMap<Bytes, u64>,
    rng: Rng,
    workload: Workload,
    /// Operations to run before the workload's random ones (the final
    /// reads of the verifying client).
    pub script: Vec<(Bytes, ObjInput)>,
    /// Reed–Solomon codes by `(k, m)`, for direct reads that decode.
    codecs: BTreeMap<(u32, u32), std::sync::Arc<cairn_ec::ReedSolomon>>,
}

/// What a client step wants done.
#[derive(Debug, Default)]
pub struct ClientOut {
    pub sends: Vec<(Node, Msg)>,
    pub timers: Vec<(u64, ClientTimer)>,
    pub anomalies: Vec<String>,
    pub trace: Vec<String>,
}

impl SimClient {
    #[must_use]
    pub fn new(id: u32, rng: Rng, workload: Workload) -> SimClient {
        SimClient {
            id,
            view: MapView::genesis(),
            active: false,
            current: None,
            next_tid: 1,
            seen_versions: BTreeMap::new(),
            rng,
            workload,
            script: Vec::new(),
            codecs: BTreeMap::new(),
        }
    }

    #[must_use]
    pub fn busy(&self) -> bool {
        self.current.is_some()
    }

    pub fn apply_map(&mut self, update: MapUpdate, out: &mut ClientOut) {
        match update {
            MapUpdate::Incrementals(incrementals) => {
                for inc in &incrementals {
                    if inc.epoch > self.view.epoch() && !self.view.advance(inc) {
                        let have = self.view.epoch();
                        out.sends.push((Node::Mon, Msg::GetMap { have }));
                        break;
                    }
                }
            }
            MapUpdate::Full { map, endpoints } => {
                if map.epoch > self.view.epoch() {
                    self.view.jump(map, endpoints);
                }
            }
        }
    }

    pub fn timer(
        &mut self,
        now_ms: u64,
        timer: ClientTimer,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        match timer {
            ClientTimer::Next => self.start_next(now_ms, history, out),
            ClientTimer::Send { attempt } => {
                if self.current.as_ref().is_some_and(|c| c.attempt == attempt) {
                    self.send(now_ms, history, out);
                }
            }
            ClientTimer::Timeout { attempt } => {
                let current = self.current.as_ref();
                if current.is_some_and(|c| c.attempt == attempt && c.direct.is_some()) {
                    out.trace.push(format!(
                        "client.{}: a direct read got no answer in time",
                        self.id
                    ));
                    return self.via_primary(now_ms, history, out);
                }
                if current.is_some_and(|c| c.attempt == attempt) {
                    // As the real client after a transport failure.
                    let setback = Setback::Again {
                        refetch_map: true,
                        why: "no answer in time".into(),
                    };
                    self.failed(now_ms, setback, history, out);
                }
            }
        }
    }

    fn start_next(&mut self, now_ms: u64, history: &mut History, out: &mut ClientOut) {
        if self.current.is_some() {
            return;
        }
        let (object, input) = if self.script.is_empty() {
            if !self.active {
                return;
            }
            self.random_op()
        } else {
            self.script.remove(0)
        };
        let request = request_of(&input, self.workload.erasure_coded);
        let index = history.invoke(self.id, object.clone(), input.clone(), now_ms);
        let req = ReqId {
            client: u64::from(self.id),
            tid: self.next_tid,
        };
        self.next_tid += 1;
        self.current = Some(Current {
            index,
            object,
            input,
            request,
            req,
            started_ms: now_ms,
            retrier: Retrier::new(&self.options()),
            attempt: 0,
            direct: None,
        });
        let direct = self
            .current
            .as_ref()
            .is_some_and(|c| matches!(c.input, ObjInput::ReadData { .. }));
        if direct && self.workload.erasure_coded {
            return self.send_direct(0, now_ms, history, out);
        }
        self.send(now_ms, history, out);
    }

    /// Sends a direct read of round `round` to the data shards' OSDs, as
    /// `Client::read` does; asks the primary instead when the map places
    /// no OSD at a data position.
    fn send_direct(&mut self, round: u32, now_ms: u64, history: &mut History, out: &mut ClientOut) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let ObjInput::ReadData { offset, length } = current.input else {
            return;
        };
        let map = &self.view.state.map;
        let target = map.pool_by_name(POOL_NAME).and_then(|pool| {
            let cairn_placement::Redundancy::Erasure {
                k, m, stripe_unit, ..
            } = pool.redundancy
            else {
                return None;
            };
            let layout = cairn_ec::layout::StripeLayout::new(k, m, u64::from(stripe_unit)).ok()?;
            let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, &current.object);
            let acting = self.view.placement.map_pg(pg).ok()?.acting;
            let acting: Vec<Option<cairn_types::OsdId>> = (0..layout.shards() as usize)
                .map(|i| acting.get(i).copied().flatten())
                .collect();
            let live: Vec<bool> = acting.iter().map(Option::is_some).collect();
            let plan = plan(&layout, &live, (offset, length), round)?;
            Some((layout, pg, acting, plan))
        });
        let Some((layout, pg, acting, plan)) = target else {
            return self.via_primary(now_ms, history, out);
        };
        let (shards, rows) = match &plan {
            Plan::Parts { shards, .. } => (shards.clone(), false),
            Plan::Rows { shards } => (shards.clone(), true),
        };
        let mut sends = Vec::new();
        for shard in &shards {
            let Some(Some(osd)) = acting.get(*shard as usize) else {
                return self.via_primary(now_ms, history, out);
            };
            let read = ClientShardRead {
                pg,
                epoch: self.view.epoch(),
                object: ByteBuf::from(current.object.to_vec()),
                shard: *shard,
                offset,
                length,
                rows,
            };
            let request_id = (current.req.tid << 16) | (u64::from(round) << 8) | u64::from(*shard);
            sends.push((Node::Osd(*osd), Msg::DirectRead { request_id, read }));
        }
        out.trace.push(format!(
            "client.{} {} tid {}: direct read round {round} of shards {shards:?}{} ({pg})",
            self.id,
            String::from_utf8_lossy(&current.object),
            current.req.tid,
            if rows { " (rows, to decode)" } else { "" },
        ));
        out.sends.extend(sends);
        current.direct = Some(Direct {
            round,
            plan,
            layout,
            waiting: shards,
            parts: Vec::new(),
        });
        let attempt = current.attempt;
        out.timers
            .push((ATTEMPT_TIMEOUT_MS, ClientTimer::Timeout { attempt }));
    }

    /// Gives up on a direct read: the primary answers, with the retry
    /// policy (a new attempt number, so the direct read's timer is void).
    fn via_primary(&mut self, now_ms: u64, history: &mut History, out: &mut ClientOut) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        current.direct = None;
        current.attempt += 1;
        self.send(now_ms, history, out);
    }

    /// A data shard's answer to direct read frame `request_id`.
    pub fn direct_reply(
        &mut self,
        now_ms: u64,
        request_id: u64,
        reply: Result<DirectPart, String>,
        data: Bytes,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let (tid, round, shard) = (
            request_id >> 16,
            (request_id >> 8) & 0xff,
            request_id & 0xff,
        );
        let Some(direct) = current.direct.as_mut() else {
            return;
        };
        let shard = u32::try_from(shard).unwrap_or(u32::MAX);
        if tid != current.req.tid
            || round != u64::from(direct.round)
            || !direct.waiting.contains(&shard)
        {
            return;
        }
        let part = match reply {
            Ok(part) => part,
            Err(why) => {
                out.trace.push(format!(
                    "client.{} tid {tid}: shard {shard} declines a direct read: {why}",
                    self.id
                ));
                return self.via_primary(now_ms, history, out);
            }
        };
        direct.waiting.retain(|s| *s != shard);
        direct.parts.push((shard, part, data));
        if !direct.waiting.is_empty() {
            return;
        }
        let ObjInput::ReadData { offset, length } = current.input else {
            return;
        };
        let layout = direct.layout;
        let assembled = match &direct.plan {
            Plan::Parts { subset, .. } => {
                assemble_direct(&layout, (offset, length), &direct.parts, *subset)
            }
            Plan::Rows { .. } => {
                let codec = match self.codecs.entry((layout.k, layout.m)) {
                    std::collections::btree_map::Entry::Occupied(e) => Some(e.get().clone()),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        cairn_ec::ReedSolomon::new(layout.k as usize, layout.m as usize)
                            .ok()
                            .map(|c| e.insert(std::sync::Arc::new(c)).clone())
                    }
                };
                match codec {
                    Some(codec) => assemble_rows(&layout, &*codec, (offset, length), &direct.parts),
                    None => Assembled::Refused,
                }
            }
        };
        match assembled {
            Assembled::Done(Ok(bytes)) => {
                self.finish(now_ms, ObjOutput::Data(Some(bytes)), history, out)
            }
            Assembled::Done(Err(ClientError::NotFound)) => {
                self.finish(now_ms, ObjOutput::Data(None), history, out);
            }
            Assembled::SmallerChunk => self.send_direct(1, now_ms, history, out),
            Assembled::Done(Err(_)) | Assembled::Refused => {
                out.trace.push(format!(
                    "client.{} tid {tid}: direct parts do not agree",
                    self.id
                ));
                self.via_primary(now_ms, history, out);
            }
        }
    }

    fn random_op(&mut self) -> (Bytes, ObjInput) {
        if self.workload.erasure_coded {
            return self.random_ec_op();
        }
        let rng = &mut self.rng;
        let object = self.workload.objects[rng.index(self.workload.objects.len())].clone();
        let unique = format!("c{}t{}", self.id, self.next_tid);
        let data = Bytes::from(unique.clone());
        let key = Bytes::from(format!("k{}", rng.below(4)));
        let input = match rng.below(100) {
            0..25 => ObjInput::WriteFull(data),
            25..50 => ObjInput::Read,
            50..60 => {
                let seen = self.seen_versions.get(&object).copied().unwrap_or(0);
                // Mostly the version last seen; sometimes a stale guess.
                let expect = if rng.below(4) == 0 {
                    seen.saturating_sub(rng.below(3))
                } else {
                    seen
                };
                ObjInput::CompareAndSet { expect, data }
            }
            60..65 => ObjInput::Remove,
            65..77 => ObjInput::OmapSet(BTreeMap::from([(key, data)])),
            77..82 => ObjInput::OmapRemove(vec![key]),
            82..92 => ObjInput::OmapGet(vec![key, Bytes::from_static(b"k0")]),
            _ => ObjInput::SetXattr {
                name: Bytes::from(format!("x{}", rng.below(2))),
                value: data,
            },
        };
        (object, input)
    }

    /// An operation on an erasure-coded pool: no omap; partial overwrites
    /// (within the object, across its end, past it) and whole writes of
    /// sizes from a few bytes to a few stripes, so that small objects,
    /// restriping, parity deltas and stripe rewrites all happen.
    fn random_ec_op(&mut self) -> (Bytes, ObjInput) {
        let rng = &mut self.rng;
        let object = self.workload.objects[rng.index(self.workload.objects.len())].clone();
        let unique = format!("c{}t{};", self.id, self.next_tid);
        let sized = |rng: &mut Rng| {
            let len = match rng.below(4) {
                0 => unique.len() as u64,
                1 => rng.range(1, 300),
                2 => rng.range(300, 5_000),
                _ => rng.range(5_000, 20_000),
            };
            let len = usize::try_from(len).unwrap_or(0);
            Bytes::from(unique.bytes().cycle().take(len).collect::<Vec<u8>>())
        };
        let input = match rng.below(100) {
            0..20 => ObjInput::WriteFull(sized(rng)),
            20..33 => ObjInput::Read,
            33..45 => {
                let offset = match rng.below(3) {
                    0 => 0,
                    1 => rng.range(0, 5_000),
                    _ => rng.range(0, 24_000),
                };
                let length = match rng.below(3) {
                    0 => None,
                    1 => Some(rng.range(1, 300)),
                    _ => Some(rng.range(1, 20_000)),
                };
                ObjInput::ReadData { offset, length }
            }
            45..53 => {
                let seen = self.seen_versions.get(&object).copied().unwrap_or(0);
                let expect = if rng.below(4) == 0 {
                    seen.saturating_sub(rng.below(3))
                } else {
                    seen
                };
                ObjInput::CompareAndSet {
                    expect,
                    data: sized(rng),
                }
            }
            53..58 => ObjInput::Remove,
            58..90 => {
                let offset = match rng.below(3) {
                    0 => rng.range(0, 300),
                    1 => rng.range(0, 5_000),
                    _ => rng.range(0, 24_000),
                };
                let data = if rng.below(2) == 0 {
                    Bytes::from(unique.clone())
                } else {
                    sized(rng)
                };
                ObjInput::Write { offset, data }
            }
            _ => ObjInput::SetXattr {
                name: Bytes::from(format!("x{}", rng.below(2))),
                value: Bytes::from(unique.clone()),
            },
        };
        (object, input)
    }

    fn refetch(&self, out: &mut ClientOut) {
        let have = self.view.epoch();
        out.sends.push((Node::Mon, Msg::GetMap { have }));
    }

    /// The real client's options, with this workload's deadline.
    fn options(&self) -> ClientOptions {
        ClientOptions {
            op_deadline: Duration::from_millis(self.workload.op_deadline_ms),
            ..ClientOptions::default()
        }
    }

    /// An attempt failed with `setback`: the retry policy decides.
    fn failed(
        &mut self,
        now_ms: u64,
        setback: Setback,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let elapsed = Duration::from_millis(now_ms.saturating_sub(current.started_ms));
        let decision = current.retrier.failed(setback, elapsed);
        self.decided(now_ms, decision, history, out);
    }

    /// Carries out the retry policy's decision: send again later (after a
    /// map refetch, if it says so), or end the operation.
    fn decided(
        &mut self,
        now_ms: u64,
        decision: Decision,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        match decision {
            Decision::Retry {
                refetch_map,
                after,
                why,
            } => {
                out.trace.push(format!(
                    "client.{} {} tid {}: again in {after:?}{}: {why}",
                    self.id,
                    String::from_utf8_lossy(&current.object),
                    current.req.tid,
                    if refetch_map { " with a new map" } else { "" },
                ));
                current.attempt += 1;
                let attempt = current.attempt;
                let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                out.timers.push((after_ms, ClientTimer::Send { attempt }));
                if refetch_map {
                    self.refetch(out);
                }
            }
            Decision::GiveUp(error) => {
                let output = match (error, &current.input) {
                    // Attempts or time ran out: an earlier attempt may
                    // have taken effect.
                    (ClientError::GaveUp { .. }, _) => ObjOutput::Unknown,
                    (ClientError::NotFound, ObjInput::Read) => ObjOutput::Read(None),
                    (ClientError::NotFound, ObjInput::OmapGet(_)) => ObjOutput::Omap(None),
                    (ClientError::NotFound, ObjInput::ReadData { .. }) => ObjOutput::Data(None),
                    // As the daemon answers a logged refusal
                    // (`refusal_error`): what the ops implied, or the
                    // request's own guard by index.
                    (ClientError::NotFound, input) if is_write(input) => {
                        ObjOutput::Refused(Refusal::NotFound)
                    }
                    (
                        ClientError::CompareFailed { guard: 0, .. },
                        ObjInput::CompareAndSet { .. },
                    ) => ObjOutput::Refused(Refusal::VersionMismatch),
                    (error, input) => {
                        out.anomalies.push(format!(
                            "client.{} got {error:?} for {} (req {:?})",
                            self.id,
                            brief(input, show_input),
                            current.req
                        ));
                        ObjOutput::Unknown
                    }
                };
                self.finish(now_ms, output, history, out);
            }
        }
    }

    /// Sends the current operation to its primary.
    fn send(&mut self, now_ms: u64, history: &mut History, out: &mut ClientOut) {
        let Some(current) = self.current.as_ref() else {
            return;
        };
        let attempt = current.attempt;
        let target = self
            .view
            .state
            .map
            .pool_by_name(POOL_NAME)
            .and_then(|pool| {
                let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, &current.object);
                let primary = self.view.placement.map_pg(pg).ok()?.primary?;
                Some((pg, primary))
            });
        let Some((pg, primary)) = target else {
            let setback = Setback::Again {
                refetch_map: true,
                why: "no primary for the op".into(),
            };
            return self.failed(now_ms, setback, history, out);
        };
        let op = ClientOp {
            pg,
            epoch: self.view.epoch(),
            req: ReqIdWire {
                client: current.req.client,
                tid: current.req.tid,
            },
            object: ByteBuf::from(current.object.to_vec()),
            guards: current.request.guards.clone(),
            ops: current.request.ops.clone(),
            full_try: false,
        };
        // The request's frame id is its tid, the same in every attempt, so
        // an answer to an earlier attempt still counts (the PG answers a
        // resent write from its log anyway).
        let request = Msg::Op {
            request_id: current.req.tid,
            op,
            data: current.request.data.clone().into(),
        };
        out.trace.push(format!(
            "client.{} {} tid {} attempt {attempt} -> {primary} ({pg}, epoch {})",
            self.id,
            String::from_utf8_lossy(&current.object),
            current.req.tid,
            self.view.epoch().0
        ));
        out.sends.push((Node::Osd(primary), request));
        out.timers
            .push((ATTEMPT_TIMEOUT_MS, ClientTimer::Timeout { attempt }));
    }

    fn finish(
        &mut self,
        now_ms: u64,
        output: ObjOutput,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.take() else {
            return;
        };
        let seen = match &output {
            ObjOutput::Written(_) if current.input == ObjInput::Remove => Some(0),
            ObjOutput::Written(v) => Some(*v),
            ObjOutput::Read(Some(snapshot)) => Some(snapshot.version),
            ObjOutput::Read(None)
            | ObjOutput::Omap(None)
            | ObjOutput::Refused(Refusal::NotFound) => Some(0),
            _ => None,
        };
        if let Some(version) = seen {
            self.seen_versions.insert(current.object.clone(), version);
        }
        out.trace.push(format!(
            "client.{} {} tid {}: {} -> {}",
            self.id,
            String::from_utf8_lossy(&current.object),
            current.req.tid,
            brief(&current.input, show_input),
            brief(&output, show_output)
        ));
        history.complete(current.index, output, now_ms);
        let think = self.rng.range(0, self.workload.think_ms_max);
        out.timers.push((think, ClientTimer::Next));
    }

    /// An OSD's answer to request frame `request_id`.
    pub fn reply(
        &mut self,
        now_ms: u64,
        request_id: u64,
        reply: ClientReply,
        data: &Bytes,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.as_ref() else {
            return;
        };
        if current.req.tid != request_id {
            // An answer to an attempt of an operation given up on.
            return;
        }
        let req = current.req;
        let output = match reply.result {
            Ok(outputs) => {
                match output_of(&current.input, outputs, data, self.workload.erasure_coded) {
                    Ok(output) => output,
                    Err(why) => {
                        out.anomalies.push(format!(
                            "client.{} got {why} for {} (req {req:?})",
                            self.id,
                            brief(&current.input, show_input)
                        ));
                        ObjOutput::Unknown
                    }
                }
            }
            Err(error) => {
                let Some(current) = self.current.as_mut() else {
                    return;
                };
                let elapsed = Duration::from_millis(now_ms.saturating_sub(current.started_ms));
                let decision = current.retrier.answered(error, elapsed);
                return self.decided(now_ms, decision, history, out);
            }
        };
        self.finish(now_ms, output, history, out);
    }

    /// The epoch of this client's map.
    #[must_use]
    pub fn epoch(&self) -> Epoch {
        self.view.epoch()
    }
}

/// `value` for the trace: as it debug-prints, or in short if that is long
/// (the data of an erasure-coded workload's writes runs to kilobytes).
fn brief<T: std::fmt::Debug>(value: &T, short: fn(&T) -> String) -> String {
    let full = format!("{value:?}");
    if full.len() <= 200 {
        full
    } else {
        short(value)
    }
}

fn is_write(input: &ObjInput) -> bool {
    !matches!(
        input,
        ObjInput::Read | ObjInput::OmapGet(_) | ObjInput::ReadData { .. }
    )
}

/// A client request as `cairn-client` sends it: guards, ops and the data
/// segment of a `ClientOp`.
#[derive(Clone, Debug)]
struct Request {
    guards: Vec<GuardWire>,
    ops: Vec<OpKind>,
    data: Bytes,
}

/// The request of an operation. A read asks for the whole object (its
/// version, data, xattrs and omap: none in an erasure-coded pool) in one
/// request, as one state of it.
fn request_of(input: &ObjInput, erasure_coded: bool) -> Request {
    let one = |op: OpKind| Request {
        guards: Vec::new(),
        ops: vec![op],
        data: Bytes::new(),
    };
    let buf = |b: &Bytes| ByteBuf::from(b.to_vec());
    let full = |data: &Bytes| Request {
        data: data.clone(),
        ..one(OpKind::WriteFull {
            len: data.len() as u64,
        })
    };
    match input {
        ObjInput::WriteFull(data) => full(data),
        ObjInput::CompareAndSet { expect, data } => Request {
            guards: vec![GuardWire::Version(*expect)],
            ..full(data)
        },
        ObjInput::Write { offset, data } => Request {
            data: data.clone(),
            ..one(OpKind::Write {
                offset: *offset,
                len: data.len() as u64,
            })
        },
        ObjInput::Remove => one(OpKind::Remove),
        ObjInput::SetXattr { name, value } => one(OpKind::SetXattr {
            name: buf(name),
            value: buf(value),
        }),
        ObjInput::OmapSet(entries) => one(OpKind::OmapSet {
            entries: entries.iter().map(|(k, v)| (buf(k), buf(v))).collect(),
        }),
        ObjInput::OmapRemove(keys) => one(OpKind::OmapRemove {
            keys: keys.iter().map(buf).collect(),
        }),
        ObjInput::OmapGet(keys) => one(OpKind::OmapGet {
            keys: keys.iter().map(buf).collect(),
        }),
        ObjInput::ReadData { offset, length } => one(OpKind::Read {
            offset: *offset,
            length: *length,
        }),
        ObjInput::Read => {
            let mut ops = vec![
                OpKind::Stat,
                OpKind::Read {
                    offset: 0,
                    length: None,
                },
                OpKind::GetXattrs,
            ];
            if !erasure_coded {
                ops.push(OpKind::OmapGetRange {
                    after: None,
                    limit: OMAP_RANGE_ENTRIES_MAX,
                });
            }
            Request {
                ops,
                ..one(OpKind::Stat)
            }
        }
    }
}

fn unbufs(entries: Vec<(ByteBuf, ByteBuf)>) -> BTreeMap<Bytes, Bytes> {
    entries
        .into_iter()
        .map(|(k, v)| (Bytes::from(k.into_vec()), Bytes::from(v.into_vec())))
        .collect()
}

/// What a successful answer says about the operation; `Err`: an answer
/// that does not fit the request (an OSD or simulator bug).
fn output_of(
    input: &ObjInput,
    outputs: Vec<OpOutput>,
    data: &Bytes,
    erasure_coded: bool,
) -> Result<ObjOutput, String> {
    let mut outputs = outputs.into_iter();
    let output = match (input, outputs.next(), outputs.next(), outputs.next()) {
        (
            ObjInput::Read,
            Some(OpOutput::Stat { version, .. }),
            Some(OpOutput::Data { len }),
            Some(OpOutput::Xattrs(xattrs)),
        ) => {
            let omap = if erasure_coded {
                Vec::new()
            } else {
                let Some(OpOutput::Omap(omap)) = outputs.next() else {
                    return Err("a read answer without the omap".into());
                };
                omap
            };
            if u64::try_from(data.len()).ok() != Some(len) {
                return Err(format!("{len} bytes announced, {} sent", data.len()));
            }
            ObjOutput::Read(Some(Snapshot {
                version,
                data: data.clone(),
                xattrs: unbufs(xattrs),
                omap: unbufs(omap),
            }))
        }
        (ObjInput::ReadData { .. }, Some(OpOutput::Data { len }), None, None) => {
            if u64::try_from(data.len()).ok() != Some(len) {
                return Err(format!("{len} bytes announced, {} sent", data.len()));
            }
            ObjOutput::Data(Some(data.clone()))
        }
        (ObjInput::OmapGet(_), Some(OpOutput::Omap(entries)), None, None) => {
            ObjOutput::Omap(Some(unbufs(entries)))
        }
        (input, Some(OpOutput::Written { object_version }), None, None) if is_write(input) => {
            ObjOutput::Written(object_version)
        }
        (_, first, ..) => return Err(format!("an answer starting {first:?}")),
    };
    if outputs.next().is_some() {
        return Err("more outputs than ops".into());
    }
    Ok(output)
}

//! Simulated clients: each runs one operation at a time against the
//! primary its map computes, retrying as `cairn-client` does (same request
//! id across attempts, so OSDs deduplicate; map refetch on `Retry`; backoff
//! on busy answers; a deadline after which the outcome is unknown), and
//! records every operation's invocation and outcome in the history.

use crate::linearizability::{ObjInput, ObjOutput, ObjectOp, Operation, Refusal};
use crate::net::{ClientRequest, MapUpdate, Msg, Node, OpBody, OpResult};
use crate::rng::Rng;
use bytes::Bytes;
use cairn_osd::log::err_code;
use cairn_osd::map_view::MapView;
use cairn_osd::{Guard, ReqId};
use cairn_proto::osd::OpKind;
use cairn_types::Epoch;
use serde_bytes::ByteBuf;
use std::collections::BTreeMap;

/// The pool every client uses.
pub const POOL_NAME: &str = "sim";
/// First wait after a busy or retry answer; doubles up to the maximum
/// (`cairn-client`'s defaults).
pub const BACKOFF_MS_INITIAL: u64 = 20;
pub const BACKOFF_MS_MAX: u64 = 1_000;
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
}

#[derive(Debug)]
struct Current {
    index: usize,
    object: Bytes,
    input: ObjInput,
    body: OpBody,
    req: ReqId,
    deadline_ms: u64,
    backoff_ms: u64,
    attempt: u32,
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
                if self.current.as_ref().is_some_and(|c| c.attempt == attempt) {
                    self.refetch(out);
                    self.bump_attempt();
                    self.send(now_ms, history, out);
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
        let body = body_of(&object, &input);
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
            body,
            req,
            deadline_ms: now_ms + self.workload.op_deadline_ms,
            backoff_ms: BACKOFF_MS_INITIAL,
            attempt: 0,
        });
        self.send(now_ms, history, out);
    }

    fn random_op(&mut self) -> (Bytes, ObjInput) {
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

    fn refetch(&self, out: &mut ClientOut) {
        let have = self.view.epoch();
        out.sends.push((Node::Mon, Msg::GetMap { have }));
    }

    fn bump_attempt(&mut self) {
        if let Some(current) = self.current.as_mut() {
            current.attempt += 1;
        }
    }

    /// Sends the current operation to its primary, or gives up past the
    /// deadline (the outcome is then unknown).
    fn send(&mut self, now_ms: u64, history: &mut History, out: &mut ClientOut) {
        let Some(current) = self.current.as_ref() else {
            return;
        };
        if now_ms >= current.deadline_ms {
            self.finish(now_ms, ObjOutput::Unknown, history, out);
            return;
        }
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
            out.trace
                .push(format!("client.{}: no primary for the op", self.id));
            self.refetch(out);
            self.backoff(out);
            return;
        };
        let request = ClientRequest {
            pg,
            epoch: self.view.epoch(),
            req: current.req,
            object: current.object.clone(),
            body: current.body.clone(),
        };
        out.trace.push(format!(
            "client.{} {} tid {} attempt {attempt} -> {primary} ({pg}, epoch {})",
            self.id,
            String::from_utf8_lossy(&current.object),
            current.req.tid,
            self.view.epoch().0
        ));
        out.sends.push((Node::Osd(primary), Msg::Op(request)));
        out.timers
            .push((ATTEMPT_TIMEOUT_MS, ClientTimer::Timeout { attempt }));
    }

    /// Waits, then sends again.
    fn backoff(&mut self, out: &mut ClientOut) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        current.attempt += 1;
        let wait = current.backoff_ms;
        current.backoff_ms = (current.backoff_ms * 2).min(BACKOFF_MS_MAX);
        out.timers.push((
            wait,
            ClientTimer::Send {
                attempt: current.attempt,
            },
        ));
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
            "client.{} {} tid {}: {:?} -> {:?}",
            self.id,
            String::from_utf8_lossy(&current.object),
            current.req.tid,
            current.input,
            output
        ));
        history.complete(current.index, output, now_ms);
        let think = self.rng.range(0, self.workload.think_ms_max);
        out.timers.push((think, ClientTimer::Next));
    }

    /// An OSD's answer.
    pub fn reply(
        &mut self,
        now_ms: u64,
        req: ReqId,
        result: OpResult,
        history: &mut History,
        out: &mut ClientOut,
    ) {
        let Some(current) = self.current.as_ref() else {
            return;
        };
        if current.req != req {
            // An answer to an attempt of an operation given up on.
            return;
        }
        let object = String::from_utf8_lossy(&current.object).into_owned();
        let output = match (result, &current.input) {
            (OpResult::Retry(why), _) => {
                out.trace.push(format!(
                    "client.{} {object} tid {}: retry: {why}",
                    self.id, req.tid
                ));
                self.refetch(out);
                self.backoff(out);
                return;
            }
            (OpResult::Wait(why), _) => {
                out.trace.push(format!(
                    "client.{} {object} tid {}: wait: {why}",
                    self.id, req.tid
                ));
                self.backoff(out);
                return;
            }
            (OpResult::Snapshot(snapshot), ObjInput::Read) => ObjOutput::Read(snapshot),
            (OpResult::Omap(map), ObjInput::OmapGet(_)) => ObjOutput::Omap(map),
            (OpResult::Written(v), input) if is_write(input) => ObjOutput::Written(v),
            (OpResult::Refused(code), input) if is_write(input) => {
                // As the daemon answers it (`refusal_error`): what the ops
                // implied, or the request's own guard by index.
                match err_code::split(code) {
                    (err_code::NOT_FOUND, None) => ObjOutput::Refused(Refusal::NotFound),
                    (err_code::VERSION_MISMATCH, Some(0)) => {
                        ObjOutput::Refused(Refusal::VersionMismatch)
                    }
                    _ => {
                        out.anomalies.push(format!(
                            "client.{} got refusal {code:#x} for {input:?} (req {req:?})",
                            self.id
                        ));
                        ObjOutput::Unknown
                    }
                }
            }
            (result, input) => {
                out.anomalies.push(format!(
                    "client.{} got {result:?} for {input:?} (req {req:?})",
                    self.id
                ));
                ObjOutput::Unknown
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

fn is_write(input: &ObjInput) -> bool {
    !matches!(input, ObjInput::Read | ObjInput::OmapGet(_))
}

/// The request body of an operation, built as the daemon builds store ops
/// from wire ops (`cairn_osd::codec::plan_write`).
fn body_of(object: &Bytes, input: &ObjInput) -> OpBody {
    let write = |kind: OpKind, data: Bytes, guard: Option<Guard>| {
        let plan = cairn_osd::codec::plan_write(object, &[kind], data.into()).expect("a write op");
        OpBody::Write {
            plan,
            guards: guard.into_iter().collect(),
        }
    };
    let buf = |b: &Bytes| ByteBuf::from(b.to_vec());
    let full = |data: &Bytes| OpKind::WriteFull {
        len: data.len() as u64,
    };
    match input {
        ObjInput::WriteFull(data) => write(full(data), data.clone(), None),
        ObjInput::CompareAndSet { expect, data } => {
            write(full(data), data.clone(), Some(Guard::Version(*expect)))
        }
        ObjInput::Remove => write(OpKind::Remove, Bytes::new(), None),
        ObjInput::SetXattr { name, value } => {
            let op = OpKind::SetXattr {
                name: buf(name),
                value: buf(value),
            };
            write(op, Bytes::new(), None)
        }
        ObjInput::OmapSet(entries) => {
            let entries = entries.iter().map(|(k, v)| (buf(k), buf(v))).collect();
            write(OpKind::OmapSet { entries }, Bytes::new(), None)
        }
        ObjInput::OmapRemove(keys) => {
            let keys = keys.iter().map(buf).collect();
            write(OpKind::OmapRemove { keys }, Bytes::new(), None)
        }
        ObjInput::OmapGet(keys) => OpBody::OmapGet(keys.clone()),
        ObjInput::Read => OpBody::Read,
    }
}

//! [`Client`]: the map follower and request executor.

use crate::direct::{Assembled, Plan, assemble_direct, assemble_rows, plan};
use crate::error::ClientError;
use crate::limits::{
    ClientOptions, DIRECT_READ_BYTES_MAX, DIRECT_READ_TIMEOUT, MAP_SUBSCRIBE_RETRY,
    MAP_SUBSCRIBE_WAIT,
};
use crate::ops::{Guard, ObjectStat, ReadOp, ReadResult, WriteOp, read_results};
use crate::retry::{Decision, Retrier, Setback};
use bytes::Bytes;
use cairn_placement::Redundancy;
use cairn_placement::{ClusterMap, Placement};
use cairn_proto::limits::{GUARDS_PER_OP_MAX, OPS_PER_REQUEST_MAX};
use cairn_proto::map::OsdEndpoint;
use cairn_proto::mon::MapFetch;
use cairn_proto::mon::{MonClient, MonCommand, Reply};
use cairn_proto::osd::{
    ClientOp, ClientReply, ClientShardRead, ClientShardReadReply, DirectPart, GuardWire, OpKind,
    OpOutput, PgAction, PgCommand, PgCommandReply, ReqIdWire,
};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{ConnectOptions, Connection};
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A request's identity, kept across its retries so OSDs deduplicate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReqId {
    /// Random per [`Client`].
    pub client: u64,
    /// Increments per request (not per attempt).
    pub tid: u64,
}

/// Which bytes of an object to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadRange {
    pub offset_bytes: u64,
    /// `None`: to the end of the object.
    pub length_bytes: Option<u64>,
}

/// Where a listing continues: a PG of the pool and the last name seen in
/// it. Valid while the pool's `pg_num` stays the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListCursor {
    pub pg_seed: u32,
    pub after: Option<Bytes>,
}

/// One page of a pool listing: names in (PG, hash, name) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub names: Vec<Bytes>,
    /// Pass back to continue; `None` once every PG was listed.
    pub next: Option<ListCursor>,
}

/// What one operation addresses: an object, or a whole PG (listing).
#[derive(Clone, Copy, Debug)]
enum Target<'a> {
    Object(&'a [u8]),
    Pg(u32),
}

/// One request as `execute` runs it.
#[derive(Clone, Debug)]
struct Request<'a> {
    pool: &'a str,
    target: Target<'a>,
    guards: Vec<GuardWire>,
    ops: Vec<OpKind>,
    data: Bytes,
}

/// The map as last fetched, with what is derived from it.
#[derive(Debug)]
struct MapView {
    map: Arc<ClusterMap>,
    placement: Placement,
    endpoints: HashMap<OsdId, OsdEndpoint>,
    fetched_at: Instant,
}

#[derive(Debug)]
struct Inner {
    mon_addr: String,
    options: ClientOptions,
    client_id: u64,
    tid_next: AtomicU64,
    mon: tokio::sync::Mutex<Option<MonClient>>,
    view: Mutex<Option<Arc<MapView>>>,
    /// One connection per OSD address.
    connections: Mutex<HashMap<String, Connection>>,
    /// When the map subscription last answered (`None`: not following).
    followed_at: Mutex<Option<Instant>>,
    /// Reads the shards answered directly, and reads tried directly that
    /// the primary answered.
    direct_reads: AtomicU64,
    direct_fallbacks: AtomicU64,
    direct_decoded: AtomicU64,
    /// Reed–Solomon codes by `(k, m)`, for direct reads that decode.
    codecs: Mutex<BTreeMap<(u32, u32), Arc<cairn_ec::ReedSolomon>>>,
}

/// How the client's direct shard reads went since it connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectReadStats {
    /// Reads the OSDs holding the data shards answered.
    pub direct: u64,
    /// Reads tried directly that went to the primary (a shard declined,
    /// a write to the object was not yet committed, the parts disagreed).
    pub via_primary: u64,
    /// Of the direct reads, those that decoded a data shard whose
    /// position had no OSD from the stripes of `k` others.
    pub decoded: u64,
}

/// A connection to a Cairn cluster; clone it freely (clones share the map,
/// the connections and the request-id sequence).
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// How one attempt ended.
enum Attempt {
    Done(Vec<OpOutput>, Bytes),
    /// Worth retrying; `refetch` asks for a fresh map first.
    Again {
        refetch: bool,
        why: String,
    },
    /// The object is busy for a moment (being recovered, scrubbed, or a
    /// guarded write waits for writes to settle): retry soon (see
    /// [`crate::retry`]).
    Soon(String),
    Fail(ClientError),
}

fn random_u64() -> u64 {
    // RandomState is seeded from the OS's randomness per process; mixing in
    // time and pid keeps two clients in one process distinct too.
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the data consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// Connects to the monitor at `mon_addr` and fetches the map.
    ///
    /// # Errors
    /// [`ClientError::Mon`] if the monitor cannot be reached.
    pub async fn connect(mon_addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(mon_addr, ClientOptions::default()).await
    }

    /// As [`Client::connect`], with explicit retry options.
    ///
    /// # Errors
    /// [`ClientError::Mon`] if the monitor cannot be reached.
    pub async fn connect_with(
        mon_addr: &str,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let client = Client {
            inner: Arc::new(Inner {
                mon_addr: mon_addr.to_owned(),
                options,
                client_id: random_u64(),
                tid_next: AtomicU64::new(1),
                mon: tokio::sync::Mutex::new(None),
                view: Mutex::new(None),
                connections: Mutex::new(HashMap::new()),
                followed_at: Mutex::new(None),
                direct_reads: AtomicU64::new(0),
                direct_fallbacks: AtomicU64::new(0),
                direct_decoded: AtomicU64::new(0),
                codecs: Mutex::new(BTreeMap::new()),
            }),
        };
        client.refresh_map().await?;
        if client.inner.options.follow_map {
            tokio::spawn(follow_map(Arc::downgrade(&client.inner)));
        }
        Ok(client)
    }

    /// This client's random id (the `client` of every [`ReqId`]).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.client_id
    }

    /// The map as last fetched.
    ///
    /// # Errors
    /// [`ClientError::Mon`] if no map was ever fetched and fetching fails.
    pub async fn map(&self) -> Result<Arc<ClusterMap>, ClientError> {
        Ok(self.view(false).await?.map.clone())
    }

    /// Fetches the whole map from the monitor now.
    ///
    /// # Errors
    /// [`ClientError::Mon`] on a monitor or transport failure.
    pub async fn refresh_map(&self) -> Result<Arc<ClusterMap>, ClientError> {
        Ok(self.view(true).await?.map.clone())
    }

    /// Every OSD's endpoint (address and reported capacity) as of the last
    /// map fetch, by OSD id.
    ///
    /// # Errors
    /// [`ClientError::Mon`] if no map was ever fetched and fetching fails.
    pub async fn endpoints(&self) -> Result<BTreeMap<OsdId, OsdEndpoint>, ClientError> {
        let view = self.view(false).await?;
        Ok(view
            .endpoints
            .iter()
            .map(|(id, endpoint)| (*id, endpoint.clone()))
            .collect())
    }

    /// Runs a monitor command (pool create, OSD out, ...).
    ///
    /// # Errors
    /// The command's error, or a transport error.
    pub async fn mon_command(&self, command: MonCommand) -> Result<Reply, ClientError> {
        let mon = self.mon().await?;
        match mon.command(command).await {
            Ok(reply) => Ok(reply),
            Err(error) => {
                if matches!(error, cairn_proto::mon::MonError::Wire(_)) {
                    *self.inner.mon.lock().await = None;
                }
                Err(error.into())
            }
        }
    }

    /// Every OSD's latest statistics (space, client I/O rates, PG states)
    /// as the monitor last heard them.
    ///
    /// # Errors
    /// A monitor or transport error.
    pub async fn osd_stats(&self) -> Result<Vec<cairn_proto::mon::OsdStatsReport>, ClientError> {
        let mon = self.mon().await?;
        match mon.stats().await {
            Ok(reports) => Ok(reports),
            Err(error) => {
                if matches!(error, cairn_proto::mon::MonError::Wire(_)) {
                    *self.inner.mon.lock().await = None;
                }
                Err(error.into())
            }
        }
    }

    async fn mon(&self) -> Result<MonClient, ClientError> {
        let mut slot = self.inner.mon.lock().await;
        if let Some(mon) = slot.as_ref() {
            return Ok(mon.clone());
        }
        let options = ConnectOptions {
            connect_timeout: self.inner.options.connect_timeout,
            ..ConnectOptions::default()
        };
        let mon = MonClient::connect_with(self.inner.mon_addr.as_str(), options).await?;
        *slot = Some(mon.clone());
        Ok(mon)
    }

    /// The current map view; refetched if `force`, absent, or older than
    /// the refresh interval.
    async fn view(&self, force: bool) -> Result<Arc<MapView>, ClientError> {
        let cached = lock(&self.inner.view).clone();
        if let Some(view) = &cached {
            let following = lock(&self.inner.followed_at)
                .is_some_and(|at| at.elapsed() < MAP_SUBSCRIBE_WAIT + MAP_SUBSCRIBE_RETRY);
            let fresh =
                following || view.fetched_at.elapsed() < self.inner.options.map_refresh_interval;
            if !force && fresh {
                return Ok(view.clone());
            }
        }
        let mon = self.mon().await?;
        let fetched = match mon.get_map(Epoch(0)).await {
            Ok(fetched) => fetched,
            Err(error) => {
                *self.inner.mon.lock().await = None;
                return Err(error.into());
            }
        };
        let MapFetch::Full { map, endpoints, .. } = fetched else {
            return Err(ClientError::Unexpected(
                "monitor sent incrementals for a full-map request".into(),
            ));
        };
        let view = Arc::new(MapView {
            placement: Placement::new(&map),
            map: Arc::new(map),
            endpoints: endpoints.into_iter().collect(),
            fetched_at: Instant::now(),
        });
        tracing::debug!(epoch = view.map.epoch.0, "map fetched");
        *lock(&self.inner.view) = Some(view.clone());
        Ok(view)
    }

    /// Asks a PG's primary to scrub, deep-scrub or repair it (like `ceph pg
    /// scrub`); returns what the OSD started.
    ///
    /// # Errors
    /// [`ClientError::Refused`] with the OSD's reason (not clean, already
    /// scrubbing, ...), or a map or transport error.
    pub async fn pg_command(&self, pg: PgId, action: PgAction) -> Result<String, ClientError> {
        let view = self.view(true).await?;
        let primary = view
            .placement
            .map_pg(pg)
            .map_err(|e| ClientError::Invalid(format!("PG {pg}: {e}")))?
            .primary
            .ok_or_else(|| ClientError::Refused(format!("PG {pg} has no primary up")))?;
        let addr = view
            .endpoints
            .get(&primary)
            .map(|e| e.addr.clone())
            .ok_or_else(|| ClientError::Refused(format!("no address for osd.{}", primary.0)))?;
        let transport = |e: cairn_wire::WireError| {
            ClientError::Refused(format!("osd.{} at {addr}: {e}", primary.0))
        };
        let conn = self.connection(&addr).await.map_err(transport)?;
        let (reply, _) = conn
            .call::<PgCommand, PgCommandReply>(&PgCommand { pg, action }, Bytes::new())
            .await
            .map_err(transport)?;
        reply.0.map_err(ClientError::Refused)
    }

    async fn connection(&self, addr: &str) -> Result<Connection, cairn_wire::WireError> {
        if let Some(conn) = lock(&self.inner.connections)
            .get(addr)
            .filter(|c| !c.is_closed())
        {
            return Ok(conn.clone());
        }
        let options = ConnectOptions {
            connect_timeout: self.inner.options.connect_timeout,
            request_timeout: self.inner.options.op_deadline,
            ..ConnectOptions::default()
        };
        let conn = Connection::connect(addr, options).await?;
        lock(&self.inner.connections).insert(addr.to_owned(), conn.clone());
        Ok(conn)
    }

    fn forget_connection(&self, addr: &str) {
        if let Some(conn) = lock(&self.inner.connections).remove(addr) {
            conn.close();
        }
    }

    /// Runs `op` on `object` of `pool`, retrying until it succeeds, fails
    /// for good, or the attempts or deadline run out.
    async fn execute(&self, request: Request<'_>) -> Result<(Vec<OpOutput>, Bytes), ClientError> {
        if let Target::Object(name) = request.target
            && (name.is_empty() || name.len() > cairn_proto::limits::OBJECT_NAME_BYTES_MAX)
        {
            return Err(ClientError::Invalid(format!(
                "object name of {} bytes (1 to {} allowed)",
                name.len(),
                cairn_proto::limits::OBJECT_NAME_BYTES_MAX
            )));
        }
        if request.ops.is_empty() || request.ops.len() > OPS_PER_REQUEST_MAX {
            return Err(ClientError::Invalid(format!(
                "{} ops (1 to {OPS_PER_REQUEST_MAX} allowed)",
                request.ops.len()
            )));
        }
        if request.guards.len() > GUARDS_PER_OP_MAX {
            return Err(ClientError::Invalid(format!(
                "{} guards (at most {GUARDS_PER_OP_MAX})",
                request.guards.len()
            )));
        }
        let options = &self.inner.options;
        let req = ReqId {
            client: self.inner.client_id,
            tid: self.inner.tid_next.fetch_add(1, Ordering::Relaxed),
        };
        let started = Instant::now();
        let deadline = started + options.op_deadline;
        let mut retrier = Retrier::new(options);
        let mut refetch = false;
        loop {
            let outcome = match self.view(refetch).await {
                Ok(view) => self.attempt(&view, req, &request, deadline).await,
                Err(error) => Attempt::Again {
                    refetch: true,
                    why: error.to_string(),
                },
            };
            let setback = match outcome {
                Attempt::Done(output, bytes) => return Ok((output, bytes)),
                Attempt::Fail(error) => return Err(error),
                Attempt::Soon(why) => Setback::Soon(why),
                Attempt::Again { refetch, why } => Setback::Again {
                    refetch_map: refetch,
                    why,
                },
            };
            match retrier.failed(setback, started.elapsed()) {
                Decision::Retry {
                    refetch_map,
                    after,
                    why,
                } => {
                    let attempts = retrier.attempts();
                    tracing::debug!(tid = req.tid, attempts, %why, "retrying");
                    refetch = refetch_map;
                    tokio::time::sleep(after).await;
                }
                Decision::GiveUp(error) => return Err(error),
            }
        }
    }

    async fn attempt(
        &self,
        view: &MapView,
        req: ReqId,
        request: &Request<'_>,
        deadline: Instant,
    ) -> Attempt {
        let pool_name = request.pool;
        let Some(pool) = view.map.pool_by_name(pool_name) else {
            // A pool just created may be missing from a stale map: refetch
            // once before saying it does not exist.
            if view.fetched_at.elapsed() > Duration::from_millis(200) {
                return Attempt::Again {
                    refetch: true,
                    why: format!("pool {pool_name:?} not in map"),
                };
            }
            return Attempt::Fail(ClientError::NoPool(pool_name.to_owned()));
        };
        let (pg, object): (PgId, &[u8]) = match request.target {
            Target::Object(object) => (
                cairn_placement::hash::object_pg(pool.id, pool.pg_num, object),
                object,
            ),
            Target::Pg(seed) if seed < pool.pg_num => (PgId::new(pool.id, seed), &[]),
            Target::Pg(seed) => {
                return Attempt::Fail(ClientError::Unexpected(format!(
                    "PG seed {seed} is past pool {pool_name:?}'s pg_num {} (it changed)",
                    pool.pg_num
                )));
            }
        };
        let primary = match view.placement.map_pg(pg) {
            Ok(mapping) => mapping.primary,
            Err(error) => {
                return Attempt::Again {
                    refetch: true,
                    why: format!("PG {pg} cannot be placed: {error}"),
                };
            }
        };
        let Some(addr) = primary
            .and_then(|osd| view.endpoints.get(&osd))
            .map(|e| e.addr.clone())
        else {
            return Attempt::Again {
                refetch: true,
                why: format!("PG {pg} has no reachable primary"),
            };
        };
        let op_frame = ClientOp {
            pg,
            epoch: view.map.epoch,
            req: ReqIdWire {
                client: req.client,
                tid: req.tid,
            },
            object: ByteBuf::from(object.to_vec()),
            guards: request.guards.clone(),
            ops: request.ops.clone(),
            full_try: self.inner.options.full_try,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let call = async {
            let conn = self.connection(&addr).await?;
            conn.call::<ClientOp, ClientReply>(&op_frame, request.data.clone())
                .await
        };
        let (reply, bytes) = match tokio::time::timeout(remaining, call).await {
            Ok(Ok(answer)) => answer,
            // Refused by our own encoder: no retry can fix the request,
            // and the connection is fine.
            Ok(Err(
                error @ (cairn_wire::WireError::TooLarge { .. } | cairn_wire::WireError::Encode(_)),
            )) => {
                return Attempt::Fail(ClientError::Invalid(error.to_string()));
            }
            Ok(Err(error)) => {
                self.forget_connection(&addr);
                return Attempt::Again {
                    refetch: true,
                    why: format!("OSD {addr}: {error}"),
                };
            }
            Err(_) => {
                return Attempt::Again {
                    refetch: true,
                    why: format!("OSD {addr}: no answer before the deadline"),
                };
            }
        };
        classify(reply, bytes)
    }

    /// Applies `op`'s guards and writes to `object` of `pool` atomically,
    /// in one round trip; returns the object's new version. Retries carry
    /// the same request id, so the writes apply once.
    ///
    /// # Errors
    /// [`ClientError::CompareFailed`] naming the first guard that did not
    /// hold, [`ClientError::NotFound`] if an op needs the object and it is
    /// missing, [`ClientError::Exists`] for an exclusive create of an
    /// object that exists (nothing changed in each case), or another
    /// [`ClientError`].
    pub async fn operate(
        &self,
        pool: &str,
        object: &[u8],
        op: WriteOp,
    ) -> Result<u64, ClientError> {
        let data = op.data();
        let request = Request {
            pool,
            target: Target::Object(object),
            guards: op.guards,
            ops: op.ops,
            data,
        };
        if request.ops.iter().any(|o| !o.is_write()) {
            return Err(ClientError::Invalid("a read in a write operation".into()));
        }
        match self.execute(request).await?.0.as_slice() {
            [OpOutput::Written { object_version }] => Ok(*object_version),
            other => Err(ClientError::Unexpected(format!("{other:?} for a write"))),
        }
    }

    /// Runs `op`'s reads of `object` of `pool` in one round trip, on one
    /// state of the object; one result per read, in order.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], [`ClientError::CompareFailed`] if a
    /// guard does not hold, or another [`ClientError`].
    pub async fn operate_read(
        &self,
        pool: &str,
        object: &[u8],
        op: ReadOp,
    ) -> Result<Vec<ReadResult>, ClientError> {
        let count = op.ops.len();
        let request = Request {
            pool,
            target: Target::Object(object),
            guards: op.guards,
            ops: op.ops,
            data: Bytes::new(),
        };
        if request.ops.iter().any(OpKind::is_write) {
            return Err(ClientError::Invalid("a write in a read operation".into()));
        }
        if let ([OpKind::Read { offset, length }], []) =
            (request.ops.as_slice(), request.guards.as_slice())
            && let Some(tried) = self.direct_read(pool, object, *offset, *length).await
        {
            let inner = &self.inner;
            match tried {
                Some(read) => {
                    inner.direct_reads.fetch_add(1, Ordering::Relaxed);
                    return read.map(|bytes| vec![ReadResult::Data(bytes)]);
                }
                None => inner.direct_fallbacks.fetch_add(1, Ordering::Relaxed),
            };
        }
        let (outputs, data) = self.execute(request).await?;
        read_results(outputs, &data, count).map_err(ClientError::Unexpected)
    }

    /// A read of an erasure-coded object straight from the OSDs holding
    /// its data shards, each sending its part with the object's version
    /// (docs/erasure-coding.md, "Direct shard reads"). `None` when the
    /// read is not for them (a replicated pool, a long read, direct reads
    /// off); `Some(None)` when a shard declines or the parts disagree:
    /// the caller then asks the primary, at once.
    async fn direct_read(
        &self,
        pool: &str,
        object: &[u8],
        offset: u64,
        length: Option<u64>,
    ) -> Option<Option<Result<Bytes, ClientError>>> {
        if length.is_some_and(|l| l > DIRECT_READ_BYTES_MAX)
            || !self.inner.options.direct_reads
            || object.is_empty()
            || object.len() > cairn_proto::limits::OBJECT_NAME_BYTES_MAX
        {
            return None;
        }
        let view = self.view(false).await.ok()?;
        let pool = view.map.pool_by_name(pool)?;
        let Redundancy::Erasure {
            k, m, stripe_unit, ..
        } = pool.redundancy
        else {
            return None;
        };
        Some(
            self.try_direct(&view, pool, (k, m, stripe_unit), object, (offset, length))
                .await,
        )
    }

    /// [`Client::direct_read`] of an erasure-coded pool's object.
    async fn try_direct(
        &self,
        view: &MapView,
        pool: &cairn_placement::Pool,
        (k, m, stripe_unit): (u32, u32, u32),
        object: &[u8],
        (offset, length): (u64, Option<u64>),
    ) -> Option<Result<Bytes, ClientError>> {
        let layout = cairn_ec::layout::StripeLayout::new(k, m, u64::from(stripe_unit)).ok()?;
        let pg = cairn_placement::hash::object_pg(pool.id, pool.pg_num, object);
        let mapping = view.placement.map_pg(pg).ok()?;
        // By position: the address of the OSD acting there, if any.
        let addrs: Vec<Option<String>> = (0..layout.shards() as usize)
            .map(|i| {
                let osd = mapping.acting.get(i).copied().flatten()?;
                Some(view.endpoints.get(&osd)?.addr.clone())
            })
            .collect();
        let live: Vec<bool> = addrs.iter().map(Option::is_some).collect();
        let request = |shard, rows| ClientShardRead {
            pg,
            epoch: view.map.epoch,
            object: ByteBuf::from(object.to_vec()),
            shard,
            offset,
            length,
            rows,
        };
        let targets = |shards: &[u32]| -> Option<Vec<(u32, String)>> {
            shards
                .iter()
                .map(|s| Some((*s, addrs.get(*s as usize)?.clone()?)))
                .collect()
        };
        // A ranged read of an object of a stripe or more (chunks of the
        // stripe unit) needs only the shards holding the range: round 0
        // asks those, round 1 every data shard if the object turned out
        // smaller. With a data position empty, `k` positions send rows to
        // decode from.
        for round in 0..2 {
            match plan(&layout, &live, (offset, length), round)? {
                Plan::Parts { shards, subset } => {
                    let parts = self
                        .direct_parts(pg, targets(&shards)?, &|s| request(s, false))
                        .await?;
                    match assemble_direct(&layout, (offset, length), &parts, subset) {
                        Assembled::Done(read) => return Some(read),
                        Assembled::SmallerChunk => {}
                        Assembled::Refused => return None,
                    }
                }
                Plan::Rows { shards } => {
                    let parts = self
                        .direct_parts(pg, targets(&shards)?, &|s| request(s, true))
                        .await?;
                    let codec = self.codec(k, m)?;
                    return match assemble_rows(&layout, &*codec, (offset, length), &parts) {
                        Assembled::Done(read) => {
                            self.inner.direct_decoded.fetch_add(1, Ordering::Relaxed);
                            Some(read)
                        }
                        Assembled::SmallerChunk | Assembled::Refused => None,
                    };
                }
            }
        }
        None
    }

    /// The Reed–Solomon code of a `k`+`m` pool, made once per client (its
    /// working space is the costly part).
    fn codec(&self, k: u32, m: u32) -> Option<Arc<cairn_ec::ReedSolomon>> {
        let mut codecs = lock(&self.inner.codecs);
        if let Some(codec) = codecs.get(&(k, m)) {
            return Some(codec.clone());
        }
        let codec = Arc::new(cairn_ec::ReedSolomon::new(k as usize, m as usize).ok()?);
        codecs.insert((k, m), codec.clone());
        Some(codec)
    }

    /// Sends a direct read to each of `targets` (shard, address) at once;
    /// their parts, or `None` if any declined or did not answer in time.
    async fn direct_parts(
        &self,
        pg: PgId,
        targets: Vec<(u32, String)>,
        request: &impl Fn(u32) -> ClientShardRead,
    ) -> Option<Vec<(u32, DirectPart, Bytes)>> {
        let calls = targets.into_iter().map(|(shard, addr)| {
            let request = request(shard);
            async move {
                let call = async {
                    let conn = self.connection(&addr).await.ok()?;
                    conn.call::<ClientShardRead, ClientShardReadReply>(&request, Bytes::new())
                        .await
                        .ok()
                };
                let (ClientShardReadReply(reply), data) =
                    tokio::time::timeout(DIRECT_READ_TIMEOUT, call)
                        .await
                        .ok()??;
                match reply {
                    Ok(part) => Some((shard, part, data)),
                    Err(why) => {
                        tracing::trace!(%pg, shard, %why, "direct read declined");
                        None
                    }
                }
            }
        });
        join_all(calls.collect()).await.into_iter().collect()
    }

    /// How direct shard reads went since this client connected.
    #[must_use]
    pub fn direct_read_stats(&self) -> DirectReadStats {
        DirectReadStats {
            direct: self.inner.direct_reads.load(Ordering::Relaxed),
            via_primary: self.inner.direct_fallbacks.load(Ordering::Relaxed),
            decoded: self.inner.direct_decoded.load(Ordering::Relaxed),
        }
    }

    /// The one result of a single read.
    async fn read_one(
        &self,
        pool: &str,
        object: &[u8],
        op: ReadOp,
    ) -> Result<ReadResult, ClientError> {
        let mut results = self.operate_read(pool, object, op).await?;
        results
            .pop()
            .ok_or_else(|| ClientError::Unexpected("no result for a read".into()))
    }

    /// Replaces the whole object with `data`; returns the object's version.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn write_full(
        &self,
        pool: &str,
        object: &[u8],
        data: Bytes,
    ) -> Result<u64, ClientError> {
        self.operate(pool, object, WriteOp::new().write_full(data))
            .await
    }

    /// Writes `data` at `offset_bytes`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn write(
        &self,
        pool: &str,
        object: &[u8],
        offset_bytes: u64,
        data: Bytes,
    ) -> Result<u64, ClientError> {
        self.operate(pool, object, WriteOp::new().write(offset_bytes, data))
            .await
    }

    /// Appends `data`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn append(&self, pool: &str, object: &[u8], data: Bytes) -> Result<u64, ClientError> {
        self.operate(pool, object, WriteOp::new().append(data))
            .await
    }

    /// Reads `range` of the object.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn read(
        &self,
        pool: &str,
        object: &[u8],
        range: ReadRange,
    ) -> Result<Bytes, ClientError> {
        let op = ReadOp::new().read(range.offset_bytes, range.length_bytes);
        match self.read_one(pool, object, op).await? {
            ReadResult::Data(bytes) => Ok(bytes),
            other => Err(ClientError::Unexpected(format!("{other:?} for a read"))),
        }
    }

    /// The object's size and version.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn stat(&self, pool: &str, object: &[u8]) -> Result<ObjectStat, ClientError> {
        match self.read_one(pool, object, ReadOp::new().stat()).await? {
            ReadResult::Stat(stat) => Ok(stat),
            other => Err(ClientError::Unexpected(format!("{other:?} for a stat"))),
        }
    }

    /// Removes the object.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn remove(&self, pool: &str, object: &[u8]) -> Result<(), ClientError> {
        self.operate(pool, object, WriteOp::new().remove())
            .await
            .map(drop)
    }

    /// Sets xattr `name` to `value` (creating the object).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn set_xattr(
        &self,
        pool: &str,
        object: &[u8],
        name: &[u8],
        value: Bytes,
    ) -> Result<u64, ClientError> {
        self.operate(pool, object, WriteOp::new().set_xattr(name, &value))
            .await
    }

    /// Every xattr of the object, by name.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn get_xattrs(
        &self,
        pool: &str,
        object: &[u8],
    ) -> Result<BTreeMap<Bytes, Bytes>, ClientError> {
        match self.read_one(pool, object, ReadOp::new().xattrs()).await? {
            ReadResult::Xattrs(xattrs) => Ok(xattrs),
            other => Err(ClientError::Unexpected(format!("{other:?} for get_xattrs"))),
        }
    }

    /// Sets omap entries (creating the object).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn omap_set(
        &self,
        pool: &str,
        object: &[u8],
        entries: &BTreeMap<Bytes, Bytes>,
    ) -> Result<u64, ClientError> {
        let entries = entries.iter().map(|(k, v)| (&k[..], &v[..]));
        self.operate(pool, object, WriteOp::new().omap_set(entries))
            .await
    }

    /// At most `limit` omap entries with keys after `after`, in key order.
    /// A page also ends once its keys and values pass 512 KiB (the OSD's
    /// `OMAP_RANGE_BYTES_MAX`), so a short page is not the end: the end is
    /// an empty page (or, for entries known to be small, a short one).
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn omap_range(
        &self,
        pool: &str,
        object: &[u8],
        after: Option<&[u8]>,
        limit: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
        let op = ReadOp::new().omap_range(after, limit);
        match self.read_one(pool, object, op).await? {
            ReadResult::Omap(entries) => Ok(entries),
            other => Err(ClientError::Unexpected(format!("{other:?} for omap_range"))),
        }
    }

    /// The values of those of `keys` the object's omap holds.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or another [`ClientError`].
    pub async fn omap_get(
        &self,
        pool: &str,
        object: &[u8],
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>, ClientError> {
        let op = ReadOp::new().omap_get(keys.iter().map(|k| &k[..]));
        match self.read_one(pool, object, op).await? {
            ReadResult::Omap(entries) => Ok(entries.into_iter().collect()),
            other => Err(ClientError::Unexpected(format!("{other:?} for omap_get"))),
        }
    }

    /// Removes omap `keys` (absent ones are fine).
    ///
    /// # Errors
    /// [`ClientError::NotFound`] if the object does not exist, or another
    /// [`ClientError`].
    pub async fn omap_remove(
        &self,
        pool: &str,
        object: &[u8],
        keys: &[Bytes],
    ) -> Result<u64, ClientError> {
        let op = WriteOp::new().omap_remove(keys.iter().map(|k| &k[..]));
        self.operate(pool, object, op).await
    }

    /// Removes xattr `name`.
    ///
    /// # Errors
    /// [`ClientError::NotFound`] if the object does not exist, or another
    /// [`ClientError`].
    pub async fn remove_xattr(
        &self,
        pool: &str,
        object: &[u8],
        name: &[u8],
    ) -> Result<u64, ClientError> {
        self.operate(pool, object, WriteOp::new().remove_xattr(name))
            .await
    }

    /// Replaces the whole object with `data` if `guard` holds; returns the
    /// new version.
    ///
    /// # Errors
    /// [`ClientError::CompareFailed`] if the guard does not hold, or
    /// another [`ClientError`].
    pub async fn write_full_if(
        &self,
        pool: &str,
        object: &[u8],
        guard: Guard,
        data: Bytes,
    ) -> Result<u64, ClientError> {
        let op = WriteOp::new().guard(guard).write_full(data);
        self.operate(pool, object, op).await
    }

    /// Sets xattr `name` to `value` if `guard` holds (with a guard on the
    /// same xattr: a compare-and-swap of its value).
    ///
    /// # Errors
    /// [`ClientError::CompareFailed`] if the guard does not hold, or
    /// another [`ClientError`].
    pub async fn set_xattr_if(
        &self,
        pool: &str,
        object: &[u8],
        guard: Guard,
        name: &[u8],
        value: Bytes,
    ) -> Result<u64, ClientError> {
        let op = WriteOp::new().guard(guard).set_xattr(name, &value);
        self.operate(pool, object, op).await
    }

    /// Removes the object if `guard` holds.
    ///
    /// # Errors
    /// [`ClientError::CompareFailed`], [`ClientError::NotFound`], or
    /// another [`ClientError`].
    pub async fn remove_if(
        &self,
        pool: &str,
        object: &[u8],
        guard: Guard,
    ) -> Result<(), ClientError> {
        let op = WriteOp::new().guard(guard).remove();
        self.operate(pool, object, op).await.map(drop)
    }

    /// Up to `limit` object names of `pool`, from `cursor` (`None`: the
    /// start). Walks the pool's PGs in order, asking each PG's primary. The
    /// PG count is read again before each PG, so a listing that spans a
    /// `pg_num` increase also walks the new PGs; it may then return a name
    /// twice (once from its old PG, once from its new one), never skip one.
    ///
    /// # Errors
    /// [`ClientError::NoPool`], or another [`ClientError`].
    pub async fn list(
        &self,
        pool: &str,
        cursor: Option<ListCursor>,
        limit: u32,
    ) -> Result<ListPage, ClientError> {
        let mut cursor = cursor.unwrap_or_default();
        let mut names = Vec::new();
        let limit = limit.max(1);
        while cursor.pg_seed < self.pool_pg_num(pool).await? {
            let want = limit - u32::try_from(names.len()).unwrap_or(limit);
            if want == 0 {
                return Ok(ListPage {
                    names,
                    next: Some(cursor),
                });
            }
            let op = OpKind::List {
                after: cursor.after.as_ref().map(|a| ByteBuf::from(a.to_vec())),
                limit: want,
            };
            let request = Request {
                pool,
                target: Target::Pg(cursor.pg_seed),
                guards: Vec::new(),
                ops: vec![op],
                data: Bytes::new(),
            };
            let (mut outputs, _) = self.execute(request).await?;
            let (page, next) = match (outputs.pop(), outputs.is_empty()) {
                (Some(OpOutput::List { names, next }), true) => (names, next),
                other => {
                    return Err(ClientError::Unexpected(format!("{other:?} for a listing")));
                }
            };
            names.extend(page.into_iter().map(|n| Bytes::from(n.into_vec())));
            cursor = match next {
                Some(after) => ListCursor {
                    pg_seed: cursor.pg_seed,
                    after: Some(Bytes::from(after.into_vec())),
                },
                None => ListCursor {
                    pg_seed: cursor.pg_seed + 1,
                    after: None,
                },
            };
        }
        Ok(ListPage { names, next: None })
    }

    /// The `pg_num` of `pool` in the client's map (refreshed once if the
    /// pool is not in it).
    async fn pool_pg_num(&self, pool: &str) -> Result<u32, ClientError> {
        if let Some(p) = self.view(false).await?.map.pool_by_name(pool) {
            return Ok(p.pg_num);
        }
        self.view(true)
            .await?
            .map
            .pool_by_name(pool)
            .map(|p| p.pg_num)
            .ok_or_else(|| ClientError::NoPool(pool.to_owned()))
    }
}

/// Keeps a map subscription open for the client behind `inner` until the
/// client is dropped: each answer with new epochs triggers a fetch of the
/// whole map (simple and cheap at the map sizes this serves), each answer
/// at all marks the cached map as followed.
async fn follow_map(inner: std::sync::Weak<Inner>) {
    loop {
        // Only the monitor connection is held while the poll waits, so a
        // dropped client is not kept alive by its own subscription.
        let (mon, have) = {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            let client = Client { inner: strong };
            let have = lock(&client.inner.view)
                .as_ref()
                .map_or(Epoch(0), |v| v.map.epoch);
            (client.mon().await, have)
        };
        let answer = match mon {
            Ok(mon) => mon
                .subscribe(have, MAP_SUBSCRIBE_WAIT)
                .await
                .map_err(ClientError::from),
            Err(error) => Err(error),
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let client = Client { inner: strong };
        let changed = match answer {
            Ok(MapFetch::Incrementals { incrementals, .. }) => !incrementals.is_empty(),
            Ok(MapFetch::Full { .. }) => true,
            Err(error) => {
                tracing::debug!(%error, "map subscription failed");
                *lock(&client.inner.followed_at) = None;
                *client.inner.mon.lock().await = None;
                drop(client);
                tokio::time::sleep(MAP_SUBSCRIBE_RETRY).await;
                continue;
            }
        };
        if changed && let Err(error) = client.view(true).await {
            tracing::debug!(%error, "map fetch after a subscription answer failed");
            drop(client);
            tokio::time::sleep(MAP_SUBSCRIBE_RETRY).await;
            continue;
        }
        *lock(&client.inner.followed_at) = Some(Instant::now());
    }
}

/// Runs `futures` together on this task; their outputs in order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Sorts an OSD's answer into done, retry or fail (the retry policy's
/// [`crate::retry::classify`]).
fn classify(reply: ClientReply, bytes: Bytes) -> Attempt {
    match reply.result {
        Ok(output) => Attempt::Done(output, bytes),
        Err(error) => match crate::retry::classify(error) {
            Ok(Setback::Again { refetch_map, why }) => Attempt::Again {
                refetch: refetch_map,
                why,
            },
            Ok(Setback::Soon(why)) => Attempt::Soon(why),
            Err(error) => Attempt::Fail(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::osd::OpError;

    #[test]
    fn retryable_errors_are_retried_and_others_fail() {
        let reply = |e| ClientReply::err(e);
        let retry = OpError::Retry {
            epoch: 3,
            reason: "not primary".into(),
        };
        assert!(matches!(
            classify(reply(retry), Bytes::new()),
            Attempt::Again { refetch: true, .. }
        ));
        let busy = OpError::Busy { inflight_max: 1 };
        assert!(matches!(
            classify(reply(busy), Bytes::new()),
            Attempt::Again { refetch: false, .. }
        ));
        assert!(matches!(
            classify(reply(OpError::NotFound), Bytes::new()),
            Attempt::Fail(ClientError::NotFound)
        ));
        assert!(matches!(
            classify(reply(OpError::Invalid("x".into())), Bytes::new()),
            Attempt::Fail(ClientError::Op(_))
        ));
    }

    #[test]
    fn client_ids_differ() {
        assert_ne!(random_u64(), random_u64());
    }
}

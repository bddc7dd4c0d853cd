//! The client's session with the active MDS: finding it through the
//! monitor, sending requests, keeping every change not yet durable and
//! replaying those to a new MDS after a failover.

use crate::mount::limits::{
    MDS_DISCOVER_PAUSE_MS, MDS_REQUEST_DEADLINE_MS, MDS_REQUEST_TIMEOUT_MS, POLL_WAIT_MS,
};
use bytes::Bytes;
use cairn_client::Client;
use cairn_proto::mds::{
    Caller, Errno, MdsAnswer, MdsError, MdsOp, MdsPoll, MdsPollReply, MdsReply, MdsRequest,
};
use cairn_proto::mon::{MonCommand, Reply};
use cairn_wire::{ConnectOptions, Connection};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A change the MDS answered but has not yet made durable.
#[derive(Clone, Debug)]
struct Unsafe {
    request: MdsRequest,
    seq: u64,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    fs: String,
    session: u64,
    name: String,
    tid: AtomicU64,
    /// The connection to the active MDS and its number (bumped on each
    /// reconnect, so only one caller replaces a dead connection).
    conn: tokio::sync::Mutex<Option<(Connection, u64)>>,
    conn_number: AtomicU64,
    unsafe_changes: Mutex<BTreeMap<u64, Unsafe>>,
    durable: AtomicU64,
    data_pool: Mutex<String>,
}

/// A file-system session; clone freely.
#[derive(Debug, Clone)]
pub struct MdsSession {
    inner: Arc<Inner>,
}

fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

impl MdsSession {
    /// Opens a session with the active MDS of file system `fs`; returns it
    /// and the root's attributes.
    ///
    /// # Errors
    /// An errno if no MDS answers in time.
    pub async fn open(
        client: Client,
        fs: &str,
        name: &str,
    ) -> Result<(MdsSession, MdsAnswer), Errno> {
        let session = MdsSession {
            inner: Arc::new(Inner {
                client,
                fs: fs.to_owned(),
                session: random_id(),
                name: name.to_owned(),
                tid: AtomicU64::new(1),
                conn: tokio::sync::Mutex::new(None),
                conn_number: AtomicU64::new(0),
                unsafe_changes: Mutex::new(BTreeMap::new()),
                durable: AtomicU64::new(0),
                data_pool: Mutex::new(String::new()),
            }),
        };
        let hello = session
            .call(
                MdsOp::Hello {
                    name: name.to_owned(),
                },
                Caller::default(),
            )
            .await?;
        tokio::spawn(poll_forever(Arc::downgrade(&session.inner)));
        Ok((session, hello))
    }

    /// The id the MDS knows this session by.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.session
    }

    #[must_use]
    pub fn data_pool(&self) -> String {
        lock(&self.inner.data_pool).clone()
    }

    #[must_use]
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Changes not yet durable.
    #[must_use]
    pub fn unsafe_count(&self) -> usize {
        lock(&self.inner.unsafe_changes).len()
    }

    /// Sends `op` and waits for its answer, across MDS failovers.
    ///
    /// # Errors
    /// The MDS's errno, or `EIO` when no MDS answers before the deadline.
    pub async fn call(&self, op: MdsOp, caller: Caller) -> Result<MdsAnswer, Errno> {
        let tid = self.inner.tid.fetch_add(1, Ordering::Relaxed);
        let mut request = MdsRequest {
            session: self.inner.session,
            tid,
            caller,
            replay: false,
            op,
        };
        // A lock request that waits may wait as long as the lock is held.
        let waits = matches!(request.op, MdsOp::SetLock { wait: true, .. });
        let deadline =
            (!waits).then(|| Instant::now() + Duration::from_millis(MDS_REQUEST_DEADLINE_MS));
        loop {
            if deadline.is_some_and(|d| Instant::now() > d) {
                tracing::warn!(tid, "no MDS answered before the deadline");
                return Err(libc::EIO);
            }
            let (conn, number) = match self.connection().await {
                Ok(c) => c,
                Err(()) => {
                    tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
                    continue;
                }
            };
            let sent = conn
                .call::<MdsRequest, MdsReply>(&request, Bytes::new())
                .await;
            let reply = match sent {
                Ok((reply, _)) => reply,
                Err(error) => {
                    tracing::debug!(%error, "MDS connection failed");
                    self.drop_connection(number).await;
                    // It may have been applied: a resend is marked so the
                    // MDS recognises it.
                    request.replay = true;
                    continue;
                }
            };
            self.saw_durable(reply.durable_seq);
            match reply.result {
                Ok(answer) => {
                    self.keep_if_unsafe(&request, &answer, reply.journal_seq, reply.durable_seq);
                    return Ok(answer);
                }
                Err(MdsError::Errno(e)) => return Err(e),
                Err(MdsError::Busy) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(MdsError::NotActive) => {
                    self.drop_connection(number).await;
                    tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
                }
                Err(MdsError::BadRequest(why)) => {
                    tracing::error!(why, "the MDS refused a request as malformed");
                    return Err(libc::EIO);
                }
            }
        }
    }

    fn keep_if_unsafe(
        &self,
        request: &MdsRequest,
        answer: &MdsAnswer,
        seq: Option<u64>,
        durable: u64,
    ) {
        let Some(seq) = seq else { return };
        if seq <= durable {
            return;
        }
        let mut request = request.clone();
        request.replay = true;
        // A replayed create keeps the inode number it was given.
        if let (MdsOp::Create { ino, .. } | MdsOp::Symlink { ino, .. }, MdsAnswer::Attr(attr)) =
            (&mut request.op, answer)
        {
            *ino = Some(attr.ino);
        }
        if let MdsOp::Create { open, .. } = &mut request.op {
            // The open it made died with the old MDS's session state.
            *open = false;
        }
        lock(&self.inner.unsafe_changes).insert(request.tid, Unsafe { request, seq });
    }

    fn saw_durable(&self, seq: u64) {
        self.inner.durable.fetch_max(seq, Ordering::Relaxed);
        let mut changes = lock(&self.inner.unsafe_changes);
        changes.retain(|_, u| u.seq > seq);
    }

    async fn drop_connection(&self, number: u64) {
        let mut conn = self.inner.conn.lock().await;
        if conn.as_ref().is_some_and(|(_, n)| *n == number) {
            *conn = None;
        }
    }

    /// The current connection, or a new one to the active MDS (with the
    /// session resumed and the unsafe changes replayed).
    async fn connection(&self) -> Result<(Connection, u64), ()> {
        let mut slot = self.inner.conn.lock().await;
        if let Some((conn, number)) = slot.as_ref()
            && !conn.is_closed()
        {
            return Ok((conn.clone(), *number));
        }
        *slot = None;
        let addr = self.active_addr().await.ok_or(())?;
        let options = ConnectOptions {
            request_timeout: Duration::from_millis(MDS_REQUEST_TIMEOUT_MS),
            ..ConnectOptions::default()
        };
        let conn = Connection::connect(addr.as_str(), options)
            .await
            .map_err(drop)?;
        let hello = MdsRequest {
            session: self.inner.session,
            tid: 0,
            caller: Caller::default(),
            replay: true,
            op: MdsOp::Hello {
                name: self.inner.name.clone(),
            },
        };
        let (reply, _) = conn
            .call::<MdsRequest, MdsReply>(&hello, Bytes::new())
            .await
            .map_err(drop)?;
        match reply.result {
            Ok(MdsAnswer::Session { data_pool, .. }) => *lock(&self.inner.data_pool) = data_pool,
            _ => return Err(()),
        }
        // A new MDS numbers its journal afresh from what survived.
        self.inner
            .durable
            .store(reply.durable_seq, Ordering::Relaxed);
        self.replay(&conn).await?;
        let number = self.inner.conn_number.fetch_add(1, Ordering::Relaxed) + 1;
        *slot = Some((conn.clone(), number));
        Ok((conn, number))
    }

    async fn replay(&self, conn: &Connection) -> Result<(), ()> {
        let pending: Vec<Unsafe> = lock(&self.inner.unsafe_changes).values().cloned().collect();
        if pending.is_empty() {
            return Ok(());
        }
        tracing::info!(
            count = pending.len(),
            "replaying changes the old MDS had not made durable"
        );
        for u in pending {
            let (reply, _) = conn
                .call::<MdsRequest, MdsReply>(&u.request, Bytes::new())
                .await
                .map_err(drop)?;
            let mut changes = lock(&self.inner.unsafe_changes);
            match (reply.result, reply.journal_seq) {
                (Ok(_), Some(seq)) if seq > reply.durable_seq => {
                    if let Some(entry) = changes.get_mut(&u.request.tid) {
                        entry.seq = seq;
                    }
                }
                (Err(MdsError::Busy | MdsError::NotActive), _) => return Err(()),
                (result, _) => {
                    if let Err(e) = result {
                        tracing::warn!(tid = u.request.tid, error = ?e, "a replayed change failed");
                    }
                    changes.remove(&u.request.tid);
                }
            }
        }
        Ok(())
    }

    async fn active_addr(&self) -> Option<String> {
        match self.inner.client.mon_command(MonCommand::FsLs).await {
            Ok(Reply::FsMap(list)) => list
                .into_iter()
                .find(|f| f.name == self.inner.fs)
                .and_then(|f| f.active)
                .map(|a| a.addr),
            _ => None,
        }
    }
}

/// Keeps the session alive and learns the durable sequence.
async fn poll_forever(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let session = MdsSession { inner: strong };
        let conn = session.connection().await;
        let Ok((conn, number)) = conn else {
            drop(session);
            tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
            continue;
        };
        let poll = MdsPoll {
            session: session.inner.session,
            durable_seq: session.inner.durable.load(Ordering::Relaxed),
            wait_ms: POLL_WAIT_MS,
        };
        let answer = conn
            .call::<MdsPoll, MdsPollReply>(&poll, Bytes::new())
            .await;
        match answer {
            Ok((MdsPollReply { result: Ok(seq) }, _)) => session.saw_durable(seq),
            Ok(_) | Err(_) => {
                session.drop_connection(number).await;
                drop(session);
                tokio::time::sleep(Duration::from_millis(MDS_DISCOVER_PAUSE_MS)).await;
            }
        }
    }
}

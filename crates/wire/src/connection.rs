//! The client side: one TCP connection, many calls in flight on it.
//!
//! A writer task drains a bounded queue of encoded frames onto the socket; a
//! reader task matches each response to its caller through a map of
//! oneshots bounded by a semaphore. When either task ends, the connection is
//! closed: every pending call is failed at once with the cause, and later
//! calls fail with it too.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use cairn_types::checked::CheckedBytes;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpSocket, TcpStream, ToSocketAddrs};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::WireError;
use crate::frame::{EncodedFrame, Frame, Message};
use crate::io::{FrameReader, write_frames};
use crate::limits::{
    CONNECT_TIMEOUT_DEFAULT, IN_FLIGHT_REQUESTS_MAX, OUTGOING_FRAMES_MAX, REQUEST_TIMEOUT_DEFAULT,
};

/// How a client connection behaves. Maxima are clamped to at least 1.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Time to establish the TCP connection.
    pub connect_timeout: Duration,
    /// Time for one call, from asking for an in-flight slot to receiving the
    /// response; also bounds how long [`Connection::send`] waits for queue
    /// space.
    pub request_timeout: Duration,
    /// Calls awaiting a response at once; further calls wait for a slot.
    pub in_flight_requests_max: usize,
    /// Encoded frames queued for the writer.
    pub outgoing_frames_max: usize,
    /// Where unsolicited frames from the server go. `None` drops them (with
    /// a debug log). The reader waits while this channel is full, which
    /// stalls responses too: drain it.
    pub incoming: Option<mpsc::Sender<Frame>>,
    /// Source address to connect from (port chosen by the kernel), so a
    /// server that knows this peer's address can check where it comes
    /// from. `None`: the kernel's choice.
    pub bind_ip: Option<IpAddr>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            in_flight_requests_max: IN_FLIGHT_REQUESTS_MAX,
            outgoing_frames_max: OUTGOING_FRAMES_MAX,
            incoming: None,
            bind_ip: None,
        }
    }
}

type Waiter = oneshot::Sender<Result<Frame, WireError>>;

/// State the reader and writer tasks share with the handles.
#[derive(Debug)]
struct Shared {
    peer_addr: SocketAddr,
    /// Calls awaiting a response, by request id; `None` once closed, so a
    /// call can never register after the final sweep and hang.
    pending: Mutex<Option<HashMap<u64, Waiter>>>,
    /// Cancelled when the connection closes, for whatever reason.
    closed: CancellationToken,
    /// Why it closed; set once, before `closed` is cancelled.
    close_reason: OnceLock<WireError>,
}

impl Shared {
    /// Closes the connection: records the cause, stops both tasks and fails
    /// every pending call with it. Idempotent; the first cause wins.
    fn close(&self, reason: WireError) {
        let _ = self.close_reason.set(reason);
        self.closed.cancel();
        let waiters = self.lock_pending().take();
        let reason = self.close_reason();
        for (_, waiter) in waiters.into_iter().flatten() {
            let _ = waiter.send(Err(reason.clone()));
        }
    }

    fn close_reason(&self) -> WireError {
        self.close_reason
            .get()
            .cloned()
            .unwrap_or(WireError::Closed)
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Option<HashMap<u64, Waiter>>> {
        // The map is consistent after every statement; a panic elsewhere
        // while holding the lock does not make it unsafe to use.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Connects to `addr`, from `bind_ip` if given (to the first address of
/// `addr` in its family).
async fn connect_from(
    addr: impl ToSocketAddrs,
    bind_ip: Option<IpAddr>,
) -> std::io::Result<TcpStream> {
    let Some(ip) = bind_ip else {
        return TcpStream::connect(addr).await;
    };
    let target = tokio::net::lookup_host(addr)
        .await?
        .find(|a| a.is_ipv4() == ip.is_ipv4())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("no address of the peer in the family of {ip}"),
            )
        })?;
    let socket = if ip.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(target).await
}

/// The part owned by handles. Dropping the last handle drops the queue's
/// sender: the writer flushes what is queued, half-closes the socket, and
/// the connection winds down.
#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<EncodedFrame>,
    in_flight: Semaphore,
    next_request_id: AtomicU64,
    request_timeout: Duration,
}

/// A client connection; clone it freely, every clone shares the socket.
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl Connection {
    /// Connects to `addr` and starts the connection's reader and writer.
    ///
    /// # Errors
    /// [`WireError::Timeout`] after `connect_timeout`, or the connect error.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        options: ConnectOptions,
    ) -> Result<Connection, WireError> {
        let connect = connect_from(addr, options.bind_ip);
        let stream = tokio::time::timeout(options.connect_timeout, connect)
            .await
            .map_err(|_| timeout_error(options.connect_timeout))??;
        Connection::from_stream(stream, options)
    }

    /// Wraps an established stream (e.g. one accepted for a reverse
    /// channel). Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// If the stream has no peer address or refuses `TCP_NODELAY`.
    pub fn from_stream(
        stream: TcpStream,
        options: ConnectOptions,
    ) -> Result<Connection, WireError> {
        // Requests are small and latency-bound; batching is done by the
        // writer, not by Nagle.
        stream.set_nodelay(true)?;
        let peer_addr = stream.peer_addr()?;
        let (read_half, write_half) = stream.into_split();
        let (outgoing, queue) = mpsc::channel(options.outgoing_frames_max.max(1));
        let shared = Arc::new(Shared {
            peer_addr,
            pending: Mutex::new(Some(HashMap::new())),
            closed: CancellationToken::new(),
            close_reason: OnceLock::new(),
        });
        tokio::spawn(run_writer(shared.clone(), write_half, queue));
        tokio::spawn(run_reader(shared.clone(), read_half, options.incoming));
        let inner = Inner {
            shared,
            outgoing,
            in_flight: Semaphore::new(options.in_flight_requests_max.max(1)),
            next_request_id: AtomicU64::new(1),
            request_timeout: options.request_timeout,
        };
        Ok(Connection {
            inner: Arc::new(inner),
        })
    }

    /// Sends `req` with `data` and waits for the typed response.
    ///
    /// # Errors
    /// [`WireError::Timeout`] after `request_timeout`; the connection's close
    /// cause if it dies first; [`WireError::UnexpectedKind`] or
    /// [`WireError::Body`] if the response is not a well-formed `Resp`.
    pub async fn call<Req: Message, Resp: Message>(
        &self,
        req: &Req,
        data: impl Into<CheckedBytes>,
    ) -> Result<(Resp, Bytes), WireError> {
        let response = self.call_frame(Frame::request(req, data)?).await?;
        let msg = response.decode_body::<Resp>()?;
        Ok((msg, response.data.into()))
    }

    /// Sends a raw request frame and waits for the response frame. The
    /// connection assigns `request_id` and clears `is_response`.
    ///
    /// # Errors
    /// As for [`Connection::call`], less the body checks.
    pub async fn call_frame(&self, frame: Frame) -> Result<Frame, WireError> {
        self.call_frame_with_timeout(frame, self.inner.request_timeout)
            .await
    }

    /// As [`Connection::call_frame`], with `timeout` in place of the
    /// connection's `request_timeout`: for a call the server is expected to
    /// hold (a long poll), which must outlive its hold time.
    ///
    /// # Errors
    /// As for [`Connection::call_frame`], with [`WireError::Timeout`] after
    /// `timeout`.
    pub async fn call_frame_with_timeout(
        &self,
        frame: Frame,
        timeout: Duration,
    ) -> Result<Frame, WireError> {
        tokio::time::timeout(timeout, self.call_untimed(frame))
            .await
            .map_err(|_| timeout_error(timeout))?
    }

    async fn call_untimed(&self, mut frame: Frame) -> Result<Frame, WireError> {
        let _slot = self
            .inner
            .in_flight
            .acquire()
            .await
            .map_err(|_| WireError::Closed)?;
        let request_id = self.inner.next_request_id.fetch_add(1, Ordering::Relaxed);
        frame.request_id = request_id;
        frame.is_response = false;
        let encoded = frame.encode()?;
        let (waiter, response) = oneshot::channel();
        let _registration = self.register(request_id, waiter)?;
        self.enqueue(encoded).await?;
        match response.await {
            Ok(result) => result,
            // The sweep in `close` always answers; a dropped waiter means
            // the map itself went away with the connection.
            Err(_) => Err(self.inner.shared.close_reason()),
        }
    }

    /// Sends an unsolicited message (request id 0); no response is expected.
    ///
    /// # Errors
    /// [`WireError::Timeout`] if the queue stays full for `request_timeout`;
    /// the close cause if the connection is closed; encoding errors.
    pub async fn send<M: Message>(
        &self,
        msg: &M,
        data: impl Into<CheckedBytes>,
    ) -> Result<(), WireError> {
        let encoded = Frame::request(msg, data)?.encode()?;
        let timeout = self.inner.request_timeout;
        tokio::time::timeout(timeout, self.enqueue(encoded))
            .await
            .map_err(|_| timeout_error(timeout))?
    }

    /// Closes the connection now: pending calls fail with
    /// [`WireError::Closed`]; queued frames are dropped.
    pub fn close(&self) {
        self.inner.shared.close(WireError::Closed);
    }

    /// Whether the connection has closed (calls on it will fail).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.is_cancelled()
    }

    /// Why the connection closed, once it has.
    #[must_use]
    pub fn close_reason(&self) -> Option<WireError> {
        self.inner.shared.close_reason.get().cloned()
    }

    #[must_use]
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.shared.peer_addr
    }

    fn register(&self, request_id: u64, waiter: Waiter) -> Result<Registration<'_>, WireError> {
        let shared = &self.inner.shared;
        let mut pending = shared.lock_pending();
        let map = pending.as_mut().ok_or_else(|| shared.close_reason())?;
        let previous = map.insert(request_id, waiter);
        assert!(previous.is_none(), "request id {request_id} reused");
        Ok(Registration { shared, request_id })
    }

    async fn enqueue(&self, frame: EncodedFrame) -> Result<(), WireError> {
        let shared = &self.inner.shared;
        if shared.closed.is_cancelled() {
            return Err(shared.close_reason());
        }
        tokio::select! {
            sent = self.inner.outgoing.send(frame) => {
                sent.map_err(|_| shared.close_reason())
            }
            () = shared.closed.cancelled() => Err(shared.close_reason()),
        }
    }
}

/// Removes a call's waiter when the call ends for any reason, including
/// timeout or the caller dropping the future, so the map cannot leak.
struct Registration<'a> {
    shared: &'a Shared,
    request_id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(map) = self.shared.lock_pending().as_mut() {
            map.remove(&self.request_id);
        }
    }
}

fn timeout_error(timeout: Duration) -> WireError {
    WireError::Timeout {
        after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

async fn run_writer(
    shared: Arc<Shared>,
    write_half: tokio::net::tcp::OwnedWriteHalf,
    queue: mpsc::Receiver<EncodedFrame>,
) {
    let result = tokio::select! {
        result = write_frames(write_half, queue) => result,
        () = shared.closed.cancelled() => return,
    };
    match result {
        // Every handle is gone and the queue is flushed: done.
        Ok(()) => shared.close(WireError::Closed),
        Err(error) => {
            tracing::debug!(peer = %shared.peer_addr, %error, "connection write failed");
            shared.close(error);
        }
    }
}

async fn run_reader(
    shared: Arc<Shared>,
    read_half: OwnedReadHalf,
    incoming: Option<mpsc::Sender<Frame>>,
) {
    let mut reader = FrameReader::new(read_half);
    let reason = loop {
        let next = tokio::select! {
            next = reader.next() => next,
            () = shared.closed.cancelled() => return,
        };
        match next {
            Ok(Some(frame)) => {
                if !dispatch(&shared, frame, incoming.as_ref()).await {
                    return;
                }
            }
            Ok(None) => break WireError::Closed,
            Err(error) => {
                if error.is_protocol_violation() {
                    tracing::warn!(peer = %shared.peer_addr, %error, "closing connection: malformed frame from server");
                } else {
                    tracing::debug!(peer = %shared.peer_addr, %error, "connection read failed");
                }
                break error;
            }
        }
    };
    shared.close(reason);
}

/// Routes one received frame; `false` if the connection closed meanwhile.
async fn dispatch(shared: &Shared, frame: Frame, incoming: Option<&mpsc::Sender<Frame>>) -> bool {
    if frame.is_response {
        let waiter = shared
            .lock_pending()
            .as_mut()
            .and_then(|map| map.remove(&frame.request_id));
        match waiter {
            // The caller may have just timed out; that is fine.
            Some(waiter) => drop(waiter.send(Ok(frame))),
            None => {
                tracing::debug!(peer = %shared.peer_addr, request_id = frame.request_id, "response to no pending call (timed out?), dropped")
            }
        }
        return true;
    }
    let Some(incoming) = incoming else {
        tracing::debug!(peer = %shared.peer_addr, kind = frame.kind, "unsolicited frame with no receiver, dropped");
        return true;
    };
    tokio::select! {
        sent = incoming.send(frame) => {
            if sent.is_err() {
                tracing::debug!(peer = %shared.peer_addr, "incoming receiver gone, frame dropped");
            }
            true
        }
        () = shared.closed.cancelled() => false,
    }
}

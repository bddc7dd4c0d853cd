//! The server side: accept connections, hand each request to a handler, and
//! write responses back in whatever order the handlers finish.
//!
//! Per connection, one reader loop decodes frames and spawns a handler task
//! per frame (at most `handlers_per_connection_max` at once: at the bound
//! the reader stops reading, which pushes back on the client through TCP),
//! and one writer drains the bounded response queue. A protocol violation
//! closes that connection with a warning and nothing else.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::error::WireError;
use crate::frame::{EncodedFrame, Frame};
use crate::io::{FrameReader, write_frames};
use crate::limits::{
    ACCEPT_RETRY_DELAY, CONNECTIONS_MAX, DRAIN_TIMEOUT_DEFAULT, HANDLERS_PER_CONNECTION_MAX,
    OUTGOING_FRAMES_MAX,
};

/// One accepted connection, as its handlers see it: where it comes from
/// and, once a handshake has proven it, who is on the other end.
///
/// This crate does not know what a peer identity means; a daemon's
/// handshake message (an OSD's hello, say) checks a claim and binds the
/// session to it, and later messages on the same connection are judged
/// against the binding rather than against what they say of themselves.
#[derive(Debug)]
pub struct Session {
    peer_addr: SocketAddr,
    peer: OnceLock<u64>,
}

impl Session {
    #[must_use]
    pub fn new(peer_addr: SocketAddr) -> Session {
        Session {
            peer_addr,
            peer: OnceLock::new(),
        }
    }

    /// The remote address of the connection.
    #[must_use]
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Binds the session to `peer` (a handler-defined id) for the rest of
    /// the connection. A session is bound once.
    ///
    /// # Errors
    /// The id it is already bound to, if that is another one.
    pub fn bind_peer(&self, peer: u64) -> Result<(), u64> {
        let bound = *self.peer.get_or_init(|| peer);
        if bound == peer { Ok(()) } else { Err(bound) }
    }

    /// The id a handshake bound the session to, if any.
    #[must_use]
    pub fn peer(&self) -> Option<u64> {
        self.peer.get().copied()
    }
}

/// Serves requests. Called concurrently, once per received frame, with the
/// session of the connection it arrived on.
///
/// Return `Some(response)` to answer: the server stamps it with the
/// request's id and the response flag. Return `None` for one-way messages.
/// A request left unanswered (or answered with a frame that does not
/// encode) is not reported to the client, whose call then times out, so
/// message protocols should answer every request, with an error message if
/// need be. Frames of one connection are handled concurrently: a
/// handshake must be a request whose answer the client awaits before it
/// sends anything the handshake should cover.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        frame: Frame,
        session: Arc<Session>,
    ) -> impl Future<Output = Option<Frame>> + Send;
}

impl<F, Fut> Handler for F
where
    F: Fn(Frame, Arc<Session>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Frame>> + Send,
{
    fn handle(
        &self,
        frame: Frame,
        session: Arc<Session>,
    ) -> impl Future<Output = Option<Frame>> + Send {
        self(frame, session)
    }
}

/// How [`serve`] behaves. Maxima are clamped to at least 1.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Cancel to shut down gracefully: stop accepting and reading, let
    /// in-flight handlers finish and their responses be written (for at most
    /// `drain_timeout`), then close every connection and return.
    pub shutdown: CancellationToken,
    /// Requests handled at once on one connection.
    pub handlers_per_connection_max: usize,
    /// Connections open at once; accepting pauses at the limit.
    pub connections_max: usize,
    /// Responses queued for one connection's writer.
    pub outgoing_frames_max: usize,
    /// How long a closing connection waits for its handlers and writer.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            shutdown: CancellationToken::new(),
            handlers_per_connection_max: HANDLERS_PER_CONNECTION_MAX,
            connections_max: CONNECTIONS_MAX,
            outgoing_frames_max: OUTGOING_FRAMES_MAX,
            drain_timeout: DRAIN_TIMEOUT_DEFAULT,
        }
    }
}

/// Accepts connections on `listener` and serves each with `handler` until
/// `options.shutdown` is cancelled; returns once every connection has
/// drained. Never fails: accept errors are logged and retried, a bad peer
/// only loses its own connection. Dropping the future closes everything at
/// once.
pub async fn serve<H: Handler>(listener: TcpListener, handler: H, options: ServeOptions) {
    let handler = Arc::new(handler);
    let connections_max = options.connections_max.max(1);
    let mut connections = JoinSet::new();
    loop {
        while let Some(joined) = connections.try_join_next() {
            log_task_end(joined, "connection");
        }
        if connections.len() >= connections_max {
            tokio::select! {
                () = options.shutdown.cancelled() => break,
                Some(joined) = connections.join_next() => log_task_end(joined, "connection"),
            }
            continue;
        }
        let accepted = tokio::select! {
            () = options.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let connection = serve_connection(stream, peer, handler.clone(), options.clone());
                connections.spawn(connection);
            }
            Err(error) => {
                tracing::warn!(%error, "accept failed; retrying");
                tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
            }
        }
    }
    // Refuse newcomers at once rather than leave them in the backlog.
    drop(listener);
    while let Some(joined) = connections.join_next().await {
        log_task_end(joined, "connection");
    }
}

fn log_task_end(joined: Result<(), JoinError>, what: &'static str) {
    if let Err(error) = joined
        && error.is_panic()
    {
        tracing::error!(%error, "{what} task panicked");
    }
}

/// Why a connection's reader stopped.
enum ReadEnd {
    /// The peer closed between frames.
    Eof,
    /// The server is shutting down.
    Shutdown,
    /// The stream failed, or the peer broke the protocol.
    Failed(WireError),
}

async fn serve_connection<H: Handler>(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Arc<H>,
    options: ServeOptions,
) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%peer, %error, "cannot set TCP_NODELAY");
    }
    let (read_half, write_half) = stream.into_split();
    let (outgoing, queue) = mpsc::channel(options.outgoing_frames_max.max(1));
    let writer = write_frames(write_half, queue);
    tokio::pin!(writer);
    // Dropped with this future: a connection that dies aborts its handlers.
    let mut handlers = JoinSet::new();
    let reader = RequestReader {
        reader: FrameReader::new(read_half),
        peer,
        session: Arc::new(Session::new(peer)),
        handler,
        outgoing,
        handlers_max: options.handlers_per_connection_max.max(1),
        shutdown: options.shutdown.clone(),
    };
    let ended = tokio::select! {
        ended = reader.run(&mut handlers) => ended,
        written = &mut writer => {
            if let Err(error) = written {
                tracing::debug!(%peer, %error, "connection write failed");
            }
            return;
        }
    };
    match ended {
        ReadEnd::Failed(error) if error.is_protocol_violation() => {
            tracing::warn!(%peer, %error, "closing connection: malformed frame");
        }
        ReadEnd::Failed(error) => tracing::debug!(%peer, %error, "connection read failed"),
        ReadEnd::Eof | ReadEnd::Shutdown => {
            // The reader's queue sender is gone; the writer ends once every
            // handler has sent its response and dropped its own. Both run
            // together so a full queue cannot block a finishing handler.
            let drain = async {
                let handlers_done = async {
                    while let Some(joined) = handlers.join_next().await {
                        log_task_end(joined, "handler");
                    }
                };
                tokio::join!(handlers_done, &mut writer).1
            };
            match tokio::time::timeout(options.drain_timeout, drain).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%peer, %error, "connection write failed"),
                Err(_) => tracing::debug!(%peer, "connection drain timed out"),
            }
        }
    }
}

/// The read side of one server connection.
struct RequestReader<H> {
    reader: FrameReader<OwnedReadHalf>,
    peer: SocketAddr,
    session: Arc<Session>,
    handler: Arc<H>,
    outgoing: mpsc::Sender<EncodedFrame>,
    handlers_max: usize,
    shutdown: CancellationToken,
}

impl<H: Handler> RequestReader<H> {
    /// Reads frames and spawns their handlers until the stream ends, fails
    /// or the server shuts down. Consumes `self` so the queue sender is
    /// dropped on return.
    async fn run(mut self, handlers: &mut JoinSet<()>) -> ReadEnd {
        loop {
            while let Some(joined) = handlers.try_join_next() {
                log_task_end(joined, "handler");
            }
            let next = tokio::select! {
                () = self.shutdown.cancelled() => return ReadEnd::Shutdown,
                next = self.reader.next() => next,
            };
            let frame = match next {
                Ok(Some(frame)) => frame,
                Ok(None) => return ReadEnd::Eof,
                Err(error) => return ReadEnd::Failed(error),
            };
            if frame.is_response {
                tracing::debug!(peer = %self.peer, request_id = frame.request_id, "server received a response frame, dropped");
                continue;
            }
            while handlers.len() >= self.handlers_max {
                tokio::select! {
                    () = self.shutdown.cancelled() => return ReadEnd::Shutdown,
                    Some(joined) = handlers.join_next() => log_task_end(joined, "handler"),
                }
            }
            let task = handle_one(
                self.handler.clone(),
                frame,
                self.session.clone(),
                self.outgoing.clone(),
                self.peer,
            );
            handlers.spawn(task);
        }
    }
}

/// Runs the handler on one request and queues its response.
async fn handle_one<H: Handler>(
    handler: Arc<H>,
    request: Frame,
    session: Arc<Session>,
    outgoing: mpsc::Sender<EncodedFrame>,
    peer: SocketAddr,
) {
    let (kind, request_id) = (request.kind, request.request_id);
    let Some(mut response) = handler.handle(request, session).await else {
        return;
    };
    if request_id == 0 {
        tracing::debug!(%peer, kind, "response to a one-way message, dropped");
        return;
    }
    response.request_id = request_id;
    response.is_response = true;
    match response.encode() {
        // Fails only if the connection is already gone.
        Ok(encoded) => drop(outgoing.send(encoded).await),
        Err(error) => {
            tracing::warn!(%peer, kind, request_id, %error, "handler response does not encode, dropped");
        }
    }
}

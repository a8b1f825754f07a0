//! One HTTP/1.1 connection: its plain reads answered on the socket (`plain.rs`), then hyper
//! serving the rest, under its watchdog (`watchdog.rs`), which closes it when its client is too
//! slow: a request head that takes longer than `header_read_timeout_seconds`, no request for
//! `idle_timeout_seconds`, or a response it reads none of for `send_timeout_seconds`. A request
//! body that stalls for `request_body_timeout_seconds` fails the request. Counted open, and
//! closed by reason ([`Meters`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

mod plain;
mod watchdog;

use watchdog::{AbortOnDrop, Answering, VERDICT_DRAIN, VERDICT_NONE, Watch, closed, verdict, watchdog};

use crate::config::HttpConfig;
use crate::http::Front;
use crate::metrics::Metrics;

/// The `[http]` settings a connection is served under.
pub(super) struct Limits {
    http1: http1::Builder,
    /// The longest request head taken.
    max_head: usize,
    header_read: Duration,
    idle: Duration,
    request_body: Duration,
    send: Duration,
}

impl From<&HttpConfig> for Limits {
    fn from(http: &HttpConfig) -> Self {
        let mut http1 = http1::Builder::new();
        // hyper's own header timer runs from the end of the previous response, so it would
        // also close idle connections; the watchdog below keeps the two apart.
        let max_head = usize::try_from(http.max_header_bytes).unwrap_or(usize::MAX);
        http1.header_read_timeout(None).max_header_size(max_head);
        Self {
            http1,
            max_head,
            header_read: Duration::from_secs(http.header_read_timeout_seconds),
            idle: Duration::from_secs(http.idle_timeout_seconds),
            request_body: Duration::from_secs(http.request_body_timeout_seconds),
            send: Duration::from_secs(http.send_timeout_seconds),
        }
    }
}

/// Why a connection closed: the `reason` label of `zarrgate_http_connections_closed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closed {
    Client,
    HeaderReadTimeout,
    IdleTimeout,
    SendTimeout,
    HeaderTooLarge,
    ProtocolError,
    ResponseAborted,
    Refused,
    Dropped,
}

impl Closed {
    const ALL: [Closed; 9] = [
        Closed::Client,
        Closed::HeaderReadTimeout,
        Closed::IdleTimeout,
        Closed::SendTimeout,
        Closed::HeaderTooLarge,
        Closed::ProtocolError,
        Closed::ResponseAborted,
        Closed::Refused,
        Closed::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            Closed::Client => "client",
            Closed::HeaderReadTimeout => "header_read_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::SendTimeout => "send_timeout",
            Closed::HeaderTooLarge => "header_too_large",
            Closed::ProtocolError => "protocol_error",
            Closed::ResponseAborted => "response_aborted",
            Closed::Refused => "refused",
            Closed::Dropped => "dropped",
        }
    }

    /// What the log says when the watchdog closes a connection for this reason.
    fn explain(self) -> &'static str {
        match self {
            Closed::HeaderReadTimeout => "header read timeout: a request head arrived too slowly",
            Closed::IdleTimeout => "idle timeout",
            Closed::SendTimeout => "send timeout: the client reads nothing",
            _ => self.label(),
        }
    }

    /// Why hyper ended a connection with an error.
    fn of(e: &hyper::Error) -> Self {
        if e.is_parse_too_large() {
            Closed::HeaderTooLarge
        } else if e.is_parse() || e.is_parse_status() {
            Closed::ProtocolError
        } else if e.is_user() {
            Closed::ResponseAborted
        } else {
            Closed::Client
        }
    }
}

/// The connection metrics, their label values resolved once.
pub(super) struct Meters {
    open: prometheus::IntGauge,
    closed: [prometheus::IntCounter; Closed::ALL.len()],
}

impl Meters {
    pub(super) fn new(metrics: &Metrics) -> Self {
        Self {
            open: metrics.http_connections_open.clone(),
            closed: Closed::ALL.map(|c| metrics.http_connections_closed_total.with_label_values(&[c.label()])),
        }
    }

    pub(super) fn closed(&self, why: Closed) {
        // `ALL` lists the reasons in declaration order.
        if let Some(counter) = self.closed.get(why as usize) {
            counter.inc();
        }
    }
}

/// Serves one connection until it ends, its client is too slow, or shutdown has let its last
/// request finish; counts it open meanwhile, and closed by reason after.
pub(super) async fn serve(
    stream: TcpStream,
    front: Arc<Front>,
    limits: Arc<Limits>,
    stopping: watch::Receiver<()>,
    meters: Arc<Meters>,
) {
    meters.open.inc();
    let why = serve_until_closed(stream, front, limits, stopping).await;
    // Counted while the socket is still open: whoever sees the connection closed sees it counted.
    meters.open.dec();
    meters.closed(why);
}

async fn serve_until_closed(
    stream: TcpStream,
    front: Arc<Front>,
    limits: Arc<Limits>,
    stopping: watch::Receiver<()>,
) -> Closed {
    let watch = Arc::new(Watch::new());
    // The watchdog is a task of its own: the connection's task polls the connection only, and
    // one load tells it whether the watchdog has spoken (callgrind: a `select!` with the
    // watchdog's timer and the shutdown signal in it cost 300 instructions a request).
    let _watchdog = AbortOnDrop(tokio::spawn(watchdog(watch.clone(), limits.clone(), stopping)));
    let mut io = Watched { io: stream, watch: watch.clone(), blocked: false, handed: Bytes::new() };
    // The waker last handed to the watchdog: handed again only when the task's changes.
    let mut registered: Option<std::task::Waker> = None;
    // What the plain reads looked up of the request they handed over: hyper's first.
    let mut looked_up = None;
    if let Some(reads) = front.reads() {
        match plain::answer(&mut io, reads, limits.max_head, &mut registered).await {
            plain::Ended::Closed(why) => return why,
            plain::Ended::HandedOver(bytes, handed) => (io.handed, looked_up) = (bytes, handed),
        }
    }
    let looked_up = std::cell::Cell::new(looked_up);
    let io = TokioIo::new(io);
    let service = {
        let (watch, request_body) = (watch.clone(), limits.request_body);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let answering = Answering::start(&watch);
            let front = front.clone();
            let handed = looked_up.take();
            async move {
                let mut response = front.answer(request, request_body, handed).await;
                // Here, outside the router: a method router adds `Allow` to its 405 after every
                // layer. Boxed: an error is rare, and this future is moved on every request.
                if response.status().is_client_error() || response.status().is_server_error() {
                    response = Box::pin(crate::error::last_as_problem(response)).await;
                }
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _answering: answering }))
            }
        })
    };
    let mut connection = std::pin::pin!(limits.http1.serve_connection(io, service));
    let mut draining = false;
    std::future::poll_fn(|cx| {
        match verdict(&watch, &mut registered, cx.waker()) {
            VERDICT_NONE => {}
            VERDICT_DRAIN => {
                if !draining {
                    // Requests in flight finish; an idle connection closes now, a busy one after.
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
            why => return Poll::Ready(closed(why)),
        }
        connection.as_mut().poll(cx).map(|ended| match ended {
            Ok(()) => Closed::Client,
            Err(e) => {
                tracing::debug!(error = %e, "connection ended with an error");
                Closed::of(&e)
            }
        })
    })
    .await
}

/// A response body that keeps its request counted as being answered while it lasts.
struct Tracked {
    body: Body,
    _answering: Answering,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noting when a request head starts arriving and when writes wait on the client.
struct Watched {
    io: TcpStream,
    watch: Arc<Watch>,
    /// A write is waiting on the client (mirrors `activity.blocked_since`, read without atomics).
    blocked: bool,
    /// Bytes read before hyper took the connection over (`plain.rs`), which it reads first.
    handed: Bytes,
}

impl Watched {
    fn wrote<T>(&mut self, polled: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match (&polled, self.blocked) {
            (Poll::Pending, false) => {
                self.blocked = true;
                let activity = &self.watch.activity;
                activity.blocked_since.store(activity.now(), Ordering::Relaxed);
            }
            (Poll::Ready(_), true) => {
                self.blocked = false;
                self.watch.activity.blocked_since.store(0, Ordering::Relaxed);
            }
            _ => {}
        }
        polled
    }
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if !self.handed.is_empty() {
            let n = self.handed.len().min(buf.remaining());
            buf.put_slice(&self.handed.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let a = &self.watch.activity;
        if buf.filled().len() > before
            && a.answering.load(Ordering::Relaxed) == 0
            && a.head_since.load(Ordering::Relaxed) == 0
        {
            a.head_since.store(a.now(), Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

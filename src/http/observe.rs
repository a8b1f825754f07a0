//! What every request goes through: a request id on its log lines, an access log line and
//! the HTTP metrics. Paid on every request, so kept cheap (bench/README.md, "Stop 14"): ids
//! from a counter, metric series resolved once per thread, nothing formatted for a log line
//! that is not written.

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use thread_local::ThreadLocal;

use crate::logs::InRequest;
use crate::metrics::{Metrics, RequestSeries};

pub(super) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The state of [`observe`]: where ids come from, and the metric series met so far.
pub(super) struct Observer {
    ids: RequestIds,
    metrics: Metrics,
    /// Each worker thread's series, so that finding one takes no lock.
    series: ThreadLocal<RefCell<SeriesMap>>,
}

impl Observer {
    pub(super) fn new(metrics: &Metrics) -> Self {
        Self { ids: RequestIds::new(), metrics: metrics.clone(), series: ThreadLocal::new() }
    }

    /// Counts a request of `route`, `method` and `status` that took `seconds`, in this thread's
    /// series (`metrics::HttpRequests`).
    fn count(&self, route: &str, method: &'static str, status: StatusCode, seconds: f64) {
        let mut map = self.series.get_or_default().borrow_mut();
        let found = map.entry_for(route, method, status.as_u16(), || {
            self.metrics.http_request_duration_seconds.series(route, method, status.as_str())
        });
        found.observe(seconds);
    }
}

/// A thread's series of one route, method and status.
type Series = Arc<RequestSeries>;

/// Series by route template, then by method and status (a route sees few of those).
#[derive(Default)]
struct SeriesMap(Vec<(Box<str>, Vec<Counted>)>);

/// The series of one method and status.
type Counted = (&'static str, u16, Series);

impl SeriesMap {
    fn entry_for(&mut self, route: &str, method: &'static str, status: u16, new: impl FnOnce() -> Series) -> &Series {
        // A scan: a server has a few dozen routes, fewer than hashing the route costs.
        let at = match self.0.iter().position(|(r, _)| **r == *route) {
            Some(at) => at,
            None => {
                self.0.push((route.into(), Vec::new()));
                self.0.len() - 1
            }
        };
        let by_route = &mut self.0[at].1;
        let at = match by_route.iter().position(|(m, s, _)| *s == status && *m == method) {
            Some(at) => at,
            None => {
                by_route.push((method, status, new()));
                by_route.len() - 1
            }
        };
        &by_route[at].2
    }
}

/// Request ids: a prefix drawn once per process, then a number (`1f0c9a6e5b2d4c87-42`): unique
/// across replicas and restarts without asking the OS for randomness per request.
struct RequestIds {
    prefix: [u8; 16],
}

/// Numbers of request ids not yet handed to a thread, a block at a time (the process's servers
/// share them: their prefixes differ).
static ID_BLOCKS: AtomicU64 = AtomicU64::new(1);
const ID_BLOCK: u64 = 1024;

thread_local! {
    /// The thread's block of request-id numbers: the next, and the end. Each worker counts in
    /// its own, where one counter for all would move between the cores' caches on every request.
    static ID_NUMBERS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl RequestIds {
    fn new() -> Self {
        let random = uuid::Uuid::new_v4().as_u64_pair().0;
        let mut prefix = [0; 16];
        for (i, digit) in prefix.iter_mut().enumerate() {
            *digit = b"0123456789abcdef"[((random >> (60 - 4 * i)) & 0xf) as usize];
        }
        Self { prefix }
    }

    fn number() -> u64 {
        ID_NUMBERS.with(|numbers| {
            let (mut next, mut end) = numbers.get();
            if next == end {
                next = ID_BLOCKS.fetch_add(ID_BLOCK, Ordering::Relaxed);
                end = next + ID_BLOCK;
            }
            numbers.set((next + 1, end));
            next
        })
    }

    fn next(&self) -> HeaderValue {
        let mut digits = itoa::Buffer::new();
        let mut id = [0u8; 16 + 1 + 20];
        let n = digits.format(Self::number()).as_bytes();
        id[..16].copy_from_slice(&self.prefix);
        id[16] = b'-';
        id[17..17 + n.len()].copy_from_slice(n);
        HeaderValue::from_bytes(&id[..17 + n.len()]).unwrap_or(HeaderValue::from_static("-"))
    }
}

/// The id of a request: the client's `x-request-id` when it is short visible ASCII, else a new
/// one.
fn request_id(observer: &Observer, headers: &HeaderMap) -> HeaderValue {
    match headers.get(&REQUEST_ID) {
        Some(v) if usable_id(v.as_bytes()) => v.clone(),
        _ => observer.ids.next(),
    }
}

/// Whether a client's `x-request-id` is used as the request's id: short visible ASCII.
fn usable_id(id: &[u8]) -> bool {
    id.len() <= 128 && id.iter().all(u8::is_ascii_graphic)
}

/// A label value per method the server knows; any name a client makes up is one label, or
/// every made-up name would add series to /metrics for good.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Request id, an access log line and the HTTP metrics. Every line logged within the request
/// carries the id (`logs.rs`); the access line names the method and route.
pub(super) async fn observe(State(observer): State<Arc<Observer>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let (observed, id) = Observed::start(&observer, request.headers());
    identified(id, async move {
        let response = next.run(request).await;
        let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
        observed.finish(&observer, route, &method, uri.path(), response).await
    })
    .await
}

/// `answer`, with `id` on the log lines written while it is polled ([`InRequest`]), then in
/// its `x-request-id` header.
pub(super) fn identified<F: Future<Output = Response>>(id: HeaderValue, answer: F) -> Identified<F> {
    Identified { answering: InRequest::new(id, answer) }
}

pin_project_lite::pin_project! {
    /// See [`identified`]. A future of its own, not an `async` block: that would move the
    /// answer's future once more (callgrind: a `memcpy` of 250 instructions a request).
    pub(super) struct Identified<F> {
        #[pin]
        answering: InRequest<F>,
    }
}

impl<F: Future<Output = Response>> Future for Identified<F> {
    type Output = Response;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let mut answering = self.project().answering;
        let mut response = std::task::ready!(answering.as_mut().poll(cx));
        if let Some(id) = answering.take_id() {
            response.headers_mut().insert(REQUEST_ID, id);
        }
        Poll::Ready(response)
    }
}

/// A request under observation: what [`observe`] holds while the router answers it, and what
/// `front.rs` holds while it answers a read the router never sees.
pub(super) struct Observed {
    started: Instant,
}

impl Observed {
    /// The observation of a request with `headers`, and the request's id (for [`identified`]).
    pub(super) fn start(observer: &Observer, headers: &HeaderMap) -> (Self, HeaderValue) {
        (Self { started: Instant::now() }, request_id(observer, headers))
    }

    /// The answer as the client gets it: an error as problem+json, counted, logged.
    pub(super) async fn finish(
        self,
        observer: &Observer,
        route: &str,
        method: &Method,
        path: &str,
        mut response: Response,
    ) -> Response {
        if response.status().is_client_error() || response.status().is_server_error() {
            // Boxed: errors are rare, and this future is moved on every request.
            response = Box::pin(crate::error::as_problem(response)).await;
        }
        self.finish_now(observer, route, method, path, response)
    }

    /// The observation of a request whose client sent `id` as its `x-request-id` (if any), and
    /// the request's id, as [`Observed::start`] for a request not parsed into a header map.
    pub(super) fn start_raw(observer: &Observer, id: Option<&[u8]>) -> (Self, HeaderValue) {
        let id = match id.filter(|id| usable_id(id)).map(HeaderValue::from_bytes) {
            Some(Ok(id)) => id,
            _ => observer.ids.next(),
        };
        (Self { started: Instant::now() }, id)
    }

    /// [`Observed::finish`] of an answer that is not an error (nothing to wait for).
    pub(super) fn finish_now(
        &self,
        observer: &Observer,
        route: &str,
        method: &Method,
        path: &str,
        response: Response,
    ) -> Response {
        self.counted(observer, route, method, path, response.status());
        response
    }

    /// Counts and logs the answer of `status` to this request.
    pub(super) fn counted(&self, observer: &Observer, route: &str, method: &Method, path: &str, status: StatusCode) {
        let elapsed = self.started.elapsed();
        observer.count(route, method_label(method), status, elapsed.as_secs_f64());
        let ms = elapsed.as_secs_f64() * 1e3;
        if status.is_server_error() {
            tracing::warn!(%method, %route, status = status.as_u16(), %path, ms, "request failed");
        } else if route.starts_with("/api/") {
            tracing::info!(%method, %route, status = status.as_u16(), %path, ms, "request");
        } else {
            tracing::debug!(%method, %route, status = status.as_u16(), %path, ms, "request");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RequestIds;

    #[test]
    fn request_ids_are_unique_across_threads_and_blocks() {
        let ids = std::sync::Arc::new(RequestIds::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ids = ids.clone();
                std::thread::spawn(move || (0..3000).map(|_| ids.next()).collect::<Vec<_>>())
            })
            .collect();
        let all: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 4 * 3000);
        let first = all[0].to_str().unwrap();
        assert!(first.len() > 17 && first.as_bytes()[16] == b'-' && first[..16].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}

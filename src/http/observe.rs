//! What every request goes through: a request id on its log lines, an access log line and
//! the HTTP metrics. Paid on every request, so kept cheap (bench/README.md, "Stop 14"): ids
//! from a counter, metric series resolved once per thread, nothing formatted for a log line
//! that is not written.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{Histogram, IntCounter};
use thread_local::ThreadLocal;

use crate::logs::InRequest;
use crate::metrics::Metrics;

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

    /// Counts a request of `route`, `method` and `status` that took `seconds`.
    fn count(&self, route: &str, method: &'static str, status: StatusCode, seconds: f64) {
        let mut map = self.series.get_or_default().borrow_mut();
        let found = map.entry_for(route, method, status.as_u16(), || {
            let labels = [route, method, status.as_str()];
            Series {
                requests: self.metrics.http_requests_total.with_label_values(&labels),
                duration: self.metrics.http_request_duration_seconds.with_label_values(&labels),
            }
        });
        found.requests.inc();
        found.duration.observe(seconds);
    }
}

/// The two series a request is counted in.
struct Series {
    requests: IntCounter,
    duration: Histogram,
}

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

/// Request ids: a prefix drawn once per process, then a counter (`1f0c9a6e5b2d4c87-42`):
/// unique across replicas and restarts without asking the OS for randomness per request.
struct RequestIds {
    prefix: [u8; 16],
    next: AtomicU64,
}

impl RequestIds {
    fn new() -> Self {
        let random = uuid::Uuid::new_v4().as_u64_pair().0;
        let mut prefix = [0; 16];
        for (i, digit) in prefix.iter_mut().enumerate() {
            *digit = b"0123456789abcdef"[((random >> (60 - 4 * i)) & 0xf) as usize];
        }
        Self { prefix, next: AtomicU64::new(1) }
    }

    fn next(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut digits = itoa::Buffer::new();
        let mut id = [0u8; 16 + 1 + 20];
        let n = digits.format(n).as_bytes();
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
        Some(v) if v.len() <= 128 && v.as_bytes().iter().all(u8::is_ascii_graphic) => v.clone(),
        _ => observer.ids.next(),
    }
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
    let observed = Observed::start(&observer, request.headers());
    InRequest::new(observed.id(), async move {
        let response = next.run(request).await;
        let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
        observed.finish(&observer, route, &method, uri.path(), response).await
    })
    .await
}

/// A request under observation: what [`observe`] holds while the router answers it, and what
/// `front.rs` holds while it answers a read the router never sees.
pub(super) struct Observed {
    started: Instant,
    id: HeaderValue,
}

impl Observed {
    pub(super) fn start(observer: &Observer, headers: &HeaderMap) -> Self {
        Self { started: Instant::now(), id: request_id(observer, headers) }
    }

    /// The request's id, for [`InRequest`]: on the log lines written while it is answered.
    pub(super) fn id(&self) -> HeaderValue {
        self.id.clone()
    }

    /// The answer as the client gets it: an error as problem+json, counted, logged, with its id.
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
        let status = response.status();
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
        response.headers_mut().insert(REQUEST_ID, self.id);
        response
    }
}

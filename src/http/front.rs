//! What a connection hands each request to: the router, and in front of it the one request
//! that is most of a Zarr client's traffic, `GET /{store}/{key}`, answered without it.
//!
//! That read goes through the same handler ([`data::read_key`]), the same observation (request
//! id on the log lines, access line, metrics: [`Observed`]) and gets the same CORS headers as
//! through the router; what it skips is the router's own work, paid on every request: matching the route,
//! decoding its parameters into `String`s, cloning the layered routes, and boxing the request's
//! future once per layer (bench/README.md, "Stop 16"). Anything else, or a read the router must
//! see (a percent-encoded path or one with `//`, a store named `api`, read tokens required), goes
//! to the router, its body under the request-body timeout and its path with `//` collapsed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::Response;
use bytes::Bytes;
use futures::FutureExt;
use hyper::body::Incoming;
use tower::{Layer, ServiceExt};
use tower_http::timeout::TimeoutBody;

use super::answer;
use super::data::{self, Plane};
use super::observe::{self, Observed, Observer};
use crate::logs;
use crate::versions::Lookup;

/// The router, and what answers a plain read in front of it.
pub(crate) struct Front {
    router: Router,
    reads: Option<Reads>,
}

/// What a plain read needs: the data plane, the observer the router's requests go through too,
/// and the CORS headers the router's CORS layer would add.
pub(crate) struct Reads {
    plane: Arc<Plane>,
    observer: Arc<Observer>,
    /// The CORS headers.
    cors: answer::Added,
}

impl Front {
    /// `reads` is `None` when every read must go through the router (read tokens: the router's
    /// layer checks them).
    pub(super) fn new(router: Router, reads: Option<(Arc<Plane>, Arc<Observer>, bool)>) -> Self {
        let reads = reads.and_then(|(plane, observer, cors)| {
            let cors = if cors { cors_headers()? } else { HeaderMap::new() };
            let cors = cors.iter().map(|(n, v)| (n.clone(), answer::lasting(v), n == header::VARY)).collect();
            Some(Reads { plane, observer, cors: answer::Added::new(cors) })
        });
        Self { router, reads }
    }

    /// The answer to `request`, whose body may take up to `body_timeout` between two frames;
    /// `handed` is what the connection's plain reads looked up of it, if they handed it over.
    pub(crate) async fn answer(
        &self,
        request: hyper::Request<Incoming>,
        body_timeout: Duration,
        handed: Option<Handed>,
    ) -> Response {
        if let Some(reads) = &self.reads
            && request.method() == Method::GET
            && let Some(split) = data::key_split(request.uri().path())
        {
            // A GET's body is nothing to read. The parts are kept, not the request: cheaper
            // than keeping the body to put the request back together (callgrind: 600
            // instructions more per request, in moves).
            return reads.answer(request.into_parts().0, split, handed).await;
        }
        let request = request.map(|body| Body::new(TimeoutBody::new(body_timeout, body)));
        let request = collapse_slashes(request);
        match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

impl Reads {
    /// The answer to `GET /{store}/{key}`, `split` the index of the `/` between the two:
    /// without waiting when it can be ([`data::read_key_now`]), else as the router's would be,
    /// going on from the lookup `handed` over by the connection's plain reads if it is this
    /// read's.
    async fn answer(&self, request: Parts, split: usize, handed: Option<Handed>) -> Response {
        let path = request.uri.path();
        let at = data::key_at(path, split);
        let (observed, id) = Observed::start(&self.observer, &request.headers);
        let handed = handed.filter(|h| *h.path == *path).map(|h| h.lookup);
        let (now, id) = logs::in_request(id, || {
            // A read the plain reads handed over is not one to answer without waiting.
            let response = match handed {
                Some(lookup) => return Err(lookup),
                None => data::read_key_now(&self.plane, at, &request, &self.cors)?,
            };
            Ok(observed.finish_now(&self.observer, data::KEY_ROUTE, &Method::GET, path, response))
        });
        let response = match now {
            Ok(mut response) => {
                response.headers_mut().insert(observe::REQUEST_ID, id);
                response
            }
            Err(so_far) => {
                observe::identified(id, async {
                    let response = self.cors.apply(data::read_key(&self.plane, at, &request, Some(so_far)).await);
                    observed.finish(&self.observer, data::KEY_ROUTE, &Method::GET, path, response).await
                })
                .await
            }
        };
        // The request's header map, emptied, becomes the next answer's (answer.rs, `sized`).
        answer::recycle(request.headers);
        response
    }
}

impl Front {
    /// What answers plain reads as bytes on the connection ([`Reads::answer_wire`]), if they
    /// may be answered in front of the router.
    pub(crate) fn reads(&self) -> Option<&Reads> {
        self.reads.as_ref()
    }
}

impl Reads {
    /// The full answer to `GET {path}` (no query), for a request that asks no range, revalidates
    /// nothing, accepts gzip if `gzip` and sent `id` as its `x-request-id` (if any): its head
    /// appended to `out` as sent on the connection, and its body, to be sent right after it (the
    /// shared bytes the version or the cache holds, not a copy): the bytes hyper would send for
    /// [`Reads::answer`]'s answer, without hyper (bench/README.md, "Stop 22"). Waits only when
    /// this worker thread does not have what it needs at hand. `Err` (and `out` as it was) when
    /// that answer is not a full one of a metadata document or a chunk in memory: the request
    /// is then hyper's, handed over with what was looked up of it (`None`: nothing was).
    pub(crate) async fn answer_wire(
        &self,
        path: &str,
        gzip: bool,
        id: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> Result<Bytes, Option<Handed>> {
        let split = data::key_split(path).ok_or(None)?;
        let at = data::key_at(path, split);
        let (observed, id) = Observed::start_raw(&self.observer, id);
        let (now, id) = logs::in_request(id, || data::read_key_wire(&self.plane, at, gzip, &self.cors, out));
        let handed = |lookup| Some(Handed { path: path.into(), lookup });
        let (body, id) = match now {
            Ok(body) => (body, id),
            Err(Lookup::Pending(pending)) => {
                let so_far = Lookup::Pending(pending);
                let waiting = data::read_key_wire_waiting(&self.plane, at, gzip, &self.cors, out, so_far);
                let mut waiting = std::pin::pin!(logs::InRequest::new(id, waiting));
                let body = waiting.as_mut().await.map_err(handed)?;
                // Always there once the future has completed (`InRequest` puts it back).
                (body, waiting.take_id().unwrap_or(axum::http::HeaderValue::from_static("-")))
            }
            // Hyper's, with the lookup: the router's way goes on from it, and counts nothing twice.
            Err(lookup) => return Err(handed(lookup)),
        };
        // The request id is written after the lookups, whose log lines carried it meanwhile: no
        // copy of it is made.
        answer::full_wire_end(&id, body.len(), out);
        observed.counted(&self.observer, data::KEY_ROUTE, &Method::GET, path, axum::http::StatusCode::OK);
        Ok(body)
    }
}

/// A plain read handed over to hyper, and what was looked up of it: hyper's first request on
/// the connection, which goes on from the lookup instead of making it again.
pub(crate) struct Handed {
    /// The read's path.
    path: Box<str>,
    lookup: Lookup,
}

/// The headers the data plane's CORS layer adds to an answer that is not a preflight. With its
/// settings (any origin, fixed lists) they do not depend on the request: they are read off the
/// layer itself, once, so that the two paths cannot differ. `None` if the layer ever needs to
/// wait (then every read goes through the router).
fn cors_headers() -> Option<HeaderMap> {
    let empty = tower::service_fn(|_: Request| std::future::ready(Ok::<_, Infallible>(Response::new(Body::empty()))));
    let answered = super::cors().layer(empty).oneshot(Request::new(Body::empty())).now_or_never()?;
    let Ok(response) = answered;
    Some(response.headers().clone())
}

/// `//` in a path means `/` (obstore with a trailing-slash base URL sends `store//zarr.json`).
fn collapse_slashes(mut request: Request) -> Request {
    let path = request.uri().path();
    if !path.contains("//") {
        return request;
    }
    let mut collapsed = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && collapsed.ends_with('/')) {
            collapsed.push(c);
        }
    }
    let rebuilt = match request.uri().query() {
        Some(q) => format!("{collapsed}?{q}"),
        None => collapsed,
    };
    if let Ok(path_and_query) = rebuilt.parse() {
        let mut parts = request.uri().clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

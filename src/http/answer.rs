//! Answers of the data plane, whatever view asked for them (v3 keys, the Zarr v2 view, the
//! listings): metadata documents and chunks with their ETags, Range and conditional requests,
//! and the headers every answer about a version carries (their heads: [`head`], the kept heads of full answers: [`kept`]).

mod head;
mod kept;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

pub(super) use head::{Added, Kind, Page, full_wire_end, tag_value};
use head::{Head, NOTHING_ADDED, Status};
pub(super) use kept::{full, full_wire};

use super::range::{Plan, plan};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::view::RenderedDoc;
use crate::versions::{Chunk, VirtualChunk};
use crate::zarr::hierarchy::Node;

/// Which version a response belongs to.
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("zarrgate-version");

/// Headers every answer about a version carries.
pub(super) struct Served {
    pub(super) cache_control: HeaderValue,
    /// The version's number (`Zarrgate-Version`); `None` in an answer about no one version (the
    /// list of stores).
    pub(super) version: Option<HeaderValue>,
    pub(super) last_modified: HeaderValue,
    pub(super) head_only: bool,
}

/// What a URL asks for under a store: a key (`obs/zarr.json`, `obs/`, `""` for the store
/// itself), and whether the URL ends with `/` (`/{store}/` does, `/{store}` does not).
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) key: &'a str,
    pub(super) directory: bool,
}

/// A rendered metadata document (`zarr.json`, or a v2 document), gzip-compressed when asked.
pub(super) async fn metadata(doc: &RenderedDoc, headers: &HeaderMap, served: &Served) -> Response {
    // Compressed only for a client that asks (the gzip body is made then if it is not yet: a
    // large one on a blocking thread).
    let gzip = if accepts_gzip(headers) { doc.gzip_off_workers().await } else { None };
    metadata_with(doc, gzip, headers, served)
}

/// `doc`'s answer, from `gzip` when there is one and the client asked for it.
fn metadata_with(doc: &RenderedDoc, gzip: Option<Bytes>, headers: &HeaderMap, served: &Served) -> Response {
    let (body, tag, kind) = match gzip {
        Some(gz) => (gz, &doc.gzip_etag, Kind::JsonGzip),
        None => (doc.identity.clone(), &doc.etag, Kind::Json),
    };
    bytes_answer(body, tag, kind, headers, served, &NOTHING_ADDED)
}

/// The answer for `chunk` (of array `node`, at `key`), as the lookup found it.
pub(super) async fn chunk(
    app: &AppState,
    chunk: Chunk,
    node: &Node,
    key: &str,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    match chunk {
        Chunk::Missing => Err(ApiError::NotFound(format!(
            "chunk {key:?} of array {} has no data: readers use its fill value",
            node.path
        ))),
        Chunk::Bytes { bytes, etag } => Ok(bytes_chunk(bytes, &etag, headers, served)),
        // Boxed: reading a source is a large future, and inline chunks must not carry it.
        Chunk::Virtual(chunk) => Box::pin(virtual_chunk(app, &chunk, headers, served)).await,
    }
}

/// A chunk whose bytes are at hand (inline, or a fill chunk) tagged `etag`.
fn bytes_chunk(bytes: Bytes, etag: &str, headers: &HeaderMap, served: &Served) -> Response {
    bytes_answer(bytes, &tag_value(etag), Kind::Octet, headers, served, &NOTHING_ADDED)
}

async fn virtual_chunk(
    app: &AppState,
    chunk: &VirtualChunk,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let length = chunk.length;
    let tag = tag_value(&chunk.etag);
    let head = |status, length| Head { status, kind: Kind::Octet, etag: &tag, served, length, added: &NOTHING_ADDED };
    let (status, range) = match plan(headers, length, tag.to_str().unwrap_or_default()) {
        Plan::NotModified => return Ok(head(Status::NotModified, Some(length)).response(Body::empty())),
        Plan::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { len: length }),
        Plan::Full => (Status::Full, 0..length),
        Plan::Partial(r) => (Status::Partial { range: r.clone(), of: length }, r),
    };
    // Nothing to read for HEAD, nor for an empty reference (object stores refuse empty ranges).
    let body = if served.head_only || range.is_empty() {
        Body::empty()
    } else {
        Body::from_stream(app.reader.fetch(chunk, range.clone()).await?.body)
    };
    Ok(head(status, Some(range.end - range.start)).response(body))
}

/// A body of `kind` held in memory, with conditional and Range handling, for a page or a listing.
pub(super) fn bytes_response(
    body: Bytes,
    tag: &HeaderValue,
    kind: Kind,
    headers: &HeaderMap,
    served: &Served,
) -> Response {
    bytes_answer(body, tag, kind, headers, served, &NOTHING_ADDED)
}

/// A body of `kind` held in memory, with conditional and Range handling, and the headers `added`.
pub(super) fn bytes_answer(
    body: Bytes,
    tag: &HeaderValue,
    kind: Kind,
    headers: &HeaderMap,
    served: &Served,
    added: &Added,
) -> Response {
    let len = body.len() as u64;
    let (status, range) = match plan(headers, len, tag.to_str().unwrap_or_default()) {
        Plan::NotModified => {
            let head = Head { status: Status::NotModified, kind, etag: tag, served, length: Some(len), added };
            return head.response(Body::empty());
        }
        Plan::Unsatisfiable => {
            let mut refused = ApiError::RangeNotSatisfiable { len }.into_response();
            if kind.varies() {
                refused.headers_mut().insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            }
            return refused;
        }
        Plan::Full => (Status::Full, 0..len),
        Plan::Partial(r) => (Status::Partial { range: r.clone(), of: len }, r),
    };
    // A body in memory: hyper writes its length itself. HEAD has no body to measure.
    let (body, length) = if served.head_only {
        (Body::empty(), Some(range.end - range.start))
    } else {
        (Body::from(body.slice(range.start as usize..range.end as usize)), None)
    };
    Head { status, kind, etag: tag, served, length, added }.response(body)
}

/// A response with room for the headers a data-plane answer carries (those set here, the CORS
/// ones, the version and the request id), so that its header map is allocated once, if at all:
/// the thread's spare map when it has one.
fn sized(body: Body) -> Response {
    let mut response = Response::new(body);
    *response.headers_mut() = SPARE.take().unwrap_or_else(|| HeaderMap::with_capacity(16));
    response
}

thread_local! {
    /// An emptied header map to build the thread's next answer in. hyper hands each answer's
    /// map back as the connection's next request's, and `front.rs` hands that back here once
    /// the request is answered: a map goes round, where two allocations and a map's drop were
    /// paid per request (callgrind: `sized` went from 420 instructions to 160).
    static SPARE: std::cell::Cell<Option<HeaderMap>> = const { std::cell::Cell::new(None) };
}

/// Keeps `headers` (a request's, answered) as the thread's spare map, emptied; not a map too
/// small to take an answer's headers without growing, nor one grown large by a client's many
/// headers.
pub(super) fn recycle(mut headers: HeaderMap) {
    if (16..=64).contains(&headers.capacity()) {
        headers.clear();
        SPARE.set(Some(headers));
    }
}

/// `value`, made to clone for nothing: a header value made at run time clones by counting its
/// users in memory that every worker thread writes (callgrind and perf: a `Bytes` clone and drop
/// on each answer), a static one by copying a pointer. For the values fixed for the life of a
/// server (its CORS headers, its `Cache-Control`), made once each: what they hold is kept for the
/// rest of the process, a few dozen bytes per server started.
pub(super) fn lasting(value: &HeaderValue) -> HeaderValue {
    match value.to_str() {
        Ok(text) if text.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) => {
            HeaderValue::from_static(Box::leak(text.to_owned().into_boxed_str()))
        }
        _ => value.clone(),
    }
}

pub(super) fn accepts_gzip(headers: &HeaderMap) -> bool {
    accepts_gzip_in(headers.get_all(header::ACCEPT_ENCODING).iter().map(HeaderValue::as_bytes))
}

/// [`accepts_gzip`] of a request whose `Accept-Encoding` lines are `values`.
#[inline]
pub(crate) fn accepts_gzip_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    // As `HeaderValue::to_str`: visible ASCII only.
    let visible = |v: &&[u8]| v.iter().all(|&b| b == b'\t' || (32..127).contains(&b));
    let items = values.filter(visible).filter_map(|v| std::str::from_utf8(v).ok()).flat_map(|v| v.split(','));
    // RFC 9110 12.5.3: an explicit `gzip` entry decides, `*` only speaks for codings not named.
    let (mut gzip, mut any) = (None, None);
    for item in items {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default();
        let q = parts.find_map(|p| p.strip_prefix("q=")).map_or(1.0, |q| q.trim().parse::<f32>().unwrap_or(0.0));
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(q > 0.0);
        } else if coding == "*" {
            any = Some(q > 0.0);
        }
    }
    gzip.or(any).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_only_when_asked() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip, deflate")));
        assert!(accepts_gzip(&h("br;q=1.0, gzip;q=0.8")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&h("deflate")));
        assert!(!accepts_gzip(&h("gzip;q=0, *")), "an explicit refusal beats the wildcard");
        assert!(accepts_gzip(&h("*")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}

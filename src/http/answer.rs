//! Answers of the data plane, whatever view asked for them (v3 keys, the Zarr v2 view, the
//! listings): metadata documents and chunks with their ETags, Range and conditional requests,
//! and the headers every answer about a version carries.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::range::{Plan, plan};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::view::RenderedDoc;
use crate::versions::{Chunk, VersionView, VirtualChunk};
use crate::zarr::hierarchy::Node;

/// Which version a response belongs to.
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("zarrgate-version");

/// Headers every answer about a version carries.
pub(super) struct Served {
    pub(super) cache_control: HeaderValue,
    pub(super) version: HeaderValue,
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
    match gzip {
        Some(gz) => metadata_with_tag(gz, &doc.gzip_etag, true, headers, served),
        None => metadata_with_tag(doc.identity.clone(), &doc.etag, false, headers, served),
    }
}

/// A metadata document's answer from its body (`gzip`-compressed or not) and the body's ETag.
pub(super) fn metadata_with_tag(
    body: Bytes,
    etag: &HeaderValue,
    gzip: bool,
    headers: &HeaderMap,
    served: &Served,
) -> Response {
    let mut response = bytes_response(body, etag, "application/json", headers, served);
    let success = response.status().is_success();
    let h = response.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip && success {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
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
    bytes_response(bytes, &tag_value(etag), "application/octet-stream", headers, served)
}

async fn virtual_chunk(
    app: &AppState,
    chunk: &VirtualChunk,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let length = chunk.length;
    let tag = tag_value(&chunk.etag);
    let (status, range) = match plan(headers, length, tag.to_str().unwrap_or_default()) {
        Plan::NotModified => return Ok(not_modified(&tag, served, length)),
        Plan::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { len: length }),
        Plan::Full => (StatusCode::OK, 0..length),
        Plan::Partial(r) => (StatusCode::PARTIAL_CONTENT, r),
    };
    // Nothing to read for HEAD, nor for an empty reference (object stores refuse empty ranges).
    let mut response = if served.head_only || range.is_empty() {
        sized(Body::empty())
    } else {
        sized(Body::from_stream(app.reader.fetch(chunk, range.clone()).await?.body))
    };
    *response.status_mut() = status;
    let h = response.headers_mut();
    set_common(h, &tag, "application/octet-stream", served);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(header::CONTENT_RANGE, content_range(&range, length));
    }
    Ok(response)
}

/// A body held in memory, with conditional and Range handling.
pub(super) fn bytes_response(
    body: Bytes,
    tag: &HeaderValue,
    content_type: &'static str,
    headers: &HeaderMap,
    served: &Served,
) -> Response {
    let len = body.len() as u64;
    let (status, range) = match plan(headers, len, tag.to_str().unwrap_or_default()) {
        Plan::NotModified => return not_modified(tag, served, len),
        Plan::Unsatisfiable => return ApiError::RangeNotSatisfiable { len }.into_response(),
        Plan::Full => (StatusCode::OK, 0..len),
        Plan::Partial(r) => (StatusCode::PARTIAL_CONTENT, r),
    };
    let content_length = range.end - range.start;
    let body =
        if served.head_only { Body::empty() } else { Body::from(body.slice(range.start as usize..range.end as usize)) };
    let mut response = sized(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    set_common(h, tag, content_type, served);
    // A body in memory: hyper writes its length itself, with no allocation and no header to
    // insert or to check again. HEAD has no body to measure.
    if served.head_only {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(content_length));
    }
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(header::CONTENT_RANGE, content_range(&range, len));
    }
    response
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

/// 304, with the length of the representation it stands for: a `Content-Length` on a 304 may
/// only be the 200's (RFC 9110 8.6), and HEAD would otherwise say 0.
fn not_modified(tag: &HeaderValue, served: &Served, len: u64) -> Response {
    let mut response = StatusCode::NOT_MODIFIED.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::ETAG, tag.clone());
    h.insert(header::CACHE_CONTROL, served.cache_control.clone());
    response
}

fn set_common(h: &mut HeaderMap, tag: &HeaderValue, content_type: &'static str, served: &Served) {
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CACHE_CONTROL, served.cache_control.clone());
    h.insert(header::LAST_MODIFIED, served.last_modified.clone());
    h.insert(header::ETAG, tag.clone());
}

/// Headers added to the answers given in front of the router (the CORS layer's there), and the
/// number of the set: a head built with one set is never reused with another.
pub(super) struct Added {
    id: u64,
    /// Each header, and whether it is added to (`Vary`) rather than set.
    headers: Vec<(HeaderName, HeaderValue, bool)>,
}

impl Added {
    pub(super) fn new(headers: Vec<(HeaderName, HeaderValue, bool)>) -> Self {
        static SETS: AtomicU64 = AtomicU64::new(0);
        Self { id: SETS.fetch_add(1, Ordering::Relaxed), headers }
    }

    /// `response` with the headers, as the CORS layer adds them: `Vary` added to, the others set.
    pub(super) fn apply(&self, mut response: Response) -> Response {
        self.apply_to(response.headers_mut());
        response
    }

    fn apply_to(&self, h: &mut HeaderMap) {
        for (name, value, vary) in &self.headers {
            if *vary {
                h.append(name, value.clone());
            } else {
                h.insert(name, value.clone());
            }
        }
    }
}

/// The body of a full answer, which decides its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A metadata document as rendered.
    Json,
    /// A metadata document, gzip-compressed.
    JsonGzip,
    /// A chunk's bytes.
    Octet,
}

impl Kind {
    pub(super) fn content_type(self) -> &'static str {
        if self == Kind::Octet { "application/octet-stream" } else { "application/json" }
    }
}

/// The answer (200, all of `body`) to a GET of something in `view` that asks for no range and
/// revalidates nothing: with the headers [`metadata_with`] and [`bytes_chunk`] would give it
/// (and `versioned`, and `added`), from a head built once per thread, version, kind, URL form
/// and `added`, then cloned. Cloning a map of a dozen headers costs a fifth of inserting them
/// one by one (hashing each name, probing, growing): bench/README.md, "Stop 21". The head's
/// first entry is the ETag, set here; its second the request id, set by the caller.
pub(super) fn full(
    view: &Arc<VersionView>,
    kind: Kind,
    pinned: bool,
    served: impl FnOnce() -> Served,
    added: &Added,
    tag: &HeaderValue,
    body: Bytes,
) -> Response {
    let mut h = HEADS.with_borrow_mut(|heads| heads.find(view, kind, pinned, added, served).head.clone());
    match h.iter_mut().next() {
        Some((name, value)) if name == header::ETAG => *value = tag.clone(),
        _ => drop(h.insert(header::ETAG, tag.clone())),
    }
    let mut response = Response::new(Body::from(body));
    *response.headers_mut() = h;
    response
}

/// [`full`]'s answer as the bytes sent on an HTTP/1.1 connection, begun in `out`: its status
/// line and head up to `tag`, the ETag; [`full_wire_end`] writes the rest. The head's other lines
/// are written once per thread, version and kind, like [`full`]'s head.
pub(super) fn full_wire(
    view: &Arc<VersionView>,
    kind: Kind,
    pinned: bool,
    served: impl FnOnce() -> Served,
    added: &Added,
    tag: &HeaderValue,
    out: &mut Vec<u8>,
) {
    HEADS.with_borrow_mut(|heads| out.extend_from_slice(&heads.find(view, kind, pinned, added, served).wire));
    wire_line(out, b"etag: ", tag.as_bytes());
}

/// The end of the head of an answer [`full_wire`] began: `id` (the request id), the `Date` and
/// the body's length (`len`). The body is the caller's to send after it: copying a large one
/// here would give every connection a copy of its own, held while its client reads slowly.
pub(super) fn full_wire_end(id: &HeaderValue, len: usize, out: &mut Vec<u8>) {
    wire_line(out, b"x-request-id: ", id.as_bytes());
    with_date(|date| wire_line(out, b"date: ", date));
    wire_line(out, b"content-length: ", itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn wire_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `f` of the `Date` of an answer sent now, as hyper writes it (formatted once a second per
/// thread).
fn with_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    thread_local! {
        static DATE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }
    let now = std::time::SystemTime::now();
    let second = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, date)| {
        if *at != second {
            *at = second;
            *date = httpdate::fmt_http_date(now).into_bytes();
        }
        f(date)
    })
}

thread_local! {
    /// The heads of full answers this thread built last ([`full`]).
    static HEADS: RefCell<Heads> = const { RefCell::new(Heads { kept: Vec::new(), next: 0 }) };
}

/// How many heads a thread keeps: a few stores' versions, in each kind and URL form.
const HEADS_KEPT: usize = 16;

struct Heads {
    kept: Vec<Head>,
    /// Which one the next new head replaces, once there are [`HEADS_KEPT`].
    next: usize,
}

/// A head of full answers about one version (held weakly: a view that leaves the cache is freed,
/// and its address is not reused while this is kept, so that a new view cannot be mistaken for
/// it).
struct Head {
    view: Weak<VersionView>,
    kind: Kind,
    pinned: bool,
    added: u64,
    head: HeaderMap,
    /// The status line and the head's lines but the ETag and the request id, as sent.
    wire: Vec<u8>,
}

impl Heads {
    fn find(
        &mut self,
        view: &Arc<VersionView>,
        kind: Kind,
        pinned: bool,
        added: &Added,
        served: impl FnOnce() -> Served,
    ) -> &Head {
        let found = self.kept.iter().position(|k| {
            k.view.as_ptr() == Arc::as_ptr(view) && k.kind == kind && k.pinned == pinned && k.added == added.id
        });
        let at = match found {
            Some(at) => at,
            None => {
                let head = head(kind, &served(), added);
                let wire = wire(&head);
                let head = Head { view: Arc::downgrade(view), kind, pinned, added: added.id, head, wire };
                if self.kept.len() < HEADS_KEPT {
                    self.kept.push(head);
                    self.kept.len() - 1
                } else {
                    let at = self.next;
                    self.next = (at + 1) % HEADS_KEPT;
                    self.kept[at] = head;
                    at
                }
            }
        };
        &self.kept[at]
    }
}

/// The status line of a 200 and the lines of `head` but its first two (the ETag's and the
/// request id's places), as hyper writes them.
fn wire(head: &HeaderMap) -> Vec<u8> {
    let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
    for (name, value) in head.iter().skip(2) {
        wire_line(&mut wire, format!("{name}: ").as_bytes(), value.as_bytes());
    }
    wire
}

/// The head of full answers of `kind` about the version `served` names: the headers of
/// [`metadata_with`] or [`bytes_chunk`] for a 200, of `versioned`, and `added`; the ETag's and
/// the request id's places first, to be filled per answer.
fn head(kind: Kind, served: &Served, added: &Added) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(16);
    let unset = HeaderValue::from_static("-");
    h.insert(header::ETAG, unset.clone());
    h.insert(super::observe::REQUEST_ID, unset.clone());
    // The version's own values copied for this thread: a clone of one shared by every thread
    // counts its users in memory that every core writes.
    let own = |v: &HeaderValue| HeaderValue::from_bytes(v.as_bytes()).unwrap_or_else(|_| v.clone());
    let served = Served {
        cache_control: served.cache_control.clone(),
        version: own(&served.version),
        last_modified: own(&served.last_modified),
        head_only: false,
    };
    set_common(&mut h, &unset, kind.content_type(), &served);
    if kind != Kind::Octet {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    if kind == Kind::JsonGzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    h.insert(VERSION_HEADER, served.version);
    added.apply_to(&mut h);
    h
}

/// An ETag as a header value (ours are always visible ASCII).
pub(super) fn tag_value(tag: &str) -> HeaderValue {
    HeaderValue::from_str(tag).unwrap_or(HeaderValue::from_static("\"\""))
}

fn content_range(range: &std::ops::Range<u64>, len: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes {}-{}/{len}", range.start, range.end - 1))
        .unwrap_or(HeaderValue::from_static("bytes */0"))
}

pub(super) fn accepts_gzip(headers: &HeaderMap) -> bool {
    accepts_gzip_in(headers.get_all(header::ACCEPT_ENCODING).iter().map(HeaderValue::as_bytes))
}

/// [`accepts_gzip`] of a request whose `Accept-Encoding` lines are `values`.
pub(super) fn accepts_gzip_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
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

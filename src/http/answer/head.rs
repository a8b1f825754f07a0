//! The head of a data-plane answer that carries a representation: 200, 206 or 304. [`Head`]
//! says once what such a head holds (status, length, ETag, content type, `Vary`,
//! `Content-Encoding`, `Cache-Control`, `Last-Modified`, the version, and the headers added in
//! front of the router); its two encodings are derived from it here: a header map for hyper
//! ([`Head::response`]), and for full answers the bytes a plain read sends on the connection
//! ([`full_wire`]). A full answer's head is encoded once per worker thread, version, kind, URL
//! form and added set, and kept ([`full`], [`full_wire`]): per answer, only its ETag, request
//! id, `Date` and length are written (bench/README.md, "Stop 21" and "Stop 22").

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::{Served, VERSION_HEADER, sized};
use crate::http::observe::REQUEST_ID;
use crate::versions::VersionView;

/// What an answer's status line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::http) enum Status {
    /// 200: the whole body.
    Full,
    /// 206: `range` of a body `of` bytes long.
    Partial { range: Range<u64>, of: u64 },
    /// 304: the client's copy is current.
    NotModified,
}

impl Status {
    fn code(&self) -> StatusCode {
        match self {
            Status::Full => StatusCode::OK,
            Status::Partial { .. } => StatusCode::PARTIAL_CONTENT,
            Status::NotModified => StatusCode::NOT_MODIFIED,
        }
    }
}

/// The body of an answer, which decides its content type and whether it varies with the
/// client's `Accept-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) enum Kind {
    /// A metadata document as rendered.
    Json,
    /// A metadata document, gzip-compressed.
    JsonGzip,
    /// A chunk's bytes.
    Octet,
    /// A body rendered for the request: a listing, a page, a quick look.
    Page(Page),
}

/// What a body rendered for the request is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) enum Page {
    Html,
    Json,
    Png,
}

impl Kind {
    pub(in crate::http) fn content_type(self) -> &'static str {
        match self {
            Kind::Json | Kind::JsonGzip | Kind::Page(Page::Json) => "application/json",
            Kind::Octet => "application/octet-stream",
            Kind::Page(Page::Html) => "text/html; charset=utf-8",
            Kind::Page(Page::Png) => "image/png",
        }
    }

    /// Whether the body depends on `Accept-Encoding`: a metadata document, sent gzip-compressed
    /// to a client that asks.
    pub(in crate::http) fn varies(self) -> bool {
        matches!(self, Kind::Json | Kind::JsonGzip)
    }
}

/// The head of a 200, 206 or 304 answer about a version.
pub(in crate::http) struct Head<'a> {
    pub(in crate::http) status: Status,
    pub(in crate::http) kind: Kind,
    pub(in crate::http) etag: &'a HeaderValue,
    /// `Cache-Control`, `Last-Modified` and the version.
    pub(in crate::http) served: &'a Served,
    /// The `Content-Length` to state when the body does not tell it: a HEAD's, a streamed
    /// body's, a 304's (the full answer's: RFC 9110 8.6; HEAD would otherwise say 0). `None`
    /// for a body in memory: hyper writes its length itself, with no header to insert.
    pub(in crate::http) length: Option<u64>,
    /// The headers added in front of the router (the router's CORS layer adds its own).
    pub(in crate::http) added: &'a Added,
}

impl Head<'_> {
    /// The head's lines, inserted into `h` in the order they are sent: the one list of what such
    /// a head holds, which both encodings are made from.
    pub(in crate::http) fn insert_into(&self, h: &mut HeaderMap) {
        let served = self.served;
        if self.status == Status::NotModified {
            // What a cache updates its stored answer with (RFC 9110 15.4.5).
            self.insert_length(h);
            h.insert(header::ETAG, self.etag.clone());
            h.insert(header::CACHE_CONTROL, served.cache_control.clone());
        } else {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.kind.content_type()));
            h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            h.insert(header::CACHE_CONTROL, served.cache_control.clone());
            h.insert(header::LAST_MODIFIED, served.last_modified.clone());
            h.insert(header::ETAG, self.etag.clone());
            self.insert_length(h);
            if let Status::Partial { range, of } = &self.status {
                h.insert(header::CONTENT_RANGE, content_range(range, *of));
            }
        }
        if self.kind.varies() {
            h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        if self.kind == Kind::JsonGzip && self.status != Status::NotModified {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        if let Some(version) = &served.version {
            h.insert(VERSION_HEADER, version.clone());
        }
        self.added.apply_to(h);
    }

    fn insert_length(&self, h: &mut HeaderMap) {
        if let Some(length) = self.length {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
    }

    /// The answer with this head and `body`, for hyper: built in the thread's spare header map
    /// (`answer::sized`).
    pub(in crate::http) fn response(&self, body: Body) -> Response {
        let mut response = sized(body);
        *response.status_mut() = self.status.code();
        self.insert_into(response.headers_mut());
        response
    }
}

/// Headers added to the answers given in front of the router (the CORS layer's there), and the
/// number of the set: a head built with one set is never reused with another.
pub(in crate::http) struct Added {
    id: u64,
    /// Each header, and whether it is added to (`Vary`) rather than set.
    headers: Vec<(HeaderName, HeaderValue, bool)>,
}

/// No headers added: the router's answers (its layers add theirs).
pub(in crate::http) static NOTHING_ADDED: Added = Added { id: u64::MAX, headers: Vec::new() };

impl Added {
    pub(in crate::http) fn new(headers: Vec<(HeaderName, HeaderValue, bool)>) -> Self {
        static SETS: AtomicU64 = AtomicU64::new(0);
        Self { id: SETS.fetch_add(1, Ordering::Relaxed), headers }
    }

    /// `response` with the headers, as the CORS layer adds them: `Vary` added to, the others set.
    pub(in crate::http) fn apply(&self, mut response: Response) -> Response {
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

/// The answer (200, all of `body`) to a GET of something in `view` that asks for no range and
/// revalidates nothing: the [`Head`] of `kind` about the version `served` names, with `added`,
/// from the header map encoded once per thread, version, kind, URL form (`pinned`) and `added`,
/// then cloned. Cloning a map of a dozen headers costs a fifth of inserting them one by one
/// (hashing each name, probing, growing): bench/README.md, "Stop 21". The map's first entry is
/// the ETag, set here; its second the request id, set by the caller.
pub(in crate::http) fn full(
    view: &Arc<VersionView>,
    kind: Kind,
    pinned: bool,
    served: impl FnOnce() -> Served,
    added: &Added,
    tag: &HeaderValue,
    body: Bytes,
) -> Response {
    let mut h = KEPT.with_borrow_mut(|kept| kept.find(view, kind, pinned, added, served).map.clone());
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
/// are the kept map's (the same as [`full`]'s), written as bytes once.
pub(in crate::http) fn full_wire(
    view: &Arc<VersionView>,
    kind: Kind,
    pinned: bool,
    served: impl FnOnce() -> Served,
    added: &Added,
    tag: &HeaderValue,
    out: &mut Vec<u8>,
) {
    KEPT.with_borrow_mut(|kept| out.extend_from_slice(&kept.find(view, kind, pinned, added, served).wire));
    wire_line(out, b"etag: ", tag.as_bytes());
}

/// The end of the head of an answer [`full_wire`] began: `id` (the request id), the `Date` and
/// the body's length (`len`). The body is the caller's to send after it: copying a large one
/// here would give every connection a copy of its own, held while its client reads slowly.
pub(in crate::http) fn full_wire_end(id: &HeaderValue, len: usize, out: &mut Vec<u8>) {
    wire_line(out, b"x-request-id: ", id.as_bytes());
    with_date(|date| wire_line(out, b"date: ", date));
    wire_line(out, b"content-length: ", itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A head line as hyper writes it, `name` with its `: `.
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
    /// The heads of full answers this thread encoded last ([`full`], [`full_wire`]).
    static KEPT: RefCell<KeptHeads> = const { RefCell::new(KeptHeads { kept: Vec::new(), next: 0 }) };
}

/// How many heads a thread keeps: a few stores' versions, in each kind and URL form.
const HEADS_KEPT: usize = 16;

struct KeptHeads {
    kept: Vec<Kept>,
    /// Which one the next new head replaces, once there are [`HEADS_KEPT`].
    next: usize,
}

/// A full answer's head about one version, encoded both ways (the view held weakly: a view that
/// leaves the cache is freed, and its address is not reused while this is kept, so that a new
/// view cannot be mistaken for it).
struct Kept {
    view: Weak<VersionView>,
    kind: Kind,
    pinned: bool,
    added: u64,
    /// The head for hyper, the ETag's and the request id's places first.
    map: HeaderMap,
    /// The status line and the head's lines but the ETag and the request id, as sent.
    wire: Vec<u8>,
}

impl KeptHeads {
    fn find(
        &mut self,
        view: &Arc<VersionView>,
        kind: Kind,
        pinned: bool,
        added: &Added,
        served: impl FnOnce() -> Served,
    ) -> &Kept {
        let found = self.kept.iter().position(|k| {
            k.view.as_ptr() == Arc::as_ptr(view) && k.kind == kind && k.pinned == pinned && k.added == added.id
        });
        let at = match found {
            Some(at) => at,
            None => {
                let map = kept_map(kind, &served(), added);
                let wire = wire(StatusCode::OK, &map);
                let kept = Kept { view: Arc::downgrade(view), kind, pinned, added: added.id, map, wire };
                if self.kept.len() < HEADS_KEPT {
                    self.kept.push(kept);
                    self.kept.len() - 1
                } else {
                    let at = self.next;
                    self.next = (at + 1) % HEADS_KEPT;
                    self.kept[at] = kept;
                    at
                }
            }
        };
        &self.kept[at]
    }
}

/// The [`Head`] of full answers of `kind` about the version `served` names, with `added`, as a
/// header map whose first two entries are the ETag's and the request id's places, to be filled
/// per answer.
fn kept_map(kind: Kind, served: &Served, added: &Added) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(16);
    let unset = HeaderValue::from_static("-");
    h.insert(header::ETAG, unset.clone());
    h.insert(REQUEST_ID, unset.clone());
    // The version's own values copied for this thread: a clone of one shared by every thread
    // counts its users in memory that every core writes.
    let own = |v: &HeaderValue| HeaderValue::from_bytes(v.as_bytes()).unwrap_or_else(|_| v.clone());
    let served = Served {
        cache_control: served.cache_control.clone(),
        version: served.version.as_ref().map(own),
        last_modified: own(&served.last_modified),
        head_only: false,
    };
    // Inserting the ETag again keeps its place, the first.
    Head { status: Status::Full, kind, etag: &unset, served: &served, length: None, added }.insert_into(&mut h);
    h
}

/// The status line of `status` and the lines of a kept map but its first two (the ETag's and the
/// request id's places), as hyper writes them.
fn wire(status: StatusCode, map: &HeaderMap) -> Vec<u8> {
    let reason = status.canonical_reason().unwrap_or_default();
    let mut wire = format!("HTTP/1.1 {} {reason}\r\n", status.as_str()).into_bytes();
    for (name, value) in map.iter().skip(2) {
        wire_line(&mut wire, format!("{name}: ").as_bytes(), value.as_bytes());
    }
    wire
}

/// An ETag as a header value (ours are always visible ASCII).
pub(in crate::http) fn tag_value(tag: &str) -> HeaderValue {
    HeaderValue::from_str(tag).unwrap_or(HeaderValue::from_static("\"\""))
}

fn content_range(range: &Range<u64>, len: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes {}-{}/{len}", range.start, range.end - 1))
        .unwrap_or(HeaderValue::from_static("bytes */0"))
}

//! The head of a data-plane answer that carries a representation: 200, 206 or 304. [`Head`]
//! says once what such a head holds (status, length, ETag, content type, `Vary`,
//! `Content-Encoding`, `Cache-Control`, `Last-Modified`, the version, and the headers added in
//! front of the router: [`Head::insert_into`]); its two encodings are derived from that here: a
//! header map for hyper ([`Head::response`]), and the bytes a plain read sends on the connection
//! ([`wire`], of the same map, and [`full_wire_end`]). Full answers take their head from one
//! encoded once per worker thread and version (`kept.rs`).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::{Served, VERSION_HEADER, sized};

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
    pub(super) id: u64,
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

/// The end of the head of an answer `kept::full_wire` began: `id` (the request id), the `Date` and
/// the body's length (`len`). The body is the caller's to send after it: copying a large one
/// here would give every connection a copy of its own, held while its client reads slowly.
pub(in crate::http) fn full_wire_end(id: &HeaderValue, len: usize, out: &mut Vec<u8>) {
    wire_line(out, b"x-request-id: ", id.as_bytes());
    with_date(|date| wire_line(out, b"date: ", date));
    wire_line(out, b"content-length: ", itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A head line as hyper writes it, `name` with its `: `.
pub(super) fn wire_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
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

/// The status line of `status` and the lines of a kept map but its first two (the ETag's and the
/// request id's places), as hyper writes them.
pub(super) fn wire(status: StatusCode, map: &HeaderMap) -> Vec<u8> {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::http::answer) fn served() -> Served {
        Served {
            cache_control: HeaderValue::from_static("public, max-age=60"),
            version: Some(HeaderValue::from_static("7")),
            last_modified: HeaderValue::from_static("Thu, 26 Nov 2026 20:13:06 GMT"),
            head_only: false,
        }
    }

    pub(in crate::http::answer) fn lines(h: &HeaderMap) -> Vec<String> {
        h.iter().map(|(n, v)| format!("{n}: {}", v.to_str().unwrap())).collect()
    }

    #[test]
    fn a_plain_reads_head_ends_with_its_id_date_and_length() {
        let mut end = Vec::new();
        full_wire_end(&HeaderValue::from_static("id-1"), 1234, &mut end);
        let end = String::from_utf8(end).unwrap();
        let date = end.strip_prefix("x-request-id: id-1\r\ndate: ").unwrap();
        let (date, rest) = date.split_once("\r\n").unwrap();
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        assert_eq!(rest, "content-length: 1234\r\n\r\n");
    }

    #[test]
    fn partial_and_not_modified_heads() {
        let tag = HeaderValue::from_static("\"abc\"");
        let served = served();
        let partial = Status::Partial { range: 4..8, of: 100 };
        let head = Head {
            status: partial,
            kind: Kind::Octet,
            etag: &tag,
            served: &served,
            length: Some(4),
            added: &NOTHING_ADDED,
        };
        let response = head.response(Body::empty());
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(
            lines(response.headers()),
            [
                "content-type: application/octet-stream",
                "accept-ranges: bytes",
                "cache-control: public, max-age=60",
                "last-modified: Thu, 26 Nov 2026 20:13:06 GMT",
                "etag: \"abc\"",
                "content-length: 4",
                "content-range: bytes 4-7/100",
                "zarrgate-version: 7",
            ]
        );
        // A 304 of a gzip-compressed document: what a cache updates, the full answer's length,
        // and no Content-Encoding (it has no body to encode).
        let head = Head {
            status: Status::NotModified,
            kind: Kind::JsonGzip,
            etag: &tag,
            served: &served,
            length: Some(100),
            added: &NOTHING_ADDED,
        };
        let response = head.response(Body::empty());
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(
            lines(response.headers()),
            [
                "content-length: 100",
                "etag: \"abc\"",
                "cache-control: public, max-age=60",
                "vary: accept-encoding",
                "zarrgate-version: 7"
            ]
        );
    }
}

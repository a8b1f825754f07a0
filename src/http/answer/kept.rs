//! The heads of full answers kept per worker thread, encoded both ways: a full answer (200, a
//! GET with no range and nothing to revalidate) about a version takes its head from the one
//! encoded once per thread, version, kind, URL form and added set ([`Head`], as a header map and
//! as bytes), and writes only its ETag, request id, `Date` and length (bench/README.md, "Stop 21"
//! and "Stop 22").

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::Served;
use super::head::{Added, Head, Kind, Status, wire, wire_line};
use crate::http::observe::REQUEST_ID;
use crate::versions::VersionView;

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
/// line and head up to `tag`, the ETag; `head::full_wire_end` writes the rest. The head's other
/// lines are the kept map's (the same as [`full`]'s), written as bytes once.
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

#[cfg(test)]
mod tests {
    use super::super::head::tests::{lines, served};
    use super::*;

    #[test]
    fn a_kept_head_is_the_heads_lines_in_both_encodings() {
        let cors = Added::new(vec![
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"), false),
            (header::VARY, HeaderValue::from_static("origin"), true),
        ]);
        let map = kept_map(Kind::JsonGzip, &served(), &cors);
        let wire = String::from_utf8(wire(StatusCode::OK, &map)).unwrap();
        assert_eq!(
            wire,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\naccept-ranges: bytes\r\n\
             cache-control: public, max-age=60\r\nlast-modified: Thu, 26 Nov 2026 20:13:06 GMT\r\n\
             vary: accept-encoding\r\nvary: origin\r\ncontent-encoding: gzip\r\nzarrgate-version: 7\r\n\
             access-control-allow-origin: *\r\n"
        );
        // The map: the ETag's and the request id's places, then the same lines.
        let kept = lines(&map);
        assert_eq!(kept[..2], ["etag: -", "x-request-id: -"]);
        let from_wire: Vec<&str> = wire.lines().skip(1).collect();
        assert_eq!(kept[2..], from_wire);
        // A head made per request has the lines of the kept one, its ETag where set_common put it.
        let tag = HeaderValue::from_static("\"abc\"");
        let mut per_request = HeaderMap::new();
        let head = Head {
            status: Status::Full,
            kind: Kind::JsonGzip,
            etag: &tag,
            served: &served(),
            length: None,
            added: &cors,
        };
        head.insert_into(&mut per_request);
        let mut expected: Vec<String> = from_wire.iter().map(|l| l.to_string()).collect();
        expected.insert(4, "etag: \"abc\"".into());
        assert_eq!(lines(&per_request), expected);
    }
}

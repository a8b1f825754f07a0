//! Plain reads answered from what the lookup found, without the router's handler: a full or
//! conditional answer to `GET /{store}/{key}` of a metadata document or a chunk held in memory,
//! as a `Response` (in front of the router, `front.rs`) or as the bytes of the connection
//! (before hyper, `server/connection/plain.rs`). Anything else, and any lookup that has to wait
//! where the caller cannot, goes back to the caller with the [`Lookup`] as far as it got, for
//! [`super::read_key`] to go on from: a read is looked up once, whichever ways it takes.

use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use bytes::Bytes;

use super::Plane;
use crate::http::{answer, range};
use crate::versions::lookup::{Found, Keys, Lookup, Named, ReadUrl};
use crate::versions::{Chunk, VersionView};
use crate::zarr::ChunkLocation;

/// What a plain read answers: a metadata document or a chunk in memory, of the version
/// `view`, in the form asked; `of` and `body` are what the lookup found, for a read that is
/// the router's after all ([`Plain::found`]).
struct Plain {
    view: Arc<VersionView>,
    pinned: Option<i64>,
    body: Bytes,
    tag: HeaderValue,
    kind: answer::Kind,
    of: Of,
}

/// What a plain read's body is of.
enum Of {
    /// The `zarr.json` of the node at this index.
    Doc(u32),
    /// The chunk at `at` of the array at index `node`, with its ETag.
    Chunk { node: u32, at: ChunkLocation, etag: String },
}

impl Plain {
    /// What the lookup found, as it found it.
    fn found(self) -> Found {
        let named = match self.of {
            Of::Doc(node) => Named::Metadata(node),
            Of::Chunk { node, at, etag } => Named::Chunk { node, at, chunk: Chunk::Bytes { bytes: self.body, etag } },
        };
        Found { view: self.view, pinned: self.pinned, named }
    }
}

/// The lookup's URL of `GET /{store}/{key}`.
fn url<'a>((store, key): (&'a str, &'a str)) -> ReadUrl<'a> {
    ReadUrl { segment: store, key: (!key.ends_with('/')).then_some(key), keys: Keys::V3 }
}

/// What `found` answers as a plain read: a metadata document (gzip-compressed if `gzip` and
/// compressed already) or a chunk in memory (taken, not copied). `found` as it was for
/// anything else.
fn plain(found: Found, gzip: bool) -> Result<Plain, Found> {
    let Found { view, pinned, named } = found;
    let (body, tag, kind, of) = match named {
        Named::Metadata(node) => {
            let doc = &view.docs[node as usize];
            match if gzip { doc.gzip_now() } else { Some(None) } {
                Some(Some(gzip)) => (gzip, doc.gzip_etag.clone(), answer::Kind::JsonGzip, Of::Doc(node)),
                Some(None) => (doc.identity.clone(), doc.etag.clone(), answer::Kind::Json, Of::Doc(node)),
                // Not compressed yet: the router's way compresses it off the async workers.
                None => return Err(Found { view, pinned, named }),
            }
        }
        Named::Chunk { node, at, chunk: Chunk::Bytes { bytes, etag } } => {
            (bytes, answer::tag_value(&etag), answer::Kind::Octet, Of::Chunk { node, at, etag })
        }
        named => return Err(Found { view, pinned, named }),
    };
    Ok(Plain { view, pinned, body, tag, kind, of })
}

/// [`super::read_key`] answered from what this worker thread has at hand: with any status but
/// an error, and the headers `added`. Else the lookup as far as it got, for
/// [`super::read_key`] to go on from. The same answer, at a fraction of the cost: no future
/// per layer, no `Response` moved through each (bench/README.md, "Stop 20"), and for a full
/// answer (200) a head built once ([`answer::full`], "Stop 21").
pub(in crate::http) fn read_key_now(
    plane: &Plane,
    at: (&str, &str),
    request: &Parts,
    added: &answer::Added,
) -> Result<Response, Lookup> {
    let found = match plane.app.reader.lookup_now(&url(at)) {
        Lookup::Found(found) => found,
        other => return Err(other),
    };
    let headers = &request.headers;
    let plain = plain(found, answer::accepts_gzip(headers)).map_err(Lookup::Found)?;
    match range::plan(headers, plain.body.len() as u64, plain.tag.to_str().unwrap_or_default()) {
        range::Plan::Full if request.method == Method::GET => {
            let Plain { view, pinned, body, tag, kind, .. } = plain;
            let served = || plane.served(&view, pinned, &request.method);
            return Ok(answer::full(&view, kind, pinned.is_some(), served, added, &tag, body));
        }
        // An error (416): the router's way answers it (a browser's as a page).
        range::Plan::Unsatisfiable => return Err(Lookup::Found(plain.found())),
        _ => {}
    }
    let Plain { view, pinned, body, tag, kind, .. } = plain;
    let served = plane.served(&view, pinned, &request.method);
    Ok(answer::bytes_answer(body, &tag, kind, headers, &served, added))
}

/// The full answer (200) to a plain `GET /{store}/{key}` from what this worker thread has at
/// hand, begun in `out` as sent on the connection ([`answer::full_wire`]), and its body, for the
/// caller to end ([`answer::full_wire_end`]): for a GET that asks no range, revalidates nothing
/// and accepts gzip if `gzip`. Else the lookup as far as it got (and `out` as it was): pending,
/// for [`read_key_wire_waiting`], or done, for [`super::read_key`].
pub(in crate::http) fn read_key_wire(
    plane: &Plane,
    at: (&str, &str),
    gzip: bool,
    added: &answer::Added,
    out: &mut Vec<u8>,
) -> Result<Bytes, Lookup> {
    match plane.app.reader.lookup_now(&url(at)) {
        Lookup::Found(found) => match plain(found, gzip) {
            Ok(plain) => Ok(wire(plane, plain, added, out)),
            Err(found) => Err(Lookup::Found(found)),
        },
        other => Err(other),
    }
}

/// [`read_key_wire`] gone on from `so_far`, waiting for what this worker thread does not have
/// at hand. Else the lookup, done or failed, for [`super::read_key`].
pub(in crate::http) async fn read_key_wire_waiting(
    plane: &Plane,
    at: (&str, &str),
    gzip: bool,
    added: &answer::Added,
    out: &mut Vec<u8>,
    so_far: Lookup,
) -> Result<Bytes, Lookup> {
    let found = match plane.app.reader.lookup(&url(at), Some(so_far)).await {
        Ok(found) => found,
        Err(e) => return Err(Lookup::Failed(e)),
    };
    match plain(found, gzip) {
        Ok(plain) => Ok(wire(plane, plain, added, out)),
        Err(found) => Err(Lookup::Found(found)),
    }
}

fn wire(plane: &Plane, plain: Plain, added: &answer::Added, out: &mut Vec<u8>) -> Bytes {
    let Plain { view, pinned, body, tag, kind, .. } = plain;
    let served = || plane.served(&view, pinned, &Method::GET);
    answer::full_wire(&view, kind, pinned.is_some(), served, added, &tag, out);
    body
}

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

use super::{Plane, versioned};
use crate::http::{answer, range};
use crate::versions::lookup::{Found, Keys, Lookup, Named, ReadUrl};
use crate::versions::{Chunk, VersionView};

/// What a plain read answers: a metadata document or a chunk held in memory, of the version
/// `view`, in the form asked.
struct Plain<'a> {
    view: &'a Arc<VersionView>,
    pinned: Option<i64>,
    body: Bytes,
    tag: HeaderValue,
    kind: answer::Kind,
}

/// The lookup's URL of `GET /{store}/{key}`.
fn url<'a>((store, key): (&'a str, &'a str)) -> ReadUrl<'a> {
    ReadUrl { segment: store, key: (!key.ends_with('/')).then_some(key), keys: Keys::V3 }
}

/// What `found` answers as a plain read: a metadata document (gzip-compressed if `gzip` and
/// compressed already) or a chunk in memory. `None` for anything else.
fn plain(found: &Found, gzip: bool) -> Option<Plain<'_>> {
    let Found { view, pinned, named } = found;
    let (body, tag, kind) = match named {
        Named::Metadata(node) => {
            let doc = &view.docs[*node as usize];
            match if gzip { doc.gzip_now()? } else { None } {
                Some(gzip) => (gzip, doc.gzip_etag.clone(), answer::Kind::JsonGzip),
                None => (doc.identity.clone(), doc.etag.clone(), answer::Kind::Json),
            }
        }
        Named::Chunk { chunk: Chunk::Bytes { bytes, etag }, .. } => {
            (bytes.clone(), answer::tag_value(etag), answer::Kind::Octet)
        }
        _ => return None,
    };
    Some(Plain { view, pinned: *pinned, body, tag, kind })
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
    let lookup = plane.app.reader.lookup_now(&url(at));
    let Lookup::Found(found) = &lookup else { return Err(lookup) };
    let headers = &request.headers;
    let Some(Plain { view, pinned, body, tag, kind }) = plain(found, answer::accepts_gzip(headers)) else {
        return Err(lookup);
    };
    let served = || plane.served(view, pinned, &request.method);
    let full = request.method == Method::GET
        && matches!(range::plan(headers, body.len() as u64, tag.to_str().unwrap_or_default()), range::Plan::Full);
    if full {
        return Ok(answer::full(view, kind, pinned.is_some(), served, added, &tag, body));
    }
    let served = served();
    let response = match kind {
        answer::Kind::Octet => answer::bytes_response(body, &tag, kind.content_type(), headers, &served),
        _ => answer::metadata_with_tag(body, &tag, kind == answer::Kind::JsonGzip, headers, &served),
    };
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        return Err(lookup);
    }
    Ok(added.apply(versioned(response, served)))
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
    let lookup = plane.app.reader.lookup_now(&url(at));
    if let Lookup::Found(found) = &lookup
        && let Some(plain) = plain(found, gzip)
    {
        return Ok(wire(plane, plain, added, out));
    }
    Err(lookup)
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
    match plain(&found, gzip) {
        Some(plain) => Ok(wire(plane, plain, added, out)),
        None => Err(Lookup::Found(found)),
    }
}

fn wire(
    plane: &Plane,
    Plain { view, pinned, body, tag, kind }: Plain<'_>,
    added: &answer::Added,
    out: &mut Vec<u8>,
) -> Bytes {
    let served = || plane.served(view, pinned, &Method::GET);
    answer::full_wire(view, kind, pinned.is_some(), served, added, &tag, out);
    body
}

//! `PROPFIND`: a node's listing as a WebDAV 207 Multi-Status, written a piece at a time as the
//! connection takes it. `Depth: infinity` (the default) lists every key of a store: 28.6 MB (13 MB since the v2 documents moved to `/v2/`) for
//! one of 20,000 arrays, which built whole per request held that much per slow client (50 of
//! them took 1.5 GB). Streamed, a request holds one piece and what hyper queues of it.

use std::convert::Infallible;
use std::fmt::Write;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::super::answer::{Served, Target};
use super::{Depth, What, base, dir, docs_of, encode, escape, metadata_doc, v2_of};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::V2Rendered as Rendered;
use crate::zarr::hierarchy::Node;

/// A piece of the answer is sent once it is this long.
const PIECE: usize = 64 << 10;

const OPEN: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n";
const CLOSE: &str = "</D:multistatus>\n";

/// `PROPFIND` of a node (with or without the final `/`) or of a metadata document, in the Zarr
/// v2 view if `v2`.
pub(in crate::http) async fn propfind(
    app: &AppState,
    v2: bool,
    view: &Arc<VersionView>,
    segment: &str,
    target: Target<'_>,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let depth = match headers.get("depth").map(|v| v.to_str().unwrap_or_default().trim()) {
        None => Depth::Infinity,
        Some("0") => Depth::Zero,
        Some("1") => Depth::One,
        Some(d) if d.eq_ignore_ascii_case("infinity") => Depth::Infinity,
        Some(other) => return Err(ApiError::BadRequest(format!("Depth {other:?} is not 0, 1 or infinity"))),
    };
    let rendered = v2_of(app, v2, view).await?;
    let path = target.key.trim_end_matches('/');
    let base = format!("{}/{segment}/", base(v2));
    let modified = served.last_modified.to_str().unwrap_or_default().to_owned();
    let body = if view.hierarchy.node(path).is_some() {
        let listing = Listing {
            view: view.clone(),
            rendered,
            node: path.to_owned(),
            here: format!("{base}{}", encode(&dir(path))),
            depth,
            modified,
            next: Next::Start,
        };
        Body::from_stream(futures::stream::iter(listing))
    } else if let Some(doc) = metadata_doc(view, rendered.as_deref(), path) {
        let mut body = String::from(OPEN);
        response(&mut body, &format!("{base}{}", encode(path)), &What::Doc(doc), &modified);
        body.push_str(CLOSE);
        Body::from(body)
    } else {
        return Err(ApiError::NotFound(format!("nothing is listed at {path:?}: only nodes and their metadata are")));
    };
    let mut answer = Response::new(body);
    *answer.status_mut() = StatusCode::MULTI_STATUS;
    let h = answer.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml; charset=utf-8"));
    h.insert(header::LAST_MODIFIED, served.last_modified.clone());
    Ok(answer)
}

/// The listing of one node, as pieces of the answer's body.
struct Listing {
    view: Arc<VersionView>,
    /// The Zarr v2 view, when it is the one listed.
    rendered: Option<Arc<Rendered>>,
    /// The listed node's path.
    node: String,
    /// Its URL path, ending with `/` (but for the root, which is the store's).
    here: String,
    depth: Depth,
    /// `getlastmodified` of every entry.
    modified: String,
    next: Next,
}

/// Where the listing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The head, the node itself and its documents.
    Start,
    /// The nodes of the version from this index on (in path order), those below the listed one
    /// listed.
    Nodes(usize),
    /// The end of the answer.
    Close,
    /// All written.
    Done,
}

impl Iterator for Listing {
    type Item = Result<Bytes, Infallible>;

    fn next(&mut self) -> Option<Self::Item> {
        let hierarchy = &self.view.hierarchy;
        // Always there: the listing was made for a node of this version.
        let node = hierarchy.node(&self.node)?;
        let mut out = String::with_capacity(PIECE + 1024);
        if self.next == Next::Start {
            out.push_str(OPEN);
            response(&mut out, &self.here, &What::Node(node), &self.modified);
            self.next = Next::Close;
            if self.depth != Depth::Zero {
                for entry in docs_of(&self.view, self.rendered.as_deref(), node, "") {
                    self.entry(&mut out, &entry.name, &entry.what);
                }
                self.next = Next::Nodes(0);
            }
        }
        while let Next::Nodes(at) = self.next {
            if out.len() >= PIECE {
                return Some(Ok(Bytes::from(out)));
            }
            match hierarchy.nodes().nth(at) {
                Some(child) => {
                    self.next = Next::Nodes(at + 1);
                    self.child(&mut out, node, child);
                }
                None => self.next = Next::Close,
            }
        }
        if self.next != Next::Close {
            return None;
        }
        out.push_str(CLOSE);
        self.next = Next::Done;
        Some(Ok(Bytes::from(out)))
    }
}

impl Listing {
    /// `child`'s entries in the listing of `node`: none, unless it is below it (and a child, but
    /// for `Depth: infinity`).
    fn child(&self, out: &mut String, node: &Node, child: &Node) {
        let Some(relative) = child.path.relative_to(&node.path) else { return };
        if self.rendered.as_ref().is_some_and(|r| r.view.omitted().contains_key(child.path.as_str())) {
            // Not in the Zarr v2 view (the root's .zattrs says why).
            return;
        }
        if self.depth != Depth::Infinity && relative.contains('/') {
            return;
        }
        let name = format!("{relative}/");
        self.entry(out, &name, &What::Node(child));
        if self.depth == Depth::Infinity {
            for entry in docs_of(&self.view, self.rendered.as_deref(), child, &name) {
                self.entry(out, &entry.name, &entry.what);
            }
        }
    }

    fn entry(&self, out: &mut String, name: &str, what: &What<'_>) {
        response(out, &format!("{}{}", self.here, encode(name)), what, &self.modified);
    }
}

fn response(out: &mut String, href: &str, what: &What<'_>, modified: &str) {
    let _ = write!(out, "<D:response><D:href>{}</D:href><D:propstat><D:prop>", escape(href));
    match what {
        What::Node(_) => out.push_str("<D:resourcetype><D:collection/></D:resourcetype>"),
        What::Doc(doc) => {
            let _ = write!(
                out,
                "<D:resourcetype/><D:getcontentlength>{}</D:getcontentlength>\
                 <D:getcontenttype>application/json</D:getcontenttype><D:getetag>{}</D:getetag>",
                doc.identity.len(),
                escape(doc.etag.to_str().unwrap_or_default())
            );
        }
    }
    let _ = writeln!(
        out,
        "<D:getlastmodified>{modified}</D:getlastmodified></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
    );
}

//! Listings of a version's keys: `GET /{store}/` and `GET /{store}/{node}/` as HTML links (what
//! fsspec's HTTP filesystem parses) or JSON (`Accept: application/json`), and `PROPFIND` as a
//! WebDAV 207 Multi-Status (what object_store's HTTP store sends); the same under
//! `/v2/{store}/` for the Zarr v2 view. A node lists its metadata documents (`zarr.json`, or
//! under `/v2/` its v2 documents) and its child nodes, all held by the version's views, so a
//! listing reads no manifest block (beyond the v2 view's one bounded check per version,
//! `versions::v2::MISSING_SCAN_CHUNKS`). An array's chunk keys are not listed: no
//! Zarr reader needs them (every chunk key follows from the metadata; a missing one reads as the
//! fill value), and an array can have ten million; the JSON listing says so, with the grid.

use std::fmt::Write;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use percent_encoding::utf8_percent_encode;
use serde_json::{Value, json};

use super::answer::{Kind, Page, Served, bytes_response};
use super::html::{SEGMENT, encode, escape, secure};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::V2Rendered as Rendered;
use crate::versions::view::{RenderedDoc, etag};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;

mod propfind;

pub(super) use propfind::propfind;

/// The WebDAV listing method.
pub(super) const PROPFIND: &str = "PROPFIND";

/// The metadata documents a node of the Zarr v2 view may have, in listing order.
const V2_DOCS: [&str; 4] = [".zgroup", ".zarray", ".zattrs", ".zmetadata"];

/// One listed key, named relative to the listed node (a node's name ends with `/`).
struct Entry<'a> {
    name: String,
    what: What<'a>,
}

enum What<'a> {
    Doc(&'a RenderedDoc),
    Node(&'a Node),
}

/// How deep a PROPFIND looks (RFC 4918 10.2; no header means infinity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    Zero,
    One,
    Infinity,
}

/// `GET` of `/{store}/{key}` where `key` is `""` or ends with `/`: the node's listing, in the
/// Zarr v2 view (`/v2/{store}/{key}`) if `v2`.
pub(super) async fn list(
    app: &AppState,
    v2: bool,
    view: &Arc<VersionView>,
    segment: &str,
    key: &str,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let node = listed_node(view, key)?;
    let rendered = v2_of(app, v2, view).await?;
    let entries = entries(view, rendered.as_deref(), node, Depth::One);
    let title = format!("{}/{segment}/{}", base(v2), dir(node.path.as_str()));
    let json = wants_json(headers);
    let (body, content_type) = if json {
        (json_listing(view, segment, node, &entries).to_string(), Kind::Page(Page::Json))
    } else {
        (html(&title, node, &entries), Kind::Page(Page::Html))
    };
    let tag = etag('l', body.as_bytes());
    let tag = HeaderValue::from_str(&format!("{}-v{}\"", tag.trim_end_matches('"'), view.head.id))
        .unwrap_or(HeaderValue::from_static("\"\""));
    let mut response = bytes_response(Bytes::from(body), &tag, content_type, headers, served);
    response.headers_mut().insert(header::VARY, HeaderValue::from_static("accept"));
    if !json {
        secure(response.headers_mut());
    }
    Ok(response)
}

/// `GET` of a node's path without the final `/`: a redirect to its listing (fsspec and zarr ask
/// for `/{store}/{group}` when they list a subgroup), or `None` when `key` names no node.
pub(super) fn redirect(view: &VersionView, segment: &str, key: &str) -> Option<Response> {
    view.hierarchy.node(key)?;
    let last = if key.is_empty() { segment } else { key.rsplit('/').next().unwrap_or(key) };
    let location = format!("{}/", utf8_percent_encode(last, SEGMENT));
    let location = HeaderValue::from_str(&location).ok()?;
    Some((StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, location)]).into_response())
}

fn listed_node<'a>(view: &'a VersionView, key: &str) -> Result<&'a Node, ApiError> {
    let path = key.trim_end_matches('/');
    view.hierarchy
        .node(path)
        .ok_or_else(|| ApiError::NotFound(format!("no group or array at {path:?}: there is nothing to list")))
}

/// The Zarr v2 view of `view`'s version if `v2`.
async fn v2_of(app: &AppState, v2: bool, view: &Arc<VersionView>) -> Result<Option<Arc<Rendered>>, ApiError> {
    if !v2 {
        return Ok(None);
    }
    Ok(Some(app.reader.v2_view(view).await?))
}

/// Where the listed view's URLs begin, before the store's segment.
fn base(v2: bool) -> &'static str {
    if v2 { "/v2" } else { "" }
}

/// A metadata document by key (`obs/zarr.json`, or in the Zarr v2 view `rendered`, `obs/.zattrs`).
fn metadata_doc<'a>(view: &'a VersionView, rendered: Option<&'a Rendered>, key: &str) -> Option<&'a RenderedDoc> {
    let (parent, name) = key.rsplit_once('/').unwrap_or(("", key));
    match (rendered, name) {
        (None, "zarr.json") => view.hierarchy.node(parent).map(|n| &view.docs[n.index as usize]),
        (None, _) => None,
        (Some(rendered), _) => rendered.docs.get(key),
    }
}

/// The keys below `node`: its documents and child nodes, or (`Depth::Infinity`) every
/// descendant's too.
fn entries<'a>(view: &'a VersionView, rendered: Option<&'a Rendered>, node: &'a Node, depth: Depth) -> Vec<Entry<'a>> {
    let mut out = docs_of(view, rendered, node, "");
    for child in view.hierarchy.nodes() {
        let Some(relative) = child.path.relative_to(&node.path) else { continue };
        if rendered.is_some_and(|r| r.view.omitted().contains_key(child.path.as_str())) {
            // Not in the Zarr v2 view (the root's .zattrs says why).
            continue;
        }
        if depth != Depth::Infinity && relative.contains('/') {
            continue;
        }
        out.push(Entry { name: format!("{relative}/"), what: What::Node(child) });
        if depth == Depth::Infinity {
            out.extend(docs_of(view, rendered, child, &format!("{relative}/")));
        }
    }
    out
}

/// A node's metadata documents: its `zarr.json`, or its documents in the Zarr v2 view `rendered`.
fn docs_of<'a>(view: &'a VersionView, rendered: Option<&'a Rendered>, node: &'a Node, prefix: &str) -> Vec<Entry<'a>> {
    let Some(rendered) = rendered else {
        let doc = &view.docs[node.index as usize];
        return vec![Entry { name: format!("{prefix}zarr.json"), what: What::Doc(doc) }];
    };
    let own = dir(node.path.as_str());
    V2_DOCS
        .iter()
        .filter_map(|name| {
            let doc = rendered.docs.get(&format!("{own}{name}"))?;
            Some(Entry { name: format!("{prefix}{name}"), what: What::Doc(doc) })
        })
        .collect()
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| v.contains("application/json"))
}

/// A node path as a directory: `""` for the root, `a/b/` otherwise.
fn dir(path: &str) -> String {
    if path.is_empty() { String::new() } else { format!("{path}/") }
}

/// What an array's listing says instead of its chunk keys.
fn chunks_not_listed(node: &Node) -> Option<Value> {
    let NodeKind::Array(layout) = &node.kind else { return None };
    let example = layout.encoding.encode(&vec![0; layout.grid.ndim()]);
    Some(json!({
        "listed": false,
        "count": layout.grid.chunk_count(),
        "grid": layout.grid.grid_shape(),
        "example": example,
        "why": "chunk keys are not listed: each follows from the array's metadata, and a missing one reads as the fill value",
    }))
}

fn html(title: &str, node: &Node, entries: &[Entry<'_>]) -> String {
    let title = escape(title);
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
         <body>\n<h1>Index of {title}</h1>\n<ul>\n"
    );
    for entry in entries {
        let name = escape(&entry.name);
        // Not `./name` (fsspec joins the link to the directory's URL as written); a name such as
        // `javascript:...` stays a path all the same: its `:` is percent-encoded.
        let _ = writeln!(out, "<li><a href=\"{}\">{name}</a></li>", escape(&encode(&entry.name)));
    }
    out.push_str("</ul>\n");
    if let Some(chunks) = chunks_not_listed(node) {
        let _ = writeln!(
            out,
            "<p>{} chunks in a grid of {}, named like {}: not listed.</p>",
            chunks["count"],
            chunks["grid"],
            escape(chunks["example"].as_str().unwrap_or_default())
        );
    }
    out.push_str("</body></html>\n");
    out
}

fn json_listing(view: &VersionView, segment: &str, node: &Node, entries: &[Entry<'_>]) -> Value {
    let listed: Vec<Value> = entries
        .iter()
        .map(|entry| match &entry.what {
            What::Doc(doc) => json!({"name": entry.name, "type": "file", "size": doc.identity.len(),
                                     "etag": doc.etag.to_str().unwrap_or_default()}),
            What::Node(child) => json!({"name": entry.name, "type": "directory", "node_type": node_type(child)}),
        })
        .collect();
    let mut body = json!({"store": segment.split('@').next().unwrap_or(segment), "version": view.head.id,
                          "path": node.path.as_str(), "node_type": node_type(node), "entries": listed});
    if let Some(chunks) = chunks_not_listed(node) {
        body["chunks"] = chunks;
    }
    body
}

fn node_type(node: &Node) -> &'static str {
    match node.kind {
        NodeKind::Group => "group",
        NodeKind::Array(_) => "array",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_ends_with_a_slash() {
        assert_eq!(dir(""), "");
        assert_eq!(dir("a/b"), "a/b/");
    }
}

//! Listings of a version's keys: `GET /{store}/` and `GET /{store}/{node}/` as HTML links (what
//! fsspec's HTTP filesystem parses) or JSON (`Accept: application/json`), and `PROPFIND` as a
//! WebDAV 207 Multi-Status (what object_store's HTTP store sends). A node lists its metadata
//! documents (`zarr.json` and its v2 documents) and its child nodes, all held by the version's
//! views, so a listing reads no manifest block (beyond the v2 view's one bounded check per
//! version, `v2::MISSING_SCAN_CHUNKS`). An array's chunk keys are not listed: no
//! Zarr reader needs them (every chunk key follows from the metadata; a missing one reads as the
//! fill value), and an array can have ten million; the JSON listing says so, with the grid.

use std::fmt::Write;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde_json::{Value, json};

use super::answer::{Served, bytes_response};
use super::v2::Rendered;
use super::v2::V2Views;
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::{RenderedDoc, etag};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;

mod propfind;

pub(super) use propfind::propfind;

/// The WebDAV listing method.
pub(super) const PROPFIND: &str = "PROPFIND";

/// What may not appear unescaped in one segment of a URL path (the url crate's set).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'?')
    .add(b'{')
    .add(b'}')
    .add(b'/')
    .add(b'%');

/// The metadata documents a node may have, in listing order.
const DOCS: [&str; 5] = ["zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"];

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

/// `GET` of `/{store}/{key}` where `key` is `""` or ends with `/`: the node's listing.
pub(super) async fn list(
    app: &AppState,
    v2: &V2Views,
    view: &Arc<VersionView>,
    segment: &str,
    key: &str,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let node = listed_node(view, key)?;
    let rendered = v2.get(&app.reader, view).await?;
    let entries = entries(view, &rendered, node, Depth::One);
    let title = format!("/{segment}/{}", dir(node.path.as_str()));
    let (body, content_type) = if wants_json(headers) {
        (json_listing(view, segment, node, &entries).to_string(), "application/json")
    } else {
        (html(&title, node, &entries), "text/html; charset=utf-8")
    };
    let tag = etag('l', body.as_bytes());
    let tag = HeaderValue::from_str(&format!("{}-v{}\"", tag.trim_end_matches('"'), view.head.id))
        .unwrap_or(HeaderValue::from_static("\"\""));
    let mut response = bytes_response(Bytes::from(body), &tag, content_type, headers, served);
    response.headers_mut().insert(header::VARY, HeaderValue::from_static("accept"));
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

/// A metadata document by key (`obs/zarr.json`, `obs/.zattrs`).
fn metadata_doc<'a>(view: &'a VersionView, rendered: &'a Rendered, key: &str) -> Option<&'a RenderedDoc> {
    let (parent, name) = key.rsplit_once('/').unwrap_or(("", key));
    match name {
        "zarr.json" => view.hierarchy.node(parent).map(|n| &view.docs[n.index as usize]),
        _ => rendered.docs.get(key),
    }
}

/// The keys below `node`: its documents and child nodes, or (`Depth::Infinity`) every
/// descendant's too.
fn entries<'a>(view: &'a VersionView, rendered: &'a Rendered, node: &'a Node, depth: Depth) -> Vec<Entry<'a>> {
    let mut out = docs_of(view, rendered, node, "");
    for child in view.hierarchy.nodes() {
        let Some(relative) = child.path.relative_to(&node.path) else { continue };
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

fn docs_of<'a>(view: &'a VersionView, rendered: &'a Rendered, node: &'a Node, prefix: &str) -> Vec<Entry<'a>> {
    let own = dir(node.path.as_str());
    DOCS.iter()
        .filter_map(|name| {
            match *name {
                "zarr.json" => Some(&view.docs[node.index as usize]),
                v2 => rendered.docs.get(&format!("{own}{v2}")),
            }
            .map(|doc| Entry { name: format!("{prefix}{name}"), what: What::Doc(doc) })
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

/// A relative key as a URL path: each segment percent-encoded.
pub(super) fn encode(name: &str) -> String {
    name.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect::<Vec<_>>().join("/")
}

/// `text` safe in HTML text and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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
    fn names_are_escaped_for_urls_and_html() {
        assert_eq!(encode("a b/c#d/"), "a%20b/c%23d/");
        assert_eq!(encode("zarr.json"), "zarr.json");
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(dir(""), "");
        assert_eq!(dir("a/b"), "a/b/");
    }
}

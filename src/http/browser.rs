//! The store browser: `GET /{store}/` and node paths asked for `text/html` by a browser render
//! a page a person reads at a glance (the group tree, an array's shape, type, chunking,
//! codecs, dimensions and attributes, its chunks by kind, the store's versions, snippets, a
//! quick-look image); `GET /` lists the stores. Plain HTML and CSS, a few lines of script for
//! the copy buttons and the quick look's scale (`html/page.js`); every link relative, so it works
//! behind a CDN or a prefix. Every string from a store is escaped (names and attributes are user
//! data: a node may be named `javascript:...`), and every page carries the policy of `html.rs`.

mod display;
mod files;
mod gdal;
mod history;
mod quicklook;
mod snippets;
mod stores;

use std::fmt::Write;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::answer::{Kind, Page, Served, bytes_response};
use super::html::{SCRIPT, STYLE, escape, href, secure};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::etag;
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;

pub(super) use super::html::wants_page;
pub(super) use quicklook::{Format as QuicklookFormat, answer as quicklook};
pub(super) use stores::root;

/// Nodes shown in a page's tree at most (the rest are counted).
const TREE_NODES: usize = 1_000;
/// Tiles of one array read at most to count its chunks by kind (each is one cached block).
const COUNTED_TILES: u64 = 16;
/// Characters of one attribute value shown at most.
const ATTRIBUTE_CHARS: usize = 2_000;

/// Depths of the tree indented (a class of `html/page.css` each); deeper nodes stay there.
const INDENTED: usize = 8;

/// The page of node `key` (`""` or ending with `/`) of `view`.
pub(super) async fn page(
    app: &AppState,
    view: &VersionView,
    segment: &str,
    key: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let path = key.trim_end_matches('/');
    let node = view
        .hierarchy
        .node(path)
        .ok_or_else(|| ApiError::NotFound(format!("no group or array at {path:?}: there is nothing to show")))?;
    let up = if path.is_empty() { String::new() } else { "../".repeat(path.split('/').count()) };
    let origin = origin(headers);
    let base = format!("{origin}/{segment}");
    let mut out = shell_start(&format!("{segment}/{path}"));
    let _ = write!(
        out,
        "<header><a href=\"{}\">stores</a> / <a href=\"{}\">{}</a>",
        href(&format!("{up}../"), ""),
        href(&up, ""),
        escape(segment)
    );
    let mut walked = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        walked = if walked.is_empty() { part.to_owned() } else { format!("{walked}/{part}") };
        let _ = write!(out, " / <a href=\"{}\">{}</a>", href(&up, &walked), escape(part));
    }
    out.push_str("</header>\n<main>\n<nav><h3>Tree</h3>\n");
    tree(&mut out, view, node, &up);
    out.push_str("</nav>\n<section>\n");
    match &node.kind {
        NodeKind::Group => group(&mut out, view, node),
        NodeKind::Array(_) => array(&mut out, app, view, node).await,
    }
    if path.is_empty() {
        files::section(&mut out, app, view, files::page_of(query)).await;
    }
    history::section(&mut out, app, view, &up).await;
    out.push_str("<h3>Read it</h3>\n");
    for s in snippets::snippets(&base, node, app.read_auth_required()) {
        if let Some(why) = (s.id == "snippet-gdal").then(|| gdal::cannot_read(node)).flatten() {
            let _ = writeln!(
                out,
                "<p id=\"{}\"><b>{}</b>: GDAL cannot read this array: {}.</p>",
                s.id,
                s.label,
                escape(&why)
            );
            continue;
        }
        let _ = writeln!(
            out,
            "<p><b>{}</b> <button data-copy=\"{id}\">copy</button></p><pre id=\"{id}\" data-origin=\"{}\">{}</pre>",
            s.label,
            escape(&origin),
            escape(&s.text),
            id = s.id
        );
    }
    let _ = write!(out, "</section>\n</main>\n<script>{SCRIPT}</script>\n</body></html>\n");
    Ok(html_response(out, view.head.id, headers, served))
}

fn shell_start(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n",
        escape(title)
    )
}

fn html_response(body: String, version: i64, headers: &HeaderMap, served: &Served) -> Response {
    let tag = etag('h', body.as_bytes());
    let tag = HeaderValue::from_str(&format!("{}-v{version}\"", tag.trim_end_matches('"')))
        .unwrap_or(HeaderValue::from_static("\"\""));
    let mut response = bytes_response(Bytes::from(body), &tag, Kind::Page(Page::Html), headers, served);
    response.headers_mut().insert(header::VARY, HeaderValue::from_static("accept"));
    secure(response.headers_mut());
    response
}

/// The server's origin as the request names it (the page's script puts the browser's in).
/// `Host` only, which caches key on: a page cached with an `X-Forwarded-Host` a client made
/// up would show its snippets to everyone.
fn origin(headers: &HeaderMap) -> String {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let host = get("host")
        .filter(|h| h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)))
        .unwrap_or("localhost");
    let scheme = get("x-forwarded-proto").filter(|p| *p == "https").unwrap_or("http");
    format!("{scheme}://{host}")
}

fn tree(out: &mut String, view: &VersionView, here: &Node, up: &str) {
    out.push_str("<ul>\n");
    let mut shown = 0;
    for node in view.hierarchy.nodes() {
        if shown == TREE_NODES {
            break;
        }
        shown += 1;
        let path = node.path.as_str();
        let depth = if path.is_empty() { 0 } else { path.split('/').count() };
        let name = if path.is_empty() { "/" } else { path.rsplit('/').next().unwrap_or(path) };
        let class = match (depth.min(INDENTED), node.index == here.index) {
            (0, false) => String::new(),
            (0, true) => " class=\"here\"".into(),
            (d, false) => format!(" class=\"d{d}\""),
            (d, true) => format!(" class=\"d{d} here\""),
        };
        let what = match &node.kind {
            NodeKind::Group => String::new(),
            NodeKind::Array(layout) => format!(" <span class=\"dim\">{:?}</span>", layout.grid.shape()),
        };
        let _ = writeln!(out, "<li{class}><a href=\"{}\">{}</a>{what}</li>", href(up, path), escape(name));
    }
    let total = view.hierarchy.nodes().count();
    if total > shown {
        let _ = writeln!(out, "<li class=\"dim\">and {} more</li>", total - shown);
    }
    out.push_str("</ul>\n");
}

fn group(out: &mut String, view: &VersionView, node: &Node) {
    let _ = writeln!(out, "<h2>Group {}</h2>", escape(display(node)));
    out.push_str("<h3>Members</h3>\n<ul>\n");
    for child in view.hierarchy.nodes() {
        let Some(relative) = child.path.relative_to(&node.path) else { continue };
        if relative.contains('/') {
            continue;
        }
        let kind = if matches!(child.kind, NodeKind::Group) { "group" } else { "array" };
        let _ = writeln!(
            out,
            "<li><a href=\"{}\">{}/</a> <span class=\"dim\">{kind}</span></li>",
            href("", relative),
            escape(relative)
        );
    }
    out.push_str("</ul>\n");
    attributes(out, &node.metadata());
    documents(out);
}

async fn array(out: &mut String, app: &AppState, view: &VersionView, node: &Node) {
    let NodeKind::Array(layout) = &node.kind else { return };
    let metadata = node.metadata();
    let field = |k: &str| match metadata.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => compact(v),
        None => "-".to_owned(),
    };
    let grid = layout.grid.grid_shape();
    let _ = writeln!(out, "<h2>Array {}</h2>\n<table>", escape(display(node)));
    let rows = [
        ("shape", format!("{:?}", layout.grid.shape())),
        ("data type", field("data_type")),
        ("dimensions", field("dimension_names")),
        ("chunk shape", format!("{:?}", layout.grid.chunk_shape())),
        (
            "chunk grid",
            format!(
                "{grid:?}: {}, named like {}",
                display::count(layout.grid.chunk_count(), "chunk"),
                layout.encoding.encode(&vec![0; grid.len()])
            ),
        ),
        ("fill value", field("fill_value")),
        ("codecs", codecs(metadata.get("codecs"))),
        ("chunks by kind", chunk_counts(app, view, node).await),
    ];
    for (name, value) in rows {
        let _ = writeln!(out, "<tr><th>{name}</th><td>{}</td></tr>", escape(&value));
    }
    out.push_str("</table>\n");
    attributes(out, &metadata);
    out.push_str(
        "<h3>Quick look</h3>\n<figure><img src=\"?quicklook=png\" alt=\"an overview of the first 2-D \
                  slice, in viridis\">\
                  <figcaption>overview of the first 2-D slice (at most 512 px a side; fill values, missing values \
                  and NaN transparent); the bar under it runs from \
                  <span id=\"scale\"><a href=\"?quicklook=json\">min and max</a></span></figcaption></figure>\n",
    );
    documents(out);
}

fn documents(out: &mut String) {
    out.push_str(
        "<p class=\"dim\">Documents: <a href=\"./zarr.json\">zarr.json</a> \
                  (the listing: <code>Accept: application/json</code>)</p>\n",
    );
}

/// The array's chunks counted by kind from its blocks, when it has few tiles (never a large
/// manifest for a page).
async fn chunk_counts(app: &AppState, view: &VersionView, node: &Node) -> String {
    let NodeKind::Array(layout) = &node.kind else { return String::new() };
    let grid = &layout.grid;
    let tiles: u64 = grid.grid_shape().iter().zip(grid.tile_shape()).map(|(g, t)| g.div_ceil(*t)).product();
    if tiles > COUNTED_TILES {
        return format!("not counted ({}; the store's counts are under Versions)", display::count(tiles, "block"));
    }
    let (mut virtual_, mut inline, mut assembled) = (0, 0, 0);
    for tile in 0..tiles {
        match app.reader.block(&view.head, node, tile).await {
            Ok(block) => {
                let counts = block.counts();
                virtual_ += counts.virtual_;
                inline += counts.inline;
                assembled += counts.assembled;
            }
            Err(e) => return format!("not counted: {e}"),
        }
    }
    let missing = grid.chunk_count().saturating_sub(virtual_ + inline + assembled);
    match assembled {
        0 => format!("{virtual_} virtual, {inline} inline, {missing} missing"),
        _ => format!(
            "{virtual_} virtual, {inline} inline, {assembled} assembled (at seams between files), {missing} missing"
        ),
    }
}

fn attributes(out: &mut String, metadata: &serde_json::Map<String, Value>) {
    let Some(Value::Object(attributes)) =
        metadata.get("attributes").filter(|a| a.as_object().is_some_and(|o| !o.is_empty()))
    else {
        return;
    };
    let data_type = metadata.get("data_type").and_then(Value::as_str);
    out.push_str("<h3>Attributes</h3>\n<table>\n");
    for (k, v) in attributes {
        if let Some(shown) = display::fill_attribute(k, v, data_type) {
            let _ = writeln!(out, "<tr><th>{}</th><td>{shown}</td></tr>", escape(k));
            continue;
        }
        let mut text = match v {
            Value::String(s) => s.clone(),
            other => compact(other),
        };
        if text.chars().count() > ATTRIBUTE_CHARS {
            text = text.chars().take(ATTRIBUTE_CHARS).chain(['…']).collect();
        }
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&text));
    }
    out.push_str("</table>\n");
}

fn codecs(codecs: Option<&Value>) -> String {
    let Some(Value::Array(list)) = codecs else { return "-".into() };
    list.iter()
        .map(|c| match (c.get("name").and_then(Value::as_str), c.get("configuration")) {
            (Some(name), Some(config)) => format!("{name} {}", compact(config)),
            (Some(name), None) => name.to_owned(),
            _ => compact(c),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn display(node: &Node) -> &str {
    if node.path.is_root() { "/" } else { node.path.as_str() }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_str(v).unwrap())).collect()
    }

    #[test]
    fn only_an_explicit_text_html_gets_a_page() {
        assert!(wants_page(&headers(&[("accept", "text/html,application/xhtml+xml,*/*;q=0.8")])));
        assert!(!wants_page(&headers(&[("accept", "*/*")])), "fsspec keeps its listing");
        assert!(!wants_page(&headers(&[("accept", "application/json")])));
        assert!(!wants_page(&HeaderMap::new()));
    }

    #[test]
    fn the_origin_is_the_host_when_it_is_a_host() {
        assert_eq!(origin(&headers(&[("host", "127.0.0.1:8080")])), "http://127.0.0.1:8080");
        assert_eq!(
            origin(&headers(&[("host", "data.example.org"), ("x-forwarded-proto", "https")])),
            "https://data.example.org"
        );
        assert_eq!(origin(&headers(&[("host", "a\"b")])), "http://localhost", "no quote reaches a snippet");
        assert_eq!(origin(&headers(&[("host", "a"), ("x-forwarded-host", "evil")])), "http://a");
    }

    #[test]
    fn codecs_read_as_a_chain() {
        let c = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]);
        assert_eq!(codecs(Some(&c)), "bytes {\"endian\":\"little\"} → zstd");
    }
}

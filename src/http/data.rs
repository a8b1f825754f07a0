//! The data plane: `GET|HEAD /{store}[@{version}]/{key}`, what Zarr clients read: the v3 keys
//! here, the Zarr v2 view (`v2.rs`) and the listings (`listing.rs`, also `PROPFIND`) beside them.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;

use super::range::{Plan, plan};
use super::{listing, v2};
use crate::app::AppState;
use crate::config::Config;
use crate::error::ApiError;
use crate::versions::view::RenderedDoc;
use crate::versions::{Chunk, VersionView, VirtualChunk};
use crate::zarr::hierarchy::Node;
use crate::zarr::{ChunkLocation, Resolved};

/// Which version a response belongs to.
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("zarrgate-version");

/// The data plane's state: the application, the `Cache-Control` values of its answers,
/// rendered once, and the versions' Zarr v2 views.
pub(super) struct Plane {
    pub(super) app: AppState,
    /// Under a store's current version.
    current_cache_control: HeaderValue,
    /// Under a pinned version.
    pinned_cache_control: HeaderValue,
    /// The Zarr v2 views, rendered once per version.
    pub(super) v2: v2::V2Views,
}

/// The data-plane routes.
pub fn router(app: &AppState) -> Router<AppState> {
    let plane = Plane {
        app: app.clone(),
        current_cache_control: cache_control(&app.config, app.config.http.max_age_seconds, ""),
        pinned_cache_control: cache_control(&app.config, 31_536_000, ", immutable"),
        v2: v2::V2Views::new(&app.config, &app.metrics),
    };
    // PROPFIND (WebDAV listing, as object_store's HTTP store sends it) has no MethodFilter:
    // it reaches each route's fallback, which refuses every other method.
    Router::new()
        .route("/{store}", get(read_store).fallback(other_store))
        .route("/{store}/", get(read_root).fallback(other_root))
        .route("/{store}/{*key}", get(read).fallback(other))
        .with_state(Arc::new(plane))
}

/// `Cache-Control` of data-plane answers: `public`, or `private` when reads need a token (a
/// shared cache must never hand a response to a reader who did not show one).
fn cache_control(config: &Config, max_age: u64, extra: &str) -> HeaderValue {
    let scope = if config.read_tokens.is_empty() { "public" } else { "private" };
    HeaderValue::from_str(&format!("{scope}, max-age={max_age}{extra}")).unwrap_or(HeaderValue::from_static("no-store"))
}

/// Headers every answer about a version carries.
pub(super) struct Served {
    cache_control: HeaderValue,
    version: HeaderValue,
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

async fn read(
    State(plane): State<Arc<Plane>>,
    Path((store, key)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let target = Target { key: &key, directory: key.ends_with('/') };
    respond(&plane, &store, target, method, headers).await
}

async fn read_root(
    State(plane): State<Arc<Plane>>,
    Path(store): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    respond(&plane, &store, Target { key: "", directory: true }, method, headers).await
}

async fn read_store(
    State(plane): State<Arc<Plane>>,
    Path(store): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    respond(&plane, &store, Target { key: "", directory: false }, method, headers).await
}

async fn other(plane: State<Arc<Plane>>, path: Path<(String, String)>, method: Method, headers: HeaderMap) -> Response {
    if method.as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read(plane, path, method, headers).await)
    }
}

async fn other_root(plane: State<Arc<Plane>>, path: Path<String>, method: Method, headers: HeaderMap) -> Response {
    if method.as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read_root(plane, path, method, headers).await)
    }
}

async fn other_store(plane: State<Arc<Plane>>, path: Path<String>, method: Method, headers: HeaderMap) -> Response {
    if method.as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read_store(plane, path, method, headers).await)
    }
}

const ALLOWED: HeaderValue = HeaderValue::from_static("GET,HEAD,PROPFIND");

fn method_not_allowed() -> Response {
    allow(StatusCode::METHOD_NOT_ALLOWED.into_response())
}

/// The methods of the data plane, on an answer that axum would otherwise label `GET,HEAD`.
fn allow(mut response: Response) -> Response {
    response.headers_mut().insert(header::ALLOW, ALLOWED);
    response
}

async fn respond(plane: &Plane, store: &str, target: Target<'_>, method: Method, headers: HeaderMap) -> Response {
    let (name, pinned) = match store.split_once('@') {
        None => (store, None),
        Some((name, version)) => match version_number(version) {
            Some(v) => (name, Some(v)),
            // Not 404: a client would read every chunk under this URL as fill values.
            None => {
                return ApiError::BadRequest(format!(
                    "{version:?} is not a version number: pin a version as /{name}@<number>/..., with the number \
                     from the Zarrgate-Version header or GET /api/v1/stores/{name}"
                ))
                .into_response();
            }
        },
    };
    // A current version deleted (by retention, after a newer one) while this replica still
    // had it cached is looked up again once; a pinned one is gone for good.
    let mut attempt = 0;
    let answer = loop {
        attempt += 1;
        let answer = serve_key(plane, store, name, pinned, target, &method, &headers).await;
        let gone = matches!(&answer, Err(ApiError::Gone(_)) | Ok((Err(ApiError::Gone(_)), _)));
        if gone && pinned.is_none() && attempt == 1 {
            plane.app.reader.forget_store(name).await;
            continue;
        }
        break answer;
    };
    let (response, served) = match answer {
        Ok(answer) => answer,
        Err(e) => return e.into_response(),
    };
    let mut response = response.unwrap_or_else(IntoResponse::into_response);
    let missing = response.status() == StatusCode::NOT_FOUND;
    let h = response.headers_mut();
    h.insert(VERSION_HEADER, served.version);
    if missing {
        // A missing chunk or key of a version is as stable as the version itself.
        h.insert(header::CACHE_CONTROL, served.cache_control);
    }
    response
}

/// A version number as written in a pinned URL: digits only, no sign, no leading zero.
fn version_number(text: &str) -> Option<i64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The answer for `key` in the version the URL names, with the headers every answer about that
/// version carries; `Err` when the version itself cannot be found.
async fn serve_key(
    plane: &Plane,
    segment: &str,
    name: &str,
    pinned: Option<i64>,
    target: Target<'_>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(Result<Response, ApiError>, Served), ApiError> {
    let app = &plane.app;
    let view = app.reader.open(segment, name, pinned).await?;
    let served = Served {
        cache_control: match pinned {
            // A year: responses under a pinned version never change.
            Some(_) => plane.pinned_cache_control.clone(),
            None => plane.current_cache_control.clone(),
        },
        version: view.version_header.clone(),
        last_modified: view.last_modified.clone(),
        head_only: method == Method::HEAD,
    };
    if method.as_str() == listing::PROPFIND {
        return Ok((listing::propfind(plane, &view, segment, target, headers, &served).await, served));
    }
    if target.directory {
        return Ok((listing::list(plane, &view, segment, target.key, headers, &served).await, served));
    }
    let key = target.key;
    let response = match view.hierarchy.resolve(key) {
        Resolved::Metadata(node) => Ok(metadata(&view.docs[node.index as usize], headers, &served)),
        Resolved::Chunk { node, location, .. } => chunk(app, &view, node, location, key, headers, &served).await,
        Resolved::NotFound(why) => match v2::serve(plane, &view, key, headers, &served).await {
            Some(answer) => answer,
            None => listing::redirect(&view, segment, key).ok_or(ApiError::NotFound(why)),
        },
    };
    Ok((response, served))
}

/// A rendered metadata document (`zarr.json`, or a v2 document), gzip-compressed when asked.
pub(super) fn metadata(doc: &RenderedDoc, headers: &HeaderMap, served: &Served) -> Response {
    let (body, etag, encoding) = match &doc.gzip {
        Some(gz) if accepts_gzip(headers) => (gz.clone(), &doc.gzip_etag, Some("gzip")),
        _ => (doc.identity.clone(), &doc.etag, None),
    };
    let mut response = bytes_response(body, etag, "application/json", headers, served);
    let success = response.status().is_success();
    let h = response.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Some(encoding) = encoding.filter(|_| success) {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    response
}

pub(super) async fn chunk(
    app: &AppState,
    view: &VersionView,
    node: &Node,
    at: ChunkLocation,
    key: &str,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    match app.reader.chunk(view, node, at).await? {
        Chunk::Missing => Err(ApiError::NotFound(format!(
            "chunk {key:?} of array {} has no data: readers use its fill value",
            node.path
        ))),
        Chunk::Bytes { bytes, etag } => {
            Ok(bytes_response(bytes, &tag_value(&etag), "application/octet-stream", headers, served))
        }
        Chunk::Virtual(chunk) => virtual_chunk(app, &chunk, headers, served).await,
    }
}

async fn virtual_chunk(
    app: &AppState,
    chunk: &VirtualChunk,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let length = chunk.length;
    let tag = tag_value(&chunk.etag());
    let (status, range) = match plan(headers, length, tag.to_str().unwrap_or_default()) {
        Plan::NotModified => return Ok(not_modified(&tag, served, length)),
        Plan::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { len: length }),
        Plan::Full => (StatusCode::OK, 0..length),
        Plan::Partial(r) => (StatusCode::PARTIAL_CONTENT, r),
    };
    // Nothing to read for HEAD, nor for an empty reference (object stores refuse empty ranges).
    let mut response = if served.head_only || range.is_empty() {
        Response::new(Body::empty())
    } else {
        Response::new(Body::from_stream(app.reader.fetch(chunk, range.clone()).await?.body))
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
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    set_common(h, tag, content_type, served);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(content_length));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(header::CONTENT_RANGE, content_range(&range, len));
    }
    response
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

/// An ETag as a header value (ours are always visible ASCII).
fn tag_value(tag: &str) -> HeaderValue {
    HeaderValue::from_str(tag).unwrap_or(HeaderValue::from_static("\"\""))
}

fn content_range(range: &std::ops::Range<u64>, len: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes {}-{}/{len}", range.start, range.end - 1))
        .unwrap_or(HeaderValue::from_static("bytes */0"))
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    let items =
        headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(','));
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

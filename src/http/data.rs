//! The data plane: `GET|HEAD /{store}[@{version}]/{key}`, what Zarr clients read: the v3 keys
//! here, the listings (`listing.rs`, also `PROPFIND`) beside them, and the same routes under
//! `/v2/{store}[@{version}]/` for the Zarr v2 view (`v2.rs`); for a browser, the store browser's
//! pages and quick looks (`browser.rs`) and `GET /`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::answer::{Served, Target, chunk, metadata};
use super::{answer, browser, html, listing, range, v2};
use crate::app::AppState;
use crate::config::Config;
use crate::error::ApiError;
use crate::versions::{Chunk, VersionView};
use crate::zarr::Resolved;

pub use super::answer::VERSION_HEADER;

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

impl Plane {
    pub(super) fn new(app: &AppState) -> Self {
        Self {
            app: app.clone(),
            current_cache_control: answer::lasting(&cache_control(&app.config, app.config.http.max_age_seconds, "")),
            pinned_cache_control: answer::lasting(&cache_control(&app.config, 31_536_000, ", immutable")),
            v2: v2::V2Views::new(&app.config, &app.metrics),
        }
    }
}

impl Plane {
    /// The headers of every answer about `view`, the version a URL names (`pinned` or current).
    fn served(&self, view: &VersionView, pinned: Option<i64>, method: &Method) -> Served {
        Served {
            cache_control: match pinned {
                // A year: responses under a pinned version never change.
                Some(_) => self.pinned_cache_control.clone(),
                None => self.current_cache_control.clone(),
            },
            version: Some(view.version_header.clone()),
            last_modified: view.last_modified.clone(),
            head_only: method == Method::HEAD,
        }
    }
}

/// The route of `GET /{store}/{key}`, the label of its metrics (in front of the router too).
pub(super) const KEY_ROUTE: &str = "/{store}/{*key}";

/// Which view of a store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    /// `/{store}/...`: its Zarr v3 keys, listings and pages.
    V3,
    /// `/v2/{store}/...`: its Zarr v2 view (`v2.rs`) and the listings of that view. Apart from
    /// the v3 keys: zarr-python 3 and xarray, opened without `zarr_format`, warn on every open
    /// of a URL that answers both `zarr.json` and `.zgroup`.
    V2,
}

/// The first path segment of the Zarr v2 view, a name no store may have.
pub(super) const V2_SEGMENT: &str = "v2";

/// What the data plane's handlers are given: the plane and the view their routes name.
type Routed = (Arc<Plane>, Flavor);

/// The data-plane routes: the v3 keys' and, the same under `/v2`, the Zarr v2 view's.
pub(super) fn router(plane: Arc<Plane>) -> Router<AppState> {
    // PROPFIND (WebDAV listing, as object_store's HTTP store sends it) has no MethodFilter:
    // it reaches each route's fallback, which refuses every other method.
    let v3 = Router::new()
        .route("/{store}", get(read_store).fallback(other_store))
        .route("/{store}/", get(read_root).fallback(other_root))
        // The path is KEY_ROUTE, written out: tests/python/test_openapi.py reads the routes here.
        .route("/{store}/{*key}", get(read).fallback(other))
        .with_state((plane.clone(), Flavor::V3));
    // Written out, not nested: tests/python/test_openapi.py reads them too.
    let v2 = Router::new()
        .route("/v2/{store}", get(read_store).fallback(other_store))
        .route("/v2/{store}/", get(read_root).fallback(other_root))
        .route("/v2/{store}/{*key}", get(read).fallback(other))
        .with_state((plane.clone(), Flavor::V2));
    Router::new().route("/", get(stores_page)).with_state(plane).merge(v3).merge(v2)
}

/// `Cache-Control` of data-plane answers: `public`, or `private` when reads need a token (a
/// shared cache must never hand a response to a reader who did not show one).
fn cache_control(config: &Config, max_age: u64, extra: &str) -> HeaderValue {
    let scope = if config.read_tokens.is_empty() { "public" } else { "private" };
    HeaderValue::from_str(&format!("{scope}, max-age={max_age}{extra}")).unwrap_or(HeaderValue::from_static("no-store"))
}

/// `GET /{store}/{key}` as the router would route it, for a path that needs no decoding: the
/// index of the `/` between store and key (`path[1..i]` and `path[i + 1..]`), or `None` when the
/// router must see the request. The store's segment is never `api` or `v2` (nor anything a route
/// of its own could match: `/v2/{store}/{key}` is the Zarr v2 view's, answered by the router),
/// nothing in the path is percent-encoded, and no `//` is in it.
pub(super) fn key_split(path: &str) -> Option<usize> {
    // One pass over the bytes: a path of a few dozen bytes costs less so than through
    // `split_once` and `contains` (callgrind: 650 instructions a request), or `memchr` twice
    // (300).
    let rest = path.strip_prefix('/')?;
    let (mut slash, mut last) = (None, b'/');
    for (i, b) in rest.bytes().enumerate() {
        match b {
            // `//` is collapsed on the router's way (front.rs, `collapse_slashes`).
            b'/' if last == b'/' => return None,
            b'%' => return None,
            b'/' if slash.is_none() => slash = Some(i),
            _ => {}
        }
        last = b;
    }
    let slash = slash?;
    let (store, key) = (&rest[..slash], &rest[slash + 1..]);
    (!store.is_empty() && !key.is_empty() && store != "api" && store != V2_SEGMENT).then_some(slash + 1)
}

/// `(store, key)` of `path`, split at `split` (from [`key_split`]).
pub(super) fn key_at(path: &str, split: usize) -> (&str, &str) {
    (&path[1..split], &path[split + 1..])
}

/// Answers `GET /{store}/{key}` (as split by [`key_split`]) as [`read`] does.
pub(super) async fn read_key(plane: &Plane, (store, key): (&str, &str), request: &Parts) -> Response {
    let target = Target { key, directory: key.ends_with('/') };
    let response =
        respond(plane, Flavor::V3, store, target, request.uri.query(), &request.method, &request.headers).await;
    // The router's layer for this read: an error as a page for a browser.
    html::error_page(response, &request.headers, request.uri.path()).await
}

async fn read(
    State((plane, flavor)): State<Routed>,
    Path((store, key)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response {
    let target = Target { key: &key, directory: key.ends_with('/') };
    respond(&plane, flavor, &store, target, query.as_deref(), request.method(), request.headers()).await
}

async fn read_root(
    State((plane, flavor)): State<Routed>,
    Path(store): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response {
    let (method, headers) = (request.method(), request.headers());
    respond(&plane, flavor, &store, Target { key: "", directory: true }, query.as_deref(), method, headers).await
}

/// `GET /`: the stores, for a browser (anything else gets the 404 it always got).
async fn stores_page(
    State(plane): State<Arc<Plane>>,
    RawQuery(query): RawQuery,
    uri: axum::http::Uri,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if !browser::wants_page(&headers) {
        return super::fallback(uri).await.into_response();
    }
    let now = chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let served = Served {
        cache_control: plane.current_cache_control.clone(),
        version: None,
        last_modified: HeaderValue::from_str(&now).unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT")),
        head_only: method == Method::HEAD,
    };
    browser::root(&plane.app, query.as_deref(), &headers, &served).await.unwrap_or_else(IntoResponse::into_response)
}

async fn read_store(State((plane, flavor)): State<Routed>, Path(store): Path<String>, request: Request) -> Response {
    let (method, headers) = (request.method(), request.headers());
    respond(&plane, flavor, &store, Target { key: "", directory: false }, None, method, headers).await
}

async fn other(plane: State<Routed>, path: Path<(String, String)>, request: Request) -> Response {
    if request.method().as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read(plane, path, RawQuery(None), request).await)
    }
}

async fn other_root(plane: State<Routed>, path: Path<String>, request: Request) -> Response {
    if request.method().as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read_root(plane, path, RawQuery(None), request).await)
    }
}

async fn other_store(plane: State<Routed>, path: Path<String>, request: Request) -> Response {
    if request.method().as_str() != listing::PROPFIND {
        method_not_allowed()
    } else {
        allow(read_store(plane, path, request).await)
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

async fn respond(
    plane: &Plane,
    flavor: Flavor,
    store: &str,
    target: Target<'_>,
    query: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    let (name, pinned) = match pinned_version(store) {
        Ok(named) => named,
        Err(e) => return e.into_response(),
    };
    if name == V2_SEGMENT {
        // A store registered as `v2` before the name was reserved: its keys would be the v2
        // view's URLs (the server warns of it at startup).
        return ApiError::NotFound(format!(
            "no store is named {V2_SEGMENT:?} here: /{V2_SEGMENT}/<store>/ is the Zarr v2 view of a store"
        ))
        .into_response();
    }
    // A current version deleted (by retention, after a newer one) while this replica still
    // had it cached is looked up again once; a pinned one is gone for good.
    let mut attempt = 0;
    let answer = loop {
        attempt += 1;
        let answer = serve_key((plane, flavor), store, (name, pinned), target, query, method, headers).await;
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
    versioned(response.unwrap_or_else(IntoResponse::into_response), served)
}

/// The store's name in a URL's first segment (`era5`, `era5@3`), and the version it pins.
fn pinned_version(segment: &str) -> Result<(&str, Option<i64>), ApiError> {
    // A byte search: `split_once` costs 100 instructions for a name of a few bytes.
    match segment.bytes().position(|b| b == b'@').map(|at| (&segment[..at], &segment[at + 1..])) {
        None => Ok((segment, None)),
        Some((name, version)) => match version_number(version) {
            Some(v) => Ok((name, Some(v))),
            // Not 404: a client would read every chunk under this URL as fill values.
            None => Err(ApiError::BadRequest(format!(
                "{version:?} is not a version number: pin a version as /{name}@<number>/..., with the number from \
                 the Zarrgate-Version header or GET /api/v1/stores/{name}"
            ))),
        },
    }
}

/// `response` with the headers every answer about the version `served` carries.
fn versioned(mut response: Response, served: Served) -> Response {
    let missing = response.status() == StatusCode::NOT_FOUND;
    let h = response.headers_mut();
    if let Some(version) = served.version {
        // Already there in an answer with a representation's head (`answer::Head`).
        h.entry(VERSION_HEADER).or_insert(version);
    }
    if missing {
        // A missing chunk or key of a version is as stable as the version itself.
        h.insert(header::CACHE_CONTROL, served.cache_control);
    }
    response
}

/// What a read answered without waiting has found: a metadata document or an inline chunk of
/// the version `view`, in the form asked.
struct Found<'a> {
    view: &'a Arc<VersionView>,
    pinned: Option<i64>,
    body: bytes::Bytes,
    tag: HeaderValue,
    kind: answer::Kind,
}

/// What `key` names in `view`: a metadata document (gzip-compressed if `gzip` and at hand), or a
/// chunk to look up. `None` for anything else.
enum Named<'v> {
    Doc(bytes::Bytes, HeaderValue, answer::Kind),
    Chunk(&'v crate::zarr::hierarchy::Node, crate::zarr::ChunkLocation),
}

fn named<'v>(view: &'v VersionView, key: &str, gzip: bool) -> Option<Named<'v>> {
    if key.ends_with('/') {
        return None;
    }
    match view.hierarchy.resolve(key) {
        Resolved::Metadata(node) => {
            let doc = &view.docs[node.index as usize];
            Some(match if gzip { doc.gzip_now()? } else { None } {
                Some(gzip) => Named::Doc(gzip, doc.gzip_etag.clone(), answer::Kind::JsonGzip),
                None => Named::Doc(doc.identity.clone(), doc.etag.clone(), answer::Kind::Json),
            })
        }
        Resolved::Chunk { node, location, .. } => Some(Named::Chunk(node, location)),
        Resolved::NotFound(_) => None,
    }
}

/// Why a read was not found without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Missed {
    /// It is not a metadata document or an inline chunk (or `then` declined it).
    Other,
    /// The store's head or view, or the chunk's block, is not at hand on this worker thread.
    Wait,
}

/// What `then` answers of what `GET /{store}/{key}` finds without waiting, from what this
/// worker thread has at hand (the store's head and view, and an inline chunk's block, in its
/// fronts): a metadata document (gzip-compressed if `gzip` and at hand) or an inline chunk,
/// counted as read if `then` answers.
fn found_now<R>(
    plane: &Plane,
    (store, key): (&str, &str),
    gzip: bool,
    then: impl FnOnce(Found<'_>) -> Option<R>,
) -> Result<R, Missed> {
    if key.ends_with('/') {
        return Err(Missed::Other);
    }
    let (_, pinned) = pinned_version(store).map_err(|_| Missed::Other)?;
    let reader = &plane.app.reader;
    let view = reader.open_now(store).ok_or(Missed::Wait)?;
    let (body, tag, kind, chunk) = match named(&view, key, gzip).ok_or(Missed::Other)? {
        Named::Doc(body, tag, kind) => (body, tag, kind, None),
        Named::Chunk(node, location) => match reader.inline_chunk_now(&view, node, location) {
            Some(Chunk::Bytes { bytes, etag }) => {
                (bytes, answer::tag_value(&etag), answer::Kind::Octet, Some((node, location)))
            }
            _ if reader.block_at_hand(&view, node, location) => return Err(Missed::Other),
            _ => return Err(Missed::Wait),
        },
    };
    let answered = then(Found { view: &view, pinned, body, tag, kind }).ok_or(Missed::Other)?;
    reader.count_now(store, &view, chunk);
    Ok(answered)
}

/// [`found_now`], waiting for the store's head and view when this worker thread does not have
/// them at hand (a head past its time to live, a view not yet read here), and taking a chunk's
/// block from the cache when another thread put it there. A block is not loaded here: which
/// kind of chunk a key names is known only from its block, and a read not found here is
/// answered by the router's way, which would count the block's lookup twice (its head's and
/// view's are counted twice then, when this waited for them: a read of something else that
/// comes first on its connection just as the store's head is past its time to live). Errors
/// are `None`: the read itself meets (and reports) them.
async fn found<R>(
    plane: &Plane,
    (store, key): (&str, &str),
    gzip: bool,
    then: impl FnOnce(Found<'_>) -> Option<R>,
) -> Option<R> {
    let (name, pinned) = pinned_version(store).ok()?;
    let view = plane.app.reader.open(store, name, pinned).await.ok()?;
    let (body, tag, kind, chunk) = match named(&view, key, gzip)? {
        Named::Doc(body, tag, kind) => (body, tag, kind, None),
        Named::Chunk(node, location) => {
            let reader = &plane.app.reader;
            let chunk = match reader.inline_chunk_now(&view, node, location) {
                Some(chunk) => chunk,
                None => {
                    reader.front_block(&view, node, location).await;
                    reader.inline_chunk_now(&view, node, location)?
                }
            };
            match chunk {
                Chunk::Bytes { bytes, etag } => {
                    (bytes, answer::tag_value(&etag), answer::Kind::Octet, Some((node, location)))
                }
                _ => return None,
            }
        }
    };
    let answered = then(Found { view: &view, pinned, body, tag, kind })?;
    if let Some((node, location)) = chunk {
        plane.app.reader.count_block_now(&view, node, location);
    }
    Some(answered)
}

/// [`read_key`] answered without waiting ([`found_now`]): with any status but an error, and
/// the headers `added`. `None` for anything else, which [`read_key`] answers. The same answer,
/// at a fraction of the cost: no future per layer, no `Response` moved through each
/// (bench/README.md, "Stop 20"), and for a full answer (200) a head built once
/// ([`answer::full`], "Stop 21").
pub(super) fn read_key_now(
    plane: &Plane,
    at: (&str, &str),
    request: &Parts,
    added: &answer::Added,
) -> Option<Response> {
    let headers = &request.headers;
    let found = found_now(plane, at, answer::accepts_gzip(headers), |Found { view, pinned, body, tag, kind }| {
        let served = || plane.served(view, pinned, &request.method);
        let full = request.method == Method::GET
            && matches!(range::plan(headers, body.len() as u64, tag.to_str().unwrap_or_default()), range::Plan::Full);
        if full {
            return Some(answer::full(view, kind, pinned.is_some(), served, added, &tag, body));
        }
        let response = answer::bytes_answer(body, &tag, kind, headers, &served(), added);
        let status = response.status();
        if status.is_client_error() || status.is_server_error() {
            return None;
        }
        Some(response)
    });
    found.ok()
}

/// The full answer (200) to a plain `GET /{store}/{key}` found without waiting ([`found_now`]),
/// begun in `out` as sent on the connection ([`answer::full_wire`]), and its body, for the
/// caller to end ([`answer::full_wire_end`]): for a GET that asks no range, revalidates nothing
/// and accepts gzip if `gzip`. Why not (and `out` as it was) for anything else.
pub(super) fn read_key_wire(
    plane: &Plane,
    at: (&str, &str),
    gzip: bool,
    added: &answer::Added,
    out: &mut Vec<u8>,
) -> Result<bytes::Bytes, Missed> {
    found_now(plane, at, gzip, |found| Some(wire(plane, found, added, out)))
}

/// [`read_key_wire`], waiting for what this worker thread does not have at hand ([`found`]).
pub(super) async fn read_key_wire_waiting(
    plane: &Plane,
    at: (&str, &str),
    gzip: bool,
    added: &answer::Added,
    out: &mut Vec<u8>,
) -> Option<bytes::Bytes> {
    found(plane, at, gzip, |found| Some(wire(plane, found, added, out))).await
}

fn wire(
    plane: &Plane,
    Found { view, pinned, body, tag, kind }: Found<'_>,
    added: &answer::Added,
    out: &mut Vec<u8>,
) -> bytes::Bytes {
    let served = || plane.served(view, pinned, &Method::GET);
    answer::full_wire(view, kind, pinned.is_some(), served, added, &tag, out);
    body
}

/// A version number as written in a pinned URL: digits only, no sign, no leading zero.
fn version_number(text: &str) -> Option<i64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The answer for `key` (and `query`) in the version the URL names (store `name`, `pinned` or
/// current), in the view `flavor` names, with the headers every answer about that
/// version carries; `Err` when the version itself cannot be found.
async fn serve_key(
    (plane, flavor): (&Plane, Flavor),
    segment: &str,
    (name, pinned): (&str, Option<i64>),
    target: Target<'_>,
    query: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(Result<Response, ApiError>, Served), ApiError> {
    let app = &plane.app;
    let view = app.reader.open(segment, name, pinned).await?;
    let served = plane.served(&view, pinned, method);
    // The listings of the Zarr v2 view name its documents; those of the v3 keys `zarr.json`.
    let v2 = (flavor == Flavor::V2).then_some(&plane.v2);
    if method.as_str() == listing::PROPFIND {
        let listed = Box::pin(listing::propfind(&plane.app, v2, &view, segment, target, headers, &served)).await;
        return Ok((listed, served));
    }
    if flavor == Flavor::V3
        && target.directory
        && let Some(shown) = Box::pin(browse(plane, &view, segment, target.key, query, headers, &served)).await
    {
        return Ok((shown, served));
    }
    if target.directory {
        let listed = Box::pin(listing::list(&plane.app, v2, &view, segment, target.key, headers, &served)).await;
        return Ok((listed, served));
    }
    let key = target.key;
    let response = match flavor {
        Flavor::V3 => match view.hierarchy.resolve(key) {
            Resolved::Metadata(node) => Ok(metadata(&view.docs[node.index as usize], headers, &served).await),
            Resolved::Chunk { node, location, .. } => chunk(app, &view, node, location, key, headers, &served).await,
            Resolved::NotFound(why) => {
                listing::redirect(&view, segment, key).ok_or_else(|| ApiError::NotFound(v2_hint(why, segment, key)))
            }
        },
        Flavor::V2 => match Box::pin(v2::serve(&plane.app, &plane.v2, &view, key, headers, &served)).await {
            Some(answer) => answer,
            None => listing::redirect(&view, segment, key).ok_or_else(|| {
                ApiError::NotFound(format!(
                    "no key {key:?} in the Zarr v2 view of {segment}: it has .zgroup, .zattrs, .zarray, .zmetadata \
                     and v2 chunk keys (the Zarr v3 keys are at /{segment}/{key})"
                ))
            }),
        },
    };
    Ok((response, served))
}

/// Why a v3 key was not found, and for a Zarr v2 document (a v3 store answers 404 to the
/// probes of zarr-python 3 and xarray), where the store's Zarr v2 view is.
fn v2_hint(why: String, segment: &str, key: &str) -> String {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    if !crate::zarr::v2view::V2_NAMES.contains(&name) {
        return why;
    }
    format!("{key} is a Zarr v2 key and this is a Zarr v3 store: its Zarr v2 view is at /{V2_SEGMENT}/{segment}/{key}")
}

/// A node's quick look (`?quicklook=`) or, for a browser, its page; `None` for the listing.
async fn browse(
    plane: &Plane,
    view: &Arc<VersionView>,
    segment: &str,
    key: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    served: &Served,
) -> Option<Result<Response, ApiError>> {
    let app = &plane.app;
    match browser::QuicklookFormat::from_query(query) {
        Err(e) => Some(Err(e)),
        Ok(Some(format)) => Some(match view.hierarchy.node(key.trim_end_matches('/')) {
            Some(node) => browser::quicklook(app, view, node, format, headers, served).await,
            None => Err(ApiError::NotFound(format!("no array at {key:?}: there is nothing to look at"))),
        }),
        Ok(None) if browser::wants_page(headers) => {
            // Never `immutable`, even pinned: a page lists the store's versions, which grow.
            let page = Served {
                cache_control: plane.current_cache_control.clone(),
                version: served.version.clone(),
                last_modified: served.last_modified.clone(),
                head_only: served.head_only,
            };
            Some(browser::page(app, view, segment, key, headers, &page).await)
        }
        Ok(None) => None,
    }
}

#[cfg(test)]
mod tests {
    fn key_of(path: &str) -> Option<(&str, &str)> {
        super::key_split(path).map(|at| super::key_at(path, at))
    }

    #[test]
    fn key_of_finds_plain_reads_only() {
        assert_eq!(key_of("/era5/zarr.json"), Some(("era5", "zarr.json")));
        assert_eq!(key_of("/era5/t2m/c/0/1"), Some(("era5", "t2m/c/0/1")));
        assert_eq!(key_of("/era5@3/t2m/"), Some(("era5@3", "t2m/")));
        for router in [
            "/era5",
            "/era5/",
            "//x",
            "/",
            "",
            "era5/x",
            "/api/v1",
            "/era%35/x",
            "/era5/t%2fx",
            "/era5//x",
            "/v2/era5/.zmetadata",
            "/e/t//c/0",
        ] {
            assert_eq!(key_of(router), None, "{router:?} is the router's");
        }
    }
}

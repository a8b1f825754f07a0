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

use super::answer::{Served, Target, metadata};
use super::v2::{self, V2_SEGMENT};
use super::{answer, browser, html, listing};
use crate::app::AppState;
use crate::config::Config;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::lookup::{self, Found, Keys, Lookup, Named, ReadUrl};

mod fast;

pub(super) use fast::{read_key_now, read_key_wire, read_key_wire_waiting};

pub use super::answer::VERSION_HEADER;

/// The data plane's state: the application, and the `Cache-Control` values of its answers,
/// rendered once.
pub(super) struct Plane {
    pub(super) app: AppState,
    /// Under a store's current version.
    current_cache_control: HeaderValue,
    /// Under a pinned version.
    pinned_cache_control: HeaderValue,
}

impl Plane {
    pub(super) fn new(app: &AppState) -> Self {
        Self {
            app: app.clone(),
            current_cache_control: answer::lasting(&cache_control(&app.config, app.config.http.max_age_seconds, "")),
            pinned_cache_control: answer::lasting(&cache_control(&app.config, 31_536_000, ", immutable")),
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

/// Answers `GET /{store}/{key}` (as split by [`key_split`]) as [`read`] does, from the lookup
/// `so_far` of an earlier way in, if any.
pub(super) async fn read_key(
    plane: &Plane,
    (store, key): (&str, &str),
    request: &Parts,
    so_far: Option<Lookup>,
) -> Response {
    let target = Target { key, directory: key.ends_with('/') };
    let asked = Asked { target, query: request.uri.query(), method: &request.method, headers: &request.headers };
    let response = respond(plane, Flavor::V3, store, asked, so_far).await;
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
    let asked = Asked { target, query: query.as_deref(), method: request.method(), headers: request.headers() };
    respond(&plane, flavor, &store, asked, None).await
}

async fn read_root(
    State((plane, flavor)): State<Routed>,
    Path(store): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response {
    let target = Target { key: "", directory: true };
    let asked = Asked { target, query: query.as_deref(), method: request.method(), headers: request.headers() };
    respond(&plane, flavor, &store, asked, None).await
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
    let target = Target { key: "", directory: false };
    let asked = Asked { target, query: None, method: request.method(), headers: request.headers() };
    respond(&plane, flavor, &store, asked, None).await
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

/// What a read asks for under a store: its target, query, method and headers.
#[derive(Clone, Copy)]
struct Asked<'a> {
    target: Target<'a>,
    query: Option<&'a str>,
    method: &'a Method,
    headers: &'a HeaderMap,
}

/// The answer to `asked` under `store` (as the URL writes it) in the view `flavor` names;
/// `so_far` is the lookup of this read as far as an earlier way in took it.
async fn respond(plane: &Plane, flavor: Flavor, store: &str, asked: Asked<'_>, mut so_far: Option<Lookup>) -> Response {
    let (name, pinned) = match lookup::pinned_version(store) {
        Ok(named) => named,
        Err(e) => return ApiError::from(e).into_response(),
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
        let answer = serve_key((plane, flavor), store, asked, so_far.take()).await;
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

/// The lookup's URL of a read: the store's segment, and the key when the read names one (not
/// a listing, a page or a PROPFIND, which need the version only).
fn read_url<'a>(flavor: Flavor, segment: &'a str, asked: &Asked<'a>) -> ReadUrl<'a> {
    let whole = asked.target.directory || asked.method.as_str() == listing::PROPFIND;
    let keys = match flavor {
        Flavor::V3 => Keys::V3,
        Flavor::V2 => Keys::V2,
    };
    ReadUrl { segment, key: (!whole).then_some(asked.target.key), keys }
}

/// The answer for what `asked` names under `segment` (the store as the URL writes it), in the
/// view `flavor` names, with the headers every answer about that version carries; `Err` when
/// the version itself cannot be found.
async fn serve_key(
    (plane, flavor): (&Plane, Flavor),
    segment: &str,
    asked: Asked<'_>,
    so_far: Option<Lookup>,
) -> Result<(Result<Response, ApiError>, Served), ApiError> {
    let app = &plane.app;
    let Asked { target, query, method, headers } = asked;
    let Found { view, pinned, named } = app.reader.lookup(&read_url(flavor, segment, &asked), so_far).await?;
    let view = &view;
    let served = plane.served(view, pinned, method);
    // The listings of the Zarr v2 view name its documents; those of the v3 keys `zarr.json`.
    let v2 = flavor == Flavor::V2;
    if method.as_str() == listing::PROPFIND {
        let listed = Box::pin(listing::propfind(app, v2, view, segment, target, headers, &served)).await;
        return Ok((listed, served));
    }
    if flavor == Flavor::V3
        && target.directory
        && let Some(shown) = Box::pin(browse(plane, view, segment, target.key, query, headers, &served)).await
    {
        return Ok((shown, served));
    }
    if target.directory {
        let listed = Box::pin(listing::list(app, v2, view, segment, target.key, headers, &served)).await;
        return Ok((listed, served));
    }
    let key = target.key;
    let unknown = |why: Option<String>| {
        listing::redirect(view, segment, key).ok_or_else(|| {
            ApiError::NotFound(match why {
                Some(why) => v2::hint(why, segment, key),
                None => v2::unknown(segment, key),
            })
        })
    };
    let response = match named {
        Named::Metadata(node) => Ok(metadata(&view.docs[node as usize], headers, &served).await),
        Named::V2Document(rendered) => match rendered.docs.get(key) {
            Some(doc) => Ok(metadata(doc, headers, &served).await),
            None => unknown(None),
        },
        Named::Chunk { node, chunk, .. } => match view.hierarchy.node_at(node) {
            Some(array) => answer::chunk(app, chunk, array, key, headers, &served).await,
            None => Err(ApiError::Internal(format!("version {}: no node {node}", view.head.id))),
        },
        Named::Unknown(why) => unknown(why),
        Named::NotFound(why) => Err(ApiError::NotFound(why)),
        Named::Version => unknown(None),
    };
    Ok((response, served))
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
            Some(browser::page(app, view, segment, key, query, headers, &page).await)
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

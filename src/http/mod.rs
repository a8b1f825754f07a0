//! The HTTP edge: the Zarr data plane, the REST control plane and the ops endpoints, with the
//! middleware every request goes through (request id, logging, metrics). Routing and rendering
//! only: the server one room up (`src/server/`) accepts the connections and writes the answers
//! on them; it takes from here [`front`] and what answers a plain read as bytes ([`Reads`]).

mod answer;
mod auth;
mod browser;
pub mod data;
mod export;
mod front;
mod html;
mod listing;
pub mod names;
mod object_stores;
mod observe;
mod openapi;
mod ops;
mod preconditions;
pub mod range;
mod stores;
mod summary;
mod v2;

// What the server uses (nothing here uses the server).
pub(crate) use answer::accepts_gzip_in;
pub(crate) use front::{Front, Handed, Reads};

use std::sync::Arc;

use axum::Router;
use axum::extract::OriginalUri;
use axum::handler::HandlerWithoutStateExt;
use axum::http::{Method, Uri, header};
use axum::middleware;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::app::AppState;
use crate::error::ApiError;

/// Every route of the server, and in front of them the plain reads of keys (`front.rs`): what
/// the server hands each connection's requests to.
pub(crate) fn front(state: AppState) -> front::Front {
    let plane = Arc::new(data::Plane::new(&state));
    let observer = Arc::new(observe::Observer::new(&state.metrics));
    let reads = (!state.read_auth_required()).then(|| (plane.clone(), observer.clone(), state.config.http.cors));
    front::Front::new(router(state, plane, observer), reads)
}

/// Every route of the server.
fn router(state: AppState, plane: Arc<data::Plane>, observer: Arc<observe::Observer>) -> Router {
    let api = Router::new()
        .merge(stores::router())
        .merge(object_stores::router())
        .merge(openapi::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token))
        // Not behind the token: it names a route the control plane does not have.
        .route_service("/{*rest}", no_api_route.into_service());
    let mut data = data::router(plane);
    if state.read_auth_required() {
        // Inside the CORS layer: a browser's preflight carries no token and is answered there.
        data = data.route_layer(middleware::from_fn_with_state(state.clone(), auth::require_read_token));
    }
    // Outside the read-token check: a browser gets its 401 as a page too.
    data = data.layer(middleware::from_fn(html::error_pages));
    if state.config.http.cors {
        data = data.layer(cors());
    }
    let routes = Router::new()
        .nest("/api/v1", api)
        .route_service("/api/v1/", api_index.into_service())
        .merge(ops::router())
        .merge(data)
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(observer, observe::observe));
    // A method router adds `Allow` to its 405 outside every layer of the router, `observe`
    // included: the server writes the problem body that lists the allowed methods
    // (`error::last_as_problem`, in the server's `connection.rs`).
    routes.with_state(state)
}

fn cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::any())
        .allow_methods([Method::GET, Method::HEAD])
        .allow_headers([
            header::RANGE,
            header::IF_NONE_MATCH,
            header::IF_RANGE,
            header::IF_MODIFIED_SINCE,
            header::AUTHORIZATION,
        ])
        .expose_headers([
            header::CONTENT_RANGE,
            header::CONTENT_LENGTH,
            header::ETAG,
            header::ACCEPT_RANGES,
            header::LAST_MODIFIED,
            data::VERSION_HEADER,
        ])
        .max_age(std::time::Duration::from_secs(86_400))
}

async fn fallback(uri: Uri) -> ApiError {
    let path = uri.path();
    ApiError::NotFound(format!("nothing is served at {path}: Zarr keys live under /<store>/, the API under /api/v1/"))
}

/// `/api/v1/`: the index is at `/api/v1`.
async fn api_index() -> axum::response::Redirect {
    axum::response::Redirect::permanent("/api/v1")
}

/// Under `/api/v1`, a path the control plane does not have (not a store named `api`).
async fn no_api_route(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotFound(format!(
        "the control plane has no route {method} {}: its routes are listed in /api/v1/openapi.json",
        uri.path()
    ))
}

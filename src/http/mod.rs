//! The HTTP edge: the Zarr data plane, the REST control plane and the ops endpoints, with the
//! middleware every request goes through (request id, logging, metrics).

mod answer;
mod auth;
mod browser;
pub mod data;
mod export;
mod listing;
pub mod names;
mod object_stores;
mod openapi;
mod ops;
pub mod range;
mod server;
mod stores;
mod summary;
mod v2;

pub use server::serve;

use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, OriginalUri, Request, State};
use axum::handler::HandlerWithoutStateExt;
use axum::http::{HeaderName, HeaderValue, Method, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tracing::Instrument;

use crate::app::AppState;
use crate::error::ApiError;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Every route of the server.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .merge(stores::router())
        .merge(object_stores::router())
        .merge(openapi::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token))
        // Not behind the token: it names a route the control plane does not have.
        .route_service("/{*rest}", no_api_route.into_service());
    let mut data = data::router(&state);
    if state.read_auth_required() {
        // Inside the CORS layer: a browser's preflight carries no token and is answered there.
        data = data.route_layer(middleware::from_fn_with_state(state.clone(), auth::require_read_token));
    }
    if state.config.http.cors {
        data = data.layer(cors());
    }
    let routes = Router::new()
        .nest("/api/v1", api)
        .merge(ops::router())
        .merge(data)
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state);
    // A method router adds `Allow` to its 405 outside every layer of the router, `observe`
    // included: the problem body that lists the allowed methods is written out here.
    Router::new().fallback_service(routes).layer(middleware::map_response(crate::error::last_as_problem))
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

/// Under `/api/v1`, a path the control plane does not have (not a store named `api`).
async fn no_api_route(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotFound(format!(
        "the control plane has no route {method} {}: its routes are listed in /api/v1/openapi.json",
        uri.path()
    ))
}

/// Request id, a span for the logs, an access log line and the HTTP metrics.
async fn observe(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_owned();
    let method = request.method().clone();
    // A label value per method the server knows; any name a client makes up is one label, or
    // every made-up name would add series to /metrics for good.
    let method_label = match method {
        Method::GET | Method::HEAD | Method::PUT | Method::PATCH | Method::POST | Method::DELETE | Method::OPTIONS => {
            method.as_str()
        }
        _ => "other",
    };
    let id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let span = tracing::info_span!("request", id = %id, method = %method, route = %route);
    let path = request.uri().path().to_owned();
    let mut response = crate::error::as_problem(next.run(request).instrument(span.clone()).await).await;
    let status = response.status();
    let elapsed = started.elapsed();
    let m = &app.metrics;
    m.http_requests_total.with_label_values(&[route.as_str(), method_label, status.as_str()]).inc();
    m.http_request_duration_seconds
        .with_label_values(&[route.as_str(), method_label, status.as_str()])
        .observe(elapsed.as_secs_f64());
    span.in_scope(|| {
        let ms = elapsed.as_secs_f64() * 1e3;
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), %path, ms, "request failed");
        } else if route.starts_with("/api/") {
            tracing::info!(status = status.as_u16(), %path, ms, "request");
        } else {
            tracing::debug!(status = status.as_u16(), %path, ms, "request");
        }
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    response.into_response()
}

//! `GET /api/v1/openapi.json`: the OpenAPI 3 description of the control plane, behind the
//! admin token like every `/api/v1` call.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::app::AppState;

/// The document, as shipped in `src/http/openapi.json` (tests/python/test_openapi.py checks it
/// against the routes and the live server).
const OPENAPI: &str = include_str!("openapi.json");

/// The route, relative to `/api/v1`.
pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

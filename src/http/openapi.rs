//! `GET /api/v1/openapi.json`: the OpenAPI 3 description of the control plane, behind the
//! admin token like every `/api/v1` call; and `GET /api/v1`, the control plane's index (its
//! routes, read from that description): what a person types first.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::app::AppState;

/// The document, as shipped in `src/http/openapi.json` (tests/python/test_openapi.py checks it
/// against the routes and the live server).
const OPENAPI: &str = include_str!("openapi.json");

/// The routes, relative to `/api/v1`: the description, and the index at `/api/v1` itself
/// (`/api/v1/` redirects there: `mod.rs`; a nested router does not see it).
pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi)).route("/", get(index))
}

/// `METHOD path: summary` of every operation of the description, in its order.
static ROUTES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap_or_default();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            if let Some(summary) = op.get("summary").and_then(Value::as_str) {
                routes.push(format!("{} {path}: {summary}", method.to_ascii_uppercase()));
            }
        }
    }
    routes
});

async fn index() -> Json<Value> {
    Json(json!({
        "service": "zarrgate",
        "version": env!("CARGO_PKG_VERSION"),
        "openapi": "/api/v1/openapi.json",
        "routes": *ROUTES,
        "data": "Zarr v3 stores are read at /{store}/ (zarr.json, chunk keys); a pinned version at /{store}@{version}/",
    }))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

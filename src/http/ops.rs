//! Operations: liveness, readiness and metrics.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::app::AppState;
use crate::error::ApiError;

/// The ops routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).route("/metrics", get(metrics))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    match tokio::time::timeout(Duration::from_secs(2), app.catalog.ping()).await {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready", "catalog": app.catalog.backend()}))),
        Ok(Err(e)) => Err(ApiError::Unavailable(e.to_string())),
        Err(_) => {
            Err(ApiError::Unavailable(format!("the {} catalog did not answer within 2 s", app.catalog.backend())))
        }
    }
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    app.reader.caches().report(&app.metrics);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render())
}

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

/// Ready when the catalog answers. While it is unreachable the server is degraded, not down:
/// it still serves the stores it has cached (`cache.unavailable_ttl_seconds`), so it answers
/// 200 `degraded` rather than taking itself out of a load balancer that has no better replica.
async fn readyz(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let backend = app.catalog.backend();
    match tokio::time::timeout(Duration::from_secs(2), app.catalog.ping()).await {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready", "catalog": backend}))),
        Ok(Err(e)) if e.is_unreachable() => Ok(degraded(&app, &e.to_string())),
        Ok(Err(e)) => Err(ApiError::Unavailable(e.to_string())),
        Err(_) => Ok(degraded(&app, &format!("the {backend} catalog did not answer within 2 s"))),
    }
}

/// The cause is logged, not shown: a driver's message may name hosts and users.
fn degraded(app: &AppState, cause: &str) -> Json<serde_json::Value> {
    tracing::warn!(%cause, "not ready: the catalog database is unreachable (degraded)");
    let seconds = app.catalog_guard.down_since().map_or(0, |at| at.elapsed().as_secs());
    Json(json!({
        "status": "degraded",
        "catalog": app.catalog.backend(),
        "detail": format!(
            "the catalog database is unreachable (the server log has the cause); stores read from it \
             within the last {} s are served from the caches, other requests answer 503",
            app.config.cache.unavailable_ttl_seconds
        ),
        "unreachable_seconds": seconds,
    }))
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    app.reader.caches().report(&app.metrics);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render())
}

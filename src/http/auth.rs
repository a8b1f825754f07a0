//! Bearer-token authentication of the control plane.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::error::ApiError;

/// Lets the request through if no token is configured or it carries a valid one.
pub async fn require_token(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if !app.auth_required() {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match token {
        Some(token) if app.token_matches(token) => next.run(request).await,
        _ => {
            tracing::warn!(path = %request.uri().path(), "control-plane request without a valid token");
            ApiError::Unauthorized.into_response()
        }
    }
}

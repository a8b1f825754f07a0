//! Bearer-token authentication of the control plane (and, while it has no tokens, a guard
//! against DNS rebinding), and of data-plane reads when read tokens are configured.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::error::ApiError;

/// Lets the request through if it carries a valid token, or if no token is configured and the
/// request was addressed to this machine.
pub async fn require_token(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if !app.auth_required() {
        return match addressed_by_name(&request) {
            Some(host) if !app.config.insecure => open_control_plane_refused(&host).into_response(),
            _ => next.run(request).await,
        };
    }
    match bearer(&request) {
        Some(token) if app.token_matches(token) => next.run(request).await,
        _ => {
            tracing::warn!(path = %request.uri().path(), "control-plane request without a valid token");
            ApiError::Unauthorized.into_response()
        }
    }
}

/// Data-plane reads when read tokens are configured: a read or admin token, or 401 (which every
/// Zarr client reports as an error, never as missing data).
pub async fn require_read_token(State(app): State<AppState>, request: Request, next: Next) -> Response {
    match bearer(&request) {
        Some(token) if app.read_token_matches(token) => next.run(request).await,
        _ => ApiError::ReadUnauthorized.into_response(),
    }
}

fn bearer(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// The host the request was addressed to, when it is a DNS name other than `localhost`.
///
/// With no admin token the control plane listens on loopback only, but a web page can still
/// reach it: a name the page's author controls, re-pointed at 127.0.0.1 (DNS rebinding), makes
/// the browser treat zarrgate as the page's own origin. Such requests carry that name in `Host`;
/// requests from local tools carry `localhost` or an address.
///
/// The name is the request's effective authority: the target URI's when it has one (HTTP/2's
/// `:authority`, an HTTP/1.1 absolute-form target, where `Host` must be ignored: RFC 9112
/// section 3.2.2), else `Host`.
fn addressed_by_name(request: &Request) -> Option<String> {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned))?;
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host.as_str(), |(name, _)| name),
    };
    let local = name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok();
    (!local).then_some(host)
}

fn open_control_plane_refused(host: &str) -> ApiError {
    tracing::warn!(%host, "control-plane request addressed by a DNS name while no admin token is configured; refused");
    ApiError::Forbidden(format!(
        "this control plane has no admin token, so it only answers requests addressed to localhost or an IP \
         address (this one was addressed to {host:?}, which could be a web page rebinding its name to this machine); \
         use http://127.0.0.1:<port>/api/v1/..., or configure ZARRGATE_ADMIN_TOKENS"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addressed(host: &str) -> Option<String> {
        let request =
            Request::builder().uri("/api/v1/stores").header(header::HOST, host).body(axum::body::Body::empty());
        addressed_by_name(&request.unwrap())
    }

    #[test]
    fn the_uri_authority_wins_over_host() {
        let request = |uri: &str, host: &str| {
            Request::builder().uri(uri).header(header::HOST, host).body(axum::body::Body::empty()).unwrap()
        };
        let named = request("http://evil.example.com/api/v1/stores", "127.0.0.1:8080");
        assert_eq!(addressed_by_name(&named).as_deref(), Some("evil.example.com"));
        let local = request("http://127.0.0.1:8080/api/v1/stores", "evil.example.com");
        assert_eq!(addressed_by_name(&local), None);
    }

    #[test]
    fn names_other_than_localhost_are_told_apart() {
        for local in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "10.0.0.5", "app.localhost:80"] {
            assert_eq!(addressed(local), None, "{local}");
        }
        for named in ["evil.example.com", "evil.example.com:8080", "zarrgate.internal"] {
            assert_eq!(addressed(named).as_deref(), Some(named));
        }
    }
}

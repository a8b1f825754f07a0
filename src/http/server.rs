//! The HTTP server: accepts connections (no Nagle), collapses `//` in paths, serves the router
//! until told to stop, then lets in-flight requests finish.

use std::future::Future;

use axum::extract::Request;
use axum::http::Uri;
use tokio::net::TcpListener;

use crate::app::AppState;

/// Serves `state` on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let router = super::router(state);
    let service = tower::ServiceBuilder::new().map_request(collapse_slashes).service(router);
    // No Nagle: a streamed chunk's body would otherwise wait for the client to acknowledge its
    // headers (a delayed ACK: 40 ms) before leaving.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    axum::serve(listener, axum::ServiceExt::<Request>::into_make_service(service))
        .with_graceful_shutdown(shutdown)
        .await
}

/// `//` in a path means `/` (obstore with a trailing-slash base URL sends `store//zarr.json`).
pub fn collapse_slashes(mut request: Request) -> Request {
    let path = request.uri().path();
    if !path.contains("//") {
        return request;
    }
    let mut collapsed = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && collapsed.ends_with('/')) {
            collapsed.push(c);
        }
    }
    let rebuilt = match request.uri().query() {
        Some(q) => format!("{collapsed}?{q}"),
        None => collapsed,
    };
    if let Ok(path_and_query) = rebuilt.parse() {
        let mut parts = request.uri().clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

//! The server: where connections are accepted, and where bytes enter and leave the socket.
//!
//! - `mod.rs` (here) accepts connections (no Nagle) up to `http.max_connections`, and on
//!   shutdown stops accepting and lets in-flight requests finish;
//! - `refusal.rs` answers a connection beyond the limit with 503 and closes it;
//! - `connection.rs` serves one connection over HTTP/1.1: its plain reads first, then hyper;
//! - `connection/watchdog.rs` closes a connection whose client is too slow (the header, idle and
//!   send timeouts of `[http]`) and drains it on shutdown;
//! - `connection/plain.rs` parses the plainest reads (a GET of a metadata document or an inline
//!   chunk, no Range, no condition) with httparse and writes their answers on the socket as
//!   bytes, until the first request of any other kind hands the connection to hyper.
//!
//! Every answer leaves through this folder: written by `plain.rs`, or by hyper on the
//! connection `connection.rs` serves. What an answer says is decided in `crate::http`: hyper
//! hands each request to its front (the bypass of the router, then the router), and `plain.rs`
//! asks it for a plain read's answer as bytes (`Reads::answer_wire`). Nothing in `crate::http`
//! imports this module.
//!
//! HTTP/1.1 only: no Zarr client speaks h2c (README, "HTTP"), and HTTP/2 would let one
//! connection hold many responses that its client never lets through, with nothing on the
//! socket to show it.

mod connection;
mod refusal;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::app::AppState;
use crate::config::HttpConfig;

/// Serves `state` on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = Arc::new(connection::Limits::from(&state.config.http));
    let connections = Arc::new(Semaphore::new(connection_slots(&state.config.http)));
    let refusals = Arc::new(Semaphore::new(refusal::AT_ONCE));
    let meters = Arc::new(connection::Meters::new(&state.metrics));
    let front = Arc::new(crate::http::front(state));
    // Every connection task holds a receiver: the sender learns it is closed when the last ends.
    let (stop, stopping) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // No Nagle: a streamed chunk's body would otherwise wait for the client to acknowledge
        // its headers (a delayed ACK: 40 ms) before leaving.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        match connections.clone().try_acquire_owned() {
            Ok(slot) => {
                let served = connection::serve(stream, front.clone(), limits.clone(), stopping.clone(), meters.clone());
                tokio::spawn(async move {
                    served.await;
                    drop(slot);
                });
            }
            Err(_) => match refusals.clone().try_acquire_owned() {
                Ok(permit) => {
                    meters.closed(connection::Closed::Refused);
                    tokio::spawn(async move {
                        refusal::refuse(stream).await;
                        drop(permit);
                    });
                }
                // As many refusals under way as allowed: this one is closed without a word.
                Err(_) => {
                    meters.closed(connection::Closed::Dropped);
                    drop(stream);
                }
            },
        }
    }
    drop(listener);
    drop(stopping);
    let _ = stop.send(());
    stop.closed().await;
    Ok(())
}

fn connection_slots(http: &HttpConfig) -> usize {
    usize::try_from(http.max_connections).unwrap_or(Semaphore::MAX_PERMITS).min(Semaphore::MAX_PERMITS)
}

/// A failed accept: a connection that went away before it was accepted is nothing; anything else
/// (out of file descriptors) pauses accepting for a moment, as axum and hyper do.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; pausing accepts for a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

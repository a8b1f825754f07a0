//! The floor under zarrgate's small answers (bench/README.md, "Stop 19"): zarrgate's own stack
//! (tokio's multi-thread runtime, hyper's HTTP/1.1 connection, axum's body type, mimalloc,
//! `TCP_NODELAY`) answering every request with the bytes of one file and a fixed set of headers,
//! and doing nothing else: no catalog, caches, request ids, watchdog, logs or metrics.
//! `bench/throughput.py` measures it beside zarrgate and nginx on `zarr.json` (`MINIMAL=1`), which
//! tells what zarrgate's own work costs from what any server on this stack pays.
//!
//!   cargo build --release --example minimal_server
//!   target/release/examples/minimal_server 127.0.0.1:8090 /tmp/zarrgate-bench/inline1k/zarr.json zarrgate
//!
//! The third argument picks the headers: `zarrgate` (the ten lines zarrgate sends with a
//! `zarr.json`, with fixed values) or `nginx` (the five nginx sends). hyper adds `content-length`
//! and `date` to either.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, Response, header};
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn headers(set: &str) -> Vec<(HeaderName, HeaderValue)> {
    let s = HeaderValue::from_static;
    let last_modified = s("Thu, 26 Nov 2026 20:13:06 GMT");
    match set {
        "nginx" => vec![
            (header::SERVER, s("nginx/1.22.1")),
            (header::CONTENT_TYPE, s("application/octet-stream")),
            (header::LAST_MODIFIED, last_modified),
            (header::ETAG, s("\"6b0892da-1df\"")),
            (header::ACCEPT_RANGES, s("bytes")),
        ],
        _ => vec![
            (header::CONTENT_TYPE, s("application/json")),
            (header::ACCEPT_RANGES, s("bytes")),
            (header::CACHE_CONTROL, s("public, max-age=60")),
            (header::LAST_MODIFIED, last_modified),
            (header::ETAG, s("\"md5c2549af0508c3c079d6a13a14e6e1a-v1\"")),
            (header::VARY, s("accept-encoding")),
            (HeaderName::from_static("zarrgate-version"), s("1")),
            (
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                s("content-range,content-length,etag,accept-ranges,last-modified,zarrgate-version"),
            ),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, s("*")),
            (HeaderName::from_static("x-request-id"), s("58c19f2e191d473e-3")),
        ],
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, file, rest @ ..] = args.as_slice() else {
        eprintln!("usage: minimal_server ADDR FILE [zarrgate|nginx]");
        std::process::exit(2);
    };
    let body = Bytes::from(std::fs::read(file)?);
    let fixed = Arc::new(headers(rest.first().map_or("zarrgate", String::as_str)));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (body, fixed) = (body.clone(), fixed.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_: Request<hyper::body::Incoming>| {
                let mut response = Response::new(Body::from(body.clone()));
                let h = response.headers_mut();
                h.reserve(fixed.len() + 2);
                for (name, value) in fixed.iter() {
                    h.insert(name.clone(), value.clone());
                }
                std::future::ready(Ok::<_, Infallible>(response))
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

//! The `zarrgate` binary on SIGTERM: requests in flight finish whole, new connections are
//! refused, the process exits once they are done (well within `http.drain_seconds`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An HTTP source that waits `delay` before answering each ranged GET with bytes of `pattern`.
async fn slow_source(delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 2048];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(delay).await;
                let body: Vec<u8> = (0..64u8).collect();
                let head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-63/64\r\nContent-Length: 64\r\nConnection: close\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    base
}

/// The binary with `http.drain_seconds = drain`, serving a store `s` whose one chunk comes from a
/// source that waits `delay` before answering.
async fn serving(drain: u64, delay: Duration) -> (std::process::Child, String, reqwest::Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_zarrgate"))
        .env("ZARRGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("DATABASE_URL", format!("sqlite://{}/catalog.db", dir.path().display()))
        .env("ZARRGATE_HTTP_DRAIN_SECONDS", drain.to_string())
        .env_remove("ZARRGATE_ADMIN_TOKENS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let started = Instant::now();
    while client.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let source = slow_source(delay).await;
    let put = |path: String, body: serde_json::Value| client.put(format!("{base}{path}")).json(&body).send();
    assert!(put("/api/v1/object-stores/slow".into(), json!({"url": source})).await.unwrap().status().is_success());
    let doc = json!({"nodes": {"x": {
        "zarr_format": 3, "node_type": "array", "shape": [64], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
        "manifest": {"0": {"path": format!("{source}data.bin"), "offset": 0, "length": 64}}}}});
    assert!(put("/api/v1/stores/s?verify=false".into(), doc).await.unwrap().status().is_success());
    (child, base, client, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_in_flight_finish() {
    let (mut child, base, client, _dir) = serving(20, Duration::from_millis(1500)).await;
    let in_flight = tokio::spawn(client.get(format!("{base}/s/x/c/0")).send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signalled = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());

    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.bytes().await.unwrap().to_vec(), (0..64u8).collect::<Vec<_>>(), "the whole chunk");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reqwest::Client::new().get(format!("{base}/healthz")).send().await.is_err(), "no new connections");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(10), "still running 10 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    assert!(signalled.elapsed() < Duration::from_secs(5), "exited when idle, not at the drain deadline");
}

/// The grace period is a bound: a request still in flight when `http.drain_seconds` has passed
/// is cut off (its client gets an error, never a complete answer) and the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_waiting_after_the_grace_period() {
    let (mut child, base, client, _dir) = serving(1, Duration::from_secs(30)).await;
    let in_flight = tokio::spawn(client.get(format!("{base}/s/x/c/0")).send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status}");
    let answer = in_flight.await.unwrap();
    assert!(answer.is_err(), "a request cut off at the deadline answered: {answer:?}");
}

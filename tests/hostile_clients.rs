//! Clients that are slow or greedy on purpose: slowloris heads, idle keep-alive connections,
//! more connections than allowed, readers that never read, stalled uploads, huge heads, h2c,
//! and names smuggled into the request target. Each test asserts what another user of the
//! server would notice (they are still served), or counts what the server closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Backend, TestServer, f32_array};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(server: &TestServer) -> SocketAddr {
    server.url.trim_start_matches("http://").parse().unwrap()
}

/// Fails clearly when this process may not open `n` more descriptors (each test connection
/// costs two: the client's end and the server's).
fn need_descriptors(n: u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let soft: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap_or(u64::MAX);
    assert!(soft >= n + 256, "this test needs about {n} file descriptors; raise `ulimit -n` (now {soft})");
}

/// One response read off a raw connection: status, head and body (by Content-Length).
async fn read_response(stream: &mut TcpStream) -> Option<(u16, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((status, head, body))
}

/// Reads until the server closes the connection (true) or `within` passes (false).
async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    let mut sink = vec![0u8; 64 << 10];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_and_others_are_served() {
    const SLOW: usize = 500;
    need_descriptors(2 * SLOW as u64);
    let server = TestServer::start_with(Backend::Sqlite, |c| c.http.header_read_timeout_seconds = 2).await;
    let at = addr(&server);
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        let mut stream = TcpStream::connect(at).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.unwrap();
        slow.push(tokio::spawn(async move {
            // A byte a second until the server hangs up (or 20 s pass: not closed).
            let mut answer = Vec::new();
            for _ in 0..20 {
                let mut buf = [0u8; 1024];
                match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return (true, answer),
                    Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                    Err(_) => {
                        if stream.write_all(b"a").await.is_err() {
                            return (true, answer);
                        }
                    }
                }
            }
            (false, answer)
        }));
    }
    // Meanwhile, others are served, on fresh connections and on a kept-alive one.
    let fresh = || reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut served = 0;
    for _ in 0..10 {
        served += usize::from(fresh().get(format!("{}/healthz", server.url)).send().await.unwrap().status() == 200);
        served += usize::from(server.get("/healthz", &[]).await.status() == 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served, 20, "requests served during the attack");
    let mut closed = 0;
    for task in slow {
        let (was_closed, answer) = task.await.unwrap();
        assert!(answer.is_empty(), "a slow head got an answer: {:?}", String::from_utf8_lossy(&answer));
        closed += usize::from(was_closed);
    }
    assert_eq!(closed, SLOW, "slow connections closed by the server");
    assert_eq!(server.get("/healthz", &[]).await.status(), 200);
    assert_eq!(closed_for(&server, "header_read_timeout").await, SLOW as f64, "counted by reason");
}

/// `zarrgate_http_connections_closed_total` for one reason.
async fn closed_for(server: &TestServer, reason: &str) -> f64 {
    server.metric(&format!("zarrgate_http_connections_closed_total{{reason=\"{reason}\"}}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.http.header_read_timeout_seconds = 1;
        c.http.idle_timeout_seconds = 3;
    })
    .await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut kept = TcpStream::connect(addr(&server)).await.unwrap();
    kept.write_all(request).await.unwrap();
    assert_eq!(read_response(&mut kept).await.unwrap().0, 200);
    // Idle for longer than the header read timeout: still open, and it serves a second request.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kept.write_all(request).await.unwrap();
    assert_eq!(read_response(&mut kept).await.map(|r| r.0), Some(200), "kept alive past the header timeout");
    assert!(closed_by_server(&mut kept, Duration::from_secs(15)).await, "an idle connection was never closed");
    // A connection that never sends a request is closed as a slow head.
    let mut silent = TcpStream::connect(addr(&server)).await.unwrap();
    assert!(closed_by_server(&mut silent, Duration::from_secs(15)).await, "a silent connection was never closed");
    assert!(
        closed_for(&server, "idle_timeout").await >= 1.0,
        "counted (the test client's own idle connection may be too)"
    );
    assert_eq!(closed_for(&server, "header_read_timeout").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_answered_503_until_one_leaves() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.http.max_connections = 8).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        assert_eq!(read_response(&mut stream).await.unwrap().0, 200);
        held.push(stream);
    }
    let mut refused = 0;
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let (status, head, body) = read_response(&mut stream).await.expect("an answer, not a hang or a reset");
        assert_eq!(status, 503);
        assert!(head.contains("retry-after: 1") && head.contains("content-type: application/problem+json"), "{head}");
        let problem: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["type"], "urn:zarrgate:problem:too-many-connections");
        assert!(closed_by_server(&mut stream, Duration::from_secs(5)).await, "a refused connection is closed");
        refused += 1;
    }
    assert_eq!(refused, 3);
    drop(held.pop());
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let (mut status, mut refused_again) = (StatusCode::SERVICE_UNAVAILABLE, 0.0);
    for _ in 0..50 {
        status = client.get(format!("{}/healthz", server.url)).send().await.unwrap().status();
        if status == StatusCode::OK {
            break;
        }
        refused_again += 1.0;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, StatusCode::OK, "served again once a connection left");
    // The client above closed its connection after that answer, but the server may not have
    // seen it leave yet: a read of /metrics now can itself be refused (and counted). Free the
    // held connections, then read the metrics, counting any refusal of that read too.
    drop(held);
    let mut refused_total = None;
    for _ in 0..50 {
        let answer = client.get(format!("{}/metrics", server.url)).send().await.unwrap();
        if answer.status() == StatusCode::OK {
            let text = answer.text().await.unwrap();
            refused_total =
                Some(common::metric_in(&text, "zarrgate_http_connections_closed_total{reason=\"refused\"}"));
            break;
        }
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        refused_again += 1.0;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(refused_total, Some(3.0 + refused_again), "every refusal counted");
}

/// Readers that ask for a 32 MiB chunk of a local file and never read: each holds at most the
/// per-connection buffer the configuration documents (about 2 MiB), the server keeps serving
/// others, and the send timeout closes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_never_read_hold_bounded_memory() {
    const STALLED: usize = 256;
    const PER_CONNECTION: u64 = 2 << 20;
    need_descriptors(2 * STALLED as u64);
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.http.send_timeout_seconds = 4;
        c.http.max_connections = 300;
    })
    .await;
    let len: u64 = 32 << 20;
    let values = len / 4;
    server.local_store().await;
    let path = server.write("big.bin", &vec![7u8; len as usize]);
    let doc = json!({"nodes": {"x": f32_array(&[values], &[values],
        json!({"manifest": {"0": {"path": path, "offset": 0, "length": len}}}))}});
    let (status, body) = server.put("/api/v1/stores/big", &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let before = common::rss();
    let started = tokio::time::Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
        stream.write_all(b"GET /big/x/c/0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        stalled.push(stream);
    }
    let mut peak = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(common::rss());
    }
    let grown = peak.saturating_sub(before);
    eprintln!("{STALLED} stalled readers of a 32 MiB chunk: RSS {before} -> {peak} (+{grown} bytes)");
    assert!(grown < STALLED as u64 * PER_CONNECTION, "RSS grew by {grown} bytes");
    // Others are still served whole meanwhile.
    assert_eq!(server.bytes("/big/x/c/0").await.len() as u64, len);
    // Reading now would let the stalled answers through: first let the watchdog close them all.
    // Waited for by its count, not for a fixed time: on a loaded machine an answer may start
    // writing (and so start its send timeout) seconds after its request.
    let deadline = started + Duration::from_secs(60);
    while closed_for(&server, "send_timeout").await < STALLED as f64 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(started.elapsed() >= Duration::from_secs(4), "none closed before the send timeout");
    let mut closed = 0;
    for mut stream in stalled {
        let mut received = 0u64;
        let mut sink = vec![0u8; 1 << 20];
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => received += n as u64,
                }
            }
        })
        .await;
        closed += usize::from(ended.is_ok() && received < len);
    }
    assert_eq!(closed, STALLED, "stalled readers disconnected before their answer was whole");
    assert_eq!(closed_for(&server, "send_timeout").await, STALLED as f64, "closed by the watchdog, counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_fails_after_the_body_timeout() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.http.request_body_timeout_seconds = 1).await;
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    let head = "PUT /api/v1/stores/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"nodes": {"#).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(15), read_response(&mut stream)).await;
    let status = answer.expect("the stalled upload was never ended").map(|r| r.0);
    assert!(status.is_none_or(|s| (400..500).contains(&s)), "{status:?}");
    assert_eq!(server.get("/api/v1/stores/slow", &[]).await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_larger_than_max_header_bytes_is_refused() {
    let server = TestServer::start(Backend::Sqlite).await;
    let tags: Vec<String> = (0..20_000).map(|i| format!("\"v{i:016x}\"")).collect();
    let r = server.get("/healthz", &[("if-none-match", &tags.join(", "))]).await;
    assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(server.get("/healthz", &[]).await.status(), StatusCode::OK);
    // hyper closes the connection as it answers 431, and the count follows a moment later.
    for _ in 0..50 {
        if closed_for(&server, "header_too_large").await == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(closed_for(&server, "header_too_large").await, 1.0);
    assert!(server.metric("zarrgate_http_connections_open").await >= 1.0, "this very request's connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_is_not_served() {
    let server = TestServer::start(Backend::Sqlite).await;
    // Prior knowledge: the preface and an empty SETTINGS frame get no HTTP/2 answer.
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 4"), "{:?}", String::from_utf8_lossy(&answer));
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    assert!(h2.get(format!("{}/healthz", server.url)).send().await.is_err(), "an h2c request was answered");
    // An upgrade request is answered in HTTP/1.1.
    let r = server.client.get(format!("{}/healthz", server.url)).header("upgrade", "h2c").send().await.unwrap();
    assert_eq!((r.status(), r.version()), (StatusCode::OK, reqwest::Version::HTTP_11));
}

/// With no admin token, the control plane answers requests addressed to an address, and refuses
/// those addressed to a name, whether the name is in Host or in the request target (which wins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loopback_guard_reads_the_request_target_before_host() {
    let server = TestServer::start(Backend::Sqlite).await;
    let at = addr(&server);
    let ask = |target: String, host: String| async move {
        let mut stream = TcpStream::connect(at).await.unwrap();
        let request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        read_response(&mut stream).await.unwrap().0
    };
    assert_eq!(ask("/api/v1/stores".into(), at.to_string()).await, 200);
    assert_eq!(ask("/api/v1/stores".into(), "evil.example.com".into()).await, 403);
    assert_eq!(ask("http://evil.example.com/api/v1/stores".into(), at.to_string()).await, 403);
    assert_eq!(ask(format!("http://{at}/api/v1/stores"), "evil.example.com".into()).await, 200);
}

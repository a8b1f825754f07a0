//! Upstream faults against a fault-injecting HTTP upstream (tests/common/faults.rs), read as a
//! client reads them, byte by byte off the socket: a body cut short is resumed where it stopped
//! (a ranged GET conditional on the ETag), a chunk up to `sources.buffer_chunk_bytes` that
//! cannot be read whole is a clean 502/504 naming the object store and the cause, a larger one
//! is a 200 that breaks off (never one that ends cleanly with fewer bytes than its
//! Content-Length), and each object store's timeouts hold. tests/sources.rs has the faults that
//! need no state (wrong ranges, stalls, refusals, redirects).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::faults::{FaultServer, RawAnswer, raw_get};
use common::{Backend, TestServer, f32_array};
use serde_json::{Value, json};

/// Bytes per chunk of the test array (1024 float32).
const CHUNK: usize = 4096;
/// Where every chunk starts in the object.
const OFFSET: usize = 1000;

/// Pseudo-random bytes (xorshift): a range read from the wrong offset cannot look right.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Registers the object store `faults` (with `options`) and a store `name` of one array whose
/// chunk `i` is the chunk of `modes[i]`; `etag` records `"v1"` as every source's ETag.
async fn store(server: &TestServer, upstream: &FaultServer, name: &str, modes: &[&str], etag: bool) {
    let mut manifest = serde_json::Map::new();
    let mut sources = serde_json::Map::new();
    for (i, mode) in modes.iter().enumerate() {
        let url = upstream.url(mode);
        manifest.insert(i.to_string(), json!({"path": url, "offset": OFFSET, "length": CHUNK}));
        if etag {
            sources.insert(url, json!({"etag": "\"v1\""}));
        }
    }
    let n = modes.len() as u64 * 1024;
    let doc = json!({"nodes": {"x": f32_array(&[n], &[1024], json!({"manifest": manifest}))}, "sources": sources});
    let (status, body) = server.put(&format!("/api/v1/stores/{name}?verify=false"), &doc).await;
    assert_eq!(status, 201, "{body}");
}

/// Registers `upstream` as object store `name` with `options`, read-ahead off unless they say
/// otherwise: these tests count the ranges one read asks for (tests/readahead.rs has reads that
/// share and widen them).
async fn object_store(server: &TestServer, name: &str, upstream: &FaultServer, mut options: Value) {
    if options.get("readahead").is_none() {
        options["readahead"] = json!("off");
    }
    let (status, body) =
        server.put(&format!("/api/v1/object-stores/{name}"), &json!({"url": upstream.base, "options": options})).await;
    assert_eq!(status, 201, "{body}");
}

/// Asserts a complete problem+json answer of `status` and `kind` whose detail has every one of
/// `words`.
fn assert_problem(got: &RawAnswer, status: u16, kind: &str, words: &[&str]) {
    let text = String::from_utf8_lossy(&got.body);
    assert_eq!(got.status, status, "{text}");
    assert!(got.complete(), "a problem that broke off: {got:?}");
    assert_eq!(got.header("content-type"), Some("application/problem+json"), "{text}");
    let problem: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(problem["type"], format!("urn:zarrgate:problem:{kind}"), "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    for word in words {
        assert!(detail.contains(word), "the detail should say {word:?}: {detail}");
    }
}

/// A body cut short (reset, or fewer bytes than its Content-Length) and an upstream that failed
/// once are read again, and the client gets every byte: the resumed read asks for the rest
/// only, `If-Match` the ETag, and a source without ETag is resumed too (checked by its size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_bodies_are_resumed_where_they_stopped() {
    let server = TestServer::start(Backend::Sqlite).await;
    let upstream = FaultServer::start(pattern(16 << 10)).await;
    object_store(&server, "faults", &upstream, json!({})).await;
    let modes = ["reset-once", "short-once", "reset-once-noetag", "flaky-503"];
    store(&server, &upstream, "resumed", &modes[..2], true).await;
    store(&server, &upstream, "unchecked", &modes[2..], false).await;
    let want = &upstream.file[OFFSET..OFFSET + CHUNK];
    for (path, mode) in [
        ("/resumed/x/c/0", "reset-once"),
        ("/resumed/x/c/1", "short-once"),
        ("/unchecked/x/c/0", "reset-once-noetag"),
        ("/unchecked/x/c/1", "flaky-503"),
    ] {
        let got = raw_get(&server.url, path, &[]).await;
        assert_eq!(got.status, 200, "{mode}: {}", String::from_utf8_lossy(&got.body));
        assert!(got.complete() && !got.reset, "{mode}: {got:?}");
        assert_eq!(got.body, want, "{mode}: the bytes of the chunk");
    }
    // The second request asked for what was missing, on condition that the object is the same.
    let seen = upstream.seen("reset-once");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].range.as_deref(), Some(&*format!("bytes={OFFSET}-{}", OFFSET + CHUNK - 1)));
    assert_eq!(seen[1].range.as_deref(), Some(&*format!("bytes={}-{}", OFFSET + CHUNK / 2, OFFSET + CHUNK - 1)));
    assert_eq!(seen[1].if_match.as_deref(), Some("\"v1\""));
    let seen = upstream.seen("reset-once-noetag");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].range.as_deref(), Some(&*format!("bytes={}-{}", OFFSET + CHUNK / 2, OFFSET + CHUNK - 1)));
    assert!(server.metric_sum("zarrgate_upstream_retries_total", &[("object_store", "faults")]).await >= 1.0);
    // Every request sent is counted, object_store's own retry of the 503 included.
    assert_eq!(upstream.seen("flaky-503").len(), 2);
    let sent: usize = modes.iter().map(|m| upstream.seen(m).len()).sum();
    let counted = server.metric_sum("zarrgate_upstream_http_requests_total", &[("object_store", "faults")]).await;
    assert_eq!(counted, sent as f64, "HTTP requests sent to the upstream");

    // A Range of the chunk, cut short upstream the first time, is whole too.
    store(&server, &upstream, "ranged", &["reset-once"], true).await;
    let got = raw_get(&server.url, "/ranged/x/c/0", &[("Range", "bytes=100-3099")]).await;
    assert_eq!(got.status, 206);
    assert!(got.complete(), "{got:?}");
    assert_eq!(got.body, &upstream.file[OFFSET + 100..OFFSET + 3100]);
}

/// A chunk up to `sources.buffer_chunk_bytes` that cannot be read whole never starts a 200: the
/// client gets a complete problem+json 502/504 naming the object store and what went wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_chunks_fail_with_a_clean_5xx() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.timeout_seconds = 1).await;
    let upstream = FaultServer::start(pattern(16 << 10)).await;
    object_store(&server, "faults", &upstream, json!({})).await;
    let modes = ["reset", "short", "status-503", "status-500", "ignore-range", "etag-changes", "slow-head"];
    store(&server, &upstream, "broken", &modes, false).await;
    let get = |i: usize| {
        let url = server.url.clone();
        async move { raw_get(&url, &format!("/broken/x/c/{i}"), &[]).await }
    };

    let got = get(0).await;
    assert_problem(&got, 502, "source-interrupted", &["object store faults", "reset/data.bin", "connection was reset"]);
    let got = get(1).await;
    assert_problem(
        &got,
        502,
        "source-interrupted",
        &["object store faults", "short/data.bin", "before the body was complete"],
    );
    // Each resumed read asked for the rest only, from where the last one stopped, and after
    // `sources.retries` (1 here) resumed reads it gave up.
    let seen = upstream.seen("short");
    assert!((2..=4).contains(&seen.len()), "{seen:?}");
    let mut from = OFFSET;
    for s in &seen {
        assert_eq!(s.range.as_deref(), Some(&*format!("bytes={from}-{}", OFFSET + CHUNK - 1)), "{seen:?}");
        from += (OFFSET + CHUNK - from) / 2;
    }
    assert_problem(&get(2).await, 502, "source-error", &["object store faults", "status-503/data.bin"]);
    assert_problem(&get(3).await, 502, "source-error", &["object store faults", "status-500/data.bin"]);
    assert_problem(&get(4).await, 502, "source-error", &["object store faults", "ignore-range/data.bin"]);
    // Rewritten while being read: the resumed read is refused (412), never the new bytes.
    assert_problem(&get(5).await, 502, "source-modified", &["etag-changes/data.bin", "changed since registration"]);
    assert!(upstream.seen("etag-changes")[1..].iter().any(|s| s.if_match.as_deref() == Some("\"v1\"")));
    let started = Instant::now();
    assert_problem(&get(6).await, 504, "source-timeout", &["object store faults", "slow-head/data.bin"]);
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());

    for (outcome, n) in [("interrupted", 2.0), ("modified", 1.0), ("timeout", 1.0), ("ok", 0.0)] {
        let labels = [("object_store", "faults"), ("outcome", outcome)];
        assert_eq!(server.metric_sum("zarrgate_upstream_requests_total", &labels).await, n, "{outcome}");
    }
}

/// A chunk larger than `sources.buffer_chunk_bytes` streams: cut short once, it is resumed and
/// whole; cut short every time, the 200 breaks off before its Content-Length, with the right
/// bytes up to there, which no HTTP client takes for a complete answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_chunks_resume_or_break_off() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.buffer_chunk_bytes = 1024).await;
    let upstream = FaultServer::start(pattern(16 << 10)).await;
    object_store(&server, "faults", &upstream, json!({})).await;
    store(&server, &upstream, "large", &["reset-once", "reset"], true).await;
    let want = &upstream.file[OFFSET..OFFSET + CHUNK];

    let got = raw_get(&server.url, "/large/x/c/0", &[]).await;
    assert_eq!(got.status, 200);
    assert!(got.complete(), "{got:?}");
    assert_eq!(got.body, want);

    let got = raw_get(&server.url, "/large/x/c/1", &[]).await;
    assert_eq!(got.status, 200, "the head was sent before the body failed");
    assert_eq!(got.content_length(), Some(CHUNK));
    assert!(got.body.len() < CHUNK, "a complete body from a source that always breaks off: {got:?}");
    assert_eq!(got.body, &want[..got.body.len()], "the bytes before the break are the chunk's");
    // A client library says so too.
    let r = server.get("/large/x/c/1", &[]).await;
    assert!(r.bytes().await.is_err(), "reqwest read a body that broke off as complete");
    let aborted =
        server.metric_sum("zarrgate_upstream_requests_total", &[("object_store", "faults"), ("outcome", "aborted")]);
    assert_eq!(aborted.await, 2.0);
}

/// Each object store has its own timeouts: `first_byte_timeout` for the response head,
/// `timeout` for the whole request (body included); without them a slow but steady body is
/// served whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_per_object_store() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.timeout_seconds = 10).await;
    let upstream = FaultServer::start(pattern(16 << 10)).await;
    object_store(&server, "impatient", &upstream, json!({"first_byte_timeout": "500ms", "timeout": "1s"})).await;
    store(&server, &upstream, "slow", &["slow-head", "slow-body"], false).await;

    let started = Instant::now();
    let got = raw_get(&server.url, "/slow/x/c/0", &[]).await;
    assert_problem(&got, 504, "source-timeout", &["object store impatient", "slow-head/data.bin"]);
    assert!(started.elapsed() < Duration::from_secs(2), "first byte: {:?}", started.elapsed());
    let got = raw_get(&server.url, "/slow/x/c/1", &[]).await;
    assert_problem(&got, 504, "source-timeout", &["object store impatient", "slow-body/data.bin"]);

    // The options are shown back, and a bad duration is refused naming the option.
    let shown: Value = server.get("/api/v1/object-stores/impatient", &[]).await.json().await.unwrap();
    assert_eq!(shown["options"]["first_byte_timeout"], "500ms", "{shown}");
    let (status, body) = server
        .put("/api/v1/object-stores/bad", &json!({"url": upstream.base, "options": {"first_byte_timeout": "soon"}}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("first_byte_timeout"), "{body}");
}

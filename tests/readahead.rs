//! Single-flight, coalescing and read-ahead against a real HTTP upstream that counts requests
//! (tests/common/faults.rs): a sequential scan costs a few upstream GETs, a miss storm one per
//! block, an upstream error reaches every waiter as a 5xx and is not kept, and a source
//! rewritten during a read-ahead is `source-modified`, never a mix of two versions, until the
//! store is registered again with the new version; a block cut short is resumed where it
//! stopped. Every 200 carries the source's bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::{FaultServer, raw_get};
use common::{Backend, TestServer, f32_array};
use serde_json::{Value, json};
use zarrs::array::Array;
use zarrs_object_store::AsyncObjectStore;
use zarrs_object_store::object_store::http::HttpBuilder;
use zarrs_object_store::object_store::{ClientOptions, RetryConfig};

/// Elements per chunk (16 KiB of float32).
const ELEMENTS: u64 = 4096;
/// Bytes per chunk.
const CHUNK: u64 = ELEMENTS * 4;
/// Chunks of the test array, one after another in the object: 1 MiB, 16 blocks of 64 KiB.
const CHUNKS: u64 = 64;

/// Float32 values that are all different, as little-endian bytes.
fn values(n: u64) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect()
}

async fn object_store(server: &TestServer, upstream: &FaultServer, options: Value) {
    let body = json!({"url": upstream.base, "options": options});
    let (status, body) = server.put("/api/v1/object-stores/faults", &body).await;
    assert!(status.is_success(), "{body}");
}

/// Registers store `name`: one array whose chunk `i` is at byte `i * stride` of `mode`'s
/// object, recorded with ETag `etag`.
async fn store(server: &TestServer, upstream: &FaultServer, name: &str, mode: &str, stride: u64, etag: &str) {
    let url = upstream.url(mode);
    let manifest: serde_json::Map<String, Value> =
        (0..CHUNKS).map(|i| (i.to_string(), json!({"path": url, "offset": i * stride, "length": CHUNK}))).collect();
    let node = f32_array(&[CHUNKS * ELEMENTS], &[ELEMENTS], json!({"manifest": manifest}));
    let doc = json!({"nodes": {"x": node}, "sources": {url.clone(): {"etag": etag}}});
    let (status, body) = server.put(&format!("/api/v1/stores/{name}?verify=false"), &doc).await;
    assert!(status.is_success(), "{body}");
}

/// The bytes of chunk `i` in `file` at `stride`.
fn chunk(file: &[u8], i: u64, stride: u64) -> &[u8] {
    &file[(i * stride) as usize..(i * stride + CHUNK) as usize]
}

/// The sum of the samples of metric `name` for object store `faults`.
async fn metric(server: &TestServer, name: &str) -> f64 {
    server.metric_sum(name, &[("object_store", "faults")]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_scan_costs_a_few_upstream_requests() {
    let server = TestServer::start(Backend::Sqlite).await;
    let upstream = FaultServer::start(values(CHUNKS * ELEMENTS)).await;
    object_store(&server, &upstream, json!({})).await;
    store(&server, &upstream, "scan", "ok", CHUNK, "\"v1\"").await;
    for i in 0..CHUNKS {
        let got = server.bytes(&format!("/scan/x/c/{i}")).await;
        assert_eq!(got, chunk(&upstream.file, i, CHUNK), "chunk {i}");
    }
    // 16 KiB chunks, 64 KiB blocks, read-ahead doubling: blocks 0, 1-3, 4-12, 13-15.
    let seen = upstream.seen("ok");
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|s| s.if_match.as_deref() == Some("\"v1\"")), "{seen:?}");
    assert_eq!(seen[1].range.as_deref(), Some("bytes=65536-262143"), "{seen:?}");
    assert_eq!(metric(&server, "zarrgate_upstream_served_bytes_total").await, (CHUNKS * CHUNK) as f64);
    assert_eq!(metric(&server, "zarrgate_upstream_bytes_total").await, (CHUNKS * CHUNK) as f64);
    assert_eq!(metric(&server, "zarrgate_readahead_hits_total").await, (CHUNKS - 4) as f64);

    // zarrs reading the whole array through the gateway gets every value (from the cache).
    let http = HttpBuilder::new()
        .with_url(format!("{}/scan/", server.url))
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .with_retry(RetryConfig { max_retries: 0, ..Default::default() })
        .build()
        .unwrap();
    let array = Array::async_open(Arc::new(AsyncObjectStore::new(http)), "/x").await.unwrap();
    let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    let want: Vec<f32> = (0..CHUNKS * ELEMENTS).map(|i| i as f32 * 0.5 - 3.0).collect();
    assert!(all == want, "zarrs read other values");
    assert_eq!(upstream.seen("ok").len(), 4);

    // Read-ahead off: one upstream request per chunk, of exactly its bytes.
    object_store(&server, &upstream, json!({"readahead": "off"})).await;
    store(&server, &upstream, "plain", "noetag", CHUNK, "\"v1\"").await;
    for i in 0..4 {
        assert_eq!(server.bytes(&format!("/plain/x/c/{i}")).await, chunk(&upstream.file, i, CHUNK));
    }
    let seen = upstream.seen("noetag");
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[3].range.as_deref(), Some(&*format!("bytes={}-{}", 3 * CHUNK, 4 * CHUNK - 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_storm_makes_one_upstream_request_per_block() {
    let server = TestServer::start(Backend::Sqlite).await;
    // Chunks 256 KiB apart: each in a block of its own, with no neighbour read before it.
    let stride = 256 << 10;
    let upstream = FaultServer::start(values(CHUNKS * stride / 4)).await;
    object_store(&server, &upstream, json!({})).await;
    store(&server, &upstream, "storm", "late-ok", stride, "\"v1\"").await;
    let mut clients = Vec::new();
    for client in 0..64u64 {
        let url = server.url.clone();
        clients.push(tokio::spawn(async move {
            let i = client % 8;
            (i, raw_get(&url, &format!("/storm/x/c/{i}"), &[]).await)
        }));
    }
    for client in clients {
        let (i, got) = client.await.unwrap();
        assert_eq!(got.status, 200, "chunk {i}: {}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.body, chunk(&upstream.file, i, stride), "chunk {i}");
    }
    let seen = upstream.seen("late-ok");
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert!(metric(&server, "zarrgate_upstream_joins_total").await >= 48.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_reaches_every_waiter_and_is_not_kept() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.retries = 0).await;
    let upstream = FaultServer::start(values(CHUNKS * ELEMENTS)).await;
    object_store(&server, &upstream, json!({})).await;
    store(&server, &upstream, "failing", "late-status-500", CHUNK, "\"v1\"").await;
    let mut clients = Vec::new();
    for _ in 0..16 {
        let url = server.url.clone();
        clients.push(tokio::spawn(async move { raw_get(&url, "/failing/x/c/1", &[]).await }));
    }
    // A reader that leaves does not cancel the others' request.
    let leaver = {
        let url = server.url.clone();
        tokio::spawn(async move { raw_get(&url, "/failing/x/c/2", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    leaver.abort();
    for client in clients {
        let got = client.await.unwrap();
        assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
        assert!(got.complete(), "{got:?}");
        let problem: Value = serde_json::from_slice(&got.body).unwrap();
        assert_eq!(problem["type"], "urn:zarrgate:problem:source-error", "{problem}");
    }
    assert_eq!(upstream.seen("late-status-500").len(), 1);
    // The error is not kept: the next read asks again.
    assert_eq!(raw_get(&server.url, "/failing/x/c/0", &[]).await.status, 502);
    assert_eq!(upstream.seen("late-status-500").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_rewritten_during_read_ahead_is_never_mixed() {
    let server = TestServer::start(Backend::Sqlite).await;
    let upstream = FaultServer::start(values(CHUNKS * ELEMENTS)).await;
    let (v1, v2) = (upstream.file.clone(), FaultServer::rewritten(&upstream.file));
    object_store(&server, &upstream, json!({})).await;
    store(&server, &upstream, "moving", "late-switch", CHUNK, "\"v1\"").await;
    assert_eq!(server.bytes("/moving/x/c/0").await, chunk(&v1, 0, CHUNK));
    // Chunk 4 starts a read-ahead (blocks 1 to 3); the object is rewritten while it is asked.
    let reader = {
        let url = server.url.clone();
        tokio::spawn(async move { raw_get(&url, "/moving/x/c/4", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    upstream.rewrite();
    let got = reader.await.unwrap();
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    let problem: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(problem["type"], "urn:zarrgate:problem:source-modified", "{problem}");
    // Nothing of that answer was kept: the next chunk of the read-ahead asks again, and fails.
    assert_eq!(raw_get(&server.url, "/moving/x/c/8", &[]).await.status, 502);
    // Chunk 1, read ahead before the rewrite with the recorded ETag, is still the registered bytes.
    assert_eq!(server.bytes("/moving/x/c/1").await, chunk(&v1, 1, CHUNK));
    // Registered again with the new ETag: every chunk of the new version, none of the old.
    store(&server, &upstream, "moving", "late-switch", CHUNK, "\"v2\"").await;
    for i in [0, 1, 4, 8, 63] {
        assert_eq!(server.bytes(&format!("/moving/x/c/{i}")).await, chunk(&v2, i, CHUNK), "chunk {i}");
    }
    let seen = upstream.seen("late-switch");
    assert!(seen.iter().all(|s| matches!(s.if_match.as_deref(), Some("\"v1\"" | "\"v2\""))), "{seen:?}");
}

#[tokio::test]
async fn bad_readahead_options_are_refused_by_name() {
    let server = TestServer::start(Backend::Sqlite).await;
    for (options, words) in [
        (json!({"readahead": "sometimes"}), "readahead must be \"on\" or \"off\""),
        (json!({"readahead_gap": 100}), "readahead_gap must be between 4 KiB and 64 MiB"),
        (json!({"readahead_window": "4MB"}), "readahead_window must be a number of bytes"),
    ] {
        let (status, body) = server
            .put("/api/v1/object-stores/bad", &json!({"url": "http://127.0.0.1:9/files/", "options": options}))
            .await;
        assert!(status.is_client_error(), "{options}: {status} {body}");
        assert!(body["detail"].as_str().unwrap().contains(words), "{options}: {body}");
    }
    let options = json!({"readahead_window": "1MiB", "readahead_cache": 0});
    let (status, body) = server
        .put("/api/v1/object-stores/shown", &json!({"url": "http://127.0.0.1:9/files/", "options": options}))
        .await;
    assert!(status.is_success(), "{body}");
    let shown: Value = server.get("/api/v1/object-stores/shown", &[]).await.json().await.unwrap();
    assert_eq!(shown["options"], options, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_cut_short_is_resumed_where_it_stopped() {
    let server = TestServer::start(Backend::Sqlite).await;
    let upstream = FaultServer::start(values(CHUNKS * ELEMENTS)).await;
    object_store(&server, &upstream, json!({})).await;
    store(&server, &upstream, "cut", "reset-once", CHUNK, "\"v1\"").await;
    assert_eq!(server.bytes("/cut/x/c/0").await, chunk(&upstream.file, 0, CHUNK));
    // Chunk 3 is in the same block: no request of its own.
    assert_eq!(server.bytes("/cut/x/c/3").await, chunk(&upstream.file, 3, CHUNK));
    let seen = upstream.seen("reset-once");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].range.as_deref(), Some("bytes=0-65535"), "{seen:?}");
    assert_eq!(seen[1].range.as_deref(), Some("bytes=32768-65535"), "{seen:?}");
    assert_eq!(seen[1].if_match.as_deref(), Some("\"v1\""), "{seen:?}");
}

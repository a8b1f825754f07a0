//! Single-flight, coalescing and read-ahead against a real HTTP upstream that counts requests
//! (tests/common/faults.rs): a sequential scan costs a few upstream GETs, a miss storm one per
//! block, an upstream error reaches every waiter as a 5xx and is not kept, and a source
//! rewritten during a read-ahead is `source-modified`, never a mix of two versions, until the
//! store is registered again with the new version; a block cut short is resumed where it
//! stopped. Every 200 carries the source's bytes. Blocks fetched ahead and never read are counted
//! as waste once they leave the block cache; blocks a read used, wholly or in part, are not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ops::Range;
use std::sync::{Arc, Mutex};
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
    object_store_at(server, &upstream.base, options).await;
}

/// Registers the object store `faults` at `base` with `options`.
async fn object_store_at(server: &TestServer, base: &str, options: Value) {
    let body = json!({"url": base, "options": options});
    let (status, body) = server.put("/api/v1/object-stores/faults", &body).await;
    assert!(status.is_success(), "{body}");
}

/// Registers store `name`: one array whose chunk `i` is at byte `i * stride` of `mode`'s
/// object, recorded with ETag `etag`.
async fn store(server: &TestServer, upstream: &FaultServer, name: &str, mode: &str, stride: u64, etag: &str) {
    store_at(server, name, &upstream.url(mode), stride, etag).await;
}

/// Registers store `name`: one array whose chunk `i` is at byte `i * stride` of the object at
/// `url`, recorded with ETag `etag`.
async fn store_at(server: &TestServer, name: &str, url: &str, stride: u64, etag: &str) {
    let url = url.to_owned();
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
    // Every other read made no request of its own: it found its block read ahead, or joined the
    // request still bringing it (how many of each depends on how fast those requests were).
    let hits = metric(&server, "zarrgate_readahead_hits_total").await;
    let joins = metric(&server, "zarrgate_upstream_joins_total").await;
    assert_eq!(hits + joins, (CHUNKS - 4) as f64, "{hits} hits, {joins} joins");

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

/// An upstream that holds every answer until the test opens it, so that reads meet in flight by
/// construction rather than by timing. It serves `file` (ETag `"v1"`) under every path and
/// records the Range of each request as it arrives (before holding it).
struct Gated {
    base: String,
    file: Arc<Vec<u8>>,
    ranges: Arc<Mutex<Vec<String>>>,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gated {
    async fn start(file: Vec<u8>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", listener.local_addr().unwrap());
        let (file, ranges) = (Arc::new(file), Arc::new(Mutex::new(Vec::new())));
        let (open, _) = tokio::sync::watch::channel(false);
        let (f, r, o) = (file.clone(), ranges.clone(), open.subscribe());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer_when_open(socket, f.clone(), r.clone(), o.clone()));
            }
        });
        Self { base, file, ranges, open }
    }

    fn url(&self) -> String {
        format!("{}gated/data.bin", self.base)
    }

    /// The Range of every request received, in order.
    fn ranges(&self) -> Vec<String> {
        self.ranges.lock().unwrap().clone()
    }

    /// Answers every request held, and every one to come.
    fn open(&self) {
        self.open.send_replace(true);
    }
}

async fn answer_when_open(
    mut socket: tokio::net::TcpStream,
    file: Arc<Vec<u8>>,
    ranges: Arc<Mutex<Vec<String>>>,
    mut open: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::AsyncWriteExt;
    let Some(request) = common::faults::read_head(&mut socket).await else { return };
    let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
    let range = text.lines().find_map(|l| l.strip_prefix("range:")).unwrap_or_default().trim().to_owned();
    ranges.lock().unwrap().push(range.clone());
    let _ = open.wait_for(|open| *open).await;
    let (a, b) = range.strip_prefix("bytes=").and_then(|r| r.split_once('-')).expect("a ranged GET");
    let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse::<usize>().unwrap().min(file.len() - 1) + 1);
    let head = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{}/{}\r\nContent-Length: {}\r\nETag: \"v1\"\r\n\
         Connection: close\r\n\r\n",
        b - 1,
        file.len(),
        b - a
    );
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(&file[a..b]).await;
    let _ = socket.shutdown().await;
}

/// Waits until `done` says so, checked every 10 ms for at most 10 s: an event, not a duration.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    for _ in 0..1000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 10 s");
}

/// A server whose object store `faults` is a [`Gated`] upstream with 16 KiB blocks (one chunk
/// each) and a block cache smaller than one block, so that each block leaves the cache at its
/// first maintenance after it was stored (not 0 bytes: a cache of 0 stores nothing, and evicts
/// nothing); then `chunks` of store `scan` read in flight (see [`read_in_flight`]).
async fn scanned(chunks: Range<u64>) -> (TestServer, Gated) {
    let server = TestServer::start(Backend::Sqlite).await;
    let upstream = Gated::start(values(CHUNKS * ELEMENTS)).await;
    let options = json!({"readahead_gap": "16KiB", "readahead_cache": "1KiB"});
    object_store_at(&server, &upstream.base, options).await;
    store_at(&server, "scan", &upstream.url(), CHUNK, "\"v1\"").await;
    read_in_flight(&server, &upstream, chunks).await;
    (server, upstream)
}

/// Asks for `chunks` of store `scan` in order, each once the gateway has planned the one before
/// (made an upstream request for it, or joined one), while `upstream` holds every answer; then
/// opens it, checks every answer, and waits for the upstream requests to end (each has stored
/// the blocks it brought in the block cache by then).
async fn read_in_flight(server: &TestServer, upstream: &Gated, chunks: Range<u64>) {
    let mut readers = Vec::new();
    for (n, i) in chunks.enumerate() {
        let (url, path) = (server.url.clone(), format!("/scan/x/c/{i}"));
        readers.push((i, tokio::spawn(async move { raw_get(&url, &path, &[]).await })));
        until(&format!("chunk {i} planned"), || async move {
            let joins = metric(server, "zarrgate_upstream_joins_total").await as usize;
            upstream.ranges().len() + joins == n + 1
        })
        .await;
    }
    upstream.open();
    for (i, reader) in readers {
        let got = reader.await.unwrap();
        assert_eq!(got.status, 200, "chunk {i}: {}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.body, chunk(&upstream.file, i, CHUNK), "chunk {i}");
    }
    let requests = upstream.ranges().len() as f64;
    until("the upstream requests ended", || async move {
        let labels = [("object_store", "faults"), ("outcome", "ok")];
        server.metric_sum("zarrgate_upstream_requests_total", &labels).await == requests
    })
    .await;
}

/// Reads `path` (a chunk alone in its block with none before it: never a read-ahead) until the
/// block cache has surely run its maintenance, where it evicts, then once more after the second
/// (`RETIRE_AFTER` in src/sources/flight.rs) during which an evicted block's use is still
/// watched: that read counts the waste. The cache (moka) runs its maintenance within a lookup or
/// insert 300 ms after its last run, or within a lookup that finds 64 lookups queued: 65
/// lookups, whatever the clock. With a cache smaller than a block, every block fetched before
/// has then left it.
async fn evict_blocks(server: &TestServer, path: &str) {
    for _ in 0..65 {
        server.bytes(path).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    server.bytes(path).await;
}

/// The upstream requests of chunks 0 to 4 read in order, or more: block 0, blocks 1-3 (2 read
/// ahead of chunk 1), blocks 4-12 (8 read ahead of chunk 4).
const SCAN: [&str; 3] = ["bytes=0-16383", "bytes=16384-65535", "bytes=65536-212991"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_read_ahead_and_never_read_are_waste_once_evicted() {
    // Chunks 0 to 4 in order (2 and 3 join chunk 1's request): 13 blocks, 8 never read.
    let (server, upstream) = scanned(0..5).await;
    assert_eq!(upstream.ranges(), SCAN);
    let fetched = metric(&server, "zarrgate_upstream_bytes_total").await;
    let served = metric(&server, "zarrgate_upstream_served_bytes_total").await;
    assert_eq!((fetched, served), ((13 * CHUNK) as f64, (5 * CHUNK) as f64));

    evict_blocks(&server, "/scan/x/c/0").await;
    // The 8 blocks read ahead and never read, whole: every byte fetched and not served.
    let wasted = metric(&server, "zarrgate_readahead_wasted_bytes_total").await;
    assert_eq!(wasted, (8 * CHUNK) as f64);
    assert_eq!(wasted, fetched - served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_that_reads_every_block_it_fetched_wastes_nothing() {
    // Chunks 0 to 12: the same three upstream requests, every block they bring read whole.
    let (server, upstream) = scanned(0..13).await;
    assert_eq!(upstream.ranges(), SCAN);
    assert_eq!(metric(&server, "zarrgate_upstream_joins_total").await, 10.0);
    let fetched = metric(&server, "zarrgate_upstream_bytes_total").await;
    assert_eq!(fetched, (13 * CHUNK) as f64);
    assert_eq!(metric(&server, "zarrgate_upstream_served_bytes_total").await, fetched);

    evict_blocks(&server, "/scan/x/c/0").await;
    assert_eq!(metric(&server, "zarrgate_readahead_wasted_bytes_total").await, 0.0);
    // The blocks did leave the cache: chunk 12 is asked of the upstream again (its block alone,
    // none before it being there to read ahead after), and still nothing is waste.
    assert_eq!(server.bytes("/scan/x/c/12").await, chunk(&upstream.file, 12, CHUNK));
    assert_eq!(upstream.ranges().last().map(String::as_str), Some("bytes=196608-212991"));
    evict_blocks(&server, "/scan/x/c/0").await;
    assert_eq!(metric(&server, "zarrgate_readahead_wasted_bytes_total").await, 0.0);
}

/// A read that finds a block read ahead in the cache gets it, and the cache's maintenance, which
/// that very lookup may run (here: 300 ms after the last one), may evict it before the read has
/// used it: the block is still counted as used (waste is counted when the last holder drops it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_read_ahead_then_read_from_the_cache_is_not_waste() {
    let (server, upstream) = scanned(0..5).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(server.bytes("/scan/x/c/5").await, chunk(&upstream.file, 5, CHUNK));
    assert_eq!(upstream.ranges(), SCAN, "chunk 5 is served from the block read ahead");
    evict_blocks(&server, "/scan/x/c/0").await;
    assert_eq!(metric(&server, "zarrgate_readahead_wasted_bytes_total").await, (7 * CHUNK) as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unread_part_of_a_block_a_read_used_is_waste_once_evicted() {
    let server = TestServer::start(Backend::Sqlite).await;
    // Chunks 256 KiB apart: each read brings its own 64 KiB block and serves 16 KiB of it.
    let stride = 256 << 10;
    let upstream = FaultServer::start(values(CHUNKS * stride / 4)).await;
    object_store(&server, &upstream, json!({"readahead_cache": "1KiB"})).await;
    store(&server, &upstream, "random", "ok", stride, "\"v1\"").await;
    for i in [5, 2, 9] {
        assert_eq!(server.bytes(&format!("/random/x/c/{i}")).await, chunk(&upstream.file, i, stride), "chunk {i}");
    }
    let seen: Vec<_> = upstream.seen("ok").into_iter().filter_map(|s| s.range).collect();
    let block = |i: u64| format!("bytes={}-{}", i * stride, i * stride + (64 << 10) - 1);
    assert_eq!(seen, [block(5), block(2), block(9)]);
    let fetched = metric(&server, "zarrgate_upstream_bytes_total").await;
    let served = metric(&server, "zarrgate_upstream_served_bytes_total").await;
    assert_eq!((fetched, served), ((3 * (64 << 10)) as f64, (3 * CHUNK) as f64));

    evict_blocks(&server, "/random/x/c/5").await;
    // The 48 KiB of each block around its chunk, fetched and never served.
    let wasted = metric(&server, "zarrgate_readahead_wasted_bytes_total").await;
    assert_eq!(wasted, (3 * (48 << 10)) as f64);
    assert_eq!(wasted, fetched - served);
}

//! Clients that ask for a large answer and read none of it, against the real server: each
//! holds what the README promises (about 2 MiB), never a copy of its answer, and the send
//! timeout closes it. One test, so that the memory measured is its readers' alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const ARRAYS: usize = 20_000;

/// A native document of `n` arrays with a few attributes each (about 630 bytes of root
/// `zarr.json` per array, as in a store of real variables).
fn wide_store(n: usize) -> Vec<u8> {
    let history = "made by a model run, then regridded and virtualized; ".repeat(4);
    let attributes =
        json!({"long_name": "a variable of a wide store", "units": "K", "valid_range": [0, 400], "history": history});
    let node = common::f32_array(&[1000, 100], &[100, 100], json!({"attributes": attributes})).to_string();
    common::wide_store(n, &node)
}

/// Sends `request` on `count` connections that never read, and samples this process's memory
/// until the server has closed all of them for reading nothing (`send_timeout` counted
/// `closed_before + count` times): the peak growth of resident memory (the kernel's high-water
/// mark, reset first), and how long that took.
async fn stalled_readers(server: &TestServer, request: &str, count: usize, closed_before: f64) -> (u64, Duration) {
    common::reset_peak_rss();
    let before = common::rss();
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut readers = Vec::new();
    for _ in 0..count {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        readers.push(stream);
    }
    let started = Instant::now();
    let series = "zarrgate_http_connections_closed_total{reason=\"send_timeout\"}";
    while server.metric(series).await < closed_before + count as f64 {
        assert!(started.elapsed() < Duration::from_secs(120), "the send timeout did not close the readers");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    let peak = common::peak_rss();
    // What is left open is the test client's own (this metrics request's, and any it keeps).
    let open = server.metric("zarrgate_http_connections_open").await;
    assert!(open < 5.0, "{open} connections still open: the stalled ones are not all closed");
    drop(readers);
    (peak.saturating_sub(before), took)
}

/// The bodies of plain GETs of `paths`, sent pipelined on one connection.
async fn pipelined(server: &TestServer, paths: &[&str]) -> Vec<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut stream = TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    let requests: String = paths.iter().map(|p| format!("GET {p} HTTP/1.1\r\nHost: zarrgate\r\n\r\n")).collect();
    stream.write_all(requests.as_bytes()).await.unwrap();
    let (mut buf, mut bodies) = (Vec::new(), Vec::new());
    while bodies.len() < paths.len() {
        let mut piece = vec![0; 1 << 20];
        let n = stream.read(&mut piece).await.unwrap();
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&piece[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            assert!(head.starts_with("http/1.1 200 "), "{head}");
            let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length: ")).unwrap().parse().unwrap();
            if buf.len() < end + 4 + len {
                break;
            }
            bodies.push(buf[end + 4..end + 4 + len].to_vec());
            buf.drain(..end + 4 + len);
        }
    }
    bodies
}

/// 100 clients that ask for the 12.6 MB root `zarr.json` of a store of 20,000 arrays (a plain
/// read, answered before hyper) and 50 that ask for its `PROPFIND` with no `Depth` (infinity:
/// 13 MB since the v2 documents moved to `/v2/`, 28 MB before) read none of it. Each held a copy of its answer: +1.3 GB and +1.4 GB. Shared (the
/// document) and streamed (the listing), the server's memory barely moves; the send timeout
/// closes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_of_large_answers_hold_no_copies() {
    let server = TestServer::start_with(common::Backend::Sqlite, |c| c.http.send_timeout_seconds = 2).await;
    let (status, summary) = server.put_raw("/api/v1/stores/wide", wide_store(ARRAYS)).await;
    assert_eq!(status, StatusCode::CREATED, "{summary}");
    let root = server.bytes("/wide/zarr.json").await;
    assert!(root.len() > 10 << 20, "the root document is {} bytes", root.len());
    let propfind = reqwest::Method::from_bytes(b"PROPFIND").unwrap();
    let listing = server.client.request(propfind, format!("{}/wide/", server.url)).send().await.unwrap();
    assert_eq!(listing.status(), StatusCode::MULTI_STATUS);
    let listing = listing.text().await.unwrap();
    assert!(listing.len() > 10 << 20, "the listing is {} bytes", listing.len());
    let responses = listing.matches("<D:response>").count();
    assert!(responses > 1 + ARRAYS * 2, "{responses} entries: each array's directory and documents are listed");
    assert!(listing.contains("<D:href>/wide/a019999/zarr.json</D:href>"));
    assert!(listing.ends_with("</D:multistatus>\n"));

    // Pipelined, a large answer (sent from the shared bytes) and small ones (copied behind their
    // heads) come back whole and in order.
    let small = server.bytes("/wide/a000001/zarr.json").await;
    let answers = pipelined(
        &server,
        &["/wide/zarr.json", "/wide/a000001/zarr.json", "/wide/zarr.json", "/wide/a000001/zarr.json"],
    )
    .await;
    assert!(
        answers == [root.clone(), small.clone(), root.clone(), small],
        "pipelined answers differ from single reads"
    );

    let get = "GET /wide/zarr.json HTTP/1.1\r\nHost: zarrgate\r\n\r\n";
    let (growth, took) = stalled_readers(&server, get, 100, 0.0).await;
    eprintln!(
        "100 stalled readers of a {} MB zarr.json: RSS +{} MiB, closed after {took:?}",
        root.len() >> 20,
        growth >> 20
    );
    assert!(growth < 200 << 20, "100 stalled readers of zarr.json: RSS grew by {} MiB", growth >> 20);

    let propfind = "PROPFIND /wide/ HTTP/1.1\r\nHost: zarrgate\r\n\r\n";
    let (growth, took) = stalled_readers(&server, propfind, 50, 100.0).await;
    eprintln!(
        "50 stalled PROPFINDs of a {} MB listing: RSS +{} MiB, closed after {took:?}",
        listing.len() >> 20,
        growth >> 20
    );
    assert!(growth < 200 << 20, "50 stalled PROPFIND readers: RSS grew by {} MiB", growth >> 20);
}

//! Registration has no limit on the number of arrays but configured ones: a store of 100,000
//! arrays (more rows than either database binds values for in one statement) registers and is
//! reported, on PostgreSQL and SQLite alike, and serves its root zarr.json.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use reqwest::StatusCode;
use serde_json::{Value, json};

/// A native document of `n` one-chunk arrays `a000000`.., each chunk inline.
fn wide_store(n: usize) -> Vec<u8> {
    let node = common::f32_array(&[1], &[1], json!({"manifest": {"0": {"data": "AACAPw=="}}})).to_string();
    common::wide_store(n, &node)
}

/// A store of 100,000 one-chunk arrays registers on both databases within bounded memory; its
/// root zarr.json lists every one of them, built without holding the async workers (an
/// unrelated cached read is served meanwhile) and within bounded memory. The backends run one after the other so that
/// the memory measured is one server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_100000_arrays_registers_and_serves_its_root() {
    for backend in [common::Backend::Sqlite, common::Backend::Postgres] {
        let server = match backend {
            common::Backend::Sqlite => common::TestServer::start(backend).await,
            common::Backend::Postgres => match common::TestServer::start_postgres().await {
                Some(server) => server,
                None => continue,
            },
        };
        one_hundred_thousand_arrays(std::sync::Arc::new(server)).await;
    }
}

async fn one_hundred_thousand_arrays(server: std::sync::Arc<common::TestServer>) {
    const ARRAYS: u64 = 100_000;
    let small =
        json!({"nodes": {"x": common::f32_array(&[1], &[1], json!({"manifest": {"0": {"data": "AACAPw=="}}}))}});
    assert_eq!(server.put("/api/v1/stores/small", &small).await.0, StatusCode::CREATED);
    assert_eq!(server.bytes("/small/x/c/0").await, common::f32_bytes([1.0]));
    let document = wide_store(ARRAYS as usize);
    let document_bytes = document.len() as u64;
    common::reset_peak_rss();
    let before = common::rss();
    let started = Instant::now();
    let (status, summary) = server.put_raw("/api/v1/stores/wide", document).await;
    let registration_peak = common::peak_rss().saturating_sub(before);
    let catalog = server.state.metrics.catalog_query_duration_seconds.with_label_values(&["write_version"]);
    eprintln!(
        "{}: registering {ARRAYS} arrays took {:.1} s, {:.1} s of it writing the catalog",
        server.state.catalog.backend(),
        started.elapsed().as_secs_f64(),
        catalog.get_sample_sum(),
    );
    eprintln!(
        "{}: peak RSS +{} MiB while registering (the {} MiB document included)",
        server.state.catalog.backend(),
        registration_peak >> 20,
        document_bytes >> 20
    );
    assert_eq!(status, StatusCode::CREATED, "{summary}");
    // Every node's metadata is held as text until it is written, not as a parsed map: measured
    // +238 MiB (SQLite), +91 to +133 MiB (PostgreSQL, after the SQLite run); with parsed maps,
    // +817 MiB and +646 MiB.
    assert!(registration_peak < 384 << 20, "RSS grew by {} MiB registering", registration_peak >> 20);
    assert_eq!((summary["arrays"].as_u64(), summary["chunks"]["inline"].as_u64()), (Some(ARRAYS), Some(ARRAYS)));

    let r = server.get("/api/v1/stores/wide", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    let reported: Value = r.json().await.unwrap();
    assert_eq!((reported["arrays"].as_u64(), reported["version"].clone()), (Some(ARRAYS), summary["version"].clone()));
    let listed: Value = server.get("/api/v1/stores", &[]).await.json().await.unwrap();
    assert!(listed.to_string().contains("\"arrays\":100000"), "{listed}");

    // The first read of the root builds the view; an unrelated cached chunk is read meanwhile.
    let before = common::rss();
    let root = {
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = server.get("/wide/zarr.json", &[]).await;
            let status = r.status();
            let body = r.bytes().await.unwrap();
            (status, body, started.elapsed())
        })
    };
    let mut unrelated = 0;
    while !root.is_finished() {
        assert_eq!(server.bytes("/small/x/c/0").await, common::f32_bytes([1.0]));
        unrelated += 1;
    }
    let (status, body, took) = root.await.unwrap();
    let growth = common::rss().saturating_sub(before);
    let body: Value = serde_json::from_slice(&body).unwrap();
    eprintln!(
        "{}: first root zarr.json in {:.2} s, {unrelated} unrelated reads meanwhile, RSS +{} MiB",
        server.state.catalog.backend(),
        took.as_secs_f64(),
        growth >> 20
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["consolidated_metadata"]["metadata"].as_object().unwrap().len(), ARRAYS as usize);
    assert!(unrelated >= 1, "no other read was served while the root was built");
    // Measured: +130 to +205 MiB (SQLite), +136 to +242 MiB (PostgreSQL); with every node parsed
    // at once, +722 MiB.
    assert!(growth < 384 << 20, "RSS grew by {} MiB serving the root", growth >> 20);
    // A second read comes from the cache.
    let r = server.get("/wide/a099999/zarr.json", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
}

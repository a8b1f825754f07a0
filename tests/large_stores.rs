//! Registration has no limit on the number of arrays but configured ones: a store of 100,000
//! arrays (more rows than either database binds values for in one statement) registers and is
//! reported, on PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fmt::Write;
use std::time::Instant;

use reqwest::StatusCode;
use serde_json::{Value, json};

/// A native document of `n` one-chunk arrays `a000000`.., each chunk inline.
fn wide_store(n: usize) -> Vec<u8> {
    let node = common::f32_array(&[1], &[1], json!({"manifest": {"0": {"data": "AACAPw=="}}})).to_string();
    let mut body = String::with_capacity(n * (node.len() + 12) + 16);
    body.push_str(r#"{"nodes": {"#);
    for i in 0..n {
        let comma = if i == 0 { "" } else { "," };
        write!(body, "{comma}\"a{i:06}\": {node}").unwrap();
    }
    body.push_str("}}");
    body.into_bytes()
}

both_backends! {
    // Not its zarr.json: consolidated metadata of 100,000 nodes is another matter.
    async fn a_store_of_100000_arrays_registers(server) {
        const ARRAYS: u64 = 100_000;
        let started = Instant::now();
        let (status, summary) = server.put_raw("/api/v1/stores/wide", wide_store(ARRAYS as usize)).await;
        let catalog = server.state.metrics.catalog_query_duration_seconds.with_label_values(&["write_version"]);
        eprintln!(
            "{}: registering {ARRAYS} arrays took {:.1} s, {:.1} s of it writing the catalog",
            server.state.catalog.backend(),
            started.elapsed().as_secs_f64(),
            catalog.get_sample_sum(),
        );
        assert_eq!(status, StatusCode::CREATED, "{summary}");
        assert_eq!((summary["arrays"].as_u64(), summary["chunks"]["inline"].as_u64()), (Some(ARRAYS), Some(ARRAYS)));

        let r = server.get("/api/v1/stores/wide", &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        let reported: Value = r.json().await.unwrap();
        assert_eq!((reported["arrays"].as_u64(), reported["version"].clone()), (Some(ARRAYS), summary["version"].clone()));
        let listed: Value = server.get("/api/v1/stores", &[]).await.json().await.unwrap();
        assert!(listed.to_string().contains("\"arrays\":100000"), "{listed}");
    }
}

//! The bounds of `[limits]` as a client meets them: a store past one is refused at registration
//! with 422 naming it; a stored version past a bound lowered since still answers every reader
//! correctly (a missing chunk as 404, which every Zarr client reads as the fill value).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestServer, f32_array};
use reqwest::StatusCode;
use serde_json::json;

/// One array of a single chunk of 2^40 float32 (4 TiB decoded): with `missing_chunks = "fill"`,
/// a GET of its chunk used to abort the server allocating it.
fn huge() -> serde_json::Value {
    json!({"nodes": {"huge": f32_array(&[1 << 40], &[1 << 40], json!({})), "small": f32_array(&[8], &[4], json!({}))}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_chunk_past_the_bound_is_refused_at_registration() {
    let server = TestServer::start(Backend::Sqlite).await;
    let (status, body) = server.put("/api/v1/stores/s?missing_chunks=fill", &huge()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let problem = body["problems"][0].as_str().unwrap();
    assert!(
        problem.starts_with("array huge: a chunk of its fill value would take 4398046511104 bytes decoded")
            && problem.contains("limits.max_fill_chunk_bytes = 16777216"),
        "{body}"
    );
    assert_eq!(server.get("/s/zarr.json", &[]).await.status(), StatusCode::NOT_FOUND, "nothing was stored");
    // Answering 404 for missing chunks, the same store is fine: nothing is ever built.
    let (status, body) = server.put("/api/v1/stores/s?missing_chunks=404", &huge()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(server.get("/s/huge/c/0", &[]).await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_version_past_the_bound_answers_404_for_missing_chunks() {
    // Stored by a server whose bound was higher (or before there was one).
    let server = TestServer::start_with(Backend::Sqlite, |c| c.limits.max_fill_chunk_bytes = u64::MAX).await;
    let (status, body) = server.put("/api/v1/stores/s?missing_chunks=fill", &huge()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let bounded = server.replica(|c| c.limits = Default::default()).await;
    let r = bounded.get("/s/huge/c/0", &[]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "not built: 4 TiB is past the bound");
    assert_eq!(bounded.bytes("/s/small/c/1").await, (-1.0f32).to_le_bytes().repeat(4), "within it, filled");
    assert_eq!(bounded.get("/healthz", &[]).await.status(), StatusCode::OK, "and the server is alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_too_deep_or_twice_named_nodes_are_refused() {
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.limits.max_nodes = 4;
        c.limits.max_depth = 2;
    })
    .await;
    let group = json!({"zarr_format": 3, "node_type": "group"});
    let put = |nodes: serde_json::Value| {
        let server = &server;
        async move { server.put("/api/v1/stores/s", &json!({"nodes": nodes})).await }
    };
    let (status, body) = put(json!({"a/b/c": group})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["problems"], json!(["node a/b/c is 3 levels deep, above limits.max_depth = 2"]));
    let (status, body) = put(json!({"a/b": group, "c/d": group})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["problems"][0].as_str().unwrap().contains("5 nodes"), "{body}");
    let (status, body) = put(json!({"caf\u{e9}": group, "cafe\u{301}": group})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["problems"][0].as_str().unwrap().contains("one name written two ways in Unicode"), "{body}");
}

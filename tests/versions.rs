//! Versions over time: retention, missing chunks as fill values, source facts recorded at
//! registration and checked on every read, and replicas sharing one catalog.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `x`: 8 floats in chunks of 4 from `name.bin` (chunk 1 missing unless `both`).
fn doc(server: &TestServer, name: &str, base: f32, both: bool) -> Value {
    let path = server.write(&format!("{name}.bin"), &f32_bytes((0..8).map(|i| base + i as f32)));
    let mut manifest = json!({"0": {"path": path, "offset": 0, "length": 16}});
    if both {
        manifest["1"] = json!({"path": path, "offset": 16, "length": 16});
    }
    json!({"nodes": {"x": f32_array(&[8], &[4], json!({"manifest": manifest}))}})
}

async fn version(server: &TestServer, path: &str, body: &Value) -> i64 {
    let (status, answer) = server.put(path, body).await;
    assert!(status.is_success(), "{status} {answer}");
    answer["version"].as_i64().unwrap()
}

both_backends! {
    async fn retention_keeps_the_newest_versions(server) {
        let server = server
            .restart_with(|c| {
                c.retention.keep_versions = 2;
                c.retention.keep_seconds = 0;
            })
            .await;
        server.local_store().await;
        let mut ids = Vec::new();
        for i in 0..4 {
            ids.push(version(&server, "/api/v1/stores/r", &doc(&server, &format!("v{i}"), i as f32 * 10.0, true)).await);
        }
        for old in &ids[..2] {
            let r = server.get(&format!("/r@{old}/x/c/0"), &[]).await;
            assert_eq!(r.status(), StatusCode::GONE, "never a 404: clients would read fill values");
            let body: Value = r.json().await.unwrap();
            assert!(body["detail"].as_str().unwrap().contains("retention"), "{body}");
        }
        assert_eq!(server.bytes(&format!("/r@{}/x/c/0", ids[2])).await, f32_bytes([20.0, 21.0, 22.0, 23.0]));
        assert_eq!(server.bytes("/r/x/c/0").await, f32_bytes([30.0, 31.0, 32.0, 33.0]));
    }

    async fn retention_keeps_young_versions_whatever_their_number(server) {
        let server = server
            .restart_with(|c| {
                c.retention.keep_versions = 1;
                c.retention.keep_seconds = 2;
            })
            .await;
        server.local_store().await;
        let old = version(&server, "/api/v1/stores/r", &doc(&server, "v0", 0.0, true)).await;
        let young = version(&server, "/api/v1/stores/r", &doc(&server, "v1", 10.0, true)).await;
        assert_eq!(server.bytes(&format!("/r@{old}/x/c/0")).await, f32_bytes([0.0, 1.0, 2.0, 3.0]), "younger than 2 s: kept");
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        version(&server, "/api/v1/stores/r", &doc(&server, "v2", 20.0, true)).await;
        for gone in [old, young] {
            assert_eq!(server.get(&format!("/r@{gone}/x/c/0"), &[]).await.status(), StatusCode::GONE, "older than 2 s and not the newest");
        }
        assert_eq!(server.bytes("/r/x/c/0").await, f32_bytes([20.0, 21.0, 22.0, 23.0]));
    }

    async fn missing_chunks_can_be_fill_values(server) {
        server.local_store().await;
        version(&server, "/api/v1/stores/holes", &doc(&server, "h", 0.0, false)).await;
        version(&server, "/api/v1/stores/filled?missing_chunks=fill", &doc(&server, "f", 0.0, false)).await;
        assert_eq!(server.get("/holes/x/c/1", &[]).await.status(), StatusCode::NOT_FOUND);
        let r = server.get("/filled/x/c/1", &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        let etag = r.headers()["etag"].clone();
        assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([-1.0; 4]), "the fill value, encoded");
        assert_eq!(server.head("/filled/x/c/1").await.headers()["content-length"], "16");
        let r = server.get("/filled/x/c/1", &[("if-none-match", etag.to_str().unwrap())]).await;
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(server.get("/filled/x/c/2", &[]).await.status(), StatusCode::NOT_FOUND, "outside the grid stays 404");
        let (status, body) = server.put("/api/v1/stores/bad?missing_chunks=zero", &doc(&server, "b", 0.0, false)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        // A plain re-registration (a nightly job) keeps the store's policy; the summary says it.
        let (status, summary) = server.put("/api/v1/stores/filled", &doc(&server, "f2", 5.0, false)).await;
        assert_eq!((status, summary["missing_chunks"].as_str()), (StatusCode::OK, Some("fill")), "{summary}");
        assert_eq!(server.bytes("/filled/x/c/1").await, f32_bytes([-1.0; 4]), "still fill values");
        let holes: Value = server.get("/api/v1/stores/holes", &[]).await.json().await.unwrap();
        assert_eq!(holes["missing_chunks"], "404", "{holes}");
        let (status, summary) = server.put("/api/v1/stores/filled?missing_chunks=404", &doc(&server, "f3", 5.0, false)).await;
        assert_eq!((status, summary["missing_chunks"].as_str()), (StatusCode::OK, Some("404")), "{summary}");
        assert_eq!(server.get("/filled/x/c/1", &[]).await.status(), StatusCode::NOT_FOUND);
    }

    async fn sources_are_checked_at_registration_and_on_every_read(server) {
        server.local_store().await;
        let body = doc(&server, "s", 0.0, true);
        let path = server.data.join("s.bin");
        // A manifest made from another copy of the file than the one served.
        let mut declared = body.clone();
        declared["sources"] = json!({path.display().to_string(): {"etag": "\"not-this-file\"", "size": 32}});
        let (status, answer) = server.put("/api/v1/stores/s", &declared).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer["problems"][0].as_str().unwrap().contains("changed since the manifest was made"), "{answer}");
        let (status, answer) = server.put("/api/v1/stores/s?verify=false", &declared).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        assert_eq!(server.get("/s/x/c/0", &[]).await.status(), StatusCode::BAD_GATEWAY, "the declared ETag does not match");

        // Registered with the facts the server records itself.
        version(&server, "/api/v1/stores/s", &body).await;
        assert_eq!(server.bytes("/s/x/c/0").await, f32_bytes([0.0, 1.0, 2.0, 3.0]));
        let report: Value = server.client.post(format!("{}/api/v1/stores/s/verify", server.url)).send().await.unwrap().json().await.unwrap();
        assert_eq!((report["ok"].as_u64(), report["modified"].as_u64()), (Some(1), Some(0)), "{report}");

        // Rewritten in place with other values of the same length.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, f32_bytes((0..8).map(|i| 100.0 + i as f32))).unwrap();
        let r = server.get("/s/x/c/0", &[]).await;
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        let problem: Value = r.json().await.unwrap();
        assert_eq!(problem["type"], "urn:zarrgate:problem:source-modified");
        let report: Value = server.client.post(format!("{}/api/v1/stores/s/verify", server.url)).send().await.unwrap().json().await.unwrap();
        assert_eq!(report["modified"], 1, "{report}");
        assert_eq!(report["sources"][0]["status"], "modified");
        assert!(problem["detail"].as_str().unwrap().contains("zarrgate stores put STORE m.json --record-sources"), "{problem}");

        // The recovery the 502 names: the export registered again, re-recording the facts.
        let exported: Value = server.get("/api/v1/stores/s/manifest", &[]).await.json().await.unwrap();
        assert!(exported["sources"].as_object().is_some_and(|s| !s.is_empty()), "{exported}");
        let (status, answer) = server.put("/api/v1/stores/s", &exported).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "the export's recorded facts no longer hold: {answer}");
        assert!(answer["problems"][0].as_str().unwrap().contains("?record_sources=true"), "{answer}");
        let (status, answer) = server.put("/api/v1/stores/s?record_sources=true&verify=false", &exported).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let (status, answer) = server.put("/api/v1/stores/s?record_sources=true", &exported).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(server.bytes("/s/x/c/0").await, f32_bytes([100.0, 101.0, 102.0, 103.0]), "read again, as it is now");
        // Shortened: re-recording still checks every reference against the size found.
        std::fs::write(&path, f32_bytes([1.0, 2.0])).unwrap();
        let (status, answer) = server.put("/api/v1/stores/s?record_sources=true", &exported).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(server.get("/api/v1/stores/s/manifest", &[]).await.json::<Value>().await.unwrap()["sources"].as_object().map(|s| s.len()), Some(1));
        std::fs::remove_file(&path).unwrap();
        let report: Value = server.client.post(format!("{}/api/v1/stores/s/verify", server.url)).send().await.unwrap().json().await.unwrap();
        assert_eq!(report["missing"], 1, "{report}");

        let (status, answer) = server.put("/api/v1/stores/gone", &json!({"nodes": {"x": f32_array(&[4], &[4],
            json!({"manifest": {"0": {"path": path.display().to_string(), "offset": 0, "length": 16}}}))}})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer["problems"][0].as_str().unwrap().contains("cannot be read"), "{answer}");
    }

    // A reader that opened a store before it was deleted must not read its chunks as fill
    // values: every key under a deleted name is 410 until a store of that name is registered.
    async fn a_deleted_store_is_gone_not_missing(server) {
        server.local_store().await;
        let first = version(&server, "/api/v1/stores/d", &doc(&server, "d1", 1.0, true)).await;
        assert_eq!(server.bytes("/d/x/c/1").await, f32_bytes([5.0, 6.0, 7.0, 8.0]));
        assert_eq!(server.delete("/api/v1/stores/d").await, StatusCode::NO_CONTENT);
        for key in ["/d/x/c/1", "/d/x/zarr.json", "/d/zarr.json", "/v2/d/.zgroup", &format!("/d@{first}/x/c/1")] {
            let r = server.get(key, &[]).await;
            assert_eq!(r.status(), StatusCode::GONE, "{key}: never a 404, which clients read as fill values");
            assert_eq!(r.headers()["cache-control"], "no-store", "{key}");
            let problem: Value = r.json().await.unwrap();
            assert_eq!(problem["type"], "urn:zarrgate:problem:store-deleted", "{key}");
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.starts_with("store \"d\" was deleted at 20") && detail.contains("registered again"), "{detail}");
        }
        assert_eq!(server.head("/d/x/c/0").await.status(), StatusCode::GONE);
        // The control plane knows no such store; a name never registered is still 404 everywhere.
        assert_eq!(server.get("/api/v1/stores/d", &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(server.delete("/api/v1/stores/d").await, StatusCode::NOT_FOUND);
        assert_eq!(server.get("/never/x/c/0", &[]).await.status(), StatusCode::NOT_FOUND);

        // Registered again: served, and the old pinned version stays gone (as a version).
        version(&server, "/api/v1/stores/d", &doc(&server, "d2", 50.0, false)).await;
        assert_eq!(server.bytes("/d/x/c/0").await, f32_bytes([50.0, 51.0, 52.0, 53.0]));
        assert_eq!(server.get("/d/x/c/1", &[]).await.status(), StatusCode::NOT_FOUND, "a missing chunk of the new store");
        let r = server.get(&format!("/d@{first}/x/c/1"), &[]).await;
        assert_eq!(r.status(), StatusCode::GONE);
        assert_eq!(r.json::<Value>().await.unwrap()["type"], "urn:zarrgate:problem:version-gone");
        // And deleted again, gone again.
        assert_eq!(server.delete("/api/v1/stores/d").await, StatusCode::NO_CONTENT);
        assert_eq!(server.get("/d/x/c/0", &[]).await.status(), StatusCode::GONE);
    }
}

/// A registration through one replica is served by another within a second: with a minute of
/// cache TTL, only PostgreSQL's NOTIFY can explain it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_learn_of_new_versions_through_notify() {
    let Some(a) = TestServer::start_postgres().await else { return };
    let a = a.restart_with(|c| c.cache.current_version_ttl_ms = 60_000).await;
    a.local_store().await;
    let b = a.replica(|c| c.cache.current_version_ttl_ms = 60_000).await;
    version(&a, "/api/v1/stores/n", &doc(&a, "one", 1.0, true)).await;
    // b must see n (object store and store) and cache its current version.
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.get("/n/x/c/0", &[]).await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "replica b never served the store");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(b.bytes("/n/x/c/0").await, f32_bytes([1.0, 2.0, 3.0, 4.0]));
    let second = version(&a, "/api/v1/stores/n", &doc(&a, "two", 50.0, true)).await;
    let started = Instant::now();
    loop {
        let r = b.get("/n/x/c/0", &[]).await;
        if r.headers()["zarrgate-version"] == second.to_string().as_str() {
            assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([50.0, 51.0, 52.0, 53.0]));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "replica b still serves the old version after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.delete("/api/v1/stores/n").await, StatusCode::NO_CONTENT);
    let started = Instant::now();
    while b.get("/n/x/c/0", &[]).await.status() != StatusCode::GONE {
        assert!(started.elapsed() < Duration::from_secs(1), "replica b still serves a deleted store after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When the LISTEN connection drops, a replica reconnects and forgets what it cached: a version
/// registered while it was not listening is still served within seconds, not after the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_from_a_lost_change_feed() {
    use sqlx::Connection;
    let Some(a) = TestServer::start_postgres().await else { return };
    let a = a.restart_with(|c| c.cache.current_version_ttl_ms = 60_000).await;
    a.local_store().await;
    let b = a.replica(|c| c.cache.current_version_ttl_ms = 60_000).await;
    version(&a, "/api/v1/stores/n", &doc(&a, "one", 1.0, true)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.get("/n/x/c/0", &[]).await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "replica b never served the store");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut admin = sqlx::PgConnection::connect(&a.state.config.database_url).await.unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "select pg_terminate_backend(pid) from pg_stat_activity \
         where datname = current_database() and query ilike 'listen%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(killed.len() >= 2, "both replicas were listening: {killed:?}");
    let second = version(&a, "/api/v1/stores/n", &doc(&a, "two", 50.0, true)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = b.get("/n/x/c/0", &[]).await;
        if r.headers()["zarrgate-version"] == second.to_string().as_str() {
            assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([50.0, 51.0, 52.0, 53.0]));
            break;
        }
        assert!(Instant::now() < deadline, "replica b never learned of the version made while it was not listening");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica that still believes in a version retention has deleted looks again; it never
/// answers from the deleted version's absence (a 404 that clients would read as fill values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_version_is_never_read_as_fill_values() {
    let a = TestServer::start_with(Backend::Sqlite, |c| {
        c.cache.current_version_ttl_ms = 60_000;
        c.retention.keep_versions = 1;
        c.retention.keep_seconds = 0;
    })
    .await;
    a.local_store().await;
    let b = a.replica(|_| {}).await;
    let first = version(&a, "/api/v1/stores/n", &doc(&a, "one", 1.0, true)).await;
    // b caches the version and its metadata, not yet any block.
    assert_eq!(b.get("/n/x/zarr.json", &[]).await.status(), StatusCode::OK);
    let second = version(&a, "/api/v1/stores/n", &doc(&a, "two", 50.0, true)).await;
    let r = b.get("/n/x/c/0", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["zarrgate-version"], second.to_string().as_str());
    assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([50.0, 51.0, 52.0, 53.0]));
    assert_eq!(b.get(&format!("/n@{first}/x/c/1"), &[]).await.status(), StatusCode::GONE);
}

/// Without NOTIFY (SQLite), replicas agree once the current-version TTL has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replicas_agree_after_the_ttl() {
    let a = TestServer::start_with(Backend::Sqlite, |c| c.cache.current_version_ttl_ms = 300).await;
    a.local_store().await;
    let b = a.replica(|_| {}).await;
    version(&a, "/api/v1/stores/n", &doc(&a, "one", 1.0, true)).await;
    assert_eq!(b.bytes("/n/x/c/0").await, f32_bytes([1.0, 2.0, 3.0, 4.0]));
    version(&a, "/api/v1/stores/n", &doc(&a, "two", 50.0, true)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Every read, whichever worker thread answers it (each keeps heads of its own).
    for _ in 0..8 {
        assert_eq!(b.bytes("/n/x/c/0").await, f32_bytes([50.0, 51.0, 52.0, 53.0]));
    }
}

/// The same content registered again is a new version: its `zarr.json` gets a new ETag (so a
/// revalidating cache picks up the new `Zarrgate-Version`), its unchanged chunks keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_etags_name_the_version_chunk_etags_do_not() {
    let server = TestServer::start(Backend::Sqlite).await;
    server.local_store().await;
    let body = doc(&server, "same", 1.0, true);
    version(&server, "/api/v1/stores/e", &body).await;
    let meta = server.get("/e/x/zarr.json", &[]).await.headers()["etag"].clone();
    let chunk = server.get("/e/x/c/0", &[]).await.headers()["etag"].clone();
    version(&server, "/api/v1/stores/e", &body).await;
    let r = server.get("/e/x/zarr.json", &[("if-none-match", meta.to_str().unwrap())]).await;
    assert_eq!(r.status(), StatusCode::OK, "the old version's ETag no longer matches");
    assert_ne!(r.headers()["etag"], meta);
    assert_eq!(server.get("/e/x/c/0", &[]).await.headers()["etag"], chunk);
}

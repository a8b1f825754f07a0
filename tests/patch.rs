//! Incremental updates: PATCH appends and replaces references, changes metadata, adds and
//! deletes nodes, and rewrites only the blocks it touches.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;

/// Rows of 2 floats; row `t` holds `t` and `t + 0.5`, at byte `8 * t` of `series.bin`.
fn series(server: &TestServer, rows: u64) -> String {
    server.write("series.bin", &f32_bytes((0..rows).flat_map(|t| [t as f32, t as f32 + 0.5])))
}

fn row_ref(path: &str, t: u64) -> Value {
    json!({"path": path, "offset": 8 * t, "length": 8})
}

async fn patch(server: &TestServer, name: &str, body: &Value) -> (StatusCode, Value) {
    let r = server.client.patch(format!("{}/api/v1/stores/{name}", server.url)).json(body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Block rows in the catalog (every version, every store).
async fn block_rows(server: &TestServer) -> i64 {
    let url = server.state.config.database_url.clone();
    match server.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query_scalar("select count(*) from blocks").fetch_one(&mut c).await.unwrap()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar("select count(*) from blocks").fetch_one(&mut c).await.unwrap()
        }
    }
}

both_backends! {
    async fn appending_rewrites_only_the_last_block(server) {
        // Blocks of 4 chunks: an array of 16 rows is 4 blocks.
        let server = server.restart_with(|c| c.block_chunks = 4).await;
        server.local_store().await;
        let path = series(&server, 20);
        let manifest: serde_json::Map<String, Value> = (0..14).map(|t| (format!("{t}.0"), row_ref(&path, t))).collect();
        let doc = json!({"nodes": {"t": f32_array(&[14, 2], &[1, 2], json!({"manifest": manifest}))}});
        let (status, body) = server.put("/api/v1/stores/s", &doc).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let first = body["version"].as_i64().unwrap();
        assert_eq!(block_rows(&server).await, 4);

        // The next 6 rows: the last, partial block (rows 12..16) and one new block (16..20).
        let appended: serde_json::Map<String, Value> = (14..20).map(|t| (format!("{t}.0"), row_ref(&path, t))).collect();
        let (status, body) = patch(&server, "s", &json!({"nodes": {"t": {"shape": [20, 2], "manifest": appended}}})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["chunks"], json!({"virtual": 20, "inline": 0, "assembled": 0, "missing": 0}));
        assert_eq!(block_rows(&server).await, 6, "three blocks shared, one rewritten, one new");
        for t in [0u64, 13, 14, 19] {
            assert_eq!(server.bytes(&format!("/s/t/c/{t}/0")).await, f32_bytes([t as f32, t as f32 + 0.5]), "row {t}");
        }
        let meta: Value = server.get("/s/t/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(meta["shape"], json!([20, 2]));
        assert_eq!(meta["dimension_names"], json!(["d0", "d1"]), "keys not given are kept");
        assert_eq!(server.get(&format!("/s@{first}/t/c/14/0"), &[]).await.status(), StatusCode::NOT_FOUND, "the old version is unchanged");
        assert_eq!(server.bytes(&format!("/s@{first}/t/c/13/0")).await, f32_bytes([13.0, 13.5]));
    }

    async fn replaces_clears_adds_and_deletes(server) {
        server.local_store().await;
        let path = series(&server, 8);
        let doc = json!({"nodes": {
            "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "before"}},
            "t": f32_array(&[4, 2], &[1, 2], json!({"manifest": {"0.0": row_ref(&path, 0), "1.0": row_ref(&path, 1), "2.0": row_ref(&path, 2)}})),
            "old": f32_array(&[1], &[1], json!({"manifest": {"0": {"data": "AACAPw=="}}})),
        }});
        assert_eq!(server.put("/api/v1/stores/s", &doc).await.0, StatusCode::CREATED);
        let (status, body) = patch(&server, "s", &json!({
            "nodes": {
                "": {"attributes": {"title": "after"}},
                "t": {"manifest": {"0.0": row_ref(&path, 7), "1.0": {"path": ""}}},
                "new/x": f32_array(&[2], &[2], json!({"manifest": {"0": {"data": "AAAAQAAAQEA="}}})),
            },
            "delete": ["old"],
        })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["chunks"]["virtual"], 2);
        assert_eq!(body["chunks"]["inline"], 1);
        assert_eq!(body["arrays"], 2);
        assert_eq!(server.bytes("/s/t/c/0/0").await, f32_bytes([7.0, 7.5]), "replaced");
        assert_eq!(server.get("/s/t/c/1/0", &[]).await.status(), StatusCode::NOT_FOUND, "cleared");
        assert_eq!(server.bytes("/s/t/c/2/0").await, f32_bytes([2.0, 2.5]), "untouched");
        assert_eq!(server.bytes("/s/new/x/c/0").await, f32_bytes([2.0, 3.0]));
        assert_eq!(server.get("/s/old/zarr.json", &[]).await.status(), StatusCode::NOT_FOUND);
        let root: Value = server.get("/s/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(root["attributes"]["title"], "after");
        let listed: Vec<&str> = root["consolidated_metadata"]["metadata"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(listed, ["new", "new/x", "t"]);
        let exported: Value = server.get("/api/v1/stores/s/manifest", &[]).await.json().await.unwrap();
        assert_eq!(exported["nodes"]["t"]["manifest"].as_object().unwrap().len(), 2);
    }

    async fn reshaping_across_tiles_rebuilds_the_array(server) {
        let start = |server: common::TestServer, memory_bytes: u64| async move {
            let server = server.restart_with(|c| { c.block_chunks = 4; c.ingest.memory_bytes = memory_bytes; }).await;
            server.local_store().await;
            let path = series(&server, 8);
            let doc = json!({"nodes": {"t": f32_array(&[4, 2], &[1, 1], json!({"manifest": {"0.0": {"path": path, "offset": 0, "length": 4}, "3.1": {"path": path, "offset": 28, "length": 4}}}))}});
            assert_eq!(server.put("/api/v1/stores/s", &doc).await.0, StatusCode::CREATED);
            // Twice as many columns: the tiles are renumbered, the old references moved.
            let reshape = json!({"nodes": {"t": {"shape": [4, 4], "manifest": {"3.3": {"path": path, "offset": 4, "length": 4}}}}});
            (server, reshape)
        };
        // Memory for one old reference only (ingest.memory_bytes / 300): refused, nothing changed.
        let (server, reshape) = start(server, 300).await;
        let (status, body) = patch(&server, "s", &reshape).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["problems"][0].as_str().unwrap().contains("register the whole store again with PUT"), "{body}");
        assert_eq!(server.get("/s/t/c/3/3", &[]).await.status(), StatusCode::NOT_FOUND, "nothing changed");

        let (server, reshape) = start(server, 1 << 20).await;
        let (status, body) = patch(&server, "s", &reshape).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(server.bytes("/s/t/c/0/0").await, f32_bytes([0.0]));
        assert_eq!(server.bytes("/s/t/c/3/1").await, f32_bytes([3.5]));
        assert_eq!(server.bytes("/s/t/c/3/3").await, f32_bytes([0.5]));
        assert_eq!(body["chunks"]["virtual"], 3);
        assert_eq!(body["chunks"]["missing"], 13);
    }

    async fn bad_patches_change_nothing(server) {
        server.local_store().await;
        let path = series(&server, 4);
        let doc = json!({"nodes": {"t": f32_array(&[4, 2], &[1, 2], json!({"manifest": {"0.0": row_ref(&path, 0), "3.0": row_ref(&path, 3)}}))}});
        let (_, body) = server.put("/api/v1/stores/s", &doc).await;
        let version = body["version"].clone();
        for (bad, expected) in [
            (json!({"nodes": {"t": {"manifest": {"9.0": row_ref(&path, 0)}}}}), "outside the chunk grid"),
            (json!({"nodes": {"t": {"node_type": "group"}}}), "node_type cannot change"),
            (json!({"nodes": {"t": {"shape": [2, 2]}}}), "lies outside the new chunk grid"),
            (json!({"nodes": {"t": {"manifest": {"1.0": {"path": "/elsewhere/x", "offset": 0, "length": 8}}}}}), "not under any registered object store"),
            (json!({"nodes": {"n": {"zarr_format": 3, "node_type": "array"}}}), "node n"),
            (json!({"nodes": {}, "delete": ["ghost"]}), "no such node"),
        ] {
            let (status, body) = patch(&server, "s", &bad).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
            assert!(body["problems"].to_string().contains(expected), "{bad}: {body}");
        }
        // Shrinking works once the references beyond the new shape are cleared.
        let (status, body) = patch(&server, "s", &json!({"nodes": {"t": {"shape": [2, 2], "manifest": {"3.0": {"path": ""}}}}})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_ne!(body["version"], version);
        assert_eq!(patch(&server, "nothing", &json!({"nodes": {}})).await.0, StatusCode::NOT_FOUND);
    }

    async fn a_source_changed_since_registration_is_refused(server) {
        server.local_store().await;
        let path = series(&server, 4);
        let doc = json!({"nodes": {"t": f32_array(&[4, 2], &[1, 2], json!({"manifest": {"0.0": row_ref(&path, 0), "1.0": row_ref(&path, 1)}}))}});
        let (status, body) = server.put("/api/v1/stores/s", &doc).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let version = body["version"].clone();
        // Unchanged, the source can take more references; they are read as the old ones are.
        let (status, body) = patch(&server, "s", &json!({"nodes": {"t": {"manifest": {"2.0": row_ref(&path, 2)}}}})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(server.bytes("/s/t/c/2/0").await, f32_bytes([2.0, 2.5]));
        assert_ne!(body["version"], version);
        let version = body["version"].clone();
        // The file grows in place: its size and ETag change, and a PATCH using it is refused.
        std::thread::sleep(std::time::Duration::from_millis(20));
        series(&server, 6);
        let (status, body) = patch(&server, "s", &json!({"nodes": {"t": {"shape": [6, 2], "manifest": {"4.0": row_ref(&path, 4)}}}})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["problems"].to_string().contains(&format!("changed since version {version} was registered")), "{body}");
        let summary: Value = server.get("/api/v1/stores/s", &[]).await.json().await.unwrap();
        assert_eq!(summary["version"], version, "nothing changed");
    }

    async fn sources_added_without_verification_still_pin_their_object_store(server) {
        server.local_store().await;
        let path = series(&server, 4);
        let doc = json!({"nodes": {"t": f32_array(&[4, 2], &[1, 2], json!({"manifest": {"0.0": row_ref(&path, 0)}}))}});
        assert_eq!(server.put("/api/v1/stores/s", &doc).await.0, StatusCode::CREATED);
        // A second object store, used only by what a PATCH adds without asking the source.
        let other = server.write("daily/day2.bin", &f32_bytes([7.0, 7.5]));
        let dir = url::Url::from_directory_path(server.data.join("daily")).unwrap();
        assert_eq!(server.put("/api/v1/object-stores/daily", &json!({"url": dir.as_str()})).await.0, StatusCode::CREATED);
        let r = server
            .client
            .patch(format!("{}/api/v1/stores/s?verify=false", server.url))
            .json(&json!({"nodes": {"t": {"manifest": {"1.0": {"path": other, "offset": 0, "length": 8}}}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let summary: Value = r.json().await.unwrap();
        assert_eq!(summary["sources"], 2, "{summary}");
        assert_eq!(server.bytes("/s/t/c/1/0").await, f32_bytes([7.0, 7.5]));
        // Removing that object store would break the store: refused, and nothing changes.
        assert_eq!(server.delete("/api/v1/object-stores/daily").await, StatusCode::CONFLICT);
        assert_eq!(server.bytes("/s/t/c/1/0").await, f32_bytes([7.0, 7.5]));
    }
}

/// One float32 value as the base64 of an inline chunk.
fn inline_f32(value: f32) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(f32_bytes([value]))
}

/// Appends `value` to the 1-d array `t` of store `s` as a concurrent writer must: read the
/// store's ETag, the array's shape in that very version (pinned), PATCH with `If-Match`, and on
/// `412` start again. How many times it was refused.
async fn append(server: &TestServer, value: f32) -> u32 {
    let mut refused = 0;
    loop {
        let r = server.get("/api/v1/stores/s", &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        let tag = r.headers()["etag"].to_str().unwrap().to_owned();
        let version: i64 = tag.trim_matches('"').trim_start_matches('v').parse().unwrap();
        let meta: Value = server.get(&format!("/s@{version}/t/zarr.json"), &[]).await.json().await.unwrap();
        let n = meta["shape"][0].as_u64().unwrap();
        let body =
            json!({"nodes": {"t": {"shape": [n + 1], "manifest": {n.to_string(): {"data": inline_f32(value)}}}}});
        let url = format!("{}/api/v1/stores/s", server.url);
        let r = server.client.patch(url).header("if-match", &tag).json(&body).send().await.unwrap();
        match r.status() {
            StatusCode::OK => {
                let new_tag = r.headers()["etag"].to_str().unwrap().to_owned();
                let answer: Value = r.json().await.unwrap();
                assert_eq!(new_tag, format!("\"v{}\"", answer["version"]), "the 200 carries the new version's ETag");
                return refused;
            }
            StatusCode::PRECONDITION_FAILED => refused += 1,
            other => panic!("PATCH answered {other}: {}", r.text().await.unwrap()),
        }
    }
}

both_backends! {
    // Six writers append 15 values each to one array: with If-Match and a retry on 412, every
    // append lands (without it, two PATCHes made from the same version both succeeded and the
    // later replaced the earlier's chunk: shapes of 31 to 35 instead of 91).
    async fn concurrent_appends_with_if_match_all_land(server) {
        let server = std::sync::Arc::new(server);
        let doc = json!({"nodes": {"t": f32_array(&[1], &[1], json!({"manifest": {"0": {"data": inline_f32(-1.0)}}}))}});
        assert_eq!(server.put("/api/v1/stores/s", &doc).await.0, StatusCode::CREATED);
        let writers: Vec<_> = (0..6)
            .map(|w| {
                let server = server.clone();
                tokio::spawn(async move {
                    let mut refused = 0;
                    for i in 0..15 {
                        refused += append(&server, (w * 100 + i) as f32).await;
                    }
                    refused
                })
            })
            .collect();
        let mut refused = 0;
        for w in writers {
            refused += w.await.unwrap();
        }
        let meta: Value = server.get("/s/t/zarr.json", &[]).await.json().await.unwrap();
        eprintln!("90 appends, {refused} refused with 412 and sent again");
        assert_eq!(meta["shape"], json!([91]), "every append landed");
        let mut values = Vec::new();
        for k in 0..91 {
            let bytes = server.bytes(&format!("/s/t/c/{k}")).await;
            values.push(f32::from_le_bytes(bytes.try_into().unwrap()) as i32);
        }
        values.sort_unstable();
        let mut expected: Vec<i32> = (0..6).flat_map(|w| (0..15).map(move |i| w * 100 + i)).collect();
        expected.push(-1);
        expected.sort_unstable();
        assert_eq!(values, expected, "each value once, none replaced by another");
    }

    async fn a_stale_precondition_is_refused_and_changes_nothing(server) {
        let doc = json!({"nodes": {"t": f32_array(&[1], &[1], json!({"manifest": {"0": {"data": inline_f32(1.0)}}}))}});
        let created = server.client.put(format!("{}/api/v1/stores/s", server.url)).header("if-none-match", "*")
            .json(&doc).send().await.unwrap();
        assert_eq!(created.status(), StatusCode::CREATED, "If-None-Match: * creates a store that does not exist");
        let first = created.headers()["etag"].to_str().unwrap().to_owned();
        let grow = json!({"nodes": {"t": {"shape": [2], "manifest": {"1": {"data": inline_f32(2.0)}}}}});
        let r = server.client.patch(format!("{}/api/v1/stores/s", server.url)).header("if-match", &first)
            .json(&grow).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let second = r.headers()["etag"].to_str().unwrap().to_owned();
        let described = server.get("/api/v1/stores/s", &[]).await;
        assert_eq!(described.headers()["etag"].to_str().unwrap(), second);
        assert_ne!(first, second);

        // The first ETag is stale now: a PATCH, a PUT and a create-only PUT are all refused.
        let refusals = [
            server.client.patch(format!("{}/api/v1/stores/s", server.url)).header("if-match", &first).json(&grow),
            server.client.put(format!("{}/api/v1/stores/s", server.url)).header("if-match", &first).json(&doc),
            server.client.put(format!("{}/api/v1/stores/s", server.url)).header("if-none-match", "*").json(&doc),
        ];
        for request in refusals {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::PRECONDITION_FAILED);
            assert_eq!(r.headers()["content-type"], "application/problem+json");
            let problem: Value = r.json().await.unwrap();
            assert_eq!(problem["type"], "urn:zarrgate:problem:precondition-failed");
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains(&format!("is at version {}", second.trim_matches('"').trim_start_matches('v'))), "{detail}");
            assert!(detail.contains("nothing was changed"), "{detail}");
        }
        let after = server.get("/api/v1/stores/s", &[]).await;
        assert_eq!(after.headers()["etag"].to_str().unwrap(), second, "no version was written");
        let meta: Value = server.get("/s/t/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(meta["shape"], json!([2]));
        assert_eq!(server.bytes("/s/t/c/1").await, f32_bytes([2.0]));

        // If-Match on a store that does not exist, and a malformed one.
        let r = server.client.put(format!("{}/api/v1/stores/none", server.url)).header("if-match", "\"v1\"")
            .json(&doc).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::PRECONDITION_FAILED);
        assert_eq!(server.get("/api/v1/stores/none", &[]).await.status(), StatusCode::NOT_FOUND, "nothing was created");
        let r = server.client.patch(format!("{}/api/v1/stores/s", server.url)).header("if-match", "7")
            .json(&grow).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(r.text().await.unwrap().contains("\\\"v12\\\" for version 12"));
    }
}

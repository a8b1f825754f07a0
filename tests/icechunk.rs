//! Icechunk registrations refused: each names what is wrong, and nothing is stored. (The
//! repositories Icechunk 1.x and 2.x write are served in tests/python/test_icechunk.py.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A PUT `?format=icechunk` of `body` that must be refused with `status`: its problem as text,
/// after checking that the store was not created.
async fn refused(server: &TestServer, body: Value, status: StatusCode) -> String {
    let (got, problem) = server.put("/api/v1/stores/ice?format=icechunk", &body).await;
    assert_eq!(got, status, "{problem}");
    let described = server.get("/api/v1/stores/ice", &[]).await;
    assert_eq!(described.status(), StatusCode::NOT_FOUND, "a refused registration stored something");
    problem.to_string()
}

/// The header of an Icechunk metadata file: magic, implementation name, spec version, file
/// type, compression (none).
fn header(version: u8, file_type: u8) -> Vec<u8> {
    let mut out = "ICE🧊CHUNK".as_bytes().to_vec();
    out.extend_from_slice(format!("{:<24}", "ic-test").as_bytes());
    out.extend_from_slice(&[version, file_type, 0]);
    out
}

both_backends! {
    async fn bad_icechunk_registrations_name_what_is_wrong(server) {
        server.local_store().await;
        let root = url::Url::from_directory_path(&server.data).unwrap();
        let repo = |name: &str| format!("{root}{name}");

        // Not a registration body.
        refused(&server, json!({"repository": repo("r"), "branch": "main", "tag": "v1"}), StatusCode::BAD_REQUEST).await;
        refused(&server, json!({"repository": repo("r"), "snapshot": "nope"}), StatusCode::BAD_REQUEST).await;
        refused(&server, json!({"repo": repo("r")}), StatusCode::BAD_REQUEST).await;
        let said = refused(&server, json!({"repository": repo("r"), "tag": "v1", "follow_seconds": 5}), StatusCode::BAD_REQUEST).await;
        assert!(said.contains("follow_seconds"), "{said}");

        // Outside every registered object store.
        let said = refused(&server, json!({"repository": "file:///nowhere/repo"}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains("repository file:///nowhere/repo is not under any registered object store"), "{said}");

        // No repository there.
        server.write("empty/readme.txt", b"not a repository");
        let said = refused(&server, json!({"repository": repo("empty")}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains("holds no Icechunk repository"), "{said}");

        // A format-1 repository whose branch main names a snapshot that is not there, and no
        // branch dev.
        server.write("v1/refs/branch.main/ref.json", br#"{"snapshot": "1CECHNKREP0F1RSTCMT0"}"#);
        let said = refused(&server, json!({"repository": repo("v1"), "branch": "dev"}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains(r#"has no branch \"dev\""#), "{said}");
        let said = refused(&server, json!({"repository": repo("v1"), "tag": "v9"}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains(r#"has no tag \"v9\""#), "{said}");
        let said = refused(&server, json!({"repository": repo("v1")}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains("has no snapshot 1CECHNKREP0F1RSTCMT0"), "{said}");

        // A format this server does not read, and a file that is not Icechunk's.
        let mut future = header(9, 6);
        future.extend_from_slice(b"whatever");
        server.write("future/repo", &future);
        let said = refused(&server, json!({"repository": repo("future")}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains("Icechunk format version 9, which this server does not read"), "{said}");
        server.write("garbage/repo", b"{\"this is\": \"not icechunk\"}");
        let said = refused(&server, json!({"repository": repo("garbage")}), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(said.contains("is not an Icechunk"), "{said}");

        // Only Icechunk stores sync.
        let native = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}}}});
        let (status, _) = server.put("/api/v1/stores/plain", &native).await;
        assert_eq!(status, StatusCode::CREATED);
        let r = server.client.post(format!("{}/api/v1/stores/plain/sync", server.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert!(r.text().await.unwrap().contains("not registered from an Icechunk repository"));
        let r = server.client.post(format!("{}/api/v1/stores/absent/sync", server.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
}

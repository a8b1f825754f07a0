//! The REST control plane: registration, listing, export, deletion, object stores, auth, and
//! bad input that must change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A store with array `x` of 8 floats in chunks of 2: chunk 0 and 1 virtual, chunk 3 inline.
async fn demo(server: &common::TestServer, name: &str, base: f32) -> Value {
    let path = server.write(&format!("{name}.bin"), &f32_bytes((0..4).map(|i| base + i as f32)));
    json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": name}},
        "x": f32_array(&[8], &[2], json!({"manifest": {
            "0": {"path": path, "offset": 0, "length": 8},
            "1": {"path": path, "offset": 8, "length": 8},
            "3": {"data": "AAAgQQAAMEE="}
        }}))
    }})
}

both_backends! {
    async fn registers_replaces_lists_and_deletes(server) {
        server.local_store().await;
        let (status, body) = server.put("/api/v1/stores/alpha", &demo(&server, "alpha", 0.0).await).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["chunks"], json!({"virtual": 2, "inline": 1, "assembled": 0, "missing": 1}));
        assert_eq!((body["arrays"].as_u64(), body["groups"].as_u64(), body["referenced_bytes"].as_u64()), (Some(1), Some(1), Some(16)));
        let first = body["version"].as_i64().unwrap();
        assert_eq!(server.bytes("/alpha/x/c/1").await, f32_bytes([2.0, 3.0]));

        let (status, body) = server.put("/api/v1/stores/alpha", &demo(&server, "alpha2", 100.0).await).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["version"].as_i64().unwrap() > first);
        assert_eq!(server.bytes("/alpha/x/c/1").await, f32_bytes([102.0, 103.0]));

        for name in ["beta", "gamma"] {
            let (status, _) = server.put(&format!("/api/v1/stores/{name}"), &demo(&server, name, 0.0).await).await;
            assert_eq!(status, StatusCode::CREATED);
        }
        let page: Value = server.get("/api/v1/stores?limit=2", &[]).await.json().await.unwrap();
        let names: Vec<&str> = page["stores"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        assert_eq!(page["next"], "beta");
        let rest: Value = server.get("/api/v1/stores?limit=2&after=beta", &[]).await.json().await.unwrap();
        assert_eq!(rest["stores"][0]["name"], "gamma");
        assert_eq!(rest["next"], Value::Null);

        let one: Value = server.get("/api/v1/stores/beta", &[]).await.json().await.unwrap();
        assert_eq!(one["url"], "/beta");
        assert_eq!(server.delete("/api/v1/stores/beta").await, StatusCode::NO_CONTENT);
        assert_eq!(server.get("/beta/zarr.json", &[]).await.status(), StatusCode::GONE);
        assert_eq!(server.delete("/api/v1/stores/beta").await, StatusCode::NOT_FOUND);
        assert_eq!(server.get("/api/v1/stores/beta", &[]).await.status(), StatusCode::NOT_FOUND);
    }

    async fn export_round_trips(server) {
        server.local_store().await;
        let mut doc = demo(&server, "orig", 5.0).await;
        doc["nodes"]["g/sub/y"] = f32_array(&[3, 4], &[2, 2], json!({"manifest": {"1.1": {"data": "AACAPwAAgD8AAIA/AACAPw=="}}}));
        doc["nodes"]["scalar"] = f32_array(&[], &[], json!({"manifest": {"": {"data": "AADAPw=="}}}));
        assert_eq!(server.put("/api/v1/stores/orig", &doc).await.0, StatusCode::CREATED);
        let exported: Value = server.get("/api/v1/stores/orig/manifest", &[]).await.json().await.unwrap();
        let (status, body) = server.put("/api/v1/stores/copy", &exported).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        for key in ["zarr.json", "x/zarr.json", "x/c/0", "x/c/1", "x/c/3", "g/zarr.json", "g/sub/zarr.json", "g/sub/y/c/1/1", "scalar/c"] {
            assert_eq!(server.bytes(&format!("/orig/{key}")).await, server.bytes(&format!("/copy/{key}")).await, "{key}");
        }
        assert_eq!(server.get("/copy/x/c/2", &[]).await.status(), StatusCode::NOT_FOUND);
        let again: Value = server.get("/api/v1/stores/copy/manifest", &[]).await.json().await.unwrap();
        assert_eq!(again, exported, "exporting the re-registered store gives the same document");
    }

    async fn bad_input_changes_nothing(server) {
        server.local_store().await;
        let good = demo(&server, "good", 1.0).await;
        assert_eq!(server.put("/api/v1/stores/s", &good).await.0, StatusCode::CREATED);
        let before = server.bytes("/s/x/c/0").await;
        let version = server.get("/s/zarr.json", &[]).await.headers()["zarrgate-version"].to_str().unwrap().to_owned();

        // An unregistered URL, named in the answer.
        let mut outside = good.clone();
        outside["nodes"]["x"]["manifest"]["2"] = json!({"path": "/elsewhere/secret.nc", "offset": 0, "length": 8});
        let (status, body) = server.put("/api/v1/stores/s", &outside).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(body["problems"][0].as_str().unwrap().contains("file:///elsewhere/secret.nc is not under any registered object store"), "{body}");
        assert_eq!(body["type"], "urn:zarrgate:problem:invalid");

        // A key outside the grid, with the grid in the message.
        let mut outside_grid = good.clone();
        outside_grid["nodes"]["x"]["manifest"]["4"] = json!({"data": "AAAAAAAAAAA="});
        let (status, body) = server.put("/api/v1/stores/s", &outside_grid).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(body["problems"][0].as_str().unwrap().contains("chunk key \"4\" is outside the chunk grid [4] of array x") || body.to_string().contains("outside the chunk grid [4]"), "{body}");

        // Several problems at once are all listed.
        let mut many = good.clone();
        many["nodes"]["x"]["manifest"]["9"] = json!({"data": "!!"});
        many["nodes"]["x"]["codecs"] = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "nope"}]);
        let (status, body) = server.put("/api/v1/stores/s", &many).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(body["problems"].as_array().unwrap().len() >= 2, "{body}");

        // Malformed JSON: the body cannot be understood (tests/bad_input.rs has every cause).
        let (status, body) = server.put_raw("/api/v1/stores/s", b"{\"nodes\": {".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("line 1"), "{body}");

        // A bad store name.
        let (status, body) = server.put("/api/v1/stores/Bad%20Name", &good).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        // The previous version still serves, unchanged.
        assert_eq!(server.bytes("/s/x/c/0").await, before);
        let now = server.get("/s/zarr.json", &[]).await.headers()["zarrgate-version"].to_str().unwrap().to_owned();
        assert_eq!(now, version);
        let listed: Value = server.get("/api/v1/stores", &[]).await.json().await.unwrap();
        assert_eq!(listed["stores"].as_array().unwrap().len(), 1);
    }

    async fn a_bad_token_changes_nothing(server) {
        server.local_store().await;
        let (status, body) = server.put("/api/v1/stores/s", &demo(&server, "s", 0.0).await).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let version = body["version"].clone();
        let token = "the-right-admin-token";
        let guarded = server.replica(|c| c.admin_tokens = vec![token.into()]).await;
        let replacement = demo(&server, "t", 100.0).await;
        for auth in [None, Some("Bearer not-the-right-token"), Some("Basic dXNlcjpwYXNz")] {
            let mut put = guarded.client.put(format!("{}/api/v1/stores/s", guarded.url)).json(&replacement);
            let mut delete = guarded.client.delete(format!("{}/api/v1/stores/s", guarded.url));
            if let Some(auth) = auth {
                put = put.header("authorization", auth);
                delete = delete.header("authorization", auth);
            }
            assert_eq!(put.send().await.unwrap().status(), StatusCode::UNAUTHORIZED, "{auth:?}");
            assert_eq!(delete.send().await.unwrap().status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        }
        assert_eq!(guarded.bytes("/s/x/c/1").await, f32_bytes([2.0, 3.0]), "the previous version still serves");
        let described: Value = guarded.client.get(format!("{}/api/v1/stores/s", guarded.url)).bearer_auth(token).send().await.unwrap().json().await.unwrap();
        assert_eq!(described["version"], version);
        let r = guarded.client.put(format!("{}/api/v1/stores/s", guarded.url)).bearer_auth(token).json(&replacement).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "the right token works");
    }

    async fn object_stores_are_managed_and_secrets_never_returned(server) {
        let (status, body) = server.put("/api/v1/object-stores/era5", &json!({
            "url": "s3://era5-bucket/reanalysis", "options": {"region": "eu-west-1", "secret_access_key": "SUPERSECRET", "access_key_id": "AKIA"}
        })).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["url"], "s3://era5-bucket/reanalysis/");
        assert_eq!(body["options"]["secret_access_key"], "***");
        let (status, _) = server.put("/api/v1/object-stores/era5", &json!({"url": "s3://era5-bucket/reanalysis/", "options": {"region": "eu-west-2"}})).await;
        assert_eq!(status, StatusCode::OK);
        let listed = server.get("/api/v1/object-stores", &[]).await.text().await.unwrap();
        assert!(!listed.contains("SUPERSECRET") && listed.contains("eu-west-2"), "{listed}");

        let (status, body) = server.put("/api/v1/object-stores/bad", &json!({"url": "s3://b/", "options": {"regoin": "x"}})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(body["detail"].as_str().unwrap().contains("unknown s3 option \"regoin\""), "{body}");
        let (status, body) = server.put("/api/v1/object-stores/dup", &json!({"url": "s3://era5-bucket/reanalysis/"})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        let (status, body) = server.put("/api/v1/object-stores/creds", &json!({"url": "https://me:hunter2@data.example.org/"})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("must not carry credentials") && !body.to_string().contains("hunter2"), "{body}");
        // A local directory has no timeouts to set: an option there is refused, not ignored.
        let local = url::Url::from_directory_path(&server.data).unwrap();
        let (status, body) = server.put("/api/v1/object-stores/slow", &json!({"url": local.as_str(), "options": {"first_byte_timeout": "2s"}})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("file:// object stores take no options"), "{body}");
        assert_eq!(server.get("/api/v1/object-stores/slow", &[]).await.status(), StatusCode::NOT_FOUND);

        // An object store in use cannot be removed.
        server.local_store().await;
        assert_eq!(server.put("/api/v1/stores/s", &demo(&server, "s", 0.0).await).await.0, StatusCode::CREATED);
        assert_eq!(server.delete("/api/v1/object-stores/local").await, StatusCode::CONFLICT);
        assert_eq!(server.delete("/api/v1/stores/s").await, StatusCode::NO_CONTENT);
        assert_eq!(server.delete("/api/v1/object-stores/local").await, StatusCode::NO_CONTENT);
        assert_eq!(server.delete("/api/v1/object-stores/era5").await, StatusCode::NO_CONTENT);
        assert_eq!(server.delete("/api/v1/object-stores/era5").await, StatusCode::NOT_FOUND);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_the_control_plane_only() {
    let token = "an-admin-token-of-some-length";
    let server = common::TestServer::start_with(common::Backend::Sqlite, |c| c.admin_tokens = vec![token.into()]).await;
    let r = server.client.get(format!("{}/api/v1/stores", server.url)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let r = server
        .client
        .get(format!("{}/api/v1/stores", server.url))
        .bearer_auth("wrong-token-of-some-length")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = server.client.get(format!("{}/api/v1/stores", server.url)).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let url = url::Url::from_directory_path(&server.data).unwrap();
    let r = server
        .client
        .put(format!("{}/api/v1/object-stores/local", server.url))
        .json(&json!({"url": url.as_str()}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "writes need the token too");
    // The data plane and ops stay public.
    assert_eq!(server.get("/healthz", &[]).await.status(), StatusCode::OK);
    assert_eq!(server.get("/nothing/zarr.json", &[]).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(server.get("/api/v1/openapi.json", &[]).await.status(), StatusCode::UNAUTHORIZED, "every /api/v1 call");
    let auth = format!("Bearer {token}");
    assert_eq!(server.get("/api/v1/openapi.json", &[("authorization", &auth)]).await.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_object_stores_can_be_kept_off_the_api() {
    let server = common::TestServer::start_with(common::Backend::Sqlite, |c| c.allow_file_object_stores = false).await;
    let url = url::Url::from_directory_path(&server.data).unwrap();
    // The URL parser drops leading control characters and tabs anywhere: these are file:// too.
    let disguised = [
        url.to_string(),
        format!("\u{1}{url}"),
        format!("f\til{}", url.as_str().trim_start_matches("fil")),
        url.as_str().to_uppercase().replacen("FILE", "FiLe", 1),
    ];
    for url in disguised {
        let (status, body) = server.put("/api/v1/object-stores/local", &json!({"url": url})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{url:?}: {body}");
        assert!(body["detail"].as_str().unwrap().contains("allow_file_object_stores = false"), "{body}");
    }
    let listed: Value = server.get("/api/v1/object-stores", &[]).await.json().await.unwrap();
    assert_eq!(listed["object_stores"], json!([]), "nothing was registered: {listed}");
    let (status, _) = server
        .put("/api/v1/object-stores/s3", &json!({"url": "s3://bucket/", "options": {"region": "eu-west-1"}}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "other schemes still can");
}

/// Whoever holds an admin token gets no more than the options give: no builder key that makes
/// the server read its own files or fetch credentials from a host of the caller's choosing, and
/// no borrowing of the server's cloud identity by a store without credentials. A refused store
/// is not registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_options_cannot_reach_beyond_the_store() {
    let server = common::TestServer::start(common::Backend::Sqlite).await;
    let refused = [
        (
            "s3://b/",
            json!({"container_credentials_full_uri": "http://attacker/", "container_authorization_token_file": "/var/run/secrets/token"}),
            "container_credentials_full_uri",
        ),
        (
            "s3://b/",
            json!({"web_identity_token_file": "/etc/passwd", "role_arn": "arn:aws:iam::1:role/r"}),
            "web_identity_token_file",
        ),
        ("s3://b/", json!({"metadata_endpoint": "http://10.0.0.1/"}), "metadata_endpoint"),
        (
            "gs://b/",
            json!({"google_application_credentials": "/etc/zarrgate/sa.json"}),
            "google_application_credentials",
        ),
        ("az://c/", json!({"account_name": "a", "federated_token_file": "/var/run/token"}), "federated_token_file"),
        ("https://example.org/d/", json!({"proxy_url": "http://attacker:3128"}), "proxy_url"),
        ("s3://b/", json!({"region": "eu-west-1", "skip_signature": false}), "no credentials"),
    ];
    for (url, options, named) in refused {
        let (status, body) = server.put("/api/v1/object-stores/o", &json!({"url": url, "options": options})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url} {options}: {body}");
        assert!(body.to_string().contains(named), "{body} names {named}");
        assert_eq!(server.get("/api/v1/object-stores/o", &[]).await.status(), StatusCode::NOT_FOUND, "nothing stored");
    }
    // What a store needs is accepted: where the bucket is, static credentials (shown as ***).
    let (status, body) = server
        .put(
            "/api/v1/object-stores/o",
            &json!({"url": "s3://b/", "options": {"region": "eu-west-1", "endpoint": "https://u:p@minio.example.org",
                    "access_key_id": "AKIA1", "secret_access_key": "very-secret"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let shown = body["options"].to_string();
    assert!(!shown.contains("very-secret") && !shown.contains("u:p@"), "{shown}");
}

/// With no admin token, the control plane answers only requests addressed to this machine by
/// address or as localhost: a web page that points its own name at 127.0.0.1 (DNS rebinding)
/// cannot register stores. With a token configured, the token decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_control_plane_refuses_requests_addressed_by_name() {
    let server = common::TestServer::start(common::Backend::Sqlite).await;
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    for host in ["evil.example.com", &format!("rebind.attacker.net:{port}")] {
        let r = server.get("/api/v1/stores", &[("host", host)]).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{host}");
        let body: Value = r.json().await.unwrap();
        assert!(body["detail"].as_str().unwrap().contains("ZARRGATE_ADMIN_TOKENS"), "{body}");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        assert_eq!(server.get("/api/v1/stores", &[("host", &host)]).await.status(), StatusCode::OK, "{host}");
    }
    // The data plane is public whatever the name.
    assert_eq!(server.get("/nothing/zarr.json", &[("host", "cdn.example.org")]).await.status(), StatusCode::NOT_FOUND);
    let token = "an-admin-token-of-some-length";
    let guarded =
        common::TestServer::start_with(common::Backend::Sqlite, |c| c.admin_tokens = vec![token.into()]).await;
    let auth = format!("Bearer {token}");
    let r = guarded.get("/api/v1/stores", &[("host", "zarrgate.internal"), ("authorization", &auth)]).await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn refuses_an_open_control_plane_on_a_public_address() {
    let mut config = zarrgate::config::Config { listen: "0.0.0.0:8080".into(), ..Default::default() };
    let err = zarrgate::app::check_exposure(&config).unwrap_err().to_string();
    assert!(err.contains("ZARRGATE_ADMIN_TOKENS") && err.contains("--insecure"), "{err}");
    config.insecure = true;
    assert!(zarrgate::app::check_exposure(&config).is_ok());
    config.insecure = false;
    config.admin_tokens = vec!["a-token-long-enough".into()];
    assert!(zarrgate::app::check_exposure(&config).is_ok());
    config.listen = "127.0.0.1:8080".into();
    config.admin_tokens.clear();
    assert!(zarrgate::app::check_exposure(&config).is_ok());
}

/// Requests the framework itself refuses (a query it cannot read, a wrong method, a path that is
/// not UTF-8) get problem+json like every other error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_problem_json() {
    let server = common::TestServer::start(common::Backend::Sqlite).await;
    for (method, path, status) in [
        (reqwest::Method::GET, "/api/v1/stores?limit=ten", StatusCode::BAD_REQUEST),
        (reqwest::Method::GET, "/api/v1/stores?colour=blue", StatusCode::BAD_REQUEST),
        (reqwest::Method::GET, "/api/v1/stores/%FF", StatusCode::BAD_REQUEST),
        (reqwest::Method::POST, "/api/v1/stores/x", StatusCode::METHOD_NOT_ALLOWED),
        (reqwest::Method::POST, "/demo/zarr.json", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let r = server.client.request(method.clone(), format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(r.status(), status, "{method} {path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{method} {path}");
        let allow = r.headers().get("allow").cloned();
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], status.as_u16());
        assert!(!body["detail"].as_str().unwrap().is_empty(), "{body}");
        if status == StatusCode::METHOD_NOT_ALLOWED {
            assert!(allow.is_some(), "405 keeps its Allow header");
        }
    }
    let big = vec![b' '; 3 << 20];
    let r = server.client.put(format!("{}/api/v1/object-stores/x", server.url)).body(big).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

/// Object stores declared in the configuration file serve sources, are listed with their origin,
/// and cannot be changed or removed over the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_object_stores_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("c.bin"), f32_bytes([7.0, 8.0])).unwrap();
    let url = url::Url::from_directory_path(&root).unwrap().to_string();
    let declared = url.clone();
    let server = common::TestServer::start_with(common::Backend::Sqlite, move |c| {
        c.object_stores = vec![zarrgate::config::ObjectStoreConfig {
            name: "archive".into(),
            url: declared,
            options: Default::default(),
        }];
    })
    .await;
    let listed: Value = server.get("/api/v1/object-stores", &[]).await.json().await.unwrap();
    assert_eq!(listed["object_stores"][0]["origin"], "config", "{listed}");
    let doc = json!({"nodes": {"x": f32_array(&[2], &[2], json!({"manifest": {"0": {"path": root.join("c.bin").display().to_string(), "offset": 0, "length": 8}}}))}});
    assert_eq!(server.put("/api/v1/stores/s", &doc).await.0, StatusCode::CREATED);
    assert_eq!(server.bytes("/s/x/c/0").await, f32_bytes([7.0, 8.0]));
    let (status, body) = server.put("/api/v1/object-stores/archive", &json!({"url": url})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("configuration file"), "{body}");
    assert_eq!(server.delete("/api/v1/object-stores/archive").await, StatusCode::CONFLICT);
}

/// Registrations take turns (`ingest.max_concurrent`): one whose upload is under way holds the
/// only turn, the next waits `ingest.queue_seconds` and is refused with 503 and Retry-After,
/// changing nothing; once the first ends, registrations go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_take_turns() {
    use tokio::io::AsyncWriteExt;
    let server = common::TestServer::start_with(common::Backend::Sqlite, |c| {
        c.ingest.max_concurrent = 1;
        c.ingest.queue_seconds = 1;
    })
    .await;
    server.local_store().await;
    let (status, _) = server.put("/api/v1/stores/turns", &demo(&server, "first", 0.0).await).await;
    assert_eq!(status, StatusCode::CREATED);

    // An upload that sends half its body and waits.
    let body = demo(&server, "slow", 50.0).await.to_string();
    let addr = server.url.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!("PUT /api/v1/stores/slow HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n", body.len());
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..body.len() / 2]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let started = std::time::Instant::now();
    let r = server
        .client
        .put(format!("{}/api/v1/stores/turns", server.url))
        .body(demo(&server, "second", 9.0).await.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() >= std::time::Duration::from_millis(900), "answered before its turn could come");
    assert_eq!(r.headers()["retry-after"], "10");
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["type"], "urn:zarrgate:problem:busy", "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("ingest.max_concurrent"), "{problem}");
    assert_eq!(server.bytes("/turns/x/c/1").await, f32_bytes([2.0, 3.0]), "the store is as it was");

    // The stalled upload gives up; the turn is free again.
    drop(slow);
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..50 {
        (status, _) = server.put("/api/v1/stores/turns", &demo(&server, "third", 7.0).await).await;
        if status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
    }
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.bytes("/turns/x/c/1").await, f32_bytes([9.0, 10.0]));
}

/// A `file://` object store registered over the API can never expose zarrgate's own files:
/// the SQLite catalog (which holds object store secrets) and the configuration file.
#[tokio::test]
async fn file_object_stores_never_expose_the_catalog_or_the_configuration() {
    let config_dir = tempfile::tempdir().unwrap();
    let config_file = config_dir.path().join("zarrgate.toml");
    std::fs::write(&config_file, "").unwrap();
    let server = common::TestServer::start_with(common::Backend::Sqlite, |c| c.file = Some(config_file.clone())).await;
    for dir in [server.dir().to_path_buf(), config_dir.path().to_path_buf()] {
        let url = url::Url::from_directory_path(std::fs::canonicalize(&dir).unwrap()).unwrap();
        let (status, body) = server.put("/api/v1/object-stores/own", &json!({"url": url.as_str()})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {body}");
        assert!(body["problems"][0].as_str().unwrap().contains("zarrgate's own"), "{body}");
    }
    let (status, body) =
        server.get("/api/v1/object-stores", &[]).await.json::<Value>().await.map(|b| (200, b)).unwrap();
    assert_eq!((status, body["object_stores"].as_array().map(Vec::len)), (200, Some(0)), "{body}");
    // The data directory beside the catalog holds sources only: fine.
    server.local_store().await;
}

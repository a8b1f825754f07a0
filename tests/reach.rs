//! Reach: the Zarr v2 view at its own URL, `/v2/{store}/` (documents, chunk keys, what is left
//! out; none of it at the v3 URL), and the listings (HTML, JSON, WebDAV PROPFIND), as clients
//! see them over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A store with every chunk key encoding, a 0-d array, a big-endian one, a NaN fill, nested
/// groups and a sharded array. `x` (16 floats, chunks of 4): chunks 0..=2 virtual, 3 missing.
async fn register(server: &TestServer, name: &str) -> i64 {
    server.local_store().await;
    let path = server.write("x.bin", &f32_bytes((0..12).map(|i| i as f32)));
    let v = |i: u64| json!({"path": path, "offset": i * 16, "length": 16});
    let encoding = |name: &str, sep: &str| json!({"name": name, "configuration": {"separator": sep}});
    let nan_fill = base64_f64(f64::NAN);
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "demo"}},
        "x": f32_array(&[16], &[4], json!({"manifest": {"0": v(0), "1": v(1), "2": v(2)},
            "attributes": {"units": "K"}})),
        "g": {"zarr_format": 3, "node_type": "group", "attributes": {"platform": "buoy"}},
        "g/dots": f32_array(&[4, 4], &[2, 2], json!({"chunk_key_encoding": encoding("default", "."),
            "manifest": {"1.0": v(0), "0.0": v(1), "0.1": v(2), "1.1": v(0)}})),
        "g/v2": f32_array(&[4, 4], &[2, 2], json!({"chunk_key_encoding": encoding("v2", "."),
            "manifest": {"0.1": v(1)}})),
        "g/v2slash": f32_array(&[4, 4], &[2, 2], json!({"chunk_key_encoding": encoding("v2", "/"),
            "manifest": {"1.1": v(2)}})),
        "g/sub/scalar": f32_array(&[], &[], json!({"manifest": {"": {"data": "AADAPw=="}}})),
        "g/sub/nan": f32_array(&[4], &[4], json!({"fill_value": "NaN", "attributes": {"_FillValue": nan_fill},
            "manifest": {"0": v(0)}})),
        "big": f32_array(&[4], &[4], json!({"codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
            "manifest": {"0": v(1)}})),
        "sharded": f32_array(&[4], &[4], json!({"codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
            "manifest": {"0": v(0)}})),
    }});
    let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &doc).await;
    assert!(status.is_success(), "{status} {body}");
    body["version"].as_i64().unwrap()
}

fn base64_f64(f: f64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(f.to_le_bytes())
}

async fn json_at(server: &TestServer, path: &str) -> Value {
    let r = server.get(path, &[]).await;
    assert_eq!(r.status(), StatusCode::OK, "GET {path}");
    r.json().await.unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

async fn propfind(server: &TestServer, path: &str, depth: Option<&str>) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(b"PROPFIND").unwrap();
    let mut request = server.client.request(method, format!("{}{path}", server.url));
    if let Some(depth) = depth {
        request = request.header("Depth", depth);
    }
    request.send().await.unwrap()
}

/// The `<D:href>` values of a multistatus body, in order.
fn hrefs(body: &str) -> Vec<&str> {
    body.split("<D:href>").skip(1).filter_map(|s| s.split("</D:href>").next()).collect()
}

/// The statuses of `GET {path}` sent `n` times, pipelined on one connection: the first is read
/// before hyper (src/server/connection/plain.rs), which hands what it does not answer
/// itself, and every request after it, to hyper.
async fn pipelined_statuses(server: &TestServer, path: &str, n: usize) -> Vec<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    let mut requests = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").repeat(n - 1);
    requests.push_str(&format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"));
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut answers = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(20), stream.read_to_end(&mut answers));
    read.await.expect("answers in time").unwrap();
    let text = String::from_utf8_lossy(&answers);
    text.match_indices("HTTP/1.1 ").map(|(i, _)| text[i + 9..i + 12].parse().unwrap()).collect()
}

both_backends! {

    // zarr-python 3 and xarray, opened without zarr_format, ask for zarr.json and the v2
    // documents at once, and warn on every open when both exist. A v3 URL answers 404 to the
    // four v2 documents at its root and every node, whichever way the request comes in: read
    // before hyper, in front of the router (a GET), or by the router (HEAD, a percent-encoded
    // path, a pinned version); the 404 says where the v2 view is.
    async fn a_v3_store_answers_404_to_every_v2_document(server) {
        let v = register(&server, "demo").await;
        for node in ["", "g/", "g/sub/", "x/", "g/sub/scalar/"] {
            for doc in [".zgroup", ".zattrs", ".zmetadata", ".zarray"] {
                let key = format!("{node}{doc}");
                assert_eq!(pipelined_statuses(&server, &format!("/demo/{key}"), 2).await, [404, 404], "plain GET {key}");
                // Twice: the second time this worker thread has the store's view at hand.
                for _ in 0..2 {
                    let r = server.get(&format!("/demo/{key}"), &[]).await;
                    assert_eq!(r.status(), StatusCode::NOT_FOUND, "GET {key}");
                    assert_eq!(header(&r, "content-type"), "application/problem+json");
                    let detail = r.json::<Value>().await.unwrap()["detail"].as_str().unwrap().to_owned();
                    assert!(detail.contains(&format!("/v2/demo/{key}")), "GET {key}: {detail}");
                }
                let r = server.head(&format!("/demo/{key}")).await;
                assert_eq!(r.status(), StatusCode::NOT_FOUND, "HEAD {key}");
                let encoded = format!("/demo/{node}%2E{}", &doc[1..]);
                assert_eq!(server.get(&encoded, &[]).await.status(), StatusCode::NOT_FOUND, "routed GET {key}");
                let pinned = format!("/demo@{v}/{key}");
                assert_eq!(server.get(&pinned, &[]).await.status(), StatusCode::NOT_FOUND, "GET {pinned}");
            }
        }
        // the v3 keys are answered as ever, on each way in
        assert_eq!(pipelined_statuses(&server, "/demo/zarr.json", 2).await, [200, 200]);
        assert_eq!(server.head("/demo/g/zarr.json").await.status(), StatusCode::OK);
        // and the same documents under /v2/, on each way in too
        for key in [".zgroup", ".zattrs", ".zmetadata", "g/.zgroup", "x/.zarray", "x/.zattrs"] {
            assert_eq!(pipelined_statuses(&server, &format!("/v2/demo/{key}"), 2).await, [200, 200], "{key}");
            assert_eq!(server.head(&format!("/v2/demo/{key}")).await.status(), StatusCode::OK, "HEAD {key}");
            assert_eq!(server.get(&format!("/v2/demo@{v}/{key}"), &[]).await.status(), StatusCode::OK, "{key}");
        }
        let r = server.get("/v2/demo/.zmetadata", &[("Origin", "https://viewer.example")]).await;
        assert_eq!(header(&r, "access-control-allow-origin"), "*", "CORS as on every data-plane answer");
        assert_eq!(header(&r, "zarrgate-version"), v.to_string());
    }

    // `v2` is the first segment of the Zarr v2 view's URLs: no store may have it.
    async fn a_store_named_v2_is_refused(server) {
        server.local_store().await;
        let doc = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group"}}});
        let (status, body) = server.put("/api/v1/stores/v2", &doc).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("reserved"), "{body}");
        assert!(body["problems"][0].as_str().unwrap().contains("choose another name"), "{body}");
        assert_eq!(server.get("/api/v1/stores/v2", &[]).await.status(), StatusCode::NOT_FOUND, "nothing was stored");
    }

    // A 404 for a key that no v2 view could name does not build the version's v2 view (with
    // 100,000 arrays, ~600 MB); a v2 key does, once.
    async fn a_missing_key_does_not_build_the_v2_view(server) {
        register(&server, "demo").await;
        let built = r#"zarrgate_cache_misses_total{cache="v2_metadata"}"#;
        for nothing in ["nothing", "x/nothing", "g/zarr.json.bak", "x/c/nothing", "g/sub/nothing/else"] {
            assert_eq!(server.get(&format!("/demo/{nothing}"), &[]).await.status(), StatusCode::NOT_FOUND, "{nothing}");
        }
        let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
        assert_eq!(common::metric_in(&metrics, built), 0.0, "{metrics}");
        assert_eq!(server.get("/demo/x/c/1", &[]).await.status(), StatusCode::OK);
        for v2_key in ["g/.zgroup", "x/.zarray", "x/1"] {
            assert_eq!(server.get(&format!("/demo/{v2_key}"), &[]).await.status(), StatusCode::NOT_FOUND, "{v2_key}");
        }
        let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
        assert_eq!(common::metric_in(&metrics, built), 0.0, "{metrics}");
        assert_eq!(server.get("/v2/demo/g/.zgroup", &[]).await.status(), StatusCode::OK);
        let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
        assert_eq!(common::metric_in(&metrics, built), 1.0, "{metrics}");
    }
    async fn v2_chunk_keys_read_the_v3_chunks(server) {
        register(&server, "demo").await;
        // (v2 key, v3 key): default "/" and "." encodings map to v2 keys; v2 encodings are the same key
        let pairs = [
            ("x/1", "x/c/1"),
            ("g/dots/1.0", "g/dots/c.1.0"),
            ("g/v2/0.1", "g/v2/0.1"),
            ("g/v2slash/1/1", "g/v2slash/1/1"),
            ("g/sub/scalar/0", "g/sub/scalar/c"),
            ("big/0", "big/c/0"),
        ];
        for (v2, v3) in pairs {
            let (a, b) = (server.get(&format!("/v2/demo/{v2}"), &[]).await, server.get(&format!("/demo/{v3}"), &[]).await);
            assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK), "{v2} {v3}");
            let tag = header(&b, "etag");
            assert_eq!(header(&a, "etag"), tag, "{v2}: the same chunk has the same ETag");
            assert_eq!(a.bytes().await.unwrap(), b.bytes().await.unwrap(), "{v2}");
            let r = server.get(&format!("/v2/demo/{v2}"), &[("If-None-Match", &tag)]).await;
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{v2}");
            let range = [("Range", "bytes=-2")];
            let (a, b) = (server.get(&format!("/v2/demo/{v2}"), &range).await, server.get(&format!("/demo/{v3}"), &range).await);
            assert_eq!(a.status(), StatusCode::PARTIAL_CONTENT, "{v2}");
            assert_eq!(header(&a, "content-range"), header(&b, "content-range"), "{v2}");
            assert_eq!(a.bytes().await.unwrap(), b.bytes().await.unwrap(), "{v2}");
            let (a, b) = (server.head(&format!("/v2/demo/{v2}")).await, server.head(&format!("/demo/{v3}")).await);
            assert_eq!(a.status(), StatusCode::OK, "{v2}");
            assert_eq!(header(&a, "content-length"), header(&b, "content-length"), "{v2}");
        }
        assert_eq!(server.bytes("/v2/demo/x/2").await, f32_bytes([8.0, 9.0, 10.0, 11.0]));
        // a missing chunk is missing under both keys; a key outside the grid, or in the other
        // separator, is nothing; the v2 chunk keys are not the v3 URL's, nor the v3 keys the v2 view's
        assert_eq!(server.get("/v2/demo/x/3", &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(server.get("/demo/x/c/3", &[]).await.status(), StatusCode::NOT_FOUND);
        for nothing in ["x/4", "x/0.0", "g/dots/1/0", "g/v2slash/1.1", "g/sub/scalar/1", "x/c/1", "zarr.json", "x/zarr.json"] {
            assert_eq!(server.get(&format!("/v2/demo/{nothing}"), &[]).await.status(), StatusCode::NOT_FOUND, "{nothing}");
        }
        for v3_only in ["x/1", "g/dots/1.0", "big/0"] {
            assert_eq!(server.get(&format!("/demo/{v3_only}"), &[]).await.status(), StatusCode::NOT_FOUND, "{v3_only}");
        }
    }

    async fn zmetadata_is_xarrays_v2_encoding(server) {
        register(&server, "demo").await;
        let z = json_at(&server, "/v2/demo/.zmetadata").await;
        assert_eq!(z["zarr_consolidated_format"], 1);
        let m = z["metadata"].as_object().unwrap();
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, [".zgroup", ".zattrs", "big/.zarray", "big/.zattrs", "g/.zgroup", "g/.zattrs",
            "g/dots/.zarray", "g/dots/.zattrs", "g/sub/.zgroup", "g/sub/.zattrs", "g/sub/nan/.zarray",
            "g/sub/nan/.zattrs", "g/sub/scalar/.zarray", "g/sub/scalar/.zattrs", "g/v2/.zarray", "g/v2/.zattrs",
            "g/v2slash/.zarray", "g/v2slash/.zattrs", "x/.zarray", "x/.zattrs"]);
        assert_eq!(m[".zgroup"], json!({"zarr_format": 2}));
        assert_eq!(m["g/.zattrs"], json!({"platform": "buoy"}));
        assert_eq!(m["x/.zattrs"], json!({"units": "K", "_ARRAY_DIMENSIONS": ["d0"]}));
        let x = &m["x/.zarray"];
        assert_eq!((x["dtype"].as_str(), x["dimension_separator"].as_str()), (Some("<f4"), Some("/")));
        assert_eq!(x["fill_value"], json!(-1.0), "chunk 3 is missing: it reads as the v3 fill value");
        assert_eq!(m["g/dots/.zarray"]["fill_value"], Value::Null, "every chunk stored, no _FillValue: nothing masked");
        assert_eq!(m["g/dots/.zarray"]["dimension_separator"], ".");
        assert_eq!(m["g/v2slash/.zarray"]["dimension_separator"], "/");
        assert_eq!(m["big/.zarray"]["dtype"], ">f4");
        assert_eq!(m["g/sub/nan/.zarray"]["fill_value"], "NaN");
        assert!(m["g/sub/nan/.zattrs"].get("_FillValue").is_none(), "xarray's v2 encoding keeps it in .zarray");
        assert_eq!(m["g/sub/scalar/.zattrs"]["_ARRAY_DIMENSIONS"], json!([]));
        // every document is served alone too, exactly as consolidated
        for (key, doc) in m {
            assert_eq!(&json_at(&server, &format!("/v2/demo/{key}")).await, doc, "{key}");
        }
    }

    async fn a_sharded_array_is_left_out_and_named(server) {
        register(&server, "demo").await;
        let attrs = json_at(&server, "/v2/demo/.zattrs").await;
        assert_eq!(attrs["title"], "demo");
        let why = attrs["zarrgate"]["omitted_from_zarr_v2_view"]["sharded"].as_str().unwrap();
        assert!(why.contains("sharding_indexed"), "{why}");
        let z = json_at(&server, "/v2/demo/.zmetadata").await;
        assert!(z["metadata"].as_object().unwrap().keys().all(|k| !k.starts_with("sharded")));
        for key in ["sharded/.zarray", "sharded/.zattrs", "sharded/0"] {
            let r = server.get(&format!("/v2/demo/{key}"), &[]).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{key}");
            assert!(r.text().await.unwrap().contains("not in the Zarr v2 view"), "{key}");
        }
        assert_eq!(server.get("/demo/sharded/c/0", &[]).await.status(), StatusCode::OK, "the v3 view still serves it");
    }

    async fn v2_documents_follow_zarr_json_http_rules(server) {
        let v1 = register(&server, "demo").await;
        let r = server.get("/v2/demo/x/.zarray", &[]).await;
        let tag = header(&r, "etag");
        assert!(tag.starts_with('"') && tag.ends_with(&format!("-v{v1}\"")), "{tag}");
        assert_eq!(header(&r, "content-type"), "application/json");
        assert_eq!(header(&r, "cache-control"), "public, max-age=60");
        let len = r.bytes().await.unwrap().len();
        let r = server.head("/v2/demo/x/.zarray").await;
        assert_eq!(header(&r, "content-length"), len.to_string());
        assert_eq!(r.bytes().await.unwrap().len(), 0);
        let r = server.get("/v2/demo/x/.zarray", &[("If-None-Match", &tag)]).await;
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        let r = server.get("/v2/demo/x/.zarray", &[("Range", "bytes=0-9")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.text().await.unwrap(), r#"{"zarr_for"#);
        let r = server.get("/v2/demo/.zmetadata", &[("Accept-Encoding", "gzip")]).await;
        assert_eq!(header(&r, "content-encoding"), "gzip");
        assert!(header(&r, "etag").ends_with("-gz\""));

        // a pinned URL is cached for good; the same document of a new version is a new response
        let pinned = format!("/v2/demo@{v1}/x/.zarray");
        let r = server.get(&pinned, &[]).await;
        assert_eq!(header(&r, "cache-control"), "public, max-age=31536000, immutable");
        assert_eq!(header(&r, "etag"), tag);
        assert_eq!(header(&r, "zarrgate-version"), v1.to_string());
        let v2 = register(&server, "demo").await;
        assert_ne!(v1, v2);
        let r = server.get("/v2/demo/x/.zarray", &[("If-None-Match", &tag)]).await;
        assert_eq!(r.status(), StatusCode::OK, "the new version's document has a new ETag");
        assert!(header(&r, "etag").ends_with(&format!("-v{v2}\"")));
        let r = server.get(&pinned, &[("If-None-Match", &tag)]).await;
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(header(&r, "cache-control"), "public, max-age=31536000, immutable");
    }

    async fn propfind_answers_multi_status(server) {
        let v = register(&server, "demo").await;
        let r = propfind(&server, "/demo/", Some("1")).await;
        assert_eq!(r.status(), StatusCode::MULTI_STATUS);
        assert_eq!(header(&r, "content-type"), "application/xml; charset=utf-8");
        let body = r.text().await.unwrap();
        assert!(body.starts_with("<?xml") && body.contains(r#"<D:multistatus xmlns:D="DAV:">"#), "{body}");
        assert_eq!(hrefs(&body), ["/demo/", "/demo/zarr.json", "/demo/big/", "/demo/g/", "/demo/sharded/", "/demo/x/"]);
        let root_doc = server.get("/demo/zarr.json", &[]).await;
        let (tag, len) = (header(&root_doc, "etag"), root_doc.bytes().await.unwrap().len());
        let entry = body.split("<D:response>").find(|r| r.contains("<D:href>/demo/zarr.json<")).unwrap();
        assert!(entry.contains(&format!("<D:getcontentlength>{len}</D:getcontentlength>")), "{entry}");
        assert!(entry.contains(&format!("<D:getetag>{}</D:getetag>", tag.replace('"', "&quot;"))), "{entry}");
        assert!(entry.contains("<D:resourcetype/>") && entry.contains("<D:status>HTTP/1.1 200 OK</D:status>"));
        assert!(entry.contains("<D:getlastmodified>") && entry.contains(" GMT</D:getlastmodified>"), "{entry}");
        let group = body.split("<D:response>").find(|r| r.contains("<D:href>/demo/g/<")).unwrap();
        assert!(group.contains("<D:resourcetype><D:collection/></D:resourcetype>"), "{group}");

        // a group without its final slash (object_store's prefixes), depth 0, depth infinity
        let body = propfind(&server, "/demo/g/sub", Some("1")).await.text().await.unwrap();
        assert_eq!(hrefs(&body), ["/demo/g/sub/", "/demo/g/sub/zarr.json", "/demo/g/sub/nan/", "/demo/g/sub/scalar/"]);
        let body = propfind(&server, "/demo", Some("0")).await.text().await.unwrap();
        assert_eq!(hrefs(&body), ["/demo/"]);
        let body = propfind(&server, &format!("/demo@{v}/g/"), Some("infinity")).await.text().await.unwrap();
        let all = hrefs(&body);
        assert!(all.contains(&format!("/demo@{v}/g/sub/scalar/zarr.json").as_str()), "{all:?}");
        // g and its zarr.json, then six nodes below it, each with its zarr.json
        assert_eq!(all.len(), 1 + 1 + 6 * 2, "{all:?}");
        let body = propfind(&server, "/demo/x/zarr.json", Some("0")).await.text().await.unwrap();
        assert_eq!(hrefs(&body), ["/demo/x/zarr.json"]);
        for v2_doc in ["/demo/x/.zarray", "/demo/.zmetadata"] {
            assert_eq!(propfind(&server, v2_doc, Some("0")).await.status(), StatusCode::NOT_FOUND, "{v2_doc}");
        }
        assert_eq!(propfind(&server, "/demo/x/c/0", Some("1")).await.status(), StatusCode::NOT_FOUND);

        // the Zarr v2 view lists its own documents (and not the sharded array it leaves out)
        let body = propfind(&server, "/v2/demo/", Some("1")).await.text().await.unwrap();
        assert_eq!(hrefs(&body), ["/v2/demo/", "/v2/demo/.zgroup", "/v2/demo/.zattrs", "/v2/demo/.zmetadata",
            "/v2/demo/big/", "/v2/demo/g/", "/v2/demo/x/"]);
        let body = propfind(&server, &format!("/v2/demo@{v}/g/"), Some("infinity")).await.text().await.unwrap();
        let all = hrefs(&body);
        assert!(all.contains(&format!("/v2/demo@{v}/g/sub/scalar/.zarray").as_str()), "{all:?}");
        // g and its two documents, then six nodes below it, each with two documents
        assert_eq!(all.len(), 1 + 2 + 6 * 3, "{all:?}");
        let body = propfind(&server, "/v2/demo/x/.zarray", Some("0")).await.text().await.unwrap();
        assert_eq!(hrefs(&body), ["/v2/demo/x/.zarray"]);
        assert_eq!(propfind(&server, "/v2/demo/zarr.json", Some("0")).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(propfind(&server, "/demo/", Some("2")).await.status(), StatusCode::BAD_REQUEST);
        assert_eq!(propfind(&server, "/nothing/", Some("1")).await.status(), StatusCode::NOT_FOUND);
        let brew = reqwest::Method::from_bytes(b"BREW").unwrap();
        let r = server.client.request(brew, format!("{}/demo/", server.url)).send().await.unwrap();
        assert_eq!((r.status(), header(&r, "allow")), (StatusCode::METHOD_NOT_ALLOWED, "GET,HEAD,PROPFIND".into()));
    }

    async fn listings_in_html_and_json(server) {
        let v = register(&server, "demo").await;
        let r = server.get("/demo/", &[]).await;
        assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(&r, "vary"), "accept");
        let tag = header(&r, "etag");
        let html = r.text().await.unwrap();
        for link in ["zarr.json", "big/", "g/", "sharded/", "x/"] {
            assert!(html.contains(&format!("href=\"{link}\"")) || html.contains(&format!("href=\"./{link}\"")), "{link}: {html}");
        }
        assert!(!html.contains(".zgroup") && !html.contains(".zmetadata"), "{html}");
        let html = server.get("/v2/demo/", &[]).await.text().await.unwrap();
        for link in [".zgroup", ".zattrs", ".zmetadata", "big/", "g/", "x/"] {
            assert!(html.contains(&format!("href=\"{link}\"")) || html.contains(&format!("href=\"./{link}\"")), "{link}: {html}");
        }
        assert!(!html.contains("zarr.json") && !html.contains("sharded/"), "{html}");
        assert_eq!(server.get("/demo/", &[("If-None-Match", &tag)]).await.status(), StatusCode::NOT_MODIFIED);

        let r = server.get("/demo/g/", &[("Accept", "application/json")]).await;
        assert_eq!(header(&r, "content-type"), "application/json");
        let listing: Value = r.json().await.unwrap();
        assert_eq!((listing["store"].as_str(), listing["version"].as_i64()), (Some("demo"), Some(v)));
        assert_eq!((listing["path"].as_str(), listing["node_type"].as_str()), (Some("g"), Some("group")));
        let names: Vec<&str> = listing["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["zarr.json", "dots/", "sub/", "v2/", "v2slash/"]);
        assert_eq!(listing["entries"][1], json!({"name": "dots/", "type": "directory", "node_type": "array"}));
        assert_eq!(listing["entries"][0]["type"], "file");

        // an array lists its documents; its chunk keys are not listed, and it says so
        let listing: Value = server.get("/demo/g/dots/", &[("Accept", "application/json")]).await.json().await.unwrap();
        let names: Vec<&str> = listing["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["zarr.json"]);
        let listing: Value = server.get("/v2/demo/g/dots/", &[("Accept", "application/json")]).await.json().await.unwrap();
        let names: Vec<&str> = listing["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, [".zarray", ".zattrs"]);
        assert_eq!(listing["chunks"]["listed"], false);
        assert_eq!((listing["chunks"]["count"].as_u64(), listing["chunks"]["example"].as_str()), (Some(4), Some("c.0.0")));

        // a node path without its slash redirects to its listing; a path that is no node is 404
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        for (path, location) in [("/demo/g", "g/"), ("/demo/g/sub", "sub/"), ("/demo", "demo/"), (&format!("/demo@{v}") as &str, &format!("demo@{v}/") as &str)] {
            let r = client.get(format!("{}{path}", server.url)).send().await.unwrap();
            assert_eq!((r.status(), header(&r, "location")), (StatusCode::PERMANENT_REDIRECT, location.to_owned()), "{path}");
        }
        let r = server.get("/demo/g", &[]).await;
        assert_eq!(r.url().path(), "/demo/g/");
        for (path, location) in [("/v2/demo/g", "g/"), ("/v2/demo", "demo/")] {
            let r = client.get(format!("{}{path}", server.url)).send().await.unwrap();
            assert_eq!((r.status(), header(&r, "location")), (StatusCode::PERMANENT_REDIRECT, location.to_owned()), "{path}");
        }
        assert_eq!(server.get("/v2/demo/g", &[]).await.url().path(), "/v2/demo/g/");
        assert_eq!(server.get("/demo/nothing/", &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(server.get("/nothing/", &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(server.get("/nothing", &[]).await.status(), StatusCode::NOT_FOUND);
    }
}

/// With read tokens configured, the v2 view and every listing need one, as the v3 keys do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_need_a_read_token_when_reads_do() {
    let (admin, reader) = ("an-admin-token-of-some-length", "a-read-token-of-some-length");
    let server = TestServer::start_with(common::Backend::Sqlite, |c| {
        c.admin_tokens = vec![admin.into()];
        c.read_tokens = vec![reader.into()];
    })
    .await;
    let url = url::Url::from_directory_path(&server.data).unwrap();
    let put = |path: &str, body: Value| {
        server.client.put(format!("{}{path}", server.url)).bearer_auth(admin).body(body.to_string()).send()
    };
    assert!(put("/api/v1/object-stores/local", json!({"url": url.as_str()})).await.unwrap().status().is_success());
    let doc = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group"}, "x": f32_array(&[4], &[4], json!({}))}});
    assert!(put("/api/v1/stores/demo", doc).await.unwrap().status().is_success());
    let propfind = reqwest::Method::from_bytes(b"PROPFIND").unwrap();
    for (method, path) in [
        (reqwest::Method::GET, "/demo/"),
        (reqwest::Method::GET, "/v2/demo/.zmetadata"),
        (reqwest::Method::GET, "/v2/demo/x/.zarray"),
        (reqwest::Method::GET, "/v2/demo/"),
        (reqwest::Method::GET, "/demo"),
        (propfind.clone(), "/demo/"),
        (propfind.clone(), "/demo"),
        (propfind, "/demo/x"),
    ] {
        let request = || server.client.request(method.clone(), format!("{}{path}", server.url)).header("Depth", "1");
        let r = request().send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        let r = request().bearer_auth(reader).send().await.unwrap();
        assert!(r.status().is_success() || r.status().is_redirection(), "{method} {path}: {}", r.status());
        if path == "/demo/" && method == reqwest::Method::GET {
            assert_eq!(header(&r, "cache-control"), "private, max-age=60");
        }
    }
}

/// A store named `v2`, registered before the name was reserved (here through the registrar, as
/// a catalog from an older release has it): its data-plane URLs are the v2 view's and answer
/// 404 saying so, the v2 view of the other stores is served, and the control plane can still
/// export and delete it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_named_v2_from_before_is_reachable_from_the_control_plane_only() {
    use futures::StreamExt;
    let server = TestServer::start(common::Backend::Sqlite).await;
    register(&server, "demo").await;
    let doc = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {"old": true}}}});
    let body = futures::stream::once(async move { Ok(bytes::Bytes::from(doc.to_string())) }).boxed();
    let how = zarrgate::versions::Registration {
        format: None,
        fill_missing: None,
        portable: None,
        verify: false,
        record_sources: false,
        expected: None,
    };
    server.state.registrar.register("v2", body, how).await.unwrap();
    for path in ["/v2/zarr.json", "/v2/", "/v2", "/v2@1/zarr.json"] {
        let r = server.get(path, &[]).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = server.get("/v2/", &[]).await;
    assert!(r.text().await.unwrap().contains("Zarr v2 view"), "the 404 says why");
    assert_eq!(json_at(&server, "/v2/demo/.zgroup").await, json!({"zarr_format": 2}));
    assert_eq!(server.get("/api/v1/stores/v2/manifest", &[]).await.status(), StatusCode::OK);
    assert_eq!(server.delete("/api/v1/stores/v2").await, StatusCode::NO_CONTENT);
}

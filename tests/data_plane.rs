//! The data plane as Zarr clients see it: keys, encodings, Range, HEAD, conditional requests,
//! compression, CORS, versions, and the headers every client needs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A store exercising every chunk key encoding, nesting, inline and virtual chunks.
/// `x` (16 floats, chunks of 4): chunks 0..=2 virtual (values 0..12), chunk 3 missing.
async fn register(server: &TestServer) -> i64 {
    server.local_store().await;
    let path = server.write("x.bin", &f32_bytes((0..12).map(|i| i as f32)));
    let v = |i: u64| json!({"path": path, "offset": i * 16, "length": 16});
    let enc =
        |name: &str, sep: &str| json!({"chunk_key_encoding": {"name": name, "configuration": {"separator": sep}}});
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "demo"}},
        "x": f32_array(&[16], &[4], json!({"manifest": {"0": v(0), "1": v(1), "2": v(2)}})),
        "g/dots": f32_array(&[4, 4], &[2, 2], json!({"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
            "manifest": {"1.0": v(0)}})),
        "g/v2": f32_array(&[4, 4], &[2, 2], json!({"manifest": {"0.1": v(1)}}).as_object().unwrap().clone().into_iter()
            .chain(enc("v2", ".").as_object().unwrap().clone()).collect::<serde_json::Map<_, _>>().into()),
        "g/v2slash": f32_array(&[4, 4], &[2, 2], json!({"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}},
            "manifest": {"1.1": v(2)}})),
        "g/sub/scalar": f32_array(&[], &[], json!({"manifest": {"": {"data": "AADAPw=="}}})),
        "g/sub/scalar_v2": f32_array(&[], &[], json!({"chunk_key_encoding": {"name": "v2"}, "manifest": {"0": {"data": "AAAgQA=="}}})),
    }});
    let (status, body) = server.put("/api/v1/stores/demo", &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["version"].as_i64().unwrap()
}

both_backends! {
    async fn metadata_is_consolidated(server) {
        register(&server).await;
        let root: Value = server.get("/demo/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(root["attributes"]["title"], "demo");
        let listing = root["consolidated_metadata"]["metadata"].as_object().unwrap();
        let mut keys: Vec<&str> = listing.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["g", "g/dots", "g/sub", "g/sub/scalar", "g/sub/scalar_v2", "g/v2", "g/v2slash", "x"]);
        assert_eq!(listing["x"]["shape"], json!([16]));
        assert!(listing["x"].get("manifest").is_none(), "manifests are never served");
        let g: Value = server.get("/demo/g/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(g["consolidated_metadata"]["metadata"].as_object().unwrap().len(), 6);
        let x: Value = server.get("/demo/x/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(x["fill_value"], -1.0);
        assert_eq!(x["dimension_names"], json!(["d0"]));
    }

    async fn every_chunk_key_encoding(server) {
        register(&server).await;
        let floats = |a: u32| f32_bytes((a..a + 4).map(|i| i as f32));
        assert_eq!(server.bytes("/demo/x/c/1").await, floats(4));
        assert_eq!(server.bytes("/demo/g/dots/c.1.0").await, floats(0));
        assert_eq!(server.bytes("/demo/g/v2/0.1").await, floats(4));
        assert_eq!(server.bytes("/demo/g/v2slash/1/1").await, floats(8));
        assert_eq!(server.bytes("/demo/g/sub/scalar/c").await, f32_bytes([1.5]));
        assert_eq!(server.bytes("/demo/g/sub/scalar_v2/0").await, f32_bytes([2.5]));
        for (key, why) in [
            ("x/c/3", "has no data"), ("x/c/4", "outside the chunk grid"), ("x/c.1", "not a chunk key"), ("x/1.0", "not a chunk key"),
            ("g/dots/c/1/0", "not a chunk key"), ("nothing/zarr.json", "no node"),
            // the Zarr v2 view has these at its own URL (tests/reach.rs), which the 404 names
            ("g/.zmetadata", "/v2/demo/g/.zmetadata"), ("x/.zgroup", "/v2/demo/x/.zgroup"), (".zgroup", "/v2/demo/.zgroup"),
        ] {
            let r = server.get(&format!("/demo/{key}"), &[]).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{key}");
            assert_eq!(r.headers()["content-type"], "application/problem+json");
            let body: Value = r.json().await.unwrap();
            assert!(body["detail"].as_str().unwrap().contains(why), "{key}: {body}");
        }
        assert_eq!(server.get("/nostore/zarr.json", &[]).await.status(), StatusCode::NOT_FOUND);
    }

    async fn ranges_are_relative_to_the_chunk(server) {
        register(&server).await;
        for key in ["x/c/1", "g/sub/scalar/c", "zarr.json"] {
            let full = server.bytes(&format!("/demo/{key}")).await;
            let len = full.len();
            for (range, start, end) in [("bytes=1-2", 1, 3), ("bytes=2-", 2, len), ("bytes=-3", len - 3, len), ("bytes=0-999", 0, len.min(1000))] {
                let r = server.get(&format!("/demo/{key}"), &[("range", range)]).await;
                assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT, "{key} {range}");
                assert_eq!(r.headers()["content-range"], format!("bytes {start}-{}/{len}", end - 1).as_str(), "{key} {range}");
                assert_eq!(r.headers()["content-length"], (end - start).to_string().as_str());
                assert_eq!(r.bytes().await.unwrap().to_vec(), full[start..end].to_vec(), "{key} {range}");
            }
            let r = server.get(&format!("/demo/{key}"), &[("range", &format!("bytes={len}-"))]).await;
            assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE, "{key}");
            assert_eq!(r.headers()["content-range"], format!("bytes */{len}").as_str());
            let r = server.get(&format!("/demo/{key}"), &[("range", "bytes=0-0, 2-3")]).await;
            assert_eq!(r.status(), StatusCode::OK, "several ranges: the whole body");
            assert_eq!(r.bytes().await.unwrap().to_vec(), full);
        }
    }

    async fn head_answers_from_the_manifest(server) {
        register(&server).await;
        for (key, len) in [("x/c/0", 16), ("g/sub/scalar/c", 4)] {
            let r = server.head(&format!("/demo/{key}")).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["content-length"], len.to_string().as_str());
            assert_eq!(r.headers()["accept-ranges"], "bytes");
            assert!(r.headers().contains_key("etag"));
        }
        let etag = server.get("/demo/x/c/0", &[]).await.headers()["etag"].clone();
        // With the source gone, HEAD still answers: it never asks the source.
        std::fs::remove_file(server.data.join("x.bin")).unwrap();
        let r = server.head("/demo/x/c/0").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-length"], "16");
        assert_eq!(r.headers()["etag"], etag);
        assert_eq!(server.get("/demo/x/c/0", &[]).await.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(server.head("/demo/x/c/3").await.status(), StatusCode::NOT_FOUND);
    }

    async fn conditional_requests_and_caching_headers(server) {
        let version = register(&server).await;
        for key in ["zarr.json", "x/c/0", "g/sub/scalar/c"] {
            let r = server.get(&format!("/demo/{key}"), &[]).await;
            let etag = r.headers()["etag"].to_str().unwrap().to_owned();
            assert!(etag.starts_with('"') && !etag.starts_with("W/"), "strong ETag: {etag}");
            assert_eq!(r.headers()["cache-control"], "public, max-age=60");
            assert_eq!(r.headers()["zarrgate-version"], version.to_string().as_str());
            assert!(r.headers().contains_key("last-modified"));
            let length = r.headers()["content-length"].clone();
            let r = server.get(&format!("/demo/{key}"), &[("if-none-match", &etag)]).await;
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{key}");
            assert_eq!(r.headers()["etag"], etag.as_str());
            let head = server.client.head(format!("{}/demo/{key}", server.url)).header("if-none-match", &etag);
            let r = head.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{key}");
            assert_eq!(r.headers()["content-length"], length, "{key}: a 304 names the 200's length, never 0");
            let r = server.get(&format!("/demo/{key}"), &[("range", "bytes=0-1"), ("if-range", "\"stale\"")]).await;
            assert_eq!(r.status(), StatusCode::OK, "a stale If-Range gets the whole body");
            let r = server.get(&format!("/demo/{key}"), &[("range", "bytes=0-1"), ("if-range", &etag)]).await;
            assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        }
        let pinned = server.get(&format!("/demo@{version}/x/c/0"), &[]).await;
        assert_eq!(pinned.headers()["cache-control"], "public, max-age=31536000, immutable");
        assert_eq!(pinned.bytes().await.unwrap().to_vec(), server.bytes("/demo/x/c/0").await);
        let missing = server.get(&format!("/demo@{version}/x/c/3"), &[]).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert_eq!(missing.headers()["cache-control"], "public, max-age=31536000, immutable", "a missing chunk is cacheable");
        assert_eq!(server.get(&format!("/demo@{}/x/c/0", version + 1000), &[]).await.status(), StatusCode::GONE);
        assert_eq!(server.get(&format!("/demo@{}/zarr.json", version + 1000), &[]).await.status(), StatusCode::GONE);
        for bad in ["latest", "", "+1", "-1", &format!("0{version}")] {
            let r = server.get(&format!("/demo@{bad}/x/c/0"), &[]).await;
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "@{bad}: never 404, which reads as fill values");
            assert!(r.text().await.unwrap().contains("is not a version number"));
        }
    }

    async fn chunks_are_never_content_encoded(server) {
        register(&server).await;
        let gz = [("accept-encoding", "gzip, deflate")];
        for (key, length) in [("x/c/0", "16"), ("g/sub/scalar/c", "4")] {
            let r = server.get(&format!("/demo/{key}"), &gz).await;
            assert!(r.headers().get("content-encoding").is_none(), "{key}");
            assert_eq!(r.headers()["content-type"], "application/octet-stream");
            assert_eq!(r.headers()["content-length"], length, "{key}: virtual and inline chunks say their length");
        }
        let plain_response = server.get("/demo/zarr.json", &[]).await;
        let length = plain_response.headers()["content-length"].to_str().unwrap().to_owned();
        let plain = plain_response.bytes().await.unwrap().to_vec();
        assert_eq!(length, plain.len().to_string());
        let r = server.get("/demo/zarr.json", &gz).await;
        assert_eq!(r.headers()["content-encoding"], "gzip");
        assert_eq!(r.headers()["vary"], "accept-encoding");
        let gz_etag = r.headers()["etag"].to_str().unwrap().to_owned();
        let gz_length = r.headers()["content-length"].to_str().unwrap().to_owned();
        let compressed = r.bytes().await.unwrap();
        assert_eq!(gz_length, compressed.len().to_string(), "Content-Length of the compressed body");
        let mut decoded = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&compressed[..]), &mut decoded).unwrap();
        assert_eq!(decoded, plain);
        assert_ne!(gz_etag, server.get("/demo/zarr.json", &[]).await.headers()["etag"].to_str().unwrap(), "each representation has its own ETag");
        assert!(server.get("/demo/zarr.json", &[("accept-encoding", "gzip;q=0")]).await.headers().get("content-encoding").is_none());
    }

    async fn large_documents_are_compressed_once_for_every_reader(server) {
        // A root document well above the 8 KiB at which documents are compressed off the async
        // workers, after the view is built: readers asking for gzip at once, racing that task,
        // all get the same compressed body, which decodes to the document.
        let nodes: serde_json::Map<String, Value> = std::iter::once(("".to_owned(), json!({"zarr_format": 3, "node_type": "group"})))
            .chain((0..300).map(|i| (format!("g{}/a{i:03}", i % 7), f32_array(&[4], &[4], json!({"attributes": {"index": i}})))))
            .collect();
        let (status, body) = server.put("/api/v1/stores/big", &json!({"nodes": nodes})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        // Some readers leave at once: those who stay are still answered.
        let url = format!("{}/big/zarr.json", server.url);
        let leaving: Vec<_> = (0..4)
            .map(|_| tokio::spawn(reqwest::get(url.clone())))
            .collect();
        let readers = (0..8).map(|_| server.get("/big/zarr.json", &[("accept-encoding", "gzip")]));
        leaving.iter().for_each(tokio::task::JoinHandle::abort);
        let answers = futures::future::join_all(readers).await;
        let plain = server.bytes("/big/zarr.json").await;
        assert!(plain.len() > 64 << 10, "{} bytes", plain.len());
        let root: Value = serde_json::from_slice(&plain).unwrap();
        assert_eq!(root["consolidated_metadata"]["metadata"]["g6/a272"]["attributes"]["index"], 272);
        let mut tags = std::collections::BTreeSet::new();
        for r in answers {
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["content-encoding"], "gzip");
            tags.insert(r.headers()["etag"].to_str().unwrap().to_owned());
            let compressed = r.bytes().await.unwrap();
            assert!(compressed.len() < plain.len() / 4, "{} bytes compressed", compressed.len());
            let mut decoded = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&compressed[..]), &mut decoded).unwrap();
            assert_eq!(decoded, plain);
        }
        assert_eq!(tags.len(), 1, "one compressed representation: {tags:?}");
        // An array's document is its entry in the root's listing, byte for byte.
        let array = server.bytes("/big/g6/a272/zarr.json").await;
        let listed = serde_json::to_vec(&root["consolidated_metadata"]["metadata"]["g6/a272"]).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&array).unwrap(), serde_json::from_slice::<Value>(&listed).unwrap());
        assert!(plain.windows(array.len()).any(|w| w == array.as_slice()), "the array's document appears as is in the root's");
    }

    async fn cors_and_double_slashes(server) {
        register(&server).await;
        let r = server.get("/demo/x/c/0", &[("origin", "https://viewer.example")]).await;
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        let exposed = r.headers()["access-control-expose-headers"].to_str().unwrap().to_owned();
        for h in ["content-range", "content-length", "etag", "accept-ranges"] {
            assert!(exposed.contains(h), "{exposed}");
        }
        let preflight = server.client.request(reqwest::Method::OPTIONS, format!("{}/demo/x/c/0", server.url))
            .header("origin", "https://viewer.example")
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "range, if-none-match")
            .send().await.unwrap();
        assert!(preflight.status().is_success());
        let allowed = preflight.headers()["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
        assert!(allowed.contains("range") && allowed.contains("if-none-match"), "{allowed}");
        assert_eq!(server.bytes("/demo//zarr.json").await, server.bytes("/demo/zarr.json").await);
        assert_eq!(server.bytes("/demo//x//c/0").await, server.bytes("/demo/x/c/0").await);
    }

    async fn reads_answered_in_front_of_the_router_are_the_routers_answers(server) {
        // A plain `GET /{store}/{key}` is answered in front of the router (src/http/front.rs); the
        // same key with one character percent-encoded goes through the router. Both answers must
        // be the same: status, body, and every header but the request id and the date.
        let version = register(&server).await;
        let demo = format!("demo@{version}");
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("demo/x/c/0", &[]),
            ("demo/x/c/1", &[("origin", "https://viewer.example")]),
            ("demo/x/c/2", &[("range", "bytes=4-7")]),
            ("demo/zarr.json", &[]),
            ("demo/zarr.json", &[("accept-encoding", "gzip")]),
            ("demo/g/sub/scalar/c", &[]),
            ("demo/x/c/3", &[("origin", "https://viewer.example")]),
            ("demo/x/c/9", &[]),
            ("demo/nothing/zarr.json", &[]),
            ("demo/x/", &[]),
            ("demo/.zmetadata", &[]),
            ("demo@x/zarr.json", &[]),
            ("nostore/zarr.json", &[]),
            (&format!("{demo}/x/c/0"), &[("x-request-id", "mine-42")]),
        ];
        let mut etag_of_first = None;
        // Twice: a worker thread answers a read in front of the router without waiting only once
        // it has the store's head and view at hand, and a full answer from a head it built once
        // (`answer::full`); the first round may find neither.
        for (path, headers) in cases.iter().chain(cases) {
            let plain = server.get(&format!("/{path}"), headers).await;
            // The last character of the path, percent-encoded: the router decodes it back.
            let last = path.len() - path.chars().last().unwrap().len_utf8();
            let encoded = format!("/{}%{:02X}", &path[..last], path.as_bytes()[last]);
            let routed = server.get(&encoded, headers).await;
            assert_eq!(plain.status(), routed.status(), "{path}");
            let strip = |r: &reqwest::Response| {
                let mut h: Vec<(String, String)> = r.headers().iter()
                    .filter(|(n, _)| *n != "date" && (*n != "x-request-id" || headers.iter().any(|(k, _)| *k == "x-request-id")))
                    .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                    .collect();
                h.sort();
                h
            };
            assert_eq!(strip(&plain), strip(&routed), "{path}");
            assert!(plain.headers().contains_key("x-request-id"), "{path}");
            if etag_of_first.is_none() {
                etag_of_first = Some(plain.headers()["etag"].to_str().unwrap().to_owned());
            }
            assert_eq!(plain.bytes().await.unwrap(), routed.bytes().await.unwrap(), "{path}");
        }
        // Conditional requests, and the counting: both paths count under the route's template.
        let tag = etag_of_first.unwrap();
        assert_eq!(server.get("/demo/x/c/0", &[("if-none-match", &tag)]).await.status(), StatusCode::NOT_MODIFIED);
        let route = [("route", "/{store}/{*key}"), ("method", "GET")];
        for (status, at_least) in [("200", 24.0), ("206", 4.0), ("304", 1.0), ("400", 4.0), ("404", 16.0)] {
            let labels = [route[0], route[1], ("status", status)];
            let counted = server.metric_sum("zarrgate_http_requests_total", &labels).await;
            assert!(counted >= at_least, "{status}: {counted}");
        }
    }

    async fn plain_reads_answered_before_hyper_are_the_routers_answers(server) {
        // A plain read (a GET of a metadata document or an inline chunk asking no range and
        // revalidating nothing) is answered on the connection before hyper sees it
        // (src/server/connection/plain.rs). Each is sent twice, pipelined, on a connection of
        // its own: both answers must be the router's (status, every header but the date and a
        // request id made here, body), and the request's own id echoed.
        let version = register(&server).await;
        let cases: &[(&str, &str)] = &[
            ("demo/zarr.json", ""),
            ("demo/zarr.json", "Accept-Encoding: gzip, deflate\r\n"),
            ("demo/zarr.json", "accept-encoding: gzip;q=0\r\n"),
            ("demo/g/sub/zarr.json", "Connection: keep-alive\r\nUser-Agent: test\r\n"),
            ("demo/g/sub/scalar/c", ""),
            ("demo/g/sub/scalar_v2/0", "Origin: https://viewer.example\r\n"),
            (&format!("demo@{version}/zarr.json"), ""),
            (&format!("demo@{version}/g/sub/scalar/c"), "X-Request-Id: mine-42\r\n"),
        ];
        for (path, extra) in cases {
            let request = format!("GET /{path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n");
            let answers = exchange(&server, &request.repeat(2), &[false, false]).await;
            let last = path.len() - 1;
            let encoded = format!("/{}%{:02X}", &path[..last], path.as_bytes()[last]);
            let headers: Vec<(&str, &str)> = extra.split("\r\n").filter_map(|l| l.split_once(": ")).collect();
            let routed = server.get(&encoded, &headers).await;
            let own_id = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-request-id")).map(|(_, v)| *v);
            let mut expected: Vec<(String, String)> = routed.headers().iter()
                .filter(|(n, _)| *n != "date" && (*n != "x-request-id" || own_id.is_some()))
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                .collect();
            expected.sort();
            let (status, body) = (routed.status().as_u16(), routed.bytes().await.unwrap());
            assert_eq!(status, 200, "{path}");
            let mut ids = Vec::new();
            for (got_status, got_headers, got_body) in answers {
                assert_eq!(got_status, status, "{path}");
                let id = got_headers.iter().find(|(n, _)| n == "x-request-id").map(|(_, v)| v.clone());
                ids.push(id.unwrap_or_else(|| panic!("{path}: no request id")));
                let mut got: Vec<(String, String)> = got_headers.into_iter()
                    .filter(|(n, _)| n != "date" && (n != "x-request-id" || own_id.is_some()))
                    .collect();
                got.sort();
                assert_eq!(got, expected, "{path}");
                assert_eq!(got_body, body, "{path}");
            }
            match own_id {
                Some(own) => assert!(ids.iter().all(|id| id == own), "{path}: {ids:?}"),
                None => assert_ne!(ids[0], ids[1], "{path}: two requests, one id"),
            }
        }
        // Anything else in a pipeline is hyper's, from that request on; every answer comes back
        // in order. A Range, then HEAD, then plain reads again, then a virtual chunk.
        let root = server.bytes("/demo/zarr.json").await;
        let scalar = server.bytes("/demo/g/sub/scalar/c").await;
        let x0 = server.bytes("/demo/x/c/0").await;
        let plain = |path: &str| format!("GET /{path} HTTP/1.1\r\nHost: test\r\n\r\n");
        let pipeline = [
            plain("demo/zarr.json"),
            "GET /demo/zarr.json HTTP/1.1\r\nHost: test\r\nRange: bytes=0-9\r\n\r\n".into(),
            "HEAD /demo/g/sub/scalar/c HTTP/1.1\r\nHost: test\r\n\r\n".into(),
            plain("demo/g/sub/scalar/c"),
            plain("demo/x/c/0"),
            plain("demo/nothing/zarr.json"),
            plain("demo/zarr.json"),
        ]
        .concat();
        let answers = exchange(&server, &pipeline, &[false, false, true, false, false, false, false]).await;
        let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
        assert_eq!(statuses, [200, 206, 200, 200, 200, 404, 200]);
        assert_eq!(answers[0].2, root);
        assert_eq!(answers[1].2, root[..10]);
        assert!(answers[2].2.is_empty());
        assert_eq!(answers[3].2, scalar);
        assert_eq!(answers[4].2, x0);
        assert_eq!(answers[6].2, root);
        // A plain read first, then a request hyper refuses: the read is answered, then the 400.
        let answers = exchange(&server, &format!("{}GET /demo/zarr.json HTTP/1.1\r\nHost: a\r\nHost b\r\n\r\n", plain("demo/zarr.json")), &[false, false]).await;
        assert_eq!(answers.iter().map(|a| a.0).collect::<Vec<_>>(), [200, 400]);
        // Counted as reads of the key route, as the router's are.
        let labels = [("route", "/{store}/{*key}"), ("method", "GET"), ("status", "200")];
        assert!(server.metric_sum("zarrgate_http_requests_total", &labels).await >= 2.0 * cases.len() as f64 + 4.0);
    }

    async fn a_requests_headers_never_reach_an_answer(server) {
        // An answer's header map is the emptied map of a request answered before it on the same
        // thread (src/http/answer.rs, `recycle`): nothing a client sent may show up in any answer,
        // its own or a later one, on any path.
        register(&server).await;
        let keys = ["/demo/zarr.json", "/demo/x/c/0", "/demo/g/sub/scalar/c", "/demo/x/c/9", "/demo/x/c/2"];
        let mut names_of = std::collections::HashMap::new();
        for round in 0..40 {
            let key = keys[round % keys.len()];
            let marker = format!("secret-{round}");
            let sent = [("x-leak-check", marker.as_str()), ("cookie", marker.as_str()), ("x-leak-extra", "1")];
            let r = server.get(key, &sent).await;
            let names: std::collections::BTreeSet<String> = r.headers().keys().map(|n| n.to_string()).collect();
            for (name, value) in r.headers() {
                assert!(!name.as_str().starts_with("x-leak") && name != "cookie", "{key}: answer carries {name}");
                assert!(!value.to_str().unwrap_or_default().contains("secret-"), "{key}: {name} carries a request's value");
            }
            // The same key gets the same header lines every time, whatever came before it.
            let first = names_of.entry(key).or_insert_with(|| names.clone());
            assert_eq!(*first, names, "{key} in round {round}");
        }
    }

    async fn versions_pin_what_they_served(server) {
        let first = register(&server).await;
        let old = server.bytes("/demo/x/c/0").await;
        let path = server.write("y.bin", &f32_bytes((100..104).map(|i| i as f32)));
        let doc = json!({"nodes": {"x": f32_array(&[16], &[4], json!({"manifest": {"0": {"path": path, "offset": 0, "length": 16}}}))}});
        let (status, body) = server.put("/api/v1/stores/demo", &doc).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let second = body["version"].as_i64().unwrap();
        assert_eq!(server.bytes("/demo/x/c/0").await, f32_bytes((100..104).map(|i| i as f32)));
        assert_eq!(server.bytes(&format!("/demo@{first}/x/c/0")).await, old);
        assert_eq!(server.get(&format!("/demo@{second}/x/c/1"), &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(server.get(&format!("/demo@{first}/x/c/1"), &[]).await.status(), StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etags_agree_across_replicas() {
    let a = TestServer::start(common::Backend::Sqlite).await;
    register(&a).await;
    let b = a.replica(|_| {}).await;
    for key in ["zarr.json", "x/c/0", "g/sub/scalar/c"] {
        let ea = a.get(&format!("/demo/{key}"), &[]).await.headers()["etag"].clone();
        let eb = b.get(&format!("/demo/{key}"), &[]).await.headers()["etag"].clone();
        assert_eq!(ea, eb, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_endpoints() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    register(&server).await;
    let _ = server.bytes("/demo/x/c/0").await;
    assert_eq!(server.get("/healthz", &[]).await.status(), StatusCode::OK);
    let ready: Value = server.get("/readyz", &[]).await.json().await.unwrap();
    assert_eq!(ready["catalog"], "sqlite");
    let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
    assert!(
        metrics.contains(r#"zarrgate_http_requests_total{method="GET",route="/{store}/{*key}",status="200"}"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"zarrgate_upstream_requests_total{object_store="local",outcome="ok"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"zarrgate_cache_misses_total{cache="blocks"}"#), "{metrics}");
    assert!(metrics.contains("zarrgate_registrations_total{outcome=\"created\"} 1"), "{metrics}");
    let r = server.get("/somewhere", &[]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.headers().contains_key("x-request-id"));
    // Every request its own id; a client's own id comes back as it sent it.
    let id = |r: &reqwest::Response| r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let (a, b) = (id(&server.get("/demo/x/c/0", &[]).await), id(&server.get("/demo/x/c/0", &[]).await));
    assert!(a != b && !a.is_empty(), "{a} {b}");
    assert_eq!(id(&server.get("/demo/x/c/0", &[("x-request-id", "trace-7")]).await), "trace-7");
    // Methods a client makes up share one label: they cannot grow /metrics without bound.
    for made_up in ["BREW", "MKCOL", "X-1"] {
        let method = reqwest::Method::from_bytes(made_up.as_bytes()).unwrap();
        let r = server.client.request(method, format!("{}/demo/x/c/0", server.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{made_up}");
    }
    let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
    assert!(!metrics.contains("BREW") && !metrics.contains("MKCOL"), "{metrics}");
    assert!(
        metrics.contains(r#"zarrgate_http_requests_total{method="other",route="/{store}/{*key}",status="405"} 3"#),
        "{metrics}"
    );
    // fsspec lists a store by asking for its directory: the listing (tests/reach.rs).
    let r = server.get("/demo/", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains(r#"<a href="x/">"#));
}

/// Many readers asking at once for a chunk whose block is not cached make one catalog query,
/// and every one of them gets the chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_load_a_block_once() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    register(&server).await;
    let queries = r#"zarrgate_catalog_query_duration_seconds_count{operation="block"}"#;
    assert_eq!(server.metric(queries).await, 0.0, "registering caches no block");
    let reads = (0..32).map(|_| server.bytes("/demo/x/c/2"));
    for body in futures::future::join_all(reads).await {
        assert_eq!(body, f32_bytes([8.0, 9.0, 10.0, 11.0]));
    }
    assert_eq!(server.metric(queries).await, 1.0, "32 concurrent misses, one query");
    assert_eq!(server.metric(r#"zarrgate_cache_misses_total{cache="blocks"}"#).await, 1.0);
    assert_eq!(server.metric(r#"zarrgate_cache_hits_total{cache="blocks"}"#).await, 31.0);
}

/// A read is looked up once, whichever ways it takes: a virtual chunk asked first on a
/// connection of its own is looked up before hyper and answered by hyper, and an inline chunk
/// whose block no cache held is answered before it; each counts one lookup of each cache it
/// needs (head, view, block), never two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_looked_up_once_whichever_ways_it_takes() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    register(&server).await;
    let lookups = |cache: &'static str| {
        let server = &server;
        async move {
            let hits = server.metric(&format!(r#"zarrgate_cache_hits_total{{cache="{cache}"}}"#)).await;
            hits + server.metric(&format!(r#"zarrgate_cache_misses_total{{cache="{cache}"}}"#)).await
        }
    };
    let x = f32_bytes([0.0, 1.0, 2.0, 3.0]);
    for (key, body) in [("x/c/0", &x[..]), ("x/c/0", &x[..]), ("g/sub/scalar/c", &[0, 0, 0xc0, 0x3f][..])] {
        let before = [lookups("heads").await, lookups("metadata").await, lookups("blocks").await];
        let answers = exchange(&server, &format!("GET /demo/{key} HTTP/1.1\r\nHost: test\r\n\r\n"), &[false]).await;
        assert_eq!((answers[0].0, &answers[0].2[..]), (200, body), "{key}");
        let after = [lookups("heads").await, lookups("metadata").await, lookups("blocks").await];
        assert_eq!(after.map(|a| a as i64), before.map(|b| b as i64 + 1), "{key}: head, view, block");
    }
}

/// With read tokens configured, every data-plane read needs one (or an admin token): without,
/// 401, which Zarr clients report as an error (never as fill values). Answers are `private`,
/// so a shared cache never hands them to a reader without a token. A browser's CORS preflight
/// (which carries no token) is still answered; the control plane still takes only admin tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_tokens_guard_the_data_plane() {
    let (admin, reader) = ("an-admin-token-of-some-length", "a-read-token-of-some-length");
    let server = TestServer::start_with(common::Backend::Sqlite, |c| {
        c.admin_tokens = vec![admin.into()];
        c.read_tokens = vec![reader.into()];
    })
    .await;
    let admin_auth = format!("Bearer {admin}");
    let read_auth = format!("Bearer {reader}");
    let r = server
        .client
        .put(format!("{}/api/v1/object-stores/local", server.url))
        .header("authorization", &admin_auth)
        .json(&json!({"url": url::Url::from_directory_path(&server.data).unwrap().as_str()}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let path = server.write("x.bin", &f32_bytes((0..4).map(|i| i as f32)));
    let doc = json!({"nodes": {"x": f32_array(&[8], &[4], json!({"manifest": {"0": {"path": path, "offset": 0, "length": 16}}}))}});
    let r = server.client.put(format!("{}/api/v1/stores/demo", server.url)).header("authorization", &admin_auth);
    let version = r.json(&doc).send().await.unwrap().json::<Value>().await.unwrap()["version"].as_i64().unwrap();

    for key in ["/demo/zarr.json", "/demo/x/c/0", "/demo/x/c/1", &format!("/demo@{version}/x/c/0")] {
        for refused in [vec![], vec![("authorization", "Bearer not-a-token-we-know")]] {
            let r = server.get(key, &refused).await;
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{key} {refused:?}");
            assert_eq!(r.headers()["www-authenticate"], "Bearer");
            assert_eq!(r.headers()["cache-control"], "no-store");
        }
    }
    let r = server.get("/demo/x/c/0", &[("authorization", &read_auth)]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "private, max-age=60");
    assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes((0..4).map(|i| i as f32)));
    let r = server.get(&format!("/demo@{version}/x/c/0"), &[("authorization", &admin_auth)]).await;
    assert_eq!(r.status(), StatusCode::OK, "an admin token reads too");
    assert_eq!(r.headers()["cache-control"], "private, max-age=31536000, immutable");
    let r = server.get("/demo/x/c/1", &[("authorization", &read_auth)]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "a missing chunk, once the reader is known");
    assert_eq!(r.headers()["cache-control"], "private, max-age=60");
    // The preflight of a browser reading with a token.
    let preflight = server
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/demo/x/c/0", server.url))
        .header("origin", "https://viewer.example.org")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization, range")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = preflight.headers()["access-control-allow-headers"].to_str().unwrap().to_owned();
    assert!(allowed.contains("authorization"), "{allowed}");
    // A read token is not an admin token.
    let r = server.get("/api/v1/stores", &[("authorization", &read_auth)]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(server.get("/healthz", &[]).await.status(), StatusCode::OK, "ops stay public");
}

/// Sends `requests` (raw HTTP/1.1, pipelined) on a connection of its own and reads one answer
/// per entry of `heads` (whether it answers a HEAD: no body): status, header lines (names in
/// lower case, in order) and body.
async fn exchange(server: &TestServer, requests: &str, heads: &[bool]) -> Vec<(u16, Vec<(String, String)>, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.url.trim_start_matches("http://")).await.unwrap();
    stream.write_all(requests.as_bytes()).await.unwrap();
    let (mut buf, mut answers) = (Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while answers.len() < heads.len() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(len)) = response.parse(&buf) {
            let lines: Vec<(String, String)> = response
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8(h.value.to_vec()).unwrap()))
                .collect();
            let length: usize =
                lines.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
            let length = if heads[answers.len()] { 0 } else { length };
            if buf.len() >= len + length {
                answers.push((response.code.unwrap(), lines, buf[len..len + length].to_vec()));
                buf.drain(..len + length);
                continue;
            }
        }
        let mut more = [0u8; 65536];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut more)).await.expect("answers in time").unwrap();
        assert!(n > 0, "connection closed after {} answers of {}", answers.len(), heads.len());
        buf.extend_from_slice(&more[..n]);
    }
    answers
}

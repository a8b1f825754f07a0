//! Bad input, by cause: a body that is not JSON is `400`, JSON that breaks the rules `422`, a
//! body over its limit `413`, each a problem+json that says where, and none changes what is
//! stored. Chunks whose bytes cannot be what the array's codecs make are refused (`422`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use common::{TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Everything a client can see of what is stored: the stores with their versions, the object
/// stores, and the bytes of a chunk.
async fn stored_state(server: &TestServer) -> (Value, Value, Vec<u8>) {
    let stores: Value = server.get("/api/v1/stores", &[]).await.json().await.unwrap();
    let object_stores: Value = server.get("/api/v1/object-stores", &[]).await.json().await.unwrap();
    (stores, object_stores, server.bytes("/s/x/c/0").await)
}

/// `method path` with `body` sent as `content_type`; the status and the problem.
async fn send(server: &TestServer, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let r = server
        .client
        .request(method, format!("{}{path}", server.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    assert_eq!(r.headers()["content-type"], "application/problem+json", "{path}: {status}");
    (status, r.json().await.unwrap())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Store `s`: array `x` of 4 floats in chunks of 2, chunk 0 virtual.
async fn seed(server: &TestServer) -> Value {
    server.local_store().await;
    let path = server.write("x.bin", &f32_bytes([1.0, 2.0]));
    let doc = json!({"nodes": {"x": f32_array(&[4], &[2], json!({"manifest": {"0": {"path": path, "offset": 0, "length": 8}}}))}});
    let (status, body) = server.put("/api/v1/stores/s", &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    doc
}

const JSON: &str = "application/json";

/// A request and what must come back: method, path, content type, body; status, problem type
/// and words of the detail.
type Case = (&'static str, &'static str, &'static str, Vec<u8>, StatusCode, &'static str, &'static [&'static str]);

both_backends! {
    async fn each_cause_has_its_status_and_nothing_is_stored(server) {
        let server = server.restart_with(|c| c.http.max_body_bytes = 4096).await;
        let good = seed(&server).await;
        let before = stored_state(&server).await;
        let multipart = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.json\"\r\n\r\n{}\r\n--xyz--\r\n";
        let cases: Vec<Case> = vec![
            // Not JSON at all: 400, saying where.
            ("PUT", "/api/v1/stores/s", JSON, br#"{"nodes": {"x": {"#.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "EOF", "byte 17"]),
            ("PUT", "/api/v1/stores/s", JSON, b"{\"nodes\": {\"\xff\": {}}}".to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "line 1"]),
            ("PUT", "/api/v1/stores/s", JSON, b"{\"nodes\": {}} {".to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["trailing characters", "byte 14"]),
            ("PUT", "/api/v1/stores/s", JSON, b"".to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON"]),
            ("PUT", "/api/v1/stores/s", "multipart/form-data; boundary=xyz", multipart.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "invalid number", "byte 1"]),
            ("PUT", "/api/v1/stores/s?format=kerchunk", JSON, br#"{"version": 1, "refs": {"a/0": ["/x", 0"#.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "kerchunk"]),
            ("PUT", "/api/v1/stores/s", "application/x-tar", br#"{"nodes": {}}"#.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not a valid tar archive"]),
            ("PATCH", "/api/v1/stores/s", JSON, br#"{"nodes": {"x": {"shape": [6"#.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "EOF"]),
            ("PUT", "/api/v1/object-stores/o", JSON, br#"{"url": "s3://b/""#.to_vec(), StatusCode::BAD_REQUEST, "bad-request", &["not valid JSON", "byte"]),
            // JSON that is not a manifest: 422, naming what was expected.
            ("PUT", "/api/v1/stores/s", JSON, b"[1, 2]".to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["expected a manifest document", "byte 0"]),
            ("PUT", "/api/v1/stores/s", JSON, br#"{"nodes": {"x": 5}}"#.to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["node \"x\"", "byte 16"]),
            ("PUT", "/api/v1/stores/s", JSON, br#"{"nodes": {"x": {"manifest": {"0": {"path": "/a", "offst": 1}}}}}"#.to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["unknown field `offst`"]),
            ("PATCH", "/api/v1/stores/s", JSON, br#"{"nodes": []}"#.to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["an object of nodes"]),
            ("PUT", "/api/v1/object-stores/o", JSON, br#"{"url": 5}"#.to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["invalid type", "byte 8"]),
            ("PUT", "/api/v1/object-stores/o", JSON, br#"{"url": "s3://b/", "colour": "blue"}"#.to_vec(), StatusCode::UNPROCESSABLE_ENTITY, "invalid", &["unknown field `colour`"]),
            // Too large: 413 with the limit.
            ("PUT", "/api/v1/stores/s", JSON, vec![b' '; 4097], StatusCode::PAYLOAD_TOO_LARGE, "too-large", &["4096 bytes", "http.max_body_bytes"]),
            ("PATCH", "/api/v1/stores/s", JSON, vec![b' '; 4097], StatusCode::PAYLOAD_TOO_LARGE, "too-large", &["4096 bytes", "http.max_body_bytes"]),
            ("PUT", "/api/v1/object-stores/o", JSON, vec![b' '; (2 << 20) + 1], StatusCode::PAYLOAD_TOO_LARGE, "too-large", &["2097152 bytes", "object store registration"]),
        ];
        let mut wrong = Vec::new();
        for (method, path, content_type, body, status, kind, words) in cases {
            let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
            let (got, problem) = send(&server, method, path, content_type, body).await;
            let detail = problem["detail"].as_str().unwrap_or_default();
            let kind_ok = problem["type"] == format!("urn:zarrgate:problem:{kind}") && problem["status"] == status.as_u16();
            if got != status || !kind_ok || !words.iter().all(|w| detail.contains(w)) {
                wrong.push(format!("{method} {path} {shown:?}: wanted {status} {kind} {words:?}, got {got} {problem}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        // A body over the limit with no declared length is counted as it arrives.
        let pieces = futures::stream::iter((0..5).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
        let r = server.client.put(format!("{}/api/v1/stores/s", server.url)).body(reqwest::Body::wrap_stream(pieces)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(r.text().await.unwrap().contains("4096 bytes"));

        assert_eq!(stored_state(&server).await, before, "nothing was stored");
        assert_eq!(server.put("/api/v1/stores/s", &good).await.0, StatusCode::OK, "the same document still registers");
    }

    async fn chunks_that_cannot_decode_are_refused(server) {
        seed(&server).await;
        let before = stored_state(&server).await;
        let path = server.write("short.bin", &[0u8; 64]);
        // float32 chunks of 2 with codecs [bytes]: every chunk is 8 bytes.
        let doc = json!({"nodes": {"x": f32_array(&[8], &[2], json!({"manifest": {
            "0": {"path": path, "offset": 0, "length": 3},
            "1": {"data": base64(&[1, 2, 3])},
            "2": {"path": path, "offset": 8, "length": 8},
            "3": {"data": base64(&f32_bytes([5.0, 6.0]))},
        }}))}});
        let (status, body) = server.put("/api/v1/stores/s", &doc).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let problems: Vec<&str> = body["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
        assert_eq!(problems.len(), 2, "both, and only the bad ones: {problems:#?}");
        assert!(problems[0].starts_with("array x, chunk \"0\": its length is 3 bytes") && problems[0].contains("exactly 8 bytes"), "{}", problems[0]);
        assert!(problems[1].starts_with("array x, chunk \"1\": inline: its length is 3 bytes"), "{}", problems[1]);
        assert_eq!(stored_state(&server).await, before, "nothing was stored");

        // With a compressor, inline chunks are decoded: one that gives a whole chunk is served.
        let gz = |m: Value| f32_array(&[4], &[2], json!({"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}], "manifest": m}));
        let short = json!({"nodes": {"z": gz(json!({"0": {"data": base64(&gzip(&[0; 3]))}, "1": {"data": base64(b"not gzip")}}))}});
        let (status, body) = server.put("/api/v1/stores/s", &short).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let text = body["problems"].to_string();
        assert!(text.contains("array z, chunk \\\"0\\\": its 23 inline bytes do not decode") && text.contains("chunk of shape [2]"), "{text}");
        assert!(text.contains("array z, chunk \\\"1\\\": its 8 inline bytes do not decode through the array's codecs [bytes, gzip]"), "{text}");
        assert_eq!(stored_state(&server).await, before, "nothing was stored");
        let whole = gzip(&f32_bytes([7.0, 8.0]));
        let good = json!({"nodes": {"z": gz(json!({"1": {"data": base64(&whole)}}))}});
        let (status, body) = server.put("/api/v1/stores/t", &good).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(server.bytes("/t/z/c/1").await, whole);

        // PATCH is held to the same rules.
        let patch = json!({"nodes": {"x": {"manifest": {"1": {"data": base64(&[9; 7])}}}}});
        let r = server.client.patch(format!("{}/api/v1/stores/s", server.url)).json(&patch).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = r.json().await.unwrap();
        assert!(body["problems"][0].as_str().unwrap().contains("array x, chunk \"1\": inline: its length is 7 bytes"), "{body}");
        assert_eq!(stored_state(&server).await.0["stores"][0], before.0["stores"][0], "nothing was stored");
    }
}

//! The store browser as a browser meets it: pages for `Accept: text/html` (the tree, an array's
//! details, escaped attributes), the plain listing for everyone else, quick-look images with
//! their ETags and bounds, and the root page behind read tokens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestServer, f32_array, f32_bytes};
use reqwest::StatusCode;
use serde_json::{Value, json};

const HTML: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// `air` (3 x 4 x 6 floats, chunks of 1 x 4 x 6): chunk 0 virtual, 1 inline, 2 missing.
async fn register(server: &TestServer, name: &str) {
    server.local_store().await;
    let values = f32_bytes((0..24).map(|i| i as f32));
    let path = server.write("air.bin", &values);
    use base64::Engine;
    let inline = base64::engine::general_purpose::STANDARD.encode(f32_bytes((0..24).map(|i| -(i as f32))));
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group",
             "attributes": {"title": "<script>alert(1)</script>", "note": "a & b"}},
        "obs": {"zarr_format": 3, "node_type": "group"},
        "obs/air": f32_array(&[3, 4, 6], &[1, 4, 6], json!({
            "attributes": {"units": "K"},
            "manifest": {"0.0.0": {"path": path, "offset": 0, "length": 96}, "1.0.0": {"data": inline}}})),
        "names": {"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "string",
                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
                  "chunk_key_encoding": {"name": "default"}, "fill_value": "",
                  "codecs": [{"name": "vlen-utf8"}]},
    }});
    let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &doc).await;
    assert!(status.is_success(), "{status} {body}");
}

async fn page(server: &TestServer, path: &str) -> String {
    let r = server.get(path, &[("accept", HTML)]).await;
    assert_eq!(r.status(), StatusCode::OK, "GET {path}");
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["vary"], "accept");
    r.text().await.unwrap()
}

both_backends! {

async fn a_browser_sees_the_tree_and_an_arrays_details(server) {
    register(&server, "demo").await;
    let root = page(&server, "/demo/").await;
    assert!(root.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "attributes are escaped");
    assert!(!root.contains("<script>alert(1)"), "no attribute runs as script");
    assert!(root.contains("a &amp; b"));
    for link in ["href=\"obs/\"", "href=\"names/\"", "href=\"obs/air/\""] {
        assert!(root.contains(link), "{link} in the tree");
    }
    assert!(root.contains("id=\"snippet-xarray\""));
    let air = page(&server, "/demo/obs/air/").await;
    for fact in [
        "[3, 4, 6]",
        "float32",
        "[1, 4, 6]",
        "[&quot;d0&quot;,&quot;d1&quot;,&quot;d2&quot;]",
        "units",
        "1 virtual, 1 inline, 1 missing",
        "?quicklook=png",
        "href=\"../../\"",
    ] {
        assert!(air.contains(fact), "{fact} on the array's page:\n{air}");
    }
    assert!(air.contains("zarr.open_array(&quot;http://127.0.0.1"), "the snippet names the server");
    // fsspec (Accept: */*) keeps the plain listing
    let plain = server.get("/demo/", &[("accept", "*/*")]).await.text().await.unwrap();
    assert!(plain.starts_with("<!DOCTYPE html>") && plain.contains("Index of") && !plain.contains("snippet"));
}

async fn quick_looks_decode_the_first_chunk_and_are_cached_by_etag(server) {
    register(&server, "demo").await;
    let r = server.get("/demo/obs/air/?quicklook=png", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert!(r.headers()["cache-control"].to_str().unwrap().starts_with("public"));
    let tag = r.headers()["etag"].to_str().unwrap().to_owned();
    let png = r.bytes().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let again = server.get("/demo/obs/air/?quicklook=png", &[("if-none-match", &tag)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    let scale: Value = server.get("/demo/obs/air/?quicklook=json", &[]).await.json().await.unwrap();
    assert_eq!((scale["min"].as_f64(), scale["max"].as_f64()), (Some(0.0), Some(23.0)));
    assert_eq!(scale["plane"], json!([4, 6]));
    let strings = server.get("/demo/names/?quicklook=png", &[]).await;
    assert_eq!(strings.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(strings.text().await.unwrap().contains("only numbers are drawn"));
    assert_eq!(server.get("/demo/obs/air/?quicklook=gif", &[]).await.status(), StatusCode::BAD_REQUEST);
    // a chunk larger than the bound is refused before it is read
    let small = server.restart_with(|c| c.limits.max_fill_chunk_bytes = 64).await;
    register(&small, "demo").await;
    let refused = small.get("/demo/obs/air/?quicklook=png", &[]).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(refused.text().await.unwrap().contains("96 bytes decoded, above the 64"));
}

}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_page_lists_the_stores_a_reader_may_see() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.read_tokens = vec!["reader".into()]).await;
    register(&server, "demo").await;
    assert_eq!(server.get("/", &[("accept", HTML)]).await.status(), StatusCode::UNAUTHORIZED);
    let r = server.get("/", &[("accept", HTML), ("authorization", "Bearer reader")]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["cache-control"].to_str().unwrap().starts_with("private"));
    let body = r.text().await.unwrap();
    assert!(body.contains("<a href=\"demo/\">demo</a>"), "{body}");
    let air = server.get("/demo/obs/air/", &[("accept", HTML), ("authorization", "Bearer reader")]).await;
    assert!(air.text().await.unwrap().contains("Bearer &lt;read token&gt;"), "snippets say where the token goes");
    // not a browser: the 404 it always was
    let api = server.get("/", &[("authorization", "Bearer reader")]).await;
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
}

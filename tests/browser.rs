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

/// `GET` a control-plane path: its status and its JSON.
async fn get_json(server: &TestServer, path: &str) -> (StatusCode, Value) {
    let r = server.get(path, &[]).await;
    (r.status(), r.json().await.unwrap())
}

/// Node names a file can give its groups, each an attack on a page that would write it raw.
const HOSTILE: [&str; 6] = [
    "javascript:alert(document.domain)<!--",
    "\"><img src=x onerror=alert(1)>",
    "'-alert(1)-'",
    "a b?c#d%e&f",
    "\\\\evil.example",
    "été",
];

/// A store whose groups are named [`HOSTILE`], each holding a 2-D array `t`.
async fn register_hostile(server: &TestServer, name: &str) {
    let mut nodes = serde_json::Map::new();
    nodes.insert("".into(), json!({"zarr_format": 3, "node_type": "group"}));
    for group in HOSTILE {
        nodes.insert(group.into(), json!({"zarr_format": 3, "node_type": "group"}));
        nodes.insert(format!("{group}/t"), f32_array(&[2, 2], &[2, 2], json!({})));
    }
    let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &json!({"nodes": nodes})).await;
    assert!(status.is_success(), "{status} {body}");
}

/// Every `href` of a page.
fn links(html: &str) -> Vec<&str> {
    html.split("href=\"").skip(1).filter_map(|s| s.split('"').next()).collect()
}

fn assert_secured(r: &reqwest::Response, what: &str) {
    let policy = r.headers().get("content-security-policy").unwrap_or_else(|| panic!("no CSP on {what}"));
    let policy = policy.to_str().unwrap();
    for part in
        ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'", "img-src 'self'"]
    {
        assert!(policy.contains(part), "{what}: {part} in {policy}");
    }
    assert!(!policy.contains("unsafe-inline"), "{what}: {policy}");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff", "{what}");
}

both_backends! {

async fn hostile_node_names_stay_text_and_relative_links(server) {
    register_hostile(&server, "evil").await;
    for path in ["/evil/", "/evil/javascript%3Aalert(document.domain)%3C!--/t/", "/evil/%C3%A9t%C3%A9/"] {
        let r = server.get(path, &[("accept", HTML)]).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_secured(&r, path);
        let html = r.text().await.unwrap();
        assert!(!html.contains("<img src=x"), "{path}: a name became an element:\n{html}");
        assert!(!html.contains("'-alert(1)-'"), "{path}: a quote is escaped");
        assert!(html.contains("&#39;-alert(1)-&#39;"), "{path}: {html}");
        for link in links(&html) {
            assert!(link.starts_with("./") || link.starts_with('?'), "{path}: link {link:?} is not relative");
            assert!(!link.contains(':') && !link.contains('\\') && !link.contains('<'), "{path}: {link:?}");
        }
        assert!(!html.contains(" style=\""), "{path}: an inline style attribute, which the policy blocks");
    }
    let root = page(&server, "/evil/").await;
    for link in [
        "./javascript%3Aalert(document.domain)%3C!--/",
        "./%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E/",
        "./%27-alert(1)-%27/",
        "./a%20b%3Fc%23d%25e&amp;f/",
        "./%5C%5Cevil.example/",
        "./%C3%A9t%C3%A9/",
    ] {
        assert!(root.contains(&format!("href=\"{link}\"")), "{link} on the root page:\n{root}");
    }
    assert!(root.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"), "the name shown as text");
    // each link leads to its node's page
    for link in links(&root).into_iter().filter(|l| l.len() > 2 && l.starts_with("./") && !l.starts_with("./.")) {
        let link = link.replace("&amp;", "&");
        let r = server.get(&format!("/evil/{}", &link[2..]), &[("accept", HTML)]).await;
        assert_eq!(r.status(), StatusCode::OK, "{link}");
    }
    // the plain listing (fsspec's): names percent-encoded, `:` too, and the same policy
    let r = server.get("/evil/", &[("accept", "*/*")]).await;
    assert_secured(&r, "the listing");
    let listing = r.text().await.unwrap();
    assert!(listing.contains("<a href=\"javascript%3Aalert(document.domain)%3C!--/\">"), "{listing}");
    assert!(!listing.contains("<img src=x"), "{listing}");
    assert!(!listing.contains("href=\"javascript:"), "{listing}");
    // the root page and the quick look's page
    let r = server.get("/", &[("accept", HTML)]).await;
    assert_secured(&r, "the list of stores");
}

async fn a_browser_gets_errors_as_pages(server) {
    register(&server, "demo").await;
    let r = server.get("/demo/obs/nothing%3Cb%3E/", &[("accept", HTML)]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_secured(&r, "the 404 page");
    let html = r.text().await.unwrap();
    assert!(html.contains("<h2>404 Not Found</h2>"), "{html}");
    assert!(html.contains("no group or array at &quot;obs/nothing&lt;b&gt;&quot;"), "{html}");
    assert!(!html.contains("<b>\""), "the detail is escaped: {html}");
    assert!(html.contains("<a id=\"store\" href=\"./../../\">store demo</a>"), "{html}");
    assert!(html.contains("<a id=\"stores\" href=\"./../../../\">all stores</a>"), "{html}");
    // a missing chunk (through the plain-read path) and a missing store
    for path in ["/demo/obs/air/c/2/0/0", "/nostore/", "/nostore/zarr.json", "/demo@x/"] {
        let r = server.get(path, &[("accept", HTML)]).await;
        assert!(r.status().is_client_error(), "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8", "{path}");
        assert_secured(&r, path);
    }
    // every other client keeps the problem as JSON
    for accept in ["*/*", "application/json"] {
        let r = server.get("/demo/obs/nothing/", &[("accept", accept)]).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{accept}");
    }
    let r = server.get("/demo/obs/air/c/2/0/0", &[]).await;
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

async fn a_page_reads_as_a_person_would_write_it(server) {
    server.local_store().await;
    let path = server.write("t.bin", &f32_bytes((0..3604).map(|i| i as f32)));
    let fill = "AAAAAICHw8A="; // xarray's encoded -9999.0
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group"},
        "t": f32_array(&[2, 2], &[2, 2], json!({
            "attributes": {"_FillValue": fill},
            "manifest": {"0.0": {"path": path, "offset": 0, "length": 16}}})),
        "line": f32_array(&[4], &[4], json!({})),
        "big": f32_array(&[60, 60], &[60, 60], json!({
            "manifest": {"0.0": {"path": path, "offset": 16, "length": 14_400}}})),
        "shuffled": f32_array(&[2, 2], &[2, 2], json!({"codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
            {"name": "numcodecs.zlib", "configuration": {"level": 4}}]})),
    }});
    let (status, body) = server.put("/api/v1/stores/demo", &doc).await;
    assert!(status.is_success(), "{status} {body}");
    let t = page(&server, "/demo/t/").await;
    assert!(t.contains("-9999.0 <span class=\"dim\">(encoded AAAAAICHw8A=)</span>"), "{t}");
    assert!(t.contains("[1, 1]: 1 chunk,"), "{t}");
    assert!(t.contains(": 4 arrays, 1 group, chunks 2 virtual"), "one group, the root: {t}");
    assert!(t.contains(", 1 source, <span title=\"14,416 bytes\">14.4 kB</span> referenced."), "{t}");
    assert!(t.contains("id=\"snippet-gdal\""), "GDAL reads a 2-D array of floats");
    let line = page(&server, "/demo/line/").await;
    assert!(line.contains("GDAL cannot read this array: it reads arrays of two dimensions or more"), "{line}");
    assert!(!line.contains("gdalinfo"), "{line}");
    let shuffled = page(&server, "/demo/shuffled/").await;
    assert!(shuffled.contains("GDAL 3.10 (rasterio&#39;s wheels) has no shuffle filter"), "{shuffled}");
    assert!(!shuffled.contains("gdalinfo"), "{shuffled}");
}

async fn a_browser_sees_the_tree_and_an_arrays_details(server) {
    register(&server, "demo").await;
    let root = page(&server, "/demo/").await;
    assert!(root.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "attributes are escaped");
    assert!(!root.contains("<script>alert(1)"), "no attribute runs as script");
    assert!(root.contains("a &amp; b"));
    for link in ["href=\"./obs/\"", "href=\"./names/\"", "href=\"./obs/air/\""] {
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
        "href=\"./../../\"",
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


// A page and its image ask for the same quick look: it is fetched and drawn once per version.
async fn a_quick_look_is_drawn_once_and_then_served_from_memory(server) {
    register(&server, "demo").await;
    let upstream = r#"zarrgate_upstream_requests_total{object_store="local",outcome="ok"}"#;
    let before = server.get("/metrics", &[]).await.text().await.unwrap();
    let first = server.get("/demo/obs/air/?quicklook=png", &[]).await;
    let tag = first.headers()["etag"].clone();
    let png = first.bytes().await.unwrap();
    let scale: Value = server.get("/demo/obs/air/?quicklook=json", &[]).await.json().await.unwrap();
    let again = server.get("/demo/obs/air/?quicklook=png", &[]).await;
    assert_eq!(again.headers()["etag"], tag);
    assert_eq!(again.bytes().await.unwrap(), png, "the same image");
    assert_eq!(scale["max"].as_f64(), Some(23.0));
    let after = server.get("/metrics", &[]).await.text().await.unwrap();
    assert_eq!(common::metric_in(&after, r#"zarrgate_cache_misses_total{cache="quicklooks"}"#), 1.0, "{after}");
    assert_eq!(common::metric_in(&after, r#"zarrgate_cache_hits_total{cache="quicklooks"}"#), 2.0, "{after}");
    assert_eq!(common::metric_in(&after, upstream) - common::metric_in(&before, upstream), 1.0, "the chunk is read from its source once");

    // a new version is drawn again, from its own chunk
    register(&server, "demo").await;
    server.get("/demo/obs/air/?quicklook=png", &[]).await.bytes().await.unwrap();
    let last = server.get("/metrics", &[]).await.text().await.unwrap();
    assert_eq!(common::metric_in(&last, r#"zarrgate_cache_misses_total{cache="quicklooks"}"#), 2.0, "{last}");
}

async fn the_versions_are_listed_by_the_api_and_on_the_page(server) {
    register(&server, "demo").await;
    register(&server, "demo").await;
    register(&server, "demo").await;
    let (status, listed) = get_json(&server, "/api/v1/stores/demo/versions").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let versions = listed["versions"].as_array().unwrap();
    let ids: Vec<i64> = versions.iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] > ids[1] && ids[1] > ids[2], "newest first: {ids:?}");
    let current: Vec<bool> = versions.iter().map(|v| v["current"].as_bool().unwrap()).collect();
    assert_eq!(current, [true, false, false]);
    assert_eq!(versions[1]["versioned_url"], format!("/demo@{}", ids[1]));
    assert_eq!(listed["more"], false);
    let (_, one) = get_json(&server, "/api/v1/stores/demo/versions?limit=1").await;
    assert_eq!((one["versions"].as_array().unwrap().len(), &one["more"]), (1, &json!(true)));
    let (status, none) = get_json(&server, "/api/v1/stores/nothing/versions").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(none["detail"].as_str().unwrap().contains("no store is named"), "{none}");

    // the page of an array in an old version links every version, and says which is current
    let old = format!("/demo@{}/obs/air/", ids[2]);
    let r = server.get(&old, &[("accept", HTML)]).await;
    assert_eq!(r.status(), StatusCode::OK);
    let control = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(!control.contains("immutable"), "a page's list of versions grows: {control}");
    let html = r.text().await.unwrap();
    for id in &ids {
        assert!(html.contains(&format!("<a href=\"./../../../demo@{id}/\">demo@{id}</a>")), "version {id}:\n{html}");
    }
    assert!(html.contains("<td>current</td>"), "{html}");
    assert!(html.contains("<td>shown here</td>"), "{html}");
    // and a link followed from it lands on that version's page
    let newest = server.get(&format!("/demo@{}/", ids[0]), &[("accept", HTML)]).await;
    assert_eq!(newest.status(), StatusCode::OK);
    assert!(newest.text().await.unwrap().contains("<td>current, shown here</td>"));
}

}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_page_lists_the_stores_a_reader_may_see() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.read_tokens = vec!["reader".into()]).await;
    register(&server, "demo").await;
    let refused = server.get("/", &[("accept", HTML)]).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_secured(&refused, "a browser's 401");
    assert!(refused.text().await.unwrap().contains("reading this server&#39;s stores needs a token"));
    let r = server.get("/", &[("accept", HTML), ("authorization", "Bearer reader")]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["cache-control"].to_str().unwrap().starts_with("private"));
    let body = r.text().await.unwrap();
    assert!(body.contains("<a href=\"./demo/\">demo</a>"), "{body}");
    let air = server.get("/demo/obs/air/", &[("accept", HTML), ("authorization", "Bearer reader")]).await;
    assert!(air.text().await.unwrap().contains("Bearer &lt;read token&gt;"), "snippets say where the token goes");
    // not a browser: the 404 it always was
    let api = server.get("/", &[("authorization", "Bearer reader")]).await;
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
}

//! Chunks served from every kind of source (local files, an HTTP server, S3 through moto), and
//! upstream faults, which never look like missing data: not found or forbidden is 502, a timeout
//! 504, a source changed since registration 502 `source-modified`, and a short or otherwise wrong
//! upstream body never reaches a client as a complete 200.
//!
//! The S3 tests run `moto_server`: `ZARRGATE_TEST_MOTO` if set, else the test venv's (made by
//! `scripts/python-env.sh`), else the one on `PATH`. Without it they fail, they do not skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{Backend, TestServer, f32_array};
use object_store::ObjectStoreExt;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Bytes per chunk of the test array: 64 float32.
const CHUNK: u64 = 256;

/// Pseudo-random bytes (xorshift): a range read from the wrong offset cannot look right.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A virtual chunk reference.
fn vref(path: &str, offset: u64) -> Value {
    json!({"path": path, "offset": offset, "length": CHUNK})
}

/// A store with one array `x` of 16 chunks of [`CHUNK`] bytes, and `manifest` for it.
fn store_doc(manifest: Value) -> Value {
    json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {}},
        "x": f32_array(&[64 * 16], &[64], json!({"manifest": manifest})),
    }})
}

/// Registers without asking the sources for their facts (`?verify=false`): these tests are about
/// what reads do when sources misbehave, some of them from the start (registration-time checks
/// are in tests/versions.rs). Recorded ETags come only from the documents' `sources`.
async fn register(server: &TestServer, name: &str, doc: &Value) {
    let (status, body) = server.put(&format!("/api/v1/stores/{name}?verify=false"), doc).await;
    assert_eq!(status, StatusCode::CREATED, "registering {name}: {body}");
}

async fn register_object_store(server: &TestServer, name: &str, url: &str, options: Value) {
    let (status, body) =
        server.put(&format!("/api/v1/object-stores/{name}"), &json!({"url": url, "options": options})).await;
    assert_eq!(status, StatusCode::CREATED, "registering object store {name} at {url}: {body}");
}

/// Asserts `r` is an `application/problem+json` answer with `status` and problem type `kind`
/// whose detail mentions `mentions`; returns the body.
async fn assert_problem(r: reqwest::Response, status: StatusCode, kind: &str, mentions: &str) -> Value {
    let (got, url) = (r.status(), r.url().to_string());
    let content_type = r.headers().get("content-type").map(|v| v.to_str().unwrap_or("").to_owned()).unwrap_or_default();
    let text = r.text().await.unwrap_or_else(|e| panic!("GET {url}: {got}, body broke off: {e}"));
    assert_eq!(got, status, "GET {url}: {text}");
    assert_eq!(content_type, "application/problem+json", "GET {url}: {text}");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"));
    assert_eq!(body["type"], format!("urn:zarrgate:problem:{kind}"), "GET {url}: {body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(mentions), "GET {url}: the detail should mention {mentions:?}: {body}");
    body
}

/// What a client ends up with.
#[derive(Debug)]
enum Got {
    /// The whole response arrived.
    Complete(StatusCode, HeaderMap, Vec<u8>),
    /// The connection broke off: before the status (`None`) or during the body.
    Aborted(Option<StatusCode>, String),
}

/// Reads the whole response, or notes that its body broke off; fails if it takes over `limit`.
async fn receive(server: &TestServer, path: &str, headers: &[(&str, &str)], limit: Duration) -> Got {
    // A client of its own, with no pooled connection an earlier abort could have broken.
    let client = reqwest::Client::builder().no_gzip().pool_max_idle_per_host(0).build().unwrap();
    let read = async {
        let mut request = client.get(format!("{}{path}", server.url));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let r = match request.send().await {
            Ok(r) => r,
            Err(e) => return Got::Aborted(None, format!("{e:?}")),
        };
        let (status, headers) = (r.status(), r.headers().clone());
        match r.bytes().await {
            Ok(body) => Got::Complete(status, headers, body.to_vec()),
            Err(e) => Got::Aborted(Some(status), format!("{e:?}")),
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| panic!("GET {path}: no complete or aborted answer within {limit:?}"))
}

/// Asserts the client did not get data: either a complete upstream-failure problem (5xx,
/// `source-*` type) or a body that broke off. A complete 2xx fails, whatever its bytes.
fn assert_refused(got: &Got, what: &str) {
    match got {
        Got::Aborted(status, error) => eprintln!("{what}: {status:?}, then the connection broke off: {error}"),
        Got::Complete(status, headers, body) => {
            let text = String::from_utf8_lossy(body);
            assert!(
                status.is_server_error(),
                "{what}: the client received a complete {status} ({} bytes): {text}",
                body.len()
            );
            assert_eq!(
                headers.get("content-type").map(|v| v.to_str().unwrap_or("")),
                Some("application/problem+json"),
                "{what}: {text}"
            );
            let problem: Value = serde_json::from_slice(body).unwrap_or_default();
            let kind = problem["type"].as_str().unwrap_or_default();
            assert!(kind.starts_with("urn:zarrgate:problem:source-"), "{what}: {status} {text}");
        }
    }
}

/// Upstream requests to `store` with `outcome` (`ok` or an error kind).
async fn upstream_outcome(server: &TestServer, store: &str, outcome: &str) -> f64 {
    server.metric_sum("zarrgate_upstream_requests_total", &[("object_store", store), ("outcome", outcome)]).await
}

/// Upstream requests of every object store and outcome.
async fn upstream_requests(server: &TestServer) -> f64 {
    server.metric_sum("zarrgate_upstream_requests_total", &[]).await
}

// ------------------------------------------------------------------------------------------
// Local files
// ------------------------------------------------------------------------------------------

both_backends! {
    async fn local_files(server) {
        server.local_store().await;
        let a = pattern(4096, 1);
        let a_path = server.write("a.bin", &a);
        let nested = pattern(1024, 2);
        let nested_path = server.write("sub/dir/b.bin", &nested);
        let gone_path = server.write("gone.bin", &pattern(1024, 3));
        let short_path = server.write("short.bin", &pattern(1024, 4));
        // Outside the data directory (the object store's root), but on the same disk.
        let secret = b"TOP-SECRET-BYTES-".repeat(32);
        let outside_dir = server.dir().join("outside");
        std::fs::create_dir_all(&outside_dir).unwrap();
        std::fs::write(outside_dir.join("secret.bin"), &secret).unwrap();
        std::os::unix::fs::symlink(outside_dir.join("secret.bin"), server.data.join("link.bin")).unwrap();
        std::os::unix::fs::symlink(&outside_dir, server.data.join("dirlink")).unwrap();
        let data = server.data.display().to_string();

        register(&server, "local", &store_doc(json!({
            "0": vref(&a_path, 100),
            "1": vref(&a_path, 3000),
            "2": vref(&nested_path, 512),
            "3": vref(&gone_path, 0),
            "4": vref(&short_path, 600),
            "5": vref(&format!("{data}/link.bin"), 0),
            "6": vref(&format!("{data}/dirlink/secret.bin"), 0),
        }))).await;

        // Bytes equal, with a Content-Length.
        let r = server.get("/local/x/c/0", &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-length"], CHUNK.to_string());
        assert_eq!(r.bytes().await.unwrap(), a[100..356]);
        assert_eq!(server.bytes("/local/x/c/2").await, nested[512..768]);

        // A Range goes through to the source: only the requested bytes are read.
        let read_before = server.metric_sum("zarrgate_upstream_bytes_total", &[("object_store", "local")]).await;
        let r = server.get("/local/x/c/1", &[("Range", "bytes=10-19")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.headers()["content-range"], "bytes 10-19/256");
        assert_eq!(r.bytes().await.unwrap(), a[3010..3020]);
        let read = server.metric_sum("zarrgate_upstream_bytes_total", &[("object_store", "local")]).await - read_before;
        assert_eq!(read, 10.0, "a 10-byte range reads 10 bytes of the source");
        let r = server.get("/local/x/c/1", &[("Range", "bytes=-16")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.bytes().await.unwrap(), a[3240..3256]);

        // Deleted after registration: GET is 502 naming the file, never 404 (which reads as fill
        // value); HEAD still answers from the manifest alone.
        std::fs::remove_file(&gone_path).unwrap();
        let gone_url = url::Url::from_file_path(&gone_path).unwrap().to_string();
        assert_problem(server.get("/local/x/c/3", &[]).await, StatusCode::BAD_GATEWAY, "source-not-found", &gone_url).await;
        let before = upstream_requests(&server).await;
        let r = server.head("/local/x/c/3").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-length"], CHUNK.to_string());
        let r = server.head("/local/x/c/0").await;
        assert_eq!((r.status(), r.headers()["content-length"].to_str().unwrap()), (StatusCode::OK, "256"));
        assert_eq!(upstream_requests(&server).await, before, "HEAD makes no upstream request");

        // Truncated after registration: 502, never a 200 with fewer bytes.
        std::fs::OpenOptions::new().write(true).open(&short_path).unwrap().set_len(700).unwrap();
        let got = receive(&server, "/local/x/c/4", &[], Duration::from_secs(10)).await;
        assert_refused(&got, "truncated local file");
        assert_problem(server.get("/local/x/c/4", &[]).await, StatusCode::BAD_GATEWAY, "source-truncated", "short.bin").await;

        // Symlinks out of the data directory: 502 forbidden, never the bytes.
        for key in ["5", "6"] {
            let r = server.get(&format!("/local/x/c/{key}"), &[]).await;
            let (status, body) = (r.status(), r.bytes().await.unwrap());
            assert_eq!(status, StatusCode::BAD_GATEWAY, "chunk {key}: {}", String::from_utf8_lossy(&body));
            let text = String::from_utf8_lossy(&body);
            assert!(!text.contains("TOP-SECRET"), "chunk {key} leaked the file outside: {text}");
            let problem: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(problem["type"], "urn:zarrgate:problem:source-forbidden", "{problem}");
        }
        let r = server.get("/local/x/c/5", &[("Range", "bytes=0-9")]).await;
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);

        // `..` in a manifest path is refused at registration, and nothing is stored.
        for bad in [format!("{data}/../outside/secret.bin"), format!("file://{data}/%2e%2e/outside/secret.bin")] {
            let (status, body) = server.put("/api/v1/stores/dotdot", &store_doc(json!({"0": vref(&bad, 0)}))).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
            assert!(body.to_string().contains("`..`") && body.to_string().contains("secret.bin"), "{bad}: {body}");
        }
        assert_eq!(server.get("/dotdot/zarr.json", &[]).await.status(), StatusCode::NOT_FOUND);

        // The data plane's failures are counted per object store and outcome.
        assert_eq!(upstream_outcome(&server, "local", "not-found").await, 1.0);
        assert_eq!(upstream_outcome(&server, "local", "forbidden").await, 3.0);
    }
}

// ------------------------------------------------------------------------------------------
// HTTP sources
// ------------------------------------------------------------------------------------------

/// Requests a test HTTP server received: path and Range header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A static file server (tower-http `ServeDir`) under `/files/`, recording each request's path
/// and Range header.
struct WebServer {
    /// `http://127.0.0.1:<port>/files/`.
    base: String,
    dir: tempfile::TempDir,
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl WebServer {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().nest_service("/files", tower_http::services::ServeDir::new(dir.path())).layer(
            axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
                let record = record.clone();
                async move {
                    let range = req.headers().get("range").map(|v| v.to_str().unwrap_or("").to_owned());
                    // The path as sent, before `nest_service` strips `/files`.
                    let uri = req
                        .extensions()
                        .get::<axum::extract::OriginalUri>()
                        .map_or_else(|| req.uri().clone(), |o| o.0.clone());
                    record.lock().unwrap().push((uri.path().to_owned(), range));
                    next.run(req).await
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/files/", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base, dir, seen, task }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        std::fs::write(self.dir.path().join(name), bytes).unwrap();
        format!("{}{name}", self.base)
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

both_backends! {
    async fn http_source(server) {
        let web = WebServer::start().await;
        let a = pattern(4096, 5);
        let a_url = web.write("a.bin", &a);
        let short = pattern(4096, 6);
        let short_url = web.write("short.bin", &short);
        let missing_url = format!("{}missing.bin", web.base);
        register_object_store(&server, "web", &web.base, json!({"allow_http": "true"})).await;
        register(&server, "web", &store_doc(json!({
            "0": vref(&a_url, 100),
            "1": vref(&a_url, 1000),
            "2": vref(&missing_url, 0),
            "3": vref(&short_url, 3000),
            "4": vref(&short_url, 3500),
        }))).await;

        assert_eq!(server.bytes("/web/x/c/0").await, a[100..356]);
        let r = server.get("/web/x/c/1", &[("Range", "bytes=10-19")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.headers()["content-range"], "bytes 10-19/256");
        assert_eq!(r.bytes().await.unwrap(), a[1010..1020]);
        // Exactly the bytes needed, at the file's own path (not `/files//a.bin`, which S3, GCS and
        // many servers take for another object).
        let seen = web.seen.lock().unwrap().clone();
        assert_eq!(seen, [
            ("/files/a.bin".to_owned(), Some("bytes=100-355".to_owned())),
            ("/files/a.bin".to_owned(), Some("bytes=1010-1019".to_owned())),
        ], "what the HTTP server was asked");

        // Missing on the HTTP server: 502 naming the URL, not 404 (a Zarr reader's fill value).
        assert_problem(server.get("/web/x/c/2", &[]).await, StatusCode::BAD_GATEWAY, "source-not-found", &missing_url).await;
        // HEAD does not ask the HTTP server.
        let asked = web.seen.lock().unwrap().len();
        assert_eq!(server.head("/web/x/c/2").await.status(), StatusCode::OK);
        assert_eq!(web.seen.lock().unwrap().len(), asked, "HEAD made a request to the source");

        // Shortened on the HTTP server: 502, never a short or complete 200.
        assert_eq!(server.bytes("/web/x/c/3").await, short[3000..3256]);
        std::fs::write(web.dir.path().join("short.bin"), &short[..3100]).unwrap();
        let got = receive(&server, "/web/x/c/3", &[], Duration::from_secs(10)).await;
        assert_refused(&got, "shortened HTTP source");
        assert_problem(server.get("/web/x/c/3", &[]).await, StatusCode::BAD_GATEWAY, "source-truncated", &short_url).await;
        // A chunk that now starts past the end (the server answers 416).
        assert_problem(server.get("/web/x/c/4", &[]).await, StatusCode::BAD_GATEWAY, "source-truncated", &short_url).await;

        // `..` in an HTTP source URL is refused at registration.
        let (status, body) = server.put("/api/v1/stores/dotdot", &store_doc(json!({"0": vref(&format!("{}../secret", web.base), 0)}))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

        assert_eq!(upstream_outcome(&server, "web", "not-found").await, 1.0);
        assert_eq!(upstream_outcome(&server, "web", "ok").await, 3.0);
    }
}

/// An HTTP server that misbehaves as its first path segment says, for every request.
async fn misbehaving_server(file: Arc<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(misbehave(socket, file.clone()));
        }
    });
    base
}

async fn misbehave(mut socket: TcpStream, file: Arc<Vec<u8>>) {
    let Some(request) = common::faults::read_head(&mut socket).await else { return };
    let text = String::from_utf8_lossy(&request).into_owned();
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mode = path.trim_start_matches('/').split('/').next().unwrap_or_default().to_owned();
    let size = file.len();
    let (a, b) = text
        .lines()
        .find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("range")).map(|(_, v)| v.trim().to_owned())
        })
        .and_then(|v| {
            let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
            Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()? + 1))
        })
        .unwrap_or((0, size));
    // A range past the end ends there (RFC 9110 14.1.2), as every object store answers.
    let b = b.min(size);
    let n = b - a;
    let partial = |len: usize, from: usize, to: usize| {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{size}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
            to - 1
        )
    };
    let status = |line: &str| format!("HTTP/1.1 {line}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno");
    let (head, body): (String, &[u8]) = match mode.as_str() {
        // Accepts the connection and never answers.
        "hang" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
        // 200 with the whole file.
        "ignore-range" => {
            (format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"), &file[..])
        }
        // 206 for the first bytes of the file instead of the ones asked.
        "wrong-range" => (partial(n, 0, n), &file[..n]),
        // Promises the range, sends half of it and closes.
        "short" => (partial(n, a, b), &file[a..a + n / 2]),
        // Says the range, but its Content-Length (and body) is half of it.
        "short-consistent" => (partial(n / 2, a, b), &file[a..a + n / 2]),
        // Says the range, then sends the rest of the file.
        "overlong" => (partial(size - a, a, b), &file[a..]),
        // Sends the headers and half the body, then nothing more.
        "stall" => {
            let _ = socket.write_all(partial(n, a, b).as_bytes()).await;
            let _ = socket.write_all(&file[a..a + n / 2]).await;
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
        // The right range of a rewritten object: ignores If-Match (zarrgate sends none when its
        // cached block holds the recorded ETag's digest), answers with the new ETag.
        "other-etag" => {
            let lower = text.to_ascii_lowercase();
            assert!(!lower.contains("if-match:") || lower.contains("if-match: \"registered\""), "{text}");
            let head = partial(n, a, b).replacen("\r\n", "\r\nETag: \"rewritten\"\r\n", 1);
            (head, &file[a..b])
        }
        // A weak ETag, which never satisfies If-Match (as nginx answers): 412 when asked.
        "weak" if text.to_ascii_lowercase().contains("if-match:") => (status("412 Precondition Failed"), &[]),
        "weak" => (partial(n, a, b).replacen("\r\n", "\r\nETag: W/\"weak1\"\r\n", 1), &file[a..b]),
        // No ETag at all: only the object's size (in Content-Range) can tell a rewrite.
        "plain" => (partial(n, a, b), &file[a..b]),
        // A refusal whose body quotes what the upstream saw (S3 quotes the signed request).
        "forbidden-verbose" => {
            let body = "SignatureDoesNotMatch: AKIASECRETKEYID canonical request at http://10.0.0.5/internal";
            (
                format!("HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
                &[],
            )
        }
        // The range in eight pieces, 300 ms apart: slower in all than the test's one-second
        // timeout, but never idle that long.
        "slow" => {
            let _ = socket.write_all(partial(n, a, b).as_bytes()).await;
            for piece in file[a..b].chunks(n.div_ceil(8)) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = socket.write_all(piece).await;
            }
            let _ = socket.shutdown().await;
            return;
        }
        // Redirects: to `plain` on the same origin, or to the same server under another name
        // (another origin).
        "redirect-in" | "redirect-out" => {
            let host = text
                .lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("host")).map(|(_, v)| v.trim()))
                .unwrap_or_default()
                .to_owned();
            let port = host.rsplit_once(':').map_or("80", |(_, p)| p).to_owned();
            let target = match mode.as_str() {
                "redirect-in" => format!("http://{host}/plain/data.bin"),
                _ => format!("http://localhost:{port}/plain/data.bin"),
            };
            (format!("HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"), &[])
        }
        "forbidden" => (status("403 Forbidden"), &[]),
        "unauthorized" => (status("401 Unauthorized"), &[]),
        "gone" => (status("404 Not Found"), &[]),
        _ => (status("500 Internal Server Error"), &[]),
    };
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(body).await;
    let _ = socket.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_http_sources() {
    // The upstream faults do not depend on the catalog: SQLite only.
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.timeout_seconds = 1).await;
    let file = Arc::new(pattern(4096, 7));
    let base = misbehaving_server(file.clone()).await;
    register_object_store(&server, "bad", &base, json!({"allow_http": "true"})).await;
    // A port where nothing listens.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let down = format!("http://{closed}/");
    register_object_store(&server, "down", &down, json!({"allow_http": true})).await;

    let modes = [
        "ignore-range",
        "wrong-range",
        "short",
        "short-consistent",
        "overlong",
        "stall",
        "hang",
        "forbidden",
        "unauthorized",
        "gone",
        "error",
    ];
    let mut manifest = serde_json::Map::new();
    for (i, mode) in modes.iter().enumerate() {
        manifest.insert(i.to_string(), vref(&format!("{base}{mode}/data.bin"), 1000));
    }
    // A URL that merely contains "416" (the status of an unsatisfiable range).
    manifest.insert("14".into(), vref(&format!("{base}error/era5-2416.bin"), 1000));
    manifest.insert("15".into(), vref(&format!("{down}data.bin"), 1000));
    manifest.insert("11".into(), vref(&format!("{base}forbidden-verbose/data.bin"), 1000));
    register(&server, "bad", &store_doc(Value::Object(manifest))).await;
    let key = |mode: &str| format!("/bad/x/c/{}", modes.iter().position(|m| *m == mode).unwrap());

    // Wrong bytes from upstream never reach the client: the chunk is small enough to be read
    // whole first (sources.buffer_chunk_bytes), so the client gets a complete 502 problem.
    for mode in ["ignore-range", "wrong-range", "short", "short-consistent", "overlong"] {
        for range in [None, Some(("Range", "bytes=0-99"))] {
            let got = receive(&server, &key(mode), &Vec::from_iter(range), Duration::from_secs(10)).await;
            assert_refused(&got, mode);
            assert!(matches!(&got, Got::Complete(s, ..) if *s == StatusCode::BAD_GATEWAY), "{mode} {range:?}: {got:?}");
        }
    }

    // A body that stalls half-way is a 504 within the timeout, not left hanging.
    let started = Instant::now();
    let got = receive(&server, &key("stall"), &[], Duration::from_secs(15)).await;
    assert!(matches!(&got, Got::Complete(s, _, _) if *s == StatusCode::GATEWAY_TIMEOUT), "stall: {got:?}");
    assert!(started.elapsed() < Duration::from_secs(8), "stalled body took {:?}", started.elapsed());

    // No answer at all: 504 within the configured second, naming the URL.
    let started = Instant::now();
    let r = server.get(&key("hang"), &[]).await;
    assert_problem(r, StatusCode::GATEWAY_TIMEOUT, "source-timeout", &format!("{base}hang/data.bin")).await;
    assert!(started.elapsed() < Duration::from_secs(4), "timeout took {:?}", started.elapsed());

    // Refusals and errors upstream are 502, never 404 and never 504.
    assert_problem(
        server.get(&key("forbidden"), &[]).await,
        StatusCode::BAD_GATEWAY,
        "source-forbidden",
        "forbidden/data.bin",
    )
    .await;
    assert_problem(
        server.get(&key("unauthorized"), &[]).await,
        StatusCode::BAD_GATEWAY,
        "source-forbidden",
        "unauthorized/data.bin",
    )
    .await;
    assert_problem(server.get(&key("gone"), &[]).await, StatusCode::BAD_GATEWAY, "source-not-found", "gone/data.bin")
        .await;
    assert_problem(server.get(&key("error"), &[]).await, StatusCode::BAD_GATEWAY, "source-error", "error/data.bin")
        .await;
    assert_problem(server.get("/bad/x/c/14", &[]).await, StatusCode::BAD_GATEWAY, "source-error", "era5-2416.bin")
        .await;
    assert_problem(
        server.get("/bad/x/c/15", &[]).await,
        StatusCode::BAD_GATEWAY,
        "source-error",
        &format!("{down}data.bin"),
    )
    .await;

    // What the upstream said stays in the log: a public 502 names the store and URL only.
    let body = assert_problem(
        server.get("/bad/x/c/11", &[]).await,
        StatusCode::BAD_GATEWAY,
        "source-forbidden",
        "forbidden-verbose/data.bin",
    )
    .await;
    assert!(!body.to_string().contains("AKIASECRETKEYID"), "upstream text in a public answer: {body}");
    assert!(!body.to_string().contains("10.0.0.5"), "upstream text in a public answer: {body}");

    let count = |outcome: &'static str| upstream_outcome(&server, "bad", outcome);
    assert_eq!(count("timeout").await, 2.0);
    // short and short-consistent, with and without a Range (overlong too, unless object_store
    // refused its Content-Length first).
    assert!(count("interrupted").await >= 4.0);
    assert_eq!(count("forbidden").await, 3.0);
    assert_eq!(count("not-found").await, 1.0);
    // At least the 500s and the refused connection (a body that fails after the headers may count
    // as an upstream request that succeeded).
    assert!(count("error").await >= 3.0);
}

/// A redirect is followed only inside the object store (same origin, under its URL): a source
/// server cannot send zarrgate elsewhere and have the answer served as chunk bytes. A body that
/// arrives slowly but steadily is served whole, however long it takes; only a body that stops
/// (`misbehaving_http_sources`) is cut off. An empty reference is an empty chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_stay_inside_the_object_store_and_slow_bodies_finish() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.sources.timeout_seconds = 1).await;
    let file = Arc::new(pattern(4096, 11));
    let base = misbehaving_server(file.clone()).await;
    register_object_store(&server, "origin", &base, json!({})).await;
    // A second object store for one directory only: `plain/` is outside it.
    register_object_store(&server, "narrow", &format!("{base}redirect-in/"), json!({})).await;
    let mut manifest = serde_json::Map::new();
    for (i, mode) in ["slow", "redirect-out"].iter().enumerate() {
        manifest.insert(i.to_string(), vref(&format!("{base}{mode}/data.bin"), 1000));
    }
    manifest.insert("2".into(), vref(&format!("{base}redirect-in/data.bin"), 1000));
    let mut doc = store_doc(Value::Object(manifest));
    // An empty reference: for an array whose codecs do not fix the chunks' length (with `bytes`
    // alone, every chunk must be 256 bytes and an empty one is refused at registration).
    doc["nodes"]["e"] = f32_array(
        &[64],
        &[64],
        json!({
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}],
            "manifest": {"0": {"path": format!("{base}plain/data.bin"), "offset": 100, "length": 0}},
        }),
    );
    register(&server, "moved", &doc).await;

    let started = Instant::now();
    let r = server.get("/moved/x/c/0", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(&r.bytes().await.unwrap()[..], &file[1000..1000 + CHUNK as usize], "slow body served whole");
    assert!(started.elapsed() > Duration::from_secs(2), "the slow source took {:?}", started.elapsed());

    let r = server.get("/moved/x/c/1", &[]).await;
    assert_problem(r, StatusCode::BAD_GATEWAY, "source-error", "redirect-out/data.bin").await;
    // Same origin, but outside the object store `narrow` that serves redirect-in/.
    let r = server.get("/moved/x/c/2", &[]).await;
    assert_problem(r, StatusCode::BAD_GATEWAY, "source-error", "redirect-in/data.bin").await;
    // The administrator's view (verify answers with the upstream's own words) says why.
    let r = server.client.post(format!("{}/api/v1/stores/moved/verify", server.url)).send().await.unwrap();
    let report: Value = r.json().await.unwrap();
    let out =
        report["sources"].as_array().unwrap().iter().find(|s| s["url"].as_str().unwrap().contains("redirect-out"));
    let detail = out.unwrap()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("refused a redirect") && detail.contains("outside the object store"), "{report}");

    let r = server.get("/moved/e/c/0", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-length"], "0");
    assert!(r.bytes().await.unwrap().is_empty());
}

/// A redirect inside the object store is followed, with the Range kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_inside_the_object_store_are_followed() {
    let server = TestServer::start(Backend::Sqlite).await;
    let file = Arc::new(pattern(4096, 12));
    let base = misbehaving_server(file.clone()).await;
    register_object_store(&server, "origin", &base, json!({})).await;
    register(&server, "moved", &store_doc(json!({"0": vref(&format!("{base}redirect-in/data.bin"), 1000)}))).await;
    let r = server.get("/moved/x/c/0", &[("Range", "bytes=10-19")]).await;
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(&r.bytes().await.unwrap()[..], &file[1010..1020]);
}

/// Whatever an origin does with `If-Match`, an answer for another object than the one
/// registered is a 502, never its bytes: one that ignores the header gives itself away by its
/// ETag; a weak ETag (which never satisfies If-Match) is compared on the answer instead; an
/// object with no ETag is checked by its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_for_another_object_are_refused() {
    let server = TestServer::start(Backend::Sqlite).await;
    let file = Arc::new(pattern(4096, 3));
    let base = misbehaving_server(file.clone()).await;
    // No allow_http: an http:// URL says it.
    register_object_store(&server, "origin", &base, json!({})).await;
    let url = |mode: &str| format!("{base}{mode}/data.bin");
    let cases = [
        ("other-etag", json!({"etag": "\"registered\""}), false),
        ("weak", json!({"etag": "W/\"weak1\""}), true),
        ("weak", json!({"etag": "W/\"weak0\""}), false),
        ("plain", json!({"size": 4096}), true),
        ("plain", json!({"size": 4000}), false),
    ];
    for (i, (mode, facts, same)) in cases.iter().enumerate() {
        let name = format!("case{i}");
        let mut doc = store_doc(json!({"0": vref(&url(mode), 1000)}));
        doc["sources"] = json!({url(mode): facts});
        register(&server, &name, &doc).await;
        for range in [None, Some("bytes=0-9")] {
            let headers: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
            let r = server.get(&format!("/{name}/x/c/0"), &headers).await;
            if *same {
                assert!(r.status().is_success(), "{mode} {facts}: {}", r.status());
                let want = if range.is_some() { &file[1000..1010] } else { &file[1000..1000 + CHUNK as usize] };
                assert_eq!(&r.bytes().await.unwrap()[..], want, "{mode} {facts}");
            } else {
                assert_problem(r, StatusCode::BAD_GATEWAY, "source-modified", &url(mode)).await;
            }
        }
    }
    assert_eq!(upstream_outcome(&server, "origin", "modified").await, 6.0);
}

/// An s3 object store registered over the API with no credentials reads anonymously: it
/// never borrows the server's own cloud identity (instance metadata, which is not there to
/// answer here, so a read that tried it would fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_object_stores_without_credentials_read_anonymously() {
    let server = TestServer::start(Backend::Sqlite).await;
    let file = Arc::new(pattern(4096, 5));
    let base = misbehaving_server(file.clone()).await;
    // Path-style requests to the endpoint: s3://plain/data.bin is GET /plain/data.bin.
    let endpoint = base.trim_end_matches('/');
    register_object_store(&server, "public", "s3://plain/", json!({"endpoint": endpoint, "region": "us-east-1"})).await;
    register(&server, "public", &store_doc(json!({"0": vref("s3://plain/data.bin", 1000)}))).await;
    let r = server.get("/public/x/c/0", &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(&r.bytes().await.unwrap()[..], &file[1000..1000 + CHUNK as usize]);
}

// ------------------------------------------------------------------------------------------
// S3 through moto
// ------------------------------------------------------------------------------------------

/// Where `moto_server` is: `ZARRGATE_TEST_MOTO`, the test venv, or `PATH`.
fn moto_executable() -> PathBuf {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        if let Some(path) = std::env::var_os("ZARRGATE_TEST_MOTO") {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "ZARRGATE_TEST_MOTO={} is not a file", path.display());
            return Some(path);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/python-env.sh");
        if let Ok(out) = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output()
            && out.status.success()
        {
            let venv = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
            let exe = Path::new(&venv).join("bin/moto_server");
            if exe.is_file() {
                return Some(exe);
            }
        }
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join("moto_server")).find(|exe| exe.is_file()))
            .unwrap_or_default()
    });
    found.clone().unwrap_or_else(|| {
        panic!(
            "moto_server not found: the S3 tests need it. Run scripts/python-env.sh (it creates the test venv with moto[server]), \
             or `pip install 'moto[server]'`, or set ZARRGATE_TEST_MOTO=/path/to/moto_server"
        )
    })
}

/// A `moto_server` child process with one bucket, killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
    bucket: &'static str,
    http: reqwest::Client,
    _log: tempfile::TempDir,
}

impl Moto {
    async fn start() -> Self {
        let exe = moto_executable();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = tempfile::tempdir().unwrap();
        let log_path = log.path().join("moto.log");
        let log_file = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
        let mut moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: "zarrgate-test",
            http: reqwest::Client::new(),
            _log: log,
        };
        let started = Instant::now();
        loop {
            if moto.http.get(&moto.endpoint).send().await.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            let exited = moto.child.try_wait().unwrap();
            if exited.is_some() || started.elapsed() > Duration::from_secs(30) {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("{} did not start on port {port} ({exited:?}): {log}", exe.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let r = moto.http.put(format!("{}/{}", moto.endpoint, moto.bucket)).send().await.unwrap();
        assert!(r.status().is_success(), "creating the bucket: {} {}", r.status(), r.text().await.unwrap_or_default());
        moto
    }

    /// A signed S3 client for the bucket (moto refuses some unsigned requests, such as DELETE).
    fn client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_bucket_name(self.bucket)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .with_allow_http(true)
            .build()
            .unwrap()
    }

    /// Uploads `bytes` as the object whose key is `key`, character for character (not
    /// `Path::from`, which would write `#` into the key as `%23`); returns its ETag.
    async fn put(&self, key: &str, bytes: &[u8]) -> String {
        let path = object_store::path::Path::parse(key).unwrap_or_else(|e| panic!("key {key}: {e}"));
        let done =
            self.client().put(&path, bytes.to_vec().into()).await.unwrap_or_else(|e| panic!("uploading {key}: {e}"));
        done.e_tag.unwrap_or_else(|| panic!("moto gave {key} no ETag"))
    }

    async fn delete(&self, key: &str) {
        self.client().delete(&key.into()).await.unwrap_or_else(|e| panic!("deleting {key}: {e}"));
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

both_backends! {
    async fn s3_through_moto(server) {
        let moto = Moto::start().await;
        let a = pattern(4096, 8);
        moto.put("data/a.bin", &a).await;
        let b = pattern(4096, 9);
        let b_etag = moto.put("data/b.bin", &b).await;
        moto.put("data/gone.bin", &pattern(1024, 10)).await;
        let c = pattern(4096, 12);
        moto.put("data/c.bin", &c).await;
        // Read as asked (read-ahead off): this counts the bytes of each range, and sees a deletion
        // at the next read rather than when the blocks already fetched expire.
        register_object_store(&server, "s3", &format!("s3://{}/", moto.bucket), json!({
            "endpoint": moto.endpoint, "region": "us-east-1", "access_key_id": "test", "secret_access_key": "test", "allow_http": "true",
            "readahead": "off"
        })).await;
        register(&server, "plain", &store_doc(json!({
            "0": vref(&moto.url("data/a.bin"), 100),
            "1": vref(&moto.url("data/a.bin"), 3000),
            "2": vref(&moto.url("data/gone.bin"), 0),
            "3": vref(&moto.url("data/b.bin"), 512),
            "4": vref(&moto.url("data/c.bin"), 3000),
            "5": vref(&moto.url("data/c.bin"), 3500),
        }))).await;
        // The same object with the ETag it had at registration.
        let mut pinned = store_doc(json!({"0": vref(&moto.url("data/b.bin"), 512)}));
        pinned["sources"] = json!({moto.url("data/b.bin"): {"etag": b_etag}});
        register(&server, "pinned", &pinned).await;

        // Bytes equal; ranges are passed on.
        assert_eq!(server.bytes("/plain/x/c/0").await, a[100..356]);
        assert_eq!(server.bytes("/plain/x/c/2").await, pattern(1024, 10)[..256]);
        let read_before = server.metric_sum("zarrgate_upstream_bytes_total", &[("object_store", "s3")]).await;
        let r = server.get("/plain/x/c/1", &[("Range", "bytes=10-19")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.headers()["content-range"], "bytes 10-19/256");
        assert_eq!(r.bytes().await.unwrap(), a[3010..3020]);
        let r = server.get("/plain/x/c/1", &[("Range", "bytes=-16")]).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.bytes().await.unwrap(), a[3240..3256]);
        let read = server.metric_sum("zarrgate_upstream_bytes_total", &[("object_store", "s3")]).await - read_before;
        assert_eq!(read, 26.0, "two ranges of 10 and 16 bytes read 26 bytes from S3");
        // The recorded ETag still matches: served.
        assert_eq!(server.bytes("/pinned/x/c/0").await, b[512..768]);
        // An absent chunk is the one 404.
        assert_eq!(server.get("/plain/x/c/9", &[]).await.status(), StatusCode::NOT_FOUND);

        // Deleted: 502 naming the object; HEAD answers from the manifest.
        moto.delete("data/gone.bin").await;
        assert_problem(server.get("/plain/x/c/2", &[]).await, StatusCode::BAD_GATEWAY, "source-not-found", &moto.url("data/gone.bin")).await;
        let before = upstream_requests(&server).await;
        let r = server.head("/plain/x/c/2").await;
        assert_eq!((r.status(), r.headers()["content-length"].to_str().unwrap()), (StatusCode::OK, "256"));
        assert_eq!(upstream_requests(&server).await, before, "HEAD makes no upstream request");

        // Shortened: 502 truncated, whether the chunk now overlaps the end or starts past it.
        assert_eq!(server.bytes("/plain/x/c/4").await, c[3000..3256]);
        moto.put("data/c.bin", &c[..3100]).await;
        for key in ["4", "5"] {
            let got = receive(&server, &format!("/plain/x/c/{key}"), &[], Duration::from_secs(10)).await;
            assert_refused(&got, "shortened S3 object");
            assert_problem(server.get(&format!("/plain/x/c/{key}"), &[]).await, StatusCode::BAD_GATEWAY, "source-truncated", &moto.url("data/c.bin")).await;
        }

        // Overwritten with other bytes of the same length.
        let b2 = pattern(4096, 11);
        let b2_etag = moto.put("data/b.bin", &b2).await;
        assert_ne!(b2_etag, b_etag);
        // Without a recorded ETag the change cannot be seen: the new bytes are served...
        assert_eq!(server.bytes("/plain/x/c/3").await, b2[512..768]);
        // ...with one, the read is refused, with or without a Range, and never gives the new bytes.
        for range in [None, Some("bytes=0-9")] {
            let headers: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
            let got = receive(&server, "/pinned/x/c/0", &headers, Duration::from_secs(10)).await;
            assert_refused(&got, "overwritten S3 object");
            let body = assert_problem(server.get("/pinned/x/c/0", &headers).await, StatusCode::BAD_GATEWAY, "source-modified", &moto.url("data/b.bin")).await;
            assert!(body["detail"].as_str().unwrap().contains(&b_etag), "the detail names the recorded ETag: {body}");
        }

        let count = |outcome: &'static str| upstream_outcome(&server, "s3", outcome);
        assert_eq!(count("not-found").await, 1.0);
        assert_eq!(count("modified").await, 4.0);
        assert_eq!(count("truncated").await, 4.0);
        assert_eq!(count("ok").await, 7.0);

        // A kerchunk path is text, as fsspec reads it: a key with `#` and spaces is that key
        // (not a URL with a fragment), and the export gives it back as written.
        let named = pattern(512, 13);
        moto.put("run #1/a b.bin", &named).await;
        let literal = format!("s3://{}/run #1/a b.bin", moto.bucket);
        let zarray = json!({"shape": [64], "chunks": [64], "dtype": "<f4", "fill_value": null, "order": "C",
                            "filters": null, "compressor": null, "zarr_format": 2});
        let refs = json!({"version": 1, "refs": {".zgroup": "{\"zarr_format\":2}", "x/.zarray": zarray.to_string(),
                                                 "x/0": [literal, 256, 256]}});
        let (status, body) = server.put("/api/v1/stores/named", &refs).await;
        assert_eq!(status, StatusCode::CREATED, "verified against the object itself: {body}");
        assert_eq!(server.bytes("/named/x/0").await, named[256..512]);
        let export: Value = server.get("/api/v1/stores/named/manifest?format=kerchunk", &[]).await.json().await.unwrap();
        assert_eq!(export["refs"]["x/0"][0], literal.as_str());
    }
}

/// A listing of an S3 prefix cut at keys known to be there (a rescan's files of the version it
/// compares with) into ranges listed side by side finds exactly what one listing from the start
/// finds: objects before the first cut, at a cut, between cuts and after the last, cuts at keys
/// since deleted or outside the prefix, given out of order or twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_cut_into_ranges_finds_what_one_listing_finds() {
    use zarrgate::sources::{Keep, ObjectStoreEntry, Origin, ReadAheadSettings, SourceRegistry, SourceSettings};
    let moto = Moto::start().await;
    let keys: Vec<String> = (0..60).map(|i| format!("era/f{:03}.nc", i * 2)).collect();
    for key in keys.iter().chain([&"era/notes.txt".to_owned(), &"other/g.nc".to_owned()]) {
        moto.put(key, b"x").await;
    }
    let settings = SourceSettings {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(2),
        retries: 1,
        max_concurrent: 8,
        buffer_bytes: 1 << 20,
        api_ambient_credentials: false,
        readahead: ReadAheadSettings::default(),
    };
    let options = json!({"endpoint": moto.endpoint, "region": "us-east-1", "access_key_id": "test",
        "secret_access_key": "test", "allow_http": "true"});
    let entry =
        ObjectStoreEntry::build("s3", &moto.url(""), options.as_object().unwrap(), Origin::Api, &settings).unwrap();
    let registry = SourceRegistry::new(settings);
    registry.replace(vec![Arc::new(entry)]);
    let nc: Keep = Arc::new(|key: &str| key.ends_with(".nc"));
    let prefix = moto.url("era/");
    let listed = |split: Vec<String>, most: usize| {
        let (registry, nc, prefix) = (&registry, nc.clone(), prefix.clone());
        async move {
            let found = registry.list(&prefix, nc, most, &split).await.unwrap();
            found.into_iter().map(|o| o.key).collect::<Vec<_>>()
        }
    };
    let whole = listed(Vec::new(), 1000).await;
    assert_eq!(whole, keys.iter().map(|k| k.trim_start_matches("era/").to_owned()).collect::<Vec<_>>());

    // New objects before the first cut, at a cut's neighbours, between cuts and after the last;
    // one cut's object deleted.
    for key in ["era/a.nc", "era/f041.nc", "era/f079.nc", "era/f081.nc", "era/z.nc"] {
        moto.put(key, b"y").await;
    }
    moto.delete("era/f040.nc").await;
    let now = listed(Vec::new(), 1000).await;
    assert_eq!(now.len(), 64);
    let cuts = |keys: &[&str]| keys.iter().map(|k| moto.url(k)).collect::<Vec<_>>();
    for split in [
        cuts(&["era/f040.nc", "era/f080.nc"]),
        cuts(&["era/f080.nc", "era/f040.nc", "era/f080.nc"]),
        cuts(&["era/f000.nc", "era/f002.nc", "era/f118.nc", "other/g.nc", "era/zz.nc"]),
        (0..60).step_by(7).map(|i| moto.url(&format!("era/f{:03}.nc", i * 2))).collect(),
    ] {
        assert_eq!(listed(split.clone(), 1000).await, now, "cut at {split:?}");
    }
    // Past `most`, one more than it (so that the caller can tell), cut or not.
    assert_eq!(listed(cuts(&["era/f040.nc"]), 10).await.len(), 11);
    assert_eq!(listed(Vec::new(), 10).await.len(), 11);
}

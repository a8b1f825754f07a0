//! A fault-injecting HTTP upstream: a real HTTP/1.1 server over TCP serving one object (`file`)
//! under every path, misbehaving as the path's first segment says, and recording every request
//! (path, Range, If-Match) so that a test can tell what zarrgate asked for. Faults that happen
//! once (`*-once`) count the earlier requests for the same path.
//!
//! | mode | answer |
//! |---|---|
//! | `ok`, `noetag` | the range asked, ETag `"v1"` (none for `noetag`) |
//! | `status-500`, `status-503` | that status, always |
//! | `flaky-503` | 503 the first time, then `ok` |
//! | `reset` | the head and half the body, then a TCP reset, always |
//! | `reset-once`, `reset-once-noetag` | `reset` the first time, then `ok` / `noetag` |
//! | `short` | the full Content-Length, half the body, then the connection closes, always |
//! | `short-once` | `short` the first time, then `ok` |
//! | `ignore-range` | 200 with the whole object |
//! | `slow-head` | nothing for 3 s, then `ok` |
//! | `slow-body` | the head, then the body in 8 pieces 300 ms apart |
//! | `etag-changes` | `reset` as `"v1"` the first time; then the object is `"v2"` (other bytes): `If-Match: "v1"` gets 412 |
//! | `switch` | `ok` until [`FaultServer::rewrite`]; then as `etag-changes` after its first time |
//! | `late-<mode>` | nothing for 300 ms, then as `<mode>` |
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the upstream received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub if_match: Option<String>,
}

/// A running fault-injecting upstream.
pub struct FaultServer {
    /// `http://127.0.0.1:<port>/`.
    pub base: String,
    /// The object served.
    pub file: Arc<Vec<u8>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    rewritten: Arc<AtomicBool>,
}

impl FaultServer {
    /// Serves `file` until the test ends.
    pub async fn start(file: Vec<u8>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", listener.local_addr().unwrap());
        let (file, seen) = (Arc::new(file), Arc::new(Mutex::new(Vec::new())));
        let rewritten = Arc::new(AtomicBool::new(false));
        let (f, s, r) = (file.clone(), seen.clone(), rewritten.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, f.clone(), s.clone(), r.clone()));
            }
        });
        Self { base, file, seen, rewritten }
    }

    /// Rewrites the object of `switch` (and `late-switch`): from now on it is `"v2"`.
    pub fn rewrite(&self) {
        self.rewritten.store(true, Ordering::SeqCst);
    }

    /// The URL of the object under `mode`.
    pub fn url(&self, mode: &str) -> String {
        format!("{}{mode}/data.bin", self.base)
    }

    /// The requests received for `mode`'s object, in order.
    pub fn seen(&self, mode: &str) -> Vec<Seen> {
        let path = format!("/{mode}/data.bin");
        self.seen.lock().unwrap().iter().filter(|s| s.path == path).cloned().collect()
    }

    /// The bytes of the object as rewritten by `etag-changes`.
    pub fn rewritten(file: &[u8]) -> Vec<u8> {
        file.iter().map(|b| b ^ 0xff).collect()
    }
}

/// The head of one HTTP request read off `socket` (through its blank line), or `None` when the
/// client leaves first.
pub async fn read_head(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(request)
}

fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
    request
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()))
}

async fn answer(mut socket: TcpStream, file: Arc<Vec<u8>>, seen: Arc<Mutex<Vec<Seen>>>, rewritten: Arc<AtomicBool>) {
    let Some(request) = read_head(&mut socket).await else { return };
    let text = String::from_utf8_lossy(&request).into_owned();
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut mode = path.trim_start_matches('/').split('/').next().unwrap_or_default().to_owned();
    if let Some(rest) = mode.strip_prefix("late-") {
        mode = rest.to_owned();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if mode == "switch" {
        mode = if rewritten.load(Ordering::SeqCst) { "etag-changes" } else { "ok" }.to_owned();
    }
    let range = header(&text, "range").map(str::to_owned);
    let if_match = header(&text, "if-match").map(str::to_owned);
    let earlier = {
        let mut seen = seen.lock().unwrap();
        let n = seen.iter().filter(|s| s.path == path).count();
        seen.push(Seen { path: path.clone(), range: range.clone(), if_match: if_match.clone() });
        n
    };
    let size = file.len();
    let (a, b) = range
        .as_deref()
        .and_then(|v| {
            let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
            Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()? + 1))
        })
        .unwrap_or((0, size));
    // A range past the end ends at the end (RFC 9110 14.1.2); one starting past it is refused.
    let b = b.min(size);
    if a >= b {
        let head = format!(
            "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return send(&mut socket, &head, &[]).await;
    }
    let partial = |etag: Option<&str>| {
        let etag = etag.map(|e| format!("ETag: {e}\r\n")).unwrap_or_default();
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{}/{size}\r\nContent-Length: {}\r\n{etag}Connection: close\r\n\r\n",
            b - 1,
            b - a
        )
    };
    let status = |line: &str| format!("HTTP/1.1 {line}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let half = a + (b - a) / 2;
    let v1 = Some("\"v1\"");
    match (mode.as_str(), earlier) {
        ("status-500", _) => send(&mut socket, &status("500 Internal Server Error"), &[]).await,
        ("status-503", _) | ("flaky-503", 0) => send(&mut socket, &status("503 Service Unavailable"), &[]).await,
        ("reset", _) | ("reset-once" | "reset-once-noetag", 0) => {
            let etag = if mode.ends_with("noetag") { None } else { v1 };
            reset(socket, &partial(etag), &file[a..half]).await;
        }
        ("short", _) | ("short-once", 0) => send(&mut socket, &partial(v1), &file[a..half]).await,
        ("ignore-range", _) => {
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n");
            send(&mut socket, &head, &file).await;
        }
        ("slow-head", _) => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            send(&mut socket, &partial(v1), &file[a..b]).await;
        }
        ("slow-body", _) => {
            let _ = socket.write_all(partial(v1).as_bytes()).await;
            for piece in file[a..b].chunks((b - a).div_ceil(8)) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = socket.write_all(piece).await;
            }
            let _ = socket.shutdown().await;
        }
        ("etag-changes", 0) if !path.contains("switch") => reset(socket, &partial(v1), &file[a..half]).await,
        ("etag-changes", _) if if_match.as_deref() == Some("\"v1\"") => {
            send(&mut socket, &status("412 Precondition Failed"), &[]).await;
        }
        ("etag-changes", _) => {
            let rewritten = FaultServer::rewritten(&file);
            send(&mut socket, &partial(Some("\"v2\"")), &rewritten[a..b]).await;
        }
        ("noetag" | "reset-once-noetag", _) => send(&mut socket, &partial(None), &file[a..b]).await,
        _ => send(&mut socket, &partial(v1), &file[a..b]).await,
    }
}

async fn send(socket: &mut TcpStream, head: &str, body: &[u8]) {
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(body).await;
    let _ = socket.shutdown().await;
}

/// Sends `head` and `body`, then resets the connection (RST, not FIN).
async fn reset(mut socket: TcpStream, head: &str, body: &[u8]) {
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(body).await;
    let _ = socket.flush().await;
    // Let the bytes leave before the reset discards what is still queued.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = socket.set_zero_linger();
    drop(socket);
}

/// What a client reading a response by hand received: the status, the headers, the body bytes
/// until the connection closed, and whether they match the announced Content-Length.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The connection ended with an error (a reset) rather than a close.
    pub reset: bool,
}

impl RawAnswer {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The announced Content-Length.
    pub fn content_length(&self) -> Option<usize> {
        self.header("content-length").and_then(|v| v.parse().ok())
    }

    /// True when every byte the head announced arrived.
    pub fn complete(&self) -> bool {
        self.content_length() == Some(self.body.len())
    }
}

/// `GET path` from `base` (`http://host:port`) over a fresh connection, read by hand until the
/// server closes it: what the bytes on the wire say, with nothing a client library would hide.
pub async fn raw_get(base: &str, path: &str, headers: &[(&str, &str)]) -> RawAnswer {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    let reset = loop {
        match tokio::time::timeout(Duration::from_secs(30), socket.read(&mut buf)).await {
            Ok(Ok(0)) => break false,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => break true,
            Err(_) => panic!("GET {path}: nothing for 30 s"),
        }
    };
    let end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("GET {path}: no response head in {:?}", String::from_utf8_lossy(&received)));
    let head = String::from_utf8_lossy(&received[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    RawAnswer { status, headers, body: received[end + 4..].to_vec(), reset }
}

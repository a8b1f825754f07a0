//! Test harness: the real server on port 0 against a real catalog (a fresh SQLite file or a
//! fresh PostgreSQL database per test), with a directory of source files served as `file://`.
//!
//! PostgreSQL comes from `ZARRGATE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). An unreachable server fails the test; the
//! PostgreSQL variants are skipped only when `ZARRGATE_TEST_POSTGRES=skip` says so.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod faults;
pub mod proxy;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;
use zarrgate::app::{self, App};
use zarrgate::config::Config;
use zarrgate::server;

/// Which catalog a test server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each test body once against SQLite and once against PostgreSQL.
#[macro_export]
macro_rules! both_backends {
    ($(async fn $name:ident($server:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let $server = $crate::common::TestServer::start($crate::common::Backend::Sqlite).await;
                    $body
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some($server) = $crate::common::TestServer::start_postgres().await else { return };
                    $body
                }
            }
        )*
    };
}

static DB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// The PostgreSQL server the tests use.
pub fn postgres_url() -> String {
    std::env::var("ZARRGATE_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A database created for one test and dropped after it.
pub struct PgTestDb {
    pub url: String,
    name: String,
}

impl PgTestDb {
    /// Creates a fresh database; panics (fails the test) when PostgreSQL is unreachable.
    pub async fn create() -> Self {
        let admin = postgres_url();
        let name = format!("zgtest_{}_{}", std::process::id(), DB_COUNTER.fetch_add(1, Ordering::SeqCst));
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} is unreachable ({e}); start it, or set ZARRGATE_TEST_POSTGRES=skip to skip PostgreSQL tests explicitly")
        });
        sqlx::query(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)")))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}"))).execute(&mut conn).await.unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&format!("/{name}"));
        Self { url: url.to_string(), name }
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let (admin, name) = (postgres_url(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)")))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A running server.
pub struct TestServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    /// Files here are served by the `local` object store (registered by [`TestServer::local_store`]).
    pub data: PathBuf,
    pub state: app::AppState,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    db: Option<PgTestDb>,
}

/// The value of one series of Prometheus text: `name`, or `name{labels}` with the labels in the
/// sorted order Prometheus writes them; 0 when absent.
pub fn metric_in(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

impl TestServer {
    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let r = self.get("/metrics", &[]).await;
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        r.text().await.unwrap()
    }

    /// The value of one series of `/metrics` (see [`metric_in`]); 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        metric_in(&self.metrics().await, series)
    }

    /// The samples of `name` with (at least) `labels`, summed; 0 when there are none.
    pub async fn metric_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = self.metrics().await;
        let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let mut total = 0.0;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let (metric_name, label_text) =
                series.split_once('{').map_or((series, ""), |(n, l)| (n, l.trim_end_matches('}')));
            let present: Vec<&str> = label_text.split(',').collect();
            if metric_name == name && wanted.iter().all(|w| present.contains(&w.as_str())) {
                total += value.parse::<f64>().unwrap_or_else(|_| panic!("bad sample {line:?}"));
            }
        }
        total
    }
    /// A server on `backend` with the default configuration.
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    /// A PostgreSQL server, or `None` when PostgreSQL tests are explicitly skipped.
    pub async fn start_postgres() -> Option<Self> {
        if std::env::var("ZARRGATE_TEST_POSTGRES").as_deref() == Ok("skip") {
            eprintln!("ZARRGATE_TEST_POSTGRES=skip: PostgreSQL variant not run");
            return None;
        }
        Some(Self::start(Backend::Postgres).await)
    }

    /// A server on `backend` whose configuration `adjust` may change.
    pub async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = std::fs::canonicalize(dir.path()).unwrap().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let db = match backend {
            Backend::Postgres => Some(PgTestDb::create().await),
            Backend::Sqlite => None,
        };
        let database_url = match &db {
            Some(db) => db.url.clone(),
            None => format!("sqlite://{}/catalog.db", dir.path().display()),
        };
        let mut config =
            Config { listen: "127.0.0.1:0".into(), database_url, database_max_connections: 4, ..Config::default() };
        config.sources.timeout_seconds = 5;
        config.sources.retries = 1;
        adjust(&mut config);
        Self::launch(config, backend, dir, data, db).await
    }

    /// A fresh server on this one's backend with another configuration (this one is stopped).
    pub async fn restart_with(self, adjust: impl FnOnce(&mut Config)) -> Self {
        let backend = self.backend;
        drop(self);
        Self::start_with(backend, adjust).await
    }

    /// Starts the server with `config` as is.
    async fn launch(
        config: Config,
        backend: Backend,
        dir: tempfile::TempDir,
        data: PathBuf,
        db: Option<PgTestDb>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = App::start(config).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server::serve(listener, state.clone(), async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder().no_gzip().build().unwrap();
        Self { url, client, backend, data, state, dir, stop: Some(stop), db }
    }

    /// Another server process sharing this one's catalog (a second replica).
    pub async fn replica(&self, adjust: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = self.state.config.clone();
        adjust(&mut config);
        let dir = tempfile::tempdir().unwrap();
        Self::launch(config, self.backend, dir, self.data.clone(), None).await
    }

    /// Writes a source file under the data directory; returns its absolute path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.data.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    /// Registers the data directory as the object store `local`.
    pub async fn local_store(&self) {
        let url = url::Url::from_directory_path(&self.data).unwrap();
        let (status, body) = self.put("/api/v1/object-stores/local", &json!({"url": url.as_str()})).await;
        assert!(status.is_success(), "{status} {body}");
    }

    /// `GET` with optional headers.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.client.get(format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// `HEAD`.
    pub async fn head(&self, path: &str) -> reqwest::Response {
        self.client.head(format!("{}{path}", self.url)).send().await.unwrap()
    }

    /// The bytes of a successful `GET`.
    pub async fn bytes(&self, path: &str) -> Vec<u8> {
        let r = self.get(path, &[]).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.bytes().await.unwrap().to_vec()
    }

    /// `PUT` a JSON body; the status and the parsed answer.
    pub async fn put(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.put_raw(path, body.to_string().into_bytes()).await
    }

    /// `PUT` raw bytes.
    pub async fn put_raw(&self, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let r = self.client.put(format!("{}{path}", self.url)).body(body).send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `DELETE`; the status.
    pub async fn delete(&self, path: &str) -> StatusCode {
        self.client.delete(format!("{}{path}", self.url)).send().await.unwrap().status()
    }

    /// The data directory's root, for tests that build paths.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.db.take();
    }
}

/// A float32 little-endian array node (1-d), with `extra` merged in.
pub fn f32_array(shape: &[u64], chunks: &[u64], extra: Value) -> Value {
    let mut node = json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -1.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": (0..shape.len()).map(|i| format!("d{i}")).collect::<Vec<_>>(),
    });
    if let (Some(n), Some(e)) = (node.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            n.insert(k.clone(), v.clone());
        }
    }
    node
}

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// The resident memory of this process (the server runs in it), in bytes.
pub fn rss() -> u64 {
    status_bytes("VmRSS:")
}

/// The peak resident memory of this process since it started or since [`reset_peak_rss`].
pub fn peak_rss() -> u64 {
    status_bytes("VmHWM:")
}

/// A native document of `n` arrays `a000000`, `a000001`..., each the array `node` (JSON text).
pub fn wide_store(n: usize, node: &str) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut body = String::with_capacity(n * (node.len() + 12) + 16);
    body.push_str(r#"{"nodes": {"#);
    for i in 0..n {
        let comma = if i == 0 { "" } else { "," };
        write!(body, "{comma}\"a{i:06}\": {node}").unwrap();
    }
    body.push_str("}}");
    body.into_bytes()
}

/// Starts measuring [`peak_rss`] afresh from the present resident memory (Linux's
/// `/proc/self/clear_refs`, value 5).
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

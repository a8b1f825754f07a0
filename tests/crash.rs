//! `kill -9` of the `zarrgate` binary while it writes a registration of 1,000,000 references,
//! on SQLite and PostgreSQL: the killed registration is caught in its transaction (PostgreSQL:
//! an open transaction writing blocks; SQLite: the write-ahead log growing), and afterwards the
//! server starts cleanly on the same catalog, the store is the version it was before (a
//! registration is one transaction), and registrations succeed again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fmt::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection;

const REFS: usize = 1_000_000;

/// A native document of one array of `REFS` chunks of 4 bytes, chunk `i` at byte `4 i` of `file`.
fn million(file: &Path) -> Vec<u8> {
    let path = file.display().to_string();
    let node = common::f32_array(&[REFS as u64], &[1], json!({}));
    let mut body = String::with_capacity(REFS * (path.len() + 48) + 1024);
    let node = node.to_string();
    write!(body, r#"{{"nodes": {{"x": {}, "manifest": {{"#, &node[..node.len() - 1]).unwrap();
    for i in 0..REFS {
        let comma = if i == 0 { "" } else { "," };
        // Offsets scattered over 2^40 bytes (registered unverified): packed blocks take about 5 MB,
        // more than SQLite's page cache, so the transaction writes to the WAL before it commits.
        let offset = ((i as u64).wrapping_mul(2_654_435_761) % (1 << 40)) & !3;
        write!(body, r#"{comma}"{i}":{{"path":"{path}","offset":{offset},"length":4}}"#).unwrap();
    }
    body.push_str("}}}}");
    body.into_bytes()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The binary on `database_url`, answering on `base` once it is up.
async fn start(database_url: &str, port: u16, log: &Path) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_zarrgate"))
        .env("ZARRGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("DATABASE_URL", database_url)
        .env_remove("ZARRGATE_ADMIN_TOKENS")
        .env_remove("ZARRGATE_CONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
    {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(started.elapsed() < Duration::from_secs(60), "the server did not start:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// Whether the catalog is in the middle of writing a version.
enum Watch {
    /// An open transaction of another session of this database.
    Postgres(sqlx::PgConnection, String),
    /// The write-ahead log beyond this size.
    Sqlite(std::path::PathBuf, u64),
}

impl Watch {
    async fn writing(&mut self) -> bool {
        match self {
            Self::Postgres(conn, db) => {
                sqlx::query_scalar::<_, i64>(
                    "select count(*) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid() \
                 and xact_start is not null and query ilike '%blocks%'",
                )
                .bind(db.as_str())
                .fetch_one(conn)
                .await
                .unwrap()
                    > 0
            }
            Self::Sqlite(wal, floor) => std::fs::metadata(&*wal).map(|m| m.len()).unwrap_or(0) > *floor,
        }
    }
}

async fn kill_during_registration(backend: common::Backend) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let data = root.join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("d.bin");
    let bytes: Vec<u8> = (0..4 * REFS).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &bytes).unwrap();
    let db = match backend {
        common::Backend::Postgres => Some(common::PgTestDb::create().await),
        common::Backend::Sqlite => None,
    };
    let database_url = match &db {
        Some(db) => db.url.clone(),
        None => format!("sqlite://{}/catalog.db", root.display()),
    };
    let (port, log) = (free_port(), root.join("zarrgate.log"));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut child = start(&database_url, port, &log).await;
    let put = |path: &str, body: Vec<u8>| client.put(format!("{base}{path}")).body(body).send();
    let url = url::Url::from_directory_path(&data).unwrap();
    let r = put("/api/v1/object-stores/local", json!({"url": url.as_str()}).to_string().into_bytes()).await.unwrap();
    assert!(r.status().is_success());
    let before =
        json!({"nodes": {"x": common::f32_array(&[1], &[1], json!({"manifest": {"0": {"data": "AACAPw=="}}}))}});
    let r = put("/api/v1/stores/big", before.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status(), 201);

    let mut watch = match &db {
        Some(db) => {
            let name = url::Url::parse(&db.url).unwrap().path().trim_start_matches('/').to_owned();
            Watch::Postgres(sqlx::PgConnection::connect(&common::postgres_url()).await.unwrap(), name)
        }
        None => {
            let wal = root.join("catalog.db-wal");
            let floor = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) + (1 << 20);
            Watch::Sqlite(wal, floor)
        }
    };
    let body = million(&file);
    let started = Instant::now();
    let upload = tokio::spawn(put("/api/v1/stores/big?verify=false", body));
    let caught = loop {
        if watch.writing().await {
            break true;
        }
        if upload.is_finished() {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(Command::new("kill").args(["-KILL", &child.id().to_string()]).status().unwrap().success());
    child.wait().unwrap();
    let answer = upload.await.unwrap();
    eprintln!(
        "{backend:?}: killed {:?} after the upload began; the client got {:?}",
        started.elapsed(),
        answer.as_ref().map(|r| r.status())
    );
    assert!(caught, "{backend:?}: the registration ended before it was seen writing: {answer:?}");
    assert!(answer.is_err(), "a registration killed in its transaction answered");

    // The server starts on the catalog as the crash left it, and serves the store as it was.
    let mut child = start(&database_url, port, &log).await;
    let summary: Value = client.get(format!("{base}/api/v1/stores/big")).send().await.unwrap().json().await.unwrap();
    assert_eq!(summary["chunks"]["inline"], 1, "{summary}");
    assert_eq!(summary["chunks"]["virtual"], 0, "{summary}");
    let chunk = client.get(format!("{base}/big/x/c/0")).send().await.unwrap();
    assert_eq!(chunk.bytes().await.unwrap().to_vec(), 1.0f32.to_le_bytes());

    // And the catalog takes registrations again (a small one: the large one was timed above).
    let after = json!({"nodes": {"x": common::f32_array(&[1], &[1], json!({"manifest": {"0": {"path": file.display().to_string(), "offset": 4 * (REFS - 1), "length": 4}}}))}});
    let r = put("/api/v1/stores/big", after.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status(), 200);
    let last = client.get(format!("{base}/big/x/c/0")).send().await.unwrap();
    assert_eq!(last.bytes().await.unwrap().to_vec(), &bytes[4 * REFS - 4..]);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_registration_on_sqlite() {
    kill_during_registration(common::Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_registration_on_postgres() {
    if std::env::var("ZARRGATE_TEST_POSTGRES").as_deref() == Ok("skip") {
        return;
    }
    kill_during_registration(common::Backend::Postgres).await;
}

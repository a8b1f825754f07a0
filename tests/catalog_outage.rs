//! PostgreSQL unreachable, through a TCP proxy the test cuts (refusing new connections, or
//! accepting and closing them, and closing the established ones) and restores: stores this
//! replica has read keep being served from its caches (degraded, in /readyz and the metrics),
//! every other read answers 503 with Retry-After at once (never 404, never 500, never a wait for
//! the pool's timeout on every request), and service resumes without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::proxy::{Cut, TcpProxy};
use common::{Backend, TestServer, f32_array, f32_bytes};
use serde_json::{Value, json};

fn doc(values: [f32; 2]) -> Value {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(f32_bytes(values));
    json!({"nodes": {"x": f32_array(&[2], &[2], json!({"manifest": {"0": {"data": data}}}))}})
}

/// A server on PostgreSQL reached through a [`TcpProxy`] the test cuts, a store's current
/// version kept `ttl_ms`; `None` when ZARRGATE_TEST_POSTGRES=skip.
async fn behind_proxy(ttl_ms: u64) -> Option<(TcpProxy, TestServer)> {
    if std::env::var("ZARRGATE_TEST_POSTGRES").as_deref() == Ok("skip") {
        eprintln!("ZARRGATE_TEST_POSTGRES=skip: not run");
        return None;
    }
    let pg = url::Url::parse(&common::postgres_url()).unwrap();
    let target =
        tokio::net::lookup_host((pg.host_str().unwrap(), pg.port().unwrap_or(5432))).await.unwrap().next().unwrap();
    let proxy = TcpProxy::start(target).await;
    let port = proxy.addr.port();
    let server = TestServer::start_with(Backend::Postgres, |c| {
        let mut url = url::Url::parse(&c.database_url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(port)).unwrap();
        c.database_url = url.to_string();
        c.cache.current_version_ttl_ms = ttl_ms;
    })
    .await;
    Some((proxy, server))
}

/// Waits (20 s at most, else fails saying `why`) until the change feed is up (1) or lost (0).
async fn feed_is(server: &TestServer, wanted: f64, why: &str) {
    let since = Instant::now();
    while server.metric("zarrgate_catalog_change_feed_up").await != wanted {
        assert!(since.elapsed() < Duration::from_secs(20), "{why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the change feed follows, so that every change made from now on reaches it.
async fn feed_follows(server: &TestServer) {
    feed_is(server, 1.0, "the change feed never followed").await;
}

/// Waits until the change feed has brought back `n` store changes (this replica's own
/// registrations among them). Applying one forgets the store's last known head, so a read made
/// before that would leave nothing to serve from in an outage: a test that reads first and then
/// cuts the database must wait for its own registrations' echo.
async fn changes_applied(server: &TestServer, n: f64) {
    let since = Instant::now();
    while server.metric_sum("zarrgate_catalog_changes_applied_total", &[("kind", "store")]).await < n {
        assert!(since.elapsed() < Duration::from_secs(20), "the change feed never brought {n} store changes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_stores_are_served_while_postgres_is_unreachable() {
    // Every read asks the catalog for the store's current version: only the degraded mode can
    // serve it while the catalog is away.
    let Some((proxy, server)) = behind_proxy(1).await else { return };
    feed_follows(&server).await;
    for (name, values) in [("cached", [1.0, 2.0]), ("unread-refuse", [3.0, 4.0]), ("unread-close", [3.0, 4.0])] {
        let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &doc(values)).await;
        assert_eq!(status, 201, "{body}");
    }
    changes_applied(&server, 3.0).await;
    let metadata = server.bytes("/cached/x/zarr.json").await;

    for (how, unread) in [(Cut::Refuse, "unread-refuse"), (Cut::Close, "unread-close")] {
        // Read (again: the caches are forgotten when the change feed follows after an outage).
        assert_eq!(server.bytes("/cached/x/c/0").await, f32_bytes([1.0, 2.0]));
        proxy.cut(how).await;
        let mut statuses: BTreeMap<(&str, u16), u32> = BTreeMap::new();
        let mut slowest = Duration::ZERO;
        for _ in 0..10 {
            let r = server.get("/cached/x/c/0", &[]).await;
            statuses.entry(("cached", r.status().as_u16())).and_modify(|n| *n += 1).or_insert(1);
            assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([1.0, 2.0]), "{how:?}: the cached chunk");
            assert_eq!(server.bytes("/cached/x/zarr.json").await, metadata);
            for path in [&*format!("/{unread}/x/c/0"), "/nosuch/x/c/0"] {
                let started = Instant::now();
                let r = server.get(path, &[]).await;
                slowest = slowest.max(started.elapsed());
                let status = r.status().as_u16();
                let store = if path.starts_with("/nosuch") { "nosuch" } else { "unread" };
                statuses.entry((store, status)).and_modify(|n| *n += 1).or_insert(1);
                assert_eq!(
                    r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
                    Some("1"),
                    "{how:?} {path}: {}",
                    r.status()
                );
                let problem: Value = r.json().await.unwrap();
                assert_eq!(problem["type"], "urn:zarrgate:problem:catalog-unavailable", "{how:?} {path}: {problem}");
            }
        }
        eprintln!("{how:?}: {statuses:?}, slowest answer of an unread store {slowest:?}");
        let expected = BTreeMap::from([(("cached", 200), 10), (("nosuch", 503), 10), (("unread", 503), 10)]);
        assert_eq!(statuses, expected, "{how:?}: never 404, never 500, cached stores served");
        // Not one request waited for the pool's acquire timeout on its own: the breaker answered.
        assert!(slowest < Duration::from_millis(4500), "{how:?}: an answer took {slowest:?}");
        assert!(server.metric("zarrgate_catalog_refused_total").await >= 10.0);
        assert!(server.metric("zarrgate_catalog_stale_reads_total").await >= 10.0);
        assert_eq!(server.metric("zarrgate_catalog_up").await, 0.0);
        // The change feed learns of the cut from its own connection, on its own time: the reads
        // above may all be answered first (they take well under a millisecond each).
        let cut = Instant::now();
        while server.metric("zarrgate_catalog_change_feed_up").await != 0.0 {
            assert!(cut.elapsed() < Duration::from_secs(10), "{how:?}: the change feed never saw the cut");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ready = server.get("/readyz", &[]).await;
        assert_eq!(ready.status(), 200);
        let ready: Value = ready.json().await.unwrap();
        assert_eq!(ready["status"], "degraded", "{ready}");

        // Back without a restart.
        proxy.restore().await;
        let restored = Instant::now();
        loop {
            let r = server.get(&format!("/{unread}/x/c/0"), &[]).await;
            if r.status() == 200 {
                assert_eq!(r.bytes().await.unwrap().to_vec(), f32_bytes([3.0, 4.0]));
                break;
            }
            assert_eq!(r.status(), 503, "{how:?}: while recovering");
            assert!(restored.elapsed() < Duration::from_secs(20), "{how:?}: no recovery");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ready: Value = server.get("/readyz", &[]).await.json().await.unwrap();
        assert_eq!(ready["status"], "ready", "{ready}");
        assert_eq!(server.metric("zarrgate_catalog_up").await, 1.0);
        assert_eq!(server.get("/nosuch/x/c/0", &[]).await.status(), 404, "a store that does not exist, once known");
        while server.metric("zarrgate_catalog_change_feed_up").await != 1.0 {
            assert!(restored.elapsed() < Duration::from_secs(20), "{how:?}: the change feed never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Writes work again too.
    let (status, body) = server.put("/api/v1/stores/cached", &doc([5.0, 6.0])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.bytes("/cached/x/c/0").await, f32_bytes([5.0, 6.0]));
}

/// What the change feed and the breaker notice first is a race; whichever wins, the very read
/// that meets an outage is served from the last known head (issue 38), whether the database
/// behind the proxy refuses connections, closes them during start-up, or never answers (the
/// pool's acquire timeout bounds that read); also when the change feed came back in between
/// and forgot every head (a flapping database), and no read came before the next outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_that_meets_an_outage_is_served_from_the_last_known_head() {
    let Some((proxy, server)) = behind_proxy(300).await else { return };
    feed_follows(&server).await;
    let (status, body) = server.put("/api/v1/stores/hot", &doc([1.0, 2.0])).await;
    assert_eq!(status, 201, "{body}");
    // Under load the registration's own echo could otherwise come after round 0's read and
    // leave that round nothing to serve from (seen once in CI on a loaded machine).
    changes_applied(&server, 1.0).await;
    for round in 0..21 {
        let how = [Cut::Refuse, Cut::Close, Cut::Stall][round % 3];
        // Every other round, nothing is read between the change feed's return (which forgot
        // every head) and the next outage.
        let flapping = round % 2 == 1;
        if !flapping {
            assert_eq!(server.bytes("/hot/x/c/0").await, f32_bytes([1.0, 2.0]));
        }
        proxy.cut(how).await;
        // Past the head's time to live (300 ms): the read must ask the catalog.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let started = Instant::now();
        let r = server.get("/hot/x/c/0", &[]).await;
        let status = r.status();
        let bytes = r.bytes().await.unwrap().to_vec();
        assert_eq!(status, 200, "round {round} ({how:?}, flapping {flapping}): {}", String::from_utf8_lossy(&bytes));
        assert_eq!(bytes, f32_bytes([1.0, 2.0]), "round {round} ({how:?})");
        assert!(started.elapsed() < Duration::from_secs(4), "round {round} ({how:?}): {:?}", started.elapsed());
        // A store never read: 503 with Retry-After, at once now that the breaker is open.
        let started = Instant::now();
        let r = server.get(&format!("/never-{round}/x/c/0"), &[]).await;
        assert_eq!(r.status(), 503, "round {round} ({how:?})");
        assert_eq!(r.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
        assert!(started.elapsed() < Duration::from_millis(500), "round {round} ({how:?}): {:?}", started.elapsed());

        proxy.restore().await;
        let restored = Instant::now();
        while server.get(&format!("/never-{round}/x/c/0"), &[]).await.status() != 404 {
            assert!(restored.elapsed() < Duration::from_secs(20), "round {round} ({how:?}): no recovery");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        feed_is(&server, 1.0, "the change feed never came back").await;
    }
}

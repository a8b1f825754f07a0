//! A circuit breaker in front of the catalog: once a call finds the database unreachable, the
//! calls that follow fail at once ([`CatalogError::Unavailable`]) instead of each waiting for
//! the pool's acquire timeout; one call a second goes through as a probe, and the first that
//! succeeds closes the breaker again. Service resumes by itself when the database does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    Catalog, CatalogError, Change, ListedVersion, LockGuard, NewVersion, ObjectStoreRecord, Origins, ParsedKey,
    Retention, StoreHead, StoreRecord, StoredNode, Stores, VersionOptions, Written,
};
use crate::metrics::Metrics;
use crate::zarr::document::SourceFacts;

/// How often a call goes through to an unreachable database to see whether it is back.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Whether the database was reachable at the last call.
#[derive(Debug, Default)]
struct State {
    /// Since when it is unreachable, and the error that said so.
    down: Option<(Instant, String)>,
    /// When the next call may go through as a probe.
    next_probe: Option<Instant>,
}

/// The catalog behind a circuit breaker.
pub struct Guarded {
    inner: Arc<dyn Catalog>,
    state: Mutex<State>,
    metrics: Metrics,
}

impl Guarded {
    /// `inner` behind a breaker reporting to `metrics`.
    pub fn new(inner: Arc<dyn Catalog>, metrics: Metrics) -> Self {
        metrics.catalog_up.set(1);
        Self { inner, state: Mutex::new(State::default()), metrics }
    }

    /// Since when the database is unreachable (as the last call found it), if it is.
    pub fn down_since(&self) -> Option<Instant> {
        self.state.lock().ok().and_then(|s| s.down.as_ref().map(|(at, _)| *at))
    }

    /// Runs `call` unless the breaker is open, and notes what it says of the database.
    async fn guard<T>(&self, call: impl Future<Output = Result<T, CatalogError>>) -> Result<T, CatalogError> {
        if let Some(refusal) = self.refusal() {
            self.metrics.catalog_refused_total.inc();
            return Err(refusal);
        }
        let result = call.await;
        self.note(result.as_ref().err());
        result
    }

    /// The error to answer at once while the database is down and no probe is due.
    fn refusal(&self) -> Option<CatalogError> {
        let mut state = self.state.lock().ok()?;
        let (since, cause) = state.down.as_ref()?;
        let now = Instant::now();
        if state.next_probe.is_none_or(|at| now >= at) {
            // This call is the probe; the others fail at once until the next one is due.
            state.next_probe = Some(now + PROBE_INTERVAL);
            return None;
        }
        Some(CatalogError::Unavailable(format!(
            "the catalog database has been unreachable for {} s ({cause}); it is tried again every second",
            since.elapsed().as_secs()
        )))
    }

    fn note(&self, error: Option<&CatalogError>) {
        let Ok(mut state) = self.state.lock() else { return };
        match error {
            Some(e) if e.is_unreachable() => {
                if state.down.is_none() {
                    tracing::error!(backend = self.inner.backend(), error = %e,
                        "the catalog database is unreachable: serving cached stores only, other reads answer 503");
                    state.down = Some((Instant::now(), e.to_string()));
                    state.next_probe = Some(Instant::now() + PROBE_INTERVAL);
                    self.metrics.catalog_up.set(0);
                }
            }
            _ => {
                if let Some((since, _)) = state.down.take() {
                    tracing::info!(
                        backend = self.inner.backend(),
                        down_seconds = since.elapsed().as_secs_f64(),
                        "the catalog database is reachable again"
                    );
                    self.metrics.catalog_up.set(1);
                }
            }
        }
    }
}

#[async_trait]
impl Catalog for Guarded {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn ping(&self) -> Result<(), CatalogError> {
        self.guard(self.inner.ping()).await
    }
    async fn head(&self, store: &str, pinned: Option<i64>) -> Result<StoreHead, CatalogError> {
        self.guard(self.inner.head(store, pinned)).await
    }
    async fn nodes(&self, version: i64) -> Result<Vec<StoredNode>, CatalogError> {
        self.guard(self.inner.nodes(version)).await
    }
    async fn block(&self, version: i64, node: &str, tile: u64) -> Result<Option<Vec<u8>>, CatalogError> {
        self.guard(self.inner.block(version, node, tile)).await
    }
    async fn tiles(&self, version: i64) -> Result<Vec<(String, u64)>, CatalogError> {
        self.guard(self.inner.tiles(version)).await
    }
    async fn sources(&self, version: i64) -> Result<Vec<(String, SourceFacts)>, CatalogError> {
        self.guard(self.inner.sources(version)).await
    }
    async fn stores(&self, which: Stores<'_>) -> Result<Vec<StoreRecord>, CatalogError> {
        self.guard(self.inner.stores(which)).await
    }
    async fn versions(&self, store: &str, limit: u32) -> Result<Vec<ListedVersion>, CatalogError> {
        self.guard(self.inner.versions(store, limit)).await
    }
    async fn origins_of(&self, which: Origins) -> Result<Vec<(String, String)>, CatalogError> {
        self.guard(self.inner.origins_of(which)).await
    }
    async fn version_files(&self, version: i64, offset: u64, limit: u64) -> Result<Vec<String>, CatalogError> {
        self.guard(self.inner.version_files(version, offset, limit)).await
    }
    async fn write(&self, name: &str, new: NewVersion<'_>, options: VersionOptions) -> Result<Written, CatalogError> {
        self.guard(self.inner.write(name, new, options)).await
    }
    async fn prune(&self, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        self.guard(self.inner.prune(name, retention)).await
    }
    async fn delete_store(&self, name: &str) -> Result<bool, CatalogError> {
        self.guard(self.inner.delete_store(name)).await
    }
    async fn object_stores(&self) -> Result<Vec<ObjectStoreRecord>, CatalogError> {
        self.guard(self.inner.object_stores()).await
    }
    async fn put_object_store(&self, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        self.guard(self.inner.put_object_store(record)).await
    }
    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError> {
        self.guard(self.inner.delete_object_store(name)).await
    }
    async fn parsed_file(&self, key: ParsedKey<'_>) -> Result<Option<Vec<u8>>, CatalogError> {
        self.guard(self.inner.parsed_file(key)).await
    }
    async fn parsed_files(&self, keys: &[ParsedKey<'_>]) -> Result<Vec<Option<Vec<u8>>>, CatalogError> {
        self.guard(self.inner.parsed_files(keys)).await
    }
    async fn put_parsed_files(&self, entries: &[(ParsedKey<'_>, &[u8])]) -> Result<(), CatalogError> {
        self.guard(self.inner.put_parsed_files(entries)).await
    }
    async fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        self.inner.changes().await
    }
    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>, CatalogError> {
        self.guard(self.inner.try_lock(name)).await
    }
}

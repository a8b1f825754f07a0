//! The application: configuration, catalog, source registry, caches and metrics, shared by every
//! request; and `serve`, the seam that runs the HTTP server until told to stop.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::Request;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::cache::{Caches, VersionView};
use crate::catalog::{self, Catalog, Change, ObjectStoreRecord, Retention, StoreHead, VersionHead};
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::sources::{ObjectStoreEntry, Origin, SourceRegistry, SourceSettings};
use crate::zarr::hierarchy::Node;
use crate::zarr::{Hierarchy, ManifestBlock, NodePath};

/// Everything a request needs.
pub struct App {
    /// The configuration it was started with.
    pub config: Config,
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// The object stores.
    pub sources: SourceRegistry,
    /// The caches.
    pub caches: Caches,
    /// The metrics.
    pub metrics: Metrics,
    /// `Cache-Control` of responses under a store's current version.
    pub current_cache_control: axum::http::HeaderValue,
    /// `Cache-Control` of responses under a pinned version.
    pub pinned_cache_control: axum::http::HeaderValue,
    /// Turns of registrations (PUT, PATCH), `ingest.max_concurrent` of them.
    registrations: tokio::sync::Semaphore,
    /// Held shared by registrations from validation to commit, exclusively by a change to the
    /// object stores: a store is never written against object stores removed meanwhile.
    object_store_changes: tokio::sync::RwLock<()>,
    token_digests: Vec<[u8; 32]>,
    read_digests: Vec<[u8; 32]>,
    loaded_object_stores: tokio::sync::Mutex<Vec<ObjectStoreRecord>>,
}

/// A registration's turn: one of `ingest.max_concurrent`, with the object stores held still.
pub struct RegistrationTurn<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    _object_stores: tokio::sync::RwLockReadGuard<'a, ()>,
}

/// The shared application handle given to handlers.
#[derive(Clone)]
pub struct AppState(pub Arc<App>);

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl App {
    /// Connects the catalog, loads the object stores and builds the caches.
    pub async fn start(config: Config) -> anyhow::Result<AppState> {
        let catalog = catalog::connect(&config.database_url, config.database_max_connections)
            .await
            .with_context(|| format!("opening the catalog at {}", catalog::redact_url(&config.database_url)))?;
        Self::with_catalog(config, catalog).await
    }

    /// As [`App::start`], with a catalog already open.
    pub async fn with_catalog(config: Config, catalog: Arc<dyn Catalog>) -> anyhow::Result<AppState> {
        let settings = SourceSettings {
            timeout: Duration::from_secs(config.sources.timeout_seconds.max(1)),
            connect_timeout: Duration::from_secs(config.sources.connect_timeout_seconds.max(1)),
            retries: config.sources.retries,
            api_ambient_credentials: config.sources.api_ambient_credentials,
        };
        let metrics = Metrics::new().context("registering metrics")?;
        metrics.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let app = App {
            registrations: tokio::sync::Semaphore::new(config.ingest.max_concurrent.max(1) as usize),
            object_store_changes: tokio::sync::RwLock::new(()),
            token_digests: digests(&config.admin_tokens),
            read_digests: digests(&config.read_tokens),
            caches: Caches::new(&config.cache, &metrics),
            current_cache_control: cache_control(&config, config.http.max_age_seconds, ""),
            pinned_cache_control: cache_control(&config, 31_536_000, ", immutable"),
            sources: SourceRegistry::new(settings),
            catalog,
            metrics,
            config,
            loaded_object_stores: tokio::sync::Mutex::new(Vec::new()),
        };
        app.load_object_stores(true).await?;
        let state = AppState(Arc::new(app));
        if let Some(changes) = state.catalog.changes().await {
            tokio::spawn(follow_changes(Arc::downgrade(&state.0), changes));
        }
        Ok(state)
    }

    /// A registration's turn: it waits up to `ingest.queue_seconds` while `ingest.max_concurrent`
    /// others run (each may hold `ingest.memory_bytes`), then gives up with 503.
    pub async fn registration_turn(&self) -> Result<RegistrationTurn<'_>, ApiError> {
        let wait = Duration::from_secs(self.config.ingest.queue_seconds);
        let turn = async {
            let permit = self.registrations.acquire().await.ok()?;
            let object_stores = self.object_store_changes.read().await;
            Some(RegistrationTurn { _permit: permit, _object_stores: object_stores })
        };
        match tokio::time::timeout(wait, turn).await {
            Ok(Some(turn)) => Ok(turn),
            _ => Err(ApiError::Busy(self.config.ingest.max_concurrent)),
        }
    }

    /// The right to change the object stores, once no registration is validating against them
    /// (waits up to `ingest.queue_seconds`, then 503).
    pub async fn object_store_change(&self) -> Result<tokio::sync::RwLockWriteGuard<'_, ()>, ApiError> {
        let wait = Duration::from_secs(self.config.ingest.queue_seconds);
        tokio::time::timeout(wait, self.object_store_changes.write())
            .await
            .map_err(|_| ApiError::Busy(self.config.ingest.max_concurrent))
    }

    /// True if `token` is one of the admin tokens. Every digest is compared, in constant time.
    pub fn token_matches(&self, token: &str) -> bool {
        matches_any(&self.token_digests, token)
    }

    /// True when the control plane requires a token.
    pub fn auth_required(&self) -> bool {
        !self.token_digests.is_empty()
    }

    /// True if `token` may read the data plane: a read token or an admin token, every digest
    /// compared in constant time.
    pub fn read_token_matches(&self, token: &str) -> bool {
        matches_any(&self.read_digests, token) | matches_any(&self.token_digests, token)
    }

    /// True when data-plane reads require a token.
    pub fn read_auth_required(&self) -> bool {
        !self.read_digests.is_empty()
    }

    /// Rebuilds the source registry from the configuration file and the catalog. Unless `force`,
    /// nothing is rebuilt when the catalog's object stores have not changed.
    pub async fn load_object_stores(&self, force: bool) -> anyhow::Result<()> {
        let records = self.catalog.object_stores().await?;
        let mut loaded = self.loaded_object_stores.lock().await;
        if !force && *loaded == records {
            return Ok(());
        }
        let settings = &self.sources.settings;
        let mut entries = Vec::new();
        for o in &self.config.object_stores {
            let entry = ObjectStoreEntry::build(&o.name, &o.url, &o.options, Origin::Config, settings)
                .with_context(|| format!("object store {} in the configuration file", o.name))?;
            entries.push(Arc::new(entry));
        }
        for r in &records {
            if entries.iter().any(|e| e.name == r.name) {
                tracing::warn!(name = %r.name, "object store registered over the API is shadowed by the configuration file");
                continue;
            }
            match ObjectStoreEntry::build(&r.name, &r.url, &r.options, Origin::Api, settings) {
                Ok(entry) => entries.push(Arc::new(entry)),
                Err(e) => {
                    tracing::error!(name = %r.name, url = %r.url, error = %e, "cannot build a registered object store; its sources will fail")
                }
            }
        }
        self.sources.replace(entries);
        *loaded = records;
        Ok(())
    }

    /// The head of `store`'s current version, or of its version `pinned`; `segment` is the store
    /// as the URL names it (`name` or `name@version`), the cache's key.
    /// A store deleted (and not registered again) is [`StoreHead::Deleted`], pinned or not.
    pub async fn head(&self, segment: &str, store: &str, pinned: Option<i64>) -> Result<StoreHead, ApiError> {
        let load = async {
            let started = Instant::now();
            let head = match pinned {
                None => self.catalog.current_version(store).await?,
                Some(id) => self.catalog.version(store, id).await?,
            };
            let head = match head {
                Some(head) => StoreHead::Version(head),
                None => self.catalog.deleted_at(store).await?.map_or(StoreHead::Unknown, StoreHead::Deleted),
            };
            self.observe_catalog("head", started);
            Ok(head)
        };
        self.caches.head(segment, load).await
    }

    /// The served view of a version.
    pub async fn view(&self, head: &VersionHead) -> Result<Arc<VersionView>, ApiError> {
        let load = async {
            let started = Instant::now();
            let nodes = self.catalog.nodes(head.id).await?;
            self.observe_catalog("nodes", started);
            let stored = nodes
                .into_iter()
                .map(|n| NodePath::new(&n.path).map(|p| (p, n.metadata, n.tile_shape)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::Internal(format!("version {}: {e}", head.id)))?;
            if stored.is_empty() {
                // Every version has its root: this one was deleted after `head` was read.
                return Err(gone(head));
            }
            let hierarchy = Hierarchy::build(stored, self.config.limits.max_metadata_bytes)
                .map_err(|e| ApiError::Internal(format!("version {}: {e}", head.id)))?;
            Ok(Arc::new(VersionView::new(head.clone(), hierarchy)))
        };
        self.caches.view(head.id, load).await
    }

    /// The block holding `tile` of array `node` in version `head`; empty when nothing is stored
    /// there. A version deleted meanwhile (by retention) is [`ApiError::Gone`], never an empty
    /// block: its chunks would read as fill values.
    pub async fn block(
        &self,
        head: &VersionHead,
        node: &Node,
        tile: u64,
        tile_len: u32,
    ) -> Result<Arc<ManifestBlock>, ApiError> {
        let version = head.id;
        let load = async {
            let started = Instant::now();
            let data = self.catalog.block(version, node.path.as_str(), tile).await?;
            self.observe_catalog("block", started);
            match data {
                None if self.catalog.version(&head.store, version).await?.is_none() => Err(gone(head)),
                None => Ok(Arc::new(ManifestBlock::empty(tile_len))),
                Some(bytes) => ManifestBlock::decode(&bytes)
                    .map(Arc::new)
                    .map_err(|e| ApiError::Internal(format!("version {version} node {} tile {tile}: {e}", node.path))),
            }
        };
        self.caches.block((version, node.index, tile), load).await
    }

    /// The chunk of fill values of array `node` in version `head`, encoded with its codecs, or
    /// `None` when zarrs cannot encode them or the chunk is larger than `limits.max_fill_chunk_bytes`
    /// decoded (missing chunks then answer 404).
    pub async fn fill_chunk(&self, head: &VersionHead, node: &Node) -> Result<Option<bytes::Bytes>, ApiError> {
        let load = async {
            let (metadata, max_bytes) = (node.metadata.clone(), self.config.limits.max_fill_chunk_bytes);
            let encoded = tokio::task::spawn_blocking(move || crate::zarr::fill::fill_chunk(&metadata, max_bytes))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            Ok(match encoded {
                Ok(bytes) => Some(bytes::Bytes::from(bytes)),
                Err(e) => {
                    tracing::warn!(store = %head.store, version = head.id, array = %node.path, error = %e,
                        "cannot encode a fill-value chunk; missing chunks of this array answer 404");
                    None
                }
            })
        };
        self.caches.fill((head.id, node.index), load).await
    }

    /// After a new version of `store` was written: deletes the versions retention does not keep
    /// (a failure only delays that to the next registration) and forgets what this replica
    /// cached about the store's versions.
    pub async fn settle(&self, store: &str) {
        // PostgreSQL intervals end after 178 million years; a century is "forever" enough.
        const CENTURY_MS: u64 = 100 * 365 * 86_400 * 1000;
        let retention = Retention {
            keep_versions: self.config.retention.keep_versions.max(1),
            keep_ms: i64::try_from(self.config.retention.keep_seconds.saturating_mul(1000).min(CENTURY_MS))
                .unwrap_or(i64::MAX),
        };
        match self.catalog.prune(store, retention).await {
            Ok(pruned) if !pruned.is_empty() => tracing::info!(store, ?pruned, "old versions deleted by retention"),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(store, error = %e, "retention failed; old versions kept until the next registration")
            }
        }
        self.caches.forget_store(store).await;
    }

    /// Records the latency of a catalog operation.
    pub fn observe_catalog(&self, operation: &str, started: Instant) {
        self.metrics
            .catalog_query_duration_seconds
            .with_label_values(&[operation])
            .observe(started.elapsed().as_secs_f64());
    }
}

fn digests(tokens: &[String]) -> Vec<[u8; 32]> {
    tokens.iter().map(|t| Sha256::digest(t.as_bytes()).into()).collect()
}

/// True if `token`'s digest is among `digests`; all of them are compared, in constant time.
fn matches_any(digests: &[[u8; 32]], token: &str) -> bool {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    digests.iter().fold(0u8, |found, d| found | d.ct_eq(&digest).unwrap_u8()) == 1
}

/// `Cache-Control` of data-plane answers: `public`, or `private` when reads need a token (a
/// shared cache must never hand a response to a reader who did not show one).
fn cache_control(config: &Config, max_age: u64, extra: &str) -> axum::http::HeaderValue {
    let scope = if config.read_tokens.is_empty() { "public" } else { "private" };
    axum::http::HeaderValue::from_str(&format!("{scope}, max-age={max_age}{extra}"))
        .unwrap_or(axum::http::HeaderValue::from_static("no-store"))
}

/// A version that was deleted while a request was using it.
fn gone(head: &VersionHead) -> ApiError {
    ApiError::Gone(format!(
        "version {} of store {:?} was deleted by retention; read /{}/zarr.json for the current version",
        head.id, head.store, head.store
    ))
}

/// Applies changes made through other replicas until the app is gone.
async fn follow_changes(app: std::sync::Weak<App>, mut changes: tokio::sync::mpsc::Receiver<Change>) {
    while let Some(change) = changes.recv().await {
        let Some(app) = app.upgrade() else { return };
        match change {
            Change::Store(store) => app.caches.forget_store(&store).await,
            Change::ObjectStores => {
                if let Err(e) = app.load_object_stores(false).await {
                    tracing::error!(error = %e, "cannot reload object stores after a change");
                }
            }
            Change::Lost => {
                app.caches.forget_all();
                if let Err(e) = app.load_object_stores(false).await {
                    tracing::error!(error = %e, "cannot reload object stores after losing the change feed");
                }
            }
        }
    }
}

/// Refuses to expose an open control plane: a non-loopback address needs an admin token, or
/// `insecure` said in so many words.
pub fn check_exposure(config: &Config) -> anyhow::Result<()> {
    let addr = config.listen_addr()?;
    if !addr.ip().is_loopback() && config.admin_tokens.is_empty() && !config.insecure {
        anyhow::bail!(
            "refusing to listen on {addr} with no admin token: anyone who can reach it could register and delete stores. \
             Set ZARRGATE_ADMIN_TOKENS (or admin_tokens in the configuration file), or pass --insecure if you really mean it"
        );
    }
    Ok(())
}

/// Serves `state` on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let router = crate::http::router(state);
    let service = tower::ServiceBuilder::new().map_request(crate::http::collapse_slashes).service(router);
    // No Nagle: a streamed chunk's body would otherwise wait for the client to acknowledge its
    // headers (a delayed ACK: 40 ms) before leaving.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    axum::serve(listener, axum::ServiceExt::<Request>::into_make_service(service))
        .with_graceful_shutdown(shutdown)
        .await
}

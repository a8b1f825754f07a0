//! The composition root: the configuration, the catalog, the object stores, the metrics and
//! the services built from them (read, write, stores, object stores), shared by every request
//! (the HTTP edge runs the HTTP server over it); and the policies of the whole server (tokens,
//! exposure).

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::catalog::{self, Catalog, Change};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::sources::{ReadAheadSettings, SourceRegistry, SourceSettings};
use crate::versions::cache::Caches;
use crate::versions::{ObjectStoreSettings, ObjectStores, Reader, Registrar, Settings, Stores};

/// Everything a request needs: the parts, and the services built from them.
pub struct App {
    /// The configuration it was started with.
    pub config: Config,
    /// The catalog, behind its circuit breaker.
    pub catalog: Arc<dyn Catalog>,
    /// The same catalog's breaker, for readiness: whether the database is reachable.
    pub catalog_guard: Arc<catalog::Guarded>,
    /// The object stores.
    pub sources: Arc<SourceRegistry>,
    /// The read service: versions, views, blocks, chunks.
    pub reader: Arc<Reader>,
    /// The write service: register, patch, delete.
    pub registrar: Arc<Registrar>,
    /// The stores service: list, describe, versions, recorded sources, verify.
    pub stores: Arc<Stores>,
    /// The object stores service: register, remove, load into the source registry.
    pub object_stores: Arc<ObjectStores>,
    /// The metrics.
    pub metrics: Metrics,
    token_digests: Vec<[u8; 32]>,
    read_digests: Vec<[u8; 32]>,
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
            .with_context(|| format!("opening the catalog at {}", crate::redact::redact_url(&config.database_url)))?;
        Self::with_catalog(config, catalog).await
    }

    /// As [`App::start`], with a catalog already open.
    pub async fn with_catalog(config: Config, catalog: Arc<dyn Catalog>) -> anyhow::Result<AppState> {
        let settings = SourceSettings {
            timeout: Duration::from_secs(config.sources.timeout_seconds.max(1)),
            connect_timeout: Duration::from_secs(config.sources.connect_timeout_seconds.max(1)),
            retries: config.sources.retries,
            max_concurrent: config.sources.max_concurrent_per_store.max(1),
            buffer_bytes: config.sources.buffer_chunk_bytes,
            api_ambient_credentials: config.sources.api_ambient_credentials,
            readahead: ReadAheadSettings {
                enabled: config.sources.readahead,
                window: config.sources.readahead_window_bytes,
                gap: config.sources.readahead_gap_bytes,
                cache: config.sources.readahead_cache_bytes,
            },
        };
        settings.readahead.check("sources.readahead_", "_bytes")?;
        let metrics = Metrics::new().context("registering metrics")?;
        metrics.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let catalog_guard = Arc::new(catalog::Guarded::new(catalog, metrics.clone()));
        let catalog: Arc<dyn Catalog> = catalog_guard.clone();
        let sources = Arc::new(SourceRegistry::metered(settings, &metrics));
        tokio::spawn(SourceRegistry::close_expired_files(Arc::downgrade(&sources), Duration::from_secs(1)));
        let caches = Caches::new(&config.cache, &metrics);
        let reader = Arc::new(
            Reader::new(catalog.clone(), sources.clone(), caches, metrics.clone(), config.limits.clone())
                .assembling(&config.assemble),
        );
        let registration = Settings {
            max_body_bytes: config.http.max_body_bytes,
            block_chunks: config.block_chunks,
            ingest: config.ingest.clone(),
            retention: config.retention.clone(),
            verify_concurrency: config.sources.verify_concurrency,
            fill_missing_by_default: config.http.missing_chunks == "fill",
            limits: config.limits.clone(),
            files: config.files.clone(),
        };
        let registrar =
            Arc::new(Registrar::new(catalog.clone(), sources.clone(), reader.clone(), metrics.clone(), registration));
        // Icechunk branch stores that follow their branch (`follow_seconds`), checked every 2 s.
        tokio::spawn(crate::versions::sync::follow(Arc::downgrade(&registrar), Duration::from_secs(2)));
        let stores = Arc::new(Stores::new(catalog.clone(), sources.clone(), config.sources.verify_concurrency));
        let object_store_settings = ObjectStoreSettings {
            declared: config.object_stores.clone(),
            allow_files: config.allow_file_object_stores,
            own_files: config.own_files(),
        };
        let object_stores =
            Arc::new(ObjectStores::new(catalog.clone(), sources.clone(), registrar.clone(), object_store_settings));
        let app = App {
            token_digests: digests(&config.admin_tokens),
            read_digests: digests(&config.read_tokens),
            sources,
            reader,
            registrar,
            stores,
            object_stores,
            catalog,
            catalog_guard,
            metrics,
            config,
        };
        app.object_stores.load(true).await?;
        warn_of_reserved_stores(app.catalog.as_ref()).await;
        let state = AppState(Arc::new(app));
        if let Some(changes) = state.catalog.changes().await {
            tokio::spawn(follow_changes(Arc::downgrade(&state.0), changes));
        }
        Ok(state)
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
}

/// Logs a warning for a store named `v2`, registered before the name was reserved: `/v2/...`
/// is now the Zarr v2 view of every store, so its data-plane URLs answer 404 (its control-plane
/// routes still work: export it, register it under another name, delete it).
async fn warn_of_reserved_stores(catalog: &dyn Catalog) {
    match catalog.store("v2").await {
        Ok(Some(_)) => tracing::warn!(
            store = "v2",
            "a store is named \"v2\", a name now reserved: /v2/<store>/ is the Zarr v2 view of every store, so \
             this store's data-plane URLs answer 404. Export it (GET /api/v1/stores/v2/manifest), register it \
             under another name and delete it (DELETE /api/v1/stores/v2)"
        ),
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, "cannot check for a store named \"v2\""),
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

/// Applies changes made through other replicas until the app is gone.
async fn follow_changes(app: std::sync::Weak<App>, mut changes: tokio::sync::mpsc::Receiver<Change>) {
    while let Some(change) = changes.recv().await {
        let Some(app) = app.upgrade() else { return };
        match change {
            Change::Store(store) => {
                app.reader.forget_store(&store).await;
                app.metrics.catalog_changes_applied_total.with_label_values(&["store"]).inc();
            }
            Change::ObjectStores => {
                if let Err(e) = app.object_stores.load(false).await {
                    tracing::error!(error = %e, "cannot reload object stores after a change");
                }
                app.metrics.catalog_changes_applied_total.with_label_values(&["object_stores"]).inc();
            }
            // Nothing is forgotten yet: the database may be down too, and the caches are then what
            // keeps cached stores served. Current versions are trusted for their TTL meanwhile.
            Change::Lost => app.metrics.catalog_change_feed_up.set(0),
            Change::Following => {
                app.metrics.catalog_change_feed_up.set(1);
                app.reader.caches().forget_all();
                if let Err(e) = app.object_stores.load(false).await {
                    tracing::error!(error = %e, "cannot reload object stores after the change feed came back");
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

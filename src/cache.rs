//! The in-memory caches (moka): store -> version head (short TTL), version -> rendered metadata,
//! and decoded manifest blocks, byte-weighted. Concurrent misses for one key load it once.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use bytes::Bytes;
use moka::future::Cache;

use crate::catalog::{StoreHead, VersionHead};
use crate::config::CacheConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::zarr::{Hierarchy, ManifestBlock};

/// A store as the URL names it: `name` (its current version) or `name@version`.
pub type HeadKey = String;
/// `(version, node index, tile)`.
pub type BlockKey = (i64, u32, u64);

/// One node's `zarr.json`, ready to serve.
#[derive(Debug)]
pub struct RenderedDoc {
    /// Uncompressed body.
    pub identity: Bytes,
    /// Gzip-compressed body, when smaller.
    pub gzip: Option<Bytes>,
    /// Strong ETag of the identity body.
    pub etag: HeaderValue,
    /// Strong ETag of the gzip body.
    pub gzip_etag: HeaderValue,
}

/// A version's metadata, as served.
#[derive(Debug)]
pub struct VersionView {
    /// Which version.
    pub head: VersionHead,
    /// Its nodes.
    pub hierarchy: Hierarchy,
    /// Each node's rendered document, by node index.
    pub docs: Vec<RenderedDoc>,
    /// `Zarrgate-Version`, ready to send.
    pub version_header: HeaderValue,
    /// `Last-Modified` (when the version was registered), ready to send.
    pub last_modified: HeaderValue,
}

impl VersionView {
    /// Renders every node's document once. Metadata ETags include the version: the same
    /// `zarr.json` registered again is a new response (its `Zarrgate-Version` differs), so a cache
    /// revalidating it must not keep the old version's headers.
    pub fn new(head: VersionHead, hierarchy: Hierarchy) -> Self {
        let docs = hierarchy
            .nodes()
            .map(|node| {
                let identity = node.zarr_json.clone();
                let gzip = gzip(&identity).filter(|z| z.len() < identity.len());
                let tag = etag('m', &identity);
                let tag = tag.trim_end_matches('"');
                let value = |suffix: &str| {
                    HeaderValue::from_str(&format!("{tag}-v{}{suffix}\"", head.id))
                        .unwrap_or(HeaderValue::from_static("\"\""))
                };
                RenderedDoc { etag: value(""), gzip_etag: value("-gz"), identity, gzip }
            })
            .collect();
        let when = chrono::DateTime::from_timestamp_millis(head.created_at_ms).unwrap_or_default();
        let last_modified = HeaderValue::from_str(&when.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
            .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
        Self { version_header: HeaderValue::from(head.id), last_modified, head, hierarchy, docs }
    }

    fn weight(&self) -> u32 {
        let docs: usize = self.docs.iter().map(|d| d.identity.len() + d.gzip.as_ref().map_or(0, Bytes::len) + 64).sum();
        u32::try_from(self.hierarchy.weight() + docs).unwrap_or(u32::MAX)
    }
}

fn gzip(data: &[u8]) -> Option<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 4), flate2::Compression::default());
    encoder.write_all(data).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

/// A strong ETag derived from content only, so every replica and restart agrees.
pub fn etag(kind: char, content: &[u8]) -> String {
    format!("\"{kind}{:032x}\"", xxhash_rust::xxh3::xxh3_128(content))
}

/// A cache's hit and miss counters, bound once.
#[derive(Debug, Clone)]
struct Counters {
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
}

impl Counters {
    fn new(metrics: &Metrics, name: &str) -> Self {
        Self {
            hits: metrics.cache_hits_total.with_label_values(&[name]),
            misses: metrics.cache_misses_total.with_label_values(&[name]),
        }
    }
}

/// The caches.
#[derive(Debug, Clone)]
pub struct Caches {
    counters: [Counters; 4],
    heads: Cache<HeadKey, StoreHead>,
    views: Cache<i64, Arc<VersionView>>,
    blocks: Cache<BlockKey, Arc<ManifestBlock>>,
    fills: Cache<(i64, u32), Option<Bytes>>,
}

impl Caches {
    /// Caches sized by `config`, counting hits and misses in `metrics`.
    pub fn new(config: &CacheConfig, metrics: &Metrics) -> Self {
        Self {
            counters: ["heads", "metadata", "blocks", "fills"].map(|name| Counters::new(metrics, name)),
            heads: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_millis(config.current_version_ttl_ms.max(1)))
                .support_invalidation_closures()
                .build(),
            views: Cache::builder()
                .max_capacity(config.metadata_bytes)
                .weigher(|_, v: &Arc<VersionView>| v.weight())
                .build(),
            blocks: Cache::builder()
                .max_capacity(config.blocks_bytes)
                .weigher(|_, b: &Arc<ManifestBlock>| u32::try_from(b.weight()).unwrap_or(u32::MAX))
                .build(),
            fills: Cache::builder()
                .max_capacity(config.fill_chunks_bytes)
                .weigher(|_, f: &Option<Bytes>| {
                    u32::try_from(f.as_ref().map_or(0, Bytes::len) + 64).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// The head of the store the URL names (`name` or `name@version`), loading it on a miss.
    pub async fn head(
        &self,
        key: &str,
        load: impl Future<Output = Result<StoreHead, ApiError>>,
    ) -> Result<StoreHead, ApiError> {
        if let Some(head) = self.heads.get(key).await {
            self.counters[0].hits.inc();
            return Ok(head);
        }
        get(&self.heads, &self.counters[0], key.to_owned(), load).await
    }

    /// The view of version `id`, loading it on a miss.
    pub async fn view(
        &self,
        id: i64,
        load: impl Future<Output = Result<Arc<VersionView>, ApiError>>,
    ) -> Result<Arc<VersionView>, ApiError> {
        if let Some(value) = self.views.get(&id).await {
            self.counters[1].hits.inc();
            return Ok(value);
        }
        get(&self.views, &self.counters[1], id, load).await
    }

    /// The block at `key`, loading it on a miss.
    pub async fn block(
        &self,
        key: BlockKey,
        load: impl Future<Output = Result<Arc<ManifestBlock>, ApiError>>,
    ) -> Result<Arc<ManifestBlock>, ApiError> {
        if let Some(value) = self.blocks.get(&key).await {
            self.counters[2].hits.inc();
            return Ok(value);
        }
        get(&self.blocks, &self.counters[2], key, load).await
    }

    /// The fill-value chunk of array `node` of version `id` (`None`: it cannot be encoded).
    pub async fn fill(
        &self,
        key: (i64, u32),
        load: impl Future<Output = Result<Option<Bytes>, ApiError>>,
    ) -> Result<Option<Bytes>, ApiError> {
        if let Some(value) = self.fills.get(&key).await {
            self.counters[3].hits.inc();
            return Ok(value);
        }
        get(&self.fills, &self.counters[3], key, load).await
    }

    /// Forgets what this replica believes about `store`'s versions.
    pub async fn forget_store(&self, store: &str) {
        self.heads.invalidate(store).await;
        let pinned = format!("{store}@");
        if let Err(e) = self.heads.invalidate_entries_if(move |k, _| k.starts_with(&pinned)) {
            tracing::error!(error = %e, "cannot invalidate cached versions");
        }
        self.heads.run_pending_tasks().await;
    }

    /// Forgets everything (after losing the change feed).
    pub fn forget_all(&self) {
        self.heads.invalidate_all();
    }

    /// Publishes sizes to the metrics.
    pub fn report(&self, metrics: &Metrics) {
        metrics.cache_entries.with_label_values(&["heads"]).set(self.heads.entry_count() as i64);
        for (name, bytes, entries) in [
            ("metadata", self.views.weighted_size(), self.views.entry_count()),
            ("blocks", self.blocks.weighted_size(), self.blocks.entry_count()),
            ("fills", self.fills.weighted_size(), self.fills.entry_count()),
        ] {
            metrics.cache_bytes.with_label_values(&[name]).set(bytes as i64);
            metrics.cache_entries.with_label_values(&[name]).set(entries as i64);
        }
    }
}

async fn get<K, V>(
    cache: &Cache<K, V>,
    counters: &Counters,
    key: K,
    load: impl Future<Output = Result<V, ApiError>>,
) -> Result<V, ApiError>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let entry = cache.entry(key).or_try_insert_with(load).await.map_err(|e| (*e).clone())?;
    if entry.is_fresh() { &counters.misses } else { &counters.hits }.inc();
    Ok(entry.into_value())
}

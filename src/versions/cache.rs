//! The caches of the read path, each a named instance of one memo (moka, with each worker
//! thread's front of it: `cache/front.rs`) that counts its hits and misses in one place: store
//! -> version head (short TTL), version -> view, version -> Zarr v2 view, decoded manifest
//! blocks, fill chunks and rendered quick looks (byte-weighted). Concurrent misses for one key
//! load it once.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use moka::future::Cache;

use super::error::{Error, Result};
use super::view::{RenderedQuicklook, V2Rendered, VersionView};
use crate::catalog::StoreHead;
use crate::config::CacheConfig;
use crate::metrics::Metrics;
use crate::zarr::ManifestBlock;

mod front;

pub use front::{Front, FrontKey, FrontOf, HeadsFront, NoFront};

/// A store as the URL names it: `name` (its current version) or `name@version`.
pub type HeadKey = String;
/// A store's head, and when it was read from the catalog.
pub type LoadedHead = (Arc<StoreHead>, Instant);
/// `(version, node index, tile)`.
pub type BlockKey = (i64, u32, u64);
/// `(version, node index)`.
pub type FillKey = (i64, u32);
/// `(version, node index, coordinates of the chunk drawn)`.
pub type QuicklookKey = (i64, u32, Vec<u64>);
/// A quick look, or why there is none (a refusal is kept as long as the image would be: the
/// same version's same array is refused again without being read or decoded again).
pub type QuicklookOutcome = std::result::Result<Arc<RenderedQuicklook>, Arc<str>>;

/// One cache: values loaded once per key, with what each worker thread keeps in front of it
/// (`F`: [`NoFront`], a [`Front`] of its last values, or the [`HeadsFront`]), hits and misses counted here under the
/// cache's name, wherever the value was found (the thread's front or the shared memo).
pub struct Memo<K, V, F = NoFront> {
    name: &'static str,
    cache: Cache<K, V>,
    front: F,
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
}

impl<K, V, F> std::fmt::Debug for Memo<K, V, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<K, V, F> Memo<K, V, F>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn new(name: &'static str, cache: Cache<K, V>, front: F, metrics: &Metrics) -> Self {
        Self {
            name,
            cache,
            front,
            hits: metrics.cache_hits_total.with_label_values(&[name]),
            misses: metrics.cache_misses_total.with_label_values(&[name]),
        }
    }

    /// The value at `key` if this worker thread has it at hand (counted as a hit): no waiting,
    /// no shared memo. `None` sends the lookup to [`Memo::load`].
    pub fn now<Q: ?Sized>(&self, key: &Q) -> Option<V>
    where
        F: FrontOf<Q, V>,
    {
        let value = self.front.get(key)?;
        self.hits.inc();
        Some(value)
    }

    /// The value at `key` from the shared memo, loaded by `load` on a miss (once, however many
    /// ask at the same time; the key owned then only), and kept in this worker thread's front. A
    /// failed load is not kept. `load` makes the loading future on a miss only: a hit's future
    /// never holds one (a load through the catalog is kilobytes of state, moved with every
    /// request that holds it).
    pub async fn load<Q, Fut>(&self, key: &Q, load: impl FnOnce() -> Fut) -> Result<V>
    where
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        K: std::borrow::Borrow<Q>,
        F: FrontOf<Q, V>,
        Fut: Future<Output = Result<V>>,
    {
        // Before the memo is asked: a value kept meanwhile is kept under what was current then.
        let ticket = self.front.ticket();
        let value = match self.cache.get(key).await {
            Some(value) => {
                self.hits.inc();
                value
            }
            // Boxed: a miss is rare, and its future would make every hit's larger.
            None => Box::pin(self.load_missed(key.to_owned(), load)).await?,
        };
        self.front.keep(key, &value, ticket);
        Ok(value)
    }

    /// The value at `key`: [`Memo::now`], else [`Memo::load`].
    pub async fn get_or_load<Fut: Future<Output = Result<V>>>(&self, key: K, load: impl FnOnce() -> Fut) -> Result<V>
    where
        K: Clone,
        F: FrontOf<K, V>,
    {
        match self.now(&key) {
            Some(value) => Ok(value),
            None => self.load(&key, load).await,
        }
    }

    /// A lookup that missed: loaded once however many ask, or found loaded by another meanwhile.
    async fn load_missed<Fut: Future<Output = Result<V>>>(&self, key: K, load: impl FnOnce() -> Fut) -> Result<V> {
        let entry = self.cache.entry(key).or_try_insert_with(load()).await.map_err(|e: Arc<Error>| (*e).clone())?;
        if entry.is_fresh() { &self.misses } else { &self.hits }.inc();
        Ok(entry.into_value())
    }

    /// Forgets the value at `key` (a value a front holds is served until it lets go of it).
    pub async fn forget<Q>(&self, key: &Q)
    where
        Q: Hash + Eq + ?Sized,
        K: std::borrow::Borrow<Q>,
    {
        self.cache.invalidate(key).await;
    }

    /// The most it holds (entries, or bytes when weighed).
    pub fn capacity(&self) -> u64 {
        self.cache.policy().max_capacity().unwrap_or(u64::MAX)
    }

    fn report(&self, metrics: &Metrics, weighted: bool) {
        if weighted {
            metrics.cache_bytes.with_label_values(&[self.name]).set(self.cache.weighted_size() as i64);
        }
        metrics.cache_entries.with_label_values(&[self.name]).set(self.cache.entry_count() as i64);
    }
}

/// Forgets `store`'s current and pinned versions in `heads`.
async fn forget_store_in<V: Clone + Send + Sync + 'static>(heads: &Cache<HeadKey, V>, store: &str) {
    heads.invalidate(store).await;
    let pinned = format!("{store}@");
    if let Err(e) = heads.invalidate_entries_if(move |k, _| k.starts_with(&pinned)) {
        tracing::error!(error = %e, "cannot invalidate cached versions");
    }
    heads.run_pending_tasks().await;
}

/// The caches of the read path.
#[derive(Debug)]
pub struct Caches {
    /// Store (as the URL names it) -> what is served there, each worker thread's last 8 in
    /// front (until the memo's TTL would end them, or the next invalidation).
    pub heads: Memo<HeadKey, LoadedHead, HeadsFront>,
    /// Version -> its view, each worker thread's last 8 in front.
    pub views: Memo<i64, Arc<VersionView>, Front<i64, VersionView>>,
    /// Version -> its Zarr v2 view (weighed against `cache.metadata_bytes` like the views it
    /// mirrors).
    pub v2_views: Memo<i64, Arc<V2Rendered>>,
    /// Decoded manifest blocks, each worker thread's last 64 in front.
    pub blocks: Memo<BlockKey, Arc<ManifestBlock>, Front<BlockKey, ManifestBlock>>,
    /// Encoded fill-value chunks (`None`: the array's cannot be built).
    pub fills: Memo<FillKey, Option<Bytes>>,
    /// Rendered quick looks (byte-weighted).
    pub quicklooks: Memo<QuicklookKey, QuicklookOutcome>,
    /// Assembled chunks, encoded, by their strong ETag (byte-weighted).
    pub assembled: Memo<String, Bytes>,
    /// What each store was when last read from the catalog, kept `cache.unavailable_ttl_seconds`
    /// for reads while the catalog is unreachable (`None`: no such grace).
    last_heads: Option<Cache<HeadKey, Arc<StoreHead>>>,
}

impl Caches {
    /// Caches sized by `config`, counting hits and misses in `metrics`.
    pub fn new(config: &CacheConfig, metrics: &Metrics) -> Self {
        let heads_ttl = Duration::from_millis(config.current_version_ttl_ms.max(1));
        let heads =
            Cache::builder().max_capacity(100_000).time_to_live(heads_ttl).support_invalidation_closures().build();
        let views =
            Cache::builder().max_capacity(config.metadata_bytes).weigher(|_, v: &Arc<VersionView>| v.weight()).build();
        let v2_views =
            Cache::builder().max_capacity(config.metadata_bytes).weigher(|_, r: &Arc<V2Rendered>| r.weight()).build();
        let blocks = Cache::builder()
            .max_capacity(config.blocks_bytes)
            .weigher(|_, b: &Arc<ManifestBlock>| u32::try_from(b.weight()).unwrap_or(u32::MAX))
            .build();
        let fills = Cache::builder()
            .max_capacity(config.fill_chunks_bytes)
            .weigher(|_, f: &Option<Bytes>| u32::try_from(f.as_ref().map_or(0, Bytes::len) + 64).unwrap_or(u32::MAX))
            .build();
        let quicklooks = Cache::builder()
            .max_capacity(config.quicklooks_bytes)
            .weigher(|_, q: &QuicklookOutcome| match q {
                Ok(q) => q.weight(),
                Err(why) => u32::try_from(why.len() + 64).unwrap_or(u32::MAX),
            })
            .build();
        let assembled = Cache::builder()
            .max_capacity(config.assembled_bytes)
            .weigher(|_, b: &Bytes| u32::try_from(b.len() + 96).unwrap_or(u32::MAX))
            .build();
        let last_heads = (config.unavailable_ttl_seconds > 0).then(|| {
            Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(config.unavailable_ttl_seconds))
                .support_invalidation_closures()
                .build()
        });
        Self {
            last_heads,
            heads: Memo::new("heads", heads, HeadsFront::new(heads_ttl), metrics),
            views: Memo::new("metadata", views, Front::new(8), metrics),
            v2_views: Memo::new("v2_metadata", v2_views, NoFront, metrics),
            blocks: Memo::new("blocks", blocks, Front::new(64), metrics),
            fills: Memo::new("fills", fills, NoFront, metrics),
            quicklooks: Memo::new("quicklooks", quicklooks, NoFront, metrics),
            assembled: Memo::new("assembled", assembled, NoFront, metrics),
        }
    }

    /// Forgets what this replica believes about `store`'s versions.
    pub async fn forget_store(&self, store: &str) {
        forget_store_in(&self.heads.cache, store).await;
        if let Some(last) = &self.last_heads {
            forget_store_in(last, store).await;
        }
        // After the memo forgot: a head a front takes from now on is read after that.
        self.heads.front.invalidate();
    }

    /// Forgets every store head (when the change feed follows again after an interruption:
    /// changes made meanwhile were missed), so that the next read of each asks the catalog. The
    /// last heads read from the catalog are kept: they answer only while the catalog cannot be
    /// reached, and a database that flaps (back for the change feed to follow, gone again at
    /// the next read) must not turn the stores this replica served into 503s.
    pub fn forget_all(&self) {
        self.heads.cache.invalidate_all();
        self.heads.front.invalidate();
    }

    /// Notes what `segment` was when just read from the catalog.
    pub async fn remember_head(&self, segment: &str, head: &Arc<StoreHead>) {
        if let Some(last) = &self.last_heads
            && **head != StoreHead::Unknown
        {
            last.insert(segment.to_owned(), Arc::clone(head)).await;
        }
    }

    /// What `segment` was when last read from the catalog, if that was recent enough to serve
    /// while the catalog is unreachable.
    pub async fn last_head(&self, segment: &str) -> Option<Arc<StoreHead>> {
        self.last_heads.as_ref()?.get(segment).await
    }

    /// Publishes sizes to the metrics.
    pub fn report(&self, metrics: &Metrics) {
        self.heads.report(metrics, false);
        self.views.report(metrics, true);
        self.blocks.report(metrics, true);
        self.v2_views.report(metrics, true);
        self.fills.report(metrics, true);
        self.quicklooks.report(metrics, true);
        self.assembled.report(metrics, true);
    }
}

//! The caches of the read path, each a named instance of one memo (moka) that counts its hits
//! and misses: store -> version head (short TTL), version -> view, decoded manifest blocks, fill
//! chunks and rendered quick looks (byte-weighted). Concurrent misses for one key load it once.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use moka::future::Cache;

use super::error::{Error, Result};
use super::view::RenderedQuicklook;
use super::view::VersionView;
use crate::catalog::StoreHead;
use crate::config::CacheConfig;
use crate::metrics::Metrics;
use crate::zarr::ManifestBlock;

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

/// One cache: values loaded once per key, hits and misses counted under the cache's name.
pub struct Memo<K, V> {
    name: &'static str,
    cache: Cache<K, V>,
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
}

impl<K, V> std::fmt::Debug for Memo<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<K, V> Memo<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn new(name: &'static str, cache: Cache<K, V>, metrics: &Metrics) -> Self {
        Self {
            name,
            cache,
            hits: metrics.cache_hits_total.with_label_values(&[name]),
            misses: metrics.cache_misses_total.with_label_values(&[name]),
        }
    }

    /// The value at `key`, loaded by `load` on a miss (once, however many ask at the same time).
    /// A failed load is not kept.
    /// `load` makes the loading future on a miss only: a hit's future never holds one (a load
    /// through the catalog is kilobytes of state, moved with every request that holds it).
    pub async fn get_or_load<F: Future<Output = Result<V>>>(&self, key: K, load: impl FnOnce() -> F) -> Result<V> {
        if let Some(value) = self.cache.get(&key).await {
            self.hits.inc();
            return Ok(value);
        }
        // Boxed: a miss is rare, and its future would make every hit's larger.
        Box::pin(self.load(key, load)).await
    }

    /// [`Memo::get_or_load`] for a key that is costly to own (a `String`): owned on a miss only.
    pub async fn get_or_load_borrowed<Q, F>(&self, key: &Q, load: impl FnOnce() -> F) -> Result<V>
    where
        F: Future<Output = Result<V>>,
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(value) = self.cache.get(key).await {
            self.hits.inc();
            return Ok(value);
        }
        Box::pin(self.load(key.to_owned(), load)).await
    }

    /// A lookup that missed: loaded once however many ask, or found loaded by another meanwhile.
    async fn load<F: Future<Output = Result<V>>>(&self, key: K, load: impl FnOnce() -> F) -> Result<V> {
        let entry = self.cache.entry(key).or_try_insert_with(load()).await.map_err(|e: Arc<Error>| (*e).clone())?;
        if entry.is_fresh() { &self.misses } else { &self.hits }.inc();
        Ok(entry.into_value())
    }

    /// The most it holds (entries, or bytes when weighed).
    pub fn capacity(&self) -> u64 {
        self.cache.policy().max_capacity().unwrap_or(u64::MAX)
    }

    /// Forgets the value at `key`.
    pub async fn forget(&self, key: &K) {
        self.cache.invalidate(key).await;
    }

    fn report(&self, metrics: &Metrics, weighted: bool) {
        if weighted {
            metrics.cache_bytes.with_label_values(&[self.name]).set(self.cache.weighted_size() as i64);
        }
        metrics.cache_entries.with_label_values(&[self.name]).set(self.cache.entry_count() as i64);
    }
}

impl<K, T> Memo<K, Arc<T>>
where
    K: FrontKey + Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    /// [`Memo::get_or_load`] through `front`, this worker thread's last values of the memo.
    pub async fn get_or_load_fronted<F: Future<Output = Result<Arc<T>>>>(
        &self,
        front: &Front<K, T>,
        key: K,
        load: impl FnOnce() -> F,
    ) -> Result<Arc<T>> {
        if let Some(value) = self.fronted(front, &key) {
            return Ok(value);
        }
        let value = self.get_or_load(key.clone(), load).await?;
        front.keep(key.slot(), key, &value);
        Ok(value)
    }

    /// The value at `key` if `front` (this worker thread's) has it, counted as a hit.
    fn fronted(&self, front: &Front<K, T>, key: &K) -> Option<Arc<T>> {
        let value = front.get(key.slot(), key)?;
        self.hits.inc();
        Some(value)
    }

    /// Keeps the value at `key` in `front` if the memo holds one (loading nothing), not counted:
    /// a read that then finds it there counts it ([`Memo::count_peeked`]).
    pub async fn front_held(&self, front: &Front<K, T>, key: K) {
        if let Some(value) = self.cache.get(&key).await {
            front.keep(key.slot(), key, &value);
        }
    }

    /// The value at `key` if `front` has it, not yet counted: no waiting, no memo. A read
    /// that uses it counts it ([`Memo::count_peeked`]), one that does not asks again
    /// ([`Memo::get_or_load_fronted`]).
    pub fn peek_fronted(&self, front: &Front<K, T>, key: &K) -> Option<Arc<T>> {
        front.peek(key.slot(), key)
    }

    /// Counts a hit of what [`Memo::peek_fronted`] found.
    pub fn count_peeked(&self, front: &Front<K, T>, key: &K) {
        front.count(key.slot(), key);
        self.hits.inc();
    }
}

/// Where a key sits in a [`Front`] (modulo its size): cheap, and different for the keys read
/// together.
pub trait FrontKey {
    fn slot(&self) -> usize;
}

/// A version: versions are numbered in order, so the few read together differ in their last bits.
impl FrontKey for i64 {
    fn slot(&self) -> usize {
        *self as usize
    }
}

/// A block: consecutive tiles of one array take consecutive slots (31 is odd: any run of as many
/// tiles as there are slots, a power of two, takes them all).
impl FrontKey for BlockKey {
    fn slot(&self) -> usize {
        let (version, node, tile) = *self;
        (tile as usize).wrapping_mul(31) ^ (node as usize).wrapping_mul(0x9e37) ^ version as usize
    }
}

/// How often a value found in a [`Front`] is still asked of its memo: one hit in this many, so
/// that what the front serves stays recently used there, and is not evicted as unused.
const TOUCH_EVERY: u32 = 32;

/// The last values each worker thread took from a memo of values that never change for their
/// key (views by version, blocks by version, array and tile), one per slot: a hit costs no
/// hashing, no lock and no entry in the memo's bookkeeping (moka's were a tenth of a cached
/// read, bench/README.md "Stop 16"). Held weakly: nothing the memo has let go of is kept once
/// no request holds it, so the memo's bound is the bound.
pub struct Front<K: Send, T: Send + Sync> {
    slots: thread_local::ThreadLocal<std::cell::RefCell<Slots<K, T>>>,
    size: usize,
}

/// One thread's slots.
type Slots<K, T> = Vec<Option<Slot<K, T>>>;

struct Slot<K, T> {
    key: K,
    value: std::sync::Weak<T>,
    hits: u32,
}

impl<K: Send, T: Send + Sync> std::fmt::Debug for Front<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front").field("size", &self.size).finish_non_exhaustive()
    }
}

impl<K: Eq + Send, T: Send + Sync> Front<K, T> {
    /// `size` slots per worker thread.
    pub fn new(size: usize) -> Self {
        Self { slots: thread_local::ThreadLocal::new(), size: size.max(1) }
    }

    fn get(&self, slot: usize, key: &K) -> Option<Arc<T>> {
        self.find(slot, key, true)
    }

    /// As [`Front::get`], without counting the hit ([`Front::count`] does), and `None` where
    /// `get` would hand the hit to the memo: a read that takes what it peeked counts it, one that
    /// does not (it goes on to `get`) leaves the memo's touch to `get`.
    fn peek(&self, slot: usize, key: &K) -> Option<Arc<T>> {
        self.find(slot, key, false)
    }

    fn find(&self, slot: usize, key: &K, count: bool) -> Option<Arc<T>> {
        let mut slots = self.slots.get()?.borrow_mut();
        let found = slots.get_mut(slot % self.size)?.as_mut().filter(|s| s.key == *key)?;
        let hits = found.hits.wrapping_add(1);
        if count {
            found.hits = hits;
        }
        if hits % TOUCH_EVERY == 0 {
            return None;
        }
        found.value.upgrade()
    }

    /// Counts a hit of what [`Front::peek`] found.
    fn count(&self, slot: usize, key: &K) {
        if let Some(slots) = self.slots.get()
            && let Some(Some(found)) = slots.borrow_mut().get_mut(slot % self.size)
            && found.key == *key
        {
            found.hits = found.hits.wrapping_add(1);
        }
    }

    fn keep(&self, slot: usize, key: K, value: &Arc<T>) {
        let cell = self.slots.get_or(|| std::cell::RefCell::new((0..self.size).map(|_| None).collect()));
        if let Some(at) = cell.borrow_mut().get_mut(slot % self.size) {
            *at = Some(Slot { key, value: Arc::downgrade(value), hits: 0 });
        }
    }
}

/// Heads a worker thread keeps, per thread: a store's head is asked of every read, and a
/// lookup in the memo hashes the name, takes moka's locks and its clock (a twentieth of a
/// cached read, bench/README.md "Stop 17"). Unlike views and blocks, heads change: each is kept
/// with its expiry (when the memo's TTL would end it) and the invalidation count it was taken
/// under; a head is served only before its expiry and while no invalidation happened since.
#[derive(Default)]
struct HeadsFront {
    slots: thread_local::ThreadLocal<std::cell::RefCell<Vec<HeadSlot>>>,
}

/// Heads kept per thread: a few stores are read at once.
const HEADS_FRONT_SLOTS: usize = 8;

struct HeadSlot {
    segment: Box<str>,
    head: Arc<StoreHead>,
    /// [`crate::clock::coarse_millis`] from which the head is not served.
    expires: u64,
    generation: u64,
    hits: u32,
}

impl std::fmt::Debug for HeadsFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadsFront").finish_non_exhaustive()
    }
}

impl HeadsFront {
    /// `segment`'s head, counting the hit unless `peek` (as [`Front::get`] and [`Front::peek`]).
    fn get(&self, segment: &str, generation: u64, now: u64, peek: bool) -> Option<Arc<StoreHead>> {
        let mut slots = self.slots.get()?.borrow_mut();
        let slot = slots.iter_mut().find(|s| *s.segment == *segment)?;
        if slot.generation != generation || now >= slot.expires {
            return None;
        }
        // As for views and blocks: one hit in TOUCH_EVERY is the memo's, so that the heads read
        // most stay recent there.
        let hits = slot.hits.wrapping_add(1);
        if !peek {
            slot.hits = hits;
        }
        if hits % TOUCH_EVERY == 0 {
            return None;
        }
        Some(Arc::clone(&slot.head))
    }

    /// Counts a hit of what a peek found.
    fn count(&self, segment: &str) {
        if let Some(slots) = self.slots.get()
            && let Some(slot) = slots.borrow_mut().iter_mut().find(|s| *s.segment == *segment)
        {
            slot.hits = slot.hits.wrapping_add(1);
        }
    }

    fn keep(&self, segment: &str, head: &Arc<StoreHead>, expires: u64, generation: u64) {
        let mut slots = self.slots.get_or_default().borrow_mut();
        let slot = HeadSlot { segment: segment.into(), head: Arc::clone(head), expires, generation, hits: 0 };
        if let Some(at) = slots.iter().position(|s| *s.segment == *segment) {
            slots[at] = slot;
        } else if slots.len() < HEADS_FRONT_SLOTS {
            slots.push(slot);
        } else if let Some(oldest) = slots.iter_mut().min_by_key(|s| s.expires) {
            *oldest = slot;
        }
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
    /// Store (as the URL names it) -> what is served there.
    pub heads: Memo<HeadKey, LoadedHead>,
    /// Each worker thread's last heads.
    heads_front: HeadsFront,
    /// Counts the invalidations of heads: a head a front took before the last one is not
    /// served again.
    heads_generation: AtomicU64,
    /// How long a head read from the catalog is served (`cache.current_version_ttl_ms`).
    heads_ttl: Duration,
    /// Version -> its view.
    pub views: Memo<i64, Arc<VersionView>>,
    /// Decoded manifest blocks.
    pub blocks: Memo<BlockKey, Arc<ManifestBlock>>,
    /// Each worker thread's last views.
    pub views_front: Front<i64, VersionView>,
    /// Each worker thread's last blocks.
    pub blocks_front: Front<BlockKey, ManifestBlock>,
    /// Encoded fill-value chunks (`None`: the array's cannot be built).
    pub fills: Memo<FillKey, Option<Bytes>>,
    /// Rendered quick looks (byte-weighted).
    pub quicklooks: Memo<QuicklookKey, QuicklookOutcome>,
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
        let last_heads = (config.unavailable_ttl_seconds > 0).then(|| {
            Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(config.unavailable_ttl_seconds))
                .support_invalidation_closures()
                .build()
        });
        Self {
            last_heads,
            heads: Memo::new("heads", heads, metrics),
            heads_front: HeadsFront::default(),
            heads_generation: AtomicU64::new(0),
            heads_ttl,
            views: Memo::new("metadata", views, metrics),
            blocks: Memo::new("blocks", blocks, metrics),
            views_front: Front::new(8),
            blocks_front: Front::new(64),
            fills: Memo::new("fills", fills, metrics),
            quicklooks: Memo::new("quicklooks", quicklooks, metrics),
        }
    }

    /// Forgets what this replica believes about `store`'s versions.
    pub async fn forget_store(&self, store: &str) {
        forget_store_in(&self.heads.cache, store).await;
        if let Some(last) = &self.last_heads {
            forget_store_in(last, store).await;
        }
        // After the memo forgot: a head a front takes from now on is read after that.
        self.heads_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The invalidations of heads so far: read before a head is asked of the memo, and kept
    /// with it in a front.
    pub fn heads_generation(&self) -> u64 {
        self.heads_generation.load(Ordering::SeqCst)
    }

    /// `segment`'s head, if this worker thread kept it and it is still to be served (counted
    /// as a hit of the heads' memo).
    pub fn fronted_head(&self, segment: &str) -> Option<Arc<StoreHead>> {
        let head = self.peek_head(segment)?;
        self.count_head(segment);
        Some(head)
    }

    /// [`Caches::fronted_head`] without counting the hit ([`Caches::count_head`] does).
    pub fn peek_head(&self, segment: &str) -> Option<Arc<StoreHead>> {
        // The coarse clock: a head is at most a tick (a few milliseconds) past its TTL here.
        self.heads_front.get(segment, self.heads_generation(), crate::clock::coarse_millis(), true)
    }

    /// Counts a hit of the head [`Caches::peek_head`] found.
    pub fn count_head(&self, segment: &str) {
        self.heads_front.count(segment);
        self.heads.hits.inc();
    }

    /// Keeps `head`, as the memo gave it when `generation` was current, in this thread's front
    /// until it would leave the memo.
    pub fn front_head(&self, segment: &str, (head, loaded): &LoadedHead, generation: u64) {
        let left = (*loaded + self.heads_ttl).saturating_duration_since(Instant::now());
        let expires = crate::clock::coarse_millis() + u64::try_from(left.as_millis()).unwrap_or(u64::MAX / 2);
        self.heads_front.keep(segment, head, expires, generation);
    }

    /// Forgets every store head (when the change feed follows again after an interruption:
    /// changes made meanwhile were missed), so that the next read of each asks the catalog. The
    /// last heads read from the catalog are kept: they answer only while the catalog cannot be
    /// reached, and a database that flaps (back for the change feed to follow, gone again at
    /// the next read) must not turn the stores this replica served into 503s.
    pub fn forget_all(&self) {
        self.heads.cache.invalidate_all();
        self.heads_generation.fetch_add(1, Ordering::SeqCst);
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
        self.fills.report(metrics, true);
        self.quicklooks.report(metrics, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(id: i64) -> Arc<StoreHead> {
        let head = crate::catalog::VersionHead { store: "s".into(), id, created_at_ms: 0, fill_missing: false };
        Arc::new(StoreHead::Version(head))
    }

    #[test]
    fn a_heads_front_serves_a_head_until_its_expiry_or_the_next_invalidation() {
        let front = HeadsFront::default();
        let now = crate::clock::coarse_millis();
        let later = now + 500;
        assert!(front.get("era5", 0, now, false).is_none(), "nothing kept yet");
        front.keep("era5", &version(1), later, 0);
        assert_eq!(front.get("era5", 0, now, false).as_deref(), Some(&*version(1)));
        assert!(front.get("era5@1", 0, now, false).is_none(), "another segment");
        assert!(front.get("era5", 1, now, false).is_none(), "an invalidation since it was kept");
        assert!(front.get("era5", 0, later, false).is_none(), "its expiry");
        front.keep("era5", &version(2), later, 1);
        assert_eq!(front.get("era5", 1, now, false).as_deref(), Some(&*version(2)), "kept again, replaced");
        // Another thread has a front of its own.
        std::thread::scope(|s| {
            s.spawn(|| assert!(front.get("era5", 1, now, false).is_none()));
        });
        // Full: the head expiring first makes room.
        for i in 0..HEADS_FRONT_SLOTS as i64 {
            front.keep(&format!("s{i}"), &version(i), later + i as u64 + 1, 1);
        }
        assert!(front.get("era5", 1, now, false).is_none(), "era5 expired first: replaced");
        assert!(front.get("s0", 1, now, false).is_some() && front.get("s7", 1, now, false).is_some());
    }

    #[test]
    fn one_hit_in_touch_every_goes_to_the_memo() {
        let front = HeadsFront::default();
        let now = crate::clock::coarse_millis();
        front.keep("era5", &version(1), now + 60_000, 0);
        let served = (0..TOUCH_EVERY * 2).filter(|_| front.get("era5", 0, now, false).is_some()).count();
        assert_eq!(served, (TOUCH_EVERY as usize - 1) * 2);
        // A peek neither counts nor takes the memo's hit: a read that peeked and then asked
        // (the synchronous read, then the other) leaves the touch to the asking.
        let mut touched = 0;
        for _ in 0..TOUCH_EVERY * 2 {
            match front.get("era5", 0, now, true) {
                Some(_) => front.count("era5"),
                None => touched += usize::from(front.get("era5", 0, now, false).is_none()),
            }
        }
        assert_eq!(touched, 2, "one touch in TOUCH_EVERY, peeked or not");
    }

    #[test]
    fn a_front_serves_what_its_thread_kept_while_the_value_lives() {
        let front: Front<i64, String> = Front::new(4);
        assert!(front.get(1, &1).is_none(), "nothing kept yet");
        let value = Arc::new("view 1".to_owned());
        front.keep(1, 1, &value);
        assert_eq!(front.get(1, &1).as_deref().map(String::as_str), Some("view 1"));
        assert!(front.get(1, &5).is_none(), "another key in the same slot");
        assert_eq!(front.get(5, &1).as_deref().map(String::as_str), Some("view 1"), "slot 5 of 4 is slot 1");
        std::thread::scope(|s| {
            s.spawn(|| assert!(front.get(1, &1).is_none(), "each thread has its own"));
        });
        drop(value);
        assert!(front.get(1, &1).is_none(), "held weakly: gone once its memo and every reader let go");
    }

    #[test]
    fn a_front_sends_one_hit_in_touch_every_to_its_memo() {
        let front: Front<i64, u32> = Front::new(2);
        let value = Arc::new(7);
        front.keep(0, 3, &value);
        let misses = (1..=3 * TOUCH_EVERY).filter(|_| front.get(0, &3).is_none()).count();
        assert_eq!(misses, 3);
    }
}

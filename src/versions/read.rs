//! The read path of store versions: which version a URL names, its view, its blocks (the one
//! block loader, cached or not), its chunks and fill chunks, and the reads of virtual chunks
//! from their sources. Everything a data-plane answer or an export needs, with no HTTP in it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::cache::Caches;
use super::error::{Error, Result};
use super::view::{VersionView, etag};
use crate::catalog::{Catalog, StoreHead, VersionHead};
use crate::config::LimitsConfig;
use crate::metrics::Metrics;
use crate::sources::{Fetched, SourceRegistry};
use crate::zarr::block::BlockSource;
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::source::SourceCheck;
use crate::zarr::{ChunkLocation, ChunkRef, Hierarchy, ManifestBlock, NodePath};

/// The read service.
pub struct Reader {
    catalog: Arc<dyn Catalog>,
    sources: Arc<SourceRegistry>,
    pub(super) caches: Caches,
    metrics: Metrics,
    pub(super) limits: LimitsConfig,
}

/// A chunk as a version stores it.
#[derive(Debug)]
pub enum Chunk {
    /// No data: readers use the fill value.
    Missing,
    /// Bytes held in memory (inline, or the array's fill chunk), with their strong ETag.
    Bytes { bytes: Bytes, etag: String },
    /// A byte range of a source object.
    Virtual(VirtualChunk),
}

/// A reference to `length` bytes at `offset` of a source object.
#[derive(Debug)]
pub struct VirtualChunk {
    block: Arc<ManifestBlock>,
    slot: u32,
    /// Where in the source the chunk starts.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// Its strong ETag, named by what the source was recorded as: new bytes get a new tag only
    /// when that is known.
    pub etag: String,
}

impl VirtualChunk {
    fn new(block: Arc<ManifestBlock>, slot: u32) -> Option<Self> {
        let ChunkRef::Virtual { source, offset, length } = block.get(slot) else { return None };
        let identity = match &source.check {
            SourceCheck::ETag(e) => format!("{}\n{offset}\n{length}\n{e}", source.url),
            SourceCheck::Size(n) => format!("{}\n{offset}\n{length}\nsize {n}", source.url),
            SourceCheck::Unchecked => format!("{}\n{offset}\n{length}\n", source.url),
        };
        let etag = etag('v', identity.as_bytes());
        Some(Self { block, slot, offset, length, etag })
    }

    /// The source object it lies in.
    fn source(&self) -> Option<BlockSource<'_>> {
        match self.block.get(self.slot) {
            ChunkRef::Virtual { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Reader {
    /// A reader over `catalog` and `sources`, with `caches`, timing catalog reads in `metrics`;
    /// `limits` bound what a read may build (nested consolidated metadata, fill chunks).
    pub fn new(
        catalog: Arc<dyn Catalog>,
        sources: Arc<SourceRegistry>,
        caches: Caches,
        metrics: Metrics,
        limits: LimitsConfig,
    ) -> Self {
        Self { catalog, sources, caches, metrics, limits }
    }

    /// The caches (for reports and invalidation).
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// Forgets what this replica believes about `store`'s versions.
    pub async fn forget_store(&self, store: &str) {
        self.caches.forget_store(store).await;
    }

    /// The view of the version a URL names: `store`'s current version, or its version `pinned`;
    /// `segment` is the store as the URL writes it (`name` or `name@version`).
    pub async fn open(&self, segment: &str, store: &str, pinned: Option<i64>) -> Result<Arc<VersionView>> {
        match &*self.head(segment, store, pinned).await? {
            StoreHead::Version(head) => self.view(head).await,
            // Not 404: a reader still holding the store's metadata would read every chunk as fill.
            StoreHead::Deleted(at_ms) => {
                let at = chrono::DateTime::from_timestamp_millis(*at_ms)
                    .map_or_else(|| at_ms.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                Err(Error::StoreDeleted(format!(
                    "store {store:?} was deleted at {at}; nothing is served under this name until a store of \
                     that name is registered again"
                )))
            }
            StoreHead::Unknown => Err(match pinned {
                None => Error::NotFound(format!("no store is named {store:?}")),
                Some(v) => Error::Gone(format!(
                    "store {store:?} has no version {v}: it never existed or retention removed it; \
                     read /{store}/zarr.json for the current version"
                )),
            }),
        }
    }

    /// [`Reader::open`] for a version this worker thread has at hand (its head and view in the
    /// thread's fronts); `None` when it would have to wait, or the answer is an error. Not counted
    /// as cache hits until [`Reader::count_now`].
    pub fn open_now(&self, segment: &str) -> Option<Arc<VersionView>> {
        match &*self.caches.peek_head(segment)? {
            StoreHead::Version(head) => self.caches.views.peek_fronted(&self.caches.views_front, &head.id),
            _ => None,
        }
    }

    /// [`Reader::chunk`] for an inline chunk whose block this worker thread has at hand; `None`
    /// for anything else (a missing or virtual chunk, a block to load). Not counted until
    /// [`Reader::count_now`].
    pub fn inline_chunk_now(&self, view: &VersionView, node: &Node, at: ChunkLocation) -> Option<Chunk> {
        let key = (view.head.id, node.index, at.tile);
        let block = self.caches.blocks.peek_fronted(&self.caches.blocks_front, &key)?;
        match block.get(at.slot) {
            ChunkRef::Inline(bytes) => Some(Chunk::Bytes { etag: etag('i', &bytes), bytes }),
            _ => None,
        }
    }

    /// Whether this worker thread has the block of the chunk at `at` of array `node` in `view`'s
    /// version at hand (for [`Reader::inline_chunk_now`]).
    pub fn block_at_hand(&self, view: &VersionView, node: &Node, at: ChunkLocation) -> bool {
        let key = (view.head.id, node.index, at.tile);
        self.caches.blocks.peek_fronted(&self.caches.blocks_front, &key).is_some()
    }

    /// Brings the block of the chunk at `at` of array `node` in `view`'s version to this worker
    /// thread's front if the cache holds it, for [`Reader::inline_chunk_now`]: nothing is loaded,
    /// nothing counted.
    pub async fn front_block(&self, view: &VersionView, node: &Node, at: ChunkLocation) {
        let key = (view.head.id, node.index, at.tile);
        self.caches.blocks.front_held(&self.caches.blocks_front, key).await;
    }

    /// Counts the cache hits of a read answered from [`Reader::open_now`] (of `segment`, which
    /// gave `view`) and, if it read one, [`Reader::inline_chunk_now`] (of that node and location).
    pub fn count_now(&self, segment: &str, view: &VersionView, chunk: Option<(&Node, ChunkLocation)>) {
        self.caches.count_head(segment);
        self.caches.views.count_peeked(&self.caches.views_front, &view.head.id);
        if let Some((node, at)) = chunk {
            self.count_block_now(view, node, at);
        }
    }

    /// Counts the cache hit of a read answered from [`Reader::inline_chunk_now`] (of that node
    /// and location in `view`).
    pub fn count_block_now(&self, view: &VersionView, node: &Node, at: ChunkLocation) {
        self.caches.blocks.count_peeked(&self.caches.blocks_front, &(view.head.id, node.index, at.tile));
    }

    /// What is served under `store` (current, or version `pinned`), cached under `segment`.
    /// A store deleted (and not registered again) is [`StoreHead::Deleted`], pinned or not.
    pub async fn head(&self, segment: &str, store: &str, pinned: Option<i64>) -> Result<Arc<StoreHead>> {
        if let Some(head) = self.caches.fronted_head(segment) {
            return Ok(head);
        }
        // Read before the memo is asked: an invalidation after this makes the front drop it.
        let generation = self.caches.heads_generation();
        let load = move || async move {
            let started = Instant::now();
            // One statement: the version and the deletion mark as of one moment, so a store
            // deleted and registered again meanwhile is never seen as neither.
            // Shared, not cloned per request: a head holds the store's name.
            let head = Arc::new(self.catalog.head(store, pinned).await?);
            self.time("head", started);
            self.caches.remember_head(segment, &head).await;
            Ok((head, started))
        };
        let head = match self.caches.heads.get_or_load_borrowed(segment, load).await {
            Ok(loaded) => {
                if *loaded.0 != StoreHead::Unknown {
                    self.caches.front_head(segment, &loaded, generation);
                }
                loaded.0
            }
            // Degraded: the catalog is unreachable, and what this replica last read of the store
            // is recent enough (`cache.unavailable_ttl_seconds`) to serve meanwhile.
            Err(e) if e.is_unreachable() => match Box::pin(self.caches.last_head(segment)).await {
                Some(head) => {
                    self.metrics.catalog_stale_reads_total.inc();
                    head
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        if *head == StoreHead::Unknown {
            // Not kept: a store registered right after this read must not answer 404 (read by
            // clients as fill values) for as long as the entry would live.
            Box::pin(self.caches.heads.forget(&segment.to_owned())).await;
        }
        Ok(head)
    }

    /// The current version of `store`, read from the catalog (not cached).
    pub async fn current(&self, store: &str) -> Result<Option<VersionHead>> {
        Ok(self.catalog.current_version(store).await?)
    }

    /// The served view of a version, built once (off the async workers: a large hierarchy is
    /// CPU work) and cached.
    pub async fn view(&self, head: &VersionHead) -> Result<Arc<VersionView>> {
        let load = move || async move {
            let started = Instant::now();
            let nodes = self.catalog.nodes(head.id).await?;
            self.time("nodes", started);
            if nodes.is_empty() {
                // Every version has its root: this one was deleted after `head` was read.
                return Err(gone(head));
            }
            let (head, nested_budget) = (head.clone(), self.limits.max_metadata_bytes);
            let view = tokio::task::spawn_blocking(move || {
                let stored = nodes
                    .into_iter()
                    .map(|n| NodePath::new(&n.path).map(|p| (p, n.metadata, n.tile_shape)))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::Internal(format!("version {}: {e}", head.id)))?;
                let hierarchy = Hierarchy::build_from_text(stored, nested_budget)
                    .map_err(|e| Error::Internal(format!("version {}: {e}", head.id)))?;
                Ok(Arc::new(VersionView::new(head, hierarchy)))
            })
            .await?;
            let Ok(view) = view else { return view };
            // Large documents are compressed after the first answer, not before it.
            let compressing = Arc::clone(&view);
            drop(tokio::task::spawn_blocking(move || compressing.compress_large()));
            if u64::from(view.weight()) > self.caches.views.capacity() {
                tracing::warn!(store = %view.head.store, version = view.head.id, bytes = view.weight(),
                    capacity = self.caches.views.capacity(),
                    "this version's view is larger than cache.metadata_bytes: it is built again for every request; \
                     raise cache.metadata_bytes");
            }
            Ok(view)
        };
        self.caches.views.get_or_load_fronted(&self.caches.views_front, head.id, load).await
    }

    /// The block holding `tile` of array `node` in version `head`, cached.
    pub async fn block(&self, head: &VersionHead, node: &Node, tile: u64) -> Result<Arc<ManifestBlock>> {
        let load = move || async move { self.load_block(head, node, tile).await.map(Arc::new) };
        self.caches.blocks.get_or_load_fronted(&self.caches.blocks_front, (head.id, node.index, tile), load).await
    }

    /// The block holding `tile` of array `node` in version `head`, read from the catalog (not
    /// through the cache: an export or a PATCH must not evict what readers need). Empty when
    /// nothing is stored there; a version deleted meanwhile (by retention) is [`Error::Gone`],
    /// never an empty block, whose chunks would read as fill values.
    pub async fn load_block(&self, head: &VersionHead, node: &Node, tile: u64) -> Result<ManifestBlock> {
        let started = Instant::now();
        let data = self.catalog.block(head.id, node.path.as_str(), tile).await?;
        self.time("block", started);
        match data {
            None if self.catalog.version(&head.store, head.id).await?.is_none() => Err(gone(head)),
            None => Ok(ManifestBlock::empty(tile_len(node))),
            Some(bytes) => ManifestBlock::decode(&bytes)
                .map_err(|e| Error::Internal(format!("version {} node {} tile {tile}: {e}", head.id, node.path))),
        }
    }

    /// The stored (non-empty) tiles of a version, by node then tile.
    pub async fn tiles(&self, head: &VersionHead) -> Result<Vec<(String, u64)>> {
        Ok(self.catalog.tiles(head.id).await?)
    }

    /// The chunk at `at` of array `node` in `view`'s version; for a store served with
    /// `missing_chunks = "fill"`, a missing chunk is its array's fill chunk when one can be built.
    pub async fn chunk(&self, view: &VersionView, node: &Node, at: ChunkLocation) -> Result<Chunk> {
        let block = self.block(&view.head, node, at.tile).await?;
        match block.get(at.slot) {
            ChunkRef::Missing if view.head.fill_missing => {
                Ok(match Box::pin(self.fill_chunk(&view.head, node)).await? {
                    Some(bytes) => Chunk::Bytes { etag: etag('f', &bytes), bytes },
                    None => Chunk::Missing,
                })
            }
            ChunkRef::Missing => Ok(Chunk::Missing),
            ChunkRef::Inline(bytes) => Ok(Chunk::Bytes { etag: etag('i', &bytes), bytes }),
            ChunkRef::Virtual { .. } => VirtualChunk::new(block.clone(), at.slot)
                .map(Chunk::Virtual)
                .ok_or_else(|| Error::Internal("a virtual reference read back as another kind".into())),
        }
    }

    /// Reads `range` (relative to the chunk) of a virtual chunk from its source.
    pub async fn fetch(&self, chunk: &VirtualChunk, range: std::ops::Range<u64>) -> Result<Fetched> {
        let source = chunk.source().ok_or_else(|| Error::Internal("a virtual chunk without a source".into()))?;
        let range = chunk.offset + range.start..chunk.offset + range.end;
        Ok(self.sources.fetch(&source.url, range, &source.check).await?)
    }

    /// The chunk of fill values of array `node` in version `head`, encoded with its codecs, or
    /// `None` when zarrs cannot encode them or the chunk is larger than
    /// `limits.max_fill_chunk_bytes` decoded (missing chunks then answer 404, which every client
    /// reads as the same fill values; nothing past the bound is ever allocated).
    pub async fn fill_chunk(&self, head: &VersionHead, node: &Node) -> Result<Option<Bytes>> {
        let load = move || async move {
            let (metadata, max_bytes) = (node.metadata().into_owned(), self.limits.max_fill_chunk_bytes);
            let encoded =
                tokio::task::spawn_blocking(move || crate::zarr::fill::fill_chunk(&metadata, max_bytes)).await?;
            Ok(match encoded {
                Ok(bytes) => Some(Bytes::from(bytes)),
                Err(e) => {
                    tracing::warn!(store = %head.store, version = head.id, array = %node.path, error = %e,
                        "cannot encode a fill-value chunk; missing chunks of this array answer 404");
                    None
                }
            })
        };
        self.caches.fills.get_or_load((head.id, node.index), load).await
    }

    /// Records the latency of a catalog operation.
    pub(super) fn time(&self, operation: &str, started: Instant) {
        time_catalog(&self.metrics, operation, started);
    }
}

/// Records the latency of a catalog operation in `metrics`.
pub(super) fn time_catalog(metrics: &Metrics, operation: &str, started: Instant) {
    metrics.catalog_query_duration_seconds.with_label_values(&[operation]).observe(started.elapsed().as_secs_f64());
}

/// The number of chunks in one tile of array `node` (0 for a group).
fn tile_len(node: &Node) -> u32 {
    match &node.kind {
        NodeKind::Array(layout) => layout.grid.tile_len(),
        NodeKind::Group => 0,
    }
}

/// A version that was deleted while a request was using it.
fn gone(head: &VersionHead) -> Error {
    Error::Gone(format!(
        "version {} of store {:?} was deleted by retention; read /{}/zarr.json for the current version",
        head.id, head.store, head.store
    ))
}

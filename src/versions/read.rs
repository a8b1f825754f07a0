//! The read path of store versions: the [`Reader`], its heads, views, blocks (the one block
//! loader, cached or not), chunks and fill chunks, and the reads of virtual chunks from their
//! sources; which of them a URL names is the lookup's (`lookup.rs`). Everything a data-plane
//! answer or an export needs, with no HTTP in it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::assembly_pool::Assembly;
use super::cache::Caches;
use super::error::{Error, Result};
use super::view::{VersionView, etag};
use crate::catalog::{Catalog, StoreHead, VersionHead};
use crate::config::{AssembleConfig, LimitsConfig};
use crate::metrics::Metrics;
use crate::sources::{Fetched, SourceError, SourceRegistry};
use crate::zarr::block::{BlockAddress, BlockSource};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::portable;
use crate::zarr::source::SourceCheck;
use crate::zarr::{ChunkLocation, ChunkRef, Hierarchy, ManifestBlock, NodePath};

/// The read service.
pub struct Reader {
    catalog: Arc<dyn Catalog>,
    pub(super) sources: Arc<SourceRegistry>,
    pub(super) caches: Caches,
    pub(super) metrics: Metrics,
    pub(super) limits: LimitsConfig,
    /// The pool assembled chunks are built on.
    pub(super) assembly: Assembly,
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
            SourceCheck::Digest(d) => format!("{}\n{offset}\n{length}\ndigest {d:016x}", source.url),
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
        Self { catalog, sources, caches, metrics, limits, assembly: Assembly::default() }
    }

    /// This reader with assembled chunks built as `config` says.
    #[must_use]
    pub fn assembling(mut self, config: &AssembleConfig) -> Self {
        self.assembly = Assembly::new(config);
        self
    }

    /// The caches (for reports and invalidation).
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// Forgets what this replica believes about `store`'s versions.
    pub async fn forget_store(&self, store: &str) {
        self.caches.forget_store(store).await;
    }

    /// What is served under `store` (current, or version `pinned`), from the heads' memo
    /// (cached under `segment`, and kept in this worker thread's front: the lookup asked that
    /// first) or the catalog. A store deleted (and not registered again) is
    /// [`StoreHead::Deleted`], pinned or not.
    pub(super) async fn head(&self, segment: &str, store: &str, pinned: Option<i64>) -> Result<Arc<StoreHead>> {
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
        // Kept in this worker thread's front unless no store has the name.
        let head = match self.caches.heads.load(segment, load).await {
            Ok(loaded) => loaded.0,
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
            Box::pin(self.caches.heads.forget(segment)).await;
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
        self.caches.views.get_or_load(head.id, || self.build_view(head)).await
    }

    /// [`Reader::view`] from the shared memo (the lookup asked this worker thread's front first).
    pub(super) async fn load_view(&self, head: &VersionHead) -> Result<Arc<VersionView>> {
        self.caches.views.load(&head.id, || self.build_view(head)).await
    }

    async fn build_view(&self, head: &VersionHead) -> Result<Arc<VersionView>> {
        let started = Instant::now();
        let nodes = self.catalog.nodes(head.id).await?;
        self.time("nodes", started);
        if nodes.is_empty() {
            // Every version has its root: this one was deleted after `head` was read.
            return Err(gone(head));
        }
        let (head, nested_budget) = (head.clone(), self.limits.max_metadata_bytes);
        let deflate_level = self.assembly.deflate_level;
        let view = tokio::task::spawn_blocking(move || {
            let stored = nodes
                .into_iter()
                .map(|n| NodePath::new(&n.path).map(|p| (p, n.metadata, n.tile_shape)))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::Internal(format!("version {}: {e}", head.id)))?;
            let hierarchy = if head.portable {
                // An array that cannot be transcoded (the registration's summary said why) is
                // served as it is.
                let serve = |metadata: &serde_json::Map<String, serde_json::Value>| {
                    let layout = crate::zarr::metadata::array_layout(metadata).ok()?;
                    portable::served(metadata, layout.grid.chunk_shape(), deflate_level).ok().flatten()
                };
                Hierarchy::build_from_text_serving(stored, nested_budget, &serve)
            } else {
                Hierarchy::build_from_text(stored, nested_budget)
            }
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
    }

    /// The block holding `tile` of array `node` in version `head`, cached.
    pub async fn block(&self, head: &VersionHead, node: &Node, tile: u64) -> Result<Arc<ManifestBlock>> {
        let load = move || self.load_block_for_cache(head, node, tile);
        self.caches.blocks.get_or_load((head.id, node.index, tile), load).await
    }

    /// [`Reader::block`] from the shared memo (the lookup asked this worker thread's front first).
    pub(super) async fn load_block_cached(
        &self,
        head: &VersionHead,
        node: &Node,
        tile: u64,
    ) -> Result<Arc<ManifestBlock>> {
        let load = move || self.load_block_for_cache(head, node, tile);
        self.caches.blocks.load(&(head.id, node.index, tile), load).await
    }

    /// [`Reader::load_block`] in the form the cache keeps: long ETags as digests, and where it is
    /// stored.
    async fn load_block_for_cache(&self, head: &VersionHead, node: &Node, tile: u64) -> Result<Arc<ManifestBlock>> {
        let block = self.load_block(head, node, tile).await?;
        let at = BlockAddress { version: head.id, node: node.path.as_str().to_owned(), tile };
        Ok(Arc::new(block.for_serving().at(at)))
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
    /// `missing_chunks = "fill"`, a missing chunk is its array's fill chunk when one can be built
    /// (the chunk step of [`Reader::lookup`], for a reader that has the node at hand).
    pub async fn chunk(&self, view: &VersionView, node: &Node, at: ChunkLocation) -> Result<Chunk> {
        let block = self.block(&view.head, node, at.tile).await?;
        match chunk_in(view, node, at, &block)? {
            InBlock::Chunk(chunk) => Ok(chunk),
            InBlock::Assembled(recipe) => Box::pin(self.assembled(view, node, recipe)).await,
            InBlock::Transcode(chunk) => Box::pin(self.transcoded(view, node, chunk)).await,
            InBlock::Fill => Ok(match Box::pin(self.fill_chunk(&view.head, node)).await? {
                Some(bytes) => Chunk::Bytes { etag: etag('f', &bytes), bytes },
                None => Chunk::Missing,
            }),
        }
    }

    /// A virtual chunk's bytes, whole, from its source (to decode: a transcoded chunk).
    pub(super) async fn fetch_all(&self, chunk: &VirtualChunk) -> Result<Bytes> {
        let source = chunk.source().ok_or_else(|| Error::Internal("a virtual chunk without a source".into()))?;
        let range = chunk.offset..chunk.offset + chunk.length;
        match self.sources.fetch_bytes(&source.url, range, &source.check).await {
            Ok(bytes) => Ok(bytes),
            Err(e) => Err(self.naming_recorded(chunk, &source.check, e).await.into()),
        }
    }

    /// Reads `range` (relative to the chunk) of a virtual chunk from its source.
    pub async fn fetch(&self, chunk: &VirtualChunk, range: std::ops::Range<u64>) -> Result<Fetched> {
        let source = chunk.source().ok_or_else(|| Error::Internal("a virtual chunk without a source".into()))?;
        let range = chunk.offset + range.start..chunk.offset + range.end;
        match self.sources.fetch(&source.url, range, &source.check).await {
            Ok(fetched) => Ok(fetched),
            Err(e) => Err(self.naming_recorded(chunk, &source.check, e).await.into()),
        }
    }

    /// `e`, with the whole recorded ETag in place of its digest when it says the source changed:
    /// read from the stored block, which a refused read is rare enough to afford.
    async fn naming_recorded(&self, chunk: &VirtualChunk, check: &SourceCheck<'_>, e: SourceError) -> SourceError {
        let SourceError::Modified { url, store, recorded } = e else { return e };
        let whole = match check {
            SourceCheck::Digest(_) if let Some(at) = chunk.block.stored_at() => {
                match self.catalog.block(at.version, &at.node, at.tile).await {
                    Ok(Some(bytes)) => {
                        ManifestBlock::decode(&bytes).ok().and_then(|block| match block.get(chunk.slot) {
                            ChunkRef::Virtual { source, .. } => Some(source.check.to_string()),
                            _ => None,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let recorded = match whole {
            Some(whole) => recorded.replacen(&check.to_string(), &whole, 1),
            None => recorded,
        };
        SourceError::Modified { url, store, recorded }
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

/// What a block holds at a slot, as the chunk step sees it.
#[derive(Debug)]
pub(super) enum InBlock {
    /// The chunk, as it is served.
    Chunk(Chunk),
    /// A missing chunk that is to read as its array's fill chunk.
    Fill,
    /// A chunk to assemble from pieces: its encoded recipe.
    Assembled(bytes::Bytes),
    /// A chunk of an array served with portable codecs, as the file holds it: to transcode.
    Transcode(Chunk),
}

/// The chunk at `at` in `block`, of `view`'s version. A new kind of chunk is one more arm here.
/// `node` is the array: one served with portable codecs has its chunks transcoded.
pub(super) fn chunk_in(
    view: &VersionView,
    node: &Node,
    at: ChunkLocation,
    block: &Arc<ManifestBlock>,
) -> Result<InBlock> {
    let chunk = match block.get(at.slot) {
        ChunkRef::Missing if view.head.fill_missing => return Ok(InBlock::Fill),
        ChunkRef::Missing => return Ok(InBlock::Chunk(Chunk::Missing)),
        ChunkRef::Inline(bytes) => Chunk::Bytes { etag: etag('i', &bytes), bytes },
        ChunkRef::Assembled(recipe) => return Ok(InBlock::Assembled(recipe)),
        ChunkRef::Virtual { .. } => VirtualChunk::new(block.clone(), at.slot)
            .map(Chunk::Virtual)
            .ok_or_else(|| Error::Internal("a virtual reference read back as another kind".into()))?,
    };
    Ok(if node.transcoded().is_some() { InBlock::Transcode(chunk) } else { InBlock::Chunk(chunk) })
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

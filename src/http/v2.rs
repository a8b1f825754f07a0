//! The Zarr v2 view over HTTP, at `/v2/{store}[@{version}]/` (the v3 URL has none of it: see
//! `data::Flavor`): a version's `.zgroup`, `.zattrs`, `.zarray` and `.zmetadata`,
//! rendered once per version and cached beside its view (strong ETags that include the
//! version, as `zarr.json`'s do), and its v2 chunk keys, answered exactly as the v3 keys of the
//! same chunks (same bytes, same ETags, same Range and 304 rules).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use moka::future::Cache;

use super::answer::{Served, chunk, metadata};
use crate::app::AppState;
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::versions::view::RenderedDoc;
use crate::versions::{Reader, VersionView};
use crate::zarr::grid::ChunkGrid;
use crate::zarr::metadata::NodeKind;
use crate::zarr::v2view::{Missing, V2Resolved, V2View, fill_depends_on_missing};

/// Chunk references read at most, per version, to tell whether the arrays whose v2 fill value
/// depends on it have missing chunks (a million references: 16 MiB of blocks). Past it an
/// array is taken to have some: its missing chunks then read as its fill value, never as
/// garbage, at the cost of xarray masking that value.
const MISSING_SCAN_CHUNKS: u64 = 1 << 20;

/// A version's v2 view with its documents ready to serve.
#[derive(Debug)]
pub(super) struct Rendered {
    /// The view (key resolution, what was left out).
    pub(super) view: V2View,
    /// Each document, by key.
    pub(super) docs: HashMap<String, RenderedDoc>,
}

impl Rendered {
    fn weight(&self) -> u32 {
        let docs: usize = self.docs.values().map(|d| d.weight()).sum();
        u32::try_from(self.view.weight() + docs).unwrap_or(u32::MAX)
    }
}

/// The v2 views of versions, built once per version (concurrent first readers wait for one
/// build), weighed in bytes against `cache.metadata_bytes` like the v3 views they mirror.
pub(super) struct V2Views {
    cache: Cache<i64, Arc<Rendered>>,
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
}

impl V2Views {
    pub(super) fn new(config: &Config, metrics: &Metrics) -> Self {
        let cache = Cache::builder()
            .max_capacity(config.cache.metadata_bytes)
            .weigher(|_, r: &Arc<Rendered>| r.weight())
            .build();
        Self {
            cache,
            hits: metrics.cache_hits_total.with_label_values(&["v2_metadata"]),
            misses: metrics.cache_misses_total.with_label_values(&["v2_metadata"]),
        }
    }

    /// The v2 view of `view`'s version.
    pub(super) async fn get(&self, reader: &Reader, view: &Arc<VersionView>) -> Result<Arc<Rendered>, ApiError> {
        if let Some(rendered) = self.cache.get(&view.head.id).await {
            self.hits.inc();
            return Ok(rendered);
        }
        let entry = self
            .cache
            .entry(view.head.id)
            .or_try_insert_with(build(reader, view.clone()))
            .await
            .map_err(|e: Arc<ApiError>| (*e).clone())?;
        if entry.is_fresh() { &self.misses } else { &self.hits }.inc();
        Ok(entry.into_value())
    }
}

/// The answer for `key` if it is a key of the v2 view, `None` if it is not.
pub(super) async fn serve(
    app: &AppState,
    v2: &V2Views,
    view: &Arc<VersionView>,
    key: &str,
    headers: &HeaderMap,
    served: &Served,
) -> Option<Result<Response, ApiError>> {
    if !V2View::may_name(&view.hierarchy, key) {
        return None;
    }
    let rendered = match v2.get(&app.reader, view).await {
        Ok(rendered) => rendered,
        Err(e) => return Some(Err(e)),
    };
    match rendered.view.resolve(&view.hierarchy, key) {
        V2Resolved::Doc(key) => match rendered.docs.get(key) {
            Some(doc) => Some(Ok(metadata(doc, headers, served).await)),
            None => None,
        },
        V2Resolved::Chunk { node, location, .. } => Some(chunk(app, view, node, location, key, headers, served).await),
        V2Resolved::NotFound(why) => Some(Err(ApiError::NotFound(why))),
        V2Resolved::Other => None,
    }
}

async fn build(reader: &Reader, view: Arc<VersionView>) -> Result<Arc<Rendered>, ApiError> {
    let missing = missing_chunks(reader, &view).await?;
    let version = view.head.id;
    tokio::task::spawn_blocking(move || {
        let built =
            V2View::build(&view.hierarchy, |node| missing.get(&node.index).copied().unwrap_or(Missing::Unknown))
                .map_err(|e| ApiError::Internal(format!("version {version}: the Zarr v2 view: {e}")))?;
        let docs = built.docs().map(|(key, body)| (key.to_owned(), render(body.clone(), version))).collect();
        Ok(Arc::new(Rendered { view: built, docs }))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("a blocking task failed: {e}")))?
}

/// Whether the arrays whose v2 fill value depends on it have missing chunks, by node index: a
/// tile with nothing stored says so at once; otherwise their blocks are counted, one at a time
/// and not through the block cache, up to [`MISSING_SCAN_CHUNKS`] references per version.
async fn missing_chunks(reader: &Reader, view: &VersionView) -> Result<HashMap<u32, Missing>, ApiError> {
    let asked = fill_depends_on_missing(&view.hierarchy);
    let mut found = HashMap::with_capacity(asked.len());
    if asked.is_empty() {
        return Ok(found);
    }
    let mut stored: HashMap<String, Vec<u64>> = HashMap::new();
    for (path, tile) in reader.tiles(&view.head).await? {
        stored.entry(path).or_default().push(tile);
    }
    let mut budget = MISSING_SCAN_CHUNKS;
    for node in asked {
        let NodeKind::Array(layout) = &node.kind else { continue };
        let tiles = stored.get(node.path.as_str()).map_or(&[][..], Vec::as_slice);
        let chunks = layout.grid.chunk_count();
        let answer = if (tiles.len() as u64) < tile_count(&layout.grid) {
            Missing::Some
        } else if chunks > budget {
            Missing::Unknown
        } else {
            budget -= chunks;
            let mut present = 0u64;
            for &tile in tiles {
                present += reader.load_block(&view.head, node, tile).await?.len() as u64;
            }
            if present < chunks { Missing::Some } else { Missing::None }
        };
        found.insert(node.index, answer);
    }
    Ok(found)
}

/// The number of tiles (manifest blocks) an array's grid is cut into.
fn tile_count(grid: &ChunkGrid) -> u64 {
    grid.grid_shape().iter().zip(grid.tile_shape()).map(|(&g, &t)| g.div_ceil(t.max(1))).product()
}

/// A document ready to serve, tagged as `zarr.json`'s are: a content hash and the version.
fn render(identity: Bytes, version: i64) -> RenderedDoc {
    RenderedDoc::new(identity, version)
}

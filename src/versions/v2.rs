//! The Zarr v2 view of a version (`zarr/v2view.rs`, pure), built once per version and kept in
//! the `v2_views` cache: its `.zgroup`, `.zattrs`, `.zarray` and `.zmetadata`, rendered with
//! strong ETags that include the version (as `zarr.json`'s do), and how its keys resolve. Built
//! here because a v2 `fill_value` may depend on whether an array has missing chunks, which only
//! the version's blocks tell.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{Error, Result};
use super::read::Reader;
use super::view::{RenderedDoc, V2Rendered, VersionView};
use crate::zarr::grid::ChunkGrid;
use crate::zarr::metadata::NodeKind;
use crate::zarr::v2view::{Missing, V2View, fill_depends_on_missing};

/// Chunk references read at most, per version, to tell whether the arrays whose v2 fill value
/// depends on it have missing chunks (a million references: 16 MiB of blocks). Past it an
/// array is taken to have some: its missing chunks then read as its fill value, never as
/// garbage, at the cost of xarray masking that value.
pub const MISSING_SCAN_CHUNKS: u64 = 1 << 20;

impl Reader {
    /// The Zarr v2 view of `view`'s version, built once (concurrent first readers wait for one
    /// build) and cached.
    pub async fn v2_view(&self, view: &Arc<VersionView>) -> Result<Arc<V2Rendered>> {
        self.caches.v2_views.get_or_load(view.head.id, || build(self, view.clone())).await
    }
}

async fn build(reader: &Reader, view: Arc<VersionView>) -> Result<Arc<V2Rendered>> {
    let missing = missing_chunks(reader, &view).await?;
    let version = view.head.id;
    tokio::task::spawn_blocking(move || {
        let built =
            V2View::build(&view.hierarchy, |node| missing.get(&node.index).copied().unwrap_or(Missing::Unknown))
                .map_err(|e| Error::Internal(format!("version {version}: the Zarr v2 view: {e}")))?;
        let docs = built.docs().map(|(key, body)| (key.to_owned(), RenderedDoc::new(body.clone(), version))).collect();
        Ok(Arc::new(V2Rendered { view: built, docs }))
    })
    .await?
}

/// Whether the arrays whose v2 fill value depends on it have missing chunks, by node index: a
/// tile with nothing stored says so at once; otherwise their blocks are counted, one at a time
/// and not through the block cache, up to [`MISSING_SCAN_CHUNKS`] references per version.
async fn missing_chunks(reader: &Reader, view: &VersionView) -> Result<HashMap<u32, Missing>> {
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

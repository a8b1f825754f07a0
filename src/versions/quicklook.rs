//! Quick looks of a version's arrays: an overview of a whole 2-D slice drawn by
//! `zarr/quicklook.rs` from at most `MAX_CHUNKS` of its chunks, each read (inline, or fetched
//! from its source) and decoded by the bounded decoder one at a time, off the async workers,
//! bounded by `limits.max_fill_chunk_bytes` (decoded and stored); with the first and last values
//! of the coordinate arrays of its two dimensions. Kept in the byte-weighted `quicklooks`
//! cache: a page and its image ask for the same quick look, and a second ask is neither fetched
//! nor drawn again. A refusal (too large, a chunk that decodes past its size) is kept there
//! too, so that a bomb is not read and decoded on every ask.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde_json::Value;

use super::cache::QuicklookOutcome;
use super::error::{Error, Result};
use super::read::{Chunk, Reader};
use super::view::{RenderedQuicklook, VersionView};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::{ArrayLayout, NodeKind};
use crate::zarr::quicklook::{self, Overview, Quicklook, QuicklookError};

impl Reader {
    /// The quick look of array `node` in `view`'s version, drawn once and cached under the
    /// version and the array. An array that has none (not numeric, a chunk too large, codecs
    /// that cannot be decoded within a bound) is [`Error::Invalid`], and that is cached too.
    pub async fn quicklook(&self, view: &VersionView, node: &Node) -> Result<Arc<RenderedQuicklook>> {
        let NodeKind::Array(layout) = &node.kind else {
            return Err(Error::NotFound(format!("{:?} is a group: only arrays have a quick look", node.path.as_str())));
        };
        let key = (view.head.id, node.index, vec![0; layout.grid.ndim()]);
        let load = move || async move {
            match self.draw_quicklook(view, node, layout).await {
                Ok(drawn) => Ok(Ok(drawn)),
                Err(Error::Invalid { problems, .. }) => Ok(Err(Arc::from(problems.join("; ")))),
                Err(e) => Err(e),
            }
        };
        let outcome: QuicklookOutcome = self.caches.quicklooks.get_or_load(key, load).await?;
        outcome.map_err(|why| Error::Invalid { title: "no quick look".into(), problems: vec![why.to_string()] })
    }

    /// Reads, decodes and draws the overview of `node` (a refusal is [`Error::Invalid`]).
    async fn draw_quicklook(
        &self,
        view: &VersionView,
        node: &Node,
        layout: &ArrayLayout,
    ) -> Result<Arc<RenderedQuicklook>> {
        let bound = self.limits.max_fill_chunk_bytes;
        let metadata = node.metadata().into_owned();
        let decoded = crate::zarr::fill::decoded_chunk_bytes(&metadata, layout.grid.chunk_shape())
            .map_err(|e| refused(QuicklookError::Decode(e)))?
            .unwrap_or(u64::MAX);
        if decoded > bound {
            return Err(refused(QuicklookError::TooLarge { bytes: decoded, max: bound }));
        }
        let shape = layout.grid.shape().to_vec();
        let chunk_shape = layout.grid.chunk_shape().to_vec();
        let mut overview = Overview::new(&metadata, &shape, &chunk_shape, bound).map_err(refused)?;
        let (read, spanned) = (overview.chunks().to_vec(), overview.spanned());
        let mut etags = Vec::with_capacity(read.len());
        for (i, coords) in read.iter().enumerate() {
            let (encoded, etag) = self.chunk_bytes(view, node, layout, coords, bound).await?;
            etags.push(etag);
            overview = tokio::task::spawn_blocking(move || overview.add(i, encoded.as_deref()).map(|()| overview))
                .await?
                .map_err(refused)?;
        }
        let Quicklook { png, min, max, plane, units } = tokio::task::spawn_blocking(move || overview.finish()).await?;
        let mut axes = [None, None];
        let names = metadata.get("dimension_names").and_then(Value::as_array).cloned().unwrap_or_default();
        let n = shape.len();
        for (slot, dim) in [(0, n.checked_sub(2)), (1, n.checked_sub(1))] {
            let Some(dim) = dim.filter(|d| *d < names.len()) else { continue };
            let Some(name) = names[dim].as_str() else { continue };
            axes[slot] = self.coordinate(view, node, name, shape[dim], bound).await;
        }
        Ok(Arc::new(RenderedQuicklook {
            png: Bytes::from(png),
            min,
            max,
            units,
            plane,
            chunk: read.first().map(|c| layout.encoding.encode(c)).unwrap_or_default(),
            chunks_read: read.len(),
            chunks_spanned: spanned,
            chunk_etag: etags.join(","),
            axes,
        }))
    }

    /// The encoded bytes of chunk `coords` of `node` (`None`: missing) and their ETag; a
    /// virtual chunk longer than `bound` is refused before it is read.
    async fn chunk_bytes(
        &self,
        view: &VersionView,
        node: &Node,
        layout: &ArrayLayout,
        coords: &[u64],
        bound: u64,
    ) -> Result<(Option<Bytes>, String)> {
        let at = layout
            .grid
            .locate(coords)
            .ok_or_else(|| Error::NotFound(format!("array {} has no chunk {coords:?}", node.path)))?;
        Ok(match self.chunk(view, node, at).await? {
            Chunk::Missing => (None, "missing".to_owned()),
            Chunk::Bytes { bytes, etag } => (Some(bytes), etag),
            Chunk::Virtual(chunk) if chunk.length > bound => {
                return Err(refused(QuicklookError::TooLarge { bytes: chunk.length, max: bound }));
            }
            Chunk::Virtual(chunk) => {
                let fetched = self.fetch(&chunk, 0..chunk.length).await?;
                let mut body = BytesMut::with_capacity(usize::try_from(fetched.len).unwrap_or(0));
                let mut stream = fetched.body;
                let failed = |e: std::io::Error| {
                    Error::Internal(format!("reading chunk {coords:?} of array {} from its source: {e}", node.path))
                };
                while let Some(part) = stream.try_next().await.map_err(failed)? {
                    body.extend_from_slice(&part);
                }
                (Some(body.freeze()), chunk.etag)
            }
        })
    }

    /// The first and last values of the coordinate array `name` beside `node` (a 1-D numeric
    /// array of `length` elements), when there is one and both can be read.
    async fn coordinate(
        &self,
        view: &VersionView,
        node: &Node,
        name: &str,
        length: u64,
        bound: u64,
    ) -> Option<(String, f64, f64)> {
        let parent = node.path.parent_str();
        let path = if parent.is_empty() { name.to_owned() } else { format!("{parent}/{name}") };
        let coordinate = view.hierarchy.node(&path).or_else(|| view.hierarchy.node(name))?;
        let NodeKind::Array(layout) = &coordinate.kind else { return None };
        if layout.grid.shape() != [length] || length == 0 || coordinate.index == node.index {
            return None;
        }
        let metadata = coordinate.metadata().into_owned();
        let chunk = layout.grid.chunk_shape().to_vec();
        let mut ends = [0.0; 2];
        for (slot, index) in [(0, 0), (1, length - 1)] {
            let coords = [index / chunk[0]];
            let (encoded, _) = self.chunk_bytes(view, coordinate, layout, &coords, bound).await.ok()?;
            let (m, c) = (metadata.clone(), chunk.clone());
            let within = index % chunk[0];
            let value =
                tokio::task::spawn_blocking(move || quicklook::element(&m, &c, encoded.as_deref(), within, bound));
            ends[slot] = value.await.ok()?.ok()??;
        }
        Some((name.to_owned(), ends[0], ends[1]))
    }
}

fn refused(e: QuicklookError) -> Error {
    Error::Invalid { title: "no quick look".into(), problems: vec![e.to_string()] }
}

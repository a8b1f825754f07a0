//! Assembled chunks on the read path: a chunk of a joined array that spans a seam between files
//! is made from its pieces (read through the sources, so single-flight and read-ahead apply),
//! decoded, cut, joined and encoded again on a bounded pool of blocking threads, then kept in a
//! byte-bounded cache under its strong ETag. A full pool answers 503 at once; the async workers
//! never wait on the CPU work.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::error::{Error, Result};
use super::read::{Chunk, Reader};
use super::view::{VersionView, etag};
use crate::zarr::assembled::{self, AssembleError, PieceSource, Recipe};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::source::SourceCheck;

impl Reader {
    /// The assembled chunk whose encoded recipe is `recipe`, of array `node` in `view`'s
    /// version: from the cache, or built once however many ask for it at the same time.
    pub async fn assembled(&self, view: &VersionView, node: &Node, recipe: Bytes) -> Result<Chunk> {
        let metadata = node.metadata();
        let mut identity = Vec::with_capacity(recipe.len() + 512);
        identity.extend_from_slice(&recipe);
        identity.extend_from_slice(serde_json::Value::Object(metadata.into_owned()).to_string().as_bytes());
        let tag = etag('a', &identity);
        let build = || async move {
            let outcome = self.build(node, &recipe).await;
            let label = match &outcome {
                Ok(_) => "ok",
                Err(Error::Overloaded(_)) => "busy",
                Err(Error::Source(_)) => "upstream",
                Err(_) => "invalid",
            };
            self.metrics.assembled_chunks_total.with_label_values(&[label]).inc();
            if let Err(e) = &outcome
                && !matches!(e, Error::Overloaded(_))
            {
                tracing::warn!(store = %view.head.store, version = view.head.id, array = %node.path, error = %e,
                    "an assembled chunk could not be built");
            }
            outcome
        };
        let bytes = self.caches.assembled.load(&tag, build).await?;
        Ok(Chunk::Bytes { bytes, etag: tag })
    }

    /// Reads the pieces of `recipe`, then assembles them on the pool.
    async fn build(&self, node: &Node, recipe: &[u8]) -> Result<Bytes> {
        let internal =
            |e: AssembleError| Error::Internal(format!("array {}: an assembled chunk cannot be built: {e}", node.path));
        let NodeKind::Array(layout) = &node.kind else {
            return Err(Error::Internal(format!("{} is a group, and has no assembled chunk", node.path)));
        };
        let chunk_shape = layout.grid.chunk_shape().to_vec();
        let recipe = Recipe::decode(recipe).map_err(internal)?;
        let started = Instant::now();
        let reads = recipe.pieces.iter().map(|piece| async move {
            match &piece.source {
                PieceSource::Inline(bytes) => Ok::<_, Error>(Bytes::copy_from_slice(bytes)),
                PieceSource::Virtual { url, etag, size, offset, length } => {
                    let check = match (etag, size) {
                        (Some(e), _) => SourceCheck::ETag(e.as_str().into()),
                        (None, Some(n)) => SourceCheck::Size(*n),
                        (None, None) => SourceCheck::Unchecked,
                    };
                    Ok(self.sources.fetch_bytes(url, *offset..offset + length, &check).await?)
                }
            }
        });
        let pieces: Vec<Bytes> = futures::future::try_join_all(reads).await?;
        self.observe("read", started);

        let pool = &self.assembly;
        let _queued = pool.enter()?;
        let waited = Instant::now();
        let _worker = Arc::clone(&pool.workers)
            .acquire_owned()
            .await
            .map_err(|_| Error::Internal("the pool of assembled chunks is closed".into()))?;
        self.observe("wait", waited);
        let (metadata, max, level) = (node.metadata().into_owned(), pool.max_chunk_bytes, pool.deflate_level);
        let working = Instant::now();
        let built = tokio::task::spawn_blocking(move || {
            let parts: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
            assembled::assemble(&metadata, &chunk_shape, &recipe, &parts, max, level)
        })
        .await?;
        self.observe("cpu", working);
        let built = built.map_err(internal)?;
        self.metrics.assembled_chunk_seconds.with_label_values(&["decode"]).observe(built.decoding.as_secs_f64());
        Ok(Bytes::from(built.bytes))
    }

    fn observe(&self, phase: &str, started: Instant) {
        self.metrics.assembled_chunk_seconds.with_label_values(&[phase]).observe(started.elapsed().as_secs_f64());
    }
}

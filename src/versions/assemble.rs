//! Chunks zarrgate makes on the read path. An assembled chunk (of a joined array, spanning a seam
//! between files) is made from its pieces; a transcoded chunk (of an array served with portable
//! codecs) from the file's chunk. Either is read through the sources (single-flight and
//! read-ahead apply), decoded and encoded again on a bounded pool of blocking threads, then kept
//! in a byte-bounded cache under its strong ETag. A full pool answers 503 at once; the async
//! workers never wait on the CPU work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error::{Error, Result};
use super::read::{Chunk, Reader, VirtualChunk};
use super::view::{VersionView, etag};
use crate::zarr::assembled::{self, AssembleError, PieceSource, Recipe};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::portable;
use crate::zarr::source::SourceCheck;

impl Reader {
    /// The assembled chunk whose encoded recipe is `recipe`, of array `node` in `view`'s
    /// version: from the cache, or built once however many ask for it at the same time.
    pub async fn assembled(&self, view: &VersionView, node: &Node, recipe: Bytes) -> Result<Chunk> {
        let tag = etag('a', &identity(node, &recipe));
        let build = || self.build(node, &recipe, false);
        self.made(Made::Assembled, view, node, tag, build).await
    }

    /// As [`Reader::assembled`], encoded with the array's stored codecs, not the portable ones it
    /// is served with (an export: its references are to the files' own chunks).
    pub async fn assembled_as_stored(&self, view: &VersionView, node: &Node, recipe: Bytes) -> Result<Chunk> {
        if node.transcoded().is_none() {
            return self.assembled(view, node, recipe).await;
        }
        let tag = etag('s', &identity(node, &recipe));
        let build = || self.build(node, &recipe, true);
        self.made(Made::Assembled, view, node, tag, build).await
    }

    /// Chunk `chunk` of array `node` (served with portable codecs) transcoded from the file's
    /// codecs: from the cache, or made once however many ask for it at the same time.
    pub async fn transcoded(&self, view: &VersionView, node: &Node, chunk: Chunk) -> Result<Chunk> {
        let (read, source) = match chunk {
            Chunk::Missing => return Ok(Chunk::Missing),
            Chunk::Bytes { bytes, etag } => (Read::Held(bytes), etag),
            Chunk::Virtual(chunk) => {
                let source = chunk.etag.clone();
                (Read::Virtual(chunk), source)
            }
        };
        let tag = etag('t', &identity(node, source.as_bytes()));
        let make = || self.transcode(node, read);
        self.made(Made::Transcoded, view, node, tag, make).await
    }

    /// The chunk under `tag` from the cache, else made by `make` (counted, and logged when it
    /// fails).
    async fn made<F>(
        &self,
        kind: Made,
        view: &VersionView,
        node: &Node,
        tag: String,
        make: impl FnOnce() -> F,
    ) -> Result<Chunk>
    where
        F: std::future::Future<Output = Result<Bytes>>,
    {
        let build = || async move {
            let outcome = make().await;
            let label = match &outcome {
                Ok(_) => "ok",
                Err(Error::Overloaded(_)) => "busy",
                Err(Error::Source(_)) => "upstream",
                Err(_) => "invalid",
            };
            self.counter(kind).with_label_values(&[label]).inc();
            if let Err(e) = &outcome
                && !matches!(e, Error::Overloaded(_))
            {
                tracing::warn!(store = %view.head.store, version = view.head.id, array = %node.path, error = %e,
                    "{} could not be made", kind.what());
            }
            outcome
        };
        let bytes = self.caches.assembled.load(&tag, build).await?;
        Ok(Chunk::Bytes { bytes, etag: tag })
    }

    /// Reads the pieces of `recipe`, then assembles them on the pool.
    async fn build(&self, node: &Node, recipe: &[u8], as_stored: bool) -> Result<Bytes> {
        let internal =
            |e: AssembleError| Error::Internal(format!("array {}: an assembled chunk cannot be built: {e}", node.path));
        let chunk_shape = chunk_shape(node)?;
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
        self.observe(Made::Assembled, "read", started);
        let source = node.stored_metadata().into_owned();
        let metadata = if as_stored { source.clone() } else { node.metadata().into_owned() };
        let (max, level) = (self.assembly.max_chunk_bytes, self.assembly.deflate_level);
        let built = self
            .on_pool(Made::Assembled, move || {
                let parts: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
                assembled::assemble_from(&source, &metadata, &chunk_shape, &recipe, &parts, max, level)
                    .map(|a| (a.bytes, a.decoding))
            })
            .await?;
        built.map_err(internal)
    }

    /// Reads the file's chunk, then transcodes it on the pool.
    async fn transcode(&self, node: &Node, read: Read) -> Result<Bytes> {
        let chunk_shape = chunk_shape(node)?;
        let started = Instant::now();
        let encoded = match read {
            Read::Held(bytes) => bytes,
            Read::Virtual(chunk) => self.fetch_all(&chunk).await?,
        };
        self.observe(Made::Transcoded, "read", started);
        let (source, served) = (node.stored_metadata().into_owned(), node.metadata().into_owned());
        let (max, level) = (self.assembly.max_chunk_bytes, self.assembly.deflate_level);
        let made = self
            .on_pool(Made::Transcoded, move || {
                portable::transcode(&source, &served, &chunk_shape, &encoded, max, level).map(|t| (t.bytes, t.decoding))
            })
            .await?;
        made.map_err(|e| Error::Internal(format!("array {}: a chunk cannot be transcoded: {e}", node.path)))
    }

    /// Runs `work` (decode and encode one chunk) on the bounded pool: 503 at once when its
    /// queue is full. Times the wait, the work and its decoding.
    async fn on_pool(
        &self,
        kind: Made,
        work: impl FnOnce() -> std::result::Result<(Vec<u8>, Duration), AssembleError> + Send + 'static,
    ) -> Result<std::result::Result<Bytes, AssembleError>> {
        let pool = &self.assembly;
        let _queued = pool.enter()?;
        let waited = Instant::now();
        let _worker = Arc::clone(&pool.workers)
            .acquire_owned()
            .await
            .map_err(|_| Error::Internal("the pool of assembled chunks is closed".into()))?;
        self.observe(kind, "wait", waited);
        let working = Instant::now();
        let done = tokio::task::spawn_blocking(work).await?;
        self.observe(kind, "cpu", working);
        Ok(done.map(|(bytes, decoding)| {
            self.histogram(kind).with_label_values(&["decode"]).observe(decoding.as_secs_f64());
            Bytes::from(bytes)
        }))
    }

    fn observe(&self, kind: Made, phase: &str, started: Instant) {
        self.histogram(kind).with_label_values(&[phase]).observe(started.elapsed().as_secs_f64());
    }

    fn counter(&self, kind: Made) -> &prometheus::IntCounterVec {
        match kind {
            Made::Assembled => &self.metrics.assembled_chunks_total,
            Made::Transcoded => &self.metrics.transcoded_chunks_total,
        }
    }

    fn histogram(&self, kind: Made) -> &prometheus::HistogramVec {
        match kind {
            Made::Assembled => &self.metrics.assembled_chunk_seconds,
            Made::Transcoded => &self.metrics.transcoded_chunk_seconds,
        }
    }
}

/// Which kind of chunk zarrgate makes.
#[derive(Debug, Clone, Copy)]
enum Made {
    Assembled,
    Transcoded,
}

impl Made {
    fn what(self) -> &'static str {
        match self {
            Self::Assembled => "an assembled chunk",
            Self::Transcoded => "a transcoded chunk",
        }
    }
}

/// Where a chunk to transcode is.
enum Read {
    /// In memory (an inline chunk).
    Held(Bytes),
    /// In its file.
    Virtual(VirtualChunk),
}

/// What names a chunk zarrgate makes of array `node`: what it is made from (a recipe, or the
/// file's chunk's own ETag), and the array's served metadata and, when transcoded, its stored
/// metadata (both rendered once, when the version was loaded).
fn identity(node: &Node, made_from: &[u8]) -> Vec<u8> {
    let stored = node.transcoded().unwrap_or_default();
    let mut identity = Vec::with_capacity(made_from.len() + node.zarr_json.len() + stored.len() + 2);
    for part in [made_from, &node.zarr_json[..], stored.as_bytes()] {
        identity.extend_from_slice(part);
        identity.push(0);
    }
    identity
}

fn chunk_shape(node: &Node) -> Result<Vec<u64>> {
    match &node.kind {
        NodeKind::Array(layout) => Ok(layout.grid.chunk_shape().to_vec()),
        NodeKind::Group => Err(Error::Internal(format!("{} is a group, and has no chunks", node.path))),
    }
}

//! Quick looks of a version's arrays: a chunk read (inline, or fetched from its source),
//! decoded through the array's own codecs and drawn by `zarr/quicklook.rs`, off the async
//! workers, bounded by `limits.max_fill_chunk_bytes` (decoded and stored), and kept in the
//! byte-weighted `quicklooks` cache: a page and its image ask for the same quick look, and a
//! second ask is neither fetched nor drawn again.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;

use super::error::{Error, Result};
use super::read::{Chunk, Reader};
use super::view::{RenderedQuicklook, VersionView};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::quicklook::{self, Quicklook, QuicklookError};

impl Reader {
    /// The quick look of the first chunk of array `node` in `view`'s version, drawn once and
    /// cached under the version, the array and the chunk's coordinates. An array that has none
    /// (not numeric, a chunk too large, codecs zarrs cannot decode) is [`Error::Invalid`].
    pub async fn quicklook(&self, view: &VersionView, node: &Node) -> Result<Arc<RenderedQuicklook>> {
        let NodeKind::Array(layout) = &node.kind else {
            return Err(Error::NotFound(format!("{:?} is a group: only arrays have a quick look", node.path.as_str())));
        };
        let coords = vec![0; layout.grid.ndim()];
        let key = (view.head.id, node.index, coords.clone());
        let load = move || async move {
            let at = layout
                .grid
                .locate(&coords)
                .ok_or_else(|| Error::NotFound(format!("array {} has no chunks", node.path)))?;
            let bound = self.limits.max_fill_chunk_bytes;
            let metadata = node.metadata().into_owned();
            let decoded = crate::zarr::fill::decoded_chunk_bytes(&metadata, layout.grid.chunk_shape())
                .map_err(|e| refused(QuicklookError::Decode(e)))?
                .unwrap_or(u64::MAX);
            if decoded > bound {
                return Err(refused(QuicklookError::TooLarge { bytes: decoded, max: bound }));
            }
            let (encoded, chunk_etag) = match self.chunk(view, node, at).await? {
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
                        Error::Internal(format!("reading the first chunk of array {} from its source: {e}", node.path))
                    };
                    while let Some(part) = stream.try_next().await.map_err(failed)? {
                        body.extend_from_slice(&part);
                    }
                    (Some(body.freeze()), chunk.etag)
                }
            };
            let drawn = tokio::task::spawn_blocking(move || quicklook::render(&metadata, encoded.as_deref(), bound))
                .await?
                .map_err(refused)?;
            let Quicklook { png, min, max, plane } = drawn;
            let chunk = layout.encoding.encode(&coords);
            Ok(Arc::new(RenderedQuicklook { png: Bytes::from(png), min, max, plane, chunk, chunk_etag }))
        };
        self.caches.quicklooks.get_or_load(key, load).await
    }
}

fn refused(e: QuicklookError) -> Error {
    Error::Invalid { title: "no quick look".into(), problems: vec![e.to_string()] }
}

//! `GET /{store}/{array}/?quicklook=png` (and `=json`, its colour scale): the first chunk of
//! an array decoded through its own codecs and drawn by `zarr/quicklook.rs`, bounded by
//! `limits.max_fill_chunk_bytes` (decoded and encoded), with a strong ETag derived from the
//! chunk's and the metadata's, cached like chunks.

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde_json::json;

use super::super::answer::{Served, bytes_response};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::view::etag;
use crate::versions::{Chunk, VersionView};
use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;
use crate::zarr::quicklook::{self, QuicklookError};

/// What a quick look is asked for as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) enum Format {
    /// The image.
    Png,
    /// Its colour scale and what it shows, as JSON.
    Json,
}

impl Format {
    /// The format a `quicklook=` query asks for; `Err` names the values there are.
    pub(in crate::http) fn from_query(query: Option<&str>) -> Result<Option<Self>, ApiError> {
        let Some(value) = query.into_iter().flat_map(|q| q.split('&')).find_map(|p| p.strip_prefix("quicklook="))
        else {
            return Ok(None);
        };
        match value {
            "png" => Ok(Some(Self::Png)),
            "json" => Ok(Some(Self::Json)),
            other => Err(ApiError::BadRequest(format!("quicklook={other:?}: ask for quicklook=png or quicklook=json"))),
        }
    }
}

/// The quick look of array `node` of `view`.
pub(in crate::http) async fn answer(
    app: &AppState,
    view: &VersionView,
    node: &Node,
    format: Format,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let NodeKind::Array(layout) = &node.kind else {
        return Err(ApiError::NotFound(format!("{:?} is a group: only arrays have a quick look", node.path.as_str())));
    };
    let refused =
        |e: QuicklookError| ApiError::Invalid { title: "no quick look".into(), problems: vec![e.to_string()] };
    let max = app.config.limits.max_fill_chunk_bytes;
    let metadata = node.metadata().into_owned();
    let decoded = crate::zarr::fill::decoded_chunk_bytes(&metadata, layout.grid.chunk_shape())
        .map_err(|e| refused(QuicklookError::Decode(e)))?
        .unwrap_or(u64::MAX);
    if decoded > max {
        return Err(refused(QuicklookError::TooLarge { bytes: decoded, max }));
    }
    let zeros = vec![0; layout.grid.ndim()];
    let at =
        layout.grid.locate(&zeros).ok_or_else(|| ApiError::NotFound(format!("array {} has no chunks", node.path)))?;
    let (encoded, chunk_tag) = match app.reader.chunk(view, node, at).await? {
        Chunk::Missing => (None, "missing".to_owned()),
        Chunk::Bytes { bytes, etag } => (Some(bytes), etag),
        Chunk::Virtual(chunk) if chunk.length > max => {
            return Err(refused(QuicklookError::TooLarge { bytes: chunk.length, max }));
        }
        Chunk::Virtual(chunk) => {
            let fetched = app.reader.fetch(&chunk, 0..chunk.length).await?;
            let mut body = BytesMut::with_capacity(usize::try_from(fetched.len).unwrap_or(0));
            let mut stream = fetched.body;
            while let Some(part) = stream.try_next().await.map_err(|e| ApiError::Internal(e.to_string()))? {
                body.extend_from_slice(&part);
            }
            (Some(body.freeze()), chunk.etag)
        }
    };
    let doc = &view.docs[node.index as usize];
    let identity = format!("{chunk_tag}\n{}\n{format:?}", doc.etag.to_str().unwrap_or_default());
    let tag = HeaderValue::from_str(&etag('q', identity.as_bytes())).unwrap_or(HeaderValue::from_static("\"\""));
    let drawn = tokio::task::spawn_blocking(move || quicklook::render(&metadata, encoded.as_deref(), max))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(refused)?;
    let example = layout.encoding.encode(&zeros);
    Ok(match format {
        Format::Png => bytes_response(Bytes::from(drawn.png), &tag, "image/png", headers, served),
        Format::Json => {
            let body = json!({"chunk": example, "plane": drawn.plane, "min": drawn.min, "max": drawn.max,
                              "colour_map": "viridis", "max_side": quicklook::MAX_SIDE});
            bytes_response(Bytes::from(body.to_string()), &tag, "application/json", headers, served)
        }
    })
}

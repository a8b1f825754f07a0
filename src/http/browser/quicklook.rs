//! `GET /{store}/{array}/?quicklook=png` (and `=json`, its colour scale): the first chunk of
//! an array decoded through its own codecs and drawn (`Reader::quicklook`, which keeps it in the
//! `quicklooks` cache), with a strong ETag derived from the chunk's and the metadata's, cached
//! by HTTP caches like chunks.

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use super::super::answer::{Served, bytes_response};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::etag;
use crate::zarr::hierarchy::Node;
use crate::zarr::quicklook;

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

/// The quick look of array `node` of `view` (drawn once per version and array, then cached by
/// the reader).
pub(in crate::http) async fn answer(
    app: &AppState,
    view: &VersionView,
    node: &Node,
    format: Format,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let rendered = app.reader.quicklook(view, node).await?;
    let doc = &view.docs[node.index as usize];
    let identity = format!("{}\n{}\n{format:?}", rendered.chunk_etag, doc.etag.to_str().unwrap_or_default());
    let tag = HeaderValue::from_str(&etag('q', identity.as_bytes())).unwrap_or(HeaderValue::from_static("\"\""));
    let q = &rendered;
    Ok(match format {
        Format::Png => bytes_response(q.png.clone(), &tag, "image/png", headers, served),
        Format::Json => {
            let body = json!({"chunk": q.chunk, "plane": q.plane, "min": q.min, "max": q.max,
                              "colour_map": "viridis", "max_side": quicklook::MAX_SIDE});
            bytes_response(Bytes::from(body.to_string()), &tag, "application/json", headers, served)
        }
    })
}

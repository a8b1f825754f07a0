//! `GET /{store}/{array}/?quicklook=png` (and `=json`, its colour scale and axes): an overview
//! of the array's first 2-D slice, drawn from a bounded number of its chunks decoded through its
//! own codecs (`Reader::quicklook`, which keeps it in the `quicklooks` cache), with a strong ETag
//! derived from the chunks' and the metadata's, cached by HTTP caches like chunks. The JSON
//! carries a `caption` for people: the range to four significant digits, the units, and the
//! first and last coordinates along each axis.

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use super::super::answer::{Kind, Page, Served, bytes_response};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::VersionView;
use crate::versions::view::RenderedQuicklook;
use crate::versions::view::etag;
use crate::zarr::hierarchy::Node;
use crate::zarr::quicklook;
use crate::zarr::quicklook::cf::short;

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
        Format::Png => bytes_response(q.png.clone(), &tag, Kind::Page(Page::Png), headers, served),
        Format::Json => {
            let axis = |a: &Option<(String, f64, f64)>| {
                a.as_ref().map(|(name, first, last)| json!({"name": name, "first": first, "last": last}))
            };
            let body = json!({"chunk": q.chunk, "plane": q.plane, "min": q.min, "max": q.max, "units": q.units,
                              "chunks_read": q.chunks_read, "chunks_spanned": q.chunks_spanned,
                              "axes": {"rows": axis(&q.axes[0]), "columns": axis(&q.axes[1])},
                              "caption": caption(q),
                              "colour_map": "viridis", "max_side": quicklook::MAX_SIDE});
            bytes_response(Bytes::from(body.to_string()), &tag, Kind::Page(Page::Json), headers, served)
        }
    })
}

/// The scale and axes of a quick look as a person reads them: `250.1 – 310.4 K; rows: lat 90
/// … -90, columns: lon 0 … 359` (numbers to about four significant digits).
fn caption(q: &RenderedQuicklook) -> String {
    let mut out = match (q.min, q.max) {
        (Some(min), Some(max)) => format!("{} \u{2013} {}", short(min), short(max)),
        _ => "(every value drawn is fill or missing)".to_owned(),
    };
    if let Some(units) = &q.units {
        out.push(' ');
        out.push_str(units);
    }
    let axes: Vec<String> = [("rows", &q.axes[0]), ("columns", &q.axes[1])]
        .into_iter()
        .filter_map(|(along, a)| {
            let (name, first, last) = a.as_ref()?;
            Some(format!("{along}: {name} {} \u{2026} {}", short(*first), short(*last)))
        })
        .collect();
    if !axes.is_empty() {
        out.push_str("; ");
        out.push_str(&axes.join(", "));
    }
    if q.chunks_read as u64 != q.chunks_spanned {
        out.push_str(&format!(" (drawn from {} of the slice's {} chunks)", q.chunks_read, q.chunks_spanned));
    }
    out
}

//! Reading a manifest document from a request body as it arrives: the format (native or
//! kerchunk) from the query or from the document's first key, a size limit, and the lengths
//! of kerchunk `[url]` references asked of their object stores.

use std::collections::BTreeMap;
use std::io;

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};

use crate::app::AppState;
use crate::error::ApiError;
use crate::zarr::document::Document;
use crate::zarr::kerchunk::WHOLE_OBJECT;
use crate::zarr::manifest::RawRef;
use crate::zarr::{self, native::SyntaxError};

/// The document formats `PUT /api/v1/stores/{store}` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"nodes": ..., "sources": ...}`.
    Native,
    /// Kerchunk references, version 0 or 1.
    Kerchunk,
}

impl Format {
    /// The `format` query parameter.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        match text {
            "native" => Ok(Self::Native),
            "kerchunk" => Ok(Self::Kerchunk),
            other => Err(ApiError::BadRequest(format!("format {other:?} is not supported: use native or kerchunk"))),
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Kerchunk => "kerchunk",
        }
    }

    /// The format of a document whose first bytes are `head`: kerchunk unless the first key is
    /// one of the native document's.
    fn detect(head: &[u8]) -> Self {
        let text = String::from_utf8_lossy(head);
        let key = text
            .trim_start()
            .strip_prefix('{')
            .map(str::trim_start)
            .and_then(|s| s.strip_prefix('"'))
            .and_then(|s| s.split('"').next());
        match key {
            Some("nodes" | "sources") | None => Self::Native,
            Some(_) => Self::Kerchunk,
        }
    }
}

/// Reads and parses the body, refusing more than `limit` bytes.
pub async fn read_document(
    body: axum::body::Body,
    limit: u64,
    format: Option<Format>,
) -> Result<(Document, Format), ApiError> {
    let mut seen = 0u64;
    let mut stream = body.into_data_stream().map_err(io::Error::other).map(move |chunk| {
        let chunk = chunk?;
        seen += chunk.len() as u64;
        if seen > limit {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, "body too large"));
        }
        Ok(chunk)
    });
    let mut head = BytesMut::new();
    while format.is_none() && head.len() < 4096 && !head.contains(&b':') {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(io_error(e, limit)),
            None => break,
        }
    }
    let format = format.unwrap_or_else(|| Format::detect(&head));
    let stream = futures::stream::once(std::future::ready(Ok::<Bytes, io::Error>(head.freeze()))).chain(stream);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let parsed = tokio::task::spawn_blocking(move || {
        let reader = io::BufReader::with_capacity(1 << 16, reader);
        match format {
            Format::Native => zarr::native::parse_reader(reader),
            Format::Kerchunk => zarr::kerchunk::parse_reader(reader),
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    parsed.map(|doc| (doc, format)).map_err(|e| syntax_error(e, limit, format))
}

fn io_error(e: io::Error, limit: u64) -> ApiError {
    if e.kind() == io::ErrorKind::FileTooLarge {
        ApiError::TooLarge(limit)
    } else {
        ApiError::BadRequest(format!("reading the request body failed: {e}"))
    }
}

fn syntax_error(e: SyntaxError, limit: u64, format: Format) -> ApiError {
    match e.0.io_error_kind() {
        Some(io::ErrorKind::FileTooLarge) => ApiError::TooLarge(limit),
        Some(_) => ApiError::BadRequest(format!("reading the request body failed: {e}")),
        None => {
            let what = match format {
                Format::Native => "a valid native manifest document",
                Format::Kerchunk => "valid kerchunk references",
            };
            ApiError::Invalid {
                title: format!("the body is not {what}: {e}; nothing was changed"),
                problems: vec![e.to_string()],
            }
        }
    }
}

/// Gives every `[url]` reference (a whole object) the object's length, asking its object store.
/// URLs no object store serves are left for validation to report.
pub async fn resolve_whole_objects(app: &AppState, doc: &mut Document) {
    let mut wanted: Vec<u32> = doc
        .nodes
        .values()
        .filter_map(|n| n.manifest.as_ref())
        .flat_map(|m| m.refs.iter())
        .filter_map(|r| match r {
            RawRef::Virtual { url, length: WHOLE_OBJECT, .. } => Some(*url),
            _ => None,
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let urls: Vec<(u32, String)> = wanted
        .into_iter()
        .map(|u| (u, doc.urls.get(u).to_owned()))
        .filter(|(_, url)| app.sources.resolve(url).is_some())
        .collect();
    if urls.is_empty() {
        return;
    }
    let sizes: BTreeMap<u32, Result<u64, String>> = futures::stream::iter(urls)
        .map(|(u, url)| async move {
            let size = app
                .sources
                .head(&url)
                .await
                .map(|facts| facts.size)
                .map_err(|e| format!("cannot learn the length of {url} for its [url] reference: {e}"));
            (u, size)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (_, size) in sizes.iter().filter(|(_, s)| s.is_err()) {
        if let Err(problem) = size {
            doc.problems.push(problem.clone());
        }
    }
    for node in doc.nodes.values_mut() {
        for r in node.manifest.iter_mut().flat_map(|m| m.refs.iter_mut()) {
            if let RawRef::Virtual { url, length, .. } = r
                && *length == WHOLE_OBJECT
                && let Some(Ok(size)) = sizes.get(url)
            {
                *length = *size;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_the_format_from_the_first_key() {
        assert_eq!(Format::detect(br#"{"nodes": {}}"#), Format::Native);
        assert_eq!(Format::detect(b"  {\n \"sources\": {}"), Format::Native);
        assert_eq!(Format::detect(br#"{"version": 1, "refs": {}}"#), Format::Kerchunk);
        assert_eq!(Format::detect(br#"{".zgroup": "{}"}"#), Format::Kerchunk);
        assert_eq!(Format::detect(b"garbage"), Format::Native);
    }
}

//! Reading a manifest document from a request body as it arrives: the format (native, kerchunk
//! or a tar of kerchunk parquet references) from the query, the tar magic or the document's first
//! key, a size limit, and the lengths of kerchunk `[url]` references asked of their object stores.

use std::collections::BTreeMap;
use std::io;

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};

use crate::app::AppState;
use crate::error::ApiError;
use crate::zarr::document::Document;
use crate::zarr::kerchunk::parquet::ArchiveError;
use crate::zarr::spill::Scratch;
use crate::zarr::{self, native::SyntaxError};

/// The document formats `PUT /api/v1/stores/{store}` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"nodes": ..., "sources": ...}`.
    Native,
    /// Kerchunk references, version 0 or 1.
    Kerchunk,
    /// A tar archive of a kerchunk parquet reference directory (`.zmetadata`, `{array}/refs.{k}.parq`).
    KerchunkParquet,
}

/// Where a tar header has its magic (`ustar`, for POSIX, GNU and pax archives alike).
const TAR_MAGIC_AT: usize = 257;

impl Format {
    /// The `format` query parameter.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        match text {
            "native" => Ok(Self::Native),
            "kerchunk" => Ok(Self::Kerchunk),
            "kerchunk-parquet" => Ok(Self::KerchunkParquet),
            other => Err(ApiError::BadRequest(format!(
                "format {other:?} is not supported: use native, kerchunk or kerchunk-parquet"
            ))),
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Kerchunk => "kerchunk",
            Self::KerchunkParquet => "kerchunk-parquet",
        }
    }

    /// The format of a document whose first bytes are `head`: a tar archive (kerchunk parquet)
    /// when it has the tar magic, else kerchunk unless the first key is one of the native document's.
    fn detect(head: &[u8]) -> Self {
        if head.get(TAR_MAGIC_AT..TAR_MAGIC_AT + 5) == Some(b"ustar") {
            return Self::KerchunkParquet;
        }
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

/// Refuses early a body whose declared length is above `limit` (a body without one is
/// counted as it arrives by [`read_document`]).
pub fn check_declared_length(headers: &axum::http::HeaderMap, limit: u64) -> Result<(), ApiError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) { Err(ApiError::TooLarge(limit)) } else { Ok(()) }
}

/// Reads and parses the body, refusing more than `limit` bytes; the references go to `scratch`.
pub async fn read_document(
    body: axum::body::Body,
    limit: u64,
    format: Option<Format>,
    scratch: &Scratch,
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
    // Enough for the first JSON key, or for the magic of a tar header.
    while format.is_none() && head.len() < 4096 && (head.len() < TAR_MAGIC_AT + 5 || !head.contains(&b':')) {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(io_error(e, limit)),
            None => break,
        }
    }
    let format = format.unwrap_or_else(|| Format::detect(&head));
    let stream = futures::stream::once(std::future::ready(Ok::<Bytes, io::Error>(head.freeze()))).chain(stream);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let scratch = scratch.clone();
    let parsed = tokio::task::spawn_blocking(move || {
        let reader = io::BufReader::with_capacity(1 << 16, reader);
        let doc = match format {
            Format::Native => zarr::native::parse_reader(reader, &scratch).map_err(|e| syntax_error(e, limit, format)),
            Format::Kerchunk => {
                zarr::kerchunk::parse_reader(reader, &scratch).map_err(|e| syntax_error(e, limit, format))
            }
            Format::KerchunkParquet => {
                zarr::kerchunk::parquet::parse_tar(reader, &scratch).map_err(|e| archive_error(e, limit))
            }
        };
        // A full scratch disk is the server's problem, whatever the parser made of it.
        scratch.check().map_err(scratch_error)?;
        doc
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    parsed.map(|doc| (doc, format))
}

/// The scratch space failed: nothing was changed, and the operator must make room.
pub fn scratch_error(e: io::Error) -> ApiError {
    ApiError::Scratch(e.to_string())
}

fn archive_error(e: ArchiveError, limit: u64) -> ApiError {
    match e {
        ArchiveError::Io(e) => io_error(e, limit),
        ArchiveError::Invalid(why) => ApiError::Invalid {
            title: format!("the kerchunk parquet references cannot be read: {why}; nothing was changed"),
            problems: vec![why],
        },
    }
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
                Format::Kerchunk | Format::KerchunkParquet => "valid kerchunk references",
            };
            ApiError::Invalid {
                title: format!("the body is not {what}: {e}; nothing was changed"),
                problems: vec![e.to_string()],
            }
        }
    }
}

/// Learns the length of every object a `[url]` reference names whole: the size recorded when
/// the sources were verified (`verified`), else asked of its object store. URLs no object store
/// serves, and sources verification already reported, are left for validation to report.
pub async fn resolve_whole_objects(app: &AppState, doc: &mut Document, verified: bool) {
    let wanted: Vec<u32> = doc.whole_objects.iter().copied().collect();
    let mut known: BTreeMap<u32, Result<u64, String>> = BTreeMap::new();
    let mut ask = Vec::new();
    for u in wanted {
        let url = doc.urls.get(u).to_owned();
        match doc.sources.get(&url).and_then(|f| f.size) {
            Some(size) => {
                known.insert(u, Ok(size));
            }
            None if verified || app.sources.resolve(&url).is_none() => {}
            None => ask.push((u, url)),
        }
    }
    let asked: BTreeMap<u32, Result<u64, String>> =
        futures::stream::iter(ask)
            .map(|(u, url)| async move {
                let size =
                    app.sources.head(&url).await.map(|facts| facts.size).map_err(|e| {
                        format!("cannot learn the length of {url} for its [url] reference: {}", e.explain())
                    });
                (u, size)
            })
            .buffer_unordered(16)
            .collect()
            .await;
    let mut sizes = known;
    sizes.extend(asked);
    for (_, size) in sizes.iter().filter(|(_, s)| s.is_err()) {
        if let Err(problem) = size {
            doc.problems.push(problem.clone());
        }
    }
    doc.object_sizes.extend(sizes.into_iter().filter_map(|(u, size)| size.ok().map(|s| (u, s))));
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
        let mut tar = vec![0u8; 512];
        tar[..10].copy_from_slice(b".zmetadata");
        tar[257..265].copy_from_slice(b"ustar\x0000");
        assert_eq!(Format::detect(&tar), Format::KerchunkParquet);
        assert_eq!(Format::parse("kerchunk-parquet").unwrap(), Format::KerchunkParquet);
    }
}

//! Reading a manifest document from a byte stream as it arrives: the format (native, kerchunk
//! or a tar of kerchunk parquet references) as asked, or from the tar magic or the document's
//! first key; a size limit; the references spilled to scratch space past their memory budget.

use std::io;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use super::error::{Error, Result};
use crate::zarr::document::Document;
use crate::zarr::json_stream::ErrorKind;
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
    /// The format named `text`: `native`, `kerchunk` or `kerchunk-parquet`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "native" => Some(Self::Native),
            "kerchunk" => Some(Self::Kerchunk),
            "kerchunk-parquet" => Some(Self::KerchunkParquet),
            _ => None,
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
    /// when it has the tar magic, else from the document's first key. A first key neither format
    /// starts with (a typo such as `"node"`) is read as native, and [`Detected::guessed`] keeps
    /// it, for a problem that says why the document was not read as kerchunk either.
    fn detect(head: &[u8]) -> Detected {
        let sure = |format| Detected { format, guessed: None };
        if head.get(TAR_MAGIC_AT..TAR_MAGIC_AT + 5) == Some(b"ustar") {
            return sure(Self::KerchunkParquet);
        }
        let text = String::from_utf8_lossy(head);
        let key = text
            .trim_start()
            .strip_prefix('{')
            .map(str::trim_start)
            .and_then(|s| s.strip_prefix('"'))
            .and_then(|s| s.split('"').next());
        match key {
            Some("nodes" | "sources" | "delete") | None => sure(Self::Native),
            Some(key) if is_kerchunk_key(key) => sure(Self::Kerchunk),
            Some(key) => Detected { format: Self::Native, guessed: Some(key.to_owned()) },
        }
    }
}

/// A detected format.
#[derive(Debug, PartialEq, Eq)]
struct Detected {
    format: Format,
    /// The first key, when it fits neither format.
    guessed: Option<String>,
}

/// Whether a document's first key is one kerchunk references start with: version 1's
/// top-level keys, or a Zarr v2 key (`.zgroup`, `air/.zarray`, `air/0.0`, a 0-d array's `0`).
fn is_kerchunk_key(key: &str) -> bool {
    matches!(key, "version" | "refs" | "templates" | "gen")
        || key.rsplit('/').next().is_some_and(|last| {
            matches!(last, ".zgroup" | ".zarray" | ".zattrs" | ".zmetadata" | "zarr.json")
                || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        })
        || key.contains('/')
}

/// The problem added to a document read as native because its first key fits neither format.
fn neither_format(key: &str) -> String {
    format!(
        "read as a native manifest, but its first key {key:?} is not one either (\"nodes\", \"sources\"); \
         nor is it one kerchunk references start with (\"version\", \"refs\", or a Zarr key such as \".zgroup\" \
         or \"air/.zarray\"): if this is kerchunk, send it with ?format=kerchunk"
    )
}

/// A document's bytes as they arrive.
pub type Body = futures::stream::BoxStream<'static, io::Result<Bytes>>;

/// Reads and parses `body`, refusing more than `limit` bytes; the references go to `scratch`.
pub async fn read_document(
    body: Body,
    limit: u64,
    format: Option<Format>,
    scratch: &Scratch,
) -> Result<(Document, Format)> {
    let mut seen = 0u64;
    let mut stream = body.map(move |chunk| {
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
    let Detected { format, guessed } = match format {
        Some(format) => Detected { format, guessed: None },
        None => Format::detect(&head),
    };
    let stream = futures::stream::once(std::future::ready(Ok::<Bytes, io::Error>(head.freeze()))).chain(stream);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let scratch = scratch.clone();
    let parsed = tokio::task::spawn_blocking(move || {
        let reader = io::BufReader::with_capacity(1 << 16, reader);
        let doc = match format {
            Format::Native => match zarr::native::parse_reader(reader, &scratch) {
                Ok(mut doc) => {
                    if let Some(key) = &guessed {
                        doc.problems.push(neither_format(key));
                    }
                    Ok(doc)
                }
                Err(e) => Err(syntax_error(e, limit, format, guessed.as_deref())),
            },
            Format::Kerchunk => {
                zarr::kerchunk::parse_reader(reader, &scratch).map_err(|e| syntax_error(e, limit, format, None))
            }
            Format::KerchunkParquet => {
                zarr::kerchunk::parquet::parse_tar(reader, &scratch).map_err(|e| archive_error(e, limit))
            }
        };
        // A full scratch disk is the server's problem, whatever the parser made of it.
        scratch.check().map_err(scratch_error)?;
        doc
    })
    .await?;
    parsed.map(|doc| (doc, format))
}

/// The scratch space failed: nothing was changed, and the operator must make room.
pub fn scratch_error(e: io::Error) -> Error {
    Error::Scratch(e.to_string())
}

fn archive_error(e: ArchiveError, limit: u64) -> Error {
    match e {
        ArchiveError::Io(e) => io_error(e, limit),
        ArchiveError::NotTar(why) => Error::BadRequest(format!("{why}; nothing was changed")),
        ArchiveError::Invalid(why) => Error::Invalid {
            title: format!("the kerchunk parquet references cannot be read: {why}; nothing was changed"),
            problems: vec![why],
        },
    }
}

fn io_error(e: io::Error, limit: u64) -> Error {
    if e.kind() == io::ErrorKind::FileTooLarge {
        Error::TooLarge(limit)
    } else {
        Error::BadRequest(format!("reading the request body failed: {e}"))
    }
}

fn syntax_error(e: SyntaxError, limit: u64, format: Format, guessed: Option<&str>) -> Error {
    let what = match format {
        Format::Native => "a native manifest document",
        Format::Kerchunk | Format::KerchunkParquet => "kerchunk references",
    };
    match e.0.kind {
        ErrorKind::Io(io::ErrorKind::FileTooLarge) => Error::TooLarge(limit),
        ErrorKind::Io(_) => Error::BadRequest(format!("reading the request body failed: {e}")),
        // Not JSON at all (truncated, not UTF-8, not JSON): the request cannot be understood.
        ErrorKind::Syntax => {
            Error::BadRequest(format!("the body is not valid JSON ({what} was expected): {e}; nothing was changed"))
        }
        ErrorKind::Shape => Error::Invalid {
            title: format!("the body is not {what}: {e}; nothing was changed"),
            problems: std::iter::once(e.to_string()).chain(guessed.map(neither_format)).collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_the_format_from_the_first_key() {
        let sure = |format| Detected { format, guessed: None };
        assert_eq!(Format::detect(br#"{"nodes": {}}"#), sure(Format::Native));
        assert_eq!(Format::detect(b"  {\n \"sources\": {}"), sure(Format::Native));
        assert_eq!(Format::detect(br#"{"version": 1, "refs": {}}"#), sure(Format::Kerchunk));
        assert_eq!(Format::detect(br#"{".zgroup": "{}"}"#), sure(Format::Kerchunk));
        assert_eq!(Format::detect(br#"{"air/.zarray": "{}"}"#), sure(Format::Kerchunk));
        assert_eq!(Format::detect(br#"{"air/0.0": ["s3://b/k", 0, 1]}"#), sure(Format::Kerchunk));
        assert_eq!(Format::detect(b"garbage"), sure(Format::Native));
        let typo = Format::detect(br#"{"node": {"": {}}}"#);
        assert_eq!(typo, Detected { format: Format::Native, guessed: Some("node".into()) });
        let mut tar = vec![0u8; 512];
        tar[..10].copy_from_slice(b".zmetadata");
        tar[257..265].copy_from_slice(b"ustar\x0000");
        assert_eq!(Format::detect(&tar), sure(Format::KerchunkParquet));
        assert_eq!(Format::parse("kerchunk-parquet").unwrap(), Format::KerchunkParquet);
    }
}

//! Files parsed once: a successful parse is remembered in the catalog under the URL read, the
//! content's validator and what shapes a parse's output, so a rescan, a re-registration with one
//! more file, or a second store over the same files (through any replica) parses only what is new.

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, ParsedKey};
use crate::formats::Parsed;
use crate::zarr::source::SourceFacts;

/// A parse as the catalog keeps it (JSON, zstd-compressed).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// The parser that read it.
    parser: String,
    /// What it found, its warnings included.
    parsed: Parsed,
}

/// Where one file's parse is remembered: the URL read, which content of it, and which parse.
#[derive(Debug, Clone)]
pub(super) struct ParseKey {
    url: String,
    validator: String,
    parse_key: String,
}

impl ParseKey {
    /// The key of `url`'s parse by `parser` (`auto` or a parser's name) with `max_inline_bytes`,
    /// or `None` when its facts cannot tell one content from another (no ETag, and no size and
    /// modification time): such a file is parsed every time.
    pub fn new(url: &str, facts: &SourceFacts, parser: &str, max_inline_bytes: u64) -> Option<Self> {
        let validator = match facts {
            SourceFacts { etag: Some(etag), .. } => format!("etag:{etag}"),
            SourceFacts { size: Some(size), last_modified: Some(modified), .. } => format!("size:{size}:{modified}"),
            _ => return None,
        };
        let parse_key = format!("{parser};max_inline_bytes={max_inline_bytes}");
        Some(Self { url: url.to_owned(), validator, parse_key })
    }

    fn key(&self) -> ParsedKey<'_> {
        ParsedKey { url: &self.url, validator: &self.validator, parse_key: &self.parse_key }
    }

    /// The parse remembered under this key, with its parser's name; `None` when there is none,
    /// or when it cannot be had (logged: the file is then parsed again).
    pub async fn get(&self, catalog: &dyn Catalog) -> Option<(String, Parsed)> {
        let data = match catalog.parsed_file(self.key()).await {
            Ok(data) => data?,
            Err(e) => {
                tracing::warn!(file = %self.url, error = %e, "looking up a remembered parse failed: parsing the file");
                return None;
            }
        };
        match decode(&data) {
            Ok(entry) => Some((entry.parser, entry.parsed)),
            Err(e) => {
                tracing::warn!(file = %self.url, error = %e, "a remembered parse cannot be read: parsing the file");
                None
            }
        }
    }

    /// The parses remembered under `keys`, in their order, looked up in a few queries and
    /// decoded side by side off the async workers; `None` where there is none or it cannot be
    /// had (logged: that file is then parsed again).
    pub async fn get_many(catalog: &dyn Catalog, keys: &[Self]) -> Vec<Option<(String, Parsed)>> {
        let keyed: Vec<ParsedKey<'_>> = keys.iter().map(Self::key).collect();
        let found = match catalog.parsed_files(&keyed).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(files = keys.len(), error = %e, "looking up remembered parses failed: parsing the files");
                return keys.iter().map(|_| None).collect();
            }
        };
        let urls: Vec<String> = keys.iter().map(|k| k.url.clone()).collect();
        let decoded = tokio::task::spawn_blocking(move || {
            use rayon::prelude::*;
            found
                .into_par_iter()
                .zip(urls.into_par_iter())
                .map(|(data, url)| match decode(&data?) {
                    Ok(entry) => Some((entry.parser, entry.parsed)),
                    Err(e) => {
                        tracing::warn!(file = %url, error = %e, "a remembered parse cannot be read: parsing the file");
                        None
                    }
                })
                .collect::<Vec<_>>()
        })
        .await;
        decoded.unwrap_or_else(|_| keys.iter().map(|_| None).collect())
    }

    /// A successful parse as the catalog keeps it, to be remembered with the registration's
    /// others ([`remember`]); `None` (logged) when it cannot be encoded.
    pub fn entry(self, parser: &str, parsed: &Parsed) -> Option<(Self, Vec<u8>)> {
        let entry = Entry { parser: parser.to_owned(), parsed: parsed.clone() };
        match encode(&entry) {
            Ok(data) => Some((self, data)),
            Err(e) => {
                tracing::warn!(file = %self.url, error = %e, "a parse cannot be remembered: the file will be parsed again");
                None
            }
        }
    }
}

/// Remembers a registration's new parses in one transaction; a failure is logged, never the
/// registration's (those files will be parsed again).
pub(super) async fn remember(catalog: &dyn Catalog, entries: &[(ParseKey, Vec<u8>)]) {
    let keyed: Vec<(ParsedKey<'_>, &[u8])> = entries.iter().map(|(key, data)| (key.key(), data.as_slice())).collect();
    if let Err(e) = catalog.put_parsed_files(&keyed).await {
        tracing::warn!(files = entries.len(), error = %e, "remembering parses failed: those files will be parsed again");
    }
}

fn encode(entry: &Entry) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(entry)?;
    zstd::encode_all(&json[..], 3)
}

fn decode(data: &[u8]) -> std::io::Result<Entry> {
    use std::io::Read;
    thread_local! {
        // One decompression context a thread, kept: making one a parse (its window buffers
        // allocated and zeroed each time) was a third of a 10,000-file rescan's CPU.
        static CONTEXT: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
            std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
    }
    CONTEXT.with(|context| {
        let mut context = context.borrow_mut();
        context
            .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
            .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code).to_owned()))?;
        let mut json = Vec::with_capacity(data.len() * 8);
        zstd::stream::read::Decoder::with_context(data, &mut context).read_to_end(&mut json)?;
        Ok(serde_json::from_slice(&json)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Chunk, Node};

    #[test]
    fn a_parse_reads_back_as_remembered() {
        let mut parsed = Parsed { warnings: vec!["v was left out".into()], ..Parsed::default() };
        let metadata = serde_json::json!({"zarr_format": 3, "node_type": "array"});
        let chunks = vec![
            (vec![0], Chunk::Range { offset: 10, length: 20 }),
            (vec![1], Chunk::Elsewhere { url: "s3://b/x".into(), offset: 0, length: 4 }),
            (vec![2], Chunk::Inline(vec![1, 2, 3])),
        ];
        let metadata = metadata.as_object().cloned().unwrap_or_default();
        parsed.nodes.insert("t".into(), Node { metadata, chunks });
        let data = encode(&Entry { parser: "hdf5".into(), parsed: parsed.clone() }).unwrap();
        let entry = decode(&data).unwrap();
        assert_eq!((entry.parser.as_str(), entry.parsed), ("hdf5", parsed));
    }

    #[test]
    fn a_file_is_told_by_its_etag_else_its_size_and_time() {
        let etag = SourceFacts { etag: Some("\"e1\"".into()), size: Some(5), last_modified: Some("t".into()) };
        let key = ParseKey::new("s3://b/f.nc", &etag, "auto", 16).unwrap();
        assert_eq!((key.validator.as_str(), key.parse_key.as_str()), ("etag:\"e1\"", "auto;max_inline_bytes=16"));
        let sized = SourceFacts { etag: None, size: Some(5), last_modified: Some("t".into()) };
        assert_eq!(ParseKey::new("s3://b/f.nc", &sized, "hdf5", 16).unwrap().validator, "size:5:t");
        let unknown = SourceFacts { etag: None, size: Some(5), last_modified: None };
        assert!(ParseKey::new("s3://b/f.nc", &unknown, "hdf5", 16).is_none());
    }
}

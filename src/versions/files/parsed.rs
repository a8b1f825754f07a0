//! Files parsed once: a successful parse is remembered in the catalog under the URL read, the
//! content's validator and what shapes a parse's output, so a rescan, a re-registration with one
//! more file, or a second store over the same files (through any replica) parses only what is new.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::catalog::{Catalog, ParsedKey};
use crate::formats::{Chunk, Node, Parsed};
use crate::zarr::source::SourceFacts;

/// A parse as the catalog keeps it (JSON, zstd-compressed).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// The parser that read it.
    parser: String,
    /// What it found, its warnings included.
    parsed: Parsed,
}

/// An [`Entry`] as read back, each node's metadata still its JSON text ([`decode`] shares one
/// map among the nodes whose text is the same).
#[derive(Deserialize)]
struct RawEntry<'a> {
    parser: String,
    #[serde(borrow)]
    parsed: RawParsed<'a>,
}

/// A [`Parsed`] as read back.
#[derive(Deserialize)]
struct RawParsed<'a> {
    #[serde(borrow)]
    nodes: BTreeMap<String, RawNode<'a>>,
    warnings: Vec<String>,
    #[serde(default)]
    held: Vec<(String, Vec<f64>)>,
}

/// A [`Node`] as read back.
#[derive(Deserialize)]
struct RawNode<'a> {
    #[serde(borrow)]
    metadata: &'a RawValue,
    chunks: Vec<(Vec<u64>, Chunk)>,
}

/// Node metadata already read, by its JSON text: the files of an archive repeat the same
/// metadata (every file's `time`, `lat`, `lon` and variables alike), and a rescan of 10,000
/// files read back 50,000 maps of a few distinct texts, a third of its time (allocating them).
type Shared = HashMap<Box<str>, Arc<Map<String, Value>>>;

/// One map for each distinct node metadata among a registration's files, whichever way each
/// parse came (parsed now, or read back alone): 10,000 files of one archive parsed held 10,000
/// copies of each variable's metadata until they were joined. Keyed by the hash of the
/// metadata's JSON text, a hit checked by comparing the maps, so that files whose metadata all
/// differ cost a few words each here, not their text again.
#[derive(Default)]
pub(super) struct Interner(std::sync::Mutex<HashMap<u64, Vec<Metadata>>>);

/// One node's metadata, shared.
type Metadata = Arc<Map<String, Value>>;

/// Distinct metadata an [`Interner`] keeps at most: past it, new metadata is left as it is.
const MAX_INTERNED: usize = 100_000;

impl Interner {
    /// Makes each node of `parsed` share the map of an earlier node with the same metadata.
    pub fn intern(&self, parsed: &mut Parsed) {
        let mut table = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for node in parsed.nodes.values_mut() {
            let Ok(text) = serde_json::to_vec(&*node.metadata) else { continue };
            let hash = xxhash_rust::xxh3::xxh3_64(&text);
            let found = table.get(&hash).and_then(|same| same.iter().find(|m| ***m == *node.metadata).cloned());
            match found {
                Some(shared) => node.metadata = shared,
                None if table.len() < MAX_INTERNED => table.entry(hash).or_default().push(Arc::clone(&node.metadata)),
                None => {}
            }
        }
    }
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
        match decode(&data, &mut Shared::new()) {
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
                .map_init(Shared::new, |shared, (data, url)| match decode(&data?, shared) {
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

/// An entry read back, the metadata of its nodes taken from `shared` where the same text was
/// read before (and added to it where not).
fn decode(data: &[u8], shared: &mut Shared) -> std::io::Result<Entry> {
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
        let raw: RawEntry<'_> = serde_json::from_slice(&json)?;
        let mut nodes = BTreeMap::new();
        for (path, node) in raw.parsed.nodes {
            let text = node.metadata.get();
            let metadata = match shared.get(text) {
                Some(metadata) => Arc::clone(metadata),
                None => {
                    let metadata: Arc<Map<String, Value>> = Arc::new(serde_json::from_str(text)?);
                    shared.insert(text.into(), Arc::clone(&metadata));
                    metadata
                }
            };
            nodes.insert(path, Node { metadata, chunks: node.chunks });
        }
        Ok(Entry { parser: raw.parser, parsed: Parsed { nodes, warnings: raw.parsed.warnings, held: raw.parsed.held } })
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
        parsed.nodes.insert("t".into(), Node { metadata: metadata.into(), chunks });
        let data = encode(&Entry { parser: "hdf5".into(), parsed: parsed.clone() }).unwrap();
        let mut shared = Shared::new();
        let entry = decode(&data, &mut shared).unwrap();
        assert_eq!((entry.parser.as_str(), entry.parsed), ("hdf5", parsed.clone()));
        // A second file with the same metadata shares its map; other metadata does not.
        let again = decode(&data, &mut shared).unwrap();
        let first = decode(&data, &mut shared).unwrap();
        assert!(Arc::ptr_eq(&again.parsed.nodes["t"].metadata, &first.parsed.nodes["t"].metadata));
        let mut other = parsed;
        Arc::make_mut(&mut other.nodes.get_mut("t").unwrap().metadata).insert("shape".into(), serde_json::json!([3]));
        let data = encode(&Entry { parser: "hdf5".into(), parsed: other.clone() }).unwrap();
        let third = decode(&data, &mut shared).unwrap();
        assert_eq!(third.parsed, other);
        assert!(!Arc::ptr_eq(&third.parsed.nodes["t"].metadata, &first.parsed.nodes["t"].metadata));
    }

    #[test]
    fn files_with_the_same_metadata_share_one_map() {
        let parse = |units: &str| {
            let metadata = serde_json::json!({"node_type": "array", "attributes": {"units": units}});
            let node = Node { metadata: metadata.as_object().cloned().unwrap_or_default().into(), chunks: vec![] };
            Parsed { nodes: [("t".to_owned(), node)].into(), ..Parsed::default() }
        };
        let interner = Interner::default();
        let (mut a, mut b, mut c) = (parse("days"), parse("days"), parse("hours"));
        for p in [&mut a, &mut b, &mut c] {
            interner.intern(p);
        }
        assert!(Arc::ptr_eq(&a.nodes["t"].metadata, &b.nodes["t"].metadata));
        assert!(!Arc::ptr_eq(&a.nodes["t"].metadata, &c.nodes["t"].metadata));
        assert_eq!(
            (
                a.nodes["t"].metadata["attributes"]["units"].as_str(),
                c.nodes["t"].metadata["attributes"]["units"].as_str()
            ),
            (Some("days"), Some("hours"))
        );
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

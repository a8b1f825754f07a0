//! Kerchunk references as a document: version 1 (`{"version": 1, "refs", "templates", "gen"}`)
//! and version 0 (a flat dict). Read as they arrive, then assembled into the same [`Document`]
//! the native format gives, with v2 metadata converted to v3. The parquet form is in [`parquet`].

pub mod convert;
pub mod export;
pub mod generate;
pub mod parquet;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use base64::Engine;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::document::{DocNode, Document, Problems, UrlTable};
use super::json_stream::{self, JsonStream};
use super::key::ChunkKeyEncoding;
use super::manifest::{RawRef, normalize_literal_path};
use super::metadata::array_layout;
use super::native::{BASE64, SyntaxError};
use super::spill::{Scratch, SpillLog, get_bytes, get_u8, get_varint, put_varint};

/// The length of a `[url]` reference until registration asks the object store for it.
pub const WHOLE_OBJECT: u64 = u64::MAX;

/// Reads kerchunk references from `reader` as they arrive, keeping them in `scratch`.
pub fn parse_reader(reader: impl Read, scratch: &Scratch) -> Result<Document, SyntaxError> {
    let mut c = Collected::new(scratch);
    let mut s = JsonStream::new(reader);
    s.begin_object("kerchunk references: an object")?;
    let (mut first, mut key) = (true, String::new());
    while s.next_key(&mut first, &mut key)? {
        match key.as_str() {
            "version" => {
                let v: Value = s.value()?;
                if v != 1 {
                    c.problems.push(format!(
                        "kerchunk \"version\": {v} is not supported: version 1 documents say \"version\": 1 \
                         (with \"refs\"), version 0 documents are a flat object of references with no \"version\""
                    ));
                }
            }
            "refs" => {
                s.begin_object("\"refs\": an object of references")?;
                let (mut first, mut key) = (true, String::new());
                while s.next_key(&mut first, &mut key)? {
                    add_ref(&mut s, &mut c, &key)?;
                }
            }
            "templates" => c.templates = s.value()?,
            "gen" => c.generators = s.value()?,
            _ => add_ref(&mut s, &mut c, &key)?,
        }
    }
    s.end()?;
    Ok(c.assemble())
}

/// One reference: a metadata document, or a chunk's.
fn add_ref<R: Read>(s: &mut JsonStream<R>, c: &mut Collected, key: &str) -> Result<(), json_stream::Error> {
    match split_metadata_key(key) {
        Some((node, name)) => {
            let value: Value = s.value()?;
            c.add_metadata(key, node, name, value);
        }
        None => {
            let value: RefValue = s.value()?;
            c.add_chunk(key, value);
        }
    }
    Ok(())
}

/// Reads kerchunk references held in memory.
pub fn parse_slice(bytes: &[u8]) -> Result<Document, SyntaxError> {
    parse_reader(bytes, &Scratch::in_memory())
}

/// A reference as read, its URL not yet resolved against `templates`.
#[derive(Debug, Clone, Copy)]
enum Ref {
    Inline { start: u64, len: u64 },
    Range { url: u32, offset: u64, length: u64 },
}

/// The metadata keys of one node.
#[derive(Debug, Default)]
struct NodeKeys {
    zarray: Option<Value>,
    zattrs: Option<Value>,
    zgroup: bool,
    zarr_json: Option<Value>,
}

/// Everything read from the document, before assembly. Chunk references are kept in scratch
/// logs (key, then reference) until the metadata of every array is known.
#[derive(Debug, Default)]
pub struct Collected {
    meta: BTreeMap<String, NodeKeys>,
    chunks: SpillLog,
    chunk_count: usize,
    inline: SpillLog,
    encoded: Vec<u8>,
    scratch: Scratch,
    raw_urls: UrlTable,
    templates: BTreeMap<String, String>,
    generators: Vec<Value>,
    problems: Problems,
}

const METADATA: &[&str] = &[".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json"];

fn split_metadata_key(key: &str) -> Option<(&str, &str)> {
    let (node, name) = key.rsplit_once('/').unwrap_or(("", key));
    METADATA.contains(&name).then_some((node, name))
}

impl Collected {
    /// Nothing collected yet; references go to `scratch`.
    pub fn new(scratch: &Scratch) -> Self {
        Self {
            chunks: SpillLog::new(scratch),
            inline: SpillLog::new(scratch),
            scratch: scratch.clone(),
            ..Self::default()
        }
    }

    /// Records one metadata document (a JSON string, as kerchunk embeds them, or an object).
    fn add_metadata(&mut self, key: &str, node: &str, name: &str, value: Value) {
        let value = match value {
            Value::String(text) => match convert::lenient_json(&text) {
                Ok(v) => v,
                Err(e) => {
                    self.problems.push(format!("{key}: not valid JSON ({e})"));
                    return;
                }
            },
            other => other,
        };
        if name == ".zmetadata" {
            // Consolidated v2 metadata: every entry not given on its own.
            if let Some(Value::Object(entries)) = value.get("metadata") {
                for (k, v) in entries {
                    if let Some((n, m)) = split_metadata_key(k).filter(|(_, m)| *m != ".zmetadata") {
                        let slot = self.meta.entry(n.to_owned()).or_default();
                        let missing = match m {
                            ".zarray" => slot.zarray.is_none(),
                            ".zattrs" => slot.zattrs.is_none(),
                            ".zgroup" => !slot.zgroup,
                            _ => slot.zarr_json.is_none(),
                        };
                        if missing {
                            self.add_metadata(k, n, m, v.clone());
                        }
                    }
                }
            }
            return;
        }
        let slot = self.meta.entry(node.to_owned()).or_default();
        match name {
            ".zarray" => slot.zarray = Some(value),
            ".zattrs" => slot.zattrs = Some(value),
            ".zgroup" => slot.zgroup = true,
            _ => slot.zarr_json = Some(value),
        }
    }

    fn add_chunk(&mut self, key: &str, value: RefValue) {
        let r = match value {
            RefValue::Data(bytes) => {
                let start = self.inline.append(&bytes);
                Ref::Inline { start, len: bytes.len() as u64 }
            }
            RefValue::Url { url, range } => {
                let url = self.raw_urls.intern(url);
                let (offset, length) = range.unwrap_or((0, WHOLE_OBJECT));
                Ref::Range { url, offset, length }
            }
            RefValue::Bad(why) => {
                self.problems.push(format!("{key}: {why}"));
                return;
            }
        };
        let e = &mut self.encoded;
        e.clear();
        put_varint(e, key.len() as u64);
        e.extend_from_slice(key.as_bytes());
        match r {
            Ref::Inline { start, len } => {
                e.push(0);
                [start, len].into_iter().for_each(|v| put_varint(e, v));
            }
            Ref::Range { url, offset, length } => {
                e.push(1);
                [u64::from(url), offset, length].into_iter().for_each(|v| put_varint(e, v));
            }
        }
        self.chunks.append(&self.encoded);
        self.chunk_count += 1;
    }

    /// Replays the chunk references in the order they were read.
    fn replay(&self, mut each: impl FnMut(&str, Ref)) -> std::io::Result<()> {
        let mut r = self.chunks.reader();
        let mut key = Vec::new();
        for _ in 0..self.chunk_count {
            let n = usize::try_from(get_varint(&mut r)?).map_err(std::io::Error::other)?;
            get_bytes(&mut r, n, &mut key)?;
            let key = std::str::from_utf8(&key).map_err(std::io::Error::other)?;
            let reference = match get_u8(&mut r)? {
                0 => Ref::Inline { start: get_varint(&mut r)?, len: get_varint(&mut r)? },
                _ => Ref::Range {
                    url: u32::try_from(get_varint(&mut r)?).map_err(std::io::Error::other)?,
                    offset: get_varint(&mut r)?,
                    length: get_varint(&mut r)?,
                },
            };
            each(key, reference);
        }
        Ok(())
    }

    /// Expands generators, resolves templates and URLs, converts metadata, and files every
    /// chunk under its array.
    fn assemble(mut self) -> Document {
        for entry in std::mem::take(&mut self.generators) {
            match generate::expand(&entry, &self.templates) {
                Ok(refs) => {
                    for g in refs {
                        match g {
                            Ok(g) => self.add_chunk(&g.key, RefValue::Url { url: g.url, range: g.range }),
                            Err(e) => self.problems.push(format!("gen: {e}")),
                        }
                    }
                }
                Err(e) => self.problems.push(format!("gen: {e}")),
            }
        }
        let mut doc = Document { problems: std::mem::take(&mut self.problems), ..Document::new(&self.scratch) };
        let urls: Vec<Option<u32>> = self
            .raw_urls
            .all()
            .iter()
            .map(|raw| match normalize_literal_path(&generate::apply_templates(raw, &self.templates)) {
                Ok(url) => Some(doc.urls.intern(url)),
                Err(e) => {
                    doc.problems.push(e.to_string());
                    None
                }
            })
            .collect();
        let mut encodings: BTreeMap<String, (ChunkKeyEncoding, usize)> = BTreeMap::new();
        let mut failed: Vec<String> = Vec::new();
        for (path, keys) in std::mem::take(&mut self.meta) {
            let attrs = match keys.zattrs {
                Some(Value::Object(a)) => a,
                Some(other) => {
                    doc.problems.push(format!("{path}/.zattrs: expected an object, found {other}"));
                    Map::new()
                }
                None => Map::new(),
            };
            let metadata = match (keys.zarr_json, keys.zarray) {
                (Some(Value::Object(v3)), _) => Ok(v3),
                (Some(other), _) => Err(format!("zarr.json: expected an object, found {other}")),
                (None, Some(zarray)) => convert::array_to_v3(&zarray, attrs),
                (None, None) => Ok(convert::group_to_v3(attrs)),
            };
            match metadata {
                Ok(metadata) => {
                    if metadata.get("node_type").and_then(Value::as_str) == Some("array")
                        && let Ok(layout) = array_layout(&metadata)
                    {
                        encodings.insert(path.clone(), (layout.encoding, layout.grid.ndim()));
                    }
                    let manifest = encodings.contains_key(&path).then(|| doc.new_manifest());
                    doc.nodes.insert(path, DocNode::new(&metadata, manifest));
                }
                Err(e) => {
                    doc.problems.push(format!("array {path:?}: {e}"));
                    failed.push(format!("{path}/"));
                }
            }
        }
        let mut data = Vec::new();
        let replayed = self.replay(|key, r| {
            let Some((path, coords)) = locate(key, &encodings) else {
                if failed.iter().any(|f| key.starts_with(f.as_str()) || f == "/") {
                    return; // its array's metadata was already reported
                }
                doc.problems.push(format!("{key}: not a chunk of any array (no .zarray or zarr.json for it)"));
                return;
            };
            let Some(manifest) = doc.nodes.get_mut(path).and_then(|n| n.manifest.as_mut()) else { return };
            match r {
                Ref::Inline { start, len } => match self.inline.read_at(start, len as usize, &mut data) {
                    Ok(()) => manifest.push_inline(&coords, &data),
                    Err(e) => doc.scratch_failure(e),
                },
                Ref::Range { url, offset, length } => {
                    if let Some(url) = urls[url as usize] {
                        if length == WHOLE_OBJECT {
                            doc.whole_objects.insert(url);
                        }
                        manifest.push(&coords, RawRef::Virtual { url, offset, length });
                    }
                }
            }
        });
        if let Err(e) = replayed {
            doc.scratch_failure(e);
        }
        doc
    }
}

/// The array a chunk key belongs to, and its grid coordinates.
fn locate<'a>(key: &str, encodings: &'a BTreeMap<String, (ChunkKeyEncoding, usize)>) -> Option<(&'a str, Vec<u64>)> {
    let splits = key.match_indices('/').map(|(i, _)| i).rev().chain(std::iter::once(usize::MAX));
    for i in splits {
        let (path, rest) = if i == usize::MAX { ("", key) } else { (&key[..i], &key[i + 1..]) };
        if let Some((path, (encoding, ndim))) = encodings.get_key_value(path) {
            // VirtualiZarr writes a 0-d array's chunk as `name/`.
            if *ndim == 0 && rest.is_empty() {
                return Some((path.as_str(), Vec::new()));
            }
            return encoding.parse(rest, *ndim).map(|c| (path.as_str(), c));
        }
    }
    None
}

/// A chunk reference's value.
enum RefValue {
    Data(Vec<u8>),
    Url { url: String, range: Option<(u64, u64)> },
    Bad(String),
}

struct RefValueVisitor;

impl<'de> Deserialize<'de> for RefValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RefValueVisitor)
    }
}

impl<'de> Visitor<'de> for RefValueVisitor {
    type Value = RefValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a reference: inline data, [url] or [url, offset, length]")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RefValue, E> {
        Ok(match v.strip_prefix("base64:") {
            Some(b64) => match BASE64.decode(b64) {
                Ok(bytes) => RefValue::Data(bytes),
                Err(e) => RefValue::Bad(format!("inline data is not valid base64 ({e})")),
            },
            None => RefValue::Data(v.as_bytes().to_vec()),
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RefValue, A::Error> {
        let url: Option<String> = seq.next_element()?;
        let offset: Option<Value> = seq.next_element()?;
        let length: Option<Value> = seq.next_element()?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        let Some(url) = url else { return Ok(RefValue::Bad("an empty reference list".into())) };
        Ok(match (offset, length) {
            (None, None) => RefValue::Url { url, range: None },
            (Some(o), Some(l)) => match (o.as_u64(), l.as_u64()) {
                (Some(o), Some(l)) if o.checked_add(l).is_some() => RefValue::Url { url, range: Some((o, l)) },
                _ => RefValue::Bad(format!("offset {o} and length {l} must be non-negative integers")),
            },
            _ => RefValue::Bad("a reference needs [url] or [url, offset, length]".into()),
        })
    }
}

#[cfg(test)]
mod tests;

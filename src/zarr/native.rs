//! Streaming reader of the native manifest document (`{"nodes": {...}, "sources": {...}}`):
//! the outer objects are walked as they arrive ([`JsonStream`]), and references go straight
//! into compact per-array scratch logs, never into a JSON tree.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use base64::Engine;
use std::io::Read;

use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::document::{DocNode, Document, SourceFacts, UrlTable};
use super::json_stream::{self, JsonStream};
use super::manifest::{RawManifest, RawRef, normalize_source_url};
use super::spill::Scratch;

/// Base64 as Python writes it, padding optional.
pub const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The document is not JSON, or not shaped like a native manifest (its kind says which).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(#[from] pub json_stream::Error);

/// Reads a native document from `reader` as it arrives, its references kept in `scratch`.
pub fn parse_reader(reader: impl Read, scratch: &Scratch) -> Result<Document, SyntaxError> {
    let mut doc = Document::new(scratch);
    let mut s = JsonStream::new(reader);
    read_document(&mut s, &mut doc)?;
    s.end()?;
    Ok(doc)
}

/// Reads a native document held in memory.
pub fn parse_slice(bytes: &[u8]) -> Result<Document, SyntaxError> {
    parse_reader(bytes, &Scratch::in_memory())
}

fn read_document<R: Read>(s: &mut JsonStream<R>, doc: &mut Document) -> Result<(), json_stream::Error> {
    s.begin_object(r#"a manifest document {"nodes": {...}}"#)?;
    let (mut first, mut key) = (true, String::new());
    let mut saw_nodes = false;
    while s.next_key(&mut first, &mut key)? {
        match key.as_str() {
            "nodes" => {
                saw_nodes = true;
                read_nodes(s, doc)?;
            }
            "delete" => doc.delete = s.value()?,
            "sources" => {
                let sources: BTreeMap<String, SourceFacts> = s.value()?;
                for (url, facts) in sources {
                    match normalize_source_url(&url).map(|u| (u, facts.check())) {
                        Ok((url, Ok(()))) => {
                            doc.set_facts(url, facts);
                        }
                        Ok((url, Err(why))) => doc.problems.push(format!("sources: {url}: {why}")),
                        Err(e) => doc.problems.push(format!("sources: {e}")),
                    }
                }
            }
            other => {
                doc.problems.push(format!(
                    "unknown top-level key {other:?} (expected \"nodes\", \"sources\" or, to PATCH, \"delete\")"
                ));
                s.skip_value()?;
            }
        }
    }
    if !saw_nodes {
        doc.problems.push(r#"the document has no "nodes""#);
    }
    Ok(())
}

fn read_nodes<R: Read>(s: &mut JsonStream<R>, doc: &mut Document) -> Result<(), json_stream::Error> {
    s.begin_object("an object of nodes by path")?;
    let (mut first, mut path) = (true, String::new());
    let mut paths = PathCache::new();
    while s.next_key(&mut first, &mut path)? {
        let node = read_node(s, doc, &path, &mut paths)?;
        if doc.nodes.insert(path.clone(), node).is_some() {
            doc.problems.push(format!("node {path:?} appears twice"));
        }
    }
    Ok(())
}

/// One node: its `zarr.json` keys as they are, its `manifest` read reference by reference.
fn read_node<R: Read>(
    s: &mut JsonStream<R>,
    doc: &mut Document,
    path: &str,
    paths: &mut PathCache,
) -> Result<DocNode, json_stream::Error> {
    s.begin_object(&format!("node {path:?} as a zarr.json object"))?;
    let (mut first, mut key) = (true, String::new());
    let mut metadata = Map::new();
    let mut manifest: Option<RawManifest> = None;
    while s.next_key(&mut first, &mut key)? {
        if key != "manifest" {
            metadata.insert(key.clone(), s.value::<Value>()?);
        } else if manifest.is_some() {
            doc.problems.push(format!("node {path:?}: \"manifest\" appears twice"));
            s.skip_value()?;
        } else {
            let mut target = doc.new_manifest();
            read_manifest(s, doc, path, paths, &mut target)?;
            manifest = Some(target);
        }
    }
    Ok(DocNode::new(&metadata, manifest))
}

fn read_manifest<R: Read>(
    s: &mut JsonStream<R>,
    doc: &mut Document,
    path: &str,
    paths: &mut PathCache,
    manifest: &mut RawManifest,
) -> Result<(), json_stream::Error> {
    s.begin_object(&format!("the manifest of array {path:?}: an object of chunk references"))?;
    let (mut first, mut key) = (true, String::new());
    let mut indices = Vec::new();
    while s.next_key(&mut first, &mut key)? {
        let urls = &mut doc.urls;
        let entry = s.with_value(|de| EntrySeed { urls, paths }.deserialize(de))?;
        if !chunk_indices(&key, &mut indices) {
            doc.problems.push(format!("array {path:?}: manifest key {key:?} is not chunk indices joined by '.'"));
            continue;
        }
        match entry {
            Ok(EntryValue::Missing) => manifest.push(&indices, RawRef::Clear),
            Ok(EntryValue::Inline(bytes)) => manifest.push_inline(&indices, &bytes),
            Ok(EntryValue::Virtual { url, offset, length }) => {
                manifest.push(&indices, RawRef::Virtual { url, offset, length });
            }
            Err(problem) => doc.problems.push(format!("array {path:?}, chunk {key:?}: {problem}")),
        }
    }
    Ok(())
}

/// Reads a manifest key (`"1.0.2"`, `""` for 0-d) into `indices`; false when it is not chunk
/// indices joined by `.` (or has more than 255).
fn chunk_indices(key: &str, indices: &mut Vec<u64>) -> bool {
    indices.clear();
    if key.is_empty() {
        return true;
    }
    for part in key.split('.') {
        match (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())).then(|| part.parse::<u64>()) {
            Some(Ok(i)) if indices.len() < 255 => indices.push(i),
            _ => return false,
        }
    }
    true
}

/// The URL number of every reference path seen in the document, or why it cannot be used: a
/// manifest repeats a few paths millions of times, and normalising a path is the costliest
/// thing about a reference.
pub(super) type PathCache = HashMap<Box<str>, Result<u32, String>>;

/// One manifest entry: `{"path", "offset", "length"}` or `{"data"}`.
struct EntrySeed<'a> {
    urls: &'a mut UrlTable,
    paths: &'a mut PathCache,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Path,
    Offset,
    Length,
    Data,
}

enum EntryValue {
    Missing,
    Inline(Vec<u8>),
    Virtual { url: u32, offset: u64, length: u64 },
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Result<EntryValue, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Result<EntryValue, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a chunk reference {"path", "offset", "length"} or {"data"}"#)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut path, mut offset, mut length, mut data) = (None, None, None, None);
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Path => {
                    path = Some(map.next_value_seed(PathSeed { urls: &mut *self.urls, paths: &mut *self.paths })?)
                }
                Field::Offset => offset = map.next_value::<Option<serde_json::Number>>()?,
                Field::Length => length = map.next_value::<Option<serde_json::Number>>()?,
                Field::Data => data = map.next_value::<Option<String>>()?,
            }
        }
        Ok(read_entry(path.flatten(), offset, length, data))
    }
}

/// A reference's `path`, normalised and numbered once per distinct text: `Ok(None)` for `""` (a
/// missing chunk) or `null`.
struct PathSeed<'a> {
    urls: &'a mut UrlTable,
    paths: &'a mut PathCache,
}

impl<'de> DeserializeSeed<'de> for PathSeed<'_> {
    type Value = Option<Result<Option<u32>, String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PathSeed<'_> {
    type Value = Option<Result<Option<u32>, String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a path or URL")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: serde::de::Error>(self, path: &str) -> Result<Self::Value, E> {
        if path.is_empty() {
            return Ok(Some(Ok(None)));
        }
        if let Some(known) = self.paths.get(path) {
            return Ok(Some(known.clone().map(Some)));
        }
        let numbered = normalize_source_url(path).map(|url| self.urls.intern(url)).map_err(|e| e.to_string());
        self.paths.insert(path.into(), numbered.clone());
        Ok(Some(numbered.map(Some)))
    }
}

fn read_entry(
    path: Option<Result<Option<u32>, String>>,
    offset: Option<serde_json::Number>,
    length: Option<serde_json::Number>,
    data: Option<String>,
) -> Result<EntryValue, String> {
    match (path, data) {
        (None, Some(data)) if offset.is_none() && length.is_none() => BASE64
            .decode(data.as_bytes())
            .map(EntryValue::Inline)
            .map_err(|e| format!("\"data\" is not valid base64 ({e})")),
        (_, Some(_)) => Err("has both \"data\" and \"path\"/\"offset\"/\"length\"".into()),
        (Some(Ok(None)), None) => Ok(EntryValue::Missing),
        (Some(Err(why)), None) => Err(why),
        (Some(Ok(Some(url))), None) => {
            let number = |n: Option<serde_json::Number>, name: &str| match n {
                None => Err(format!("\"{name}\" is missing")),
                Some(n) => n.as_u64().ok_or_else(|| format!("\"{name}\" {n} is not a non-negative integer")),
            };
            let (offset, length) = (number(offset, "offset")?, number(length, "length")?);
            if offset.checked_add(length).is_none() {
                return Err(format!("offset {offset} + length {length} overflows"));
            }
            Ok(EntryValue::Virtual { url, offset, length })
        }
        (None, None) => Err("has neither \"path\" nor \"data\"".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nodes_manifests_and_sources() {
        let doc = parse_slice(
            br#"{"nodes": {
                "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "demo"}},
                "air": {"zarr_format": 3, "node_type": "array", "shape": [2],
                        "manifest": {"0": {"path": "/data/a.nc", "offset": 10, "length": 20},
                                     "1": {"data": "aGVsbG8="},
                                     "2": {"path": ""}}}},
              "sources": {"/data/a.nc": {"etag": "e", "size": 100}}}"#,
        )
        .unwrap();
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
        assert_eq!(doc.nodes.len(), 2);
        let air = &doc.nodes["air"];
        assert!(!air.metadata().contains_key("manifest"));
        let m = air.manifest.as_ref().unwrap();
        let entries = m.entries().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].1, RawRef::Clear, "an explicit missing chunk");
        assert_eq!(entries[0], (vec![0u64], RawRef::Virtual { url: 0, offset: 10, length: 20 }));
        let mut bytes = Vec::new();
        m.inline_bytes(0, 5, &mut bytes).unwrap();
        assert_eq!(bytes, b"hello");
        assert_eq!(doc.urls.get(0), "file:///data/a.nc");
        assert_eq!(doc.facts("file:///data/a.nc").unwrap().size, Some(100));
    }

    #[test]
    fn lists_every_bad_entry() {
        let doc = parse_slice(
            br#"{"nodes": {"a": {"manifest": {
                "x": {"path": "/d/a", "offset": 0, "length": 1},
                "0": {"path": "rel.nc", "offset": 0, "length": 1},
                "1": {"path": "/d/a", "offset": -1, "length": 1},
                "2": {"data": "!!"},
                "3": {}}}}, "extra": 1}"#,
        )
        .unwrap();
        let problems = doc.problems.into_vec();
        assert_eq!(problems.len(), 6, "{problems:#?}");
        assert!(problems[0].contains(r#"manifest key "x""#));
        assert!(problems[1].contains("relative path"));
        assert!(problems[2].contains("\"offset\" -1 is not a non-negative integer"));
        assert!(problems[3].contains("base64"));
        assert!(problems[4].contains("neither"));
        assert!(problems[5].contains("unknown top-level key \"extra\""));
    }

    #[test]
    fn declared_facts_must_be_printable() {
        let doc = parse_slice(br#"{"nodes": {}, "sources": {"/d/a": {"etag": "a\u0000b"}, "/d/b": {"last_modified": "x\ny"}, "/d/c": {"etag": "\"ok\""}}}"#).unwrap();
        let problems = doc.problems.into_vec();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("file:///d/a: etag"), "{problems:?}");
        assert!(problems[1].contains("last_modified"), "{problems:?}");
    }

    #[test]
    fn syntax_errors_say_where() {
        let err = parse_slice(br#"{"nodes": {"a": 5}}"#).unwrap_err().to_string();
        assert!(err.contains("line 1 column"), "{err}");
        assert!(parse_slice(b"{").is_err());
        assert!(parse_slice(br#"{"nodes": {}} trailing"#).is_err());
    }

    #[test]
    fn reader_and_slice_agree() {
        let text = br#"{"nodes": {"a": {"manifest": {"0.1": {"path": "s3://b/k", "offset": 1, "length": 2}}}}}"#;
        let a = parse_slice(text).unwrap();
        let b = parse_reader(&text[..], &Scratch::in_memory()).unwrap();
        let entries = |d: &Document| d.nodes["a"].manifest.as_ref().unwrap().entries().unwrap();
        assert_eq!(entries(&a), entries(&b));
    }
}

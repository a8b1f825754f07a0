//! Streaming reader of the native manifest document (`{"nodes": {...}, "sources": {...}}`):
//! references go straight into compact per-array buffers, never into a JSON tree.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::document::{DocNode, Document, Problems, SourceFacts, UrlTable};
use super::manifest::{RawManifest, RawRef, normalize_source_url, split_manifest_key};
use super::spill::Scratch;

/// Base64 as Python writes it, padding optional.
pub const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The document is not JSON, or not shaped like a native manifest.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(#[from] pub serde_json::Error);

/// Reads a native document from `reader` as it arrives, its references kept in `scratch`.
pub fn parse_reader(reader: impl std::io::Read, scratch: &Scratch) -> Result<Document, SyntaxError> {
    let mut doc = Document::new(scratch);
    let mut de = serde_json::Deserializer::from_reader(reader);
    DocumentSeed(&mut doc).deserialize(&mut de)?;
    de.end()?;
    Ok(doc)
}

/// Reads a native document held in memory.
pub fn parse_slice(bytes: &[u8]) -> Result<Document, SyntaxError> {
    let mut doc = Document::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    DocumentSeed(&mut doc).deserialize(&mut de)?;
    de.end()?;
    Ok(doc)
}

struct DocumentSeed<'a>(&'a mut Document);

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a manifest document {"nodes": {...}}"#)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let doc = self.0;
        let mut saw_nodes = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "nodes" => {
                    saw_nodes = true;
                    map.next_value_seed(NodesSeed(doc))?;
                }
                "delete" => doc.delete = map.next_value()?,
                "sources" => {
                    let sources: BTreeMap<String, SourceFacts> = map.next_value()?;
                    for (url, facts) in sources {
                        match normalize_source_url(&url).map(|u| (u, facts.check())) {
                            Ok((url, Ok(()))) => {
                                doc.sources.insert(url, facts);
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
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_nodes {
            doc.problems.push(r#"the document has no "nodes""#);
        }
        Ok(())
    }
}

struct NodesSeed<'a>(&'a mut Document);

impl<'de> DeserializeSeed<'de> for NodesSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for NodesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of nodes by path")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let doc = self.0;
        while let Some(path) = map.next_key::<String>()? {
            let seed = NodeSeed {
                path: &path,
                urls: &mut doc.urls,
                problems: &mut doc.problems,
                manifest: RawManifest::new(&doc.scratch),
            };
            let node = map.next_value_seed(seed)?;
            if doc.nodes.insert(path.clone(), node).is_some() {
                doc.problems.push(format!("node {path:?} appears twice"));
            }
        }
        Ok(())
    }
}

struct NodeSeed<'a> {
    path: &'a str,
    urls: &'a mut UrlTable,
    problems: &'a mut Problems,
    /// Where the node's manifest goes, if it has one.
    manifest: RawManifest,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = DocNode;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DocNode, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = DocNode;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "node {:?} as a zarr.json object", self.path)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DocNode, A::Error> {
        let mut metadata = Map::new();
        let mut manifest = Some(self.manifest);
        let mut seen = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "manifest" {
                let Some(target) = manifest.as_mut().filter(|_| !seen) else {
                    self.problems.push(format!("node {:?}: \"manifest\" appears twice", self.path));
                    map.next_value::<IgnoredAny>()?;
                    continue;
                };
                seen = true;
                map.next_value_seed(ManifestSeed {
                    path: self.path,
                    urls: self.urls,
                    problems: self.problems,
                    target,
                })?;
            } else {
                let value: Value = map.next_value()?;
                metadata.insert(key, value);
            }
        }
        Ok(DocNode { metadata, manifest: manifest.filter(|_| seen) })
    }
}

struct ManifestSeed<'a> {
    path: &'a str,
    urls: &'a mut UrlTable,
    problems: &'a mut Problems,
    target: &'a mut RawManifest,
}

impl<'de> DeserializeSeed<'de> for ManifestSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// One manifest entry: `{"path", "offset", "length"}` or `{"data"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    path: Option<String>,
    offset: Option<serde_json::Number>,
    length: Option<serde_json::Number>,
    data: Option<String>,
}

impl<'de> Visitor<'de> for ManifestSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "the manifest of array {:?}: an object of chunk references", self.path)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let manifest = self.target;
        while let Some(key) = map.next_key::<String>()? {
            let entry: Entry = map.next_value()?;
            let Some(indices) = split_manifest_key(&key) else {
                self.problems
                    .push(format!("array {:?}: manifest key {key:?} is not chunk indices joined by '.'", self.path));
                continue;
            };
            let at = || format!("array {:?}, chunk {key:?}", self.path);
            match read_entry(entry) {
                Ok(EntryValue::Missing) => manifest.push(&indices, RawRef::Clear),
                Ok(EntryValue::Inline(bytes)) => manifest.push_inline(&indices, &bytes),
                Ok(EntryValue::Virtual { url, offset, length }) => {
                    let url = self.urls.intern(url);
                    manifest.push(&indices, RawRef::Virtual { url, offset, length });
                }
                Err(problem) => self.problems.push(format!("{}: {problem}", at())),
            }
        }
        Ok(())
    }
}

enum EntryValue {
    Missing,
    Inline(Vec<u8>),
    Virtual { url: String, offset: u64, length: u64 },
}

fn read_entry(entry: Entry) -> Result<EntryValue, String> {
    match entry {
        Entry { data: Some(data), path: None, offset: None, length: None } => BASE64
            .decode(data.as_bytes())
            .map(EntryValue::Inline)
            .map_err(|e| format!("\"data\" is not valid base64 ({e})")),
        Entry { data: Some(_), .. } => Err("has both \"data\" and \"path\"/\"offset\"/\"length\"".into()),
        Entry { path: Some(path), .. } if path.is_empty() => Ok(EntryValue::Missing),
        Entry { path: Some(path), offset, length, data: None } => {
            let url = normalize_source_url(&path).map_err(|e| e.to_string())?;
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
        Entry { path: None, .. } => Err("has neither \"path\" nor \"data\"".into()),
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
        assert!(!air.metadata.contains_key("manifest"));
        let m = air.manifest.as_ref().unwrap();
        let entries = m.entries().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].1, RawRef::Clear, "an explicit missing chunk");
        assert_eq!(entries[0], (vec![0u64], RawRef::Virtual { url: 0, offset: 10, length: 20 }));
        let mut bytes = Vec::new();
        m.inline_bytes(0, 5, &mut bytes).unwrap();
        assert_eq!(bytes, b"hello");
        assert_eq!(doc.urls.get(0), "file:///data/a.nc");
        assert_eq!(doc.sources["file:///data/a.nc"].size, Some(100));
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

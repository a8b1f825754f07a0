//! Validation of a parsed document into a store ready to be written: every problem is
//! collected, and nothing leaves here unless the whole document is valid.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::block::{BlockBuilder, ManifestBlock};
use super::document::{Document, Problems, SourceFacts};
use super::grid::ChunkLocation;
use super::grid::MAX_TILE_CHUNKS;
use super::key::manifest_key;
use super::manifest::RawRef;
use super::metadata::{ArrayLayout, NodeKind, Tiling, validate_node_tiled};
use super::path::NodePath;

/// A validated node.
#[derive(Debug, Clone)]
pub struct ValidNode {
    /// Its path.
    pub path: NodePath,
    /// Its `zarr.json`, as it will be served (for groups, before consolidation).
    pub metadata: Map<String, Value>,
    /// Group or array (with layout).
    pub kind: NodeKind,
}

/// The located references of one array, sorted by (packed) location: 32 bytes per reference,
/// the largest thing a 10-million-reference registration holds.
#[derive(Debug)]
struct ArrayRefs {
    node: usize,
    layout: ArrayLayout,
    located: Vec<(u64, RawRef)>,
    inline: Vec<u8>,
}

/// Counts that describe a store version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of arrays.
    pub arrays: u64,
    /// Number of groups, the root included.
    pub groups: u64,
    /// Chunks by kind.
    pub chunks: ChunkCounts,
    /// Number of distinct source objects.
    pub sources: u64,
    /// Sum of the lengths of all virtual chunks.
    pub referenced_bytes: u64,
    /// Sum of the lengths of all inline chunks.
    pub inline_bytes: u64,
}

/// Chunks by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChunkCounts {
    /// Chunks read from source objects.
    #[serde(rename = "virtual")]
    pub virtual_: u64,
    /// Chunks stored in the manifest.
    pub inline: u64,
    /// Chunks of the grid with no reference (read as the fill value).
    pub missing: u64,
}

/// A whole store, valid and ready to be written.
#[derive(Debug)]
pub struct ValidatedStore {
    /// Every node, implicit groups included, sorted by path.
    pub nodes: Vec<ValidNode>,
    arrays: Vec<ArrayRefs>,
    urls: Vec<String>,
    etags: Vec<Option<String>>,
    /// Recorded facts of the sources the store uses.
    pub sources: BTreeMap<String, SourceFacts>,
    /// Counts.
    pub summary: Summary,
}

/// Validates `doc` with the default block size. `registered` says whether a source URL falls
/// under a registered object store.
pub fn validate(doc: Document, registered: &dyn Fn(&str) -> bool) -> Result<ValidatedStore, Vec<String>> {
    validate_tiled(doc, registered, MAX_TILE_CHUNKS)
}

/// Validates `doc`, tiling arrays in blocks of at most `tile_chunks` references.
pub fn validate_tiled(
    doc: Document,
    registered: &dyn Fn(&str) -> bool,
    tile_chunks: u64,
) -> Result<ValidatedStore, Vec<String>> {
    let Document { nodes: doc_nodes, urls, sources, mut problems, delete } = doc;
    if !delete.is_empty() {
        problems.push("\"delete\" removes nodes from a stored version: send it with PATCH, not PUT");
    }
    for url in urls.all() {
        if !registered(url) {
            problems.push(format!(
                "{url} is not under any registered object store: register one whose URL is a prefix of it"
            ));
        }
    }
    let mut nodes: BTreeMap<NodePath, ValidNode> = BTreeMap::new();
    let mut manifests = Vec::new();
    for (path_text, mut node) in doc_nodes {
        let path = match NodePath::new(&path_text) {
            Ok(p) => p,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        match validate_node_tiled(&mut node.metadata, Tiling::New(tile_chunks)) {
            Ok(kind) => {
                if let Some(manifest) = node.manifest.take() {
                    match kind {
                        NodeKind::Array(_) => manifests.push((path.clone(), manifest)),
                        NodeKind::Group => problems.push(format!("node {path}: a group cannot have a manifest")),
                    }
                }
                nodes.insert(path.clone(), ValidNode { path, metadata: node.metadata, kind });
            }
            Err(list) => list.into_iter().for_each(|p| problems.push(format!("node {path}: {p}"))),
        }
    }
    add_implicit_groups(&mut nodes, &mut problems);
    let nodes: Vec<ValidNode> = nodes.into_values().collect();

    let mut arrays = Vec::new();
    for (path, manifest) in manifests {
        let Ok(node) = nodes.binary_search_by(|n| n.path.cmp(&path)) else { continue };
        let NodeKind::Array(layout) = &nodes[node].kind else { continue };
        let grid = &layout.grid;
        let mut located = Vec::with_capacity(manifest.len());
        for (indices, r) in manifest.entries().filter(|(_, r)| *r != RawRef::Clear) {
            let coords: &[u64] = if grid.ndim() == 0 && indices == [0] { &[] } else { indices };
            let Some(location) = grid.locate(coords) else {
                problems.push(format!(
                    "array {path}: chunk key {} is outside the chunk grid {:?}",
                    display_key(indices),
                    grid.grid_shape()
                ));
                continue;
            };
            if let Err(p) = check_ref(r, &urls, &sources) {
                problems.push(format!("array {path}, chunk {}: {p}", display_key(indices)));
                continue;
            }
            let Some(packed) = location.pack() else {
                problems.push(format!("array {path}: its chunk grid {:?} has too many tiles", grid.grid_shape()));
                break;
            };
            located.push((packed, r));
        }
        located.sort_unstable_by_key(|(packed, _)| *packed);
        for pair in located.windows(2) {
            if pair[0].0 == pair[1].0 {
                let key =
                    grid.coords_of(ChunkLocation::unpack(pair[0].0)).map(|c| manifest_key(&c)).unwrap_or_default();
                problems.push(format!("array {path}: chunk {key:?} appears more than once"));
            }
        }
        arrays.push(ArrayRefs { node, layout: layout.clone(), located, inline: manifest.inline });
    }
    if !problems.is_empty() {
        return Err(problems.into_vec());
    }
    let urls = urls.all().to_vec();
    let sources: BTreeMap<String, SourceFacts> = sources.into_iter().filter(|(u, _)| urls.contains(u)).collect();
    let etags = urls.iter().map(|u| sources.get(u).and_then(|f| f.etag.clone())).collect();
    let summary = summarise(&nodes, &arrays, urls.len());
    Ok(ValidatedStore { nodes, arrays, urls, etags, sources, summary })
}

pub(super) fn display_key(indices: &[u64]) -> String {
    format!("{:?}", manifest_key(indices))
}

pub(super) fn check_ref(
    r: RawRef,
    urls: &super::document::UrlTable,
    sources: &BTreeMap<String, SourceFacts>,
) -> Result<(), String> {
    let RawRef::Virtual { url, offset, length } = r else { return Ok(()) };
    if length == super::kerchunk::WHOLE_OBJECT {
        // A [url] reference whose object could not be asked: that problem is already listed.
        return Err("its object's length is unknown".into());
    }
    if length > u64::from(u32::MAX) {
        return Err(format!("length {length} is above the 4 GiB a chunk may have"));
    }
    let url = urls.get(url);
    if let Some(size) = sources.get(url).and_then(|f| f.size)
        && offset + length > size
    {
        return Err(format!("bytes {offset}..{} lie beyond the end of {url} ({size} bytes)", offset + length));
    }
    Ok(())
}

pub(super) fn add_implicit_groups(nodes: &mut BTreeMap<NodePath, ValidNode>, problems: &mut Problems) {
    let paths: Vec<NodePath> = nodes.keys().cloned().collect();
    for path in paths {
        let mut parent = path.parent();
        while let Some(p) = parent {
            match nodes.get(&p) {
                Some(ValidNode { kind: NodeKind::Array(_), .. }) => {
                    problems.push(format!("node {path} is inside array {p}: arrays have no children"));
                    break;
                }
                Some(_) => {}
                None => {
                    let metadata = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
                    let metadata = metadata.as_object().cloned().unwrap_or_default();
                    nodes.insert(p.clone(), ValidNode { path: p.clone(), metadata, kind: NodeKind::Group });
                }
            }
            parent = p.parent();
        }
    }
    nodes.entry(NodePath::root()).or_insert_with(|| {
        let metadata = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        ValidNode {
            path: NodePath::root(),
            metadata: metadata.as_object().cloned().unwrap_or_default(),
            kind: NodeKind::Group,
        }
    });
}

fn summarise(nodes: &[ValidNode], arrays: &[ArrayRefs], sources: usize) -> Summary {
    let mut s = Summary { sources: sources as u64, ..Summary::default() };
    for node in nodes {
        match &node.kind {
            NodeKind::Group => s.groups += 1,
            NodeKind::Array(layout) => {
                s.arrays += 1;
                s.chunks.missing = s.chunks.missing.saturating_add(layout.grid.chunk_count());
            }
        }
    }
    for a in arrays {
        for (_, r) in &a.located {
            match *r {
                RawRef::Virtual { length, .. } => {
                    s.chunks.virtual_ += 1;
                    s.referenced_bytes += length;
                }
                RawRef::Inline { len, .. } => {
                    s.chunks.inline += 1;
                    s.inline_bytes += len;
                }
                RawRef::Clear => {}
            }
        }
        s.chunks.missing = s.chunks.missing.saturating_sub(a.located.len() as u64);
    }
    s
}

/// One block to store: the references of `tile` of the array at `node`.
#[derive(Debug)]
pub struct NewBlock<'a> {
    /// The array's path.
    pub node: &'a NodePath,
    /// The tile's index.
    pub tile: u64,
    /// The references.
    pub block: ManifestBlock,
}

impl ValidatedStore {
    /// Every non-empty block, array by array, tile by tile.
    pub fn blocks(&self) -> impl Iterator<Item = NewBlock<'_>> + '_ {
        self.arrays.iter().flat_map(move |a| {
            let node = &self.nodes[a.node].path;
            let tile_len = a.layout.grid.tile_len();
            a.located.chunk_by(|x, y| ChunkLocation::unpack(x.0).tile == ChunkLocation::unpack(y.0).tile).map(
                move |run| {
                    let mut builder = BlockBuilder::new(tile_len);
                    for (packed, r) in run {
                        let loc = ChunkLocation::unpack(*packed);
                        match *r {
                            RawRef::Virtual { url, offset, length } => {
                                let etag = self.etags[url as usize].as_deref();
                                builder.push_virtual(loc.slot, &self.urls[url as usize], etag, offset, length as u32);
                            }
                            RawRef::Inline { start, len } => {
                                builder.push_inline(loc.slot, &a.inline[start as usize..(start + len) as usize]);
                            }
                            RawRef::Clear => {}
                        }
                    }
                    NewBlock { node, tile: ChunkLocation::unpack(run[0].0).tile, block: builder.finish() }
                },
            )
        })
    }

    /// The source URLs the store references.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::block::ChunkRef;
    use crate::zarr::native::parse_slice;

    const AIR: &str = r#""zarr_format": 3, "node_type": "array", "shape": [10, 4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]"#;

    fn doc(manifest: &str) -> Document {
        parse_slice(format!(r#"{{"nodes": {{"g/air": {{{AIR}, "manifest": {manifest}}}}}}}"#).as_bytes()).unwrap()
    }

    #[test]
    fn builds_blocks_and_implicit_groups() {
        let store = validate(
            doc(r#"{"1.1": {"path": "/d/a.nc", "offset": 8, "length": 4}, "0.0": {"data": "AAAAAA=="}}"#),
            &|u| u.starts_with("file:///d/"),
        )
        .unwrap();
        let paths: Vec<&str> = store.nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["", "g", "g/air"]);
        assert_eq!(store.summary.chunks, ChunkCounts { virtual_: 1, inline: 1, missing: 2 });
        assert_eq!((store.summary.arrays, store.summary.groups, store.summary.referenced_bytes), (1, 2, 4));
        let blocks: Vec<_> = store.blocks().collect();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].block.get(0), ChunkRef::Inline(bytes::Bytes::from_static(&[0, 0, 0, 0])));
        assert!(matches!(blocks[0].block.get(3), ChunkRef::Virtual { offset: 8, length: 4, .. }));
    }

    #[test]
    fn lists_every_problem() {
        let problems = validate(
            doc(r#"{"2.0": {"path": "/d/a.nc", "offset": 0, "length": 4},
                    "0.0": {"path": "/elsewhere/b.nc", "offset": 0, "length": 4},
                    "0.1": {"path": "/d/a.nc", "offset": 0, "length": 5000000000}}"#),
            &|u| u.starts_with("file:///d/"),
        )
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("file:///elsewhere/b.nc is not under any registered object store"));
        assert!(problems.iter().any(|p| p.contains(r#"chunk key "2.0" is outside the chunk grid [2, 2]"#)));
        assert!(problems.iter().any(|p| p.contains("4 GiB")));
    }

    #[test]
    fn rejects_duplicates_children_of_arrays_and_groups_with_manifests() {
        let dup = parse_slice(
            format!(r#"{{"nodes": {{"z": {{{}, "shape": [], "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": []}}}},
                "manifest": {{"": {{"data": "AA=="}}, "0": {{"data": "AA=="}}}}}}}}}}"#,
                r#""zarr_format": 3, "node_type": "array", "data_type": "uint8", "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]"#)
            .as_bytes(),
        )
        .unwrap();
        let problems = validate(dup, &|_| true).unwrap_err();
        assert!(problems[0].contains("appears more than once"), "{problems:?}");

        let nested = parse_slice(
            format!(
                r#"{{"nodes": {{"a": {{{AIR}}}, "a/b": {{"zarr_format": 3, "node_type": "group"}},
            "g": {{"zarr_format": 3, "node_type": "group", "manifest": {{}}}}}}}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let problems = validate(nested, &|_| true).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("node a/b is inside array a")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("a group cannot have a manifest")), "{problems:?}");
    }

    #[test]
    fn declared_sizes_are_checked() {
        let d = parse_slice(
            format!(
                r#"{{"nodes": {{"a": {{{AIR}, "manifest": {{"0.0": {{"path": "/d/a", "offset": 90, "length": 20}}}}}}}},
            "sources": {{"/d/a": {{"size": 100, "etag": "\"x\""}}}}}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let problems = validate(d, &|_| true).unwrap_err();
        assert!(problems[0].contains("beyond the end of file:///d/a (100 bytes)"), "{problems:?}");
    }
}

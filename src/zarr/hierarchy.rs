//! The served view of one store version: every node's rendered `zarr.json` and the resolution
//! of store keys. The root carries the consolidated metadata of every descendant; other groups
//! carry that of their own subtree while those documents together stay within a budget.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::consolidated::{Listings, plain_group_document};
use super::grid::ChunkLocation;
use super::metadata::{ArrayLayout, NodeKind, node_kind};
use super::path::NodePath;

/// A node's metadata, parsed.
type Metadata = Map<String, Value>;

/// A node as stored: path, metadata, and for arrays the tile shape they were stored with.
pub type StoredNode = (NodePath, Map<String, Value>, Option<Vec<u64>>);

/// One node of a version.
#[derive(Debug)]
pub struct Node {
    /// Its position in path order, stable for a version: a compact key for its blocks.
    pub index: u32,
    /// Its path.
    pub path: NodePath,
    /// A group's metadata as stored (without consolidated metadata); `None` for an array, whose
    /// `zarr_json` is exactly its metadata.
    group_metadata: Option<Map<String, Value>>,
    /// Group, or array with layout.
    pub kind: NodeKind,
    /// The `zarr.json` served for it.
    pub zarr_json: Bytes,
    /// An array served with other codecs than the stored ones (a store with portable codecs):
    /// its metadata as stored, whose codecs its chunks' bytes are in.
    source: Option<Box<str>>,
}

impl Node {
    /// Its metadata as served (without consolidated metadata). A group's is kept; an array's is
    /// read back from its `zarr.json`, when an export, a fill chunk or a PATCH needs it: arrays
    /// are most of a large store's nodes, and their parsed metadata took about 7 KiB each (a
    /// view of 100,000 arrays held 741 MB of it).
    pub fn metadata(&self) -> Cow<'_, Map<String, Value>> {
        self.parsed(&self.zarr_json)
    }

    /// Its metadata as stored: what its chunks' bytes are encoded as, and what an export or a
    /// PATCH starts from. The served [`Node::metadata`] but for an array transcoded to portable
    /// codecs ([`Node::transcoded`]).
    pub fn stored_metadata(&self) -> Cow<'_, Map<String, Value>> {
        match &self.source {
            Some(text) => self.parsed(text.as_bytes()),
            None => self.metadata(),
        }
    }

    /// For an array served with portable codecs in place of its own: its metadata as stored.
    pub fn transcoded(&self) -> Option<&str> {
        self.source.as_deref()
    }

    fn parsed(&self, zarr_json: &[u8]) -> Cow<'_, Map<String, Value>> {
        match &self.group_metadata {
            Some(metadata) => Cow::Borrowed(metadata),
            None => Cow::Owned(match serde_json::from_slice(zarr_json) {
                Ok(Value::Object(metadata)) => metadata,
                // Rendered from a map by `build`: it always reads back as one.
                _ => Map::new(),
            }),
        }
    }
}

/// What a store key names.
#[derive(Debug)]
pub enum Resolved<'a> {
    /// A node's `zarr.json`.
    Metadata(&'a Node),
    /// A chunk of an array.
    Chunk {
        /// The array.
        node: &'a Node,
        /// Its layout.
        layout: &'a ArrayLayout,
        /// The chunk's grid coordinates.
        coords: Vec<u64>,
        /// Where its reference is stored.
        location: ChunkLocation,
    },
    /// Nothing: the reason, for a person reading the 404.
    NotFound(String),
}

/// All nodes of a version, by path.
#[derive(Debug)]
pub struct Hierarchy {
    /// In path order.
    nodes: Vec<Node>,
    /// Position in `nodes` by path.
    /// foldhash, not SipHash: looked up on every read, with paths a client chooses but cannot
    /// insert (registration does), so there is no table for a client to fill with collisions
    /// (callgrind: 230 instructions a lookup with SipHash).
    by_path: HashMap<String, u32, foldhash::fast::RandomState>,
}

impl Hierarchy {
    /// Builds the view from stored nodes (validated at registration): path, metadata, and for
    /// arrays the tile shape they were stored with. Groups below the root carry the consolidated
    /// metadata of their subtree when their documents together take at most
    /// `max_nested_metadata_bytes` (in a deep hierarchy every node is listed once per ancestor;
    /// past that, readers find it in the root's). Time and memory are linear in the nodes and
    /// their metadata, plus that budget.
    pub fn build(stored: Vec<StoredNode>, max_nested_metadata_bytes: u64) -> Result<Self, String> {
        Self::build_with(stored, |meta| Ok((meta, None)), max_nested_metadata_bytes, 0)
    }

    /// As [`Hierarchy::build`], with each node's metadata as the compact JSON text the catalog
    /// holds (see [`Hierarchy::build_with`]).
    pub fn build_from_text(
        stored: Vec<(NodePath, String, Option<Vec<u64>>)>,
        max_nested_metadata_bytes: u64,
    ) -> Result<Self, String> {
        // The entries are the nodes' texts: as long, give or take a group's empty listing (a
        // hint, so that their one buffer is not grown by doubling and copying).
        let hint = stored.iter().map(|(_, text, _)| text.len() + 96).sum();
        // The catalog holds what `serde_json` wrote of the validated metadata (compact, each
        // key once): an array's entry is that text as it is, not parsed and written again.
        let parse = |text: String| match serde_json::from_str::<Map<String, Value>>(&text) {
            Ok(meta) => Ok((meta, Some(text))),
            Err(e) => Err(format!("stored metadata: {e}")),
        };
        Self::build_with(stored, parse, max_nested_metadata_bytes, hint)
    }

    /// As [`Hierarchy::build_from_text`], each array served with the metadata `serve` answers
    /// for its stored metadata, when it answers one (portable codecs): the node keeps the stored
    /// text too ([`Node::stored_metadata`]).
    pub fn build_from_text_serving(
        mut stored: Vec<(NodePath, String, Option<Vec<u64>>)>,
        max_nested_metadata_bytes: u64,
        serve: &dyn Fn(&Metadata) -> Option<Metadata>,
    ) -> Result<Self, String> {
        let mut sources: HashMap<String, Box<str>> = HashMap::new();
        for (path, text, _) in &mut stored {
            let Ok(metadata) = serde_json::from_str::<Map<String, Value>>(text) else { continue };
            if metadata.get("node_type").and_then(Value::as_str) != Some("array") {
                continue;
            }
            if let Some(served) = serve(&metadata) {
                let stored_text = std::mem::replace(text, Value::Object(served).to_string());
                sources.insert(path.as_str().to_owned(), stored_text.into_boxed_str());
            }
        }
        let mut hierarchy = Self::build_from_text(stored, max_nested_metadata_bytes)?;
        for node in &mut hierarchy.nodes {
            node.source = sources.remove(node.path.as_str());
        }
        Ok(hierarchy)
    }

    /// As [`Hierarchy::build`], with each node's metadata in a form `T` (its JSON text, as the
    /// catalog holds it) that `parse` reads one node at a time, into the parsed map and, when
    /// `T` is such text, the text itself (an array's entry then); and about `rendered_hint`
    /// bytes of entries expected. Only the groups' parsed metadata is kept, so a hierarchy of
    /// 100,000 arrays never holds 100,000 parsed maps at once.
    fn build_with<T>(
        mut stored: Vec<(NodePath, T, Option<Vec<u64>>)>,
        parse: impl Fn(T) -> Result<(Map<String, Value>, Option<String>), String>,
        max_nested_metadata_bytes: u64,
        rendered_hint: usize,
    ) -> Result<Self, String> {
        stored.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        stored.dedup_by(|a, b| a.0 == b.0);
        if u32::try_from(stored.len()).is_err() {
            return Err("more than 2^32 nodes".to_owned());
        }
        let mut paths = Vec::with_capacity(stored.len());
        let mut rest = Vec::with_capacity(stored.len());
        for (path, meta, tile) in stored {
            paths.push(path);
            rest.push((meta, tile));
        }
        let mut listings = Listings::empty(true);
        listings.reserve(rendered_hint);
        let mut kinds = Vec::with_capacity(paths.len());
        let mut groups = Vec::with_capacity(paths.len());
        for (path, (meta, tile)) in paths.iter().zip(rest) {
            let (mut meta, text) = parse(meta).map_err(|e| format!("node {path}: {e}"))?;
            let kind = node_kind(&meta, tile.as_deref()).map_err(|e| format!("node {path}: {e}"))?;
            let group = kind == NodeKind::Group;
            match text {
                Some(text) if !group => listings.push_array_text(path.as_str(), &text),
                _ => {
                    if group {
                        // The server writes its own (validation drops any given); `retain`
                        // keeps the order.
                        meta.retain(|k, _| k != "consolidated_metadata");
                    }
                    listings.push(path.as_str(), &meta, group);
                }
            }
            kinds.push(kind);
            groups.push(group.then_some(meta));
        }
        let rendered = render(listings, &paths, &kinds, &groups, max_nested_metadata_bytes);
        let nodes: Vec<Node> = paths
            .into_iter()
            .zip(kinds)
            .zip(groups)
            .zip(rendered)
            .enumerate()
            .map(|(index, (((path, kind), group_metadata), zarr_json))| Node {
                index: index as u32,
                path,
                group_metadata,
                kind,
                zarr_json,
                source: None,
            })
            .collect();
        let by_path = nodes.iter().map(|n| (n.path.as_str().to_owned(), n.index)).collect();
        Ok(Self { nodes, by_path })
    }

    /// Every node, sorted by path.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> + '_ {
        self.nodes.iter()
    }

    /// The node at `path`.
    pub fn node(&self, path: &str) -> Option<&Node> {
        self.by_path.get(path).map(|&i| &self.nodes[i as usize])
    }

    /// The node at `index` (its [`Node::index`]).
    pub fn node_at(&self, index: u32) -> Option<&Node> {
        self.nodes.get(index as usize)
    }

    /// Approximate heap footprint, for the metadata cache's weigher: documents, paths (twice:
    /// the node and the index), a group's parsed metadata (about four times its text), layouts.
    pub fn weight(&self) -> usize {
        let group = |n: &Node| n.group_metadata.as_ref().map_or(0, |_| 4 * n.zarr_json.len().min(64 << 10) + 512);
        let source = |n: &Node| n.source.as_ref().map_or(0, |s| s.len());
        self.nodes.iter().map(|n| n.zarr_json.len() + source(n) + n.path.as_str().len() * 2 + group(n) + 256).sum()
    }

    /// What `key` (normalised: no leading `/`, no empty segments) names.
    pub fn resolve(&self, key: &str) -> Resolved<'_> {
        if key == "zarr.json" {
            return self.metadata("");
        }
        if let Some(path) = key.strip_suffix("/zarr.json") {
            return self.metadata(path);
        }
        if let Some(root) = self.node("").filter(|n| matches!(n.kind, NodeKind::Array(_))) {
            return chunk(root, key);
        }
        for (i, _) in key.match_indices('/') {
            match self.node(&key[..i]) {
                Some(node) if matches!(node.kind, NodeKind::Array(_)) => return chunk(node, &key[i + 1..]),
                Some(_) => {}
                None => break,
            }
        }
        Resolved::NotFound(format!("no node or chunk is named {key:?}"))
    }

    fn metadata(&self, path: &str) -> Resolved<'_> {
        match self.node(path) {
            Some(node) => Resolved::Metadata(node),
            None => Resolved::NotFound(format!("no node at {path:?}")),
        }
    }
}

fn chunk<'a>(node: &'a Node, key: &str) -> Resolved<'a> {
    let NodeKind::Array(layout) = &node.kind else {
        return Resolved::NotFound(format!("{} is not an array", node.path));
    };
    let Some(coords) = layout.encoding.parse(key, layout.grid.ndim()) else {
        let example = layout.encoding.encode(&vec![0; layout.grid.ndim()]);
        return Resolved::NotFound(format!(
            "{key:?} is not a chunk key of array {}: its chunks are named like {example:?}, one index per dimension \
             ({} dimensions)",
            node.path,
            layout.grid.ndim()
        ));
    };
    match layout.grid.locate(&coords) {
        Some(location) => Resolved::Chunk { node, layout, coords, location },
        None => Resolved::NotFound(format!(
            "chunk {key:?} is outside the chunk grid {:?} of array {}",
            layout.grid.grid_shape(),
            node.path
        )),
    }
}

/// Every node's `zarr.json`, in path order: arrays their metadata, the root group with the
/// consolidated metadata of every descendant, other groups with that of their subtree if all of
/// theirs fit in `nested_budget` bytes, else without.
fn render(
    listings: Listings<'_>,
    paths: &[NodePath],
    kinds: &[NodeKind],
    groups: &[Option<Map<String, Value>>],
    nested_budget: u64,
) -> Vec<Bytes> {
    let mut nested = 0u64;
    for (i, (path, kind)) in paths.iter().zip(kinds).enumerate() {
        if *kind == NodeKind::Group && !path.is_root() && nested <= nested_budget {
            nested = nested.saturating_add(listings.document_len(i));
        }
    }
    let documents: Vec<Option<Bytes>> = paths
        .iter()
        .zip(kinds)
        .zip(groups)
        .enumerate()
        .map(|(i, ((path, kind), group))| match (kind, group) {
            (NodeKind::Array(_), _) | (_, None) => None,
            (NodeKind::Group, Some(_)) if path.is_root() || nested <= nested_budget => {
                let mut out = Vec::with_capacity(usize::try_from(listings.document_len(i)).unwrap_or(0));
                listings.write_document(i, &mut out);
                Some(Bytes::from(out))
            }
            (NodeKind::Group, Some(metadata)) => Some(Bytes::from(plain_group_document(metadata))),
        })
        .collect();
    // Arrays' documents are their entries, slices of the listings' one buffer.
    listings.into_entries().into_iter().zip(documents).map(|(entry, document)| document.unwrap_or(entry)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn array(shape: Value, chunks: Value, encoding: Value) -> Map<String, Value> {
        json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
               "chunk_key_encoding": encoding, "fill_value": 0, "codecs": [{"name": "bytes"}]})
        .as_object()
        .unwrap()
        .clone()
    }

    fn group() -> Map<String, Value> {
        json!({"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"}}).as_object().unwrap().clone()
    }

    fn sample() -> Hierarchy {
        let arr = |path: &str, shape: Value, chunks: Value, encoding: Value| {
            let ndim = shape.as_array().unwrap().len();
            (NodePath::new(path).unwrap(), array(shape, chunks, encoding), Some(vec![4; ndim]))
        };
        let stored = vec![
            (NodePath::root(), group(), None),
            arr("temp", json!([4, 4]), json!([2, 2]), json!({"name": "default"})),
            (NodePath::new("sub").unwrap(), group(), None),
            arr("sub/inner", json!([4]), json!([2]), json!({"name": "v2"})),
            arr("sub/dots", json!([4]), json!([2]), json!({"name": "default", "configuration": {"separator": "."}})),
            arr("scalar", json!([]), json!([]), json!({"name": "default"})),
        ];
        Hierarchy::build(stored, u64::MAX).unwrap()
    }

    #[test]
    fn root_lists_every_descendant() {
        let h = sample();
        let Resolved::Metadata(root) = h.resolve("zarr.json") else { panic!() };
        let v: Value = serde_json::from_slice(&root.zarr_json).unwrap();
        let listing = v["consolidated_metadata"]["metadata"].as_object().unwrap();
        let keys: Vec<&String> = listing.keys().collect();
        assert_eq!(keys, ["scalar", "sub", "sub/dots", "sub/inner", "temp"]);
        assert_eq!(listing["sub"]["consolidated_metadata"]["metadata"], json!({}));
        assert_eq!(v["attributes"]["title"], "t");
        let Resolved::Metadata(sub) = h.resolve("sub/zarr.json") else { panic!() };
        let v: Value = serde_json::from_slice(&sub.zarr_json).unwrap();
        assert_eq!(v["consolidated_metadata"]["metadata"].as_object().unwrap().len(), 2);
        let Resolved::Metadata(temp) = h.resolve("temp/zarr.json") else { panic!() };
        let v: Value = serde_json::from_slice(&temp.zarr_json).unwrap();
        assert!(v.get("consolidated_metadata").is_none());
    }

    #[test]
    fn resolves_chunk_keys_in_every_encoding() {
        let h = sample();
        let coords = |key: &str| match h.resolve(key) {
            Resolved::Chunk { coords, .. } => Some(coords),
            _ => None,
        };
        assert_eq!(coords("temp/c/1/0"), Some(vec![1, 0]));
        assert_eq!(coords("sub/inner/1"), Some(vec![1]));
        assert_eq!(coords("sub/dots/c.1"), Some(vec![1]));
        assert_eq!(coords("scalar/c"), Some(vec![]));
        assert_eq!(coords("temp/c/2/0"), None);
        assert_eq!(coords("temp/0.0"), None);
        for key in [".zgroup", ".zattrs", ".zmetadata", "temp/.zarray", "nothing/zarr.json", "sub/c/0", "zarr.json/x"] {
            assert!(matches!(h.resolve(key), Resolved::NotFound(_)), "{key}");
        }
        let Resolved::NotFound(why) = h.resolve("temp/c/9/0") else { panic!() };
        assert!(why.contains("outside the chunk grid [2, 2] of array temp"), "{why}");
    }

    #[test]
    fn a_root_array_is_a_store_of_one_array() {
        let root = array(json!([4]), json!([2]), json!({"name": "default"}));
        let h = Hierarchy::build(vec![(NodePath::root(), root, Some(vec![8]))], u64::MAX).unwrap();
        assert!(
            Hierarchy::build(
                vec![(NodePath::root(), array(json!([4]), json!([2]), json!({"name": "default"})), None)],
                u64::MAX
            )
            .is_err()
        );
        assert!(matches!(h.resolve("c/1"), Resolved::Chunk { .. }));
        assert!(matches!(h.resolve("zarr.json"), Resolved::Metadata(_)));
    }
}

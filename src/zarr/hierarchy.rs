//! The served view of one store version: every node's rendered `zarr.json` (groups carry the
//! consolidated metadata of their descendants) and the resolution of store keys.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::grid::ChunkLocation;
use super::metadata::{ArrayLayout, NodeKind, node_kind};
use super::path::NodePath;

/// A node as stored: path, metadata, and for arrays the tile shape they were stored with.
pub type StoredNode = (NodePath, Map<String, Value>, Option<Vec<u64>>);

/// One node of a version.
#[derive(Debug)]
pub struct Node {
    /// Its position in path order, stable for a version: a compact key for its blocks.
    pub index: u32,
    /// Its path.
    pub path: NodePath,
    /// Its metadata as stored (without consolidated metadata).
    pub metadata: Map<String, Value>,
    /// Group, or array with layout.
    pub kind: NodeKind,
    /// The `zarr.json` served for it.
    pub zarr_json: Bytes,
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
    nodes: HashMap<String, Node>,
    sorted: Vec<String>,
}

impl Hierarchy {
    /// Builds the view from stored nodes (validated at registration): path, metadata, and for
    /// arrays the tile shape they were stored with.
    pub fn build(stored: Vec<StoredNode>) -> Result<Self, String> {
        let mut nodes = HashMap::with_capacity(stored.len());
        for (path, metadata, tile) in stored {
            let kind = node_kind(&metadata, tile.as_deref()).map_err(|e| format!("node {path}: {e}"))?;
            nodes.insert(path.as_str().to_owned(), Node { index: 0, path, metadata, kind, zarr_json: Bytes::new() });
        }
        let mut sorted: Vec<String> = nodes.keys().cloned().collect();
        sorted.sort();
        for (i, path) in sorted.iter().enumerate() {
            if let Some(node) = nodes.get_mut(path) {
                node.index = i as u32;
            }
        }
        let mut rendered = Vec::with_capacity(sorted.len());
        for path in &sorted {
            let node = &nodes[path];
            let body = match node.kind {
                NodeKind::Array(_) => Value::Object(node.metadata.clone()),
                NodeKind::Group => consolidated(node, sorted.iter().map(|p| &nodes[p])),
            };
            rendered.push(Bytes::from(serde_json::to_vec(&body).map_err(|e| e.to_string())?));
        }
        for (path, json) in sorted.iter().zip(rendered) {
            if let Some(node) = nodes.get_mut(path) {
                node.zarr_json = json;
            }
        }
        Ok(Self { nodes, sorted })
    }

    /// Every node, sorted by path.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> + '_ {
        self.sorted.iter().filter_map(|p| self.nodes.get(p))
    }

    /// The node at `path`.
    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// Approximate heap footprint, for the metadata cache's weigher.
    pub fn weight(&self) -> usize {
        self.nodes.values().map(|n| n.zarr_json.len() * 2 + n.path.as_str().len() * 2 + 256).sum()
    }

    /// What `key` (normalised: no leading `/`, no empty segments) names.
    pub fn resolve(&self, key: &str) -> Resolved<'_> {
        if key == "zarr.json" {
            return self.metadata("");
        }
        if let Some(path) = key.strip_suffix("/zarr.json") {
            return self.metadata(path);
        }
        if let Some(root) = self.nodes.get("").filter(|n| matches!(n.kind, NodeKind::Array(_))) {
            return chunk(root, key);
        }
        for (i, _) in key.match_indices('/') {
            match self.nodes.get(&key[..i]) {
                Some(node) if matches!(node.kind, NodeKind::Array(_)) => return chunk(node, &key[i + 1..]),
                Some(_) => {}
                None => break,
            }
        }
        Resolved::NotFound(format!("no node or chunk is named {key:?}"))
    }

    fn metadata(&self, path: &str) -> Resolved<'_> {
        match self.nodes.get(path) {
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

/// A group's metadata with the consolidated metadata of all its descendants, keyed by their
/// paths relative to it, in zarr-python's layout (nested groups listed with an empty one).
fn consolidated<'a>(group: &Node, all: impl Iterator<Item = &'a Node>) -> Value {
    let mut listing = Map::new();
    for node in all {
        let Some(relative) = node.path.relative_to(&group.path) else { continue };
        let mut entry = node.metadata.clone();
        if node.kind == NodeKind::Group {
            entry.insert(
                "consolidated_metadata".into(),
                json!({"kind": "inline", "must_understand": false, "metadata": {}}),
            );
        }
        listing.insert(relative.to_owned(), Value::Object(entry));
    }
    let mut body = group.metadata.clone();
    body.entry("attributes").or_insert_with(|| json!({}));
    body.insert(
        "consolidated_metadata".into(),
        json!({"kind": "inline", "must_understand": false, "metadata": listing}),
    );
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        Hierarchy::build(vec![
            (NodePath::root(), group(), None),
            arr("temp", json!([4, 4]), json!([2, 2]), json!({"name": "default"})),
            (NodePath::new("sub").unwrap(), group(), None),
            arr("sub/inner", json!([4]), json!([2]), json!({"name": "v2"})),
            arr("sub/dots", json!([4]), json!([2]), json!({"name": "default", "configuration": {"separator": "."}})),
            arr("scalar", json!([]), json!([]), json!({"name": "default"})),
        ])
        .unwrap()
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
        let h = Hierarchy::build(vec![(NodePath::root(), root, Some(vec![8]))]).unwrap();
        assert!(
            Hierarchy::build(vec![(NodePath::root(), array(json!([4]), json!([2]), json!({"name": "default"})), None)])
                .is_err()
        );
        assert!(matches!(h.resolve("c/1"), Resolved::Chunk { .. }));
        assert!(matches!(h.resolve("zarr.json"), Resolved::Metadata(_)));
    }
}

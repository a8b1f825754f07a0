//! Documents against a plain serde_json rendering, their sizes against what is written, and the
//! work of building a hierarchy against its size.

use std::cell::Cell;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::zarr::hierarchy::{Hierarchy, StoredNode};
use crate::zarr::path::NodePath;

thread_local! {
    /// Entries written into listings on this thread: the only work done per (group, descendant) pair.
    pub(super) static LISTED: Cell<u64> = const { Cell::new(0) };
}

fn listed() -> u64 {
    LISTED.with(Cell::get)
}

fn group(attributes: Option<Value>) -> Map<String, Value> {
    let mut m = json!({"zarr_format": 3, "node_type": "group"}).as_object().unwrap().clone();
    if let Some(a) = attributes {
        m.insert("attributes".into(), a);
    }
    m
}

fn array() -> Map<String, Value> {
    json!({"zarr_format": 3, "node_type": "array", "shape": [10, 73, 144], "data_type": "float32",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 73, 72]}},
           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
           "fill_value": -9999.0,
           "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                      {"name": "numcodecs.zlib", "configuration": {"level": 4}}],
           "dimension_names": ["time", "lat", "lon"],
           "attributes": {"units": "K", "long_name": "air temperature", "standard_name": "air_temperature"}})
    .as_object()
    .unwrap()
    .clone()
}

/// The document as the server wrote it before: whole values built, then serialised.
fn reference(members: &[Member<'_>], i: usize) -> Vec<u8> {
    let g = &members[i];
    let mut listing = Map::new();
    for m in members {
        let relative = if g.path.is_empty() {
            Some(m.path).filter(|p| !p.is_empty())
        } else {
            m.path.strip_prefix(g.path).and_then(|r| r.strip_prefix('/'))
        };
        let Some(relative) = relative else { continue };
        let mut entry = m.metadata.clone();
        if m.group {
            entry.insert(
                "consolidated_metadata".into(),
                json!({"kind": "inline", "must_understand": false, "metadata": {}}),
            );
        }
        listing.insert(relative.to_owned(), Value::Object(entry));
    }
    let mut body = g.metadata.clone();
    body.entry("attributes").or_insert_with(|| json!({}));
    body.insert(
        "consolidated_metadata".into(),
        json!({"kind": "inline", "must_understand": false, "metadata": listing}),
    );
    serde_json::to_vec(&Value::Object(body)).unwrap()
}

fn check_every_group(paths: &[(String, bool)], metadata: &[Map<String, Value>]) {
    let members: Vec<Member<'_>> =
        paths.iter().zip(metadata).map(|((p, group), m)| Member { path: p, metadata: m, group: *group }).collect();
    let rendered = Listings::render(members.clone());
    let measured = Listings::measure(members.clone());
    for (i, m) in members.iter().enumerate() {
        assert_eq!(rendered.entry_len(i), measured.entry_len(i), "{}", m.path);
        if !m.group {
            assert_eq!(rendered.entry(i), serde_json::to_vec(m.metadata).unwrap(), "{}", m.path);
            continue;
        }
        let mut out = Vec::new();
        rendered.write_document(i, &mut out);
        let expected = reference(&members, i);
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected), "group {:?}", m.path);
        assert_eq!(rendered.document_len(i), out.len() as u64, "group {:?}", m.path);
        assert_eq!(measured.document_len(i), out.len() as u64, "group {:?}", m.path);
    }
}

#[test]
fn documents_are_what_serde_json_writes() {
    let nodes = [
        ("", group(Some(json!({"title": "t"})))),
        ("a", group(None)),
        ("a-b", array()),
        ("a/\"q\"", array()),
        ("a/x", group(Some(json!({})))),
        ("a/x/caf\u{e9}", array()),
        ("a/x/y", group(Some(json!({"n": [1, 2]})))),
        ("b\\c", array()),
        ("z", group(None)),
    ];
    let paths: Vec<(String, bool)> = nodes.iter().map(|(p, m)| (p.to_string(), m["node_type"] == "group")).collect();
    let metadata: Vec<Map<String, Value>> = nodes.iter().map(|(_, m)| m.clone()).collect();
    check_every_group(&paths, &metadata);
}

/// Paths from a few names that sort around `/` (`-` before it, `0` after it), escaped in JSON or not.
fn hierarchy() -> impl Strategy<Value = Vec<(String, bool)>> {
    let name = prop::sample::select(vec!["a", "a-b", "b0", "\"", "\u{e9}", "x\\y"]);
    let path = prop::collection::vec(name, 1..4).prop_map(|names| names.join("/"));
    (prop::collection::btree_set(path, 0..24), any::<u64>()).prop_map(|(paths, kinds)| {
        let mut all: Vec<(String, bool)> = vec![(String::new(), true)];
        all.extend(paths.into_iter().enumerate().map(|(i, p)| (p, (kinds >> (i % 64)) & 1 == 1)));
        all
    })
}

proptest! {
    #[test]
    fn every_group_document_matches_its_size_and_the_reference(paths in hierarchy()) {
        let metadata: Vec<Map<String, Value>> =
            paths.iter().map(|(_, group)| if *group { group_metadata() } else { array() }).collect();
        check_every_group(&paths, &metadata);
    }
}

fn group_metadata() -> Map<String, Value> {
    group(None)
}

fn stored_group(path: &str) -> StoredNode {
    (NodePath::new(path).unwrap(), group(Some(json!({}))), None)
}

fn stored_array(path: &str) -> StoredNode {
    (NodePath::new(path).unwrap(), array(), Some(vec![2, 1, 2]))
}

/// The 20,000 sibling groups that took 11.4 s on main: each group's document used to scan every
/// node. Now the entries written are one per node in the root's listing and none below.
#[test]
fn sibling_groups_cost_one_entry_each() {
    let mut stored = vec![stored_group("")];
    stored.extend((0..20_000).map(|i| stored_group(&format!("g{i:05}"))));
    let before = listed();
    let h = Hierarchy::build(stored, 128 << 20).unwrap();
    assert_eq!(listed() - before, 20_000);
    let root: Value = serde_json::from_slice(&h.node("").unwrap().zarr_json).unwrap();
    assert_eq!(root["consolidated_metadata"]["metadata"].as_object().unwrap().len(), 20_000);
    let g: Value = serde_json::from_slice(&h.node("g00042").unwrap().zarr_json).unwrap();
    assert_eq!(g["consolidated_metadata"]["metadata"], json!({}), "an empty subtree, listed as such");
}

/// The 2,000 nested groups that took 31.4 s and 5 GB on main: every group listed its whole
/// subtree, 2 million entries and 3 GB of documents. Past the budget only the root lists them.
#[test]
fn nested_groups_past_the_budget_are_listed_by_the_root_only() {
    let mut stored = vec![stored_group("")];
    let mut path = String::new();
    for _ in 0..2_000 {
        if !path.is_empty() {
            path.push('/');
        }
        path.push('g');
        stored.push(stored_group(&path));
    }
    let before = listed();
    let h = Hierarchy::build(stored, 128 << 20).unwrap();
    assert_eq!(listed() - before, 2_000, "the root's listing, once");
    let total: usize = h.nodes().map(|n| n.zarr_json.len()).sum();
    let root = h.node("").unwrap().zarr_json.len();
    assert!(total < 2 * root, "{total} bytes of documents for a root of {root}");
    let g: Value = serde_json::from_slice(&h.node("g/g").unwrap().zarr_json).unwrap();
    assert!(g.get("consolidated_metadata").is_none(), "{g}");
    assert_eq!(g["attributes"], json!({}));
}

/// Within the budget, a group lists its subtree: written once per ancestor, as much as the
/// documents hold.
#[test]
fn groups_list_their_subtree_within_the_budget() {
    let mut stored = vec![stored_group(""), stored_group("a"), stored_group("a/b")];
    stored.extend((0..100).map(|i| stored_array(&format!("a/b/v{i}"))));
    let before = listed();
    let h = Hierarchy::build(stored, 1 << 20).unwrap();
    assert_eq!(listed() - before, (101 + 1) + 101 + 100, "root, a, a/b");
    let b: Value = serde_json::from_slice(&h.node("a/b").unwrap().zarr_json).unwrap();
    assert_eq!(b["consolidated_metadata"]["metadata"].as_object().unwrap().len(), 100);
}

//! Each bound refused with a problem naming it and the node, in PUT and PATCH alike.

use serde_json::{Map, Value, json};

use super::*;
use crate::zarr::consolidated::{Listings, Member};
use crate::zarr::document::Document;
use crate::zarr::hierarchy::Hierarchy;
use crate::zarr::metadata::array_layout;
use crate::zarr::native::parse_slice;
use crate::zarr::patch::plan;
use crate::zarr::validate::{ValidatedStore, validate_tiled};

const ARRAY: &str = r#""zarr_format": 3, "node_type": "array", "data_type": "float64",
    "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]"#;

fn array(shape: u64, chunk: u64) -> String {
    format!(
        r#"{{{ARRAY}, "shape": [{shape}], "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": [{chunk}]}}}}}}"#
    )
}

fn doc(nodes: &[(&str, String)]) -> Document {
    let body: Vec<String> =
        nodes.iter().map(|(path, node)| format!("{}: {node}", serde_json::to_string(path).unwrap())).collect();
    parse_slice(format!(r#"{{"nodes": {{{}}}}}"#, body.join(", ")).as_bytes()).unwrap()
}

fn register(doc: Document, limits: &Limits) -> Result<ValidatedStore, Vec<String>> {
    validate_tiled(doc, &|_| true, 1024, limits).map_err(|r| r.problems())
}

fn group() -> String {
    r#"{"zarr_format": 3, "node_type": "group"}"#.to_owned()
}

#[test]
fn too_many_nodes_counting_implicit_groups() {
    let limits = Limits { max_nodes: 3, ..Limits::default() };
    assert!(register(doc(&[("a/x", array(4, 2))]), &limits).is_ok(), "root, a and a/x");
    let problems = register(doc(&[("a/x", array(4, 2)), ("b/y", array(4, 2))]), &limits).unwrap_err();
    assert_eq!(
        problems,
        ["the store has 5 nodes (arrays and groups, implicit parent groups included), above limits.max_nodes = 3"]
    );
    // Refused on the document's own count before any node is validated.
    let nodes: Vec<(String, String)> = (0..5).map(|i| (format!("n{i}"), "not even metadata".to_owned())).collect();
    let text: Vec<String> = nodes.iter().map(|(p, _)| format!(r#""{p}": {{}}"#)).collect();
    let many = parse_slice(format!(r#"{{"nodes": {{{}}}}}"#, text.join(",")).as_bytes()).unwrap();
    let problems = register(many, &limits).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("5 nodes"), "{problems:?}");
}

#[test]
fn too_deep_before_any_parent_is_made() {
    let limits = Limits { max_depth: 2, ..Limits::default() };
    assert!(register(doc(&[("a/b", group())]), &limits).is_ok());
    let problems = register(doc(&[("a/b/c", array(4, 2))]), &limits).unwrap_err();
    assert_eq!(problems, ["node a/b/c is 3 levels deep, above limits.max_depth = 2"]);
    // 100,000 levels: refused at once, not 100,000 implicit groups of growing paths.
    let deep = vec!["d"; 100_000].join("/");
    let started = std::time::Instant::now();
    let problems = register(doc(&[(&deep, group())]), &Limits::default()).unwrap_err();
    assert!(problems[0].ends_with("is 100000 levels deep, above limits.max_depth = 32"), "{}", &problems[0][180_000..]);
    assert!(started.elapsed().as_secs() < 5);
}

#[test]
fn the_root_document_is_measured_as_it_will_be_served() {
    let nodes = [
        ("", r#"{"zarr_format": 3, "node_type": "group", "attributes": {"title": "caf\u00e9 \"q\""}}"#.to_owned()),
        ("g/x", array(40, 2)),
        ("g/\u{e9}", array(8, 2)),
    ];
    let store = register(doc(&nodes), &Limits::default()).unwrap();
    let stored = store
        .nodes
        .iter()
        .map(|n| {
            let tile = match &n.kind {
                NodeKind::Array(layout) => Some(layout.grid.tile_shape().to_vec()),
                NodeKind::Group => None,
            };
            (n.path.clone(), n.metadata(), tile)
        })
        .collect();
    let served = Hierarchy::build(stored, u64::MAX).unwrap().node("").unwrap().zarr_json.len() as u64;
    let limits = Limits { max_metadata_bytes: served, ..Limits::default() };
    assert!(register(doc(&nodes), &limits).is_ok());
    let limits = Limits { max_metadata_bytes: served - 1, ..Limits::default() };
    let problems = register(doc(&nodes), &limits).unwrap_err();
    assert_eq!(
        problems,
        [format!(
            "the root zarr.json, with the consolidated metadata of every node, would take {served} bytes, above \
             limits.max_metadata_bytes = {}; the largest metadata is that of node g/x ({} bytes)",
            served - 1,
            store.nodes[2].json.len()
        )]
    );
}

#[test]
fn fill_chunks_are_bounded_only_when_served() {
    let nodes = [("huge", array(1 << 40, 1 << 40)), ("small", array(16, 4))];
    assert!(register(doc(&nodes), &Limits::default()).is_ok(), "missing chunks answer 404: nothing to build");
    let fill = Limits { max_fill_chunk_bytes: Some(64 << 20), ..Limits::default() };
    let problems = register(doc(&nodes), &fill).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(
            "array huge: a chunk of its fill value would take 8796093022208 bytes decoded (chunk shape [1099511627776]), \
             above limits.max_fill_chunk_bytes = 67108864"
        ),
        "{}",
        problems[0]
    );
    assert!(problems[0].contains("?missing_chunks=404"), "{}", problems[0]);
    let overflow = format!(
        r#"{{{ARRAY}, "shape": [4294967296, 4294967296], "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": [4294967296, 4294967296]}}}}}}"#
    );
    let problems = register(doc(&[("o", overflow)]), &fill).unwrap_err();
    assert!(problems[0].contains("would take more than 2^64 bytes decoded"), "{problems:?}");
}

#[test]
fn a_patch_is_held_to_the_same_bounds() {
    let stored = vec![
        (NodePath::root(), json!({"zarr_format": 3, "node_type": "group"}).as_object().unwrap().clone(), None),
        (
            NodePath::new("caf\u{e9}").unwrap(),
            json!({"zarr_format": 3, "node_type": "group"}).as_object().unwrap().clone(),
            None,
        ),
    ];
    let base = Hierarchy::build(stored, u64::MAX).unwrap();
    let patch = |nodes: &[(&str, String)], limits: &Limits| {
        plan(&base, doc(nodes), &|_| true, 64, limits).map(|_| ()).map_err(|r| r.problems())
    };
    let fill = Limits { max_fill_chunk_bytes: Some(64 << 20), ..Limits::default() };
    assert!(patch(&[("huge", array(1 << 40, 1 << 40))], &Limits::default()).is_ok());
    let problems = patch(&[("huge", array(1 << 40, 1 << 40))], &fill).unwrap_err();
    assert!(
        problems[0].starts_with("array huge: a chunk of its fill value would take 8796093022208 bytes"),
        "{problems:?}"
    );
    let problems = patch(&[("a/b/c", group())], &Limits { max_depth: 2, ..Limits::default() }).unwrap_err();
    assert_eq!(problems, ["node a/b/c is 3 levels deep, above limits.max_depth = 2"]);
    let problems = patch(&[("x", group()), ("y", group())], &Limits { max_nodes: 3, ..Limits::default() }).unwrap_err();
    assert!(problems[0].contains("4 nodes"), "{problems:?}");
    let problems = patch(&[("cafe\u{301}/x", array(4, 2))], &Limits::default()).unwrap_err();
    assert_eq!(
        problems,
        [
            r#"nodes "cafe\u{301}" and "café" are one name written two ways in Unicode (equal once normalised to NFC); rename one of them"#
        ]
    );
}

#[test]
fn names_equal_in_nfc_are_refused_naming_both() {
    let problems =
        register(doc(&[("caf\u{e9}/t", array(4, 2)), ("cafe\u{301}/t", array(4, 2))]), &Limits::default()).unwrap_err();
    assert_eq!(
        problems,
        [
            r#"nodes "cafe\u{301}" and "café" are one name written two ways in Unicode (equal once normalised to NFC); rename one of them"#
        ]
    );
    let one = register(doc(&[("cafe\u{301}/t", array(4, 2))]), &Limits::default()).unwrap();
    assert_eq!(one.nodes[1].path.as_str(), "cafe\u{301}", "a name is kept as written");
}

/// A store of 100,000 arrays (in 100 groups, each with the metadata of DESIGN.md's example,
/// 514 bytes) passes the default bounds: 100,101 nodes, a root document of 51 MB.
#[test]
fn a_hundred_thousand_arrays_pass_the_defaults() {
    let air: Map<String, Value> = json!({"zarr_format": 3, "node_type": "array", "shape": [10, 73, 144],
        "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 73, 72]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": -9999.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zlib", "configuration": {"level": 4}}],
        "dimension_names": ["time", "lat", "lon"],
        "attributes": {"units": "K", "long_name": "air temperature", "standard_name": "air_temperature"}})
    .as_object()
    .unwrap()
    .clone();
    let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}}).as_object().unwrap().clone();
    let mut paths = vec![(String::new(), true)];
    for g in 0..100 {
        paths.push((format!("grp{g:03}"), true));
        paths.extend((0..1000).map(|a| (format!("grp{g:03}/var{a:04}"), false)));
    }
    // What `Limits::check` does, on metadata shared by every array rather than 100,000 copies.
    let defaults = Limits::default();
    assert!(defaults.check_count(paths.len()).is_ok());
    let members = paths
        .iter()
        .map(|(path, is_group)| Member { path, metadata: if *is_group { &group } else { &air }, group: *is_group })
        .collect();
    let root = Listings::measure(members).document_len(0);
    assert!(root <= defaults.max_metadata_bytes, "{root}");
    assert!(root > 50_000_000, "{root}");
    let fill = decoded_chunk_bytes(&air, array_layout(&air).unwrap().grid.chunk_shape()).unwrap().unwrap();
    assert!(fill <= DEFAULT_MAX_FILL_CHUNK_BYTES, "{fill}");
}

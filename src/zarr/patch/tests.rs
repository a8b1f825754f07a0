//! The PATCH planner on hand-made versions.

use serde_json::{Value, json};

use super::*;
use crate::zarr::block::BlockBuilder;
use crate::zarr::native::parse_slice;

fn array(shape: Value, chunks: Value) -> serde_json::Map<String, Value> {
    json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
           "attributes": {"a": 1}})
    .as_object()
    .unwrap()
    .clone()
}

fn base() -> Hierarchy {
    let stored = vec![
        (NodePath::root(), json!({"zarr_format": 3, "node_type": "group"}).as_object().unwrap().clone(), None),
        (NodePath::new("x").unwrap(), array(json!([4]), json!([1])), Some(vec![2])),
    ];
    Hierarchy::build(stored, u64::MAX).unwrap()
}

fn doc(text: &str) -> Document {
    parse_slice(text.as_bytes()).unwrap()
}

#[test]
fn merges_metadata_key_by_key_and_keeps_tiles() {
    let p = plan(
        &base(),
        doc(r#"{"nodes": {"x": {"shape": [8], "attributes": {"b": 2}}}}"#),
        &|_| true,
        64,
        &Limits::default(),
    )
    .unwrap();
    let x = p.nodes.iter().find(|n| n.path.as_str() == "x").unwrap();
    assert_eq!(x.metadata()["shape"], json!([8]));
    assert_eq!(x.metadata()["attributes"], json!({"b": 2}), "a given key replaces the stored one whole");
    let NodeKind::Array(layout) = &x.kind else { panic!() };
    assert_eq!(layout.grid.tile_shape(), &[2], "the stored tile shape, not a new default");
    assert!(!p.arrays[0].rebuild, "appending keeps tiles");
}

#[test]
fn patches_one_block_and_rebuilds_another() {
    let p = plan(
        &base(),
        doc(r#"{"nodes": {"x": {"manifest": {"1": {"data": "Bw=="}, "0": {"path": ""}}}}}"#),
        &|_| true,
        64,
        &Limits::default(),
    )
    .unwrap();
    let mut b = BlockBuilder::new(2);
    b.push_inline(0, &[1]);
    b.push_inline(1, &[2]);
    let patched = p.patch_block(&p.arrays[0], 0, Some(&b.finish()));
    assert_eq!(patched.get(0), ChunkRef::Missing, "cleared");
    assert_eq!(patched.get(1), ChunkRef::Inline(bytes::Bytes::from_static(&[7])), "replaced");

    let shrink = plan(
        &base(),
        doc(r#"{"nodes": {"x": {"shape": [2], "manifest": {"3": {"path": ""}}}}}"#),
        &|_| true,
        64,
        &Limits::default(),
    )
    .unwrap();
    assert!(shrink.arrays[0].rebuild);
    let old = vec![
        (vec![1], OwnedRef::Inline(bytes::Bytes::from_static(&[5]))),
        (vec![3], OwnedRef::Inline(bytes::Bytes::from_static(&[6]))),
    ];
    let blocks = shrink.rebuild_blocks(&shrink.arrays[0], old.clone()).unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].1.get(1), ChunkRef::Inline(bytes::Bytes::from_static(&[5])));
    let keep = plan(&base(), doc(r#"{"nodes": {"x": {"shape": [2]}}}"#), &|_| true, 64, &Limits::default()).unwrap();
    let problems = keep.rebuild_blocks(&keep.arrays[0], old).unwrap_err();
    assert!(problems[0].contains("chunk \"3\" lies outside the new chunk grid [2]"), "{problems:?}");
}

#[test]
fn names_what_it_refuses() {
    let problems = plan(
        &base(),
        doc(r#"{"nodes": {"x": {"node_type": "group"}, "x/y": {"zarr_format": 3, "node_type": "group"}}, "delete": ["", "nope"]}"#),
        &|_| true,
        64,
        &Limits::default(),
    )
    .unwrap_err()
    .problems();
    let all = problems.join("\n");
    for expected in ["root cannot be deleted", "no such node", "node_type cannot change", "inside array x"] {
        assert!(all.contains(expected), "{expected}: {all}");
    }
}

#[test]
fn stored_chunks_keep_their_description() {
    for change in
        [r#"{"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}}"#, r#"{"data_type": "int8"}"#]
    {
        let problems =
            plan(&base(), doc(&format!(r#"{{"nodes": {{"x": {change}}}}}"#)), &|_| true, 64, &Limits::default())
                .unwrap_err()
                .problems();
        assert!(problems[0].contains("cannot change in a PATCH"), "{problems:?}");
    }
    let mut replaced = array(json!([4]), json!([2]));
    replaced.insert("manifest".into(), json!({}));
    let text = format!(r#"{{"nodes": {{"x": {}}}, "delete": ["x"]}}"#, Value::Object(replaced));
    let p = plan(&base(), doc(&text), &|_| true, 64, &Limits::default()).unwrap();
    assert!(p.arrays[0].rebuild && p.arrays[0].base.is_none(), "deleted and added again: a new array");
}

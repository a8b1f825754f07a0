//! Validation: blocks and implicit groups, every problem listed, duplicates, spilling to disk.

use super::*;
use crate::zarr::block::{ChunkRef, ManifestBlock};
use crate::zarr::native::{BASE64, parse_slice};
use base64::Engine;

const AIR: &str = r#""zarr_format": 3, "node_type": "array", "shape": [10, 4], "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 2]}},
    "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]"#;

fn doc(manifest: &str) -> Document {
    parse_slice(format!(r#"{{"nodes": {{"g/air": {{{AIR}, "manifest": {manifest}}}}}}}"#).as_bytes()).unwrap()
}

#[test]
fn builds_blocks_and_implicit_groups() {
    let store =
        // Chunks of 5 x 2 float32: 40 bytes each.
        validate(doc(&format!(r#"{{"1.1": {{"path": "/d/a.nc", "offset": 8, "length": 40}}, "0.0": {{"data": "{}"}}}}"#, BASE64.encode([0u8; 40]))), &|u| {
            u.starts_with("file:///d/")
        })
        .unwrap();
    let paths: Vec<&str> = store.nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(paths, ["", "g", "g/air"]);
    assert_eq!(store.summary.chunks, ChunkCounts { virtual_: 1, inline: 1, assembled: 0, missing: 2 });
    assert_eq!((store.summary.arrays, store.summary.groups, store.summary.referenced_bytes), (1, 2, 40));
    let blocks: Vec<_> = store.blocks().collect::<io::Result<_>>().unwrap();
    assert_eq!(blocks.len(), 1);
    let block = ManifestBlock::decode(&blocks[0].data).unwrap();
    assert_eq!(block.get(0), ChunkRef::Inline(bytes::Bytes::from_static(&[0; 40])));
    assert!(matches!(block.get(3), ChunkRef::Virtual { offset: 8, length: 40, .. }));
}

#[test]
fn lists_every_problem() {
    let problems = validate(
        doc(r#"{"2.0": {"path": "/d/a.nc", "offset": 0, "length": 40},
                "0.0": {"path": "/elsewhere/b.nc", "offset": 0, "length": 40},
                "0.1": {"path": "/d/a.nc", "offset": 0, "length": 5000000000}}"#),
        &|u| u.starts_with("file:///d/"),
    )
    .unwrap_err()
    .problems();
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
    let problems = validate(dup, &|_| true).unwrap_err().problems();
    assert!(problems[0].contains("appears more than once"), "{problems:?}");

    let nested = parse_slice(
        format!(
            r#"{{"nodes": {{"a": {{{AIR}}}, "a/b": {{"zarr_format": 3, "node_type": "group"}}, "a/b/c/d": {{"zarr_format": 3, "node_type": "group"}},
        "g": {{"zarr_format": 3, "node_type": "group", "manifest": {{}}}}}}}}"#
        )
        .as_bytes(),
    )
    .unwrap();
    let problems = validate(nested, &|_| true).unwrap_err().problems();
    assert!(problems.iter().any(|p| p.contains("node a/b is inside array a")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("node a/b/c/d is inside array a")), "{problems:?}");
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
    let problems = validate(d, &|_| true).unwrap_err().problems();
    assert!(problems[0].contains("beyond the end of file:///d/a (100 bytes)"), "{problems:?}");
}

/// A document of `n` references to a 3-d array of one-element uint64 chunks (8 bytes each),
/// written in a scrambled order, with a
/// duplicate of the first key when `duplicate`.
fn big(n: u64, duplicate: bool) -> String {
    let mut entries = Vec::new();
    for i in 0..n {
        let j = (i * 7919) % n; // a permutation: n is not a multiple of 7919
        let key = format!("{}.{}.{}", j / 400, (j / 20) % 20, j % 20);
        let entry = if j.is_multiple_of(97) {
            format!(r#""{key}": {{"data": "{}"}}"#, BASE64.encode(j.to_le_bytes()))
        } else {
            format!(r#""{key}": {{"path": "/d/f{}.nc", "offset": {}, "length": 8}}"#, j % 3, j * 10)
        };
        entries.push(entry);
    }
    if duplicate {
        entries.push(r#""0.0.1": {"path": "/d/f0.nc", "offset": 1, "length": 8}"#.into());
    }
    let t = n.div_ceil(400);
    format!(
        r#"{{"nodes": {{"v": {{"zarr_format": 3, "node_type": "array", "shape": [{t}, 20, 20], "data_type": "uint64",
        "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": [1, 1, 1]}}}},
        "chunk_key_encoding": {{"name": "default"}}, "fill_value": 0, "codecs": [{{"name": "bytes"}}],
        "manifest": {{{}}}}}}}}}"#,
        entries.join(",")
    )
}

fn decoded_blocks(store: &ValidatedStore) -> Vec<(u64, ManifestBlock)> {
    store
        .blocks()
        .map(|b| b.map(|b| (b.tile, ManifestBlock::decode(&b.data).unwrap())))
        .collect::<io::Result<_>>()
        .unwrap()
}

#[test]
fn spilling_to_disk_gives_the_same_blocks_as_memory() {
    let text = big(120_011, false);
    let in_memory = validate_tiled(parse_slice(text.as_bytes()).unwrap(), &|_| true, 1000, &Limits::default()).unwrap();
    let scratch = Scratch::new(0, None);
    let doc = crate::zarr::native::parse_reader(text.as_bytes(), &scratch).unwrap();
    let spilled = validate_tiled(doc, &|_| true, 1000, &Limits::default()).unwrap();
    assert_eq!(spilled.summary, in_memory.summary);
    assert_eq!(spilled.summary.chunks.virtual_ + spilled.summary.chunks.inline, 120_011);
    assert!(spilled.blocks.spilled(), "a zero budget puts the blocks on disk");
    assert_eq!(decoded_blocks(&spilled), decoded_blocks(&in_memory));
    let (_, first) = &decoded_blocks(&spilled)[0];
    assert_eq!(first.get(0), ChunkRef::Inline(bytes::Bytes::copy_from_slice(&0u64.to_le_bytes())));
}

#[test]
fn duplicates_are_found_across_sorted_runs() {
    let scratch = Scratch::new(0, None);
    let doc = crate::zarr::native::parse_reader(big(5_003, true).as_bytes(), &scratch).unwrap();
    let problems = validate(doc, &|_| true).unwrap_err().problems();
    assert_eq!(problems, [r#"array v: chunk "0.0.1" appears more than once"#]);
}

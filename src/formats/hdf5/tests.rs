//! The parser against the fixtures of tests/fixtures/files/make_hdf5.py and their oracles
//! (what h5py and xarray's h5netcdf engine read from the same files). Hostile files: hostile_tests.rs.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use super::parse;
use crate::formats::{ByteRanges, Chunk, Limits, Node, Parsed};

pub(super) const FILES: [&str; 9] = [
    "earliest.h5",
    "latest.h5",
    "filters.h5",
    "phony.h5",
    "scales.h5",
    "netcdf4.nc",
    "userblock.h5",
    "unservable.h5",
    "unservable_dense.h5",
];

pub(super) fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/fixtures/files/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

fn oracle(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/files/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn parsed(name: &str) -> Parsed {
    parse(Arc::new(fixture(name)), &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn node<'a>(parsed: &'a Parsed, path: &str) -> &'a Node {
    parsed
        .nodes
        .get(path)
        .unwrap_or_else(|| panic!("no node {path}: {:?}; warnings {:?}", parsed.nodes.keys(), parsed.warnings))
}

fn meta(parsed: &Parsed, path: &str, pointer: &str) -> Value {
    node(parsed, path).metadata.get(pointer).cloned().unwrap_or(Value::Null)
}

fn codec_names(parsed: &Parsed, path: &str) -> Vec<String> {
    let codecs = meta(parsed, path, "codecs");
    codecs.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

/// The node path of an h5py dataset path (netCDF4's `_nc4_non_coord_` prefix dropped).
fn node_path(dataset: &str) -> String {
    dataset.replace("_nc4_non_coord_", "")
}

#[test]
fn every_chunk_is_where_h5py_finds_it() {
    for file in FILES {
        let parsed = parsed(file);
        let oracle = oracle(file);
        for (dataset, expected) in oracle["datasets"].as_object().unwrap() {
            let path = node_path(dataset);
            if expected["dimension_only"] == json!(true) {
                let taken = oracle["datasets"].get(format!("_nc4_non_coord_{dataset}")).is_some();
                assert!(taken || !parsed.nodes.contains_key(&path), "{file}: {path} is a dimension, not a variable");
                continue;
            }
            let Some(node) = parsed.nodes.get(&path) else {
                let named = parsed.warnings.iter().any(|w| w.contains(&format!(" {path} ")));
                assert!(named, "{file}: {path} neither served nor named in a warning: {:?}", parsed.warnings);
                continue;
            };
            assert_eq!(node.metadata["shape"], expected["shape"], "{file}: {path}");
            if let Some(chunks) = expected["chunks"].as_array() {
                assert_eq!(
                    node.metadata["chunk_grid"]["configuration"]["chunk_shape"],
                    json!(chunks),
                    "{file}: {path}"
                );
            }
            let ours: BTreeSet<(Vec<u64>, u64, u64)> = node
                .chunks
                .iter()
                .filter_map(|(index, chunk)| match chunk {
                    Chunk::Range { offset, length } => Some((index.clone(), *offset, *length)),
                    _ => None,
                })
                .collect();
            let theirs: BTreeSet<(Vec<u64>, u64, u64)> = expected["chunk_refs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (serde_json::from_value(r[0].clone()).unwrap(), r[1].as_u64().unwrap(), r[2].as_u64().unwrap())
                })
                .collect();
            if expected["dtype"] != json!("O") {
                assert_eq!(ours, theirs, "{file}: {path}");
            }
            if let Some(compact) = expected["compact_bytes"].as_str() {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD.decode(compact).unwrap();
                assert_eq!(
                    node.chunks,
                    vec![(vec![0; node.chunks[0].0.len()], Chunk::Inline(bytes))],
                    "{file}: {path}"
                );
            }
        }
    }
}

#[test]
fn fill_values_are_the_storage_fill_h5py_reads() {
    for file in FILES {
        let parsed = parsed(file);
        for (dataset, expected) in oracle(file)["datasets"].as_object().unwrap() {
            let Some(node) = parsed.nodes.get(&node_path(dataset)) else { continue };
            if expected["dimension_only"] == json!(true) {
                continue;
            }
            let fill = &expected["fillvalue"];
            let ours = &node.metadata["fill_value"];
            match (fill, ours) {
                (Value::Null, _) => {}
                (Value::Bool(b), ours) => assert_eq!(ours, &json!(b), "{file}: {dataset}"),
                (Value::String(s), ours) => assert_eq!(ours, &json!(s), "{file}: {dataset}"),
                (fill, ours) => assert_eq!(fill.as_f64(), ours.as_f64(), "{file}: {dataset}: {ours}"),
            }
        }
    }
}

#[test]
fn variables_dimensions_and_attributes_are_as_xarray_shows_them() {
    for file in FILES {
        let parsed = parsed(file);
        for (group, view) in oracle(file)["xarray"].as_object().unwrap() {
            let Some(variables) = view["variables"].as_object() else { continue };
            let group_node = node(&parsed, group);
            assert_same_attributes(
                &group_node.metadata["attributes"],
                &view["attrs"],
                &format!("{file}: group {group}"),
            );
            for (name, variable) in variables {
                let path = if group.is_empty() { name.clone() } else { format!("{group}/{name}") };
                let Some(node) = parsed.nodes.get(&path) else {
                    assert!(
                        parsed.warnings.iter().any(|w| w.contains(&path)),
                        "{file}: {path} missing: {:?}",
                        parsed.warnings
                    );
                    continue;
                };
                assert_eq!(node.metadata["dimension_names"], variable["dims"], "{file}: {path}");
                assert_same_attributes(&node.metadata["attributes"], &variable["attrs"], &format!("{file}: {path}"));
            }
            let served: BTreeSet<&String> = parsed
                .nodes
                .iter()
                .filter(|(path, node)| node.metadata["node_type"] == "array" && parent(path) == group.as_str())
                .map(|(path, _)| path)
                .collect();
            for path in served {
                let name = path.rsplit('/').next().unwrap();
                assert!(variables.contains_key(name), "{file}: {path} is served but xarray has no such variable");
            }
        }
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// The same attribute names; values equal, but `_FillValue`/`missing_value` (encoded for
/// xarray's Zarr reader) compared by kind only.
fn assert_same_attributes(ours: &Value, theirs: &Value, what: &str) {
    let ours = ours.as_object().unwrap();
    let theirs = theirs.as_object().unwrap();
    assert_eq!(ours.keys().collect::<Vec<_>>().len(), theirs.len(), "{what}: {ours:?} vs {theirs:?}");
    for (name, value) in theirs {
        let Some(mine) = ours.get(name) else { panic!("{what}: attribute {name} missing: {ours:?}") };
        if name == "_FillValue" || name == "missing_value" {
            continue;
        }
        let close = match (mine, value) {
            (Value::Number(a), Value::Number(b)) => (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-9,
            (Value::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.as_f64() == b.as_f64() || a == b)
            }
            (a, b) => a == b,
        };
        assert!(close, "{what}: attribute {name}: {mine} vs {value}");
    }
}

#[test]
fn filters_become_numcodecs_codecs_in_pipeline_order() {
    let parsed = parsed("filters.h5");
    assert_eq!(codec_names(&parsed, "gzip"), ["bytes", "numcodecs.zlib"]);
    assert_eq!(meta(&parsed, "gzip", "codecs")[1]["configuration"], json!({"level": 7}));
    assert_eq!(codec_names(&parsed, "shuffle_gzip"), ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]);
    assert_eq!(meta(&parsed, "shuffle_gzip", "codecs")[1]["configuration"], json!({"elementsize": 4}));
    assert_eq!(codec_names(&parsed, "fletcher32"), ["bytes", "numcodecs.fletcher32"]);
    assert_eq!(codec_names(&parsed, "zstd"), ["bytes", "numcodecs.zstd"]);
    assert_eq!(meta(&parsed, "zstd", "codecs")[1]["configuration"]["level"], json!(5));
    assert_eq!(codec_names(&parsed, "blosc"), ["bytes", "numcodecs.blosc"]);
    assert_eq!(meta(&parsed, "blosc", "codecs")[1]["configuration"]["cname"], json!("lz4"));
    assert_eq!(codec_names(&parsed, "bzip2"), ["bytes", "numcodecs.bz2"]);
    assert!(
        parsed
            .warnings
            .iter()
            .any(|w| w.starts_with("variable blosc_skipped has a chunk stored with a filter skipped"))
    );
    for left_out in ["lz4", "scaleoffset", "lzf"] {
        assert!(!parsed.nodes.contains_key(left_out), "{left_out}");
        assert!(
            parsed.warnings.iter().any(|w| w.starts_with(&format!("variable {left_out} uses "))),
            "{left_out}: {:?}",
            parsed.warnings
        );
    }
}

#[test]
fn types_are_zarr_types_with_their_byte_order() {
    let parsed = parsed("earliest.h5");
    assert_eq!(meta(&parsed, "big_endian", "codecs")[0], json!({"name": "bytes", "configuration": {"endian": "big"}}));
    assert_eq!(meta(&parsed, "big_endian_int", "data_type"), json!("int32"));
    assert_eq!(meta(&parsed, "contiguous", "codecs")[0]["configuration"]["endian"], json!("little"));
    assert_eq!(
        meta(&parsed, "fixed_strings", "data_type"),
        json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 4}})
    );
    assert_eq!(meta(&parsed, "bools", "data_type"), json!("bool"));
    assert_eq!(meta(&parsed, "colors", "data_type"), json!("uint8"));
    assert_eq!(meta(&parsed, "int8", "data_type"), json!("int8"));
    assert_eq!(meta(&parsed, "scalar", "shape"), json!([]));
    assert_eq!(meta(&parsed, "with_fill", "fill_value"), json!("NaN"));
    assert_eq!(meta(&parsed, "vlen_strings", "data_type"), json!("string"));
    assert_eq!(meta(&parsed, "vlen_strings", "codecs"), json!([{"name": "vlen-utf8"}]));
    let mut expected = 3u32.to_le_bytes().to_vec();
    for s in ["x", "yz", "\u{e9}t\u{e9}"] {
        expected.extend_from_slice(&(s.len() as u32).to_le_bytes());
        expected.extend_from_slice(s.as_bytes());
    }
    assert_eq!(node(&parsed, "vlen_strings").chunks, vec![(vec![0], Chunk::Inline(expected))]);
    assert!(!parsed.nodes.contains_key("compound"));
    assert!(parsed.warnings.iter().any(|w| w.contains("compound") && w.contains("left out")), "{:?}", parsed.warnings);
    assert_eq!(meta(&parsed, "", "attributes")["one"], json!(4.5));
    assert_eq!(meta(&parsed, "", "attributes")["numbers"], json!([1, 2, 3]));
    assert_eq!(node(&parsed, "sub").metadata["node_type"], json!("group"));
}

#[test]
fn netcdf4_dimensions_and_cf_attributes_are_as_netcdf_means_them() {
    let parsed = parsed("netcdf4.nc");
    assert!(!parsed.nodes.contains_key("nv") || meta(&parsed, "nv", "dimension_names") == json!(["lat"]));
    assert_eq!(meta(&parsed, "temp", "dimension_names"), json!(["time", "lat", "lon"]));
    assert_eq!(meta(&parsed, "temp", "attributes")["_FillValue"], json!("AAAAAICHw8A="));
    assert_eq!(meta(&parsed, "counts", "attributes")["_FillValue"], json!(-1));
    assert_eq!(meta(&parsed, "temp", "fill_value"), json!(-9999.0));
    assert_eq!(codec_names(&parsed, "temp"), ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]);
    assert_eq!(meta(&parsed, "forecast/fc", "dimension_names"), json!(["step", "lat"]));
    for hidden in ["_NCProperties", "_Netcdf4Dimid", "DIMENSION_LIST", "CLASS", "NAME", "REFERENCE_LIST"] {
        for node in parsed.nodes.values() {
            assert!(node.metadata["attributes"].get(hidden).is_none(), "{hidden}");
        }
    }
}

#[test]
fn hdf5_without_scales_gets_phony_dims_as_h5netcdf_numbers_them() {
    let parsed = parsed("phony.h5");
    assert_eq!(meta(&parsed, "a", "dimension_names"), json!(["phony_dim_0", "phony_dim_1"]));
    assert_eq!(meta(&parsed, "s", "dimension_names"), json!([]));
}

#[test]
fn external_and_virtual_datasets_are_left_out_with_a_warning() {
    let parsed = parsed("unservable.h5");
    assert!(parsed.nodes.contains_key("plain"));
    for left_out in ["external", "virtual"] {
        assert!(!parsed.nodes.contains_key(left_out), "{left_out}");
        assert!(
            parsed.warnings.iter().any(|w| w.starts_with(&format!("variable {left_out} "))),
            "{left_out}: {:?}",
            parsed.warnings
        );
    }
}

#[test]
fn a_user_block_moves_every_address() {
    let parsed = parsed("userblock.h5");
    let Chunk::Range { offset, .. } = node(&parsed, "contiguous").chunks[0].1 else { panic!() };
    assert!(offset > 512);
}

/// Writes each fixture's nodes as a Zarr v3 directory store under `$HDF5_STORES` (chunks copied
/// from the file's byte ranges), for tests/fixtures/files/check_hdf5_stores.py to open with
/// `xr.open_zarr` and compare with `xr.open_dataset(file)`. Run by hand:
/// `HDF5_STORES=/tmp/stores cargo test --lib formats::hdf5::tests::write_stores -- --ignored`.
#[test]
#[ignore]
fn write_stores() {
    let root = std::path::PathBuf::from(std::env::var("HDF5_STORES").unwrap());
    for file in FILES {
        let bytes = fixture(file);
        let store = root.join(file);
        let _ = std::fs::remove_dir_all(&store);
        for (path, node) in &parse(Arc::new(bytes.clone()), &Limits::default()).unwrap().nodes {
            let dir = store.join(path);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("zarr.json"), serde_json::to_vec(&node.metadata).unwrap()).unwrap();
            for (index, chunk) in &node.chunks {
                let key: Vec<String> =
                    std::iter::once("c".to_string()).chain(index.iter().map(u64::to_string)).collect();
                let at = dir.join(key.join("/"));
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                let data = match chunk {
                    Chunk::Range { offset, length } => bytes.read(*offset, *length).unwrap().to_vec(),
                    Chunk::Inline(data) => data.clone(),
                    Chunk::Elsewhere { .. } | Chunk::Assembled(_) => unreachable!(),
                };
                std::fs::write(at, data).unwrap();
            }
        }
    }
}

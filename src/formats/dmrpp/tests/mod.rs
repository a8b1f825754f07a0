//! The parser against the sidecars of tests/fixtures/files/make_dmrpp.py and the oracle h5py
//! wrote for the same file (hostile documents: `hostile.rs`).

mod hostile;

use std::collections::BTreeSet;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::parse;
use crate::formats::{Chunk, FormatError, Limits, Node, Parsed, cf};
use hostile::{deflate, invalid};

pub(super) const MAIN: &str = "dmrpp_nc4.h5.dmrpp";

pub(super) fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/fixtures/files/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

pub(super) fn parsed(name: &str) -> Parsed {
    parse(&fixture(name), &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn oracle() -> Value {
    serde_json::from_slice(&fixture("dmrpp_nc4.h5.oracle.json")).unwrap()
}

fn node<'a>(parsed: &'a Parsed, path: &str) -> &'a Node {
    parsed.nodes.get(path).unwrap_or_else(|| panic!("no node {path}: {:?}; {:?}", parsed.nodes.keys(), parsed.warnings))
}

pub(super) fn meta(parsed: &Parsed, path: &str, key: &str) -> Value {
    node(parsed, path).metadata.get(key).cloned().unwrap_or(Value::Null)
}

fn attrs(parsed: &Parsed, path: &str) -> serde_json::Map<String, Value> {
    meta(parsed, path, "attributes").as_object().cloned().unwrap()
}

fn codec_names(parsed: &Parsed, path: &str) -> Vec<String> {
    let codecs = meta(parsed, path, "codecs");
    codecs.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
}

pub(super) fn document(body: &str) -> Bytes {
    Bytes::from(format!(
        "<?xml version=\"1.0\"?><Dataset xmlns=\"http://xml.opendap.org/ns/DAP/4.0#\" \
         xmlns:dmrpp=\"http://xml.opendap.org/dap/dmrpp/1.0.0#\" name=\"t.h5\" \
         dmrpp:href=\"OPeNDAP_DMRpp_DATA_ACCESS_URL\" dmrpp:version=\"3.21.1\">{body}</Dataset>"
    ))
}

pub(super) fn parse_body(body: &str) -> Result<Parsed, FormatError> {
    parse(&document(body), &Limits::default())
}

#[test]
fn every_array_and_chunk_is_what_h5py_says() {
    let parsed = parsed(MAIN);
    let oracle = oracle();
    let arrays = oracle["arrays"].as_object().unwrap();
    assert!(arrays.len() >= 12);
    for (path, expected) in arrays {
        let node = node(&parsed, path);
        let m = &node.metadata;
        assert_eq!(m["node_type"], "array", "{path}");
        assert_eq!(m["shape"], expected["shape"], "{path}");
        let dtype = expected["dtype"].as_str().unwrap();
        let (data_type, size) = match dtype.strip_prefix("fixed:") {
            Some(n) => {
                let n: u64 = n.parse().unwrap();
                (json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": n}}), n)
            }
            None => (json!(dtype), dtype_size(dtype)),
        };
        assert_eq!(m["data_type"], data_type, "{path}");
        let chunk_shape: Vec<u64> =
            expected["chunks"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap().max(1)).collect();
        assert_eq!(m["chunk_grid"]["configuration"]["chunk_shape"], json!(chunk_shape), "{path}");
        if dtype.starts_with("fixed:") {
            assert_eq!(m["fill_value"], expected["fill"], "{path}");
        } else {
            assert_eq!(m["fill_value"].as_f64(), expected["fill"].as_f64(), "{path}");
        }
        let bytes = match (expected["big_endian"] == true, size == 1 || dtype.starts_with("fixed:")) {
            (_, true) => json!({"name": "bytes"}),
            (true, false) => json!({"name": "bytes", "configuration": {"endian": "big"}}),
            (false, false) => json!({"name": "bytes", "configuration": {"endian": "little"}}),
        };
        assert_eq!(m["codecs"][0], bytes, "{path}");
        let mut levels = expected["levels"].as_array().unwrap().iter();
        let mut want = vec![m["codecs"][0].clone()];
        for filter in expected["filters"].as_array().unwrap() {
            want.push(match filter.as_str().unwrap() {
                "deflate" => json!({"name": "numcodecs.zlib", "configuration": {"level": levels.next().unwrap()}}),
                "shuffle" => {
                    json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": size}})
                }
                _ => json!({"name": "numcodecs.fletcher32", "configuration": {}}),
            });
        }
        assert_eq!(m["codecs"], json!(want), "{path}");
        if expected["compact"] == true {
            let data =
                base64::engine::general_purpose::STANDARD.decode(expected["data_b64"].as_str().unwrap()).unwrap();
            assert_eq!(node.chunks, vec![(vec![0], Chunk::Inline(data))], "{path}");
            continue;
        }
        let ours: BTreeSet<(Vec<u64>, u64, u64)> = node
            .chunks
            .iter()
            .map(|(index, chunk)| match chunk {
                Chunk::Range { offset, length } => (index.clone(), *offset, *length),
                other => panic!("{path}: {other:?}"),
            })
            .collect();
        let theirs: BTreeSet<(Vec<u64>, u64, u64)> = expected["refs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let index =
                    r[0].as_array().unwrap().iter().zip(&chunk_shape).map(|(p, c)| p.as_u64().unwrap() / c).collect();
                (index, r[1].as_u64().unwrap(), r[2].as_u64().unwrap())
            })
            .collect();
        assert_eq!(ours, theirs, "{path}");
        assert_eq!(ours.len(), node.chunks.len(), "{path}: a chunk twice");
    }
    let served: BTreeSet<&String> =
        parsed.nodes.iter().filter(|(_, n)| n.metadata["node_type"] == "array").map(|(p, _)| p).collect();
    assert_eq!(served, arrays.keys().collect(), "arrays served beyond h5py's variables");
    assert_eq!(parsed.warnings, Vec::<String>::new());
}

fn dtype_size(data_type: &str) -> u64 {
    match data_type {
        "int8" | "uint8" => 1,
        "int16" | "uint16" => 2,
        "int32" | "uint32" | "float32" => 4,
        _ => 8,
    }
}

#[test]
fn groups_dimensions_and_a_dimension_without_variable() {
    let parsed = parsed(MAIN);
    assert_eq!(meta(&parsed, "", "node_type"), "group");
    assert_eq!(meta(&parsed, "sub", "node_type"), "group");
    assert_eq!(meta(&parsed, "sub/deeper", "node_type"), "group");
    assert!(!parsed.nodes.contains_key("nv"), "a netCDF4 dimension without a variable is no array");
    assert_eq!(meta(&parsed, "temp", "dimension_names"), json!(["time", "lat", "lon"]));
    assert_eq!(meta(&parsed, "lat", "dimension_names"), json!(["lat"]));
    assert_eq!(meta(&parsed, "sub/x", "dimension_names"), json!(["n"]));
    assert_eq!(meta(&parsed, "phony", "dimension_names"), json!(["phony_dim_1", "phony_dim_2"]));
    assert_eq!(meta(&parsed, "compact", "dimension_names"), json!(["phony_dim_0"]));
    assert_eq!(meta(&parsed, "sub/deeper/scalar", "shape"), json!([]));
    assert_eq!(node(&parsed, "sub/deeper/scalar").chunks[0].0, Vec::<u64>::new());
    assert_eq!(attrs(&parsed, "sub/deeper")["level"], json!(2));
    assert_eq!(attrs(&parsed, "sub")["description"], json!("a subgroup"));
}

#[test]
fn attributes_are_typed_and_hyrax_and_netcdf4_bookkeeping_hidden() {
    let parsed = parsed(MAIN);
    let root = attrs(&parsed, "");
    assert_eq!(root["title"], json!("DMR++ fixture"));
    assert_eq!(root["version"], json!(3));
    assert_eq!(root["scales"], json!([1.5, 2.5]));
    assert!(!root.contains_key("_NCProperties") && !root.contains_key("build_dmrpp_metadata"));
    let temp = attrs(&parsed, "temp");
    assert_eq!(temp["units"], json!("K"));
    assert_eq!(temp["comment"], json!("0 \u{b0}C is 273.15 K & <that> is all"), "ISO-8859-1 and entities");
    assert_eq!(temp["valid_range"], json!([-100, 100]));
    assert_eq!(temp["scale_factor"], json!(f64::from(0.1f32)));
    assert_eq!(Some(temp["_FillValue"].clone()), cf::fill_attribute(-9999.0, "float32"));
    assert!(!temp.contains_key("fullnamepath") && !temp.contains_key("origname"));
    assert_eq!(attrs(&parsed, "counts")["missing_value"], json!(-1));
    let lat = attrs(&parsed, "lat");
    for hidden in ["CLASS", "NAME", "_Netcdf4Dimid", "fullnamepath"] {
        assert!(!lat.contains_key(hidden), "{hidden}");
    }
}

#[test]
fn a_variable_without_chunks_reads_as_its_fill() {
    let parsed = parsed(MAIN);
    assert!(node(&parsed, "unwritten").chunks.is_empty());
    assert_eq!(meta(&parsed, "unwritten", "fill_value"), json!(-1.0));
    assert_eq!(meta(&parsed, "temp", "fill_value"), json!(-9999.0));
}

#[test]
fn hrefs_filter_masks_and_blocks() {
    let parsed = parsed("dmrpp/variants.dmrpp");
    let temp = node(&parsed, "temp");
    let elsewhere: Vec<_> = temp.chunks.iter().filter(|(_, c)| matches!(c, Chunk::Elsewhere { .. })).collect();
    assert_eq!(elsewhere.len(), 1);
    assert_eq!(elsewhere[0].0, [0, 0, 0]);
    assert!(matches!(&elsewhere[0].1, Chunk::Elsewhere { url, .. } if url == "https://example.org/data/other.h5"));
    for (left_out, why) in [("flags", "href"), ("counts", "fm=1"), ("lat", "dmrpp:block")] {
        assert!(!parsed.nodes.contains_key(left_out), "{left_out}");
        let warning = parsed.warnings.iter().find(|w| w.starts_with(&format!("{left_out}:")));
        assert!(warning.is_some_and(|w| w.contains(why)), "{left_out}: {:?}", parsed.warnings);
    }
    assert_eq!(parsed.warnings.len(), 3);
}

#[test]
fn missing_data_is_inflated_and_held_inline() {
    let parsed = parsed("dmrpp/missingdata.dmrpp");
    let lon = node(&parsed, "lon");
    let values: Vec<u8> = (0..8).flat_map(|i| (i as f32 * 50.0).to_le_bytes()).collect();
    assert_eq!(lon.chunks, vec![(vec![0], Chunk::Inline(values))]);
    assert_eq!(codec_names(&parsed, "lon"), ["bytes"]);
}

#[test]
fn old_documents_have_filters_in_hyrax_s_fixed_order() {
    let parsed = parsed("dmrpp/old.dmrpp");
    assert_eq!(codec_names(&parsed, "temp"), ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]);
    assert_eq!(
        codec_names(&parsed, "counts"),
        ["bytes", "numcodecs.shuffle", "numcodecs.zlib", "numcodecs.fletcher32"]
    );
    assert_eq!(parsed.nodes, self::parsed(MAIN).nodes, "the same file either way");
}

#[test]
fn unsupported_variables_are_left_out_with_a_warning() {
    let body = "<Structure name=\"s\"><Int32 name=\"a\"/><dmrpp:chunks><dmrpp:chunk offset=\"1\" nBytes=\"4\"/></dmrpp:chunks></Structure>\
                <String name=\"str\"/><Int16 name=\"z\"><Dim size=\"4\"/><dmrpp:chunks compressionType=\"szip\"/></Int16>\
                <Int16 name=\"ok\"><Dim size=\"4\"/></Int16>";
    let parsed = parse_body(body).unwrap();
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "ok"]);
    assert_eq!(parsed.warnings.len(), 3, "{:?}", parsed.warnings);
    assert!(parsed.warnings[2].starts_with("z:") && parsed.warnings[2].contains("szip"));
}

#[test]
fn anonymous_dimensions_are_numbered_over_the_file_group_by_group() {
    let body = "<Float32 name=\"b\"><Dim size=\"3\"/><Dim size=\"5\"/></Float32><Float32 name=\"a\"><Dim size=\"3\"/><Dim size=\"3\"/></Float32>\
                <Group name=\"g\"><Int16 name=\"c\"><Dim size=\"3\"/></Int16></Group>";
    let parsed = parse_body(body).unwrap();
    assert_eq!(meta(&parsed, "a", "dimension_names"), json!(["phony_dim_0", "phony_dim_1"]));
    assert_eq!(meta(&parsed, "b", "dimension_names"), json!(["phony_dim_0", "phony_dim_2"]));
    assert_eq!(meta(&parsed, "g/c", "dimension_names"), json!(["phony_dim_3"]));
}

#[test]
fn variable_length_strings_are_held_inline_as_vlen_utf8() {
    let swe = base64::engine::general_purpose::STANDARD.encode(deflate(b"swe"));
    let body = format!(
        "<String name=\"s\"><Dim size=\"4\"/><dmrpp:vlsa><v>Parting</v><v c=\"2\">is &amp; so</v><v s=\"3\">{swe}</v></dmrpp:vlsa></String>"
    );
    let parsed = parse_body(&body).unwrap();
    assert_eq!(meta(&parsed, "s", "data_type"), json!("string"));
    assert_eq!(meta(&parsed, "s", "codecs"), json!([{"name": "vlen-utf8"}]));
    assert_eq!(meta(&parsed, "s", "fill_value"), json!(""));
    let mut want = 4u32.to_le_bytes().to_vec();
    for item in ["Parting", "is & so", "is & so", "swe"] {
        want.extend_from_slice(&(item.len() as u32).to_le_bytes());
        want.extend_from_slice(item.as_bytes());
    }
    assert_eq!(node(&parsed, "s").chunks, vec![(vec![0], Chunk::Inline(want))]);
    invalid(
        "<String name=\"s\"><Dim size=\"4\"/><dmrpp:vlsa><v>a</v></dmrpp:vlsa></String>",
        "holds 1 strings where its shape needs 4",
    );
    let limits = Limits { max_inline_bytes: 16, ..Limits::default() };
    let parsed = parse(&document(&body), &limits).unwrap();
    assert!(!parsed.nodes.contains_key("s"));
    assert!(
        parsed.warnings[0].starts_with("s:") && parsed.warnings[0].contains("max_inline_bytes"),
        "{:?}",
        parsed.warnings
    );
}

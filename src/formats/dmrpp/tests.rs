//! The parser against the sidecars of tests/fixtures/files/make_dmrpp.py and the oracle h5py
//! wrote for the same file, and against hostile documents.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::parse;
use crate::formats::{Chunk, FormatError, Limits, Node, Parsed, cf};

const MAIN: &str = "dmrpp_nc4.h5.dmrpp";

fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/fixtures/files/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

fn parsed(name: &str) -> Parsed {
    parse(&fixture(name), &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn oracle() -> Value {
    serde_json::from_slice(&fixture("dmrpp_nc4.h5.oracle.json")).unwrap()
}

fn node<'a>(parsed: &'a Parsed, path: &str) -> &'a Node {
    parsed.nodes.get(path).unwrap_or_else(|| panic!("no node {path}: {:?}; {:?}", parsed.nodes.keys(), parsed.warnings))
}

fn meta(parsed: &Parsed, path: &str, key: &str) -> Value {
    node(parsed, path).metadata.get(key).cloned().unwrap_or(Value::Null)
}

fn attrs(parsed: &Parsed, path: &str) -> serde_json::Map<String, Value> {
    meta(parsed, path, "attributes").as_object().cloned().unwrap()
}

fn codec_names(parsed: &Parsed, path: &str) -> Vec<String> {
    let codecs = meta(parsed, path, "codecs");
    codecs.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
}

fn document(body: &str) -> Bytes {
    Bytes::from(format!(
        "<?xml version=\"1.0\"?><Dataset xmlns=\"http://xml.opendap.org/ns/DAP/4.0#\" \
         xmlns:dmrpp=\"http://xml.opendap.org/dap/dmrpp/1.0.0#\" name=\"t.h5\" \
         dmrpp:href=\"OPeNDAP_DMRpp_DATA_ACCESS_URL\" dmrpp:version=\"3.21.1\">{body}</Dataset>"
    ))
}

fn parse_body(body: &str) -> Result<Parsed, FormatError> {
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
fn every_truncation_and_many_byte_flips_are_errors_not_panics() {
    let whole = fixture(MAIN);
    let end = whole.len() - 1; // the final newline
    for cut in (0..end).step_by(7) {
        let result = parse(&whole.slice(..cut), &Limits::default());
        assert!(result.is_err(), "cut at {cut} parsed");
    }
    for at in (0..whole.len()).step_by(5) {
        for byte in [b'<', b'>', b'"', b'&', b'/', b'9', 0xff, 0] {
            let mut bent = whole.to_vec();
            bent[at] = byte;
            let _ = parse(&Bytes::from(bent), &Limits::default());
        }
    }
}

fn invalid(body: &str, says: &str) {
    match parse_body(body) {
        Err(FormatError::Invalid(m) | FormatError::TooLarge(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("{body}: {other:?}"),
    }
}

const VAR: &str = "<Dimension name=\"x\" size=\"4\"/><Int16 name=\"v\"><Dim name=\"/x\"/>";

#[test]
fn hostile_documents_are_errors() {
    invalid("<Int16 name=\"v\"><Dim size=\"4\"/>", "not well-formed");
    invalid("<Int16 name=\"v\"></Float32>", "not well-formed");
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[4]\"/></dmrpp:chunks></Int16>"
        ),
        "v: chunkPositionInArray [4]",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[1]\"/></dmrpp:chunks></Int16>"
        ),
        "not the start of a chunk",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[0]\"/><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[0]\"/></dmrpp:chunks></Int16>"
        ),
        "same position",
    );
    invalid(
        &format!("{VAR}<dmrpp:chunks><dmrpp:chunk offset=\"-1\" nBytes=\"2\"/></dmrpp:chunks></Int16>"),
        "\"-1\" is not an unsigned integer",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunk offset=\"18446744073709551615\" nBytes=\"2\"/></dmrpp:chunks></Int16>"
        ),
        "past 2^64",
    );
    invalid(
        &format!("{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>0</dmrpp:chunkDimensionSizes></dmrpp:chunks></Int16>"),
        "do not fit",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2 2</dmrpp:chunkDimensionSizes></dmrpp:chunks></Int16>"
        ),
        "do not fit",
    );
    invalid(&format!("{VAR}<dmrpp:chunks fillValue=\"x\"/></Int16>"), "fillValue");
    invalid(
        &format!("{VAR}<dmrpp:chunks fillValue=\"40000\"/></Int16>"),
        "fillValue \"40000\" is not a value of type Int16",
    );
    invalid("<Int16 name=\"v\"><Dim name=\"/nowhere\"/></Int16>", "not declared");
    invalid("<Dimension name=\"x\" size=\"-4\"/>", "not an unsigned integer");
    let huge =
        "<Dimension name=\"a\" size=\"4294967296\"/><Float64 name=\"v\"><Dim name=\"/a\"/><Dim name=\"/a\"/></Float64>";
    invalid(huge, "more bytes than a 64-bit count");
    invalid("<Int16 name=\"a/b\"/>", "cannot name a Zarr node");
    invalid("<Int16 name=\"v\"/><Int16 name=\"v\"/>", "two nodes");
    invalid("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:compact>AAAA</dmrpp:compact></Int16>", "holds 3 bytes");
    invalid("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:compact>!!!!</dmrpp:compact></Int16>", "not base64");
    invalid(
        "<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>AAAA</dmrpp:missingdata></Int16>",
        "does not inflate",
    );
    // A zlib bomb: 16 MiB of zeros where 4 bytes are wanted.
    let bomb = base64::engine::general_purpose::STANDARD.encode(deflate(&vec![0u8; 16 << 20]));
    invalid(
        &format!("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>{bomb}</dmrpp:missingdata></Int16>"),
        "more than its shape needs",
    );
    let small_bomb = base64::engine::general_purpose::STANDARD.encode(deflate(&[0u8; 64]));
    invalid(
        &format!("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>{small_bomb}</dmrpp:missingdata></Int16>"),
        "inflates to 5 bytes",
    );
    assert!(matches!(parse(&Bytes::from_static(b""), &Limits::default()), Err(FormatError::Invalid(_))));
    assert!(matches!(
        parse(&Bytes::from_static(b"<?xml version=\"1.0\"?><Other/>"), &Limits::default()),
        Err(FormatError::Invalid(_))
    ));
    assert!(matches!(
        parse(&Bytes::from(document("").to_vec().repeat(2)), &Limits::default()),
        Err(FormatError::Invalid(_))
    ));
}

fn deflate(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn entities_are_never_expanded() {
    let doc = "<?xml version=\"1.0\"?><!DOCTYPE Dataset [<!ENTITY lol \"lollollollollol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;\">]>\
               <Dataset name=\"t\"><Attribute name=\"a\" type=\"String\"><Value>&lol2;</Value></Attribute></Dataset>";
    let result = parse(&Bytes::from_static(doc.as_bytes()), &Limits::default());
    assert!(matches!(result, Err(FormatError::Invalid(m)) if m.contains("&lol2;")));
    let doc = "<Dataset name=\"&lol;\"/>";
    assert!(matches!(parse(&Bytes::from_static(doc.as_bytes()), &Limits::default()), Err(FormatError::Invalid(_))));
}

#[test]
fn limits_bound_depth_counts_and_time() {
    let deep = format!("{}{}", "<Group name=\"g\">".repeat(100), "</Group>".repeat(100));
    assert!(matches!(parse_body(&deep), Err(FormatError::TooLarge(m)) if m.contains("max_depth")));
    let nested = format!("{}{}", "<Attribute name=\"a\" type=\"Container\">".repeat(100), "</Attribute>".repeat(100));
    assert!(matches!(parse_body(&nested), Err(FormatError::TooLarge(m)) if m.contains("max_depth")));
    let limits = Limits { max_attributes: 100, ..Limits::default() };
    let many = "<Attribute name=\"a\" type=\"Int32\"><Value>1</Value></Attribute>".repeat(101);
    assert!(matches!(parse(&document(&many), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_attributes")));
    let xml_attributes: String = (0..100).map(|i| format!(" a{i}=\"\"")).collect();
    assert!(matches!(parse_body(&format!("<Int16 name=\"v\"{xml_attributes}/>")), Err(FormatError::TooLarge(_))));
    let limits = Limits { max_nodes: 10, ..Limits::default() };
    let nodes: String = (0..11).map(|i| format!("<Int16 name=\"v{i}\"/>")).collect();
    assert!(matches!(parse(&document(&nodes), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_nodes")));
    let limits = Limits { max_chunks: 10, ..Limits::default() };
    assert!(matches!(parse(&fixture(MAIN), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_chunks")));
    let limits = Limits { max_inline_bytes: 8, ..Limits::default() };
    let parsed = parse(&fixture(MAIN), &limits).unwrap();
    assert!(!parsed.nodes.contains_key("compact"));
    assert!(parsed.warnings.iter().any(|w| w.starts_with("compact:") && w.contains("max_inline_bytes")));
    let limits = Limits { deadline: Some(Instant::now() - Duration::from_secs(1)), ..Limits::default() };
    let big = document(&"<Attribute name=\"a\" type=\"Int32\"><Value>1</Value></Attribute>".repeat(2000));
    assert!(matches!(parse(&big, &limits), Err(FormatError::TooLarge(_))));
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

proptest::proptest! {
    #[test]
    fn any_bytes_give_a_result_not_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = parse(&Bytes::from(bytes), &Limits::default());
    }

    #[test]
    fn any_splice_of_a_real_document_gives_a_result(at in 0usize..11000, len in 0usize..64, fill in proptest::prelude::any::<u8>()) {
        let mut doc = fixture(MAIN).to_vec();
        let at = at.min(doc.len());
        let end = (at + len).min(doc.len());
        doc.splice(at..end, std::iter::repeat_n(fill, len / 2));
        let _ = parse(&Bytes::from(doc), &Limits::default());
    }
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

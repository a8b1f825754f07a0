//! The GRIB2 parser on a file ecCodes wrote (tests/python/grib_files.py: temperature on two
//! pressure levels, 2 m temperature, surface pressure with a bitmap, at steps 0 and 6), and on
//! hostile variations of it.

use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::formats::{Chunk, Node};

const SMALL: &[u8] = include_bytes!("../../../tests/fixtures/files/small.grib2");
/// Where ecCodes put each message (`noaa_index` of the file).
const OFFSETS: [u64; 8] = [0, 299, 598, 897, 1198, 1497, 1796, 2095];

fn parse_bytes(bytes: &[u8], index: Option<&str>) -> Result<Parsed, FormatError> {
    parse(&Bytes::copy_from_slice(bytes), &Limits::default(), index)
}

fn node<'a>(parsed: &'a Parsed, path: &str) -> &'a Node {
    parsed.nodes.get(path).unwrap_or_else(|| panic!("no node {path} in {:?}", parsed.nodes.keys().collect::<Vec<_>>()))
}

fn inline_f64(node: &Node) -> Vec<f64> {
    match &node.chunks[..] {
        [(_, Chunk::Inline(bytes))] => bytes.chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect(),
        other => panic!("not one inline chunk: {other:?}"),
    }
}

fn inline_i64(node: &Node) -> Vec<i64> {
    match &node.chunks[..] {
        [(_, Chunk::Inline(bytes))] => bytes.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect(),
        other => panic!("not one inline chunk: {other:?}"),
    }
}

fn noaa_index() -> String {
    OFFSETS.iter().enumerate().map(|(i, o)| format!("{}:{o}:d=2024010100:X:level:anl:\n", i + 1)).collect()
}

#[test]
fn the_hierarchy_is_gribberish_s_stable_layout() {
    let parsed = parse_bytes(SMALL, None).unwrap();
    let paths: Vec<&str> = parsed.nodes.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "",
            "hag",
            "hag/instant",
            "hag/instant/latitude",
            "hag/instant/longitude",
            "hag/instant/spatial_ref",
            "hag/instant/time",
            "hag/instant/tmp",
            "isobar",
            "isobar/instant",
            "isobar/instant/isobar",
            "isobar/instant/latitude",
            "isobar/instant/longitude",
            "isobar/instant/spatial_ref",
            "isobar/instant/time",
            "isobar/instant/tmp",
            "sfc",
            "sfc/instant",
            "sfc/instant/latitude",
            "sfc/instant/longitude",
            "sfc/instant/pres",
            "sfc/instant/spatial_ref",
            "sfc/instant/time",
        ]
    );
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let tmp = &node(&parsed, "isobar/instant/tmp").metadata;
    assert_eq!(tmp["shape"], json!([2, 2, 5, 8]));
    assert_eq!(tmp["dimension_names"], json!(["time", "isobar", "latitude", "longitude"]));
    assert_eq!(tmp["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 1, 5, 8]));
    assert_eq!(tmp["codecs"], json!([{"name": "gribberish", "configuration": {"var": "tmp"}}]));
    assert_eq!(tmp["data_type"], "float64");
    assert_eq!(tmp["fill_value"], "NaN");
    assert_eq!(tmp["attributes"]["GRIB_packingType"], "grid_simple");
    assert_eq!(tmp["attributes"]["grid_mapping"], "spatial_ref");
    // Levels ascending (500 hPa first), times by step: each message one chunk.
    assert_eq!(inline_f64(node(&parsed, "isobar/instant/isobar")), [50000.0, 85000.0]);
    assert_eq!(inline_i64(node(&parsed, "isobar/instant/time")), [1704067200, 1704067200 + 6 * 3600]);
    let chunks: Vec<(Vec<u64>, Chunk)> = node(&parsed, "isobar/instant/tmp").chunks.clone();
    assert_eq!(
        chunks,
        [
            (vec![0, 0, 0, 0], Chunk::Range { offset: 299, length: 299 }),
            (vec![0, 1, 0, 0], Chunk::Range { offset: 0, length: 299 }),
            (vec![1, 0, 0, 0], Chunk::Range { offset: 1497, length: 299 }),
            (vec![1, 1, 0, 0], Chunk::Range { offset: 1198, length: 299 }),
        ]
    );
    assert_eq!(inline_f64(node(&parsed, "sfc/instant/latitude")), [60.0, 59.0, 58.0, 57.0, 56.0]);
    assert_eq!(inline_f64(node(&parsed, "sfc/instant/longitude")), (0..8).map(f64::from).collect::<Vec<_>>());
    let pres = &node(&parsed, "sfc/instant/pres").metadata;
    assert_eq!(pres["shape"], json!([2, 5, 8]));
    assert_eq!(pres["attributes"]["long_name"], "pressure");
    assert_eq!(
        node(&parsed, "sfc/instant").metadata["attributes"]["coordinates"],
        json!("time latitude longitude spatial_ref")
    );
    assert_eq!(
        node(&parsed, "sfc/instant/spatial_ref").metadata["attributes"]["grid_mapping_name"],
        "latitude_longitude"
    );
}

#[test]
fn the_data_sections_are_never_in_a_header() {
    let mut warnings = Vec::new();
    let messages = scan::scan(&Bytes::from_static(SMALL), &Limits::default(), &mut warnings).unwrap();
    assert_eq!(messages.iter().map(|m| m.offset).collect::<Vec<_>>(), OFFSETS);
    for m in &messages {
        assert!(m.header.len() < 200, "a header of {} bytes", m.header.len());
        assert!(m.header.ends_with(b"\0\0\0\x05\x077777"));
    }
    // Surface pressure has a bitmap (its indicator 0 kept); the others none (255).
    let indicators: Vec<u8> = messages.iter().map(|m| m.header[m.header.len() - 10]).collect();
    assert_eq!(indicators, [255, 255, 255, 0, 255, 255, 255, 0]);
}

#[test]
fn an_index_gives_the_same_hierarchy_and_a_wrong_one_is_not_believed() {
    let scanned = parse_bytes(SMALL, None).unwrap();
    let indexed = parse_bytes(SMALL, Some(&noaa_index())).unwrap();
    assert_eq!(indexed, scanned);
    let ecmwf: String = OFFSETS
        .iter()
        .zip(OFFSETS.iter().skip(1).chain([&(SMALL.len() as u64)]))
        .map(|(o, end)| format!("{{\"_offset\": {o}, \"_length\": {}, \"param\": \"x\"}}\n", end - o))
        .collect();
    assert_eq!(parse_bytes(SMALL, Some(&ecmwf)).unwrap(), scanned);
    // An index whose offsets are not messages: the file is read from its start, and said so.
    let wrong = "1:0:d=2024010100:X:l:anl:\n2:17:d=2024010100:X:l:anl:\n";
    let parsed = parse_bytes(SMALL, Some(wrong)).unwrap();
    assert_eq!(parsed.nodes, scanned.nodes);
    assert!(parsed.warnings.iter().any(|w| w.contains("its index does not match it")), "{:?}", parsed.warnings);
    let parsed = parse_bytes(SMALL, Some("not an index at all")).unwrap();
    assert_eq!(parsed.nodes, scanned.nodes);
    assert!(parsed.warnings[0].contains("its index cannot be read"), "{:?}", parsed.warnings);
}

#[test]
fn an_index_missing_the_last_messages_is_not_believed() {
    // A file that grew after its index was written.
    let stale: String =
        OFFSETS[..4].iter().enumerate().map(|(i, o)| format!("{}:{o}:d=2024010100:X:l:anl:\n", i + 1)).collect();
    let parsed = parse_bytes(SMALL, Some(&stale)).unwrap();
    assert_eq!(parsed.nodes, parse_bytes(SMALL, None).unwrap().nodes);
    assert!(parsed.warnings.iter().any(|w| w.contains("its index does not match it")), "{:?}", parsed.warnings);
}

fn invalid(bytes: &[u8]) -> String {
    match parse_bytes(bytes, None) {
        Err(FormatError::Invalid(why)) => why,
        other => panic!("not refused as invalid: {other:?}"),
    }
}

#[test]
fn hostile_files_are_refused_with_the_place_and_the_problem() {
    // Truncated in the middle of a message.
    let why = invalid(&SMALL[..1000]);
    assert!(why.contains("the message at byte 897") && why.contains("truncated"), "{why}");
    // Not GRIB at all.
    assert!(invalid(b"GRIX and then some").contains("GRIB"));
    // A message that says it is longer than the file.
    let mut long = SMALL[..299].to_vec();
    long[8..16].copy_from_slice(&10_000_000u64.to_be_bytes());
    assert!(invalid(&long).contains("past the end of the file"), "{}", invalid(&long));
    // A section that says it is 0 bytes long (gribberish would loop on it forever).
    let mut zero = SMALL[..299].to_vec();
    zero[16..20].copy_from_slice(&0u32.to_be_bytes());
    assert!(invalid(&zero).contains("section"), "{}", invalid(&zero));
    // A section that says it runs past its message.
    let mut past = SMALL[..299].to_vec();
    past[16..20].copy_from_slice(&100_000u32.to_be_bytes());
    assert!(invalid(&past).contains("does not fit"), "{}", invalid(&past));
    // The end marker missing.
    let mut end = SMALL[..299].to_vec();
    end[295..299].copy_from_slice(b"8888");
    assert!(invalid(&end).contains("7777"), "{}", invalid(&end));
    // Rubbish after the last message.
    let mut tail = SMALL.to_vec();
    tail.extend_from_slice(&[0xAB; 100]);
    assert!(invalid(&tail).contains("not a GRIB message"), "{}", invalid(&tail));
}

#[test]
fn padding_between_and_after_messages_is_skipped() {
    let mut padded = SMALL[..299].to_vec();
    padded.extend_from_slice(b"\r\r\n");
    padded.extend_from_slice(&SMALL[299..]);
    padded.extend_from_slice(&[0; 64]);
    let parsed = parse_bytes(&padded, None).unwrap();
    let tmp = node(&parsed, "isobar/instant/tmp");
    assert_eq!(tmp.chunks[1], (vec![0, 1, 0, 0], Chunk::Range { offset: 0, length: 299 }));
    assert_eq!(tmp.chunks[0], (vec![0, 0, 0, 0], Chunk::Range { offset: 302, length: 299 }));
}

#[test]
fn a_grid_too_large_or_a_grib1_message_is_left_out_with_a_warning() {
    // The first message's grid made 70000 x 70000 points (Ni and Nj of template 3.0).
    let mut huge = SMALL.to_vec();
    let section3 = find_section(&huge[..299], 3);
    huge[section3 + 30..section3 + 34].copy_from_slice(&70_000u32.to_be_bytes());
    huge[section3 + 34..section3 + 38].copy_from_slice(&70_000u32.to_be_bytes());
    let parsed = parse_bytes(&huge, None).unwrap();
    assert!(parsed.warnings.iter().any(|w| w.contains("the message at byte 0")), "{:?}", parsed.warnings);
    assert_eq!(node(&parsed, "isobar/instant/tmp").chunks.len(), 3);
    // A GRIB1 message (edition 1: a 3-byte length) before the others.
    let mut grib1 = b"GRIB\0\0\x0c\x01\0\0\0\0".to_vec();
    grib1.extend_from_slice(SMALL);
    let parsed = parse_bytes(&grib1, None).unwrap();
    assert!(parsed.warnings.iter().any(|w| w.contains("GRIB edition 1")), "{:?}", parsed.warnings);
    assert_eq!(node(&parsed, "isobar/instant/tmp").chunks[1].1, Chunk::Range { offset: 12, length: 299 });
}

#[test]
fn a_reference_time_that_is_no_time_leaves_its_message_out() {
    // The first message's section 1 says 2024-02-30 (gribberish would panic on it).
    let mut bad = SMALL.to_vec();
    let section1 = find_section(&bad[..299], 1);
    bad[section1 + 14] = 2;
    bad[section1 + 15] = 30;
    let parsed = parse_bytes(&bad, None).unwrap();
    assert!(
        parsed
            .warnings
            .iter()
            .any(|w| w.contains("the message at byte 0") && w.contains("2024-02-30 00:00:00 is not a time")),
        "{:?}",
        parsed.warnings
    );
    assert_eq!(node(&parsed, "isobar/instant/tmp").chunks.len(), 3);
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

/// Where section `number` of the message `message` starts.
fn find_section(message: &[u8], number: u8) -> usize {
    let mut at = 16;
    while message[at + 4] != number {
        at += be_u32(&message[at..]) as usize;
    }
    at
}

#[test]
fn a_projected_grid_s_latitudes_are_decoded_from_a_message() {
    // Not in the fixture: checked through the layout's choice for a regular grid.
    let parsed = parse_bytes(SMALL, None).unwrap();
    let lat: &Value = &node(&parsed, "hag/instant/latitude").metadata["codecs"];
    assert_eq!(lat, &json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
}

#[test]
fn index_candidates_are_noaa_s_and_ecmwf_s_names() {
    assert_eq!(
        index_candidates("s3://b/gfs/gfs.t00z.pgrb2.0p25.f000"),
        ["s3://b/gfs/gfs.t00z.pgrb2.0p25.f000.idx", "s3://b/gfs/gfs.t00z.pgrb2.0p25.index"]
    );
    assert_eq!(
        index_candidates("https://h/20240101000000-0h-oper-fc.grib2"),
        ["https://h/20240101000000-0h-oper-fc.grib2.idx", "https://h/20240101000000-0h-oper-fc.index"]
    );
    assert_eq!(index_candidates("file:///d.x/file"), ["file:///d.x/file.idx", "file:///d.x/file.index"]);
}

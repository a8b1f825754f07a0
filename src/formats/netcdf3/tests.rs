//! The netCDF3 parser against files written by scipy and netCDF4-python, whose oracles
//! (`tests/fixtures/files/nc3_*.json`, from `make_netcdf3.py`) hold what xarray reads and the
//! byte ranges kerchunk's `NetCDF3ToZarr` references; and against hostile headers.

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::parse;
use crate::formats::{Chunk, FormatError, Limits, Node, Parsed};

const FIXTURES: [&str; 7] = ["scipy_v1", "scipy_v2", "one_record", "classic", "zero_records", "byte_record", "cdf5"];

fn fixture(name: &str) -> (Bytes, Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/files/");
    let file = std::fs::read(format!("{dir}nc3_{name}.nc")).unwrap();
    let oracle = std::fs::read(format!("{dir}nc3_{name}.json")).unwrap();
    (Bytes::from(file), serde_json::from_slice(&oracle).unwrap())
}

fn parsed(name: &str) -> Parsed {
    parse(&fixture(name).0, &Limits::default()).unwrap()
}

/// The values of a chunk's big-endian bytes, as JSON numbers to compare with the oracle's.
fn values(bytes: &[u8], dtype: &str) -> Vec<Value> {
    let size = match dtype {
        "S1" => 1,
        _ => dtype[1..].parse::<usize>().unwrap(),
    };
    bytes
        .chunks_exact(size)
        .map(|v| {
            let mut word = [0u8; 8];
            word[8 - size..].copy_from_slice(v);
            let unsigned = u64::from_be_bytes(word);
            let shift = 64 - 8 * size as u32;
            match &dtype[..1] {
                "f" if size == 4 => json!(f64::from(f32::from_bits(unsigned as u32))),
                "f" => json!(f64::from_bits(unsigned)),
                "i" => json!(((unsigned << shift) as i64) >> shift),
                _ => json!(unsigned),
            }
        })
        .collect()
}

fn data_type_of(dtype: &str) -> Value {
    let bits = dtype[1..].parse::<u32>().unwrap() * 8;
    match &dtype[..1] {
        "S" => json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 1}}),
        "f" => json!(format!("float{bits}")),
        "i" => json!(format!("int{bits}")),
        _ => json!(format!("uint{bits}")),
    }
}

/// A `_FillValue`/`missing_value` attribute decoded as xarray's Zarr reader does.
fn decoded_fill(value: &Value, dtype: &str) -> Value {
    match value {
        Value::String(b64) if dtype.starts_with('f') => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
            json!(f64::from_le_bytes(bytes.try_into().unwrap()))
        }
        other => other.clone(),
    }
}

fn check_variable(file: &Bytes, name: &str, node: &Node, oracle: &Value) {
    let meta = &node.metadata;
    let dtype = oracle["dtype"].as_str().unwrap();
    assert_eq!(meta["node_type"], "array", "{name}");
    assert_eq!(meta["shape"], oracle["shape"], "{name}: shape");
    assert_eq!(meta["dimension_names"], oracle["dims"], "{name}: dimension names");
    assert_eq!(meta["data_type"], data_type_of(dtype), "{name}: data type");
    let fill = if dtype == "S1" { json!("AA==") } else { oracle["fill"].clone() };
    assert_eq!(meta["fill_value"], fill, "{name}: fill value");
    let codec = if dtype.ends_with('1') {
        json!([{"name": "bytes"}])
    } else {
        json!([{"name": "bytes", "configuration": {"endian": "big"}}])
    };
    assert_eq!(meta["codecs"], codec, "{name}: codecs");
    let attributes = meta["attributes"].as_object().unwrap();
    let expected = oracle["attrs"].as_object().unwrap();
    assert_eq!(attributes.len(), expected.len(), "{name}: attributes {attributes:?}");
    for (key, value) in expected {
        let ours = match key.as_str() {
            "_FillValue" | "missing_value" => decoded_fill(&attributes[key], dtype),
            _ => attributes[key].clone(),
        };
        assert_eq!(&ours, value, "{name}: attribute {key}");
    }
    // Every chunk read back in grid order gives the values xarray reads.
    let mut chunks = node.chunks.clone();
    chunks.sort_by(|a, b| a.0.cmp(&b.0));
    let mut read = Vec::new();
    for (_, chunk) in &chunks {
        let Chunk::Range { offset, length } = chunk else { panic!("{name}: {chunk:?}") };
        read.extend(values(&file[*offset as usize..(*offset + *length) as usize], dtype));
    }
    assert_eq!(Value::Array(read), oracle["values"], "{name}: values");
    if let Some(refs) = oracle["kerchunk"].as_object() {
        let rank = oracle["shape"].as_array().unwrap().len();
        let mut theirs: Vec<(Vec<u64>, Chunk)> = refs
            .iter()
            .map(|(key, r)| {
                let index = if rank == 0 { vec![] } else { key.split('.').map(|i| i.parse().unwrap()).collect() };
                (index, Chunk::Range { offset: r[0].as_u64().unwrap(), length: r[1].as_u64().unwrap() })
            })
            .collect();
        theirs.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(chunks, theirs, "{name}: chunks against kerchunk's references");
    }
}

#[test]
fn every_fixture_reads_as_xarray_and_kerchunk_read_it() {
    for name in FIXTURES {
        let (file, oracle) = fixture(name);
        let parsed = parse(&file, &Limits::default()).unwrap();
        assert!(parsed.warnings.is_empty(), "{name}: {:?}", parsed.warnings);
        let root = &parsed.nodes[""].metadata;
        assert_eq!(root["node_type"], "group");
        assert_eq!(Value::Object(root["attributes"].as_object().unwrap().clone()), oracle["attrs"], "{name}");
        let variables = oracle["variables"].as_object().unwrap();
        assert_eq!(parsed.nodes.len(), variables.len() + 1, "{name}: {:?}", parsed.nodes.keys());
        for (variable, expected) in variables {
            check_variable(&file, &format!("{name}/{variable}"), &parsed.nodes[variable], expected);
        }
    }
}

#[test]
fn record_variables_have_one_chunk_a_record() {
    let parsed = parsed("scipy_v1");
    let temp = &parsed.nodes["temp"];
    assert_eq!(temp.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 2, 3]));
    assert_eq!(temp.chunks.len(), 4);
    let lat = &parsed.nodes["lat"];
    assert_eq!(lat.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([2]));
    let scalar = &parsed.nodes["scalar"];
    assert_eq!(scalar.metadata["shape"], json!([]));
    assert_eq!(scalar.chunks, vec![(vec![], Chunk::Range { offset: scalar_offset(&parsed), length: 4 })]);
}

fn scalar_offset(parsed: &Parsed) -> u64 {
    match parsed.nodes["scalar"].chunks[0].1 {
        Chunk::Range { offset, .. } => offset,
        _ => 0,
    }
}

#[test]
fn zero_records_make_empty_record_arrays() {
    let parsed = parsed("zero_records");
    assert_eq!(parsed.nodes["v"].metadata["shape"], json!([0, 3]));
    assert_eq!(parsed.nodes["v"].metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 3]));
    assert!(parsed.nodes["v"].chunks.is_empty());
}

#[test]
fn streaming_numrecs_counts_the_records_the_file_holds() {
    let (file, _) = fixture("classic");
    let mut streaming = file.to_vec();
    streaming[4..8].copy_from_slice(&[0xFF; 4]);
    let counted = parse(&Bytes::from(streaming), &Limits::default()).unwrap();
    assert_eq!(counted, parse(&file, &Limits::default()).unwrap());
}

fn invalid(file: Vec<u8>, limits: &Limits) -> String {
    match parse(&Bytes::from(file), limits) {
        Err(FormatError::Invalid(message)) => message,
        other => panic!("{other:?}"),
    }
}

fn too_large(file: Vec<u8>, limits: &Limits) -> String {
    match parse(&Bytes::from(file), limits) {
        Err(FormatError::TooLarge(message)) => message,
        other => panic!("{other:?}"),
    }
}

/// A CDF-1 header: `dims` then one variable `t` of `type_code` over dimension ids `ids`.
fn classic(dims: &[(&[u8], u32)], type_code: u32, ids: &[u32], begin: u32, total: usize) -> Vec<u8> {
    let mut out = b"CDF\x01".to_vec();
    let word = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_be_bytes());
    let name = |out: &mut Vec<u8>, n: &[u8]| {
        out.extend_from_slice(&(n.len() as u32).to_be_bytes());
        out.extend_from_slice(n);
        out.resize(out.len() + (4 - n.len() % 4) % 4, 0);
    };
    word(&mut out, 0);
    word(&mut out, 0x0A);
    word(&mut out, dims.len() as u32);
    for (dim, len) in dims {
        name(&mut out, dim);
        word(&mut out, *len);
    }
    out.extend_from_slice(&[0; 8]);
    word(&mut out, 0x0B);
    word(&mut out, 1);
    name(&mut out, b"t");
    word(&mut out, ids.len() as u32);
    ids.iter().for_each(|id| word(&mut out, *id));
    out.extend_from_slice(&[0; 8]);
    word(&mut out, type_code);
    word(&mut out, 4);
    word(&mut out, begin);
    out.resize(total.max(out.len()), 0);
    out
}

#[test]
fn a_well_made_header_parses() {
    let parsed = parse(&Bytes::from(classic(&[(b"x", 2)], 4, &[0], 80, 100)), &Limits::default()).unwrap();
    assert_eq!(parsed.nodes["t"].chunks, vec![(vec![0], Chunk::Range { offset: 80, length: 8 })]);
}

#[test]
fn hostile_headers_are_refused_naming_the_problem() {
    let limits = Limits::default();
    let message = invalid(classic(&[(b"x", 2)], 4, &[0], 4000, 100), &limits);
    assert!(message.contains("variable \"t\": begin 4000 is past the end of the 100-byte file"), "{message}");
    let message = invalid(classic(&[(b"x", 200)], 4, &[0], 80, 100), &limits);
    assert!(message.contains("variable \"t\": its 800 bytes from byte 80 go past the end"), "{message}");
    let message = invalid(classic(&[(b"x", 2)], 7, &[0], 80, 100), &limits);
    assert!(message.contains("unknown type code 7"), "{message}");
    let message = invalid(classic(&[(b"x", 2)], 4, &[3], 80, 100), &limits);
    assert!(message.contains("dimension id 3 names no dimension"), "{message}");
    let message = invalid(classic(&[(b"x", 0), (b"y", 2)], 4, &[1, 0], 80, 100), &limits);
    assert!(message.contains("record dimension \"x\" is not its first"), "{message}");
    let message = invalid(classic(&[(b"x", 0), (b"y", 0)], 4, &[0], 80, 100), &limits);
    assert!(message.contains("second unlimited dimension"), "{message}");
    let message = invalid(classic(&[(b"a/b", 2)], 4, &[0], 80, 100), &limits);
    assert!(message.contains("not a netCDF name"), "{message}");
    let mut unpadded = classic(&[(b"x", 2)], 4, &[0], 80, 100);
    unpadded[23] = b'!';
    let message = invalid(unpadded, &limits);
    assert!(message.contains("not padded with zeros"), "{message}");
    let huge = 0x8000_0000u32;
    let message = invalid(classic(&[(b"x", huge), (b"y", huge), (b"z", huge)], 6, &[0, 1, 2], 80, 200), &limits);
    assert!(message.contains("variable \"t\": its size overflows"), "{message}");
}

#[test]
fn counts_past_the_end_of_the_file_are_refused_before_allocating() {
    let limits = Limits::default();
    let mut dims = b"CDF\x01\0\0\0\0\0\0\0\x0a\xff\xff\xff\xff".to_vec();
    dims.resize(64, 0);
    assert!(invalid(dims, &limits).contains("dimensions at byte 16 are said to be 4294967295"));
    let mut name = b"CDF\x01\0\0\0\0\0\0\0\x0a\0\0\0\x01\x7f\xff\xff\xff".to_vec();
    name.resize(64, 0);
    assert!(invalid(name, &limits).contains("the name bytes of dimension 0"));
    let mut cdf5 = b"CDF\x05\0\0\0\0\0\0\0\0\0\0\0\x0a\xff\xff\xff\xff\xff\xff\xff\xff".to_vec();
    cdf5.resize(64, 0);
    assert!(invalid(cdf5, &limits).contains("dimensions"));
    assert!(invalid(b"CDF\x03\0\0\0\0".to_vec(), &limits).contains("not a netCDF3 file"));
}

#[test]
fn limits_bound_variables_attributes_and_chunks() {
    let (file, _) = fixture("scipy_v1");
    let few_nodes = Limits { max_nodes: 3, ..Limits::default() };
    assert!(too_large(file.to_vec(), &few_nodes).contains("limits.max_nodes"));
    let few_attributes = Limits { max_attributes: 2, ..Limits::default() };
    assert!(too_large(file.to_vec(), &few_attributes).contains("limits.max_attributes"));
    let few_chunks = Limits { max_chunks: 5, ..Limits::default() };
    assert!(too_large(file.to_vec(), &few_chunks).contains("limits.max_chunks"));
    let past = Limits { deadline: Some(std::time::Instant::now()), ..Limits::default() };
    assert!(too_large(file.to_vec(), &past).contains("took longer"));
}

#[test]
fn records_past_the_end_of_the_file_are_a_truncated_file() {
    let (file, _) = fixture("classic");
    let mut more = file.to_vec();
    more[4..8].copy_from_slice(&100u32.to_be_bytes());
    let message = invalid(more, &Limits::default());
    assert!(message.contains("its 100 records of") && message.contains("truncated"), "{message}");
    let (bytes, _) = fixture("byte_record");
    // Its 7th record ends a byte before the file does.
    let message = invalid(bytes[..bytes.len() - 2].to_vec(), &Limits::default());
    assert!(message.contains("variable \"bytes\"") && message.contains("truncated"), "{message}");
}

/// What a hostile file must never do: panic, or reference bytes outside itself.
fn survives(file: &[u8]) {
    if let Ok(parsed) = parse(&Bytes::copy_from_slice(file), &Limits::default()) {
        for node in parsed.nodes.values() {
            for (_, chunk) in &node.chunks {
                let Chunk::Range { offset, length } = chunk else { panic!("{chunk:?}") };
                assert!(offset + length <= file.len() as u64);
            }
        }
    }
}

#[test]
fn every_truncation_and_byte_flip_is_survived() {
    for name in FIXTURES {
        let (file, _) = fixture(name);
        for cut in 0..file.len() {
            survives(&file[..cut]);
        }
        for at in 0..file.len().min(1024) {
            for flip in [0xFF, 0x80, 0x01, 0x7F] {
                let mut flipped = file.to_vec();
                flipped[at] ^= flip;
                survives(&flipped);
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn random_headers_are_survived(version in proptest::sample::select(vec![1u8, 2, 5]),
                                   body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let mut file = vec![b'C', b'D', b'F', version];
        file.extend(body);
        survives(&file);
    }
}

/// Writes each fixture as a Zarr v3 directory store under `$NC3_EXPORT_DIR` (the chunks
/// copied from the file), for `xr.open_zarr` to be compared with `xr.open_dataset`:
/// `NC3_EXPORT_DIR=/tmp/nc3 cargo test --lib formats::netcdf3 -- --ignored`.
#[test]
#[ignore]
fn export_fixtures_as_zarr_stores() {
    let Ok(root) = std::env::var("NC3_EXPORT_DIR") else { return };
    for name in FIXTURES {
        let (file, _) = fixture(name);
        let parsed = parse(&file, &Limits::default()).unwrap();
        for (path, node) in &parsed.nodes {
            let dir = std::path::Path::new(&root).join(format!("{name}.zarr")).join(path);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("zarr.json"), serde_json::to_vec(&node.metadata).unwrap()).unwrap();
            for (index, chunk) in &node.chunks {
                let Chunk::Range { offset, length } = chunk else { continue };
                let key = std::iter::once("c".to_owned()).chain(index.iter().map(u64::to_string));
                let key = dir.join(key.collect::<Vec<_>>().join("/"));
                std::fs::create_dir_all(key.parent().unwrap()).unwrap();
                std::fs::write(key, &file[*offset as usize..(*offset + *length) as usize]).unwrap();
            }
        }
    }
}

/// A file that counts the reads made of it.
struct Counted {
    file: Bytes,
    reads: std::sync::atomic::AtomicUsize,
}

impl crate::formats::ByteRanges for Counted {
    fn len(&self) -> u64 {
        self.file.len() as u64
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.file.read(offset, len)
    }
}

#[test]
fn a_header_is_one_read_and_a_long_one_is_read_on() {
    let (file, _) = fixture("scipy_v1");
    let counted = Counted { file, reads: Default::default() };
    parse(&counted, &Limits::default()).unwrap();
    assert_eq!(counted.reads.into_inner(), 1);
    let mut long = b"CDF\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x0c\0\0\0\x01\0\0\0\x04long\0\0\0\x02".to_vec();
    long.extend_from_slice(&300_000u32.to_be_bytes());
    long.resize(long.len() + 300_000, b'a');
    long.extend_from_slice(&[0; 8]);
    let counted = Counted { file: Bytes::from(long), reads: Default::default() };
    let parsed = parse(&counted, &Limits::default()).unwrap();
    assert_eq!(parsed.nodes[""].metadata["attributes"]["long"].as_str().map(str::len), Some(300_000));
    assert_eq!(counted.reads.into_inner(), 3, "64 KiB, then to 256 KiB, then the rest");
}

#[test]
fn a_nan_attribute_is_null_with_a_warning() {
    let mut file = b"CDF\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x0c\0\0\0\x01\0\0\0\x03nan\0\0\0\0\x05\0\0\0\x01".to_vec();
    file.extend_from_slice(&f32::NAN.to_be_bytes());
    file.extend_from_slice(&[0; 8]);
    let parsed = parse(&Bytes::from(file), &Limits::default()).unwrap();
    assert_eq!(parsed.nodes[""].metadata["attributes"]["nan"], Value::Null);
    assert_eq!(parsed.warnings, ["the root group: attribute \"nan\" holds NaN or infinity, written as null"]);
}

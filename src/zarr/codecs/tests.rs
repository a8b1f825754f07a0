//! Codec kinds, what registration accepts, and the warnings readers get.

use serde_json::{Map, Value, json};

use super::*;
use crate::zarr::metadata::validate_node;

fn array(data_type: &str, codecs: Value) -> Map<String, Value> {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": [64, 300], "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 300]}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
        "fill_value": 0, "codecs": codecs,
    })
    .as_object()
    .cloned()
    .unwrap()
}

fn delta() -> Value {
    json!({"name": "numcodecs.imagecodecs_delta", "configuration": {"axis": -1, "dist": 1, "dtype": "<u2", "shape": [64, 300]}})
}

fn little() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

#[test]
fn kinds() {
    assert_eq!(kind("numcodecs.imagecodecs_delta"), Some(CodecKind::ArrayToArray));
    assert_eq!(kind("numcodecs.imagecodecs_floatpred"), Some(CodecKind::ArrayToArray));
    assert_eq!(kind("numcodecs.delta"), Some(CodecKind::ArrayToArray));
    assert_eq!(kind("numcodecs.grib"), Some(CodecKind::ArrayToBytes));
    assert_eq!(kind("bytes"), Some(CodecKind::ArrayToBytes));
    assert_eq!(kind("numcodecs.zlib"), Some(CodecKind::BytesToBytes), "zarrs has it");
    assert_eq!(kind("numcodecs.lz4"), Some(CodecKind::BytesToBytes), "zarr-python has it");
    assert_eq!(kind("numcodecs.imagecodecs_lzw"), None);
}

#[test]
fn plugin_codecs_are_accepted_in_their_place() {
    let tiff = [
        array("uint16", json!([delta(), little(), {"name": "numcodecs.imagecodecs_lzw", "configuration": {}}])),
        array("uint8", json!([{"name": "bytes"}, {"name": "numcodecs.imagecodecs_zstd", "configuration": {}}])),
        array(
            "float32",
            json!([{"name": "numcodecs.imagecodecs_floatpred", "configuration": {"axis": -1, "dist": 1, "dtype": "<f4", "shape": [64, 300]}},
                                little(), {"name": "numcodecs.zlib", "configuration": {"level": 1}}]),
        ),
        array("float64", json!([{"name": "numcodecs.grib", "configuration": {"var": "t2m", "dtype": "float64"}}])),
        array("uint8", json!([{"name": "numcodecs.grib", "configuration": {"var": "x"}}])),
        array("int16", json!([little(), {"name": "numcodecs.nobody_knows_it"}])),
        // nor where it goes
        array("int16", json!([{"name": "numcodecs.nobody_knows_it"}, little()])),
    ];
    for mut metadata in tiff {
        let codecs = metadata["codecs"].clone();
        assert!(validate_node(&mut metadata).is_ok(), "{codecs}: {:?}", validate_node(&mut metadata));
        assert_eq!(metadata["codecs"], codecs, "served as registered");
    }
}

#[test]
fn misplaced_codecs_are_refused() {
    let cases = [
        (json!([little(), delta()]), "must come before bytes"),
        (json!([{"name": "numcodecs.lz4"}, little()]), "must come after bytes"),
        (json!([little(), {"name": "numcodecs.grib", "configuration": {"var": "t"}}]), "a chain has one"),
        (json!([{"name": "numcodecs.grib", "configuration": {"var": "t"}}, little()]), "multiple array to bytes"),
        (json!([little(), {"name": "numcodecs.imagecodecs_lzw", "configuration": 3}]), "must be an object"),
        (json!([little(), {"name": "imagecodecs_lzw"}]), "imagecodecs_lzw"),
    ];
    for (codecs, expected) in cases {
        let problems = validate_node(&mut array("uint16", codecs.clone())).unwrap_err();
        assert!(problems.iter().any(|p| p.contains(expected)), "{codecs}: {problems:?} lacks {expected:?}");
    }
    let mut bad = array("uint16", json!([little(), {"name": "numcodecs.zlib", "configuration": {"level": "high"}}]));
    assert!(validate_node(&mut bad).is_err(), "zarrs still checks what it knows");
}

#[test]
fn readers_are_warned_of_the_codecs_they_need_a_plugin_for() {
    let tiff = array("uint16", json!([delta(), little(), {"name": "numcodecs.imagecodecs_lzw"}]));
    let warnings = reader_warnings("lzw/image", &tiff);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings.iter().all(|w| w.starts_with("array \"lzw/image\": codec numcodecs.imagecodecs_")),
        "{warnings:?}"
    );
    assert!(warnings.iter().all(|w| w.contains("neither stock zarr-python nor zarrs") && w.contains("imagecodecs")));
    let grib = array("float64", json!([{"name": "numcodecs.grib", "configuration": {"var": "t2m"}}]));
    assert!(reader_warnings("", &grib)[0].starts_with("the root array: codec numcodecs.grib"));
    assert!(reader_warnings("", &grib)[0].contains("kerchunk.codecs.GRIBCodec"));

    let netcdf = array(
        "float32",
        json!([little(), {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
               {"name": "numcodecs.zlib", "configuration": {"level": 4}}]),
    );
    assert!(reader_warnings("air", &netcdf).is_empty(), "both read HDF5's usual filters");
    let delta = array("float32", json!([{"name": "numcodecs.delta", "configuration": {"dtype": "<f4"}}, little()]));
    assert_eq!(
        reader_warnings("d", &delta),
        ["array \"d\": codec numcodecs.delta is not decoded by zarrs (zarr-python reads it)"]
    );
    let zfp = array("float32", json!([{"name": "zfp", "configuration": {"mode": "reversible"}}]));
    assert_eq!(
        reader_warnings("z", &zfp),
        ["array \"z\": codec zfp is not decoded by stock zarr-python (zarrs reads it)"]
    );
}

#[test]
fn warnings_are_capped() {
    let mut warnings: Vec<String> = (0..MAX_WARNINGS + 50).map(|i| format!("w{i}")).collect();
    cap(&mut warnings);
    assert_eq!(warnings.len(), MAX_WARNINGS + 1);
    assert_eq!(warnings.last().map(String::as_str), Some("50 more warnings like these"));
    let mut few = vec!["one".to_owned()];
    cap(&mut few);
    assert_eq!(few, ["one"]);
}

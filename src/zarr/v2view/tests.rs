use base64::Engine;
use serde_json::{Value, json};

use super::*;
use crate::zarr::{NodePath, Resolved};

fn encoded_fill(f: f64) -> String {
    base64::engine::general_purpose::STANDARD.encode(f.to_le_bytes())
}

fn array(data_type: &str, fill: Value, codecs: Value, encoding: Value, attrs: Value) -> Map<String, Value> {
    json!({"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": data_type,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
           "chunk_key_encoding": encoding, "fill_value": fill, "codecs": codecs,
           "dimension_names": ["y", "x"], "attributes": attrs})
    .as_object()
    .unwrap()
    .clone()
}

fn little() -> Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}])
}

fn sample() -> Hierarchy {
    let group = |attrs: Value| json!({"zarr_format": 3, "node_type": "group", "attributes": attrs});
    let node = |path: &str, m: Map<String, Value>| (NodePath::new(path).unwrap(), m, Some(vec![2, 2]));
    let slash = json!({"name": "default", "configuration": {"separator": "/"}});
    Hierarchy::build(
        vec![
            (NodePath::root(), group(json!({"title": "t"})).as_object().unwrap().clone(), None),
            node(
                "air",
                array(
                    "float32",
                    json!(-9999.0),
                    json!([{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "numcodecs.zlib", "configuration": {"level": 4}}]),
                    slash.clone(),
                    json!({"units": "K", "_FillValue": encoded_fill(-9999.0)}),
                ),
            ),
            node(
                "be",
                array(
                    "int32",
                    json!(0),
                    json!([{"name": "bytes", "configuration": {"endian": "big"}}]),
                    json!({"name": "v2"}),
                    json!({}),
                ),
            ),
            node(
                "nan",
                array(
                    "float32",
                    json!("0x7fc00000"),
                    little(),
                    slash.clone(),
                    json!({"_FillValue": encoded_fill(f64::NAN)}),
                ),
            ),
            node(
                "sharded",
                array(
                    "uint8",
                    json!(0),
                    json!([{"name": "sharding_indexed", "configuration": {}}]),
                    slash.clone(),
                    json!({}),
                ),
            ),
            (NodePath::new("obs").unwrap(), group(json!({"platform": "buoy"})).as_object().unwrap().clone(), None),
            node("obs/count", array("int32", json!(-2147483647), little(), slash, json!({}))),
        ],
        u64::MAX,
    )
    .unwrap()
}

fn doc(view: &V2View, key: &str) -> Value {
    serde_json::from_slice(view.doc(key).unwrap_or_else(|| panic!("no {key}"))).unwrap()
}

#[test]
fn documents_follow_xarrays_v2_encoding() {
    let h = sample();
    let view = V2View::build(&h, |_| Missing::None).unwrap();
    assert_eq!(doc(&view, ".zgroup"), json!({"zarr_format": 2}));
    let air = doc(&view, "air/.zarray");
    assert_eq!(air["dtype"], "<f4");
    assert_eq!(air["fill_value"], json!(-9999.0));
    assert_eq!(air["compressor"], json!({"id": "zlib", "level": 4}));
    assert_eq!(air["dimension_separator"], "/");
    let attrs = doc(&view, "air/.zattrs");
    assert_eq!(attrs, json!({"units": "K", "_ARRAY_DIMENSIONS": ["y", "x"]}), "_FillValue lives in .zarray only");
    assert_eq!(doc(&view, "be/.zarray")["dtype"], ">i4");
    assert_eq!(doc(&view, "be/.zarray")["dimension_separator"], ".");
    assert_eq!(doc(&view, "nan/.zarray")["fill_value"], "NaN", "v3's hexadecimal NaN, spelled as v2 says");
    assert_eq!(doc(&view, "obs/.zattrs"), json!({"platform": "buoy"}));
    // no missing chunks and no _FillValue: nothing to mask, as xarray writes it
    assert_eq!(doc(&view, "obs/count/.zarray")["fill_value"], Value::Null);
}

#[test]
fn consolidated_metadata_lists_every_document() {
    let h = sample();
    let view = V2View::build(&h, |_| Missing::None).unwrap();
    let z = doc(&view, ".zmetadata");
    assert_eq!(z["zarr_consolidated_format"], 1);
    let keys: Vec<&String> = z["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            ".zgroup",
            ".zattrs",
            "air/.zarray",
            "air/.zattrs",
            "be/.zarray",
            "be/.zattrs",
            "nan/.zarray",
            "nan/.zattrs",
            "obs/.zgroup",
            "obs/.zattrs",
            "obs/count/.zarray",
            "obs/count/.zattrs"
        ]
    );
    for (key, value) in z["metadata"].as_object().unwrap() {
        assert_eq!(&doc(&view, key), value, "{key}");
    }
}

#[test]
fn what_v2_cannot_express_is_left_out_and_named() {
    let h = sample();
    let view = V2View::build(&h, |_| Missing::None).unwrap();
    assert!(view.doc("sharded/.zarray").is_none());
    let named = &doc(&view, ".zattrs")[OMITTED_ATTRIBUTE]["omitted_from_zarr_v2_view"];
    assert!(named["sharded"].as_str().unwrap().contains("sharding_indexed"), "{named}");
    assert_eq!(doc(&view, ".zattrs")["title"], "t");
    let V2Resolved::NotFound(why) = view.resolve(&h, "sharded/.zarray") else { panic!() };
    assert!(why.contains("sharding_indexed"), "{why}");
    let V2Resolved::NotFound(why) = view.resolve(&h, "sharded/0/0") else { panic!() };
    assert!(why.contains("not in the Zarr v2 view"), "{why}");
}

#[test]
fn the_fill_value_follows_the_missing_chunks() {
    let h = sample();
    let asked: Vec<&str> = fill_depends_on_missing(&h).iter().map(|n| n.path.as_str()).collect();
    assert_eq!(asked, ["be", "obs/count"]);
    let view = V2View::build(&h, |_| Missing::Some).unwrap();
    assert_eq!(doc(&view, "obs/count/.zarray")["fill_value"], json!(-2147483647));
    assert_eq!(doc(&view, "be/.zarray")["fill_value"], json!(0));
    let view = V2View::build(&h, |_| Missing::Unknown).unwrap();
    assert_eq!(doc(&view, "obs/count/.zarray")["fill_value"], json!(-2147483647), "missing chunks never read garbage");

    // a declared _FillValue that is not what missing chunks read as: one v2 fill value cannot say both
    let mut m =
        array("float32", json!(0.0), little(), json!({"name": "default"}), json!({"_FillValue": encoded_fill(-1.0)}));
    m.insert("dimension_names".into(), json!(["y", "x"]));
    let h = Hierarchy::build(
        vec![
            (NodePath::root(), json!({"zarr_format": 3, "node_type": "group"}).as_object().unwrap().clone(), None),
            (NodePath::new("odd").unwrap(), m, Some(vec![2, 2])),
        ],
        u64::MAX,
    )
    .unwrap();
    assert_eq!(V2View::build(&h, |_| Missing::None).unwrap().doc("odd/.zarray").map(|_| ()), Some(()));
    let view = V2View::build(&h, |_| Missing::Some).unwrap();
    assert!(view.doc("odd/.zarray").is_none());
    assert!(view.omitted()["odd"].contains("_FillValue"), "{:?}", view.omitted());
}

#[test]
fn v2_chunk_keys_name_the_chunks_of_the_v3_keys() {
    let h = sample();
    let view = V2View::build(&h, |_| Missing::None).unwrap();
    let same = |v2: &str, v3: &str| {
        let V2Resolved::Chunk { node, location, .. } = view.resolve(&h, v2) else { panic!("{v2}") };
        let Resolved::Chunk { node: n3, location: l3, .. } = h.resolve(v3) else { panic!("{v3}") };
        assert_eq!((node.index, location), (n3.index, l3), "{v2} vs {v3}");
    };
    same("air/1/1", "air/c/1/1");
    same("obs/count/0/1", "obs/count/c/0/1");
    // an array whose v3 keys are already v2 keys: the same key in both views
    same("be/1.0", "be/1.0");
    for other in ["air/1.1", "air/c/1/1", "be/1/0", "zarr.json", "obs/zarr.json", "nothing/0/0"] {
        assert!(matches!(view.resolve(&h, other), V2Resolved::Other), "{other}");
    }
    assert!(matches!(view.resolve(&h, "air/9/0"), V2Resolved::NotFound(_)));
    assert!(matches!(view.resolve(&h, "obs/.zmetadata"), V2Resolved::NotFound(_)));
    assert!(matches!(view.resolve(&h, "obs/.zgroup"), V2Resolved::Doc("obs/.zgroup")));
}

#[test]
fn a_store_of_one_array() {
    let m = array("uint8", json!(7), little(), json!({"name": "default"}), json!({"_FillValue": 7}));
    let h = Hierarchy::build(vec![(NodePath::root(), m, Some(vec![2, 2]))], u64::MAX).unwrap();
    let view = V2View::build(&h, |_| Missing::None).unwrap();
    assert_eq!(doc(&view, ".zarray")["fill_value"], 7);
    assert!(view.doc(".zgroup").is_none());
    assert!(matches!(view.resolve(&h, "1/1"), V2Resolved::Chunk { .. }));
    assert_eq!(doc(&view, ".zmetadata")["metadata"].as_object().unwrap().len(), 2);
}

#[test]
fn hex_fill_values() {
    assert_eq!(v2_fill(&json!("0x7fc00000"), &json!("float32")), json!("NaN"));
    assert_eq!(v2_fill(&json!("0xfff0000000000000"), &json!("float64")), json!("-Infinity"));
    assert_eq!(v2_fill(&json!("0x3c00"), &json!("float16")), json!(1.0));
    assert_eq!(v2_fill(&json!("0x7c00"), &json!("float16")), json!("Infinity"));
    assert_eq!(v2_fill(&json!("AAAA"), &json!("float32")), json!("AAAA"));
    assert!(same_fill(&json!(-9999), &json!(-9999.0)));
    assert!(!same_fill(&json!(1), &json!(2)));
}

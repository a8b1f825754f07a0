//! Kerchunk documents as VirtualiZarr and kerchunk write them.

use serde_json::{Value, json};

use super::*;
use crate::zarr::validate::validate;

fn doc(v: Value) -> Document {
    parse_slice(v.to_string().as_bytes()).unwrap()
}

fn zarray(shape: Value, chunks: Value, dtype: &str, fill: Value, sep: &str) -> String {
    json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype, "fill_value": fill, "order": "C",
           "filters": null, "compressor": null, "dimension_separator": sep, "attributes": {}})
    .to_string()
}

/// What VirtualiZarr's `to_kerchunk` writes for a netCDF4 file (abridged).
fn virtualizarr_air() -> Value {
    json!({"version": 1, "refs": {
        ".zgroup": "{\"zarr_format\":2}",
        ".zattrs": "{\"title\":\"air\"}",
        "lat/0": "base64:AAAgQgAAKkIAADRCAAA+QgAASEI=",
        "lat/.zarray": zarray(json!([5]), json!([5]), "<f4", Value::Null, "."),
        "lat/.zattrs": "{\"units\":\"degrees_north\",\"_FillValue\":NaN,\"_ARRAY_DIMENSIONS\":[\"lat\"]}",
        "air/0.0": ["/data/air.nc", 1339, 48],
        "air/1.0": ["/data/air.nc", 1295, 44],
        "air/.zarray": "{\"shape\":[4,5],\"chunks\":[2,5],\"dtype\":\"<f4\",\"fill_value\":-9999.0,\"order\":\"C\",\"filters\":[{\"id\":\"shuffle\",\"elementsize\":4},{\"id\":\"zlib\",\"level\":4}],\"dimension_separator\":\".\",\"compressor\":null,\"attributes\":{},\"zarr_format\":2}",
        "air/.zattrs": "{\"_FillValue\":\"AAAAAICHw8A=\",\"units\":\"K\",\"_ARRAY_DIMENSIONS\":[\"time\",\"lat\"]}",
        "crs/": ["/data/air.nc", 1669, 4],
        "crs/.zarray": zarray(json!([]), json!([]), "<i4", json!(-2147483647), "."),
        "crs/.zattrs": "{\"grid_mapping_name\":\"latitude_longitude\",\"_ARRAY_DIMENSIONS\":[]}",
    }})
}

#[test]
fn reads_virtualizarr_output() {
    let d = doc(virtualizarr_air());
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(d.nodes.keys().collect::<Vec<_>>(), ["", "air", "crs", "lat"]);
    assert_eq!(d.nodes[""].metadata()["attributes"], json!({"title": "air"}));
    let air = &d.nodes["air"];
    assert_eq!(air.metadata()["dimension_names"], json!(["time", "lat"]));
    assert_eq!(air.metadata()["attributes"]["_FillValue"], "AAAAAICHw8A=", "already encoded: kept");
    let refs: Vec<_> = air.manifest.as_ref().unwrap().entries().unwrap();
    assert_eq!(refs[0], (vec![0, 0], RawRef::Virtual { url: 0, offset: 1339, length: 48 }));
    assert_eq!(d.urls.get(0), "file:///data/air.nc");
    let crs = d.nodes["crs"].manifest.as_ref().unwrap();
    assert_eq!(crs.entries().unwrap()[0].0, Vec::<u64>::new(), "the 0-d chunk written as `crs/`");
    let lat = d.nodes["lat"].manifest.as_ref().unwrap();
    let (_, RawRef::Inline { start, len }) = lat.entries().unwrap()[0] else { panic!() };
    let mut bytes = Vec::new();
    lat.inline_bytes(start, len, &mut bytes).unwrap();
    assert_eq!(bytes.len(), 20);
    assert_eq!(d.nodes["lat"].metadata()["attributes"]["_FillValue"], "AAAAAAAA+H8=", "bare NaN token, encoded");
    let store = validate(d, &|_| true).unwrap();
    assert_eq!(store.summary.chunks.virtual_, 3);
    assert_eq!(store.summary.chunks.inline, 1);
}

#[test]
fn version_zero_templates_gen_and_plain_inline_strings() {
    let d = doc(json!({
        ".zgroup": "{\"zarr_format\": 2}",
        "x/.zarray": zarray(json!([4, 4]), json!([2, 2]), ">i2", json!(0), "/"),
        "x/0/0": ["s3://bucket/a.bin", 0, 8],
        "x/0/1": ["s3://bucket/b.bin"],
        "x/1/0": "abcdefgh",
    }));
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let x = &d.nodes["x"];
    assert_eq!(x.metadata()["chunk_key_encoding"], json!({"name": "v2", "configuration": {"separator": "/"}}));
    assert_eq!(x.metadata()["codecs"], json!([{"name": "bytes", "configuration": {"endian": "big"}}]));
    let entries: Vec<_> = x.manifest.as_ref().unwrap().entries().unwrap();
    assert_eq!(entries[1], (vec![0, 1], RawRef::Virtual { url: 1, offset: 0, length: WHOLE_OBJECT }));
    assert!(matches!(entries[2].1, RawRef::Inline { len: 8, .. }));

    let d = doc(json!({"version": 1,
        "templates": {"u": "s3://bucket/archive"},
        "refs": {"x/.zarray": zarray(json!([3]), json!([1]), "<f8", Value::Null, "."), "x/0": ["{{u}}/f0.bin", 0, 8]},
        "gen": [{"key": "x/{{i}}", "url": "{{u}}/f{{i}}.bin", "offset": "{{ 8 * i }}", "length": "8", "dimensions": {"i": {"start": 1, "stop": 3}}}]}));
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let entries: Vec<_> = d.nodes["x"].manifest.as_ref().unwrap().entries().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(
        d.urls.all().iter().map(|u| &**u).collect::<Vec<_>>(),
        ["s3://bucket/archive/f0.bin", "s3://bucket/archive/f1.bin", "s3://bucket/archive/f2.bin"]
    );
    assert_eq!(entries[2], (vec![2], RawRef::Virtual { url: 2, offset: 16, length: 8 }));
}

#[test]
fn consolidated_metadata_and_v3_layouts() {
    let d = doc(json!({"version": 1, "refs": {
        ".zmetadata": json!({"metadata": {".zgroup": {"zarr_format": 2}, "y/.zarray": serde_json::from_str::<Value>(&zarray(json!([2]), json!([2]), "<f4", json!("NaN"), ".")).unwrap(),
            "y/.zattrs": {"_ARRAY_DIMENSIONS": ["t"]}}}).to_string(),
        "y/0": ["/d/y.bin", 0, 8],
        "v3/zarr.json": json!({"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}).to_string(),
        "v3/c/1": "base64:AQ==",
    }}));
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(d.nodes["y"].metadata()["dimension_names"], json!(["t"]));
    assert_eq!(d.nodes["y"].metadata()["fill_value"], "NaN");
    let v3: Vec<_> = d.nodes["v3"].manifest.as_ref().unwrap().entries().unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(v3, [vec![1]]);
    assert!(validate(d, &|_| true).is_ok());
}

#[test]
fn names_what_it_cannot_use() {
    let d = doc(json!({"version": 1, "refs": {
        "x/.zarray": json!({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": [["a", "<f4"]], "fill_value": 0, "order": "C",
            "filters": null, "compressor": {"id": "snappy"}}).to_string(),
        "orphan/0": ["/d/a", 0, 1],
        "y/.zarray": zarray(json!([2]), json!([1]), "<f4", json!(0), "."),
        "y/0": ["relative/path.nc", 0, 4],
        "y/1": "base64:!!",
        "y/7": ["/d/a", 0, 4],
    }}));
    let problems = d.problems.clone().into_vec();
    assert!(problems.iter().any(|p| p.contains("array \"x\"") && p.contains("structured dtypes")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("orphan/0: not a chunk of any array")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("relative path")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("y/1: inline data is not valid base64")), "{problems:?}");
    let problems = validate(d, &|_| true).unwrap_err().problems();
    assert!(problems.iter().any(|p| p.contains("chunk key \"7\" is outside the chunk grid [2]")), "{problems:?}");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            "[a-z0-9:/._{}-]{0,12}".prop_map(Value::from),
            ("/[a-z]{1,5}", any::<u32>(), any::<u32>()).prop_map(|(u, o, l)| json!([u, o, l])),
            ("/[a-z]{1,5}").prop_map(|u| json!([u])),
            Just(json!([])),
            any::<i64>().prop_map(|n| json!([n, n])),
            Just(Value::from(zarray(json!([4]), json!([2]), "<f4", json!(0), "."))),
            Just(Value::from("{\"zarr_format\": 2}")),
            Just(Value::from("{not json")),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(".zgroup".to_owned()),
            Just("a/.zarray".to_owned()),
            Just("a/.zattrs".to_owned()),
            Just(".zmetadata".to_owned()),
            "a/[0-9]{1,2}",
            "[a-z]{1,3}/[0-9./]{0,4}",
            "[a-z./]{0,6}",
        ]
    }

    proptest! {
        /// Any document shaped like kerchunk either validates or lists problems: never a panic.
        #[test]
        fn never_panics(refs in proptest::collection::btree_map(key(), value(), 0..12), v1 in any::<bool>()) {
            let body = if v1 { json!({"version": 1, "refs": refs}) } else { Value::Object(refs.into_iter().collect()) };
            if let Ok(d) = parse_slice(body.to_string().as_bytes()) {
                let _ = validate(d, &|_| true);
            }
        }
    }
}

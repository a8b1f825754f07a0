//! Zarr v3 metadata back to v2 (`.zarray`, `.zattrs`, `.zgroup`) for kerchunk export: the
//! inverse of [`super::convert`], refusing what Zarr v2 cannot express.

use serde_json::{Map, Value, json};

/// `.zgroup` and `.zattrs` of a group.
pub fn group_to_v2(metadata: &Map<String, Value>) -> (Value, Value) {
    (json!({"zarr_format": 2}), metadata.get("attributes").cloned().unwrap_or_else(|| json!({})))
}

/// `.zarray` and `.zattrs` of an array, or why it has no v2 form.
///
/// Zarr v2 readers (xarray) mask the v2 `fill_value`, so it carries the decoded `_FillValue`
/// when the array declares one, null when not; but when some chunks are missing
/// (`has_missing`) it must be the v3 fill value they read as.
pub fn array_to_v2(map: &Map<String, Value>, has_missing: bool) -> Result<(Value, Value), String> {
    let whole = Value::Object(map.clone());
    let metadata = &whole;
    let codecs = metadata.get("codecs").and_then(Value::as_array).ok_or("no codecs")?;
    let mut order = "C";
    let mut filters: Vec<Value> = Vec::new();
    let mut after: Vec<Value> = Vec::new();
    let mut endian = None;
    let mut object = false;
    let mut seen_bytes = false;
    let ndim = metadata.get("shape").and_then(Value::as_array).map_or(0, Vec::len);
    for codec in codecs {
        let name = codec.get("name").and_then(Value::as_str).unwrap_or_default();
        let config = codec.get("configuration").and_then(Value::as_object).cloned().unwrap_or_default();
        match name {
            "transpose" if !seen_bytes => {
                let reversed: Vec<Value> = (0..ndim).rev().map(Value::from).collect();
                if config.get("order") != Some(&Value::Array(reversed)) {
                    return Err("a transpose other than reversing the axes has no Zarr v2 form".into());
                }
                order = "F";
            }
            "bytes" => {
                seen_bytes = true;
                endian = config.get("endian").and_then(Value::as_str).map(str::to_owned);
            }
            "vlen-utf8" | "vlen-bytes" => {
                seen_bytes = true;
                object = true;
                filters.push(json!({"id": name}));
            }
            n if n.starts_with("numcodecs.") => {
                let mut v2 = config.clone();
                v2.insert("id".into(), json!(&n["numcodecs.".len()..]));
                if seen_bytes { after.push(Value::Object(v2)) } else { filters.push(Value::Object(v2)) }
            }
            "blosc" if seen_bytes => {
                let shuffle = match config.get("shuffle").and_then(Value::as_str) {
                    Some("noshuffle") => 0,
                    Some("bitshuffle") => 2,
                    _ => 1,
                };
                let mut v2 = config.clone();
                v2.remove("typesize");
                v2.insert("id".into(), json!("blosc"));
                v2.insert("shuffle".into(), json!(shuffle));
                after.push(Value::Object(v2));
            }
            "zstd" | "gzip" if seen_bytes => {
                let mut v2 = config.clone();
                v2.insert("id".into(), json!(name));
                after.push(Value::Object(v2));
            }
            other => return Err(format!("codec {other:?} has no Zarr v2 (kerchunk) form")),
        }
    }
    // Zarr v2 views what the first filter decodes as the dtype: when that filter says what it
    // decodes to (`fixedscaleoffset`'s `dtype`: `<f8` over `>i2` stored for a scaled FITS
    // image), its byte order is the dtype's, whatever `bytes` says of the stored numbers.
    if let Some(order) = filters.first().and_then(|f| f.get("dtype")).and_then(Value::as_str).and_then(byte_order) {
        endian = Some(order.to_owned());
    }
    let compressor = after.pop().unwrap_or(Value::Null);
    filters.extend(after);
    let dtype = dtype(metadata.get("data_type").ok_or("no data_type")?, endian.as_deref(), object)?;
    let chunks =
        metadata.pointer("/chunk_grid/configuration/chunk_shape").cloned().ok_or("only regular chunk grids")?;
    let separator = metadata.pointer("/chunk_key_encoding/configuration/separator").and_then(Value::as_str).unwrap_or(
        match metadata.pointer("/chunk_key_encoding/name").and_then(Value::as_str) {
            Some("default") => "/",
            _ => ".",
        },
    );
    let zarray = json!({
        "zarr_format": 2,
        "shape": metadata.get("shape").cloned().unwrap_or(json!([])),
        "chunks": chunks,
        "dtype": dtype,
        "fill_value": Value::Null,
        "order": order,
        "filters": if filters.is_empty() { Value::Null } else { Value::Array(filters) },
        "compressor": compressor,
        "dimension_separator": separator,
    });
    let mut zarray = zarray;
    let mut attrs = map.get("attributes").and_then(Value::as_object).cloned().unwrap_or_default();
    // The attribute stays too: v2 readers override it with fill_value, and it makes the
    // v3 -> v2 -> v3 round trip exact.
    zarray["fill_value"] = match attrs.get("_FillValue").cloned() {
        _ if has_missing => metadata.get("fill_value").cloned().unwrap_or(Value::Null),
        Some(declared) => decode_fill(declared),
        None => Value::Null,
    };
    match metadata.get("dimension_names").filter(|n| !n.is_null()) {
        Some(names) => {
            attrs.insert("_ARRAY_DIMENSIONS".into(), names.clone());
        }
        // xarray cannot open a v2 array without them; a scalar's are known.
        None if ndim == 0 => {
            attrs.insert("_ARRAY_DIMENSIONS".into(), json!([]));
        }
        None => {}
    }
    Ok((zarray, Value::Object(attrs)))
}

/// The byte order a numpy dtype string names (`<f8` little, `>i2` big), if it names one.
fn byte_order(dtype: &str) -> Option<&'static str> {
    match dtype.as_bytes().first() {
        Some(b'<') => Some("little"),
        Some(b'>') => Some("big"),
        _ => None,
    }
}

/// xarray's encoded `_FillValue` (base64 of a little-endian float64) as a v2 fill value.
fn decode_fill(declared: Value) -> Value {
    use base64::Engine;
    let Value::String(text) = &declared else { return declared };
    match base64::engine::general_purpose::STANDARD.decode(text).ok().and_then(|b| <[u8; 8]>::try_from(b).ok()) {
        Some(bytes) => {
            let f = f64::from_le_bytes(bytes);
            match f {
                f if f.is_nan() => json!("NaN"),
                f if f == f64::INFINITY => json!("Infinity"),
                f if f == f64::NEG_INFINITY => json!("-Infinity"),
                f => json!(f),
            }
        }
        None => declared,
    }
}

fn dtype(data_type: &Value, endian: Option<&str>, object: bool) -> Result<String, String> {
    let e = match endian {
        Some("big") => ">",
        _ => "<",
    };
    if object {
        return Ok("|O".into());
    }
    let name = data_type.as_str().or_else(|| data_type.get("name").and_then(Value::as_str)).unwrap_or_default();
    let length = data_type.pointer("/configuration/length_bytes").and_then(Value::as_u64);
    Ok(match (name, length) {
        ("bool", _) => "|b1".into(),
        ("int8", _) => "|i1".into(),
        ("uint8", _) => "|u1".into(),
        ("int16" | "int32" | "int64" | "uint16" | "uint32" | "uint64" | "float16" | "float32" | "float64", _) => {
            let (kind, bits) = name.split_at(name.find(char::is_numeric).unwrap_or(name.len()));
            let code = match kind {
                "int" => 'i',
                "uint" => 'u',
                _ => 'f',
            };
            format!("{e}{code}{}", bits.parse::<u32>().unwrap_or(0) / 8)
        }
        ("complex64", _) => format!("{e}c8"),
        ("complex128", _) => format!("{e}c16"),
        ("string", _) => "|O".into(),
        ("null_terminated_bytes", Some(n)) => format!("|S{n}"),
        ("fixed_length_utf32", Some(n)) => format!("{e}U{}", n / 4),
        ("numpy.datetime64" | "numpy.timedelta64", _) => {
            let unit = data_type.pointer("/configuration/unit").and_then(Value::as_str).unwrap_or("s");
            let scale = data_type.pointer("/configuration/scale_factor").and_then(Value::as_u64).unwrap_or(1);
            let code = if name.ends_with("datetime64") { 'M' } else { 'm' };
            let scale = if scale == 1 { String::new() } else { scale.to_string() };
            format!("{e}{code}8[{scale}{unit}]")
        }
        _ => return Err(format!("data type {data_type} has no Zarr v2 form")),
    })
}

#[cfg(test)]
mod tests {
    use super::super::convert::array_to_v3;
    use super::*;

    #[test]
    fn a_filter_that_decodes_to_another_type_gives_the_dtype_its_byte_order() {
        // kerchunk's scaled FITS image: big-endian int16 stored, float64 decoded (in numpy's
        // little-endian `<f8`, which zarr 2 views as the dtype).
        let filter =
            json!({"id": "fixedscaleoffset", "scale": 1.0, "offset": 32768.0, "dtype": "<f8", "astype": ">i2"});
        let zarray = json!({"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": ">i2", "fill_value": 0,
                            "order": "C", "filters": [filter.clone()], "compressor": null});
        let v3 = array_to_v3(&zarray, Map::new()).unwrap();
        let (v2, _) = array_to_v2(&v3, false).unwrap();
        assert_eq!((&v2["dtype"], &v2["filters"]), (&json!("<f8"), &json!([filter])));
    }

    #[test]
    fn v2_to_v3_to_v2_round_trips() {
        let cases = [
            json!({"zarr_format": 2, "shape": [4, 5], "chunks": [2, 5], "dtype": "<f4", "fill_value": -9999.0, "order": "C",
                   "filters": [{"id": "shuffle", "elementsize": 4}], "compressor": {"id": "zlib", "level": 4}, "dimension_separator": "."}),
            json!({"zarr_format": 2, "shape": [4, 3], "chunks": [4, 3], "dtype": ">f8", "fill_value": "NaN", "order": "F",
                   "filters": [{"id": "delta", "dtype": ">f8"}], "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 2, "blocksize": 0},
                   "dimension_separator": "/"}),
            json!({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "fill_value": "", "order": "C",
                   "filters": [{"id": "vlen-utf8"}], "compressor": null, "dimension_separator": "."}),
            json!({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<M8[ns]", "fill_value": 0, "order": "C",
                   "filters": null, "compressor": {"id": "zstd", "level": 3, "checksum": false}, "dimension_separator": "."}),
        ];
        for zarray in cases {
            let attrs = json!({"units": "K", "_ARRAY_DIMENSIONS": (0..zarray["shape"].as_array().unwrap().len()).map(|i| format!("d{i}")).collect::<Vec<_>>()});
            let v3 = array_to_v3(&zarray, attrs.as_object().unwrap().clone()).unwrap();
            let (back, back_attrs) = array_to_v2(&v3, true).unwrap();
            assert_eq!(back, zarray, "{v3:?}");
            assert_eq!(back_attrs["_ARRAY_DIMENSIONS"], attrs["_ARRAY_DIMENSIONS"]);
        }
    }

    #[test]
    fn refuses_what_v2_cannot_say() {
        let sharded = json!({"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}}, "chunk_key_encoding": {"name": "default"},
            "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {}}]});
        let err = array_to_v2(sharded.as_object().unwrap(), false).unwrap_err();
        assert!(err.contains("sharding_indexed"), "{err}");
    }
}

//! Zarr v2 metadata (`.zarray`, `.zattrs`, `.zgroup`) to v3, the way zarr-python and
//! VirtualiZarr read the same metadata, plus xarray's Zarr v3 conventions for CF attributes.

use base64::Engine;
use serde_json::{Map, Value, json};

/// numcodecs codecs that zarr-python runs on arrays (placed before `bytes`).
const ARRAY_TO_ARRAY: &[&str] = &["delta", "fixedscaleoffset", "quantize", "astype", "packbits", "bitround"];
/// numcodecs codecs that zarr-python runs on bytes (placed after `bytes`).
const BYTES_TO_BYTES: &[&str] = &[
    "shuffle",
    "zlib",
    "gzip",
    "bz2",
    "lzma",
    "lz4",
    "zstd",
    "blosc",
    "fletcher32",
    "crc32",
    "crc32c",
    "adler32",
    "jenkins_lookup3",
];
/// Filters that turn object arrays into bytes (they replace `bytes`).
const VARIABLE_LENGTH: &[&str] = &["vlen-utf8", "vlen-bytes"];

/// Converts an array's `.zarray` (and its `.zattrs`) to a v3 `zarr.json`.
pub fn array_to_v3(zarray: &Value, zattrs: Map<String, Value>) -> Result<Map<String, Value>, String> {
    let shape = zarray.get("shape").cloned().ok_or("`.zarray` has no shape")?;
    let chunks = zarray.get("chunks").cloned().ok_or("`.zarray` has no chunks")?;
    let dtype = zarray
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or("`.zarray` has no string dtype (structured dtypes are not supported)")?;
    let (mut data_type, endian, kind) = data_type(dtype)?;
    let ndim = shape.as_array().map_or(0, Vec::len);
    let mut codecs = Vec::new();
    if zarray.get("order").and_then(Value::as_str) == Some("F") && ndim > 1 {
        codecs.push(json!({"name": "transpose", "configuration": {"order": (0..ndim).rev().collect::<Vec<_>>()}}));
    }
    let filters: Vec<&Value> =
        zarray.get("filters").and_then(Value::as_array).map(|f| f.iter().collect()).unwrap_or_default();
    let compressor = zarray.get("compressor").filter(|c| !c.is_null());
    let mut array_to_bytes = None;
    let mut after = Vec::new();
    for codec in filters.into_iter().chain(compressor) {
        let id = codec.get("id").and_then(Value::as_str).ok_or_else(|| format!("codec {codec} has no id"))?;
        let configuration: Map<String, Value> = codec
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| *k != "id").map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        if VARIABLE_LENGTH.contains(&id) {
            array_to_bytes = Some(json!({"name": id}));
        } else if ARRAY_TO_ARRAY.contains(&id) {
            if array_to_bytes.is_some() || !after.is_empty() {
                return Err(format!("codec {id} runs on arrays but comes after a bytes codec"));
            }
            codecs.push(json!({"name": format!("numcodecs.{id}"), "configuration": configuration}));
        } else if BYTES_TO_BYTES.contains(&id) {
            after.push(bytes_codec(id, configuration, dtype_size(&data_type)));
        } else {
            return Err(format!("codec {id:?} cannot be converted to Zarr v3 (zarr-python has no numcodecs.{id})"));
        }
    }
    // An object dtype is text with vlen-utf8 and bytes with vlen-bytes, as zarr-python reads it.
    if array_to_bytes.as_ref().is_some_and(|c| c["name"] == "vlen-bytes") {
        data_type = json!("variable_length_bytes");
    }
    codecs.push(array_to_bytes.unwrap_or_else(|| match endian {
        Some(e) => json!({"name": "bytes", "configuration": {"endian": e}}),
        None => json!({"name": "bytes"}),
    }));
    codecs.extend(after);
    let separator = zarray.get("dimension_separator").and_then(Value::as_str).unwrap_or(".");
    if separator != "." && separator != "/" {
        return Err(format!("dimension_separator {separator:?} must be \".\" or \"/\""));
    }
    let (attributes, dimension_names) =
        cf_attributes(zattrs, zarray.get("fill_value").unwrap_or(&Value::Null), kind, ndim)?;
    let mut out = Map::new();
    out.insert("zarr_format".into(), json!(3));
    out.insert("node_type".into(), json!("array"));
    out.insert("shape".into(), shape);
    out.insert("data_type".into(), data_type.clone());
    out.insert("chunk_grid".into(), json!({"name": "regular", "configuration": {"chunk_shape": chunks}}));
    out.insert("chunk_key_encoding".into(), json!({"name": "v2", "configuration": {"separator": separator}}));
    out.insert("fill_value".into(), fill_value(zarray.get("fill_value").unwrap_or(&Value::Null), kind, &data_type)?);
    out.insert("codecs".into(), Value::Array(codecs));
    out.insert("attributes".into(), Value::Object(attributes));
    if let Some(names) = dimension_names {
        out.insert("dimension_names".into(), names);
    }
    Ok(out)
}

/// A v3 group `zarr.json` with the `.zattrs` attributes.
pub fn group_to_v3(zattrs: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("zarr_format".into(), json!(3));
    out.insert("node_type".into(), json!("group"));
    out.insert("attributes".into(), Value::Object(zattrs));
    out
}

/// Element kinds, as numpy's dtype.kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Float,
    Complex,
    Int,
    Bool,
    Other,
}

fn data_type(dtype: &str) -> Result<(Value, Option<&'static str>, Kind), String> {
    let (order, code) = match dtype.as_bytes().first() {
        Some(b'<') => (Some("little"), &dtype[1..]),
        Some(b'>') => (Some("big"), &dtype[1..]),
        Some(b'|' | b'=') => (None, &dtype[1..]),
        _ => (None, dtype),
    };
    let simple = |name: &str, kind| Ok((json!(name), order, kind));
    match code {
        "b1" => Ok((json!("bool"), None, Kind::Bool)),
        "i1" => Ok((json!("int8"), None, Kind::Int)),
        "u1" => Ok((json!("uint8"), None, Kind::Int)),
        "i2" => simple("int16", Kind::Int),
        "i4" => simple("int32", Kind::Int),
        "i8" => simple("int64", Kind::Int),
        "u2" => simple("uint16", Kind::Int),
        "u4" => simple("uint32", Kind::Int),
        "u8" => simple("uint64", Kind::Int),
        "f2" => simple("float16", Kind::Float),
        "f4" => simple("float32", Kind::Float),
        "f8" => simple("float64", Kind::Float),
        "c8" => simple("complex64", Kind::Complex),
        "c16" => simple("complex128", Kind::Complex),
        "O" => Ok((json!("string"), None, Kind::Other)),
        _ => {
            if let Some(n) = code.strip_prefix('S').and_then(|n| n.parse::<u64>().ok()) {
                return Ok((
                    json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": n}}),
                    None,
                    Kind::Other,
                ));
            }
            if let Some(n) = code.strip_prefix('U').and_then(|n| n.parse::<u64>().ok()) {
                return Ok((
                    json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": n * 4}}),
                    order,
                    Kind::Other,
                ));
            }
            for (prefix, name) in [("M8[", "numpy.datetime64"), ("m8[", "numpy.timedelta64")] {
                if let Some(unit) = code.strip_prefix(prefix).and_then(|u| u.strip_suffix(']')) {
                    let digits: String = unit.chars().take_while(char::is_ascii_digit).collect();
                    let scale = digits.parse::<u64>().unwrap_or(1);
                    let unit = &unit[digits.len()..];
                    return Ok((
                        json!({"name": name, "configuration": {"unit": unit, "scale_factor": scale}}),
                        order,
                        Kind::Int,
                    ));
                }
            }
            Err(format!("dtype {dtype:?} is not supported"))
        }
    }
}

fn dtype_size(data_type: &Value) -> u64 {
    match data_type.as_str() {
        Some("bool" | "int8" | "uint8") => 1,
        Some("int16" | "uint16" | "float16") => 2,
        Some("int32" | "uint32" | "float32") => 4,
        Some("int64" | "uint64" | "float64" | "complex64") => 8,
        Some("complex128") => 16,
        _ => data_type.pointer("/configuration/length_bytes").and_then(Value::as_u64).unwrap_or(8),
    }
}

/// blosc, zstd and gzip become the core v3 codecs (as zarr-python converts them); the others
/// `numcodecs.<id>`.
fn bytes_codec(id: &str, mut configuration: Map<String, Value>, typesize: u64) -> Value {
    match id {
        "blosc" => {
            let shuffle = match configuration.get("shuffle").and_then(Value::as_i64) {
                Some(0) => "noshuffle",
                Some(2) => "bitshuffle",
                Some(-1) => "shuffle",
                _ => "shuffle",
            };
            configuration.insert("shuffle".into(), json!(shuffle));
            configuration.insert("typesize".into(), json!(typesize));
            configuration.entry("blocksize").or_insert(json!(0));
            json!({"name": "blosc", "configuration": configuration})
        }
        "zstd" => {
            let level = configuration.get("level").cloned().unwrap_or(json!(0));
            let checksum = configuration.get("checksum").cloned().unwrap_or(json!(false));
            json!({"name": "zstd", "configuration": {"level": level, "checksum": checksum}})
        }
        "gzip" => {
            json!({"name": "gzip", "configuration": {"level": configuration.get("level").cloned().unwrap_or(json!(1))}})
        }
        _ => json!({"name": format!("numcodecs.{id}"), "configuration": configuration}),
    }
}

fn fill_value(v2: &Value, kind: Kind, data_type: &Value) -> Result<Value, String> {
    Ok(match (v2, kind) {
        (Value::Null, Kind::Float) => json!("NaN"),
        (Value::Null, Kind::Complex) => json!(["NaN", "NaN"]),
        (Value::Null, Kind::Bool) => json!(false),
        (Value::Null, Kind::Int) => json!(0),
        (Value::Null, Kind::Other) if data_type == "string" => json!(""),
        (Value::Null, Kind::Other) => match data_type.pointer("/configuration/length_bytes").and_then(Value::as_u64) {
            Some(n) if data_type["name"] == "null_terminated_bytes" => {
                json!(base64::engine::general_purpose::STANDARD.encode(vec![0u8; n as usize]))
            }
            _ => json!(""),
        },
        (Value::String(s), Kind::Float) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => v2.clone(),
        (Value::String(s), Kind::Float) if s.eq_ignore_ascii_case("nan") => json!("NaN"),
        (Value::Number(n), Kind::Int) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 => json!(f as i64),
            _ => return Err(format!("fill_value {n} is not an integer")),
        },
        (Value::Number(n), Kind::Bool) => json!(n.as_f64() != Some(0.0)),
        (Value::Number(_), Kind::Complex) => json!([v2, 0.0]),
        _ => v2.clone(),
    })
}

/// `_ARRAY_DIMENSIONS` becomes `dimension_names`; a float `_FillValue` becomes xarray's
/// encoding (base64 of a little-endian float64).
///
/// kerchunk's translators move `_FillValue` into the v2 `fill_value` and drop the attribute, and
/// the references cannot tell it from a storage default the file never declared. So a missing
/// `_FillValue` is declared from a numeric fill value only where that is nearly always right:
/// floats (a default fill is never a real value), and packed integers (`scale_factor` or
/// `add_offset`: ERA5-style int16 with -32767 must read NaN). Never 0, the storage default of
/// zarr and HDF5 (masking it turns real zeros into NaN), nor plain integers (HDF5's default
/// -2147483647 would turn an int32 variable into float64). NaN needs no mask. `missing_value`
/// stays a plain number: xarray's v3 reader decodes only `_FillValue`.
fn cf_attributes(
    mut attrs: Map<String, Value>,
    v2_fill: &Value,
    kind: Kind,
    ndim: usize,
) -> Result<(Map<String, Value>, Option<Value>), String> {
    let dimension_names = match attrs.remove("_ARRAY_DIMENSIONS") {
        Some(Value::Array(names)) if names.len() == ndim => Some(Value::Array(names)),
        Some(other) => return Err(format!("_ARRAY_DIMENSIONS {other} does not name the array's {ndim} dimensions")),
        None => None,
    };
    let nonzero = v2_fill.as_f64().is_some_and(|f| f != 0.0);
    let packed = attrs.contains_key("scale_factor") || attrs.contains_key("add_offset");
    let declared = nonzero && (kind == Kind::Float || (kind == Kind::Int && packed));
    if !attrs.contains_key("_FillValue") && declared {
        attrs.insert("_FillValue".into(), v2_fill.clone());
    }
    if let Some(fill) = attrs.get("_FillValue").cloned() {
        match kind {
            Kind::Float => {
                let value = match &fill {
                    Value::Number(n) => n.as_f64(),
                    Value::String(s) => match s.as_str() {
                        "NaN" | "nan" => Some(f64::NAN),
                        "Infinity" | "inf" => Some(f64::INFINITY),
                        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
                        _ => None, // already encoded (base64), as VirtualiZarr writes it
                    },
                    _ => None,
                };
                if let Some(f) = value {
                    attrs.insert(
                        "_FillValue".into(),
                        json!(base64::engine::general_purpose::STANDARD.encode(f.to_le_bytes())),
                    );
                }
            }
            Kind::Int => {
                if let Some(f) = fill.as_f64().filter(|f| f.fract() == 0.0 && fill.is_f64()) {
                    attrs.insert("_FillValue".into(), json!(f as i64));
                }
            }
            _ => {}
        }
    }
    Ok((attrs, dimension_names))
}

/// Parses JSON that may contain the bare `NaN`, `Infinity` and `-Infinity` tokens Python writes,
/// turning them into the strings Zarr uses for them.
pub fn lenient_json(text: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(v) => return Ok(v),
        Err(e) if !(text.contains("NaN") || text.contains("Infinity")) => return Err(e),
        Err(_) => {}
    }
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if let Some(token) = ["-Infinity", "Infinity", "NaN"].into_iter().find(|t| rest.starts_with(t)) {
            out.push('"');
            out.push_str(token);
            out.push('"');
            rest = &rest[token.len()..];
            continue;
        }
        in_string = c == '"';
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    serde_json::from_str(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(zarray: Value, zattrs: Value) -> Map<String, Value> {
        array_to_v3(&zarray, zattrs.as_object().cloned().unwrap_or_default()).unwrap()
    }

    /// zarrs' own conversion (`zarrs::convert::array_metadata_v2_to_v3`) is the reference for
    /// Zarr v2 metadata as zarr-python writes it (array-to-array filters, one compressor): on
    /// those, everything but the attributes must come out the same. It is not used for the
    /// conversion itself because kerchunk documents are not always like that: kerchunk puts
    /// HDF5's whole filter pipeline (shuffle, zlib...) under `filters`, which zarrs places before
    /// `bytes`, an invalid chain, while zarr-python reads them after it; zarrs has no `|S<n>`
    /// (netCDF char); and a `null` float fill value becomes 0 there, NaN in VirtualiZarr.
    #[test]
    fn agrees_with_zarrs_on_zarr_python_metadata() {
        let cases = [
            json!({"dtype": "<f4", "fill_value": -9999.0, "compressor": {"id": "zlib", "level": 4}}),
            json!({"dtype": ">f8", "fill_value": "NaN", "order": "F", "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}}),
            json!({"dtype": "<f8", "fill_value": "-Infinity", "compressor": {"id": "zstd", "level": 3}, "dimension_separator": "/"}),
            json!({"dtype": "<i2", "fill_value": -32767, "compressor": {"id": "gzip", "level": 5}}),
            json!({"dtype": "|u1", "fill_value": 7, "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0}}),
            json!({"dtype": "|b1", "fill_value": true, "compressor": null}),
            json!({"dtype": ">i8", "fill_value": 0, "compressor": {"id": "bz2", "level": 9}}),
            json!({"dtype": "<c8", "fill_value": [1.0, -1.0], "compressor": null}),
            json!({"dtype": "<f4", "fill_value": 1.5, "compressor": null, "filters": [{"id": "fixedscaleoffset", "offset": 0.0, "scale": 10.0, "dtype": "<f4", "astype": "<i4"}]}),
        ];
        for extra in cases {
            let mut zarray =
                json!({"zarr_format": 2, "shape": [10, 6], "chunks": [4, 3], "order": "C", "filters": null});
            for (k, v) in extra.as_object().unwrap() {
                zarray[k] = v.clone();
            }
            let v2: zarrs::metadata::v2::ArrayMetadataV2 = serde_json::from_value(zarray.clone()).unwrap();
            let mut theirs = serde_json::to_value(zarrs::convert::array_metadata_v2_to_v3(&v2).unwrap()).unwrap();
            if zarray["dtype"].as_str().is_some_and(|d| d.starts_with('|')) {
                // Single bytes have no order: zarrs says little, zarr-python says nothing.
                theirs["codecs"][0] = json!({"name": "bytes"});
            }
            let ours = Value::Object(convert(zarray.clone(), json!({})));
            for field in ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"] {
                assert_eq!(ours[field], theirs[field], "{field} of {zarray}");
            }
            let mut ours = ours.as_object().cloned().unwrap();
            assert!(crate::zarr::metadata::validate_node(&mut ours).is_ok(), "{zarray}");
        }
    }

    #[test]
    fn virtualizarr_netcdf4_array() {
        // As VirtualiZarr writes it: every codec under filters, compressor null.
        let v3 = convert(
            json!({"zarr_format": 2, "shape": [4, 5, 6], "chunks": [2, 3, 4], "dtype": "<f4", "fill_value": -9999.0, "order": "C",
                   "compressor": null, "filters": [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}], "dimension_separator": "."}),
            json!({"_ARRAY_DIMENSIONS": ["time", "lat", "lon"], "units": "K"}),
        );
        assert_eq!(
            v3["codecs"],
            json!([{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, {"name": "numcodecs.zlib", "configuration": {"level": 4}}])
        );
        assert_eq!(v3["dimension_names"], json!(["time", "lat", "lon"]));
        assert_eq!(v3["chunk_key_encoding"], json!({"name": "v2", "configuration": {"separator": "."}}));
        assert_eq!(
            v3["attributes"],
            json!({"units": "K", "_FillValue": "AAAAAICHw8A="}),
            "fill value added the way xarray encodes it"
        );
        assert_eq!(v3["fill_value"], json!(-9999.0));
        let mut v3 = v3;
        assert!(crate::zarr::metadata::validate_node(&mut v3).is_ok());
    }

    #[test]
    fn big_endian_fortran_order_filters_and_compressors() {
        let v3 = convert(
            json!({"zarr_format": 2, "shape": [4, 3], "chunks": [4, 3], "dtype": ">f8", "fill_value": "NaN", "order": "F",
                   "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
                   "filters": [{"id": "delta", "dtype": ">f8"}]}),
            json!({"_FillValue": "NaN", "missing_value": -1.0}),
        );
        assert_eq!(
            v3["codecs"],
            json!([
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "numcodecs.delta", "configuration": {"dtype": ">f8"}},
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0, "typesize": 8}},
            ])
        );
        assert_eq!(v3["fill_value"], "NaN");
        assert_eq!(v3["attributes"]["_FillValue"], "AAAAAAAA+H8=");
        assert_eq!(v3["attributes"]["missing_value"], -1.0, "missing_value stays a number");
    }

    #[test]
    fn data_types() {
        let dt = |d: &str| data_type(d).map(|(v, _, _)| v);
        assert_eq!(dt(">i2").unwrap(), "int16");
        assert_eq!(dt("|O").unwrap(), "string");
        assert_eq!(dt("<U3").unwrap(), json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}));
        assert_eq!(dt("|S4").unwrap(), json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 4}}));
        assert_eq!(
            dt("<M8[ns]").unwrap(),
            json!({"name": "numpy.datetime64", "configuration": {"unit": "ns", "scale_factor": 1}})
        );
        assert!(dt("[('a', '<i4')]").is_err());
        let strings = convert(
            json!({"shape": [2], "chunks": [2], "dtype": "|O", "fill_value": null, "filters": [{"id": "vlen-utf8"}]}),
            json!({}),
        );
        assert_eq!(strings["codecs"], json!([{"name": "vlen-utf8"}]));
        assert_eq!((&strings["data_type"], &strings["fill_value"]), (&json!("string"), &json!("")));
        let mut bytes = convert(
            json!({"shape": [2], "chunks": [2], "dtype": "|O", "fill_value": null, "filters": [{"id": "vlen-bytes"}]}),
            json!({}),
        );
        assert_eq!((&bytes["data_type"], &bytes["fill_value"]), (&json!("variable_length_bytes"), &json!("")));
        crate::zarr::metadata::validate_node(&mut bytes).expect("zarrs reads variable_length_bytes");
    }

    #[test]
    fn integer_fill_values_and_unknown_codecs() {
        let v3 = convert(
            json!({"shape": [2], "chunks": [2], "dtype": "<i2", "fill_value": -32768.0, "compressor": {"id": "zlib", "level": 1}}),
            json!({"scale_factor": 0.01}),
        );
        assert_eq!(v3["fill_value"], -32768);
        assert_eq!(v3["attributes"]["_FillValue"], -32768, "packed: kerchunk moved it there, declared again");
        let plain = convert(json!({"shape": [2], "chunks": [2], "dtype": "<i4", "fill_value": -2147483647}), json!({}));
        assert!(plain["attributes"].get("_FillValue").is_none(), "a plain integer's fill may be HDF5's default");
        let zero = convert(
            json!({"shape": [2], "chunks": [2], "dtype": "<i4", "fill_value": 0, "compressor": null}),
            json!({}),
        );
        assert!(zero["attributes"].get("_FillValue").is_none(), "0 is a storage default, not a declared fill");
        let err = array_to_v3(
            &json!({"shape": [2], "chunks": [2], "dtype": "<i2", "fill_value": 0, "compressor": {"id": "snappy"}}),
            Map::new(),
        )
        .unwrap_err();
        assert!(err.contains("snappy"), "{err}");
    }

    #[test]
    fn python_json_tokens() {
        let v = lenient_json(r#"{"a": NaN, "b": [-Infinity, Infinity], "s": "NaN is fine \" here"}"#).unwrap();
        assert_eq!(v, json!({"a": "NaN", "b": ["-Infinity", "Infinity"], "s": "NaN is fine \" here"}));
        assert!(lenient_json("{").is_err());
    }
}

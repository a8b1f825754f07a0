//! Zarr v2 metadata (`.zarray`, `.zattrs`, `.zgroup`) to v3, the way zarr-python and
//! VirtualiZarr read the same metadata, plus xarray's Zarr v3 conventions for CF attributes.

use base64::Engine;
use serde_json::{Map, Value, json};

/// Converts an array's `.zarray` (and its `.zattrs`) to a v3 `zarr.json`.
pub fn array_to_v3(zarray: &Value, zattrs: Map<String, Value>) -> Result<Map<String, Value>, String> {
    let shape = zarray.get("shape").cloned().ok_or("`.zarray` has no shape")?;
    let chunks = zarray.get("chunks").cloned().ok_or("`.zarray` has no chunks")?;
    let dtype = zarray
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or("`.zarray` has no string dtype (structured dtypes are not supported)")?;
    let (mut data_type, endian, mut kind) = data_type(dtype)?;
    let ndim = shape.as_array().map_or(0, Vec::len);
    let transpose = (zarray.get("order").and_then(Value::as_str) == Some("F") && ndim > 1)
        .then(|| json!({"name": "transpose", "configuration": {"order": (0..ndim).rev().collect::<Vec<_>>()}}));
    let filters: Vec<&Value> =
        zarray.get("filters").and_then(Value::as_array).map(|f| f.iter().collect()).unwrap_or_default();
    let compressor = zarray.get("compressor").filter(|c| !c.is_null());
    let codecs = chain::v3_codecs(transpose, &filters, compressor, endian, dtype_size(&data_type))?;
    if let Some((decoded, decoded_kind)) = scaled_data_type(dtype, &filters) {
        (data_type, kind) = (decoded, decoded_kind);
    }
    // An object dtype is text with vlen-utf8 and bytes with vlen-bytes, as zarr-python reads it.
    if codecs.iter().any(|c| c["name"] == "vlen-bytes") {
        data_type = json!("variable_length_bytes");
    }
    let separator = zarray.get("dimension_separator").and_then(Value::as_str).unwrap_or(".");
    if separator != "." && separator != "/" {
        return Err(format!("dimension_separator {separator:?} must be \".\" or \"/\""));
    }
    let (attributes, dimension_names) =
        cf_attributes(zattrs, zarray.get("fill_value").unwrap_or(&Value::Null), kind, &data_type, ndim)?;
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

/// What an array holds when its first filter is a `fixedscaleoffset` that decodes the stored
/// numbers (its `astype`, the array's declared dtype) to another type (its `dtype`): that type.
/// kerchunk's FITS scanner declares a scaled image (`BZERO`/`BSCALE`, such as unsigned 16-bit
/// data) with the stored dtype, `>i2`, behind `{"id": "fixedscaleoffset", "dtype": "<f8",
/// "astype": ">i2"}`: as declared, no reader can read it (the decoded floats do not fit the
/// integers). Declared as the decoded type, zarr-python reads the values the filter gives
/// (its `fixedscaleoffset` hands `bytes` the `astype`, whose byte order `bytes` keeps).
fn scaled_data_type(dtype: &str, filters: &[&Value]) -> Option<(Value, Kind)> {
    let first = filters.first()?;
    if first.get("id").and_then(Value::as_str) != Some("fixedscaleoffset") {
        return None;
    }
    let parse = |key: &str| first.get(key).and_then(Value::as_str).and_then(|d| data_type(d).ok());
    let (stored, declared) = (parse("astype")?, data_type(dtype).ok()?);
    let decoded = parse("dtype")?;
    let numeric = matches!(decoded.2, Kind::Float | Kind::Int);
    (stored.0 == declared.0 && decoded.0 != declared.0 && numeric).then_some((decoded.0, decoded.2))
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
    /// datetime64 and timedelta64: integers whose null fill is NaT.
    Time,
    Bool,
    Other,
}

fn data_type(dtype: &str) -> Result<(Value, Option<&'static str>, Kind), String> {
    let (order, code) = match dtype.as_bytes().first() {
        Some(b'<') => (Some("little"), &dtype[1..]),
        Some(b'>') => (Some("big"), &dtype[1..]),
        // `=` is the writer's native order: little-endian on every platform zarr supports.
        Some(b'=') => (Some("little"), &dtype[1..]),
        Some(b'|') => (None, &dtype[1..]),
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
                        Kind::Time,
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

fn fill_value(v2: &Value, kind: Kind, data_type: &Value) -> Result<Value, String> {
    Ok(match (v2, kind) {
        (Value::Null, Kind::Float) => json!("NaN"),
        (Value::Null, Kind::Complex) => json!(["NaN", "NaN"]),
        (Value::Null, Kind::Bool) => json!(false),
        (Value::Null, Kind::Int) => json!(0),
        // NaT, zarr-python's default for datetime64 and timedelta64: not the 1970 epoch.
        (Value::Null, Kind::Time) => json!(i64::MIN),
        (Value::Null, Kind::Other) if data_type == "string" => json!(""),
        (Value::Null, Kind::Other) => match data_type.pointer("/configuration/length_bytes").and_then(Value::as_u64) {
            Some(n) if data_type["name"] == "null_terminated_bytes" => {
                json!(base64::engine::general_purpose::STANDARD.encode(vec![0u8; n as usize]))
            }
            _ => json!(""),
        },
        (Value::String(s), Kind::Float) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => v2.clone(),
        (Value::String(s), Kind::Float) if s.eq_ignore_ascii_case("nan") => json!("NaN"),
        (Value::Number(n), Kind::Int | Kind::Time) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 => integral(f),
            _ => return Err(format!("fill_value {n} is not an integer")),
        },
        (Value::Number(n), Kind::Bool) => json!(n.as_f64() != Some(0.0)),
        (Value::Number(_), Kind::Complex) => json!([v2, 0.0]),
        _ => v2.clone(),
    })
}

/// An integral float as a JSON integer: signed where it fits, else unsigned (a uint64 fill
/// written as a float).
fn integral(f: f64) -> Value {
    if f >= 9_223_372_036_854_775_808.0 { json!(f as u64) } else { json!(f as i64) }
}

/// `_ARRAY_DIMENSIONS` becomes `dimension_names`; a float `_FillValue` becomes xarray's
/// encoding (base64 of a little-endian float64).
///
/// kerchunk's translators move a netCDF `_FillValue` into the v2 `fill_value` and drop the
/// attribute; a variable without one gets a null `fill_value`. A plain HDF5 dataset (no netCDF
/// dimensions: h5netcdf names them `phony_dim_N`) gets its storage fill value instead, which
/// xarray never masks. So a non-null `fill_value` is declared as `_FillValue` again, so that
/// xarray masks it as it does reading the file, unless it is
/// - 0, the storage default of zarr and HDF5 (masking it would turn real zeros into NaN);
/// - on an array whose dimensions are all `phony_dim_N`: a plain HDF5 storage fill;
/// - on an integer array, netCDF's default fill for its type (-2147483647 for int32...), which
///   netCDF writes as the storage fill of variables that declare none (a scalar `crs`);
/// - NaN, which needs no mask.
///
/// Packed integers (`scale_factor` or `add_offset`) are CF variables whatever their dimensions:
/// their fill is declared unless 0. `missing_value` stays a plain number: xarray's v3 reader
/// decodes only `_FillValue`.
fn cf_attributes(
    mut attrs: Map<String, Value>,
    v2_fill: &Value,
    kind: Kind,
    data_type: &Value,
    ndim: usize,
) -> Result<(Map<String, Value>, Option<Value>), String> {
    let dimension_names = match attrs.remove("_ARRAY_DIMENSIONS") {
        Some(Value::Array(names)) if names.len() == ndim => Some(Value::Array(names)),
        Some(other) => return Err(format!("_ARRAY_DIMENSIONS {other} does not name the array's {ndim} dimensions")),
        None => None,
    };
    let phony = dimension_names.as_ref().and_then(Value::as_array).is_some_and(|names| {
        !names.is_empty() && names.iter().all(|n| n.as_str().is_some_and(|n| n.starts_with("phony_dim_")))
    });
    let nonzero = v2_fill.as_f64().is_some_and(|f| f != 0.0);
    let packed = attrs.contains_key("scale_factor") || attrs.contains_key("add_offset");
    let declared = nonzero
        && match kind {
            Kind::Int if packed => true,
            Kind::Int => !phony && !is_netcdf_default_fill(data_type, v2_fill),
            Kind::Float => !phony,
            _ => false,
        };
    if !attrs.contains_key("_FillValue") && declared {
        attrs.insert("_FillValue".into(), v2_fill.clone());
    }
    if let Some(fill) = attrs.remove("_FillValue")
        && let Some(encoded) = xarray_fill_value(&fill, kind, data_type)
    {
        attrs.insert("_FillValue".into(), encoded);
    }
    Ok((attrs, dimension_names))
}

/// A `_FillValue` attribute as xarray's Zarr v3 reader decodes it (`FillValueCoder`): base64 of
/// a little-endian float64 for floats (a pair for complex), an integer for integers. `None` for
/// the types that reader cannot decode (fixed-width bytes and text, datetime64, timedelta64): a
/// `_FillValue` there makes `xr.open_zarr` fail for the whole dataset, and the array's
/// `fill_value` already says what a missing chunk holds.
fn xarray_fill_value(fill: &Value, kind: Kind, data_type: &Value) -> Option<Value> {
    let float = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    };
    let b64 = |f: f64| json!(base64::engine::general_purpose::STANDARD.encode(f.to_le_bytes()));
    match kind {
        // A string that is not a number is already encoded (base64), as VirtualiZarr writes it.
        Kind::Float => Some(float(fill).map_or_else(|| fill.clone(), b64)),
        Kind::Complex => match fill {
            Value::Array(pair) if pair.len() == 2 => match (float(&pair[0]), float(&pair[1])) {
                (Some(re), Some(im)) => Some(json!([b64(re), b64(im)])),
                _ => Some(fill.clone()),
            },
            other => float(other).map(|re| json!([b64(re), b64(0.0)])),
        },
        Kind::Int => Some(match fill.as_f64() {
            Some(f) if fill.is_f64() && f.fract() == 0.0 => integral(f),
            _ => fill.clone(),
        }),
        Kind::Bool => Some(json!(fill.as_bool().unwrap_or_else(|| fill.as_f64().is_some_and(|f| f != 0.0)))),
        Kind::Other if data_type == "string" => fill.as_str().map(|s| json!(s)),
        Kind::Time | Kind::Other => None,
    }
}

/// True for netCDF's default fill value of an integer type (`NC_FILL_INT` and the others).
fn is_netcdf_default_fill(data_type: &Value, fill: &Value) -> bool {
    let default: Value = match data_type.as_str() {
        Some("int8") => json!(-127),
        Some("uint8") => json!(255),
        Some("int16") => json!(-32767),
        Some("uint16") => json!(65535),
        Some("int32") => json!(-2_147_483_647),
        Some("uint32") => json!(4_294_967_295u64),
        Some("int64") => json!(-9_223_372_036_854_775_806i64),
        Some("uint64") => json!(18_446_744_073_709_551_614u64),
        _ => return false,
    };
    let as_integer = match fill {
        Value::Number(n) if n.is_f64() => n.as_f64().filter(|f| f.fract() == 0.0).map(integral),
        other => Some(other.clone()),
    };
    as_integer == Some(default)
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

mod chain;
#[cfg(test)]
mod tests;

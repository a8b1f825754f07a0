//! An image HDU as a Zarr array: its raw big-endian values, BSCALE/BZERO as CF
//! `scale_factor`/`add_offset` and BLANK as `_FillValue` (so that xarray unpacks and masks what
//! astropy scales and blanks), and its other cards as attributes.

use serde_json::{Map, Value as Json, json};

use super::card::{Header, Value};
use super::chunks::{self, Layout};
use super::hdu::Hdu;
use crate::formats::{FormatError, Limits, Node};

/// Cards that describe the data unit's layout, which the array's metadata says instead, and the
/// scaling cards, which become CF attributes.
fn structural(keyword: &str) -> bool {
    matches!(keyword, "SIMPLE" | "XTENSION" | "BITPIX" | "NAXIS" | "EXTEND" | "PCOUNT" | "GCOUNT" | "GROUPS")
        || matches!(keyword, "BSCALE" | "BZERO" | "BLANK")
        || keyword.strip_prefix("NAXIS").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The Zarr data type of a BITPIX.
pub fn data_type(bitpix: i64) -> &'static str {
    match bitpix {
        8 => "uint8",
        16 => "int16",
        32 => "int32",
        64 => "int64",
        -32 => "float32",
        _ => "float64",
    }
}

/// The array of an image HDU with data, its dimensions named `dimensions`.
pub fn build(
    hdu: &Hdu,
    dimensions: &[String],
    file_len: u64,
    limits: &Limits,
    warnings: &mut Vec<String>,
) -> Result<Node, FormatError> {
    let shape: Vec<u64> = hdu.axes.iter().rev().copied().collect();
    let item = hdu.bitpix.unsigned_abs() / 8;
    let data_type = data_type(hdu.bitpix);
    // An image's data unit holds its values (an extension whose GCOUNT is 0, or a header that
    // repeats GCOUNT with 0 first, declares less: its chunks would reach past the data).
    let image_bytes = shape.iter().try_fold(item, |n, d| n.checked_mul(*d));
    if image_bytes.is_none_or(|bytes| bytes > hdu.data_len) {
        return Err(FormatError::Invalid(format!(
            "{}: its image of shape {shape:?} ({item} bytes a value) is larger than its data unit of {} bytes (its \
             PCOUNT and GCOUNT must be 0 and 1)",
            hdu.label(),
            hdu.data_len
        )));
    }
    let slack = file_len - (hdu.data_start + hdu.data_len);
    let layout = Layout { shape: &shape, item, data_start: hdu.data_start, slack };
    let chunk_shape = chunks::chunk_shape(&layout, limits)?;
    let chunks = chunks::ranges(&layout, &chunk_shape, limits)?;
    let mut attributes = attributes(&hdu.header, limits, &hdu.label())?;
    let blank = scaling(hdu, data_type, &mut attributes, warnings);
    let codec =
        if item == 1 { json!({"name": "bytes"}) } else { json!({"name": "bytes", "configuration": {"endian": "big"}}) };
    let fill_value = match (hdu.bitpix, blank) {
        (bitpix, _) if bitpix < 0 => json!("NaN"),
        (_, Some(blank)) => json!(blank),
        _ => json!(0),
    };
    let metadata = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value,
        "codecs": [codec],
        "attributes": attributes,
        "dimension_names": dimensions,
    });
    let metadata = match metadata {
        Json::Object(map) => map,
        _ => Map::new(),
    };
    Ok(Node { metadata: metadata.into(), chunks })
}

/// BSCALE and BZERO as `scale_factor` and `add_offset` (left out when they change nothing, as
/// astropy then leaves the values raw), BLANK of an integer image as `_FillValue`; the BLANK
/// written, if any.
fn scaling(hdu: &Hdu, data_type: &str, attributes: &mut Map<String, Json>, warnings: &mut Vec<String>) -> Option<i64> {
    let mut real = |keyword: &str, default: f64| match hdu.header.get(keyword) {
        Some(Value::Int(i)) => *i as f64,
        Some(Value::Real(r)) => *r,
        Some(_) => {
            warnings.push(format!("{}: its {keyword} is not a number and is ignored", hdu.label()));
            default
        }
        None => default,
    };
    let (scale, zero) = (real("BSCALE", 1.0), real("BZERO", 0.0));
    if scale != 1.0 || zero != 0.0 {
        attributes.insert("scale_factor".into(), json!(scale));
        attributes.insert("add_offset".into(), json!(zero));
    }
    if hdu.bitpix < 0 {
        return None;
    }
    let blank = match hdu.header.get("BLANK")? {
        Value::Int(blank) => i64::try_from(*blank).ok(),
        _ => None,
    };
    // An integer `_FillValue` is a JSON integer (`cf::fill_attribute`), written from the i64
    // itself: an int64 BLANK may not survive the trip through f64 that function takes.
    match blank.filter(|blank| fits(*blank, hdu.bitpix)) {
        Some(blank) => {
            attributes.insert("_FillValue".into(), json!(blank));
            Some(blank)
        }
        None => {
            warnings.push(format!("{}: its BLANK does not fit its {data_type} values and is ignored", hdu.label()));
            None
        }
    }
}

fn fits(value: i64, bitpix: i64) -> bool {
    match bitpix {
        8 => (0..=255).contains(&value),
        16 => i16::try_from(value).is_ok(),
        32 => i32::try_from(value).is_ok(),
        _ => true,
    }
}

/// A header's cards as attributes: keyword = value (a repeated keyword keeps its first value),
/// COMMENT and HISTORY cards each joined into one text of lines; the layout cards left out.
pub fn attributes(header: &Header, limits: &Limits, whose: &str) -> Result<Map<String, Json>, FormatError> {
    let mut attributes = Map::new();
    for (keyword, value) in &header.cards {
        if structural(keyword) || attributes.contains_key(keyword) {
            continue;
        }
        let value = match value {
            Value::Logical(b) => json!(b),
            Value::Int(i) => i64::try_from(*i).map_or_else(|_| json!(*i as f64), |i| json!(i)),
            Value::Real(r) => json!(r),
            // `KEY =` with no value: astropy's Undefined.
            Value::Other(text) if text.is_empty() => Json::Null,
            Value::Text(text) | Value::Other(text) => json!(text),
        };
        attributes.insert(keyword.clone(), value);
    }
    for (keyword, lines) in [("COMMENT", &header.comments), ("HISTORY", &header.history)] {
        if !lines.is_empty() && !attributes.contains_key(keyword) {
            attributes.insert(keyword.into(), json!(lines.join("\n")));
        }
    }
    if attributes.len() > limits.max_attributes {
        return Err(FormatError::TooLarge(format!(
            "{whose} has {} attributes, more than limits.max_attributes ({})",
            attributes.len(),
            limits.max_attributes
        )));
    }
    Ok(attributes)
}

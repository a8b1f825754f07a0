//! HDF5 attributes as Zarr attributes, as h5netcdf shows them: numbers, strings and arrays of
//! them (a one-element array as a scalar), netCDF4's bookkeeping hidden, `_FillValue` and
//! `missing_value` encoded as xarray's Zarr reader decodes them.

use hdf5_reader::{Attribute, Datatype, StringPadding, StringSize};
use serde_json::{Map, Value};

use super::types::ElementType;
use crate::formats::{FormatError, Limits, cf};

/// What h5netcdf hides: netCDF4's and the dimension-scale API's bookkeeping.
const HIDDEN: [&str; 8] = [
    "_Netcdf4Dimid",
    "_Netcdf4Coordinates",
    "_nc3_strict",
    "_NCProperties",
    "DIMENSION_LIST",
    "REFERENCE_LIST",
    "CLASS",
    "NAME",
];

/// The attributes of `owner` as Zarr shows them; `data_type` is the array's Zarr number type
/// (for `_FillValue`), None for a group or a non-numeric array. Attributes that cannot be
/// shown are named in `warnings`.
pub(super) fn attributes(
    list: &[Attribute],
    owner: &str,
    data_type: Option<&str>,
    limits: &Limits,
    warnings: &mut Vec<String>,
) -> Result<Map<String, Value>, FormatError> {
    if list.len() > limits.max_attributes {
        return Err(FormatError::TooLarge(format!(
            "{owner} has {} attributes, more than limits.max_attributes ({})",
            list.len(),
            limits.max_attributes
        )));
    }
    let mut out = Map::new();
    for attribute in list.iter().filter(|a| !HIDDEN.contains(&a.name.as_str())) {
        let value = match value(attribute) {
            Ok(value) => value,
            Err(why) => {
                warnings.push(format!("attribute {} of {owner} is {why}: left out", attribute.name));
                continue;
            }
        };
        if matches!(attribute.name.as_str(), "_FillValue" | "missing_value") {
            if let Some(fill) = fill_attribute(&value, data_type) {
                out.insert(attribute.name.clone(), fill);
            }
            continue;
        }
        out.insert(attribute.name.clone(), value);
    }
    Ok(out)
}

/// `_FillValue`/`missing_value` of a numeric array as xarray's `FillValueCoder` expects; a
/// string array's stays as it is; None when xarray could not decode it.
fn fill_attribute(value: &Value, data_type: Option<&str>) -> Option<Value> {
    let Some(data_type) = data_type else { return Some(value.clone()) };
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if s == "NaN" => Some(f64::NAN),
        Value::String(s) if s == "Infinity" => Some(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    };
    match value {
        Value::Array(values) => values
            .iter()
            .map(|v| number(v).and_then(|f| cf::fill_attribute(f, data_type)))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        value => number(value).and_then(|f| cf::fill_attribute(f, data_type)),
    }
}

/// One attribute's value, or why it cannot be shown.
pub(super) fn value(attribute: &Attribute) -> Result<Value, String> {
    if let Some(strings) = &attribute.decoded_strings {
        return Ok(collapse(strings.iter().map(|s| Value::String(s.clone())).collect()));
    }
    match &attribute.datatype {
        Datatype::String { size: StringSize::Fixed(size), padding, .. } => {
            let size = (*size as usize).max(1);
            let strings = attribute.raw_data.chunks(size).map(|s| Value::String(fixed_string(s, *padding))).collect();
            Ok(collapse(strings))
        }
        datatype => {
            let element = ElementType::of(datatype)?;
            let Some(size) = element.size().filter(|_| element.number_name().is_some()) else {
                return Err("of a type h5netcdf does not read".into());
            };
            let values = attribute.raw_data.chunks_exact(size).filter_map(|b| element.number(b)).collect();
            Ok(collapse(values))
        }
    }
}

/// A fixed-length string without its padding (NULs, or trailing spaces for space-padded ones).
pub(super) fn fixed_string(bytes: &[u8], padding: StringPadding) -> String {
    let end = match padding {
        StringPadding::SpacePad => bytes.iter().rposition(|b| *b != b' ').map_or(0, |i| i + 1),
        _ => bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len()),
    };
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// One value as a scalar, several as an array.
fn collapse(mut values: Vec<Value>) -> Value {
    if values.len() == 1 { values.remove(0) } else { Value::Array(values) }
}

/// The attribute named `name` as text (fixed or variable-length string), if it is one.
pub(super) fn text(list: &[Attribute], name: &str) -> Option<String> {
    let attribute = list.iter().find(|a| a.name == name)?;
    match value(attribute).ok()? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The attribute named `name` as integers, if it is numeric.
pub(super) fn integers(list: &[Attribute], name: &str) -> Option<Vec<i64>> {
    let attribute = list.iter().find(|a| a.name == name)?;
    match value(attribute).ok()? {
        Value::Array(values) => values.iter().map(Value::as_i64).collect(),
        value => value.as_i64().map(|v| vec![v]),
    }
}

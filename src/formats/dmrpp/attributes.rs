//! DMR++ `Attribute` elements as Zarr attributes: typed values (numbers as numbers, one value
//! a scalar, several a list, containers as objects), without what Hyrax and netCDF4 keep for
//! themselves.

use serde_json::{Map, Value, json};

use super::super::cf;

/// Attributes Hyrax adds and netCDF4 hides (h5netcdf never shows them).
const HIDDEN: [&str; 13] = [
    "fullnamepath",
    "origname",
    "build_dmrpp_metadata",
    "_Netcdf4Dimid",
    "_Netcdf4Coordinates",
    "_nc3_strict",
    "_NCProperties",
    "_SuperblockVersion",
    "_IsNetcdf4",
    "DIMENSION_LIST",
    "REFERENCE_LIST",
    "CLASS",
    "NAME",
];

/// The NAME netCDF4 gives the dataset of a dimension that has no variable.
pub(super) const NOT_A_VARIABLE: &str = "This is a netCDF dimension but not a netCDF variable";

/// One `Attribute` being read.
#[derive(Debug, Default)]
pub(super) struct Attribute {
    pub name: String,
    pub kind: String,
    pub values: Vec<String>,
    /// A container's attributes.
    pub children: Vec<Attribute>,
}

impl Attribute {
    /// True for a container (`type="Container"` or `Structure`).
    pub fn is_container(&self) -> bool {
        matches!(self.kind.as_str(), "Container" | "Structure")
    }

    /// The value as JSON.
    pub fn json(&self) -> Value {
        if self.is_container() {
            let mut object = Map::new();
            for child in &self.children {
                object.insert(child.name.clone(), child.json());
            }
            return Value::Object(object);
        }
        let mut values: Vec<Value> = self.values.iter().map(|v| typed(&self.kind, v)).collect();
        match values.len() {
            0 => json!(""),
            1 => values.pop().unwrap_or(Value::Null),
            _ => Value::Array(values),
        }
    }

    /// The attribute's numbers, for `_FillValue` and `missing_value`.
    fn numbers(&self) -> Option<Vec<f64>> {
        self.values.iter().map(|v| parse_float(v)).collect()
    }
}

/// A node's attributes as Zarr attributes. `data_type` is an array's (None for a group): a
/// `_FillValue` or `missing_value` is encoded for it with [`cf::fill_attribute`], or left out
/// when xarray could not decode it.
pub(super) fn to_json(attributes: &[Attribute], data_type: Option<&str>) -> Map<String, Value> {
    let mut out = Map::new();
    for attribute in attributes {
        if HIDDEN.contains(&attribute.name.as_str()) {
            continue;
        }
        let is_fill = matches!(attribute.name.as_str(), "_FillValue" | "missing_value");
        match data_type {
            Some(data_type) if is_fill => {
                if let Some(value) = fill_json(attribute, data_type) {
                    out.insert(attribute.name.clone(), value);
                }
            }
            _ => {
                out.insert(attribute.name.clone(), attribute.json());
            }
        }
    }
    out
}

fn fill_json(attribute: &Attribute, data_type: &str) -> Option<Value> {
    let numbers = attribute.numbers()?;
    let mut encoded: Vec<Value> = numbers.iter().map(|n| cf::fill_attribute(*n, data_type)).collect::<Option<_>>()?;
    match encoded.len() {
        0 => None,
        1 => encoded.pop(),
        _ => Some(Value::Array(encoded)),
    }
}

/// True for the attributes of a netCDF4 dimension without a variable of its own.
pub(super) fn is_bare_dimension(attributes: &[Attribute]) -> bool {
    attributes.iter().any(|a| a.name == "NAME" && a.values.first().is_some_and(|v| v.starts_with(NOT_A_VARIABLE)))
}

/// A number in DAP's spelling (`nan`, `inf`, `-9999`, `9.96921e+36`).
pub(super) fn parse_float(text: &str) -> Option<f64> {
    let text = text.trim();
    match text.to_ascii_lowercase().as_str() {
        // DMR++ writes `*` for a NaN attribute value.
        "nan" | "-nan" | "*" => Some(f64::NAN),
        "inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

fn typed(kind: &str, text: &str) -> Value {
    let trimmed = text.trim();
    let number = match kind {
        "Byte" | "UInt8" | "UInt16" | "UInt32" | "UInt64" => trimmed.parse::<u64>().ok().map(Value::from),
        "Int8" | "Int16" | "Int32" | "Int64" => trimmed.parse::<i64>().ok().map(Value::from),
        // The float32 the file holds, so that it compares equal to xarray's np.float32.
        "Float32" => parse_float(trimmed).map(|v| cf::float_json(f64::from(v as f32))),
        "Float64" => parse_float(trimmed).map(cf::float_json),
        _ => None,
    };
    number.unwrap_or_else(|| json!(text))
}

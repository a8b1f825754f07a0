//! CF attributes as xarray's Zarr v3 reader expects them: a float `_FillValue` (or
//! `missing_value`) as the base64 of a little-endian float64 (xarray's `FillValueCoder`), an
//! integer one as a JSON integer, so that `xr.open_zarr(url)` masks what `xr.open_dataset(file)`
//! masks.

use base64::Engine;
use serde_json::{Value, json};

/// The attribute value xarray decodes as `fill` for an array of `data_type` (a Zarr v3 name:
/// `float32`, `int16`...), or None when xarray cannot decode one for that type (then leave the
/// attribute out: a `_FillValue` it cannot decode fails the whole dataset).
pub fn fill_attribute(fill: f64, data_type: &str) -> Option<Value> {
    match data_type {
        "float16" | "float32" | "float64" => {
            Some(json!(base64::engine::general_purpose::STANDARD.encode(fill.to_le_bytes())))
        }
        "int8" | "int16" | "int32" | "int64" if fill.fract() == 0.0 => Some(json!(fill as i64)),
        "uint8" | "uint16" | "uint32" | "uint64" if fill.fract() == 0.0 && fill >= 0.0 => Some(json!(fill as u64)),
        _ => None,
    }
}

/// The Zarr v3 `fill_value` of `fill` for an array of `data_type`: NaN and the infinities as
/// their names, integers as integers.
pub fn fill_value(fill: f64, data_type: &str) -> Value {
    match data_type {
        "float16" | "float32" | "float64" => float_json(fill),
        "bool" => json!(fill != 0.0),
        t if t.starts_with('u') => json!(fill as u64),
        _ => json!(fill as i64),
    }
}

/// A float as Zarr writes it in JSON (a fill value, an attribute): NaN and the infinities by
/// name, since JSON has no number for them.
pub fn float_json(value: f64) -> Value {
    if value.is_nan() {
        json!("NaN")
    } else if value == f64::INFINITY {
        json!("Infinity")
    } else if value == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_are_encoded_as_xarray_decodes_them() {
        assert_eq!(fill_attribute(-9999.0, "float32"), Some(json!("AAAAAICHw8A=")));
        assert_eq!(fill_attribute(-32767.0, "int16"), Some(json!(-32767)));
        assert_eq!(fill_attribute(255.0, "uint8"), Some(json!(255)));
        assert_eq!(fill_attribute(1.5, "int16"), None);
        assert_eq!(fill_value(f64::NAN, "float64"), json!("NaN"));
        assert_eq!(fill_value(-127.0, "int8"), json!(-127));
        assert_eq!(fill_value(9.969209968386869e36, "float32"), json!(9.969209968386869e36));
    }
}

//! What CF attributes say about an array's numbers, as xarray reads them: packed values
//! (`scale_factor`, `add_offset`), values that mean "missing" (`_FillValue`, `missing_value`,
//! written as numbers or, by xarray's zarr v3 `FillValueCoder`, as base64 of the value's bytes),
//! and `units`; and numbers printed to about four significant digits.

use serde_json::{Map, Value};

use crate::zarr::native::BASE64;

/// How an array's stored numbers become the values it means.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Packing {
    /// `scale_factor` (1 when absent).
    pub scale: f64,
    /// `add_offset` (0 when absent).
    pub offset: f64,
    /// Stored numbers that mean "missing".
    pub missing: Vec<f64>,
    /// `units`, when given.
    pub units: Option<String>,
}

impl Packing {
    /// The packing `attributes` describe for an array of `data_type` (`as_f64` reads one
    /// stored element of that type from little-endian bytes).
    pub fn from_attributes(
        attributes: Option<&Map<String, Value>>,
        data_type: &str,
        as_f64: impl Fn(&str, &[u8]) -> Option<f64>,
    ) -> Self {
        let empty = Map::new();
        let a = attributes.unwrap_or(&empty);
        let number = |name: &str| a.get(name).and_then(|v| single(v, data_type, &as_f64));
        let mut missing = Vec::new();
        for name in ["_FillValue", "missing_value"] {
            match a.get(name) {
                Some(Value::Array(values)) => {
                    missing.extend(values.iter().filter_map(|v| single(v, data_type, &as_f64)));
                }
                Some(v) => missing.extend(single(v, data_type, &as_f64)),
                None => {}
            }
        }
        Self {
            scale: number("scale_factor").unwrap_or(1.0),
            offset: number("add_offset").unwrap_or(0.0),
            missing,
            units: a.get("units").and_then(Value::as_str).map(str::to_owned),
        }
    }

    /// The value a stored number means (NaN when it means "missing").
    pub fn unpack(&self, stored: f64) -> f64 {
        if self.missing.iter().any(|m| *m == stored || (m.is_nan() && stored.is_nan())) {
            return f64::NAN;
        }
        stored * self.scale + self.offset
    }
}

/// One number of an attribute: a JSON number, `"NaN"`/`"Infinity"`, or base64 of the bytes of
/// one element (of the array's type, else of a float64 or float32).
fn single(v: &Value, data_type: &str, as_f64: &impl Fn(&str, &[u8]) -> Option<f64>) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => {
                use base64::Engine;
                let bytes = BASE64.decode(s).ok()?;
                as_f64(data_type, &bytes).or_else(|| as_f64("float64", &bytes)).or_else(|| as_f64("float32", &bytes))
            }
        },
        Value::Array(values) if values.len() == 1 => single(&values[0], data_type, as_f64),
        _ => None,
    }
}

/// `x` to about four significant digits, as a person reads a colour scale: `273.1`, `0.0001235`,
/// `1.235e+09`, `-5`.
pub fn short(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        return "0".into();
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-4..=6).contains(&magnitude) {
        let text = format!("{x:.3e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let exponent: i32 = exponent.parse().unwrap_or(0);
        return format!("{mantissa}e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs());
    }
    let decimals = (3 - magnitude).max(0) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_owned() } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(data_type: &str, b: &[u8]) -> Option<f64> {
        match (data_type, b.len()) {
            ("float64", 8) => Some(f64::from_le_bytes(b.try_into().ok()?)),
            ("float32", 4) => Some(f64::from(f32::from_le_bytes(b.try_into().ok()?))),
            ("int16", 2) => Some(f64::from(i16::from_le_bytes(b.try_into().ok()?))),
            _ => None,
        }
    }

    #[test]
    fn packed_values_and_missing_ones_are_read_as_xarray_does() {
        let a = json!({"scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767, "units": "K",
                       "missing_value": [-32768]});
        let p = Packing::from_attributes(a.as_object(), "int16", read);
        assert_eq!((p.scale, p.offset, p.units.as_deref()), (0.01, 273.15, Some("K")));
        assert!((p.unpack(100.0) - 274.15).abs() < 1e-9);
        assert!(p.unpack(-32767.0).is_nan() && p.unpack(-32768.0).is_nan());
        // xarray's zarr v3 form: base64 of the value's bytes (-9999.0 as float64).
        let b = json!({"_FillValue": "AAAAAICHw8A="});
        let p = Packing::from_attributes(b.as_object(), "float64", read);
        assert_eq!(p.missing, vec![-9999.0]);
        assert!(p.unpack(-9999.0).is_nan());
        let n = json!({"_FillValue": "NaN"});
        assert!(Packing::from_attributes(n.as_object(), "float32", read).unpack(f64::NAN).is_nan());
        assert_eq!(Packing::from_attributes(None, "float32", read).unpack(2.5), 2.5);
    }

    #[test]
    fn numbers_are_printed_to_four_significant_digits() {
        for (x, text) in [
            (273.15, "273.1"),
            (0.000_123_456, "0.0001235"),
            (1_234_567_890.0, "1.235e+09"),
            (-5.0, "-5"),
            (0.0, "0"),
            (101_325.0, "101325"),
            (2.5e-7, "2.5e-07"),
            (-0.333_333_333_333, "-0.3333"),
        ] {
            assert_eq!(short(x), text, "{x}");
        }
    }
}

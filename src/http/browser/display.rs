//! Numbers and values as a person reads them on a page: counts with their noun in the right
//! number ("1 group", "2 groups"), byte counts as sizes ("12.6 MB", the exact count in a
//! title), and xarray's encoded `_FillValue` decoded in the array's data type.

use base64::Engine;
use serde_json::Value;

use super::super::html::escape;

/// `n` and its noun (one with a plain `s` plural), singular for 1: `count(1, "group")` is `1 group`.
pub(super) fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// A byte count as HTML: a decimal size (`12.6 MB`) with the exact count in its title.
pub(super) fn size(bytes: u64) -> String {
    if bytes < 1000 {
        return count(bytes, "byte");
    }
    let units = ["kB", "MB", "GB", "TB", "PB", "EB"];
    let (mut value, mut unit) = (bytes as f64 / 1000.0, 0);
    // 999.95 kB would round to "1000.0 kB": the next unit then
    while value >= 999.95 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("<span title=\"{} bytes\">{value:.1} {}</span>", grouped(bytes), units[unit])
}

/// `12600000` as `12,600,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An attribute's value as HTML text (escaped): xarray writes a float `_FillValue` (and a
/// byte-string one) as the base64 of its little-endian bytes (`FillValueCoder`: a float as an
/// 8-byte float64 whatever the array's type); shown decoded in `data_type`, the encoded form
/// beside it. `None` for any other attribute or value.
pub(super) fn fill_attribute(name: &str, value: &Value, data_type: Option<&str>) -> Option<String> {
    let (Value::String(encoded), "_FillValue" | "missing_value") = (value, name) else { return None };
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let decoded = decode(&bytes, data_type?)?;
    Some(format!("{} <span class=\"dim\">(encoded {})</span>", escape(&decoded), escape(encoded)))
}

/// Little-endian `bytes` as a number of `data_type`, if they are one.
fn decode(bytes: &[u8], data_type: &str) -> Option<String> {
    macro_rules! int {
        ($t:ty) => {
            <[u8; size_of::<$t>()]>::try_from(bytes).ok().map(|b| <$t>::from_le_bytes(b).to_string())
        };
    }
    match data_type {
        "float16" | "float32" | "float64" => match bytes.len() {
            8 => Some(float(f64::from_le_bytes(bytes.try_into().ok()?))),
            4 => Some(float(f64::from(f32::from_le_bytes(bytes.try_into().ok()?)))),
            _ => None,
        },
        "int8" => int!(i8),
        "int16" => int!(i16),
        "int32" => int!(i32),
        "int64" => int!(i64),
        "uint8" => int!(u8),
        "uint16" => int!(u16),
        "uint32" => int!(u32),
        "uint64" => int!(u64),
        _ => None,
    }
}

fn float(f: f64) -> String {
    match f {
        f if f.is_nan() => "NaN".into(),
        f if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        f => format!("{f:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_say_one_in_the_singular() {
        assert_eq!(count(1, "group"), "1 group");
        assert_eq!(count(2, "group"), "2 groups");
        assert_eq!(count(0, "array"), "0 arrays");
        assert_eq!(count(1, "chunk"), "1 chunk");
        assert_eq!(count(3, "chunk"), "3 chunks");
    }

    #[test]
    fn sizes_are_rounded_with_the_exact_count_beside() {
        assert_eq!(size(1), "1 byte");
        assert_eq!(size(999), "999 bytes");
        assert_eq!(size(12_600_000), "<span title=\"12,600,000 bytes\">12.6 MB</span>");
        assert_eq!(size(12_634_567), "<span title=\"12,634,567 bytes\">12.6 MB</span>");
        assert_eq!(size(1_000), "<span title=\"1,000 bytes\">1.0 kB</span>");
        assert_eq!(size(999_999), "<span title=\"999,999 bytes\">1.0 MB</span>");
        assert_eq!(size(5_300_000_000_000), "<span title=\"5,300,000,000,000 bytes\">5.3 TB</span>");
    }

    #[test]
    fn xarrays_fill_value_is_decoded_in_the_arrays_type() {
        let shown = fill_attribute("_FillValue", &json!("AAAAAICHw8A="), Some("float32")).unwrap();
        assert_eq!(shown, "-9999.0 <span class=\"dim\">(encoded AAAAAICHw8A=)</span>");
        let nan = base64::engine::general_purpose::STANDARD.encode(f64::NAN.to_le_bytes());
        assert!(fill_attribute("_FillValue", &json!(nan), Some("float64")).unwrap().starts_with("NaN "));
        let four = base64::engine::general_purpose::STANDARD.encode(1.5f32.to_le_bytes());
        assert!(fill_attribute("_FillValue", &json!(four), Some("float32")).unwrap().starts_with("1.5 "));
        let int = base64::engine::general_purpose::STANDARD.encode((-32768i16).to_le_bytes());
        assert!(fill_attribute("_FillValue", &json!(int), Some("int16")).unwrap().starts_with("-32768 "));
        assert_eq!(fill_attribute("_FillValue", &json!(-9999), Some("int32")), None, "a number is shown as it is");
        assert_eq!(fill_attribute("title", &json!("AAAAAICHw8A="), Some("float64")), None);
        assert_eq!(fill_attribute("_FillValue", &json!("not base64!"), Some("float64")), None);
        assert_eq!(fill_attribute("_FillValue", &json!("AAAAAICHw8A="), Some("int16")), None, "the wrong length");
    }
}

//! The joined coordinate: its values concatenated into one inline chunk, and when the files
//! write it differently, CF time units (`<unit> since <date>`) read and the values converted
//! into the first file's units. Pure: the values come read and decoded.

use chrono::{NaiveDate, NaiveDateTime};
use serde_json::{Value, json};

use super::{CombineError, PointerIn};
use crate::formats::{Chunk, Node};
use crate::zarr::decode::ChunkDecoder;

/// Calendars whose dates are the proleptic Gregorian calendar's (CF's `standard` differs only
/// before 1582, which a file joined with another is not expected to straddle).
const GREGORIAN: &[&str] = &["standard", "gregorian", "proleptic_gregorian"];

/// CF time units: seconds per unit and the epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeUnits {
    seconds: f64,
    epoch: NaiveDateTime,
    calendar: String,
}

impl TimeUnits {
    /// The units a coordinate's attributes write (`units`, `calendar`), or why they are not CF time.
    pub fn of(node: &Node) -> Result<Self, String> {
        let text = |key: &str| node.metadata.pointer_in(&format!("/attributes/{key}")).and_then(Value::as_str);
        let units = text("units").ok_or("it has no units")?;
        let calendar = text("calendar").unwrap_or("standard").to_ascii_lowercase();
        Self::parse(units, &calendar)
    }

    fn parse(units: &str, calendar: &str) -> Result<Self, String> {
        let not_time = || format!("its units {units:?} are not CF time (\"days since 2000-01-01\")");
        let (unit, since) = units.split_once(" since ").ok_or_else(not_time)?;
        let seconds = match unit.trim().to_ascii_lowercase().as_str() {
            "seconds" | "second" | "secs" | "sec" | "s" => 1.0,
            "minutes" | "minute" | "mins" | "min" => 60.0,
            "hours" | "hour" | "hrs" | "hr" | "h" => 3600.0,
            "days" | "day" | "d" => 86400.0,
            _ => return Err(not_time()),
        };
        let epoch = epoch(since.trim()).ok_or_else(not_time)?;
        Ok(Self { seconds, epoch, calendar: calendar.to_owned() })
    }

    /// `value` in these units written in `other` units, when the calendars allow it.
    fn convert(&self, value: f64, other: &TimeUnits) -> Option<f64> {
        let shift = if self.epoch == other.epoch {
            0.0
        } else if GREGORIAN.contains(&self.calendar.as_str()) && GREGORIAN.contains(&other.calendar.as_str()) {
            (self.epoch - other.epoch).as_seconds_f64()
        } else {
            // Between two epochs, a day count depends on the calendar: only the same epoch.
            return None;
        };
        Some((value * self.seconds + shift) / other.seconds)
    }
}

/// The date after `since`: `2000-01-01`, `2000-1-1 00:00`, `2000-01-01T06:00:00Z`, `... UTC`.
fn epoch(since: &str) -> Option<NaiveDateTime> {
    let text = since.trim_end_matches(" UTC").trim_end_matches('Z').trim().replace('T', " ");
    for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(&text, format) {
            return Some(at);
        }
    }
    NaiveDate::parse_from_str(&text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0))
}

/// The key to sort a file by: its first coordinate value as seconds since the first file's
/// epoch (`None`: no value, or units that cannot be compared).
pub fn start(values: &[f64], units: &TimeUnits, first: &TimeUnits) -> Option<f64> {
    values.first().and_then(|v| units.convert(*v, first))
}

/// The joined coordinate `dim`: `first`'s array (attributes, data type where the values fit it)
/// whose values are every file's (`parts`: URL, the file's coordinate, its values), converted
/// into the first file's units when the files write it in different units or calendars, as one
/// inline chunk.
pub fn joined(dim: &str, parts: &[(std::sync::Arc<str>, Node, Vec<f64>)]) -> Result<Node, CombineError> {
    let refused = |why: String| CombineError::Refused(why);
    let (first_url, first, _) = &parts[0];
    let mut values = Vec::with_capacity(parts.iter().map(|(_, _, v)| v.len()).sum());
    if differ(&parts.iter().map(|(_, node, _)| node).collect::<Vec<_>>()) {
        let units = TimeUnits::of(first).map_err(|why| refused(format!("coordinate {dim} of {first_url}: {why}")))?;
        for (url, node, own) in parts {
            let theirs = TimeUnits::of(node).map_err(|why| refused(format!("coordinate {dim} of {url}: {why}")))?;
            for v in own {
                values.push(theirs.convert(*v, &units).ok_or_else(|| {
                    refused(format!(
                        "files {first_url} and {url} write coordinate {dim} in calendar {:?} from different dates: \
                         zarrgate converts between epochs in the standard calendars only",
                        theirs.calendar
                    ))
                })?);
            }
        }
    } else {
        values.extend(parts.iter().flat_map(|(_, _, own)| own.iter().copied()));
    }
    let mut metadata = (*first.metadata).clone();
    let own_type = metadata.get("data_type").and_then(Value::as_str).unwrap_or("float64").to_owned();
    let (data_type, bytes) = encode(&own_type, &values);
    if data_type != own_type {
        let fill = metadata.get("fill_value").cloned().unwrap_or(json!(0));
        let fill = match (data_type, fill.as_f64()) {
            ("int64", Some(f)) if f.fract() == 0.0 => json!(f as i64),
            ("int64", _) => json!(0),
            (_, Some(f)) => json!(f),
            (_, None) => fill,
        };
        metadata.insert("fill_value".into(), fill);
    }
    let length = values.len().max(1);
    for (key, value) in [
        ("shape", json!([values.len()])),
        ("data_type", json!(data_type)),
        ("chunk_grid", json!({"name": "regular", "configuration": {"chunk_shape": [length]}})),
        ("codecs", json!([{"name": "bytes", "configuration": {"endian": "little"}}])),
    ] {
        metadata.insert(key.into(), value);
    }
    let chunks = if values.is_empty() { Vec::new() } else { vec![(vec![0], Chunk::Inline(bytes))] };
    Ok(Node { metadata: metadata.into(), chunks })
}

/// `values` as little-endian elements of `data_type` when each one is exactly one of them, else
/// of `int64` (integers) or `float64`: the data type written and the bytes.
fn encode(data_type: &str, values: &[f64]) -> (&'static str, Vec<u8>) {
    macro_rules! exact {
        ($name:literal, $t:ty) => {
            if values.iter().all(|v| v.abs() < 9.0e15 && (*v as $t) as f64 == *v) {
                return ($name, values.iter().flat_map(|v| (*v as $t).to_le_bytes()).collect());
            }
        };
    }
    match data_type {
        "int8" => exact!("int8", i8),
        "int16" => exact!("int16", i16),
        "int32" => exact!("int32", i32),
        "uint8" => exact!("uint8", u8),
        "uint16" => exact!("uint16", u16),
        "uint32" => exact!("uint32", u32),
        "uint64" => exact!("uint64", u64),
        "float32" if values.iter().all(|v| f64::from(*v as f32) == *v || v.is_nan()) => {
            return ("float32", values.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect());
        }
        _ => {}
    }
    if data_type != "float64" && data_type != "float32" {
        exact!("int64", i64);
    }
    ("float64", values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The values of a 1-d coordinate `node` from its chunks' encoded bytes (`chunks`: each chunk's
/// index and bytes, `None` for a missing one, read as the fill value), as numbers.
pub fn decode_values(node: &Node, chunks: &[(u64, Option<Vec<u8>>)]) -> Result<Vec<f64>, String> {
    let length = node.metadata.pointer_in("/shape/0").and_then(Value::as_u64).ok_or("it is not 1-d")?;
    let step = node
        .metadata
        .pointer_in("/chunk_grid/configuration/chunk_shape/0")
        .and_then(Value::as_u64)
        .filter(|s| *s > 0)
        .ok_or("it has no chunk shape")?;
    if length > MAX_VALUES || step > MAX_VALUES {
        return Err(format!("it has more than {MAX_VALUES} values"));
    }
    let decoder = ChunkDecoder::new(&node.metadata, &[step], step * 8).map_err(|e| e.to_string())?;
    let data_type = node.metadata.get("data_type").and_then(Value::as_str).unwrap_or_default();
    let fill = node.metadata.get("fill_value").and_then(Value::as_f64).unwrap_or(f64::NAN);
    let mut values = vec![fill; length as usize];
    for (j, bytes) in chunks {
        let Some(bytes) = bytes else { continue };
        let raw = decoder.decode(bytes).map_err(|e| e.to_string())?.into_fixed().map_err(|e| e.to_string())?;
        let numbers = numbers(data_type, &raw).ok_or_else(|| format!("its data type {data_type} is not a number"))?;
        let first = j.saturating_mul(step);
        for (k, v) in numbers.into_iter().enumerate() {
            if let Some(slot) = values.get_mut((first + k as u64) as usize).filter(|_| first + (k as u64) < length) {
                *slot = v;
            }
        }
    }
    Ok(values)
}

/// The most values a joined coordinate of one file may have to be read.
const MAX_VALUES: u64 = 1 << 22;

/// Native-endian elements of `data_type` as numbers.
fn numbers(data_type: &str, raw: &[u8]) -> Option<Vec<f64>> {
    macro_rules! read {
        ($t:ty) => {
            raw.chunks_exact(size_of::<$t>())
                .map(|b| <$t>::from_ne_bytes(b.try_into().unwrap_or_default()) as f64)
                .collect()
        };
    }
    Some(match data_type {
        "int8" => read!(i8),
        "int16" => read!(i16),
        "int32" => read!(i32),
        "int64" => read!(i64),
        "uint8" => read!(u8),
        "uint16" => read!(u16),
        "uint32" => read!(u32),
        "uint64" => read!(u64),
        "float32" => read!(f32),
        "float64" => read!(f64),
        _ => return None,
    })
}

/// The order of files by their coordinate's first value (`coordinates`: each file's coordinate
/// and values, in the files' order): indices into it, or why it cannot be told.
pub fn order(urls: &[&str], coordinates: &[(&Node, &[f64])]) -> Result<Vec<usize>, String> {
    let plain = !differ(&coordinates.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    let first_units = if plain { None } else { Some(TimeUnits::of(coordinates[0].0)?) };
    let mut keyed = Vec::with_capacity(coordinates.len());
    for (i, (node, values)) in coordinates.iter().enumerate() {
        let key = match &first_units {
            None => values.first().copied(),
            Some(first) => start(values, &TimeUnits::of(node)?, first),
        };
        match key.filter(|k| !k.is_nan()) {
            Some(k) => keyed.push((k, i)),
            None => return Err(format!("{} has no value of its coordinate to order it by", urls[i])),
        }
    }
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    Ok(keyed.into_iter().map(|(_, i)| i).collect())
}

/// Whether the files write their coordinate `dim` in different `units` or `calendar`.
pub fn differ(coordinates: &[&Node]) -> bool {
    let encoding =
        |n: &Node| ["units", "calendar"].map(|k| n.metadata.pointer_in(&format!("/attributes/{k}")).cloned());
    coordinates.windows(2).any(|w| encoding(w[0]) != encoding(w[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coordinate(units: &str, calendar: &str, data_type: &str) -> Node {
        let metadata = json!({
            "zarr_format": 3, "node_type": "array", "shape": [2], "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "fill_value": 0, "codecs": [{"name": "numcodecs.zlib"}], "dimension_names": ["time"],
            "attributes": {"units": units, "calendar": calendar, "standard_name": "time"},
        });
        Node { metadata: metadata.as_object().cloned().unwrap().into(), chunks: vec![] }
    }

    #[test]
    fn cf_units_are_read_in_their_common_spellings() {
        let u = TimeUnits::parse("hours since 2000-01-01T06:00:00Z", "standard").unwrap();
        assert_eq!(u.seconds, 3600.0);
        assert_eq!(u.epoch, NaiveDate::from_ymd_opt(2000, 1, 1).unwrap().and_hms_opt(6, 0, 0).unwrap());
        assert!(TimeUnits::parse("days since 2000-1-1", "standard").is_ok());
        assert!(TimeUnits::parse("minutes since 1970-01-01 00:00:00 UTC", "standard").is_ok());
        assert!(TimeUnits::parse("m", "standard").unwrap_err().contains("not CF time"));
        assert!(TimeUnits::parse("fortnights since 2000-01-01", "standard").is_err());
    }

    #[test]
    fn values_are_converted_into_the_first_files_units() {
        let parts = vec![
            ("a".into(), coordinate("days since 2000-01-01", "standard", "float64"), vec![0.0, 1.0]),
            ("b".into(), coordinate("hours since 2000-01-03", "gregorian", "float64"), vec![0.0, 12.0]),
        ];
        let node = joined("time", &parts).unwrap();
        assert_eq!(node.metadata["shape"], json!([4]));
        assert_eq!(node.metadata["attributes"]["units"], "days since 2000-01-01");
        assert_eq!(node.metadata["codecs"], json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        let Chunk::Inline(bytes) = &node.chunks[0].1 else { panic!("not inline") };
        let values: Vec<f64> = bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(values, [0.0, 1.0, 2.0, 2.5]);
    }

    #[test]
    fn integers_stay_integers_when_they_can() {
        let parts = vec![
            ("a".into(), coordinate("hours since 2000-01-01", "standard", "int32"), vec![0.0, 6.0]),
            ("b".into(), coordinate("days since 2000-01-02", "standard", "int32"), vec![0.0, 1.0]),
        ];
        let node = joined("time", &parts).unwrap();
        assert_eq!(node.metadata["data_type"], "int32");
        let Chunk::Inline(bytes) = &node.chunks[0].1 else { panic!("not inline") };
        let values: Vec<i32> = bytes.chunks_exact(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(values, [0, 6, 24, 48]);
        // Past int32 once converted: int64. Not integers: float64, its fill value a float.
        let seconds = vec![
            ("a".into(), coordinate("seconds since 2000-01-01", "standard", "int32"), vec![0.0]),
            ("b".into(), coordinate("days since 2100-01-01", "standard", "int32"), vec![0.0]),
        ];
        let node = joined("time", &seconds).unwrap();
        assert_eq!(node.metadata["data_type"], "int64");
        let Chunk::Inline(bytes) = &node.chunks[0].1 else { panic!("not inline") };
        assert_eq!(i64::from_le_bytes(bytes[8..16].try_into().unwrap()), 3_155_760_000);
        let halves = vec![
            ("a".into(), coordinate("hours since 2000-01-01", "standard", "int32"), vec![0.0]),
            ("b".into(), coordinate("days since 2000-01-01", "standard", "int32"), vec![0.01]),
        ];
        let node = joined("time", &halves).unwrap();
        assert_eq!(
            (node.metadata["data_type"].as_str(), node.metadata["fill_value"].is_f64()),
            (Some("float64"), true)
        );
    }

    #[test]
    fn a_coordinate_in_the_same_units_is_concatenated_as_it_is() {
        let parts = vec![
            ("a".into(), coordinate("depth", "standard", "float32"), vec![0.5, 1.5]),
            ("b".into(), coordinate("depth", "standard", "float32"), vec![2.5, f64::NAN]),
        ];
        let node = joined("depth", &parts).unwrap();
        assert_eq!((node.metadata["data_type"].as_str(), &node.metadata["shape"]), (Some("float32"), &json!([4])));
        assert_eq!(node.metadata["attributes"]["units"], "depth");
        let Chunk::Inline(bytes) = &node.chunks[0].1 else { panic!("not inline") };
        let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(values[..3], [0.5, 1.5, 2.5]);
        assert!(values[3].is_nan());
    }

    #[test]
    fn other_calendars_convert_between_units_but_not_between_epochs() {
        let same = vec![
            ("a".into(), coordinate("days since 2000-01-01", "noleap", "float64"), vec![0.0]),
            ("b".into(), coordinate("hours since 2000-01-01", "noleap", "float64"), vec![48.0]),
        ];
        assert!(joined("time", &same).is_ok());
        let shifted = vec![
            ("a".into(), coordinate("days since 2000-01-01", "noleap", "float64"), vec![0.0]),
            ("b".into(), coordinate("days since 2001-01-01", "noleap", "float64"), vec![0.0]),
        ];
        let Err(CombineError::Refused(why)) = joined("time", &shifted) else { panic!("not refused") };
        assert!(why.contains("\"noleap\"") && why.contains("a and b"), "{why}");
        let a = coordinate("days since 2000-01-01", "noleap", "float64");
        let b = coordinate("days since 2001-01-01", "noleap", "float64");
        assert!(differ(&[&a, &b]) && !differ(&[&a, &a]));
    }
}

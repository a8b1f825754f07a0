//! Chunk key encodings (`default` and `v2`) and the manifest's own `i.j.k` keys.

use serde_json::Value;

/// How an array names its chunks in the store, from its `chunk_key_encoding` metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// `c/1/2` (or `c.1.2`); a 0-d array's chunk is `c`.
    Default { separator: char },
    /// `1.2` (or `1/2`); a 0-d array's chunk is `0`.
    V2 { separator: char },
}

/// Why a `chunk_key_encoding` is not supported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chunk_key_encoding {0} is not supported (expected default or v2 with separator \"/\" or \".\")")]
pub struct UnsupportedEncoding(pub String);

impl ChunkKeyEncoding {
    /// Reads an array's `chunk_key_encoding` metadata value.
    pub fn from_metadata(value: &Value) -> Result<Self, UnsupportedEncoding> {
        let unsupported = || UnsupportedEncoding(value.to_string());
        let (name, configuration) = match value {
            Value::String(name) => (name.as_str(), None),
            Value::Object(map) => {
                (map.get("name").and_then(Value::as_str).ok_or_else(unsupported)?, map.get("configuration"))
            }
            _ => return Err(unsupported()),
        };
        let separator = match configuration.and_then(|c| c.get("separator")) {
            None => None,
            Some(Value::String(s)) if s == "/" => Some('/'),
            Some(Value::String(s)) if s == "." => Some('.'),
            Some(_) => return Err(unsupported()),
        };
        match name {
            "default" => Ok(Self::Default { separator: separator.unwrap_or('/') }),
            "v2" => Ok(Self::V2 { separator: separator.unwrap_or('.') }),
            _ => Err(unsupported()),
        }
    }

    /// Parses a chunk key of an array with `ndim` dimensions into grid coordinates. Only the
    /// canonical spelling is accepted (no signs, no leading zeros), so each chunk has one key.
    pub fn parse(&self, key: &str, ndim: usize) -> Option<Vec<u64>> {
        let (body, separator) = match *self {
            Self::Default { separator } => {
                if ndim == 0 {
                    return (key == "c").then(Vec::new);
                }
                (key.strip_prefix('c')?.strip_prefix(separator)?, separator)
            }
            Self::V2 { separator } => {
                if ndim == 0 {
                    return (key == "0").then(Vec::new);
                }
                (key, separator)
            }
        };
        parse_indices(body, separator, ndim)
    }

    /// The key of the chunk at `coords`.
    pub fn encode(&self, coords: &[u64]) -> String {
        match *self {
            Self::Default { separator } => {
                let mut key = String::from("c");
                for c in coords {
                    key.push(separator);
                    key.push_str(&c.to_string());
                }
                key
            }
            Self::V2 { .. } if coords.is_empty() => "0".to_owned(),
            Self::V2 { separator } => join_indices(coords, separator),
        }
    }
}

/// Parses a manifest key (`"1.0.2"`; `""` or `"0"` for a 0-d array) into grid coordinates.
pub fn parse_manifest_key(key: &str, ndim: usize) -> Option<Vec<u64>> {
    if ndim == 0 {
        return (key.is_empty() || key == "0").then(Vec::new);
    }
    parse_indices(key, '.', ndim)
}

/// The manifest key of the chunk at `coords` (`""` for a 0-d array).
pub fn manifest_key(coords: &[u64]) -> String {
    join_indices(coords, '.')
}

fn join_indices(coords: &[u64], separator: char) -> String {
    let mut key = String::with_capacity(coords.len() * 3);
    for (i, c) in coords.iter().enumerate() {
        if i > 0 {
            key.push(separator);
        }
        key.push_str(&c.to_string());
    }
    key
}

fn parse_indices(body: &str, separator: char, ndim: usize) -> Option<Vec<u64>> {
    let mut coords = Vec::with_capacity(ndim);
    for part in body.split(separator) {
        coords.push(parse_index(part)?);
    }
    (coords.len() == ndim).then_some(coords)
}

fn parse_index(part: &str) -> Option<u64> {
    let canonical =
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && (part == "0" || !part.starts_with('0'));
    if canonical { part.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn enc(v: Value) -> ChunkKeyEncoding {
        ChunkKeyEncoding::from_metadata(&v).unwrap()
    }

    #[test]
    fn reads_metadata() {
        assert_eq!(enc(json!({"name": "default"})), ChunkKeyEncoding::Default { separator: '/' });
        assert_eq!(
            enc(json!({"name": "default", "configuration": {"separator": "."}})),
            ChunkKeyEncoding::Default { separator: '.' }
        );
        assert_eq!(enc(json!({"name": "v2"})), ChunkKeyEncoding::V2 { separator: '.' });
        assert_eq!(enc(json!("v2")), ChunkKeyEncoding::V2 { separator: '.' });
        let bad = ChunkKeyEncoding::from_metadata(&json!({"name": "default", "configuration": {"separator": "-"}}));
        assert!(bad.unwrap_err().to_string().contains("separator"));
    }

    #[test]
    fn parses_every_encoding() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(d.parse("c/1/23/4", 3), Some(vec![1, 23, 4]));
        assert_eq!(d.parse("c", 0), Some(vec![]));
        assert_eq!(d.parse("c/1/2", 3), None);
        assert_eq!(d.parse("1/2/3", 3), None);
        let dot = ChunkKeyEncoding::Default { separator: '.' };
        assert_eq!(dot.parse("c.1.0", 2), Some(vec![1, 0]));
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(v2.parse("1.0", 2), Some(vec![1, 0]));
        assert_eq!(v2.parse("0", 0), Some(vec![]));
        let v2s = ChunkKeyEncoding::V2 { separator: '/' };
        assert_eq!(v2s.parse("3/0", 2), Some(vec![3, 0]));
    }

    #[test]
    fn rejects_non_canonical_indices() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        for bad in ["c/01/2", "c/+1/2", "c/-1/2", "c//2", "c/1/2/", "c/1/x", "c/1/99999999999999999999"] {
            assert_eq!(d.parse(bad, 2), None, "{bad}");
        }
    }

    #[test]
    fn manifest_keys() {
        assert_eq!(parse_manifest_key("0.1.2", 3), Some(vec![0, 1, 2]));
        assert_eq!(parse_manifest_key("", 0), Some(vec![]));
        assert_eq!(parse_manifest_key("0", 0), Some(vec![]));
        assert_eq!(parse_manifest_key("0.1", 3), None);
        assert_eq!(manifest_key(&[4, 0]), "4.0");
        assert_eq!(manifest_key(&[]), "");
    }

    proptest! {
        #[test]
        fn encode_then_parse_round_trips(coords in proptest::collection::vec(0u64..1_000_000, 0..6), v2 in any::<bool>(), slash in any::<bool>()) {
            let separator = if slash { '/' } else { '.' };
            let e = if v2 { ChunkKeyEncoding::V2 { separator } } else { ChunkKeyEncoding::Default { separator } };
            prop_assert_eq!(e.parse(&e.encode(&coords), coords.len()), Some(coords.clone()));
            prop_assert_eq!(parse_manifest_key(&manifest_key(&coords), coords.len()), Some(coords));
        }

        #[test]
        fn parse_never_panics(key in ".{0,40}", ndim in 0usize..5) {
            let _ = ChunkKeyEncoding::Default { separator: '/' }.parse(&key, ndim);
            let _ = ChunkKeyEncoding::V2 { separator: '.' }.parse(&key, ndim);
            let _ = parse_manifest_key(&key, ndim);
        }
    }
}

//! Node metadata held as compact JSON text between parsing and the catalog (a parsed map
//! costs about ten times its text).

use serde_json::{Map, Value};

/// A map as compact JSON text (which cannot fail: its keys are strings).
pub fn to_json_text(metadata: &Map<String, Value>) -> Box<str> {
    serde_json::to_string(metadata).unwrap_or_default().into_boxed_str()
}

/// Text written by [`to_json_text`], parsed back (always an object).
pub fn parse_json_text(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(metadata)) => metadata,
        _ => Map::new(),
    }
}

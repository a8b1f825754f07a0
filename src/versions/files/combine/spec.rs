//! The `combine` spec of a files registration, read from its JSON: every key and value checked,
//! an unknown one named (a 400).

use chrono::format::{Item, StrftimeItems};
use regex::Regex;
use serde_json::{Map, Value};

use super::CombineError;

/// A `combine` spec, checked.
#[derive(Debug, Clone)]
pub enum Combine {
    /// `{"join": "existing", "dim": D}`: arrays that have dimension `D` concatenated along it,
    /// in file order; the others taken from the first file (and checked equal in all).
    Existing {
        /// The dimension joined.
        dim: String,
        /// `"order": "coordinate"`: the files sorted by their coordinate's first value (else
        /// as listed, or in key order under a prefix).
        by_coordinate: bool,
    },
    /// `{"join": "new", "dim": N, "pattern": REGEX, "format": STRFTIME}`: a new leading
    /// dimension `N`, one index per file, its coordinate parsed from the file names.
    New {
        /// The new dimension's name.
        dim: String,
        /// Matched against each file name; its capture groups, joined, are the date.
        pattern: Regex,
        /// How the date is written (chrono's strftime).
        format: String,
    },
    /// `{"join": "union"}`: every file's nodes side by side.
    Union,
}

/// A refusal of the spec, with what a spec looks like.
fn bad(problem: String) -> CombineError {
    CombineError::Spec(format!(
        "\"combine\": {problem} (a spec is {{\"join\": \"existing\", \"dim\": \"time\"}}, {{\"join\": \"new\", \"dim\": \
         \"run\", \"pattern\": \"(\\\\d{{8}})_(\\\\d{{2}})\", \"format\": \"%Y%m%d_%H\"}} or {{\"join\": \"union\"}})"
    ))
}

impl Combine {
    /// The spec `value` writes, or what is wrong with it.
    pub fn from_json(value: &Value) -> Result<Self, CombineError> {
        let Some(spec) = value.as_object() else { return Err(bad(format!("{value} is not an object"))) };
        let join = match spec.get("join") {
            Some(Value::String(join)) => join.as_str(),
            Some(other) => return Err(bad(format!("\"join\" is {other}, not a string"))),
            None => return Err(bad("\"join\" is missing".into())),
        };
        let allowed: &[&str] = match join {
            "existing" => &["join", "dim", "order"],
            "new" => &["join", "dim", "pattern", "format"],
            "union" => &["join"],
            other => return Err(bad(format!("\"join\": {other:?} is not one of existing, new, union"))),
        };
        let unknown: Vec<&str> = spec.keys().map(String::as_str).filter(|k| !allowed.contains(k)).collect();
        if !unknown.is_empty() {
            let names = unknown.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ");
            let verb = if unknown.len() == 1 { "is not a key" } else { "are not keys" };
            return Err(bad(format!("{names} {verb} of \"join\": \"{join}\" (its keys: {})", allowed.join(", "))));
        }
        match join {
            "existing" => {
                let by_coordinate = match spec.get("order") {
                    None => false,
                    Some(Value::String(order)) if order == "name" => false,
                    Some(Value::String(order)) if order == "coordinate" => true,
                    Some(other) => return Err(bad(format!("\"order\": {other} is not \"name\" or \"coordinate\""))),
                };
                Ok(Combine::Existing { dim: dim(spec)?, by_coordinate })
            }
            "new" => {
                let pattern = text(spec, "pattern")?;
                let pattern =
                    Regex::new(pattern).map_err(|e| bad(format!("\"pattern\" {pattern:?} is not a regex: {e}")))?;
                let format = text(spec, "format")?;
                if StrftimeItems::new(format).any(|item| item == Item::Error) {
                    return Err(bad(format!("\"format\" {format:?} is not a strftime format")));
                }
                Ok(Combine::New { dim: dim(spec)?, pattern, format: format.to_owned() })
            }
            _ => Ok(Combine::Union),
        }
    }
}

/// The string at `key`, required.
fn text<'a>(spec: &'a Map<String, Value>, key: &str) -> Result<&'a str, CombineError> {
    match spec.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(other) => Err(bad(format!("{key:?} is {other}, not a non-empty string"))),
        None => Err(bad(format!("{key:?} is missing"))),
    }
}

/// The dimension named by `dim`: a name, not a path.
fn dim(spec: &Map<String, Value>) -> Result<String, CombineError> {
    let dim = text(spec, "dim")?;
    if dim.contains('/') {
        return Err(bad(format!("\"dim\" {dim:?} is a path: name a dimension")));
    }
    Ok(dim.to_owned())
}

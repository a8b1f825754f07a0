//! How several files make one hierarchy (the `"combine"` of a files registration), as NcML
//! aggregations do in THREDDS: `existing` concatenates along a dimension the files have, `new`
//! stacks them along a new leading one whose coordinate comes from their names, `union` puts
//! their nodes side by side. Pure rules over the files' parsed hierarchies: no I/O. Every chunk
//! of the result names the file it lies in ([`Chunk::Elsewhere`]).

mod join;
mod spec;
#[cfg(test)]
mod tests;
pub mod time;

use std::collections::BTreeMap;

use serde_json::Value;

pub use self::join::Existing;
pub use self::spec::Combine;
use crate::formats::{Chunk, Node};

/// A hierarchy: nodes by path (`""` the root group).
pub type Nodes = BTreeMap<String, Node>;

/// One file to combine: its URL and its hierarchy.
pub type File = (String, Nodes);

/// Why files cannot be combined as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CombineError {
    /// The `combine` spec itself is wrong (a 400): an unknown key or value, a bad pattern.
    #[error("{0}")]
    Spec(String),
    /// The files cannot be combined as asked (a 422): the message names the files, the
    /// variable and what differs.
    #[error("{0}")]
    Refused(String),
}

impl Combine {
    /// One hierarchy made of `files` (each file's URL and hierarchy, in order), or why not.
    pub fn apply(&self, files: Vec<File>) -> Result<Nodes, CombineError> {
        self.apply_with(files, None)
    }

    /// [`Combine::apply`], with the values of each file's joined coordinate when they were read
    /// (the files write it in different units): the joined coordinate is then those values in
    /// the first file's units, stored inline.
    pub fn apply_with(&self, files: Vec<File>, values: Option<Vec<Vec<f64>>>) -> Result<Nodes, CombineError> {
        if files.is_empty() {
            return Err(CombineError::Refused("there is no file to combine".into()));
        }
        match self {
            Combine::Existing { dim, .. } => {
                // The chunks the join hands on, put back in their arrays in grid order.
                let mut chunks: BTreeMap<String, Vec<(Vec<u64>, Chunk)>> = BTreeMap::new();
                let mut sink = |path: &str, index: Vec<u64>, chunk: Chunk| {
                    chunks.entry(path.to_owned()).or_default().push((index, chunk));
                };
                let mut join = Existing::new(dim);
                for (url, nodes) in files {
                    join.push(&url.into(), nodes, &mut sink)?;
                }
                let mut out = join.finish(values, &mut sink)?;
                for (path, node) in &mut out {
                    if let Some(mut settled) = chunks.remove(path) {
                        settled.sort_by(|a, b| a.0.cmp(&b.0));
                        node.chunks = settled;
                    }
                }
                Ok(out)
            }
            Combine::New { dim, pattern, format } => join::new(dim, pattern, format, files),
            Combine::Union => join::union(files),
        }
    }
}

/// `node` with every chunk naming `url`, the file it lies in.
fn located(mut node: Node, url: &str) -> Node {
    for (_, chunk) in &mut node.chunks {
        if let Chunk::Range { offset, length } = *chunk {
            *chunk = Chunk::Elsewhere { url: url.to_owned(), offset, length };
        }
    }
    node
}

/// Whether `node` is an array (else a group).
fn is_array(node: &Node) -> bool {
    node.metadata.get("node_type").and_then(Value::as_str) == Some("array")
}

/// A list of unsigned integers of an array's metadata (`shape`, a chunk shape).
fn numbers(value: Option<&Value>) -> Vec<u64> {
    value.and_then(Value::as_array).map(|v| v.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
}

/// An array's shape.
fn shape(node: &Node) -> Vec<u64> {
    numbers(node.metadata.get("shape"))
}

/// An array's chunk shape (regular grid).
fn chunk_shape(node: &Node) -> Vec<u64> {
    numbers(node.metadata.pointer_in("/chunk_grid/configuration/chunk_shape"))
}

/// An array's dimension names (empty when it has none).
fn dimension_names(node: &Node) -> Vec<String> {
    node.metadata
        .get("dimension_names")
        .and_then(Value::as_array)
        .map(|v| v.iter().map(|n| n.as_str().unwrap_or_default().to_owned()).collect())
        .unwrap_or_default()
}

/// A variable's name: the last segment of its path.
fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A coordinate: a 1-d array named as its only dimension.
pub(super) fn is_coordinate(path: &str, node: &Node) -> bool {
    is_array(node) && dimension_names(node) == [name_of(path)]
}

/// A pointer into a metadata map.
trait PointerIn {
    /// The value at a JSON pointer.
    fn pointer_in(&self, pointer: &str) -> Option<&Value>;
}

impl PointerIn for serde_json::Map<String, Value> {
    /// Walked segment by segment (no `~` escapes: the pointers are this module's own), with no
    /// allocation: a join of 10,000 files asks for each one's shapes.
    fn pointer_in(&self, pointer: &str) -> Option<&Value> {
        let mut parts = pointer.trim_start_matches('/').split('/');
        let mut value = self.get(parts.next()?)?;
        for part in parts {
            value = match value {
                Value::Object(map) => map.get(part)?,
                Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(value)
    }
}

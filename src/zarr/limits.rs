//! Bounds on a store version, checked when it is registered (PUT) or updated (PATCH), so that
//! what a reader can make the server do stays within configuration: the number of nodes, the
//! depth of their paths, the size of the root `zarr.json` with its consolidated metadata, and
//! the decoded size of the fill-value chunks a version serves for missing chunks. A store past
//! a bound is refused with a problem naming the bound and the node.

use super::consolidated::Listings;
use super::document::Problems;
use super::fill::decoded_chunk_bytes;
use super::metadata::NodeKind;
use super::metadata::ValidNode;
use super::path::NodePath;

/// Default of [`Limits::max_nodes`].
pub const DEFAULT_MAX_NODES: u64 = 250_000;
/// Default of [`Limits::max_depth`].
pub const DEFAULT_MAX_DEPTH: u64 = 32;
/// Default of [`Limits::max_metadata_bytes`].
pub const DEFAULT_MAX_METADATA_BYTES: u64 = 128 << 20;
/// Default of [`Limits::max_fill_chunk_bytes`], for versions that serve fill-value chunks.
pub const DEFAULT_MAX_FILL_CHUNK_BYTES: u64 = 16 << 20;

/// The bounds one version is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nodes of a version, arrays and groups, implicit parent groups and the root included.
    pub max_nodes: u64,
    /// Names in a node's path (`a/b` is 2 deep).
    pub max_depth: u64,
    /// Bytes of the root `zarr.json` as served, with the consolidated metadata of every node.
    pub max_metadata_bytes: u64,
    /// Bytes of one decoded chunk of an array, when the version answers missing chunks with
    /// fill-value chunks (built whole before they are encoded); `None` when it answers 404.
    pub max_fill_chunk_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_nodes: DEFAULT_MAX_NODES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
            max_fill_chunk_bytes: None,
        }
    }
}

impl Limits {
    /// Refuses `count` nodes above the bound. Checked on the document's nodes before they are
    /// validated one by one, and again with implicit parent groups.
    pub fn check_count(&self, count: usize) -> Result<(), String> {
        if count as u64 <= self.max_nodes {
            return Ok(());
        }
        Err(format!(
            "the store has {count} nodes (arrays and groups, implicit parent groups included), above \
             limits.max_nodes = {}",
            self.max_nodes
        ))
    }

    /// Refuses a path deeper than the bound. Checked before implicit parent groups are added:
    /// each of a path's ancestors becomes a node.
    pub fn check_depth(&self, path: &NodePath) -> Result<(), String> {
        let depth = path.depth() as u64;
        if depth <= self.max_depth {
            return Ok(());
        }
        Err(format!("node {path} is {depth} levels deep, above limits.max_depth = {}", self.max_depth))
    }

    /// Checks every node of a version (in path order, implicit groups included) against the
    /// bounds on their number, the root's document and the fill-value chunks.
    pub fn check(&self, nodes: &[ValidNode], problems: &mut Problems) {
        if let Err(p) = self.check_count(nodes.len()) {
            problems.push(p);
            return;
        }
        if let Some(p) = self.metadata_problem(nodes) {
            problems.push(p);
        }
        let Some(max) = self.max_fill_chunk_bytes else { return };
        for node in nodes {
            let NodeKind::Array(layout) = &node.kind else { continue };
            let shape = layout.grid.chunk_shape();
            let bytes = match decoded_chunk_bytes(&node.metadata(), shape) {
                Ok(Some(bytes)) if bytes <= max => continue,
                Ok(Some(bytes)) => bytes.to_string(),
                Ok(None) => "more than 2^64".to_owned(),
                Err(e) => {
                    problems.push(format!("array {}: {e}", node.path));
                    continue;
                }
            };
            problems.push(format!(
                "array {}: a chunk of its fill value would take {bytes} bytes decoded (chunk shape {shape:?}), above \
                 limits.max_fill_chunk_bytes = {max}, and this version answers missing chunks with fill-value chunks; \
                 register it with ?missing_chunks=404 (every Zarr client reads a 404 as the fill value) or with smaller \
                 chunks",
                node.path
            ));
        }
    }

    /// The root's document, sized without being written (each group parsed in turn, not kept;
    /// arrays measured by their text).
    fn metadata_problem(&self, nodes: &[ValidNode]) -> Option<String> {
        let root = nodes.first().filter(|n| n.path.is_root())?;
        let mut listings = Listings::empty(false);
        for n in nodes {
            match n.kind {
                // An array's entry is its text as it is (see `Hierarchy::build_from_text`).
                NodeKind::Array(_) => listings.push_array_text(n.path.as_str(), &n.json),
                NodeKind::Group => listings.push(n.path.as_str(), &n.metadata(), true),
            }
        }
        let size = match root.kind {
            NodeKind::Group => listings.document_len(0),
            NodeKind::Array(_) => listings.entry_len(0),
        };
        if size <= self.max_metadata_bytes {
            return None;
        }
        let largest = (0..nodes.len()).max_by_key(|&i| listings.entry_len(i)).unwrap_or(0);
        Some(format!(
            "the root zarr.json, with the consolidated metadata of every node, would take {size} bytes, above \
             limits.max_metadata_bytes = {}; the largest metadata is that of node {} ({} bytes)",
            self.max_metadata_bytes,
            nodes[largest].path,
            listings.entry_len(largest)
        ))
    }
}

#[cfg(test)]
mod tests;

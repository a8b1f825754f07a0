//! `[limits]`: bounds on what one store version may make a reader cost, and their defaults.

use serde::{Deserialize, Serialize};

/// Default of `limits.max_nodes`.
pub const DEFAULT_MAX_NODES: u64 = 250_000;
/// Default of `limits.max_depth`.
pub const DEFAULT_MAX_DEPTH: u64 = 32;
/// Default of `limits.max_metadata_bytes`.
pub const DEFAULT_MAX_METADATA_BYTES: u64 = 128 << 20;
/// Default of `limits.max_fill_chunk_bytes`, for versions that serve fill-value chunks.
pub const DEFAULT_MAX_FILL_CHUNK_BYTES: u64 = 16 << 20;
/// Default of `limits.max_icechunk_file_bytes`: the bytes one Icechunk metadata file (repo info,
/// snapshot, manifest) may inflate to.
pub const DEFAULT_MAX_ICECHUNK_FILE_BYTES: u64 = 256 << 20;

/// Bounds on what one store version may make a reader cost: a store past one is refused at
/// registration (PUT and PATCH) with a problem naming the bound.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Nodes (arrays and groups, implicit parents and the root included) of one version.
    pub max_nodes: u64,
    /// Names in a node's path.
    pub max_depth: u64,
    /// Bytes of the root `zarr.json` with its consolidated metadata; also the budget of the
    /// consolidated metadata of the other groups together.
    pub max_metadata_bytes: u64,
    /// Bytes of one decoded chunk of an array of a version with `missing_chunks = "fill"`.
    pub max_fill_chunk_bytes: u64,
    /// Bytes one Icechunk metadata file (repo info, snapshot, manifest) may inflate to: past
    /// it, the registration (or a followed branch's sync) is refused and nothing is allocated.
    pub max_icechunk_file_bytes: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_nodes: DEFAULT_MAX_NODES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
            max_fill_chunk_bytes: DEFAULT_MAX_FILL_CHUNK_BYTES,
            max_icechunk_file_bytes: DEFAULT_MAX_ICECHUNK_FILE_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration's defaults are those of the pure layer's own (`zarr::Limits::default`,
    /// `zarr::grid`), which its tests and parsers use.
    #[test]
    fn the_defaults_are_the_pure_layers() {
        use crate::zarr::grid::{DEFAULT_TILE_CHUNKS, MAX_TILE_CHUNKS};
        let pure = crate::zarr::Limits::default();
        let configured = LimitsConfig::default();
        assert_eq!(configured.max_nodes, pure.max_nodes);
        assert_eq!(configured.max_depth, pure.max_depth);
        assert_eq!(configured.max_metadata_bytes, pure.max_metadata_bytes);
        assert_eq!(configured.max_fill_chunk_bytes, crate::zarr::limits::DEFAULT_MAX_FILL_CHUNK_BYTES);
        assert_eq!(u64::from(super::super::DEFAULT_BLOCK_CHUNKS), DEFAULT_TILE_CHUNKS);
        assert_eq!(u64::from(super::super::MAX_BLOCK_CHUNKS), MAX_TILE_CHUNKS);
    }
}

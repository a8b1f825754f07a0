//! Bounds on a store version, so that what a reader can make the server do stays within
//! configuration.

/// Default bound on the consolidated metadata of the groups below the root, together
/// (`[limits] max_metadata_bytes`).
pub const DEFAULT_MAX_METADATA_BYTES: u64 = 128 << 20;
/// Default bound on the decoded size of one fill-value chunk (`[limits] max_fill_chunk_bytes`).
pub const DEFAULT_MAX_FILL_CHUNK_BYTES: u64 = 64 << 20;

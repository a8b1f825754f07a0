//! `[files]`: how the server reads files it virtualizes itself (`?format=files`): what one
//! file's parse may read and take, and how its reads are coalesced.

use serde::{Deserialize, Serialize};

/// How files are read when a store is registered from them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Bytes of one file's metadata (headers, chunk indexes) read at most; past it the file is
    /// refused (422 naming the file and this bound).
    pub max_read_bytes: u64,
    /// Ranged reads of one file at most.
    pub max_requests: u64,
    /// Seconds one file's parse may take.
    pub parse_seconds: u64,
    /// The first read of a file: its first this-many bytes (the whole file if smaller), where
    /// the format's headers usually all are.
    pub first_read_bytes: u64,
    /// Each later read is at least this long (aligned to it), so that nearby structures come
    /// in one request.
    pub read_ahead_bytes: u64,
    /// Bytes one file may store inline (compact datasets, variable-length strings): a variable
    /// past it is left out with a warning.
    pub max_inline_bytes: u64,
    /// Files parsed at once by one registration.
    pub concurrency: usize,
    /// Files parsed at once by the whole server, across registrations. Parsing waits on the
    /// object store far more than it works, so it is not held to `ingest.max_concurrent` (the
    /// registrations building and storing at once); this bounds the memory of parses in flight
    /// (each within `max_read_bytes`).
    pub max_parses: usize,
    /// Files one registration may name (a list, or the objects a prefix and glob match); past
    /// it the registration is refused (422 naming this bound).
    pub max_files: usize,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            max_read_bytes: 256 << 20,
            max_requests: 4_096,
            parse_seconds: 60,
            first_read_bytes: 1 << 20,
            read_ahead_bytes: 4 << 10,
            max_inline_bytes: 16 << 20,
            concurrency: 32,
            max_parses: 64,
            max_files: 100_000,
        }
    }
}

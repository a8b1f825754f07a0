//! `[assemble]`: the chunks zarrgate makes itself where joined files do not line up with the
//! chunk grid (decoded, cut, joined and encoded again on a bounded pool of threads).

use serde::{Deserialize, Serialize};

/// How assembled chunks are built.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AssembleConfig {
    /// Chunks built at once (each on a blocking thread); 0: one per CPU core.
    pub workers: usize,
    /// Chunks waiting for a worker at most; one more answers 503 with Retry-After at once
    /// (never a stalled worker thread).
    pub queue: usize,
    /// Bytes one assembled chunk may take decoded; an array whose chunks are larger is answered
    /// with 500 naming this bound (its chunks are never decoded past it).
    pub max_chunk_bytes: u64,
    /// The level assembled (and transcoded) chunks of gzip or zlib arrays are encoded at (0-9:
    /// any decodes the same); 1 is fast, 0 (stored) as fast as a copy and as large as the data.
    /// At 1 to 9, stretches whose bytes look random are stored (`zarr/deflate.rs`).
    pub deflate_level: u32,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        Self { workers: 0, queue: 256, max_chunk_bytes: 256 << 20, deflate_level: 1 }
    }
}

impl AssembleConfig {
    /// The workers, 0 read as the number of CPU cores.
    pub fn workers(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(2, usize::from),
            n => n,
        }
    }
}

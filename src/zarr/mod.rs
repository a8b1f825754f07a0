//! Pure Zarr domain: node paths, chunk keys and grids, the manifest model and its block
//! encoding, document parsing and validation. Nothing here knows about HTTP, SQL or I/O.

pub mod assembled;
pub mod block;
pub mod chunk_check;
pub mod codecs;
pub mod consolidated;
pub mod decode;
pub mod deflate;
pub mod document;
pub mod fill;
pub mod grid;
pub mod hierarchy;
pub mod imagecodecs;
pub mod json_stream;
pub mod json_text;
pub mod kerchunk;
pub mod key;
pub mod limits;
pub mod manifest;
pub mod metadata;
pub mod native;
pub mod patch;
pub mod path;
pub mod portable;
pub mod quicklook;
#[cfg(test)]
mod robustness;
pub mod source;
pub mod spill;
pub mod v2view;
pub mod validate;

pub use block::{BlockSource, ChunkRef, ManifestBlock};
pub use grid::{ChunkGrid, ChunkLocation};
pub use hierarchy::{Hierarchy, Resolved};
pub use key::ChunkKeyEncoding;
pub use limits::Limits;
pub use path::NodePath;

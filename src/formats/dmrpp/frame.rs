//! What an open element of a DMR++ document is being read into: the walk's stack holds one
//! `Frame` per open element, and `elements.rs` makes the frame of each element that starts.

use super::attributes::Attribute;
use super::variable::Variable;

/// Text a frame collects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TextOf {
    Value,
    ChunkDimensionSizes,
    Compact,
    MissingData,
    /// One `<v>` of a `dmrpp:vlsa`: `count` times the string, zlib-compressed to `size` bytes
    /// when `size` is given.
    VlsaValue {
        count: u64,
        size: Option<u64>,
    },
}

/// What an open element is read into.
pub(super) enum Frame {
    Group { path: String, attributes: Vec<Attribute>, count: usize },
    Variable { variable: Box<Variable>, count: usize },
    Attribute(Attribute),
    Text(TextOf, String),
    Chunks,
    Chunk,
    Vlsa,
    Skip,
}

//! File formats read into manifests (`PUT /api/v1/stores/{store}?format=files`): each parser
//! reads one file's structure (headers, chunk indexes, never chunk data) through a byte-range
//! reader and returns the hierarchy a native manifest describes: every group and array with its
//! `zarr.json`, and each array's chunks as byte ranges of the file, inline bytes, or missing.
//!
//! Parsers are pure: they never touch object_store, HTTP or the catalog, so they are tested and
//! fuzzed on bytes in memory. The driver that feeds them coalesced object-store reads within a
//! budget is `versions/files.rs`. No format knows another; what they share (the reader, the
//! limits, the output, CF attribute encoding) is here and in `cf.rs`.

pub mod cf;
pub mod dmrpp;
pub mod fits;
pub mod grib;
pub mod hdf5;
pub mod netcdf3;
pub mod tiff;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Random access to the bytes of one file, as a parser sees it.
pub trait ByteRanges: Send + Sync {
    /// The file's length in bytes.
    fn len(&self) -> u64;

    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exactly `len` bytes at `offset`. A range that is not inside the file is
    /// [`FormatError::Invalid`] (the file points past its end); a failed upstream read is
    /// [`FormatError::Read`]; a read past the driver's budget is [`FormatError::TooLarge`].
    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError>;

    /// True when every byte is in memory already, so that no read waits (a parser need not
    /// read structures ahead, side by side).
    fn in_memory(&self) -> bool {
        false
    }
}

/// A file held in memory (tests, fuzzing, and files small enough to read whole).
impl ByteRanges for Bytes {
    fn len(&self) -> u64 {
        Bytes::len(self) as u64
    }

    fn in_memory(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        let end = offset.checked_add(len).filter(|end| *end <= Bytes::len(self) as u64).ok_or_else(|| {
            FormatError::Invalid(format!(
                "it points at bytes {offset}..{} but is only {} bytes long (truncated?)",
                offset.saturating_add(len),
                Bytes::len(self)
            ))
        })?;
        Ok(self.slice(offset as usize..end as usize))
    }
}

/// What is wrong with a file, or with reading it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file is malformed, truncated, cyclic, hostile or not of the format (a 422). The
    /// message says what and where, without the file's URL (the driver adds it).
    #[error("{0}")]
    Invalid(String),
    /// The file needs more than a configured limit allows: bytes or requests read, nodes,
    /// attributes, chunks, inline bytes, time (a 422 naming the limit).
    #[error("{0}")]
    TooLarge(String),
    /// Reading the file failed upstream (a 5xx: never the file's fault). The driver keeps the
    /// source's own error and reports that one.
    #[error("{0}")]
    Read(String),
}

/// How far a parser may go with one file. The driver bounds bytes and requests read; these
/// bound what the parser builds from them.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Groups and arrays in one file.
    pub max_nodes: usize,
    /// Attributes on one node.
    pub max_attributes: usize,
    /// Group nesting depth.
    pub max_depth: usize,
    /// Chunk references in one file.
    pub max_chunks: u64,
    /// Bytes stored inline in all (compact datasets, variable-length strings, small
    /// variables read whole); a variable past it is left out with a warning.
    pub max_inline_bytes: u64,
    /// The moment parsing must have finished.
    pub deadline: Option<Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_nodes: 10_000,
            max_attributes: 10_000,
            max_depth: 64,
            max_chunks: 10_000_000,
            max_inline_bytes: 16 << 20,
            deadline: None,
        }
    }
}

impl Limits {
    /// [`FormatError::TooLarge`] once the deadline has passed: parsers call it in every loop
    /// that a file's contents can make long.
    pub fn check_time(&self) -> Result<(), FormatError> {
        match self.deadline {
            Some(deadline) if Instant::now() >= deadline => {
                Err(FormatError::TooLarge("parsing it took longer than limits.parse_seconds allows".into()))
            }
            _ => Ok(()),
        }
    }
}

/// One file's hierarchy, as a native manifest describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Parsed {
    /// Every node by path: `""` the root group, `"a/b"` below it (no leading `/`).
    pub nodes: BTreeMap<String, Node>,
    /// What was left out, and why (an unsupported filter, a virtual dataset...), one line each,
    /// naming the variable: the registration summary shows them.
    pub warnings: Vec<String>,
    /// The values of small 1-d coordinates (by node path) decoded from bytes the parse had
    /// read anyway: a join takes its joined coordinate's values from them instead of asking
    /// the object store again. Parsers leave it empty; the registration fills it from the
    /// bytes the parse held. A list, not a map: a file has one or two, and a map's first node
    /// took 500 bytes a file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<(String, Vec<f64>)>,
}

/// A group or an array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node's `zarr.json` (Zarr v3): `zarr_format`, `node_type`, `attributes`, and for an
    /// array `shape`, `data_type`, `chunk_grid`, `chunk_key_encoding`, `fill_value`, `codecs`,
    /// `dimension_names`. Shared: the files of one archive hold the same metadata many times
    /// over, and a parse read back from the catalog shares each distinct text's map
    /// (`versions/files/parsed.rs`); change it through `Arc::make_mut`.
    pub metadata: Arc<Map<String, Value>>,
    /// An array's chunks by grid index (one index per dimension; `[]` for a 0-d array). A chunk
    /// not listed is missing: it reads as the fill value.
    pub chunks: Vec<(Vec<u64>, Chunk)>,
}

/// Where one chunk's (encoded) bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Chunk {
    /// `length` bytes at `offset` of the data file (for DMR++, the file beside the sidecar).
    Range { offset: u64, length: u64 },
    /// `length` bytes at `offset` of another URL (a DMR++ chunk's own `href`).
    Elsewhere { url: String, offset: u64, length: u64 },
    /// The chunk's bytes, encoded with the array's codecs, held in the manifest.
    Inline(Vec<u8>),
    /// A chunk of files joined into one array that no file holds whole (it spans a seam, or a
    /// file's padded edge chunk lies inside the joined array): made when read, from pieces of the
    /// files' chunks. Combining makes these; a parser never does.
    Assembled(crate::zarr::assembled::Recipe),
}

/// A JSON object's map (an empty one for any other value): the `zarr.json` every parser
/// writes with `json!`.
pub(crate) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A group node with `attributes`.
pub(crate) fn group_node(attributes: Map<String, Value>) -> Node {
    let metadata = serde_json::json!({"zarr_format": 3, "node_type": "group", "attributes": attributes});
    Node { metadata: object(metadata).into(), chunks: Vec::new() }
}

/// A file format zarrgate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Parser {
    /// HDF5, and netCDF4 (which is HDF5).
    Hdf5,
    /// netCDF classic, 64-bit offset and CDF-5.
    NetCdf3,
    /// An OPeNDAP DMR++ sidecar (`<file>.dmrpp`), describing the file beside it.
    Dmrpp,
    /// TIFF, BigTIFF, GeoTIFF and COG.
    Tiff,
    /// FITS: image HDUs (tables are left out).
    Fits,
    /// GRIB2: one message one chunk (GRIB1 messages are left out).
    Grib,
}

/// How many bytes [`Parser::detect`] wants to see: HDF5's signature may sit at 0, 512, 1024,
/// 2048... (after a user block); the driver passes its whole first read, at least this much.
pub const DETECT_BYTES: u64 = 8 << 10;

impl Parser {
    /// Every parser, in the order `auto` tries the sidecar first.
    pub const ALL: [Parser; 6] =
        [Parser::Hdf5, Parser::NetCdf3, Parser::Dmrpp, Parser::Tiff, Parser::Fits, Parser::Grib];

    /// The name the API and the summary use: `hdf5`, `netcdf3`, `dmrpp`, `tiff`, `fits`, `grib`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hdf5 => "hdf5",
            Self::NetCdf3 => "netcdf3",
            Self::Dmrpp => "dmrpp",
            Self::Tiff => "tiff",
            Self::Fits => "fits",
            Self::Grib => "grib",
        }
    }

    /// The parser a name names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The format of a file from its first bytes (at most [`DETECT_BYTES`]), or None.
    pub fn detect(head: &[u8]) -> Option<Self> {
        // First: a FITS data unit may hold HDF5's signature where a user block would end.
        if head.starts_with(b"SIMPLE  =") {
            return Some(Self::Fits);
        }
        const HDF5: &[u8] = b"\x89HDF\r\n\x1a\n";
        let hdf5_at = |at: usize| head.get(at..at + HDF5.len()) == Some(HDF5);
        if hdf5_at(0) || (9..).map(|p| 1usize << p).take_while(|at| *at < head.len()).any(hdf5_at) {
            return Some(Self::Hdf5);
        }
        if head.len() >= 4 && &head[..3] == b"CDF" && matches!(head[3], 1 | 2 | 5) {
            return Some(Self::NetCdf3);
        }
        if head.starts_with(b"GRIB") {
            return Some(Self::Grib);
        }
        if matches!(head.get(..4), Some(b"II*\0" | b"MM\0*" | b"II+\0" | b"MM\0+")) {
            return Some(Self::Tiff);
        }
        let text = head.trim_ascii_start();
        if text.starts_with(b"<?xml") || text.starts_with(b"<Dataset") {
            return Some(Self::Dmrpp);
        }
        None
    }

    /// Reads `file`'s structure.
    pub fn parse(self, file: Arc<dyn ByteRanges>, limits: &Limits) -> Result<Parsed, FormatError> {
        match self {
            Self::Hdf5 => hdf5::parse(file, limits),
            Self::NetCdf3 => netcdf3::parse(&*file, limits),
            Self::Dmrpp => dmrpp::parse(&*file, limits),
            Self::Tiff => tiff::parse(&*file, limits),
            Self::Fits => fits::parse(&*file, limits),
            Self::Grib => grib::parse(&*file, limits, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_their_first_bytes() {
        assert_eq!(Parser::detect(b"\x89HDF\r\n\x1a\n\0\0"), Some(Parser::Hdf5));
        let mut user_block = vec![0u8; 1024];
        user_block[512..520].copy_from_slice(b"\x89HDF\r\n\x1a\n");
        assert_eq!(Parser::detect(&user_block), Some(Parser::Hdf5));
        assert_eq!(Parser::detect(b"CDF\x01\0\0\0\0"), Some(Parser::NetCdf3));
        assert_eq!(Parser::detect(b"CDF\x02\0"), Some(Parser::NetCdf3));
        assert_eq!(Parser::detect(b"CDF\x05\0"), Some(Parser::NetCdf3));
        assert_eq!(Parser::detect(b"CDF\x03\0"), None);
        assert_eq!(Parser::detect(b"  <?xml version=\"1.0\"?><Dataset"), Some(Parser::Dmrpp));
        assert_eq!(Parser::detect(b"II*\0"), Some(Parser::Tiff));
        assert_eq!(Parser::detect(b"MM\0*"), Some(Parser::Tiff));
        assert_eq!(Parser::detect(b"II+\0"), Some(Parser::Tiff));
        assert_eq!(Parser::detect(b"MM\0+"), Some(Parser::Tiff));
        assert_eq!(Parser::detect(b"II*"), None);
        assert_eq!(Parser::detect(b"SIMPLE  =                    T"), Some(Parser::Fits));
        assert_eq!(Parser::detect(b"SIMPLE = T"), None);
        let mut fits_data = b"SIMPLE  =                    T".to_vec();
        fits_data.resize(4096, b' ');
        fits_data.extend_from_slice(b"\x89HDF\r\n\x1a\n");
        assert_eq!(Parser::detect(&fits_data), Some(Parser::Fits), "data that looks like an HDF5 user block's end");
        assert_eq!(Parser::detect(b""), None);
    }

    #[test]
    fn an_in_memory_file_refuses_ranges_past_its_end() {
        let file = Bytes::from_static(b"0123456789");
        assert_eq!(file.read(2, 3).unwrap(), Bytes::from_static(b"234"));
        assert!(matches!(file.read(8, 3), Err(FormatError::Invalid(m)) if m.contains("only 10 bytes")));
        assert!(matches!(file.read(u64::MAX, 2), Err(FormatError::Invalid(_))));
    }
}

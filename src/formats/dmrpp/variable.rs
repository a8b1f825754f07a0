//! One DMR++ variable (a typed element such as `<Float32>`) as a Zarr array: its shape from
//! `Dim`, codecs from `dmrpp:chunks`, chunks as byte ranges of the data file (or of a chunk's
//! own `href`), or inline from `dmrpp:compact` / `dmrpp:missingdata`.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::super::{Chunk, FormatError, Limits, cf};
use super::attributes::{self, Attribute};
use super::inline;
use super::text::short;

/// The href Hyrax writes for "the data file", whatever its real URL.
const DATA_URL_TEMPLATE: &str = "OPeNDAP_DMRpp_DATA_ACCESS_URL";

/// One `dmrpp:chunk` as written.
#[derive(Debug, Default)]
pub(super) struct RawChunk {
    pub offset: Option<u64>,
    pub length: Option<u64>,
    pub position: Option<Vec<u64>>,
    pub href: Option<String>,
    pub filter_mask: u64,
}

/// A variable being read.
#[derive(Debug, Default)]
pub(super) struct Variable {
    /// Its path in the hierarchy (`g1/temp`).
    pub path: String,
    /// The element's name: `Float32`, `Int16`...
    pub kind: String,
    /// Per axis: the dimension's name (None for an anonymous `Dim size=`) and size.
    pub dims: Vec<(Option<String>, u64)>,
    pub attributes: Vec<Attribute>,
    /// `compressionType`, `deflateLevel`, `fillValue`, `byteOrder` of `dmrpp:chunks`.
    pub compression: Option<String>,
    pub deflate_levels: Vec<u64>,
    pub fill: Option<String>,
    pub big_endian: bool,
    pub chunk_shape: Option<Vec<u64>>,
    pub chunks: Vec<RawChunk>,
    /// The base64 text of `dmrpp:compact` and of `dmrpp:missingdata`.
    pub compact: Option<String>,
    pub missing_data: Option<String>,
    /// Why it cannot be served (a `dmrpp:block`, a nested structure...), if it cannot.
    pub unsupported: Option<String>,
    /// A `String`'s `dmrpp:FixedLengthStringArray string_length`: fixed-size strings.
    pub string_length: Option<u64>,
    /// A `String`'s `dmrpp:vlsa`: each value with how many times it repeats.
    pub strings: Option<Vec<(String, u64)>>,
    /// What the strings will take inline, encoded with `vlen-utf8`.
    pub strings_bytes: u64,
}

/// The name `data_type` gives fixed-size strings (held as `null_terminated_bytes`).
const FIXED_STRING: &str = "fixed-string";
/// The Zarr data type of variable-length strings (encoded with `vlen-utf8`).
const STRING: &str = "string";

/// What the document says about all variables.
pub(super) struct Context<'a> {
    /// The document's `dmrpp:href`: a chunk `href` equal to it means the data file.
    pub dataset_href: Option<String>,
    /// Old documents (no `dmrpp:version`) list filters in a fixed order, not the file's.
    pub filters_in_file_order: bool,
    pub inline_left: u64,
    pub chunks_left: u64,
    pub limits: &'a Limits,
}

/// What becomes of a variable.
pub(super) enum Outcome {
    Array(super::super::Node),
    /// Left out, with the warning saying why.
    LeftOut(String),
    /// Not a variable at all (a netCDF4 dimension without one).
    Hidden,
}

/// The Zarr data type and element size of a DAP type, if it is one zarrgate serves.
fn data_type(kind: &str) -> Option<(&'static str, u64)> {
    Some(match kind {
        "Byte" | "UInt8" => ("uint8", 1),
        "Int8" => ("int8", 1),
        "Int16" => ("int16", 2),
        "UInt16" => ("uint16", 2),
        "Int32" => ("int32", 4),
        "UInt32" => ("uint32", 4),
        "Int64" => ("int64", 8),
        "UInt64" => ("uint64", 8),
        "Float32" => ("float32", 4),
        "Float64" => ("float64", 8),
        _ => return None,
    })
}

impl Variable {
    /// The array this variable is, or why it is left out.
    pub fn finish(self, context: &mut Context) -> Result<Outcome, FormatError> {
        if attributes::is_bare_dimension(&self.attributes) {
            return Ok(Outcome::Hidden);
        }
        let path = self.path.as_str();
        if let Some(why) = &self.unsupported {
            return Ok(Outcome::LeftOut(format!("{path}: {why}")));
        }
        let (dtype, size) = match (data_type(&self.kind), self.string_length) {
            (Some(number), _) => number,
            (None, Some(length)) if self.kind == "String" => (FIXED_STRING, length),
            (None, None) if self.kind == "String" && self.strings.is_some() => (STRING, 0),
            (None, _) => {
                let what = if self.kind == "String" { "variable-length String" } else { self.kind.as_str() };
                return Ok(Outcome::LeftOut(format!("{path}: variables of DAP type {what} are not supported")));
            }
        };
        let shape: Vec<u64> = self.dims.iter().map(|(_, n)| *n).collect();
        let elements = shape.iter().try_fold(1u64, |all, n| all.checked_mul(*n));
        let bytes = elements.and_then(|e| e.checked_mul(size)).ok_or_else(|| {
            FormatError::Invalid(format!("{path}: its dimensions {shape:?} hold more bytes than a 64-bit count"))
        })?;
        let (codecs, chunk_shape, chunks) = if let Some(strings) = &self.strings {
            let Some(data) = vlen_utf8(strings, elements, self.strings_bytes, path)? else {
                return Ok(Outcome::LeftOut(format!("{path}: its strings are past limits.max_inline_bytes")));
            };
            if data.len() as u64 > context.inline_left {
                return Ok(Outcome::LeftOut(format!("{path}: its strings are past limits.max_inline_bytes")));
            }
            context.inline_left -= data.len() as u64;
            let index = vec![0; shape.len()];
            let chunks = if elements == Some(0) { Vec::new() } else { vec![(index, Chunk::Inline(data))] };
            (vec![json!({"name": "vlen-utf8"})], whole(&shape), chunks)
        } else if let Some(text) = self.compact.as_deref().or(self.missing_data.as_deref()) {
            if bytes > context.inline_left {
                return Ok(Outcome::LeftOut(format!(
                    "{path}: its {bytes} inline bytes are past limits.max_inline_bytes"
                )));
            }
            let data = if self.compact.is_some() {
                inline::compact(text, bytes, path)?
            } else {
                inline::missing_data(text, bytes, elements == Some(1), path)?
            };
            context.inline_left -= bytes;
            let big = self.big_endian && self.compact.is_some();
            let index = vec![0; shape.len()];
            let chunks = if bytes == 0 { Vec::new() } else { vec![(index, Chunk::Inline(data))] };
            (vec![bytes_codec(big, size, dtype)], whole(&shape), chunks)
        } else {
            let mut codecs = vec![bytes_codec(self.big_endian, size, dtype)];
            match self.filters(size, context.filters_in_file_order) {
                Ok(filters) => codecs.extend(filters),
                Err(why) => return Ok(Outcome::LeftOut(format!("{path}: {why}"))),
            }
            let chunk_shape = self.chunk_shape.clone().unwrap_or_else(|| whole(&shape));
            if chunk_shape.len() != shape.len() || chunk_shape.contains(&0) {
                return Err(FormatError::Invalid(format!(
                    "{path}: chunkDimensionSizes {chunk_shape:?} do not fit its shape {shape:?}"
                )));
            }
            match self.references(&shape, &chunk_shape, context)? {
                Ok(chunks) => (codecs, chunk_shape, chunks),
                Err(why) => return Ok(Outcome::LeftOut(format!("{path}: {why}"))),
            }
        };
        let mut metadata = Map::new();
        metadata.insert("zarr_format".into(), json!(3));
        metadata.insert("node_type".into(), json!("array"));
        metadata.insert("shape".into(), json!(shape));
        let data_type = match dtype {
            FIXED_STRING => json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": size}}),
            STRING => json!(STRING),
            number => json!(number),
        };
        metadata.insert("data_type".into(), data_type);
        metadata.insert("chunk_grid".into(), json!({"name": "regular", "configuration": {"chunk_shape": chunk_shape}}));
        metadata.insert("chunk_key_encoding".into(), json!({"name": "default", "configuration": {"separator": "/"}}));
        metadata.insert("fill_value".into(), self.fill_value(dtype)?);
        metadata.insert("codecs".into(), Value::Array(codecs));
        metadata.insert("attributes".into(), Value::Object(attributes::to_json(&self.attributes, Some(dtype))));
        let names: Vec<Value> =
            self.dims.iter().map(|(name, _)| name.as_deref().map_or(Value::Null, |n| json!(n))).collect();
        metadata.insert("dimension_names".into(), Value::Array(names));
        Ok(Outcome::Array(super::super::Node { metadata: metadata.into(), chunks }))
    }

    /// The bytes-to-bytes codecs of `compressionType`, in the order the file applied them.
    fn filters(&self, size: u64, in_file_order: bool) -> Result<Vec<Value>, String> {
        let Some(compression) = self.compression.as_deref() else { return Ok(Vec::new()) };
        let mut names: Vec<&str> = compression.split_ascii_whitespace().collect();
        if let Some(unknown) = names.iter().find(|n| !matches!(**n, "deflate" | "shuffle" | "fletcher32")) {
            return Err(format!("the filter {:?} is not supported", short(unknown)));
        }
        if !in_file_order {
            // What Hyrax does with documents written before dmrpp:version existed.
            names = ["shuffle", "deflate", "fletcher32"].into_iter().filter(|f| names.contains(f)).collect();
        }
        let mut levels = self.deflate_levels.iter();
        let codecs = names.into_iter().map(|name| match name {
            "deflate" => {
                json!({"name": "numcodecs.zlib", "configuration": {"level": levels.next().copied().unwrap_or(6)}})
            }
            "shuffle" => json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": size}}),
            _ => json!({"name": "numcodecs.fletcher32", "configuration": {}}),
        });
        Ok(codecs.collect())
    }

    /// Each `dmrpp:chunk` as a grid index and where its bytes are; Err(why) leaves the
    /// variable out.
    #[allow(clippy::type_complexity)]
    fn references(
        &self,
        shape: &[u64],
        chunk_shape: &[u64],
        context: &mut Context,
    ) -> Result<Result<Vec<(Vec<u64>, Chunk)>, String>, FormatError> {
        let path = &self.path;
        let mut out = Vec::with_capacity(self.chunks.len());
        let mut seen = std::collections::HashSet::new();
        for (n, raw) in self.chunks.iter().enumerate() {
            if n.is_multiple_of(4096) {
                context.limits.check_time()?;
            }
            if raw.filter_mask != 0 {
                return Ok(Err(format!(
                    "a chunk skipped some of its filters (fm={}), which Zarr codecs cannot say",
                    raw.filter_mask
                )));
            }
            let index = grid_index(raw.position.as_deref(), shape, chunk_shape, path)?;
            if !seen.insert(index.clone()) {
                return Err(FormatError::Invalid(format!("{path}: two chunks at the same position {index:?}")));
            }
            let (Some(offset), Some(length)) = (raw.offset, raw.length) else { continue };
            if length == 0 {
                continue;
            }
            offset.checked_add(length).ok_or_else(|| {
                FormatError::Invalid(format!("{path}: a chunk at offset {offset} of {length} bytes ends past 2^64"))
            })?;
            let chunk = match raw.href.as_deref() {
                None | Some(DATA_URL_TEMPLATE) => Chunk::Range { offset, length },
                Some(href) if Some(href) == context.dataset_href.as_deref() => Chunk::Range { offset, length },
                Some(href) if href.contains("://") => Chunk::Elsewhere { url: href.to_owned(), offset, length },
                Some(href) => {
                    return Ok(Err(format!("a chunk's href {:?} is a path on the Hyrax that wrote it", short(href))));
                }
            };
            context.chunks_left = context.chunks_left.checked_sub(1).ok_or_else(|| {
                FormatError::TooLarge(format!("{path}: the document has more chunks than limits.max_chunks allows"))
            })?;
            out.push((index, chunk));
        }
        Ok(Ok(out))
    }

    /// The Zarr fill value: `fillValue`, else 0.
    fn fill_value(&self, dtype: &str) -> Result<Value, FormatError> {
        if dtype == STRING {
            return Ok(json!(""));
        }
        if dtype == FIXED_STRING {
            let mut bytes = self.fill.as_deref().unwrap_or_default().as_bytes().to_vec();
            bytes.resize(self.string_length.unwrap_or(0) as usize, 0);
            return Ok(json!(base64::engine::general_purpose::STANDARD.encode(bytes)));
        }
        let Some(text) = self.fill.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(cf::fill_value(0.0, dtype));
        };
        if dtype.starts_with("float") {
            let value = attributes::parse_float(text).ok_or_else(|| self.bad_fill(text))?;
            let value = if dtype == "float32" { f64::from(value as f32) } else { value };
            return Ok(cf::fill_value(value, dtype));
        }
        let (least, most): (i128, i128) = match dtype {
            "int8" => (i8::MIN.into(), i8::MAX.into()),
            "uint8" => (0, u8::MAX.into()),
            "int16" => (i16::MIN.into(), i16::MAX.into()),
            "uint16" => (0, u16::MAX.into()),
            "int32" => (i32::MIN.into(), i32::MAX.into()),
            "uint32" => (0, u32::MAX.into()),
            "int64" => (i64::MIN.into(), i64::MAX.into()),
            _ => (0, u64::MAX.into()),
        };
        match text.parse::<i128>() {
            Ok(n) if (least..=most).contains(&n) && n < 0 => Ok(Value::from(n as i64)),
            Ok(n) if (least..=most).contains(&n) => Ok(Value::from(n as u64)),
            _ => Err(self.bad_fill(text)),
        }
    }

    /// One `<v>` of a `dmrpp:vlsa` (`size`: the bytes it inflates to); past `most` bytes in
    /// all, the variable is left out.
    pub fn add_string(&mut self, value: String, count: u64, size: Option<u64>, most: u64) -> Result<(), FormatError> {
        let Some(strings) = self.strings.as_mut() else { return Ok(()) };
        let value = match size {
            Some(size) if size > most => String::new(),
            Some(size) => super::text::decode(&inline::missing_data(&value, size, false, &self.path)?),
            None => value,
        };
        let cost = count.saturating_mul(4 + value.len() as u64).max(size.unwrap_or(0));
        self.strings_bytes = self.strings_bytes.saturating_add(cost);
        if self.strings_bytes > most {
            self.strings = None;
            self.unsupported = Some("its strings are past limits.max_inline_bytes".into());
            return Ok(());
        }
        strings.push((value, count));
        Ok(())
    }

    fn bad_fill(&self, text: &str) -> FormatError {
        FormatError::Invalid(format!("{}: fillValue {:?} is not a value of type {}", self.path, short(text), self.kind))
    }
}

/// `strings` encoded as numcodecs' VLenUTF8 (item count, then each item's length and bytes,
/// little-endian u32s); None when a count or length is past a u32. An error unless there are `elements`.
fn vlen_utf8(
    strings: &[(String, u64)],
    elements: Option<u64>,
    bytes: u64,
    path: &str,
) -> Result<Option<Vec<u8>>, FormatError> {
    let count = strings.iter().try_fold(0u64, |all, (_, n)| all.checked_add(*n));
    if count != elements {
        return Err(FormatError::Invalid(format!(
            "{path}: dmrpp:vlsa holds {} strings where its shape needs {}",
            count.map_or("too many".into(), |c| c.to_string()),
            elements.map_or("too many".into(), |e| e.to_string())
        )));
    }
    let Ok(total) = u32::try_from(count.unwrap_or(0)) else { return Ok(None) };
    let mut out = Vec::with_capacity(usize::try_from(bytes.saturating_add(4)).unwrap_or(0));
    out.extend_from_slice(&total.to_le_bytes());
    for (value, repeat) in strings {
        let Ok(length) = u32::try_from(value.len()) else { return Ok(None) };
        for _ in 0..*repeat {
            out.extend_from_slice(&length.to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
    }
    Ok(Some(out))
}

/// The grid index of a chunk at `position` (element offsets, as Hyrax writes them).
fn grid_index(
    position: Option<&[u64]>,
    shape: &[u64],
    chunk_shape: &[u64],
    path: &str,
) -> Result<Vec<u64>, FormatError> {
    let Some(position) = position else { return Ok(vec![0; shape.len()]) };
    if position.len() != shape.len() {
        return Err(FormatError::Invalid(format!(
            "{path}: chunkPositionInArray {position:?} has not the {} dimensions of the variable",
            shape.len()
        )));
    }
    let mut index = Vec::with_capacity(position.len());
    for ((p, n), c) in position.iter().zip(shape).zip(chunk_shape) {
        if p % c != 0 || (p >= n && *p != 0) {
            return Err(FormatError::Invalid(format!(
                "{path}: chunkPositionInArray {position:?} is not the start of a chunk of {chunk_shape:?} inside {shape:?}"
            )));
        }
        index.push(p / c);
    }
    Ok(index)
}

/// The chunk shape of an array stored whole (at least 1 along each axis, as Zarr wants).
fn whole(shape: &[u64]) -> Vec<u64> {
    shape.iter().map(|n| (*n).max(1)).collect()
}

/// The array-to-bytes codec: `bytes` with the byte order of multi-byte numbers (as the HDF5
/// parser writes it).
fn bytes_codec(big_endian: bool, size: u64, dtype: &str) -> Value {
    if size == 1 || dtype == FIXED_STRING {
        return json!({"name": "bytes"});
    }
    if dtype == STRING {
        return json!({"name": "vlen-utf8"});
    }
    let endian = if big_endian { "big" } else { "little" };
    json!({"name": "bytes", "configuration": {"endian": endian}})
}

//! Kerchunk references in their parquet form, as `kerchunk.df.refs_to_dataframe` (and so
//! VirtualiZarr's `to_kerchunk(format="parquet")`) writes them through fsspec's
//! `LazyReferenceMapper`, uploaded as a tar archive of that directory:
//!
//! ```text
//! .zmetadata               {"metadata": {".zgroup": {...}, "air/.zarray": {...}, ...}, "record_size": N}
//! air/refs.0.parq          rows 0..N of array air's chunks, in C order of its chunk grid
//! air/refs.1.parq          rows N..2N, padded with empty rows up to N
//! ```
//!
//! Each parquet file has the columns `path` (UTF-8, nullable, often dictionary-encoded), `offset`
//! and `size` (integers) and `raw` (binary, nullable). Row `r` of `refs.k.parq` is the chunk whose
//! C-order linear index in the array's chunk grid is `k * record_size + r`. As fsspec reads them:
//! `raw` set is inline data (whatever `path` says); `path` null is a missing chunk; `path` with
//! offset and size both 0 is the whole object (a kerchunk `[url]` reference); otherwise a range.
//!
//! The archive is read as a stream, one entry at a time: every parquet file is held in memory
//! only while its rows are appended to its array's compact [`RawManifest`] (the footer is at the
//! end, so a parquet file cannot be decoded as it arrives). Parquet files that come before
//! `.zmetadata` in the archive are kept, as uploaded (compressed), until it arrives; put
//! `.zmetadata` first to hold only one file at a time. Paths may share a leading directory
//! (`air.kerchunk.parq/.zmetadata`): the directory holding `.zmetadata` is the root.
//!
//! The parquet files are decoded with arrow-rs's `parquet` crate (the Apache Arrow project's
//! Rust implementation, the reference one and well kept) through its low-level column readers,
//! without the `arrow` stack: four flat columns need no arrays, and compile time matters.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;

use ::parquet::basic::Type as PhysicalType;
use ::parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use ::parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use ::parquet::file::reader::{FileReader, SerializedFileReader};
use ::parquet::schema::types::{ColumnDescPtr, ColumnDescriptor};
use bytes::Bytes;
use serde_json::Value;

use super::{Collected, WHOLE_OBJECT, convert};
use crate::zarr::document::Document;
use crate::zarr::manifest::{RawManifest, RawRef, normalize_literal_path};
use crate::zarr::metadata::array_layout;
use crate::zarr::spill::{Scratch, SpillLog};

/// The name of the metadata file at the root of the reference directory.
const ZMETADATA: &str = ".zmetadata";
/// Rows decoded at a time from each column.
const BATCH_ROWS: usize = 8192;

/// Why an archive could not be read at all (problems within it are in [`Document::problems`]).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading the body failed (too large, or the client went away).
    #[error("reading the request body failed: {0}")]
    Io(io::Error),
    /// Not a tar archive at all.
    #[error("{0}")]
    NotTar(String),
    /// A tar archive, not of kerchunk parquet references.
    #[error("{0}")]
    Invalid(String),
}

/// Reads a tar archive of a kerchunk parquet reference directory from `reader`, as it arrives,
/// keeping the references in `scratch`.
pub fn parse_tar(reader: impl Read, scratch: &Scratch) -> Result<Document, ArchiveError> {
    let failure = Rc::new(RefCell::new(None));
    let mut archive = tar::Archive::new(Tracked { inner: reader, failure: failure.clone() });
    let fail = |e: io::Error, what: &str| match failure.borrow_mut().take() {
        Some(body) => ArchiveError::Io(body),
        None => ArchiveError::NotTar(format!("the body is not a valid tar archive ({what}: {e})")),
    };
    let mut import = Import { scratch: scratch.clone(), waiting_bytes: SpillLog::new(scratch), ..Import::default() };
    let mut parquet_files = 0usize;
    for entry in archive.entries().map_err(|e| fail(e, "reading its first header"))? {
        let mut entry = entry.map_err(|e| fail(e, "reading an entry header"))?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_contiguous()) {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = name.trim_start_matches("./").to_owned();
        let is_metadata = name == ZMETADATA || name.ends_with("/.zmetadata");
        if !is_metadata && refs_file_number(&name).is_none() {
            continue;
        }
        let mut bytes = Vec::with_capacity(entry.size().min(1 << 26) as usize);
        entry.read_to_end(&mut bytes).map_err(|e| fail(e, &format!("reading {name}")))?;
        if is_metadata {
            import.metadata(&name, &bytes)?;
        } else {
            parquet_files += 1;
            import.parquet(name, bytes);
        }
    }
    if import.meta.is_none() {
        return Err(ArchiveError::Invalid(format!(
            "the archive has no {ZMETADATA} (found {parquet_files} refs.*.parq file(s)): upload the whole \
             directory kerchunk wrote, {ZMETADATA} included"
        )));
    }
    Ok(import.finish())
}

/// `k` when the file name of `path` is `refs.k.parq`.
fn refs_file_number(path: &str) -> Option<u64> {
    let file = path.rsplit('/').next()?;
    let k = file.strip_prefix("refs.")?.strip_suffix(".parq")?;
    (!k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())).then(|| k.parse().ok()).flatten()
}

/// A reader that remembers its own failures, so that a broken body is not reported as a broken
/// archive (the tar crate wraps both in `io::Error`).
struct Tracked<R> {
    inner: R,
    failure: Rc<RefCell<Option<io::Error>>>,
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            if e.kind() != io::ErrorKind::Interrupted {
                *self.failure.borrow_mut() = Some(io::Error::new(e.kind(), e.to_string()));
            }
        })
    }
}

/// The import in progress.
#[derive(Default)]
struct Import {
    /// Known once `.zmetadata` was read.
    meta: Option<Meta>,
    /// Parquet files read before `.zmetadata`: path in the archive, offset and length in
    /// `waiting_bytes` (which spills to scratch files past the budget, as references do).
    waiting: Vec<(String, u64, usize)>,
    waiting_bytes: SpillLog,
    /// Where the references go.
    scratch: Scratch,
}

/// What `.zmetadata` says, and the document being filled.
struct Meta {
    /// Where `.zmetadata` is in the archive (its leading directory, `/`-terminated, or empty).
    prefix: String,
    record_size: u64,
    doc: Document,
    /// Each array's chunk grid shape, by path.
    grids: HashMap<String, Vec<u64>>,
    /// Arrays `.zmetadata` has a `.zarray` for, valid or not (the invalid ones are already reported).
    declared: BTreeSet<String>,
    /// Files read, by array and number.
    seen: BTreeSet<(String, u64)>,
    /// Each distinct `path` value's URL number, `None` when it is not a usable URL.
    urls: HashMap<Vec<u8>, Option<u32>>,
}

impl Import {
    fn metadata(&mut self, name: &str, bytes: &[u8]) -> Result<(), ArchiveError> {
        if let Some(meta) = &self.meta {
            return Err(ArchiveError::Invalid(format!(
                "the archive has two {ZMETADATA} files ({}{ZMETADATA} and {name}): upload one reference directory",
                meta.prefix
            )));
        }
        let prefix = name[..name.len() - ZMETADATA.len()].to_owned();
        let bad = |why: String| ArchiveError::Invalid(format!("{name}: {why}"));
        let text = std::str::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8 text ({e})")))?;
        let value = convert::lenient_json(text).map_err(|e| bad(format!("not valid JSON ({e})")))?;
        let record_size = value
            .get("record_size")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .ok_or_else(|| bad("\"record_size\" must be a positive integer".into()))?;
        let Some(Value::Object(entries)) = value.get("metadata") else {
            return Err(bad("\"metadata\" must be an object of Zarr v2 metadata documents".into()));
        };
        let mut collected = Collected::new(&self.scratch);
        let mut declared = BTreeSet::new();
        for (key, v) in entries {
            if let Some(array) = key.strip_suffix("/.zarray") {
                declared.insert(array.to_owned());
            }
            match super::split_metadata_key(key) {
                Some((node, file)) => collected.add_metadata(key, node, file, v.clone()),
                None => collected
                    .problems
                    .push(format!("{name}: {key:?} is not a metadata key (.zarray, .zattrs, .zgroup)")),
            }
        }
        let doc = collected.assemble();
        let grids = doc
            .nodes
            .iter()
            .filter(|(_, node)| node.manifest.is_some())
            .filter_map(|(path, node)| {
                array_layout(&node.metadata()).ok().map(|l| (path.clone(), l.grid.grid_shape().to_vec()))
            })
            .collect();
        let (seen, urls) = (BTreeSet::new(), HashMap::new());
        self.meta = Some(Meta { prefix, record_size, doc, grids, declared, seen, urls });
        let waiting_bytes = std::mem::take(&mut self.waiting_bytes);
        for (name, at, len) in std::mem::take(&mut self.waiting) {
            let mut bytes = Vec::with_capacity(len);
            waiting_bytes.read_at(at, len, &mut bytes).map_err(ArchiveError::Io)?;
            self.parquet(name, bytes);
        }
        Ok(())
    }

    fn parquet(&mut self, name: String, bytes: Vec<u8>) {
        match &mut self.meta {
            Some(meta) => meta.parquet(&name, bytes),
            None => {
                let at = self.waiting_bytes.append(&bytes);
                self.waiting.push((name, at, bytes.len()));
            }
        }
    }

    fn finish(self) -> Document {
        self.meta.map(|m| m.doc).unwrap_or_default()
    }
}

impl Meta {
    /// Appends the rows of one `refs.k.parq` file to its array's manifest.
    fn parquet(&mut self, name: &str, bytes: Vec<u8>) {
        let problems = &mut self.doc.problems;
        let Some(relative) = name.strip_prefix(self.prefix.as_str()) else {
            problems.push(format!("{name}: outside the reference directory {:?} that holds {ZMETADATA}", self.prefix));
            return;
        };
        let (Some((array, _)), Some(k)) = (relative.rsplit_once('/'), refs_file_number(relative)) else {
            problems.push(format!("{relative}: a refs file at the root belongs to no array"));
            return;
        };
        let (Some(grid), Some(node)) = (self.grids.get(array), self.doc.nodes.get_mut(array)) else {
            if !self.declared.contains(array) {
                problems.push(format!("{relative}: {ZMETADATA} has no .zarray for array {array:?}"));
            }
            return;
        };
        let Some(manifest) = node.manifest.as_mut() else { return };
        if !self.seen.insert((array.to_owned(), k)) {
            problems.push(format!("{relative}: appears twice in the archive"));
            return;
        }
        let chunks: u64 = grid.iter().product();
        let Some(first) = k.checked_mul(self.record_size) else {
            problems.push(format!("{relative}: record {k} is beyond any chunk grid"));
            return;
        };
        let mut sink = Sink {
            relative,
            array,
            grid,
            chunks,
            first,
            manifest,
            urls: &mut self.urls,
            table: &mut self.doc.urls,
            whole_objects: &mut self.doc.whole_objects,
            problems,
            coords: Vec::with_capacity(grid.len()),
        };
        // The parquet decoders still `expect` on some damaged input (the property test below finds
        // such files): a panic there is a bad file, reported as one, not a failed request.
        let outcome = catch_unwind(AssertUnwindSafe(|| read_rows(Bytes::from(bytes), self.record_size, &mut sink)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(why)) => self.doc.problems.push(format!("{relative}: not a valid kerchunk parquet file ({why})")),
            Err(_) => {
                self.doc.problems.push(format!("{relative}: not a valid kerchunk parquet file (the decoder failed)"))
            }
        }
    }
}

/// One row as written.
enum Row<'a> {
    Missing,
    Inline(&'a [u8]),
    Url { path: &'a [u8], offset: i64, size: i64 },
}

/// Where one file's rows go.
struct Sink<'a> {
    relative: &'a str,
    array: &'a str,
    grid: &'a [u64],
    chunks: u64,
    /// Chunk number of the file's first row.
    first: u64,
    manifest: &'a mut RawManifest,
    urls: &'a mut HashMap<Vec<u8>, Option<u32>>,
    table: &'a mut crate::zarr::document::UrlTable,
    whole_objects: &'a mut BTreeSet<u32>,
    problems: &'a mut crate::zarr::document::Problems,
    coords: Vec<u64>,
}

impl Sink<'_> {
    fn row(&mut self, r: u64, row: Row<'_>) {
        let n = self.first.saturating_add(r);
        if matches!(row, Row::Missing) {
            return;
        }
        if n >= self.chunks {
            self.problems.push(format!(
                "{} row {r}: chunk number {n} is outside the chunk grid {:?} of array {} (padding rows must be empty)",
                self.relative, self.grid, self.array
            ));
            return;
        }
        self.coords.clear();
        self.coords.resize(self.grid.len(), 0);
        let mut rest = n;
        for (c, g) in self.coords.iter_mut().zip(self.grid).rev() {
            *c = rest % g;
            rest /= g;
        }
        match row {
            Row::Missing => {}
            Row::Inline(data) => self.manifest.push_inline(&self.coords, data),
            Row::Url { path, offset, size } => {
                let Some(url) = self.url(path) else { return };
                let (offset, length) = match (u64::try_from(offset), u64::try_from(size)) {
                    (Ok(0), Ok(0)) => {
                        self.whole_objects.insert(url);
                        (0, WHOLE_OBJECT)
                    }
                    (Ok(o), Ok(l)) if o.checked_add(l).is_some() => (o, l),
                    _ => {
                        self.problems.push(format!(
                            "{} row {r}: offset {offset} and size {size} must be non-negative integers",
                            self.relative
                        ));
                        return;
                    }
                };
                self.manifest.push(&self.coords, RawRef::Virtual { url, offset, length });
            }
        }
    }

    /// The URL number of a `path` value, reporting each unusable path once.
    fn url(&mut self, path: &[u8]) -> Option<u32> {
        if let Some(known) = self.urls.get(path) {
            return *known;
        }
        let number = match std::str::from_utf8(path) {
            Ok(text) => match normalize_literal_path(text) {
                Ok(url) => Some(self.table.intern(url)),
                Err(e) => {
                    self.problems.push(e.to_string());
                    None
                }
            },
            Err(_) => {
                self.problems.push(format!("{}: a path is not UTF-8 text", self.relative));
                None
            }
        };
        self.urls.insert(path.to_vec(), number);
        number
    }
}

/// Decodes a parquet file, handing every row to `sink` with its row number.
fn read_rows(bytes: Bytes, record_size: u64, sink: &mut Sink<'_>) -> Result<(), String> {
    let reader = SerializedFileReader::new(bytes).map_err(|e| e.to_string())?;
    let metadata = reader.metadata();
    let rows = u64::try_from(metadata.file_metadata().num_rows()).map_err(|_| "a negative row count")?;
    if rows > record_size {
        return Err(format!("{rows} rows, more than the record_size {record_size} of {ZMETADATA}"));
    }
    let schema = metadata.file_metadata().schema_descr();
    let mut columns = [None; 4];
    for (i, column) in schema.columns().iter().enumerate() {
        let slot = ["path", "offset", "size", "raw"].iter().position(|c| *c == column.name());
        if let Some(slot) = slot {
            if column.path().parts().len() != 1 || column.max_rep_level() != 0 {
                return Err(format!("column {} is nested; kerchunk writes flat columns", column.name()));
            }
            let wanted = if slot == 1 || slot == 2 {
                matches!(column.physical_type(), PhysicalType::INT64 | PhysicalType::INT32)
            } else {
                column.physical_type() == PhysicalType::BYTE_ARRAY
            };
            if !wanted {
                return Err(format!("column {} has type {}", column.name(), column.physical_type()));
            }
            columns[slot] = Some(i);
        }
    }
    if columns[0].is_none() && columns[3].is_none() {
        return Err("neither a path nor a raw column".into());
    }
    let mut row = 0u64;
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(|e| e.to_string())?;
        let group_rows = usize::try_from(group.metadata().num_rows()).map_err(|_| "a negative row count")?;
        if row.saturating_add(group_rows as u64) > rows {
            return Err(format!("its row groups have more rows than the {rows} its footer declares"));
        }
        let open = |slot: usize| {
            columns[slot]
                .map(|i| group.get_column_reader(i).map(|r| (r, schema.column(i))).map_err(|e| e.to_string()))
                .transpose()
        };
        let mut path = open(0)?.map(Binary::new).transpose()?;
        let mut offset = open(1)?.map(Ints::new).transpose()?;
        let mut size = open(2)?.map(Ints::new).transpose()?;
        let mut raw = open(3)?.map(Binary::new).transpose()?;
        let mut done = 0usize;
        while done < group_rows {
            let n = BATCH_ROWS.min(group_rows - done);
            for column in [path.as_mut(), raw.as_mut()].into_iter().flatten() {
                column.0.read(n)?;
            }
            for column in [offset.as_mut(), size.as_mut()].into_iter().flatten() {
                column.read(n)?;
            }
            for i in 0..n {
                let int = |c: &Option<Ints>| c.as_ref().and_then(|c| c.get(i)).unwrap_or(0);
                let r = match (Binary::at(&raw, i), Binary::at(&path, i)) {
                    (Some(data), _) => Row::Inline(data),
                    (None, None | Some(b"")) => Row::Missing,
                    (None, Some(p)) => Row::Url { path: p, offset: int(&offset), size: int(&size) },
                };
                sink.row(row, r);
                row += 1;
            }
            done += n;
        }
    }
    Ok(())
}

/// One flat column's values for the current batch of rows.
struct Column<T: DataType> {
    name: String,
    reader: ColumnReaderImpl<T>,
    /// The definition level of a non-null value; 0 when the column is required.
    defined: i16,
    levels: Vec<i16>,
    values: Vec<T::T>,
    /// Each row's index in `values`, `u32::MAX` for null (nullable columns only).
    slots: Vec<u32>,
}

impl<T: DataType> Column<T> {
    fn new(reader: ColumnReaderImpl<T>, descr: &ColumnDescriptor) -> Self {
        let (levels, values, slots) = (Vec::new(), Vec::new(), Vec::new());
        Self { name: descr.name().to_owned(), reader, defined: descr.max_def_level(), levels, values, slots }
    }

    /// Decodes the next `n` rows.
    fn read(&mut self, n: usize) -> Result<(), String> {
        self.levels.clear();
        self.values.clear();
        let levels = (self.defined > 0).then_some(&mut self.levels);
        let (rows, values, _) =
            self.reader.read_records(n, levels, None, &mut self.values).map_err(|e| e.to_string())?;
        if rows != n || values != self.values.len() {
            return Err(format!("column {} ends before its row group does", self.name));
        }
        if self.defined > 0 {
            self.slots.clear();
            let mut next = 0u32;
            for level in &self.levels {
                if *level == self.defined {
                    self.slots.push(next);
                    next += 1;
                } else {
                    self.slots.push(u32::MAX);
                }
            }
            if next as usize != self.values.len() {
                return Err(format!("column {} has {} values for {next} non-null rows", self.name, self.values.len()));
            }
        } else if self.values.len() != n {
            return Err(format!("column {} has {} values for {n} rows", self.name, self.values.len()));
        }
        Ok(())
    }

    /// Row `i` of the batch, `None` when null.
    fn get(&self, i: usize) -> Option<&T::T> {
        if self.defined > 0 { self.values.get(*self.slots.get(i)? as usize) } else { self.values.get(i) }
    }
}

/// A `path` or `raw` column.
struct Binary(Column<ByteArrayType>);

impl Binary {
    fn new((reader, descr): (ColumnReader, ColumnDescPtr)) -> Result<Self, String> {
        match reader {
            ColumnReader::ByteArrayColumnReader(r) => Ok(Self(Column::new(r, &descr))),
            _ => Err(format!("column {} is not a byte array column", descr.name())),
        }
    }

    /// Row `i` of the batch of `column`, if there is such a column and the row is not null.
    fn at(column: &Option<Self>, i: usize) -> Option<&[u8]> {
        column.as_ref().and_then(|c| c.0.get(i)).map(ByteArray::data)
    }
}

/// An `offset` or `size` column (kerchunk writes int64; int32 is read too).
enum Ints {
    I32(Column<Int32Type>),
    I64(Column<Int64Type>),
}

impl Ints {
    fn new((reader, descr): (ColumnReader, ColumnDescPtr)) -> Result<Self, String> {
        match reader {
            ColumnReader::Int32ColumnReader(r) => Ok(Self::I32(Column::new(r, &descr))),
            ColumnReader::Int64ColumnReader(r) => Ok(Self::I64(Column::new(r, &descr))),
            _ => Err(format!("column {} is not an integer column", descr.name())),
        }
    }

    fn read(&mut self, n: usize) -> Result<(), String> {
        match self {
            Self::I32(c) => c.read(n),
            Self::I64(c) => c.read(n),
        }
    }

    fn get(&self, i: usize) -> Option<i64> {
        match self {
            Self::I32(c) => c.get(i).map(|v| i64::from(*v)),
            Self::I64(c) => c.get(i).copied(),
        }
    }
}

#[cfg(test)]
mod tests;

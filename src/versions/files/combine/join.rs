//! The three joins: `existing` (concatenated by references where the files' chunks line up),
//! `new` (stacked along a new leading dimension) and `union` (side by side).

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::Regex;
use serde_json::{Value, json};

use super::{
    CombineError, File, Nodes, PointerIn, chunk_shape, dimension_names, is_array, is_coordinate, located, name_of,
    shape,
};
use crate::formats::{Chunk, Node};
use crate::zarr::assembled::{MAX_PIECES, Piece, PieceSource, Recipe, can_assemble};

/// A refusal (422).
fn refused(problem: String) -> CombineError {
    CombineError::Refused(problem)
}

/// The first file and the others.
fn split(files: Vec<File>) -> Result<(File, Vec<File>), CombineError> {
    let mut files = files.into_iter();
    let first = files.next().ok_or_else(|| refused("there is no file to combine".into()))?;
    Ok((first, files.collect()))
}

/// Each other file's array at `path` (taken out of it), or a refusal naming the file without it.
fn take_array(path: &str, first_url: &str, rest: &mut [File]) -> Result<Vec<(String, Node)>, CombineError> {
    rest.iter_mut()
        .map(|(url, nodes)| match nodes.remove(path) {
            Some(node) if is_array(&node) => Ok((url.clone(), node)),
            _ => Err(refused(format!("variable {path} of {first_url} is not in {url}: every file must have it"))),
        })
        .collect()
}

/// Refuses an array that a later file has and the first has not.
fn no_extra_arrays(first_url: &str, first: &Nodes, rest: &[File]) -> Result<(), CombineError> {
    for (url, nodes) in rest {
        if let Some((path, _)) = nodes.iter().find(|(path, node)| is_array(node) && !first.contains_key(*path)) {
            return Err(refused(format!("variable {path} of {url} is not in {first_url}: every file must have it")));
        }
    }
    Ok(())
}

/// What makes two parts of a variable the same kind of array: its dimension names, data type,
/// codecs and fill value (and its chunk shape: [`agree`] compares it but along a joined axis).
const KINDS: [(&str, &str); 4] = [
    ("dimension names", "/dimension_names"),
    ("data type", "/data_type"),
    ("codecs", "/codecs"),
    ("fill value", "/fill_value"),
];

/// Refuses `b` unless it is the same kind of array as `a` (and, when `axis` is None, the same
/// shape and chunk shape; else the same but along `axis`).
fn agree(
    path: &str,
    (a_url, a): (&str, &Node),
    (b_url, b): (&str, &Node),
    axis: Option<usize>,
) -> Result<(), CombineError> {
    // One map (shared when the catalog's parses were read back): the same in every respect.
    if Arc::ptr_eq(&a.metadata, &b.metadata) {
        return Ok(());
    }
    let differ = |what: &str, x: String, y: String| {
        refused(format!(
            "files {a_url} and {b_url} disagree on variable {path}: its {what} is {x} in the first and {y} in the \
             second"
        ))
    };
    for (what, pointer) in KINDS {
        let (x, y) = (a.metadata.pointer_in(pointer), b.metadata.pointer_in(pointer));
        if x != y {
            let show = |v: Option<&Value>| v.map_or("absent".to_owned(), Value::to_string);
            return Err(differ(what, show(x), show(y)));
        }
    }
    let but_along = |mut v: Vec<u64>| {
        if let Some(axis) = axis.filter(|a| *a < v.len()) {
            v[axis] = 0;
        }
        v
    };
    let along = if axis.is_some() { " but along the joined dimension" } else { "" };
    for (what, of) in [("shape", shape as fn(&Node) -> Vec<u64>), ("chunk shape", chunk_shape)] {
        if but_along(of(a)) != but_along(of(b)) {
            return Err(differ(&format!("{what}{along}"), format!("{:?}", of(a)), format!("{:?}", of(b))));
        }
    }
    Ok(())
}

/// Where joined chunks go as they are settled: the array's path, the chunk's grid index, the
/// chunk.
pub type Sink<'a> = dyn FnMut(&str, Vec<u64>, Chunk) + 'a;

/// `{"join": "existing", "dim": dim}`, one file at a time ([`Existing::push`], in the order
/// joined). Each array's chunks go to a [`Sink`] as soon as no later file can change them, so
/// that a join of any number of files holds only what it cannot settle yet: the chunks at its
/// open seam, the first file's metadata and the joined coordinate's part of each file.
pub struct Existing {
    dim: String,
    /// The first file's URL (empty until one is pushed).
    first_url: String,
    /// The first file's nodes by path, as joined so far.
    nodes: BTreeMap<String, Joined>,
}

/// One node of the first file, as joined so far.
enum Joined {
    /// A group: the first file's.
    Group(Node),
    /// An array without the joined dimension: the first file's (its chunks already handed on),
    /// checked against each other file's.
    Same(Node),
    /// An array along the joined dimension.
    Along(Concat),
    /// The joined coordinate: each file's (URL, array), kept until [`Existing::finish`] is told
    /// whether its values were read (then they are stored inline) or not (then it is joined as
    /// the other arrays are).
    Coordinate(Vec<(Arc<str>, Node)>),
}

impl Existing {
    /// A join along `dim` of no file yet.
    pub fn new(dim: &str) -> Self {
        Self { dim: dim.to_owned(), first_url: String::new(), nodes: BTreeMap::new() }
    }

    /// Each file's part of the joined coordinate so far (URL, array), in order; `None` when the
    /// first file has no array named as the joined dimension along it.
    pub fn coordinate(&self) -> Option<&[(Arc<str>, Node)]> {
        match self.nodes.get(&self.dim) {
            Some(Joined::Coordinate(parts)) => Some(parts),
            _ => None,
        }
    }

    /// Joins the next file (`url`, its hierarchy), handing `sink` the chunks it settles; or
    /// refuses it, naming it and the variable (an array the first file has and it has not, or
    /// the other way round, or one that does not agree with the first file's). The URL is
    /// shared, not copied, by the file's part of the joined coordinate.
    pub fn push(&mut self, shared: &Arc<str>, mut nodes: Nodes, sink: &mut Sink<'_>) -> Result<(), CombineError> {
        let url: &str = shared;
        let dim = self.dim.as_str();
        if self.nodes.is_empty() && self.first_url.is_empty() {
            self.first_url = url.to_owned();
            for (path, node) in nodes {
                let joined = if !is_array(&node) {
                    Joined::Group(node)
                } else {
                    match dimension_names(&node).iter().position(|d| d == dim) {
                        Some(_) if path == dim => Joined::Coordinate(vec![(Arc::clone(shared), node)]),
                        Some(axis) => {
                            let mut concat = Concat::new(&path, dim, axis, url, &node)?;
                            concat.push(&path, (url, url), node, sink)?;
                            Joined::Along(concat)
                        }
                        None => {
                            let metadata = Arc::clone(&node.metadata);
                            for (index, chunk) in located(node, url).chunks {
                                sink(&path, index, chunk);
                            }
                            Joined::Same(Node { metadata, chunks: Vec::new() })
                        }
                    }
                };
                self.nodes.insert(path, joined);
            }
            return Ok(());
        }
        let first_url = self.first_url.as_str();
        if let Some((path, _)) = nodes.iter().find(|(path, node)| is_array(node) && !self.nodes.contains_key(*path)) {
            return Err(refused(format!("variable {path} of {url} is not in {first_url}: every file must have it")));
        }
        for (path, joined) in &mut self.nodes {
            if matches!(joined, Joined::Group(_)) {
                continue;
            }
            let node = match nodes.remove(path) {
                Some(node) if is_array(&node) => node,
                _ => {
                    return Err(refused(format!(
                        "variable {path} of {first_url} is not in {url}: every file must have it"
                    )));
                }
            };
            match joined {
                Joined::Group(_) => {}
                Joined::Same(first) => agree(path, (first_url, first), (url, &node), None)?,
                Joined::Along(concat) => concat.push(path, (first_url, url), node, sink)?,
                // A copy, made on this thread: the parse's own allocations were made on the
                // thread that parsed it, among its transient ones, and a few kept from each
                // of 100,000 parses pinned that many allocator pages (a page is returned only
                // when all of it is free).
                Joined::Coordinate(parts) => parts.push((Arc::clone(shared), node.clone())),
            }
        }
        Ok(())
    }

    /// The joined hierarchy's nodes (their chunks all handed to `sink`, here or before), given
    /// each file's values of the joined coordinate when they were read (in the first file's
    /// units when the files write it in different units, stored inline).
    pub fn finish(self, values: Option<Vec<Vec<f64>>>, sink: &mut Sink<'_>) -> Result<Nodes, CombineError> {
        if self.first_url.is_empty() {
            return Err(refused("there is no file to combine".into()));
        }
        let (dim, first_url) = (self.dim.as_str(), self.first_url.as_str());
        let mut values = values;
        let mut out = Nodes::new();
        for (path, joined) in self.nodes {
            let node = match joined {
                Joined::Group(node) | Joined::Same(node) => node,
                Joined::Along(concat) => concat.finish(&path, sink)?,
                Joined::Coordinate(parts) => match values.take() {
                    Some(read) => {
                        let parts: Vec<_> =
                            parts.into_iter().zip(read).map(|((url, node), v)| (url, node, v)).collect();
                        let node = super::time::joined(dim, &parts)?;
                        hand_on(&path, node, sink)
                    }
                    None => {
                        let axis = dimension_names(&parts[0].1).iter().position(|d| d == dim).unwrap_or(0);
                        let mut concat = Concat::new(&path, dim, axis, first_url, &parts[0].1)?;
                        for (url, node) in parts {
                            concat.push(&path, (first_url, &*url), node, sink)?;
                        }
                        concat.finish(&path, sink)?
                    }
                },
            };
            out.insert(path, node);
        }
        Ok(out)
    }
}

/// `node`'s chunks handed to `sink` as array `path`'s; its metadata kept.
fn hand_on(path: &str, node: Node, sink: &mut Sink<'_>) -> Node {
    for (index, chunk) in node.chunks {
        sink(path, index, chunk);
    }
    Node { metadata: node.metadata, chunks: Vec::new() }
}

/// The parts of one variable concatenated along `axis`, file by file: by references where a
/// part's chunks line up with the joined array's grid (the first part's chunk shape), and by
/// chunks assembled from pieces where they do not (a chunk spanning a seam, a padded edge chunk
/// inside the joined array, a part chunked otherwise along `axis`). A chunk is settled (handed
/// on) once the files joined so far reach its end: only the chunks at the open seam are held.
struct Concat {
    dim: String,
    axis: usize,
    /// The joined array's chunk length along `axis` (the first part's).
    step: u64,
    /// The first part's metadata (its chunks are not kept).
    first: Node,
    /// Checked at the first chunk to assemble: whether zarrgate can decode and encode the array.
    assemblable: Option<Result<(), String>>,
    /// Served chunks not yet settled: index -> their pieces, in file order.
    served: BTreeMap<Vec<u64>, Vec<Cut>>,
    /// The length along `axis` of the parts joined so far.
    before: u64,
}

impl Concat {
    /// The concatenation of variable `path` whose first part is `first` (of `first_url`).
    fn new(path: &str, dim: &str, axis: usize, first_url: &str, first: &Node) -> Result<Self, CombineError> {
        let step = chunk_shape(first).get(axis).copied().unwrap_or(0);
        if step == 0 {
            return Err(refused(format!("variable {path} of {first_url} has no chunk length along {dim}")));
        }
        let first = Node { metadata: Arc::clone(&first.metadata), chunks: Vec::new() };
        Ok(Self { dim: dim.to_owned(), axis, step, first, assemblable: None, served: BTreeMap::new(), before: 0 })
    }

    /// Joins the next part (`node`, of file `url`; `first_url` the first part's file).
    fn push(
        &mut self,
        path: &str,
        (first_url, url): (&str, &str),
        node: Node,
        sink: &mut Sink<'_>,
    ) -> Result<(), CombineError> {
        let (axis, step, before) = (self.axis, self.step, self.before);
        agree(path, (first_url, &self.first), (url, &node), Some(axis))?;
        if name_of(path) == self.dim {
            same_time_encoding(path, (first_url, &self.first), (url, &node))?;
        }
        let length = shape(&node).get(axis).copied().unwrap_or(0);
        let own_step = chunk_shape(&node).get(axis).copied().unwrap_or(0).max(1);
        for (index, chunk) in located(node, url).chunks {
            let Some(j) = index.get(axis).copied() else { continue };
            // The part of the source chunk inside the file (an edge chunk is padded past it).
            let (first_step, end) =
                (j.saturating_mul(own_step), j.saturating_add(1).saturating_mul(own_step).min(length));
            let mut lo = before + first_step;
            let hi = before + end;
            while lo < hi {
                let m = lo / step;
                let upto = hi.min((m + 1) * step);
                let mut at = index.clone();
                at[axis] = m;
                let cut = Cut {
                    chunk: chunk.clone(),
                    source_len: own_step,
                    start: lo - before - first_step,
                    count: upto - lo,
                    at: lo - m * step,
                };
                self.served.entry(at).or_default().push(cut);
                lo = upto;
            }
        }
        self.before = before + length;
        // The chunks that end within the parts joined so far: no later part reaches them.
        let settled: Vec<Vec<u64>> = self
            .served
            .keys()
            .filter(|index| index[axis].saturating_add(1).saturating_mul(step) <= self.before)
            .cloned()
            .collect();
        for index in settled {
            if let Some(pieces) = self.served.remove(&index) {
                let chunk = self.settle(path, &index, pieces)?;
                sink(path, index, chunk);
            }
        }
        Ok(())
    }

    /// The joined array's metadata (its length along the axis the parts' together), the chunks
    /// left at its end handed to `sink`.
    fn finish(mut self, path: &str, sink: &mut Sink<'_>) -> Result<Node, CombineError> {
        for (index, pieces) in std::mem::take(&mut self.served) {
            let chunk = self.settle(path, &index, pieces)?;
            sink(path, index, chunk);
        }
        let mut metadata = (*self.first.metadata).clone();
        if let Some(length) = metadata.get_mut("shape").and_then(Value::as_array_mut).and_then(|s| s.get_mut(self.axis))
        {
            *length = json!(self.before);
        }
        Ok(Node { metadata: metadata.into(), chunks: Vec::new() })
    }

    /// The chunk at `index` of the joined array, made of `pieces`: a part's own chunk where one
    /// is the whole of it, else assembled from them (or refused: too many pieces, or an array
    /// zarrgate cannot decode and encode).
    fn settle(&mut self, path: &str, index: &[u64], mut pieces: Vec<Cut>) -> Result<Chunk, CombineError> {
        let (step, dim) = (self.step, self.dim.as_str());
        let m = index[self.axis];
        let valid = step.min(self.before - m * step);
        let whole =
            matches!(pieces.as_slice(), [c] if c.source_len == step && c.count == valid && c.start == 0 && c.at == 0);
        if whole && let Some(cut) = pieces.pop() {
            return Ok(cut.chunk);
        }
        if pieces.len() > MAX_PIECES {
            return Err(refused(format!(
                "variable {path}: chunk {index:?} would be assembled from {} pieces of files, more than the {MAX_PIECES} \
                 allowed; join files holding more steps each, or chunked like the first file",
                pieces.len()
            )));
        }
        let first = &self.first;
        let can = self
            .assemblable
            .get_or_insert_with(|| can_assemble(&first.metadata, &chunk_shape(first)).map_err(|e| e.to_string()));
        if let Err(why) = can {
            return Err(refused(format!(
                "variable {path}: its files do not line up with its chunks along {dim} (chunk {index:?} spans a seam \
                 between files, or a file's padded edge chunk), and such a chunk cannot be assembled: {why}"
            )));
        }
        let recipe = Recipe {
            axis: self.axis as u32,
            pieces: pieces
                .into_iter()
                .map(|Cut { chunk, source_len, start, count, at }| {
                    let source = match chunk {
                        Chunk::Elsewhere { url, offset, length } => {
                            PieceSource::Virtual { url, etag: None, size: None, offset, length }
                        }
                        Chunk::Inline(bytes) => PieceSource::Inline(bytes),
                        Chunk::Range { .. } | Chunk::Assembled(_) => {
                            return Err(refused(format!("variable {path}: a chunk of a file cannot be a piece")));
                        }
                    };
                    Ok(Piece { source, source_len, start, count, at })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Chunk::Assembled(recipe))
    }
}

/// A run of one source chunk along the joined axis that goes into a chunk of the joined array:
/// `count` steps from `start` of the source chunk (`source_len` long) put at `at`.
struct Cut {
    chunk: Chunk,
    source_len: u64,
    start: u64,
    count: u64,
    at: u64,
}

/// Refuses a joined coordinate whose `units` or `calendar` differ between two files.
fn same_time_encoding(path: &str, (a_url, a): (&str, &Node), (b_url, b): (&str, &Node)) -> Result<(), CombineError> {
    if Arc::ptr_eq(&a.metadata, &b.metadata) {
        return Ok(());
    }
    for key in ["units", "calendar"] {
        let pointer = format!("/attributes/{key}");
        let (x, y) = (a.metadata.pointer_in(&pointer), b.metadata.pointer_in(&pointer));
        if x != y {
            let show = |v: Option<&Value>| v.map_or("none".to_owned(), Value::to_string);
            return Err(refused(format!(
                "files {a_url} and {b_url} write coordinate {path} with different {key} ({} and {}): re-encoding a \
                 joined coordinate into the first file's {key} is not supported yet",
                show(x),
                show(y)
            )));
        }
    }
    Ok(())
}

/// `{"join": "new", "dim": dim, "pattern", "format"}`.
pub(super) fn new(dim: &str, pattern: &Regex, format: &str, files: Vec<File>) -> Result<Nodes, CombineError> {
    let seconds =
        files.iter().map(|(url, _)| seconds_from_name(url, pattern, format)).collect::<Result<Vec<_>, _>>()?;
    let count = files.len() as u64;
    let ((first_url, first), mut rest) = split(files)?;
    no_extra_arrays(&first_url, &first, &rest)?;
    if let Some((path, _)) =
        first.iter().find(|(path, node)| *path == dim || dimension_names(node).iter().any(|d| d == dim))
    {
        return Err(refused(format!(
            "{dim} is already a variable or dimension of {first_url} ({path}): name the new dimension otherwise"
        )));
    }
    let mut out = Nodes::new();
    for (path, node) in first {
        if !is_array(&node) {
            out.insert(path, node);
            continue;
        }
        let others = take_array(&path, &first_url, &mut rest)?;
        let coordinate = is_coordinate(&path, &node);
        for (url, other) in &others {
            agree(&path, (&first_url, &node), (url, other), None)?;
        }
        let joined = if coordinate {
            located(node, &first_url)
        } else {
            let mut parts = vec![(first_url.clone(), node)];
            parts.extend(others);
            stack(dim, count, parts)
        };
        out.insert(path, joined);
    }
    out.insert(dim.to_owned(), time_coordinate(dim, &seconds));
    Ok(out)
}

/// The parts of a variable stacked along a new leading dimension `dim`, one index per part.
fn stack(dim: &str, count: u64, parts: Vec<(String, Node)>) -> Node {
    let mut metadata = (*parts[0].1.metadata).clone();
    let prepend = |value: Option<&mut Value>, first: Value| {
        if let Some(list) = value.and_then(Value::as_array_mut) {
            list.insert(0, first);
        }
    };
    prepend(metadata.get_mut("shape"), json!(count));
    prepend(metadata.get_mut("dimension_names"), json!(dim));
    if let Some(grid) = metadata.get_mut("chunk_grid") {
        prepend(grid.pointer_mut("/configuration/chunk_shape"), json!(1));
    }
    let mut chunks = Vec::new();
    for (k, (url, node)) in parts.into_iter().enumerate() {
        for (mut index, chunk) in located(node, &url).chunks {
            index.insert(0, k as u64);
            chunks.push((index, chunk));
        }
    }
    Node { metadata: metadata.into(), chunks }
}

/// Seconds since 1970-01-01 of the date a file's name writes: the name (the URL's last
/// segment) matched with `pattern`, its capture groups joined, read with `format`.
fn seconds_from_name(url: &str, pattern: &Regex, format: &str) -> Result<i64, CombineError> {
    let segment = url.rsplit('/').next().unwrap_or(url);
    let name = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
    let captures = pattern
        .captures(&name)
        .ok_or_else(|| refused(format!("file name {name} ({url}) does not match the pattern {}", pattern.as_str())))?;
    let text: String = if captures.len() > 1 {
        captures.iter().skip(1).flatten().map(|m| m.as_str()).collect()
    } else {
        captures.get(0).map_or(String::new(), |m| m.as_str().to_owned())
    };
    let unreadable = |why: String| {
        refused(format!(
            "file name {name} ({url}): {text:?} (matched by the pattern) is not a date in the format {format:?}: {why}"
        ))
    };
    let mut parsed = chrono::format::Parsed::new();
    chrono::format::parse(&mut parsed, &text, chrono::format::StrftimeItems::new(format))
        .map_err(|e| unreadable(e.to_string()))?;
    if parsed.hour_div_12().is_none() && parsed.hour_mod_12().is_none() {
        parsed.set_hour(0).map_err(|e| unreadable(e.to_string()))?;
    }
    if parsed.minute().is_none() {
        parsed.set_minute(0).map_err(|e| unreadable(e.to_string()))?;
    }
    let at = parsed.to_naive_datetime_with_offset(0).map_err(|e| unreadable(e.to_string()))?;
    Ok(at.and_utc().timestamp())
}

/// The new dimension's coordinate: int64 seconds since 1970 (CF time), one inline chunk.
fn time_coordinate(dim: &str, seconds: &[i64]) -> Node {
    let metadata = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": [seconds.len()],
        "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [seconds.len().max(1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"units": "seconds since 1970-01-01T00:00:00", "calendar": "proleptic_gregorian"},
        "dimension_names": [dim],
    });
    let metadata = metadata.as_object().cloned().unwrap_or_default();
    let bytes = seconds.iter().flat_map(|s| s.to_le_bytes()).collect();
    let chunks = if seconds.is_empty() { Vec::new() } else { vec![(vec![0], Chunk::Inline(bytes))] };
    Node { metadata: metadata.into(), chunks }
}

/// `{"join": "union"}`.
pub(super) fn union(files: Vec<File>) -> Result<Nodes, CombineError> {
    let mut out = Nodes::new();
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    let mut lengths: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for (url, nodes) in files {
        for (path, node) in nodes {
            if is_array(&node) {
                for (dim, length) in dimension_names(&node).into_iter().zip(shape(&node)) {
                    match lengths.get(&dim) {
                        Some((seen, other)) if *seen != length => {
                            return Err(refused(format!(
                                "dimension {dim} is {seen} long in {other} and {length} long in {url} (variable {path}): \
                                 a union needs the files to agree on their dimensions"
                            )));
                        }
                        Some(_) => {}
                        None => {
                            lengths.insert(dim, (length, url.clone()));
                        }
                    }
                }
            }
            match out.get(&path) {
                None => {
                    from.insert(path.clone(), url.clone());
                    out.insert(path, located(node, &url));
                }
                Some(kept) if !is_array(kept) && !is_array(&node) => {}
                Some(kept) if kept.metadata == node.metadata => {}
                Some(_) => {
                    let other = from.get(&path).map_or("", String::as_str);
                    return Err(refused(format!(
                        "variable {path} is in {other} and in {url} with different metadata: a union takes a \
                         variable from one file, or from several where they are equal"
                    )));
                }
            }
        }
    }
    Ok(out)
}

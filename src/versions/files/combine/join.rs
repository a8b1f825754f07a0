//! The three joins: `existing` (concatenated by references where the files' chunks line up),
//! `new` (stacked along a new leading dimension) and `union` (side by side).

use std::collections::BTreeMap;

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
    if std::sync::Arc::ptr_eq(&a.metadata, &b.metadata) {
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

/// `{"join": "existing", "dim": dim}`.
pub(super) fn existing(dim: &str, files: Vec<File>, values: Option<Vec<Vec<f64>>>) -> Result<Nodes, CombineError> {
    let ((first_url, first), mut rest) = split(files)?;
    no_extra_arrays(&first_url, &first, &rest)?;
    let mut out = Nodes::new();
    let mut values = values;
    for (path, node) in first {
        if !is_array(&node) {
            out.insert(path, node);
            continue;
        }
        let others = take_array(&path, &first_url, &mut rest)?;
        let joined = match dimension_names(&node).iter().position(|d| d == dim) {
            // The joined coordinate, read: its values in the first file's units, inline.
            Some(_) if path == dim && values.is_some() => {
                let mut parts = vec![(first_url.clone(), node)];
                parts.extend(others);
                let read = values.take().unwrap_or_default();
                let parts: Vec<_> = parts.into_iter().zip(read).map(|((url, node), v)| (url, node, v)).collect();
                super::time::joined(dim, &parts)?
            }
            Some(axis) => {
                let mut parts = vec![(first_url.clone(), node)];
                parts.extend(others);
                concat(&path, dim, axis, parts)?
            }
            None => {
                for (url, other) in &others {
                    agree(&path, (&first_url, &node), (url, other), None)?;
                }
                located(node, &first_url)
            }
        };
        out.insert(path, joined);
    }
    Ok(out)
}

/// The parts of variable `path` (file URL, array) concatenated along `axis`: by references where
/// a part's chunks line up with the joined array's grid (the first part's chunk shape), and by
/// chunks assembled from pieces where they do not (a chunk spanning a seam, a padded edge chunk
/// inside the joined array, a part chunked otherwise along `axis`).
fn concat(path: &str, dim: &str, axis: usize, parts: Vec<(String, Node)>) -> Result<Node, CombineError> {
    let (first_url, first) = (&parts[0].0, &parts[0].1);
    let step = chunk_shape(first).get(axis).copied().unwrap_or(0);
    if step == 0 {
        return Err(refused(format!("variable {path} of {first_url} has no chunk length along {dim}")));
    }
    for (url, node) in parts.iter().skip(1) {
        agree(path, (first_url, first), (url, node), Some(axis))?;
        if name_of(path) == dim {
            same_time_encoding(path, (first_url, first), (url, node))?;
        }
    }
    let first_chunks = chunk_shape(first);
    // Checked at the first chunk to assemble: whether zarrgate can decode and encode the array.
    let mut assemblable: Option<Result<(), String>> = None;
    let mut metadata = (*parts[0].1.metadata).clone();
    // Served chunk index -> its pieces, in file order.
    let mut served: BTreeMap<Vec<u64>, Vec<Cut>> = BTreeMap::new();
    let mut before = 0u64;
    for (url, node) in parts {
        let length = shape(&node).get(axis).copied().unwrap_or(0);
        let own_step = chunk_shape(&node).get(axis).copied().unwrap_or(0).max(1);
        for (index, chunk) in located(node, &url).chunks {
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
                served.entry(at).or_default().push(cut);
                lo = upto;
            }
        }
        before += length;
    }
    let mut chunks = Vec::with_capacity(served.len());
    for (index, mut pieces) in served {
        let m = index[axis];
        let valid = step.min(before - m * step);
        let whole =
            matches!(pieces.as_slice(), [c] if c.source_len == step && c.count == valid && c.start == 0 && c.at == 0);
        if whole && let Some(cut) = pieces.pop() {
            chunks.push((index, cut.chunk));
            continue;
        }
        if pieces.len() > MAX_PIECES {
            return Err(refused(format!(
                "variable {path}: chunk {index:?} would be assembled from {} pieces of files, more than the {MAX_PIECES} \
                 allowed; join files holding more steps each, or chunked like the first file",
                pieces.len()
            )));
        }
        let can = assemblable.get_or_insert_with(|| can_assemble(&metadata, &first_chunks).map_err(|e| e.to_string()));
        if let Err(why) = can {
            return Err(refused(format!(
                "variable {path}: its files do not line up with its chunks along {dim} (chunk {index:?} spans a seam \
                 between files, or a file's padded edge chunk), and such a chunk cannot be assembled: {why}"
            )));
        }
        let recipe = Recipe {
            axis: axis as u32,
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
        chunks.push((index, Chunk::Assembled(recipe)));
    }
    if let Some(length) = metadata.get_mut("shape").and_then(Value::as_array_mut).and_then(|s| s.get_mut(axis)) {
        *length = json!(before);
    }
    Ok(Node { metadata: metadata.into(), chunks })
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
    if std::sync::Arc::ptr_eq(&a.metadata, &b.metadata) {
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

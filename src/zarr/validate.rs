//! Validation of a parsed document into a store ready to be written: every problem is
//! collected, and nothing leaves here unless the whole document is valid.
//!
//! Each array's references are located in its tiles, sorted by location (in memory, or through
//! sorted runs in scratch files past the registration's budget), checked for duplicates, and
//! encoded block by block into a scratch log that the catalog then writes as it reads it. Memory
//! stays bounded whatever the number of references.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};

use extsort::{ExternalSorter, Sortable};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::block::{BlockBuilder, SourceCheck};
use super::chunk_check::{ChunkCheck, DecodeBudget};
use super::document::{Document, Problems, SourceFacts, UrlTable};
use super::grid::{ChunkLocation, DEFAULT_TILE_CHUNKS};
use super::key::manifest_key;
use super::limits::Limits;
use super::manifest::{RawManifest, RawRef};
use super::metadata::{ArrayLayout, NodeKind, Tiling, array_layout_tiled, validate_node_tiled};
use super::path::{NodePath, normalisation_clashes};
use super::spill::{Scratch, SpillLog, get_u8, get_varint, put_varint};

pub use super::metadata::ValidNode;

/// Counts that describe a store version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of arrays.
    pub arrays: u64,
    /// Number of groups, the root included.
    pub groups: u64,
    /// Chunks by kind.
    pub chunks: ChunkCounts,
    /// Number of distinct source objects.
    pub sources: u64,
    /// Sum of the lengths of all virtual chunks.
    pub referenced_bytes: u64,
    /// Sum of the lengths of all inline chunks.
    pub inline_bytes: u64,
    /// Arrays served with portable codecs in place of their own (`?codecs=portable`), their
    /// chunks transcoded when read.
    #[serde(default)]
    pub transcoded_arrays: u64,
    /// For readers: each codec of an array that stock zarr-python or zarrs cannot decode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Chunks by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChunkCounts {
    /// Chunks read from source objects.
    #[serde(rename = "virtual")]
    pub virtual_: u64,
    /// Chunks stored in the manifest.
    pub inline: u64,
    /// Chunks made by zarrgate from pieces of the files' chunks (at seams between joined files).
    #[serde(default)]
    pub assembled: u64,
    /// Chunks of the grid with no reference (read as the fill value).
    pub missing: u64,
}

/// Why a document was not accepted.
#[derive(Debug)]
pub enum Rejected {
    /// The document is invalid; every problem, for the client.
    Invalid(Vec<String>),
    /// The scratch space failed (a full disk): the server's fault, not the document's.
    Scratch(io::Error),
}

impl Rejected {
    /// The problems, for tests and messages.
    pub fn problems(self) -> Vec<String> {
        match self {
            Self::Invalid(problems) => problems,
            Self::Scratch(e) => vec![e.to_string()],
        }
    }
}

impl From<io::Error> for Rejected {
    fn from(e: io::Error) -> Self {
        Self::Scratch(e)
    }
}

/// A whole store, valid and ready to be written.
#[derive(Debug)]
pub struct ValidatedStore {
    /// Every node, implicit groups included, sorted by path.
    pub nodes: Vec<ValidNode>,
    urls: Vec<std::sync::Arc<str>>,
    /// Recorded facts of the sources the store uses, by URL number.
    sources: Vec<Option<SourceFacts>>,
    /// Counts.
    pub summary: Summary,
    /// The encoded blocks, one after the other.
    blocks: SpillLog,
    /// Where each block is in `blocks`: node index, tile, offset, length.
    index: Vec<(usize, u64, u64, u64)>,
}

/// Validates `doc` with the default block size and limits. `registered` says whether a source
/// URL falls under a registered object store.
pub fn validate(doc: Document, registered: &dyn Fn(&str) -> bool) -> Result<ValidatedStore, Rejected> {
    validate_tiled(doc, registered, DEFAULT_TILE_CHUNKS, &Limits::default())
}

/// Validates `doc`, tiling arrays in blocks of at most `tile_chunks` references, within `limits`.
pub fn validate_tiled(
    doc: Document,
    registered: &dyn Fn(&str) -> bool,
    tile_chunks: u64,
    limits: &Limits,
) -> Result<ValidatedStore, Rejected> {
    let Document { nodes: doc_nodes, urls, sources, mut problems, delete, object_sizes, scratch, .. } = doc;
    scratch.check()?;
    if !delete.is_empty() {
        problems.push("\"delete\" removes nodes from a stored version: send it with PATCH, not PUT");
    }
    for url in urls.all() {
        if !registered(url) {
            problems.push(format!(
                "{url} is not under any registered object store: register one whose URL is a prefix of it"
            ));
        }
    }
    // Validating a node costs far more than counting them: a document past the bound is refused
    // before.
    if let Err(p) = limits.check_count(doc_nodes.len()) {
        problems.push(p);
        return Err(Rejected::Invalid(problems.into_vec()));
    }
    let mut nodes: BTreeMap<NodePath, ValidNode> = BTreeMap::new();
    let mut manifests = Vec::new();
    // Each node's metadata is parsed here, one node at a time, and kept as text after.
    let mut warnings = Vec::new();
    // Arrays whose metadata is refused (an unknown codec) but whose chunk grid is known: their
    // manifests are still checked, so that every problem of the document is listed at once.
    let mut refused_arrays = Vec::new();
    for (path_text, mut node) in doc_nodes {
        let path = match NodePath::new(&path_text).map_err(|e| e.to_string()).and_then(|p| {
            limits.check_depth(&p)?;
            Ok(p)
        }) {
            Ok(p) => p,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let mut metadata = node.metadata();
        match validate_node_tiled(&mut metadata, Tiling::New(tile_chunks)) {
            Ok(kind) => {
                if let Some(manifest) = node.manifest.take() {
                    match kind {
                        NodeKind::Array(_) => manifests.push((path.clone(), manifest)),
                        NodeKind::Group => problems.push(format!("node {path}: a group cannot have a manifest")),
                    }
                }
                if matches!(kind, NodeKind::Array(_)) {
                    let found = super::codecs::reader_warnings(path.as_str(), &metadata);
                    if !found.is_empty() {
                        warnings.push((path.clone(), found));
                    }
                }
                nodes.insert(path.clone(), ValidNode::new(path, &metadata, kind));
            }
            Err(list) => {
                list.into_iter().for_each(|p| problems.push(format!("node {path}: {p}")));
                if let Some(manifest) = node.manifest.take()
                    && let Ok(layout) = array_layout_tiled(&metadata, Tiling::New(tile_chunks))
                {
                    let chunks = ChunkCheck::new(metadata.clone(), layout.grid.chunk_shape());
                    refused_arrays.push((path, layout, manifest, chunks));
                }
            }
        }
    }
    add_implicit_groups(&mut nodes, &mut problems);
    check_names(&nodes, &mut problems);
    let nodes: Vec<ValidNode> = nodes.into_values().collect();
    limits.check(&nodes, &mut problems);

    let sources = sources.resolve(&urls);
    // Borrowed from the facts: no URL or ETag is copied (a copy of each took 10 MB of a
    // 100,000-file registration).
    let checks: Vec<SourceCheck<'_>> =
        sources.iter().map(|f| f.as_ref().map_or(SourceCheck::Unchecked, SourceFacts::read_check)).collect();
    let refs = RefCheck { urls: &urls, sources: &sources, object_sizes: &object_sizes };
    let mut out = BlockOutput { blocks: SpillLog::new(&scratch), index: Vec::new(), urls: urls.all(), checks: &checks };
    let mut summary = Summary { sources: urls.len() as u64, ..Summary::default() };
    let mut budget = DecodeBudget::default();
    for (path, manifest) in manifests {
        let Ok(node) = nodes.binary_search_by(|n| n.path.cmp(&path)) else { continue };
        let NodeKind::Array(layout) = &nodes[node].kind else { continue };
        let chunks = ChunkCheck::new(nodes[node].metadata(), layout.grid.chunk_shape());
        let array = ArrayInput { node, path: &path, layout, manifest: &manifest, chunks: &chunks };
        add_array(&array, &refs, &scratch, &mut problems, &mut summary, &mut out, &mut budget)?;
    }
    for (path, layout, manifest, chunks) in &refused_arrays {
        // The document already has a problem: nothing is encoded, the node index is never used.
        let array = ArrayInput { node: usize::MAX, path, layout, manifest, chunks };
        add_array(&array, &refs, &scratch, &mut problems, &mut summary, &mut out, &mut budget)?;
    }
    if !problems.is_empty() {
        return Err(Rejected::Invalid(problems.into_vec()));
    }
    scratch.check()?;
    for node in &nodes {
        match &node.kind {
            NodeKind::Group => summary.groups += 1,
            NodeKind::Array(layout) => {
                summary.arrays += 1;
                summary.chunks.missing = summary.chunks.missing.saturating_add(layout.grid.chunk_count());
            }
        }
    }
    // In path order, as the nodes are.
    warnings.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    summary.warnings.extend(warnings.into_iter().flat_map(|(_, w)| w));
    super::codecs::cap(&mut summary.warnings);
    let stored = summary.chunks.virtual_ + summary.chunks.inline + summary.chunks.assembled;
    summary.chunks.missing = summary.chunks.missing.saturating_sub(stored);
    let BlockOutput { blocks, index, .. } = out;
    drop(checks);
    Ok(ValidatedStore { nodes, urls: urls.into_urls(), sources, summary, blocks, index })
}

/// What a reference is checked against.
struct RefCheck<'a> {
    urls: &'a UrlTable,
    sources: &'a [Option<SourceFacts>],
    object_sizes: &'a BTreeMap<u32, u64>,
}

/// One array to locate, sort and encode.
struct ArrayInput<'a> {
    node: usize,
    path: &'a NodePath,
    layout: &'a ArrayLayout,
    manifest: &'a RawManifest,
    chunks: &'a ChunkCheck,
}

/// Where the encoded blocks go.
struct BlockOutput<'a> {
    blocks: SpillLog,
    index: Vec<(usize, u64, u64, u64)>,
    urls: &'a [std::sync::Arc<str>],
    checks: &'a [SourceCheck<'a>],
}

/// A reference at its packed location: what the sort orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Located(u64, RawRef);

impl Sortable for Located {
    fn encode<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let mut e = Vec::with_capacity(32);
        e.extend_from_slice(&self.0.to_be_bytes());
        match self.1 {
            RawRef::Virtual { url, offset, length } => {
                e.push(0);
                [u64::from(url), offset, length].into_iter().for_each(|v| put_varint(&mut e, v));
            }
            RawRef::Inline { start, len } => {
                e.push(1);
                [start, len].into_iter().for_each(|v| put_varint(&mut e, v));
            }
            RawRef::Clear => e.push(2),
            RawRef::Assembled { start, len } => {
                e.push(3);
                [start, len].into_iter().for_each(|v| put_varint(&mut e, v));
            }
        }
        w.write_all(&e)
    }

    fn decode<R: Read>(r: &mut R) -> io::Result<Self> {
        let mut packed = [0u8; 8];
        r.read_exact(&mut packed)?;
        let reference = match get_u8(r)? {
            0 => RawRef::Virtual {
                url: u32::try_from(get_varint(r)?).map_err(io::Error::other)?,
                offset: get_varint(r)?,
                length: get_varint(r)?,
            },
            1 => RawRef::Inline { start: get_varint(r)?, len: get_varint(r)? },
            3 => RawRef::Assembled { start: get_varint(r)?, len: get_varint(r)? },
            _ => RawRef::Clear,
        };
        Ok(Self(u64::from_be_bytes(packed), reference))
    }
}

/// Locates and checks the references of one array, sorts them, reports duplicates and, while the
/// document has no problem, encodes its blocks into `out`.
fn add_array(
    a: &ArrayInput<'_>,
    refs: &RefCheck<'_>,
    scratch: &Scratch,
    problems: &mut Problems,
    summary: &mut Summary,
    out: &mut BlockOutput<'_>,
    budget: &mut DecodeBudget,
) -> io::Result<()> {
    let grid = &a.layout.grid;
    let mut decoding = Vec::new();
    // A quarter of the budget for the sort's buffer, the rest for the logs beside it.
    let segment = (scratch.budget() / 4 / size_of::<Located>()).clamp(1 << 10, 1 << 26);
    // The sorter names its runs 0, 1, ... in the directory it is given: a sort that may spill
    // gets its own, removed when it ends. One that fits its buffer never writes a run, and makes
    // no directory (1.1 ms an array: 110 s of a registration of 100,000 one-chunk arrays).
    let runs = match a.manifest.len() > segment {
        true => Some(tempfile::Builder::new().prefix("zarrgate-sort-").tempdir_in(scratch.dir())?),
        false => None,
    };
    let mut sorter = ExternalSorter::new().with_segment_size(segment);
    if let Some(runs) = &runs {
        sorter = sorter.with_sort_dir(runs.path().to_path_buf());
    }
    let mut sorter = sorter.pushed_by_key(|l: &Located| l.0);
    let mut cursor = a.manifest.cursor();
    while let Some((indices, r)) = cursor.next_entry()? {
        if r == RawRef::Clear {
            continue;
        }
        let coords: &[u64] = if grid.ndim() == 0 && indices == [0] { &[] } else { indices };
        let Some(location) = grid.locate(coords) else {
            problems.push(format!(
                "array {}: chunk key {} is outside the chunk grid {:?}",
                a.path,
                display_key(indices),
                grid.grid_shape()
            ));
            continue;
        };
        let checked = match check_ref(r, refs.urls, refs.sources, refs.object_sizes) {
            Ok(r) => check_chunk(r, a.chunks, a.manifest, &mut decoding, budget)?.map(|()| r),
            Err(p) => Err(p),
        };
        let r = match checked {
            Ok(r) => r,
            Err(p) => {
                problems.push(format!("array {}, chunk {}: {p}", a.path, display_key(indices)));
                continue;
            }
        };
        let Some(packed) = location.pack() else {
            problems.push(format!("array {}: its chunk grid {:?} has too many tiles", a.path, grid.grid_shape()));
            break;
        };
        match r {
            RawRef::Virtual { length, .. } => {
                summary.chunks.virtual_ += 1;
                summary.referenced_bytes += length;
            }
            RawRef::Inline { len, .. } => {
                summary.chunks.inline += 1;
                summary.inline_bytes += len;
            }
            RawRef::Assembled { .. } => summary.chunks.assembled += 1,
            RawRef::Clear => {}
        }
        sorter.push(Located(packed, r))?;
    }
    let mut previous: Option<u64> = None;
    let mut building: Option<(u64, BlockBuilder)> = None;
    let mut inline = Vec::new();
    for item in sorter.done()? {
        let Located(packed, r) = item?;
        if previous == Some(packed) {
            let key = grid.coords_of(ChunkLocation::unpack(packed)).map(|c| manifest_key(&c)).unwrap_or_default();
            problems.push(format!("array {}: chunk {key:?} appears more than once", a.path));
            continue;
        }
        previous = Some(packed);
        if !problems.is_empty() {
            continue;
        }
        let at = ChunkLocation::unpack(packed);
        if building.as_ref().is_some_and(|(tile, _)| *tile != at.tile)
            && let Some((tile, block)) = building.take()
        {
            out.push(a.node, tile, block);
        }
        let (_, block) = building.get_or_insert_with(|| (at.tile, BlockBuilder::new(grid.tile_len())));
        match r {
            RawRef::Virtual { url, offset, length } => {
                let (url, check) = (&out.urls[url as usize], out.checks[url as usize].as_borrowed());
                block.push_virtual(at.slot, url, check, offset, length as u32);
            }
            RawRef::Inline { start, len } => {
                a.manifest.inline_bytes(start, len, &mut inline)?;
                block.push_inline(at.slot, &inline);
            }
            RawRef::Assembled { start, len } => {
                a.manifest.inline_bytes(start, len, &mut inline)?;
                block.push_assembled(at.slot, &inline);
            }
            RawRef::Clear => {}
        }
    }
    if let Some((tile, block)) = building.filter(|_| problems.is_empty()) {
        out.push(a.node, tile, block);
    }
    Ok(())
}

impl BlockOutput<'_> {
    fn push(&mut self, node: usize, tile: u64, block: BlockBuilder) {
        let encoded = block.finish().encode();
        let offset = self.blocks.append(&encoded);
        self.index.push((node, tile, offset, encoded.len() as u64));
    }
}

/// Checks a reference's bytes against the array's codecs ([`ChunkCheck`]): the length of a
/// virtual chunk, the length or the decoding of an inline one (the problem, if any). `buffer`
/// is reused; reading the inline bytes back from scratch space may fail.
pub(super) fn check_chunk(
    r: RawRef,
    chunks: &ChunkCheck,
    manifest: &RawManifest,
    buffer: &mut Vec<u8>,
    budget: &mut DecodeBudget,
) -> io::Result<Result<(), String>> {
    Ok(match r {
        RawRef::Virtual { length, .. } => chunks.length(length),
        RawRef::Inline { start, len } if chunks.decodes() => {
            manifest.inline_bytes(start, len, buffer)?;
            chunks.decode(buffer, budget)
        }
        RawRef::Inline { len, .. } => chunks.length(len).map_err(|why| format!("inline: {why}")),
        RawRef::Assembled { start, len } => {
            manifest.inline_bytes(start, len, buffer)?;
            match super::assembled::Recipe::decode(buffer) {
                Ok(recipe) => recipe.check(chunks.chunk_shape()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        RawRef::Clear => Ok(()),
    })
}

pub(super) fn display_key(indices: &[u64]) -> String {
    format!("{:?}", manifest_key(indices))
}

/// Checks a reference against what is known of its source; a `[url]` reference gets its
/// object's length.
pub(super) fn check_ref(
    r: RawRef,
    urls: &UrlTable,
    sources: &[Option<SourceFacts>],
    object_sizes: &BTreeMap<u32, u64>,
) -> Result<RawRef, String> {
    let RawRef::Virtual { url, offset, mut length } = r else { return Ok(r) };
    if length == super::kerchunk::WHOLE_OBJECT {
        // A [url] reference whose object could not be asked: that problem is already listed.
        length = *object_sizes.get(&url).ok_or("its object's length is unknown")?;
    }
    if length > u64::from(u32::MAX) {
        return Err(format!("length {length} is above the 4 GiB a chunk may have"));
    }
    let text = urls.get(url);
    if let Some(size) = sources.get(url as usize).and_then(|f| f.as_ref()?.size)
        && offset + length > size
    {
        return Err(format!("bytes {offset}..{} lie beyond the end of {text} ({size} bytes)", offset + length));
    }
    Ok(RawRef::Virtual { url, offset, length })
}

/// Adds the missing ancestors of every node as empty groups, and reports nodes inside arrays.
/// In path order a parent comes before its children, so each walk up stops at the first
/// ancestor already there, whose own place was settled before: linear in the nodes.
pub(super) fn add_implicit_groups(nodes: &mut BTreeMap<NodePath, ValidNode>, problems: &mut Problems) {
    let paths: Vec<NodePath> = nodes.keys().cloned().collect();
    // Nodes that lie inside an array, with that array.
    let mut inside: HashMap<NodePath, NodePath> = HashMap::new();
    for path in paths {
        let mut added = Vec::new();
        let mut parent = path.parent();
        let array = loop {
            let Some(p) = parent else { break None };
            match nodes.get(&p) {
                Some(ValidNode { kind: NodeKind::Array(_), .. }) => break Some(p),
                Some(_) => break inside.get(&p).cloned(),
                None => {
                    nodes.insert(p.clone(), ValidNode::new(p.clone(), &empty_group(), NodeKind::Group));
                    parent = p.parent();
                    added.push(p);
                }
            }
        };
        if let Some(array) = array {
            problems.push(format!("node {path} is inside array {array}: arrays have no children"));
            for p in added.into_iter().chain([path]) {
                inside.insert(p, array.clone());
            }
        }
    }
    nodes.entry(NodePath::root()).or_insert_with(|| ValidNode::new(NodePath::root(), &empty_group(), NodeKind::Group));
}

fn empty_group() -> Map<String, Value> {
    let metadata = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
    metadata.as_object().cloned().unwrap_or_default()
}

/// Reports nodes whose names are one name written two ways in Unicode. Names are served as
/// written (the store mirrors its source files); two that a person cannot tell apart, and that
/// a file system such as APFS would store as one, are refused.
pub(super) fn check_names(nodes: &BTreeMap<NodePath, ValidNode>, problems: &mut Problems) {
    for (first, second) in normalisation_clashes(nodes.keys()) {
        problems.push(format!(
            "nodes {:?} and {:?} are one name written two ways in Unicode (equal once normalised to NFC); \
             rename one of them",
            first.as_str(),
            second.as_str()
        ));
    }
}

/// One block to store: the encoded references of `tile` of the array at `node`.
#[derive(Debug)]
pub struct NewBlock<'a> {
    /// The array's path.
    pub node: &'a NodePath,
    /// The tile's index.
    pub tile: u64,
    /// The encoded block.
    pub data: Vec<u8>,
}

impl ValidatedStore {
    /// Every non-empty block, array by array, tile by tile, read back from the scratch log.
    pub fn blocks(&self) -> impl Iterator<Item = io::Result<NewBlock<'_>>> + '_ {
        self.index.iter().map(move |&(node, tile, offset, len)| {
            let mut data = Vec::new();
            self.blocks.read_at(offset, usize::try_from(len).map_err(io::Error::other)?, &mut data)?;
            Ok(NewBlock { node: &self.nodes[node].path, tile, data })
        })
    }

    /// Number of blocks.
    pub fn block_count(&self) -> usize {
        self.index.len()
    }

    /// True when the encoded blocks did not fit the registration's memory budget.
    pub fn spilled(&self) -> bool {
        self.blocks.spilled()
    }

    /// Every source URL with the facts recorded for it, if any.
    pub fn sources(&self) -> impl Iterator<Item = (&str, Option<&SourceFacts>)> + '_ {
        self.urls.iter().zip(&self.sources).map(|(u, f)| (&**u, f.as_ref()))
    }
}

#[cfg(test)]
mod tests;

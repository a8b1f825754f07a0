//! Incremental updates: a partial native document (PATCH) merged into a stored version. Nodes
//! given override the stored metadata key by key; manifest entries are set or cleared; untouched
//! blocks are left to be shared with the new version.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use super::block::{BlockBuilder, ChunkRef, ManifestBlock, SourceCheck};
use super::chunk_check::{ChunkCheck, DecodeBudget};
use super::document::{DocNode, Document, Problems, SourceFacts, UrlTable};
use super::grid::ChunkLocation;
use super::hierarchy::Hierarchy;
use super::key::manifest_key;
use super::limits::Limits;
use super::manifest::{RawManifest, RawRef};
use super::metadata::{ArrayLayout, NodeKind, Tiling, validate_node_tiled};
use super::path::NodePath;
use super::validate::{Rejected, ValidNode, add_implicit_groups, check_chunk, check_names, check_ref, display_key};

/// What a PATCH does to one array.
#[derive(Debug)]
pub struct ArrayChanges {
    /// The array.
    pub path: NodePath,
    /// Its layout after the patch.
    pub layout: ArrayLayout,
    /// Its layout before, if it existed.
    pub base: Option<ArrayLayout>,
    /// Its tiles are renumbered, or it shrank: every block is rewritten from the old references.
    pub rebuild: bool,
    /// Entries set (`Some`) or cleared (`None`), by location in the new layout, sorted.
    pub changes: Vec<(ChunkLocation, Option<RawRef>)>,
    /// Inline bytes of the set entries.
    pub inline: Vec<u8>,
    /// Old references cleared beyond the new grid (shrinking), by grid coordinates.
    pub cleared_beyond: BTreeSet<Vec<u64>>,
}

/// A validated PATCH, ready for the blocks it touches to be rewritten.
#[derive(Debug)]
pub struct PatchPlan {
    /// Every node of the new version, sorted by path.
    pub nodes: Vec<ValidNode>,
    /// Arrays with changes (or rebuilt).
    pub arrays: Vec<ArrayChanges>,
    /// Arrays of the base version whose blocks are not carried over (removed).
    pub removed: Vec<NodePath>,
    /// URLs the set entries use, by number, with their recorded ETags.
    pub urls: Vec<String>,
    checks: Vec<SourceCheck<'static>>,
    /// Facts of the new sources.
    pub sources: BTreeMap<String, SourceFacts>,
}

/// Merges `doc` into `base`. New arrays get tiles of at most `max_tile` chunks; existing arrays
/// keep theirs. The new version is held to `limits` as a registration is. Every problem is listed.
pub fn plan(
    base: &Hierarchy,
    doc: Document,
    registered: &dyn Fn(&str) -> bool,
    max_tile: u64,
    limits: &Limits,
) -> Result<PatchPlan, Rejected> {
    let Document { nodes: doc_nodes, urls, sources, mut problems, delete, object_sizes, scratch, .. } = doc;
    let sources = sources.resolve(&urls);
    scratch.check()?;
    if let Err(p) = limits.check_count(doc_nodes.len()) {
        problems.push(p);
        return Err(Rejected::Invalid(problems.into_vec()));
    }
    for url in urls.all() {
        if !registered(url) {
            problems.push(format!(
                "{url} is not under any registered object store: register one whose URL is a prefix of it"
            ));
        }
    }
    let deleted = deleted_nodes(base, delete, &mut problems);
    let deleted: HashSet<&str> = deleted.iter().map(NodePath::as_str).collect();
    let (nodes, removed) = kept_nodes(base, &deleted);
    let mut merge = Merge {
        deleted,
        max_tile,
        limits,
        urls: &urls,
        sources: &sources,
        object_sizes: &object_sizes,
        budget: DecodeBudget::default(),
        decoding: Vec::new(),
        problems,
        nodes,
        arrays: Vec::new(),
    };
    for (path, doc_node) in doc_nodes {
        merge.node(&path, doc_node)?;
    }
    let Merge { mut problems, mut nodes, mut arrays, .. } = merge;
    for a in &mut arrays {
        a.rebuild = needs_rebuild(a);
    }
    let mut problem_list = Problems::default();
    add_implicit_groups(&mut nodes, &mut problem_list);
    check_names(&nodes, &mut problem_list);
    let nodes: Vec<ValidNode> = nodes.into_values().collect();
    limits.check(&nodes, &mut problem_list);
    for p in problem_list.into_vec() {
        problems.push(p);
    }
    if !problems.is_empty() {
        return Err(Rejected::Invalid(problems.into_vec()));
    }
    // Every URL the update references is recorded, with no facts when none are known
    // (`?verify=false`): the catalog answers "which stores read this object store" from them.
    let sources: BTreeMap<String, SourceFacts> =
        urls.all().iter().zip(sources).map(|(u, f)| (u.to_string(), f.unwrap_or_default())).collect();
    let urls: Vec<String> = urls.all().iter().map(|u| u.to_string()).collect();
    let checks =
        urls.iter().map(|u| sources.get(u).map_or(SourceCheck::Unchecked, |f| f.read_check().into_owned())).collect();
    Ok(PatchPlan { nodes, arrays, removed, urls, checks, sources })
}

/// The nodes of `base` that `delete` names; a name that cannot be deleted is a problem.
fn deleted_nodes(base: &Hierarchy, delete: Vec<String>, problems: &mut Problems) -> Vec<NodePath> {
    let mut deleted = Vec::new();
    for path in delete {
        match NodePath::new(&path) {
            Ok(p) if p.is_root() => problems.push("the root cannot be deleted: DELETE the store instead"),
            Ok(p) if base.node(p.as_str()).is_some() => deleted.push(p),
            Ok(p) => problems.push(format!("cannot delete node {p}: the store has no such node")),
            Err(e) => problems.push(e.to_string()),
        }
    }
    deleted
}

/// The nodes of `base` that stay (neither `deleted` nor under a deleted node), and the arrays
/// that go.
fn kept_nodes(base: &Hierarchy, deleted: &HashSet<&str>) -> (BTreeMap<NodePath, ValidNode>, Vec<NodePath>) {
    // In path order a parent comes first (and every parent of a stored node is stored): a node
    // is deleted when it is named or its parent is.
    let mut is_deleted: HashMap<&str, bool> = HashMap::new();
    let mut nodes: BTreeMap<NodePath, ValidNode> = BTreeMap::new();
    let mut removed = Vec::new();
    for node in base.nodes() {
        let path = node.path.as_str();
        let gone = deleted.contains(path)
            || (!node.path.is_root() && is_deleted.get(node.path.parent_str()).copied().unwrap_or(false));
        is_deleted.insert(path, gone);
        if gone {
            if matches!(node.kind, NodeKind::Array(_)) {
                removed.push(node.path.clone());
            }
            continue;
        }
        nodes.insert(node.path.clone(), ValidNode::new(node.path.clone(), &node.stored_metadata(), node.kind.clone()));
    }
    (nodes, removed)
}

/// True when an array's blocks must all be written again: it is new, it shrank, or its tiles
/// are cut otherwise.
fn needs_rebuild(array: &ArrayChanges) -> bool {
    match &array.base {
        None => true,
        Some(old) => {
            let shrank = old.grid.grid_shape().iter().zip(array.layout.grid.grid_shape()).any(|(o, n)| n < o);
            shrank || !old.grid.same_tiles(&array.layout.grid)
        }
    }
}

/// A node's metadata after a PATCH, with what it was when it existed.
struct Merged {
    metadata: Map<String, Value>,
    /// The stored array's tile shape, which it keeps.
    tiles: Option<Vec<u64>>,
    /// The stored array's layout.
    old: Option<ArrayLayout>,
}

/// A PATCH's nodes merged one by one into the base version's, with what each does to its array.
struct Merge<'a> {
    /// Paths of the nodes the PATCH deletes (an array deleted may be added again, changed).
    deleted: HashSet<&'a str>,
    max_tile: u64,
    limits: &'a Limits,
    urls: &'a UrlTable,
    sources: &'a [Option<SourceFacts>],
    object_sizes: &'a BTreeMap<u32, u64>,
    /// What decoding the inline chunks may still cost, and the buffer they are decoded into.
    budget: DecodeBudget,
    decoding: Vec<u8>,
    problems: Problems,
    /// The new version's nodes so far.
    nodes: BTreeMap<NodePath, ValidNode>,
    /// Arrays with changes so far.
    arrays: Vec<ArrayChanges>,
}

impl Merge<'_> {
    /// Merges node `path_text` of the PATCH: its metadata over the stored node's, validated,
    /// and its manifest's changes. A problem is listed and the node left out.
    fn node(&mut self, path_text: &str, doc_node: DocNode) -> Result<(), Rejected> {
        let path = match NodePath::new(path_text).map_err(|e| e.to_string()).and_then(|p| {
            self.limits.check_depth(&p)?;
            Ok(p)
        }) {
            Ok(p) => p,
            Err(e) => {
                self.problems.push(e);
                return Ok(());
            }
        };
        let Some(Merged { mut metadata, tiles, old }) = self.merged(&path, &doc_node) else { return Ok(()) };
        let kind = match validate_node_tiled(
            &mut metadata,
            tiles.as_deref().map_or(Tiling::New(self.max_tile), Tiling::Stored),
        ) {
            Ok(kind) => kind,
            Err(list) => {
                list.into_iter().for_each(|p| self.problems.push(format!("node {path}: {p}")));
                return Ok(());
            }
        };
        if let Some(manifest) = doc_node.manifest {
            let NodeKind::Array(layout) = &kind else {
                self.problems.push(format!("node {path}: a group cannot have a manifest"));
                return Ok(());
            };
            self.manifest_changes(&path, &metadata, layout, old, &manifest)?;
        } else if let NodeKind::Array(layout) = &kind
            && old.as_ref() != Some(layout)
        {
            self.arrays.push(ArrayChanges {
                path: path.clone(),
                layout: layout.clone(),
                base: old,
                rebuild: false,
                changes: Vec::new(),
                inline: Vec::new(),
                cleared_beyond: BTreeSet::new(),
            });
        }
        self.nodes.insert(path.clone(), ValidNode::new(path, &metadata, kind));
        Ok(())
    }

    /// Node `path`'s metadata after the PATCH, with the tile shape and layout of the array it
    /// was, if it existed; `None` (a problem listed) for a change a PATCH may not make.
    fn merged(&mut self, path: &NodePath, doc_node: &DocNode) -> Option<Merged> {
        let Some(old) = self.nodes.get(path) else {
            return Some(Merged { metadata: doc_node.metadata(), tiles: None, old: None });
        };
        let (mut merged, old_metadata) = (old.metadata(), old.metadata());
        for (k, v) in doc_node.metadata() {
            merged.insert(k, v);
        }
        if merged.get("node_type") != old_metadata.get("node_type") {
            self.problems.push(format!("node {path}: node_type cannot change (delete the node and add it again)"));
            return None;
        }
        // These describe the chunks already stored: changing them would make every
        // stored reference mean something else.
        let fixed: Vec<&str> = ["chunk_grid", "data_type", "codecs"]
            .into_iter()
            .filter(|k| merged.get(*k) != old_metadata.get(*k))
            .collect();
        if !fixed.is_empty() && !self.deleted.contains(path.as_str()) {
            self.problems.push(format!(
                "array {path}: {} describe the chunks already stored and cannot change in a PATCH; \
                 delete the array and add it again (both in one PATCH) to replace it whole",
                fixed.join(", ")
            ));
            return None;
        }
        let layout = match &old.kind {
            NodeKind::Array(l) => Some(l.clone()),
            NodeKind::Group => None,
        };
        Some(Merged { metadata: merged, tiles: layout.as_ref().map(|l| l.grid.tile_shape().to_vec()), old: layout })
    }

    /// The entries `manifest` sets and clears in array `path` (laid out as `layout`, `old`
    /// before), each checked; a bad entry is a problem listed.
    fn manifest_changes(
        &mut self,
        path: &NodePath,
        metadata: &Map<String, Value>,
        layout: &ArrayLayout,
        old: Option<ArrayLayout>,
        manifest: &RawManifest,
    ) -> Result<(), Rejected> {
        let mut changes = Vec::with_capacity(manifest.len());
        let mut cleared_beyond = BTreeSet::new();
        let chunks = ChunkCheck::new(metadata.clone(), layout.grid.chunk_shape());
        for (indices, r) in manifest.entries()? {
            let indices = indices.as_slice();
            let coords: &[u64] = if layout.grid.ndim() == 0 && indices == [0] { &[] } else { indices };
            let Some(location) = layout.grid.locate(coords) else {
                if r == RawRef::Clear {
                    cleared_beyond.insert(coords.to_vec());
                    continue;
                }
                self.problems.push(format!(
                    "array {path}: chunk key {} is outside the chunk grid {:?}",
                    display_key(indices),
                    layout.grid.grid_shape()
                ));
                continue;
            };
            let checked = match check_ref(r, self.urls, self.sources, self.object_sizes) {
                Ok(r) => check_chunk(r, &chunks, manifest, &mut self.decoding, &mut self.budget)?.map(|()| r),
                Err(p) => Err(p),
            };
            let r = match checked {
                Ok(r) => r,
                Err(p) => {
                    self.problems.push(format!("array {path}, chunk {}: {p}", display_key(indices)));
                    continue;
                }
            };
            changes.push((location, (r != RawRef::Clear).then_some(r)));
        }
        changes.sort_unstable_by_key(|(loc, _)| *loc);
        if changes.windows(2).any(|w| w[0].0 == w[1].0) {
            self.problems.push(format!("array {path}: a chunk key appears more than once"));
        }
        self.arrays.push(ArrayChanges {
            path: path.clone(),
            layout: layout.clone(),
            base: old,
            rebuild: false,
            changes,
            inline: manifest.inline_all()?,
            cleared_beyond,
        });
        Ok(())
    }
}

/// A reference owned outside any block, for rebuilding an array from its old blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedRef {
    /// Bytes of a source object.
    Virtual { url: String, check: SourceCheck<'static>, offset: u64, length: u32 },
    /// The bytes themselves.
    Inline(bytes::Bytes),
    /// An assembled chunk's encoded recipe.
    Assembled(bytes::Bytes),
}

impl OwnedRef {
    /// The owned form of a block's reference (`None` for a missing one).
    pub fn from_chunk(chunk: ChunkRef<'_>) -> Option<Self> {
        match chunk {
            ChunkRef::Virtual { source, offset, length } => Some(Self::Virtual {
                url: source.url.into_owned(),
                check: source.check.into_owned(),
                offset,
                length: length as u32,
            }),
            ChunkRef::Inline(bytes) => Some(Self::Inline(bytes)),
            ChunkRef::Assembled(recipe) => Some(Self::Assembled(recipe)),
            ChunkRef::Missing => None,
        }
    }

    fn push(&self, builder: &mut BlockBuilder, slot: u32) {
        match self {
            Self::Virtual { url, check, offset, length } => {
                builder.push_virtual(slot, url, check.as_borrowed(), *offset, *length)
            }
            Self::Inline(bytes) => builder.push_inline(slot, bytes),
            Self::Assembled(recipe) => builder.push_assembled(slot, recipe),
        }
    }
}

impl PatchPlan {
    fn push_change(&self, array: &ArrayChanges, builder: &mut BlockBuilder, slot: u32, r: RawRef) {
        match r {
            RawRef::Virtual { url, offset, length } => {
                builder.push_virtual(
                    slot,
                    &self.urls[url as usize],
                    self.checks[url as usize].as_borrowed(),
                    offset,
                    length as u32,
                );
            }
            RawRef::Inline { start, len } => {
                builder.push_inline(slot, &array.inline[start as usize..(start + len) as usize])
            }
            RawRef::Assembled { start, len } => {
                builder.push_assembled(slot, &array.inline[start as usize..(start + len) as usize])
            }
            RawRef::Clear => {}
        }
    }

    /// The new block of `tile` of an array that is not rebuilt: `base`'s references with the
    /// array's changes to that tile applied.
    pub fn patch_block(&self, array: &ArrayChanges, tile: u64, base: Option<&ManifestBlock>) -> ManifestBlock {
        let tile_len = array.layout.grid.tile_len();
        let changes: Vec<(u32, Option<RawRef>)> =
            array.changes.iter().filter(|(loc, _)| loc.tile == tile).map(|(loc, r)| (loc.slot, *r)).collect();
        let changed: BTreeSet<u32> = changes.iter().map(|(slot, _)| *slot).collect();
        let mut builder = BlockBuilder::new(tile_len);
        for (slot, chunk) in base.into_iter().flat_map(|b| b.iter()) {
            if !changed.contains(&slot)
                && let Some(owned) = OwnedRef::from_chunk(chunk)
            {
                owned.push(&mut builder, slot);
            }
        }
        for (slot, r) in changes {
            if let Some(r) = r {
                self.push_change(array, &mut builder, slot, r);
            }
        }
        builder.finish()
    }

    /// Every block of a rebuilt array: `old` references (grid coordinates, from the base
    /// blocks) laid out again, with the changes applied. Old references outside the new grid
    /// are problems unless the patch clears them.
    pub fn rebuild_blocks(
        &self,
        array: &ArrayChanges,
        old: Vec<(Vec<u64>, OwnedRef)>,
    ) -> Result<Vec<(u64, ManifestBlock)>, Vec<String>> {
        let grid = &array.layout.grid;
        let mut problems = Vec::new();
        let mut located: Vec<(ChunkLocation, OwnedRef)> = Vec::with_capacity(old.len());
        for (coords, r) in old {
            if array.cleared_beyond.contains(&coords) {
                continue;
            }
            match grid.locate(&coords) {
                Some(loc) => located.push((loc, r)),
                None => problems.push(format!(
                    "array {}: chunk {:?} lies outside the new chunk grid {:?}; clear it with {{\"path\": \"\"}} in this PATCH or keep the shape",
                    array.path,
                    manifest_key(&coords),
                    grid.grid_shape()
                )),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let changed: BTreeSet<ChunkLocation> = array.changes.iter().map(|(loc, _)| *loc).collect();
        located.retain(|(loc, _)| !changed.contains(loc));
        let mut tiles: BTreeMap<u64, BlockBuilder> = BTreeMap::new();
        for (loc, r) in &located {
            r.push(tiles.entry(loc.tile).or_insert_with(|| BlockBuilder::new(grid.tile_len())), loc.slot);
        }
        for (loc, r) in &array.changes {
            if let Some(r) = r {
                let builder = tiles.entry(loc.tile).or_insert_with(|| BlockBuilder::new(grid.tile_len()));
                self.push_change(array, builder, loc.slot, *r);
            }
        }
        Ok(tiles.into_iter().filter(|(_, b)| !b.is_empty()).map(|(t, b)| (t, b.finish())).collect())
    }
}

#[cfg(test)]
mod tests;

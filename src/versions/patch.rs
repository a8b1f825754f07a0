//! PATCH: an incremental update (the daily new file of a growing dataset). A partial native
//! document is merged into the current version; only the blocks it touches are rewritten, every
//! other block is shared with the previous version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::error::{Error, Result};
use super::facts;
use super::ingest::{self, Body, Format};
use super::read::{Reader, time_catalog};
use super::register::{Registered, Registrar, Registration};
use super::view::VersionView;
use crate::catalog::{CatalogError, DerivedVersion, Expected, StoreRecord, VersionOptions};
use crate::zarr::document::Document;
use crate::zarr::metadata::NodeKind;
use crate::zarr::patch::{ArrayChanges, OwnedRef, PatchPlan, plan};
use crate::zarr::source::SourceFacts;
use crate::zarr::validate::{Rejected, Summary};
use crate::zarr::{ChunkLocation, ManifestBlock};

/// Signed changes to the chunk counts.
#[derive(Debug, Default)]
struct Delta {
    virtual_: i64,
    inline: i64,
    assembled: i64,
    virtual_bytes: i64,
    inline_bytes: i64,
}

impl Delta {
    fn add(&mut self, block: &ManifestBlock, sign: i64) {
        let counts = block.counts();
        self.virtual_ += sign * counts.virtual_ as i64;
        self.inline += sign * counts.inline as i64;
        self.assembled += sign * counts.assembled as i64;
        self.virtual_bytes += sign * counts.virtual_bytes as i64;
        self.inline_bytes += sign * counts.inline_bytes as i64;
    }
}

/// The base version's blocks, read for a PATCH one at a time and not through the cache.
struct Base<'a> {
    reader: &'a Reader,
    view: &'a VersionView,
    /// The base version's stored tiles: array, tile.
    tiles: Vec<(String, u64)>,
}

impl Base<'_> {
    /// The stored tiles of array `node`.
    fn tiles_of(&self, node: &str) -> Vec<u64> {
        self.tiles.iter().filter(|(n, _)| n == node).map(|(_, t)| *t).collect()
    }

    /// Tile `tile` of array `node`, decoded.
    async fn load(&self, node: &str, tile: u64) -> Result<ManifestBlock> {
        let found =
            self.view.hierarchy.node(node).ok_or_else(|| Error::Internal(format!("no node {node} in the base")))?;
        self.reader.load_block(&self.view.head, found, tile).await
    }
}

/// What a PATCH writes and drops of the base version's blocks, and what that does to the counts.
#[derive(Default)]
struct Rewritten {
    delta: Delta,
    /// New blocks: array, tile, encoded block.
    blocks: Vec<(String, u64, Vec<u8>)>,
    /// Arrays whose base tiles are not carried over (removed, or rebuilt).
    dropped_nodes: Vec<String>,
    /// Base tiles not carried over (replaced by new blocks, or emptied).
    dropped_tiles: Vec<(String, u64)>,
}

impl Registrar {
    /// Merges the partial native document `body` into store `name`'s current version, as a new
    /// version sharing every block it does not touch. `how.format` is ignored (always native).
    pub async fn patch(&self, name: &str, body: Body, how: Registration) -> Result<Registered> {
        let _turn = self.turn().await?;
        let record = self.patched_store(name, how.expected).await?;
        let head = record.head.clone();
        let options = VersionOptions {
            fill_missing: how.fill_missing.unwrap_or(head.fill_missing),
            portable: how.portable.unwrap_or(head.portable),
            expected: how.expected,
            ..VersionOptions::default()
        };
        let view = self.reader.view(&head).await?;
        let (plan, base_sources) = self.plan_patch(name, body, how.verify, &view, options.fill_missing).await?;
        let base = Base { reader: &self.reader, view: &view, tiles: self.reader.tiles(&head).await? };
        let rewritten = self.rewrite(name, &plan, &base).await?;
        let base_urls: BTreeSet<String> = base_sources.into_keys().collect();
        let mut summary = summarise(&record.summary, &plan, &rewritten.delta, &base_urls);
        if options.portable {
            super::register::portable_summary(&plan.nodes, &mut summary);
        }
        let derived = DerivedVersion {
            base: head.id,
            nodes: &plan.nodes,
            dropped_nodes: rewritten.dropped_nodes,
            dropped_tiles: rewritten.dropped_tiles,
            blocks: rewritten.blocks,
            sources: &plan.sources,
            summary: summary.clone(),
        };
        let started = std::time::Instant::now();
        let written = match self.catalog.write_derived(name, &derived, options).await {
            Err(CatalogError::Conflict(what)) => {
                return Err(Error::Conflict(format!("{what}: nothing was changed; send the PATCH again")));
            }
            other => other?,
        };
        time_catalog(&self.metrics, "write_derived", started);
        self.settle(name).await;
        self.metrics.registrations_total.with_label_values(&["patched"]).inc();
        tracing::info!(store = %name, version = written.head.id, base = head.id, blocks_written = derived.blocks.len(),
            "store patched");
        Ok(Registered {
            head: written.head,
            created: false,
            unchanged: false,
            store_created_at_ms: record.store_created_at_ms,
            summary,
        })
    }

    /// Store `name` as a PATCH finds it: it exists, its current version is as `expected`, and
    /// its versions are not those of an Icechunk repository nor made from files.
    async fn patched_store(&self, name: &str, expected: Option<Expected>) -> Result<StoreRecord> {
        let record =
            self.catalog.store(name).await?.ok_or_else(|| Error::NotFound(format!("no store is named {name:?}")))?;
        // Checked again in the write's transaction (`write_derived`): this only spares the work.
        Expected::check(expected, name, Some(record.head.id))?;
        let origin = self.catalog.origin(record.head.id).await?;
        if origin.as_deref().is_some_and(super::files::Origin::is_files) {
            return Err(Error::Conflict(format!(
                "store {name:?} is made from files (?format=files): change the files and register them again \
                 rather than patching the manifest made from them; nothing was changed"
            )));
        }
        if origin.is_some() {
            return Err(Error::Conflict(format!(
                "store {name:?} serves an Icechunk repository, which its versions follow: commit the change to \
                 the repository, then POST /api/v1/stores/{name}/sync (a PATCH here would be lost at the next sync)"
            )));
        }
        Ok(record)
    }

    /// Reads the partial document `body`, keeps the facts the base version recorded of its
    /// sources, and merges it into `view` (off the async workers): the plan, with the base
    /// version's sources.
    async fn plan_patch(
        &self,
        name: &str,
        body: Body,
        verify: bool,
        view: &Arc<VersionView>,
        fill_missing: bool,
    ) -> Result<(PatchPlan, BTreeMap<String, SourceFacts>)> {
        let scratch = self.settings.scratch();
        let (mut doc, _) =
            ingest::read_document(body, self.settings.max_body_bytes, Some(Format::Native), &scratch).await?;
        if verify {
            facts::record(&self.sources, self.settings.verify_concurrency, &mut doc, false).await;
        }
        let version = view.head.id;
        let base_sources: BTreeMap<String, SourceFacts> = self.catalog.sources(version).await?.into_iter().collect();
        keep_source_facts(&mut doc, &base_sources, version);
        let entries = self.sources.entries();
        let max_tile = u64::from(self.settings.block_chunks);
        let limits = self.settings.limits(fill_missing);
        let base = view.clone();
        let planned = tokio::task::spawn_blocking(move || {
            plan(&base.hierarchy, doc, &|url| entries.iter().any(|e| url.starts_with(&e.prefix)), max_tile, &limits)
        })
        .await?;
        match planned {
            Ok(plan) => Ok((plan, base_sources)),
            Err(Rejected::Invalid(problems)) => Err(invalid(name, problems)),
            Err(Rejected::Scratch(e)) => Err(ingest::scratch_error(e)),
        }
    }

    /// The blocks `plan` writes and drops: removed arrays' tiles dropped, rebuilt arrays laid
    /// out again, the touched tiles of the others patched. Every problem is listed.
    async fn rewrite(&self, name: &str, plan: &PatchPlan, base: &Base<'_>) -> Result<Rewritten> {
        let mut out = Rewritten::default();
        for path in &plan.removed {
            for tile in base.tiles_of(path.as_str()) {
                out.delta.add(&base.load(path.as_str(), tile).await?, -1);
            }
            out.dropped_nodes.push(path.as_str().to_owned());
        }
        let mut problems = Vec::new();
        for array in &plan.arrays {
            if array.rebuild {
                self.rebuild_array(name, plan, array, base, &mut out, &mut problems).await?;
            } else {
                patch_array(plan, array, base, &mut out).await?;
            }
        }
        if !problems.is_empty() {
            return Err(invalid(name, problems));
        }
        Ok(out)
    }

    /// Lays `array` out again: its old references (none for a new array) with the changes
    /// applied; a reference outside the new grid is one of `problems`.
    async fn rebuild_array(
        &self,
        name: &str,
        plan: &PatchPlan,
        array: &ArrayChanges,
        base: &Base<'_>,
        out: &mut Rewritten,
        problems: &mut Vec<String>,
    ) -> Result<()> {
        let node = array.path.as_str();
        // A rebuild holds every old reference of the array at once (its coordinates and owned
        // strings: about 300 bytes each); past what one registration may hold, PUT (which streams)
        // is the way.
        let rebuild_limit =
            usize::try_from(self.settings.ingest.memory_bytes / REBUILD_BYTES_PER_REF).unwrap_or(usize::MAX);
        let mut old = Vec::new();
        if let Some(base_layout) = &array.base {
            for tile in base.tiles_of(node) {
                let block = base.load(node, tile).await?;
                out.delta.add(&block, -1);
                for (slot, chunk) in block.iter() {
                    let coords = base_layout.grid.coords_of(ChunkLocation { tile, slot }).unwrap_or_default();
                    old.extend(OwnedRef::from_chunk(chunk).map(|r| (coords, r)));
                }
                if old.len() > rebuild_limit {
                    return Err(invalid(
                        name,
                        vec![format!(
                            "array {node}: this PATCH changes its shape so that every stored reference must be laid \
                             out again, and it has more than {rebuild_limit} of them, more than one registration may \
                             hold in memory (ingest.memory_bytes); register the whole store again with PUT, which \
                             streams, or grow the array along its first dimension only"
                        )],
                    ));
                }
            }
            out.dropped_nodes.push(node.to_owned());
        }
        match plan.rebuild_blocks(array, old) {
            Ok(rebuilt) => {
                for (tile, block) in rebuilt {
                    out.delta.add(&block, 1);
                    out.blocks.push((node.to_owned(), tile, block.encode()));
                }
            }
            Err(list) => problems.extend(list),
        }
        Ok(())
    }
}

/// Patches the tiles of `array` that its changes touch, each from its base block if stored.
async fn patch_array(plan: &PatchPlan, array: &ArrayChanges, base: &Base<'_>, out: &mut Rewritten) -> Result<()> {
    let node = array.path.as_str();
    let stored: BTreeSet<u64> = base.tiles_of(node).into_iter().collect();
    let touched: BTreeSet<u64> = array.changes.iter().map(|(loc, _)| loc.tile).collect();
    for tile in touched {
        let base_block = match stored.contains(&tile) {
            true => Some(base.load(node, tile).await?),
            false => None,
        };
        let block = plan.patch_block(array, tile, base_block.as_ref());
        if let Some(b) = &base_block {
            out.delta.add(b, -1);
            out.dropped_tiles.push((node.to_owned(), tile));
        }
        out.delta.add(&block, 1);
        if !block.is_empty() {
            out.blocks.push((node.to_owned(), tile, block.encode()));
        }
    }
    Ok(())
}

/// Memory a rebuilt array's old reference takes while it is laid out again (coordinates, URL and
/// ETag strings, the builder's copy), for the limit `ingest.memory_bytes` sets.
const REBUILD_BYTES_PER_REF: u64 = 300;

/// A source the base version already reads keeps the facts recorded for it: its stored chunks
/// are conditional on that ETag, and new chunks from it must be too. A source that changed since
/// is a problem: the chunks already stored would fail with `source-modified` (or, had the facts
/// been replaced, be served from bytes they were not registered against).
fn keep_source_facts(doc: &mut Document, base: &BTreeMap<String, SourceFacts>, version: i64) {
    for n in 0..doc.urls.len() as u32 {
        let url = doc.urls.get(n);
        let Some(then) = base.get(url) else { continue };
        match doc.sources.of(n) {
            Some(now) if then.contradicted_by(now) => doc.problems.push(format!(
                "{url} changed since version {version} was registered (ETag {} and {} bytes then, ETag {} and {} \
                 bytes now): the chunks the store already reads from it would fail; register the whole store \
                 again with PUT",
                then.etag.as_deref().unwrap_or("unknown"),
                then.size.map_or("unknown".into(), |s| s.to_string()),
                now.etag.as_deref().unwrap_or("unknown"),
                now.size.map_or("unknown".into(), |s| s.to_string()),
            )),
            _ => doc.sources.set(n, then.clone()),
        }
    }
}

fn invalid(name: &str, problems: Vec<String>) -> Error {
    Error::Invalid {
        title: format!("the PATCH of store {name:?} has {} problem(s); nothing was changed", problems.len()),
        problems,
    }
}

fn summarise(base: &Summary, plan: &PatchPlan, delta: &Delta, base_urls: &BTreeSet<String>) -> Summary {
    let apply = |n: u64, d: i64| (n as i64 + d).max(0) as u64;
    let mut s = Summary {
        sources: (base_urls.len() + plan.sources.keys().filter(|u| !base_urls.contains(*u)).count()) as u64,
        referenced_bytes: apply(base.referenced_bytes, delta.virtual_bytes),
        inline_bytes: apply(base.inline_bytes, delta.inline_bytes),
        ..Summary::default()
    };
    s.chunks.virtual_ = apply(base.chunks.virtual_, delta.virtual_);
    s.chunks.inline = apply(base.chunks.inline, delta.inline);
    s.chunks.assembled = apply(base.chunks.assembled, delta.assembled);
    let mut grid_chunks = 0u64;
    for node in &plan.nodes {
        match &node.kind {
            NodeKind::Group => s.groups += 1,
            NodeKind::Array(layout) => {
                s.arrays += 1;
                grid_chunks = grid_chunks.saturating_add(layout.grid.chunk_count());
                s.warnings.extend(crate::zarr::codecs::reader_warnings(node.path.as_str(), &node.metadata()));
            }
        }
    }
    crate::zarr::codecs::cap(&mut s.warnings);
    s.chunks.missing = grid_chunks.saturating_sub(s.chunks.virtual_ + s.chunks.inline + s.chunks.assembled);
    s
}

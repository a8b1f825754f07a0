//! PATCH: an incremental update (the daily new file of a growing dataset). A partial native
//! document is merged into the current version; only the blocks it touches are rewritten, every
//! other block is shared with the previous version.

use std::collections::{BTreeMap, BTreeSet};

use super::error::{Error, Result};
use super::facts;
use super::ingest::{self, Body, Format};
use super::read::time_catalog;
use super::register::{Registered, Registrar, Registration};
use crate::catalog::{CatalogError, DerivedVersion, Expected, VersionOptions};
use crate::zarr::document::Document;
use crate::zarr::metadata::NodeKind;
use crate::zarr::patch::{OwnedRef, PatchPlan, plan};
use crate::zarr::source::SourceFacts;
use crate::zarr::validate::{Rejected, Summary};
use crate::zarr::{ChunkLocation, ManifestBlock};

/// Signed changes to the chunk counts.
#[derive(Debug, Default)]
struct Delta {
    virtual_: i64,
    inline: i64,
    virtual_bytes: i64,
    inline_bytes: i64,
}

impl Delta {
    fn add(&mut self, block: &ManifestBlock, sign: i64) {
        let (v, i, vb, ib) = block.counts();
        self.virtual_ += sign * v as i64;
        self.inline += sign * i as i64;
        self.virtual_bytes += sign * vb as i64;
        self.inline_bytes += sign * ib as i64;
    }
}

impl Registrar {
    /// Merges the partial native document `body` into store `name`'s current version, as a new
    /// version sharing every block it does not touch. `how.format` is ignored (always native).
    pub async fn patch(&self, name: &str, body: Body, how: Registration) -> Result<Registered> {
        let _turn = self.turn().await?;
        let record =
            self.catalog.store(name).await?.ok_or_else(|| Error::NotFound(format!("no store is named {name:?}")))?;
        let head = record.head.clone();
        // Checked again in the write's transaction (`write_derived`): this only spares the work.
        Expected::check(how.expected, name, Some(head.id))?;
        if self.catalog.origin(head.id).await?.is_some() {
            return Err(Error::Conflict(format!(
                "store {name:?} serves an Icechunk repository, which its versions follow: commit the change to \
                 the repository, then POST /api/v1/stores/{name}/sync (a PATCH here would be lost at the next sync)"
            )));
        }
        let options = VersionOptions {
            fill_missing: how.fill_missing.unwrap_or(head.fill_missing),
            expected: how.expected,
            ..VersionOptions::default()
        };
        let view = self.reader.view(&head).await?;
        let scratch = self.settings.ingest.scratch();
        let (mut doc, _) =
            ingest::read_document(body, self.settings.max_body_bytes, Some(Format::Native), &scratch).await?;
        if how.verify {
            facts::record(&self.sources, self.settings.verify_concurrency, &mut doc, false).await;
        }
        let base_sources: BTreeMap<String, SourceFacts> = self.catalog.sources(head.id).await?.into_iter().collect();
        keep_source_facts(&mut doc, &base_sources, head.id);
        let entries = self.sources.entries();
        let max_tile = u64::from(self.settings.block_chunks);
        let limits = self.settings.limits.for_version(options.fill_missing);
        let base = view.clone();
        let planned = tokio::task::spawn_blocking(move || {
            plan(&base.hierarchy, doc, &|url| entries.iter().any(|e| url.starts_with(&e.prefix)), max_tile, &limits)
        })
        .await?;
        let plan = match planned {
            Ok(plan) => plan,
            Err(Rejected::Invalid(problems)) => return Err(invalid(name, problems)),
            Err(Rejected::Scratch(e)) => return Err(ingest::scratch_error(e)),
        };

        let base_tiles = self.reader.tiles(&head).await?;
        let tiles_of =
            |node: &str| base_tiles.iter().filter(move |(n, _)| n == node).map(|(_, t)| *t).collect::<Vec<u64>>();
        let load = |node: String, tile: u64| {
            let (view, head) = (&view, &head);
            async move {
                let node =
                    view.hierarchy.node(&node).ok_or_else(|| Error::Internal(format!("no node {node} in the base")))?;
                self.reader.load_block(head, node, tile).await
            }
        };
        let mut delta = Delta::default();
        let mut blocks = Vec::new();
        let mut dropped_nodes = Vec::new();
        let mut dropped_tiles = Vec::new();
        for path in &plan.removed {
            for tile in tiles_of(path.as_str()) {
                delta.add(&load(path.as_str().to_owned(), tile).await?, -1);
            }
            dropped_nodes.push(path.as_str().to_owned());
        }
        let mut problems = Vec::new();
        // A rebuild holds every old reference of the array at once (its coordinates and owned
        // strings: about 300 bytes each); past what one registration may hold, PUT (which streams)
        // is the way.
        let rebuild_limit =
            usize::try_from(self.settings.ingest.memory_bytes / REBUILD_BYTES_PER_REF).unwrap_or(usize::MAX);
        for array in &plan.arrays {
            let node = array.path.as_str();
            if array.rebuild {
                let mut old = Vec::new();
                if let Some(base_layout) = &array.base {
                    for tile in tiles_of(node) {
                        let block = load(node.to_owned(), tile).await?;
                        delta.add(&block, -1);
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
                    dropped_nodes.push(node.to_owned());
                }
                match plan.rebuild_blocks(array, old) {
                    Ok(rebuilt) => {
                        for (tile, block) in rebuilt {
                            delta.add(&block, 1);
                            blocks.push((node.to_owned(), tile, block.encode()));
                        }
                    }
                    Err(list) => problems.extend(list),
                }
            } else {
                let stored: BTreeSet<u64> = tiles_of(node).into_iter().collect();
                let touched: BTreeSet<u64> = array.changes.iter().map(|(loc, _)| loc.tile).collect();
                for tile in touched {
                    let base_block = match stored.contains(&tile) {
                        true => Some(load(node.to_owned(), tile).await?),
                        false => None,
                    };
                    let block = plan.patch_block(array, tile, base_block.as_ref());
                    if let Some(b) = &base_block {
                        delta.add(b, -1);
                        dropped_tiles.push((node.to_owned(), tile));
                    }
                    delta.add(&block, 1);
                    if !block.is_empty() {
                        blocks.push((node.to_owned(), tile, block.encode()));
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(invalid(name, problems));
        }
        let base_urls: BTreeSet<String> = base_sources.into_keys().collect();
        let summary = summarise(&record.summary, &plan, &delta, &base_urls);
        let derived = DerivedVersion {
            base: head.id,
            nodes: &plan.nodes,
            dropped_nodes,
            dropped_tiles,
            blocks,
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
}

/// Memory a rebuilt array's old reference takes while it is laid out again (coordinates, URL and
/// ETag strings, the builder's copy), for the limit `ingest.memory_bytes` sets.
const REBUILD_BYTES_PER_REF: u64 = 300;

/// A source the base version already reads keeps the facts recorded for it: its stored chunks
/// are conditional on that ETag, and new chunks from it must be too. A source that changed since
/// is a problem: the chunks already stored would fail with `source-modified` (or, had the facts
/// been replaced, be served from bytes they were not registered against).
fn keep_source_facts(doc: &mut Document, base: &BTreeMap<String, SourceFacts>, version: i64) {
    for url in doc.urls.all() {
        let Some(then) = base.get(url) else { continue };
        match doc.sources.get(url) {
            Some(now) if then.contradicted_by(now) => doc.problems.push(format!(
                "{url} changed since version {version} was registered (ETag {} and {} bytes then, ETag {} and {} \
                 bytes now): the chunks the store already reads from it would fail; register the whole store \
                 again with PUT",
                then.etag.as_deref().unwrap_or("unknown"),
                then.size.map_or("unknown".into(), |s| s.to_string()),
                now.etag.as_deref().unwrap_or("unknown"),
                now.size.map_or("unknown".into(), |s| s.to_string()),
            )),
            _ => {
                doc.sources.insert(url.clone(), then.clone());
            }
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
    s.chunks.missing = grid_chunks.saturating_sub(s.chunks.virtual_ + s.chunks.inline);
    s
}

//! The write path of store versions: a registration takes its turn, reads the document,
//! records its sources' facts, validates it, writes it as a new version and settles the store
//! (retention, caches). PATCH (`patch.rs`) follows the same skeleton; deletion ends here too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::facts;
use super::ingest::{self, Body, Format};
use super::read::{Reader, time_catalog};
use crate::catalog::{Catalog, Expected, FileRows, VersionHead, VersionOptions};
use crate::config::{FilesConfig, IngestConfig, LimitsConfig, RetentionConfig};
use crate::metrics::Metrics;
use crate::sources::SourceRegistry;
use crate::zarr::Limits;
use crate::zarr::document::Document;
use crate::zarr::metadata::{NodeKind, ValidNode};
use crate::zarr::portable;
use crate::zarr::spill::Scratch;
use crate::zarr::validate::{Rejected, Summary, validate_tiled};

/// What registrations are allowed, from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The largest document accepted (`http.max_body_bytes`).
    pub max_body_bytes: u64,
    /// The largest number of chunk references in one stored block.
    pub block_chunks: u32,
    /// Memory, scratch space and concurrency of registrations.
    pub ingest: IngestConfig,
    /// Which old versions are kept.
    pub retention: RetentionConfig,
    /// Sources asked for their facts at once.
    pub verify_concurrency: usize,
    /// New stores answer missing chunks with fill chunks unless told otherwise.
    pub fill_missing_by_default: bool,
    /// What one version may hold.
    pub limits: LimitsConfig,
    /// How files are read for `?format=files`.
    pub files: FilesConfig,
}

impl Settings {
    /// The scratch space of one registration (`ingest.memory_bytes` in memory, then
    /// `ingest.scratch_dir`).
    pub fn scratch(&self) -> Scratch {
        let dir = (!self.ingest.scratch_dir.is_empty()).then(|| std::path::PathBuf::from(&self.ingest.scratch_dir));
        Scratch::new(usize::try_from(self.ingest.memory_bytes).unwrap_or(usize::MAX), dir)
    }

    /// The bounds of a new version that answers missing chunks with fill-value chunks or not.
    pub fn limits(&self, fill_missing: bool) -> Limits {
        let limits = &self.limits;
        Limits {
            max_nodes: limits.max_nodes,
            max_depth: limits.max_depth,
            max_metadata_bytes: limits.max_metadata_bytes,
            max_fill_chunk_bytes: fill_missing.then_some(limits.max_fill_chunk_bytes),
        }
    }
}

/// The write service.
pub struct Registrar {
    pub(super) catalog: Arc<dyn Catalog>,
    pub(super) sources: Arc<SourceRegistry>,
    pub(super) reader: Arc<Reader>,
    pub(super) metrics: Metrics,
    pub(super) settings: Settings,
    /// Turns of registrations (PUT, PATCH), `ingest.max_concurrent` of them.
    registrations: tokio::sync::Semaphore,
    /// Files being parsed, `files.max_parses` of them (before their registration's turn).
    pub(super) parses: Arc<tokio::sync::Semaphore>,
    /// Held (written) while a registration's new parses are being remembered, after its answer:
    /// a registration through this replica waits for them (reading) before it looks its files
    /// up, so that it finds what the one before parsed.
    pub(super) remembering: Arc<tokio::sync::RwLock<()>>,
    /// Held shared by registrations from validation to commit, exclusively by a change to the
    /// object stores: a store is never written against object stores removed meanwhile.
    object_store_changes: tokio::sync::RwLock<()>,
    /// Registrations from files under way on this replica, for the command line's progress bar.
    pub(super) progress: super::files::progress::Progress,
}

/// A registration's turn: one of `ingest.max_concurrent`, with the object stores held still.
pub struct Turn<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    _object_stores: tokio::sync::RwLockReadGuard<'a, ()>,
}

/// How a document is to be registered.
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    /// Its format, when the request says (else detected).
    pub format: Option<Format>,
    /// Missing chunks answered with fill chunks (`Some(true)`), 404 (`Some(false)`), or as the
    /// store does now (a new store: `http.missing_chunks`).
    pub fill_missing: Option<bool>,
    /// Arrays whose codecs are not portable served transcoded (`Some(true)`), as they are
    /// (`Some(false)`), or as the store does now (a new store: as they are).
    pub portable: Option<bool>,
    /// Ask every source for its facts.
    pub verify: bool,
    /// Record the sources' facts as they are now, in place of those the document declares
    /// (the recovery after a source was rewritten in place with the same bytes where the
    /// references point); every reference is still checked against the sizes found.
    pub record_sources: bool,
    /// Write only if the store's current version is as expected (`If-Match`, `If-None-Match`).
    pub expected: Option<Expected>,
}

impl Registration {
    /// A registration that asks for nothing: served as the store is now, its sources' facts
    /// asked for (a rescan, a sync).
    pub fn as_now() -> Self {
        Self { format: None, fill_missing: None, portable: None, verify: true, record_sources: false, expected: None }
    }
}

/// How a new version is served, as asked or as the current one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serving {
    /// Missing chunks are answered with fill chunks.
    pub fill_missing: bool,
    /// Arrays whose codecs are not portable are served transcoded.
    pub portable: bool,
}

/// How a read document is to be stored.
pub(super) struct Storing {
    /// Its format's name, for messages.
    pub format: &'static str,
    /// Ask every source for its facts now.
    pub record_facts: bool,
    /// Replace the document's declared facts by those found now (else they must agree).
    pub rerecord: bool,
    /// The sources' facts were asked for (now or by the caller).
    pub verified: bool,
    /// Missing chunks are answered with fill chunks.
    pub fill_missing: bool,
    /// Arrays whose codecs are not portable are served transcoded.
    pub portable: bool,
    /// Time spent reading the document.
    pub read_seconds: f64,
    /// Where the version comes from (JSON text), when not from a document sent.
    pub origin: Option<String>,
    /// The files it was read from, when made from files: kept as rows of their own.
    pub files: Option<FileRows>,
    /// Write nothing when the current version has the same origin.
    pub unless_same_origin: bool,
    /// Write only if the store's current version is as expected.
    pub expected: Option<Expected>,
    /// What the summary must say was left out (a file's variables a parser could not serve).
    pub warnings: Vec<String>,
}

/// A version written.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The new, now current, version.
    pub head: VersionHead,
    /// True when the store did not exist before.
    pub created: bool,
    /// True when nothing was written: the current version already served what was asked (a
    /// sync of a branch that had not moved); `head` is that version.
    pub unchanged: bool,
    /// When the store was first registered, unix milliseconds.
    pub store_created_at_ms: i64,
    /// Its counts.
    pub summary: Summary,
}

impl Registrar {
    /// A registrar writing to `catalog`, checking URLs against `sources`, forgetting what
    /// `reader` cached of the stores it changes.
    pub fn new(
        catalog: Arc<dyn Catalog>,
        sources: Arc<SourceRegistry>,
        reader: Arc<Reader>,
        metrics: Metrics,
        settings: Settings,
    ) -> Self {
        Self {
            registrations: tokio::sync::Semaphore::new(settings.ingest.max_concurrent.max(1) as usize),
            parses: Arc::new(tokio::sync::Semaphore::new(settings.files.max_parses.max(1))),
            remembering: Arc::new(tokio::sync::RwLock::new(())),
            object_store_changes: tokio::sync::RwLock::new(()),
            progress: super::files::progress::Progress::default(),
            catalog,
            sources,
            reader,
            metrics,
            settings,
        }
    }

    /// A registration's turn: it waits up to `ingest.queue_seconds` while `ingest.max_concurrent`
    /// others run (each may hold `ingest.memory_bytes`), then gives up with [`Error::Busy`].
    pub async fn turn(&self) -> Result<Turn<'_>> {
        let wait = Duration::from_secs(self.settings.ingest.queue_seconds);
        let turn = async {
            let permit = self.registrations.acquire().await.ok()?;
            let object_stores = self.object_store_changes.read().await;
            Some(Turn { _permit: permit, _object_stores: object_stores })
        };
        match tokio::time::timeout(wait, turn).await {
            Ok(Some(turn)) => Ok(turn),
            _ => Err(Error::Busy(self.settings.ingest.max_concurrent)),
        }
    }

    /// The right to change the object stores, once no registration is validating against them
    /// (waits up to `ingest.queue_seconds`, then [`Error::Busy`]).
    pub(super) async fn object_store_change(&self) -> Result<tokio::sync::RwLockWriteGuard<'_, ()>> {
        let wait = Duration::from_secs(self.settings.ingest.queue_seconds);
        tokio::time::timeout(wait, self.object_store_changes.write())
            .await
            .map_err(|_| Error::Busy(self.settings.ingest.max_concurrent))
    }

    /// Registers `body` as the new current version of store `name`, atomically: the store is
    /// left exactly as it was when anything is wrong with the document.
    pub async fn register(&self, name: &str, body: Body, how: Registration) -> Result<Registered> {
        let Serving { fill_missing, portable } = self.serving(name, how).await?;
        let _turn = self.turn().await?;
        let scratch = self.settings.scratch();
        let reading = Instant::now();
        let (doc, format) = ingest::read_document(body, self.settings.max_body_bytes, how.format, &scratch).await?;
        let read_seconds = reading.elapsed().as_secs_f64();
        let stored = Storing {
            format: format.name(),
            record_facts: how.verify || how.record_sources,
            rerecord: how.record_sources,
            verified: how.verify || how.record_sources,
            fill_missing,
            portable,
            read_seconds,
            origin: None,
            files: None,
            unless_same_origin: false,
            expected: how.expected,
            warnings: Vec::new(),
        };
        self.store_document(name, doc, stored).await
    }

    /// How a new version of `name` is served (missing chunks, codecs): as `how` asks, else as
    /// the current version is. A routine re-registration must not turn the fill-value chunks a
    /// CDN relies on back into 404s, nor the portable chunks a GDAL reader relies on back into
    /// shuffled ones.
    pub(super) async fn serving(&self, name: &str, how: Registration) -> Result<Serving> {
        let current = match (how.fill_missing, how.portable) {
            (Some(_), Some(_)) => None,
            _ => self.catalog.current_version(name).await?,
        };
        Ok(Serving {
            fill_missing: how
                .fill_missing
                .or(current.as_ref().map(|c| c.fill_missing))
                .unwrap_or(self.settings.fill_missing_by_default),
            portable: how.portable.or(current.as_ref().map(|c| c.portable)).unwrap_or(false),
        })
    }

    /// Records the facts of `doc`'s sources (as `how` says), validates it and writes it as the
    /// new current version of `name`.
    pub(super) async fn store_document(&self, name: &str, mut doc: Document, how: Storing) -> Result<Registered> {
        if how.record_facts {
            facts::record(&self.sources, self.settings.verify_concurrency, &mut doc, how.rerecord).await;
        }
        facts::resolve_whole_objects(&self.sources, &mut doc, how.verified).await;
        let entries = self.sources.entries();
        let tile_chunks = u64::from(self.settings.block_chunks);
        let fill_missing = how.fill_missing;
        let limits = self.settings.limits(fill_missing);
        let validating = Instant::now();
        let validated = tokio::task::spawn_blocking(move || {
            validate_tiled(doc, &|url| entries.iter().any(|e| url.starts_with(&e.prefix)), tile_chunks, &limits)
        })
        .await?;
        let mut store = match validated {
            Ok(store) => store,
            Err(Rejected::Scratch(e)) => return Err(ingest::scratch_error(e)),
            Err(Rejected::Invalid(problems)) => {
                self.metrics.registrations_total.with_label_values(&["rejected"]).inc();
                let title = format!(
                    "the {} manifest for store {name:?} has {} problem(s); nothing was changed",
                    how.format,
                    problems.len()
                );
                tracing::info!(store = %name, problems = problems.len(), first = %problems[0], "registration rejected");
                return Err(Error::Invalid { title, problems });
            }
        };
        let validate_seconds = validating.elapsed().as_secs_f64();
        store.summary.warnings.splice(0..0, how.warnings);
        if how.portable {
            portable_summary(&store.nodes, &mut store.summary);
        }
        let started = Instant::now();
        let options = VersionOptions {
            fill_missing,
            portable: how.portable,
            origin: how.origin,
            unless_same_origin: how.unless_same_origin,
            expected: how.expected,
            files: how.files,
        };
        let written = self.catalog.write_version(name, &store, options).await?;
        time_catalog(&self.metrics, "write_version", started);
        if written.unchanged {
            tracing::info!(store = %name, version = written.head.id, "already current: nothing written");
        } else {
            self.settle(name).await;
            let outcome = if written.created { "created" } else { "replaced" };
            self.metrics.registrations_total.with_label_values(&[outcome]).inc();
            tracing::info!(store = %name, version = written.head.id, outcome, format = how.format,
                chunks = store.summary.chunks.virtual_ + store.summary.chunks.inline,
                seconds = started.elapsed().as_secs_f64(), read_seconds = how.read_seconds, validate_seconds,
                blocks = store.block_count(), spilled_to_disk = store.spilled(), "store registered");
        }
        Ok(Registered {
            store_created_at_ms: written.head.created_at_ms,
            head: written.head,
            created: written.created,
            unchanged: written.unchanged,
            summary: store.summary,
        })
    }

    /// Deletes store `name` with all its versions; false if there was none.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let deleted = self.catalog.delete_store(name).await?;
        self.reader.forget_store(name).await;
        if deleted {
            tracing::info!(store = %name, "store deleted");
        }
        Ok(deleted)
    }
}

/// Counts the arrays of `store` served transcoded to portable codecs, and warns of those that
/// cannot be (served with their own codecs).
pub(super) fn portable_summary(nodes: &[ValidNode], summary: &mut Summary) {
    let mut warnings = Vec::new();
    let mut transcoded = 0;
    // A transcoded array needs no plugin: the warnings that say it does are dropped.
    let mut plugin_free = Vec::new();
    for node in nodes {
        let NodeKind::Array(layout) = &node.kind else { continue };
        match portable::served(&node.metadata(), layout.grid.chunk_shape(), 1) {
            Ok(None) => {}
            Ok(Some(_)) => {
                transcoded += 1;
                plugin_free.push(format!("array {:?}: codec ", node.path.as_str()));
            }
            Err(why) => warnings.push(format!(
                "array {:?} is served with its own codecs, not portable ones: {why}",
                node.path.as_str()
            )),
        }
    }
    summary.transcoded_arrays = transcoded;
    summary.warnings.retain(|w| !plugin_free.iter().any(|p| w.starts_with(p.as_str())));
    summary.warnings.extend(warnings);
    crate::zarr::codecs::cap(&mut summary.warnings);
}

//! Stores made from files (`PUT /api/v1/stores/{store}?format=files`): each file's structure is
//! read through the registered object store it lies under (`files/remote.rs`), by the parser
//! its first bytes (or a DMR++ sidecar beside it) call for (`crate::formats`), and the hierarchy
//! found is written as a new version exactly as a native manifest would be.

mod combine;
mod coordinate;
mod listing;
mod origin;
mod parsed;
pub mod progress;
mod read;
mod remote;
mod rescan;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use self::combine::{Combine, CombineError};
pub use self::listing::{Prefix, Scan};
pub use self::origin::{FileRecord, Origin, OriginPage};
use self::read::{ReadFile, read_file};
pub use self::remote::{ReadCost, RemoteFile};
pub use self::rescan::{Changes, Rescanned};
use super::error::{Error, Result};
use super::ingest;
use super::register::{Registered, Registrar, Registration, Serving, Storing};
use crate::catalog::FileRows;
use crate::formats::{Chunk, Parsed, Parser};
use crate::sources::SourceRegistry;
use crate::zarr::assembled::PieceSource;
use crate::zarr::document::{DocNode, Document};
use crate::zarr::manifest::{RawManifest, RawRef, normalize_source_url};
use crate::zarr::source::SourceFacts;
use crate::zarr::spill::{Scratch, SpillLog};

/// What a registration asks for: `{"files": [URL, ...] | {"prefix": URL, "glob": GLOB},
/// "parser": "auto"|"hdf5"|"netcdf3"|"dmrpp"|"tiff", "combine": {...}, "follow_seconds": N,
/// "older_than_seconds": N}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The files, as URLs under registered object stores.
    pub files: Files,
    /// Which parser reads them (default `auto`: a DMR++ sidecar if there is one, else the
    /// format the file's first bytes show).
    pub parser: Option<String>,
    /// How several files make one hierarchy.
    pub combine: Option<Value>,
    /// Rescan a prefix every this many seconds (not a list: it names its files once for all).
    pub follow_seconds: Option<u64>,
    /// Skip objects modified more recently than this.
    pub older_than_seconds: Option<u64>,
    /// `portable` or `as-is`, as the `codecs` query parameter says (either suffices).
    pub codecs: Option<String>,
}

/// The files of a registration.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
pub enum Files {
    /// URLs, in order.
    List(Vec<String>),
    /// Every object under a prefix that matches a glob.
    Prefix(PrefixRequest),
}

/// `"files": {"prefix": URL, "glob": GLOB}` as sent (a key misspelt is refused, not ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixRequest {
    /// Objects whose URL starts with this.
    pub prefix: String,
    /// Only those whose key after the prefix matches this glob (default: every object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
}

impl TryFrom<Value> for Files {
    type Error = String;

    /// A list of URLs, or a prefix and a glob, with what is wrong named (a misspelt key too).
    fn try_from(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Array(_) => serde_json::from_value(value)
                .map(Files::List)
                .map_err(|e| format!("\"files\" as a list is a list of URLs: {e}")),
            Value::Object(_) => serde_json::from_value(value)
                .map(Files::Prefix)
                .map_err(|e| format!("\"files\" as a prefix is {{\"prefix\": URL, \"glob\": GLOB}}: {e}")),
            other => Err(format!("\"files\" is {other}: a list of URLs, or {{\"prefix\": URL, \"glob\": GLOB}}")),
        }
    }
}

/// The parser a registration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// A DMR++ sidecar if there is one, else the format the file's first bytes show.
    Auto,
    /// This parser, whatever the file.
    Only(Parser),
}

/// A registration's files, checked.
#[derive(Debug, Clone)]
pub struct Target {
    /// The files' normalised URLs (empty when `prefix` names them).
    pub files: Vec<String>,
    /// The objects under a prefix, listed when the registration runs.
    pub prefix: Option<Prefix>,
    /// How several files make one hierarchy, and the spec as given (kept in the origin).
    pub combine: Option<(Combine, Value)>,
    /// The parser asked for.
    pub choice: Choice,
    /// Rescan the prefix every this many seconds.
    pub follow_seconds: Option<u64>,
    /// Files modified less than this many seconds ago are left out of every scan.
    pub older_than_seconds: Option<u64>,
}

/// A refusal naming what is wrong, nothing stored.
pub(super) fn invalid(problem: String) -> Error {
    Error::Invalid { title: format!("{problem}; nothing was changed"), problems: vec![problem] }
}

impl Request {
    /// The target, or what is wrong with the request.
    pub fn target(self) -> Result<Target> {
        let choice = match self.parser.as_deref() {
            None | Some("auto") => Choice::Auto,
            Some(name) => Choice::Only(Parser::from_name(name).ok_or_else(|| {
                Error::BadRequest(format!(
                    "parser {name:?} is not one this server has: use auto, hdf5 (HDF5 and netCDF4), netcdf3, dmrpp, tiff, fits or grib (GRIB2); \
                     nothing was changed"
                ))
            })?),
        };
        if self.follow_seconds == Some(0) {
            return Err(Error::BadRequest(
                "\"follow_seconds\" is 0: give the seconds between two rescans of the prefix (at least 1), or leave \
                 it out; nothing was changed"
                    .into(),
            ));
        }
        let combine = match self.combine {
            None => None,
            Some(spec) => Some((
                Combine::from_json(&spec).map_err(|e| Error::BadRequest(format!("{e}; nothing was changed")))?,
                spec,
            )),
        };
        let normalized = |url: &str, what: &str| {
            normalize_source_url(url)
                .map_err(|e| Error::BadRequest(format!("{what} {url:?}: {e}; nothing was changed")))
        };
        let (files, prefix) = match self.files {
            Files::List(files) => {
                if self.follow_seconds.is_some() {
                    return Err(Error::BadRequest(
                        "\"follow_seconds\" rescans a prefix (\"files\": {\"prefix\": URL, \"glob\": GLOB}) for new \
                         or changed objects; a list names its files once for all (POST /api/v1/stores/{store}/sync \
                         checks them again); nothing was changed"
                            .into(),
                    ));
                }
                if files.is_empty() {
                    return Err(Error::BadRequest("\"files\" lists no file; nothing was changed".into()));
                }
                let files = files.iter().map(|url| normalized(url.as_str(), "file")).collect::<Result<Vec<_>>>()?;
                several_need_combine(files.len(), combine.is_some())?;
                (files, None)
            }
            Files::Prefix(PrefixRequest { prefix, glob }) => {
                (Vec::new(), Some(Prefix::new(normalized(prefix.as_str(), "prefix")?, glob)?))
            }
        };
        let (follow_seconds, older_than_seconds) = (self.follow_seconds, self.older_than_seconds);
        Ok(Target { files, prefix, combine, choice, follow_seconds, older_than_seconds })
    }
}

/// Refuses several files without `combine`.
pub(super) fn several_need_combine(count: usize, combine: bool) -> Result<()> {
    if count > 1 && !combine {
        return Err(invalid(format!(
            "{count} files were given without \"combine\": several files make one store only when \"combine\" says \
             how (\"join\": \"existing\" concatenates them along a dimension, \"new\" stacks them along a new one, \
             \"union\" puts their variables side by side)"
        )));
    }
    Ok(())
}

impl Registrar {
    /// Reads the files `target` names and writes their hierarchy as the new current version
    /// of store `name`.
    pub async fn register_files(&self, name: &str, target: &Target, how: Registration) -> Result<Registered> {
        let serving = self.serving(name, how).await?;
        let reading = Instant::now();
        let mut scan = target.scan(&self.sources, &self.settings.files, false, &[]).await?;
        let tracked = self.progress.start(name, scan.files.len() as u64);
        let listed = reading.elapsed();
        let listing = std::mem::take(&mut scan.files);
        let mut folder = Folder::new(&self.settings.scratch(), target);
        folder.fits(&listing)?;
        self.read_files(target, listing, Vec::new(), &tracked.counts, &mut folder).await?;
        let read = reading.elapsed();
        let count = folder.count;
        let _turn = self.turn().await?;
        let built = folder.finish(&self.sources, target, &scan).await?;
        let joined = reading.elapsed();
        let registered = self.store_files(name, built, serving, reading, how.expected).await?;
        // Where a registration's time goes: listing (or naming) the files, reading them (parsed,
        // or their parses looked up, and joined as they come), finishing the join (the
        // coordinate, the seam at its end), storing.
        tracing::info!(store = %name, files = count, list_seconds = listed.as_secs_f64(),
            read_seconds = (read - listed).as_secs_f64(), build_seconds = (joined - read).as_secs_f64(),
            store_seconds = (reading.elapsed() - joined).as_secs_f64(), "files registered: phases");
        Ok(registered)
    }

    /// Where a registration (or rescan) of store `name` from files under way on this replica
    /// stands, if one is.
    pub fn progress(&self, name: &str) -> Option<progress::Snapshot> {
        self.progress.get(name)
    }

    /// Reads the files a scan found (`listing`: their parses remembered in the catalog), in
    /// order, each handed to `folder` as it comes; those `unchanged` since they were read for
    /// the version rescanned (their records, one slot a file of the listing, URLs left out) are
    /// served from their parse remembered, with no request, when it can be; the URLs of those
    /// that had to be read again and were found changed since (their record's facts not those
    /// read) are returned. They are read before the registration's turn (held while the
    /// document is checked and stored): they wait on the object store, and are bounded by
    /// themselves.
    async fn read_files(
        &self,
        target: &Target,
        listing: Vec<(String, Option<SourceFacts>)>,
        mut unchanged: Vec<Option<FileRecord>>,
        counts: &Arc<progress::Counts>,
        folder: &mut Folder,
    ) -> Result<Vec<String>> {
        let config = &self.settings.files;
        let choice = target.choice;
        // What the registrations before this one parsed is in the catalog by now.
        drop(self.remembering.read().await);
        // A file the listing describes, read by a parser named, may have been parsed before (by
        // any store or replica): its parse is then looked up with the listed facts, no request
        // made. (Under `auto`, a DMR++ sidecar that appeared since could be missed: not there.)
        let listed = |url: &str, facts: &Option<SourceFacts>| match (choice, facts) {
            (Choice::Only(p), Some(facts)) if p != Parser::Dmrpp => Some(FileRecord {
                url: url.to_owned(),
                parser: p.name().to_owned(),
                sidecar: None,
                facts: facts.clone(),
                bytes_read: 0,
                requests: 0,
                cached: true,
            }),
            _ => None,
        };
        let mut listing = draining(listing).enumerate().map(|(i, (url, facts))| {
            let known = unchanged.get_mut(i).and_then(Option::take);
            let record = known.map(|r| FileRecord { url: url.clone(), ..r }).or_else(|| listed(&url, &facts));
            (url, record)
        });
        // The parses of the files known unchanged, looked up a batch at a time (a rescan of
        // 10,000 files and one new one looked each up alone: that was its time; all at once,
        // they were all held at once), the next batch's while this one's are read.
        let lookup = |batch: &[(String, Option<FileRecord>)]| {
            let (known, keys): (Vec<usize>, Vec<_>) = batch
                .iter()
                .enumerate()
                .filter_map(|(i, (_, record))| read::reuse_key(config, record.as_ref()?, choice).map(|key| (i, key)))
                .unzip();
            let (catalog, count) = (Arc::clone(&self.catalog), batch.len());
            tokio::spawn(async move {
                let mut remembered: Vec<Option<(String, Parsed)>> = (0..count).map(|_| None).collect();
                if keys.is_empty() {
                    return remembered;
                }
                for (i, found) in known.into_iter().zip(parsed::ParseKey::get_many(&*catalog, &keys).await) {
                    remembered[i] = found;
                }
                remembered
            })
        };
        let interner = Arc::new(parsed::Interner::default());
        let mut changed = Vec::new();
        // The new parses are remembered beside the registration, not before its answer, a
        // batch at a time: held until the end, 100,000 of them took 60 MB.
        let mut new_parses = Vec::new();
        let mut batch: Vec<_> = listing.by_ref().take(READ_BATCH).collect();
        let mut found = lookup(&batch);
        while !batch.is_empty() {
            let next: Vec<_> = listing.by_ref().take(READ_BATCH).collect();
            let next_found = lookup(&next);
            let remembered = found.await.map_err(|e| Error::Internal(format!("looking up remembered parses: {e}")))?;
            let reads = batch.into_iter().zip(remembered).map(|((url, unchanged), remembered)| {
                let (sources, metrics, config) = (Arc::clone(&self.sources), self.metrics.clone(), config.clone());
                let catalog = Arc::clone(&self.catalog);
                let (parses, counts, interner) = (Arc::clone(&self.parses), Arc::clone(counts), Arc::clone(&interner));
                async move {
                    // Parses read back together already share their metadata (`parsed::decode`).
                    let then = match (unchanged, remembered) {
                        (Some(record), Some((label, parsed))) => {
                            counts.read_one(true);
                            return Ok::<_, Error>((read::reused(&metrics, &record, &label, parsed), false));
                        }
                        (record, _) => record.map(|r| r.facts),
                    };
                    let _parse = parses.acquire_owned().await.map_err(|e| Error::Internal(e.to_string()))?;
                    let mut file = read_file(&*catalog, &sources, &metrics, &config, &url, choice).await?;
                    interner.intern(&mut file.parsed);
                    counts.read_one(file.record.cached);
                    // Listed unchanged, but changed by the time it was read.
                    let unlike = then.is_some_and(|then| !rescan::same_content(&then, &file.record.facts));
                    Ok((file, unlike))
                }
            });
            let mut reads = futures::stream::iter(reads).buffered(config.concurrency.max(1));
            while let Some(file) = reads.next().await {
                let (mut file, unlike): (ReadFile, bool) = file?;
                if unlike {
                    changed.push(file.record.url.clone());
                }
                new_parses.extend(file.remember.take());
                if new_parses.len() >= REMEMBER_BATCH {
                    self.remember(std::mem::take(&mut new_parses)).await;
                }
                folder.add(file)?;
            }
            (batch, found) = (next, next_found);
        }
        self.remember(new_parses).await;
        Ok(changed)
    }

    /// Remembers `new_parses` in the catalog in the background: a registration that starts
    /// after this call waits for them (it reads the lock this holds as it writes).
    async fn remember(&self, new_parses: Vec<(parsed::ParseKey, Vec<u8>)>) {
        if new_parses.is_empty() {
            return;
        }
        let (catalog, writing) = (Arc::clone(&self.catalog), Arc::clone(&self.remembering).write_owned().await);
        tokio::spawn(async move {
            parsed::remember(catalog.as_ref(), &new_parses).await;
            drop(writing);
        });
    }

    /// Stores a document built from files as the new current version of `name` (the
    /// registration's turn held).
    async fn store_files(
        &self,
        name: &str,
        built: Built,
        serving: Serving,
        reading: Instant,
        expected: Option<crate::catalog::Expected>,
    ) -> Result<Registered> {
        let Built { doc, warnings, origin, files } = built;
        let origin = serde_json::to_string(&origin).map_err(|e| Error::Internal(e.to_string()))?;
        let storing = Storing {
            format: "files",
            record_facts: false,
            rerecord: false,
            verified: true,
            fill_missing: serving.fill_missing,
            portable: serving.portable,
            read_seconds: reading.elapsed().as_secs_f64(),
            origin: Some(origin),
            files: Some(files),
            unless_same_origin: false,
            expected,
            warnings,
        };
        self.store_document(name, doc, storing).await
    }

    /// Files `offset..offset + limit` of the origin of store `name`'s current version, if it was
    /// made from files (the others not read).
    pub async fn files_origin(&self, name: &str, offset: usize, limit: usize) -> Result<Option<OriginPage>> {
        let Some(head) = self.catalog.current_version(name).await? else { return Ok(None) };
        let Some(text) = self.catalog.origin(head.id).await? else { return Ok(None) };
        Origin::page(&*self.catalog, head.id, &text, offset, limit).await
    }
}

/// `listing`'s items in order, its buffer shrunk as they are taken: the listing of 100,000
/// files is 9 MB of slots, and the files' state grows as they are read (a `Vec`'s own iterator
/// would hold its whole buffer to the end). Each shrink copies what is left, a quarter of the
/// buffer at most: the copies add up to a third of the listing.
fn draining<T>(listing: Vec<T>) -> impl Iterator<Item = T> {
    let mut listing = std::collections::VecDeque::from(listing);
    std::iter::from_fn(move || {
        let item = listing.pop_front();
        if listing.capacity() > 1024 && listing.len() < listing.capacity() / 4 {
            listing.shrink_to_fit();
        }
        item
    })
}

/// Each file's values of the joined coordinate that its parse held, one after the other: one
/// `Vec` a file took 40 bytes for a value of 8.
#[derive(Default)]
struct HeldValues {
    values: Vec<f64>,
    /// Each file's values in `values`, if it had any.
    spans: Vec<Option<(u32, u32)>>,
}

impl HeldValues {
    /// Adds the next file's values.
    fn push(&mut self, values: Option<&[f64]>) {
        let span = values.and_then(|v| {
            let start = u32::try_from(self.values.len()).ok()?;
            let end = u32::try_from(self.values.len() + v.len()).ok()?;
            self.values.extend_from_slice(v);
            Some((start, end))
        });
        self.spans.push(span);
    }

    /// The values of file `i`, if it had any.
    fn get(&self, i: usize) -> Option<&[f64]> {
        let (start, end) = (*self.spans.get(i)?)?;
        self.values.get(start as usize..end as usize)
    }
}

/// What each file added holds in memory to the end of its registration besides the text of
/// its URL and facts: its URL's entry (a slot, its index, its allocation), its facts' slot and
/// allocations, its part of the joined coordinate; measured (bench/README.md, "Stop 52").
const FILE_BYTES: usize = 400;

/// What each chunk a join holds for a file to its end takes (its grid index and reference).
const CHUNK_BYTES: usize = 120;

/// What a file holds at least to the end of its registration, whatever its parse: its URL, its
/// facts' text and [`FILE_BYTES`].
fn file_floor(url: &str, facts: Option<&SourceFacts>) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    FILE_BYTES + url.len() + facts.map_or(0, |f| text(&f.etag) + text(&f.last_modified))
}

/// `bytes` for a person: in MiB, or KiB below one.
fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 { format!("{} MiB", bytes >> 20) } else { format!("{} KiB", bytes.div_ceil(1024)) }
}

/// New parses remembered together.
const REMEMBER_BATCH: usize = 1000;

/// Files read a batch at a time: their remembered parses looked up together, the next batch's
/// while this one's are read.
const READ_BATCH: usize = 2048;

/// What files make: the document, the warnings for the summary, and the origin to keep with
/// its files' records.
struct Built {
    doc: Document,
    warnings: Vec<String>,
    origin: Origin,
    files: FileRows,
}

/// A registration's document, made from its files as they are read ([`Folder::add`], in order):
/// each file's facts, record and warnings kept, and its hierarchy handed to the document's
/// manifests at once, one file's alone or joined along a dimension in the order read. Only the
/// joins that need every file first (`"order": "coordinate"`, `new`, `union`) hold the files'
/// hierarchies to the end; the others hold, per file, its URL and facts and its part of the
/// joined coordinate. The files' records go to a scratch log on disk as they come.
pub(super) struct Folder {
    doc: Document,
    warnings: Vec<String>,
    /// Each file's record, one line of JSON text each, in order (on disk).
    records: SpillLog,
    /// How many files were added.
    pub count: u64,
    /// Which URL numbers of the document are files added (the others, chunks' other URLs).
    files: Vec<bool>,
    /// Each array's references so far, by path.
    manifests: HashMap<String, RawManifest>,
    how: Fold,
}

/// How a folder makes its files one hierarchy.
enum Fold {
    /// One file, no `combine`: its hierarchy as it is.
    One,
    /// Joined along `dim` in the order read; each file's values of the joined coordinate that
    /// its parse held.
    Existing { join: combine::Existing, dim: String, held: HeldValues },
    /// Every file held to the end, with its held values of the joined dimension's coordinate
    /// (if any).
    Held(Combine, Vec<(String, combine::Nodes, Option<Vec<f64>>)>),
}

impl Folder {
    /// A folder for `target`'s files, its manifests drawing on `scratch`.
    fn new(scratch: &Scratch, target: &Target) -> Self {
        let how = match &target.combine {
            None => Fold::One,
            Some((Combine::Existing { dim, by_coordinate: false }, _)) => {
                Fold::Existing { join: combine::Existing::new(dim), dim: dim.clone(), held: HeldValues::default() }
            }
            Some((combine, _)) => Fold::Held(combine.clone(), Vec::new()),
        };
        let doc = Document::new(scratch);
        // Held, 100,000 records took 40 MB at the registration's peak.
        let records = records_log(scratch);
        Self { doc, warnings: Vec::new(), records, count: 0, files: Vec::new(), manifests: HashMap::new(), how }
    }

    /// The records of the files added, in order.
    fn records(&self) -> impl Iterator<Item = Result<FileRecord>> + '_ {
        use std::io::BufRead;
        self.records.reader().lines().map(|line| {
            let line =
                line.map_err(|e| Error::Internal(format!("reading the files' records back from scratch space: {e}")))?;
            serde_json::from_str(&line).map_err(|e| Error::Internal(format!("a file's record read back: {e}")))
        })
    }

    /// Takes the next file read: its hierarchy joined (or kept, when the join needs every file
    /// first), or why it cannot be (a 422 naming it).
    fn add(&mut self, file: ReadFile) -> Result<()> {
        let ReadFile { parsed, record, .. } = file;
        let Parsed { nodes, warnings, held } = parsed;
        append_record(&mut self.records, &record)?;
        self.count += 1;
        let FileRecord { url, facts, .. } = record;
        self.reserve(&url, &facts, &nodes, &held)?;
        self.warnings.extend(warnings.iter().map(|w| format!("{url}: {w}")));
        let number = self.doc.urls.intern(url.clone());
        self.doc.sources.set(number, facts);
        if self.files.len() <= number as usize {
            self.files.resize(number as usize + 1, false);
        }
        self.files[number as usize] = true;
        let shared = self.doc.urls.shared(number);
        let (doc, manifests) = (&mut self.doc, &mut self.manifests);
        let mut failed = None;
        match &mut self.how {
            Fold::One => place_all(doc, manifests, nodes, number, &mut failed),
            Fold::Existing { join, dim, held: all } => {
                // Copied here, as the join copies what it keeps of the file: see `Existing::push`.
                all.push(held.iter().find(|(path, _)| path == dim).map(|(_, values)| values.as_slice()));
                let mut sink = |path: &str, index: Vec<u64>, chunk: Chunk| {
                    hand(doc, manifests, path, &index, chunk, number, &mut failed);
                };
                join.push(&shared, nodes, &mut sink).map_err(combine_error)?;
            }
            Fold::Held(combine, files) => {
                let dim = match combine {
                    Combine::Existing { dim, .. } => Some(dim.as_str()),
                    _ => None,
                };
                let held = held.into_iter().find(|(path, _)| Some(path.as_str()) == dim).map(|(_, values)| values);
                files.push((url, nodes, held));
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Refuses at once, before any file is read, a listing whose files alone would hold more
    /// than `ingest.memory_bytes` to the end (what each holds at least: [`file_floor`]); what
    /// their parses add is counted as they are read ([`Folder::add`]).
    pub(super) fn fits(&self, listing: &[(String, Option<SourceFacts>)]) -> Result<()> {
        let floor: usize = listing.iter().map(|(url, facts)| file_floor(url, facts.as_ref())).sum();
        let budget = self.doc.scratch.budget();
        if floor <= budget {
            return Ok(());
        }
        Err(invalid(format!(
            "the {} files listed would hold at least {} to the end of the registration (about {} bytes each), past \
             ingest.memory_bytes = {budget}, which bounds a registration's memory: raise it, or register fewer files",
            listing.len(),
            size(floor),
            floor / listing.len().max(1)
        )))
    }

    /// Counts against `ingest.memory_bytes` what the file (`url`, `facts`, its hierarchy
    /// `nodes` and the values its parse `held`) leaves in memory to the end of the
    /// registration (the manifests' logs spill the sooner), or refuses the registration when
    /// that alone passes the bound: memory is bounded by the configuration, whatever the
    /// number of files.
    fn reserve(
        &self,
        url: &str,
        facts: &SourceFacts,
        nodes: &combine::Nodes,
        held: &[(String, Vec<f64>)],
    ) -> Result<()> {
        let mut bytes = file_floor(url, Some(facts));
        let kept = |node: Option<&crate::formats::Node>| node.map_or(0, |n| n.chunks.len()) * CHUNK_BYTES;
        let values = |dim: &str| held.iter().find(|(path, _)| path == dim).map_or(0, |(_, v)| v.len() * 8);
        match &self.how {
            Fold::One => {}
            Fold::Existing { dim, .. } => bytes += kept(nodes.get(dim)) + values(dim),
            Fold::Held(combine, _) => {
                bytes += url.len() + nodes.values().map(|n| kept(Some(n))).sum::<usize>();
                if let Combine::Existing { dim, .. } = combine {
                    bytes += values(dim);
                }
            }
        }
        self.doc.scratch.reserve(bytes).map(drop).map_err(|total| {
            invalid(format!(
                "the {} files read so far ({url} the last) hold about {} to the end of the registration, past \
                 ingest.memory_bytes = {}, which bounds a registration's memory: raise it, or register fewer files",
                self.count,
                size(total),
                self.doc.scratch.budget()
            ))
        })
    }

    /// The document the files make, once all are in: the join finished (the joined
    /// coordinate's values read where it needs them), the warnings (the files left out named
    /// among them) and the origin to keep.
    async fn finish(mut self, sources: &SourceRegistry, target: &Target, scan: &Scan) -> Result<Built> {
        let mut failed = None;
        match std::mem::replace(&mut self.how, Fold::One) {
            Fold::One => {}
            Fold::Existing { join, held, .. } => {
                let parts = match join.coordinate() {
                    Some(parts) => parts
                        .iter()
                        .enumerate()
                        .map(|(i, (url, node))| coordinate::Part {
                            url,
                            facts: self.doc.facts(url),
                            node: Some(node),
                            held: held.get(i),
                        })
                        .collect(),
                    None => Vec::new(),
                };
                let combine = target.combine.as_ref().map(|(c, _)| c);
                let prepared = match combine {
                    Some(combine) if !parts.is_empty() => coordinate::prepare(sources, &parts, combine).await?,
                    _ => coordinate::Prepared::default(),
                };
                drop(parts);
                let (doc, manifests) = (&mut self.doc, &mut self.manifests);
                let mut sink = |path: &str, index: Vec<u64>, chunk: Chunk| {
                    hand(doc, manifests, path, &index, chunk, u32::MAX, &mut failed);
                };
                let nodes = join.finish(prepared.values, &mut sink).map_err(combine_error)?;
                place_all(&mut self.doc, &mut self.manifests, nodes, u32::MAX, &mut failed);
            }
            Fold::Held(combine, files) => {
                let mut files = files;
                let mut values = None;
                if let Combine::Existing { dim, .. } = &combine {
                    let parts: Vec<coordinate::Part<'_>> = files
                        .iter()
                        .map(|(url, nodes, held)| coordinate::Part {
                            url,
                            facts: self.doc.facts(url),
                            node: nodes.get(dim.as_str()),
                            held: held.as_deref(),
                        })
                        .collect();
                    let prepared = coordinate::prepare(sources, &parts, &combine).await?;
                    drop(parts);
                    if let Some(order) = prepared.order {
                        let mut taken: Vec<Option<_>> = files.into_iter().map(Some).collect();
                        files = order.iter().filter_map(|i| taken[*i].take()).collect();
                        self.reorder(&order)?;
                    }
                    values = prepared.values;
                }
                let hierarchies: Vec<combine::File> = files.into_iter().map(|(url, nodes, _)| (url, nodes)).collect();
                let nodes = combine.apply_with(hierarchies, values).map_err(combine_error)?;
                place_all(&mut self.doc, &mut self.manifests, nodes, u32::MAX, &mut failed);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.doc.scratch.check().and_then(|()| self.records.check()).map_err(ingest::scratch_error)?;
        let Folder { doc, mut warnings, records, count, .. } = self;
        let mut all: Vec<String> = scan.skipped.iter().map(|(_, warning)| warning.clone()).collect();
        all.append(&mut warnings);
        Ok(Built { doc, warnings: all, origin: origin(count, target, scan), files: FileRows::new(records) })
    }

    /// The records put in `order` (indices into the order added), as the files were (a join
    /// ordered by coordinate, which holds every file anyway).
    fn reorder(&mut self, order: &[usize]) -> Result<()> {
        let mut lines: Vec<Option<FileRecord>> = self.records().map(|r| r.map(Some)).collect::<Result<_>>()?;
        let mut log = records_log(&self.doc.scratch);
        for record in order.iter().filter_map(|i| lines.get_mut(*i)?.take()) {
            append_record(&mut log, &record)?;
        }
        self.records = log;
        Ok(())
    }
}

/// The files added, by URL number, as a rescan compares them with the version it rescans.
impl rescan::Now for Folder {
    fn len(&self) -> usize {
        self.files.len()
    }
    fn find(&self, url: &str) -> Option<usize> {
        self.doc.urls.number(url).map(|n| n as usize).filter(|n| self.is_file(*n))
    }
    fn is_file(&self, i: usize) -> bool {
        self.files.get(i).copied().unwrap_or(false)
    }
    fn facts(&self, i: usize) -> Option<&SourceFacts> {
        self.doc.sources.of(u32::try_from(i).ok()?)
    }
    fn url(&self, i: usize) -> String {
        self.doc.urls.get(i as u32).to_owned()
    }
}

/// A log for files' records, on disk at once (budget 0: a few hundred KiB in memory) beside
/// `scratch`'s files: they are read back only to be written, or diffed by a rescan.
fn records_log(scratch: &Scratch) -> SpillLog {
    SpillLog::new(&Scratch::new(0, Some(scratch.dir())))
}

/// `record` appended to `log` as one line of JSON text (which escapes every newline).
fn append_record(log: &mut SpillLog, record: &FileRecord) -> Result<()> {
    let mut line = serde_json::to_vec(record).map_err(|e| Error::Internal(e.to_string()))?;
    line.push(b'\n');
    log.append(&line);
    Ok(())
}

/// Every node of `nodes` made a node of the document, the chunks it still carries handed to
/// its manifest first (a chunk at a range lies in the file numbered `file`).
fn place_all(
    doc: &mut Document,
    manifests: &mut HashMap<String, RawManifest>,
    nodes: combine::Nodes,
    file: u32,
    failed: &mut Option<Error>,
) {
    for (path, node) in nodes {
        for (index, chunk) in node.chunks {
            hand(doc, manifests, &path, &index, chunk, file, failed);
        }
        place(doc, manifests, path, &node.metadata);
    }
}

/// A combine error as the registration's (400 for the spec, 422 for the files).
fn combine_error(e: CombineError) -> Error {
    match e {
        CombineError::Spec(why) => Error::BadRequest(format!("{why}; nothing was changed")),
        CombineError::Refused(why) => invalid(why),
    }
}

/// The node at `path` made a node of the document, with the references handed on for it if
/// it is an array.
fn place(
    doc: &mut Document,
    manifests: &mut HashMap<String, RawManifest>,
    path: String,
    metadata: &Map<String, Value>,
) {
    let manifest = (metadata.get("node_type").and_then(Value::as_str) == Some("array"))
        .then(|| manifests.remove(&path).unwrap_or_else(|| doc.new_manifest()));
    doc.nodes.insert(path, DocNode::new(metadata, manifest));
}

/// One chunk of array `path` put in its manifest: a chunk at a range of the file read (numbered
/// `file`), one elsewhere (its URL numbered), inline bytes, or a recipe (each piece checked
/// against what its file was when parsed). The first chunk that cannot be is kept in `failed`.
fn hand(
    doc: &mut Document,
    manifests: &mut HashMap<String, RawManifest>,
    path: &str,
    index: &[u64],
    chunk: Chunk,
    file: u32,
    failed: &mut Option<Error>,
) {
    if failed.is_some() {
        return;
    }
    if !manifests.contains_key(path) {
        manifests.insert(path.to_owned(), doc.new_manifest());
    }
    let Some(manifest) = manifests.get_mut(path) else { return };
    match chunk {
        Chunk::Range { .. } if file == u32::MAX => {
            *failed = Some(Error::Internal(format!("array {path}: a chunk of a joined array names no file")));
        }
        Chunk::Range { offset, length } => manifest.push(index, RawRef::Virtual { url: file, offset, length }),
        Chunk::Elsewhere { url, offset, length } => {
            let number = match doc.urls.number(&url) {
                Some(number) => number,
                None => match normalize_source_url(&url) {
                    Ok(normal) => doc.urls.intern(normal),
                    Err(e) => {
                        *failed = Some(invalid(format!("chunk URL {url:?}: {e}")));
                        return;
                    }
                },
            };
            manifest.push(index, RawRef::Virtual { url: number, offset, length });
        }
        Chunk::Inline(bytes) => manifest.push_inline(index, &bytes),
        Chunk::Assembled(mut recipe) => {
            // Each piece is read checked against what its file was when parsed.
            for piece in &mut recipe.pieces {
                if let PieceSource::Virtual { url, etag, size, .. } = &mut piece.source
                    && let Some(facts) = doc.facts(url)
                {
                    (*etag, *size) = (facts.etag.clone(), facts.size);
                }
            }
            manifest.push_assembled(index, &recipe.encode());
        }
    }
}

/// What a version made from `count` files (their records kept as rows of their own) for
/// `target` keeps of where it comes from.
fn origin(count: u64, target: &Target, scan: &Scan) -> Origin {
    let parser = match target.choice {
        Choice::Auto => "auto".to_owned(),
        Choice::Only(p) => p.name().to_owned(),
    };
    let combine = target.combine.as_ref().map(|(_, spec)| spec.clone());
    let prefix = target
        .prefix
        .as_ref()
        .map(|p| PrefixRequest { prefix: p.url.clone(), glob: p.glob.as_ref().map(|(text, _)| text.clone()) });
    let listed = (prefix.is_none() && !scan.skipped.is_empty()).then(|| target.files.clone());
    Origin {
        files: Vec::new(),
        parser,
        combine,
        prefix,
        listed,
        follow_seconds: target.follow_seconds,
        older_than_seconds: target.older_than_seconds,
        file_rows: Some(count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_drains_in_order_and_gives_its_buffer_back() {
        let listing: Vec<u32> = (0..10_000).collect();
        let mut drained = draining(listing);
        let first: Vec<u32> = drained.by_ref().take(9_000).collect();
        assert_eq!(first, (0..9_000).collect::<Vec<_>>());
        assert_eq!(drained.collect::<Vec<_>>(), (9_000..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn what_the_files_read_hold_is_refused_past_the_memory_bound() {
        let target = Request {
            files: Files::List(vec!["file:///d/a.nc".into()]),
            parser: None,
            combine: None,
            follow_seconds: None,
            older_than_seconds: None,
            codecs: None,
        }
        .target()
        .unwrap();
        let scratch = Scratch::new(1000, None);
        let mut folder = Folder::new(&scratch, &target);
        let file = |i: usize| ReadFile {
            parsed: Parsed::default(),
            record: FileRecord {
                url: format!("file:///d/{i}.nc"),
                parser: "hdf5".into(),
                sidecar: None,
                facts: SourceFacts { size: Some(10), ..SourceFacts::default() },
                bytes_read: 0,
                requests: 0,
                cached: false,
            },
            remember: None,
        };
        folder.add(file(0)).unwrap();
        folder.add(file(1)).unwrap();
        let Err(Error::Invalid { problems, .. }) = folder.add(file(2)) else { panic!("not refused") };
        assert!(
            problems[0].starts_with("the 3 files read so far (file:///d/2.nc the last) hold about 2 KiB")
                && problems[0].contains("past ingest.memory_bytes = 1000"),
            "{problems:?}"
        );
        let listed: Vec<(String, Option<SourceFacts>)> = (0..3).map(|i| (format!("file:///d/{i}.nc"), None)).collect();
        assert!(Folder::new(&scratch, &target).fits(&listed[..2]).is_ok());
        let Err(Error::Invalid { problems, .. }) = Folder::new(&scratch, &target).fits(&listed) else {
            panic!("not refused")
        };
        assert!(problems[0].starts_with("the 3 files listed would hold at least 2 KiB"), "{problems:?}");
    }

    #[test]
    fn held_values_are_each_files_own() {
        let mut held = HeldValues::default();
        held.push(Some(&[1.0, 2.0]));
        held.push(None);
        held.push(Some(&[]));
        held.push(Some(&[3.0]));
        assert_eq!(held.get(0), Some(&[1.0, 2.0][..]));
        assert_eq!(held.get(1), None);
        assert_eq!(held.get(2), Some(&[][..]));
        assert_eq!(held.get(3), Some(&[3.0][..]));
        assert_eq!(held.get(4), None);
    }
}

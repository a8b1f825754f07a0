//! Icechunk repositories as store versions: the snapshot a branch, tag or snapshot id resolves
//! to, read through the registered object store the repository lies under, turned into the
//! document a native manifest would make (every node with the `zarr.json` Icechunk holds; virtual
//! chunks as byte ranges with Icechunk's checksums, inline chunks inline, the repository's own
//! chunk objects as byte ranges of `chunks/{id}`). Formats 1 (Icechunk 1.x) and 2 (Icechunk 2.x)
//! are read with `icechunk-format`, the format crate of the official implementation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use icechunk_format::format_constants::{self, CompressionAlgorithmBin, FileTypeBin, SpecVersionBin};
use icechunk_format::manifest::{Checksum, ChunkPayload, Manifest, ManifestExtents};
use icechunk_format::repo_info::RepoInfo;
use icechunk_format::snapshot::{NodeData, Snapshot};
use icechunk_format::{ManifestId, NodeId, SnapshotId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{Error, Result};
use crate::sources::{SourceError, SourceRegistry};
use crate::zarr::decode::{DecodeError, inflate_zstd};
use crate::zarr::document::{DocNode, Document};
use crate::zarr::manifest::{RawManifest, RawRef, normalize_source_url};
use crate::zarr::source::SourceCheck;
use crate::zarr::spill::Scratch;

/// The largest repository metadata file read (repo info, snapshot, manifest), compressed.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Which snapshot of a repository a store serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reference {
    /// The head of a branch, which moves on sync.
    Branch(String),
    /// A tag, which never moves.
    Tag(String),
    /// A snapshot id, which never moves.
    Snapshot(String),
}

impl Reference {
    /// `branch "main"`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Branch(b) => format!("branch {b:?}"),
            Self::Tag(t) => format!("tag {t:?}"),
            Self::Snapshot(s) => format!("snapshot {s}"),
        }
    }
}

/// What a registration asks for: `{"repository": URL, "branch"|"tag"|"snapshot": ...,
/// "follow_seconds": N}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The repository's root URL.
    pub repository: String,
    /// A branch (the default: `main`).
    pub branch: Option<String>,
    /// A tag.
    pub tag: Option<String>,
    /// A snapshot id.
    pub snapshot: Option<String>,
    /// A branch store re-reads its branch every this many seconds.
    pub follow_seconds: Option<u64>,
}

/// Where a version of an Icechunk store comes from, kept with the version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The repository's root URL (no trailing `/`).
    pub repository: String,
    /// The reference asked for.
    pub reference: Reference,
    /// The snapshot served.
    pub snapshot_id: String,
    /// The repository's format version (1 or 2).
    pub format_version: u8,
    /// A branch store re-reads its branch every this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_seconds: Option<u64>,
}

impl Origin {
    /// As `GET /api/v1/stores/{store}` shows it.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("repository".into(), Value::from(self.repository.clone()));
        let (key, name) = match &self.reference {
            Reference::Branch(b) => ("branch", b),
            Reference::Tag(t) => ("tag", t),
            Reference::Snapshot(s) => ("snapshot", s),
        };
        out.insert(key.into(), Value::from(name.clone()));
        out.insert("snapshot_id".into(), Value::from(self.snapshot_id.clone()));
        out.insert("format_version".into(), Value::from(self.format_version));
        if let Some(s) = self.follow_seconds {
            out.insert("follow_seconds".into(), Value::from(s));
        }
        Value::Object(out)
    }
}

/// A repository to read, checked.
#[derive(Debug, Clone)]
pub struct Target {
    /// The repository's root URL, without a trailing `/`.
    pub repository: String,
    /// The snapshot to serve.
    pub reference: Reference,
    /// How often a branch store follows its branch.
    pub follow_seconds: Option<u64>,
}

impl Request {
    /// The target, or what is wrong with the request.
    pub fn target(self) -> Result<Target> {
        let given = [self.branch.is_some(), self.tag.is_some(), self.snapshot.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(Error::BadRequest(
                "give at most one of \"branch\", \"tag\" and \"snapshot\"; nothing was changed".into(),
            ));
        }
        let reference = match (self.branch, self.tag, self.snapshot) {
            (_, Some(t), _) => Reference::Tag(t),
            (_, _, Some(s)) => {
                if SnapshotId::try_from(s.as_str()).is_err() {
                    return Err(Error::BadRequest(format!(
                        "snapshot {s:?} is not an Icechunk snapshot id (20 characters of Crockford base32, such as \
                         \"1CECHNKREP0F1RSTCMT0\"); nothing was changed"
                    )));
                }
                Reference::Snapshot(s)
            }
            (b, _, _) => Reference::Branch(b.unwrap_or_else(|| "main".into())),
        };
        if let Reference::Branch(name) | Reference::Tag(name) = &reference
            && (name.is_empty() || name.contains('/'))
        {
            return Err(Error::BadRequest(format!(
                "{} is not a valid Icechunk reference name (not empty, no \"/\"); nothing was changed",
                reference.describe()
            )));
        }
        if self.follow_seconds.is_some() && !matches!(reference, Reference::Branch(_)) {
            return Err(Error::BadRequest(format!(
                "\"follow_seconds\" applies to branch stores only: {} never moves; nothing was changed",
                reference.describe()
            )));
        }
        if self.follow_seconds == Some(0) {
            return Err(Error::BadRequest("\"follow_seconds\" must be at least 1; nothing was changed".into()));
        }
        let repository = self.repository.trim_end_matches('/').to_owned();
        let normalized = normalize_source_url(&format!("{repository}/"))
            .map_err(|e| Error::BadRequest(format!("repository {:?}: {e}; nothing was changed", self.repository)))?;
        Ok(Target {
            repository: normalized.trim_end_matches('/').to_owned(),
            reference,
            follow_seconds: self.follow_seconds,
        })
    }
}

/// A refusal naming what is wrong, nothing stored.
fn invalid(problem: String) -> Error {
    Error::Invalid { title: format!("{problem}; nothing was changed"), problems: vec![problem] }
}

/// A repository being read through its object store.
struct Repo<'a> {
    sources: &'a SourceRegistry,
    root: String,
    /// The most bytes one file may inflate to (`limits.max_icechunk_file_bytes`).
    max_inflated: u64,
}

impl Repo<'_> {
    fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.root)
    }

    /// The whole object at `key`, or None when there is none.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let url = self.url(key);
        let facts = match self.sources.head(&url).await {
            Ok(facts) => facts,
            Err(SourceError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = facts.size.unwrap_or(0);
        if size > MAX_FILE_BYTES {
            return Err(invalid(format!("{url} is {size} bytes, more than the {MAX_FILE_BYTES} read of one file")));
        }
        let check = SourceCheck::from_facts(facts.etag.as_deref(), facts.size);
        let fetched = match self.sources.fetch(&url, 0..size, &check).await {
            Ok(fetched) => fetched,
            Err(SourceError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::with_capacity(size as usize);
        let mut body = fetched.body;
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| SourceError::Upstream {
                store: self.sources.resolve(&url).map(|e| e.name.clone()).unwrap_or_default(),
                url: url.clone(),
                detail: e.to_string(),
            })?;
            out.extend_from_slice(&piece);
        }
        Ok(Some(out))
    }

    /// The file at `key` of `kind`, its header checked and its body decompressed: its spec
    /// version and bytes.
    async fn file(&self, key: &str, kind: FileTypeBin) -> Result<Option<(SpecVersionBin, Vec<u8>)>> {
        let Some(bytes) = self.get(key).await? else { return Ok(None) };
        let url = self.url(key);
        let max = self.max_inflated;
        tokio::task::spawn_blocking(move || decode_file(&url, &bytes, kind, max).map(Some)).await?
    }
}

/// The spec version and decompressed body of an Icechunk metadata file, inflated to at most
/// `max_inflated` bytes.
fn decode_file(url: &str, bytes: &[u8], kind: FileTypeBin, max_inflated: u64) -> Result<(SpecVersionBin, Vec<u8>)> {
    if bytes.len() > format_constants::ICECHUNK_SPEC_VERSION_OFFSET
        && bytes.starts_with(format_constants::ICECHUNK_FORMAT_MAGIC_BYTES)
    {
        let version = bytes[format_constants::ICECHUNK_SPEC_VERSION_OFFSET];
        if SpecVersionBin::try_from(version).is_err() {
            return Err(invalid(format!(
                "{url} is in Icechunk format version {version}, which this server does not read (it reads 1 and 2)"
            )));
        }
    }
    let header = format_constants::parse_file_header(bytes)
        .map_err(|e| invalid(format!("{url} is not an Icechunk {kind:?} file: {e}")))?;
    if header.file_type != kind {
        return Err(invalid(format!("{url} is an Icechunk {:?} file, not a {kind:?} file", header.file_type)));
    }
    let body = &bytes[format_constants::ICECHUNK_FILE_HEADER_LEN..];
    let body = match header.compression {
        CompressionAlgorithmBin::Zstd => inflate_zstd(body, max_inflated).map_err(|e| match e {
            DecodeError::TooLarge { .. } => invalid(format!(
                "{url} inflates to more than limits.max_icechunk_file_bytes = {max_inflated} bytes: \
                 refused (raise the bound if this repository is trusted)"
            )),
            e => invalid(format!("{url} cannot be decompressed: {e} (a damaged Icechunk file?)")),
        })?,
        CompressionAlgorithmBin::None => body.to_vec(),
    };
    Ok((header.spec_version, body))
}

/// A snapshot resolved: its id and the repository's format version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The snapshot id.
    pub snapshot: SnapshotId,
    /// The format version of the repository.
    pub version: SpecVersionBin,
}

/// The snapshot `target`'s reference names now: for a format-2 repository from its `repo`
/// file, for format 1 from `refs/`.
pub async fn resolve(sources: &SourceRegistry, target: &Target, max_inflated: u64) -> Result<Resolved> {
    let repo = repo_for(sources, target, max_inflated)?;
    if let Some((version, body)) = repo.file(icechunk_format::REPO_INFO_FILE_PATH, FileTypeBin::RepoInfo).await? {
        let info =
            RepoInfo::from_buffer(body).map_err(|e| invalid(format!("{} cannot be read: {e}", repo.url("repo"))))?;
        let found = match &target.reference {
            Reference::Branch(b) => info.resolve_branch(b).ok(),
            Reference::Tag(t) => info.resolve_tag(t).ok(),
            Reference::Snapshot(s) => {
                let id = SnapshotId::try_from(s.as_str()).map_err(|e| Error::BadRequest(e.into()))?;
                info.find_snapshot(&id).ok().map(|_| id)
            }
        };
        return match found {
            Some(snapshot) => Ok(Resolved { snapshot, version }),
            None => Err(unknown_reference(target, &names_v2(&info, &target.reference))),
        };
    }
    // Format 1: the references are JSON files under refs/, and every repository has `main`.
    let reference_file = |name: &str| format!("refs/{name}/ref.json");
    let snapshot = match &target.reference {
        Reference::Branch(b) => ref_file(&repo, &reference_file(&format!("branch.{b}"))).await?,
        Reference::Tag(t) => {
            let deleted = repo.get(&format!("refs/tag.{t}/ref.json.deleted")).await?.is_some();
            if deleted { None } else { ref_file(&repo, &reference_file(&format!("tag.{t}"))).await? }
        }
        Reference::Snapshot(s) => {
            let id = SnapshotId::try_from(s.as_str()).map_err(|e| Error::BadRequest(e.into()))?;
            repo.get(&format!("snapshots/{s}")).await?.map(|_| id)
        }
    };
    match snapshot {
        Some(snapshot) => Ok(Resolved { snapshot, version: SpecVersionBin::V1 }),
        None if repo.get("refs/branch.main/ref.json").await?.is_none() => Err(invalid(format!(
            "{} holds no Icechunk repository (neither a format-2 \"repo\" file nor a format-1 \"refs/branch.main/ref.json\")",
            target.repository
        ))),
        None => Err(unknown_reference(target, "")),
    }
}

/// The names a format-2 repository has of `reference`'s kind, for the message.
fn names_v2(info: &RepoInfo, reference: &Reference) -> String {
    let names: Vec<String> = match reference {
        Reference::Branch(_) => info.branch_names().map(|n| n.map(|s| format!("{s:?}")).collect()).unwrap_or_default(),
        Reference::Tag(_) => info.tag_names().map(|n| n.map(|s| format!("{s:?}")).collect()).unwrap_or_default(),
        Reference::Snapshot(_) => Vec::new(),
    };
    if names.is_empty() { String::new() } else { format!(" (it has {})", names.join(", ")) }
}

fn unknown_reference(target: &Target, known: &str) -> Error {
    invalid(format!("the Icechunk repository at {} has no {}{known}", target.repository, target.reference.describe()))
}

/// The snapshot id of a format-1 `ref.json`, or None when there is none.
async fn ref_file(repo: &Repo<'_>, key: &str) -> Result<Option<SnapshotId>> {
    #[derive(Deserialize)]
    struct RefData {
        snapshot: String,
    }
    let Some(bytes) = repo.get(key).await? else { return Ok(None) };
    let data: RefData =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("{} cannot be read: {e}", repo.url(key))))?;
    SnapshotId::try_from(data.snapshot.as_str())
        .map(Some)
        .map_err(|e| invalid(format!("{} names snapshot {:?}: {e}", repo.url(key), data.snapshot)))
}

fn repo_for<'a>(sources: &'a SourceRegistry, target: &Target, max_inflated: u64) -> Result<Repo<'a>> {
    if sources.resolve(&format!("{}/", target.repository)).is_none() {
        return Err(invalid(format!(
            "repository {} is not under any registered object store: register one whose URL is a prefix of it",
            target.repository
        )));
    }
    Ok(Repo { sources, root: target.repository.clone(), max_inflated })
}

/// What reading a snapshot made: the document, and the modification times Icechunk recorded
/// for virtual sources (unix seconds), to compare with what their object stores report.
pub struct Read {
    /// The document, as a native manifest would make it.
    pub doc: Document,
    /// Icechunk's `last_modified` checksums, by source URL.
    pub modified_at: BTreeMap<String, u32>,
    /// The origin to keep with the version.
    pub origin: Origin,
}

/// Reads the snapshot `resolved` of `target` into a document drawing on `scratch`, one manifest
/// at a time.
pub async fn read(
    sources: &SourceRegistry,
    target: &Target,
    resolved: &Resolved,
    scratch: &Scratch,
    max_inflated: u64,
) -> Result<Read> {
    let repo = repo_for(sources, target, max_inflated)?;
    let id = resolved.snapshot.to_string();
    let key = format!("{}/{id}", icechunk_format::SNAPSHOTS_FILE_PATH);
    let Some((version, body)) = repo.file(&key, FileTypeBin::Snapshot).await? else {
        return Err(invalid(format!("the Icechunk repository at {} has no snapshot {id}", target.repository)));
    };
    let url = repo.url(&key);
    let snapshot = tokio::task::spawn_blocking(move || {
        Snapshot::from_buffer(version, body).map_err(|e| invalid(format!("{url} cannot be read: {e}")))
    })
    .await??;
    let mut builder = Builder::new(scratch, &target.repository);
    // Which arrays each manifest holds references of, and within which extents.
    let mut manifests: BTreeMap<ManifestId, Vec<(NodeId, ManifestExtents)>> = BTreeMap::new();
    for node in snapshot.iter() {
        let node = node.map_err(|e| invalid(format!("snapshot {id} cannot be read: {e}")))?;
        let path = node.path.to_string();
        let path = path.trim_start_matches('/').to_owned();
        let mut metadata: Map<String, Value> = match serde_json::from_slice(&node.user_data) {
            Ok(Value::Object(m)) => m,
            _ => {
                builder
                    .doc
                    .problems
                    .push(format!("node {path:?}: its zarr.json in snapshot {id} is not a JSON object"));
                continue;
            }
        };
        let manifest = match &node.node_data {
            NodeData::Group => None,
            NodeData::Array { shape, manifests: refs, .. } => {
                // The shape Icechunk holds is the array's (it is updated on resize with zarr.json).
                if metadata.get("shape").is_none() {
                    let dims: Vec<Value> = shape.iter().map(|d| Value::from(d.array_length())).collect();
                    metadata.insert("shape".into(), Value::Array(dims));
                }
                for r in refs {
                    manifests.entry(r.object_id.clone()).or_default().push((node.id.clone(), r.extents.clone()));
                }
                builder.arrays.insert(node.id.clone(), (path.clone(), shape.num_chunks().collect()));
                Some(builder.doc.new_manifest())
            }
        };
        builder.doc.nodes.insert(path.clone(), DocNode::new(&metadata, manifest));
    }
    drop(snapshot);
    for (manifest_id, arrays) in manifests {
        let key = format!("{}/{manifest_id}", icechunk_format::MANIFESTS_FILE_PATH);
        let Some((_, body)) = repo.file(&key, FileTypeBin::Manifest).await? else {
            return Err(invalid(format!(
                "snapshot {id} of the Icechunk repository at {} uses manifest {manifest_id}, which is missing",
                target.repository
            )));
        };
        let url = repo.url(&key);
        builder = tokio::task::spawn_blocking(move || {
            let manifest =
                Arc::new(Manifest::from_buffer(body).map_err(|e| invalid(format!("{url} cannot be read: {e}")))?);
            for (node, extents) in arrays {
                builder.add_manifest(&manifest, &node, &extents).map_err(|e| invalid(format!("{url}: {e}")))?;
            }
            Ok::<_, Error>(builder)
        })
        .await??;
    }
    let Builder { doc, modified_at, .. } = builder;
    let origin = Origin {
        repository: target.repository.clone(),
        reference: target.reference.clone(),
        snapshot_id: id,
        format_version: resolved.version as u8,
        follow_seconds: target.follow_seconds,
    };
    Ok(Read { doc, modified_at, origin })
}

/// The document under construction.
struct Builder {
    doc: Document,
    repository: String,
    /// Each array's path and number of chunks along each dimension.
    arrays: HashMap<NodeId, (String, Vec<u32>)>,
    /// Virtual locations as Icechunk wrote them, by URL number (or the problem with them).
    locations: HashMap<String, Option<u32>>,
    modified_at: BTreeMap<String, u32>,
    /// The chunk URLs already refused, so that each is named once.
    refused: BTreeSet<String>,
}

impl Builder {
    fn new(scratch: &Scratch, repository: &str) -> Self {
        Self {
            doc: Document::new(scratch),
            repository: repository.to_owned(),
            arrays: HashMap::new(),
            locations: HashMap::new(),
            modified_at: BTreeMap::new(),
            refused: BTreeSet::new(),
        }
    }

    /// Adds the references `manifest` holds for array `node` within `extents`.
    fn add_manifest(
        &mut self,
        manifest: &Arc<Manifest>,
        node: &NodeId,
        extents: &ManifestExtents,
    ) -> std::result::Result<(), String> {
        let Some((path, grid)) = self.arrays.get(node).cloned() else { return Ok(()) };
        let Some(mut target) = self.doc.nodes.get_mut(&path).and_then(|n| n.manifest.take()) else { return Ok(()) };
        let refs = Arc::clone(manifest).iter(node.clone()).map_err(|e| e.to_string())?;
        let mut indices: Vec<u64> = Vec::with_capacity(grid.len());
        for entry in refs {
            let (coord, payload) = entry.map_err(|e| e.to_string())?;
            // Icechunk reads only what lies in the manifest's extents and the array's grid.
            let inside = coord.0.len() == grid.len() && coord.0.iter().zip(&grid).all(|(c, n)| c < n);
            if !inside || !extents.contains(&coord.0) {
                continue;
            }
            indices.clear();
            indices.extend(coord.0.iter().map(|c| u64::from(*c)));
            self.push(&mut target, &indices, payload);
        }
        if let Some(n) = self.doc.nodes.get_mut(&path) {
            n.manifest = Some(target);
        }
        Ok(())
    }

    fn push(&mut self, target: &mut RawManifest, indices: &[u64], payload: ChunkPayload) {
        match payload {
            ChunkPayload::Inline(bytes) => target.push_inline(indices, &bytes),
            ChunkPayload::Ref(chunk) => {
                let url = format!("{}/{}/{}", self.repository, icechunk_format::CHUNKS_FILE_PATH, chunk.id);
                let number = self.doc.urls.intern(url);
                self.doc.immutable.insert(number);
                target.push(indices, RawRef::Virtual { url: number, offset: chunk.offset, length: chunk.length });
            }
            ChunkPayload::Virtual(v) => {
                let location = v.location.url();
                let number = match self.locations.get(location) {
                    Some(n) => *n,
                    None => {
                        let n = self.intern_location(location, v.checksum.as_ref());
                        self.locations.insert(location.to_owned(), n);
                        n
                    }
                };
                if let Some(url) = number {
                    target.push(indices, RawRef::Virtual { url, offset: v.offset, length: v.length });
                }
            }
            _ => self.doc.problems.push("a chunk reference of a kind this server does not know".to_owned()),
        }
    }

    /// The URL number of a virtual location, recording its checksum; None when it cannot be
    /// served (the problem is recorded).
    fn intern_location(&mut self, location: &str, checksum: Option<&Checksum>) -> Option<u32> {
        if location.starts_with("vcc://") {
            if self.refused.insert(location.to_owned()) {
                self.doc.problems.push(format!(
                    "virtual chunk location {location} is relative to a named virtual chunk container, which this \
                     server does not resolve: write absolute URLs"
                ));
            }
            return None;
        }
        let url = match normalize_source_url(location) {
            Ok(url) => url,
            Err(e) => {
                if self.refused.insert(location.to_owned()) {
                    self.doc.problems.push(format!("virtual chunk location {location}: {e}"));
                }
                return None;
            }
        };
        if let Some(Checksum::LastModified(secs)) = checksum {
            self.modified_at.entry(url.clone()).or_insert(secs.0);
        }
        let number = self.doc.urls.intern(url);
        if let Some(Checksum::ETag(etag)) = checksum {
            self.doc.sources.of_mut(number).etag = Some(etag.0.clone());
        }
        Some(number)
    }
}

/// Problems with the sources' modification times: a virtual source modified after the time
/// Icechunk recorded was rewritten since the reference was made.
pub fn check_modified(doc: &mut Document, modified_at: &BTreeMap<String, u32>) {
    for (url, recorded) in modified_at {
        let now = doc.facts(url).and_then(|f| f.last_modified.as_deref());
        let Some(now) = now.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else { continue };
        if now.timestamp() > i64::from(*recorded) {
            let when = chrono::DateTime::from_timestamp(i64::from(*recorded), 0).map(|t| t.to_rfc3339());
            doc.problems.push(format!(
                "{url} was modified at {now} but the Icechunk reference says it was not modified after {}: the source \
                 was rewritten since the reference was made",
                when.unwrap_or_default()
            ));
        }
    }
}

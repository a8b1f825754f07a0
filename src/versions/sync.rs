//! Icechunk stores: registering a repository's branch, tag or snapshot, and syncing a branch
//! store with its branch (on request, or on an interval by [`follow`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::facts;
use super::icechunk::{self, Origin, Reference, Resolved, Target};
use super::register::{Registered, Registrar, Registration, Serving, Storing};

/// What a sync did.
#[derive(Debug, Clone)]
pub struct Synced {
    /// The version now current (new when the snapshot moved).
    pub registered: Option<Registered>,
    /// The current version's id.
    pub version: i64,
    /// True when the branch had moved and a new version was written.
    pub moved: bool,
    /// The snapshot served now.
    pub snapshot_id: String,
    /// The snapshot served before.
    pub previous_snapshot_id: String,
    /// The store's origin now.
    pub origin: Origin,
}

impl Registrar {
    /// Registers the snapshot `target` resolves to as the new current version of store `name`.
    pub async fn register_icechunk(&self, name: &str, target: &Target, how: Registration) -> Result<Registered> {
        let serving = self.serving(name, how).await?;
        let _turn = self.turn().await?;
        let resolved = icechunk::resolve(&self.sources, target, self.max_icechunk_file_bytes()).await?;
        self.import(name, target, &resolved, serving, how, false).await
    }

    /// Reads the snapshot `resolved` and writes it as the new current version of `name`, as
    /// `how` says (how it is served already resolved to `serving`).
    async fn import(
        &self,
        name: &str,
        target: &Target,
        resolved: &Resolved,
        serving: Serving,
        how: Registration,
        unless_same_origin: bool,
    ) -> Result<Registered> {
        let verify = how.verify;
        let scratch = self.settings.scratch();
        let reading = Instant::now();
        let read = icechunk::read(&self.sources, target, resolved, &scratch, self.max_icechunk_file_bytes()).await;
        scratch.check().map_err(super::ingest::scratch_error)?;
        let icechunk::Read { mut doc, modified_at, origin } = read?;
        if verify {
            facts::record(&self.sources, self.settings.verify_concurrency, &mut doc, false).await;
            icechunk::check_modified(&mut doc, &modified_at);
        }
        let origin = serde_json::to_string(&origin).map_err(|e| Error::Internal(e.to_string()))?;
        let storing = Storing {
            format: "icechunk",
            record_facts: false,
            rerecord: false,
            verified: verify,
            fill_missing: serving.fill_missing,
            portable: serving.portable,
            read_seconds: reading.elapsed().as_secs_f64(),
            origin: Some(origin),
            files: None,
            unless_same_origin,
            expected: how.expected,
            warnings: Vec::new(),
        };
        self.store_document(name, doc, storing).await
    }

    /// The most bytes one Icechunk file may inflate to (`limits.max_icechunk_file_bytes`).
    fn max_icechunk_file_bytes(&self) -> u64 {
        self.settings.limits.max_icechunk_file_bytes
    }

    /// The Icechunk origin of store `name`'s current version, with that version's id.
    pub async fn origin(&self, name: &str) -> Result<Option<(i64, Origin)>> {
        let Some(head) = self.catalog.current_version(name).await? else {
            return Err(Error::NotFound(format!("no store named {name:?}")));
        };
        let Some(text) = self.catalog.origin(head.id).await? else { return Ok(None) };
        if super::files::Origin::is_files(&text) {
            return Ok(None);
        }
        let origin = serde_json::from_str(&text)
            .map_err(|e| Error::Internal(format!("the origin of version {} cannot be read: {e}", head.id)))?;
        Ok(Some((head.id, origin)))
    }

    /// Re-reads the branch of Icechunk store `name`: a new version when its head moved to another
    /// snapshot, none otherwise. Tag and snapshot stores never move.
    pub async fn sync(&self, name: &str) -> Result<Synced> {
        let Some((version, origin)) = self.origin(name).await? else {
            return Err(Error::Conflict(format!(
                "store {name:?} was not registered from an Icechunk repository (?format=icechunk): there is nothing to sync"
            )));
        };
        let unmoved = |origin: Origin| Synced {
            registered: None,
            version,
            moved: false,
            snapshot_id: origin.snapshot_id.clone(),
            previous_snapshot_id: origin.snapshot_id.clone(),
            origin,
        };
        if !matches!(origin.reference, Reference::Branch(_)) {
            return Ok(unmoved(origin));
        }
        let target = Target {
            repository: origin.repository.clone(),
            reference: origin.reference.clone(),
            follow_seconds: origin.follow_seconds,
        };
        let resolved = icechunk::resolve(&self.sources, &target, self.max_icechunk_file_bytes()).await?;
        if resolved.snapshot.to_string() == origin.snapshot_id {
            return Ok(unmoved(origin));
        }
        let how = Registration::as_now();
        let serving = self.serving(name, how).await?;
        let _turn = self.turn().await?;
        let registered = self.import(name, &target, &resolved, serving, how, true).await?;
        let (_, now) = self.origin(name).await?.ok_or_else(|| Error::Internal("the origin was not kept".into()))?;
        Ok(Synced {
            version: registered.head.id,
            moved: !registered.unchanged,
            snapshot_id: now.snapshot_id.clone(),
            previous_snapshot_id: origin.snapshot_id,
            origin: now,
            registered: Some(registered),
        })
    }
}

/// What the follow task reads of a files origin: its interval (the rest, the files, skipped).
#[derive(serde::Deserialize)]
struct FollowedFiles {
    follow_seconds: Option<u64>,
}

/// Syncs every branch store that follows its branch, and rescans every store made from files
/// that follows its prefix (`follow_seconds`), when its interval has passed, checking every
/// `tick`, until the registrar is dropped. With several replicas each follows: the catalog
/// writes one version per snapshot, so a duplicate sync writes nothing; a files rescan is made
/// by the replica that holds the store's rescan lock, the others skip it.
pub async fn follow(registrar: std::sync::Weak<Registrar>, tick: Duration) {
    let mut last: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        tokio::time::sleep(tick).await;
        let Some(registrar) = registrar.upgrade() else { return };
        let followed = match registrar.catalog.origins().await {
            Ok(followed) => followed,
            Err(e) => {
                tracing::warn!(cause = %e, "following Icechunk branches: the catalog failed; retrying");
                continue;
            }
        };
        for (store, text) in followed {
            let Ok(origin) = serde_json::from_str::<Origin>(&text) else {
                // A files origin is read for its interval only: its list of files (100,000 of
                // them, 30 MB) is skipped, not built, at every tick.
                let follows = text.contains("\"follow_seconds\"");
                let files = follows.then(|| serde_json::from_str::<FollowedFiles>(&text).ok()).flatten();
                let Some(every) = files.and_then(|f| f.follow_seconds).map(Duration::from_secs) else { continue };
                // A store first seen (just registered, or when this replica starts) is first
                // rescanned an interval later.
                if let std::collections::btree_map::Entry::Vacant(first) = last.entry(store.clone()) {
                    first.insert(Instant::now());
                    continue;
                }
                if !due(&mut last, &store, every) {
                    continue;
                }
                // In a task of its own: a long rescan holds up neither the other stores nor the
                // branches followed; one still under way at its next interval holds the store's
                // lock, and that round is skipped.
                let registrar = std::sync::Arc::clone(&registrar);
                tokio::spawn(async move { registrar.follow_files(&store).await });
                continue;
            };
            let Some(every) = origin.follow_seconds.map(Duration::from_secs) else { continue };
            if !due(&mut last, &store, every) {
                continue;
            }
            match registrar.sync(&store).await {
                Ok(synced) if synced.moved => tracing::info!(store = %store, from = %synced.previous_snapshot_id,
                    to = %synced.snapshot_id, version = synced.version, "Icechunk branch followed: new version"),
                Ok(_) => tracing::debug!(store = %store, "Icechunk branch unchanged"),
                Err(e) => tracing::warn!(store = %store, cause = %e, repository = %origin.repository,
                    "following an Icechunk branch failed; the store keeps serving its current version"),
            }
        }
        drop(registrar);
    }
}

/// True when `store`'s interval `every` has passed since it was last followed (then noted as
/// followed now), or it never was.
fn due(last: &mut BTreeMap<String, Instant>, store: &str, every: Duration) -> bool {
    if last.get(store).is_some_and(|at| at.elapsed() < every) {
        return false;
    }
    last.insert(store.to_owned(), Instant::now());
    true
}

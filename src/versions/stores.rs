//! The stores as the control plane and the browser see them: the list of stores, one store's
//! record (with the Icechunk repository its versions follow), its newest versions, the sources
//! its current version reads as recorded, and whether they still match what was recorded.

use std::sync::Arc;

use super::error::Result;
use super::facts::{self, CheckedSource};
use super::icechunk::Origin;
use crate::catalog::{Catalog, ListedVersion, StoreRecord, VersionHead};
use crate::sources::SourceRegistry;
use crate::zarr::source::SourceFacts;

/// The stores service: what the catalog knows of the stores, read for the control plane and
/// the browser's pages.
pub struct Stores {
    catalog: Arc<dyn Catalog>,
    sources: Arc<SourceRegistry>,
    verify_concurrency: usize,
}

/// A store as it is described: its record and, when its versions follow an Icechunk
/// repository, where from.
#[derive(Debug, Clone)]
pub struct Described {
    /// The current version and its counts.
    pub record: StoreRecord,
    /// The Icechunk repository the current version was read from, if any (an origin that cannot
    /// be read is left out).
    pub origin: Option<Origin>,
    /// The files the current version was read from (`?format=files`), if it was: a page of them.
    pub files: Option<super::files::OriginPage>,
}

/// A page of a store's versions, newest first.
#[derive(Debug, Clone)]
pub struct Versions {
    /// At most the number asked for.
    pub listed: Vec<ListedVersion>,
    /// True when older versions are kept beyond them.
    pub more: bool,
}

/// The sources of a store's current version, each compared with what was recorded.
#[derive(Debug)]
pub struct Verified {
    /// The version whose sources were checked.
    pub head: VersionHead,
    /// Each source with what was found.
    pub checked: Vec<CheckedSource>,
}

impl Stores {
    /// The stores of `catalog`; a verification asks `sources` for `verify_concurrency` facts at
    /// once.
    pub fn new(catalog: Arc<dyn Catalog>, sources: Arc<SourceRegistry>, verify_concurrency: usize) -> Self {
        Self { catalog, sources, verify_concurrency }
    }

    /// At most `limit` stores, by name, from the first one after `after`.
    pub async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<StoreRecord>> {
        Ok(self.catalog.list_stores(after, limit).await?)
    }

    /// Store `name`'s record (its current version and counts); `None` when there is no such store.
    pub async fn record(&self, name: &str) -> Result<Option<StoreRecord>> {
        Ok(self.catalog.store(name).await?)
    }

    /// Store `name`'s record with the Icechunk repository it follows, or files
    /// `files.0..files.0 + files.1` of those it was read from; `None` when there is no such store.
    pub async fn describe(&self, name: &str, files: (usize, usize)) -> Result<Option<Described>> {
        let Some(record) = self.catalog.store(name).await? else { return Ok(None) };
        let text = self.catalog.origin(record.head.id).await?;
        let origin = text.as_deref().and_then(|text| serde_json::from_str(text).ok());
        let files = match text.as_deref() {
            Some(text) => super::files::Origin::page(&*self.catalog, record.head.id, text, files.0, files.1).await?,
            None => None,
        };
        Ok(Some(Described { record, origin, files }))
    }

    /// Store `name`'s newest versions still kept, at most `limit`, newest first (none when there
    /// is no such store).
    pub async fn versions(&self, name: &str, limit: u32) -> Result<Versions> {
        let mut listed = self.catalog.versions(name, limit.saturating_add(1)).await?;
        let more = listed.len() > limit as usize;
        listed.truncate(limit as usize);
        Ok(Versions { listed, more })
    }

    /// The sources version `head` reads, with the facts recorded of each (as a registration
    /// found or declared them).
    pub async fn recorded_sources(&self, head: &VersionHead) -> Result<Vec<(String, SourceFacts)>> {
        Ok(self.catalog.sources(head.id).await?)
    }

    /// Whether each source of store `name`'s current version still matches what was recorded;
    /// `None` when there is no such store.
    pub async fn verify(&self, name: &str) -> Result<Option<Verified>> {
        let Some(head) = self.catalog.current_version(name).await? else { return Ok(None) };
        let recorded = self.recorded_sources(&head).await?;
        let checked = facts::compare(&self.sources, self.verify_concurrency, recorded).await;
        Ok(Some(Verified { head, checked }))
    }
}

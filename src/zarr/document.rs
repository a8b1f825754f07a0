//! A parsed manifest document, whatever its format: nodes with their metadata and raw chunk
//! references, the source URLs they use, and the problems found while reading it.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use serde_json::{Map, Value};

use super::json_text::{parse_json_text, to_json_text};
use super::manifest::RawManifest;
pub use super::source::SourceFacts;
use super::spill::Scratch;

/// How many problems a rejection lists before summarising the rest.
pub const MAX_PROBLEMS: usize = 100;

/// A manifest document as read, not yet validated.
#[derive(Debug, Default)]
pub struct Document {
    /// Nodes by path as written (`""` for the root).
    pub nodes: BTreeMap<String, DocNode>,
    /// Every distinct source URL, normalised.
    pub urls: UrlTable,
    /// Facts about the sources: declared by the document, asked of their object stores, or
    /// read with a file.
    pub sources: Facts,
    /// What is wrong with the document so far.
    pub problems: Problems,
    /// Nodes to remove (PATCH only).
    pub delete: Vec<String>,
    /// URLs (by number) of kerchunk `[url]` references: the whole object, its length not yet known.
    pub whole_objects: BTreeSet<u32>,
    /// URLs (by number) of objects written once and never rewritten (an Icechunk repository's
    /// chunk objects): their facts are not asked for at registration.
    pub immutable: BTreeSet<u32>,
    /// Lengths of those objects, once asked of their object stores.
    pub object_sizes: BTreeMap<u32, u64>,
    /// Where the references are kept while the document is read and validated.
    pub scratch: Scratch,
}

impl Document {
    /// An empty document whose manifests draw on `scratch`.
    pub fn new(scratch: &Scratch) -> Self {
        Self { scratch: scratch.clone(), ..Self::default() }
    }

    /// Records that reading back what was kept failed: the registration cannot go on.
    pub fn scratch_failure(&self, e: std::io::Error) {
        self.scratch.record_failure(&e);
    }

    /// A new, empty manifest drawing on the document's scratch space.
    pub fn new_manifest(&self) -> RawManifest {
        RawManifest::new(&self.scratch)
    }

    /// The facts known of source `url`.
    pub fn facts(&self, url: &str) -> Option<&SourceFacts> {
        self.urls.number(url).and_then(|n| self.sources.of(n)).or_else(|| self.sources.declared.get(url))
    }

    /// Records `facts` for source `url` (normalised), replacing what was known of it.
    pub fn set_facts(&mut self, url: String, facts: SourceFacts) {
        match self.urls.number(&url) {
            Some(n) => {
                self.sources.declared.remove(&url);
                self.sources.set(n, facts);
            }
            None => {
                self.sources.declared.insert(url, facts);
            }
        }
    }
}

/// Facts about a document's sources: by URL number, once the URL is interned, else by URL
/// (declared by the document before any of its references names the URL, or never used). Kept
/// by number, a 100,000-file registration holds no second copy of each URL.
#[derive(Debug, Default)]
pub struct Facts {
    by_number: Vec<Option<SourceFacts>>,
    declared: BTreeMap<String, SourceFacts>,
}

impl Facts {
    /// The facts recorded for URL number `n` (those declared by URL aside).
    pub fn of(&self, n: u32) -> Option<&SourceFacts> {
        self.by_number.get(n as usize)?.as_ref()
    }

    /// Records `facts` for URL number `n`.
    pub fn set(&mut self, n: u32, facts: SourceFacts) {
        *self.slot(n) = Some(facts);
    }

    /// The facts of URL number `n`, empty ones recorded if none were.
    pub fn of_mut(&mut self, n: u32) -> &mut SourceFacts {
        self.slot(n).get_or_insert_with(SourceFacts::default)
    }

    fn slot(&mut self, n: u32) -> &mut Option<SourceFacts> {
        let i = n as usize;
        if self.by_number.len() <= i {
            self.by_number.resize_with(i + 1, || None);
        }
        &mut self.by_number[i]
    }

    /// Every URL's facts by number (one slot a URL of `urls`), those declared by URL put in
    /// place: the facts of the sources the document uses.
    pub fn resolve(self, urls: &UrlTable) -> Vec<Option<SourceFacts>> {
        let Facts { mut by_number, declared } = self;
        by_number.resize_with(urls.len(), || None);
        for (url, facts) in declared {
            if let Some(n) = urls.number(&url) {
                by_number[n as usize].get_or_insert(facts);
            }
        }
        by_number
    }
}

/// One node: its `zarr.json` (without `manifest`) and, for arrays, its references. The metadata
/// is kept as compact JSON text until validation parses it, one node at a time (see
/// `metadata::ValidNode`).
#[derive(Debug, Default)]
pub struct DocNode {
    /// The node's metadata, as compact JSON text.
    pub json: Box<str>,
    /// Chunk references, when the node carries a `manifest`.
    pub manifest: Option<RawManifest>,
}

impl DocNode {
    /// A node whose metadata is `metadata`.
    pub fn new(metadata: &Map<String, Value>, manifest: Option<RawManifest>) -> Self {
        Self { json: to_json_text(metadata), manifest }
    }

    /// Its metadata, parsed.
    pub fn metadata(&self) -> Map<String, Value> {
        parse_json_text(&self.json)
    }
}

/// Interned source URLs: each stored once, referenced by number. The index holds numbers only,
/// found by the URL's hash, so that a URL is held once, not twice (a registration of 100,000
/// files, or a kerchunk store with a URL per chunk, holds that many).
#[derive(Default)]
pub struct UrlTable {
    urls: Vec<Arc<str>>,
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for UrlTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlTable").field("urls", &self.urls).finish_non_exhaustive()
    }
}

impl UrlTable {
    /// The number of `url`, adding it if new.
    pub fn intern(&mut self, url: String) -> u32 {
        let hash = self.hasher.hash_one(url.as_str());
        if let Some(i) = self.index.find(hash, |&i| *self.urls[i as usize] == *url) {
            return *i;
        }
        let i = self.urls.len() as u32;
        self.urls.push(url.into());
        let (urls, hasher) = (&self.urls, &self.hasher);
        self.index.insert_unique(hash, i, |&j| hasher.hash_one(&*urls[j as usize]));
        i
    }

    /// The number of `url`, if it was interned.
    pub fn number(&self, url: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(url);
        self.index.find(hash, |&i| &*self.urls[i as usize] == url).copied()
    }

    /// Every URL, by number, the table given up.
    pub fn into_urls(self) -> Vec<Arc<str>> {
        self.urls
    }

    /// The URL numbered `i`, shared: a holder of it keeps no copy of its own (a join keeps each
    /// file's URL with its part of the joined coordinate).
    pub fn shared(&self, i: u32) -> Arc<str> {
        Arc::clone(&self.urls[i as usize])
    }

    /// The URL numbered `i`.
    pub fn get(&self, i: u32) -> &str {
        &self.urls[i as usize]
    }

    /// Every URL, by number.
    pub fn all(&self) -> &[Arc<str>] {
        &self.urls
    }

    /// Number of distinct URLs.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// True when no URL was interned.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }
}

/// Problems found in a document, capped at [`MAX_PROBLEMS`] with a count of the rest.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Problems {
    list: Vec<String>,
    more: usize,
}

impl Problems {
    /// Records one problem.
    pub fn push(&mut self, problem: impl Into<String>) {
        if self.list.len() < MAX_PROBLEMS {
            self.list.push(problem.into());
        } else {
            self.more += 1;
        }
    }

    /// True when nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Total count, including those not listed.
    pub fn count(&self) -> usize {
        self.list.len() + self.more
    }

    /// The listed problems, with a last line counting the rest if any were dropped.
    pub fn into_vec(self) -> Vec<String> {
        let mut list = self.list;
        if self.more > 0 {
            list.push(format!("... and {} more problems", self.more));
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(size: u64) -> SourceFacts {
        SourceFacts { size: Some(size), ..SourceFacts::default() }
    }

    #[test]
    fn facts_declared_before_a_url_is_used_are_its_facts_once_it_is() {
        let mut doc = Document::default();
        doc.set_facts("file:///a".into(), facts(1));
        doc.set_facts("file:///unused".into(), facts(2));
        assert_eq!(doc.facts("file:///a").and_then(|f| f.size), Some(1));
        let a = doc.urls.intern("file:///a".into());
        let b = doc.urls.intern("file:///b".into());
        assert_eq!(doc.facts("file:///a").and_then(|f| f.size), Some(1));
        doc.sources.set(b, facts(3));
        let resolved = doc.sources.resolve(&doc.urls);
        assert_eq!(resolved.len(), 2, "one slot a URL used; the unused URL's facts are not kept");
        assert_eq!(resolved[a as usize].as_ref().and_then(|f| f.size), Some(1));
        assert_eq!(resolved[b as usize].as_ref().and_then(|f| f.size), Some(3));
    }

    #[test]
    fn facts_recorded_after_a_url_is_used_replace_those_declared() {
        let mut doc = Document::default();
        doc.set_facts("file:///a".into(), facts(1));
        let a = doc.urls.intern("file:///a".into());
        doc.set_facts("file:///a".into(), facts(5));
        assert_eq!(doc.facts("file:///a").and_then(|f| f.size), Some(5));
        doc.sources.of_mut(a).etag = Some("\"x\"".into());
        let resolved = doc.sources.resolve(&doc.urls);
        let kept = resolved[a as usize].as_ref().unwrap();
        assert_eq!((kept.size, kept.etag.as_deref()), (Some(5), Some("\"x\"")));
    }
}

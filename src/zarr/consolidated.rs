//! The `zarr.json` of a group with consolidated metadata, in zarr-python's layout: the group's
//! own fields, then every descendant under its path relative to the group, nested groups with an
//! empty listing of their own. Each node's entry is rendered once and copied into every listing
//! that holds it, so a document costs its size to write, and every size is known, in time linear
//! in the nodes' metadata, before anything is written.

use std::borrow::Cow;
use std::io::{self, Write};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value, json};

/// What follows a group's own fields, up to the first entry of its listing.
const LISTING_OPEN: &[u8] = br#""consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":{"#;
/// The end of the listing, of the consolidated metadata and of the document.
const LISTING_CLOSE: &[u8] = b"}}}";
/// A nested group's consolidated metadata, as zarr-python lists it: its members are listed by
/// the group that holds the listing.
const EMPTY_LISTING: &[u8] = br#""consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":{}}"#;

/// A node as its documents need it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// Its path (`""` for the root).
    pub path: &'a str,
    /// Its metadata, without `consolidated_metadata`.
    pub metadata: &'a Map<String, Value>,
    /// True for a group.
    pub group: bool,
}

/// The listing entries of every node of a hierarchy, sized and, to write documents, rendered.
/// Nodes are added one at a time and their metadata is not kept: a group keeps its own fields
/// rendered, an array its entry (which is its document), so that a hierarchy of 100,000 arrays
/// never holds 100,000 parsed maps at once.
#[derive(Debug)]
pub struct Listings<'a> {
    /// The nodes' paths, in path order (each path once).
    paths: Vec<&'a str>,
    /// A group's own fields written as an open JSON object (`{"a":1,`); `None` for an array.
    opens: Vec<Option<Vec<u8>>>,
    /// `sums[i]`: bytes that the entries of nodes `..i` take in the root's listing: quoted path,
    /// colon, entry, comma.
    sums: Vec<u64>,
    /// Each path's length once escaped as a JSON string, without quotes.
    path_lens: Vec<u64>,
    /// Each entry's length.
    entry_lens: Vec<u64>,
    /// The rendered entries, one after the other (empty when only measuring).
    rendered: Vec<u8>,
    /// Where each rendered entry starts.
    starts: Vec<usize>,
    /// Entries are rendered, not only measured.
    render: bool,
}

impl<'a> Listings<'a> {
    /// Sizes the entries of `members` (in path order) without rendering them.
    pub fn measure(members: Vec<Member<'a>>) -> Self {
        let mut listings = Self::empty(false);
        members.iter().for_each(|m| listings.push(m.path, m.metadata, m.group));
        listings
    }

    /// Renders the entries of `members` (in path order), to write documents.
    pub fn render(members: Vec<Member<'a>>) -> Self {
        let mut listings = Self::empty(true);
        members.iter().for_each(|m| listings.push(m.path, m.metadata, m.group));
        listings
    }

    /// No node yet; `render` says whether entries are rendered or only measured.
    pub fn empty(render: bool) -> Self {
        Self {
            paths: Vec::new(),
            opens: Vec::new(),
            sums: vec![0],
            path_lens: Vec::new(),
            entry_lens: Vec::new(),
            rendered: Vec::new(),
            starts: Vec::new(),
            render,
        }
    }

    /// Makes room for about `bytes` of rendered entries (when rendering).
    pub fn reserve(&mut self, bytes: usize) {
        if self.render {
            self.rendered.reserve(bytes);
        }
    }

    /// Adds the node at `path` (after every node added so far, in path order); `metadata` is not
    /// kept.
    pub fn push(&mut self, path: &'a str, metadata: &Map<String, Value>, group: bool) {
        // A group's document opens with its own fields (`attributes` always there); its entry in
        // a listing with its metadata as stored.
        let open = group.then(|| {
            let mut out = Vec::new();
            write_open(&mut out, &own_fields(metadata));
            out
        });
        let entry_len = if group {
            let mut entry = Vec::new();
            write_open(&mut entry, metadata);
            entry.extend_from_slice(EMPTY_LISTING);
            entry.push(b'}');
            if self.render {
                self.starts.push(self.rendered.len());
                self.rendered.extend_from_slice(&entry);
            }
            entry.len() as u64
        } else if self.render {
            let start = self.rendered.len();
            self.starts.push(start);
            write_json(&mut self.rendered, metadata);
            (self.rendered.len() - start) as u64
        } else {
            json_len(metadata)
        };
        self.add(path, open, entry_len);
    }

    /// Adds the array at `path` (as [`Listings::push`]) whose metadata is `text`, the compact
    /// JSON text of an object: its entry is that text as it is.
    pub fn push_array_text(&mut self, path: &'a str, text: &str) {
        if self.render {
            self.starts.push(self.rendered.len());
            self.rendered.extend_from_slice(text.as_bytes());
        }
        self.add(path, None, text.len() as u64);
    }

    /// Records node `path` (its own fields `open` for a group), whose entry takes `entry_len`.
    fn add(&mut self, path: &'a str, open: Option<Vec<u8>>, entry_len: u64) {
        let path_len = json_len(path) - 2;
        let root_listed = if path.is_empty() { 0 } else { path_len + 2 + 1 + entry_len + 1 };
        self.sums.push(self.sums[self.sums.len() - 1] + root_listed);
        self.paths.push(path);
        self.opens.push(open);
        self.path_lens.push(path_len);
        self.entry_lens.push(entry_len);
    }

    /// The length of the entry of node `i` in the listings that hold it.
    pub fn entry_len(&self, i: usize) -> u64 {
        self.entry_lens[i]
    }

    /// The rendered entry of node `i` (empty when only measuring): for an array, its document.
    pub fn entry(&self, i: usize) -> &[u8] {
        let Some(&start) = self.starts.get(i) else { return &[] };
        &self.rendered[start..start + self.entry_lens[i] as usize]
    }

    /// Every rendered entry (empty ones when only measuring), sharing one buffer: an array's
    /// `zarr.json` is its entry, and 100,000 copies of them took as many allocations and
    /// page faults as the entries themselves.
    pub fn into_entries(self) -> Vec<Bytes> {
        let rendered = Bytes::from(self.rendered);
        (0..self.entry_lens.len())
            .map(|i| match self.starts.get(i) {
                Some(&start) => rendered.slice(start..start + self.entry_lens[i] as usize),
                None => Bytes::new(),
            })
            .collect()
    }

    /// The indices of the descendants of node `i`: a range, since they share the prefix `path/`.
    fn descendants(&self, i: usize) -> std::ops::Range<usize> {
        let path = self.paths[i];
        if path.is_empty() {
            return (i + 1)..self.paths.len();
        }
        // Every path starting with `path/` sorts at or after `path/` and before `path0`.
        let after = |end: char| {
            let bound = format!("{path}{end}");
            self.paths.partition_point(|p| *p < bound.as_str())
        };
        after('/')..after('0')
    }

    /// The own fields of group `i`, as an open JSON object.
    fn open(&self, i: usize) -> &[u8] {
        self.opens[i].as_deref().unwrap_or(b"{")
    }

    /// The length of the document of group `i` with the consolidated metadata of its descendants.
    pub fn document_len(&self, i: usize) -> u64 {
        let range = self.descendants(i);
        let count = range.len() as u64;
        // Keys in the root's listing are whole paths; here, relative ones: `path/` shorter.
        let prefix = if self.paths[i].is_empty() { 0 } else { self.path_lens[i] + 1 };
        let listing = self.sums[range.end] - self.sums[range.start] - count * prefix - u64::from(count > 0);
        self.open(i).len() as u64 + LISTING_OPEN.len() as u64 + listing + LISTING_CLOSE.len() as u64
    }

    /// Writes the document of group `i` with the consolidated metadata of its descendants
    /// (entries must have been rendered).
    pub fn write_document(&self, i: usize, out: &mut Vec<u8>) {
        let skip = if self.paths[i].is_empty() { 0 } else { self.paths[i].len() + 1 };
        out.extend_from_slice(self.open(i));
        out.extend_from_slice(LISTING_OPEN);
        for (n, d) in self.descendants(i).enumerate() {
            #[cfg(test)]
            tests::LISTED.with(|listed| listed.set(listed.get() + 1));
            if n > 0 {
                out.push(b',');
            }
            write_json(out, &self.paths[d][skip..]);
            out.push(b':');
            out.extend_from_slice(self.entry(d));
        }
        out.extend_from_slice(LISTING_CLOSE);
    }
}

/// A group's document without consolidated metadata (its own fields only).
pub fn plain_group_document(metadata: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::new();
    write_json(&mut out, &*own_fields(metadata));
    out
}

/// A group's own fields, with the empty `attributes` that zarr-python expects when none are given.
fn own_fields(metadata: &Map<String, Value>) -> Cow<'_, Map<String, Value>> {
    if metadata.contains_key("attributes") {
        return Cow::Borrowed(metadata);
    }
    let mut with = metadata.clone();
    with.insert("attributes".into(), json!({}));
    Cow::Owned(with)
}

/// Writes `fields` as a JSON object left open for more fields: `{"a":1,` (or `{` when empty).
fn write_open(out: &mut Vec<u8>, fields: &Map<String, Value>) {
    write_json(out, fields);
    out.pop();
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

fn write_json(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    // Writing a string or a map with string keys into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// The length of `value` written as JSON.
fn json_len(value: &(impl Serialize + ?Sized)) -> u64 {
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Counts what is written to it.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! The `zarr.json` of a group with consolidated metadata, in zarr-python's layout: the group's
//! own fields, then every descendant under its path relative to the group, nested groups with an
//! empty listing of their own. Each node's entry is rendered once and copied into every listing
//! that holds it, so a document costs its size to write, and every size is known, in time linear
//! in the nodes' metadata, before anything is written.

use std::borrow::Cow;
use std::io::{self, Write};

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
#[derive(Debug)]
pub struct Listings<'a> {
    /// The nodes, in path order (each path once).
    members: Vec<Member<'a>>,
    /// `sums[i]`: bytes that the entries of `members[..i]` take in the root's listing: quoted
    /// path, colon, entry, comma.
    sums: Vec<u64>,
    /// Each path's length once escaped as a JSON string, without quotes.
    path_lens: Vec<u64>,
    /// Each entry's length.
    entry_lens: Vec<u64>,
    /// The rendered entries, one after the other (empty when only measuring).
    rendered: Vec<u8>,
    /// Where each rendered entry starts.
    starts: Vec<usize>,
}

impl<'a> Listings<'a> {
    /// Sizes the entries of `members` (in path order) without rendering them.
    pub fn measure(members: Vec<Member<'a>>) -> Self {
        Self::new(members, false)
    }

    /// Renders the entries of `members` (in path order), to write documents.
    pub fn render(members: Vec<Member<'a>>) -> Self {
        Self::new(members, true)
    }

    fn new(members: Vec<Member<'a>>, render: bool) -> Self {
        let mut listings = Self {
            sums: Vec::with_capacity(members.len() + 1),
            path_lens: Vec::with_capacity(members.len()),
            entry_lens: Vec::with_capacity(members.len()),
            rendered: Vec::new(),
            starts: Vec::with_capacity(if render { members.len() } else { 0 }),
            members,
        };
        listings.sums.push(0);
        for m in &listings.members {
            let path_len = json_len(m.path) - 2;
            let entry_len = if render {
                listings.starts.push(listings.rendered.len());
                write_entry(&mut listings.rendered, m);
                (listings.rendered.len() - listings.starts[listings.starts.len() - 1]) as u64
            } else {
                entry_len(m)
            };
            let root_listed = if m.path.is_empty() { 0 } else { path_len + 2 + 1 + entry_len + 1 };
            listings.sums.push(listings.sums[listings.sums.len() - 1] + root_listed);
            listings.path_lens.push(path_len);
            listings.entry_lens.push(entry_len);
        }
        listings
    }

    /// The nodes, in path order.
    pub fn members(&self) -> &[Member<'a>] {
        &self.members
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

    /// The indices of the descendants of node `i`: a range, since they share the prefix `path/`.
    fn descendants(&self, i: usize) -> std::ops::Range<usize> {
        let path = self.members[i].path;
        if path.is_empty() {
            return (i + 1)..self.members.len();
        }
        // Every path starting with `path/` sorts at or after `path/` and before `path0`.
        let after = |end: char| {
            let bound = format!("{path}{end}");
            self.members.partition_point(|m| m.path < bound.as_str())
        };
        after('/')..after('0')
    }

    /// The length of the document of group `i` with the consolidated metadata of its descendants.
    pub fn document_len(&self, i: usize) -> u64 {
        let range = self.descendants(i);
        let count = range.len() as u64;
        // Keys in the root's listing are whole paths; here, relative ones: `path/` shorter.
        let prefix = if self.members[i].path.is_empty() { 0 } else { self.path_lens[i] + 1 };
        let listing = self.sums[range.end] - self.sums[range.start] - count * prefix - u64::from(count > 0);
        let own = json_len(&*own_fields(self.members[i].metadata)) - 1;
        own + u64::from(own > 1) + LISTING_OPEN.len() as u64 + listing + LISTING_CLOSE.len() as u64
    }

    /// Writes the document of group `i` with the consolidated metadata of its descendants
    /// (entries must have been rendered).
    pub fn write_document(&self, i: usize, out: &mut Vec<u8>) {
        let skip = if self.members[i].path.is_empty() { 0 } else { self.members[i].path.len() + 1 };
        write_open(out, &own_fields(self.members[i].metadata));
        out.extend_from_slice(LISTING_OPEN);
        for (n, d) in self.descendants(i).enumerate() {
            #[cfg(test)]
            tests::LISTED.with(|listed| listed.set(listed.get() + 1));
            if n > 0 {
                out.push(b',');
            }
            write_json(out, &self.members[d].path[skip..]);
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

fn write_entry(out: &mut Vec<u8>, m: &Member<'_>) {
    if m.group {
        write_open(out, m.metadata);
        out.extend_from_slice(EMPTY_LISTING);
        out.push(b'}');
    } else {
        write_json(out, m.metadata);
    }
}

fn entry_len(m: &Member<'_>) -> u64 {
    let len = json_len(m.metadata);
    if m.group { len - 1 + u64::from(len > 2) + EMPTY_LISTING.len() as u64 + 1 } else { len }
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

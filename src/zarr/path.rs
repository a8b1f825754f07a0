//! Node paths inside a store: `""` is the root, `"a/b"` a descendant.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// A validated path of a node in a Zarr hierarchy, without leading or trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodePath(String);

/// Why a node path is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodePathError {
    /// A segment is empty (`a//b`, a leading or trailing `/`).
    #[error("node path {0:?} has an empty segment")]
    EmptySegment(String),
    /// A segment is `.` or `..`.
    #[error("node path {0:?} has a `.` or `..` segment")]
    DotSegment(String),
    /// The Zarr v3 spec reserves names starting with `__`.
    #[error("node path {0:?} has a segment starting with `__` (reserved by Zarr)")]
    Reserved(String),
    /// Control characters are never valid in a key.
    #[error("node path {0:?} contains a control character")]
    Control(String),
    /// `zarr.json` would make the node's own metadata key ambiguous.
    #[error("node path {0:?} has a segment named zarr.json")]
    MetadataName(String),
}

impl NodePath {
    /// The root node.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Validates `path` as a node path (`""` for the root).
    pub fn new(path: &str) -> Result<Self, NodePathError> {
        if path.is_empty() {
            return Ok(Self::root());
        }
        let err_path = || path.to_owned();
        if path.chars().any(char::is_control) {
            return Err(NodePathError::Control(err_path()));
        }
        for segment in path.split('/') {
            match segment {
                "" => return Err(NodePathError::EmptySegment(err_path())),
                "." | ".." => return Err(NodePathError::DotSegment(err_path())),
                "zarr.json" => return Err(NodePathError::MetadataName(err_path())),
                s if s.starts_with("__") => return Err(NodePathError::Reserved(err_path())),
                _ => {}
            }
        }
        Ok(Self(path.to_owned()))
    }

    /// The path as a string (`""` for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the root node.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// How many names the path has: 0 for the root, 2 for `a/b`.
    pub fn depth(&self) -> usize {
        if self.is_root() { 0 } else { self.0.bytes().filter(|b| *b == b'/').count() + 1 }
    }

    /// The parent's path as text (`""` for the root and its children).
    pub fn parent_str(&self) -> &str {
        self.0.rfind('/').map_or("", |i| &self.0[..i])
    }

    /// The parent node, `None` for the root.
    pub fn parent(&self) -> Option<NodePath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => Self(self.0[..i].to_owned()),
            None => Self::root(),
        })
    }

    /// The path of `self` relative to `ancestor`, if `ancestor` is a strict ancestor.
    pub fn relative_to(&self, ancestor: &NodePath) -> Option<&str> {
        if ancestor.is_root() {
            return (!self.is_root()).then_some(self.0.as_str());
        }
        self.0.strip_prefix(ancestor.as_str()).and_then(|rest| rest.strip_prefix('/')).filter(|rest| !rest.is_empty())
    }
}

/// The path in Unicode NFC, borrowed when it already is (every ASCII path is).
fn nfc(path: &str) -> Cow<'_, str> {
    match is_nfc_quick(path.chars()) {
        IsNormalized::Yes => Cow::Borrowed(path),
        _ => Cow::Owned(path.nfc().collect()),
    }
}

/// Pairs of nodes that are one name to a reader: equal once normalised to Unicode NFC (`é`
/// written as one code point, or as `e` and a combining accent). Zarr compares names byte by
/// byte, but people, and the file systems a store may be copied to (APFS, HFS+), do not.
/// Each clash is given once, where it starts: the descendants of two clashing groups clash too.
pub fn normalisation_clashes<'a>(paths: impl IntoIterator<Item = &'a NodePath>) -> Vec<(&'a NodePath, &'a NodePath)> {
    let mut seen: HashMap<Cow<'a, str>, &'a NodePath> = HashMap::new();
    let mut clashes = Vec::new();
    for path in paths {
        match seen.entry(nfc(path.as_str())) {
            Entry::Vacant(slot) => {
                slot.insert(path);
            }
            // NFC works name by name (`/` composes with nothing), so paths whose parents differ
            // have clashing parents, which are reported instead.
            Entry::Occupied(first) if first.get().parent_str() == path.parent_str() => {
                clashes.push((*first.get(), path))
            }
            Entry::Occupied(_) => {}
        }
    }
    clashes
}

impl fmt::Display for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() { f.write_str("/") } else { f.write_str(&self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_paths() {
        assert_eq!(NodePath::new("a/b.c/d-e").unwrap().as_str(), "a/b.c/d-e");
        assert!(NodePath::new("").unwrap().is_root());
    }

    #[test]
    fn rejects_traversal_and_reserved_names() {
        for bad in ["/a", "a/", "a//b", "..", "a/../b", "./a", "__meta", "a/__b", "a\nb", "zarr.json"] {
            assert!(NodePath::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parents_and_relative_paths() {
        let p = NodePath::new("a/b/c").unwrap();
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(NodePath::new("a").unwrap().parent().unwrap(), NodePath::root());
        assert_eq!(p.relative_to(&NodePath::new("a").unwrap()), Some("b/c"));
        assert_eq!(p.relative_to(&NodePath::root()), Some("a/b/c"));
        assert_eq!(p.relative_to(&NodePath::new("a/bb").unwrap()), None);
        assert_eq!(p.relative_to(&p), None);
        assert_eq!((p.depth(), NodePath::root().depth(), NodePath::new("a").unwrap().depth()), (3, 0, 1));
        assert_eq!((p.parent_str(), NodePath::new("a").unwrap().parent_str()), ("a/b", ""));
    }

    #[test]
    fn names_equal_in_nfc_clash_once_where_they_start() {
        let paths: Vec<NodePath> =
            ["caf\u{e9}", "caf\u{e9}/x", "cafe\u{301}", "cafe\u{301}/x", "cafe", "n\u{303}", "\u{f1}"]
                .iter()
                .map(|p| NodePath::new(p).unwrap())
                .collect();
        let clashes: Vec<(&str, &str)> =
            normalisation_clashes(&paths).into_iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(clashes, [("caf\u{e9}", "cafe\u{301}"), ("n\u{303}", "\u{f1}")]);
        assert!(normalisation_clashes(&paths[..2]).is_empty());
        assert_eq!(format!("{:?}", paths[2].as_str()), r#""cafe\u{301}""#, "problems show the difference");
    }
}

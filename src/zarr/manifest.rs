//! Chunk references as documents write them, and the normalisation of their source URLs.

use url::Url;

/// Schemes a reference may point at.
const SCHEMES: &[&str] = &["file", "s3", "gs", "gcs", "az", "azure", "abfs", "abfss", "http", "https"];

/// Why a reference's path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceUrlError {
    /// `data/x.nc`: readers resolve such paths against their own working directory.
    #[error("relative path {0:?}: write an absolute path (/data/x.nc) or a URL (s3://bucket/x.nc)")]
    Relative(String),
    /// Not a URL the server can parse.
    #[error("{0:?} is not a valid URL: {1}")]
    Invalid(String, String),
    /// A scheme no object store serves.
    #[error("{0:?}: scheme {1:?} is not supported (use file, s3, gs, az, http or https)")]
    Scheme(String, String),
    /// `..` segments could escape an object store's prefix.
    #[error("{0:?} contains a `..` segment")]
    DotDot(String),
}

/// Turns a reference path into the absolute URL the source registry resolves: absolute local
/// paths become `file://` URLs (VirtualiZarr and kerchunk write them bare).
pub fn normalize_source_url(path: &str) -> Result<String, SourceUrlError> {
    if path.starts_with('/') {
        let url =
            Url::from_file_path(path).map_err(|()| SourceUrlError::Invalid(path.into(), "not a file path".into()))?;
        return check_segments(path, url);
    }
    let Some((scheme, _)) = path.split_once("://") else {
        return Err(SourceUrlError::Relative(path.into()));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&scheme.as_str()) {
        return Err(SourceUrlError::Scheme(path.into(), scheme));
    }
    let url = Url::parse(path).map_err(|e| SourceUrlError::Invalid(path.into(), e.to_string()))?;
    check_segments(path, url)
}

fn check_segments(original: &str, url: Url) -> Result<String, SourceUrlError> {
    // The url crate resolves `..` (even percent-encoded) before we could see it: look at the text.
    let decoded = original.to_ascii_lowercase().replace("%2e", ".");
    let dotted = |s: &str| s == ".." || s == ".";
    if url.path().split('/').any(dotted) || decoded.split(['/', '\\']).any(|s| s == "..") {
        return Err(SourceUrlError::DotDot(original.into()));
    }
    Ok(url.to_string())
}

/// One chunk reference as parsed from a document, before validation against the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawRef {
    /// `length` bytes at `offset` of the document's URL number `url`.
    Virtual { url: u32, offset: u64, length: u64 },
    /// `len` bytes at `start` of the manifest's inline buffer.
    Inline { start: u64, len: u64 },
    /// `{"path": ""}`: no chunk. Nothing to store when registering; clears a reference in a PATCH.
    Clear,
}

/// The chunk references of one array, as parsed: keys not yet checked against the grid.
#[derive(Debug, Default, Clone)]
pub struct RawManifest {
    /// Every key's indices, concatenated; `key_lens[i]` indices belong to entry `i`.
    indices: Vec<u64>,
    key_lens: Vec<u8>,
    /// One per entry.
    pub refs: Vec<RawRef>,
    /// Concatenated inline chunk bytes.
    pub inline: Vec<u8>,
}

impl RawManifest {
    /// Adds an entry with the manifest key's indices.
    pub fn push(&mut self, indices: &[u64], r: RawRef) {
        self.indices.extend_from_slice(indices);
        self.key_lens.push(indices.len() as u8);
        self.refs.push(r);
    }

    /// Adds an inline entry, copying its bytes.
    pub fn push_inline(&mut self, indices: &[u64], data: &[u8]) {
        let r = RawRef::Inline { start: self.inline.len() as u64, len: data.len() as u64 };
        self.inline.extend_from_slice(data);
        self.push(indices, r);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    /// Each entry's indices with its reference, in document order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u64], RawRef)> + '_ {
        let mut at = 0usize;
        self.key_lens.iter().zip(&self.refs).map(move |(len, r)| {
            let key = &self.indices[at..at + *len as usize];
            at += *len as usize;
            (key, *r)
        })
    }

    /// The inline bytes of an inline reference.
    pub fn inline_bytes(&self, start: u64, len: u64) -> &[u8] {
        &self.inline[start as usize..(start + len) as usize]
    }
}

/// Splits a manifest key (`"1.0.2"`; `""` for 0-d) into indices, without knowing the array's
/// dimensionality yet. Keys of more than 255 dimensions are rejected.
pub fn split_manifest_key(key: &str) -> Option<Vec<u64>> {
    if key.is_empty() {
        return Some(Vec::new());
    }
    let parts: Vec<u64> = key
        .split('.')
        .map(|p| (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse().ok()).flatten())
        .collect::<Option<_>>()?;
    (parts.len() <= 255).then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_become_file_urls() {
        assert_eq!(normalize_source_url("/data/air.nc").unwrap(), "file:///data/air.nc");
        assert_eq!(normalize_source_url("/data/my file.nc").unwrap(), "file:///data/my%20file.nc");
        assert_eq!(normalize_source_url("file:///data/air.nc").unwrap(), "file:///data/air.nc");
        assert_eq!(normalize_source_url("s3://bucket/a/b.nc").unwrap(), "s3://bucket/a/b.nc");
        assert_eq!(normalize_source_url("HTTPS://Example.org/x").unwrap(), "https://example.org/x");
    }

    #[test]
    fn rejects_relative_traversal_and_unknown_schemes() {
        assert!(matches!(normalize_source_url("data/x.nc"), Err(SourceUrlError::Relative(_))));
        assert!(matches!(normalize_source_url("/data/../etc/passwd"), Err(SourceUrlError::DotDot(_))));
        assert!(matches!(normalize_source_url("s3://b/a/../../x"), Err(SourceUrlError::DotDot(_))));
        assert!(matches!(normalize_source_url("file:///data/%2e%2e/etc"), Err(SourceUrlError::DotDot(_))));
        assert!(matches!(normalize_source_url("ftp://host/x"), Err(SourceUrlError::Scheme(..))));
        let msg = normalize_source_url("x.nc").unwrap_err().to_string();
        assert!(msg.contains("absolute path"), "{msg}");
    }

    #[test]
    fn manifest_entries_keep_their_keys() {
        let mut m = RawManifest::default();
        m.push(&[1, 2], RawRef::Virtual { url: 0, offset: 5, length: 6 });
        m.push_inline(&[], b"abc");
        let entries: Vec<_> = m.entries().collect();
        assert_eq!(entries[0].0, &[1, 2]);
        assert_eq!(entries[1].0, &[] as &[u64]);
        assert_eq!(m.inline_bytes(0, 3), b"abc");
        assert_eq!(split_manifest_key("0.10.2"), Some(vec![0, 10, 2]));
        assert_eq!(split_manifest_key(""), Some(vec![]));
        assert_eq!(split_manifest_key("0..1"), None);
        assert_eq!(split_manifest_key("a"), None);
    }
}

//! Chunk references as documents write them, and the normalisation of their source URLs.

use std::io::{self, Read};

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use url::Url;

use super::spill::{LogReader, Scratch, SpillLog, get_u8, get_varint, put_varint};

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

/// What a URL parser would read as syntax in the key of a kerchunk path: fsspec takes
/// `s3://bucket/run #1/a b.nc` as the key `run #1/a b.nc`, where a URL has a fragment.
const LITERAL_KEY: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']');

/// As [`normalize_source_url`], for a path as kerchunk writes it and fsspec reads it: text, not
/// a URL. Outside `http(s)://`, whose paths are URLs for fsspec too, every character of the
/// key is itself (`#`, `?`, `%`, spaces), as it is for bare absolute paths.
pub fn normalize_literal_path(path: &str) -> Result<String, SourceUrlError> {
    let Some((scheme, rest)) = path.split_once("://") else { return normalize_source_url(path) };
    if matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return normalize_source_url(path);
    }
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    if key.split(['/', '\\']).any(|s| s == "..") {
        return Err(SourceUrlError::DotDot(path.into()));
    }
    normalize_source_url(&format!("{scheme}://{authority}/{}", utf8_percent_encode(key, LITERAL_KEY))).map_err(|e| {
        match e {
            SourceUrlError::Invalid(_, why) => SourceUrlError::Invalid(path.into(), why),
            other => other,
        }
    })
}

/// A stored source URL as kerchunk writes it for fsspec: a local file as its bare absolute
/// path, a bucket key as its characters (`s3://bucket/a b.nc`), an `http(s)://` URL as it is.
/// The inverse of [`normalize_literal_path`].
pub fn literal_path(url: &str) -> String {
    let Ok(parsed) = Url::parse(url) else { return url.to_owned() };
    let literal = match parsed.scheme() {
        "http" | "https" => None,
        "file" => parsed.to_file_path().ok().and_then(|p| p.into_os_string().into_string().ok()),
        scheme => percent_decode_str(parsed.path())
            .decode_utf8()
            .ok()
            .map(|key| format!("{scheme}://{}{key}", parsed.host_str().unwrap_or_default())),
    };
    literal.unwrap_or_else(|| url.to_owned())
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
    /// An assembled chunk whose encoded recipe is `len` bytes at `start` of the inline buffer.
    Assembled { start: u64, len: u64 },
    /// `{"path": ""}`: no chunk. Nothing to store when registering; clears a reference in a PATCH.
    Clear,
}

/// The chunk references of one array, as parsed: keys not yet checked against the grid. The
/// entries are varint-encoded in a scratch log (about a dozen bytes each), the inline bytes in
/// another, in memory up to the registration's budget and in temporary files past it.
#[derive(Debug)]
pub struct RawManifest {
    entries: SpillLog,
    inline: SpillLog,
    len: usize,
    encoded: Vec<u8>,
}

/// Tags of the encoded entries.
const CLEAR: u8 = 0;
const VIRTUAL: u8 = 1;
const INLINE: u8 = 2;
const ASSEMBLED: u8 = 3;

impl RawManifest {
    /// An empty manifest drawing on `scratch`.
    pub fn new(scratch: &Scratch) -> Self {
        Self { entries: SpillLog::new(scratch), inline: SpillLog::new(scratch), len: 0, encoded: Vec::new() }
    }

    /// Adds an entry with the manifest key's indices (at most 255 of them).
    pub fn push(&mut self, indices: &[u64], r: RawRef) {
        let e = &mut self.encoded;
        e.clear();
        e.push(indices.len() as u8);
        indices.iter().for_each(|i| put_varint(e, *i));
        match r {
            RawRef::Clear => e.push(CLEAR),
            RawRef::Virtual { url, offset, length } => {
                e.push(VIRTUAL);
                [u64::from(url), offset, length].into_iter().for_each(|v| put_varint(e, v));
            }
            RawRef::Inline { start, len } => {
                e.push(INLINE);
                [start, len].into_iter().for_each(|v| put_varint(e, v));
            }
            RawRef::Assembled { start, len } => {
                e.push(ASSEMBLED);
                [start, len].into_iter().for_each(|v| put_varint(e, v));
            }
        }
        self.entries.append(&self.encoded);
        self.len += 1;
    }

    /// Adds an inline entry, copying its bytes.
    pub fn push_inline(&mut self, indices: &[u64], data: &[u8]) {
        let start = self.inline.append(data);
        self.push(indices, RawRef::Inline { start, len: data.len() as u64 });
    }

    /// Adds an assembled chunk, copying its encoded recipe.
    pub fn push_assembled(&mut self, indices: &[u64], recipe: &[u8]) {
        let start = self.inline.append(recipe);
        self.push(indices, RawRef::Assembled { start, len: recipe.len() as u64 });
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A cursor over the entries, in document order.
    pub fn cursor(&self) -> EntryCursor<'_> {
        EntryCursor { reader: self.entries.reader(), left: self.len, indices: Vec::new() }
    }

    /// Every entry, in memory: for documents known to be small (a PATCH) and tests.
    pub fn entries(&self) -> io::Result<Vec<(Vec<u64>, RawRef)>> {
        let mut all = Vec::with_capacity(self.len);
        let mut cursor = self.cursor();
        while let Some((indices, r)) = cursor.next_entry()? {
            all.push((indices.to_vec(), r));
        }
        Ok(all)
    }

    /// The bytes of an inline reference, into `out`.
    pub fn inline_bytes(&self, start: u64, len: u64, out: &mut Vec<u8>) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.inline.read_at(start, len, out)
    }

    /// All inline bytes, in memory (offsets as in the references).
    pub fn inline_all(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.inline.reader().read_to_end(&mut out)?;
        Ok(out)
    }
}

impl Default for RawManifest {
    fn default() -> Self {
        Self::new(&Scratch::in_memory())
    }
}

/// Reads the entries of a [`RawManifest`] one at a time.
#[derive(Debug)]
pub struct EntryCursor<'a> {
    reader: io::BufReader<LogReader<'a>>,
    left: usize,
    indices: Vec<u64>,
}

impl EntryCursor<'_> {
    /// The next entry's indices and reference; `None` after the last.
    pub fn next_entry(&mut self) -> io::Result<Option<(&[u64], RawRef)>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let r = &mut self.reader;
        let ndim = get_u8(r)?;
        self.indices.clear();
        for _ in 0..ndim {
            self.indices.push(get_varint(r)?);
        }
        let entry = match get_u8(r)? {
            CLEAR => RawRef::Clear,
            VIRTUAL => {
                let url = u32::try_from(get_varint(r)?).map_err(io::Error::other)?;
                RawRef::Virtual { url, offset: get_varint(r)?, length: get_varint(r)? }
            }
            INLINE => RawRef::Inline { start: get_varint(r)?, len: get_varint(r)? },
            ASSEMBLED => RawRef::Assembled { start: get_varint(r)?, len: get_varint(r)? },
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "unknown entry in a scratch log")),
        };
        Ok(Some((&self.indices, entry)))
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
    fn kerchunk_paths_are_text_and_come_back_as_text() {
        for (path, stored) in [
            ("/data/run #1/a b é.nc", "file:///data/run%20%231/a%20b%20%C3%A9.nc"),
            ("file:///data/run #1/a b.nc", "file:///data/run%20%231/a%20b.nc"),
            ("s3://bucket/run #1/a?b%20.nc", "s3://bucket/run%20%231/a%3Fb%2520.nc"),
            ("gs://bucket/x.nc", "gs://bucket/x.nc"),
            ("https://example.org/a%20b.nc?x=1", "https://example.org/a%20b.nc?x=1"),
        ] {
            assert_eq!(normalize_literal_path(path).unwrap(), stored, "{path}");
            let back = literal_path(stored);
            assert_eq!(normalize_literal_path(&back).unwrap(), stored, "{path} -> {back}");
        }
        assert_eq!(literal_path("file:///data/run%20%231/a%20b.nc"), "/data/run #1/a b.nc");
        assert_eq!(literal_path("s3://bucket/run%20%231/a%3Fb%2520.nc"), "s3://bucket/run #1/a?b%20.nc");
        assert!(matches!(normalize_literal_path("s3://b/a/../../x"), Err(SourceUrlError::DotDot(_))));
        assert!(matches!(normalize_literal_path("file:///data/../etc/passwd"), Err(SourceUrlError::DotDot(_))));
        assert!(matches!(normalize_literal_path("data/x.nc"), Err(SourceUrlError::Relative(_))));
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
        let entries = m.entries().unwrap();
        assert_eq!(entries[0], (vec![1, 2], RawRef::Virtual { url: 0, offset: 5, length: 6 }));
        assert_eq!(entries[1], (vec![], RawRef::Inline { start: 0, len: 3 }));
        let mut bytes = Vec::new();
        m.inline_bytes(0, 3, &mut bytes).unwrap();
        assert_eq!(bytes, b"abc");
        assert_eq!(split_manifest_key("0.10.2"), Some(vec![0, 10, 2]));
        assert_eq!(split_manifest_key(""), Some(vec![]));
        assert_eq!(split_manifest_key("0..1"), None);
        assert_eq!(split_manifest_key("a"), None);
    }
}

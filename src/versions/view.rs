//! A version as served: its hierarchy, every node's `zarr.json` rendered once (identity and
//! gzip, with strong ETags), and the header values every answer about the version carries,
//! pre-rendered because they are part of the per-request budget.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http::HeaderValue;

use crate::catalog::VersionHead;
use crate::zarr::Hierarchy;
use crate::zarr::v2view::V2View;

/// Documents at least this large are compressed off the async workers: by a task started once
/// the view is built ([`VersionView::compress_large`]), or by a reader asking for gzip first
/// ([`RenderedDoc::gzip_off_workers`]). Smaller ones are compressed when first asked for gzip
/// (tens of microseconds), so that a view of 100,000 arrays is not 100,000 compressions before
/// its first answer. Large ones are not compressed while the view is built: the root of a store
/// of 100,000 arrays is 36 MiB, and its compression (with the groups' documents, as much
/// again) took a third of the time of the first answer, which most clients take uncompressed.
const EAGER_GZIP_BYTES: usize = 8 << 10;

/// One node's `zarr.json`, ready to serve.
#[derive(Debug)]
pub struct RenderedDoc {
    /// Uncompressed body.
    pub identity: Bytes,
    /// Gzip-compressed body, when smaller; computed once (shared with the task computing it).
    gzip: Arc<OnceLock<Option<Bytes>>>,
    /// The one blocking task compressing a large body for readers, once one has asked: every
    /// reader awaits it, and a reader that leaves neither cancels it nor starts another.
    compressing: OnceLock<Shared<BoxFuture<'static, Option<Bytes>>>>,
    /// Strong ETag of the identity body.
    pub etag: HeaderValue,
    /// Strong ETag of the gzip body.
    pub gzip_etag: HeaderValue,
}

impl RenderedDoc {
    /// `identity` ready to serve under version `version`. ETags include the version: the same
    /// document registered again is a new response (its `Zarrgate-Version` differs), so a cache
    /// revalidating it must not keep the old version's headers. Nothing is compressed yet.
    pub fn new(identity: Bytes, version: i64) -> Self {
        let tag = etag('m', &identity);
        let tag = tag.trim_end_matches('"');
        let value = |suffix: &str| {
            HeaderValue::from_str(&format!("{tag}-v{version}{suffix}\"")).unwrap_or(HeaderValue::from_static("\"\""))
        };
        Self { etag: value(""), gzip_etag: value("-gz"), identity, gzip: Arc::default(), compressing: OnceLock::new() }
    }

    /// The gzip-compressed body, when it is smaller than the identity body; compressed here if
    /// no one has yet (blocking: on the async workers, only for documents under
    /// [`EAGER_GZIP_BYTES`]).
    pub fn gzip(&self) -> Option<&Bytes> {
        self.gzip.get_or_init(|| compressed(&self.identity)).as_ref()
    }

    /// The gzip-compressed body (as [`RenderedDoc::gzip`]), compressed on a blocking thread when
    /// it is large and not yet made: one thread for all the readers who ask meanwhile (they
    /// wait asynchronously), and at most one more if the view's own task is compressing it then.
    pub async fn gzip_off_workers(&self) -> Option<Bytes> {
        if let Some(done) = self.gzip_now() {
            return done;
        }
        let pending = self.compressing.get_or_init(|| {
            let (cell, identity) = (Arc::clone(&self.gzip), self.identity.clone());
            let task = tokio::task::spawn_blocking(move || cell.get_or_init(|| compressed(&identity)).clone());
            async move { task.await.ok().flatten() }.boxed().shared()
        });
        pending.clone().await
    }

    /// The gzip-compressed body (as [`RenderedDoc::gzip`]) if it needs no waiting: made, or small
    /// enough to make here; `None` for a large one not yet made ([`RenderedDoc::gzip_off_workers`]).
    pub fn gzip_now(&self) -> Option<Option<Bytes>> {
        if let Some(done) = self.gzip.get() {
            return Some(done.clone());
        }
        (self.identity.len() < EAGER_GZIP_BYTES).then(|| self.gzip().cloned())
    }

    /// What it weighs: its bodies, a lazily compressed one counted at half the identity's size.
    pub fn weight(&self) -> usize {
        let gzip = match self.gzip.get() {
            Some(z) => z.as_ref().map_or(0, Bytes::len),
            None => self.identity.len() / 2,
        };
        self.identity.len() + gzip + 128
    }
}

/// A version's metadata, as served.
#[derive(Debug)]
pub struct VersionView {
    /// Which version.
    pub head: VersionHead,
    /// Its nodes.
    pub hierarchy: Hierarchy,
    /// Each node's rendered document, by node index.
    pub docs: Vec<RenderedDoc>,
    /// `Zarrgate-Version`, ready to send.
    pub version_header: HeaderValue,
    /// `Last-Modified` (when the version was registered), ready to send.
    pub last_modified: HeaderValue,
}

impl VersionView {
    /// Renders every node's document once (see [`RenderedDoc::new`]).
    pub fn new(head: VersionHead, hierarchy: Hierarchy) -> Self {
        let docs = hierarchy.nodes().map(|node| RenderedDoc::new(node.zarr_json.clone(), head.id)).collect();
        let when = chrono::DateTime::from_timestamp_millis(head.created_at_ms).unwrap_or_default();
        let last_modified = HeaderValue::from_str(&when.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
            .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
        Self { version_header: HeaderValue::from(head.id), last_modified, head, hierarchy, docs }
    }

    /// Compresses every document of at least [`EAGER_GZIP_BYTES`], largest first (the root's
    /// is usually the largest and the most asked for). Blocking: run it on a blocking thread,
    /// once the view is built and served.
    pub fn compress_large(&self) {
        let mut large: Vec<&RenderedDoc> =
            self.docs.iter().filter(|d| d.identity.len() >= EAGER_GZIP_BYTES && d.gzip.get().is_none()).collect();
        large.sort_by_key(|d| std::cmp::Reverse(d.identity.len()));
        for doc in large {
            doc.gzip();
        }
    }

    /// What the view weighs in the cache, in bytes (saturating).
    pub fn weight(&self) -> u32 {
        let docs: usize = self.docs.iter().map(RenderedDoc::weight).sum();
        u32::try_from(self.hierarchy.weight() + docs).unwrap_or(u32::MAX)
    }
}

/// `data` gzip-compressed, when that is smaller.
fn compressed(data: &Bytes) -> Option<Bytes> {
    gzip(data).filter(|z| z.len() < data.len())
}

fn gzip(data: &[u8]) -> Option<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 4), flate2::Compression::default());
    encoder.write_all(data).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

/// A strong ETag derived from content only, so every replica and restart agrees:
/// `"<kind><xxh3-128 in 32 hex digits>"`. Made for every inline chunk served, so written out
/// digit by digit rather than through `format!`.
pub fn etag(kind: char, content: &[u8]) -> String {
    let hash = xxhash_rust::xxh3::xxh3_128(content);
    let mut kind_utf8 = [0; 4];
    let kind = kind.encode_utf8(&mut kind_utf8).as_bytes();
    let mut tag = Vec::with_capacity(kind.len() + 34);
    tag.push(b'"');
    tag.extend_from_slice(kind);
    tag.extend((0..32).rev().map(|digit| b"0123456789abcdef"[((hash >> (digit * 4)) & 0xf) as usize]));
    tag.push(b'"');
    String::from_utf8(tag).unwrap_or_default()
}

/// A version's Zarr v2 view with its documents ready to serve (built by `v2.rs`).
#[derive(Debug)]
pub struct V2Rendered {
    /// The view (key resolution, what was left out).
    pub view: V2View,
    /// Each document, by key.
    pub docs: HashMap<String, RenderedDoc>,
}

impl V2Rendered {
    /// Its weight in the `v2_views` cache, in bytes.
    pub(super) fn weight(&self) -> u32 {
        let docs: usize = self.docs.values().map(|d| d.weight()).sum();
        u32::try_from(self.view.weight() + docs).unwrap_or(u32::MAX)
    }
}

/// A quick look as served: the PNG and its scale, the chunks it was drawn from and their ETags.
#[derive(Debug, Clone)]
pub struct RenderedQuicklook {
    /// The PNG image.
    pub png: Bytes,
    /// The smallest value drawn, unpacked (`None` when every value is fill, missing or NaN).
    pub min: Option<f64>,
    /// The largest value drawn.
    pub max: Option<f64>,
    /// The `units` of the values, when the attributes say.
    pub units: Option<String>,
    /// The slice's shape before sampling (rows, columns).
    pub plane: [u64; 2],
    /// The first chunk drawn, as its key names it (`c/0/0/0`, `0.0.0`...).
    pub chunk: String,
    /// The chunks read, and the chunks the slice spans (more when a strided subset was read).
    pub chunks_read: usize,
    /// The chunks the slice spans.
    pub chunks_spanned: u64,
    /// The strong ETags of the chunks drawn as stored (`missing` for a missing chunk), joined.
    pub chunk_etag: String,
    /// The coordinates along the rows and the columns: name, first and last value, when a 1-D
    /// coordinate array named by `dimension_names` has them.
    pub axes: [Option<(String, f64, f64)>; 2],
}

impl RenderedQuicklook {
    /// What it weighs in the cache, in bytes.
    pub(super) fn weight(&self) -> u32 {
        u32::try_from(self.png.len() + self.chunk.len() + self.chunk_etag.len() + 256).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_is_the_kind_and_the_hash_in_hex() {
        for content in [&b""[..], b"x", &[0u8; 1024], b"\x00\xff chunk bytes"] {
            let expected = format!("\"i{:032x}\"", xxhash_rust::xxh3::xxh3_128(content));
            assert_eq!(etag('i', content), expected);
        }
        assert_eq!(etag('m', b"{}").len(), 35);
    }
}

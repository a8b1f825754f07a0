//! The one lookup of the read path: which version, view, block and chunk a read URL names.
//! Every way into a read asks it (the plain reads on the connection, the read in front of the
//! router, the router's handlers, the v2 view, listings and pages), with or without waiting.
//!
//! A lookup goes step by step: the store's head, the version's view, what the key names in it
//! (pure: [`Hierarchy::resolve`](crate::zarr::Hierarchy::resolve), or the Zarr v2 view's
//! resolver), the chunk's block, the chunk (a fill chunk for a missing one, where the store asks
//! for it). [`Reader::lookup_now`] takes each step from what this worker thread has at hand (the
//! fronts of the caches) and stops at the first it would have to wait for; [`Reader::lookup`]
//! goes on from there, waiting for the caches and the catalog. Both take a step the same way,
//! and each step is taken once per read: a read that starts without waiting and ends waiting (or
//! on another way in) hands over the [`Lookup`] as far as it got, so every cache hit and miss
//! is counted once, by the cache that had it.

use std::sync::Arc;

use super::error::{Error, Result};
use super::read::{Chunk, InBlock, Reader, chunk_in};
use super::view::{V2Rendered, VersionView, etag};
use crate::catalog::{StoreHead, VersionHead};
use crate::zarr::hierarchy::Node;
use crate::zarr::v2view::{V2Resolved, V2View};
use crate::zarr::{ChunkLocation, ManifestBlock, Resolved};

/// Which keys a read URL names: a version's Zarr v3 keys, or those of its Zarr v2 view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// `/{store}/...`.
    V3,
    /// `/v2/{store}/...`.
    V2,
}

/// A read URL, as far as the lookup is concerned: the store as the URL writes it (`name` or
/// `name@version`), the key under it (`None`: the version itself, for a listing or a page),
/// and which keys it names.
#[derive(Debug, Clone, Copy)]
pub struct ReadUrl<'a> {
    /// The store as the URL writes it.
    pub segment: &'a str,
    /// The key under it, if the read names one.
    pub key: Option<&'a str>,
    /// Which view's keys.
    pub keys: Keys,
}

/// What a read URL names, found: the version's view, the version the URL pins (if any), and
/// what the key names in it.
#[derive(Debug)]
pub struct Found {
    /// The version's view.
    pub view: Arc<VersionView>,
    /// The version the URL pins (`None`: the store's current one).
    pub pinned: Option<i64>,
    /// What the key names in it.
    pub named: Named,
}

/// What a key names in a version. A new kind of chunk (assembled from pieces of several
/// sources, say) is one more [`Chunk`] variant, made by the chunk step (`read.rs`, `chunk_in`,
/// from the chunk's reference in its block).
#[derive(Debug)]
pub enum Named {
    /// The version itself (a URL with no key).
    Version,
    /// The `zarr.json` of the node at this index.
    Metadata(u32),
    /// A document of the version's Zarr v2 view (the URL's key, in `docs`).
    V2Document(Arc<V2Rendered>),
    /// The chunk at `at` of the array at index `node`.
    Chunk { node: u32, at: ChunkLocation, chunk: Chunk },
    /// Not a key of the view: the resolver's reason, if it gave one (a node's path without its
    /// `/` is the caller's to redirect).
    Unknown(Option<String>),
    /// A key of the view with nothing behind it, and why.
    NotFound(String),
}

/// A lookup as far as it got.
#[derive(Debug)]
pub enum Lookup {
    /// It has to wait (for a cache shared between threads, or the catalog) to go on.
    Pending(Pending),
    /// Done.
    Found(Found),
    /// Failed: the read answers this error.
    Failed(Error),
}

/// A lookup that has to wait to go on: the version the URL pins, and the step it stopped at.
#[derive(Debug)]
pub struct Pending {
    pinned: Option<i64>,
    step: Step,
}

/// The steps of a lookup, each holding what the ones before found.
#[derive(Debug)]
enum Step {
    /// The store's head.
    Head,
    /// The version's view.
    View(Arc<StoreHead>),
    /// What the key names in the view.
    Named(Arc<VersionView>),
    /// The version's Zarr v2 view (never at hand: no front).
    V2(Arc<VersionView>),
    /// What the key names in the v2 view.
    V2Named(Arc<VersionView>, Arc<V2Rendered>),
    /// The block of the chunk at `at` of array `node`.
    Block { view: Arc<VersionView>, node: u32, at: ChunkLocation },
    /// The chunk in its block.
    Chunk { view: Arc<VersionView>, node: u32, at: ChunkLocation, block: Arc<ManifestBlock> },
    /// The array's fill chunk, for a chunk missing from a store served with `missing_chunks = "fill"`.
    Fill { view: Arc<VersionView>, node: u32, at: ChunkLocation },
    /// A chunk assembled from pieces (of joined files' chunks), from its encoded recipe.
    Assemble { view: Arc<VersionView>, node: u32, at: ChunkLocation, recipe: bytes::Bytes },
    /// A chunk of an array served with portable codecs, to transcode.
    Transcode { view: Arc<VersionView>, node: u32, at: ChunkLocation, chunk: Box<Chunk> },
    /// Found.
    Done(Named, Arc<VersionView>),
}

impl Reader {
    /// What `url` names, from what this worker thread has at hand: no waiting, no lock, no
    /// shared cache. [`Lookup::Pending`] when a step needs more; [`Reader::lookup`] goes on
    /// from there.
    pub fn lookup_now(&self, url: &ReadUrl<'_>) -> Lookup {
        let pinned = match pinned_version(url.segment) {
            Ok((_, pinned)) => pinned,
            Err(e) => return Lookup::Failed(e),
        };
        // The steps of the commonest read (a metadata document, its head and view at hand) in a
        // straight line, the rest by `go_on_now`: each turn of its loop moves the step, and
        // callgrind counted ~400 instructions more per `zarr.json` without this.
        let Some(head) = self.head_now(url) else {
            return Lookup::Pending(Pending { pinned, step: Step::Head });
        };
        let view = match self.view_now(&head, url, pinned) {
            Ok(view) => view,
            Err(e) => return Lookup::Failed(e),
        };
        let Some(view) = view else {
            return Lookup::Pending(Pending { pinned, step: Step::View(head) });
        };
        match named(view, url) {
            Step::Done(named, view) => Lookup::Found(Found { view, pinned, named }),
            step => self.go_on_now(url, Pending { pinned, step }),
        }
    }

    /// What `url` names: `so_far` (a lookup of the same URL, or a fresh start if `None`) taken
    /// to its end, waiting for the caches and the catalog where this worker thread does not have
    /// what a step needs.
    pub async fn lookup(&self, url: &ReadUrl<'_>, so_far: Option<Lookup>) -> Result<Found> {
        let mut lookup = so_far.unwrap_or_else(|| self.lookup_now(url));
        loop {
            let pending = match lookup {
                Lookup::Found(found) => return Ok(found),
                Lookup::Failed(e) => return Err(e),
                Lookup::Pending(pending) => pending,
            };
            let pinned = pending.pinned;
            let step = self.wait_for(url, pending).await?;
            lookup = self.go_on_now(url, Pending { pinned, step });
        }
    }

    /// The head step from this worker thread's front: the store `url` names.
    #[inline]
    fn head_now(&self, url: &ReadUrl<'_>) -> Option<Arc<StoreHead>> {
        self.caches.heads.now(url.segment).map(|(head, _)| head)
    }

    /// The view step from this worker thread's front: the view of the version `head` names
    /// (`None`: not at hand), or why there is no such version.
    #[inline]
    fn view_now(&self, head: &StoreHead, url: &ReadUrl<'_>, pinned: Option<i64>) -> Result<Option<Arc<VersionView>>> {
        let version = version_of(head, url.segment, pinned)?;
        Ok(self.caches.views.now(&version.id))
    }

    /// Takes the steps of `pending` that need no waiting, up to the first that does.
    fn go_on_now(&self, url: &ReadUrl<'_>, Pending { pinned, mut step }: Pending) -> Lookup {
        let wait = |step| Lookup::Pending(Pending { pinned, step });
        loop {
            step = match step {
                Step::Head => match self.head_now(url) {
                    Some(head) => Step::View(head),
                    None => return wait(Step::Head),
                },
                Step::View(head) => match self.view_now(&head, url, pinned) {
                    Ok(Some(view)) => Step::Named(view),
                    Ok(None) => return wait(Step::View(head)),
                    Err(e) => return Lookup::Failed(e),
                },
                Step::Named(view) => named(view, url),
                Step::V2Named(view, rendered) => v2_named(view, rendered, url),
                Step::Block { view, node, at } => match self.caches.blocks.now(&(view.head.id, node, at.tile)) {
                    Some(block) => Step::Chunk { view, node, at, block },
                    None => return wait(Step::Block { view, node, at }),
                },
                Step::Chunk { view, node, at, block } => {
                    let array = match node_of(&view, node) {
                        Ok(array) => array,
                        Err(e) => return Lookup::Failed(e),
                    };
                    match chunk_in(&view, array, at, &block) {
                        Ok(InBlock::Chunk(chunk)) => Step::Done(Named::Chunk { node, at, chunk }, view),
                        Ok(InBlock::Fill) => Step::Fill { view, node, at },
                        Ok(InBlock::Assembled(recipe)) => Step::Assemble { view, node, at, recipe },
                        Ok(InBlock::Transcode(chunk)) => Step::Transcode { view, node, at, chunk: Box::new(chunk) },
                        Err(e) => return Lookup::Failed(e),
                    }
                }
                Step::Done(named, view) => return Lookup::Found(Found { view, pinned, named }),
                // Their caches have no front.
                waiting @ (Step::V2(_) | Step::Fill { .. } | Step::Assemble { .. } | Step::Transcode { .. }) => {
                    return wait(waiting);
                }
            };
        }
    }

    /// Takes the step `pending` stopped at, waiting for what it needs.
    async fn wait_for(&self, url: &ReadUrl<'_>, Pending { pinned, step }: Pending) -> Result<Step> {
        Ok(match step {
            Step::Head => {
                let (name, _) = pinned_version(url.segment)?;
                Step::View(self.head(url.segment, name, pinned).await?)
            }
            Step::View(head) => Step::Named(self.load_view(version_of(&head, url.segment, pinned)?).await?),
            // Boxed, as is the fill chunk's: rare, and their futures would make every wait's larger.
            Step::V2(view) => {
                let rendered = Box::pin(self.v2_view(&view)).await?;
                Step::V2Named(view, rendered)
            }
            Step::Block { view, node, at } => {
                let array = node_of(&view, node)?;
                let block = self.load_block_cached(&view.head, array, at.tile).await?;
                Step::Chunk { view, node, at, block }
            }
            Step::Fill { view, node, at } => {
                let chunk = match Box::pin(self.fill_chunk(&view.head, node_of(&view, node)?)).await? {
                    Some(bytes) => Chunk::Bytes { etag: etag('f', &bytes), bytes },
                    None => Chunk::Missing,
                };
                Step::Done(Named::Chunk { node, at, chunk }, view)
            }
            Step::Assemble { view, node, at, recipe } => {
                let chunk = Box::pin(self.assembled(&view, node_of(&view, node)?, recipe)).await?;
                Step::Done(Named::Chunk { node, at, chunk }, view)
            }
            Step::Transcode { view, node, at, chunk } => {
                let chunk = Box::pin(self.transcoded(&view, node_of(&view, node)?, *chunk)).await?;
                Step::Done(Named::Chunk { node, at, chunk }, view)
            }
            other => other,
        })
    }
}

/// The version `head` names, or why there is none: `segment` is the store as the URL wrote it.
#[inline]
fn version_of<'h>(head: &'h StoreHead, segment: &str, pinned: Option<i64>) -> Result<&'h VersionHead> {
    // The store's name only for an error: its search cost a found read 140 instructions.
    let store = || segment.split_once('@').map_or(segment, |(name, _)| name);
    match head {
        StoreHead::Version(version) => Ok(version),
        // Not 404: a reader still holding the store's metadata would read every chunk as fill.
        StoreHead::Deleted(at_ms) => {
            let at = chrono::DateTime::from_timestamp_millis(*at_ms)
                .map_or_else(|| at_ms.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            let store = store();
            Err(Error::StoreDeleted(format!(
                "store {store:?} was deleted at {at}; nothing is served under this name until a store of that name \
                 is registered again"
            )))
        }
        StoreHead::Unknown => Err(match (pinned, store()) {
            (None, store) => Error::NotFound(format!("no store is named {store:?}")),
            (Some(v), store) => Error::Gone(format!(
                "store {store:?} has no version {v}: it never existed or retention removed it; read \
                 /{store}/zarr.json for the current version"
            )),
        }),
    }
}

fn node_of(view: &VersionView, index: u32) -> Result<&Node> {
    view.hierarchy.node_at(index).ok_or_else(|| Error::Internal(format!("version {}: no node {index}", view.head.id)))
}

/// The step after the view: what the URL's key names in it (pure).
fn named(view: Arc<VersionView>, url: &ReadUrl<'_>) -> Step {
    let Some(key) = url.key else { return Step::Done(Named::Version, view) };
    if url.keys == Keys::V2 {
        return if V2View::may_name(&view.hierarchy, key) {
            Step::V2(view)
        } else {
            Step::Done(Named::Unknown(None), view)
        };
    }
    let named = match view.hierarchy.resolve(key) {
        Resolved::Metadata(node) => Named::Metadata(node.index),
        Resolved::Chunk { node, location, .. } => {
            let node = node.index;
            return Step::Block { view, node, at: location };
        }
        Resolved::NotFound(why) => Named::Unknown(Some(why)),
    };
    Step::Done(named, view)
}

/// The step after the v2 view: what the URL's key names in it (pure).
fn v2_named(view: Arc<VersionView>, rendered: Arc<V2Rendered>, url: &ReadUrl<'_>) -> Step {
    let key = url.key.unwrap_or_default();
    let named = match rendered.view.resolve(&view.hierarchy, key) {
        V2Resolved::Doc(key) if rendered.docs.contains_key(key) => Named::V2Document(Arc::clone(&rendered)),
        V2Resolved::Doc(_) | V2Resolved::Other => Named::Unknown(None),
        V2Resolved::Chunk { node, location, .. } => {
            let node = node.index;
            return Step::Block { view, node, at: location };
        }
        V2Resolved::NotFound(why) => Named::NotFound(why),
    };
    Step::Done(named, view)
}

/// The store's name in a URL's first segment (`era5`, `era5@3`), and the version it pins.
pub fn pinned_version(segment: &str) -> Result<(&str, Option<i64>)> {
    // A byte search: `split_once` costs 100 instructions for a name of a few bytes.
    match segment.bytes().position(|b| b == b'@').map(|at| (&segment[..at], &segment[at + 1..])) {
        None => Ok((segment, None)),
        Some((name, version)) => match version_number(version) {
            Some(v) => Ok((name, Some(v))),
            // Not 404: a client would read every chunk under this URL as fill values.
            None => Err(Error::BadRequest(format!(
                "{version:?} is not a version number: pin a version as /{name}@<number>/..., with the number from \
                 the Zarrgate-Version header or GET /api/v1/stores/{name}"
            ))),
        },
    }
}

/// A version number as written in a pinned URL: digits only, no sign, no leading zero.
fn version_number(text: &str) -> Option<i64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::pinned_version;

    #[test]
    fn a_segment_names_a_store_and_may_pin_a_version() {
        assert_eq!(pinned_version("era5").ok(), Some(("era5", None)));
        assert_eq!(pinned_version("era5@0").ok(), Some(("era5", Some(0))));
        assert_eq!(pinned_version("era5@12").ok(), Some(("era5", Some(12))));
        for bad in ["era5@", "era5@01", "era5@-1", "era5@+1", "era5@1x", "era5@99999999999999999999"] {
            assert!(pinned_version(bad).is_err(), "{bad}");
        }
    }
}

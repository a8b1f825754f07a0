//! Fetching byte ranges of source objects through the registry: time-limited, conditional on the
//! recorded ETag, and checked so that a client never receives fewer or other bytes than promised.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use super::local::{self, LocalError};
use super::registry::{Base, ObjectStoreEntry, SourceRegistry};
use crate::zarr::block::SourceCheck;

/// A failure reading a source object. Every variant is an upstream fault (5xx), never "missing".
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// No object store serves the URL (it was removed after registration).
    #[error("{url} is not under any registered object store")]
    Unregistered { url: String },
    /// The object is gone.
    #[error("source object {url} does not exist in object store {store} (deleted or moved?)")]
    NotFound { url: String, store: String },
    /// The object store refused access; `detail` (the upstream's answer, which may quote the
    /// signed request) is logged, not shown to clients.
    #[error(
        "object store {store} refused access to {url}: check its credentials and permissions; the server log has the upstream's answer"
    )]
    Forbidden { url: String, store: String, detail: String },
    /// The object's ETag (or, when it has none, its size) differs from the one recorded at
    /// registration.
    #[error(
        "source object {url} changed since registration (recorded: {recorded}): its bytes no longer match the manifest; re-register the store"
    )]
    Modified { url: String, store: String, recorded: String },
    /// The object is shorter than the manifest says.
    #[error(
        "source object {url} is shorter than the manifest says: it ends at byte {size}, the chunk needs bytes up to {needed}"
    )]
    Truncated { url: String, store: String, needed: u64, size: String },
    /// The object store did not answer in time.
    #[error("object store {store} did not answer within {seconds} s reading {url}")]
    Timeout { url: String, store: String, seconds: u64 },
    /// Any other upstream failure; `detail` (the client library's error chain) is logged, not
    /// shown to clients.
    #[error("object store {store} failed reading {url}; the server log has the cause")]
    Upstream { url: String, store: String, detail: String },
}

impl SourceError {
    /// The message with the upstream's own words after it, for the log and for answers to
    /// administrators (registration, verify); never for a data-plane answer.
    pub fn explain(&self) -> String {
        match self {
            Self::Forbidden { detail, .. } | Self::Upstream { detail, .. } => format!("{self} (upstream: {detail})"),
            _ => self.to_string(),
        }
    }

    /// The object store involved (empty when none serves the URL).
    pub fn store(&self) -> &str {
        match self {
            Self::Unregistered { .. } => "",
            Self::NotFound { store, .. }
            | Self::Forbidden { store, .. }
            | Self::Modified { store, .. }
            | Self::Truncated { store, .. }
            | Self::Timeout { store, .. }
            | Self::Upstream { store, .. } => store,
        }
    }

    /// A short stable label for metrics and problem types.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unregistered { .. } => "unregistered",
            Self::NotFound { .. } => "not-found",
            Self::Forbidden { .. } => "forbidden",
            Self::Modified { .. } => "modified",
            Self::Truncated { .. } => "truncated",
            Self::Timeout { .. } => "timeout",
            Self::Upstream { .. } => "error",
        }
    }
}

/// Size, ETag and modification time of a source object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFacts {
    /// Size in bytes.
    pub size: u64,
    /// ETag, when the store has one.
    pub etag: Option<String>,
    /// Last modification, RFC 3339.
    pub last_modified: Option<String>,
}

/// A range being read: exactly `len` bytes will come out of `body`, or an error.
pub struct Fetched {
    /// The bytes.
    pub body: Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>,
    /// How many.
    pub len: u64,
    /// The name of the object store serving them.
    pub store: String,
}

impl SourceRegistry {
    fn entry_for(&self, url: &str) -> Result<std::sync::Arc<ObjectStoreEntry>, SourceError> {
        self.resolve(url).ok_or_else(|| SourceError::Unregistered { url: url.to_owned() })
    }

    /// Reads `range` of `url`, refusing an object that no longer passes `check`: conditional on
    /// a strong recorded ETag, and the answer's ETag or size compared with the recorded one.
    pub async fn fetch(&self, url: &str, range: Range<u64>, check: &SourceCheck<'_>) -> Result<Fetched, SourceError> {
        let entry = self.entry_for(url)?;
        let len = range.end - range.start;
        let body = match (&entry.base, &entry.client) {
            (Base::Local { root }, _) => {
                let rel = relative(&entry, url)?;
                let (root, want, owned) = (root.clone(), range.clone(), check.clone().into_owned());
                let opened = tokio::task::spawn_blocking(move || local::open(&root, &rel, want, &owned))
                    .await
                    .map_err(|e| upstream(&entry, url, e.to_string()))?;
                let (file, first) = opened.map_err(|e| local_error(&entry, url, &range, check, e))?;
                let first_end = range.start + first.len() as u64;
                let rest = local::rest(file, first_end, range.end);
                futures::stream::once(async move { Ok(first) }).chain(rest).boxed()
            }
            (_, Some(client)) => {
                let path =
                    entry.object_path(url).ok_or_else(|| upstream(&entry, url, "not a valid object path".into()))?;
                // A weak ETag never satisfies If-Match (RFC 9110 compares strongly): such a
                // source is read unconditionally and its answer's ETag compared below.
                let if_match = match check {
                    SourceCheck::ETag(e) if !e.starts_with("W/") => Some(e.to_string()),
                    _ => None,
                };
                let options =
                    GetOptions { range: Some(GetRange::Bounded(range.clone())), if_match, ..GetOptions::default() };
                let seconds = self.settings.timeout.as_secs();
                let result = tokio::time::timeout(self.settings.timeout, client.get_opts(&path, options))
                    .await
                    .map_err(|_| SourceError::Timeout { url: url.into(), store: entry.name.clone(), seconds })?
                    .map_err(|e| classify(&entry, url, &range, check, seconds, e))?;
                if result.range != range {
                    return Err(SourceError::Truncated {
                        url: url.into(),
                        store: entry.name.clone(),
                        needed: range.end,
                        size: result.meta.size.to_string(),
                    });
                }
                // object_store sends If-Match but does not check the answer: an origin or proxy
                // that ignores the header would hand over a rewritten object's bytes.
                let changed = match check {
                    SourceCheck::ETag(expected) => result.meta.e_tag.as_deref().is_some_and(|e| e != expected),
                    SourceCheck::Size(size) => result.meta.size != *size,
                    SourceCheck::Unchecked => false,
                };
                if changed {
                    tracing::warn!(url, store = %entry.name, recorded = %recorded(check), etag = ?result.meta.e_tag,
                        size = result.meta.size, "source answered for another object than the one registered");
                    return Err(SourceError::Modified {
                        url: url.into(),
                        store: entry.name.clone(),
                        recorded: recorded(check),
                    });
                }
                result.into_stream().map_err(io::Error::other).boxed()
            }
            (_, None) => return Err(upstream(&entry, url, "object store has no client".into())),
        };
        Ok(Fetched {
            body: Box::pin(Exact { inner: body, remaining: len, url: url.to_owned() }),
            len,
            store: entry.name.clone(),
        })
    }

    /// The size, ETag and modification time of `url`.
    pub async fn head(&self, url: &str) -> Result<ObjectFacts, SourceError> {
        let entry = self.entry_for(url)?;
        match (&entry.base, &entry.client) {
            (Base::Local { root }, _) => {
                let (root, rel) = (root.clone(), relative(&entry, url)?);
                let facts = tokio::task::spawn_blocking(move || local::head(&root, &rel))
                    .await
                    .map_err(|e| upstream(&entry, url, e.to_string()))?
                    .map_err(|e| local_error(&entry, url, &(0..0), &SourceCheck::Unchecked, e))?;
                let modified: chrono::DateTime<chrono::Utc> = facts.modified.into();
                Ok(ObjectFacts { size: facts.size, etag: Some(facts.etag), last_modified: Some(modified.to_rfc3339()) })
            }
            (_, Some(client)) => {
                let path =
                    entry.object_path(url).ok_or_else(|| upstream(&entry, url, "not a valid object path".into()))?;
                let seconds = self.settings.timeout.as_secs();
                let meta = tokio::time::timeout(self.settings.timeout, client.head(&path))
                    .await
                    .map_err(|_| SourceError::Timeout { url: url.into(), store: entry.name.clone(), seconds })?
                    .map_err(|e| classify(&entry, url, &(0..0), &SourceCheck::Unchecked, seconds, e))?;
                Ok(ObjectFacts {
                    size: meta.size,
                    etag: meta.e_tag,
                    last_modified: Some(meta.last_modified.to_rfc3339()),
                })
            }
            (_, None) => Err(upstream(&entry, url, "object store has no client".into())),
        }
    }
}

fn relative(entry: &ObjectStoreEntry, url: &str) -> Result<String, SourceError> {
    entry.object_path(url).map(|p| p.to_string()).ok_or_else(|| upstream(entry, url, "not a valid object path".into()))
}

fn upstream(entry: &ObjectStoreEntry, url: &str, detail: String) -> SourceError {
    SourceError::Upstream { url: url.into(), store: entry.name.clone(), detail }
}

fn local_error(
    entry: &ObjectStoreEntry,
    url: &str,
    range: &Range<u64>,
    check: &SourceCheck<'_>,
    e: LocalError,
) -> SourceError {
    let (url, store) = (url.to_owned(), entry.name.clone());
    match e {
        LocalError::NotFound => SourceError::NotFound { url, store },
        LocalError::Escapes => SourceError::Forbidden {
            url,
            store,
            detail: "the path resolves outside the object store's directory".into(),
        },
        LocalError::Denied(e) => SourceError::Forbidden { url, store, detail: e.to_string() },
        LocalError::Modified => SourceError::Modified { url, store, recorded: recorded(check) },
        LocalError::Truncated { size } => {
            SourceError::Truncated { url, store, needed: range.end, size: size.to_string() }
        }
        LocalError::Io(e) => SourceError::Upstream { url, store, detail: e.to_string() },
    }
}

fn classify(
    entry: &ObjectStoreEntry,
    url: &str,
    range: &Range<u64>,
    check: &SourceCheck<'_>,
    seconds: u64,
    e: object_store::Error,
) -> SourceError {
    let (url, store) = (url.to_owned(), entry.name.clone());
    match e {
        object_store::Error::NotFound { .. } => SourceError::NotFound { url, store },
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            SourceError::Forbidden { url, store, detail: e.to_string() }
        }
        object_store::Error::Precondition { .. } => SourceError::Modified { url, store, recorded: recorded(check) },
        other => {
            let text = error_chain(&other);
            // Not "timeout": after a retry object_store's message says "retry_timeout: ..." whatever
            // the failure was (an upstream 500 would read as a 504).
            if text.contains("timed out") {
                SourceError::Timeout { url, store, seconds }
            } else if text.contains("status code: 416")
                || text.contains("Range Not Satisfiable")
                || text.contains("InvalidRange")
            {
                SourceError::Truncated { url, store, needed: range.end, size: "unknown".into() }
            } else {
                SourceError::Upstream { url, store, detail: text }
            }
        }
    }
}

/// What was recorded of a source, for messages.
fn recorded(check: &SourceCheck<'_>) -> String {
    match check {
        SourceCheck::ETag(e) => format!("ETag {e}"),
        SourceCheck::Size(n) => format!("size {n} bytes"),
        SourceCheck::Unchecked => "nothing".into(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Passes exactly `remaining` bytes through, or fails: fewer bytes (a short read) or more (an
/// upstream that ignored the range) end the stream with an error, so the response is aborted.
struct Exact {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>,
    remaining: u64,
    url: String,
}

impl Stream for Exact {
    type Item = Result<Bytes, io::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                if bytes.len() as u64 > self.remaining {
                    let msg = format!("{} sent more bytes than requested", self.url);
                    self.remaining = 0;
                    return Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::InvalidData, msg))));
                }
                self.remaining -= bytes.len() as u64;
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(None) if self.remaining > 0 => {
                let msg = format!("{} ended {} bytes early", self.url, self.remaining);
                self.remaining = 0;
                Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, msg))))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exact_refuses_short_and_long_bodies() {
        let collect = |parts: Vec<&'static [u8]>, remaining| async move {
            let inner = futures::stream::iter(parts.into_iter().map(|p| Ok(Bytes::from_static(p)))).boxed();
            Exact { inner, remaining, url: "u".into() }
                .try_fold(Vec::new(), |mut all, b| async move {
                    all.extend_from_slice(&b);
                    Ok(all)
                })
                .await
        };
        assert_eq!(&collect(vec![b"ab", b"c"], 3).await.unwrap()[..], b"abc");
        assert_eq!(collect(vec![b"ab"], 3).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(collect(vec![b"ab", b"cd"], 3).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}

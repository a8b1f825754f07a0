//! Fetching byte ranges of source objects through the registry: time-limited, conditional on the
//! recorded ETag, and checked so that a client never receives fewer or other bytes than promised.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::ObjectStoreExt;
use tokio::sync::OwnedSemaphorePermit;

use super::SourceError;
use super::error::classify;
use super::local::{self, LocalError};
use super::meter::{StoreMeters, count_failure};
use super::registry::{Base, ObjectStoreEntry, SourceRegistry};
use super::resume::{self, Remote};
use crate::metrics::Metrics;
use crate::zarr::source::{SourceCheck, SourceFacts};

/// A range being read: exactly `len` bytes will come out of `body`, or an error (a short or
/// long body, or an upstream failing mid-way: the response is then aborted, never truncated).
pub struct Fetched {
    /// The bytes, counted in the upstream metrics as they pass.
    pub body: Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>,
    /// How many.
    pub len: u64,
}

impl SourceRegistry {
    fn entry_for(&self, url: &str) -> Result<std::sync::Arc<ObjectStoreEntry>, SourceError> {
        self.resolve(url).ok_or_else(|| SourceError::Unregistered { url: url.to_owned() })
    }

    /// Reads `range` of `url`, refusing an object that no longer passes `check`: conditional on
    /// a strong recorded ETag, and the answer's ETag or size compared with the recorded one.
    /// Requests, bytes and time are counted by object store.
    /// Reads of remote object stores with read-ahead on, up to `sources.buffer_chunk_bytes`, of
    /// sources with a recorded ETag, share, widen and read ahead of upstream requests
    /// (flight.rs).
    pub async fn fetch(&self, url: &str, range: Range<u64>, check: &SourceCheck<'_>) -> Result<Fetched, SourceError> {
        let len = range.end.saturating_sub(range.start);
        if matches!(check, SourceCheck::ETag(_) | SourceCheck::Digest(_))
            && len > 0
            && len <= self.settings.buffer_bytes
            && let Some(entry) = self.resolve(url)
            && let Some(blocks) = &entry.blocks
        {
            let meters = self.metrics.as_ref().map(|m| meters(m, &entry));
            let remote = self.remote(&entry, url)?;
            let wait = (self.settings.timeout, self.settings.max_concurrent);
            let bytes = blocks.read(&entry.slots, remote, range, check, wait, meters).await?;
            if let Some(meters) = meters {
                meters.served.inc_by(len);
            }
            return Ok(Fetched { body: futures::stream::once(async move { Ok(bytes) }).boxed(), len });
        }
        self.fetch_exact(url, range, check).await
    }

    /// [`Self::fetch`], collected: the whole range in memory (for a reader that decodes it, such
    /// as an assembled chunk's pieces). A body that breaks off is the source's error.
    pub async fn fetch_bytes(
        &self,
        url: &str,
        range: Range<u64>,
        check: &SourceCheck<'_>,
    ) -> Result<Bytes, SourceError> {
        let fetched = self.fetch(url, range, check).await?;
        resume::collect(fetched.body, fetched.len).await.map_err(|e| {
            resume::source_error(&e).unwrap_or_else(|| SourceError::Upstream {
                url: url.to_owned(),
                store: self.resolve(url).map_or_else(String::new, |entry| entry.name.clone()),
                detail: e.to_string(),
            })
        })
    }

    /// Reads exactly `range` of `url` in a request of its own, checked as [`Self::fetch`] does,
    /// without the shared read-ahead blocks: for a reader (a file's parser) that decides itself
    /// what to read around what it needs, and must count what it fetched.
    pub async fn fetch_exact(
        &self,
        url: &str,
        range: Range<u64>,
        check: &SourceCheck<'_>,
    ) -> Result<Fetched, SourceError> {
        let started = std::time::Instant::now();
        let fetched = self.fetch_unmetered(url, range, check).await;
        let (mut fetched, entry) = match fetched {
            Ok(fetched) => fetched,
            Err(e) => {
                if let Some(metrics) = &self.metrics {
                    count_failure(metrics, &e);
                }
                return Err(e);
            }
        };
        let meters = self.metrics.as_ref().map(|m| meters(m, &entry));
        if let Some(meters) = meters {
            meters.duration.observe(started.elapsed().as_secs_f64());
        }
        // A chunk small enough is read whole before the answer starts, so that an upstream
        // failing mid-body is a clean 502/504 rather than an aborted 200. Local files stream.
        if entry.client.is_some() && fetched.len > 0 && fetched.len <= self.settings.buffer_bytes {
            let bytes = match resume::collect(fetched.body, fetched.len).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    let e = resume::source_error(&e).unwrap_or_else(|| SourceError::Upstream {
                        url: url.to_owned(),
                        store: entry.name.clone(),
                        detail: e.to_string(),
                    });
                    if let Some(metrics) = &self.metrics {
                        count_failure(metrics, &e);
                    }
                    return Err(e);
                }
            };
            if let Some(meters) = meters {
                meters.bytes.inc_by(bytes.len() as u64);
                meters.served.inc_by(bytes.len() as u64);
                meters.ok.inc();
            }
            fetched.body = futures::stream::once(async move { Ok(bytes) }).boxed();
            return Ok(fetched);
        }
        let Some(meters) = meters else { return Ok(fetched) };
        if fetched.len == 0 {
            meters.ok.inc();
        }
        fetched.body = Box::pin(Metered { inner: fetched.body, remaining: fetched.len, meters: meters.clone() });
        Ok(fetched)
    }

    async fn fetch_unmetered(
        &self,
        url: &str,
        range: Range<u64>,
        check: &SourceCheck<'_>,
    ) -> Result<(Fetched, std::sync::Arc<ObjectStoreEntry>), SourceError> {
        let entry = self.entry_for(url)?;
        let slot = self.slot(&entry, url).await?;
        let len = range.end - range.start;
        let body = match (&entry.base, &entry.client) {
            (Base::Local(files), _) => {
                let rel = relative(&entry, url)?;
                let opened = files.open(&rel, range.clone(), check).await;
                let (first, rest) = opened.map_err(|e| local_error(&entry, url, &range, check, e))?;
                futures::stream::once(async move { Ok(first) }).chain(rest).boxed()
            }
            _ => self.remote(&entry, url)?.read(range.clone(), check).await?.0,
        };
        let body = Exact { inner: body, remaining: len, url: url.to_owned(), _slot: Some(slot) };
        Ok((Fetched { body: Box::pin(body), len }, entry))
    }

    /// Where reads of `url` in remote object store `entry` go.
    fn remote(&self, entry: &ObjectStoreEntry, url: &str) -> Result<Remote, SourceError> {
        let client = entry.client.clone().ok_or_else(|| upstream(entry, url, "object store has no client".into()))?;
        let path = entry.object_path(url).ok_or_else(|| upstream(entry, url, "not a valid object path".into()))?;
        Ok(Remote {
            client,
            path,
            url: url.to_owned(),
            store: entry.name.clone(),
            first_byte: entry.first_byte_timeout.unwrap_or(self.settings.timeout),
            retries: self.settings.retries,
            retried: self.metrics.as_ref().map(|m| meters(m, entry).retries.clone()),
            clip: false,
        })
    }

    /// One of `entry`'s request slots, waiting up to the request timeout for it.
    async fn slot(&self, entry: &ObjectStoreEntry, url: &str) -> Result<OwnedSemaphorePermit, SourceError> {
        match tokio::time::timeout(self.settings.timeout, entry.slots.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(SourceError::Busy {
                url: url.into(),
                store: entry.name.clone(),
                limit: self.settings.max_concurrent,
                seconds: self.settings.timeout.as_secs(),
            }),
        }
    }

    /// Opens `url` to parse it: its facts and its first `len` bytes (all of it if shorter). From
    /// a remote object store this is one ranged GET, whose answer describes the object, not a
    /// HEAD and then a GET: a round trip less for every file read.
    pub async fn open_prefix(&self, url: &str, len: u64) -> Result<(SourceFacts, Bytes), SourceError> {
        let entry = self.entry_for(url)?;
        if entry.client.is_none() || len == 0 {
            let facts = self.head(url).await?;
            let size = facts.size.unwrap_or(0).min(len);
            if size == 0 {
                return Ok((facts, Bytes::new()));
            }
            let fetched = self.fetch(url, 0..size, &facts.read_check()).await?;
            let bytes = resume::collect(fetched.body, size)
                .await
                .map_err(|e| resume::source_error(&e).unwrap_or_else(|| upstream(&entry, url, e.to_string())))?;
            return Ok((facts, bytes));
        }
        let started = std::time::Instant::now();
        let read = match self.slot(&entry, url).await {
            Ok(_slot) => self.remote(&entry, url)?.read_described(0..len).await,
            Err(e) => Err(e),
        };
        let meters = self.metrics.as_ref().map(|m| meters(m, &entry));
        match read {
            Ok((bytes, meta)) => {
                if let Some(meters) = meters {
                    meters.duration.observe(started.elapsed().as_secs_f64());
                    meters.bytes.inc_by(bytes.len() as u64);
                    meters.ok.inc();
                }
                let modified = Some(meta.last_modified.to_rfc3339());
                Ok((SourceFacts::observed(meta.size, meta.e_tag, modified), bytes))
            }
            Err(e) => {
                // An empty object has no first byte to ask for: a HEAD tells it from a failure.
                if !matches!(e, SourceError::NotFound { .. } | SourceError::Busy { .. })
                    && let Ok(facts) = self.head(url).await
                    && facts.size == Some(0)
                {
                    return Ok((facts, Bytes::new()));
                }
                if let Some(metrics) = &self.metrics {
                    count_failure(metrics, &e);
                }
                Err(e)
            }
        }
    }

    /// The size, ETag and modification time of `url`.
    pub async fn head(&self, url: &str) -> Result<SourceFacts, SourceError> {
        let entry = self.entry_for(url)?;
        let _slot = self.slot(&entry, url).await?;
        match (&entry.base, &entry.client) {
            (Base::Local(files), _) => {
                let (root, rel) = (files.root().to_owned(), relative(&entry, url)?);
                let facts = tokio::task::spawn_blocking(move || local::head(&root, &rel))
                    .await
                    .map_err(|e| upstream(&entry, url, e.to_string()))?
                    .map_err(|e| local_error(&entry, url, &(0..0), &SourceCheck::Unchecked, e))?;
                let modified: chrono::DateTime<chrono::Utc> = facts.modified.into();
                Ok(SourceFacts::observed(facts.size, Some(facts.etag), Some(modified.to_rfc3339())))
            }
            (_, Some(client)) => {
                let path =
                    entry.object_path(url).ok_or_else(|| upstream(&entry, url, "not a valid object path".into()))?;
                let timeout = entry.first_byte_timeout.unwrap_or(self.settings.timeout);
                let seconds = timeout.as_secs().max(1);
                let meta = tokio::time::timeout(timeout, client.head(&path))
                    .await
                    .map_err(|_| SourceError::Timeout { url: url.into(), store: entry.name.clone(), seconds })?
                    .map_err(|e| classify(&entry.name, url, &(0..0), &SourceCheck::Unchecked, seconds, e))?;
                Ok(SourceFacts::observed(meta.size, meta.e_tag, Some(meta.last_modified.to_rfc3339())))
            }
            (_, None) => Err(upstream(&entry, url, "object store has no client".into())),
        }
    }
}

fn meters<'a>(metrics: &Metrics, entry: &'a ObjectStoreEntry) -> &'a StoreMeters {
    entry.meters.get_or_init(|| StoreMeters::bind(metrics, &entry.name))
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
        LocalError::Modified => SourceError::Modified { url, store, recorded: check.to_string() },
        LocalError::Truncated { size } => {
            SourceError::Truncated { url, store, needed: range.end, size: size.to_string() }
        }
        LocalError::Io(e) => SourceError::Upstream { url, store, detail: e.to_string() },
    }
}

/// Passes exactly `remaining` bytes through, or fails: fewer bytes (a short read) or more (an
/// upstream that ignored the range) end the stream with an error, so the response is aborted.
struct Exact {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>,
    remaining: u64,
    url: String,
    /// The object store request slot, held until the body has passed or the reader left.
    _slot: Option<OwnedSemaphorePermit>,
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

/// Counts the bytes of a read as they pass, and whether it ended whole ("ok") or not ("aborted").
struct Metered {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>,
    remaining: u64,
    meters: StoreMeters,
}

impl Stream for Metered {
    type Item = Result<Bytes, io::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.as_mut().poll_next(cx);
        match &item {
            Poll::Ready(Some(Ok(b))) => {
                self.meters.bytes.inc_by(b.len() as u64);
                self.meters.served.inc_by(b.len() as u64);
                let before = self.remaining;
                self.remaining = before.saturating_sub(b.len() as u64);
                if before > 0 && self.remaining == 0 {
                    self.meters.ok.inc();
                }
            }
            Poll::Ready(Some(Err(e))) => {
                self.meters.aborted.inc();
                tracing::warn!(error = %e, "upstream body failed; response aborted");
            }
            _ => {}
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    #[tokio::test]
    async fn exact_refuses_short_and_long_bodies() {
        let collect = |parts: Vec<&'static [u8]>, remaining| async move {
            let inner = futures::stream::iter(parts.into_iter().map(|p| Ok(Bytes::from_static(p)))).boxed();
            Exact { inner, remaining, url: "u".into(), _slot: None }
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

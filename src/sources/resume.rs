//! Reading a byte range from an object store client so that a body cut short is resumed where
//! it stopped: a ranged GET of what is left, conditional on the ETag of the first answer
//! (`If-Match`), whose answer must name the same object (same ETag, or same size when there is
//! none). After `retries` resumed reads the read fails with [`SourceError::Interrupted`] (or
//! `Timeout` for a body that stalled), which the caller turns into a clean 502/504 when it
//! buffers the chunk, or an aborted response when it streams it.

use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use prometheus::IntCounter;

use super::SourceError;
use crate::zarr::source::SourceCheck;

/// Where a read goes: one object of one object store.
#[derive(Clone)]
pub(super) struct Remote {
    pub client: Arc<dyn ObjectStore>,
    pub path: Path,
    pub url: String,
    pub store: String,
    /// Time to the response head of each request (the object store's `first_byte_timeout`).
    pub first_byte: Duration,
    /// Resumed reads allowed after a body breaks off.
    pub retries: usize,
    /// Counts resumed reads (none in unit tests).
    pub retried: Option<IntCounter>,
    /// The range may run past the object's end (a read-ahead): the answer then ends there.
    pub clip: bool,
}

impl Remote {
    /// Opens `range`, checked against `check`; `strict` also refuses an answer without the
    /// ETag `check` names (a resumed read, which must come from the same object).
    async fn open(
        &self,
        range: Range<u64>,
        check: &SourceCheck<'_>,
        strict: bool,
    ) -> Result<(BoxStream<'static, object_store::Result<Bytes>>, ObjectMeta), SourceError> {
        // A weak ETag never satisfies If-Match (RFC 9110 compares strongly): such a source is
        // read unconditionally and its answer's ETag compared below.
        let if_match = match check {
            SourceCheck::ETag(e) if !e.starts_with("W/") => Some(e.to_string()),
            _ => None,
        };
        let options = GetOptions { range: Some(GetRange::Bounded(range.clone())), if_match, ..GetOptions::default() };
        let seconds = self.first_byte.as_secs().max(1);
        let result = tokio::time::timeout(self.first_byte, self.client.get_opts(&self.path, options))
            .await
            .map_err(|_| SourceError::Timeout { url: self.url.clone(), store: self.store.clone(), seconds })?
            .map_err(|e| super::error::classify(&self.store, &self.url, &range, check, seconds, e))?;
        let expected = if self.clip { range.start..range.end.min(result.meta.size) } else { range.clone() };
        if result.range != expected {
            return Err(SourceError::Truncated {
                url: self.url.clone(),
                store: self.store.clone(),
                needed: range.end,
                size: result.meta.size.to_string(),
            });
        }
        // object_store sends If-Match but does not check the answer: an origin or proxy that
        // ignores the header would hand over a rewritten object's bytes.
        if check.contradicted_by(result.meta.e_tag.as_deref(), result.meta.size, strict) {
            tracing::warn!(url = %self.url, store = %self.store, recorded = %check, etag = ?result.meta.e_tag,
                size = result.meta.size, "source answered for another object than the one registered");
            let now = match &result.meta.e_tag {
                Some(etag) => format!("ETag {etag}"),
                None => format!("no ETag, {} bytes", result.meta.size),
            };
            return Err(SourceError::Modified {
                url: self.url.clone(),
                store: self.store.clone(),
                recorded: format!("{check}; it now answers {now}"),
            });
        }
        let meta = result.meta.clone();
        Ok((result.into_stream().boxed(), meta))
    }

    /// Reads `range` (clipped at the object's end) with no check, resuming a body that breaks
    /// off, and returns the object's description from the same answer: what a HEAD would have
    /// said, without the round trip of one.
    pub async fn read_described(self, range: Range<u64>) -> Result<(Bytes, ObjectMeta), SourceError> {
        let remote = Self { clip: true, ..self };
        let (body, meta) = remote.open(range.clone(), &SourceCheck::Unchecked, false).await?;
        let (url, store) = (remote.url.clone(), remote.store.clone());
        let (body, range) = remote.reading(body, &meta, range);
        let bytes = collect(body, range.end - range.start).await.map_err(|e| {
            source_error(&e).unwrap_or_else(|| SourceError::Upstream { url, store, detail: e.to_string() })
        })?;
        Ok((bytes, meta))
    }

    /// Reads `range` checked against `check`, resuming a body that breaks off. Exactly
    /// `range`'s bytes come out (those before the object's end if `clip`), or an error (an
    /// `io::Error` wrapping a [`SourceError`]); the range returned is the one coming.
    pub async fn read(
        self,
        range: Range<u64>,
        check: &SourceCheck<'_>,
    ) -> Result<(BoxStream<'static, io::Result<Bytes>>, Range<u64>), SourceError> {
        let (body, meta) = self.open(range.clone(), check, false).await?;
        Ok(self.reading(body, &meta, range))
    }

    /// The bytes of `range` coming from `body`, the answer that `meta` describes, resumed from
    /// the same object if it breaks off.
    fn reading(
        self,
        body: BoxStream<'static, object_store::Result<Bytes>>,
        meta: &ObjectMeta,
        range: Range<u64>,
    ) -> (BoxStream<'static, io::Result<Bytes>>, Range<u64>) {
        let range = if self.clip { range.start..range.end.min(meta.size) } else { range };
        // Resumed reads must come from the object the first answer came from.
        let same = match &meta.e_tag {
            Some(etag) => SourceCheck::ETag(etag.clone().into()),
            None => SourceCheck::Size(meta.size),
        };
        let state = Reading {
            remote: self,
            same,
            body: Some(body),
            at: range.start,
            end: range.end,
            resumed: 0,
            upstream: String::new(),
        };
        (futures::stream::unfold(state, Reading::next).boxed(), range)
    }
}

/// A read under way.
struct Reading {
    remote: Remote,
    same: SourceCheck<'static>,
    /// `None` once the read has failed.
    body: Option<BoxStream<'static, object_store::Result<Bytes>>>,
    at: u64,
    end: u64,
    resumed: usize,
    /// The client library's words for the last failure (logged, not shown to clients).
    upstream: String,
}

impl Reading {
    async fn next(mut self) -> Option<(io::Result<Bytes>, Self)> {
        loop {
            let body = self.body.as_mut()?;
            let cause = match body.next().await {
                Some(Ok(bytes)) if bytes.len() as u64 > self.end - self.at => {
                    self.body = None;
                    let e = self.interrupted("the object store sent more bytes than asked".into());
                    return Some((Err(io::Error::other(e)), self));
                }
                Some(Ok(bytes)) => {
                    self.at += bytes.len() as u64;
                    return Some((Ok(bytes), self));
                }
                None if self.at == self.end => return None,
                None => {
                    self.upstream = "the body ended before the range did".into();
                    "the body ended early".to_owned()
                }
                Some(Err(e)) => {
                    self.upstream = super::error::error_chain(&e);
                    cause(&self.upstream)
                }
            };
            if cause.contains("timed out") || self.resumed >= self.remote.retries {
                self.body = None;
                let e = if cause.contains("timed out") {
                    let seconds = self.remote.first_byte.as_secs().max(1);
                    SourceError::Timeout { url: self.remote.url.clone(), store: self.remote.store.clone(), seconds }
                } else {
                    self.interrupted(cause)
                };
                return Some((Err(io::Error::other(e)), self));
            }
            self.resumed += 1;
            if let Some(counter) = &self.remote.retried {
                counter.inc();
            }
            tracing::warn!(url = %self.remote.url, store = %self.remote.store, at = self.at, end = self.end,
                attempt = self.resumed, %cause, upstream = %self.upstream, "upstream body broke off; resuming where it stopped");
            match self.remote.open(self.at..self.end, &self.same, true).await {
                Ok((body, _)) => self.body = Some(body),
                Err(e) => {
                    self.body = None;
                    return Some((Err(io::Error::other(e)), self));
                }
            }
        }
    }

    fn interrupted(&self, cause: String) -> SourceError {
        tracing::warn!(url = %self.remote.url, store = %self.remote.store, received = self.at, end = self.end,
            resumed = self.resumed, %cause, upstream = %self.upstream, "upstream body broke off; giving up");
        SourceError::Interrupted {
            url: self.remote.url.clone(),
            store: self.remote.store.clone(),
            at: self.at,
            end: self.end,
            resumed: self.resumed,
            cause,
        }
    }
}

/// What broke a body off, in words of our own (the upstream's text may quote a signed request).
fn cause(text: &str) -> String {
    let text = text.to_ascii_lowercase();
    let what = if text.contains("timed out") || text.contains("timeout") {
        "the body stalled: timed out"
    } else if text.contains("reset") {
        "the connection was reset"
    } else if ["incomplete", "eof", "end of file", "message length", "closed"].iter().any(|w| text.contains(w)) {
        "the connection closed before the body was complete"
    } else {
        "reading the body failed"
    };
    what.to_owned()
}

/// The [`SourceError`] an error of a [`Remote::read`] stream carries, if any.
pub(super) fn source_error(e: &io::Error) -> Option<SourceError> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<SourceError>()).cloned()
}

/// Collects a whole body (a chunk small enough to buffer before answering).
pub(super) async fn collect(body: BoxStream<'static, io::Result<Bytes>>, len: u64) -> io::Result<Bytes> {
    let mut parts: Vec<Bytes> = body.try_collect().await?;
    if parts.len() == 1 {
        return Ok(parts.pop().unwrap_or_default());
    }
    let mut all = bytes::BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
    for part in parts {
        all.extend_from_slice(&part);
    }
    Ok(all.freeze())
}

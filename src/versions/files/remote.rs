//! One file in an object store as a parser reads it ([`ByteRanges`]): a generous first read,
//! then aligned read-ahead windows, every byte kept until the parse ends, within a budget of
//! bytes, requests and time. Parsers run on a blocking thread; each read that misses waits there
//! for its object-store request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use crate::config::FilesConfig;
use crate::formats::{ByteRanges, FormatError};
use crate::sources::{SourceError, SourceRegistry};
use crate::zarr::source::SourceCheck;

/// What reading one file cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// Bytes fetched.
    pub bytes: u64,
    /// Ranged reads made.
    pub requests: u64,
}

/// A file being parsed.
pub struct RemoteFile {
    sources: Arc<SourceRegistry>,
    url: String,
    /// Every read is conditional on the ETag (or size) found first: a file rewritten mid-parse
    /// fails the parse instead of mixing two versions.
    check: SourceCheck<'static>,
    size: u64,
    handle: tokio::runtime::Handle,
    max_bytes: u64,
    max_requests: u64,
    read_ahead: u64,
    deadline: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The bytes fetched, by where they start.
    pieces: BTreeMap<u64, Bytes>,
    cost: ReadCost,
    /// The first upstream failure, reported as itself (a 5xx) whatever the parser makes of it.
    failure: Option<SourceError>,
}

impl RemoteFile {
    /// A file of `size` bytes at `url`, read as `config` says until `deadline`. Call from a
    /// blocking thread of `handle`'s runtime.
    pub fn new(
        sources: Arc<SourceRegistry>,
        url: String,
        check: SourceCheck<'static>,
        size: u64,
        config: &FilesConfig,
        deadline: Instant,
        handle: tokio::runtime::Handle,
    ) -> Self {
        Self {
            sources,
            url,
            check,
            size,
            handle,
            max_bytes: config.max_read_bytes,
            max_requests: config.max_requests,
            read_ahead: config.read_ahead_bytes.max(4096),
            deadline,
            state: Mutex::new(State::default()),
        }
    }

    /// What was read so far.
    pub fn cost(&self) -> ReadCost {
        self.lock().cost
    }

    /// The upstream failure that broke the parse, if one did.
    pub fn take_failure(&self) -> Option<SourceError> {
        self.lock().failure.take()
    }

    /// Reads the first `len` bytes (the whole file if shorter) in one request, and returns them.
    pub fn first(&self, len: u64) -> Result<Bytes, FormatError> {
        let len = len.min(self.size);
        self.fetch(0, len)?;
        self.read(0, len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bytes `offset..end` if one piece already holds them.
    fn held(&self, offset: u64, end: u64) -> Option<Bytes> {
        let state = self.lock();
        let (start, piece) = state.pieces.range(..=offset).next_back()?;
        let piece_end = start + piece.len() as u64;
        (piece_end >= end).then(|| piece.slice((offset - start) as usize..(end - start) as usize))
    }

    /// Fetches `offset..end` from the object store into a piece of its own, within the budget.
    fn fetch(&self, offset: u64, end: u64) -> Result<(), FormatError> {
        if Instant::now() >= self.deadline {
            return Err(FormatError::TooLarge("parsing it took longer than files.parse_seconds allows".into()));
        }
        let len = end - offset;
        {
            let mut state = self.lock();
            if state.cost.requests >= self.max_requests {
                return Err(FormatError::TooLarge(format!(
                    "parsing it needs more than files.max_requests = {} ranged reads",
                    self.max_requests
                )));
            }
            if state.cost.bytes + len > self.max_bytes {
                return Err(FormatError::TooLarge(format!(
                    "parsing it needs more than files.max_read_bytes = {} bytes of its metadata",
                    self.max_bytes
                )));
            }
            state.cost.requests += 1;
            state.cost.bytes += len;
        }
        let fetched = self.handle.block_on(self.get(offset, end));
        let mut state = self.lock();
        match fetched {
            Ok(bytes) => {
                state.pieces.insert(offset, bytes);
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                state.failure.get_or_insert(e);
                Err(FormatError::Read(message))
            }
        }
    }

    async fn get(&self, offset: u64, end: u64) -> Result<Bytes, SourceError> {
        let fetched = self.sources.fetch(&self.url, offset..end, &self.check).await?;
        let mut out = BytesMut::with_capacity((end - offset) as usize);
        let mut body = fetched.body;
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| SourceError::Upstream {
                store: self.sources.resolve(&self.url).map(|e| e.name.clone()).unwrap_or_default(),
                url: self.url.clone(),
                detail: e.to_string(),
            })?;
            out.extend_from_slice(&piece);
        }
        if out.len() as u64 != end - offset {
            return Err(SourceError::Truncated {
                url: self.url.clone(),
                store: self.sources.resolve(&self.url).map(|e| e.name.clone()).unwrap_or_default(),
                needed: end,
                size: (offset + out.len() as u64).to_string(),
            });
        }
        Ok(out.freeze())
    }
}

impl ByteRanges for RemoteFile {
    fn len(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        let end = offset.checked_add(len).filter(|end| *end <= self.size).ok_or_else(|| {
            FormatError::Invalid(format!(
                "it points at bytes {offset}..{} but is only {} bytes long (truncated?)",
                offset.saturating_add(len),
                self.size
            ))
        })?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        if let Some(bytes) = self.held(offset, end) {
            return Ok(bytes);
        }
        // A window aligned to the read-ahead size around the bytes asked for, so that the
        // structures near them (B-tree siblings, heaps) come in the same request.
        let start = offset - offset % self.read_ahead;
        let window_end = end.div_ceil(self.read_ahead).saturating_mul(self.read_ahead).min(self.size);
        self.fetch(start, window_end.max(end))?;
        self.held(offset, end).ok_or_else(|| FormatError::Read("the bytes read are not where asked".into()))
    }
}

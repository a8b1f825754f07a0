//! One file in an object store as a parser reads it ([`ByteRanges`]): a generous first read,
//! then aligned read-ahead windows, every byte kept until the parse ends, within a budget of
//! bytes, requests and time. Parsers run on a blocking thread; each read that misses waits there
//! for its object-store request.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use crate::config::FilesConfig;
use crate::formats::{ByteRanges, FormatError};
use crate::sources::{SourceError, SourceRegistry};
use crate::zarr::source::SourceCheck;

/// The longest window a run of reads in a row grows to, in read-ahead windows.
const MAX_WINDOWS: u64 = 16;

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
    /// Signalled when a fetch lands (or fails), for reads waiting on bytes already coming.
    landed: Condvar,
}

#[derive(Default)]
struct State {
    /// The bytes fetched, by where they start.
    pieces: BTreeMap<u64, Bytes>,
    cost: ReadCost,
    /// The first upstream failure, reported as itself (a 5xx) whatever the parser makes of it.
    failure: Option<SourceError>,
    /// The ranges being fetched: a read inside one waits for it rather than fetching again.
    coming: Vec<(u64, u64)>,
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
            landed: Condvar::new(),
        }
    }

    /// The same file, with `bytes` at `offset` already read (one request, counted).
    pub fn holding(self, offset: u64, bytes: Bytes) -> Self {
        {
            let mut state = self.lock();
            state.cost.requests += 1;
            state.cost.bytes += bytes.len() as u64;
            if !bytes.is_empty() {
                keep(&mut state.pieces, offset, bytes);
            }
        }
        self
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
        if let Some(bytes) = self.held(0, len) {
            return Ok(bytes);
        }
        self.fetch(0, len)?;
        self.read(0, len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `length` bytes at `offset` if a read already brought them (no request is made).
    pub fn already_read(&self, offset: u64, length: u64) -> Option<Bytes> {
        self.held(offset, offset.checked_add(length)?)
    }

    /// The bytes `offset..end` if one piece already holds them.
    fn held(&self, offset: u64, end: u64) -> Option<Bytes> {
        held(&self.lock(), offset, end)
    }

    /// What to fetch for the bytes `offset..end`: a window aligned to the read-ahead size around
    /// them, so that the structures near them (B-tree siblings, heaps) come in the same request.
    /// A read that goes on from where the piece before it ends (other than the first read) is a
    /// walk through metadata laid out in a row (a long header, a sidecar): its window is twice
    /// that piece, up to [`MAX_WINDOWS`] read-ahead windows, so that a long run costs few round
    /// trips.
    fn window(&self, state: &State, offset: u64, end: u64) -> (u64, u64) {
        let mut start = offset - offset % self.read_ahead;
        let mut len = self.read_ahead;
        if let Some((piece_start, piece)) = state.pieces.range(..=offset).next_back() {
            let piece_end = piece_start + piece.len() as u64;
            if piece_end > offset {
                // Bytes that begin in a piece and end past it: only what is missing is fetched
                // (the two pieces then become one).
                start = piece_end;
            } else if *piece_start > 0 && piece_end + self.read_ahead > start {
                // A read just past a piece goes on a run (the first read, long already, is
                // no sign of one).
                len = (piece.len() as u64).saturating_mul(2).clamp(self.read_ahead, MAX_WINDOWS * self.read_ahead);
            }
        }
        let window_end = start.saturating_add(len).max(end);
        (start, window_end.div_ceil(self.read_ahead).saturating_mul(self.read_ahead).min(self.size).max(end))
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
        tracing::debug!(file = %self.url, offset, len, "reading a file's metadata");
        let fetched = self.handle.block_on(self.get(offset, end));
        let mut state = self.lock();
        match fetched {
            Ok(bytes) => {
                keep(&mut state.pieces, offset, bytes);
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
        let fetched = self.sources.fetch_exact(&self.url, offset..end, &self.check).await?;
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

    fn in_memory(&self) -> bool {
        self.size == 0 || self.held(0, self.size).is_some()
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
        let (start, window_end);
        {
            let mut state = self.lock();
            (start, window_end) = self.window(&state, offset, end);
            loop {
                if let Some(bytes) = held(&state, offset, end) {
                    return Ok(bytes);
                }
                // Another of the parse's threads is already fetching these bytes: wait for it.
                if state.failure.is_none() && state.coming.iter().any(|(s, e)| *s <= offset && end <= *e) {
                    state = self.landed.wait(state).unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                break;
            }
            state.coming.push((start, window_end));
        }
        let fetched = self.fetch(start, window_end);
        self.lock().coming.retain(|range| *range != (start, window_end));
        self.landed.notify_all();
        fetched?;
        self.held(offset, end).ok_or_else(|| FormatError::Read("the bytes read are not where asked".into()))
    }
}

/// The bytes `offset..end` if one piece of `state` holds them.
fn held(state: &State, offset: u64, end: u64) -> Option<Bytes> {
    let (start, piece) = state.pieces.range(..=offset).next_back()?;
    let piece_end = start + piece.len() as u64;
    (piece_end >= end).then(|| piece.slice((offset - start) as usize..(end - start) as usize))
}

/// Keeps `bytes`, fetched at `offset`, joining them with the pieces they touch or overlap, so
/// that bytes read in two requests can be handed out as one.
fn keep(pieces: &mut BTreeMap<u64, Bytes>, offset: u64, bytes: Bytes) {
    let mut start = offset;
    let mut end = offset + bytes.len() as u64;
    let mut joined: Vec<(u64, Bytes)> = Vec::new();
    if let Some((s, piece)) = pieces.range(..offset).next_back()
        && s + piece.len() as u64 >= offset
    {
        start = *s;
        end = end.max(s + piece.len() as u64);
    }
    let touching: Vec<u64> = pieces.range(start..=end).map(|(s, _)| *s).collect();
    for s in touching {
        if let Some(piece) = pieces.remove(&s) {
            end = end.max(s + piece.len() as u64);
            joined.push((s, piece));
        }
    }
    if joined.is_empty() {
        pieces.insert(offset, bytes);
        return;
    }
    joined.push((offset, bytes));
    let mut all = BytesMut::zeroed((end - start) as usize);
    for (s, piece) in joined {
        let at = (s - start) as usize;
        all[at..at + piece.len()].copy_from_slice(&piece);
    }
    pieces.insert(start, all.freeze());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(list: &[(u64, &[u8])]) -> BTreeMap<u64, Bytes> {
        let mut pieces = BTreeMap::new();
        for (offset, bytes) in list {
            keep(&mut pieces, *offset, Bytes::copy_from_slice(bytes));
        }
        pieces
    }

    #[test]
    fn pieces_that_touch_or_overlap_become_one() {
        let kept = pieces(&[(0, b"abcd"), (4, b"efgh"), (2, b"cdefghij")]);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), vec![(0, Bytes::from_static(b"abcdefghij"))]);
        let kept = pieces(&[(10, b"kl"), (0, b"abc"), (3, b"defghij")]);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), vec![(0, Bytes::from_static(b"abcdefghijkl"))]);
    }

    #[test]
    fn pieces_apart_stay_apart_and_a_read_across_two_is_held_once_joined() {
        let kept = pieces(&[(0, b"ab"), (5, b"fg")]);
        assert_eq!(kept.len(), 2);
        let state = State { pieces: kept, ..State::default() };
        assert_eq!(held(&state, 5, 7), Some(Bytes::from_static(b"fg")));
        assert_eq!(held(&state, 1, 6), None);
        let mut state = state;
        keep(&mut state.pieces, 2, Bytes::from_static(b"cde"));
        assert_eq!(held(&state, 1, 6), Some(Bytes::from_static(b"bcdef")));
    }
}

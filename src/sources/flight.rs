//! Single-flight, coalescing and read-ahead of one remote object store's reads.
//!
//! A read is widened to aligned blocks of `gap` bytes of its source object. A block is taken
//! from a short-lived, byte-bounded cache, or joined while another read's upstream request
//! brings it, or fetched: the missing blocks of a read are one ranged GET, extended past the read
//! (up to `window` bytes, doubling with the run of blocks read before it) when the read follows
//! others in order. That GET runs on a task of its own, so a reader that leaves cancels no one;
//! each block is handed to every waiter as it completes, and an error to every waiter of the
//! blocks not yet complete. Errors are never cached.
//!
//! Blocks are keyed by the source URL and the ETag recorded in the manifest (or its digest, as a
//! cached block holds a long one), every answer is checked against it before its bytes are
//! used, and a request is conditional on it (`If-Match`) when the whole ETag is at hand, so the
//! bytes of two versions of an object are never mixed: a read whose source changed gets `source-modified`, and the
//! version registered next has other keys. Sources recorded without an ETag are read as asked.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt, Shared};
use moka::future::Cache;
use prometheus::IntCounter;

use super::SourceError;
use super::meter::StoreMeters;
use super::readahead::ReadAheadSettings;
use super::resume::{self, Remote};
use crate::zarr::source::SourceCheck;

/// How long fetched blocks are kept for reads to come.
const BLOCK_TTL: Duration = Duration::from_secs(30);

/// One aligned block of a source object version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BlockKey {
    /// `url` and recorded ETag, one line each.
    object: Arc<str>,
    index: u64,
}

/// A fetched block (shorter than `gap` at the object's end, empty past it).
#[derive(Debug)]
struct Block {
    bytes: Bytes,
    /// Which parts of it reads used.
    usage: Arc<Usage>,
}

impl Block {
    fn new(bytes: Bytes) -> Self {
        let usage = Arc::new(Usage { len: bytes.len(), served: AtomicU64::new(0) });
        Self { bytes, usage }
    }
}

/// Which 64ths of a block some read used (bit `i`: the `i`-th [`Usage::granule`]).
#[derive(Debug)]
struct Usage {
    len: usize,
    served: AtomicU64,
}

impl Usage {
    /// The bytes one bit of `served` stands for.
    fn granule(&self) -> usize {
        self.len.div_ceil(64).max(1)
    }

    /// Notes that a read used bytes `from..to` of the block (to the granule, rounded outward).
    fn serve(&self, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let g = self.granule();
        let (first, last) = (from / g, (to - 1) / g);
        let bits = last - first + 1;
        let mask = if bits >= 64 { u64::MAX } else { ((1u64 << bits) - 1) << first };
        self.served.fetch_or(mask, Ordering::Relaxed);
    }

    /// The bytes of granules no read used.
    fn unserved(&self) -> u64 {
        let (len, g, served) = (self.len, self.granule(), self.served.load(Ordering::Relaxed));
        (0..len.div_ceil(g)).filter(|i| served & (1 << i) == 0).map(|i| (len.min((i + 1) * g) - i * g) as u64).sum()
    }
}

/// How long the use of a block that left the cache is still watched before what no read used
/// is counted as waste: the cache evicts within lookups, so a read may get a block just as it
/// is evicted, and notes its use a moment later.
const RETIRE_AFTER: Duration = Duration::from_secs(1);

/// Blocks that left the cache, counted as waste once [`RETIRE_AFTER`] has passed.
#[derive(Default)]
struct Retired {
    /// Bound on the first read with meters (none in unit tests).
    waste: OnceLock<IntCounter>,
    list: std::sync::Mutex<VecDeque<(Instant, Arc<Usage>)>>,
}

impl Retired {
    fn push(&self, usage: Arc<Usage>) {
        let now = Instant::now();
        let mut list = self.list();
        list.push_back((now, usage));
        self.count_in(&mut list, now);
    }

    /// Counts the waste of the blocks retired long enough before `now`.
    fn count(&self, now: Instant) {
        self.count_in(&mut self.list(), now);
    }

    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Arc<Usage>)>> {
        self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count_in(&self, list: &mut VecDeque<(Instant, Arc<Usage>)>, now: Instant) {
        while let Some((at, _)) = list.front()
            && now.saturating_duration_since(*at) >= RETIRE_AFTER
        {
            if let (Some((_, usage)), Some(waste)) = (list.pop_front(), self.waste.get()) {
                waste.inc_by(usage.unserved());
            }
        }
    }
}

type Pending = Shared<BoxFuture<'static, Result<Arc<Block>, SourceError>>>;
type Sender = tokio::sync::oneshot::Sender<Result<Arc<Block>, SourceError>>;
/// The blocks of a run to fetch, and the senders of their waiters.
type Planned = (Vec<BlockKey>, Vec<Option<Sender>>);

/// One object store's blocks: fetched, and being fetched.
pub(super) struct Blocks {
    settings: ReadAheadSettings,
    done: Cache<BlockKey, Arc<Block>>,
    flying: Arc<tokio::sync::Mutex<HashMap<BlockKey, Pending>>>,
    retired: Arc<Retired>,
}

impl Drop for Blocks {
    /// The object store is gone (or configured anew): what its blocks were not used for is waste.
    fn drop(&mut self) {
        for (_, block) in &self.done {
            self.retired.push(block.usage.clone());
        }
        self.retired.count(Instant::now() + RETIRE_AFTER);
    }
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocks").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// What a read needs from the upstream, found while holding the in-flight lock.
enum Part {
    Ready(Arc<Block>),
    Waiting(Pending),
}

/// A run of missing blocks fetched by one upstream GET on a task of its own.
struct Run {
    remote: Remote,
    check: SourceCheck<'static>,
    keys: Vec<BlockKey>,
    senders: Vec<Option<Sender>>,
    gap: u64,
    done: Cache<BlockKey, Arc<Block>>,
    flying: Arc<tokio::sync::Mutex<HashMap<BlockKey, Pending>>>,
    slots: Arc<tokio::sync::Semaphore>,
    /// The error when no slot frees up in time.
    busy: SourceError,
    wait: Duration,
    meters: Option<StoreMeters>,
}

impl Blocks {
    /// The blocks of a store read with `settings`.
    pub(super) fn new(settings: ReadAheadSettings) -> Self {
        let retired: Arc<Retired> = Arc::default();
        let leaving = retired.clone();
        let done = Cache::builder()
            .max_capacity(settings.cache)
            .weigher(|_, block: &Arc<Block>| u32::try_from(block.bytes.len()).unwrap_or(u32::MAX))
            .time_to_live(BLOCK_TTL)
            .eviction_listener(move |_, block: Arc<Block>, _| leaving.push(block.usage.clone()))
            .build();
        Self { settings, done, flying: Arc::default(), retired }
    }

    /// Reads `range` of the object `remote` names, recorded with ETag `check` (an ETag or its
    /// digest): the bytes,
    /// exactly, or the error of the upstream request that was to bring them. Upstream requests
    /// take one of `slots` each, waiting up to `wait.0` (then `source-busy`, naming the limit
    /// `wait.1`).
    pub(super) async fn read(
        &self,
        slots: &Arc<tokio::sync::Semaphore>,
        remote: Remote,
        range: Range<u64>,
        check: &SourceCheck<'_>,
        wait: (Duration, usize),
        meters: Option<&StoreMeters>,
    ) -> Result<Bytes, SourceError> {
        if let Some(m) = meters {
            let _ = self.retired.waste.set(m.wasted.clone());
        }
        let gap = self.settings.gap;
        let object: Arc<str> = format!("{}\n{check}", remote.url).into();
        let key = |index| BlockKey { object: object.clone(), index };
        let (first, last) = (range.start / gap, (range.end - 1) / gap);
        // Looked up under the in-flight lock, which a run holds to hand over a block (cache,
        // then map): no block is fetched twice because it moved between them meanwhile.
        let mut flying = self.flying.lock().await;
        let mut cached = Vec::with_capacity((last - first + 1) as usize);
        for index in first..=last {
            cached.push(self.done.get(&key(index)).await);
        }
        let (url, store) = (remote.url.clone(), remote.store.clone());
        let (parts, joined, runs) = self.plan(&mut flying, &key, first, cached, &remote);
        drop(flying);
        if let Some(m) = meters {
            if joined {
                m.joins.inc();
            }
            if !joined && runs.is_empty() {
                m.hits.inc();
            }
        }
        let check = check.clone().into_owned();
        let busy =
            SourceError::Busy { url: url.clone(), store: store.clone(), limit: wait.1, seconds: wait.0.as_secs() };
        for (keys, senders) in runs {
            let run = Run {
                remote: Remote { clip: true, ..remote.clone() },
                check: check.clone(),
                keys,
                senders,
                gap,
                done: self.done.clone(),
                flying: self.flying.clone(),
                slots: slots.clone(),
                busy: busy.clone(),
                wait: wait.0,
                meters: meters.cloned(),
            };
            tokio::spawn(run.fetch());
        }
        let mut out = BytesMut::new();
        let mut single = None;
        for (index, part) in (first..).zip(parts) {
            let block = match part {
                Part::Ready(block) => block,
                Part::Waiting(pending) => pending.await?,
            };
            let at = index * gap;
            let (from, to) = (range.start.max(at) - at, range.end.min(at + gap) - at);
            if (block.bytes.len() as u64) < to {
                let size = (at + block.bytes.len() as u64).to_string();
                return Err(SourceError::Truncated { url, store, needed: range.end, size });
            }
            block.usage.serve(from as usize, to as usize);
            let piece = block.bytes.slice(from as usize..to as usize);
            if first == last {
                single = Some(piece);
            } else {
                out.extend_from_slice(&piece);
            }
        }
        self.retired.count(Instant::now());
        Ok(single.unwrap_or_else(|| out.freeze()))
    }

    /// Under the in-flight lock: each block of the read found ready, or joined in flight, or
    /// to fetch (runs of consecutive blocks, the last one extended by the read-ahead). Returns
    /// the parts, whether the read joined another's request, and the runs to start.
    fn plan(
        &self,
        flying: &mut HashMap<BlockKey, Pending>,
        key: &dyn Fn(u64) -> BlockKey,
        first: u64,
        cached: Vec<Option<Arc<Block>>>,
        remote: &Remote,
    ) -> (Vec<Part>, bool, Vec<Planned>) {
        let present = |flying: &HashMap<BlockKey, Pending>, index: u64| {
            let k = key(index);
            flying.contains_key(&k) || self.done.contains_key(&k)
        };
        let mut parts = Vec::with_capacity(cached.len());
        let mut runs: Vec<Vec<u64>> = Vec::new();
        let mut joined = false;
        let last = first + cached.len() as u64 - 1;
        for (index, block) in (first..).zip(cached) {
            if let Some(block) = block {
                parts.push(Part::Ready(block));
            } else if let Some(pending) = flying.get(&key(index)) {
                joined = true;
                parts.push(Part::Waiting(pending.clone()));
            } else {
                match runs.last_mut() {
                    Some(run) if run.last() == Some(&(index - 1)) => run.push(index),
                    _ => runs.push(vec![index]),
                }
                parts.push(Part::Waiting(futures::future::pending().boxed().shared()));
            }
        }
        // Read ahead of the last run when the blocks before it were read: twice as many blocks
        // as that sequence is long, up to the window, stopping at one already there.
        if let Some(run) = runs.last_mut()
            && run.last() == Some(&last)
            && self.settings.window > 0
        {
            let start = run[0];
            let most = self.settings.window / self.settings.gap;
            let before = (1..=start.min(most)).take_while(|n| present(flying, start - n)).count() as u64;
            let ahead = (2 * before).min(most);
            for index in last + 1..=last + ahead {
                if present(flying, index) {
                    break;
                }
                run.push(index);
            }
        }
        let mut started = Vec::with_capacity(runs.len());
        for run in runs {
            let mut keys = Vec::with_capacity(run.len());
            let mut senders = Vec::with_capacity(run.len());
            for index in run {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let (url, store) = (remote.url.clone(), remote.store.clone());
                let pending: Pending = rx
                    .map(move |got| {
                        got.unwrap_or_else(|_| {
                            Err(SourceError::Upstream {
                                url: url.clone(),
                                store: store.clone(),
                                detail: "the shared upstream read ended without an answer".into(),
                            })
                        })
                    })
                    .boxed()
                    .shared();
                if let Some(slot) = index.checked_sub(first).and_then(|i| parts.get_mut(i as usize)) {
                    *slot = Part::Waiting(pending.clone());
                }
                flying.insert(key(index), pending);
                keys.push(key(index));
                senders.push(Some(tx));
            }
            started.push((keys, senders));
        }
        (parts, joined, started)
    }
}

impl Run {
    /// Fetches the run's blocks and hands each to its waiters (and the cache) as it completes.
    async fn fetch(mut self) {
        let started = Instant::now();
        let first = self.keys.first().map_or(0, |k| k.index);
        let range = first * self.gap..(first + self.keys.len() as u64) * self.gap;
        let opened = match tokio::time::timeout(self.wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(slot)) => self.remote.clone().read(range, &self.check).await.map(|(body, _)| (slot, body)),
            _ => Err(self.busy.clone()),
        };
        let (_slot, mut body) = match opened {
            Ok(opened) => opened,
            Err(e) => return self.fail(0, &e).await,
        };
        if let Some(m) = &self.meters {
            m.duration.observe(started.elapsed().as_secs_f64());
        }
        let mut next = 0;
        let mut buf = BytesMut::with_capacity(self.gap as usize);
        while let Some(piece) = body.next().await {
            let mut piece = match piece {
                Ok(piece) => piece,
                Err(e) => {
                    let e = resume::source_error(&e).unwrap_or_else(|| SourceError::Upstream {
                        url: self.remote.url.clone(),
                        store: self.remote.store.clone(),
                        detail: e.to_string(),
                    });
                    if let Some(m) = &self.meters {
                        m.aborted.inc();
                    }
                    return self.fail(next, &e).await;
                }
            };
            if let Some(m) = &self.meters {
                m.bytes.inc_by(piece.len() as u64);
            }
            while !piece.is_empty() {
                let take = piece.len().min(self.gap as usize - buf.len());
                buf.extend_from_slice(&piece.split_to(take));
                if buf.len() as u64 == self.gap {
                    self.publish(next, buf.split().freeze()).await;
                    next += 1;
                }
            }
        }
        // The object's end: a short last block, then empty ones past it.
        while next < self.keys.len() {
            self.publish(next, buf.split().freeze()).await;
            next += 1;
        }
        if let Some(m) = &self.meters {
            m.ok.inc();
        }
    }

    async fn publish(&mut self, at: usize, bytes: Bytes) {
        let block = Arc::new(Block::new(bytes));
        let key = self.keys[at].clone();
        let mut flying = self.flying.lock().await;
        self.done.insert(key.clone(), block.clone()).await;
        flying.remove(&key);
        drop(flying);
        if let Some(tx) = self.senders.get_mut(at).and_then(Option::take) {
            let _ = tx.send(Ok(block));
        }
    }

    /// Hands `e` to the waiters of every block from `from` on, and forgets them.
    async fn fail(self, from: usize, e: &SourceError) {
        if let Some(m) = &self.meters
            && from == 0
        {
            m.failed(e);
        }
        let mut flying = self.flying.lock().await;
        for key in &self.keys[from..] {
            flying.remove(key);
        }
        drop(flying);
        for tx in self.senders.into_iter().skip(from).flatten() {
            let _ = tx.send(Err(e.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(len: usize, reads: &[(usize, usize)]) -> u64 {
        let usage = Usage { len, served: AtomicU64::new(0) };
        for &(from, to) in reads {
            usage.serve(from, to);
        }
        usage.unserved()
    }

    #[test]
    fn waste_is_counted_once_a_retired_block_can_no_longer_be_read() {
        let retired = Retired::default();
        let waste = IntCounter::new("waste", "waste").unwrap_or_else(|e| panic!("{e}"));
        let _ = retired.waste.set(waste.clone());
        let usage = Arc::new(Usage { len: 4096, served: AtomicU64::new(0) });
        retired.push(usage.clone());
        assert_eq!(waste.get(), 0, "a read may still be using it");
        usage.serve(0, 1024);
        retired.count(Instant::now() + RETIRE_AFTER);
        assert_eq!(waste.get(), 3072);
        retired.count(Instant::now() + 2 * RETIRE_AFTER);
        assert_eq!(waste.get(), 3072, "counted once");
    }

    #[test]
    fn waste_is_what_no_read_used() {
        let k = 1024;
        assert_eq!(counted(64 * k, &[]), 64 * 1024);
        assert_eq!(counted(64 * k, &[(16 * k, 32 * k)]), 48 * 1024);
        assert_eq!(counted(64 * k, &[(16 * k, 32 * k), (16 * k, 32 * k)]), 48 * 1024, "one range read twice");
        assert_eq!(counted(64 * k, &[(0, 64 * k)]), 0);
        assert_eq!(counted(64 * k, &[(0, 40 * k), (30 * k, 64 * k)]), 0);
        // Rounded outward to the granule (1 KiB here): a byte used is its granule used.
        assert_eq!(counted(64 * k, &[(100, 101)]), 63 * 1024);
        // A short last block: its granules, the last one shorter.
        assert_eq!(counted(1000, &[(0, 16)]), 1000 - 16);
        assert_eq!(counted(1000, &[(990, 1000)]), 1000 - 24, "granules 976..992 and 992..1000");
        assert_eq!(counted(0, &[]), 0);
        assert_eq!(counted(10, &[(0, 0)]), 10, "an empty range uses nothing");
    }
}

//! The per-thread fronts of the read path's memos: each worker thread's last values of a memo,
//! found with no hashing, no lock and no entry in the memo's bookkeeping (moka's were a tenth of
//! a cached read, bench/README.md "Stop 16"). A front only finds and keeps; its memo
//! ([`super::Memo`]) counts what it finds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{BlockKey, LoadedHead};
use crate::catalog::StoreHead;

/// What a memo keeps in front of it, per worker thread, asked by `&Q`: nothing ([`NoFront`]),
/// the last values taken ([`Front`]), or the last store heads ([`HeadsFront`]).
pub trait FrontOf<Q: ?Sized, V> {
    /// What a value kept must have been asked of the memo under (read before it is asked).
    type Ticket: Copy;
    /// The ticket of a value about to be asked of the memo.
    fn ticket(&self) -> Self::Ticket;
    /// The value at `key` if this worker thread has it at hand (and it is not the memo's turn:
    /// [`TOUCH_EVERY`]).
    fn get(&self, key: &Q) -> Option<V>;
    /// Keeps `value` at `key` for this worker thread, asked of the memo under `ticket`.
    fn keep(&self, key: &Q, value: &V, ticket: Self::Ticket);
}

/// No front: every lookup asks the memo.
#[derive(Debug, Default)]
pub struct NoFront;

impl<Q: ?Sized, V> FrontOf<Q, V> for NoFront {
    type Ticket = ();

    fn ticket(&self) {}

    fn get(&self, _: &Q) -> Option<V> {
        None
    }

    fn keep(&self, _: &Q, _: &V, (): ()) {}
}

/// Where a key sits in a [`Front`] (modulo its size): cheap, and different for the keys read
/// together.
pub trait FrontKey {
    fn slot(&self) -> usize;
}

/// A version: versions are numbered in order, so the few read together differ in their last bits.
impl FrontKey for i64 {
    fn slot(&self) -> usize {
        *self as usize
    }
}

/// A block: consecutive tiles of one array take consecutive slots (31 is odd: any run of as many
/// tiles as there are slots, a power of two, takes them all).
impl FrontKey for BlockKey {
    fn slot(&self) -> usize {
        let (version, node, tile) = *self;
        (tile as usize).wrapping_mul(31) ^ (node as usize).wrapping_mul(0x9e37) ^ version as usize
    }
}

/// How often a value found in a front is still asked of its memo: one hit in this many, so
/// that what the front serves stays recently used there, and is not evicted as unused.
pub(super) const TOUCH_EVERY: u32 = 32;

/// The last values each worker thread took from a memo of values that never change for their
/// key (views by version, blocks by version, array and tile), one per slot: a hit is a slot
/// compared and a `Weak` upgraded. Held weakly: nothing the memo has let go of is kept once no
/// request holds it, so the memo's bound is the bound.
pub struct Front<K: Send, T: Send + Sync> {
    slots: thread_local::ThreadLocal<std::cell::RefCell<Slots<K, T>>>,
    size: usize,
}

/// One thread's slots.
type Slots<K, T> = Vec<Option<Slot<K, T>>>;

struct Slot<K, T> {
    key: K,
    value: std::sync::Weak<T>,
    hits: u32,
}

impl<K: Send, T: Send + Sync> std::fmt::Debug for Front<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front").field("size", &self.size).finish_non_exhaustive()
    }
}

impl<K: Eq + Send, T: Send + Sync> Front<K, T> {
    /// `size` slots per worker thread.
    pub fn new(size: usize) -> Self {
        Self { slots: thread_local::ThreadLocal::new(), size: size.max(1) }
    }
}

impl<K: FrontKey + Eq + Clone + Send, T: Send + Sync> FrontOf<K, Arc<T>> for Front<K, T> {
    type Ticket = ();

    fn ticket(&self) {}

    fn get(&self, key: &K) -> Option<Arc<T>> {
        let mut slots = self.slots.get()?.borrow_mut();
        let found = slots.get_mut(key.slot() % self.size)?.as_mut().filter(|s| s.key == *key)?;
        found.hits = found.hits.wrapping_add(1);
        if found.hits % TOUCH_EVERY == 0 {
            return None;
        }
        found.value.upgrade()
    }

    fn keep(&self, key: &K, value: &Arc<T>, (): ()) {
        let cell = self.slots.get_or(|| std::cell::RefCell::new((0..self.size).map(|_| None).collect()));
        if let Some(at) = cell.borrow_mut().get_mut(key.slot() % self.size) {
            *at = Some(Slot { key: key.clone(), value: Arc::downgrade(value), hits: 0 });
        }
    }
}

/// Heads a worker thread keeps, per thread: a store's head is asked of every read, and a
/// lookup in the memo hashes the name, takes moka's locks and its clock (a twentieth of a
/// cached read, bench/README.md "Stop 17"). Unlike views and blocks, heads change: each is kept
/// with its expiry (when the memo's TTL would end it) and the invalidation count it was taken
/// under (its ticket); a head is served only before its expiry and while no invalidation
/// happened since. A store no one has registered is never kept: one registered right after
/// must not answer 404 (read by clients as fill values) from a front.
pub struct HeadsFront {
    slots: thread_local::ThreadLocal<std::cell::RefCell<Vec<HeadSlot>>>,
    /// Counts the invalidations of heads ([`HeadsFront::invalidate`]).
    generation: AtomicU64,
    /// How long a head read from the catalog is served (`cache.current_version_ttl_ms`).
    ttl: Duration,
}

/// Heads kept per thread: a few stores are read at once.
pub(super) const HEADS_FRONT_SLOTS: usize = 8;

struct HeadSlot {
    segment: Box<str>,
    head: Arc<StoreHead>,
    /// When the head was read from the catalog.
    loaded: Instant,
    /// [`crate::clock::coarse_millis`] from which the head is not served.
    expires: u64,
    generation: u64,
    hits: u32,
}

impl std::fmt::Debug for HeadsFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadsFront").finish_non_exhaustive()
    }
}

impl FrontOf<str, LoadedHead> for HeadsFront {
    /// The invalidations so far.
    type Ticket = u64;

    fn ticket(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn get(&self, segment: &str) -> Option<LoadedHead> {
        // The coarse clock: a head is at most a tick (a few milliseconds) past its TTL here.
        self.get_at(segment, self.ticket(), crate::clock::coarse_millis())
    }

    fn keep(&self, segment: &str, (head, loaded): &LoadedHead, generation: u64) {
        if **head == StoreHead::Unknown {
            return;
        }
        let left = (*loaded + self.ttl).saturating_duration_since(Instant::now());
        let expires = crate::clock::coarse_millis() + u64::try_from(left.as_millis()).unwrap_or(u64::MAX / 2);
        self.keep_at(segment, (head, *loaded), expires, generation);
    }
}

impl HeadsFront {
    /// Heads served for `ttl` from when they were read.
    pub(super) fn new(ttl: Duration) -> Self {
        Self { slots: thread_local::ThreadLocal::new(), generation: AtomicU64::new(0), ttl }
    }

    /// Serves no head kept before now: one more invalidation.
    pub(super) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// `segment`'s head, if kept under `generation` and not expired at `now`.
    fn get_at(&self, segment: &str, generation: u64, now: u64) -> Option<LoadedHead> {
        let mut slots = self.slots.get()?.borrow_mut();
        let slot = slots.iter_mut().find(|s| *s.segment == *segment)?;
        if slot.generation != generation || now >= slot.expires {
            return None;
        }
        // As for views and blocks: one hit in TOUCH_EVERY is the memo's, so that the heads read
        // most stay recent there.
        slot.hits = slot.hits.wrapping_add(1);
        if slot.hits % TOUCH_EVERY == 0 {
            return None;
        }
        Some((Arc::clone(&slot.head), slot.loaded))
    }

    fn keep_at(&self, segment: &str, (head, loaded): (&Arc<StoreHead>, Instant), expires: u64, generation: u64) {
        let mut slots = self.slots.get_or_default().borrow_mut();
        let slot = HeadSlot { segment: segment.into(), head: Arc::clone(head), loaded, expires, generation, hits: 0 };
        if let Some(at) = slots.iter().position(|s| *s.segment == *segment) {
            slots[at] = slot;
        } else if slots.len() < HEADS_FRONT_SLOTS {
            slots.push(slot);
        } else if let Some(oldest) = slots.iter_mut().min_by_key(|s| s.expires) {
            *oldest = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(id: i64) -> Arc<StoreHead> {
        let head = crate::catalog::VersionHead {
            store: "s".into(),
            id,
            created_at_ms: 0,
            fill_missing: false,
            portable: false,
        };
        Arc::new(StoreHead::Version(head))
    }

    #[test]
    fn a_heads_front_serves_a_head_until_its_expiry_or_the_next_invalidation() {
        let front = HeadsFront::new(Duration::from_secs(60));
        let now = crate::clock::coarse_millis();
        let later = now + 500;
        assert!(front.get_at("era5", 0, now).is_none(), "nothing kept yet");
        front.keep_at("era5", (&version(1), Instant::now()), later, 0);
        assert_eq!(front.get_at("era5", 0, now).map(|h| h.0).as_deref(), Some(&*version(1)));
        assert!(front.get_at("era5@1", 0, now).is_none(), "another segment");
        assert!(front.get_at("era5", 1, now).is_none(), "an invalidation since it was kept");
        assert!(front.get_at("era5", 0, later).is_none(), "its expiry");
        front.keep_at("era5", (&version(2), Instant::now()), later, 1);
        assert_eq!(front.get_at("era5", 1, now).map(|h| h.0).as_deref(), Some(&*version(2)), "kept again, replaced");
        // Another thread has a front of its own.
        std::thread::scope(|s| {
            s.spawn(|| assert!(front.get_at("era5", 1, now).is_none()));
        });
        // Full: the head expiring first makes room.
        for i in 0..HEADS_FRONT_SLOTS as i64 {
            front.keep_at(&format!("s{i}"), (&version(i), Instant::now()), later + i as u64 + 1, 1);
        }
        assert!(front.get_at("era5", 1, now).is_none(), "era5 expired first: replaced");
        assert!(front.get_at("s0", 1, now).is_some() && front.get_at("s7", 1, now).is_some());
    }

    #[test]
    fn one_head_hit_in_touch_every_goes_to_the_memo() {
        let front = HeadsFront::new(Duration::from_secs(60));
        let now = crate::clock::coarse_millis();
        front.keep_at("era5", (&version(1), Instant::now()), now + 60_000, 0);
        let served = (0..TOUCH_EVERY * 2).filter(|_| front.get_at("era5", 0, now).is_some()).count();
        assert_eq!(served, (TOUCH_EVERY as usize - 1) * 2);
    }

    #[test]
    fn a_front_serves_what_its_thread_kept_while_the_value_lives() {
        let front: Front<i64, String> = Front::new(4);
        assert!(FrontOf::get(&front, &1).is_none(), "nothing kept yet");
        let value = Arc::new("view 1".to_owned());
        front.keep(&1, &value, ());
        assert_eq!(FrontOf::get(&front, &1).as_deref().map(String::as_str), Some("view 1"));
        assert!(FrontOf::get(&front, &5).is_none(), "another key in the same slot");
        front.keep(&5, &value, ());
        assert!(FrontOf::get(&front, &1).is_none(), "slot 5 of 4 is slot 1: replaced");
        std::thread::scope(|s| {
            s.spawn(|| assert!(FrontOf::get(&front, &5).is_none(), "each thread has its own"));
        });
        drop(value);
        assert!(FrontOf::get(&front, &5).is_none(), "held weakly: gone once its memo and every reader let go");
    }

    #[test]
    fn a_front_sends_one_hit_in_touch_every_to_its_memo() {
        let front: Front<i64, u32> = Front::new(2);
        let value = Arc::new(7);
        front.keep(&3, &value, ());
        let misses = (1..=3 * TOUCH_EVERY).filter(|_| FrontOf::get(&front, &3).is_none()).count();
        assert_eq!(misses, 3);
    }
}

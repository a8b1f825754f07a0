//! Registrations from files under way on this replica, by store: how many files were found and
//! how many are read so far (parsed, or their parse found remembered), for
//! `GET /api/v1/stores/{store}/progress`, which `zarrgate stores put NAME URL...` polls to draw
//! its progress bar while the registration's one request is under way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What this replica is reading, by store.
#[derive(Debug, Default)]
pub struct Progress {
    under_way: Mutex<HashMap<String, Arc<Counts>>>,
}

/// The counts of one registration (or rescan) under way.
#[derive(Debug)]
pub struct Counts {
    /// Files found (listed, or named).
    pub files: u64,
    /// Files read so far.
    read: AtomicU64,
    /// Of those, files whose parse was found remembered (not parsed again).
    cached: AtomicU64,
    started: Instant,
}

/// Where a registration stands, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Files found.
    pub files: u64,
    /// Files read so far.
    pub read: u64,
    /// Of those, parses found remembered.
    pub cached: u64,
    /// Milliseconds since the files were found.
    pub elapsed_ms: u64,
}

/// A registration's counts, taken out of [`Progress`] when it ends (however it ends).
#[derive(Debug)]
pub struct Tracked<'a> {
    progress: &'a Progress,
    store: String,
    /// The counts the reads add to.
    pub counts: Arc<Counts>,
}

impl Counts {
    /// One file read: `cached` when its parse was found remembered.
    pub fn read_one(&self, cached: bool) {
        self.read.fetch_add(1, Ordering::Relaxed);
        if cached {
            self.cached.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Progress {
    /// Counts for a registration of `store` from `files` files, shown until the guard is dropped.
    /// A second registration of the same store at once replaces the first's (the last is shown).
    pub fn start(&self, store: &str, files: u64) -> Tracked<'_> {
        let counts =
            Arc::new(Counts { files, read: AtomicU64::new(0), cached: AtomicU64::new(0), started: Instant::now() });
        self.lock().insert(store.to_owned(), Arc::clone(&counts));
        Tracked { progress: self, store: store.to_owned(), counts }
    }

    /// Where the registration of `store` under way stands, if one is.
    pub fn get(&self, store: &str) -> Option<Snapshot> {
        let counts = self.lock().get(store).cloned()?;
        Some(Snapshot {
            files: counts.files,
            read: counts.read.load(Ordering::Relaxed),
            cached: counts.cached.load(Ordering::Relaxed),
            elapsed_ms: u64::try_from(counts.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Counts>>> {
        // A panic while holding it leaves only counts behind: they stay usable.
        self.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        let mut under_way = self.progress.lock();
        if under_way.get(&self.store).is_some_and(|c| Arc::ptr_eq(c, &self.counts)) {
            under_way.remove(&self.store);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_is_shown_while_it_runs_and_forgotten_when_it_ends() {
        let progress = Progress::default();
        assert_eq!(progress.get("era5"), None);
        {
            let first = progress.start("era5", 3);
            first.counts.read_one(false);
            first.counts.read_one(true);
            let now = progress.get("era5").unwrap();
            assert_eq!((now.files, now.read, now.cached), (3, 2, 1));
            // A second registration of the store at once is the one shown; the first's end
            // does not hide it.
            let second = progress.start("era5", 10);
            drop(first);
            assert_eq!(progress.get("era5").map(|s| s.files), Some(10));
            drop(second);
        }
        assert_eq!(progress.get("era5"), None);
    }
}

//! The bounded pool assembled chunks are built on (`assemble.rs`): `assemble.workers` at once,
//! `assemble.queue` more waiting, and a 503 at once past that.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use super::error::{Error, Result};
use crate::config::AssembleConfig;

/// The bounded pool assembled chunks are built on.
#[derive(Debug)]
pub struct Assembly {
    pub(super) workers: Arc<Semaphore>,
    /// Builds waiting for a worker or working now.
    queued: AtomicUsize,
    /// The most that may: `workers` plus `assemble.queue`.
    max_queued: usize,
    pub(super) max_chunk_bytes: u64,
    pub(super) deflate_level: u32,
}

impl Assembly {
    /// A pool as `config` says.
    pub fn new(config: &AssembleConfig) -> Self {
        let workers = config.workers();
        Self {
            workers: Arc::new(Semaphore::new(workers)),
            queued: AtomicUsize::new(0),
            max_queued: workers + config.queue,
            max_chunk_bytes: config.max_chunk_bytes,
            deflate_level: config.deflate_level,
        }
    }
}

impl Default for Assembly {
    fn default() -> Self {
        Self::new(&AssembleConfig::default())
    }
}

impl Assembly {
    /// A place in the queue, or 503 when `workers + queue` builds are already there.
    pub(super) fn enter(&self) -> Result<Queued<'_>> {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Overloaded(format!(
                "{} assembled chunks are being built or waiting (assemble.workers + assemble.queue); retry in a moment",
                self.max_queued
            )));
        }
        Ok(Queued(&self.queued))
    }
}

/// A place in the pool's queue, given back when dropped.
pub(super) struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_refuses_at_once_and_frees_its_places() {
        let pool = Assembly::new(&AssembleConfig { workers: 1, queue: 1, ..AssembleConfig::default() });
        let (first, second) = (pool.enter().unwrap(), pool.enter().unwrap());
        let Err(Error::Overloaded(why)) = pool.enter() else { panic!("a third build was let in") };
        assert!(why.contains("assemble.workers + assemble.queue"), "{why}");
        drop(first);
        let third = pool.enter().unwrap();
        drop((second, third));
        assert_eq!(pool.queued.load(Ordering::Acquire), 0);
    }
}

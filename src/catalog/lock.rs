//! Named locks shared by every replica ([`Catalog::try_lock`](super::Catalog::try_lock)): so
//! that one replica, not each, rescans a followed store. Within a process a set of names held
//! excludes the other tasks; across replicas PostgreSQL's session advisory lock on a hash of the
//! name does (SQLite is one replica's file: the set is all it needs).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

/// The names held in this process.
pub(super) type Held = Arc<Mutex<BTreeSet<String>>>;

/// What holds a lock across replicas (a database session), until told to let it go.
#[async_trait]
pub(super) trait LockSession: Send {
    /// Releases the lock `name` and gives the session back.
    async fn unlock(self: Box<Self>, name: &str);
    /// Lets the lock go without waiting (closing the session releases it).
    fn abandon(self: Box<Self>);
}

/// What taking a lock across replicas found.
pub(super) enum Across {
    /// Taken, held by this session (`None`: no other replica can hold it).
    Taken(Option<Box<dyn LockSession>>),
    /// Another replica holds it.
    Busy,
}

/// A lock taken with [`Catalog::try_lock`](super::Catalog::try_lock): held until
/// [`LockGuard::release`], or until dropped (then released without waiting).
pub struct LockGuard {
    name: String,
    held: Held,
    session: Option<Box<dyn LockSession>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard").field("name", &self.name).finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Releases the lock.
    pub async fn release(mut self) {
        if let Some(session) = self.session.take() {
            session.unlock(&self.name).await;
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.abandon();
        }
        if let Ok(mut held) = self.held.lock() {
            held.remove(&self.name);
        }
    }
}

/// Marks `name` held in this process: `None` when a task of it holds it already.
pub(super) fn take_local(held: &Held, name: &str) -> Option<LockGuard> {
    let mut names = held.lock().ok()?;
    if !names.insert(name.to_owned()) {
        return None;
    }
    Some(LockGuard { name: name.to_owned(), held: Arc::clone(held), session: None })
}

/// `guard`, held across replicas too by `session`.
pub(super) fn with_session(mut guard: LockGuard, session: Option<Box<dyn LockSession>>) -> LockGuard {
    guard.session = session;
    guard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_by_one_guard_until_it_is_dropped() {
        let held = Held::default();
        let first = take_local(&held, "a");
        assert!(first.is_some());
        assert!(take_local(&held, "a").is_none());
        assert!(take_local(&held, "b").is_some());
        drop(first);
        assert!(take_local(&held, "a").is_some());
    }
}

//! The watchdog of a connection: a task of its own that closes the connection when its client
//! is too slow (a request head that takes longer than `header_read_timeout_seconds`, no request
//! for `idle_timeout_seconds`, a response it reads none of for `send_timeout_seconds`) and
//! drains it on shutdown. The connection's task learns its verdict from one atomic load
//! ([`verdict`]); the socket and the requests tell it what happens ([`Activity`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::watch;

use super::{Closed, Limits};

/// The watchdog's verdict on the connection whose task `waker` wakes, which the watchdog is
/// handed when it is not the one it was last (`registered`).
pub(super) fn verdict(watch: &Watch, registered: &mut Option<std::task::Waker>, waker: &std::task::Waker) -> u8 {
    if registered.as_ref().is_none_or(|w| !w.will_wake(waker)) {
        watch.waker.register(waker);
        *registered = Some(waker.clone());
    }
    watch.verdict.load(Ordering::Acquire)
}

/// Why the connection closes, by a verdict to close it.
pub(super) fn closed(verdict: u8) -> Closed {
    Closed::ALL.get(usize::from(verdict.saturating_sub(VERDICT_CLOSED))).copied().unwrap_or(Closed::Client)
}

/// What a connection's task and its watchdog share.
pub(super) struct Watch {
    pub(super) activity: Activity,
    /// What the watchdog has decided: nothing, drain (shutdown), or close ([`VERDICT_CLOSED`]
    /// plus the index of the reason in [`Closed::ALL`]).
    pub(super) verdict: AtomicU8,
    /// The connection's task, to wake when the verdict changes.
    pub(super) waker: AtomicWaker,
}

pub(super) const VERDICT_NONE: u8 = 0;
pub(super) const VERDICT_DRAIN: u8 = 1;
pub(super) const VERDICT_CLOSED: u8 = 2;

impl Watch {
    pub(super) fn new() -> Self {
        Self { activity: Activity::new(), verdict: AtomicU8::new(VERDICT_NONE), waker: AtomicWaker::new() }
    }

    fn decide(&self, verdict: u8) {
        self.verdict.store(verdict, Ordering::Release);
        self.waker.wake();
    }
}

/// Aborts its task when dropped: a watchdog ends with its connection, however that ends.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Closes the connection when its client is too slow, and drains it on shutdown. The receiver
/// of `stopping` lives as long as the watchdog, so as long as its connection: shutdown waits for
/// the last one (`server/mod.rs`).
pub(super) async fn watchdog(watch: Arc<Watch>, limits: Arc<Limits>, mut stopping: watch::Receiver<()>) {
    let mut draining = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(watch.activity.until_next_check(&limits)) => {
                if let Some(why) = watch.activity.expired(&limits) {
                    tracing::debug!(why = why.explain(), "closing a connection whose client is too slow");
                    // `ALL` lists the reasons in declaration order.
                    watch.decide(VERDICT_CLOSED + why as u8);
                    return;
                }
            }
            _ = stopping.changed(), if !draining => {
                draining = true;
                watch.decide(VERDICT_DRAIN);
            }
        }
    }
}

/// What the watchdog knows of a connection, written by its socket and its requests. Instants
/// are milliseconds since the connection opened, plus one: 0 means "not now".
pub(super) struct Activity {
    /// [`crate::clock::coarse_millis`] when the connection opened.
    opened: u64,
    /// Requests whose answer has not yet been handed to the connection whole.
    pub(super) answering: AtomicUsize,
    /// When the first byte of a request head not yet complete arrived; from the opening for the
    /// first request.
    pub(super) head_since: AtomicU64,
    /// When the connection last had no request in progress.
    pub(super) idle_since: AtomicU64,
    /// Since when a write has been waiting on a client that reads nothing.
    pub(super) blocked_since: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Self {
        let a = Self {
            opened: crate::clock::coarse_millis(),
            answering: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            blocked_since: AtomicU64::new(0),
        };
        let now = a.now();
        a.head_since.store(now, Ordering::Relaxed);
        a.idle_since.store(now, Ordering::Relaxed);
        a
    }

    pub(super) fn now(&self) -> u64 {
        crate::clock::coarse_millis().saturating_sub(self.opened).saturating_add(1)
    }

    /// The earliest moment the connection is due to be closed, and why, as things stand.
    fn due(&self, limits: &Limits) -> Option<(u64, Closed)> {
        let after = |since: u64, d: Duration| since.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut due: Option<(u64, Closed)> = None;
        let mut consider = |at: u64, why| {
            if due.is_none_or(|(d, _)| at < d) {
                due = Some((at, why));
            }
        };
        match self.blocked_since.load(Ordering::Relaxed) {
            0 => {}
            since => consider(after(since, limits.send), Closed::SendTimeout),
        }
        if self.answering.load(Ordering::Relaxed) == 0 {
            match self.head_since.load(Ordering::Relaxed) {
                0 => consider(after(self.idle_since.load(Ordering::Relaxed), limits.idle), Closed::IdleTimeout),
                since => consider(after(since, limits.header_read), Closed::HeaderReadTimeout),
            }
        }
        due
    }

    /// How long the watchdog may sleep: until the due moment, and no longer than the shortest
    /// timeout. Things change without waking it, but whatever they start is due no sooner than
    /// that timeout after they start, so it wakes before any of it is due.
    fn until_next_check(&self, limits: &Limits) -> Duration {
        let shortest = limits.header_read.min(limits.idle).min(limits.send);
        match self.due(limits) {
            Some((at, _)) => Duration::from_millis(at.saturating_sub(self.now())).min(shortest),
            None => shortest,
        }
    }

    fn expired(&self, limits: &Limits) -> Option<Closed> {
        self.due(limits).filter(|(at, _)| *at <= self.now()).map(|(_, why)| why)
    }
}

/// A request being answered: from the moment its head is complete until its response body has
/// been handed over or dropped.
pub(super) struct Answering(Arc<Watch>);

impl Answering {
    pub(super) fn start(watch: &Arc<Watch>) -> Self {
        let activity = &watch.activity;
        activity.answering.fetch_add(1, Ordering::Relaxed);
        activity.head_since.store(0, Ordering::Relaxed);
        Self(watch.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let activity = &self.0.activity;
        if activity.answering.fetch_sub(1, Ordering::Relaxed) == 1 {
            activity.idle_since.store(activity.now(), Ordering::Relaxed);
        }
    }
}

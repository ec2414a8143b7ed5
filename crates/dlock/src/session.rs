//! The [`Session`]: what every lock handle shares below its topology — the runtime its
//! background work runs on, the registry of live holds that shutdown gives back, the
//! waits and give-backs still running, the closed flag, the token factory, and the
//! session's lost signal. A [`Client`](crate::Client) and a [`Redlock`](crate::Redlock)
//! each provide one; nothing here knows a lock kind or a topology.

use futures_util::{FutureExt, StreamExt};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::notifier::Notifier;
use crate::renew::{RenewTarget, Renewer};
use crate::signal::{self, LeaseCell, LostHold, LostReason, LostSink};

/// How many lost holds a slow watcher of [`Session::lost`] may fall behind by before it
/// misses some (it is told how many: [`LostHolds::missed`]).
const LOST_BACKLOG: usize = 1024;

/// A hold's give-back at shutdown: `Err` when it could not be given back (the lock then
/// frees when its lease ends).
pub(crate) type GiveBack =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send>;

/// The shared context of one lock handle ([`Client`](crate::Client) or
/// [`Redlock`](crate::Redlock)), in the spirit of etcd's `Session`: every hold taken
/// through the handle belongs to it, and a program can watch it as a whole.
///
/// * [`lost`](Session::lost) reports every hold of the session that may have been lost —
///   taken by another owner, expired without a renewal, or released by a shutdown —
///   whichever lock and kind it was, so one task can watch all of a program's locks.
/// * [`done`](Session::done) resolves once the session was shut down and every hold
///   given back.
///
/// Cheap to clone; clones are the same session.
///
/// ```no_run
/// # async fn demo() -> dlock::Result<()> {
/// let client = dlock::Client::connect("redis://127.0.0.1:6379").await?;
/// let mut lost = client.session().lost();
/// tokio::spawn(async move {
///     while let Some(hold) = lost.next().await {
///         eprintln!("lock {} may be lost: {}", hold.name, hold.reason);
///     }
/// });
/// let guard = client.mutex("nightly-report")?.lock().await?;
/// // ... work ...
/// guard.unlock().await?;
/// client.shutdown().await; // `lost.next()` then returns None
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where background work (releases on drop, renewals, notifiers) runs, even when a
    /// guard is dropped on a thread outside the runtime.
    runtime: tokio::runtime::Handle,
    /// Put in front of every hold token (see `ClientBuilder::holder_label`).
    holder_label: Option<String>,
    /// This session's tag in its tokens (see [`client_tag_of`]).
    tag: String,
    /// Set when shutdown begins: no new hold is tracked, no new wait starts.
    closed: AtomicBool,
    /// Set when shutdown has given every hold back.
    done: tokio::sync::watch::Sender<bool>,
    /// Every hold a guard of this session still has, for shutdown.
    holds: StdMutex<HashMap<u64, TrackedHold>>,
    next_hold: AtomicU64,
    /// Waits and background give-backs (dropped guards, cancelled waits) still running.
    background: Arc<Running>,
    /// Where holds report their loss; [`Session::lost`] subscribes to it.
    lost: LostSink,
    /// Whether the deadline watcher runs (started by the first [`Session::lost`]).
    watching: AtomicBool,
    /// Wakes the deadline watcher when a hold is tracked.
    tracked: tokio::sync::Notify,
    /// The release notifier of the session's waiters, started on first use (a client's;
    /// a Redlock's waiters listen on its masters' clients).
    notifier: OnceLock<Notifier>,
    /// The renewal schedulers of its holds, one per [`Lane`], started on first use.
    renewers: [OnceLock<Renewer>; 2],
    /// Held by a shutdown in progress.
    shutting_down: tokio::sync::Mutex<()>,
}

/// Which renewal scheduler renews a hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lane {
    /// Most holds.
    Plain = 0,
    /// Holds whose renewals wait for replicas (`WAIT`): a round of theirs must not hold
    /// up the others.
    Acknowledged = 1,
}

/// A live hold, as the session sees it: how to give it back, and its lease state.
struct TrackedHold {
    give_back: GiveBack,
    cell: LeaseCell,
}

impl Session {
    /// A session whose background work runs on `runtime`.
    pub(crate) fn new(runtime: tokio::runtime::Handle, holder_label: Option<String>) -> Session {
        let (lost, _) = tokio::sync::broadcast::channel(LOST_BACKLOG);
        Session {
            inner: Arc::new(Inner {
                runtime,
                holder_label,
                tag: format!("{:08x}", rand::random::<u32>()),
                closed: AtomicBool::new(false),
                done: tokio::sync::watch::Sender::new(false),
                holds: StdMutex::new(HashMap::new()),
                next_hold: AtomicU64::new(1),
                background: Arc::default(),
                lost,
                watching: AtomicBool::new(false),
                tracked: tokio::sync::Notify::new(),
                notifier: OnceLock::new(),
                renewers: [OnceLock::new(), OnceLock::new()],
                shutting_down: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// True once shutdown began: new acquisitions fail with
    /// [`Error::Closed`](crate::Error::Closed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Resolves once the session was shut down ([`Client::shutdown`](crate::Client::shutdown),
    /// [`Redlock::shutdown`](crate::Redlock::shutdown)) and every hold given back.
    pub async fn done(&self) {
        let mut done = self.inner.done.subscribe();
        // The sender lives as long as this session: the wait only ends by the flag.
        let _ = done.wait_for(|done| *done).await;
    }

    /// How many holds guards of this session have now.
    pub fn holds(&self) -> usize {
        self.inner.holds.lock().unwrap().len()
    }

    /// Every hold of this session that may be lost from now on, as it happens: one
    /// report per loss, for every kind and lock of the session.
    ///
    /// A hold is reported when a renewal, an extend or a fence read finds it taken
    /// ([`LostReason::Taken`]), when its validity deadline passes without a renewal
    /// ([`LostReason::Expired`], by a local timer, also for holds renewed by hand), and when
    /// shutdown releases it ([`LostReason::Released`]). A hold given back by its own
    /// `unlock` or drop is not a loss. The stream ends (`None`) once the session is done.
    pub fn lost(&self) -> LostHolds {
        let receiver = self.inner.lost.subscribe();
        if !self.inner.watching.swap(true, Ordering::AcqRel) {
            // Weak: a session dropped without a shutdown ends the watcher too.
            let session = Arc::downgrade(&self.inner);
            let done = self.inner.done.subscribe();
            self.inner.runtime.spawn(watch_deadlines(session, done));
        }
        LostHolds {
            receiver,
            done: self.inner.done.subscribe(),
            missed: 0,
        }
    }

    /// Where a new hold of this session reports its loss.
    pub(crate) fn sink(&self) -> &LostSink {
        &self.inner.lost
    }

    /// A fresh hold token: `[label/]<tag>.<random>`, the session's tag (32 random bits as 8
    /// hex digits) and 128 random bits as 32 hex digits, behind the holder label if there
    /// is one. The tag lets a release address a queued waiter on a channel its client
    /// shares (see [`client_tag_of`]).
    pub(crate) fn new_token(&self) -> String {
        // Built in one allocation, with room for the suffix some kinds add (`~<ttl>~<N>`):
        // a token is made for every acquire.
        let label = self.inner.holder_label.as_deref();
        let mut token = String::with_capacity(
            label.map_or(0, |label| label.len() + 1) + self.inner.tag.len() + 1 + 32 + 24,
        );
        if let Some(label) = label {
            token.push_str(label);
            token.push('/');
        }
        token.push_str(&self.inner.tag);
        token.push('.');
        push_hex(&mut token, rand::random::<u128>());
        token
    }

    /// Records a live hold for shutdown; returns its id, or `None` once shutdown began
    /// (checked under the same lock shutdown drains the holds with).
    pub(crate) fn track_hold(&self, cell: &LeaseCell, give_back: GiveBack) -> Option<u64> {
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        {
            let mut holds = self.inner.holds.lock().unwrap();
            if self.is_closed() {
                return None;
            }
            holds.insert(
                id,
                TrackedHold {
                    give_back,
                    cell: cell.clone(),
                },
            );
        }
        if self.inner.watching.load(Ordering::Acquire) {
            self.inner.tracked.notify_one();
        }
        Some(id)
    }

    /// Forgets a hold; false when shutdown already took (and released) it.
    pub(crate) fn untrack_hold(&self, id: u64) -> bool {
        self.inner.holds.lock().unwrap().remove(&id).is_some()
    }

    /// Counts a wait or give-back in progress until the returned value is dropped;
    /// shutdown waits for them.
    pub(crate) fn busy(&self) -> Busy {
        self.inner.background.busy()
    }

    /// Runs a give-back (a dropped guard's release, a cancelled wait's clean-up) on the
    /// session's runtime; shutdown waits for those in flight. The returned receiver
    /// resolves when the work is done (or was dropped).
    pub(crate) fn spawn_background(
        &self,
        work: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let busy = self.busy();
        let (finished, receiver) = tokio::sync::oneshot::channel();
        // Handle::spawn never panics: after runtime shutdown the task is dropped (and
        // `busy` with it) and the lease frees the lock.
        self.inner.runtime.spawn(async move {
            let _busy = busy;
            work.await;
            let _ = finished.send(());
        });
        receiver
    }

    /// The release notifier, started by `start` on first use.
    /// The release notifier if a wait started it already (nothing is started here).
    pub(crate) fn started_notifier(&self) -> Option<&Notifier> {
        self.inner.notifier.get()
    }

    pub(crate) fn notifier(
        &self,
        start: impl FnOnce(&tokio::runtime::Handle) -> Notifier,
    ) -> &Notifier {
        let notifier = self
            .inner
            .notifier
            .get_or_init(|| start(&self.inner.runtime));
        // Started by a wait racing shutdown, after shutdown looked for it: stopped here.
        // (The fences order this check against shutdown's look, so one of the two stops it.)
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.is_closed() {
            notifier.stop();
        }
        notifier
    }

    /// The renewal scheduler of `lane`, renewing on the target `target` makes on first
    /// use.
    pub(crate) fn renewer(
        &self,
        lane: Lane,
        target: impl FnOnce() -> Arc<dyn RenewTarget>,
    ) -> &Renewer {
        self.inner.renewers[lane as usize]
            .get_or_init(|| Renewer::start(target(), &self.inner.runtime))
    }

    /// Shuts the session down, the same way for every handle that has one: no hold is
    /// tracked and no wait starts from now on; the session's notifier stops, so its
    /// waiters wake and give back what they may hold; every hold still tracked is given
    /// back (its lost signal fires with [`LostReason::Released`]) for as long as Redis
    /// keeps answering them (given up once none is answered within `bound`); waits and
    /// other background work in progress finish, within `bound` (a request that cannot
    /// reach Redis ends with its timeout, and a wait whose future is never polled again
    /// would otherwise hold shutdown up); renewal stops; `and_then` runs (what else the
    /// handle stops); then [`Session::done`] resolves and [`LostHolds`] streams end.
    pub(crate) async fn shutdown(&self, bound: Duration, and_then: impl Future<Output = ()>) {
        // One at a time: a second shutdown waits for the first, then finds little left to
        // do; one whose future was dropped midway is finished by the next.
        let _turn = self.inner.shutting_down.lock().await;
        // track_hold checks it under the lock release_all drains the holds with: no hold
        // slips in after.
        self.inner.closed.store(true, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(notifier) = self.inner.notifier.get() {
            notifier.stop();
        }
        self.release_all(bound).await;
        let _ = tokio::time::timeout(bound, self.inner.background.until_none()).await;
        // No hold is tracked after close: nothing is left to renew.
        for renewer in &self.inner.renewers {
            if let Some(renewer) = renewer.get() {
                renewer.stop().await;
            }
        }
        and_then.await;
        self.inner.done.send_replace(true);
    }

    /// Gives back every hold still tracked: each one's lost signal fires with
    /// [`LostReason::Released`] first, then the give-backs run, at most
    /// [`GIVE_BACKS_IN_FLIGHT`] at a time, as background work that outlives a dropped
    /// shutdown. Waits while Redis answers them (a give-back it refuses, e.g. a lock found
    /// gone, is an answer too); once none is answered for `bound` (Redis stopped
    /// answering), the rest are abandoned, unsent: their locks free when their leases end.
    async fn release_all(&self, bound: Duration) {
        let holds: Vec<TrackedHold> = {
            let mut holds = self.inner.holds.lock().unwrap();
            holds.drain().map(|(_, hold)| hold).collect()
        };
        if holds.is_empty() {
            return;
        }
        let total = holds.len();
        tracing::debug!(
            holds = total,
            "shutdown: releasing the locks guards still hold"
        );
        let give_backs: Vec<_> = holds
            .into_iter()
            .map(|hold| {
                signal::declare_lost(&hold.cell, LostReason::Released);
                (hold.give_back)()
            })
            .collect();
        let tally = Arc::new(GiveBackTally::default());
        let counting = tally.clone();
        // On the session's runtime, as background work: taken out of the registry, a
        // release must happen even if this shutdown's future is dropped now (the next
        // shutdown waits for it with the rest of the background work). Bounded: sent all
        // at once, a hundred thousand give-backs queue behind each other on the one
        // connection until the later ones outlive the response timeout and are never
        // sent again (measured by `dlock bench`'s capacity scenario: 56 of 100,000 left).
        let mut all = self.spawn_background(async move {
            futures_util::stream::iter(give_backs)
                .for_each_concurrent(GIVE_BACKS_IN_FLIGHT, |give_back| {
                    let tally = counting.clone();
                    async move {
                        if tally.abandoned.load(Ordering::Acquire) {
                            return tally.settle(None);
                        }
                        // A panic in one give-back must not cancel the others queued here.
                        let outcome = AssertUnwindSafe(give_back).catch_unwind().await;
                        tally.settle(Some(outcome));
                    }
                })
                .await;
            counting.report(total);
        });
        let mut answered = 0;
        while tokio::time::timeout(bound, &mut all).await.is_err() {
            let now = tally.answered.load(Ordering::Acquire);
            if now == answered {
                // Nothing answered for a whole bound: Redis is not answering. Waiting on
                // (two response timeouts per 128 holds) could outlast any stop timeout.
                tally.abandoned.store(true, Ordering::Release);
                break;
            }
            answered = now;
        }
    }
}

/// How shutdown's give-backs went, reported once: one line for many failures, not one
/// per lock.
#[derive(Default)]
struct GiveBackTally {
    /// Answered by Redis: given back, or refused in its words (not found, NOPERM, ...):
    /// progress. A transient error is not ([`is_transient`](crate::Error::is_transient):
    /// a timeout, a dropped connection, and the answers that say to come back later, such
    /// as BUSY, LOADING or CLUSTERDOWN): while they last, waiting longer gives nothing back.
    answered: AtomicUsize,
    /// Failed, panicked or abandoned unsent.
    failed: AtomicUsize,
    /// What the first failure said.
    first_failure: OnceLock<String>,
    /// Set once shutdown stopped waiting: the give-backs not yet sent are skipped.
    abandoned: AtomicBool,
}

impl GiveBackTally {
    /// Counts one give-back's outcome (`None`: abandoned unsent).
    fn settle(&self, outcome: Option<std::thread::Result<Result<()>>>) {
        let failure = match outcome {
            Some(Ok(Ok(()))) => {
                self.answered.fetch_add(1, Ordering::AcqRel);
                return;
            }
            Some(Ok(Err(error))) => {
                if !error.is_transient() {
                    self.answered.fetch_add(1, Ordering::AcqRel);
                }
                error.to_string()
            }
            Some(Err(_)) => "the give-back panicked".to_string(),
            None => "not sent: Redis had stopped answering the others".to_string(),
        };
        let _ = self.first_failure.set(failure);
        self.failed.fetch_add(1, Ordering::AcqRel);
    }

    fn report(&self, total: usize) {
        let failed = self.failed.load(Ordering::Acquire);
        if failed > 0 {
            let first = self.first_failure.get().map_or("", String::as_str);
            tracing::warn!(
                failed,
                total,
                first,
                "shutdown could not give back every lock; each left frees when its lease ends"
            );
        }
    }
}

/// How many give-backs shutdown keeps in flight at once: enough to fill the connection's
/// pipeline (a round trip's worth of releases), few enough that each is answered well
/// within the response timeout.
const GIVE_BACKS_IN_FLIGHT: usize = 128;

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("holds", &self.holds())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Reports every tracked hold whose validity deadline passed, and sleeps until the next
/// one's; runs from the first [`Session::lost`] until the session is done or dropped. (A
/// renewer declares what it finds; this covers holds nobody renews, and reports a renewed
/// hold's expiry on time even when its renewer is stuck on a silent server.)
async fn watch_deadlines(
    session: std::sync::Weak<Inner>,
    mut done: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let Some(inner) = session.upgrade() else {
            return;
        };
        let tracked = inner.tracked.notified();
        tokio::pin!(tracked);
        tracked.as_mut().enable();
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut expired = Vec::new();
        for hold in inner.holds.lock().unwrap().values() {
            let state = hold.cell.state();
            if state.lost.is_some() {
                continue; // declared, and so reported, where it was found
            }
            if state.valid_until <= now {
                expired.push(hold.cell.clone());
            } else {
                next = Some(next.map_or(state.valid_until, |n| n.min(state.valid_until)));
            }
        }
        for cell in expired {
            cell.report(LostReason::Expired);
        }
        // Re-checked at least every second: a late extend that revives a reported hold
        // moves its deadline without waking this.
        let until = next.map_or(now + Duration::from_secs(1), |n| {
            n.min(now + Duration::from_secs(1))
        });
        // (Holding `inner` while asleep keeps a dropped session alive a second at most.)
        tokio::select! {
            _ = tracked => {}
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {}
            _ = done.wait_for(|done| *done) => return,
        }
    }
}

/// The identity that holds a [`ReentrantMutex`](crate::ReentrantMutex) or reads an
/// [`RwLock`](crate::RwLock), bound to a handle when it is made. Every clone of such a
/// handle acts for an owner of its own, as a Redisson lock does for each thread; a handle
/// made with `for_owner(handle.owner())` acts for the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// A fresh owner with a random 128-bit id.
    pub fn new() -> Owner {
        Owner(random_token())
    }

    /// An owner with a chosen id (e.g. to act for the same owner from another process).
    pub fn from_id(id: impl Into<String>) -> Owner {
        Owner(id.into())
    }

    /// The id stored in Redis.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

/// The client tag and the random part of a token made by dlock
/// (`[label/]<tag>.<random>[~<ttl ms>[~<N>]]`, both parts hex): after the holder label, if
/// any, and before what a queued waiter's token names. `None` for a token of another form
/// (another client's lock, an older dlock). `queue.lua`'s `waiter_address` reads tokens
/// the same way.
pub fn token_tag_and_random(token: &str) -> Option<(&str, &str)> {
    let tail = token.rsplit('/').next()?;
    let tail = tail.split('~').next()?;
    let (tag, random) = tail.split_once('.')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(tag) && hex(random)).then_some((tag, random))
}

/// The client tag in a token made by [`Session::new_token`] (see [`token_tag_and_random`]).
pub(crate) fn client_tag_of(token: &str) -> Option<&str> {
    token_tag_and_random(token).map(|(tag, _)| tag)
}

/// A fresh 128-bit random token, as 32 hex digits.
pub(crate) fn random_token() -> String {
    let mut token = String::with_capacity(32);
    push_hex(&mut token, rand::random::<u128>());
    token
}

/// Appends `value` as 32 lowercase hex digits (what `{:032x}` writes, without the
/// formatter's cost on the acquire path).
fn push_hex(to: &mut String, value: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..32).rev() {
        to.push(DIGITS[((value >> (shift * 4)) & 0xf) as usize] as char);
    }
}

/// The holds of a [`Session`] that may have been lost, in the order they were found. Made
/// by [`Session::lost`].
#[derive(Debug)]
pub struct LostHolds {
    receiver: tokio::sync::broadcast::Receiver<LostHold>,
    done: tokio::sync::watch::Receiver<bool>,
    missed: u64,
}

impl LostHolds {
    /// The next lost hold; `None` once the session is done (shut down, every hold given
    /// back and reported), or dropped.
    pub async fn next(&mut self) -> Option<LostHold> {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        loop {
            match self.receiver.try_recv() {
                Ok(hold) => return Some(hold),
                Err(TryRecvError::Lagged(missed)) => {
                    self.missed += missed;
                    continue;
                }
                Err(TryRecvError::Closed) => return None,
                Err(TryRecvError::Empty) => {}
            }
            // Reports all precede the done flag: drained above, nothing more comes.
            if *self.done.borrow_and_update() {
                return None;
            }
            tokio::select! {
                received = self.receiver.recv() => match received {
                    Ok(hold) => return Some(hold),
                    Err(RecvError::Lagged(missed)) => self.missed += missed,
                    Err(RecvError::Closed) => return None,
                },
                changed = self.done.changed() => {
                    if changed.is_err() {
                        // The session itself is gone (dropped without a shutdown): no
                        // renewer, extend or shutdown of it can report anything more.
                        return None;
                    }
                }
            }
        }
    }

    /// How many reports this watcher missed by falling more than 1024 behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }
}

/// How many waits and give-backs are running, and a way to wait until none is. An atomic
/// count (every acquire counts itself: this is on the hot path) and a wake-up only when
/// the count drops to zero.
#[derive(Default)]
pub(crate) struct Running {
    count: AtomicUsize,
    none: tokio::sync::Notify,
}

impl Running {
    /// Counts one more piece of work until the returned value is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        self.count.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    pub(crate) async fn until_none(&self) {
        loop {
            let none = self.none.notified();
            tokio::pin!(none);
            none.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            none.await;
        }
    }
}

/// A wait or background give-back in progress; finished when dropped (also when its
/// runtime drops it).
pub(crate) struct Busy(Arc<Running>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_fresh_128_bit_hex() {
        let (a, b) = (super::random_token(), super::random_token());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hex_digits_are_the_formatters() {
        for value in [0, 1, 0xabc, u128::MAX, u128::MAX / 3, 1 << 127] {
            let mut written = String::new();
            super::push_hex(&mut written, value);
            assert_eq!(written, format!("{value:032x}"));
        }
    }

    #[test]
    fn a_token_names_its_client_tag_and_nothing_else_does() {
        use super::client_tag_of;
        assert_eq!(client_tag_of("0a1b2c3d.ff00"), Some("0a1b2c3d"));
        assert_eq!(client_tag_of("web.1:x/0a1b2c3d.ff00"), Some("0a1b2c3d"));
        assert_eq!(client_tag_of("0a1b2c3d.ff00~30000~3"), Some("0a1b2c3d"));
        for other in [
            "", "ff00", "a.b.c", "a.", ".a", "web/ff00", "x.y", "ab.cd/", "ab.cd/ef",
        ] {
            assert_eq!(client_tag_of(other), None, "{other}");
        }
    }
}

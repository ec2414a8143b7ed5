//! The wait-scoped owner of one hold token ([`Claim`]): it knows whether a grant may have
//! happened and whether the waiter may hold a place in a queue, and gives both back when
//! the wait ends without a guard (an error, a timeout, or a future dropped mid-wait).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::options::jitter;
use crate::queue::QueueKeys;
use crate::raw::{RawLock, Waiting};

/// The wait-scoped owner of one hold token: tracks whether a grant may have happened
/// (an attempt in flight, or one whose reply was lost) and whether the waiter may hold a
/// place in a queue, and gives both back when the wait ends without a guard.
pub(crate) struct Claim<R: RawLock> {
    raw: R,
    pub token: String,
    /// Boxed: a claim comes back as the error of [`Claim::into_guard`], kept small.
    queue: Option<Box<QueueKeys>>,
    in_flight: bool,
    /// An attempt's outcome is unknown (its reply was lost): it may have been granted.
    unknown: bool,
    /// An attempt that may have queued this waiter was sent.
    queued: bool,
    armed: bool,
}

impl<R: RawLock> Claim<R> {
    pub fn new(raw: R, queue: Option<QueueKeys>) -> Claim<R> {
        let token = raw.session().new_token();
        Claim {
            token: match (&queue, raw.waiting()) {
                (Some(queue), _) => {
                    queue.waiter_token(token, raw.options().kept_for(raw.options().ttl))
                }
                // A single attempt does not queue, but a weighted permit's token still
                // names its weight.
                (None, Waiting::Queue(queue)) => queue.attempt_token(token),
                (None, _) => token,
            },
            raw,
            queue: queue.map(Box::new),
            in_flight: false,
            unknown: false,
            queued: false,
            armed: true,
        }
    }

    /// An attempt is about to be sent. (An attempt that settles its own leftovers gives
    /// back itself what it may have been granted if it is dropped.)
    pub fn sending(&mut self, join_queue: bool) {
        self.in_flight = !self.raw.settles_each_attempt();
        self.queued |= join_queue;
    }

    /// The attempt was answered (granted, busy, or refused).
    pub fn answered(&mut self) {
        self.in_flight = false;
    }

    /// The attempt's reply was lost: it may have been granted.
    pub fn unknown(&mut self) {
        self.in_flight = false;
        if self.raw.settles_each_attempt() {
            self.next_token();
        } else {
            self.unknown = true;
        }
    }

    /// An attempt that settled its own leftovers leaves the next one a fresh token: its
    /// give-back runs in the background and must not take a later attempt's grant.
    pub fn next_token(&mut self) {
        if self.raw.settles_each_attempt() {
            self.token = self.raw.session().new_token();
        }
    }

    /// The wait ended with a grant: the guard takes the hold over. When the client was
    /// shut down meanwhile the claim comes back, to give the grant back.
    pub fn into_guard(
        mut self,
        fence: Option<u64>,
        holds: u32,
        sent: Instant,
    ) -> Result<Guard<R>, Self> {
        match self.take_guard(fence, holds, sent) {
            Some(guard) => Ok(guard),
            None => Err(self),
        }
    }

    /// [`into_guard`](Claim::into_guard) in place: `None` when the client was shut down
    /// meanwhile, and the claim then gives the grant back.
    pub fn take_guard(
        &mut self,
        fence: Option<u64>,
        holds: u32,
        sent: Instant,
    ) -> Option<Guard<R>> {
        // The token moves to the guard, and comes back if no guard could start.
        let token = std::mem::take(&mut self.token);
        match Guard::start(self.raw.clone(), token, fence, holds, sent) {
            Ok(guard) => {
                self.armed = false;
                Some(guard)
            }
            Err(token) => {
                self.token = token;
                self.unknown = true;
                None
            }
        }
    }

    /// What giving back needs, as a task of its own (so dropping whoever awaits it
    /// cannot cut it short), or `None` when nothing may be ours.
    fn cleanup(&mut self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        if !self.armed {
            return None;
        }
        self.armed = false;
        let queue = self.queue.take().filter(|_| self.queued);
        // A queued waiter may have been handed the lock by a release (a direct grant)
        // that it never heard of.
        let release = self.in_flight || self.unknown || queue.is_some();
        if !release && queue.is_none() {
            return None;
        }
        let (raw, token) = (self.raw.clone(), std::mem::take(&mut self.token));
        Some(async move {
            let options = *raw.options();
            // Our place in the queue first (it lasts at most the waiter lease): once it is
            // gone no release can hand us the lock. Then a grant we may have (Redis keeps
            // it at most `ttl` and the lock-delay from now: past that there is nothing to
            // give back).
            let give_back_grant = async {
                if !release {
                    return;
                }
                let until = Instant::now() + options.kept_for(options.ttl);
                match retrying(until, || raw.release(&token)).await {
                    Ok(()) => {
                        tracing::debug!(lock = %raw.name(), "gave back a grant whose reply was lost")
                    }
                    Err(Error::Lost { .. }) => {}
                    Err(err) => {
                        tracing::debug!(lock = %raw.name(), error = %err, "giving back a possible grant failed; its lease will expire")
                    }
                }
            };
            let leave_queue = async {
                let Some(queue) = &queue else { return };
                let until = Instant::now() + options.waiter_lease;
                if let Err(err) = retrying(until, || raw.leave_queue(queue, &token)).await {
                    tracing::debug!(lock = %raw.name(), error = %err, "leaving the queue failed; the waiter lease will expire");
                }
            };
            leave_queue.await;
            give_back_grant.await;
        })
    }

    /// The wait ended without a guard: give back what may be ours before returning.
    ///
    /// Not an `async fn`: one would keep the clean-up's future in its own state, making
    /// the future of every acquire (which awaits this on its way out) four times larger,
    /// and so the bytes copied on every call. The clean-up is spawned here; the future
    /// only awaits its end.
    pub fn give_back(mut self) -> impl std::future::Future<Output = ()> + Send {
        let done = self
            .cleanup()
            .map(|cleanup| self.raw.session().spawn_background(cleanup));
        async move {
            if let Some(done) = done {
                let _ = done.await;
            }
        }
    }
}

/// Runs `attempt` until it succeeds, fails for good, or `until` passes, retrying transient
/// errors (a give-back whose request timed out, perhaps before its script was loaded).
async fn retrying<T, F, Fut>(until: Instant, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt().await {
            Err(err) if err.is_transient() && Instant::now() + pause < until => {
                tokio::time::sleep(jitter(pause)).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

impl<R: RawLock> Drop for Claim<R> {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup() {
            drop(self.raw.session().spawn_background(cleanup));
        }
    }
}

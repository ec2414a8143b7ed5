//! The one acquisition path every lock kind goes through: attempts, waiting without blind
//! polling, retries, and giving back whatever a wait that ends without a guard may have
//! been granted.
//!
//! A waiter subscribes to its release channel (see [`crate::notifier`]), re-checks the
//! lock, and then sleeps until it is woken or the holder's lease ends, so an abandoned
//! lock is taken as soon as it expires. Without notifications it polls with jittered
//! backoff.
//!
//! One token serves every attempt of one wait: an attempt whose reply was lost but that
//! was granted is recognised by the next attempt as ours (and its lease restarted). A
//! [`Claim`] owns that token for the wait: when the wait ends without a guard — an error,
//! the budget used up, or the future dropped by `timeout`/`select!` — it gives back, once
//! and after the last attempt, the grant that may have happened and the queue place.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::notifier::Watch;
use crate::observe;
use crate::options::{jitter, Wait};
use crate::queue::QueueKeys;
use crate::raw::{Attempt, RawLock, Waiting};

/// A little past the holder's expiry (0.5–2.5 ms, random so that waiters of an expired
/// lock do not all arrive at once).
fn expiry_slack() -> Duration {
    Duration::from_micros(rand::rng().random_range(500..2500))
}

/// How long a waiter sleeps before its next attempt, unless woken.
///
/// * `holder_remaining`: the blocking lease from the last attempt (`None` when unknown: a
///   key without expiry, or a queued waiter that will be woken in turn);
/// * `live`: whether notifications are being delivered;
/// * `poll`: the current polling interval; `backoff_max` its bound;
/// * `refresh`: the longest sleep of a queued waiter, which must refresh its place;
/// * `deadline`: the end of the wait budget.
fn next_sleep(
    holder_remaining: Option<Duration>,
    live: bool,
    poll: Duration,
    backoff_max: Duration,
    refresh: Option<Duration>,
    deadline: Option<Instant>,
) -> Duration {
    // Notifications cover releases; the lease covers abandonment. Without notifications
    // we also poll.
    let mut sleep = match (holder_remaining, live) {
        (Some(remaining), true) => remaining.saturating_add(expiry_slack()),
        (Some(remaining), false) => jitter(poll).min(remaining.saturating_add(expiry_slack())),
        (None, true) => refresh.unwrap_or(backoff_max),
        (None, false) => jitter(poll),
    };
    if let Some(refresh) = refresh {
        sleep = sleep.min(refresh);
    }
    if let Some(deadline) = deadline {
        sleep = sleep.min(deadline.saturating_duration_since(Instant::now()));
    }
    sleep
}

/// How often a wait that keeps failing on a transient error says so at warn level.
const RETRY_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Takes a hold of `raw`: one attempt when `single` (or the wait policy is
/// [`Wait::NoWait`]), otherwise waiting per the options.
pub(crate) async fn acquire<R: RawLock>(raw: &R, single: bool) -> Result<Guard<R>> {
    use tracing::Instrument;
    // A span costs something on every poll even when nothing records it, and this is the
    // hot path of every lock: only with debug logging on.
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return acquire_in_span(raw, single).await;
    }
    let span = tracing::debug_span!("dlock.acquire", lock = %raw.name(), kind = raw.kind_name());
    acquire_in_span(raw, single).instrument(span).await
}

async fn acquire_in_span<R: RawLock>(raw: &R, single: bool) -> Result<Guard<R>> {
    let client = raw.client().clone();
    let options = *raw.options();
    let wait = if single { Wait::NoWait } else { options.wait };
    let queue = match raw.waiting() {
        Waiting::Queue(queue) if wait != Wait::NoWait => Some(queue.clone()),
        _ => None,
    };
    let join_queue = queue.is_some();
    // Shutdown waits for this wait to end (it ends at once when it sees the client closed).
    let _busy = client.busy();
    let mut claim = Claim::new(raw.clone(), queue);
    let started = Instant::now();
    let deadline = match wait {
        Wait::Timeout(timeout) => started.checked_add(timeout),
        Wait::NoWait | Wait::Forever => None,
    };
    let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut poll = options.backoff.min;
    let mut watch: Option<Watch> = None;
    let mut attempts: u32 = 0;
    let mut last_warning: Option<Instant> = None;
    let outcome = loop {
        if client.is_closed() {
            break Err(Error::Closed);
        }
        if let Some(watch) = watch.as_mut() {
            watch.mark_seen();
        }
        attempts += 1;
        let sent = Instant::now();
        claim.sending(join_queue);
        let reply = raw.attempt(&claim.token, join_queue).await;
        let (remaining, failed) = match reply {
            Ok(Attempt::Granted { fence, holds }) => {
                claim.answered();
                if let Some(watch) = watch.as_mut() {
                    watch.wake_used();
                }
                match claim.into_guard(fence, holds, sent) {
                    Ok(guard) => {
                        observe::acquired(raw.kind_name(), raw.name(), attempts, started.elapsed());
                        return Ok(guard);
                    }
                    Err(returned) => {
                        // Granted after shutdown began: give it back.
                        claim = returned;
                        break Err(Error::Closed);
                    }
                }
            }
            Ok(Attempt::Busy { remaining }) => {
                claim.answered();
                if let Some(watch) = watch.as_mut() {
                    watch.wake_used();
                }
                (remaining, false)
            }
            Err(err) if err.is_transient() => {
                claim.unknown();
                if wait == Wait::NoWait || past_deadline() {
                    break Err(err);
                }
                let loud = !matches!(last_warning, Some(at) if at.elapsed() < RETRY_WARNING_EVERY);
                if loud {
                    last_warning = Some(Instant::now());
                }
                observe::retrying(raw.kind_name(), raw.name(), &err, loud);
                (None, true)
            }
            Err(Error::NotReplicated {
                wanted,
                acknowledged,
                ..
            }) => {
                // Granted, but not on enough replicas: never a silently unreplicated
                // lock, the grant is given back.
                claim.unknown();
                break Err(Error::NotReplicated {
                    name: raw.name().to_string(),
                    wanted,
                    acknowledged,
                });
            }
            Err(err) => {
                claim.answered();
                break Err(err);
            }
        };
        if wait == Wait::NoWait {
            observe::busy(raw.kind_name(), raw.name());
            break Err(Error::Busy {
                name: raw.name().to_string(),
                remaining,
            });
        }
        if past_deadline() {
            observe::timed_out(raw.kind_name(), raw.name(), started.elapsed());
            break Err(Error::TimedOut {
                name: raw.name().to_string(),
                waited: started.elapsed(),
            });
        }
        let Some(active) = watch.as_mut() else {
            // Subscribe, then re-check at once: a release between the failed attempt and
            // the subscription would otherwise go unnoticed.
            let channel = match raw.waiting() {
                Waiting::Channel(channel) => channel.to_string(),
                Waiting::Queue(queue) => queue.wake_channel(&claim.token),
            };
            watch = Some(client.notifier().watch(&channel).await);
            continue;
        };
        let live = active.is_live() && !failed;
        let refresh = join_queue.then(|| options.waiter_lease / 3);
        let sleep = next_sleep(
            remaining,
            live,
            poll,
            options.backoff.max,
            refresh,
            deadline,
        );
        if !live {
            poll = poll.saturating_mul(2).min(options.backoff.max);
        }
        tokio::select! {
            _ = active.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    };
    drop(watch);
    claim.give_back().await;
    outcome
}

/// The wait-scoped owner of one hold token: tracks whether a grant may have happened
/// (an attempt in flight, or one whose reply was lost) and whether the waiter may hold a
/// place in a queue, and gives both back when the wait ends without a guard.
pub(crate) struct Claim<R: RawLock> {
    raw: R,
    pub token: String,
    queue: Option<QueueKeys>,
    in_flight: bool,
    /// An attempt's outcome is unknown (its reply was lost): it may have been granted.
    unknown: bool,
    /// An attempt that may have queued this waiter was sent.
    queued: bool,
    armed: bool,
}

impl<R: RawLock> Claim<R> {
    pub fn new(raw: R, queue: Option<QueueKeys>) -> Claim<R> {
        Claim {
            token: raw.client().new_token(),
            raw,
            queue,
            in_flight: false,
            unknown: false,
            queued: false,
            armed: true,
        }
    }

    /// An attempt is about to be sent.
    pub fn sending(&mut self, join_queue: bool) {
        self.in_flight = true;
        self.queued |= join_queue;
    }

    /// The attempt was answered (granted, busy, or refused).
    pub fn answered(&mut self) {
        self.in_flight = false;
    }

    /// The attempt's reply was lost: it may have been granted.
    pub fn unknown(&mut self) {
        self.in_flight = false;
        self.unknown = true;
    }

    /// The wait ended with a grant: the guard takes the hold over. When the client was
    /// shut down meanwhile the claim comes back, to give the grant back.
    pub fn into_guard(
        mut self,
        fence: Option<u64>,
        holds: u32,
        sent: Instant,
    ) -> Result<Guard<R>, Self> {
        match Guard::start(self.raw.clone(), self.token.clone(), fence, holds, sent) {
            Some(guard) => {
                self.armed = false;
                Ok(guard)
            }
            None => {
                self.unknown = true;
                Err(self)
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
        let release = self.in_flight || self.unknown;
        let queue = self.queue.take().filter(|_| self.queued);
        if !release && queue.is_none() {
            return None;
        }
        let (raw, token) = (self.raw.clone(), std::mem::take(&mut self.token));
        Some(async move {
            let options = *raw.options();
            // Independent steps, run together: a grant we may have (its lease is at most
            // `ttl` from now: past that there is nothing to give back), and our place in
            // the queue (at most the waiter lease).
            let give_back_grant = async {
                if !release {
                    return;
                }
                let until = Instant::now() + options.ttl;
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
                if let Err(err) = retrying(until, || queue.leave(raw.client(), &token)).await {
                    tracing::debug!(lock = %raw.name(), error = %err, "leaving the queue failed; the waiter lease will expire");
                }
            };
            futures_util::future::join(give_back_grant, leave_queue).await;
        })
    }

    /// The wait ended without a guard: give back what may be ours before returning.
    pub async fn give_back(mut self) {
        if let Some(cleanup) = self.cleanup() {
            let done = self.raw.client().spawn_background(cleanup);
            let _ = done.await;
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
            drop(self.raw.client().spawn_background(cleanup));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_waiters_sleep_until_the_holder_lease_ends() {
        let sleep = next_sleep(
            Some(Duration::from_secs(20)),
            true,
            Duration::from_millis(10),
            Duration::from_millis(500),
            None,
            None,
        );
        assert!(sleep >= Duration::from_secs(20), "{sleep:?}");
        let queued = next_sleep(
            Some(Duration::from_secs(20)),
            true,
            Duration::from_millis(10),
            Duration::from_millis(500),
            Some(Duration::from_secs(3)),
            None,
        );
        assert_eq!(queued, Duration::from_secs(3));
    }

    #[test]
    fn sleeps_never_overflow() {
        let sleep = next_sleep(
            Some(Duration::MAX),
            false,
            Duration::MAX,
            Duration::MAX,
            None,
            None,
        );
        assert!(sleep > Duration::ZERO);
    }
}

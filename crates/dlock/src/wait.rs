//! The one acquisition path every lock kind goes through: attempts, waiting without blind
//! polling, retries, and giving back whatever a wait that ends without a guard may have
//! been granted.
//!
//! A waiter subscribes to its release channel (see [`crate::notifier`]), re-checks the
//! lock, and then sleeps until it is woken or the holder's lease ends, so an abandoned
//! lock is taken as soon as it expires. Without notifications it polls with jittered
//! backoff.
//!
//! A queued waiter may be handed the lock by the release itself (a direct grant, see
//! `queue.lua`): told so by name on its client's channel, it holds the lock without an
//! attempt.
//!
//! One token serves every attempt of one wait: an attempt whose reply was lost but that
//! was granted is recognised by the next attempt as ours (and its lease restarted). A
//! [`Claim`] owns that token for the wait: when the wait ends without a guard — an error,
//! the budget used up, or the future dropped by `timeout`/`select!` — it gives back, once
//! and after the last attempt, the grant that may have happened and the queue place.

use std::time::{Duration, Instant};

use rand::Rng;

mod claim;
pub(crate) use claim::Claim;

use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::notifier::{Told, Turnstile, WakeSet};
use crate::observe;
use crate::options::{jitter, LockOptions, Wait};
use crate::raw::{Attempt, RawLock, Waiting};
use crate::session::Busy;

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

/// When a direct grant announced to a waiter whose last attempt (which queued it) was sent
/// at `queued_at` can be held as it is: the instant its lease counts from, for [`Guard`]'s
/// deadline and renewal. The grant came after `queued_at`, with the waiter's ttl but no
/// more than the rest of its waiter lease, which that attempt had restarted: when the
/// waiter lease is at least the ttl, the grant ends no earlier than `queued_at + ttl`.
///
/// `None` when the waiter should rather make an attempt, which finds the grant its own and
/// restarts its lease to the whole ttl: a waiter lease shorter than the ttl (the grant may
/// be as short as the waiter lease), replicas that must acknowledge the grant, or a grant
/// whose first renewal would already be due (a third of the ttl after `queued_at`). So a
/// guard starts as a grant from an attempt does, its first renewal still ahead: `dlock
/// run` counts on that when it decides how long a command may run before its lease could
/// pass. With a lock-delay the grant must last its ttl and the delay (a holder that dies
/// at once must still block the lock that long), so a waiter lease shorter than both also
/// takes an attempt.
fn direct_grant_start(options: &LockOptions, queued_at: Instant) -> Option<Instant> {
    if options.replicas.is_some() || options.waiter_lease < options.kept_for(options.ttl) {
        return None;
    }
    (queued_at.elapsed() < options.ttl / 3).then_some(queued_at)
}

/// How often a wait that keeps failing on a transient error says so at warn level.
const RETRY_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Takes a hold of `raw`, waiting per `wait` ([`Wait::NoWait`]: one attempt).
pub(crate) async fn acquire<R: RawLock>(raw: &R, wait: Wait) -> Result<Guard<R>> {
    use tracing::Instrument;
    // A span costs something on every poll even when nothing records it, and this is the
    // hot path of every lock: only with debug logging on.
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return acquire_in_span(raw, wait).await;
    }
    let span = tracing::debug_span!("dlock.acquire", lock = %raw.name(), kind = raw.kind_name());
    acquire_in_span(raw, wait).instrument(span).await
}

/// The bounds of the random delay after a split vote: it starts at the first and doubles
/// up to the second while contenders keep colliding.
const SPLIT_DELAY: std::ops::Range<Duration> =
    Duration::from_millis(10)..Duration::from_millis(200);

/// The wait, as a loop over the named steps of [`Acquisition`]. Every await of the wait is
/// in this function (the turn in [`Acquisition::start`] aside), each on one request or one
/// sleep; the steps between them are synchronous.
async fn acquire_in_span<R: RawLock>(raw: &R, wait: Wait) -> Result<Guard<R>> {
    let mut acquisition = Acquisition::start(raw, wait).await?;
    let ended = loop {
        if raw.session().is_closed() {
            break Error::Closed;
        }
        let blocked = if std::mem::take(&mut acquisition.wait_first) {
            Blocked::default()
        } else {
            let next = match acquisition.look() {
                Some(next) => next,
                None => {
                    let sent = acquisition.sending();
                    let reply = raw
                        .attempt(&acquisition.claim.token, acquisition.join_queue)
                        .await;
                    acquisition.received(reply, sent)
                }
            };
            match next {
                Next::Granted(grant) => match acquisition.grant(grant) {
                    Ok(guard) => return Ok(guard),
                    Err(ended) => break ended,
                },
                Next::Wait(blocked) => blocked,
                Next::End(err) => break err,
            }
        };
        match acquisition.pause(blocked) {
            Pause::Subscribe {
                channel,
                token,
                budget,
            } => {
                acquisition.wakes = Some(raw.watch(&channel, token.as_deref(), budget).await);
            }
            Pause::Sleep(delay) => tokio::time::sleep(delay).await,
            Pause::UntilWoken(sleep) => match acquisition.wakes.as_mut() {
                Some(active) => tokio::select! {
                    _ = active.notified() => {}
                    _ = tokio::time::sleep(sleep) => {}
                },
                // (Not reached: `pause` subscribes first.)
                None => tokio::time::sleep(sleep).await,
            },
        }
    };
    // The wait ends without a guard: its subscriptions are dropped, then what may be ours
    // is given back, before the turn passes to the next waiter (with the rest of
    // `acquisition`, at the end of this function).
    drop(acquisition.wakes.take());
    acquisition.claim.give_back().await;
    Err(ended)
}

/// One acquire in progress, in named steps that [`acquire_in_span`] runs in a loop:
/// [`start`](Acquisition::start) (the turn, the claim, an early listen), then rounds of
/// [`look`](Acquisition::look) (or [`sending`](Acquisition::sending) an attempt and
/// [`received`](Acquisition::received) its answer) and [`pause`](Acquisition::pause), until
/// [`grant`](Acquisition::grant) or the wait ends.
///
/// Cancellation: the awaits are the loop's, each on one request or sleep, and whatever may
/// be ours lives in the fields, so a future dropped by `timeout`/`select!` drops the
/// acquisition and its [`Claim`] gives back in the background what may have been granted.
/// Fields drop in declaration order, kept as the one loop this replaced dropped its
/// locals: the waiters' gauge, the claim (its clean-up spawned), the subscriptions, the
/// turn (the next waiter of the handle goes on), and the session's busy mark last.
struct Acquisition<'r, R: RawLock> {
    raw: &'r R,
    wait: Wait,
    options: LockOptions,
    /// Whether attempts take (or refresh) a place in the kind's queue.
    join_queue: bool,
    started: Instant,
    /// The end of the wait budget (`None`: a single attempt, or no bound).
    deadline: Option<Instant>,
    /// Attempts sent, for the metrics.
    attempts: u32,
    /// The polling interval while notifications are not delivered.
    poll: Duration,
    /// The bound of the random delay after the next split vote.
    split_delay: Duration,
    /// When a wait failing on a transient error last said so at warn level.
    last_warning: Option<Instant>,
    /// When the last attempt that left this waiter in the queue was sent.
    queued_at: Option<Instant>,
    /// The next round waits on the subscriptions first, without a look (they were handed
    /// over by the previous waiter in turn, just granted).
    wait_first: bool,
    /// Found held: counted among this process's waiters until the acquire ends.
    waiting: Option<observe::Waiting>,
    claim: Claim<R>,
    wakes: Option<WakeSet>,
    turn: Option<tokio::sync::OwnedMutexGuard<Option<WakeSet>>>,
    /// Shutdown waits for this wait to end (it ends at once when it sees the session
    /// closed).
    _busy: Busy,
}

/// A grant, for the guard: its fence (the first name's for a multi-lock), the owner's
/// hold count, every name's fence (a multi-lock's; empty otherwise), and when the attempt
/// that was granted was sent (its lease counts from then).
struct Grant {
    fence: Option<u64>,
    holds: u32,
    fences: Vec<u64>,
    sent: Instant,
}

/// What a look that was not granted learnt, for the wait before the next one.
#[derive(Default)]
struct Blocked {
    /// The blocking lease, when known.
    remaining: Option<Duration>,
    /// The attempt failed on a transient error (its outcome unknown).
    failed: bool,
    /// Contenders split the votes (Redlock).
    split: bool,
}

/// Where a look leaves the wait.
enum Next {
    Granted(Grant),
    Wait(Blocked),
    End(Error),
}

/// How the wait pauses before its next look.
enum Pause {
    /// Subscribe where this waiter is woken (within `budget`), then look again at once.
    Subscribe {
        channel: String,
        token: Option<String>,
        budget: Duration,
    },
    /// Sleep, deaf to releases (after a split vote).
    Sleep(Duration),
    /// Sleep until woken, or at most this long.
    UntilWoken(Duration),
}

impl<'r, R: RawLock> Acquisition<'r, R> {
    /// Takes this waiter's turn where the kind's waiters take turns, draws the wait's
    /// claim, and listens at once where a subscription is live already;
    /// [`Error::TimedOut`] when the budget passes before its turn.
    async fn start(raw: &'r R, wait: Wait) -> Result<Acquisition<'r, R>> {
        let options = *raw.options();
        let queue = match raw.waiting() {
            Waiting::Queue(queue) if wait != Wait::NoWait => Some(queue.clone()),
            _ => None,
        };
        let join_queue = queue.is_some();
        let busy = raw.session().busy();
        let started = Instant::now();
        let deadline = match wait {
            Wait::Timeout(timeout) => started.checked_add(timeout),
            Wait::NoWait | Wait::Forever => None,
        };
        // Waiters of one handle that take turns (Redlock) wait for theirs first; a single
        // attempt does not queue.
        let mut turn = match raw.turnstile() {
            Some(turnstile) if wait != Wait::NoWait => match take_turn(turnstile, deadline).await {
                Some(turn) => Some(turn),
                None => return Err(timed_out(raw, started)),
            },
            _ => None,
        };
        // The previous waiter's subscriptions, if it was granted and left them: live since
        // before its grant, so every release after that has woken them. Start by waiting on
        // them: the lock was just taken.
        let wakes: Option<WakeSet> = turn.as_mut().and_then(|turn| turn.take());
        let mut acquisition = Acquisition {
            raw,
            wait,
            options,
            join_queue,
            started,
            deadline,
            attempts: 0,
            poll: options.backoff.min,
            split_delay: SPLIT_DELAY.start,
            last_warning: None,
            queued_at: None,
            wait_first: wakes.is_some(),
            waiting: None,
            claim: Claim::new(raw.clone(), queue),
            wakes,
            turn,
            _busy: busy,
        };
        if acquisition.wakes.is_none() && wait != Wait::NoWait {
            acquisition.wakes = acquisition.listen_if_live();
        }
        Ok(acquisition)
    }

    /// One look at the lock without a request: what a queued waiter was told while it
    /// slept, or a direct grant held as it is; `None` when an attempt must be sent.
    fn look(&mut self) -> Option<Next> {
        // What a queued waiter was told while it slept (or subscribed).
        let told = match self.wakes.as_mut() {
            Some(wakes) => wakes.take_told(),
            None => Told::default(),
        };
        if let (None, Some(ms)) = (told.granted, told.watch_ms) {
            // The waiter ahead was handed the lock: this one, still in line, sleeps until
            // that lease ends unless handed the lock first, with no attempt to learn it.
            return Some(Next::Wait(Blocked {
                remaining: Some(Duration::from_millis(ms)),
                ..Blocked::default()
            }));
        }
        let (fence, sent) = self.direct_grant(told)?;
        let granted = Attempt::Granted {
            fence: Some(fence),
            holds: 1,
        };
        Some(self.read(Ok(granted), sent))
    }

    /// A release handed this waiter the lock: it holds the lock without an attempt when
    /// the grant can be held as it is (see [`direct_grant_start`]). The direct grant's
    /// fence, and the instant its lease counts from.
    fn direct_grant(&self, told: Told) -> Option<(u64, Instant)> {
        told.granted.and_then(|fence| {
            let start = direct_grant_start(&self.options, self.queued_at?)?;
            Some((fence, start))
        })
    }

    /// An attempt is about to be sent with the claim's token: the claim knows it is out,
    /// so a future dropped meanwhile gives back what it may have been granted. When it is
    /// sent, for the lease of its grant.
    fn sending(&mut self) -> Instant {
        if let Some(wakes) = self.wakes.as_mut() {
            wakes.before_attempt();
        }
        self.attempts += 1;
        let sent = Instant::now();
        self.claim.sending(self.join_queue);
        sent
    }

    /// The answer to the attempt sent at `sent` came: a wake that came while it was out
    /// is used up by it. What the answer means, as [`read`](Acquisition::read).
    fn received(&mut self, reply: Result<Attempt>, sent: Instant) -> Next {
        if let Some(wakes) = self.wakes.as_mut() {
            wakes.wake_used();
        }
        self.read(reply, sent)
    }

    /// What the answer to an attempt (or a direct grant) sent at `sent` means for the
    /// wait; the claim follows it.
    fn read(&mut self, reply: Result<Attempt>, sent: Instant) -> Next {
        match self.decide(reply, sent) {
            Next::Wait(blocked) => self.keep_waiting(blocked),
            next => next,
        }
    }

    /// What the answer to an attempt sent at `sent` says; the claim follows it.
    fn decide(&mut self, reply: Result<Attempt>, sent: Instant) -> Next {
        match reply {
            // A multi-lock's grant: the first name's fence is the guard's, and the guard
            // keeps every name's.
            Ok(Attempt::GrantedAll { fences }) => {
                self.claim.answered();
                Next::Granted(Grant {
                    fence: fences.first().copied(),
                    holds: 1,
                    fences,
                    sent,
                })
            }
            Ok(Attempt::Granted { fence, holds }) => {
                self.claim.answered();
                Next::Granted(Grant {
                    fence,
                    holds,
                    fences: Vec::new(),
                    sent,
                })
            }
            Ok(Attempt::Busy { remaining, split }) => {
                self.claim.answered();
                self.claim.next_token();
                if self.join_queue {
                    self.queued_at = Some(sent);
                }
                Next::Wait(Blocked {
                    remaining,
                    failed: false,
                    split,
                })
            }
            Err(err) if err.is_transient() => {
                self.claim.unknown();
                if self.wait == Wait::NoWait || self.past_deadline() {
                    return Next::End(err);
                }
                let loud =
                    !matches!(self.last_warning, Some(at) if at.elapsed() < RETRY_WARNING_EVERY);
                if loud {
                    self.last_warning = Some(Instant::now());
                }
                observe::retrying(self.raw.kind_name(), self.raw.name(), &err, loud);
                Next::Wait(Blocked {
                    remaining: None,
                    failed: true,
                    split: false,
                })
            }
            Err(Error::NotReplicated {
                wanted,
                acknowledged,
                ..
            }) => {
                // Granted, but not on enough replicas: never a silently unreplicated
                // lock, the grant is given back.
                self.claim.unknown();
                Next::End(Error::NotReplicated {
                    name: self.raw.name().to_string(),
                    wanted,
                    acknowledged,
                })
            }
            Err(err) => {
                self.claim.answered();
                Next::End(err)
            }
        }
    }

    /// After an attempt that was not granted: a single attempt ends [`Error::Busy`], a
    /// wait past its budget [`Error::TimedOut`]; otherwise the wait goes on.
    fn keep_waiting(&mut self, blocked: Blocked) -> Next {
        let raw = self.raw;
        if self.wait == Wait::NoWait {
            observe::busy(raw.kind_name(), raw.name());
            return Next::End(Error::Busy {
                name: raw.name().to_string(),
                remaining: blocked.remaining,
            });
        }
        if self.past_deadline() {
            return Next::End(timed_out(raw, self.started));
        }
        // Found held: waiting from here until this acquire ends, however it ends.
        if !blocked.failed {
            self.waiting
                .get_or_insert_with(|| observe::waiting(raw.kind_name(), &raw.keys().key));
        }
        Next::Wait(blocked)
    }

    /// How the wait pauses before its next look: it subscribes first if not yet (and
    /// looks again at once); after a split vote it sleeps a random delay; otherwise it
    /// sleeps until woken, the holder's lease ends, the queue place is due for a refresh,
    /// or the next poll.
    fn pause(&mut self, blocked: Blocked) -> Pause {
        let Some(active) = self.wakes.as_ref() else {
            // Subscribe, then re-check at once: a release between the failed attempt and
            // the subscription would otherwise go unnoticed.
            let (channel, token) = self.wake_address();
            return Pause::Subscribe {
                channel,
                token,
                budget: self.budget_left(),
            };
        };
        if blocked.split {
            // Contenders split the votes: retry after a random delay (Redlock's rule,
            // growing while they keep colliding), deaf to releases meanwhile: the
            // give-backs of the split round announce releases, and woken by those the
            // contenders would collide again at once, round after round.
            let delay = rand::rng().random_range(Duration::ZERO..=self.split_delay);
            self.split_delay = (self.split_delay * 2).min(SPLIT_DELAY.end);
            return Pause::Sleep(delay.min(self.budget_left()));
        }
        let live = active.is_live() && !blocked.failed;
        // A queued waiter refreshes its place a third of its waiter lease after the last
        // attempt that did (sleeps told to watch a lease do not refresh it). After a failed
        // attempt it polls with backoff instead: counting from the last success, a server
        // answering errors (BUSY, LOADING) for a while would be retried without a pause.
        let refresh = self.join_queue.then(|| {
            let every = self.options.waiter_lease / 3;
            match self.queued_at {
                Some(at) if !blocked.failed => every.saturating_sub(at.elapsed()),
                _ => every,
            }
        });
        let mut sleep = next_sleep(
            blocked.remaining,
            live,
            self.poll,
            self.options.backoff.max,
            refresh,
            self.deadline,
        );
        if live && active.may_miss_a_word() {
            sleep = sleep.min(self.options.backoff.max);
        }
        if !live {
            self.poll = self.poll.saturating_mul(2).min(self.options.backoff.max);
        }
        Pause::UntilWoken(sleep)
    }

    /// Granted: the guard takes the hold over, and the live subscriptions go to the next
    /// waiter in turn. [`Error::Closed`] when granted after shutdown began: the claim then
    /// gives the grant back.
    fn grant(&mut self, grant: Grant) -> Result<Guard<R>, Error> {
        let Some(mut guard) = self.claim.take_guard(grant.fence, grant.holds, grant.sent) else {
            // Granted after shutdown began: give it back.
            return Err(Error::Closed);
        };
        guard.fences = grant.fences;
        // Hand the live subscriptions to the next waiter in turn: any wake they
        // hold came before this grant.
        if let (Some(turn), Some(mut wakes)) = (self.turn.as_mut(), self.wakes.take()) {
            wakes.before_attempt();
            **turn = Some(wakes);
        }
        observe::acquired(
            self.raw.kind_name(),
            self.raw.name(),
            self.attempts,
            self.started.elapsed(),
        );
        Ok(guard)
    }

    /// Where this waiter listens, and as which token (a queued waiter is addressed).
    fn wake_address(&self) -> (String, Option<String>) {
        let token = &self.claim.token;
        match self.raw.waiting() {
            Waiting::Channel(channel) => (channel.to_string(), None),
            Waiting::Queue(queue) => (queue.wake_channel(token), Some(token.to_string())),
        }
    }

    /// Already subscribed (another waiter of this client listens, or did a moment ago):
    /// listen before the first attempt, so a busy one needs no second attempt. (Every
    /// acquire passes here: the release channel is looked up without a copy.)
    fn listen_if_live(&self) -> Option<WakeSet> {
        let token = &self.claim.token;
        match self.raw.waiting() {
            Waiting::Channel(channel) => self.raw.watch_if_live(channel, None),
            Waiting::Queue(queue) => self
                .raw
                .watch_if_live(&queue.wake_channel(token), Some(token)),
        }
    }

    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn budget_left(&self) -> Duration {
        self.deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    }
}

/// Takes a hold of `raw` (waiting per its options), runs `work` with the grant's fence
/// while the hold is renewed, and releases it; [`Error::Lost`] (and `work` dropped at its
/// next await) when the hold is lost first. The work of every kind's `with_lock`.
pub(crate) async fn with_lock<R, F, Fut, T>(raw: &R, work: F) -> Result<T>
where
    R: RawLock,
    F: FnOnce(u64) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let guard = acquire(raw, raw.options().wait).await?;
    // On failure the guard is dropped, which releases it.
    let fence = guard.fence().await?;
    let mut lost = guard.lost_signal();
    tokio::select! {
        value = work(fence) => {
            guard.unlock().await?;
            Ok(value)
        }
        reason = lost.wait() => {
            tracing::warn!(target: crate::observe::OUTCOME_TARGET, lock = %raw.name(), %reason, "lock lost; work cancelled");
            drop(guard);
            Err(Error::Lost { name: raw.name().to_string() })
        }
    }
}

/// Waits for this waiter's turn at `turnstile` until `deadline`; `None` when it passed.
async fn take_turn(
    turnstile: std::sync::Arc<Turnstile>,
    deadline: Option<Instant>,
) -> Option<tokio::sync::OwnedMutexGuard<Option<WakeSet>>> {
    let queued = turnstile.lock_owned();
    match deadline {
        Some(deadline) => tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), queued)
            .await
            .ok(),
        None => Some(queued.await),
    }
}

fn timed_out<R: RawLock>(raw: &R, started: Instant) -> Error {
    observe::timed_out(raw.kind_name(), raw.name(), started.elapsed());
    Error::TimedOut {
        name: raw.name().to_string(),
        waited: started.elapsed(),
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

//! The one guard every lock kind hands out: the grant (token, fencing token, hold count),
//! the local validity deadline and lost signal, renewal, extend, unlock, and release on
//! drop or at [`Client::shutdown`](crate::Client::shutdown).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lease;
use crate::options::Renewal;
use crate::raw::RawLock;
use crate::renew::{Registration, RenewalSpec};
use crate::signal::{self, renewed, LeaseCell, LostReason, LostSignal};

/// Proof of holding a lock: a [`MutexGuard`](crate::MutexGuard), a
/// [`ReentrantGuard`](crate::ReentrantGuard), a [`ReadGuard`](crate::ReadGuard) or
/// [`WriteGuard`](crate::WriteGuard), a [`SemaphorePermit`](crate::SemaphorePermit), a
/// [`RedlockGuard`](crate::RedlockGuard), an [`AnyGuard`](crate::AnyGuard).
///
/// Every guard has the same verbs: [`token`](Guard::token), [`fence`](Guard::fence),
/// [`remaining`](Guard::remaining), [`lost`](Guard::lost), [`extend`](Guard::extend),
/// [`unlock`](Guard::unlock).
///
/// **Dropping** a guard without [`unlock`](Guard::unlock) stops its renewal and releases
/// it in the background on the client's runtime. If that runtime is shutting down (the
/// end of `main`), the background release may never run and the lock stays held until
/// its lease ends: call [`Client::shutdown`](crate::Client::shutdown) before returning
/// from `main`, or unlock explicitly.
#[must_use = "dropping a guard releases the lock at once (in the background)"]
pub struct Guard<R: RawLock> {
    pub(crate) raw: R,
    token: String,
    /// Drawn at grant by most kinds; by the plain mutex on first read (see
    /// [`fence`](Guard::fence)).
    fence: tokio::sync::OnceCell<u64>,
    /// A multi-lock's fence of every name, in the order of its names (empty for a kind
    /// over one name).
    pub(crate) fences: Vec<u64>,
    holds: u32,
    held: Held,
    /// This hold's entry in the client's list of live holds (for shutdown).
    hold_id: u64,
    /// Unlocked, handed over as a token, or converted (downgrade): nothing to do on drop.
    done: bool,
    /// When this guard began (the grant's reply, or a direct hand-off): the hold's start
    /// for `dlock_hold_seconds` (the lease may count from earlier, from a queued
    /// attempt's send).
    #[cfg(feature = "metrics")]
    started: Instant,
    /// Until when a give-back keeps the lock ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least) after the
    /// grant's reply: never earlier than the holder knew it held it).
    keep_until: Option<Instant>,
    /// The hold's length was recorded, or is not to be (handed on as a token, converted).
    measured: bool,
    /// Taken while a guarded batch is in flight: one record per holder recognises a resend
    /// only of its latest batch (see `guarded/apply.lua`).
    applying: tokio::sync::Mutex<()>,
}

impl<R: RawLock> Guard<R> {
    /// Starts holding what an attempt sent at `sent` granted to `token`; the token back
    /// when the client was shut down meanwhile (the caller gives the grant back).
    pub(crate) fn start(
        raw: R,
        token: String,
        fence: Option<u64>,
        holds: u32,
        sent: Instant,
    ) -> Result<Guard<R>, String> {
        let options = raw.options();
        let cell = signal::new_cell(
            lease::valid_until(sent, options.ttl),
            raw.keys().clone(),
            &token,
            raw.session().sink(),
            1 + raw.other_holds().len(),
        );
        let keep_until =
            (options.hold_at_least).and_then(|least| Instant::now().checked_add(least));
        let Some(hold_id) = track_hold(&raw, &cell, keep_until) else {
            return Err(token);
        };
        let held = Held::start(&raw, &token, sent, cell);
        Ok(Guard {
            raw,
            token,
            fence: tokio::sync::OnceCell::new_with(fence),
            fences: Vec::new(),
            holds,
            held,
            hold_id,
            done: false,
            #[cfg(feature = "metrics")]
            started: Instant::now(),
            keep_until,
            measured: false,
            applying: tokio::sync::Mutex::new(()),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.raw.name()
    }

    /// The random token that identifies this hold in Redis.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the
    /// same lock. Pass it to storage that rejects writes with a smaller one than it has
    /// seen. (A reentrant or read hold reports its owner's outermost grant.)
    ///
    /// It is `max(counter + 1, the server's clock in µs)`: the counter keeps fences
    /// growing while Redis keeps its data, the clock floor when it does not (a restart
    /// without persistence, a failover), as long as the servers' clocks move forward and
    /// agree within the time between two grants. Always below 2^53.
    ///
    /// Every kind but the plain mutex draws it with the grant, and this returns at once.
    /// A plain mutex draws it on the first call, by a script that checks the hold is
    /// still ours and draws from the lock's counter in one step: so the fence is drawn
    /// while held, and still orders grants (every earlier holder drew its own while it
    /// held, before this grant; every later one after). That costs one round trip, once
    /// per hold, and spares every acquire that never reads it the counter (see
    /// `docs/decisions.md`; [`LockOptions::fence_at_grant`](crate::LockOptions::fence_at_grant)
    /// draws it with the grant instead). Fails with [`Error::Lost`] when the hold is gone
    /// by then (no fence for it; the lost signal fires with
    /// [`LostReason::Taken`]), or with the error that kept Redis from answering.
    pub async fn fence(&self) -> Result<u64> {
        self.fence
            .get_or_try_init(|| async {
                let drawn = self.raw.draw_fence(&self.token).await;
                if matches!(drawn, Err(Error::Lost { .. })) {
                    // No fence for a hold that is gone: the lost signal says so.
                    signal::declare_lost(&self.held.cell, LostReason::Taken);
                }
                drawn
            })
            .await
            .copied()
    }

    /// Every name's fencing token, in the order of the names: a multi-lock's (see
    /// [`Client::multi_lock`](crate::Client::multi_lock)), each drawn with the grant from
    /// its own name's counter; for a kind over one name, its name and
    /// [`fence`](Guard::fence) (which a plain mutex draws now).
    pub async fn fences(&self) -> Result<Vec<(String, u64)>> {
        if self.fences.is_empty() {
            return Ok(vec![(self.name().to_string(), self.fence().await?)]);
        }
        let names = std::iter::once(self.name())
            .chain(self.raw.other_holds().iter().map(|keys| keys.name.as_str()));
        Ok(names
            .map(str::to_string)
            .zip(self.fences.iter().copied())
            .collect())
    }

    /// The fencing token if it has been drawn ([`fence`](Guard::fence) returned it, or
    /// the kind draws it with the grant); `None` before a plain mutex's first read.
    pub fn drawn_fence(&self) -> Option<u64> {
        self.fence.get().copied()
    }

    /// The owner's number of holds right after this one was granted (1 unless the kind
    /// is reentrant: a [`ReentrantGuard`](crate::ReentrantGuard) or a re-entered
    /// [`ReadGuard`](crate::ReadGuard)).
    pub fn holds_at_grant(&self) -> u32 {
        self.holds
    }

    /// Until when this hold may be assumed held, by the local monotonic clock: the send
    /// time of the last successful grant, extension or renewal, plus the lease, minus
    /// [`drift_allowance`](crate::drift_allowance).
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// How much of the validity is left (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// A signal that fires when this hold may have been lost. See [`LostSignal`].
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Resolves when this hold may have been lost, with the reason.
    pub async fn lost(&self) -> LostReason {
        self.held.lost_signal().wait().await
    }

    /// Resets the lease to `ttl` from now, if this holder still holds it; fails with
    /// [`Error::Lost`] when it does not. (The holds of a reentrant owner share one lease,
    /// which an extend never shortens.)
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        // No renewal round may interleave: the later reply must be the lease Redis has.
        let paused = self.held.pause_renewal().await;
        let sent = Instant::now();
        let extended = self.raw.extend(&self.token, ttl).await;
        if matches!(extended, Err(Error::NotReplicated { .. })) {
            // The extend gave the hold back.
            signal::declare_lost(&self.held.cell, LostReason::Released);
        } else if matches!(extended, Err(Error::Lost { .. })) {
            // The token is gone from Redis: the lost signal says so, as a renewal would.
            signal::declare_lost(&self.held.cell, LostReason::Taken);
        } else if extended.as_ref().is_err_and(Error::is_transient) {
            // A request whose reply was lost may have run, and set a lease shorter than
            // the old one: assume the shorter of the two.
            signal::shortened(&self.held.cell, lease::valid_until(sent, ttl));
        }
        extended?;
        self.held.extended(sent, ttl);
        drop(paused);
        Ok(())
    }

    /// Applies `batch` (commands on data kept beside the lock) in one script that first
    /// checks this hold, so it takes effect only while the hold is held: a holder paused
    /// past its lease has its late write refused by Redis itself. Answers each command's
    /// reply, in order.
    ///
    /// Fails with [`Error::Lost`], with nothing applied, when the hold is gone (the lost
    /// signal fires with [`LostReason::Taken`]); with [`Error::InvalidArgument`] for a
    /// command outside [`GUARDED_COMMANDS`](crate::GUARDED_COMMANDS) or on a Redlock
    /// (whose hold spans several masters). A command Redis refuses (a data key of another
    /// type, a value that is not a number) fails the batch with [`Error::Refused`] naming
    /// it; the commands before it stay applied, as in `MULTI`, since Redis has no
    /// rollback. A batch resent after a lost reply is applied once; it is resent only
    /// when the connection is back within a lease of its first send (while Redis keeps
    /// its record), and a connection back later than that fails the call with [`Error::Connection`]: whether the batch
    /// was applied is then unknown, as after a response timeout. The batches of one
    /// guard are applied one at a time, in the order they are called.
    pub async fn apply(&self, batch: &crate::guarded::Guarded) -> Result<Vec<redis::Value>> {
        let _one_at_a_time = self.applying.lock().await;
        let applied = match crate::guarded::apply_for(&self.raw, &self.token, batch).await {
            // This guard's kind is the one it took: another kind at the key took the name
            // after this hold ended.
            Err(Error::WrongType { .. }) => Err(Error::Lost {
                name: self.raw.name().to_string(),
            }),
            other => other,
        };
        if matches!(applied, Err(Error::Lost { .. })) {
            signal::declare_lost(&self.held.cell, LostReason::Taken);
        }
        applied
    }

    /// Fires the lost signal: a script found the hold gone.
    pub(crate) fn declare_lost(&self, reason: LostReason) {
        signal::declare_lost(&self.held.cell, reason);
    }

    /// The Redis key of the lock's data key `key` (`{NAME}:data:KEY`, or for a key with a
    /// hash tag such as `{t}:job`, `{t}/4/:job:data:KEY`; see
    /// [`Guarded`](crate::Guarded)), for reading the data with a connection of your own.
    pub fn data_key(&self, key: &str) -> String {
        crate::guarded::data_key(self.raw.keys(), key)
    }

    /// Asks Redis whether this hold is still held.
    pub async fn is_held(&self) -> Result<bool> {
        self.raw.is_held(&self.token).await
    }

    /// Stops renewal (waiting out a renewal in flight), then gives the hold back (with
    /// [`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least), one that began less than that ago keeps the lock
    /// until then and frees by itself). Fails with [`Error::Lost`] when the lease had
    /// already ended or another owner holds the lock now (which is left untouched), or
    /// when [`Client::shutdown`](crate::Client::shutdown) already released it.
    pub fn unlock(self) -> impl std::future::Future<Output = Result<()>> + Send {
        // Not an `async fn`: one keeps its guard argument twice in its state, and the
        // future of every release is built and copied on every call.
        let mut guard = self;
        async move { guard.unlock_in_place().await }
    }

    async fn unlock_in_place(&mut self) -> Result<()> {
        self.held.stop_renewal().await;
        // Past its validity the hold may still be in Redis (a lock-delay, the drift
        // allowance), and is given back; but it was not held to the end.
        let lapsed = self.held.cell.lost_now().is_some();
        let released = give_back(&self.raw, &self.token, self.keep_until, &self.held.cell).await;
        let released = match released {
            Ok(()) if lapsed => Err(Error::Lost {
                name: self.raw.name().to_string(),
            }),
            other => other,
        };
        // Only now: if this future is dropped before, the drop releases in the background
        // (releasing twice is harmless, the second finds the token gone).
        self.done = true;
        self.raw.session().untrack_hold(self.hold_id);
        let lost = match &released {
            Ok(()) => {
                crate::observe::released(self.raw.kind_name(), self.raw.name());
                false
            }
            Err(Error::Lost { .. }) => {
                // Found gone at release, or lapsed before it: the lost signal says so too.
                let reason = if lapsed {
                    LostReason::Expired
                } else {
                    LostReason::Taken
                };
                signal::declare_lost(&self.held.cell, reason);
                true
            }
            // No answer: whatever the lease says now.
            Err(_) => self.held.cell.lost_now().is_some(),
        };
        self.end_hold(lost);
        released
    }

    /// Records the hold's length once (`dlock_hold_seconds`): to now, or for a hold that
    /// was lost, to when its validity ended. A hold that ended cleanly stops its lost
    /// signals from reporting a latency.
    fn end_hold(&mut self, lost: bool) {
        if std::mem::replace(&mut self.measured, true) {
            return;
        }
        #[cfg(feature = "metrics")]
        {
            let now = Instant::now();
            let end = if lost {
                now.min(self.held.cell.state().valid_until)
            } else {
                signal::settle(&self.held.cell);
                now
            };
            crate::observe::hold_ended(
                self.raw.kind_name(),
                end.saturating_duration_since(self.started),
                lost,
            );
        }
        #[cfg(not(feature = "metrics"))]
        let _ = lost;
    }

    /// Gives up the guard without releasing: renewal stops and the lock stays held until
    /// its lease ends or someone releases it with the returned token.
    pub fn into_token(mut self) -> String {
        self.done = true;
        self.measured = true; // the hold goes on
        drop(self.held.detach());
        self.raw.session().untrack_hold(self.hold_id);
        std::mem::take(&mut self.token)
    }

    /// Ends this guard without releasing, for a conversion that took the hold over
    /// (downgrade); renewal stops.
    pub(crate) async fn retire(mut self) {
        self.held.stop_renewal().await;
        self.done = true;
        self.measured = true; // the hold goes on in the converted guard
        self.raw.session().untrack_hold(self.hold_id);
    }
}

/// The state of a held lock that every guard shares: the grant, the live lease state, and
/// its place in the client's renewal scheduler.
struct Held {
    pub cell: LeaseCell,
    registration: Option<Registration>,
    /// The renewals of a multi-lock's other names, under the same lease cell (each its
    /// part of it). They share the first one's scheduler, so waiting for the first's
    /// round in flight waits for theirs.
    others: Vec<Registration>,
}

impl Held {
    /// Starts holding `token`'s lease at `raw`'s hold key (and its other holds'),
    /// granted by a request sent at `sent`, with the lease, renewal and replica
    /// acknowledgement of its options.
    pub fn start<R: RawLock>(raw: &R, token: &str, sent: Instant, cell: LeaseCell) -> Held {
        let options = raw.options();
        let (ttl, replicas) = (options.ttl, options.replicas);
        let Renewal::Auto { max_hold } = options.renewal else {
            return Held {
                cell,
                registration: None,
                others: Vec::new(),
            };
        };
        let (key, kind) = raw.hold_key();
        let others = raw.other_holds().iter().map(|keys| keys.key.as_str());
        let registrations: Vec<Registration> = std::iter::once(key)
            .chain(others)
            .enumerate()
            .map(|(part, key)| {
                raw.renewer().register(
                    RenewalSpec {
                        key: key.to_string(),
                        kind,
                        part,
                        token: token.to_string(),
                        ttl,
                        delay: options.kept_for(ttl) - ttl,
                        // A cap too large to represent is no cap.
                        hold_until: max_hold.and_then(|cap| sent.checked_add(cap)),
                        replicas,
                        cell: cell.clone(),
                    },
                    sent,
                )
            })
            .collect();
        let mut registrations = registrations.into_iter();
        let registration = registrations.next();
        Held {
            cell,
            registration,
            others: registrations.collect(),
        }
    }

    pub fn valid_until(&self) -> Instant {
        self.cell.state().valid_until
    }

    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(&self.cell)
    }

    /// Records a successful manual extension sent at `sent`: the lease is now exactly
    /// `ttl` from then (shorter or longer), and renewals go on with that `ttl`.
    pub fn extended(&self, sent: Instant, ttl: Duration) {
        renewed(&self.cell, lease::valid_until(sent, ttl));
        for registration in self.registration.iter().chain(&self.others) {
            registration.set_ttl(ttl, sent);
        }
    }

    /// Holds off renewal rounds while a manual extension is on the wire.
    pub async fn pause_renewal(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.registration {
            Some(registration) => Some(registration.pause().await),
            None => None,
        }
    }

    /// Stops renewal; when this returns no renewal of this lease is on the wire.
    pub async fn stop_renewal(&mut self) {
        // Dropped, the others are out of the scheduler; cancelling the first then waits
        // out the round in flight, which is theirs too.
        self.others.clear();
        if let Some(registration) = self.registration.take() {
            registration.cancel().await;
        }
    }

    /// Stops renewal without waiting; hands out the registration to cancel later.
    pub fn detach(&mut self) -> Option<Registration> {
        self.others.clear();
        self.registration.take()
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("state", &self.cell.state())
            .field("renewed", &self.registration.is_some())
            .finish()
    }
}

/// Gives the hold `token` back (renewal stopped): released at once, or, until
/// `keep_until` ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)), kept and left to end by itself then. The
/// one way every end of a guard (unlock, drop, shutdown) gives a hold back. A hold past
/// its validity (`cell`'s) is released, never kept: Redis may still have it (a lock-delay,
/// the drift allowance), but its holder stopped counting on it, and keeping it would
/// bring a lapsed hold back.
async fn give_back<R: RawLock>(
    raw: &R,
    token: &str,
    keep_until: Option<Instant>,
    cell: &LeaseCell,
) -> Result<()> {
    let now = Instant::now();
    let state = cell.state();
    let lapsed = match state.lost {
        // Shutdown declares what it gives back released, a moment before.
        Some(LostReason::Released) => false,
        Some(_) => true,
        None => now >= state.valid_until,
    };
    let rest = keep_until
        .filter(|_| !lapsed)
        .and_then(|until| until.checked_duration_since(now));
    match rest {
        // Boxed: only a hold kept for `hold_at_least` lingers, and inline its future would
        // more than double the size of every release's (copied on every call).
        Some(rest) if !rest.is_zero() => {
            Box::pin(async {
                // A renewal sent after the linger would restart the whole lease (at
                // shutdown, the lost signal has just taken the hold out of renewal).
                raw.renewer().settled().await;
                raw.linger(token, rest).await
            })
            .await
        }
        _ => raw.release(token).await,
    }
}

/// Records a live hold in its client's session, which gives it back at shutdown; returns
/// its id, or `None` once shutdown began.
fn track_hold<R: RawLock>(raw: &R, cell: &LeaseCell, keep_until: Option<Instant>) -> Option<u64> {
    let (raw, lease) = (raw.clone(), cell.clone());
    let session = raw.session().clone();
    session.track_hold(
        cell,
        Box::new(move || {
            Box::pin(async move {
                // The hold's token, as its lease cell keeps it.
                let token = &lease.token;
                let mut given_back = give_back(&raw, token, keep_until, &lease).await;
                // Once more after a timeout or a dropped connection: every script is safe
                // to resend, and nobody else will give this hold back before its lease ends.
                if given_back.as_ref().is_err_and(Error::is_transient) {
                    given_back = give_back(&raw, token, keep_until, &lease).await;
                }
                if let Err(err) = &given_back {
                    // Counted and reported once by the session, not once per lock.
                    tracing::debug!(lock = %raw.name(), error = %err, "release at shutdown failed; the lock frees when its lease ends");
                }
                given_back
            })
        }),
    )
}

impl<R: RawLock> std::fmt::Debug for Guard<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("lock", &self.raw)
            .field("fence", &self.fence.get())
            .field("holds", &self.holds)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl<R: RawLock> Drop for Guard<R> {
    fn drop(&mut self) {
        // Dropped without unlock: the hold ends here, or ended when it was lost.
        if !self.measured {
            let lost = cfg!(feature = "metrics") && self.held.cell.lost_now().is_some();
            self.end_hold(lost);
        }
        if self.done {
            return;
        }
        let session = self.raw.session();
        if !session.untrack_hold(self.hold_id) {
            return; // shutdown released it
        }
        let renewal = self.held.detach();
        let (raw, token) = (self.raw.clone(), std::mem::take(&mut self.token));
        let (keep_until, lease) = (self.keep_until, self.held.cell.clone());
        // Nobody waits for it here; shutdown does.
        drop(session.spawn_background(async move {
            if let Some(renewal) = renewal {
                renewal.cancel().await;
            }
            if let Err(err) = give_back(&raw, &token, keep_until, &lease).await {
                tracing::debug!(lock = %raw.name(), error = %err, "background release failed; the lease will expire");
            }
        }));
    }
}

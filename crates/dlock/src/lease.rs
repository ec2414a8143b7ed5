//! The core every guard shares: token, fencing token, the local validity deadline and the
//! lost-lock signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::options::{LockOptions, Renewal};
use crate::raw::HoldKind;
use crate::renew::{Registration, RenewalSpec};

/// Shortest lease dlock accepts.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest lease dlock accepts. Longer work should hold a shorter lease and renew it.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How much of a lease the holder gives up to clock drift between it and Redis:
/// 1% of the lease plus 2 ms (the allowance of the Redlock algorithm).
pub fn drift_allowance(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The last instant at which the holder may assume it still owns a lease of `ttl` that it
/// requested at `sent` (taken *before* the request left, so network delay only shortens
/// the local view, never lengthens it).
pub(crate) fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift_allowance(ttl))
}

pub(crate) fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::InvalidArgument(format!(
            "lease {} is out of range; use between {} and {} (hold longer by renewing)",
            crate::humane(ttl),
            crate::humane(MIN_TTL),
            crate::humane(MAX_TTL)
        )));
    }
    Ok(())
}

/// A fresh 128-bit random token, as 32 hex digits.
pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The state of a held lock that every guard shares: the grant, the live lease state, and
/// its place in the client's renewal scheduler.
pub(crate) struct Held {
    pub cell: LeaseCell,
    registration: Option<Registration>,
}

impl Held {
    /// Starts holding `token`'s lease at `key`, granted by a request sent at `sent`, with
    /// the lease, renewal and replica acknowledgement of `options`.
    pub fn start(
        client: &Client,
        token: &str,
        sent: Instant,
        (key, kind): (&str, HoldKind),
        options: &LockOptions,
        cell: LeaseCell,
    ) -> Held {
        let (ttl, replicas) = (options.ttl, options.replicas);
        let registration = match options.renewal {
            Renewal::Manual => None,
            Renewal::Auto { max_hold } => Some(client.renewer().register(
                RenewalSpec {
                    key: key.to_string(),
                    kind,
                    token: token.to_string(),
                    ttl,
                    // A cap too large to represent is no cap.
                    hold_until: max_hold.and_then(|cap| sent.checked_add(cap)),
                    replicas,
                    cell: cell.clone(),
                },
                sent,
            )),
        };
        Held { cell, registration }
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
        renewed(&self.cell, valid_until(sent, ttl));
        if let Some(registration) = &self.registration {
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
        if let Some(registration) = self.registration.take() {
            registration.cancel().await;
        }
    }

    /// Stops renewal without waiting; hands out the registration to cancel later.
    pub fn detach(&mut self) -> Option<Registration> {
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

/// Why a holder must assume it no longer owns its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The local validity deadline passed without a successful renewal (Redis unreachable,
    /// paused or slow, renewal capped, or renewal not enabled). Another client may acquire
    /// the lock from now on.
    Expired,
    /// A renewal, or a plain mutex's first [`fence`](crate::Guard::fence) read, found the
    /// lock gone (expired or deleted) or held by another token.
    Taken,
    /// The client gave it back: [`Client::shutdown`](crate::Client::shutdown).
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "the lease ran out without a successful renewal",
            LostReason::Taken => "the lock is gone or held by another owner",
            LostReason::Released => "the client was shut down and released it",
        })
    }
}

/// The live state of a held lease, shared by its guard and the renewer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseState {
    pub valid_until: Instant,
    pub lost: Option<LostReason>,
}

/// A lease's live state, shared by its guard, the renewer, the client's shutdown and every
/// [`LostSignal`]. A mutex-guarded value and a [`Notify`](tokio::sync::Notify) rather than a
/// `watch` channel: one of these is made and dropped per grant, and a `watch` sender wakes
/// its (eight) waiter lists on drop, a measurable share of a short hold's client time.
pub(crate) struct LeaseShared {
    state: std::sync::Mutex<LeaseState>,
    changed: tokio::sync::Notify,
}

impl LeaseShared {
    /// The state now.
    pub fn state(&self) -> LeaseState {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `change`; wakes the lost signals when it says it changed something.
    fn update(&self, change: impl FnOnce(&mut LeaseState) -> bool) -> bool {
        let changed = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            change(&mut state)
        };
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }
}

/// The writers' handle on a lease's state: the guard and the renewer update it.
pub(crate) type LeaseCell = Arc<LeaseShared>;

pub(crate) fn new_cell(valid_until: Instant) -> LeaseCell {
    Arc::new(LeaseShared {
        state: std::sync::Mutex::new(LeaseState {
            valid_until,
            lost: None,
        }),
        changed: tokio::sync::Notify::new(),
    })
}

/// Sets the deadline after a successful renewal or extension: exactly the new lease, which
/// may be shorter than the old one (an extension to a shorter ttl shortens the lease in
/// Redis too). Renewals and extensions never overlap, so the last reply is Redis's lease.
/// Never after the lease was declared lost.
pub(crate) fn renewed(cell: &LeaseCell, valid_until: Instant) {
    cell.update(|state| {
        if state.lost.is_none() && valid_until != state.valid_until {
            state.valid_until = valid_until;
            true
        } else {
            false
        }
    });
}

/// Moves the deadline earlier, never later: a request that may have shortened the lease
/// in Redis failed, so the holder must assume the shorter of the two.
pub(crate) fn shortened(cell: &LeaseCell, valid_until: Instant) {
    cell.update(|state| {
        if state.lost.is_none() && valid_until < state.valid_until {
            state.valid_until = valid_until;
            true
        } else {
            false
        }
    });
}

/// Declares the lease lost (the first reason sticks); true if this declared it. The
/// validity ends now too, so `valid_until` and `remaining` agree with the signal.
pub(crate) fn declare_lost(cell: &LeaseCell, reason: LostReason) -> bool {
    cell.update(|state| {
        if state.lost.is_none() {
            state.lost = Some(reason);
            state.valid_until = state.valid_until.min(Instant::now());
            true
        } else {
            false
        }
    })
}

/// Tells a holder that it may have lost its lock.
///
/// Fires when a renewal finds the token gone or replaced ([`LostReason::Taken`]), or when
/// the local validity deadline passes without a successful renewal
/// ([`LostReason::Expired`]) — by a local timer, so it fires on time even when Redis does
/// not answer at all. Cheap to clone; every clone fires.
#[derive(Clone)]
pub struct LostSignal {
    cell: LeaseCell,
}

impl LostSignal {
    pub(crate) fn new(cell: &LeaseCell) -> LostSignal {
        LostSignal { cell: cell.clone() }
    }

    /// Resolves when the lock may have been lost, with the reason.
    pub async fn wait(&mut self) -> LostReason {
        loop {
            // Registered before reading the state: a change in between still wakes us.
            let changed = self.cell.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let state = self.cell.state();
            if let Some(reason) = state.lost {
                return reason;
            }
            let deadline = tokio::time::Instant::from_std(state.valid_until);
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {
                    // Nothing moved the deadline (a guard that is gone moves nothing).
                    let now = self.cell.state();
                    if now.valid_until <= state.valid_until {
                        return now.lost.unwrap_or(LostReason::Expired);
                    }
                }
            }
        }
    }

    /// The reason, if the lock may have been lost by now.
    pub fn lost(&self) -> Option<LostReason> {
        let state = self.cell.state();
        state
            .lost
            .or((Instant::now() >= state.valid_until).then_some(LostReason::Expired))
    }

    /// The current local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.cell.state().valid_until
    }
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("state", &self.cell.state())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_shorter_than_the_lease() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        assert_eq!(
            valid_until(now, ttl),
            now + ttl - Duration::from_millis(102)
        );
        assert_eq!(
            valid_until(now, MIN_TTL),
            now + MIN_TTL - Duration::from_micros(2100)
        );
    }

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl(Duration::ZERO).is_err());
        assert!(validate_ttl(Duration::from_millis(9)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn tokens_are_fresh_128_bit_hex() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}

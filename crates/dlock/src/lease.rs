//! What every hold of a single-node kind shares: the lease's bounds, the local validity
//! deadline, and its place in the client's renewal scheduler. (The lease's live state and
//! the lost signal are in [`signal`](crate::signal).)

use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::options::{LockOptions, Renewal};
use crate::raw::HoldKind;
use crate::renew::{Registration, RenewalSpec};
use crate::signal::{renewed, LeaseCell, LostSignal};

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
}

//! A lease's bounds and its local validity deadline: the arithmetic every hold shares,
//! below everything else. (A hold's live state and lost signal are in
//! [`signal`](crate::signal); its place in the renewer in [`guard`](crate::guard).)

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

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
            crate::duration_text::humane(ttl),
            crate::duration_text::humane(MIN_TTL),
            crate::duration_text::humane(MAX_TTL)
        )));
    }
    Ok(())
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

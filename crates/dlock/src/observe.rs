//! What dlock tells about itself: `tracing` events that name the lock, and — with the
//! `metrics` feature — counters and a histogram through the `metrics` facade:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `dlock_acquired_total` | `kind` | grants |
//! | `dlock_busy_total` | `kind` | single attempts that found the lock held |
//! | `dlock_timed_out_total` | `kind` | waits that used up their budget |
//! | `dlock_lost_total` | `reason` | holds that may have been lost (`expired`, `taken`, `released`) |
//! | `dlock_renew_failures_total` | | renewal calls that failed (retried until the deadline) |
//! | `dlock_not_replicated_total` | | grants, extends and renewals too few replicas acknowledged |
//! | `dlock_wait_seconds` | `kind` | time from the first attempt to the grant |
//!
//! Labels never carry lock names (unbounded cardinality); the events do.

use std::time::Duration;

/// Whole milliseconds, as the events report durations.
fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

pub(crate) fn acquired(kind: &'static str, lock: &str, attempts: u32, waited: Duration) {
    tracing::debug!(lock, kind, attempts, waited_ms = ms(waited), "acquired");
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("dlock_acquired_total", "kind" => kind).increment(1);
        metrics::histogram!("dlock_wait_seconds", "kind" => kind).record(waited.as_secs_f64());
    }
}

pub(crate) fn busy(kind: &'static str, lock: &str) {
    tracing::debug!(lock, kind, "busy");
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_busy_total", "kind" => kind).increment(1);
}

pub(crate) fn timed_out(kind: &'static str, lock: &str, waited: Duration) {
    let waited_ms = ms(waited);
    tracing::info!(lock, kind, waited_ms, "not acquired within the wait budget");
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_timed_out_total", "kind" => kind).increment(1);
}

/// A transient error while waiting; `loud` for the first one and then every few seconds,
/// so a wait against a Redis that went away says it is retrying without flooding.
pub(crate) fn retrying(kind: &'static str, lock: &str, error: &crate::Error, loud: bool) {
    if loud {
        tracing::warn!(lock, kind, %error, "Redis is not answering; still waiting for the lock and retrying");
    } else {
        tracing::debug!(lock, kind, %error, "acquire attempt failed; retrying");
    }
}

/// A hold that may have been lost; `label` names the reason in the metric.
pub(crate) fn lost(key: &str, label: &'static str, reason: &dyn std::fmt::Display) {
    tracing::warn!(lock = key, %reason, "lock may have been lost");
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_lost_total", "reason" => label).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = label;
}

pub(crate) fn renew_failed(key: &str, error: &dyn std::fmt::Display) {
    tracing::debug!(lock = key, %error, "renewal failed; retrying until the lease's deadline");
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_renew_failures_total").increment(1);
}

pub(crate) fn released(kind: &'static str, lock: &str) {
    tracing::debug!(lock, kind, "released");
}

/// Too few replicas acknowledged a write of a lock with `LockOptions::replicas`.
pub(crate) fn not_replicated(lock: &str, wanted: u32, acknowledged: u32) {
    tracing::warn!(
        lock,
        wanted,
        acknowledged,
        "too few replicas acknowledged the lock's write"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("dlock_not_replicated_total").increment(1);
}

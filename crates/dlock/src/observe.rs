//! What dlock tells about itself: `tracing` events that name the lock, and — with the
//! `metrics` feature — counters, histograms and a gauge through the `metrics` facade:
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
//! | `dlock_hold_seconds` | `kind`, `outcome` | a hold's length, from the guard's start to its unlock or drop (`released`), or to its loss (`lost`: found gone, or its validity ended); a hold handed on as a token or converted is not counted |
//! | `dlock_renew_lag_seconds` | | how late a renewal's reply came against the renewal's schedule (a third of the lease after the last one; 0 when on time) |
//! | `dlock_renew_margin_ratio` | | the share of the lease still left when a renewal's reply came (1: all of it; near 0: the hold nearly expired first) |
//! | `dlock_lost_signal_seconds` | `reason` | from the moment a hold was lost, as this process learned it (the lease's deadline, or the reply that found it gone), to a waiting [`lost`](crate::Guard::lost) being woken; once per hold, and only for a loss that came while it waited |
//! | `dlock_waiters` | `kind` | gauge: this process's acquires that found the lock held and wait now (not those retrying an unreachable Redis) |
//! | `dlock_waiters_per_lock` | `kind` | this process's waiters on the same lock (itself included) each time one starts to wait |
//!
//! Labels never carry lock names (unbounded cardinality); the events do, and
//! `dlock inspect --match PATTERN --prometheus` reports holders, leases, queues and fences
//! per lock from Redis itself.
//!
//! Events whose news the caller also gets as a value (a lost hold, a forced release, too
//! few replicas) have the target [`OUTCOME_TARGET`], so that an application that reports them
//! itself (the `dlock` CLI prints one line) can leave them out of its log.

/// The `tracing` target of the events that repeat what the caller is also told by a
/// return value or an error (see the module's documentation). A filter on `dlock` still
/// covers it.
pub const OUTCOME_TARGET: &str = "dlock::outcome";

use std::time::{Duration, Instant};

/// A metric of the `metrics` facade, described first (once per process): the recorder
/// then has each metric's help text, which a Prometheus scrape shows as `# HELP`.
#[cfg(feature = "metrics")]
macro_rules! metric {
    ($kind:ident, $($args:tt)*) => {{
        described();
        metrics::$kind!($($args)*)
    }};
}

/// Describes every metric to the installed recorder, on the first metric recorded (a
/// recorder installed later gets no descriptions, only the metrics).
#[cfg(feature = "metrics")]
fn described() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
        describe_counter!("dlock_acquired_total", "Locks granted, by kind");
        describe_counter!(
            "dlock_busy_total",
            "Single attempts that found the lock held, by kind"
        );
        describe_counter!(
            "dlock_timed_out_total",
            "Waits for a lock that used up their budget, by kind"
        );
        describe_counter!(
            "dlock_lost_total",
            "Holds that may have been lost, by reason (expired, taken, released)"
        );
        describe_counter!("dlock_renew_failures_total", "Failed renewal calls");
        describe_counter!(
            "dlock_not_replicated_total",
            "Lock writes that too few replicas acknowledged"
        );
        describe_histogram!(
            "dlock_wait_seconds",
            Unit::Seconds,
            "From the first attempt to the grant, by kind"
        );
        describe_histogram!(
            "dlock_hold_seconds",
            Unit::Seconds,
            "From a guard's start to its unlock or drop (released) or to the loss (lost)"
        );
        describe_histogram!(
            "dlock_renew_lag_seconds",
            Unit::Seconds,
            "How late a renewal's reply came against its schedule"
        );
        describe_histogram!(
            "dlock_renew_margin_ratio",
            "The share of the lease left when a renewal's reply came"
        );
        describe_histogram!(
            "dlock_lost_signal_seconds",
            Unit::Seconds,
            "From a loss to the waiting lost signal woken, by reason"
        );
        describe_gauge!(
            "dlock_waiters",
            "This process's acquires that found the lock held and wait now, by kind"
        );
        describe_histogram!(
            "dlock_waiters_per_lock",
            "This process's waiters on the same lock, each time one starts to wait"
        );
    });
}

/// Whole milliseconds, as the events report durations.
fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

pub(crate) fn acquired(kind: &'static str, lock: &str, attempts: u32, waited: Duration) {
    tracing::debug!(lock, kind, attempts, waited_ms = ms(waited), "acquired");
    #[cfg(feature = "metrics")]
    {
        metric!(counter, "dlock_acquired_total", "kind" => kind).increment(1);
        metric!(histogram, "dlock_wait_seconds", "kind" => kind).record(waited.as_secs_f64());
    }
}

pub(crate) fn busy(kind: &'static str, lock: &str) {
    tracing::debug!(lock, kind, "busy");
    #[cfg(feature = "metrics")]
    metric!(counter, "dlock_busy_total", "kind" => kind).increment(1);
}

pub(crate) fn timed_out(kind: &'static str, lock: &str, waited: Duration) {
    let waited_ms = ms(waited);
    tracing::info!(lock, kind, waited_ms, "not acquired within the wait budget");
    #[cfg(feature = "metrics")]
    metric!(counter, "dlock_timed_out_total", "kind" => kind).increment(1);
}

/// A transient error while waiting; `loud` for the first one and then every few seconds,
/// so a wait against a Redis that went away says it is retrying without flooding.
pub(crate) fn retrying(kind: &'static str, lock: &str, error: &crate::error::Error, loud: bool) {
    if loud {
        tracing::warn!(lock, kind, %error, "Redis is not answering; still waiting for the lock and retrying");
    } else {
        tracing::debug!(lock, kind, %error, "acquire attempt failed; retrying");
    }
}

/// A hold that may have been lost; `label` names the reason in the metric.
pub(crate) fn lost(key: &str, label: &'static str, reason: &dyn std::fmt::Display) {
    if label == "released" {
        // Given back on purpose (shutdown, a failed replica wait): no warning, or a
        // shutdown holding 100,000 locks would print 100,000 of them.
        tracing::debug!(target: OUTCOME_TARGET, lock = key, %reason, "hold given back");
    } else {
        tracing::warn!(target: OUTCOME_TARGET, lock = key, %reason, "lock may have been lost");
    }
    #[cfg(feature = "metrics")]
    metric!(counter, "dlock_lost_total", "reason" => label).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = label;
}

pub(crate) fn renew_failed(key: &str, error: &dyn std::fmt::Display) {
    tracing::debug!(lock = key, %error, "renewal failed; retrying until the lease's deadline");
    #[cfg(feature = "metrics")]
    metric!(counter, "dlock_renew_failures_total").increment(1);
}

pub(crate) fn released(kind: &'static str, lock: &str) {
    tracing::debug!(lock, kind, "released");
}

/// Too few replicas acknowledged a write of a lock with `LockOptions::replicas`.
pub(crate) fn not_replicated(lock: &str, wanted: u32, acknowledged: u32) {
    tracing::warn!(
        target: OUTCOME_TARGET,
        lock,
        wanted,
        acknowledged,
        "too few replicas acknowledged the lock's write"
    );
    #[cfg(feature = "metrics")]
    metric!(counter, "dlock_not_replicated_total").increment(1);
}

/// A hold ended after `held`: given back (`lost` false) or lost.
#[cfg(feature = "metrics")]
pub(crate) fn hold_ended(kind: &'static str, held: Duration, lost: bool) {
    metric!(histogram,
        "dlock_hold_seconds",
        "kind" => kind,
        "outcome" => if lost { "lost" } else { "released" }
    )
    .record(held.as_secs_f64());
}

/// A renewal's reply came now, for a renewal `scheduled` then, of a lease `ttl` that was
/// valid until `valid_until()` before it. The clock and the lease are read only with the
/// `metrics` feature: the renewal path is what `scale` measures.
pub(crate) fn renewed(scheduled: Instant, valid_until: impl FnOnce() -> Instant, ttl: Duration) {
    #[cfg(feature = "metrics")]
    {
        let now = Instant::now();
        let (lag, left) = (
            now.saturating_duration_since(scheduled),
            valid_until().saturating_duration_since(now),
        );
        metric!(histogram, "dlock_renew_lag_seconds").record(lag.as_secs_f64());
        let share = left.as_secs_f64() / ttl.as_secs_f64().max(f64::MIN_POSITIVE);
        metric!(histogram, "dlock_renew_margin_ratio").record(share.min(1.0));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (scheduled, valid_until, ttl);
}

/// A waiting lost signal was woken `delay` after the loss it reports.
pub(crate) fn lost_signal_delivered(label: &'static str, delay: Duration) {
    #[cfg(feature = "metrics")]
    metric!(histogram, "dlock_lost_signal_seconds", "reason" => label).record(delay.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (label, delay);
}

/// Counts an acquire as waiting from the first busy answer until it ends (granted, failed
/// or dropped), in the `dlock_waiters` gauge and per lock.
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    kind: &'static str,
    #[cfg(feature = "metrics")]
    key: String,
}

/// Starts counting a waiter of `kind` on the lock at `key`.
pub(crate) fn waiting(kind: &'static str, key: &str) -> Waiting {
    #[cfg(feature = "metrics")]
    {
        let same_lock = {
            let mut counts = waiters_per_lock().lock().unwrap_or_else(|p| p.into_inner());
            let count = counts.entry(key.to_string()).or_insert(0);
            *count += 1;
            *count
        };
        metric!(gauge, "dlock_waiters", "kind" => kind).increment(1.0);
        metric!(histogram, "dlock_waiters_per_lock", "kind" => kind).record(same_lock as f64);
        Waiting {
            kind,
            key: key.to_string(),
        }
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (kind, key);
        Waiting {}
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        metric!(gauge, "dlock_waiters", "kind" => self.kind).decrement(1.0);
        let mut counts = waiters_per_lock().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// This process's waiters per lock key (only locks someone waits for are in it).
#[cfg(feature = "metrics")]
fn waiters_per_lock() -> &'static std::sync::Mutex<std::collections::HashMap<String, usize>> {
    static COUNTS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, usize>>> =
        std::sync::OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

//! The live state of one hold's lease and its lost signal, and the report of a lost hold
//! to the session it belongs to. The bottom of the hold machinery: it knows no client,
//! no kind and no topology, so every layer above may use it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::keys::LockKeys;

/// Why a holder must assume it no longer owns its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The local validity deadline passed without a successful renewal (Redis unreachable,
    /// paused or slow, renewal capped, or renewal not enabled). Another client may acquire
    /// the lock from now on.
    Expired,
    /// A renewal, an extend, or a plain mutex's first [`fence`](crate::Guard::fence) read
    /// found the lock gone (expired or deleted) or held by another token.
    Taken,
    /// The client gave it back: [`Client::shutdown`](crate::Client::shutdown) or
    /// [`Redlock::shutdown`](crate::Redlock::shutdown), or an extend too few replicas
    /// acknowledged.
    Released,
}

impl LostReason {
    /// The reason as a metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Taken => "taken",
            LostReason::Released => "released",
        }
    }
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

/// A hold that may have been lost, as a [`Session`](crate::Session) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostHold {
    /// The lock name (without the client's prefix).
    pub name: String,
    /// The hold's token.
    pub token: String,
    /// Why it may have been lost.
    pub reason: LostReason,
}

/// Where the holds of one session report their loss.
pub(crate) type LostSink = tokio::sync::broadcast::Sender<LostHold>;

/// The live state of a held lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseState {
    pub valid_until: Instant,
    pub lost: Option<LostReason>,
}

/// A lease's live state, shared by its guard, the renewer, the session's shutdown and every
/// [`LostSignal`]. A mutex-guarded value and a [`Notify`](tokio::sync::Notify) rather than a
/// `watch` channel: one of these is made and dropped per grant, and a `watch` sender wakes
/// its (eight) waiter lists on drop, a measurable share of a short hold's client time.
pub(crate) struct LeaseShared {
    state: std::sync::Mutex<LeaseState>,
    changed: tokio::sync::Notify,
    /// Which hold this is, for logs, metrics and the session's report.
    keys: Arc<LockKeys>,
    /// The hold's token (also what the session's shutdown gives back).
    pub token: String,
    sink: LostSink,
    /// Whether the session was told of this hold's loss (once per loss: a deadline that a
    /// late extend moves on again clears it).
    reported: AtomicBool,
    /// Whether a lost signal's latency was recorded (once per hold), or the hold ended
    /// cleanly (a signal that fires after that reports no loss worth a latency).
    settled: AtomicBool,
    /// Each key's own deadline, when the hold lives at several keys renewed one by one
    /// (a multi-lock's names, perhaps on several Cluster shards): the hold is valid until
    /// the earliest of them. Empty for a hold at one key.
    parts: std::sync::Mutex<Vec<Instant>>,
}

impl LeaseShared {
    /// The state now.
    pub fn state(&self) -> LeaseState {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The reason, if the hold may have been lost by now: declared, or past its deadline.
    pub fn lost_now(&self) -> Option<LostReason> {
        let state = self.state();
        state
            .lost
            .or((Instant::now() >= state.valid_until).then_some(LostReason::Expired))
    }

    /// Tells the session of a loss once; false when it was told already.
    pub fn report(&self, reason: LostReason) -> bool {
        if self.reported.swap(true, Ordering::AcqRel) {
            return false;
        }
        // No receiver (nobody watches the session) is not an error.
        let _ = self.sink.send(LostHold {
            name: self.keys.name.clone(),
            token: self.token.clone(),
            reason,
        });
        true
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

/// The state of the hold `token` of the lock `keys`, valid until `valid_until`, whose loss
/// is reported to `sink`.
pub(crate) fn new_cell(
    valid_until: Instant,
    keys: Arc<LockKeys>,
    token: &str,
    sink: &LostSink,
    parts: usize,
) -> LeaseCell {
    Arc::new(LeaseShared {
        state: std::sync::Mutex::new(LeaseState {
            valid_until,
            lost: None,
        }),
        changed: tokio::sync::Notify::new(),
        keys,
        token: token.to_string(),
        sink: sink.clone(),
        reported: AtomicBool::new(false),
        settled: AtomicBool::new(false),
        parts: std::sync::Mutex::new(match parts {
            0 | 1 => Vec::new(),
            parts => vec![valid_until; parts],
        }),
    })
}

/// The hold ended cleanly: its lost signals record no latency from now on.
#[cfg(feature = "metrics")]
pub(crate) fn settle(cell: &LeaseCell) {
    cell.settled.store(true, Ordering::Release);
}

/// Sets the deadline after a successful renewal or extension: exactly the new lease, which
/// may be shorter than the old one (an extension to a shorter ttl shortens the lease in
/// Redis too). Renewals and extensions never overlap, so the last reply is Redis's lease.
/// Never after the lease was declared lost.
pub(crate) fn renewed(cell: &LeaseCell, valid_until: Instant) {
    // Every key at once (an extension): each part has this deadline now.
    for part in cell
        .parts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter_mut()
    {
        *part = valid_until;
    }
    set_valid_until(cell, valid_until);
}

/// A renewal of one key of a hold that lives at several (`part` of them): the hold is
/// valid until the earliest deadline among its keys, so one key whose renewals keep
/// failing ends the hold's validity however the others fare.
pub(crate) fn renewed_part(cell: &LeaseCell, part: usize, valid_until: Instant) {
    let earliest = {
        let mut parts = cell.parts.lock().unwrap_or_else(|p| p.into_inner());
        match parts.get_mut(part) {
            Some(own) => {
                *own = valid_until;
                parts.iter().copied().min().unwrap_or(valid_until)
            }
            None => valid_until,
        }
    };
    set_valid_until(cell, earliest);
}

fn set_valid_until(cell: &LeaseCell, valid_until: Instant) {
    let moved = cell.update(|state| {
        if state.lost.is_none() && valid_until != state.valid_until {
            state.valid_until = valid_until;
            true
        } else {
            false
        }
    });
    if moved && valid_until > Instant::now() {
        // A hold reported expired by its deadline alone and extended after it (by hand,
        // late) is held again: its next loss is reported too.
        cell.reported.store(false, Ordering::Release);
    }
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
/// validity ends now too, so `valid_until` and `remaining` agree with the signal. The one
/// place a loss is logged, counted and reported to the session, whoever finds it.
pub(crate) fn declare_lost(cell: &LeaseCell, reason: LostReason) -> bool {
    let declared = cell.update(|state| {
        if state.lost.is_none() {
            state.lost = Some(reason);
            state.valid_until = state.valid_until.min(Instant::now());
            true
        } else {
            false
        }
    });
    if declared {
        crate::observe::lost(&cell.keys.key, reason.label(), &reason);
        cell.report(reason);
    }
    declared
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
        // Whether the loss came while this waited (then how long it took to wake is
        // measured, once per hold), rather than before the call.
        let mut waited = false;
        let delivered = |reason: LostReason, waited: bool| {
            if waited && !self.cell.settled.swap(true, Ordering::AcqRel) {
                // A declared loss ends the validity at the moment it was found.
                let since = Instant::now().saturating_duration_since(self.cell.state().valid_until);
                crate::observe::lost_signal_delivered(reason.label(), since);
            }
            reason
        };
        loop {
            // Registered before reading the state: a change in between still wakes us.
            let changed = self.cell.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let state = self.cell.state();
            if let Some(reason) = state.lost {
                return delivered(reason, waited);
            }
            let deadline = tokio::time::Instant::from_std(state.valid_until);
            // A lease that ran out before this looked is a loss from before the call.
            waited |= state.valid_until > Instant::now();
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {
                    // Nothing moved the deadline (a guard that is gone moves nothing).
                    let now = self.cell.state();
                    if now.valid_until <= state.valid_until {
                        return delivered(now.lost.unwrap_or(LostReason::Expired), waited);
                    }
                }
            }
        }
    }

    /// The reason, if the lock may have been lost by now.
    pub fn lost(&self) -> Option<LostReason> {
        self.cell.lost_now()
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
    use std::time::Duration;

    fn cell(parts: usize) -> LeaseCell {
        let keys = Arc::new(LockKeys::new("", "a").unwrap());
        let (sink, _) = tokio::sync::broadcast::channel(1);
        new_cell(Instant::now(), keys, "t", &sink, parts)
    }

    #[test]
    fn a_hold_at_several_keys_is_valid_until_its_earliest_key() {
        let now = Instant::now();
        let cell = cell(3);
        renewed(&cell, now + Duration::from_secs(10));
        // Two keys renewed further; the third not: the earliest stands.
        renewed_part(&cell, 0, now + Duration::from_secs(30));
        renewed_part(&cell, 2, now + Duration::from_secs(30));
        assert_eq!(cell.state().valid_until, now + Duration::from_secs(10));
        renewed_part(&cell, 1, now + Duration::from_secs(20));
        assert_eq!(cell.state().valid_until, now + Duration::from_secs(20));
        // An extension sets every key's deadline.
        renewed(&cell, now + Duration::from_secs(40));
        renewed_part(&cell, 1, now + Duration::from_secs(50));
        assert_eq!(cell.state().valid_until, now + Duration::from_secs(40));
    }

    #[test]
    fn a_hold_at_one_key_takes_each_renewal_as_it_is() {
        let now = Instant::now();
        let cell = cell(1);
        renewed_part(&cell, 0, now + Duration::from_secs(30));
        renewed_part(&cell, 0, now + Duration::from_secs(20));
        assert_eq!(cell.state().valid_until, now + Duration::from_secs(20));
    }
}

//! The kinds of lock the one-name model checks, and which mutants touch each kind's scripts.

use crate::mutant::Mutant;
use crate::scripts::Time;

/// The kind of lock modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The plain mutex; `eager` draws the fence with the grant (`fence_at_grant`), else
    /// on the first `fence()` (mutex/fence.lua).
    Mutex {
        /// Fence drawn with the grant.
        eager: bool,
    },
    /// The read-write lock (its exclusion and purge); with `waiter_lease`, also its
    /// writer queue (writers wait in line, a release hands the lock to the first writer),
    /// a writer's downgrade to a read hold, and read re-entry by owner.
    RwLock {
        /// A waiting writer's lease on its place in line; `None`: writers make single
        /// attempts, which leave no trace in the queue.
        waiter_lease: Option<Time>,
    },
    /// The semaphore of `permits` (its count and purge); with `waiter_lease`, also its
    /// queue (a busy attempt waits in line, a release hands a free permit to the first).
    Semaphore {
        /// How many may hold at once.
        permits: usize,
        /// A waiter's lease on its place in line; `None`: single attempts only.
        waiter_lease: Option<Time>,
    },
    /// The fair mutex: a queue of waiters with leased places, a free lock granted to the
    /// first in line, and a release that hands the lock straight to the first waiter
    /// (mutex/fair_*.lua, queue/queue.lua).
    Fair {
        /// A waiter's lease on its place in line, in ticks (at least the lock's lease,
        /// as `direct_grant_start` in wait.rs requires for a direct grant).
        waiter_lease: Time,
    },
    /// The reentrant mutex: holds counted per owner, the lock freed when the owner's
    /// last hold is given back (reentrant/).
    Reentrant,
}

impl Kind {
    /// A waiter's lease on its place in line, for the kinds whose waiters queue.
    pub fn waiter_lease(self) -> Option<Time> {
        match self {
            Kind::Fair { waiter_lease } => Some(waiter_lease),
            Kind::RwLock { waiter_lease } | Kind::Semaphore { waiter_lease, .. } => waiter_lease,
            Kind::Mutex { .. } | Kind::Reentrant => None,
        }
    }

    /// Whether `mutant`'s bug is in a script this kind runs: a model of another kind checks the same
    /// with it as without it, and need not be searched for it.
    pub fn touched_by(self, mutant: Mutant) -> bool {
        let kind = self;
        match mutant {
            Mutant::ResendKeepsOldLease | Mutant::FenceReused => true,
            Mutant::ReleaseWithoutOwnerCheck => {
                !matches!(kind, Kind::Fair { .. } | Kind::Reentrant)
            }
            Mutant::FenceOutsideGrant => kind == Kind::Mutex { eager: false },
            Mutant::ReentrantFreedAtFirstRelease | Mutant::ResendCountedTwice => {
                kind == Kind::Reentrant
            }
            Mutant::SettleWithoutRaise
            | Mutant::SettleTakesSmallestFence
            | Mutant::SkipRaiseAtClock
            | Mutant::RestartNotDelayed => false,
            Mutant::PurgeForgetsLiveReader => {
                matches!(kind, Kind::RwLock { .. } | Kind::Semaphore { .. })
            }
            Mutant::PermitCountOffByOne => matches!(kind, Kind::Semaphore { .. }),
            Mutant::HandOffWithoutOwnerCheck | Mutant::GrantIgnoresQueue => {
                matches!(kind, Kind::Fair { .. })
            }
            // The string hand-off (queue.lua) is the fair mutex's and the writers'.
            Mutant::ReleaseSkipsHandOff | Mutant::HandOffReusesFence => matches!(
                kind,
                Kind::Fair { .. }
                    | Kind::RwLock {
                        waiter_lease: Some(_)
                    }
            ),
            Mutant::QueueKeepsLapsedWaiters | Mutant::QueueSkipsHead => {
                kind.waiter_lease().is_some()
            }
            Mutant::DowngradeWithoutOwnerCheck | Mutant::DowngradeNewFence => matches!(
                kind,
                Kind::RwLock {
                    waiter_lease: Some(_)
                }
            ),
            // guarded.rs's and election.rs's scripts.
            Mutant::ApplyWithoutHoldCheck
            | Mutant::ResendAppliesTwice
            | Mutant::ProclaimWithoutOwnerCheck
            | Mutant::LeaderWithoutHoldCheck => false,
            // The operator's and the look-alike names' models (force.rs, pair.rs).
            Mutant::ForceEvictsTwice | Mutant::SharedCompanion | Mutant::ForceKeepsLockKey => false,
            // The string lock's renewal (the mutex's, the fair mutex's, the writers').
            Mutant::RenewRecreatesKey => {
                matches!(
                    kind,
                    Kind::Mutex { .. } | Kind::Fair { .. } | Kind::RwLock { .. }
                )
            }
            // The weighted grant (semaphore/permits.lua): the semaphore's, in line.
            Mutant::PermitsCountedNotWeighed | Mutant::WeightedGrantPassesTheLine => matches!(
                kind,
                Kind::Semaphore {
                    waiter_lease: Some(_),
                    ..
                }
            ),
            // The multi-lock's scripts (multi.rs).
            Mutant::MultiGrantsPart
            | Mutant::MultiKeepsPart
            | Mutant::MultiReleasesOneName
            | Mutant::MultiResendRedraws => false,
        }
    }
}

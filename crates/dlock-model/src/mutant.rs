//! Deliberate protocol bugs: each must make `dlock-model check --mutant NAME` find a
//! counterexample, which shows the checks can catch what they are for.

/// A bug put into a script's transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// A resent acquire finds its own token and answers granted without restarting the
    /// lease: the client counts its lease from the resend, Redis from the first send.
    ResendKeepsOldLease,
    /// Release deletes the key whoever holds it.
    ReleaseWithoutOwnerCheck,
    /// The plain mutex's lazily drawn fence is drawn without checking the hold is ours.
    FenceOutsideGrant,
    /// The purge of expired read holds also drops one whose lease has not ended.
    PurgeForgetsLiveReader,
    /// The semaphore compares its held permits with `>` where it needs `>=`.
    PermitCountOffByOne,
    /// The fencing counter hands out the same fence again instead of counting on.
    FenceReused,
    /// The fair mutex's release hands the lock to the first in line whoever holds it: a
    /// late release (a holder past its lease) takes the lock from the one who holds it now.
    HandOffWithoutOwnerCheck,
    /// The fair mutex's release deletes the key and hands the lock to nobody, though a
    /// waiter is in line.
    ReleaseSkipsHandOff,
    /// The direct hand-off gives the waiter the last fence drawn instead of a new one.
    HandOffReusesFence,
    /// The queue never drops a waiter whose waiter lease ended: a crashed waiter stays
    /// first in line for ever.
    QueueKeepsLapsedWaiters,
    /// The fair mutex grants a free lock to whoever asks, not to the first in line.
    GrantIgnoresQueue,
    /// The reentrant mutex is deleted at the first release, though other holds of its
    /// owner are counted.
    ReentrantFreedAtFirstRelease,
    /// A resent reentrant acquire (the same hold token) counts the hold again: the count
    /// never comes back to zero when every hold is given back.
    ResendCountedTwice,
    /// Redlock's settlement takes the largest fence without raising the masters behind it
    /// (as with `raise_fences` off).
    SettleWithoutRaise,
    /// Redlock's settlement skips the raise when the largest fence is a master's clock
    /// (the floor): the shortcut `settle_fence` had before issue 32, which a master's clock
    /// ahead of the others' breaks.
    SkipRaiseAtClock,
    /// Redlock's settlement takes the smallest fence a granting master drew (a minority's,
    /// when the masters are out of step), which every granting master already holds or
    /// exceeds, so nothing is raised.
    SettleTakesSmallestFence,
    /// A Redlock master restarted empty answers at once, not after a lease.
    RestartNotDelayed,
    /// guarded/apply.lua runs the batch without checking the hold: a paused holder's
    /// late batch applies after another client took the lock.
    ApplyWithoutHoldCheck,
    /// guarded/apply.lua does not look at the holder's record: a batch resent after a
    /// lost reply applies again.
    ResendAppliesTwice,
    /// election/proclaim.lua writes the record without checking the hold: a paused
    /// leader's late proclaim is answered "recorded" and overwrites its successor's.
    ProclaimWithoutOwnerCheck,
    /// election/leader.lua answers the record whoever holds the lock: a record left by an
    /// ended leadership is reported as the leader.
    LeaderWithoutHoldCheck,
    /// A release's direct grant (the semaphore's permit, the write lock, the fair mutex)
    /// goes to the last live waiter in line, not the first.
    QueueSkipsHead,
    /// The rwlock's downgrade turns the write lock into a read hold whoever holds it: a
    /// writer past its lease takes the lock from the one who holds it now.
    DowngradeWithoutOwnerCheck,
    /// An operator's forced release ignores the record of its request id: a resend whose
    /// first send ran evicts again, a holder granted in between.
    ForceEvictsTwice,
    /// Companion keys by the scheme before issue 32: `K:suffix` for a tagged key `K`, so
    /// `{acct}` and `acct` share `{acct}:fence`, their queue and the rest.
    SharedCompanion,
    /// The rwlock's downgrade draws a new fence for the read hold it makes, not the write
    /// grant's: the read hold is a new grant, not the writer's hold kept.
    DowngradeNewFence,
    /// The operator's forced release deletes the expiry index and draws its fence but
    /// leaves the lock key (`DEL KEYS[6]` alone): the holder keeps holding in Redis.
    ForceKeepsLockKey,
    /// A renewal that finds the key gone sets it again with its token (`SET` without
    /// `XX`, no `GET` first): a holder evicted by force renews and holds again.
    RenewRecreatesKey,
    /// The weighted semaphore counts the permits held, not their weights: two permits of
    /// 2 fit in a semaphore of 3.
    PermitsCountedNotWeighed,
    /// The weighted semaphore grants a request whose own weight fits, whoever waits ahead
    /// of it: a small request passes a large one first in line (and may starve it).
    WeightedGrantPassesTheLine,
    /// multi/acquire.lua takes the free names though another is busy (answering busy):
    /// a waiting multi-lock keeps a part of its names.
    MultiGrantsPart,
    /// Across Cluster slots, a busy slot does not give back the slots taken before it: the
    /// multi-lock waits holding a part (two over overlapping names wait for each other
    /// until a lease runs out).
    MultiKeepsPart,
    /// multi/release.lua releases only the first name of its group.
    MultiReleasesOneName,
    /// A resent multi-lock acquire draws new fences for the names already its own.
    MultiResendRedraws,
}

impl Mutant {
    /// Every mutant, in the order `dlock-model mutants` prints them.
    pub const ALL: [Mutant; 34] = [
        Mutant::ResendKeepsOldLease,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::FenceOutsideGrant,
        Mutant::PurgeForgetsLiveReader,
        Mutant::PermitCountOffByOne,
        Mutant::FenceReused,
        Mutant::HandOffWithoutOwnerCheck,
        Mutant::ReleaseSkipsHandOff,
        Mutant::HandOffReusesFence,
        Mutant::QueueKeepsLapsedWaiters,
        Mutant::GrantIgnoresQueue,
        Mutant::ReentrantFreedAtFirstRelease,
        Mutant::ResendCountedTwice,
        Mutant::SettleWithoutRaise,
        Mutant::SettleTakesSmallestFence,
        Mutant::SkipRaiseAtClock,
        Mutant::RestartNotDelayed,
        Mutant::ApplyWithoutHoldCheck,
        Mutant::ResendAppliesTwice,
        Mutant::ProclaimWithoutOwnerCheck,
        Mutant::LeaderWithoutHoldCheck,
        Mutant::QueueSkipsHead,
        Mutant::DowngradeWithoutOwnerCheck,
        Mutant::ForceEvictsTwice,
        Mutant::SharedCompanion,
        Mutant::DowngradeNewFence,
        Mutant::ForceKeepsLockKey,
        Mutant::RenewRecreatesKey,
        Mutant::PermitsCountedNotWeighed,
        Mutant::WeightedGrantPassesTheLine,
        Mutant::MultiGrantsPart,
        Mutant::MultiKeepsPart,
        Mutant::MultiReleasesOneName,
        Mutant::MultiResendRedraws,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::ResendKeepsOldLease => "resend-keeps-old-lease",
            Mutant::ReleaseWithoutOwnerCheck => "release-without-owner-check",
            Mutant::FenceOutsideGrant => "fence-outside-grant",
            Mutant::PurgeForgetsLiveReader => "purge-forgets-live-reader",
            Mutant::PermitCountOffByOne => "permit-count-off-by-one",
            Mutant::FenceReused => "fence-reused",
            Mutant::HandOffWithoutOwnerCheck => "hand-off-without-owner-check",
            Mutant::ReleaseSkipsHandOff => "release-skips-hand-off",
            Mutant::HandOffReusesFence => "hand-off-reuses-fence",
            Mutant::QueueKeepsLapsedWaiters => "queue-keeps-lapsed-waiters",
            Mutant::GrantIgnoresQueue => "grant-ignores-queue",
            Mutant::ReentrantFreedAtFirstRelease => "reentrant-freed-at-first-release",
            Mutant::ResendCountedTwice => "resend-counted-twice",
            Mutant::SettleWithoutRaise => "settle-without-raise",
            Mutant::SettleTakesSmallestFence => "settle-takes-smallest-fence",
            Mutant::SkipRaiseAtClock => "skip-raise-at-clock",
            Mutant::RestartNotDelayed => "restart-not-delayed",
            Mutant::ApplyWithoutHoldCheck => "apply-without-hold-check",
            Mutant::ResendAppliesTwice => "resend-applies-twice",
            Mutant::ProclaimWithoutOwnerCheck => "proclaim-without-owner-check",
            Mutant::LeaderWithoutHoldCheck => "leader-without-hold-check",
            Mutant::QueueSkipsHead => "queue-skips-head",
            Mutant::DowngradeWithoutOwnerCheck => "downgrade-without-owner-check",
            Mutant::ForceEvictsTwice => "force-evicts-twice",
            Mutant::SharedCompanion => "shared-companion",
            Mutant::DowngradeNewFence => "downgrade-new-fence",
            Mutant::ForceKeepsLockKey => "force-keeps-lock-key",
            Mutant::RenewRecreatesKey => "renew-recreates-key",
            Mutant::PermitsCountedNotWeighed => "permits-counted-not-weighed",
            Mutant::WeightedGrantPassesTheLine => "weighted-grant-passes-the-line",
            Mutant::MultiGrantsPart => "multi-grants-part",
            Mutant::MultiKeepsPart => "multi-keeps-part",
            Mutant::MultiReleasesOneName => "multi-releases-one-name",
            Mutant::MultiResendRedraws => "multi-resend-redraws",
        }
    }

    /// The safety property this bug is meant to break (the check may find others too).
    pub fn breaks(self) -> &'static str {
        match self {
            Mutant::ResendKeepsOldLease => "beliefs are backed by Redis",
            Mutant::ReleaseWithoutOwnerCheck
            | Mutant::PurgeForgetsLiveReader
            | Mutant::PermitCountOffByOne
            | Mutant::HandOffWithoutOwnerCheck
            | Mutant::RestartNotDelayed => "mutual exclusion",
            Mutant::SettleWithoutRaise
            | Mutant::SettleTakesSmallestFence
            | Mutant::SkipRaiseAtClock => "fences follow grants",
            Mutant::FenceOutsideGrant | Mutant::FenceReused | Mutant::HandOffReusesFence => {
                "fences follow grants"
            }
            Mutant::ReleaseSkipsHandOff => "a release hands the lock to the first in line",
            Mutant::QueueKeepsLapsedWaiters => "a free lock is granted to the first in line",
            Mutant::GrantIgnoresQueue => "grants follow the line",
            Mutant::ReentrantFreedAtFirstRelease => "a release gives back its hold alone",
            Mutant::ResendCountedTwice => "the last hold given back frees the lock",
            Mutant::ApplyWithoutHoldCheck => "a batch applies only while its hold holds",
            Mutant::ResendAppliesTwice => "a resent batch applies once",
            Mutant::ProclaimWithoutOwnerCheck | Mutant::LeaderWithoutHoldCheck => {
                "a leader record counts only while its hold holds"
            }
            Mutant::QueueSkipsHead => "grants follow the line",
            Mutant::DowngradeWithoutOwnerCheck => "mutual exclusion",
            Mutant::ForceEvictsTwice => "a forced release evicts exactly once under resend",
            Mutant::SharedCompanion => "each lock's keys are its own",
            Mutant::DowngradeNewFence => "a downgrade keeps its hold and fence",
            Mutant::ForceKeepsLockKey => "a forced release leaves the lock free",
            Mutant::RenewRecreatesKey => "an evicted hold is never held in Redis again",
            Mutant::PermitsCountedNotWeighed => "held weights never exceed N",
            Mutant::WeightedGrantPassesTheLine => "grants follow the line",
            Mutant::MultiGrantsPart | Mutant::MultiKeepsPart | Mutant::MultiReleasesOneName => {
                "a multi-lock holds names only while taking or holding them"
            }
            Mutant::MultiResendRedraws => "a resend answers the grant's fences",
        }
    }

    /// The mutant named `name`.
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

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
}

impl Mutant {
    /// Every mutant, in the order `dlock-model mutants` prints them.
    pub const ALL: [Mutant; 6] = [
        Mutant::ResendKeepsOldLease,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::FenceOutsideGrant,
        Mutant::PurgeForgetsLiveReader,
        Mutant::PermitCountOffByOne,
        Mutant::FenceReused,
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
        }
    }

    /// The safety property this bug is meant to break (the check may find others too).
    pub fn breaks(self) -> &'static str {
        match self {
            Mutant::ResendKeepsOldLease => "beliefs are backed by Redis",
            Mutant::ReleaseWithoutOwnerCheck
            | Mutant::PurgeForgetsLiveReader
            | Mutant::PermitCountOffByOne => "mutual exclusion",
            Mutant::FenceOutsideGrant | Mutant::FenceReused => "fences follow grants",
        }
    }

    /// The mutant named `name`.
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

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
}

impl Mutant {
    /// Every mutant, in the order `dlock-model mutants` prints them.
    pub const ALL: [Mutant; 5] = [
        Mutant::ResendKeepsOldLease,
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::FenceOutsideGrant,
        Mutant::PurgeForgetsLiveReader,
        Mutant::PermitCountOffByOne,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::ResendKeepsOldLease => "resend-keeps-old-lease",
            Mutant::ReleaseWithoutOwnerCheck => "release-without-owner-check",
            Mutant::FenceOutsideGrant => "fence-outside-grant",
            Mutant::PurgeForgetsLiveReader => "purge-forgets-live-reader",
            Mutant::PermitCountOffByOne => "permit-count-off-by-one",
        }
    }

    /// The mutant named `name`.
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

//! entries.lua, the hash of leased entries the rwlock's read holds and the semaphore's
//! permits share: purge, resend, grant and removal of one entry.

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

impl Server {
    /// rwlock/rwlock.lua `purge_reads`, entries.lua `entries_purge`: entries whose lease
    /// ended (`end <= now`) are removed. True when a live one is left.
    pub(super) fn purge_reads(&mut self, now: Time, mutants: &[Mutant]) -> bool {
        // The mutant purges a lease one tick early: a reader that still holds is dropped.
        let horizon = if mutants.contains(&Mutant::PurgeForgetsLiveReader) {
            now + 1
        } else {
            now
        };
        self.entries.retain(|_, &mut (end, _)| end > horizon);
        !self.entries.is_empty()
    }

    /// A live entry of ours restarts its lease and answers its fence again (a resend):
    /// entries.lua's `entry_put` over the entry the script read.
    pub(super) fn resend_of_entry(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Option<u64> {
        let (end, fence) = *self.entries.get(&token).filter(|(end, _)| *end > now)?;
        let end = if mutants.contains(&Mutant::ResendKeepsOldLease) {
            end
        } else {
            now + ttl
        };
        self.entries.insert(token, (end, fence));
        Some(fence)
    }

    /// entries.lua `entry_put` of a new hold: a fence drawn, the entry leased with it.
    pub(super) fn grant_entry(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Grant {
        let fence = self.draw_fence(mutants);
        self.entries.insert(token, (now + ttl, fence));
        Grant::Granted(Some(fence))
    }

    /// Takes back an entry (entries.lua `entry_remove`): ours, or with the mutant
    /// `release-without-owner-check` whichever comes first. `None` when there was none;
    /// else whether its lease had not ended.
    pub(super) fn remove_entry(
        &mut self,
        token: Token,
        now: Time,
        mutants: &[Mutant],
    ) -> Option<bool> {
        if mutants.contains(&Mutant::ReleaseWithoutOwnerCheck) {
            let first = self.entries.keys().next().copied()?;
            self.entries.remove(&first);
            return Some(true);
        }
        self.entries.remove(&token).map(|(end, _)| end > now)
    }
}

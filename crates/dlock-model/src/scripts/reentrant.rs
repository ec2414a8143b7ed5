//! The reentrant mutex's scripts (reentrant/acquire.lua, release.lua) on its hash.

use std::collections::BTreeSet;

use crate::mutant::Mutant;
use crate::scripts::{Grant, Reentrant, Server, Time, Token};

impl Server {
    /// The reentrant hash, if its key has not expired.
    pub fn reentrant_at(&self, now: Time) -> Option<&Reentrant> {
        self.reentrant.as_ref().filter(|r| r.expires > now)
    }

    /// reentrant/acquire.lua: a free key is granted to `owner` (a fence drawn, one hold
    /// counted, the lease set); another owner's is busy; the owner's own gets the hold
    /// counted once (a resent hold token is not counted again) and the lease restarted but
    /// never shortened (`keep_alive`), and answers the outermost grant's fence.
    pub fn reentrant_acquire(
        &mut self,
        owner: u8,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Grant {
        if self.reentrant_at(now).is_none() {
            let fence = self.draw_fence(mutants);
            self.reentrant = Some(Reentrant {
                owner,
                fence,
                count: 1,
                holds: BTreeSet::from([token]),
                expires: now + ttl,
            });
            return Grant::Granted(Some(fence));
        }
        let hash = self.reentrant.as_mut().expect("live");
        if hash.owner != owner {
            return Grant::Busy;
        }
        // HSETNX, and HINCRBY only when the field is new.
        let new = hash.holds.insert(token);
        if new || mutants.contains(&Mutant::ResendCountedTwice) {
            hash.count += 1;
        }
        if new || !mutants.contains(&Mutant::ResendKeepsOldLease) {
            hash.expires = hash.expires.max(now + ttl); // keep_alive
        }
        Grant::Granted(Some(hash.fence))
    }

    /// reentrant/release.lua: gives back the owner's hold `token` (exactly that one);
    /// deletes the key when the count reaches zero. True if the hold was there.
    pub fn reentrant_release(
        &mut self,
        owner: u8,
        token: Token,
        now: Time,
        mutants: &[Mutant],
    ) -> bool {
        if self.reentrant_at(now).map(|r| r.owner) != Some(owner) {
            return false;
        }
        let hash = self.reentrant.as_mut().expect("live");
        if !hash.holds.remove(&token) {
            return false;
        }
        hash.count = hash.count.saturating_sub(1);
        if hash.count == 0 || mutants.contains(&Mutant::ReentrantFreedAtFirstRelease) {
            self.reentrant = None; // DEL
        }
        true
    }
}

//! The fair mutex's scripts (mutex/fair_acquire.lua, fair_release.lua) over queue.lua.

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

impl Server {
    /// mutex/fair_acquire.lua with queue.lua: our own token in the key restarts the lease and
    /// answers the last fence (a resend, or a direct grant not heard of); otherwise the
    /// lapsed waiters are purged, and a free lock is granted (a fence drawn, the waiter
    /// leaves the queue) to the first in line, or to a newcomer when nobody waits; anyone
    /// else is busy and, with `join` (a waiting attempt), takes a place at the end of the
    /// line or keeps its own, its waiter lease restarted to `waiter_lease`.
    pub fn fair_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        waiter_lease: Time,
        join: bool,
        mutants: &[Mutant],
    ) -> Grant {
        if self.resend_of_own(token, now, ttl, mutants) {
            return Grant::Granted(Some(self.counter)); // last_fence
        }
        let current = self.holder(now);
        self.queue_purge(now, mutants);
        let first = self.queue_rank(token) == 0 || mutants.contains(&Mutant::GrantIgnoresQueue);
        if current.is_none() && first {
            // grant_in_line
            let fence = self.draw_fence(mutants);
            self.lock = Some((token, now + ttl));
            self.queue.retain(|&(t, _)| t != token);
            return Grant::Granted(Some(fence));
        }
        if join {
            self.queue_join(token, now, waiter_lease);
        }
        Grant::Busy
    }

    /// mutex/fair_release.lua with queue.lua `release_exclusive`: only if the key holds our
    /// token, the hold ends and goes straight to the first waiter whose waiter lease has
    /// not ended (`hand_off_string`): it leaves the queue, a fence is drawn, and the key
    /// holds its token for its ttl but no longer than the rest of its waiter lease; the
    /// key is deleted when nobody waits. Returns whether it released, and the waiter
    /// handed the lock with its fence (which the script publishes to it alone).
    pub fn fair_release(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> (bool, Option<(Token, u64)>) {
        if self.holder(now) != Some(token) && !mutants.contains(&Mutant::HandOffWithoutOwnerCheck) {
            return (false, None);
        }
        (true, self.release_exclusive(now, ttl, mutants))
    }
}

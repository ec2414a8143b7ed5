//! The semaphore's scripts (semaphore/acquire.lua, release.lua, with permits.lua for
//! weighted permits).

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

impl Server {
    /// semaphore/acquire.lua: ended permits are purged; a live permit of ours restarts its
    /// lease (a resend); lapsed waiters are purged, and a permit is granted (with a fence;
    /// the waiter leaves the line) when fewer waiters are ahead of this one (or, for a
    /// newcomer, in line) than permits are free. Anyone else is busy and, with `join`,
    /// takes or keeps its place at the end of the line, its waiter lease restarted.
    #[allow(clippy::too_many_arguments)]
    pub fn permit_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        permits: usize,
        waiter_lease: Time,
        join: bool,
        mutants: &[Mutant],
    ) -> Grant {
        let one = |_| 1;
        self.weighted_permit_acquire(token, now, ttl, permits, waiter_lease, join, &one, mutants)
    }

    /// The weight held: the live permits' weights summed (permits.lua: the index's size
    /// plus `~extra`), `weight_of` giving each token's (what its `~w<k>` names). With the
    /// mutant `permits-counted-not-weighed`, the count of permits instead.
    pub fn weight_held(
        &self,
        now: Time,
        weight_of: &dyn Fn(Token) -> usize,
        mutants: &[Mutant],
    ) -> usize {
        let live = self.live_entries(now);
        if mutants.contains(&Mutant::PermitsCountedNotWeighed) {
            return live.count();
        }
        live.map(weight_of).sum()
    }

    /// semaphore/acquire.lua with permits.lua, each token taking `weight_of(token)`
    /// permits: as `permit_acquire`, but a permit is granted only when this token's weight
    /// fits in what is free together with every waiter ahead of it (`permits_fit`: strict
    /// line order). With the mutant `weighted-grant-passes-the-line`, its own weight alone
    /// is judged: a small request passes a large one waiting first in line.
    #[allow(clippy::too_many_arguments)]
    pub fn weighted_permit_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        permits: usize,
        waiter_lease: Time,
        join: bool,
        weight_of: &dyn Fn(Token) -> usize,
        mutants: &[Mutant],
    ) -> Grant {
        self.purge_reads(now, mutants);
        if let Some(fence) = self.resend_of_entry(token, now, ttl, mutants) {
            return Grant::Granted(Some(fence));
        }
        self.queue_purge(now, mutants);
        let held = self.weight_held(now, weight_of, mutants);
        let permits = if mutants.contains(&Mutant::PermitCountOffByOne) {
            permits + 1
        } else {
            permits
        };
        let rank = self.queue_rank(token);
        let ahead: usize = if mutants.contains(&Mutant::WeightedGrantPassesTheLine) {
            0
        } else {
            self.queue[..rank].iter().map(|&(t, _)| weight_of(t)).sum()
        };
        if ahead + weight_of(token) + held <= permits {
            // queue_granted: a waiter granted leaves the line.
            self.queue.retain(|&(t, _)| t != token);
            return self.grant_entry(token, now, ttl, mutants);
        }
        if join {
            self.queue_join(token, now, waiter_lease);
        }
        Grant::Busy
    }

    /// semaphore/release.lua: removes our permit (nothing at all when there is none), then
    /// hands a free permit to the first waiter whose waiter lease has not ended: it leaves
    /// the line, and a permit is put for it with a fence, for its ttl but no longer than
    /// the rest of its waiter lease (the script tells it alone). Returns whether our
    /// permit was live, and the waiter handed a permit with its fence.
    pub fn permit_release(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        permits: usize,
        mutants: &[Mutant],
    ) -> (bool, Option<(Token, u64)>) {
        self.weighted_permit_release(token, now, ttl, permits, &|_| 1, mutants)
    }

    /// semaphore/release.lua with permits.lua: as `permit_release`, the first waiter
    /// handed a permit only when its weight fits in what is free (nobody passes it).
    pub fn weighted_permit_release(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        permits: usize,
        weight_of: &dyn Fn(Token) -> usize,
        mutants: &[Mutant],
    ) -> (bool, Option<(Token, u64)>) {
        let Some(released) = self.remove_entry(token, now, mutants) else {
            return (false, None);
        };
        self.purge_reads(now, mutants);
        let mut handed = None;
        let next = self.queue_next(now, mutants);
        let held = self.weight_held(now, weight_of, mutants);
        if let Some(at) = next.filter(|&at| held + weight_of(self.queue[at].0) <= permits) {
            let (head, lease) = self.queue_take(at, now, ttl);
            let fence = self.draw_fence(mutants);
            self.entries.insert(head, (now + lease, fence));
            handed = Some((head, fence));
        }
        (released, handed)
    }
}

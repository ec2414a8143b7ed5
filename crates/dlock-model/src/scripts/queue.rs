//! queue.lua, the waiter line the fair mutex, the writers and the semaphore share: purge,
//! rank, join, the next grant, the string hand-off; and queue/cancel.lua.

use crate::mutant::Mutant;
use crate::scripts::{Server, Time, Token};

impl Server {
    /// queue.lua `queue_purge`: waiters whose lease ended (`end <= now`) leave the queue.
    pub(crate) fn queue_purge(&mut self, now: Time, mutants: &[Mutant]) {
        if !mutants.contains(&Mutant::QueueKeepsLapsedWaiters) {
            self.queue.retain(|&(_, end)| end > now);
        }
    }

    /// queue.lua `queue_rank`: a waiter's place, or the place it would take (the queue's
    /// length).
    pub(super) fn queue_rank(&self, token: Token) -> usize {
        (self.queue.iter().position(|&(t, _)| t == token)).unwrap_or(self.queue.len())
    }

    /// queue.lua `queue_join`: a new waiter at the end; its lease (re)starts either way.
    pub(super) fn queue_join(&mut self, token: Token, now: Time, waiter_lease: Time) {
        match self.queue.iter_mut().find(|(t, _)| *t == token) {
            Some((_, end)) => *end = now + waiter_lease,
            None => self.queue.push((token, now + waiter_lease)),
        }
    }

    /// queue.lua `queue_next_grant`: where the first waiter whose waiter lease has not
    /// ended stands (a lapsed head makes the script purge every lapsed waiter); `None`
    /// when nobody waits. With the mutant `queue-skips-head`, the last live waiter's place
    /// instead.
    pub(super) fn queue_next(&mut self, now: Time, mutants: &[Mutant]) -> Option<usize> {
        if self.queue.first().is_some_and(|&(_, end)| end <= now) {
            self.queue_purge(now, mutants);
        }
        if self.queue.is_empty() {
            return None;
        }
        if mutants.contains(&Mutant::QueueSkipsHead) {
            return Some((self.queue.iter().rposition(|&(_, end)| end > now)).unwrap_or(0));
        }
        Some(0)
    }

    /// The waiter at `at` leaves the line (`queue_leave`) to be handed a hold directly;
    /// with the lease that grant gives it: its ttl, but no longer than the rest of its
    /// waiter lease.
    pub(super) fn queue_take(&mut self, at: usize, now: Time, ttl: Time) -> (Token, Time) {
        let (waiter, lease_end) = self.queue.remove(at);
        (waiter, ttl.min(lease_end.saturating_sub(now)))
    }

    /// queue.lua `hand_off_string`: the string lock goes straight to the first waiter in
    /// line (it leaves the queue, a fence is drawn, the key holds its token). Returns the
    /// waiter handed the lock, with its fence.
    pub(super) fn hand_off_string(
        &mut self,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Option<(Token, u64)> {
        let at = self.queue_next(now, mutants)?;
        let (head, lease) = self.queue_take(at, now, ttl);
        let fence = if mutants.contains(&Mutant::HandOffReusesFence) {
            self.counter
        } else {
            self.draw_fence(mutants)
        };
        self.lock = Some((head, now + lease));
        Some((head, fence))
    }

    /// queue.lua `release_exclusive`: the string hold ends and goes to the first waiter in
    /// line, or the key is deleted when nobody waits. Returns the waiter handed it.
    pub(super) fn release_exclusive(
        &mut self,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Option<(Token, u64)> {
        let handed = if mutants.contains(&Mutant::ReleaseSkipsHandOff) {
            None
        } else {
            self.hand_off_string(now, ttl, mutants)
        };
        if handed.is_none() {
            self.lock = None; // DEL
        }
        handed
    }

    /// queue/cancel.lua: a waiter that stopped waiting leaves the line. True if it was in
    /// it.
    pub fn queue_cancel(&mut self, token: Token) -> bool {
        let before = self.queue.len();
        self.queue.retain(|&(t, _)| t != token);
        self.queue.len() < before
    }
}

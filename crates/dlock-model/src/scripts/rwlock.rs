//! The read-write lock's scripts (rwlock/*.lua): read and write acquire and release, and
//! the writer's downgrade.

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

impl Server {
    /// rwlock/read_acquire.lua: busy while a writer holds; otherwise the ended read holds
    /// are purged, and a live hold of ours restarts its lease (a resend); an owner that
    /// reads already (a live hold of `owner` by `owner_of`) re-enters with its outermost
    /// grant's fence, even while writers wait (re-entry must not queue behind a writer that
    /// waits for this very reader); anyone else is busy while a live writer waits in line
    /// (`writers_wait_until`), and otherwise gets a read hold with a new fence.
    pub fn read_acquire(
        &mut self,
        owner: u8,
        owner_of: impl Fn(Token) -> u8,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Grant {
        if self.holder(now).is_some() {
            // writers_wait_until purges the writer queue on the way.
            if !self.queue.is_empty() {
                self.queue_purge(now, mutants);
            }
            return Grant::Busy;
        }
        self.purge_reads(now, mutants);
        if let Some(fence) = self.resend_of_entry(token, now, ttl, mutants) {
            return Grant::Granted(Some(fence));
        }
        // `o:<owner>` exists: the owner reads (f:<owner> is the fence all its holds share).
        let reading = (self.entries.iter())
            .find(|(&t, _)| owner_of(t) == owner)
            .map(|(_, &(_, fence))| fence);
        if let Some(fence) = reading {
            self.entries.insert(token, (now + ttl, fence));
            return Grant::Granted(Some(fence));
        }
        if !self.queue.is_empty() {
            self.queue_purge(now, mutants);
            if !self.queue.is_empty() {
                return Grant::Busy; // a writer waits
            }
        }
        self.grant_entry(token, now, ttl, mutants)
    }

    /// rwlock/write_acquire.lua: our own token restarts the lease (and answers the last
    /// fence); otherwise ended read holds and lapsed waiters are purged, and the lock is
    /// granted (with a fence; the writer leaves the line) when no writer and no live reader
    /// holds and this writer is first in line, or nobody waits. Anyone else is busy and,
    /// with `join` (a waiting attempt), takes or keeps its place at the end of the writer
    /// queue, its waiter lease restarted to `waiter_lease`.
    pub fn write_acquire(
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
        let readers = !self.entries.is_empty() && self.purge_reads(now, mutants);
        self.queue_purge(now, mutants);
        if current.is_none() && !readers && self.queue_rank(token) == 0 {
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

    /// rwlock/read_release.lua: gives back our read hold (if the key is a read hash at
    /// all); when no live read hold is left and writers wait, the lock goes straight to
    /// the first writer in line (`hand_off_string`). Returns whether our hold was live,
    /// and the writer handed the lock with its fence.
    pub fn read_release(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> (bool, Option<(Token, u64)>) {
        if self.entries.is_empty() {
            return (false, None); // not a read hash
        }
        let released = self.remove_entry(token, now, mutants).unwrap_or(false);
        let mut handed = None;
        if !self.purge_reads(now, mutants) && !self.queue.is_empty() {
            handed = self.hand_off_string(now, ttl, mutants);
        }
        (released, handed)
    }

    /// rwlock/downgrade.lua: a read hold `hold` that is there already answers its fence
    /// again (a resend, its lease restarted); otherwise, only while the key holds our
    /// write token, the writer's key becomes a read hash with the one hold `hold` of our
    /// owner, keeping the write grant's `fence`, in one step (no writer can get in
    /// between). `None`: the write lock was no longer ours.
    pub fn downgrade(
        &mut self,
        writer: Token,
        hold: Token,
        now: Time,
        ttl: Time,
        fence: u64,
        mutants: &[Mutant],
    ) -> Option<u64> {
        if self.entries.get(&hold).is_some_and(|&(end, _)| end > now) {
            self.purge_reads(now, mutants);
            if let Some(fence) = self.resend_of_entry(hold, now, ttl, mutants) {
                return Some(fence);
            }
        }
        let ours = match self.holder(now) {
            Some(holder) => {
                holder == writer || mutants.contains(&Mutant::DowngradeWithoutOwnerCheck)
            }
            None => false,
        };
        if !ours {
            return None;
        }
        let fence = if mutants.contains(&Mutant::DowngradeNewFence) {
            self.draw_fence(mutants)
        } else {
            fence
        };
        self.lock = None; // DEL
        self.entries.clear(); // entries_begin: a new hash
        self.entries.insert(hold, (now + ttl, fence));
        Some(fence)
    }

    /// rwlock/write_release.lua: only if the key holds our write token (with the mutant
    /// `release-without-owner-check`, any writer's), the write lock ends and goes to the
    /// first writer in line (`release_exclusive`, as the fair mutex's release). Returns
    /// whether it released, and the writer handed the lock with its fence.
    pub fn write_release(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> (bool, Option<(Token, u64)>) {
        let ours = match self.holder(now) {
            Some(holder) => holder == token || mutants.contains(&Mutant::ReleaseWithoutOwnerCheck),
            None => false,
        };
        if !ours {
            return (false, None);
        }
        (true, self.release_exclusive(now, ttl, mutants))
    }
}

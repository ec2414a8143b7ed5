//! The Redis side: what one lock name's keys hold, and each Lua script of the modelled
//! kinds as a transition on them, written from the script line by line (the file each
//! mirrors is named on it). `tests/conformance.rs` runs the real scripts of every kind here
//! on a real server beside these transitions and compares replies and keys after every
//! step.
//!
//! Time is whole ticks. A key whose expiry is at or before `now` is gone (Redis keeps a key
//! through its last millisecond; in ticks the model ends it a little early, the safe side),
//! and an entry is ended when `end <= now`, as the scripts' purge decides.

use std::collections::{BTreeMap, BTreeSet};

use crate::mutant::Mutant;

/// A point in model time (ticks).
pub type Time = u8;

/// A hold's token: the client and its attempt number (unique per client).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    /// The client that made it.
    pub client: u8,
    /// Its attempt number.
    pub attempt: u8,
}

/// The keys of one lock name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// The lock key as a string (mutex, write lock): the holder's token and when the key
    /// expires.
    pub lock: Option<(Token, Time)>,
    /// The lock key as a hash of leased entries (entries.lua): the rwlock's read holds or
    /// the semaphore's permits, token → end of its lease and its fence.
    pub entries: BTreeMap<Token, (Time, u64)>,
    /// The fencing counter (`{N}:fence`): never expires, only grows.
    pub counter: u64,
    /// The record of the last lazily drawn fence (`{N}:fenced`): token, fence, expiry.
    pub fenced: Option<(Token, u64, Time)>,
    /// The fair mutex's waiter queue (queue.lua: `{N}:queue` and `{N}:queue-leases`):
    /// waiters in arrival order, each with the end of its waiter lease. A waiter whose
    /// lease ended stays until a script purges it.
    pub queue: Vec<(Token, Time)>,
    /// The lock key as the reentrant mutex's hash (reentrant/acquire.lua).
    pub reentrant: Option<Reentrant>,
}

/// The reentrant mutex's hash: `{~kind = 'reentrant', owner, fence, count, h:<hold>...}`
/// with one expiry for all its holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reentrant {
    /// The owner id.
    pub owner: u8,
    /// The fence of the outermost grant (every nested hold reports it).
    pub fence: u64,
    /// The `count` field: the holds the scripts counted.
    pub count: u8,
    /// The `h:<hold token>` fields.
    pub holds: BTreeSet<Token>,
    /// When the key expires.
    pub expires: Time,
}

/// What an acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grant {
    /// Granted, with the fence when drawn at grant.
    Granted(Option<u64>),
    /// Held by another (or, for a reader, by a writer).
    Busy,
}

impl Server {
    /// The string lock's holder, if its key has not expired.
    pub fn holder(&self, now: Time) -> Option<Token> {
        self.lock
            .filter(|&(_, expires)| expires > now)
            .map(|(t, _)| t)
    }

    /// The live entries (read holds, permits).
    pub fn live_entries(&self, now: Time) -> impl Iterator<Item = Token> + '_ {
        self.entries
            .iter()
            .filter(move |(_, &(end, _))| end > now)
            .map(|(&t, _)| t)
    }

    /// Redis's lazy expiry, made explicit so states that differ only in dead keys are one
    /// state: a key whose time came is gone.
    pub fn expire(&mut self, now: Time) {
        if self.lock.is_some_and(|(_, expires)| expires <= now) {
            self.lock = None;
        }
        if self.fenced.is_some_and(|(_, _, expires)| expires <= now) {
            self.fenced = None;
        }
        if self.reentrant.as_ref().is_some_and(|r| r.expires <= now) {
            self.reentrant = None;
        }
        // The hash expires with its latest lease (entries.lua: '~ends'); until then an
        // ended entry stays for the scripts' purge to find.
        if self.entries.values().all(|&(end, _)| end <= now) {
            self.entries.clear();
        }
        // The queue's keys outlive its latest waiter lease (queue.lua `keep_alive`); once
        // every lease ended, they hold nothing a script would not purge first.
        if self.queue.iter().all(|&(_, end)| end <= now) {
            self.queue.clear();
        }
    }

    /// The waiters in line whose waiter lease has not ended, in arrival order.
    pub fn live_waiters(&self, now: Time) -> impl Iterator<Item = Token> + '_ {
        self.queue
            .iter()
            .filter(move |&&(_, end)| end > now)
            .map(|&(t, _)| t)
    }

    /// fencing.lua `draw_fence`: the next fence (the clock floor is not modelled: with the
    /// data kept, the counter alone orders fences).
    pub(crate) fn draw_fence(&mut self, mutants: &[Mutant]) -> u64 {
        if !(mutants.contains(&Mutant::FenceReused) && self.counter > 0) {
            self.counter += 1;
        }
        self.counter
    }

    /// The branch every string-lock acquire script begins with: the key already holds our
    /// token (a resend whose first reply was lost), so the lease restarts as the first
    /// grant's did and the answer is granted again. False when the key is not ours.
    fn resend_of_own(&mut self, token: Token, now: Time, ttl: Time, mutants: &[Mutant]) -> bool {
        if self.holder(now) != Some(token) {
            return false;
        }
        if !mutants.contains(&Mutant::ResendKeepsOldLease) {
            self.lock = Some((token, now + ttl)); // PEXPIRE
        }
        true
    }

    /// mutex/acquire.lua (with the fast path's `SET NX PX` in front, mutex/mod.rs): our own
    /// token restarts the lease (a resend whose first reply was lost), another's is busy,
    /// a free key is granted; `eager` draws the fence with the grant.
    pub fn mutex_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        eager: bool,
        mutants: &[Mutant],
    ) -> Grant {
        if self.resend_of_own(token, now, ttl, mutants) {
            // The last fence drawn: no other grant can have drawn since.
            return Grant::Granted(eager.then_some(self.counter));
        }
        if self.holder(now).is_some() {
            return Grant::Busy;
        }
        let fence = eager.then(|| self.draw_fence(mutants));
        self.lock = Some((token, now + ttl));
        Grant::Granted(fence)
    }

    /// mutex/release.lua: deletes the key only if it holds our token. True if released.
    pub fn mutex_release(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> bool {
        if mutants.contains(&Mutant::ReleaseWithoutOwnerCheck) {
            let had = self.lock.is_some();
            self.lock = None;
            return had;
        }
        if self.holder(now) == Some(token) {
            self.lock = None;
            true
        } else {
            false
        }
    }

    /// renew/renew.lua for a string hold ('s'): restarts the lease if the key still holds
    /// our token. True if renewed.
    pub fn renew_string(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        if self.holder(now) == Some(token) {
            self.lock = Some((token, now + ttl));
            true
        } else {
            false
        }
    }

    /// mutex/fence.lua: the plain mutex's lazily drawn fence, only while the hold is held;
    /// a resend answers the recorded fence. `None`: not held any more (nothing drawn).
    pub fn mutex_fence(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> Option<u64> {
        if !mutants.contains(&Mutant::FenceOutsideGrant) && self.holder(now) != Some(token) {
            return None;
        }
        if let Some((recorded, fence, expires)) = self.fenced {
            if recorded == token && expires > now {
                return Some(fence);
            }
        }
        let fence = self.draw_fence(mutants);
        if let Some((_, expires)) = self.lock.filter(|&(t, e)| t == token && e > now) {
            // Recorded for the rest of the lease (SET .. PX pttl).
            self.fenced = Some((token, fence, expires));
        }
        Some(fence)
    }

    /// rwlock/rwlock.lua `purge_reads`, entries.lua `entries_purge`: entries whose lease
    /// ended (`end <= now`) are removed. True when a live one is left.
    fn purge_reads(&mut self, now: Time, mutants: &[Mutant]) -> bool {
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
    fn resend_of_entry(
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
    fn grant_entry(&mut self, token: Token, now: Time, ttl: Time, mutants: &[Mutant]) -> Grant {
        let fence = self.draw_fence(mutants);
        self.entries.insert(token, (now + ttl, fence));
        Grant::Granted(Some(fence))
    }

    /// rwlock/read_acquire.lua (without the writer queue): busy while a writer holds;
    /// otherwise the read hold is put with a fence (a resend restarts its lease).
    pub fn read_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Grant {
        if self.holder(now).is_some() {
            return Grant::Busy;
        }
        self.purge_reads(now, mutants);
        if let Some(fence) = self.resend_of_entry(token, now, ttl, mutants) {
            return Grant::Granted(Some(fence));
        }
        self.grant_entry(token, now, ttl, mutants)
    }

    /// rwlock/write_acquire.lua (without the writer queue): our own token restarts the
    /// lease; granted when no writer and no live reader holds, with a fence.
    pub fn write_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Grant {
        if self.resend_of_own(token, now, ttl, mutants) {
            return Grant::Granted(Some(self.counter));
        }
        if self.holder(now).is_some() || self.purge_reads(now, mutants) {
            return Grant::Busy;
        }
        let fence = self.draw_fence(mutants);
        self.lock = Some((token, now + ttl));
        Grant::Granted(Some(fence))
    }

    /// semaphore/acquire.lua (without the queue): expired permits are purged; a live
    /// permit of ours restarts its lease (a resend); a free one is granted with a fence.
    pub fn permit_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        permits: usize,
        mutants: &[Mutant],
    ) -> Grant {
        self.purge_reads(now, mutants);
        if let Some(fence) = self.resend_of_entry(token, now, ttl, mutants) {
            return Grant::Granted(Some(fence));
        }
        let over = if mutants.contains(&Mutant::PermitCountOffByOne) {
            self.entries.len() > permits
        } else {
            self.entries.len() >= permits
        };
        if over {
            return Grant::Busy;
        }
        self.grant_entry(token, now, ttl, mutants)
    }

    /// rwlock/read_release.lua, semaphore/release.lua: removes our entry. True if it was
    /// there (live).
    pub fn entry_release(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> bool {
        if mutants.contains(&Mutant::ReleaseWithoutOwnerCheck) {
            // Takes back whichever entry comes first.
            let first = self.entries.keys().next().copied();
            return first.and_then(|t| self.entries.remove(&t)).is_some();
        }
        match self.entries.remove(&token) {
            Some((end, _)) => end > now,
            None => false,
        }
    }

    /// queue.lua `queue_purge`: waiters whose lease ended (`end <= now`) leave the queue.
    pub(crate) fn queue_purge(&mut self, now: Time, mutants: &[Mutant]) {
        if !mutants.contains(&Mutant::QueueKeepsLapsedWaiters) {
            self.queue.retain(|&(_, end)| end > now);
        }
    }

    /// fair/acquire.lua with queue.lua: our own token in the key restarts the lease and
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
        // queue_rank: its place, or the place it would take (the queue's length).
        let rank = self
            .queue
            .iter()
            .position(|&(t, _)| t == token)
            .unwrap_or(self.queue.len());
        let first = rank == 0 || mutants.contains(&Mutant::GrantIgnoresQueue);
        if current.is_none() && first {
            // grant_in_line
            let fence = self.draw_fence(mutants);
            self.lock = Some((token, now + ttl));
            self.queue.retain(|&(t, _)| t != token);
            return Grant::Granted(Some(fence));
        }
        if join {
            // queue_join: a new waiter at the end; its lease (re)starts either way.
            match self.queue.iter_mut().find(|(t, _)| *t == token) {
                Some((_, end)) => *end = now + waiter_lease,
                None => self.queue.push((token, now + waiter_lease)),
            }
        }
        Grant::Busy
    }

    /// fair/release.lua with queue.lua `release_exclusive`: only if the key holds our
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
        // queue_next_grant: a lapsed head makes the script purge every lapsed waiter.
        if self.queue.first().is_some_and(|&(_, end)| end <= now) {
            self.queue_purge(now, mutants);
        }
        let head = self.queue.first().copied();
        match head {
            Some((head, lease_end)) if !mutants.contains(&Mutant::ReleaseSkipsHandOff) => {
                // queue_leave, then the fence, then SET key head PX lease.
                self.queue.remove(0);
                let fence = if mutants.contains(&Mutant::HandOffReusesFence) {
                    self.counter
                } else {
                    self.draw_fence(mutants)
                };
                let lease = ttl.min(lease_end.saturating_sub(now));
                self.lock = Some((head, now + lease));
                (true, Some((head, fence)))
            }
            _ => {
                self.lock = None; // DEL
                (true, None)
            }
        }
    }

    /// queue/cancel.lua: a waiter that stopped waiting leaves the line. True if it was in
    /// it.
    pub fn queue_cancel(&mut self, token: Token) -> bool {
        let before = self.queue.len();
        self.queue.retain(|&(t, _)| t != token);
        self.queue.len() < before
    }

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

    /// renew/renew.lua for a reentrant hold ('r'): while the hash has the hold's field,
    /// its lease restarts, never shortened (the holds share it).
    pub fn renew_reentrant(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        match self.reentrant.as_mut().filter(|r| r.expires > now) {
            Some(hash) if hash.holds.contains(&token) => {
                hash.expires = hash.expires.max(now + ttl);
                true
            }
            _ => false,
        }
    }

    /// renew/renew.lua for a leased entry ('e'): restarts a live entry's lease.
    pub fn renew_entry(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        match self.entries.get_mut(&token) {
            Some((end, _)) if *end > now => {
                *end = now + ttl;
                true
            }
            _ => false,
        }
    }
}

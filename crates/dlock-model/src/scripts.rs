//! The Redis side: what one lock name's keys hold, and each Lua script of the modelled
//! kinds as a transition on them, written from the script line by line (the file each
//! mirrors is named on it). `tests/conformance/` runs the real scripts of every kind here
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

    /// `renew_string`, or with the mutant `renew-recreates-key`, a renewal that sets a key
    /// gone with its token.
    pub fn renew_string_mutated(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> bool {
        if mutants.contains(&Mutant::RenewRecreatesKey)
            && self.holder(now).is_none()
            && self.entries.is_empty()
            && self.reentrant.is_none()
        {
            self.lock = Some((token, now + ttl));
            return true;
        }
        self.renew_string(token, now, ttl)
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

    /// Takes back an entry (entries.lua `entry_remove`): ours, or with the mutant
    /// `release-without-owner-check` whichever comes first. `None` when there was none;
    /// else whether its lease had not ended.
    fn remove_entry(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> Option<bool> {
        if mutants.contains(&Mutant::ReleaseWithoutOwnerCheck) {
            let first = self.entries.keys().next().copied()?;
            self.entries.remove(&first);
            return Some(true);
        }
        self.entries.remove(&token).map(|(end, _)| end > now)
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

    /// queue.lua `queue_purge`: waiters whose lease ended (`end <= now`) leave the queue.
    pub(crate) fn queue_purge(&mut self, now: Time, mutants: &[Mutant]) {
        if !mutants.contains(&Mutant::QueueKeepsLapsedWaiters) {
            self.queue.retain(|&(_, end)| end > now);
        }
    }

    /// queue.lua `queue_rank`: a waiter's place, or the place it would take (the queue's
    /// length).
    fn queue_rank(&self, token: Token) -> usize {
        (self.queue.iter().position(|&(t, _)| t == token)).unwrap_or(self.queue.len())
    }

    /// queue.lua `queue_join`: a new waiter at the end; its lease (re)starts either way.
    fn queue_join(&mut self, token: Token, now: Time, waiter_lease: Time) {
        match self.queue.iter_mut().find(|(t, _)| *t == token) {
            Some((_, end)) => *end = now + waiter_lease,
            None => self.queue.push((token, now + waiter_lease)),
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

    /// queue.lua `queue_next_grant`: where the first waiter whose waiter lease has not
    /// ended stands (a lapsed head makes the script purge every lapsed waiter); `None`
    /// when nobody waits. With the mutant `queue-skips-head`, the last live waiter's place
    /// instead.
    fn queue_next(&mut self, now: Time, mutants: &[Mutant]) -> Option<usize> {
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
    fn queue_take(&mut self, at: usize, now: Time, ttl: Time) -> (Token, Time) {
        let (waiter, lease_end) = self.queue.remove(at);
        (waiter, ttl.min(lease_end.saturating_sub(now)))
    }

    /// queue.lua `hand_off_string`: the string lock goes straight to the first waiter in
    /// line (it leaves the queue, a fence is drawn, the key holds its token). Returns the
    /// waiter handed the lock, with its fence.
    fn hand_off_string(
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
    fn release_exclusive(
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
        (true, self.release_exclusive(now, ttl, mutants))
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

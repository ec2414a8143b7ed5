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

mod entries;
mod fair;
mod mutex;
mod queue;
mod reentrant;
mod renew;
mod rwlock;
mod semaphore;

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
    pub(super) fn resend_of_own(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> bool {
        if self.holder(now) != Some(token) {
            return false;
        }
        if !mutants.contains(&Mutant::ResendKeepsOldLease) {
            self.lock = Some((token, now + ttl)); // PEXPIRE
        }
        true
    }
}

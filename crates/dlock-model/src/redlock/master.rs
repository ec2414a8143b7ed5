//! One Redlock master's keys of the lock name and its scripts (mutex/acquire.lua with the
//! fence at grant, redlock/raise.lua, release), with its clock's offset, jump and restart.

use crate::scripts::{Time, Token};

/// One master's keys of the lock name.
///
/// Not `scripts::Server` with its transitions, though the keys are the plain mutex's: its
/// `draw_fence` has no clock floor (one server keeps its data, and the counter alone
/// orders fences there), its acquire has the resend branch and its mutants, and it carries
/// the other kinds' keys; putting the clock and the restart's absence into it would change
/// every one-server model's transitions for this model's sake. Both are checked against the
/// same real scripts instead (`tests/conformance/`), this one with the clock flag on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Master {
    /// The lock key: the holder's token and when it expires.
    pub lock: Option<(Token, Time)>,
    /// The fencing counter (0: the key does not exist).
    pub counter: u64,
    /// Restarted empty: it answers nothing before this time.
    pub away_until: Time,
    /// How far its clock is ahead of the others', in ticks (0 but after an offset or a
    /// jump). Times here are kept on the common clock: a jump ends the holds it keeps
    /// (`jumped`), an offset ends none, and after either a lease set here ends a lease
    /// after it was set, as by any clock; what `ahead` changes is the clock floor's
    /// reading.
    pub ahead: Time,
}

impl Master {
    /// The holder's token, if its key has not expired.
    pub fn holder(&self, now: Time) -> Option<Token> {
        self.lock.filter(|&(_, e)| e > now).map(|(t, _)| t)
    }

    fn up(&self, now: Time) -> bool {
        self.away_until <= now
    }

    /// fencing.lua `draw_fence`: max(counter + 1, the clock); with `clock` None, clocks are
    /// far behind the counters and the counter alone counts. Returns the fence and whether
    /// it is the clock.
    pub fn draw_fence(&mut self, clock: Option<u64>) -> (u64, bool) {
        match clock {
            Some(clock) if self.counter == 0 || self.counter + 1 < clock => {
                self.counter = clock;
                (clock, true)
            }
            _ => {
                self.counter += 1;
                (self.counter, false)
            }
        }
    }

    /// mutex/acquire.lua with the fence at grant, telling whether it is the clock: a free
    /// key is granted with a fence; anything else (or a master that is away) grants
    /// nothing. (Rounds use a fresh token each, and replies are not lost here: the branch
    /// of a resent request is not reached.)
    pub fn acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        clock: Option<u64>,
    ) -> Option<(u64, bool)> {
        if !self.up(now) || self.holder(now).is_some() {
            return None;
        }
        let drawn = self.draw_fence(clock);
        self.lock = Some((token, now + ttl));
        Some(drawn)
    }

    /// redlock/raise.lua: raises the counter to `fence`, only upward, only while the hold
    /// is `token`'s here. True when raised (or already that high).
    pub fn raise(&mut self, token: Token, fence: u64, now: Time) -> bool {
        if !self.up(now) || self.holder(now) != Some(token) {
            return false;
        }
        self.counter = self.counter.max(fence);
        true
    }

    /// mutex/release.lua. True if released.
    pub fn release(&mut self, token: Token, now: Time) -> bool {
        let ours = self.up(now) && self.holder(now) == Some(token);
        if ours {
            self.lock = None;
        }
        ours
    }

    /// A master restarted without persistence: lock and counter gone, away until `back`
    /// (the delayed restart that Redlock needs; a server that FLUSHALL emptied is back at
    /// once).
    pub fn restarted(back: Time) -> Master {
        Master {
            lock: None,
            counter: 0,
            away_until: back,
            ahead: 0,
        }
    }

    /// Its clock jumps `by` ticks forward, more than a lease: the hold it keeps ends at
    /// once (every lease here ends at most a lease from now), and its clock reads `by`
    /// ahead from then on. The counter stays; a restart's delay is the operator's, counted
    /// in real time, and stays too.
    pub fn jumped(&mut self, by: Time) {
        self.lock = None;
        self.ahead += by;
    }

    /// Its clock reads `by` ticks ahead of the others' from now on, less than a lease: an
    /// offset between machines, not a step (a clock slewed there, or that was there all
    /// along), so the hold it keeps lasts as long as it would anywhere. Only the clock
    /// floor's reading changes.
    pub fn offset(&mut self, by: Time) {
        self.ahead += by;
    }
}

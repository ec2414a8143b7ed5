//! Leader election (`crates/dlock/src/election/`): a leader is the holder of the election's
//! lock (the plain mutex, its fence drawn at grant: the term), and its value is recorded
//! beside the lock while it holds. [`ElectionKeys`] has the three scripts as transitions
//! (`proclaim.lua`, `leader.lua`, `resign.lua`); [`ElectionModel`] checks them with two
//! campaigners that lead in turn, proclaim (also past their lease: a paused leader),
//! renew, resign and release, and an observer that asks who leads at any moment.
//! `tests/conformance/election.rs` runs the real scripts beside these transitions.

use std::collections::BTreeSet;

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

/// The leader record (`{N}:leader`, a hash: value, term, token), which never expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// What the leader proclaimed (a small number here).
    pub value: u8,
    /// The term it proclaimed with (its grant's fence).
    pub term: u64,
    /// The hold it names.
    pub token: Token,
}

/// What `leader.lua` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Look {
    /// `{value, term, PTTL}`: the leader, and what is left of its lease (ticks).
    Leader {
        /// Its value.
        value: u8,
        /// Its term.
        term: u64,
        /// Ticks left of the lock key's lease.
        remaining: Time,
    },
    /// `{}`: nobody leads.
    Nobody,
}

/// The election's keys beside the lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ElectionKeys {
    /// The leader record.
    pub record: Option<Record>,
}

impl ElectionKeys {
    /// election/proclaim.lua: while `lock` holds `token` (`unless_held`), the record is
    /// written whole (HSET value term token); true when recorded, false (nothing
    /// written) when not held.
    pub fn proclaim(
        &mut self,
        lock: &Server,
        token: Token,
        value: u8,
        term: u64,
        now: Time,
        mutants: &[Mutant],
    ) -> bool {
        if !mutants.contains(&Mutant::ProclaimWithoutOwnerCheck) && lock.holder(now) != Some(token)
        {
            return false;
        }
        self.record = Some(Record { value, term, token });
        true
    }

    /// election/resign.lua: the record is deleted if it names `token`. True if it did.
    pub fn resign(&mut self, token: Token) -> bool {
        if self.record.map(|r| r.token) != Some(token) {
            return false;
        }
        self.record = None;
        true
    }

    /// election/leader.lua: the record, if the hold it names holds the lock now, with the
    /// lock key's remaining lease; nobody otherwise (no holder, a holder that has not
    /// proclaimed, a record left by a leader whose hold ended).
    pub fn leader(&self, lock: &Server, now: Time, mutants: &[Mutant]) -> Look {
        let Some((holder, expires)) = lock.lock.filter(|&(_, e)| e > now) else {
            return Look::Nobody;
        };
        let Some(record) = self.record else {
            return Look::Nobody;
        };
        if record.token != holder && !mutants.contains(&Mutant::LeaderWithoutHoldCheck) {
            return Look::Nobody;
        }
        Look::Leader {
            value: record.value,
            term: record.term,
            remaining: expires - now,
        }
    }
}

/// What a campaigner believes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Not campaigning.
    Idle,
    /// Leads with `token` in `term`, valid by its own clock until `until` (0 once
    /// passed: a paused leader that wakes still has its leadership and may proclaim).
    Leading {
        /// The hold's token.
        token: Token,
        /// Its term (the grant's fence).
        term: u64,
        /// The end of its validity.
        until: Time,
    },
    /// Resigned (the record cleared, if it was its own); the lock's release comes next.
    Resigned {
        /// The hold's token.
        token: Token,
    },
}

/// A model of leader election over the plain mutex with its fence drawn at grant.
#[derive(Clone, Debug)]
pub struct ElectionModel {
    /// Shown in reports.
    pub name: &'static str,
    /// How many campaigners.
    pub clients: usize,
    /// The lease, in ticks.
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// Leaderships each campaigner may win.
    pub max_holds: u8,
    /// Bugs put in on purpose.
    pub mutants: Vec<Mutant>,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock.
    pub now: Time,
    /// The lock's keys.
    pub server: Server,
    /// The leader record.
    pub keys: ElectionKeys,
    /// Each campaigner's belief.
    pub clients: Vec<Client>,
    /// Tokens each campaigner has used.
    pub attempts: Vec<u8>,
    /// Ghost: the holds whose proclaim was answered "recorded" and that have not resigned.
    pub proclaimed: BTreeSet<Token>,
    /// Ghost: a leader was reported that the live hold does not back, or a proclaim was
    /// answered "recorded" for a token that did not hold.
    pub unbacked: bool,
    /// Ghost: the last leader an observer was told of: its term and (unseen by the
    /// observer) its hold.
    pub seen: Option<(u64, Token)>,
    /// Ghost: an observer was told of a term below an earlier one, or of the same term for
    /// another hold.
    pub term_went_back: bool,
    /// Ghost: an observer was told of two leaderships.
    pub two_seen: bool,
    /// Ghost: an observer was told nobody leads while the record named a hold that ended.
    pub stale_hidden: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Campaigner `c` attempts the lock (a single attempt; a waiting campaign is a
    /// sequence of them).
    Campaign(usize),
    /// Campaigner `c` proclaims its value (the campaign's own, a new one, or a resend).
    Proclaim(usize),
    /// Campaigner `c`'s renewal runs and is answered.
    Renew(usize),
    /// Campaigner `c` resigns: resign.lua (the lock's release comes next).
    Resign(usize),
    /// Campaigner `c` releases the lock after resigning.
    Release(usize),
    /// An observer runs leader.lua.
    Look,
}

impl Model for ElectionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            server: Server::default(),
            keys: ElectionKeys::default(),
            clients: vec![Client::Idle; self.clients],
            attempts: vec![0; self.clients],
            proclaimed: BTreeSet::new(),
            unbacked: false,
            seen: None,
            term_went_back: false,
            two_seen: false,
            stale_hidden: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        actions.push(Action::Look);
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle if state.attempts[c] < self.max_holds => {
                    actions.push(Action::Campaign(c));
                }
                Client::Leading { until, .. } => {
                    actions.push(Action::Proclaim(c));
                    actions.push(Action::Resign(c));
                    if *until > state.now {
                        actions.push(Action::Renew(c));
                    }
                }
                Client::Resigned { .. } => actions.push(Action::Release(c)),
                Client::Idle => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => state.now += 1,
            Action::Campaign(c) => {
                let token = Token {
                    client: c as u8,
                    attempt: state.attempts[c],
                };
                // election_with: the mutex with its fence drawn at grant.
                let Grant::Granted(Some(term)) =
                    state
                        .server
                        .mutex_acquire(token, now, self.ttl, true, &self.mutants)
                else {
                    return None;
                };
                state.attempts[c] += 1;
                state.clients[c] = Client::Leading {
                    token,
                    term,
                    until: now + self.ttl,
                };
            }
            Action::Proclaim(c) => {
                let Client::Leading { token, term, .. } = state.clients[c] else {
                    return None;
                };
                let held = state.server.holder(now) == Some(token);
                let recorded =
                    state
                        .keys
                        .proclaim(&state.server, token, c as u8, term, now, &self.mutants);
                if recorded {
                    state.unbacked |= !held;
                    state.proclaimed.insert(token);
                }
            }
            Action::Renew(c) => {
                let Client::Leading { token, term, .. } = state.clients[c] else {
                    return None;
                };
                if !state.server.renew_string(token, now, self.ttl) {
                    return None; // lost: nothing changes until it resigns
                }
                state.clients[c] = Client::Leading {
                    token,
                    term,
                    until: now + self.ttl,
                };
            }
            Action::Resign(c) => {
                let Client::Leading { token, .. } = state.clients[c] else {
                    return None;
                };
                state.keys.resign(token);
                state.proclaimed.remove(&token);
                state.clients[c] = Client::Resigned { token };
            }
            Action::Release(c) => {
                let Client::Resigned { token } = state.clients[c] else {
                    return None;
                };
                state.server.mutex_release(token, now, &self.mutants);
                state.clients[c] = Client::Idle;
            }
            Action::Look => {
                let look = state.keys.leader(&state.server, now, &self.mutants);
                match look {
                    Look::Leader {
                        value,
                        term,
                        remaining,
                    } => {
                        // Backed: the live holder's own record, its grant's term, its lease.
                        let holder = state.server.lock.filter(|&(_, e)| e > now);
                        let backed = holder.is_some_and(|(token, expires)| {
                            let granted = match state.clients[usize::from(token.client)] {
                                Client::Leading { token: t, term, .. } if t == token => Some(term),
                                _ => None,
                            };
                            state.keys.record.is_some_and(|r| r.token == token)
                                && value == token.client
                                && granted == Some(term)
                                && remaining == expires - now
                        });
                        state.unbacked |= !backed;
                        let token = holder.map(|(t, _)| t).unwrap_or(Token {
                            client: u8::MAX,
                            attempt: 0,
                        });
                        if let Some((seen, by)) = state.seen {
                            state.term_went_back |= term < seen || (term == seen && by != token);
                            state.two_seen |= by != token;
                        }
                        state.seen = Some((term, token));
                    }
                    Look::Nobody => {
                        let holder = state.server.holder(now);
                        state.stale_hidden |= state
                            .keys
                            .record
                            .is_some_and(|r| Some(r.token) != holder && holder.is_some());
                    }
                }
                if state == *last {
                    return None; // told nothing new
                }
            }
        }
        state.server.expire(state.now);
        for client in &mut state.clients {
            if let Client::Leading { until, .. } = client {
                if *until <= state.now {
                    *until = 0;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a leader record counts only while its hold holds",
                |_, state: &State| !state.unbacked,
            ),
            Property::always(
                "the holder's record stands until it resigns",
                |_, state: &State| {
                    // A live holder that proclaimed (and has not resigned) is the one the
                    // record names: no other hold overwrote or cleared it.
                    match state.server.holder(state.now) {
                        Some(holder) if state.proclaimed.contains(&holder) => {
                            state.keys.record.is_some_and(|r| r.token == holder)
                        }
                        _ => true,
                    }
                },
            ),
            Property::always("terms rise", |_, state: &State| !state.term_went_back),
            Property::sometimes(
                "an observer sees two leaders in turn",
                |_, state: &State| state.two_seen,
            ),
            Property::sometimes(
                "a record left by an ended hold is not reported",
                |_, state: &State| state.stale_hidden,
            ),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.max_time
    }
}

impl ElectionModel {
    /// Whether `mutant`'s bug is in a transition this model takes.
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        matches!(
            mutant,
            Mutant::ProclaimWithoutOwnerCheck
                | Mutant::LeaderWithoutHoldCheck
                | Mutant::ReleaseWithoutOwnerCheck
                | Mutant::FenceReused
        )
    }
}

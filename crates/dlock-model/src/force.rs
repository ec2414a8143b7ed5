//! An operator's forced release racing a lock's clients: the clients of [`system`]'s
//! model (attempts, lost replies and resends, releases, renewals, waiters in line,
//! crashes, the clock) and an operator who releases the lock by force
//! (inspect/force_release.lua, [`Server::force_release`]), whose reply may be lost and who
//! then resends the same request.
//!
//! A forced release breaks mutual exclusion of beliefs on purpose: the evicted holder
//! believes it holds until its next renewal or its deadline, and the fence the forced
//! release draws is what protects storage from it. So the properties here set evicted
//! holders aside, and ask instead that the eviction happens once per operator call, that
//! Redis never holds an evicted hold again, and that the forced fence sits between the
//! grants before and after it.

use stateright::{Model, Property};

use crate::admin::Forced;
use crate::mutant::Mutant;
use crate::scripts::{Server, Token};
use crate::system::{self, Client, LockModel};

/// A lock's clients and an operator who forces its release.
#[derive(Clone, Debug)]
pub struct ForceModel {
    /// Shown in reports.
    pub name: &'static str,
    /// The lock and its clients (exclusive roles only: mutex or fair mutex), with the
    /// bugs put in.
    pub lock: LockModel,
    /// Forced releases the operator may call (each with its own request id).
    pub max_forces: u8,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The lock, its clients and their ghosts.
    pub lock: system::State,
    /// The record of the last forced releases (`<name>:forced`), newest first.
    pub record: Vec<Forced>,
    /// Forced releases called so far (the next request id).
    pub requests: u8,
    /// The operator's call whose reply was lost, to resend.
    pub in_flight: Option<u8>,
    /// Ghost: request ids that have run once.
    pub ran: Vec<u8>,
    /// Ghost: tokens a forced release took from Redis, while no acquire granted them again
    /// (a resend or a next attempt with the same token is a new grant).
    pub evicted: Vec<Token>,
    /// Ghost: a forced release whose request had run before changed what Redis holds.
    pub evicted_twice: bool,
    /// Ghost: a forced release that found the lock held left something held.
    pub left_held: bool,
    /// Ghost: a resend answered from the record while Redis held a later grant.
    pub spared: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A step of the lock's clients or the clock.
    Lock(system::Action),
    /// The operator's forced release, answered.
    Force,
    /// The operator's forced release runs, and its reply is lost.
    ForceLost,
    /// The operator resends the call whose reply was lost (same request id), answered.
    ForceResend,
}

/// The tokens Redis holds now.
fn holds(server: &Server, now: u8) -> Vec<Token> {
    let mut holds: Vec<Token> = server.holder(now).into_iter().collect();
    holds.extend(server.live_entries(now));
    if let Some(hash) = server.reentrant_at(now) {
        holds.extend(hash.holds.iter().copied());
    }
    holds.sort();
    holds
}

/// The holds clients believe valid now whose token no forced release took: (client,
/// token).
fn believed_unevicted(state: &State) -> Vec<(usize, Token)> {
    let now = state.lock.now;
    (state.lock.clients.iter().enumerate())
        .filter_map(|(c, client)| match *client {
            Client::Holding { token, until, .. }
                if until > now && !state.evicted.contains(&token) =>
            {
                Some((c, token))
            }
            _ => None,
        })
        .collect()
}

impl ForceModel {
    /// Whether `mutant`'s bug is in a script this model runs (the operator's, or one of
    /// its lock's).
    pub fn touched_by(&self, mutant: Mutant) -> bool {
        matches!(mutant, Mutant::ForceEvictsTwice | Mutant::ForceKeepsLockKey)
            || self.lock.kind.touched_by(mutant)
    }

    /// The most fences the search lets be drawn: the clients' grants (one fence each, and
    /// a hand-off's), and the operator's.
    fn fence_cap(&self) -> u64 {
        let holds = self.lock.roles.len() as u64 * u64::from(self.lock.max_holds);
        2 * holds + u64::from(self.max_forces) + 2
    }

    /// Runs the operator's request `request` at the state's time, and its ghosts.
    fn force(&self, state: &mut State, request: u8) {
        let now = state.lock.now;
        let before = holds(&state.lock.server, now);
        let counter = state.lock.server.counter;
        let repeat = state.ran.contains(&request);
        let record = state.record.clone();
        let fence =
            (state.lock.server).force_release(&mut state.record, request, now, &self.lock.mutants);
        let after = holds(&state.lock.server, now);
        if repeat {
            state.evicted_twice |= after != before;
            state.spared |= fence > 0 && !after.is_empty() && after == before;
        } else {
            state.ran.push(request);
        }
        if state.record == record {
            return; // answered from the record (a run records itself, evicting or not)
        }
        state.left_held |= !after.is_empty();
        for token in before {
            if !state.evicted.contains(&token) {
                state.evicted.push(token);
            }
        }
        state.evicted.sort();
        if state.lock.server.counter > counter {
            // A fence drawn: above every grant's before it, below every grant's after
            // it, and every grant still to hear its fence (drawn lazily) must hear a
            // smaller one.
            let lock = &mut state.lock;
            lock.fence_order_broken |= fence <= lock.max_fence;
            lock.max_fence = lock.max_fence.max(fence);
            for (_, _, min_after) in &mut lock.pending {
                *min_after = Some(min_after.map_or(fence, |m| m.min(fence)));
            }
        }
    }
}

impl Model for ForceModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.lock
            .init_states()
            .into_iter()
            .map(|lock| State {
                lock,
                record: Vec::new(),
                requests: 0,
                in_flight: None,
                ran: Vec::new(),
                evicted: Vec::new(),
                evicted_twice: false,
                left_held: false,
                spared: false,
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let mut lock = Vec::new();
        self.lock.actions(&state.lock, &mut lock);
        actions.extend(lock.into_iter().map(Action::Lock));
        if state.requests < self.max_forces {
            actions.push(Action::Force);
            if state.in_flight.is_none() {
                actions.push(Action::ForceLost);
            }
        }
        if state.in_flight.is_some() {
            actions.push(Action::ForceResend);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Lock(step) => {
                // A client that asks again with an evicted token (a resend after a lost
                // reply, a next attempt in line) asks for a new grant, which Redis may
                // make (by this attempt, or by a later release's hand-off).
                if let system::Action::Resend(c) | system::Action::Retry(c) = step {
                    if let Client::InFlight { token } | Client::Queued { token, .. } =
                        last.lock.clients[c]
                    {
                        state.evicted.retain(|t| *t != token);
                    }
                }
                state.lock = self.lock.next_state(&last.lock, step)?;
            }
            Action::Force | Action::ForceLost => {
                let request = state.requests;
                state.requests += 1;
                self.force(&mut state, request);
                if action == Action::ForceLost {
                    state.in_flight = Some(request);
                }
            }
            Action::ForceResend => {
                let request = state.in_flight.take()?;
                self.force(&mut state, request);
            }
        }
        state.lock.server.expire(state.lock.now);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a forced release evicts exactly once under resend",
                |_, state: &State| !state.evicted_twice,
            ),
            Property::always(
                "an evicted hold is never held in Redis again",
                |_, state: &State| {
                    let now = state.lock.now;
                    let held = holds(&state.lock.server, now);
                    !state.evicted.iter().any(|t| held.contains(t))
                },
            ),
            Property::always(
                "a forced release leaves the lock free",
                |_, state: &State| !state.left_held,
            ),
            Property::always("fences follow grants", |_, state: &State| {
                !state.lock.fence_order_broken
            }),
            Property::always(
                "mutual exclusion, evicted holders aside",
                |_, state: &State| believed_unevicted(state).len() <= 1,
            ),
            Property::always(
                "beliefs are backed by Redis, evicted holders aside",
                |_, state: &State| {
                    let held = holds(&state.lock.server, state.lock.now);
                    believed_unevicted(state)
                        .iter()
                        .all(|(_, token)| held.contains(token))
                },
            ),
            Property::always("a release frees what it held", |_, state: &State| {
                !state.lock.release_kept
            }),
            Property::always(
                "within the fence bound",
                |model: &ForceModel, state: &State| state.lock.server.counter < model.fence_cap(),
            ),
            Property::sometimes(
                "an evicted holder believes while another holds",
                |_, state: &State| {
                    let now = state.lock.now;
                    let evicted_believes = state.lock.clients.iter().any(|c| {
                        matches!(c, Client::Holding { token, until, .. }
                            if *until > now && state.evicted.contains(token))
                    });
                    evicted_believes && !believed_unevicted(state).is_empty()
                },
            ),
            Property::sometimes(
                "a resent forced release spares a later holder",
                |_, state: &State| state.spared,
            ),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.lock.now <= self.lock.max_time && state.lock.server.counter <= self.fence_cap()
    }
}

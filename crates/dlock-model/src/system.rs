//! One lock name, its Redis keys (`scripts::Server`), a clock, and clients with what they
//! believe, as a stateright model: every interleaving of attempts, lost replies and
//! resends, releases, renewals (and their lost replies), lazily drawn fences, crashes and
//! the clock running past a client that does nothing (a paused holder).

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

/// The kind of lock modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The plain mutex; `eager` draws the fence with the grant (`fence_at_grant`), else
    /// on the first `fence()` (mutex/fence.lua).
    Mutex {
        /// Fence drawn with the grant.
        eager: bool,
    },
    /// The read-write lock (its exclusion and purge; not the writer queue).
    RwLock,
    /// The semaphore of `permits` (its count and purge; not the queue).
    Semaphore {
        /// How many may hold at once.
        permits: usize,
    },
}

/// What a client takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The mutex, or the write lock.
    Exclusive,
    /// A read hold.
    Reader,
    /// A semaphore permit.
    Permit,
}

/// A model to check: the kind, its clients and the bounds of the search.
#[derive(Clone, Debug)]
pub struct LockModel {
    /// Shown in reports.
    pub name: &'static str,
    /// The kind.
    pub kind: Kind,
    /// One role per client.
    pub roles: Vec<Role>,
    /// The lease, in ticks.
    pub ttl: Time,
    /// The clock stops here (the bound of the search).
    pub max_time: Time,
    /// Holds each client may be granted (the bound of the search).
    pub max_holds: u8,
    /// Bugs put in on purpose.
    pub mutants: Vec<Mutant>,
}

/// What a client believes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Holds nothing.
    Idle,
    /// Sent an acquire whose reply was lost: it ran, or not; the client resends it with
    /// the same token, or gives up (and releases that token).
    InFlight {
        /// The attempt's token.
        token: Token,
    },
    /// Was granted `token`; believes it holds until `until` (its own clock: the send
    /// time of the last grant, resend or renewal plus the lease). Stays here after
    /// `until` until it releases: a paused holder that wakes still has its guard.
    Holding {
        /// The hold's token.
        token: Token,
        /// The end of its validity.
        until: Time,
        /// The fence it was given.
        fence: Option<u64>,
    },
    /// Gone for good (its holds expire).
    Crashed,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock (the server's and the clients' agree: drift is not modelled).
    pub now: Time,
    /// The lock's keys.
    pub server: Server,
    /// Each client's belief.
    pub clients: Vec<Client>,
    /// Tokens each client has used (the next attempt's number).
    pub attempts: Vec<u8>,
    /// Ghost, for "fences follow grants": the largest fence any grant was given so far
    /// (every new grant's must be larger).
    pub max_fence: u64,
    /// Ghost: the grants (in the order Redis made them) whose holder may still hear its
    /// fence later (a lazy draw, or a lost reply), each with the largest fence given before
    /// it (its own must be larger) and the smallest fence drawn since by a later grant (its
    /// own must be smaller).
    pub pending: Vec<(Token, u64, Option<u64>)>,
    /// Ghost: a fence came out at or below an earlier grant's, or at or above a later one's.
    pub fence_order_broken: bool,
    /// Ghost: a release answered "released" and Redis still holds the token.
    pub release_kept: bool,
    /// Ghost: grants to a client other than the one before.
    pub turns: u8,
    /// Ghost: the client granted last.
    pub last_granted: Option<u8>,
    /// Ghost: an acquire whose reply was lost was resent and answered granted.
    pub resent: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Client `c` attempts to acquire and hears the answer.
    Attempt(usize),
    /// Client `c`'s attempt runs, and its reply is lost.
    AttemptLost(usize),
    /// Client `c` resends its attempt (same token) and hears the answer.
    Resend(usize),
    /// Client `c` gives up on an attempt whose reply was lost: releases its token.
    GiveUp(usize),
    /// Client `c` releases its hold.
    Release(usize),
    /// Client `c`'s renewal runs and is answered.
    Renew(usize),
    /// Client `c`'s renewal runs, and its reply is lost (the client keeps the old end).
    RenewLost(usize),
    /// Client `c` draws its lazy fence and hears it.
    Fence(usize),
    /// Client `c`'s fence draw runs, and its reply is lost.
    FenceLost(usize),
    /// Client `c` crashes.
    Crash(usize),
}

impl LockModel {
    fn role(&self, client: usize) -> Role {
        self.roles[client]
    }

    /// Whether Redis holds `token` for `role` now.
    fn held_by(&self, server: &Server, token: Token, role: Role, now: Time) -> bool {
        match role {
            Role::Exclusive => server.holder(now) == Some(token),
            Role::Reader | Role::Permit => server.live_entries(now).any(|t| t == token),
        }
    }

    /// The acquire script of `role` for `token`.
    fn acquire(&self, server: &mut Server, token: Token, role: Role, now: Time) -> Grant {
        let m = &self.mutants;
        match (self.kind, role) {
            (Kind::Mutex { eager }, _) => server.mutex_acquire(token, now, self.ttl, eager, m),
            (Kind::RwLock, Role::Exclusive) => server.write_acquire(token, now, self.ttl, m),
            (Kind::RwLock, _) => server.read_acquire(token, now, self.ttl, m),
            (Kind::Semaphore { permits }, _) => {
                server.permit_acquire(token, now, self.ttl, permits, m)
            }
        }
    }

    /// The release script of `role`; true when it answered "released".
    fn release(&self, server: &mut Server, token: Token, role: Role, now: Time) -> bool {
        match role {
            Role::Exclusive => server.mutex_release(token, now, &self.mutants),
            Role::Reader | Role::Permit => server.entry_release(token, now, &self.mutants),
        }
    }

    fn renew(&self, server: &mut Server, token: Token, role: Role, now: Time) -> bool {
        match role {
            Role::Exclusive => server.renew_string(token, now, self.ttl),
            Role::Reader | Role::Permit => server.renew_entry(token, now, self.ttl),
        }
    }

    /// Runs an acquire at `now`; records a new grant in the ghost history.
    fn run_acquire(&self, state: &mut State, client: usize, token: Token) -> Grant {
        let role = self.role(client);
        let was_held = self.held_by(&state.server, token, role, state.now);
        let grant = self.acquire(&mut state.server, token, role, state.now);
        if let Grant::Granted(fence) = grant {
            if !was_held {
                // A grant to a token whose earlier grant was never heard (its reply lost,
                // its lease over before the resend): that one can no longer be heard.
                state.pending.retain(|p| p.0 != token);
                match fence {
                    Some(fence) => {
                        state.fence_order_broken |= fence <= state.max_fence;
                        state.max_fence = fence;
                        fence_drawn(state, fence, state.pending.len());
                    }
                    None => state.pending.push((token, state.max_fence, None)),
                }
                if state.last_granted != Some(token.client) {
                    state.turns = state.turns.saturating_add(1).min(2);
                    state.last_granted = Some(token.client);
                }
            }
        }
        grant
    }

    /// The most fences the search lets be drawn: each hold draws one at grant or on
    /// first read, and a lazy one may draw again once a tick after its record ended (a
    /// resend after a lost reply).
    fn fence_cap(&self) -> u64 {
        let holds = self.roles.len() as u64 * u64::from(self.max_holds);
        holds * (1 + u64::from(self.max_time) / 2) + 2
    }

    fn lazy_fence(&self) -> bool {
        self.kind == (Kind::Mutex { eager: false })
    }
}

/// A fence drawn by the grant at `position` in the pending list (its length: a grant made
/// after every pending one): each earlier pending grant must draw below it.
fn fence_drawn(state: &mut State, fence: u64, position: usize) {
    for (_, _, min_after) in &mut state.pending[..position] {
        *min_after = Some(min_after.map_or(fence, |m| m.min(fence)));
    }
}

/// The holds clients believe valid now: (client, role).
fn believed(model: &LockModel, state: &State) -> Vec<(usize, Role)> {
    state
        .clients
        .iter()
        .enumerate()
        .filter_map(|(c, client)| match client {
            Client::Holding { until, .. } if *until > state.now => Some((c, model.role(c))),
            _ => None,
        })
        .collect()
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            server: Server::default(),
            clients: vec![Client::Idle; self.roles.len()],
            attempts: vec![0; self.roles.len()],
            max_fence: 0,
            pending: Vec::new(),
            fence_order_broken: false,
            release_kept: false,
            turns: 0,
            last_granted: None,
            resent: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle if state.attempts[c] < self.max_holds => {
                    actions.push(Action::Attempt(c));
                    actions.push(Action::AttemptLost(c));
                }
                Client::InFlight { .. } => {
                    actions.push(Action::Resend(c));
                    actions.push(Action::GiveUp(c));
                }
                Client::Holding { until, fence, .. } => {
                    actions.push(Action::Release(c));
                    // The renewer works only while the lease is valid.
                    if *until > state.now {
                        actions.push(Action::Renew(c));
                        actions.push(Action::RenewLost(c));
                    }
                    // fence() may be called any time the guard exists.
                    if self.lazy_fence() && fence.is_none() {
                        actions.push(Action::Fence(c));
                        actions.push(Action::FenceLost(c));
                    }
                }
                _ => {}
            }
            // A client that holds nothing and crashes is one that never acts again: the
            // search has that already.
            if matches!(client, Client::InFlight { .. } | Client::Holding { .. }) {
                actions.push(Action::Crash(c));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => {
                state.now += 1;
            }
            Action::Attempt(c) | Action::AttemptLost(c) => {
                let token = Token {
                    client: c as u8,
                    attempt: state.attempts[c],
                };
                let grant = self.run_acquire(&mut state, c, token);
                if let Action::AttemptLost(_) = action {
                    state.attempts[c] += 1;
                    state.clients[c] = Client::InFlight { token };
                } else if let Grant::Granted(fence) = grant {
                    state.attempts[c] += 1;
                    state.clients[c] = Client::Holding {
                        token,
                        until: now + self.ttl,
                        fence,
                    };
                } else {
                    return None; // busy: nothing changed
                }
            }
            Action::Resend(c) => {
                let Client::InFlight { token } = state.clients[c] else {
                    return None;
                };
                let was_held = self.held_by(&state.server, token, self.role(c), now);
                state.clients[c] = match self.run_acquire(&mut state, c, token) {
                    Grant::Granted(fence) => {
                        state.resent |= was_held;
                        Client::Holding {
                            token,
                            until: now + self.ttl,
                            fence,
                        }
                    }
                    Grant::Busy => Client::Idle,
                };
            }
            Action::GiveUp(c) => {
                let Client::InFlight { token } = state.clients[c] else {
                    return None;
                };
                self.release(&mut state.server, token, self.role(c), now);
                state.clients[c] = Client::Idle;
            }
            Action::Release(c) => {
                let Client::Holding { token, .. } = state.clients[c] else {
                    return None;
                };
                let released = self.release(&mut state.server, token, self.role(c), now);
                state.release_kept |=
                    released && self.held_by(&state.server, token, self.role(c), now);
                state.clients[c] = Client::Idle;
            }
            Action::Renew(c) | Action::RenewLost(c) => {
                let Client::Holding { token, fence, .. } = state.clients[c] else {
                    return None;
                };
                let renewed = self.renew(&mut state.server, token, self.role(c), now);
                if let Action::Renew(_) = action {
                    state.clients[c] = if renewed {
                        Client::Holding {
                            token,
                            until: now + self.ttl,
                            fence,
                        }
                    } else {
                        // The lost signal: the guard is dropped, which releases.
                        self.release(&mut state.server, token, self.role(c), now);
                        Client::Idle
                    };
                }
            }
            Action::Fence(c) | Action::FenceLost(c) => {
                let Client::Holding { token, until, .. } = state.clients[c] else {
                    return None;
                };
                let drawn = state.server.mutex_fence(token, now, &self.mutants);
                if let Some(fence) = drawn {
                    let at = state.pending.iter().position(|p| p.0 == token);
                    // Drawn for this grant (heard now, or from its record when resent):
                    // every earlier grant still to hear its own must hear a smaller one.
                    let position = at.unwrap_or(state.pending.len());
                    fence_drawn(&mut state, fence, position);
                    if let (Action::Fence(_), Some(at)) = (action, at) {
                        // Heard: above every earlier grant's, below every later one's.
                        let (_, max_before, min_after) = state.pending.remove(at);
                        state.fence_order_broken |=
                            fence <= max_before || min_after.is_some_and(|m| fence >= m);
                        state.max_fence = state.max_fence.max(fence);
                    }
                }
                if let Action::Fence(_) = action {
                    state.clients[c] = match drawn {
                        Some(fence) => Client::Holding {
                            token,
                            until,
                            fence: Some(fence),
                        },
                        // Lost: the lost signal fires; the guard is dropped, which releases.
                        None => {
                            self.release(&mut state.server, token, self.role(c), now);
                            Client::Idle
                        }
                    };
                }
            }
            Action::Crash(c) => {
                state.clients[c] = Client::Crashed;
            }
        }
        state.server.expire(state.now);
        // A grant whose holder can no longer hear its fence needs no watching.
        let clients = &state.clients;
        state
            .pending
            .retain(|(token, _, _)| match clients[token.client as usize] {
                Client::Holding {
                    token: t,
                    fence: None,
                    ..
                }
                | Client::InFlight { token: t } => t == *token,
                _ => false,
            });
        // A validity that ended no longer matters when: one state for all of them.
        for client in &mut state.clients {
            if let Client::Holding { until, .. } = client {
                if *until <= state.now {
                    *until = 0;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |model: &LockModel, state: &State| {
                let holds = believed(model, state);
                let count = |role| holds.iter().filter(|(_, r)| *r == role).count();
                let (exclusive, readers) = (count(Role::Exclusive), count(Role::Reader));
                let permits = match model.kind {
                    Kind::Semaphore { permits } => permits,
                    _ => 0,
                };
                exclusive <= 1 && (exclusive == 0 || readers == 0) && count(Role::Permit) <= permits
            }),
            Property::always("fences follow grants", |_, state: &State| {
                !state.fence_order_broken
            }),
            Property::always(
                "beliefs are backed by Redis",
                |model: &LockModel, state: &State| {
                    believed(model, state).into_iter().all(|(c, role)| {
                        let Client::Holding { token, .. } = state.clients[c] else {
                            return false;
                        };
                        model.held_by(&state.server, token, role, state.now)
                    })
                },
            ),
            Property::always("a release frees what it held", |_, state: &State| {
                !state.release_kept
            }),
            Property::always(
                "within the fence bound",
                |model: &LockModel, state: &State| {
                    // Bounds too large for the cap on drawn fences fail here, not silently.
                    state.server.counter < model.fence_cap()
                },
            ),
            Property::always(
                "a free lock is granted to the next attempt",
                |model: &LockModel, state: &State| {
                    let free = state.server.holder(state.now).is_none()
                        && state.server.live_entries(state.now).next().is_none();
                    if !free {
                        return true;
                    }
                    let stranger = Token {
                        client: u8::MAX,
                        attempt: 0,
                    };
                    model.roles.iter().all(|&role| {
                        let mut server = state.server.clone();
                        matches!(
                            model.acquire(&mut server, stranger, role, state.now),
                            Grant::Granted(_)
                        )
                    })
                },
            ),
            Property::sometimes("two clients hold in turn", |_, state: &State| {
                state.turns >= 2
            }),
            Property::sometimes("a lost reply is resent and granted", |_, state: &State| {
                state.resent
            }),
            Property::sometimes(
                "a holder past its lease is replaced",
                |model: &LockModel, state: &State| {
                    let stale = state
                        .clients
                        .iter()
                        .any(|c| matches!(c, Client::Holding { until, .. } if until <= &state.now));
                    stale && !believed(model, state).is_empty()
                },
            ),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        // A bug that draws fences without bound must not make the search endless; the
        // property "within the fence bound" reports a state that reaches the cap.
        state.now <= self.max_time && state.server.counter <= self.fence_cap()
    }
}
